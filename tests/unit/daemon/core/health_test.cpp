// SPDX-License-Identifier: Apache-2.0
// The health state machine of SDP addresses and its probe schedule, driven
// with a fake clock (issue #15).
#include <gtest/gtest.h>

#include "daemon/core/health.hpp"

namespace pmd {
namespace {

using namespace std::chrono_literals;

pm::Endpoint ep(const char* s) {
    return *pm::Endpoint::parse(s);
}

const HealthTime t0{std::chrono::seconds(1000)};

TEST(HealthTracker, FirstResultDecidesAtOnce) {
    HealthTracker up(3, 3, t0);
    EXPECT_EQ(up.state(), HealthState::unknown);
    auto t = up.on_result(true, t0 + 1s);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->from, HealthState::unknown);
    EXPECT_EQ(t->to, HealthState::up);
    EXPECT_EQ(up.since(), t0 + 1s);

    HealthTracker down(3, 3, t0);
    t = down.on_result(false, t0 + 1s);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, HealthState::down);
}

TEST(HealthTracker, FallAndRiseCountConsecutiveResults) {
    HealthTracker h(2, 3, t0);
    h.on_result(true, t0);
    // Two failures, a pass: the streak starts again.
    EXPECT_FALSE(h.on_result(false, t0 + 1s));
    EXPECT_FALSE(h.on_result(false, t0 + 2s));
    EXPECT_EQ(h.streak(), 2u);
    EXPECT_FALSE(h.on_result(true, t0 + 3s));
    EXPECT_EQ(h.streak(), 0u);
    EXPECT_EQ(h.state(), HealthState::up);
    // Three in a row: down.
    EXPECT_FALSE(h.on_result(false, t0 + 4s));
    EXPECT_FALSE(h.on_result(false, t0 + 5s));
    auto t = h.on_result(false, t0 + 6s);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->from, HealthState::up);
    EXPECT_EQ(t->to, HealthState::down);
    EXPECT_EQ(h.since(), t0 + 6s);
    // A failure while down changes nothing; a pass then a failure resets.
    EXPECT_FALSE(h.on_result(false, t0 + 7s));
    EXPECT_FALSE(h.on_result(true, t0 + 8s));
    EXPECT_FALSE(h.on_result(false, t0 + 9s));
    EXPECT_FALSE(h.on_result(true, t0 + 10s));
    t = h.on_result(true, t0 + 11s);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, HealthState::up);
    EXPECT_EQ(h.transitions(), 3u);
}

TEST(HealthTracker, CountsOfOneFlipOnEveryChange) {
    HealthTracker h(1, 1, t0);
    h.on_result(true, t0);
    EXPECT_TRUE(h.on_result(false, t0 + 1s));
    EXPECT_TRUE(h.on_result(true, t0 + 2s));
    // Zero thresholds are treated as one.
    HealthTracker z(0, 0, t0);
    z.on_result(true, t0);
    EXPECT_TRUE(z.on_result(false, t0 + 1s));
}

TEST(HealthSettings, ServiceFieldsThenTopLevelThenBuiltIns) {
    HealthOverrides top;
    top.interval = 5s;
    top.fall = 4;
    HealthOverrides svc;
    svc.fall = 1;
    svc.check = HealthCheck::connect;
    auto s = resolve_health(svc, top);
    EXPECT_EQ(s.check, HealthCheck::connect);
    EXPECT_EQ(s.interval, 5s);
    EXPECT_EQ(s.timeout, 1s);
    EXPECT_EQ(s.rise, 2u);
    EXPECT_EQ(s.fall, 1u);
    auto d = resolve_health({}, {});
    EXPECT_FALSE(d.check);
    EXPECT_EQ(d.interval, 1s);
    // By locality when not set: remote addresses are not probed.
    EXPECT_EQ(effective_check(d, true), HealthCheck::listener);
    EXPECT_EQ(effective_check(d, false), HealthCheck::off);
    top.check = HealthCheck::off;
    EXPECT_EQ(effective_check(resolve_health({}, top), true), HealthCheck::off);
}

HealthTarget target(const char* service, std::size_t index, const char* address, HealthCheck check,
                    std::chrono::milliseconds interval = 1000ms) {
    HealthTarget t;
    t.service = service;
    t.address_index = index;
    t.address = ep(address);
    t.check = check;
    t.settings.interval = interval;
    return t;
}

TEST(HealthMonitor, NewTargetsAreDueAtOnceThenEveryInterval) {
    HealthMonitor m;
    m.set_targets({target("a", 0, "127.0.0.1:1", HealthCheck::listener),
                   target("a", 1, "192.0.2.1:1", HealthCheck::connect, 500ms),
                   target("b", 0, "127.0.0.1:2", HealthCheck::off)},
                  t0);
    EXPECT_EQ(m.next_deadline(), t0);
    auto listener = m.start_due(HealthCheck::listener, t0);
    auto connect = m.start_due(HealthCheck::connect, t0);
    ASSERT_EQ(listener.size(), 1u);
    ASSERT_EQ(connect.size(), 1u);
    EXPECT_TRUE(m.start_due(HealthCheck::off, t0).empty());  // never probed
    // In flight: not due again, not a deadline.
    EXPECT_TRUE(m.start_due(HealthCheck::listener, t0 + 10s).empty());
    EXPECT_FALSE(m.next_deadline());
    auto applied = m.on_result(connect[0], false, t0 + 100ms);
    ASSERT_TRUE(applied.entry);
    ASSERT_TRUE(applied.transition);
    EXPECT_EQ(applied.transition->to, HealthState::down);
    EXPECT_EQ(m.next_deadline(), t0 + 500ms);  // from the start of the probe
    m.abandon(listener[0]);                    // no verdict: state unchanged
    EXPECT_EQ(m.find(listener[0])->tracker.state(), HealthState::unknown);
    EXPECT_EQ(m.next_deadline(), t0 + 500ms);
    EXPECT_TRUE(m.start_due(HealthCheck::connect, t0 + 499ms).empty());
    EXPECT_EQ(m.start_due(HealthCheck::connect, t0 + 500ms).size(), 1u);
    EXPECT_EQ(m.start_due(HealthCheck::listener, t0 + 1s).size(), 1u);
}

