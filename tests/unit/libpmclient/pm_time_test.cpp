// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "pmclient/pm_time.hpp"

namespace {

using namespace std::chrono_literals;
using Kind = pm::CacheLifetime::Kind;

TEST(PmTime, BandsOfSection7314) {
    EXPECT_EQ(pm::pm_time_lifetime(0).kind, Kind::single_use);
    EXPECT_EQ(pm::pm_time_lifetime(1), (pm::CacheLifetime{Kind::timed, 250ms}));
    EXPECT_EQ(pm::pm_time_lifetime(127), (pm::CacheLifetime{Kind::timed, 31750ms}));
    EXPECT_EQ(pm::pm_time_lifetime(128), (pm::CacheLifetime{Kind::timed, 128s}));
    EXPECT_EQ(pm::pm_time_lifetime(254), (pm::CacheLifetime{Kind::timed, 254s}));
    EXPECT_EQ(pm::pm_time_lifetime(255).kind, Kind::permanent);
}

TEST(PmTime, FromDurationRoundsDownNeverUp) {
    EXPECT_EQ(pm::pm_time_from_duration(0ms), 0);
    EXPECT_EQ(pm::pm_time_from_duration(1ms), 1);  // shortest timed value
    EXPECT_EQ(pm::pm_time_from_duration(250ms), 1);
    EXPECT_EQ(pm::pm_time_from_duration(499ms), 1);
    EXPECT_EQ(pm::pm_time_from_duration(30s), 120);
    EXPECT_EQ(pm::pm_time_from_duration(31750ms), 127);
    EXPECT_EQ(pm::pm_time_from_duration(60s), 127);  // gap between 31.75 s and 128 s
    EXPECT_EQ(pm::pm_time_from_duration(127999ms), 127);
    EXPECT_EQ(pm::pm_time_from_duration(128s), 128);
    EXPECT_EQ(pm::pm_time_from_duration(200s), 200);
    EXPECT_EQ(pm::pm_time_from_duration(254s), 254);
    EXPECT_EQ(pm::pm_time_from_duration(24h), 254);  // never permanent
}

TEST(PmTime, FromDurationNeverExceedsRequest) {
    for (int ms = 250; ms < 300'000; ms += 37) {
        auto life = pm::pm_time_lifetime(pm::pm_time_from_duration(std::chrono::milliseconds(ms)));
        ASSERT_EQ(life.kind, Kind::timed);
        EXPECT_LE(life.duration.count(), ms) << ms;
    }
}

TEST(PmTime, HumanReadable) {
    EXPECT_EQ(pm::pm_time_to_string(0), "single-use");
    EXPECT_EQ(pm::pm_time_to_string(255), "permanent");
    EXPECT_EQ(pm::pm_time_to_string(1), "0.25s");
    EXPECT_EQ(pm::pm_time_to_string(127), "31.75s");
    EXPECT_EQ(pm::pm_time_to_string(130), "130s");
}

}  // namespace
