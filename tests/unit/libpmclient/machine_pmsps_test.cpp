// SPDX-License-Identifier: Apache-2.0
// The PM client machine with a list of PMSPs (replicas): per-PMSP 7.5.1
// schedule, deadline slices, fresh AssocHandle on failover, skipping of
// failing PMSPs. Fake clock, no sockets.
#include "test_util.hpp"

namespace pmclient::test {
namespace {

constexpr const char* kA = "10.0.0.1:3935";
constexpr const char* kB = "10.0.0.3:3935";
constexpr const char* kC = "[fd00::1]:3935";

struct Sent {
    std::chrono::milliseconds at;
    pm::Endpoint to;
    std::uint64_t handle;
    bool operator==(const Sent&) const = default;
};

class PmspListTest : public ::testing::Test {
  protected:
    explicit PmspListTest(MachineConfig c = {}) : m(c) {}

    static Query list_query(std::vector<const char*> pmsps) {
        Query q = query();
        q.pmsps.clear();
        for (const char* p : pmsps) {
            q.pmsps.push_back(ep(p));
        }
        q.options.use_cache = false;
        return q;
    }
    TxnId start(const Query& q, std::chrono::milliseconds at = 0ms, std::uint64_t rnd = 0x1234) {
        out.clear();
        TxnId id = m.start(q, T(at), rnd, out);
        record(at);
        return id;
    }
    void record(std::chrono::milliseconds at) {
        for (const auto& s : out.sends) {
            auto msg = decode_ok(s.bytes);
            if (msg.type == pm::MessageType::request) {
                sent.push_back({at, s.to, msg.assoc_handle});
            }
        }
        for (auto& c : out.completions) {
            done.push_back(c.result);
            done_at.push_back(at);
        }
    }
    // Ticks millisecond by millisecond from `from` to `to` (inclusive) while
    // something is in flight.
    void run(std::chrono::milliseconds from, std::chrono::milliseconds to) {
        for (auto t = from; t <= to && m.in_flight() > 0; t += 1ms) {
            out.clear();
            m.on_timer(T(t), out);
            record(t);
        }
    }
    void feed(const pm::Message& msg, const char* from, std::chrono::milliseconds at) {
        out.clear();
        m.on_datagram(pm::encode(msg), ep(from), T(at), out);
        record(at);
    }
    pm::Message req_with(std::uint64_t handle) {
        pm::Message r;
        r.type = pm::MessageType::request;
        r.ipv = pm::Family::v4;
        r.ap_port = 7000;
        r.cp_port = 40000;
        r.ap_addr = ep("10.0.0.1:1").address;
        r.cp_addr = ep("10.0.0.2:1").address;
        r.assoc_handle = handle;
        return r;
    }
    pm::Message accept_for(std::uint64_t handle) {
        return pm::make_accept(req_with(handle), ep("10.0.0.9:7001"), 120);
    }
    pm::Message deny_for(std::uint64_t handle) { return pm::make_deny(req_with(handle)); }
    std::vector<std::chrono::milliseconds> times_to(const char* to) const {
        std::vector<std::chrono::milliseconds> v;
        for (const auto& s : sent) {
            if (s.to == ep(to)) {
                v.push_back(s.at);
            }
        }
        return v;
    }

    // Three resolutions of q (list {A, B}) 2 s apart from 0 ms: A silent, B
    // answers after the failover. Returns when the next one may start (6 s).
    std::chrono::milliseconds first_fails_three_times(const Query& q) {
        std::chrono::milliseconds t0 = 0ms;
        for (int i = 0; i < 3; ++i) {
            sent.clear();
            start(q, t0, 0x1000 + static_cast<std::uint64_t>(i));
            run(t0 + 1ms, t0 + 1500ms);
            EXPECT_EQ(sent.back().to, ep(kB)) << i;
            feed(accept_for(sent.back().handle), kB, t0 + 1510ms);
            t0 += 2000ms;
        }
        return t0;
    }

