// SPDX-License-Identifier: Apache-2.0
// BlockingResolver's caller-thread fast path over real UDP sockets against a
// scripted fake PMSP: retransmission, deadline, PMAck, late duplicates,
// concurrent callers sharing the PmTime cache. No timing assertions; every
// loop is bounded.
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/use_future.hpp>
#include <future>
#include <memory>
#include <set>
#include <stop_token>
#include <thread>

#include "fake_pmsp.hpp"
#include "pmclient/connect.hpp"
#include "pmclient/resolver.hpp"

namespace {

using namespace pmtest;
using pmclient::ResultKind;

pmclient::ResolveRequest req(std::uint16_t cp_port, const char* conv = "127.0.0.1:7000") {
    return pmclient::ResolveRequest{ep(conv), pm::Endpoint{ep("127.0.0.1:0").address, cp_port}, {}};
}

// SDP port tied to the request's CpPort, so every answer names its request.
std::uint16_t sdp_port_for(std::uint16_t cp_port) {
    return static_cast<std::uint16_t>(10000 + cp_port % 1000);
}

std::size_t thread_count() {
    std::size_t n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (dirent* e = ::readdir(d)) {
            n += e->d_name[0] != '.' ? 1 : 0;
        }
        ::closedir(d);
    }
    return n;
}

TEST(BlockingFastPathTest, RunsOnTheCallersThread) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0));
    const std::size_t before = thread_count();
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto res = r.resolve(req(40000));
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.sdp, ep("127.0.0.1:7001"));
    EXPECT_EQ(thread_count(), before) << "a blocking resolution started a thread";
    // The asynchronous interface of resolver() still works: its I/O thread
    // starts on first use. (A plain callback: asio::use_future would complete
    // on the threads of asio's system_context.)
    std::promise<pmclient::Result> p;
    r.resolver().async_resolve(req(40001), [&p](pmclient::Result x) { p.set_value(std::move(x)); });
    auto a = p.get_future().get();
    EXPECT_EQ(a.kind, ResultKind::accepted) << a.reason;
    EXPECT_EQ(thread_count(), before + 1);
}

TEST(BlockingFastPathTest, AckSentOnAcceptToItsSourceBeforeReturning) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 120));
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto res = r.resolve(req(40000));
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.pm_time, 120);
    EXPECT_EQ(res.attempts, 1u);
    EXPECT_EQ(res.pmsp, pmsp.endpoint());
    // Counted (so sent) before resolve() returned.
    EXPECT_EQ(r.resolver().counters().pmack_sent, 1u);
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
    auto got = pmsp.received();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].msg.type, pm::MessageType::request);
    EXPECT_EQ(got[0].msg.assoc_handle, res.assoc_handle);
    EXPECT_EQ(got[0].msg.cp_addr, ep("127.0.0.1:1").address) << "unspecified CpIPAddr is routed";
    const auto& ack = got[1].msg;
    EXPECT_EQ(ack.type, pm::MessageType::ack);
    EXPECT_EQ(ack.assoc_handle, res.assoc_handle);
    EXPECT_EQ(ack.ap_port, 7001);
    EXPECT_EQ(ack.cp_port, 40000);
    EXPECT_EQ(got[1].from, got[0].from) << "PMReq and PMAck leave from one socket";
}

TEST(BlockingFastPathTest, DenySendsNoAck) {
    FakePmsp pmsp(deny_all());
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto res = r.resolve(req(40000));
    EXPECT_EQ(res.kind, ResultKind::denied);
    auto c = r.resolver().counters();
    EXPECT_EQ(c.denied, 1u);
    EXPECT_EQ(c.pmack_sent, 0u);
}

TEST(BlockingFastPathTest, DroppedFirstRequestIsRetransmitted) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0, /*drop_first=*/1));
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto res = r.resolve(req(40000));
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.attempts, 2u);
    auto got = pmsp.received();
    ASSERT_GE(got.size(), 2u);
    EXPECT_EQ(got[0].msg.type, pm::MessageType::request);
    EXPECT_EQ(got[1].bytes, got[0].bytes) << "identical retransmission";
    auto c = r.resolver().counters();
    EXPECT_EQ(c.retransmissions, 1u);
    EXPECT_EQ(c.pmreq_sent, 2u);
    EXPECT_EQ(c.pmack_sent, 1u);
}

TEST(BlockingFastPathTest, SilentPmspTimesOutAfterTheLastRetransmission) {
    FakePmsp pmsp(silent());
    auto o = fast(pmsp.endpoint());
    o.defaults.initial_timeout = std::chrono::milliseconds(10);
    o.defaults.max_retries = 2;
    pmclient::BlockingResolver r(o);
    auto res = r.resolve(req(40000));
    EXPECT_EQ(res.kind, ResultKind::timeout);
    EXPECT_EQ(res.attempts, 3u);
    EXPECT_EQ(res.reason.find("deadline"), std::string::npos) << res.reason;
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::request, 3));
    EXPECT_EQ(r.resolver().counters().timeouts, 1u);
    EXPECT_EQ(r.resolver().in_flight(), 0u);
}

