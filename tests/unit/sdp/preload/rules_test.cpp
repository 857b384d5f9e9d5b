// SPDX-License-Identifier: Apache-2.0
// The preload library's rule file (sdp/preload/rules.hpp), sans-I/O: every
// address form, comments and line ends, each parse error with its line, the
// bounds against hostile files, the first-match decision and the glob.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sdp/preload/rules.hpp"

namespace sp = sdp::preload;

namespace {

pm::IpAddress ip(std::string_view text) {
    auto a = pm::IpAddress::parse(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a.value_or(pm::IpAddress{});
}

// The one rule of "use sdp * * ADDRESS"; a failed parse fails the test.
sp::Rule one_rule(const std::string& address) {
    auto r = sp::parse_rules("use sdp * * " + address + "\n");
    EXPECT_FALSE(r.error.has_value()) << address << ": " << (r.error ? r.error->message : "");
    EXPECT_EQ(r.rules.rules.size(), 1u) << address;
    return r.rules.rules.empty() ? sp::Rule{} : r.rules.rules.front();
}

// The error of a text that must not parse; `rules` must be empty with it.
sp::ParseError parse_error(std::string_view text) {
    auto r = sp::parse_rules(text);
    EXPECT_TRUE(r.error.has_value()) << text.substr(0, 200);
    EXPECT_TRUE(r.rules.rules.empty());
    if (!r.error) {
        return sp::ParseError{-1, ""};
    }
    EXPECT_FALSE(r.error->message.empty());
    return *r.error;
}

sp::Rules rules(std::string_view text) {
    auto r = sp::parse_rules(text);
    EXPECT_FALSE(r.error.has_value()) << (r.error ? r.error->message : "");
    return r.rules;
}

// Two good lines (a comment, a rule) and a blank line before the line under
// test, so an error in it must be reported on line 4.
std::string after_three_lines(std::string_view line) {
    return "# header\nuse tcp * * 127.0.0.0/8\n\n" + std::string(line) + "\nuse sdp * * *\n";
}

struct AddressCase {
    const char* address;
    const char* prefix;  // nullptr: any address
    std::uint16_t lo;
    std::uint16_t hi;
};

}  // namespace

TEST(PreloadRules, UseNames) {
    EXPECT_STREQ(sp::to_string(sp::Use::sdp), "sdp");
    EXPECT_STREQ(sp::to_string(sp::Use::tcp), "tcp");
    EXPECT_STREQ(sp::to_string(sp::Use::both), "both");
}

TEST(PreloadRules, EveryAddressForm) {
    const AddressCase cases[] = {
        {"*", nullptr, 0, 65535},
        {"*:80", nullptr, 80, 80},
        {"*:*", nullptr, 0, 65535},
        {"*:1-65535", nullptr, 1, 65535},
        {"10.0.0.0/8", "10.0.0.0/8", 0, 65535},
        {"10.0.0.0/8:5000-5010", "10.0.0.0/8", 5000, 5010},
        {"10.0.0.0/8:*", "10.0.0.0/8", 0, 65535},
        {"10.1.2.3/8", "10.0.0.0/8", 0, 65535},  // host bits cleared
        {"192.0.2.1", "192.0.2.1/32", 0, 65535},
        {"192.0.2.1:80", "192.0.2.1/32", 80, 80},
        {"0.0.0.0/0:65535", "0.0.0.0/0", 65535, 65535},
        {"2001:db8::/32", "2001:db8::/32", 0, 65535},
        {"::1", "::1/128", 0, 65535},
        {"[2001:db8::1]:80", "2001:db8::1/128", 80, 80},
        {"[2001:db8::]/32:5000-5999", "2001:db8::/32", 5000, 5999},
        {"[2001:db8::1]/64", "2001:db8::/64", 0, 65535},
        {"[2001:db8::1]/64:*", "2001:db8::/64", 0, 65535},
        {"[::1]", "::1/128", 0, 65535},
        {"[::]/0:443", "::/0", 443, 443},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.address);
        const sp::Rule r = one_rule(c.address);
        if (c.prefix == nullptr) {
            EXPECT_FALSE(r.prefix.has_value());
        } else {
            ASSERT_TRUE(r.prefix.has_value());
            EXPECT_EQ(r.prefix->to_string(), c.prefix);
        }
        EXPECT_EQ(r.port_lo, c.lo);
        EXPECT_EQ(r.port_hi, c.hi);
    }
    EXPECT_TRUE(one_rule("2001:db8::/32").prefix->network.is_v6());
    EXPECT_TRUE(one_rule("[::1]").prefix->network.is_v6());
    EXPECT_TRUE(one_rule("10.0.0.0/8").prefix->network.is_v4());
}

