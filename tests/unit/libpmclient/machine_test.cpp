// SPDX-License-Identifier: Apache-2.0
// The PM client transaction machine (section 7.5.1), driven by a fake clock.
#include <random>

#include "test_util.hpp"

namespace pmclient::test {
namespace {

class MachineTest : public ::testing::Test {
  protected:
    explicit MachineTest(MachineConfig c = {}) : m(c) {}

    TxnId start(const Query& q, std::chrono::milliseconds at = 0ms, std::uint64_t rnd = 0x1234) {
        out.clear();
        return m.start(q, T(at), rnd, out);
    }
    void tick(std::chrono::milliseconds at) {
        out.clear();
        m.on_timer(T(at), out);
    }
    void feed(const pm::Message& msg, const char* from = "10.0.0.1:3935",
              std::chrono::milliseconds at = 10ms) {
        out.clear();
        auto w = pm::encode(msg);
        m.on_datagram(w, ep(from), T(at), out);
    }
    void feed_bytes(std::span<const std::uint8_t> b, std::chrono::milliseconds at = 10ms) {
        out.clear();
        m.on_datagram(b, ep("10.0.0.1:3935"), T(at), out);
    }
    // The PMReq last sent.
    pm::Message sent_req() {
        EXPECT_FALSE(out.sends.empty());
        return out.sends.empty() ? pm::Message{} : decode_ok(out.sends.back().bytes);
    }

    Machine m;
    Actions out;
};

TEST_F(MachineTest, StartSendsPmReqWithFieldsOf74) {
    auto id = start(query(), 0ms, 0xABCDEF);
    ASSERT_EQ(out.sends.size(), 1u);
    EXPECT_EQ(out.sends[0].to, ep("10.0.0.1:3935"));
    auto req = sent_req();
    EXPECT_EQ(req.type, pm::MessageType::request);
    EXPECT_EQ(req.ipv, pm::Family::v4);
    EXPECT_EQ(req.pm_time, 0);
    EXPECT_EQ(req.ap_port, 7000);
    EXPECT_EQ(req.cp_port, 40000);
    EXPECT_EQ(req.assoc_handle, 0xABCDEFu);
    EXPECT_EQ(req.ap_addr, ep("10.0.0.1:1").address);
    EXPECT_EQ(req.cp_addr, ep("10.0.0.2:1").address);
    EXPECT_TRUE(out.completions.empty());
    ASSERT_TRUE(out.timer.has_value());
    EXPECT_EQ(*out.timer, T(250ms));
    EXPECT_EQ(m.in_flight(), 1u);
    EXPECT_NE(id, 0u);
}

TEST_F(MachineTest, DefaultScheduleRetransmitsIdenticalPmReqUntilDeadline) {
    start(query());
    const pm::Wire first = out.sends.at(0).bytes;
    std::vector<std::chrono::milliseconds> sends_at;
    sends_at.push_back(0ms);
    for (int ms = 1; ms <= 3000 && m.in_flight() > 0; ++ms) {
        tick(std::chrono::milliseconds(ms));
        for (const auto& s : out.sends) {
            EXPECT_EQ(s.bytes, first) << "retransmission must be identical (7.5.1)";
            sends_at.emplace_back(ms);
        }
        if (!out.completions.empty()) {
            EXPECT_EQ(ms, 3000);
            EXPECT_EQ(out.completions[0].result.kind, ResultKind::timeout);
            EXPECT_EQ(out.completions[0].result.attempts, 4u);
        }
    }
    EXPECT_EQ(sends_at, (std::vector<std::chrono::milliseconds>{0ms, 250ms, 750ms, 1750ms}));
    EXPECT_EQ(m.in_flight(), 0u);
    EXPECT_EQ(m.counters().retransmissions, 3u);
    EXPECT_EQ(m.counters().timeouts, 1u);
    EXPECT_FALSE(m.next_wakeup().has_value());
}

TEST_F(MachineTest, MaxRetriesBoundsScheduleWhenDeadlineIsFar) {
    auto q = query();
    q.options.deadline = 60s;
    start(q);
    std::vector<TimePoint> wakeups;
    int sends = 1;
    while (m.in_flight() > 0) {
        auto at = *m.next_wakeup();
        out.clear();
        m.on_timer(at, out);
        sends += static_cast<int>(out.sends.size());
        wakeups.push_back(at);
    }
    // Sends at 0, 250, 750, 1750, 3750; gives up one 4 s timeout later, 7750 ms.
    EXPECT_EQ(sends, 5);
    EXPECT_EQ(wakeups,
              (std::vector<TimePoint>{T(250ms), T(750ms), T(1750ms), T(3750ms), T(7750ms)}));
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::timeout);
    EXPECT_EQ(out.completions[0].result.attempts, 5u);
}

TEST_F(MachineTest, ZeroRetriesTimesOutAfterInitialTimeout) {
    auto q = query();
    q.options.max_retries = 0;
    q.options.initial_timeout = 100ms;
    start(q);
    tick(99ms);
    EXPECT_TRUE(out.sends.empty());
    EXPECT_TRUE(out.completions.empty());
    tick(100ms);
    EXPECT_TRUE(out.sends.empty());
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::timeout);
}