TEST(BlockingFastPathTest, DeadlineCutsTheSchedule) {
    FakePmsp pmsp(silent());
    auto o = fast(pmsp.endpoint());
    o.defaults.initial_timeout = std::chrono::milliseconds(40);
    o.defaults.backoff_factor = 1.0;
    o.defaults.max_retries = 32;
    o.defaults.deadline = std::chrono::milliseconds(100);
    pmclient::BlockingResolver r(o);
    auto res = r.resolve(req(40000));
    EXPECT_EQ(res.kind, ResultKind::timeout);
    EXPECT_NE(res.reason.find("deadline"), std::string::npos) << res.reason;
    EXPECT_GE(res.attempts, 1u);
    EXPECT_LE(res.attempts, 3u) << "sends at 0, 40, 80 ms; the deadline at 100 ms ends it";
}

TEST(BlockingFastPathTest, TimeoutFallsBackInConnect) {
    struct Listener {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        std::uint16_t port = 0;
        Listener() {
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            socklen_t len = sizeof a;
            EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
            EXPECT_EQ(::listen(fd, 4), 0);
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
            port = ntohs(a.sin_port);
        }
        ~Listener() { ::close(fd); }
    } conventional;
    FakePmsp pmsp(silent());
    auto o = fast(pmsp.endpoint());
    o.defaults.initial_timeout = std::chrono::milliseconds(10);
    o.defaults.deadline = std::chrono::milliseconds(50);
    pmclient::BlockingResolver r(o);
    auto c = pmclient::connect(r, pm::Endpoint{ep("127.0.0.1:0").address, conventional.port});
    ASSERT_TRUE(c.ok()) << c.reason;
    EXPECT_FALSE(c.used_sdp);
    EXPECT_EQ(c.resolution.kind, ResultKind::timeout);
    EXPECT_NE(c.reason.find("PM timeout; fell back"), std::string::npos) << c.reason;
    ::close(c.fd);
}

TEST(BlockingFastPathTest, LateDuplicatesOfAnEarlierResolutionDoNotConfuseTheNext) {
    // Every PMReq gets its PMAccept, the same PMAccept again, and a PMAccept
    // with another mapping. The first wins; the two late ones stay queued in
    // the caller's socket and are read by the next resolution: the identical
    // one is re-acked, the other only counted, and neither changes its answer.
    FakePmsp pmsp([](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        auto acc = pm::make_accept(m, pm::Endpoint{m.ap_addr, sdp_port_for(m.cp_port)}, 0);
        auto other = pm::make_accept(m, ep("127.0.0.1:6666"), 255);
        return {Reply::of(acc), Reply::of(acc), Reply::of(other)};
    });
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    std::set<std::uint64_t> handles;
    int n = 0;
    for (std::uint16_t cp = 40000; cp < 40020; ++cp) {
        auto res = r.resolve(req(cp));
        ++n;
        ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
        EXPECT_EQ(res.sdp.port, sdp_port_for(cp)) << "answer of another resolution";
        EXPECT_TRUE(handles.insert(res.assoc_handle).second);
        auto c = r.resolver().counters();
        if (c.reacks >= 1 && c.drop_duplicate >= 2) {
            break;
        }
    }
    auto c = r.resolver().counters();
    EXPECT_GE(c.reacks, 1u);
    EXPECT_GE(c.drop_duplicate, 2u);
    EXPECT_EQ(c.accepted, static_cast<std::uint64_t>(n));
    EXPECT_EQ(c.pmack_sent, c.accepted + c.reacks);
    EXPECT_LE(c.reacks, c.drop_duplicate) << "a re-acked PMAccept is still a duplicate";
    EXPECT_EQ(r.resolver().cache_size(), 0u) << "late replies are not cached";
    EXPECT_TRUE(pmsp.wait_count(pm::MessageType::ack, static_cast<int>(c.pmack_sent)));
}

