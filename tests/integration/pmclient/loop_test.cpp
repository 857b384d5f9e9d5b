// SPDX-License-Identifier: Apache-2.0
// The loop-driven C API (pmc_resolve_start, pmc_fds, pmc_timeout_ms,
// pmc_process*, pmc_resolve_cancel) driven from a poll(2) loop against the
// fake PMSP: accept, loss, deny, timeout, deadline, cache hits, errors,
// cancel, and freeing the resolver with resolutions pending.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "fake_pmsp.hpp"
#include "pmclient/pmclient.h"

namespace {

using namespace pmtest;
using Clock = std::chrono::steady_clock;

struct Outcome {
    uint64_t id = 0;
    int status = 1000;
    pmc_result result{};
};

// Collects every callback; `outcomes` grows in delivery order.
struct Sink {
    std::vector<Outcome> outcomes;
    bool inside_start = false;  // set around pmc_resolve_start
    bool called_inside_start = false;

    static void cb(void* arg, uint64_t id, int status, const pmc_result* r) {
        auto* s = static_cast<Sink*>(arg);
        s->called_inside_start = s->called_inside_start || s->inside_start;
        Outcome o;
        o.id = id;
        o.status = status;
        EXPECT_EQ(r->size, sizeof(pmc_result));
        std::memcpy(&o.result, r, sizeof o.result);
        s->outcomes.push_back(o);
    }
};

struct Loop {
    pmc_resolver* r = nullptr;
    std::string pmsp;
    Sink sink;

    explicit Loop(const pm::Endpoint& e, unsigned retries = 10, uint32_t deadline_ms = 20000,
                  uint32_t initial_ms = 30) {
        pmsp = e.to_string();
        pmc_options o;
        pmc_options_init(&o);
        o.pmsp = pmsp.c_str();
        o.initial_timeout_ms = initial_ms;
        o.max_retries = retries;
        o.deadline_ms = deadline_ms;
        o.read_environment = 0;
        EXPECT_EQ(pmc_resolver_new(&o, &r), PMC_OK);
    }
    ~Loop() { pmc_resolver_free(r); }

    uint64_t start(const char* ap_ip, uint16_t ap_port, uint16_t cp_port,
                   const char* cp_ip = "127.0.0.1") {
        uint64_t id = 0;
        sink.inside_start = true;
        EXPECT_EQ(pmc_resolve_start(r, ap_ip, ap_port, cp_ip, cp_port, &Sink::cb, &sink, &id),
                  PMC_OK);
        sink.inside_start = false;
        EXPECT_NE(id, 0u);
        return id;
    }