TEST(PreloadRules, IPv4MappedRuleBecomesIPv4) {
    // Written as IPv4-mapped IPv6, kept as the IPv4 prefix it stands for.
    auto r = one_rule("[::ffff:192.0.2.0]/120:80");
    ASSERT_TRUE(r.prefix.has_value());
    EXPECT_EQ(r.prefix->to_string(), "192.0.2.0/24");
    EXPECT_EQ(r.port_lo, 80);
    EXPECT_EQ(one_rule("::ffff:192.0.2.1").prefix->to_string(), "192.0.2.1/32");
    // Shorter than /96 it is an IPv6 prefix like any other.
    EXPECT_EQ(one_rule("[::ffff:0:0]/95").prefix->to_string(), "::fffe:0:0/95");
}

TEST(PreloadRules, UseSideProgramAndLine) {
    auto r = rules(
        "use sdp server memcached *:11211\n"
        "use tcp client ssh *:22\n"
        "use both * * *\n");
    ASSERT_EQ(r.rules.size(), 3u);
    EXPECT_EQ(r.rules[0].use, sp::Use::sdp);
    EXPECT_EQ(r.rules[0].side, sp::Side::server);
    EXPECT_EQ(r.rules[0].program, "memcached");
    EXPECT_EQ(r.rules[0].line, 1);
    EXPECT_EQ(r.rules[1].use, sp::Use::tcp);
    EXPECT_EQ(r.rules[1].side, sp::Side::client);
    EXPECT_EQ(r.rules[1].program, "ssh");
    EXPECT_EQ(r.rules[1].port_lo, 22);
    EXPECT_EQ(r.rules[1].line, 2);
    EXPECT_EQ(r.rules[2].use, sp::Use::both);
    EXPECT_FALSE(r.rules[2].side.has_value());
    EXPECT_EQ(r.rules[2].program, "*");
    EXPECT_EQ(r.rules[2].line, 3);
}

TEST(PreloadRules, EmptyAndCommentOnlyFiles) {
    EXPECT_TRUE(rules("").rules.empty());
    EXPECT_TRUE(rules("\n\n\n").rules.empty());
    EXPECT_TRUE(rules("# only\n   # comments\n\t#\n").rules.empty());
    EXPECT_TRUE(rules("  \t \n\r\n").rules.empty());
}

TEST(PreloadRules, CommentsBlankLinesAndWhitespace) {
    auto r = rules(
        "# full-line comment\n"
        "\n"
        "   # indented comment\n"
        "use sdp * memcached *:11211 # trailing comment\n"
        "  \t  \n"
        "\tuse   tcp\tclient  ssh\t\t*:22#no space before it\n"
        "use both * redis [2001:db8::]/32:6379   # [::1] use sdp\n");
    ASSERT_EQ(r.rules.size(), 3u);
    EXPECT_EQ(r.rules[0].line, 4);
    EXPECT_EQ(r.rules[0].port_lo, 11211);
    EXPECT_EQ(r.rules[0].port_hi, 11211);
    EXPECT_EQ(r.rules[1].line, 6);
    EXPECT_EQ(r.rules[1].use, sp::Use::tcp);
    EXPECT_EQ(r.rules[1].program, "ssh");
    EXPECT_EQ(r.rules[1].port_lo, 22);
    EXPECT_EQ(r.rules[2].line, 7);
    EXPECT_EQ(r.rules[2].prefix->to_string(), "2001:db8::/32");
    EXPECT_EQ(r.rules[2].port_lo, 6379);
    // A '#' ends the line wherever it is, also inside what would be a field.
    auto e = parse_error("use sdp * prog#ram *\n");  // 4 fields left
    EXPECT_EQ(e.line, 1);
    EXPECT_NE(e.message.find("got 4 fields"), std::string::npos) << e.message;
}