TEST_F(MachineTest, EarlyTimerDoesNothing) {
    start(query());
    tick(249ms);
    EXPECT_TRUE(out.sends.empty());
    EXPECT_EQ(*out.timer, T(250ms));
}

TEST_F(MachineTest, AcceptSendsAckToSourceAndCompletes) {
    auto id = start(query());
    auto req = sent_req();
    tick(250ms);  // one retransmission
    auto acc = pm::make_accept(req, ep("10.0.0.9:7001"), 120);
    feed(acc, "10.0.0.1:3935", 300ms);
    ASSERT_EQ(out.sends.size(), 1u);
    EXPECT_EQ(out.sends[0].to, ep("10.0.0.1:3935"));
    auto ack = decode_ok(out.sends[0].bytes);
    EXPECT_EQ(ack, pm::make_ack(acc));
    EXPECT_EQ(ack.type, pm::MessageType::ack);
    EXPECT_EQ(ack.ap_port, 7001);
    EXPECT_EQ(ack.ap_addr, ep("10.0.0.9:1").address);
    ASSERT_EQ(out.completions.size(), 1u);
    const auto& r = out.completions[0].result;
    EXPECT_EQ(out.completions[0].id, id);
    EXPECT_EQ(r.kind, ResultKind::accepted);
    EXPECT_EQ(r.sdp, ep("10.0.0.9:7001"));
    EXPECT_EQ(r.pm_time, 120);
    EXPECT_EQ(r.lifetime.duration, 30s);
    EXPECT_FALSE(r.from_cache);
    EXPECT_EQ(r.attempts, 2u);
    EXPECT_EQ(r.rtt, 50ms);
    EXPECT_EQ(r.assoc_handle, req.assoc_handle);
    EXPECT_FALSE(out.timer.has_value());
    EXPECT_EQ(m.counters().pmack_sent, 1u);
}

TEST_F(MachineTest, DenyCompletesWithoutAck) {
    start(query());
    feed(pm::make_deny(sent_req()));
    EXPECT_TRUE(out.sends.empty()) << "7.4: no PMAck after PMDeny";
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::denied);
    // ApPort of a PMDeny is ignored whichever way the server fills it.
    start(query("10.0.0.1:7000", "10.0.0.2:40001"));
    feed(pm::make_deny(sent_req(), pm::DenyApPort::zero));
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::denied);
}

TEST_F(MachineTest, FirstReplyWinsAcceptThenDeny) {
    start(query());
    auto req = sent_req();
    feed(pm::make_accept(req, ep("10.0.0.1:7001"), 0));
    ASSERT_EQ(out.completions.size(), 1u);
    feed(pm::make_deny(req));
    EXPECT_TRUE(out.completions.empty());
    EXPECT_TRUE(out.sends.empty());
    EXPECT_EQ(m.counters().drop_duplicate, 1u);
    EXPECT_EQ(m.counters().accepted, 1u);
    EXPECT_EQ(m.counters().denied, 0u);
}

