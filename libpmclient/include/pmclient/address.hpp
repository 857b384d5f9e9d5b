// SPDX-License-Identifier: Apache-2.0
// IP addresses and endpoints as the Port Mapper protocol carries them.
//
// The codec and the sans-I/O cores use these plain value types instead of
// socket or Asio types so that they never depend on an I/O library.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pm {

enum class Family : std::uint8_t { v4 = 4, v6 = 6 };

// An IPv4 or IPv6 address. For IPv4 only bytes[0..3] are meaningful; the
// other 12 bytes are always zero, so two equal addresses compare equal.
class IpAddress {
  public:
    IpAddress() = default;
    static IpAddress v4(std::array<std::uint8_t, 4> b);
    static IpAddress v6(const std::array<std::uint8_t, 16>& b);
    static IpAddress any(Family f) { return f == Family::v4 ? v4({}) : v6({}); }
    // Parses dotted-quad or RFC 4291 text (no brackets, no zone).
    static std::optional<IpAddress> parse(std::string_view text);

    Family family() const { return family_; }
    bool is_v4() const { return family_ == Family::v4; }
    bool is_v6() const { return family_ == Family::v6; }
    bool is_unspecified() const;
    // ::ffff:a.b.c.d becomes a.b.c.d; anything else is returned unchanged.
    IpAddress unmapped() const;
    const std::array<std::uint8_t, 16>& bytes() const { return bytes_; }
    std::string to_string() const;

    auto operator<=>(const IpAddress&) const = default;
    bool operator==(const IpAddress&) const = default;

  private:
    Family family_ = Family::v4;
    std::array<std::uint8_t, 16> bytes_{};
};

struct Endpoint {
    IpAddress address;
    std::uint16_t port = 0;

    // "a.b.c.d:port" or "[v6]:port". Port 0 is accepted here; callers that
    // need a non-zero port check it themselves.
    static std::optional<Endpoint> parse(std::string_view text);
    std::string to_string() const;

    auto operator<=>(const Endpoint&) const = default;
    bool operator==(const Endpoint&) const = default;
};

// An address prefix such as 10.0.0.0/8 or 2001:db8::/32.
struct Prefix {
    IpAddress network;
    std::uint8_t length = 0;

    static std::optional<Prefix> parse(std::string_view text);
    bool contains(const IpAddress& a) const;
    std::string to_string() const;
    bool operator==(const Prefix&) const = default;
};

// A list of ports: "7001-7004,7010" (ranges and single ports, comma
// separated, no port 0). Returns them sorted without duplicates, or
// nullopt on bad syntax or more than `max` ports.
std::optional<std::vector<std::uint16_t>> parse_port_list(std::string_view text, std::size_t max);
// The inverse: sorted ports as "7001-7004,7010".
std::string port_list_text(const std::vector<std::uint16_t>& sorted_ports);

}  // namespace pm

template <>
struct std::hash<pm::IpAddress> {
    std::size_t operator()(const pm::IpAddress& a) const noexcept;
};