TEST(PreloadRules, CrlfLineEndsAndNoFinalNewline) {
    auto r = rules(
        "# windows\r\n"
        "use sdp * a *\r\n"
        "\r\n"
        "use tcp client b 10.0.0.0/8:80\r\n"
        "use both server c [2001:db8::1]:5000-5001\r\n"
        "use sdp * d *:*");
    ASSERT_EQ(r.rules.size(), 4u);
    EXPECT_EQ(r.rules[0].line, 2);
    EXPECT_EQ(r.rules[0].program, "a");
    EXPECT_FALSE(r.rules[0].prefix.has_value());
    EXPECT_EQ(r.rules[1].line, 4);
    EXPECT_EQ(r.rules[1].prefix->to_string(), "10.0.0.0/8");
    EXPECT_EQ(r.rules[1].port_lo, 80);
    EXPECT_EQ(r.rules[1].port_hi, 80);
    EXPECT_EQ(r.rules[2].line, 5);
    EXPECT_EQ(r.rules[2].port_lo, 5000);
    EXPECT_EQ(r.rules[2].port_hi, 5001);
    EXPECT_EQ(r.rules[3].line, 6);
    EXPECT_EQ(r.rules[3].program, "d");
}

TEST(PreloadRules, UnknownDirective) {
    auto e = parse_error(after_three_lines("deny sdp * * *"));
    EXPECT_EQ(e.line, 4);
    EXPECT_NE(e.message.find("unknown directive 'deny'"), std::string::npos) << e.message;
    EXPECT_EQ(parse_error("USE sdp * * *\n").line, 1);  // case matters
    EXPECT_EQ(parse_error("\n\nsdp\n").line, 3);
}