TEST_F(MachineTest, FirstReplyWinsDenyThenAccept) {
    start(query());
    auto req = sent_req();
    feed(pm::make_deny(req));
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::denied);
    feed(pm::make_accept(req, ep("10.0.0.1:7001"), 10));
    EXPECT_TRUE(out.completions.empty());
    EXPECT_TRUE(out.sends.empty()) << "a late PMAccept after PMDeny is not acknowledged";
    EXPECT_EQ(m.counters().drop_duplicate, 1u);
    EXPECT_EQ(m.cache().size(), 0u);
}

TEST_F(MachineTest, DuplicateAcceptIsReAckedBounded) {
    start(query());
    auto req = sent_req();
    auto acc = pm::make_accept(req, ep("10.0.0.1:7001"), 0);
    feed(acc);
    ASSERT_EQ(out.sends.size(), 1u);
    const auto ack = out.sends[0].bytes;
    for (unsigned i = 0; i < kMaxReacks; ++i) {
        feed(acc);
        ASSERT_EQ(out.sends.size(), 1u);
        EXPECT_EQ(out.sends[0].bytes, ack);
        EXPECT_TRUE(out.completions.empty());
    }
    feed(acc);
    EXPECT_TRUE(out.sends.empty()) << "re-acks are capped";
    EXPECT_EQ(m.counters().reacks, kMaxReacks);
    EXPECT_EQ(m.counters().drop_duplicate, kMaxReacks + 1);
}

TEST_F(MachineTest, DuplicateAcceptWithOtherMappingIsNotAcked) {
    start(query());
    auto req = sent_req();
    feed(pm::make_accept(req, ep("10.0.0.1:7001"), 0));
    feed(pm::make_accept(req, ep("10.0.0.1:7002"), 0));
    EXPECT_TRUE(out.sends.empty());
    EXPECT_EQ(m.counters().drop_duplicate, 1u);
}

TEST_F(MachineTest, WrongAssocHandleCpPortCpIpAddrAreDiscarded) {
    auto id = start(query());
    auto req = sent_req();
    auto acc = pm::make_accept(req, ep("10.0.0.1:7001"), 0);

    auto bad = acc;
    bad.assoc_handle ^= 1;
    feed(bad);
    EXPECT_EQ(m.counters().drop_unknown, 1u);

    bad = acc;
    bad.cp_port = 40001;
    feed(bad);
    bad = acc;
    bad.cp_addr = ep("10.0.0.3:1").address;
    feed(bad);
    bad = acc;  // same handle, IPv6 with the same leading bytes
    bad.ipv = pm::Family::v6;
    auto b6 = bad.cp_addr.bytes();
    bad.cp_addr = pm::IpAddress::v6(b6);
    bad.ap_addr = pm::IpAddress::v6(bad.ap_addr.bytes());
    feed(bad);
    EXPECT_EQ(m.counters().drop_tuple_mismatch, 3u);
    EXPECT_TRUE(out.completions.empty());
    EXPECT_TRUE(out.sends.empty());
    EXPECT_EQ(m.in_flight(), 1u);

    feed(acc);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].id, id);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::accepted);
}

TEST_F(MachineTest, ReplyFromOtherSourceIsDiscarded) {
    start(query());
    auto acc = pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 0);
    feed(acc, "10.0.0.66:3935");
    feed(acc, "10.0.0.1:3936");
    EXPECT_EQ(m.counters().drop_wrong_source, 2u);
    EXPECT_TRUE(out.completions.empty());
    feed(acc, "10.0.0.1:3935");
    EXPECT_EQ(out.completions.size(), 1u);
}

class LaxSourceTest : public MachineTest {
  protected:
    LaxSourceTest() : MachineTest(MachineConfig{.strict_source = false}) {}
};

TEST_F(LaxSourceTest, ReplyFromOtherSourceIsAcceptedAndAckedThere) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 0), "10.0.0.66:4000");
    ASSERT_EQ(out.completions.size(), 1u);
    ASSERT_EQ(out.sends.size(), 1u);
    EXPECT_EQ(out.sends[0].to, ep("10.0.0.66:4000"));
}