TEST(BlockingFastPathTest, ConcurrentCallersShareTheCache) {
    // SDP port from CpPort; a PMAccept is cached for good (PmTime 255) only
    // for 127.0.0.1:7000. Some first PMReqs are lost.
    FakePmsp pmsp([](const pm::Message& m, int n) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request || (m.cp_port % 7 == 0 && n == 1)) {
            return {};
        }
        const bool cached = m.ap_port == 7000;
        return {Reply::of(pm::make_accept(
            m, pm::Endpoint{m.ap_addr, cached ? std::uint16_t{7001} : sdp_port_for(m.cp_port)},
            cached ? 255 : 0))};
    });
    auto o = fast(pmsp.endpoint());
    o.defaults.initial_timeout = std::chrono::milliseconds(100);
    pmclient::BlockingResolver r(o);
    constexpr int kThreads = 8;
    constexpr int kEach = 25;
    std::vector<std::thread> threads;
    std::vector<std::string> failures(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kEach; ++i) {
                auto cp = static_cast<std::uint16_t>(41000 + t * 100 + i);
                // Alternate a shared, cacheable answer and a per-request one.
                auto res = r.resolve(req(cp, i % 2 == 0 ? "127.0.0.1:7000" : "127.0.0.1:7100"));
                const std::uint16_t want = i % 2 == 0 ? 7001 : sdp_port_for(cp);
                if (res.kind != ResultKind::accepted || res.sdp.port != want) {
                    failures[t] += std::to_string(cp) + ": " + res.reason + "; ";
                }
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    for (const auto& f : failures) {
        EXPECT_TRUE(f.empty()) << f;
    }
    auto c = r.resolver().counters();
    const auto total = static_cast<std::uint64_t>(kThreads * kEach);
    EXPECT_EQ(c.requests_started, total);
    EXPECT_EQ(c.accepted, total);
    EXPECT_EQ(c.cache_hits + c.cache_misses, total);
    // Even i asks for 127.0.0.1:7000 (cacheable), odd i for 127.0.0.1:7100.
    const auto cacheable = static_cast<std::uint64_t>(kThreads * ((kEach + 1) / 2));
    EXPECT_GE(c.cache_hits, 1u) << "the permanent answer was shared across threads";
    EXPECT_LT(c.cache_hits, cacheable) << "the first one at least was a miss";
    EXPECT_GE(c.cache_misses, total - cacheable + 1);
    EXPECT_EQ(c.pmreq_sent, c.cache_misses + c.retransmissions);
    EXPECT_EQ(c.timeouts + c.errors, 0u);
    EXPECT_EQ(r.resolver().in_flight(), 0u);
    EXPECT_EQ(r.resolver().cache_size(), 1u);
    // The asynchronous side of the same resolver shares that cache.
    auto a = r.resolver().async_resolve(req(42000), boost::asio::use_future).get();
    EXPECT_TRUE(a.from_cache);
    // And flushing it through resolver() is seen by the blocking side.
    r.resolver().flush_cache();
    EXPECT_FALSE(r.resolve(req(42001)).from_cache);
}

TEST(BlockingFastPathTest, DestroyingTheResolverCancelsBlockedCalls) {
    FakePmsp pmsp(silent());
    auto o = fast(pmsp.endpoint());
    o.defaults.initial_timeout = std::chrono::seconds(10);
    o.defaults.deadline = std::chrono::seconds(60);
    auto r = std::make_unique<pmclient::BlockingResolver>(o);
    auto* p = r.get();
    pmclient::Result got;
    std::thread caller([&] { got = p->resolve(req(40000)); });
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::request, 1));
    r.reset();  // returns once the blocked call has given up
    caller.join();
    EXPECT_EQ(got.kind, ResultKind::error);
    EXPECT_EQ(got.error, pmclient::Errc::cancelled) << got.reason;
}

TEST(BlockingFastPathTest, AStopRequestEndsTheBlockedCallAndTheLaneServesTheNext) {
    // The PMSP answers nothing for the first request (its first CpPort)
    // and accepts the second: a 60 s question is given up on request, and
    // the lane that carried it (the eventfd drained, the transaction gone)
    // answers the next call.
    FakePmsp pmsp([](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request || m.cp_port == 40000) {
            return {};
        }
        return {Reply::of(pm::make_accept(m, ep("127.0.0.1:9000"), 60))};
    });
    auto o = fast(pmsp.endpoint());
    o.defaults.initial_timeout = std::chrono::seconds(10);
    o.defaults.deadline = std::chrono::seconds(60);
    pmclient::BlockingResolver r(o);
    std::stop_source stop;
    pmclient::Result got;
    std::atomic<bool> returned{false};
    std::thread caller([&] {
        got = r.resolve(req(40000), stop.get_token());
        returned = true;
    });
    const bool asked = pmsp.wait_count(pm::MessageType::request, 1);
    stop.request_stop();
    // At once (the lane's wait is woken), not at the retransmission in 10 s.
    for (int i = 0; i < 500 && !returned; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(returned.load()) << "resolve() did not return on the stop";
    caller.join();
    ASSERT_TRUE(asked);
    EXPECT_EQ(got.kind, ResultKind::error);
    EXPECT_EQ(got.error, pmclient::Errc::cancelled) << got.reason;
    EXPECT_EQ(r.resolver().in_flight(), 0u);
    // A stop already requested: nothing is asked.
    const auto before = r.resolver().counters().pmreq_sent;
    auto again = r.resolve(req(40002), stop.get_token());
    EXPECT_EQ(again.error, pmclient::Errc::cancelled) << again.reason;
    EXPECT_EQ(r.resolver().counters().pmreq_sent, before);
    // A fresh token: answered.
    auto next = r.resolve(req(40001), std::stop_source().get_token());
    ASSERT_EQ(next.kind, ResultKind::accepted) << next.reason;
    EXPECT_EQ(next.sdp, ep("127.0.0.1:9000"));
}