TEST(PreloadRules, WrongFieldCount) {
    for (const char* line : {"use", "use sdp", "use sdp *", "use sdp * prog", "use sdp * prog * x",
                             "use sdp * prog 10.0.0.0/8 :80"}) {
        SCOPED_TRACE(line);
        auto e = parse_error(after_three_lines(line));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("fields"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, BadUse) {
    for (const char* line : {"use rdma * * *", "use SDP * * *", "use * * * *"}) {
        SCOPED_TRACE(line);
        auto e = parse_error(after_three_lines(line));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("bad use"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, BadSide) {
    for (const char* line : {"use sdp both * *", "use sdp servers * *", "use sdp ? * *"}) {
        SCOPED_TRACE(line);
        auto e = parse_error(after_three_lines(line));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("bad side"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, BadAddress) {
    for (const char* addr :
         {"10.0.0.256", "host.example", "10.0.0", ":80", "**", "*/8", "10.0.0.1:80:90",
          "2001:db8::g", "[]", "[192.0.2.1]:80", "[10.0.0.0]/8", "]"}) {
        SCOPED_TRACE(addr);
        auto e = parse_error(after_three_lines(std::string("use sdp * * ") + addr));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("bad"), std::string::npos) << e.message;
        EXPECT_NE(e.message.find("address"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, BadPrefixLength) {
    for (const char* addr :
         {"10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "10.0.0.0/x", "2001:db8::/129",
          "[2001:db8::]/129", "[2001:db8::]/129:80", "[2001:db8::]/", "[2001:db8::]/32x:80"}) {
        SCOPED_TRACE(addr);
        auto e = parse_error(after_three_lines(std::string("use sdp * * ") + addr));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("prefix"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, UnterminatedBracket) {
    for (const char* addr : {"[2001:db8::1", "[2001:db8::1:80", "[::1/64:80", "["}) {
        SCOPED_TRACE(addr);
        auto e = parse_error(after_three_lines(std::string("use sdp * * ") + addr));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("unterminated '['"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, JunkAfterBracket) {
    for (const char* addr : {"[2001:db8::1]x", "[2001:db8::1]80", "[2001:db8::1]]:80",
                             "[2001:db8::1]-80", "[::1]/64x"}) {
        SCOPED_TRACE(addr);
        auto e = parse_error(after_three_lines(std::string("use sdp * * ") + addr));
        EXPECT_EQ(e.line, 4);
    }
    auto e = parse_error("use sdp * * [2001:db8::1]x80\n");
    EXPECT_EQ(e.line, 1);
    EXPECT_NE(e.message.find("expected ':PORT' after ']'"), std::string::npos) << e.message;
}

TEST(PreloadRules, BadPorts) {
    for (const char* addr : {"*:0",
                             "*:0-10",
                             "*:65536",
                             "*:1-65536",
                             "*:99999999999",
                             "*:5010-5000",
                             "*:2-1",
                             "*:",
                             "*:-5",
                             "*:5-",
                             "*:5-6-7",
                             "*:abc",
                             "*:+5",
                             "*:-",
                             "*:80,81",
                             "10.0.0.0/8:0",
                             "10.0.0.0/8:65536",
                             "10.0.0.0/8:5010-5000",
                             "[::1]:0",
                             "[::1]:65536",
                             "[::1]:",
                             "[2001:db8::]/32:5999-5000",
                             "[2001:db8::]/32:*:*"}) {
        SCOPED_TRACE(addr);
        auto e = parse_error(after_three_lines(std::string("use sdp * * ") + addr));
        EXPECT_EQ(e.line, 4);
        EXPECT_NE(e.message.find("bad port"), std::string::npos) << e.message;
    }
}

TEST(PreloadRules, NulByte) {
    std::string text = after_three_lines("use sdp * prog *");
    text.insert(text.find("prog") + 2, 1, '\0');
    auto e = parse_error(text);
    EXPECT_EQ(e.line, 4);
    EXPECT_NE(e.message.find("NUL"), std::string::npos) << e.message;
    // Also in a comment: the file is not text.
    std::string comment("use sdp * * *\n# a \0 b\n", 22);
    EXPECT_EQ(parse_error(comment).line, 2);
}

TEST(PreloadRules, LineLength) {
    // Exactly kMaxLineLength bytes is fine (the '\n' is not counted).
    std::string prefix = "use sdp * ";
    std::string suffix = " *";
    std::string longest =
        prefix + std::string(sp::kMaxLineLength - prefix.size() - suffix.size(), 'p') + suffix;
    ASSERT_EQ(longest.size(), sp::kMaxLineLength);
    auto ok = rules("# x\n" + longest + "\n");
    ASSERT_EQ(ok.rules.size(), 1u);
    EXPECT_EQ(ok.rules[0].line, 2);
    EXPECT_EQ(ok.rules[0].program.size(), sp::kMaxLineLength - prefix.size() - suffix.size());
    // One more byte, in a rule, a comment or at the end without '\n'.
    auto e = parse_error(after_three_lines(longest + "p"));
    EXPECT_EQ(e.line, 4);
    EXPECT_NE(e.message.find("line longer than"), std::string::npos) << e.message;
    EXPECT_EQ(parse_error("\n#" + std::string(sp::kMaxLineLength, ' ') + "\n").line, 2);
    EXPECT_EQ(parse_error("use sdp * * *\n" + std::string(sp::kMaxLineLength + 1, ' ')).line, 2);
}

TEST(PreloadRules, MaxRules) {
    std::string text = "# many\n";
    for (std::size_t i = 0; i < sp::kMaxRules; ++i) {
        text += "use sdp * p" + std::to_string(i) + " *:" + std::to_string(i + 1) + "\n";
    }
    auto ok = rules(text);
    ASSERT_EQ(ok.rules.size(), sp::kMaxRules);
    EXPECT_EQ(ok.rules.back().line, static_cast<int>(sp::kMaxRules) + 1);
    EXPECT_EQ(ok.rules.back().port_lo, sp::kMaxRules);
    // Comments and blank lines do not count; the rule after the last allowed
    // one is the error, on its own line.
    text += "\n# still fine\nuse tcp * * *\n";
    auto e = parse_error(text);
    EXPECT_EQ(e.line, static_cast<int>(sp::kMaxRules) + 4);
    EXPECT_NE(e.message.find("more than"), std::string::npos) << e.message;
}

TEST(PreloadRules, FileSize) {
    // Exactly kMaxFileSize bytes: parsed (a rule, then blank lines).
    std::string text = "use sdp * * *\n";
    text.resize(sp::kMaxFileSize, '\n');
    auto ok = rules(text);
    ASSERT_EQ(ok.rules.size(), 1u);
    // One byte more: rejected as a whole, line 0, nothing kept.
    text.push_back('\n');
    auto e = parse_error(text);
    EXPECT_EQ(e.line, 0);
    EXPECT_NE(e.message.find("file larger than"), std::string::npos) << e.message;
}

TEST(PreloadRules, FirstErrorWinsAndRulesAreEmptied) {
    auto r = sp::parse_rules("use sdp * * *\nuse tcp * * *\nuse bad * * *\nbogus\n");
    ASSERT_TRUE(r.error.has_value());
    EXPECT_EQ(r.error->line, 3);
    EXPECT_TRUE(r.rules.rules.empty());
}

// decide()

TEST(PreloadDecide, DefaultIsBothWithLineZero) {
    sp::Rules none;
    auto d = sp::decide(none, sp::Side::client, "prog", ip("192.0.2.1"), 80);
    EXPECT_EQ(d.use, sp::Use::both);
    EXPECT_EQ(d.line, 0);
    auto r = rules("use sdp * other *\nuse tcp server * *\nuse sdp * * 10.0.0.0/8\n");
    d = sp::decide(r, sp::Side::client, "prog", ip("192.0.2.1"), 80);
    EXPECT_EQ(d.use, sp::Use::both);
    EXPECT_EQ(d.line, 0);
}

TEST(PreloadDecide, FirstMatchWins) {
    auto r = rules(
        "# comment\n"
        "use tcp * * 10.0.0.0/8\n"
        "use sdp * * 10.1.0.0/16\n"  // shadowed by line 2
        "use both * * *:80\n"
        "use sdp * * *\n");
    auto d = sp::decide(r, sp::Side::client, "x", ip("10.1.2.3"), 80);
    EXPECT_EQ(d.use, sp::Use::tcp);
    EXPECT_EQ(d.line, 2);
    d = sp::decide(r, sp::Side::client, "x", ip("192.0.2.1"), 80);
    EXPECT_EQ(d.use, sp::Use::both);
    EXPECT_EQ(d.line, 4);
    d = sp::decide(r, sp::Side::client, "x", ip("192.0.2.1"), 81);
    EXPECT_EQ(d.use, sp::Use::sdp);
    EXPECT_EQ(d.line, 5);
}

TEST(PreloadDecide, SideFiltering) {
    auto r = rules("use sdp server * *:80\nuse tcp client * *:80\nuse both * * *:81\n");
    auto d = sp::decide(r, sp::Side::server, "x", ip("192.0.2.1"), 80);
    EXPECT_EQ(d.use, sp::Use::sdp);
    EXPECT_EQ(d.line, 1);
    d = sp::decide(r, sp::Side::client, "x", ip("192.0.2.1"), 80);
    EXPECT_EQ(d.use, sp::Use::tcp);
    EXPECT_EQ(d.line, 2);
    // `*` takes both sides.
    EXPECT_EQ(sp::decide(r, sp::Side::server, "x", ip("192.0.2.1"), 81).line, 3);
    EXPECT_EQ(sp::decide(r, sp::Side::client, "x", ip("192.0.2.1"), 81).line, 3);
    // A side-only file leaves the other side at the default.
    auto s = rules("use sdp server * *\n");
    EXPECT_EQ(sp::decide(s, sp::Side::client, "x", ip("192.0.2.1"), 80).line, 0);
    EXPECT_EQ(sp::decide(s, sp::Side::server, "x", ip("192.0.2.1"), 80).line, 1);
}

TEST(PreloadDecide, ProgramGlobs) {
    auto r = rules(
        "use sdp * memc* *\n"
        "use tcp * ?sh *\n"
        "use both * redis-server *\n"
        "use sdp * *-bench?? *\n");
    auto line = [&](std::string_view program) {
        return sp::decide(r, sp::Side::client, program, ip("192.0.2.1"), 80).line;
    };
    EXPECT_EQ(line("memcached"), 1);
    EXPECT_EQ(line("memc"), 1);
    EXPECT_EQ(line("xmemcached"), 0);
    EXPECT_EQ(line("ssh"), 2);
    EXPECT_EQ(line("zsh"), 2);
    EXPECT_EQ(line("sh"), 0);
    EXPECT_EQ(line("bash"), 0);
    EXPECT_EQ(line("redis-server"), 3);
    EXPECT_EQ(line("redis-server2"), 0);
    EXPECT_EQ(line("Redis-server"), 0);
    EXPECT_EQ(line("sdp-bench01"), 4);
    EXPECT_EQ(line("sdp-bench1"), 0);
    EXPECT_EQ(line(""), 0);
}

TEST(PreloadDecide, IPv4Prefix) {
    auto r = rules("use sdp * * 10.0.0.0/8\nuse tcp * * 172.16.0.0/12\nuse both * * 192.0.2.1\n");
    auto line = [&](std::string_view a) {
        return sp::decide(r, sp::Side::client, "x", ip(a), 80).line;
    };
    EXPECT_EQ(line("10.0.0.0"), 1);
    EXPECT_EQ(line("10.255.255.255"), 1);
    EXPECT_EQ(line("9.255.255.255"), 0);
    EXPECT_EQ(line("11.0.0.0"), 0);
    EXPECT_EQ(line("172.16.0.1"), 2);
    EXPECT_EQ(line("172.31.255.255"), 2);
    EXPECT_EQ(line("172.32.0.0"), 0);
    EXPECT_EQ(line("172.15.255.255"), 0);
    EXPECT_EQ(line("192.0.2.1"), 3);
    EXPECT_EQ(line("192.0.2.2"), 0);
    // An IPv4 rule never takes an IPv6 address, not even 0.0.0.0/0.
    EXPECT_EQ(line("2001:db8::1"), 0);
    auto all = rules("use sdp * * 0.0.0.0/0\n");
    EXPECT_EQ(sp::decide(all, sp::Side::client, "x", ip("203.0.113.9"), 1).line, 1);
    EXPECT_EQ(sp::decide(all, sp::Side::client, "x", ip("2001:db8::1"), 1).line, 0);
}

TEST(PreloadDecide, IPv6Prefix) {
    auto r = rules("use sdp * * 2001:db8::/32\nuse tcp * * [fe80::]/10:80\nuse both * * [::1]\n");
    auto line = [&](std::string_view a, std::uint16_t port = 80) {
        return sp::decide(r, sp::Side::client, "x", ip(a), port).line;
    };
    EXPECT_EQ(line("2001:db8::"), 1);
    EXPECT_EQ(line("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"), 1);
    EXPECT_EQ(line("2001:db9::"), 0);
    EXPECT_EQ(line("2001:db7:ffff::1"), 0);
    EXPECT_EQ(line("fe80::1"), 2);
    EXPECT_EQ(line("febf:ffff::1"), 2);
    EXPECT_EQ(line("fec0::1"), 0);
    EXPECT_EQ(line("fe80::1", 81), 0);
    EXPECT_EQ(line("::1"), 3);
    EXPECT_EQ(line("::2"), 0);
    // An IPv6 rule never takes an IPv4 address.
    EXPECT_EQ(line("32.1.13.184"), 0);
    EXPECT_EQ(line("127.0.0.1"), 0);
}

TEST(PreloadDecide, IPv4MappedAddressMatchesIPv4Rule) {
    auto r = rules("use sdp * * 192.0.2.0/24:80\nuse tcp * * 127.0.0.1\n");
    auto d = sp::decide(r, sp::Side::client, "x", ip("::ffff:192.0.2.7"), 80);
    EXPECT_EQ(d.use, sp::Use::sdp);
    EXPECT_EQ(d.line, 1);
    EXPECT_EQ(sp::decide(r, sp::Side::client, "x", ip("::ffff:192.0.3.7"), 80).line, 0);
    EXPECT_EQ(sp::decide(r, sp::Side::server, "x", ip("::ffff:127.0.0.1"), 1).line, 2);
    // Not mapped (IPv4-compatible ::a.b.c.d): an IPv6 address like any other.
    EXPECT_EQ(sp::decide(r, sp::Side::client, "x", ip("::192.0.2.7"), 80).line, 0);
    // A rule written in the mapped form takes both spellings of the address.
    auto m = rules("use sdp * * [::ffff:192.0.2.0]/120\n");
    EXPECT_EQ(sp::decide(m, sp::Side::client, "x", ip("::ffff:192.0.2.7"), 80).line, 1);
    EXPECT_EQ(sp::decide(m, sp::Side::client, "x", ip("192.0.2.7"), 80).line, 1);
    EXPECT_EQ(sp::decide(m, sp::Side::client, "x", ip("192.0.3.7"), 80).line, 0);
}

TEST(PreloadDecide, PortRangesAtTheirBounds) {
    auto r = rules("use sdp * * *:5000-5010\nuse tcp * * *:80\nuse both * * *:65535\n");
    auto line = [&](std::uint16_t port) {
        return sp::decide(r, sp::Side::client, "x", ip("192.0.2.1"), port).line;
    };
    EXPECT_EQ(line(4999), 0);
    EXPECT_EQ(line(5000), 1);
    EXPECT_EQ(line(5005), 1);
    EXPECT_EQ(line(5010), 1);
    EXPECT_EQ(line(5011), 0);
    EXPECT_EQ(line(79), 0);
    EXPECT_EQ(line(80), 2);
    EXPECT_EQ(line(81), 0);
    EXPECT_EQ(line(65534), 0);
    EXPECT_EQ(line(65535), 3);
    EXPECT_EQ(line(0), 0);  // port 0 (an ephemeral bind) only under `*` ports
    auto any = rules("use sdp * * 192.0.2.0/24\nuse tcp * * *:*\n");
    EXPECT_EQ(sp::decide(any, sp::Side::server, "x", ip("192.0.2.1"), 0).line, 1);
    EXPECT_EQ(sp::decide(any, sp::Side::server, "x", ip("192.0.2.1"), 65535).line, 1);
    EXPECT_EQ(sp::decide(any, sp::Side::server, "x", ip("198.51.100.1"), 0).line, 2);
    auto full = rules("use sdp * * *:1-65535\n");
    EXPECT_EQ(sp::decide(full, sp::Side::server, "x", ip("192.0.2.1"), 0).line, 0);
    EXPECT_EQ(sp::decide(full, sp::Side::server, "x", ip("192.0.2.1"), 1).line, 1);
    EXPECT_EQ(sp::decide(full, sp::Side::server, "x", ip("192.0.2.1"), 65535).line, 1);
}

TEST(PreloadDecide, WildcardBoundAddress) {
    // A listen() on 0.0.0.0 matches `*` rules and prefixes containing
    // 0.0.0.0, not a specific network the host happens to be on.
    auto r = rules(
        "use tcp server * 10.0.0.0/8\n"
        "use tcp server * 0.0.0.1\n"
        "use sdp server * 0.0.0.0/8:80\n"
        "use both server * *:81\n"
        "use sdp server * 0.0.0.0/0:82\n");
    auto line = [&](std::string_view a, std::uint16_t port) {
        return sp::decide(r, sp::Side::server, "x", ip(a), port).line;
    };
    EXPECT_EQ(line("0.0.0.0", 80), 3);
    EXPECT_EQ(line("0.0.0.0", 81), 4);
    EXPECT_EQ(line("0.0.0.0", 82), 5);
    EXPECT_EQ(line("0.0.0.0", 83), 0);
    EXPECT_EQ(line("10.0.0.1", 83), 1);
    auto only_specific = rules("use sdp server * 192.0.2.0/24\nuse sdp server * 0.0.0.0\n");
    EXPECT_EQ(sp::decide(only_specific, sp::Side::server, "x", ip("0.0.0.0"), 80).line, 2);
    auto none = rules("use sdp server * 192.0.2.0/24\nuse sdp server * [::]/0\n");
    EXPECT_EQ(sp::decide(none, sp::Side::server, "x", ip("0.0.0.0"), 80).line, 0);
    // IPv6 `::` likewise: `*` or ::/0, not 2001:db8::/32.
    auto v6 = rules("use tcp server * 2001:db8::/32\nuse sdp server * *\n");
    EXPECT_EQ(sp::decide(v6, sp::Side::server, "x", ip("::"), 80).line, 2);
    EXPECT_EQ(sp::decide(none, sp::Side::server, "x", ip("::"), 80).line, 2);
}

// glob_match()

TEST(PreloadGlob, Star) {
    EXPECT_TRUE(sp::glob_match("*", ""));
    EXPECT_TRUE(sp::glob_match("*", "anything at all"));
    EXPECT_TRUE(sp::glob_match("**", ""));
    EXPECT_TRUE(sp::glob_match("a*", "a"));
    EXPECT_TRUE(sp::glob_match("a*", "abc"));
    EXPECT_FALSE(sp::glob_match("a*", "ba"));
    EXPECT_TRUE(sp::glob_match("*c", "abc"));
    EXPECT_FALSE(sp::glob_match("*c", "abcd"));
}

TEST(PreloadGlob, QuestionMark) {
    EXPECT_TRUE(sp::glob_match("?", "a"));
    EXPECT_TRUE(sp::glob_match("?", "?"));
    EXPECT_FALSE(sp::glob_match("?", ""));
    EXPECT_FALSE(sp::glob_match("?", "ab"));
    EXPECT_TRUE(sp::glob_match("a?c", "abc"));
    EXPECT_FALSE(sp::glob_match("a?c", "ac"));
    EXPECT_FALSE(sp::glob_match("?*", ""));
    EXPECT_TRUE(sp::glob_match("?*", "x"));
    EXPECT_TRUE(sp::glob_match("*?", "xy"));
}

TEST(PreloadGlob, Empty) {
    EXPECT_TRUE(sp::glob_match("", ""));
    EXPECT_FALSE(sp::glob_match("", "a"));
    EXPECT_FALSE(sp::glob_match("a", ""));
}

TEST(PreloadGlob, SeveralStars) {
    EXPECT_TRUE(sp::glob_match("a*b*c", "abc"));
    EXPECT_TRUE(sp::glob_match("a*b*c", "aXbYc"));
    EXPECT_TRUE(sp::glob_match("a*b*c", "abbbcbc"));
    EXPECT_TRUE(sp::glob_match("a*b*c", "acbc"));
    EXPECT_FALSE(sp::glob_match("a*b*c", "ab"));
    EXPECT_FALSE(sp::glob_match("a*b*c", "abcd"));
    EXPECT_FALSE(sp::glob_match("a*b*c", "xabc"));
    EXPECT_FALSE(sp::glob_match("a*b*c", "acb"));
}

TEST(PreloadGlob, LiteralStarInText) {
    // The pattern's '*' is a wildcard even where the text has a '*'.
    EXPECT_TRUE(sp::glob_match("*a", "*ba"));
    EXPECT_TRUE(sp::glob_match("x*y", "x*zy"));
    EXPECT_TRUE(sp::glob_match("a*", "a*"));
    EXPECT_TRUE(sp::glob_match("*", "*"));
    EXPECT_FALSE(sp::glob_match("a", "*"));
}

TEST(PreloadGlob, ManyStarsLongText) {
    // Backtracking per star would take forever here; the matcher must not.
    std::string pattern;
    for (int i = 0; i < 50; ++i) {
        pattern += "*a";
    }
    const std::string as(10000, 'a');
    EXPECT_FALSE(sp::glob_match(pattern, as + "b"));
    EXPECT_TRUE(sp::glob_match(pattern, as));
    EXPECT_TRUE(sp::glob_match(pattern + "*b", as + "b"));
    EXPECT_FALSE(sp::glob_match(pattern, std::string(49, 'a')));
    EXPECT_TRUE(sp::glob_match(pattern, std::string(50, 'a')));
}

TEST(PreloadGlob, ExactMatch) {
    EXPECT_TRUE(sp::glob_match("memcached", "memcached"));
    EXPECT_FALSE(sp::glob_match("memcached", "memcache"));
    EXPECT_FALSE(sp::glob_match("memcached", "memcached2"));
    EXPECT_FALSE(sp::glob_match("memcached", "Memcached"));
}
