// SPDX-License-Identifier: Apache-2.0
// The PmTime cache on its own (section 7.3.1.4).
#include "test_util.hpp"

namespace pmclient::test {
namespace {

CacheKey key(const char* conventional) {
    return CacheKey{ep(conventional), ep("10.0.0.2:1").address, ep("10.0.0.1:3935")};
}

TEST(CacheTest, StoreLookupExpire) {
    Cache c(8);
    c.store(key("10.0.0.1:7000"), ep("10.0.0.1:7001"), 2, T(0ms));  // 500 ms
    auto e = c.lookup(key("10.0.0.1:7000"), T(499ms));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->sdp, ep("10.0.0.1:7001"));
    EXPECT_EQ(e->pm_time, 2);
    EXPECT_EQ(e->expires, T(500ms));
    EXPECT_FALSE(c.lookup(key("10.0.0.1:7000"), T(500ms)).has_value());
    EXPECT_EQ(c.size(), 0u);
    EXPECT_EQ(c.expirations(), 1u);
}

TEST(CacheTest, SingleUseRemovesOlderEntry) {
    Cache c(8);
    c.store(key("10.0.0.1:7000"), ep("10.0.0.1:7001"), 255, T(0ms));
    c.store(key("10.0.0.1:7000"), ep("10.0.0.1:7002"), 0, T(1ms));
    EXPECT_EQ(c.size(), 0u);
}

TEST(CacheTest, ReplaceRefreshesEntry) {
    Cache c(8);
    c.store(key("10.0.0.1:7000"), ep("10.0.0.1:7001"), 1, T(0ms));
    c.store(key("10.0.0.1:7000"), ep("10.0.0.1:7002"), 255, T(1ms));
    auto e = c.lookup(key("10.0.0.1:7000"), T(1h));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->sdp, ep("10.0.0.1:7002"));
    EXPECT_FALSE(e->expires.has_value());
    EXPECT_EQ(c.size(), 1u);
}

TEST(CacheTest, LruEvictsLeastRecentlyUsed) {
    Cache c(3);
    for (int i = 1; i <= 3; ++i) {
        c.store(key(("10.0.0.1:" + std::to_string(i)).c_str()), ep("10.0.0.1:7001"), 255, T(0ms));
    }
    ASSERT_TRUE(c.lookup(key("10.0.0.1:1"), T(1ms)));
    c.store(key("10.0.0.1:4"), ep("10.0.0.1:7001"), 255, T(2ms));
    EXPECT_EQ(c.size(), 3u);
    EXPECT_FALSE(c.lookup(key("10.0.0.1:2"), T(3ms)));
    EXPECT_TRUE(c.lookup(key("10.0.0.1:1"), T(3ms)));
    EXPECT_TRUE(c.lookup(key("10.0.0.1:3"), T(3ms)));
    EXPECT_TRUE(c.lookup(key("10.0.0.1:4"), T(3ms)));
    for (int i = 5; i < 1000; ++i) {
        c.store(key(("10.0.0.1:" + std::to_string(i)).c_str()), ep("10.0.0.1:7001"), 255, T(4ms));
        ASSERT_LE(c.size(), 3u);
    }
}

TEST(CacheTest, EraseByConventionalAddressAndClear) {
    Cache c(8);
    CacheKey a = key("10.0.0.1:7000");
    CacheKey b = a;
    b.pmsp = ep("10.0.0.9:3935");
    c.store(a, ep("10.0.0.1:7001"), 255, T(0ms));
    c.store(b, ep("10.0.0.1:7001"), 255, T(0ms));
    c.store(key("10.0.0.1:7001"), ep("10.0.0.1:7001"), 255, T(0ms));
    EXPECT_EQ(c.erase_conventional(ep("10.0.0.1:7000")), 2u);
    EXPECT_EQ(c.size(), 1u);
    c.clear();
    EXPECT_EQ(c.size(), 0u);
    EXPECT_FALSE(c.erase(a));
}

}  // namespace
}  // namespace pmclient::test