    // The caller's loop: poll the resolver's sockets (and `extra`) with its
    // timeout, then process, until nothing is pending or `limit` passed.
    void run(std::chrono::milliseconds limit = 10s, int extra = -1) {
        const auto end = Clock::now() + limit;
        while (pmc_pending(r) > 0 && Clock::now() < end) {
            pollfd fds[PMC_MAX_FDS + 1];
            int n = pmc_fds(r, fds, PMC_MAX_FDS);
            ASSERT_GE(n, 0);
            ASSERT_LE(n, PMC_MAX_FDS);
            if (extra >= 0) {
                fds[n++] = pollfd{extra, POLLIN, 0};
            }
            int t = pmc_timeout_ms(r);
            ASSERT_GE(t, 0) << "resolutions pending but no timeout";
            ::poll(fds, static_cast<nfds_t>(n), t > 200 ? 200 : t);
            ASSERT_EQ(pmc_process(r, fds, static_cast<size_t>(n)), PMC_OK);
        }
        EXPECT_EQ(pmc_pending(r), 0u);
    }
};

TEST(LoopApiTest, AcceptThenCacheHitWithoutIo) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 120));
    Loop l(pmsp.endpoint(), 10, 20000, 2000);  // no retransmission on a slow machine
    EXPECT_EQ(pmc_fds(l.r, nullptr, 0), 0) << "no socket before the first resolution";
    EXPECT_EQ(pmc_timeout_ms(l.r), -1);
    const uint64_t id = l.start("127.0.0.1", 7000, 40000);
    EXPECT_EQ(pmc_pending(l.r), 1u);
    pollfd fds[PMC_MAX_FDS];
    EXPECT_EQ(pmc_fds(l.r, fds, PMC_MAX_FDS), 1);
    EXPECT_EQ(fds[0].events, POLLIN);
    EXPECT_GT(pmc_timeout_ms(l.r), 0);
    l.run();
    ASSERT_EQ(l.sink.outcomes.size(), 1u);
    const Outcome& o = l.sink.outcomes[0];
    EXPECT_EQ(o.id, id);
    ASSERT_EQ(o.status, PMC_OK) << o.result.reason;
    EXPECT_EQ(o.result.kind, PMC_KIND_ACCEPTED);
    EXPECT_STREQ(o.result.sdp_ip, "127.0.0.1");
    EXPECT_EQ(o.result.sdp_port, 7001);
    EXPECT_EQ(o.result.cache_ms, 30000);
    EXPECT_EQ(o.result.from_cache, 0);
    EXPECT_EQ(o.result.attempts, 1u);
    EXPECT_EQ(std::string(o.result.pmsp), pmsp.endpoint().to_string());
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
    EXPECT_EQ(pmc_timeout_ms(l.r), -1);

    // A cache hit: nothing sent, never delivered inside pmc_resolve_start,
    // delivered by the next process call (timeout 0 until then).
    const uint64_t id2 = l.start("127.0.0.1", 7000, 40001);
    EXPECT_EQ(l.sink.outcomes.size(), 1u);
    EXPECT_EQ(pmc_timeout_ms(l.r), 0);
    ASSERT_EQ(pmc_process(l.r, nullptr, 0), PMC_OK);
    ASSERT_EQ(l.sink.outcomes.size(), 2u);
    EXPECT_EQ(l.sink.outcomes[1].id, id2);
    EXPECT_EQ(l.sink.outcomes[1].status, PMC_OK);
    EXPECT_EQ(l.sink.outcomes[1].result.from_cache, 1);
    EXPECT_EQ(l.sink.outcomes[1].result.attempts, 0u);
    EXPECT_FALSE(l.sink.called_inside_start);
    EXPECT_EQ(pmsp.count(pm::MessageType::request), 1);

    // The blocking call shares the cache.
    pmc_result res;
    std::memset(&res, 0, sizeof res);
    res.size = sizeof res;
    ASSERT_EQ(pmc_resolve(l.r, "127.0.0.1", 7000, "127.0.0.1", 40002, &res), PMC_OK);
    EXPECT_EQ(res.from_cache, 1);
    pmc_counters c;
    std::memset(&c, 0, sizeof c);
    c.size = sizeof c;
    ASSERT_EQ(pmc_get_counters(l.r, &c), PMC_OK);
    EXPECT_EQ(c.accepted, 3u);
    EXPECT_EQ(c.cache_hits, 2u);
    EXPECT_EQ(c.pmreq_sent, 1u);
    EXPECT_EQ(c.pmack_sent, 1u);
}

TEST(LoopApiTest, ManyConcurrentResolutionsSurviveLoss) {
    // The fake drops the first two PMReqs of every transaction.
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0, 2));
    Loop l(pmsp.endpoint());
    std::vector<uint64_t> ids;
    for (uint16_t i = 0; i < 20; ++i) {
        ids.push_back(l.start("127.0.0.1", 7000, static_cast<uint16_t>(41000 + i)));
    }
    EXPECT_EQ(pmc_pending(l.r), 20u);
    l.run();
    ASSERT_EQ(l.sink.outcomes.size(), 20u);
    for (const auto& o : l.sink.outcomes) {
        EXPECT_EQ(o.status, PMC_OK) << o.result.reason;
        EXPECT_GE(o.result.attempts, 3u);  // more only when a reply was slower than 67 ms
        EXPECT_EQ(o.result.from_cache, 0) << "PmTime 0 is single use";
    }
    EXPECT_GE(pmsp.count(pm::MessageType::request), 60);
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 20));
}

