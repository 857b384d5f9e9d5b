// SPDX-License-Identifier: Apache-2.0
#include "pmclient/address.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace pm {

IpAddress IpAddress::v4(std::array<std::uint8_t, 4> b) {
    IpAddress a;
    a.family_ = Family::v4;
    std::memcpy(a.bytes_.data(), b.data(), 4);
    return a;
}

IpAddress IpAddress::v6(const std::array<std::uint8_t, 16>& b) {
    IpAddress a;
    a.family_ = Family::v6;
    a.bytes_ = b;
    return a;
}

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
    if (text.empty() || text.size() > INET6_ADDRSTRLEN) {
        return std::nullopt;
    }
    std::string s(text);
    std::array<std::uint8_t, 16> buf{};
    if (s.find(':') == std::string::npos) {
        if (inet_pton(AF_INET, s.c_str(), buf.data()) != 1) {
            return std::nullopt;
        }
        return v4({buf[0], buf[1], buf[2], buf[3]});
    }
    if (inet_pton(AF_INET6, s.c_str(), buf.data()) != 1) {
        return std::nullopt;
    }
    return v6(buf);
}

bool IpAddress::is_unspecified() const {
    for (auto b : bytes_) {
        if (b != 0) {
            return false;
        }
    }
    return true;
}

IpAddress IpAddress::unmapped() const {
    static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (is_v6() && std::memcmp(bytes_.data(), kPrefix, 12) == 0) {
        return v4({bytes_[12], bytes_[13], bytes_[14], bytes_[15]});
    }
    return *this;
}

std::string IpAddress::to_string() const {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(is_v4() ? AF_INET : AF_INET6, bytes_.data(), buf, sizeof buf);
    return buf;
}

static std::optional<std::uint16_t> parse_port(std::string_view text) {
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || ptr != text.data() + text.size() || text.empty() || value > 65535) {
        return std::nullopt;
    }
    return static_cast<std::uint16_t>(value);
}

std::optional<Endpoint> Endpoint::parse(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            return std::nullopt;
        }
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
        if (host.find(':') == std::string_view::npos) {
            return std::nullopt;  // brackets are for IPv6 only
        }
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos) {
            return std::nullopt;
        }
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        if (host.find(':') != std::string_view::npos) {
            return std::nullopt;  // IPv6 needs brackets
        }
    }
    auto addr = IpAddress::parse(host);
    auto p = parse_port(port);
    if (!addr || !p) {
        return std::nullopt;
    }
    return Endpoint{*addr, *p};
}

std::string Endpoint::to_string() const {
    if (address.is_v6()) {
        return "[" + address.to_string() + "]:" + std::to_string(port);
    }
    return address.to_string() + ":" + std::to_string(port);
}

std::optional<Prefix> Prefix::parse(std::string_view text) {
    auto slash = text.find('/');
    auto addr = IpAddress::parse(text.substr(0, slash));
    if (!addr) {
        return std::nullopt;
    }
    unsigned max = addr->is_v4() ? 32 : 128;
    unsigned len = max;
    if (slash != std::string_view::npos) {
        auto rest = text.substr(slash + 1);
        auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), len);
        if (rest.empty() || ec != std::errc{} || ptr != rest.data() + rest.size() || len > max) {
            return std::nullopt;
        }
    }
    // Normalise: clear host bits so that equal prefixes compare equal.
    auto bytes = addr->bytes();
    for (unsigned bit = len; bit < 128; ++bit) {
        bytes[bit / 8] &= static_cast<std::uint8_t>(~(0x80u >> (bit % 8)));
    }
    IpAddress net = addr->is_v4() ? IpAddress::v4({bytes[0], bytes[1], bytes[2], bytes[3]})
                                  : IpAddress::v6(bytes);
    return Prefix{net, static_cast<std::uint8_t>(len)};
}

bool Prefix::contains(const IpAddress& candidate) const {
    IpAddress a = candidate.unmapped();
    if (a.family() != network.family()) {
        return false;
    }
    const auto& x = a.bytes();
    const auto& n = network.bytes();
    unsigned full = length / 8;
    if (std::memcmp(x.data(), n.data(), full) != 0) {
        return false;
    }
    unsigned rem = length % 8;
    if (rem == 0) {
        return true;
    }
    auto mask = static_cast<std::uint8_t>(0xffu << (8 - rem));
    return (x[full] & mask) == (n[full] & mask);
}

std::string Prefix::to_string() const {
    return network.to_string() + "/" + std::to_string(length);
}

std::optional<std::vector<std::uint16_t>> parse_port_list(std::string_view text, std::size_t max) {
    std::vector<std::uint16_t> out;
    while (true) {
        const auto comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        const auto dash = item.find('-');
        auto first = parse_port(item.substr(0, dash));
        auto last = dash == std::string_view::npos ? first : parse_port(item.substr(dash + 1));
        if (!first || !last || *first == 0 || *last < *first ||
            std::size_t{*last} - *first >= max || out.size() + (*last - *first) >= max) {
            return std::nullopt;
        }
        for (unsigned p = *first; p <= *last; ++p) {
            out.push_back(static_cast<std::uint16_t>(p));
        }
        if (comma == std::string_view::npos) {
            break;
        }
        text.remove_prefix(comma + 1);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::string port_list_text(const std::vector<std::uint16_t>& sorted_ports) {
    std::string out;
    for (std::size_t i = 0; i < sorted_ports.size();) {
        std::size_t j = i;
        while (j + 1 < sorted_ports.size() && sorted_ports[j + 1] == sorted_ports[j] + 1) {
            ++j;
        }
        out += (out.empty() ? "" : ",") + std::to_string(sorted_ports[i]);
        if (j > i) {
            out += "-" + std::to_string(sorted_ports[j]);
        }
        i = j + 1;
    }
    return out;
}

}  // namespace pm

std::size_t std::hash<pm::IpAddress>::operator()(const pm::IpAddress& a) const noexcept {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    std::memcpy(&lo, a.bytes().data(), 8);
    std::memcpy(&hi, a.bytes().data() + 8, 8);
    std::uint64_t h = lo * 0x9E3779B97F4A7C15ull ^ (hi + static_cast<std::uint64_t>(a.family()));
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<std::size_t>(h ^ (h >> 32));
}