// A child after fork() uses and destroys its copy of a BlockingResolver (a
// plain libpmclient program; the lanes' sockets are shared with the
// parent's). Its calls do not count the lanes that were busy in the parent
// (max_in_flight 1 here, the one lane busy at the fork), and its
// destructor touches none of the parent's lanes: no shutdown() of a shared
// socket, no wait for a lane busy in the parent. The parent then resolves
// as before, both ways.
TEST(BlockingFastPathTest, AForkedChildUsesAndDestroysItsCopyWithoutTheParentsLanes) {
    FakePmsp pmsp([](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        return {Reply::of(pm::make_accept(m, ep("127.0.0.1:9000"), 0))};
    });
    auto o = fast(pmsp.endpoint());
    o.max_in_flight = 1;
    auto r = std::make_unique<pmclient::BlockingResolver>(o);
    ASSERT_EQ(r->resolve(req(40000)).kind, ResultKind::accepted);
    // The asynchronous side in use too: its I/O thread is not in the child.
    ASSERT_EQ(r->resolver().async_resolve(req(40005), boost::asio::use_future).get().kind,
              ResultKind::accepted);
    // The lane, busy in another thread at the time of the fork (a 60 s
    // question the other PMSP does not answer).
    FakePmsp silent([](const pm::Message&, int) -> std::vector<Reply> { return {}; });
    std::stop_source stop;
    std::thread busy([&] {
        pmclient::ResolveRequest q = req(40009, "127.0.0.1:7009");
        q.options = fast(silent.endpoint()).defaults;
        q.options->deadline = std::chrono::seconds(60);
        q.options->initial_timeout = std::chrono::seconds(30);
        (void)r->resolve(q, stop.get_token());
    });
    ASSERT_TRUE(silent.wait_count(pm::MessageType::request, 1));
    EXPECT_EQ(r->resolve(req(40003)).error, pmclient::Errc::busy);  // the one lane is busy
    const pid_t child = ::fork();
    if (child == 0) {
        alarm(20);  // a wait for the busy lane would hang here: fail instead
        const auto got = r->resolve(req(40007));
        r.reset();
        ::_exit(got.kind == ResultKind::accepted ? 0 : 3);
    }
    ASSERT_GT(child, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child's call failed (exit 3) or its destructor hung (signal 14): status " << status;
    stop.request_stop();
    busy.join();
    const auto next = r->resolve(req(40001));
    EXPECT_EQ(next.kind, ResultKind::accepted) << next.reason;
    auto async_next = r->resolver().async_resolve(req(40006), boost::asio::use_future);
    ASSERT_EQ(async_next.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_EQ(async_next.get().kind, ResultKind::accepted);
}

TEST(BlockingFastPathTest, BadInputIsAnErrorResult) {
    pmclient::BlockingResolver r(fast(ep("127.0.0.1:9")));
    auto res = r.resolve(req(0));
    EXPECT_EQ(res.kind, ResultKind::error);
    EXPECT_EQ(res.error, pmclient::Errc::invalid_argument);
    res = r.resolve(req(1, "127.0.0.1:0"));
    EXPECT_EQ(res.error, pmclient::Errc::invalid_argument);
    EXPECT_EQ(r.resolver().counters().errors, 2u);
}

TEST(BlockingFastPathTest, Ipv6) {
    int probe = ::socket(AF_INET6, SOCK_DGRAM, 0);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    bool ok = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (probe >= 0) {
        ::close(probe);
    }
    if (!ok) {
        GTEST_SKIP() << "no IPv6 loopback";
    }
    FakePmsp pmsp(accept_with(ep("[::1]:7001"), 0, /*drop_first=*/1), "[::1]:0");
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto res = r.resolve(pmclient::ResolveRequest{ep("[::1]:7000"), ep("[::1]:40000"), {}});
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.sdp, ep("[::1]:7001"));
    EXPECT_EQ(res.attempts, 2u);
    EXPECT_EQ(pmsp.received().at(0).msg.ipv, pm::Family::v6);
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
}

}  // namespace