TEST(LoopApiTest, DenyTimeoutAndDeadline) {
    FakePmsp den(deny_all());
    Loop d(den.endpoint());
    d.start("127.0.0.1", 7000, 40000);
    d.run();
    ASSERT_EQ(d.sink.outcomes.size(), 1u);
    EXPECT_EQ(d.sink.outcomes[0].status, PMC_DENIED);
    EXPECT_EQ(d.sink.outcomes[0].result.kind, PMC_KIND_DENIED);

    // Retransmission schedule exhausted: 2 transmissions, then timeout.
    FakePmsp sil(silent());
    Loop s(sil.endpoint(), 1);
    s.start("127.0.0.1", 7000, 40000);
    s.run();
    ASSERT_EQ(s.sink.outcomes.size(), 1u);
    EXPECT_EQ(s.sink.outcomes[0].status, PMC_TIMEOUT);
    EXPECT_EQ(s.sink.outcomes[0].result.kind, PMC_KIND_TIMEOUT);
    EXPECT_EQ(s.sink.outcomes[0].result.attempts, 2u);

    // The deadline cuts a long schedule.
    Loop dl(sil.endpoint(), 32, 150, 20);
    const auto t0 = Clock::now();
    dl.start("127.0.0.1", 7000, 40001);
    dl.run();
    const auto took = Clock::now() - t0;
    ASSERT_EQ(dl.sink.outcomes.size(), 1u);
    EXPECT_EQ(dl.sink.outcomes[0].status, PMC_TIMEOUT);
    EXPECT_GE(took, 150ms);
    EXPECT_LT(took, 5s);
}

TEST(LoopApiTest, ErrorsComeThroughTheCallback) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0));
    Loop l(pmsp.endpoint());
    l.start("300.1.1.1", 7000, 40000);
    l.start("127.0.0.1", 7000, 0);
    l.start("127.0.0.1", 7000, 40000, "::1");
    EXPECT_EQ(pmc_pending(l.r), 3u);
    EXPECT_EQ(pmc_timeout_ms(l.r), 0);
    ASSERT_EQ(pmc_process_fd(l.r, -1), PMC_OK);
    ASSERT_EQ(l.sink.outcomes.size(), 3u);
    for (const auto& o : l.sink.outcomes) {
        EXPECT_EQ(o.status, PMC_E_INVAL);
        EXPECT_EQ(o.result.kind, PMC_KIND_ERROR);
    }
    EXPECT_NE(std::string(l.sink.outcomes[0].result.reason).find("ApIPAddr"), std::string::npos);
    EXPECT_NE(std::string(l.sink.outcomes[1].result.reason).find("CpPort"), std::string::npos);
    EXPECT_FALSE(l.sink.called_inside_start);

    // Refused outright (no callback ever): NULL resolver or callback.
    uint64_t id = 7;
    EXPECT_EQ(pmc_resolve_start(nullptr, "127.0.0.1", 7000, nullptr, 1, &Sink::cb, &l.sink, &id),
              PMC_E_INVAL);
    EXPECT_EQ(id, 0u);
    EXPECT_EQ(pmc_resolve_start(l.r, "127.0.0.1", 7000, nullptr, 1, nullptr, nullptr, nullptr),
              PMC_E_INVAL);
    EXPECT_EQ(pmc_fds(nullptr, nullptr, 0), PMC_E_INVAL);
    EXPECT_EQ(pmc_process(nullptr, nullptr, 0), PMC_E_INVAL);
    EXPECT_EQ(pmc_timeout_ms(nullptr), -1);
    EXPECT_EQ(pmc_pending(nullptr), 0u);
    EXPECT_EQ(l.sink.outcomes.size(), 3u);
}

