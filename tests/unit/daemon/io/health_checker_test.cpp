// SPDX-License-Identifier: Apache-2.0
// What the health checker counts as a local SDP address (listener checks by
// default) and what as remote (not probed unless asked).
#include <gtest/gtest.h>

#include "daemon/io/health_checker.hpp"

namespace pmd::io {
namespace {

pm::IpAddress ip(const char* s) {
    return *pm::IpAddress::parse(s);
}

TEST(HealthLocality, LoopbackUnspecifiedAndThisHostsAddressesAreLocal) {
    const std::vector<pm::IpAddress> locals = {ip("192.0.2.7"), ip("2001:db8::7")};
    EXPECT_TRUE(is_local_address(ip("0.0.0.0"), locals));  // "*:P"
    EXPECT_TRUE(is_local_address(ip("::"), locals));
    EXPECT_TRUE(is_local_address(ip("127.0.0.1"), locals));
    EXPECT_TRUE(is_local_address(ip("127.3.2.1"), locals));
    EXPECT_TRUE(is_local_address(ip("::1"), locals));
    EXPECT_TRUE(is_local_address(ip("::ffff:127.0.0.1"), locals));
    EXPECT_TRUE(is_local_address(ip("192.0.2.7"), locals));
    EXPECT_TRUE(is_local_address(ip("::ffff:192.0.2.7"), locals));
    EXPECT_TRUE(is_local_address(ip("2001:db8::7"), locals));
    EXPECT_FALSE(is_local_address(ip("192.0.2.8"), locals));
    EXPECT_FALSE(is_local_address(ip("2001:db8::8"), locals));
    EXPECT_FALSE(is_local_address(ip("128.0.0.1"), locals));
}

TEST(HealthLocality, ThisHostHasItsLoopbackAddress) {
    const auto locals = local_addresses();
    EXPECT_NE(std::find(locals.begin(), locals.end(), ip("127.0.0.1")), locals.end());
}

}  // namespace
}  // namespace pmd::io