TEST_F(MachineTest, MalformedAndNonReplyDatagramsAreCounted) {
    start(query());
    auto req = sent_req();
    std::vector<std::uint8_t> shortb(47, 0);
    feed_bytes(shortb);
    std::vector<std::uint8_t> longb(49, 0x14);
    feed_bytes(longb);
    auto w = pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), 0));
    w[0] |= 0x40;  // Ver 1
    feed_bytes(w);
    w = pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), 0));
    w[0] = static_cast<std::uint8_t>((w[0] & 0xf0) | 0x5);  // IPV 5
    feed_bytes(w);
    feed_bytes({});
    EXPECT_EQ(m.counters().drop_malformed, 5u);
    feed(req);                // a PMReq echoed back
    feed(pm::make_ack(req));  // a PMAck
    EXPECT_EQ(m.counters().drop_not_reply, 2u);
    EXPECT_EQ(m.in_flight(), 1u);
    EXPECT_TRUE(out.completions.empty());
}

TEST_F(MachineTest, AcceptWithZeroPortOrNoAddressIsDroppedAndTransactionGoesOn) {
    start(query());
    auto req = sent_req();
    feed(pm::make_accept(req, ep("10.0.0.1:0"), 0));
    feed(pm::make_accept(req, ep("0.0.0.0:7001"), 0));
    EXPECT_EQ(m.counters().drop_invalid_accept, 2u);
    EXPECT_TRUE(out.sends.empty());
    EXPECT_EQ(m.in_flight(), 1u);
}

TEST_F(MachineTest, ReservedBitsAndIgnoredAddressBytesAreNotChecked) {
    start(query());
    auto w = pm::encode(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 0));
    w[2] = 0xff;  // Reserved (7.3.1.5)
    w[3] = 0xff;
    w[20] = 0x7e;  // CpIPAddr bytes 4..15 with IPV 4 (7.3.1.3)
    w[40] = 0x7e;
    feed_bytes(w);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::accepted);
}

TEST_F(MachineTest, InvalidInputCompletesAtOnceWithReason) {
    struct Case {
        Query q;
        const char* what;
    };
    std::vector<Case> cases;
    cases.push_back({query("10.0.0.1:0"), "ApPort"});
    cases.push_back({query("0.0.0.0:7000"), "ApIPAddr"});
    cases.push_back({query("10.0.0.1:7000", "10.0.0.2:0"), "CpPort"});
    cases.push_back({query("10.0.0.1:7000", "0.0.0.0:4000"), "CpIPAddr"});
    cases.push_back({query("10.0.0.1:7000", "[::1]:4000"), "IP version"});
    cases.push_back({query("10.0.0.1:7000", "10.0.0.2:4000", "10.0.0.1:0"), "PMSP"});
    auto q = query();
    q.options.backoff_factor = 0.5;
    cases.push_back({q, "backoff_factor"});
    q = query();
    q.options.deadline = 0ms;
    cases.push_back({q, "deadline"});
    q = query();
    q.options.max_retries = 1000;
    cases.push_back({q, "max_retries"});
    q = query();
    q.options.initial_timeout = 0ms;
    cases.push_back({q, "initial_timeout"});
    for (const auto& c : cases) {
        start(c.q);
        EXPECT_TRUE(out.sends.empty()) << c.what;
        ASSERT_EQ(out.completions.size(), 1u) << c.what;
        const auto& r = out.completions[0].result;
        EXPECT_EQ(r.kind, ResultKind::error) << c.what;
        EXPECT_EQ(r.error, Errc::invalid_argument) << c.what;
        EXPECT_NE(r.reason.find(c.what), std::string::npos) << r.reason;
    }
    EXPECT_EQ(m.in_flight(), 0u);
}

