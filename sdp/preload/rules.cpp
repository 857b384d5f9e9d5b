// SPDX-License-Identifier: Apache-2.0
#include "sdp/preload/rules.hpp"

#include <algorithm>
#include <charconv>

namespace sdp::preload {
namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

std::vector<std::string_view> split_fields(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && is_space(line[i])) {
            ++i;
        }
        std::size_t j = i;
        while (j < line.size() && !is_space(line[j])) {
            ++j;
        }
        if (j > i) {
            out.push_back(line.substr(i, j - i));
        }
        i = j;
    }
    return out;
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v == 0 || v > 65535) {
        return std::nullopt;
    }
    return static_cast<std::uint16_t>(v);
}

// "*", "N" or "N-M" into the rule; false on bad syntax.
bool parse_ports(std::string_view s, Rule& r) {
    if (s == "*") {
        return true;
    }
    auto dash = s.find('-');
    auto lo = parse_port(s.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_port(s.substr(dash + 1));
    if (!lo || !hi || *lo > *hi) {
        return false;
    }
    r.port_lo = *lo;
    r.port_hi = *hi;
    return true;
}

// Prefix::contains() unmaps an IPv4-mapped candidate before it compares, so
// a rule written as ::ffff:a.b.c.d[/96+N] is kept as the IPv4 a.b.c.d/N
// (otherwise it could never match).
pm::Prefix unmap_prefix(const pm::Prefix& p) {
    if (p.network.is_v6() && p.length >= 96 && p.network.unmapped().is_v4()) {
        return pm::Prefix{p.network.unmapped(), static_cast<std::uint8_t>(p.length - 96)};
    }
    return p;
}

// ADDRESS[/PREFIX][:PORT[-PORT]] into the rule; the error text on failure.
std::optional<std::string> parse_address(std::string_view s, Rule& r) {
    std::string_view addr = s;
    std::optional<std::string_view> ports;
    if (!s.empty() && s.front() == '[') {
        auto close = s.find(']');
        if (close == std::string_view::npos) {
            return "unterminated '[' in address";
        }
        std::string_view rest = s.substr(close + 1);
        std::string_view len;
        if (!rest.empty() && rest.front() == '/') {
            auto colon = rest.find(':');
            len = rest.substr(0, colon);
            rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon);
        }
        if (!rest.empty()) {
            if (rest.front() != ':') {
                return "expected ':PORT' after ']'";
            }
            ports = rest.substr(1);
        }
        auto inner = s.substr(1, close - 1);
        auto p = pm::Prefix::parse(std::string(inner) + std::string(len));
        if (!p || !p->network.is_v6()) {
            return "bad IPv6 address or prefix '" +
                   std::string(s.substr(0, close + 1 + len.size())) + "'";
        }
        r.prefix = unmap_prefix(*p);
    } else {
        const auto colons = static_cast<std::size_t>(std::count(s.begin(), s.end(), ':'));
        if (colons == 1) {
            auto colon = s.find(':');
            addr = s.substr(0, colon);
            ports = s.substr(colon + 1);
        }
        if (addr != "*") {
            auto p = pm::Prefix::parse(addr);
            if (!p) {
                return "bad address or prefix '" + std::string(addr) + "'";
            }
            r.prefix = unmap_prefix(*p);
        }
    }
    if (ports && !parse_ports(*ports, r)) {
        return "bad port or port range '" + std::string(*ports) + "' (1-65535, N-M or *)";
    }
    return std::nullopt;
}

}  // namespace

const char* to_string(Use u) {
    switch (u) {
        case Use::sdp:
            return "sdp";
        case Use::tcp:
            return "tcp";
        case Use::both:
            return "both";
    }
    return "?";
}

ParseResult parse_rules(std::string_view text) {
    ParseResult out;
    auto fail = [&](int line, std::string msg) {
        out.rules.rules.clear();
        out.error = ParseError{line, std::move(msg)};
        return out;
    };
    if (text.size() > kMaxFileSize) {
        return fail(0, "file larger than " + std::to_string(kMaxFileSize) + " bytes");
    }
    int lineno = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        ++lineno;
        auto nl = text.find('\n', pos);
        std::string_view line =
            text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        if (line.size() > kMaxLineLength) {
            return fail(lineno, "line longer than " + std::to_string(kMaxLineLength) + " bytes");
        }
        if (line.find('\0') != std::string_view::npos) {
            return fail(lineno, "NUL byte");
        }
        if (auto hash = line.find('#'); hash != std::string_view::npos) {
            line = line.substr(0, hash);
        }
        auto f = split_fields(line);
        if (f.empty()) {
            continue;
        }
        if (f[0] != "use") {
            return fail(lineno, "unknown directive '" + std::string(f[0]) + "' (expected 'use')");
        }
        if (f.size() != 5) {
            return fail(lineno,
                        "expected 'use sdp|tcp|both server|client|* PROGRAM ADDRESS[:PORT]', got " +
                            std::to_string(f.size()) + " fields");
        }
        Rule r;
        r.line = lineno;
        if (f[1] == "sdp") {
            r.use = Use::sdp;
        } else if (f[1] == "tcp") {
            r.use = Use::tcp;
        } else if (f[1] == "both") {
            r.use = Use::both;
        } else {
            return fail(lineno, "bad use '" + std::string(f[1]) + "' (sdp, tcp or both)");
        }
        if (f[2] == "server") {
            r.side = Side::server;
        } else if (f[2] == "client") {
            r.side = Side::client;
        } else if (f[2] != "*") {
            return fail(lineno, "bad side '" + std::string(f[2]) + "' (server, client or *)");
        }
        r.program = std::string(f[3]);
        if (auto err = parse_address(f[4], r)) {
            return fail(lineno, *err);
        }
        if (out.rules.rules.size() >= kMaxRules) {
            return fail(lineno, "more than " + std::to_string(kMaxRules) + " rules");
        }
        out.rules.rules.push_back(std::move(r));
    }
    return out;
}

bool glob_match(std::string_view pattern, std::string_view text) {
    // Iterative matcher with one backtrack point for the last '*': linear
    // in practice, never recursive (a hostile pattern cannot blow the stack).
    std::size_t p = 0, t = 0;
    std::size_t star = std::string_view::npos, mark = 0;
    while (t < text.size()) {
        // '*' first: a literal '*' in the text must not consume the pattern's '*'.
        if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            mark = t;
        } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
            ++p;
            ++t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++mark;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') {
        ++p;
    }
    return p == pattern.size();
}

Decision decide(const Rules& r, Side side, std::string_view program, const pm::IpAddress& address,
                std::uint16_t port) {
    for (const Rule& rule : r.rules) {
        if (rule.side && *rule.side != side) {
            continue;
        }
        if (!glob_match(rule.program, program)) {
            continue;
        }
        if (rule.prefix && !rule.prefix->contains(address)) {
            continue;
        }
        if (port < rule.port_lo || port > rule.port_hi) {
            continue;
        }
        return Decision{rule.use, rule.line};
    }
    return Decision{};
}

}  // namespace sdp::preload