    Machine m;
    Actions out;
    std::vector<Sent> sent;
    std::vector<Result> done;
    std::vector<std::chrono::milliseconds> done_at;
};

TEST_F(PmspListTest, FirstSilentFailsOverToSecondWithinDeadline) {
    start(list_query({kA, kB}));
    run(1ms, 1700ms);
    // A: its 7.5.1 schedule cut by its slice (3000 / 2 = 1500 ms); B from 1500.
    EXPECT_EQ(times_to(kA), (std::vector<std::chrono::milliseconds>{0ms, 250ms, 750ms}));
    EXPECT_EQ(times_to(kB), (std::vector<std::chrono::milliseconds>{1500ms}));
    ASSERT_EQ(sent.size(), 4u);
    const std::uint64_t h1 = sent[0].handle;
    const std::uint64_t h2 = sent[3].handle;
    EXPECT_EQ(h1, 0x1234u);
    EXPECT_EQ(sent[1].handle, h1);
    EXPECT_EQ(sent[2].handle, h1);
    EXPECT_NE(h2, h1) << "a failover sends a fresh PMReq with a new AssocHandle";
    EXPECT_EQ(m.counters().pmsp_failovers, 1u);
    EXPECT_TRUE(done.empty());

    feed(accept_for(h2), kB, 1600ms);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].kind, ResultKind::accepted);
    EXPECT_EQ(done[0].pmsp, ep(kB));
    EXPECT_EQ(done[0].assoc_handle, h2);
    EXPECT_EQ(done[0].attempts, 4u);
    EXPECT_EQ(done[0].pmsps_tried, 2u);
    EXPECT_EQ(done[0].rtt, std::chrono::microseconds(100'000));
    ASSERT_EQ(out.sends.size(), 1u);  // the PMAck, to B
    EXPECT_EQ(out.sends[0].to, ep(kB));
    EXPECT_EQ(decode_ok(out.sends[0].bytes).type, pm::MessageType::ack);
    EXPECT_EQ(m.in_flight(), 0u);
    EXPECT_FALSE(m.next_wakeup());
}

TEST_F(PmspListTest, LateAcceptFromFirstAfterCompletionIsAckedAsDuplicate) {
    start(list_query({kA, kB}));
    run(1ms, 1500ms);
    const std::uint64_t h1 = sent.front().handle;
    const std::uint64_t h2 = sent.back().handle;
    feed(accept_for(h2), kB, 1600ms);
    ASSERT_EQ(done.size(), 1u);
    // A answers its (superseded) PMReq late: a duplicate; acked so that A
    // releases its state.
    feed(accept_for(h1), kA, 1700ms);
    EXPECT_EQ(done.size(), 1u);
    EXPECT_EQ(m.counters().drop_duplicate, 1u);
    ASSERT_EQ(out.sends.size(), 1u);
    EXPECT_EQ(out.sends[0].to, ep(kA));
    EXPECT_EQ(decode_ok(out.sends[0].bytes), pm::make_ack(accept_for(h1)));
    EXPECT_EQ(m.counters().reacks, 1u);
    // A late PMDeny for it is only counted.
    feed(deny_for(h1), kA, 1800ms);
    EXPECT_TRUE(out.sends.empty());
    EXPECT_EQ(m.counters().drop_duplicate, 2u);
}

TEST_F(PmspListTest, ReplyToOldHandleWhileOpenWins) {
    start(list_query({kA, kB}));
    run(1ms, 1500ms);
    const std::uint64_t h1 = sent.front().handle;
    const std::uint64_t h2 = sent.back().handle;
    // A was only slow: its PMAccept for h1 arrives during B's turn. First
    // reply wins; the replicas share one registry.
    feed(accept_for(h1), kA, 1550ms);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].kind, ResultKind::accepted);
    EXPECT_EQ(done[0].pmsp, ep(kA));
    EXPECT_EQ(done[0].assoc_handle, h1);
    EXPECT_EQ(done[0].rtt, std::chrono::microseconds(800'000));  // since the send at 750
    EXPECT_EQ(m.pmsp_failures(ep(kA)), 0u) << "a reply clears A's failure";
    // B answers h2 afterwards: a duplicate of a handle that did not win but
    // was the last one asked: counted, not acked (as for a single PMSP).
    feed(accept_for(h2), kB, 1600ms);
    EXPECT_EQ(m.counters().drop_duplicate, 1u);
    EXPECT_TRUE(out.sends.empty());
}

TEST_F(PmspListTest, StrictSourceIsPerHandle) {
    start(list_query({kA, kB}));
    run(1ms, 1500ms);
    const std::uint64_t h1 = sent.front().handle;
    const std::uint64_t h2 = sent.back().handle;
    feed(accept_for(h1), kB, 1510ms);  // h1 went to A, not B
    feed(accept_for(h2), kA, 1520ms);  // h2 went to B, not A
    EXPECT_TRUE(done.empty());
    EXPECT_EQ(m.counters().drop_wrong_source, 2u);
    feed(accept_for(h2), kB, 1530ms);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].pmsp, ep(kB));
}