TEST(LoopApiTest, CancelRunsTheCallbackBeforeReturning) {
    FakePmsp sil(silent());
    Loop l(sil.endpoint());
    const uint64_t a = l.start("127.0.0.1", 7000, 40000);
    const uint64_t b = l.start("127.0.0.1", 7000, 40001);
    ASSERT_TRUE(sil.wait_count(pm::MessageType::request, 2));
    ASSERT_EQ(pmc_resolve_cancel(l.r, a), PMC_OK);
    ASSERT_EQ(l.sink.outcomes.size(), 1u);
    EXPECT_EQ(l.sink.outcomes[0].id, a);
    EXPECT_EQ(l.sink.outcomes[0].status, PMC_E_CANCELLED);
    EXPECT_EQ(pmc_resolve_cancel(l.r, a), PMC_E_INVAL) << "already delivered";
    EXPECT_EQ(pmc_resolve_cancel(l.r, 12345), PMC_E_INVAL);
    EXPECT_EQ(pmc_pending(l.r), 1u);
    ASSERT_EQ(pmc_resolve_cancel(l.r, b), PMC_OK);
    EXPECT_EQ(pmc_pending(l.r), 0u);
    EXPECT_EQ(pmc_timeout_ms(l.r), -1);

    // A known outcome not yet delivered stands: cancel delivers it.
    FakePmsp acc(accept_with(ep("127.0.0.1:7001"), 255));
    Loop c(acc.endpoint());
    c.start("127.0.0.1", 7000, 40000);
    c.run();
    const uint64_t hit = c.start("127.0.0.1", 7000, 40001);  // cache hit, queued
    ASSERT_EQ(pmc_resolve_cancel(c.r, hit), PMC_OK);
    ASSERT_EQ(c.sink.outcomes.size(), 2u);
    EXPECT_EQ(c.sink.outcomes[1].status, PMC_OK);
    EXPECT_EQ(c.sink.outcomes[1].result.from_cache, 1);
}

TEST(LoopApiTest, FreeDeliversPendingAsCancelled) {
    FakePmsp sil(silent());
    Sink sink;
    pmc_options o;
    pmc_options_init(&o);
    std::string pmsp = sil.endpoint().to_string();
    o.pmsp = pmsp.c_str();
    o.read_environment = 0;
    pmc_resolver* r = nullptr;
    ASSERT_EQ(pmc_resolver_new(&o, &r), PMC_OK);
    for (uint16_t i = 0; i < 3; ++i) {
        ASSERT_EQ(pmc_resolve_start(r, "127.0.0.1", 7000, nullptr, static_cast<uint16_t>(40000 + i),
                                    &Sink::cb, &sink, nullptr),
                  PMC_OK);
    }
    ASSERT_EQ(pmc_resolve_start(r, "bogus", 7000, nullptr, 1, &Sink::cb, &sink, nullptr), PMC_OK);
    pmc_resolver_free(r);
    ASSERT_EQ(sink.outcomes.size(), 4u);
    int cancelled = 0;
    int invalid = 0;
    for (const auto& out : sink.outcomes) {
        cancelled += out.status == PMC_E_CANCELLED ? 1 : 0;
        invalid += out.status == PMC_E_INVAL ? 1 : 0;
    }
    EXPECT_EQ(cancelled, 3);
    EXPECT_EQ(invalid, 1) << "an outcome known before the free stands";
}

// A callback may start the next resolution; a poll array may hold other
// descriptors, which pmc_process ignores.
struct Chain {
    pmc_resolver* r = nullptr;
    int left = 3;
    std::vector<int> statuses;

    static void cb(void* arg, uint64_t, int status, const pmc_result*) {
        auto* c = static_cast<Chain*>(arg);
        c->statuses.push_back(status);
        if (--c->left > 0) {
            EXPECT_EQ(
                pmc_resolve_start(c->r, "127.0.0.1", 7000, "127.0.0.1",
                                  static_cast<uint16_t>(42000 + c->left), &Chain::cb, c, nullptr),
                PMC_OK);
        }
    }
};

TEST(LoopApiTest, CallbackStartsTheNextAndForeignFdsAreIgnored) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0, 1));
    Loop l(pmsp.endpoint());
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    ASSERT_EQ(::write(p[1], "x", 1), 1);  // always readable: must not disturb
    Chain chain;
    chain.r = l.r;
    ASSERT_EQ(
        pmc_resolve_start(l.r, "127.0.0.1", 7000, "127.0.0.1", 42000, &Chain::cb, &chain, nullptr),
        PMC_OK);
    l.run(10s, p[0]);
    EXPECT_EQ(chain.statuses, (std::vector<int>{PMC_OK, PMC_OK, PMC_OK}));
    EXPECT_EQ(pmc_process_fd(l.r, p[0]), PMC_OK);
    ::close(p[0]);
    ::close(p[1]);
}

}  // namespace