TEST_F(MachineTest, AssocHandleCollisionIsRehashed) {
    start(query(), 0ms, 42);
    auto h1 = sent_req().assoc_handle;
    start(query("10.0.0.1:7000", "10.0.0.2:40001"), 0ms, 42);
    auto h2 = sent_req().assoc_handle;
    EXPECT_EQ(h1, 42u);
    EXPECT_NE(h2, 42u);
    start(query("10.0.0.1:7000", "10.0.0.2:40002"), 0ms, 0);
    EXPECT_NE(sent_req().assoc_handle, 0u);
}

TEST_F(MachineTest, RecentHandlesAreNotReused) {
    start(query(), 0ms, 42);
    feed(pm::make_deny(sent_req()));
    start(query("10.0.0.1:7000", "10.0.0.2:40001"), 20ms, 42);
    EXPECT_NE(sent_req().assoc_handle, 42u);
}

TEST_F(MachineTest, LateReplyAfterLingerIsUnknown) {
    start(query());
    auto req = sent_req();
    auto acc = pm::make_accept(req, ep("10.0.0.1:7001"), 0);
    feed(acc, "10.0.0.1:3935", 10ms);
    EXPECT_EQ(m.completed_records(), 1u);
    feed(acc, "10.0.0.1:3935", 10ms + 10s);
    EXPECT_EQ(m.completed_records(), 0u);
    EXPECT_EQ(m.counters().drop_unknown, 1u);
    EXPECT_TRUE(out.sends.empty());
}

TEST_F(MachineTest, LateReplyAfterTimeoutIsDroppedNotAcked) {
    auto q = query();
    q.options.max_retries = 0;
    start(q);
    auto req = sent_req();
    tick(250ms);
    ASSERT_EQ(out.completions.size(), 1u);
    feed(pm::make_accept(req, ep("10.0.0.1:7001"), 0), "10.0.0.1:3935", 300ms);
    EXPECT_TRUE(out.sends.empty());
    EXPECT_TRUE(out.completions.empty());
    EXPECT_EQ(m.counters().drop_duplicate, 1u);
}

TEST_F(MachineTest, CancelCompletesWithCancelled) {
    auto a = start(query());
    auto b = start(query("10.0.0.1:7000", "10.0.0.2:40001"), 0ms, 99);
    out.clear();
    EXPECT_TRUE(m.cancel(a, T(1ms), out));
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].id, a);
    EXPECT_EQ(out.completions[0].result.error, Errc::cancelled);
    out.clear();
    EXPECT_FALSE(m.cancel(a, T(1ms), out));
    m.cancel_all(T(2ms), out);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].id, b);
    EXPECT_EQ(m.in_flight(), 0u);
    EXPECT_FALSE(out.timer.has_value());
}

class SmallMachineTest : public MachineTest {
  protected:
    SmallMachineTest() : MachineTest(MachineConfig{.max_in_flight = 2}) {}
};

TEST_F(SmallMachineTest, MaxInFlightGivesBusy) {
    start(query("10.0.0.1:7000", "10.0.0.2:1"), 0ms, 1);
    start(query("10.0.0.1:7000", "10.0.0.2:2"), 0ms, 2);
    start(query("10.0.0.1:7000", "10.0.0.2:3"), 0ms, 3);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.error, Errc::busy);
    EXPECT_TRUE(out.sends.empty());
}

TEST_F(MachineTest, ManyConcurrentTransactionsAreDemultiplexedByHandle) {
    std::vector<std::pair<TxnId, pm::Message>> txns;
    for (std::uint16_t i = 1; i <= 50; ++i) {
        auto q = query();
        q.cp.port = static_cast<std::uint16_t>(40000 + i);
        auto id = start(q, 0ms, 1000 + i);
        txns.emplace_back(id, sent_req());
    }
    // Answer in reverse order, each with its own SDP port.
    for (auto it = txns.rbegin(); it != txns.rend(); ++it) {
        auto port = static_cast<std::uint16_t>(it->second.cp_port - 40000 + 7000);
        feed(pm::make_accept(it->second, pm::Endpoint{it->second.ap_addr, port}, 0));
        ASSERT_EQ(out.completions.size(), 1u);
        EXPECT_EQ(out.completions[0].id, it->first);
        EXPECT_EQ(out.completions[0].result.sdp.port, port);
    }
    EXPECT_EQ(m.in_flight(), 0u);
}

