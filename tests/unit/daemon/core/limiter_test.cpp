// SPDX-License-Identifier: Apache-2.0
// The per-source token bucket and source quench, with a fake clock.
#include "daemon/core/limiter.hpp"

#include <gtest/gtest.h>

#include <set>

namespace {

using namespace std::chrono_literals;
using pmd::LimiterTime;

pm::IpAddress ip(const char* text) {
    return *pm::IpAddress::parse(text);
}
pm::IpAddress nth(std::uint32_t i) {
    return pm::IpAddress::v4({10, static_cast<std::uint8_t>(i >> 16),
                              static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)});
}

const LimiterTime t0 = LimiterTime{} + 1h;

TEST(SourceLimiter, DisabledAllowsEverything) {
    pmd::SourceLimiter l;
    EXPECT_FALSE(l.enabled());
    for (int i = 0; i < 1000; ++i) {
        EXPECT_TRUE(l.allow(ip("192.0.2.1"), t0));
    }
    EXPECT_EQ(l.counters().allowed, 1000u);
    EXPECT_EQ(l.counters().limited, 0u);
    EXPECT_EQ(l.sources(), 0u);
}

TEST(SourceLimiter, BurstThenRate) {
    pmd::SourceLimiter l({.rate = 10, .burst = 5, .max_sources = 16}, 42);
    const auto a = ip("192.0.2.1");
    for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(l.allow(a, t0)) << i;
    }
    EXPECT_FALSE(l.allow(a, t0));
    // 10/s: one token every 100 ms.
    EXPECT_FALSE(l.allow(a, t0 + 99ms));
    EXPECT_TRUE(l.allow(a, t0 + 100ms));
    EXPECT_FALSE(l.allow(a, t0 + 100ms));
    EXPECT_TRUE(l.allow(a, t0 + 200ms));
    // A long pause refills only up to the burst.
    int ok = 0;
    for (int i = 0; i < 20; ++i) {
        ok += l.allow(a, t0 + 10s) ? 1 : 0;
    }
    EXPECT_EQ(ok, 5);
    EXPECT_EQ(l.counters().allowed, 5u + 2u + 5u);
    EXPECT_EQ(l.counters().limited, 1u + 1u + 1u + 15u);
}

TEST(SourceLimiter, SourcesAreIndependent) {
    pmd::SourceLimiter l({.rate = 1, .burst = 1, .max_sources = 16}, 1);
    EXPECT_TRUE(l.allow(ip("192.0.2.1"), t0));
    EXPECT_FALSE(l.allow(ip("192.0.2.1"), t0));
    EXPECT_TRUE(l.allow(ip("192.0.2.2"), t0));
    EXPECT_TRUE(l.allow(ip("2001:db8::1"), t0));
    EXPECT_FALSE(l.allow(ip("2001:db8::1"), t0));
    EXPECT_EQ(l.sources(), 3u);
}

TEST(SourceLimiter, SustainedRateIsHonoured) {
    pmd::SourceLimiter l({.rate = 100, .burst = 10, .max_sources = 4}, 7);
    const auto a = ip("198.51.100.7");
    // A flood of 10 requests per ms for 10 s of fake time.
    std::uint64_t ok = 0;
    for (int ms = 0; ms < 10'000; ++ms) {
        for (int k = 0; k < 10; ++k) {
            ok += l.allow(a, t0 + std::chrono::milliseconds(ms)) ? 1 : 0;
        }
    }
    // burst + rate * 10 s, give or take one token of rounding.
    EXPECT_GE(ok, 10u + 999u);
    EXPECT_LE(ok, 10u + 1000u);
}

