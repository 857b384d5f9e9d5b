// SPDX-License-Identifier: Apache-2.0
// The on-demand port pool (core/on_demand.hpp) with a fake clock: ports are
// opened, offered, held and released, and never more than the pool.
#include <gtest/gtest.h>

#include <set>

#include "daemon/core/on_demand.hpp"

namespace {

using namespace std::chrono_literals;
using pmd::OnDemandPool;
using Kind = OnDemandPool::Command::Kind;

class PoolTest : public ::testing::Test {
  protected:
    void SetUp() override { pool.add_service("od", pmd::OnDemand{{7001, 7002, 7003}, false}, 30s); }
    // Opens a port for `token` and has the acceptor answer ok.
    std::uint16_t open_ok(OnDemandPool::Token token) {
        auto s = pool.open("od", token, now);
        EXPECT_EQ(s.commands.size(), 1u);
        if (s.commands.empty()) {
            return 0;
        }
        const auto c = s.commands[0];
        EXPECT_EQ(c.kind, Kind::open);
        auto done = pool.opened("od", c.id, c.port, true, now);
        EXPECT_EQ(done.answers.size(), 1u);
        EXPECT_EQ(done.answers[0].token, token);
        EXPECT_EQ(done.answers[0].port, c.port);
        return c.port;
    }
    pmd::PoolTimers timers{1s, 5s};
    OnDemandPool pool{timers};
    pmd::TimePoint now{std::chrono::seconds(1000)};
};

TEST_F(PoolTest, OpenedPortIsReleasedWhenNoPMAckComes) {
    const auto port = open_ok(1);
    EXPECT_EQ(pool.in_use("od"), 1u);
    EXPECT_EQ(pool.next_deadline(), now + 5s);
    now += 4s;
    pool.touch("od", port, now);  // a duplicate PMReq restarts the timer
    now += 4s;
    EXPECT_TRUE(pool.on_timer(now).commands.empty());
    now += 1s;
    auto s = pool.on_timer(now);
    ASSERT_EQ(s.commands.size(), 1u);
    EXPECT_EQ(s.commands[0].kind, Kind::close);
    EXPECT_EQ(s.commands[0].port, port);
    EXPECT_EQ(pool.in_use("od"), 0u);
    EXPECT_EQ(pool.counters().released_unused, 1u);
    EXPECT_FALSE(pool.next_deadline());
}

TEST_F(PoolTest, PMAckHoldsThePortForItsLifetime) {
    const auto port = open_ok(1);
    now += 1s;
    pool.acked("od", port, now);
    now += 29s;
    EXPECT_TRUE(pool.on_timer(now).commands.empty());
    pool.connected("od", port, now);  // a connection does not end a reusable mapping
    EXPECT_EQ(pool.in_use("od"), 1u);
    now += 1s;
    auto s = pool.on_timer(now);
    ASSERT_EQ(s.commands.size(), 1u);
    EXPECT_EQ(pool.counters().released_used, 1u);
    EXPECT_EQ(pool.counters().connections, 1u);
}

TEST_F(PoolTest, SingleUseClosesAtTheFirstConnection) {
    pool.add_service("once", pmd::OnDemand{{8001}, true}, 0s);
    auto s = pool.open("once", 9, now);
    ASSERT_EQ(s.commands.size(), 1u);
    pool.opened("once", s.commands[0].id, 8001, true, now);
    auto c = pool.connected("once", 8001, now);
    ASSERT_EQ(c.commands.size(), 1u);
    EXPECT_EQ(c.commands[0].kind, Kind::close);
    EXPECT_EQ(pool.in_use("once"), 0u);
    // The port is free again.
    EXPECT_EQ(pool.open("once", 10, now).commands.size(), 1u);
}

TEST_F(PoolTest, ExhaustedPoolAnswersAtOnce) {
    std::set<std::uint16_t> ports;
    for (OnDemandPool::Token t = 1; t <= 3; ++t) {
        ports.insert(open_ok(t));
    }
    EXPECT_EQ(ports, (std::set<std::uint16_t>{7001, 7002, 7003}));
    auto s = pool.open("od", 4, now);
    EXPECT_TRUE(s.commands.empty());
    ASSERT_EQ(s.answers.size(), 1u);
    EXPECT_TRUE(s.answers[0].exhausted);
    EXPECT_FALSE(s.answers[0].port);
    EXPECT_EQ(pool.counters().exhausted, 1u);
}

TEST_F(PoolTest, FloodNeverHoldsMoreThanThePool) {
    std::size_t max_in_use = 0;
    std::uint64_t exhausted = 0;
    for (OnDemandPool::Token t = 1; t <= 1000; ++t) {
        auto s = pool.open("od", t, now);
        for (const auto& c : s.commands) {
            pool.opened("od", c.id, c.port, true, now);
        }
        exhausted += !s.answers.empty() && s.answers[0].exhausted;
        max_in_use = std::max(max_in_use, pool.in_use("od"));
        now += 10ms;
        pool.on_timer(now);
    }
    EXPECT_EQ(max_in_use, 3u);
    EXPECT_GT(exhausted, 0u);
    // Each port was reused after its PMAck timer ran out: 10 s of flood with
    // a 5 s timer is two or three rounds of the pool.
    EXPECT_GE(pool.counters().opens, 6u);
    EXPECT_LE(pool.counters().opens, 9u);
    now += 5s;
    pool.on_timer(now);
    EXPECT_EQ(pool.in_use(), 0u);
}

TEST_F(PoolTest, OpenFailureAndTimeout) {
    auto s = pool.open("od", 1, now);
    ASSERT_EQ(s.commands.size(), 1u);
    auto f = pool.opened("od", s.commands[0].id, s.commands[0].port, false, now);
    ASSERT_EQ(f.answers.size(), 1u);
    EXPECT_FALSE(f.answers[0].port);
    EXPECT_FALSE(f.answers[0].exhausted);
    EXPECT_TRUE(f.commands.empty());  // nothing was opened
    EXPECT_EQ(pool.in_use("od"), 0u);

    auto t = pool.open("od", 2, now);
    ASSERT_EQ(t.commands.size(), 1u);
    now += 1s;
    auto expired = pool.on_timer(now);
    ASSERT_EQ(expired.answers.size(), 1u);
    EXPECT_EQ(expired.answers[0].token, 2u);
    EXPECT_FALSE(expired.answers[0].port);
    ASSERT_EQ(expired.commands.size(), 1u);  // in case it opens after all
    EXPECT_EQ(expired.commands[0].kind, Kind::close);
    // Its late answer is ignored and counted.
    EXPECT_TRUE(pool.opened("od", t.commands[0].id, t.commands[0].port, true, now).answers.empty());
    EXPECT_EQ(pool.counters().bad_answers, 1u);
    EXPECT_EQ(pool.counters().open_timeouts, 1u);
    EXPECT_EQ(pool.counters().open_failures, 1u);
}

TEST_F(PoolTest, MadeUpAnswersChangeNothing) {
    EXPECT_TRUE(pool.opened("od", 77, 7001, true, now).answers.empty());
    EXPECT_TRUE(pool.opened("nope", 1, 7001, true, now).answers.empty());
    EXPECT_TRUE(pool.connected("od", 7001, now).commands.empty());
    EXPECT_TRUE(pool.cancel("od", 9999).commands.empty());
    pool.acked("od", 7001, now);
    pool.touch("nope", 7001, now);
    EXPECT_EQ(pool.in_use(), 0u);
    EXPECT_EQ(pool.counters().bad_answers, 3u);
}

TEST_F(PoolTest, RemovedServiceFailsItsWaiters) {
    open_ok(1);
    auto s = pool.open("od", 2, now);
    ASSERT_EQ(s.commands.size(), 1u);
    auto gone = pool.remove_service("od");
    ASSERT_EQ(gone.answers.size(), 1u);
    EXPECT_EQ(gone.answers[0].token, 2u);
    EXPECT_FALSE(pool.has_service("od"));
    EXPECT_EQ(pool.in_use(), 0u);
    auto unknown = pool.open("od", 3, now);
    ASSERT_EQ(unknown.answers.size(), 1u);
    EXPECT_FALSE(unknown.answers[0].exhausted);
}

TEST_F(PoolTest, CancelReleasesAnOfferedPort) {
    const auto port = open_ok(1);
    auto s = pool.cancel("od", port);
    ASSERT_EQ(s.commands.size(), 1u);
    EXPECT_EQ(s.commands[0].kind, Kind::close);
    EXPECT_EQ(pool.in_use("od"), 0u);
}

TEST_F(PoolTest, RenewalWithFewerPortsKeepsPortsInUse) {
    const auto port = open_ok(1);
    pool.add_service("od", pmd::OnDemand{{port}, false}, 30s);
    EXPECT_EQ(pool.in_use("od"), 1u);
    auto s = pool.open("od", 2, now);
    EXPECT_TRUE(s.commands.empty());  // the only port is in use
    now += 5s;
    pool.on_timer(now);
    EXPECT_EQ(pool.open("od", 3, now).commands.size(), 1u);
}

}  // namespace