TEST(HealthMonitor, StartDueHonoursTheLimit) {
    HealthMonitor m;
    std::vector<HealthTarget> ts;
    for (std::size_t i = 0; i < 5; ++i) {
        ts.push_back(target("a", i, "192.0.2.1:1", HealthCheck::connect));
        ts.back().address.port = static_cast<std::uint16_t>(i + 1);
    }
    m.set_targets(ts, t0);
    EXPECT_EQ(m.start_due(HealthCheck::connect, t0, 2).size(), 2u);
    EXPECT_EQ(m.start_due(HealthCheck::connect, t0, 10).size(), 3u);
}

TEST(HealthMonitor, TargetsThatStayKeepTheirStateAndOthersStartUnknown) {
    HealthMonitor m;
    m.set_targets({target("a", 0, "127.0.0.1:1", HealthCheck::listener),
                   target("a", 1, "127.0.0.1:2", HealthCheck::listener)},
                  t0);
    auto ids = m.start_due(HealthCheck::listener, t0);
    ASSERT_EQ(ids.size(), 2u);
    m.on_result(ids[0], false, t0);
    m.on_result(ids[1], true, t0);
    // Reordered (index changes), one dropped, one added, one changes check.
    m.set_targets({target("a", 0, "127.0.0.1:2", HealthCheck::listener),
                   target("a", 1, "127.0.0.1:3", HealthCheck::listener),
                   target("b", 0, "127.0.0.1:1", HealthCheck::listener)},
                  t0 + 1s);
    const auto& e = m.entries();
    ASSERT_EQ(e.size(), 3u);
    EXPECT_EQ(e[0].tracker.state(), HealthState::up);
    EXPECT_EQ(e[0].target.address_index, 0u);
    EXPECT_EQ(e[0].id, ids[1]);
    EXPECT_EQ(e[1].tracker.state(), HealthState::unknown);
    EXPECT_EQ(e[2].tracker.state(), HealthState::unknown);  // another service
    // A result for a dropped entry is ignored.
    EXPECT_FALSE(m.on_result(ids[0], true, t0 + 2s).entry);
}

TEST(HealthListeners, ExactWildcardDualStackAndAnyAddress) {
    const std::vector<Listener> ls = {
        {ep("127.0.0.1:80"), false},
        {ep("0.0.0.0:81"), false},
        {ep("[::]:82"), false},  // dual-stack
        {ep("[::]:83"), true},   // v6only
        {ep("[::ffff:127.0.0.2]:84"), false},
        {ep("[::1]:85"), false},
    };
    EXPECT_TRUE(has_listener(ep("127.0.0.1:80"), ls));
    EXPECT_FALSE(has_listener(ep("127.0.0.2:80"), ls));
    EXPECT_TRUE(has_listener(ep("127.0.0.2:81"), ls));
    EXPECT_FALSE(has_listener(ep("[::1]:81"), ls));
    EXPECT_TRUE(has_listener(ep("127.0.0.1:82"), ls));
    EXPECT_TRUE(has_listener(ep("[::1]:82"), ls));
    EXPECT_FALSE(has_listener(ep("127.0.0.1:83"), ls));
    EXPECT_TRUE(has_listener(ep("[::1]:83"), ls));
    EXPECT_TRUE(has_listener(ep("127.0.0.2:84"), ls));
    EXPECT_TRUE(has_listener(ep("[::1]:85"), ls));
    EXPECT_FALSE(has_listener(ep("127.0.0.1:85"), ls));
    // "*:P" (stored as 0.0.0.0:P): any listener on the port.
    EXPECT_TRUE(has_listener(ep("0.0.0.0:85"), ls));
    EXPECT_TRUE(has_listener(ep("0.0.0.0:80"), ls));
    EXPECT_FALSE(has_listener(ep("0.0.0.0:86"), ls));
    EXPECT_FALSE(has_listener(ep("127.0.0.1:86"), {}));
}

TEST(HealthNames, EveryValueHasAName) {
    EXPECT_EQ(to_string(HealthCheck::listener), "listener");
    EXPECT_EQ(to_string(HealthCheck::connect), "connect");
    EXPECT_EQ(to_string(HealthCheck::off), "off");
    EXPECT_EQ(to_string(HealthState::unknown), "unknown");
    EXPECT_EQ(to_string(HealthState::up), "up");
    EXPECT_EQ(to_string(HealthState::down), "down");
}

}  // namespace
}  // namespace pmd