TEST_F(MachineTest, Ipv6AndMappedAddresses) {
    start(query("[2001:db8::1]:7000", "[2001:db8::2]:40000", "[2001:db8::1]:3935"));
    auto req = sent_req();
    EXPECT_EQ(req.ipv, pm::Family::v6);
    feed(pm::make_accept(req, ep("[2001:db8::9]:7001"), 255), "[2001:db8::1]:3935");
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.sdp, ep("[2001:db8::9]:7001"));
    // A v4-mapped CpIPAddr with an IPv4 ApIPAddr is IPv4.
    start(query("10.0.0.1:7000", "[::ffff:10.0.0.2]:40000"));
    EXPECT_EQ(sent_req().ipv, pm::Family::v4);
    // A reply arriving on a dual-stack socket as ::ffff:a.b.c.d matches.
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 0), "[::ffff:10.0.0.1]:3935");
    EXPECT_EQ(out.completions.size(), 1u);
}

TEST_F(MachineTest, HostileDatagramsNeverDisturbOtherTransactions) {
    auto id = start(query());
    auto req = sent_req();
    std::mt19937_64 rng(7);
    auto acc = pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), 0));
    for (int i = 0; i < 20000; ++i) {
        std::vector<std::uint8_t> b(rng() % 70);
        for (auto& x : b) {
            x = static_cast<std::uint8_t>(rng());
        }
        if (i % 3 == 0 && b.size() >= 48) {  // valid-looking reply, random fields
            b.resize(48);
            b[0] = static_cast<std::uint8_t>(0x10 | ((rng() & 1) ? 0x20 : 0) | 4);
        }
        if (i % 5 == 0) {  // the right handle, something else wrong
            b = std::vector<std::uint8_t>(acc.begin(), acc.end());
            b[6 + rng() % 2] ^= static_cast<std::uint8_t>(1 + rng() % 255);
        }
        feed_bytes(b);
        ASSERT_TRUE(out.completions.empty()) << i;
        ASSERT_TRUE(out.sends.empty()) << i;
    }
    const auto& c = m.counters();
    EXPECT_EQ(c.datagrams, c.drop_malformed + c.drop_not_reply + c.drop_unknown +
                               c.drop_tuple_mismatch + c.drop_wrong_source + c.drop_duplicate +
                               c.drop_invalid_accept);
    feed_bytes(acc);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].id, id);
}

// --- cache through the machine ----------------------------------------------

TEST_F(MachineTest, CacheHitSendsNothing) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 4), "10.0.0.1:3935", 100ms);
    start(query("10.0.0.1:7000", "10.0.0.2:40001"), 200ms);
    EXPECT_TRUE(out.sends.empty());
    ASSERT_EQ(out.completions.size(), 1u);
    const auto& r = out.completions[0].result;
    EXPECT_EQ(r.kind, ResultKind::accepted);
    EXPECT_TRUE(r.from_cache);
    EXPECT_EQ(r.attempts, 0u);
    EXPECT_EQ(r.sdp, ep("10.0.0.1:7001"));
    EXPECT_EQ(r.pm_time, 4);
    EXPECT_EQ(m.counters().cache_hits, 1u);
}

TEST_F(MachineTest, CacheExpiresPerPmTimeBand) {
    struct Band {
        std::uint8_t pm_time;
        std::chrono::milliseconds life;
    };
    // 1..127 x 250 ms, 128..254 x 1 s (7.3.1.4)
    for (Band b :
         {Band{1, 250ms}, Band{4, 1s}, Band{127, 31750ms}, Band{128, 128s}, Band{254, 254s}}) {
        Machine mm;
        Actions a;
        auto q = query();
        mm.start(q, T(0ms), 5, a);
        auto req = decode_ok(a.sends.at(0).bytes);
        a.clear();
        mm.on_datagram(pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), b.pm_time)), q.pmsp,
                       T(10ms), a);
        ASSERT_EQ(a.completions.size(), 1u);
        a.clear();
        q.cp.port = 40001;
        mm.start(q, T(10ms) + b.life - 1ms, 6, a);
        ASSERT_EQ(a.completions.size(), 1u) << int(b.pm_time);
        EXPECT_TRUE(a.completions[0].result.from_cache) << int(b.pm_time);
        a.clear();
        mm.start(q, T(10ms) + b.life, 7, a);
        EXPECT_TRUE(a.completions.empty()) << int(b.pm_time);
        EXPECT_EQ(a.sends.size(), 1u) << "expired entry means a new PMReq (7.3.1.4)";
    }
}