TEST_F(PmspListTest, DenyIsAnAnswerNoFailover) {
    start(list_query({kA, kB}));
    feed(deny_for(sent.front().handle), kA, 100ms);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].kind, ResultKind::denied);
    EXPECT_EQ(done[0].pmsp, ep(kA));
    EXPECT_EQ(done[0].pmsps_tried, 1u);
    run(101ms, 3000ms);
    EXPECT_EQ(sent.size(), 1u);
    EXPECT_TRUE(times_to(kB).empty());
    EXPECT_EQ(m.counters().pmsp_failovers, 0u);
}

TEST_F(PmspListTest, AllSilentTimeOutAtDeadlineWithEveryAttemptCounted) {
    start(list_query({kA, kB, kC}));
    run(1ms, 3500ms);
    EXPECT_EQ(times_to(kA), (std::vector<std::chrono::milliseconds>{0ms, 250ms, 750ms}));
    EXPECT_EQ(times_to(kB), (std::vector<std::chrono::milliseconds>{1000ms, 1250ms, 1750ms}));
    EXPECT_EQ(times_to(kC), (std::vector<std::chrono::milliseconds>{2000ms, 2250ms, 2750ms}));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done_at[0], 3000ms);
    EXPECT_EQ(done[0].kind, ResultKind::timeout);
    EXPECT_EQ(done[0].attempts, 9u);
    EXPECT_EQ(done[0].pmsps_tried, 3u);
    EXPECT_EQ(done[0].pmsp, ep(kC));
    EXPECT_NE(done[0].reason.find("(deadline)"), std::string::npos) << done[0].reason;
    EXPECT_EQ(m.counters().pmsp_failovers, 2u);
    EXPECT_EQ(m.counters().timeouts, 1u);
    EXPECT_EQ(m.counters().pmreq_sent, 9u);
    EXPECT_EQ(m.counters().retransmissions, 6u);
    // Three distinct handles.
    EXPECT_NE(sent[0].handle, sent[3].handle);
    EXPECT_NE(sent[3].handle, sent[6].handle);
    EXPECT_NE(sent[0].handle, sent[6].handle);
}

TEST_F(PmspListTest, ExhaustedScheduleFailsOverBeforeSliceEnds) {
    auto q = list_query({kA, kB});
    q.options.max_retries = 1;
    q.options.initial_timeout = 100ms;
    start(q);
    run(1ms, 3000ms);
    // A: 0, 100; schedule over at 300 (< slice 1500). B: 300, 400; over at 600.
    EXPECT_EQ(times_to(kA), (std::vector<std::chrono::milliseconds>{0ms, 100ms}));
    EXPECT_EQ(times_to(kB), (std::vector<std::chrono::milliseconds>{300ms, 400ms}));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done_at[0], 600ms);
    EXPECT_EQ(done[0].kind, ResultKind::timeout);
    EXPECT_EQ(done[0].reason.find("(deadline)"), std::string::npos);
}

