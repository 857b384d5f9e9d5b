// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "pmclient/address.hpp"

namespace {

using pm::Endpoint;
using pm::IpAddress;
using pm::Prefix;

TEST(Address, ParsesAndPrintsBothFamilies) {
    auto a = IpAddress::parse("192.0.2.1");
    ASSERT_TRUE(a);
    EXPECT_TRUE(a->is_v4());
    EXPECT_EQ(a->to_string(), "192.0.2.1");
    auto b = IpAddress::parse("2001:db8::1");
    ASSERT_TRUE(b);
    EXPECT_TRUE(b->is_v6());
    EXPECT_EQ(b->to_string(), "2001:db8::1");
    for (const char* bad : {"", "1.2.3", "1.2.3.256", "::g", "[::1]", "host", "1.2.3.4 "}) {
        EXPECT_FALSE(IpAddress::parse(bad)) << bad;
    }
}

TEST(Address, EndpointSyntax) {
    EXPECT_EQ(Endpoint::parse("10.0.0.1:80")->to_string(), "10.0.0.1:80");
    EXPECT_EQ(Endpoint::parse("[::1]:3935")->to_string(), "[::1]:3935");
    EXPECT_EQ(Endpoint::parse("0.0.0.0:0")->port, 0);
    for (const char* bad : {"10.0.0.1", "10.0.0.1:", "10.0.0.1:65536", "::1:80", "[10.0.0.1]:80",
                            "[::1]80", "[::1]:x", "10.0.0.1:-1", ":80"}) {
        EXPECT_FALSE(Endpoint::parse(bad)) << bad;
    }
}

TEST(Address, PrefixMatching) {
    auto p = *Prefix::parse("10.0.0.0/8");
    EXPECT_TRUE(p.contains(*IpAddress::parse("10.255.1.2")));
    EXPECT_FALSE(p.contains(*IpAddress::parse("11.0.0.1")));
    EXPECT_TRUE(p.contains(*IpAddress::parse("::ffff:10.1.1.1")));  // v4-mapped
    EXPECT_FALSE(p.contains(*IpAddress::parse("2001:db8::1")));
    auto q = *Prefix::parse("2001:db8::/32");
    EXPECT_TRUE(q.contains(*IpAddress::parse("2001:db8:ffff::1")));
    EXPECT_FALSE(q.contains(*IpAddress::parse("2001:db9::1")));
    auto odd = *Prefix::parse("192.168.1.77/25");
    EXPECT_EQ(odd.to_string(), "192.168.1.0/25");
    EXPECT_TRUE(odd.contains(*IpAddress::parse("192.168.1.127")));
    EXPECT_FALSE(odd.contains(*IpAddress::parse("192.168.1.128")));
    EXPECT_TRUE(Prefix::parse("0.0.0.0/0")->contains(*IpAddress::parse("8.8.8.8")));
    EXPECT_EQ(Prefix::parse("192.0.2.1")->length, 32);
    for (const char* bad : {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/x", "nope/8"}) {
        EXPECT_FALSE(Prefix::parse(bad)) << bad;
    }
}

TEST(PortList, ParsesRangesAndListsAndPrintsThemBack) {
    auto p = pm::parse_port_list("7010,7001-7003,7002", 16);
    ASSERT_TRUE(p);
    EXPECT_EQ(*p, (std::vector<std::uint16_t>{7001, 7002, 7003, 7010}));
    EXPECT_EQ(pm::port_list_text(*p), "7001-7003,7010");
    EXPECT_EQ(pm::port_list_text({5}), "5");
    EXPECT_EQ(pm::parse_port_list("65535", 1)->size(), 1u);
    for (const char* bad : {"", "0", "0-3", "7003-7001", "7001-", "-7001", "a", "7001,,7002",
                            "65536", "1-100", "7001 - 7002"}) {
        EXPECT_FALSE(pm::parse_port_list(bad, 16)) << bad;
    }
    // At most `max` ports, however written.
    EXPECT_FALSE(pm::parse_port_list("1-17", 16));
    EXPECT_FALSE(pm::parse_port_list("1-10,20-29", 16));
    EXPECT_TRUE(pm::parse_port_list("1-16", 16));
}

}  // namespace