TEST_F(MachineTest, PermanentEntryStaysUntilFlushed) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 255));
    start(query(), 0ms + std::chrono::hours(24 * 365));
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_TRUE(out.completions[0].result.from_cache);
    m.flush_cache();
    start(query(), 1ms + std::chrono::hours(24 * 365));
    EXPECT_EQ(out.sends.size(), 1u);
}

TEST_F(MachineTest, SingleUseIsNeverCached) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 0));
    EXPECT_EQ(m.cache().size(), 0u);
    start(query("10.0.0.1:7000", "10.0.0.2:40001"), 20ms);
    EXPECT_EQ(out.sends.size(), 1u);
    EXPECT_TRUE(out.completions.empty());
}

TEST_F(MachineTest, CacheKeyIncludesPmspAndCpIpAddrButNotCpPort) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 100));
    start(query("10.0.0.1:7000", "10.0.0.2:1"), 20ms);
    EXPECT_EQ(out.completions.size(), 1u) << "other CpPort: hit";
    start(query("10.0.0.1:7000", "10.0.0.3:40000"), 20ms);
    EXPECT_EQ(out.sends.size(), 1u) << "other CpIPAddr: miss";
    start(query("10.0.0.1:7000", "10.0.0.2:40000", "10.0.0.5:3935"), 20ms);
    EXPECT_EQ(out.sends.size(), 1u) << "other PMSP: miss";
    start(query("10.0.0.1:7001", "10.0.0.2:40000"), 20ms);
    EXPECT_EQ(out.sends.size(), 1u) << "other ApPort: miss";
}

TEST_F(MachineTest, UseCacheFalseBypassesAndDenyErases) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 100));
    auto q = query("10.0.0.1:7000", "10.0.0.2:40001");
    q.options.use_cache = false;
    start(q, 20ms);
    EXPECT_EQ(out.sends.size(), 1u);
    // A deny for a cache-using request removes the stale entry.
    m.flush_cache();
    start(query(), 30ms);
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 100), "10.0.0.1:3935", 40ms);
    EXPECT_EQ(m.cache().size(), 1u);
    q = query("10.0.0.1:7000", "10.0.0.2:40002");
    q.options.use_cache = false;
    start(q, 50ms);
    EXPECT_EQ(m.cache().size(), 1u) << "use_cache=false neither reads nor writes";
    EXPECT_EQ(m.flush_cache(ep("10.0.0.1:7000")), 1u);
    EXPECT_EQ(m.cache().size(), 0u);
}

class TinyCacheTest : public MachineTest {
  protected:
    TinyCacheTest() : MachineTest(MachineConfig{.cache_capacity = 2}) {}
    void learn(const char* conventional, std::uint16_t sdp_port, std::chrono::milliseconds at) {
        start(query(conventional), at, static_cast<std::uint64_t>(at.count()) + 1000);
        auto req = sent_req();
        feed(pm::make_accept(req, pm::Endpoint{req.ap_addr, sdp_port}, 255), "10.0.0.1:3935", at);
    }
};