TEST(SourceLimiter, TableIsBoundedAndEvictsLeastRecentlyUsed) {
    pmd::SourceLimiter l({.rate = 1, .burst = 1, .max_sources = 3}, 9);
    EXPECT_TRUE(l.allow(nth(1), t0));
    EXPECT_TRUE(l.allow(nth(2), t0));
    EXPECT_TRUE(l.allow(nth(3), t0));
    EXPECT_FALSE(l.allow(nth(1), t0));  // 1 is now most recently used, bucket empty
    EXPECT_TRUE(l.allow(nth(4), t0));   // evicts 2, the least recently used
    EXPECT_EQ(l.sources(), 3u);
    EXPECT_EQ(l.counters().evicted, 1u);
    EXPECT_FALSE(l.allow(nth(1), t0));  // 1 kept its (empty) bucket
    EXPECT_TRUE(l.allow(nth(2), t0));   // 2 starts over with a full bucket
    for (std::uint32_t i = 0; i < 100'000; ++i) {
        l.allow(nth(100 + i), t0);
    }
    EXPECT_EQ(l.sources(), 3u);
    EXPECT_EQ(l.counters().evicted, 2u + 100'000u);
}

TEST(SourceLimiter, ClockGoingBackwardsGivesNoTokens) {
    pmd::SourceLimiter l({.rate = 1, .burst = 1, .max_sources = 4}, 3);
    const auto a = ip("192.0.2.9");
    EXPECT_TRUE(l.allow(a, t0 + 10s));
    EXPECT_FALSE(l.allow(a, t0));
    EXPECT_FALSE(l.allow(a, t0 + 10s));
    EXPECT_TRUE(l.allow(a, t0 + 11s));
}

TEST(SeededAddressHash, SeedChangesTheHash) {
    pmd::SeededAddressHash h1{1};
    pmd::SeededAddressHash h2{2};
    int same = 0;
    std::set<std::size_t> seen;
    for (std::uint32_t i = 0; i < 1000; ++i) {
        same += h1(nth(i)) == h2(nth(i)) ? 1 : 0;
        seen.insert(h1(nth(i)));
    }
    EXPECT_EQ(same, 0);
    EXPECT_EQ(seen.size(), 1000u);
    // The family is part of the key: 0.0.0.0 and :: differ.
    EXPECT_NE(h1(pm::IpAddress::any(pm::Family::v4)), h1(pm::IpAddress::any(pm::Family::v6)));
}

TEST(SourceQuench, DisabledNeverQuenches) {
    pmd::SourceQuench q;
    for (int i = 0; i < 1000; ++i) {
        q.on_accept(ip("192.0.2.1"), t0);
    }
    EXPECT_FALSE(q.quenched(ip("192.0.2.1"), t0));
    EXPECT_EQ(q.counters().quench_events, 0u);
}

TEST(SourceQuench, UnackedAcceptsQuenchForThePeriod) {
    pmd::SourceQuench q({.max_unacked = 3, .window = 1s, .period = 10s, .max_sources = 16}, 5);
    const auto a = ip("192.0.2.1");
    EXPECT_FALSE(q.quenched(a, t0));
    q.on_accept(a, t0);
    q.on_accept(a, t0 + 1ms);
    EXPECT_FALSE(q.quenched(a, t0 + 2ms));
    q.on_accept(a, t0 + 2ms);  // third un-acked within the window
    EXPECT_TRUE(q.quenched(a, t0 + 3ms));
    EXPECT_TRUE(q.quenched(a, t0 + 2ms + 10s - 1ms));
    EXPECT_FALSE(q.quenched(a, t0 + 2ms + 10s));
    EXPECT_FALSE(q.quenched(ip("192.0.2.2"), t0 + 3ms));
    EXPECT_EQ(q.counters().quench_events, 1u);
    EXPECT_EQ(q.counters().dropped, 2u);
    // After the quench it starts from zero.
    q.on_accept(a, t0 + 11s);
    q.on_accept(a, t0 + 11s);
    EXPECT_FALSE(q.quenched(a, t0 + 11s));
}

TEST(SourceQuench, AckingClientIsNeverQuenched) {
    pmd::SourceQuench q({.max_unacked = 3, .window = 1s, .period = 10s, .max_sources = 16}, 5);
    const auto a = ip("192.0.2.1");
    for (int i = 0; i < 10'000; ++i) {
        const auto now = t0 + std::chrono::microseconds(100 * i);
        EXPECT_FALSE(q.quenched(a, now));
        q.on_accept(a, now);
        q.on_accept(a, now);  // two in flight at once
        q.on_ack(a, now);
        q.on_ack(a, now);
    }
    EXPECT_EQ(q.counters().quench_events, 0u);
}

TEST(SourceQuench, CountIsPerWindow) {
    pmd::SourceQuench q({.max_unacked = 3, .window = 1s, .period = 10s, .max_sources = 16}, 5);
    const auto a = ip("2001:db8::5");
    // Two un-acked per window, forever: below the bound in every window.
    for (int w = 0; w < 100; ++w) {
        const auto now = t0 + std::chrono::seconds(w);
        q.on_accept(a, now);
        q.on_accept(a, now + 1ms);
        EXPECT_FALSE(q.quenched(a, now + 2ms));
    }
    EXPECT_EQ(q.counters().quench_events, 0u);
    // Acks for an earlier window never make the count negative.
    q.on_ack(a, t0 + 200s);
    q.on_ack(a, t0 + 200s);
    q.on_accept(a, t0 + 200s);
    q.on_accept(a, t0 + 200s);
    q.on_accept(a, t0 + 200s);
    EXPECT_TRUE(q.quenched(a, t0 + 200s));
}

TEST(SourceQuench, TableIsBounded) {
    pmd::SourceQuench q({.max_unacked = 2, .window = 1s, .period = 10s, .max_sources = 8}, 5);
    for (std::uint32_t i = 0; i < 10'000; ++i) {
        q.on_accept(nth(i), t0);
    }
    EXPECT_EQ(q.sources(), 8u);
    EXPECT_EQ(q.counters().evicted, 10'000u - 8u);
    // An ack from an unknown source is harmless.
    q.on_ack(ip("192.0.2.200"), t0);
    EXPECT_EQ(q.sources(), 8u);
}

}  // namespace