TEST_F(PmspListTest, PerPmspTimeoutCapsEachTurn) {
    auto q = list_query({kA, kB});
    q.options.per_pmsp_timeout = 400ms;
    start(q);
    run(1ms, 3000ms);
    EXPECT_EQ(times_to(kA), (std::vector<std::chrono::milliseconds>{0ms, 250ms}));
    EXPECT_EQ(times_to(kB), (std::vector<std::chrono::milliseconds>{400ms, 650ms}));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done_at[0], 800ms);
}

TEST_F(PmspListTest, SingleEntryListBehavesAsSinglePmsp) {
    start(list_query({kA}));
    run(1ms, 3500ms);
    EXPECT_EQ(times_to(kA), (std::vector<std::chrono::milliseconds>{0ms, 250ms, 750ms, 1750ms}));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done_at[0], 3000ms);
    EXPECT_EQ(done[0].attempts, 4u);
    EXPECT_EQ(done[0].pmsps_tried, 1u);
    EXPECT_EQ(m.counters().pmsp_failovers, 0u);
}

TEST_F(PmspListTest, FailingPmspIsSkippedThenRetriedAfterThePeriod) {
    auto q = list_query({kA, kB});
    // Three resolutions: A silent, B answers after the failover.
    std::chrono::milliseconds t0 = first_fails_three_times(q);
    EXPECT_EQ(m.pmsp_failures(ep(kA)), 3u);
    EXPECT_TRUE(m.pmsp_skipped(ep(kA), T(t0)));
    // Skipped: B is asked first (A would come last, in its own slice).
    sent.clear();
    start(q, t0, 0x2000);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].to, ep(kB));
    EXPECT_EQ(m.counters().pmsp_skipped, 1u);
    run(t0 + 1ms, t0 + 1400ms);
    EXPECT_EQ(times_to(kB), (std::vector<std::chrono::milliseconds>{t0, t0 + 250ms, t0 + 750ms}));
    EXPECT_TRUE(times_to(kA).empty());
    feed(accept_for(sent.back().handle), kB, t0 + 1400ms);
    ASSERT_EQ(done.back().pmsp, ep(kB));
    // 30 s after A's last failure (at 4000 + 1500 ms) it is asked first again.
    const auto later = 5500ms + 30s;
    EXPECT_TRUE(m.pmsp_skipped(ep(kA), T(later - 1ms)));
    EXPECT_FALSE(m.pmsp_skipped(ep(kA), T(later)));
    sent.clear();
    start(q, later, 0x3000);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].to, ep(kA));
    // It fails again: skipped again at once.
    run(later + 1ms, later + 1500ms);
    EXPECT_TRUE(m.pmsp_skipped(ep(kA), T(later + 1500ms)));
    EXPECT_EQ(m.pmsp_failures(ep(kA)), 4u);
}

TEST_F(PmspListTest, SkippedPmspIsAskedLastInItsOwnSlice) {
    auto q = list_query({kA, kB});
    // A fails three times (B answers each time after the failover).
    std::chrono::milliseconds t0 = first_fails_three_times(q);
    // Now B is silent too: B first, then A in the second half.
    sent.clear();
    done.clear();
    start(q, t0, 0x2000);
    run(t0 + 1ms, t0 + 3000ms);
    EXPECT_EQ(times_to(kB), (std::vector<std::chrono::milliseconds>{t0, t0 + 250ms, t0 + 750ms}));
    EXPECT_EQ(times_to(kA),
              (std::vector<std::chrono::milliseconds>{t0 + 1500ms, t0 + 1750ms, t0 + 2250ms}));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].kind, ResultKind::timeout);
    EXPECT_EQ(done[0].pmsps_tried, 2u);
}