TEST_F(TinyCacheTest, LruBound) {
    learn("10.0.0.1:1", 7001, 1ms);
    learn("10.0.0.1:2", 7002, 2ms);
    start(query("10.0.0.1:1"), 3ms);  // touch 1: 2 becomes least recent
    EXPECT_TRUE(out.sends.empty());
    learn("10.0.0.1:3", 7003, 4ms);
    EXPECT_EQ(m.cache().size(), 2u);
    EXPECT_EQ(m.cache().evictions(), 1u);
    start(query("10.0.0.1:2"), 5ms);
    EXPECT_EQ(out.sends.size(), 1u) << "evicted";
    start(query("10.0.0.1:1"), 5ms);
    EXPECT_TRUE(out.sends.empty());
    start(query("10.0.0.1:3"), 5ms);
    EXPECT_TRUE(out.sends.empty());
}

class NoCacheTest : public MachineTest {
  protected:
    NoCacheTest() : MachineTest(MachineConfig{.cache_capacity = 0}) {}
};

TEST_F(NoCacheTest, CapacityZeroDisablesCache) {
    start(query());
    feed(pm::make_accept(sent_req(), ep("10.0.0.1:7001"), 255));
    EXPECT_EQ(m.cache().size(), 0u);
}

// Two machines (the Resolver's and a blocking caller's, say) on one
// SharedCache: what one learns the other answers from, a PMDeny seen by one
// erases it for both, and each keeps its own transactions and counters.
TEST(SharedCacheTest, MachinesShareOneCache) {
    auto cache = std::make_shared<SharedCache>(16);
    Machine a(MachineConfig{}, cache);
    Machine b(MachineConfig{.cache_capacity = 0}, cache);  // capacity comes from the shared cache
    EXPECT_EQ(&a.cache(), &b.cache());
    Actions out;
    a.start(query(), T(0ms), 1, out);
    auto req = decode_ok(out.sends.at(0).bytes);
    out.clear();
    a.on_datagram(pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), 120)), ep("10.0.0.1:3935"),
                  T(1ms), out);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(cache->size(), 1u);

    out.clear();
    b.start(query("10.0.0.1:7000", "10.0.0.2:40001"), T(2ms), 2, out);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_TRUE(out.sends.empty());
    EXPECT_TRUE(out.completions[0].result.from_cache);
    EXPECT_EQ(out.completions[0].result.sdp, ep("10.0.0.1:7001"));
    EXPECT_EQ(b.counters().cache_hits, 1u);
    EXPECT_EQ(a.counters().cache_hits, 0u);

    // A reply to a's transaction means nothing to b.
    out.clear();
    b.on_datagram(pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), 120)), ep("10.0.0.1:3935"),
                  T(3ms), out);
    EXPECT_EQ(b.counters().drop_unknown, 1u);

    // b asks while the cache is empty; a learns the answer meanwhile; then
    // b is denied: the newest word (PMDeny) removes the shared entry.
    b.flush_cache();
    EXPECT_EQ(cache->size(), 0u);
    out.clear();
    b.start(query("10.0.0.1:7000", "10.0.0.2:40002"), T(4ms), 4, out);
    ASSERT_EQ(out.sends.size(), 1u);
    auto breq = decode_ok(out.sends.at(0).bytes);
    out.clear();
    a.start(query(), T(5ms), 5, out);
    req = decode_ok(out.sends.at(0).bytes);
    out.clear();
    a.on_datagram(pm::encode(pm::make_accept(req, ep("10.0.0.1:7001"), 120)), ep("10.0.0.1:3935"),
                  T(6ms), out);
    EXPECT_EQ(cache->size(), 1u);
    out.clear();
    b.on_datagram(pm::encode(pm::make_deny(breq)), ep("10.0.0.1:3935"), T(7ms), out);
    ASSERT_EQ(out.completions.size(), 1u);
    EXPECT_EQ(out.completions[0].result.kind, ResultKind::denied);
    EXPECT_EQ(cache->size(), 0u);
    EXPECT_EQ(a.in_flight() + b.in_flight(), 0u);
}

TEST(MachineConfigTest, Validate) {
    EXPECT_EQ(validate(MachineConfig{}), "");
    EXPECT_NE(validate(MachineConfig{.max_in_flight = 0}), "");
    EXPECT_NE(validate(MachineConfig{.completed_linger = std::chrono::hours(1)}), "");
}

}  // namespace
}  // namespace pmclient::test
