// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the preload library's rule file (sdp/preload/rules.hpp). Any
// bytes give rules or one error, never a crash or a hang; on success the
// decisions for addresses, ports and programs taken from the input hold the
// first-match invariants.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sdp/preload/rules.hpp"

namespace {

namespace sp = sdp::preload;

void check(bool ok) {
    if (!ok) {
        std::abort();
    }
}

const sp::Rule* rule_at_line(const sp::Rules& r, int line) {
    for (const sp::Rule& rule : r.rules) {
        if (rule.line == line) {
            return &rule;
        }
    }
    return nullptr;
}

// The glob by dynamic programming (quadratic, obviously right), to compare
// the library's iterative matcher with on short strings.
bool reference_glob(std::string_view pattern, std::string_view text) {
    // m[j]: pattern[0..i) matches text[0..j)
    std::vector<char> m(text.size() + 1, 0), next(text.size() + 1, 0);
    m[0] = 1;
    for (char pc : pattern) {
        next.assign(text.size() + 1, 0);
        next[0] = pc == '*' && m[0];
        for (std::size_t j = 1; j <= text.size(); ++j) {
            if (pc == '*') {
                next[j] = m[j] || next[j - 1];
            } else {
                next[j] = m[j - 1] && (pc == '?' || pc == text[j - 1]);
            }
        }
        m.swap(next);
    }
    return m[text.size()] != 0;
}

void check_glob(std::string_view pattern, std::string_view text) {
    if (pattern.size() <= 64 && text.size() <= 64) {
        check(sp::glob_match(pattern, text) == reference_glob(pattern, text));
    }
}

// decide() answers the default (line 0) or with the use of the rule on the
// line it names, and that rule matches the socket.
sp::Decision checked_decide(const sp::Rules& r, sp::Side side, std::string_view program,
                            const pm::IpAddress& address, std::uint16_t port) {
    const sp::Decision d = sp::decide(r, side, program, address, port);
    if (d.line == 0) {
        check(d.use == sp::Use::both);
        return d;
    }
    const sp::Rule* rule = rule_at_line(r, d.line);
    check(rule != nullptr);
    check(rule->use == d.use);
    check(!rule->side || *rule->side == side);
    check(sp::glob_match(rule->program, program));
    check(!rule->prefix || rule->prefix->contains(address));
    check(rule->port_lo <= port && port <= rule->port_hi);
    return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    // The glob on its own: the input up to the first newline against the rest.
    const auto nl = text.find('\n');
    check_glob(text.substr(0, nl), nl == std::string_view::npos ? text : text.substr(nl + 1));

    const sp::ParseResult res = sp::parse_rules(text);
    const auto lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;

    if (res.error) {
        check(res.rules.rules.empty());
        check(!res.error->message.empty());
        check(res.error->line >= 0 && res.error->line <= lines);
        check((res.error->line == 0) == (size > sp::kMaxFileSize));
        return 0;
    }
    check(size <= sp::kMaxFileSize);
    const sp::Rules& r = res.rules;
    check(r.rules.size() <= sp::kMaxRules);
    int previous = 0;
    for (const sp::Rule& rule : r.rules) {
        check(rule.port_lo <= rule.port_hi);
        check(rule.line > previous && rule.line <= lines);
        previous = rule.line;
        check(!rule.program.empty());
        check(rule.program.find_first_of(" \t\r\n#") == std::string::npos);
        if (rule.prefix) {
            check(rule.prefix->length <= (rule.prefix->network.is_v4() ? 32 : 128));
            check(rule.prefix->contains(rule.prefix->network));
        }
        check(sp::glob_match(rule.program, rule.program));
        check(sp::glob_match("*", rule.program));
    }

    // Addresses, ports and programs from the input's first bytes.
    auto byte = [&](std::size_t i) -> std::uint8_t { return size == 0 ? 0 : data[i % size]; };
    std::array<std::uint8_t, 16> b6{};
    for (std::size_t i = 0; i < b6.size(); ++i) {
        b6[i] = byte(i);
    }
    std::array<std::uint8_t, 16> mapped{};
    mapped[10] = 0xff;
    mapped[11] = 0xff;
    for (std::size_t i = 0; i < 4; ++i) {
        mapped[12 + i] = byte(i);
    }
    std::vector<pm::IpAddress> addresses = {
        pm::IpAddress::v4({byte(0), byte(1), byte(2), byte(3)}),
        pm::IpAddress::v6(b6),
        pm::IpAddress::v6(mapped),
        pm::IpAddress::any(pm::Family::v4),
        pm::IpAddress::any(pm::Family::v6),
    };
    const auto port = static_cast<std::uint16_t>(byte(4) << 8 | byte(5));
    const std::array<std::uint16_t, 4> ports = {0, 65535, port, static_cast<std::uint16_t>(80)};
    std::vector<std::string> programs = {
        "", "a", "memcached", std::string(text.substr(0, std::min<std::size_t>(16, size)))};

    for (const sp::Rule& rule : r.rules) {
        for (const auto& prog : programs) {
            check_glob(rule.program, prog);
        }
    }
    for (const auto& a : addresses) {
        for (std::uint16_t p : ports) {
            for (const auto& prog : programs) {
                for (sp::Side side : {sp::Side::server, sp::Side::client}) {
                    checked_decide(r, side, prog, a, p);
                }
            }
        }
    }
    // The IPv4-mapped address decides as its IPv4 address does.
    for (const auto& prog : programs) {
        const auto d4 = sp::decide(r, sp::Side::client, prog, addresses[0], port);
        const auto d6 = sp::decide(r, sp::Side::client, prog, addresses[2], port);
        check(d4.line == d6.line && d4.use == d6.use);
    }
    // A socket that a rule describes exactly is decided by it or by an
    // earlier rule.
    for (std::size_t i = 0; i < r.rules.size() && i < 64; ++i) {
        const sp::Rule& rule = r.rules[i];
        const sp::Side side = rule.side.value_or(sp::Side::client);
        const pm::IpAddress a = rule.prefix ? rule.prefix->network : addresses[0];
        const sp::Decision d = checked_decide(r, side, rule.program, a, rule.port_hi);
        check(d.line != 0 && d.line <= rule.line);
    }
    return 0;
}