TEST_F(PmspListTest, AllSkippedKeepListOrder) {
    auto q = list_query({kA, kB});
    // Make both fail three times (no answers at all).
    std::chrono::milliseconds t0 = 0ms;
    for (int i = 0; i < 3; ++i) {
        start(q, t0, 0x1000 + i);
        run(t0 + 1ms, t0 + 3000ms);
        t0 += 4000ms;
    }
    EXPECT_TRUE(m.pmsp_skipped(ep(kA), T(t0)));
    EXPECT_TRUE(m.pmsp_skipped(ep(kB), T(t0)));
    // Both skipped: list order, the deadline shared as usual.
    sent.clear();
    start(q, t0, 0x2000);
    run(t0 + 1ms, t0 + 3000ms);
    EXPECT_EQ(times_to(kA), (std::vector<std::chrono::milliseconds>{t0, t0 + 250ms, t0 + 750ms}));
    EXPECT_EQ(times_to(kB),
              (std::vector<std::chrono::milliseconds>{t0 + 1500ms, t0 + 1750ms, t0 + 2250ms}));
}

TEST_F(PmspListTest, SinglePmspIsNeverSkipped) {
    auto q = list_query({kA});
    for (int i = 0; i < 5; ++i) {
        sent.clear();
        start(q, std::chrono::milliseconds(i * 4000), 0x1000 + i);
        ASSERT_EQ(sent.size(), 1u);
        EXPECT_EQ(sent[0].to, ep(kA));
        run(std::chrono::milliseconds(i * 4000 + 1), std::chrono::milliseconds(i * 4000 + 3000));
    }
    EXPECT_EQ(m.counters().pmsp_skipped, 0u);
    EXPECT_EQ(m.counters().timeouts, 5u);
}

TEST_F(PmspListTest, InvalidListsAreErrorsNamingTheEntry) {
    auto q = list_query({kA, "10.0.0.4:0"});
    start(q);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].error, Errc::invalid_argument);
    EXPECT_NE(done[0].reason.find("10.0.0.4:0"), std::string::npos) << done[0].reason;
    EXPECT_TRUE(sent.empty());

    done.clear();
    start(list_query({kA, kB, kA}));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_NE(done[0].reason.find("twice"), std::string::npos) << done[0].reason;

    done.clear();
    Query big = list_query({});
    for (int i = 1; i <= 17; ++i) {
        big.pmsps.push_back(ep(("10.1.0." + std::to_string(i) + ":3935").c_str()));
    }
    start(big);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].error, Errc::invalid_argument);
    EXPECT_NE(done[0].reason.find("16"), std::string::npos) << done[0].reason;
    EXPECT_TRUE(sent.empty());
}

TEST_F(PmspListTest, CacheKeyIsTheSetOfPmsps) {
    auto q = list_query({kA, kB});
    q.options.use_cache = true;
    start(q);
    feed(accept_for(sent.front().handle), kA, 10ms);
    ASSERT_EQ(done.size(), 1u);
    // The same set in another order: answered from the cache.
    auto q2 = list_query({kB, kA});
    q2.options.use_cache = true;
    start(q2, 20ms, 0x5555);
    ASSERT_EQ(done.size(), 2u);
    EXPECT_TRUE(done[1].from_cache);
    // Another list (or A alone): not.
    auto q3 = list_query({kA});
    q3.options.use_cache = true;
    start(q3, 30ms, 0x6666);
    EXPECT_EQ(done.size(), 2u);
    EXPECT_EQ(m.in_flight(), 1u);
}

TEST_F(PmspListTest, MixedFamiliesAreReported) {
    auto q = list_query({kA, kC, kB});
    EXPECT_EQ(pmsp_families(q), (std::vector<pm::Family>{pm::Family::v4, pm::Family::v6}));
    EXPECT_EQ(pmsps_of(query()), (std::vector<pm::Endpoint>{ep(kA)}));
}

}  // namespace
}  // namespace pmclient::test
