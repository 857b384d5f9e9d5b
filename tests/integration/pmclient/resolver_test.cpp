// SPDX-License-Identifier: Apache-2.0
// pmclient::Resolver over real UDP sockets against a scripted fake PMSP.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>

#include "fake_pmsp.hpp"
#include "pmclient/connect.hpp"
#include "pmclient/resolver.hpp"

namespace {

using namespace pmtest;
using pmclient::ResultKind;

pmclient::ResolveRequest req(std::uint16_t cp_port = 40000, const char* conv = "127.0.0.1:7000") {
    return pmclient::ResolveRequest{ep(conv), pm::Endpoint{ep("127.0.0.1:0").address, cp_port}, {}};
}

// Runs an io_context on a thread for the duration of a test.
struct IoThread {
    boost::asio::io_context io;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{
        io.get_executor()};
    std::thread t{[this] { io.run(); }};
    ~IoThread() {
        guard.reset();
        t.join();
    }
};

template <typename Pred>
bool eventually(Pred p, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (p()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return p();
}

// An idle resolver does not read its socket (so it never keeps the caller's
// io_context busy): datagrams that arrive between resolutions are read by the
// next one. Runs resolutions with CpPort base, base+1, ... until pred holds,
// at most 20 of them.
template <class Pred>
bool resolve_until(pmclient::Resolver& r, std::uint16_t base, Pred pred) {
    for (std::uint16_t i = 0; i < 20 && !pred(); ++i) {
        r.async_resolve(req(static_cast<std::uint16_t>(base + i)), boost::asio::use_future).get();
    }
    return pred();
}

TEST(ResolverTest, AcceptThenAckToTheAcceptSource) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 120));
    IoThread io;
    auto r = std::make_unique<pmclient::Resolver>(io.io, fast(pmsp.endpoint()));
    auto res = r->async_resolve(req(), boost::asio::use_future).get();
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.sdp, ep("127.0.0.1:7001"));
    EXPECT_EQ(res.pm_time, 120);
    EXPECT_EQ(res.lifetime.duration, std::chrono::seconds(30));
    EXPECT_EQ(res.attempts, 1u);
    EXPECT_FALSE(res.from_cache);
    EXPECT_EQ(res.pmsp, pmsp.endpoint());
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
    auto got = pmsp.received();
    ASSERT_GE(got.size(), 2u);
    const auto& reqm = got[0].msg;
    EXPECT_EQ(reqm.type, pm::MessageType::request);
    EXPECT_EQ(reqm.ap_port, 7000);
    EXPECT_EQ(reqm.cp_port, 40000);
    EXPECT_EQ(reqm.cp_addr, ep("127.0.0.1:1").address) << "unspecified CpIPAddr is routed";
    EXPECT_EQ(reqm.assoc_handle, res.assoc_handle);
    const auto& ack = got[1].msg;
    EXPECT_EQ(ack.type, pm::MessageType::ack);
    EXPECT_EQ(ack.ap_port, 7001);
    EXPECT_EQ(ack.assoc_handle, reqm.assoc_handle);
    EXPECT_EQ(got[1].from, got[0].from) << "one socket for PMReq and PMAck";
    r.reset();
}

TEST(ResolverTest, CallbackHandlerRunsOnIoContext) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0));
    boost::asio::io_context io;
    pmclient::Resolver r(io, fast(pmsp.endpoint()));
    std::optional<pmclient::Result> got;
    r.async_resolve(req(), [&](pmclient::Result res) { got = std::move(res); });
    EXPECT_FALSE(got.has_value()) << "never invoked inside async_resolve";
    // run() returns once the resolution is done: an idle resolver holds no
    // pending operation on the caller's io_context. The bound only keeps a
    // broken build from hanging the suite.
    io.run_for(std::chrono::seconds(20));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->kind, ResultKind::accepted);
    EXPECT_TRUE(io.stopped()) << "the resolver kept the io_context busy after completing";
}

TEST(ResolverTest, LostRequestsAreRetransmitted) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0, /*drop_first=*/3));
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    auto res = r.async_resolve(req(), boost::asio::use_future).get();
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.attempts, 4u);
    auto got = pmsp.received();
    ASSERT_GE(got.size(), 4u);
    for (int i = 1; i < 4; ++i) {
        EXPECT_EQ(got[i].bytes, got[0].bytes) << "identical retransmission";
    }
    EXPECT_EQ(r.counters().retransmissions, 3u);
}

TEST(ResolverTest, DuplicatedAndReorderedRepliesFirstWins) {
    // Every PMReq gets: PMDeny, then two PMAccepts. The first (PMDeny) wins.
    FakePmsp pmsp([](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        auto acc = pm::make_accept(m, ep("127.0.0.1:7001"), 0);
        return {Reply::of(pm::make_deny(m)), Reply::of(acc), Reply::of(acc)};
    });
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    auto res = r.async_resolve(req(), boost::asio::use_future).get();
    EXPECT_EQ(res.kind, ResultKind::denied);
    // An idle resolver does not read its socket; later resolutions take the
    // queued duplicates and discard them.
    ASSERT_TRUE(resolve_until(r, 40100, [&] { return r.counters().drop_duplicate >= 2; }));
    EXPECT_EQ(r.counters().pmack_sent, 0u) << "no PMAck for a transaction that was denied";

    // And the reverse: PMAccept first, then PMDeny; a duplicate PMAccept is re-acked.
    FakePmsp pmsp2([](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        auto acc = pm::make_accept(m, ep("127.0.0.1:7002"), 0);
        return {Reply::of(acc), Reply::of(pm::make_deny(m)), Reply::of(acc)};
    });
    pmclient::Resolver r2(io.io, fast(pmsp2.endpoint()));
    res = r2.async_resolve(req(40001), boost::asio::use_future).get();
    ASSERT_EQ(res.kind, ResultKind::accepted);
    EXPECT_EQ(res.sdp.port, 7002);
    // Each transaction gets a PMDeny to discard and a PMAccept to re-ack.
    ASSERT_TRUE(resolve_until(r2, 40200, [&] { return r2.counters().reacks >= 1; }));
    auto c = r2.counters();
    EXPECT_EQ(c.pmack_sent, c.accepted + c.reacks);
    EXPECT_LE(c.reacks, c.accepted) << "one duplicate PMAccept per transaction";
    EXPECT_GE(c.drop_duplicate, c.reacks) << "a re-acked PMAccept is still a duplicate";
    EXPECT_LE(c.drop_duplicate, 2 * c.accepted);
    EXPECT_TRUE(pmsp2.wait_count(pm::MessageType::ack, static_cast<int>(c.pmack_sent)));
}

TEST(ResolverTest, RepliesWithWrongHandleCpPortCpIpAddrOrSourceAreIgnored) {
    FakePmsp pmsp([](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        auto acc = pm::make_accept(m, ep("127.0.0.1:7001"), 0);
        auto bad_handle = acc;
        bad_handle.assoc_handle ^= 0x8000;
        auto bad_port = acc;
        bad_port.cp_port = static_cast<std::uint16_t>(acc.cp_port + 1);
        auto bad_addr = acc;
        bad_addr.cp_addr = ep("127.0.0.9:1").address;
        auto evil = pm::make_accept(m, ep("127.0.0.1:6666"), 255);
        return {Reply::of(bad_handle), Reply::of(bad_port), Reply::of(bad_addr),
                Reply::of(evil, /*other socket*/ true), Reply::of(acc)};
    });
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    auto res = r.async_resolve(req(), boost::asio::use_future).get();
    ASSERT_EQ(res.kind, ResultKind::accepted);
    EXPECT_EQ(res.sdp, ep("127.0.0.1:7001"));
    auto c = r.counters();
    EXPECT_EQ(c.drop_unknown, 1u);
    EXPECT_EQ(c.drop_tuple_mismatch, 2u);
    EXPECT_EQ(c.drop_wrong_source, 1u);
}

TEST(ResolverTest, SilentPmspTimesOut) {
    FakePmsp pmsp(silent());
    IoThread io;
    auto o = fast(pmsp.endpoint());
    o.defaults.max_retries = 2;
    o.defaults.initial_timeout = std::chrono::milliseconds(20);
    pmclient::Resolver r(io.io, o);
    auto res = r.async_resolve(req(), boost::asio::use_future).get();
    EXPECT_EQ(res.kind, ResultKind::timeout);
    EXPECT_EQ(res.attempts, 3u);
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::request, 3));
}

// A list: a silent PMSP on IPv6 loopback, then one on IPv4 that answers.
// The resolver opens a socket per family; the second PMSP's turn starts after
// the first one's slice, with a new AssocHandle.
TEST(ResolverTest, PmspListFailsOverAcrossFamilies) {
    FakePmsp quiet(silent(), "[::1]:0");
    FakePmsp acc(accept_with(ep("127.0.0.1:7001"), 0));
    IoThread io;
    auto o = fast(acc.endpoint());
    o.defaults.pmsp.reset();
    o.defaults.pmsps = {quiet.endpoint(), acc.endpoint()};
    o.defaults.initial_timeout = std::chrono::milliseconds(20);
    o.defaults.deadline = std::chrono::milliseconds(400);
    pmclient::Resolver r(io.io, o);
    EXPECT_EQ(r.configured_pmsps(), (std::vector<pm::Endpoint>{quiet.endpoint(), acc.endpoint()}));
    auto res = r.async_resolve(req(), boost::asio::use_future).get();
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.pmsp, acc.endpoint());
    EXPECT_EQ(res.pmsps_tried, 2u);
    ASSERT_TRUE(quiet.wait_count(pm::MessageType::request, 1));
    const auto first = quiet.received().front().msg.assoc_handle;
    EXPECT_EQ(acc.received().front().msg.assoc_handle, res.assoc_handle);
    EXPECT_NE(first, res.assoc_handle);
    EXPECT_EQ(r.counters().pmsp_failovers, 1u);
}

TEST(ResolverTest, DenySendsNoAck) {
    int calls = 0;
    FakePmsp pmsp([&calls](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        return {Reply::of(++calls == 1 ? pm::make_deny(m)
                                       : pm::make_accept(m, ep("127.0.0.1:7001"), 0))};
    });
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    EXPECT_EQ(r.async_resolve(req(), boost::asio::use_future).get().kind, ResultKind::denied);
    EXPECT_EQ(r.async_resolve(req(40001), boost::asio::use_future).get().kind,
              ResultKind::accepted);
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
    auto got = pmsp.received();
    ASSERT_EQ(got.size(), 3u);  // PMReq, PMReq, PMAck (UDP on loopback keeps order)
    EXPECT_EQ(got[2].msg.type, pm::MessageType::ack);
    EXPECT_EQ(got[2].msg.cp_port, 40001);
}

TEST(ResolverTest, CacheHitSendsNoDatagram) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 120));
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    ASSERT_TRUE(r.async_resolve(req(40000), boost::asio::use_future).get().accepted());
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
    auto res = r.async_resolve(req(40001), boost::asio::use_future).get();
    ASSERT_TRUE(res.accepted());
    EXPECT_TRUE(res.from_cache);
    EXPECT_EQ(pmsp.count(pm::MessageType::request), 1);
    EXPECT_EQ(r.cache_size(), 1u);
    r.flush_cache();
    res = r.async_resolve(req(40002), boost::asio::use_future).get();
    EXPECT_FALSE(res.from_cache);
    EXPECT_EQ(pmsp.count(pm::MessageType::request), 2);
}

TEST(ResolverTest, ManyConcurrentResolutionsShareOneSocket) {
    // SDP port = 10000 + CpPort % 1000, so each answer is tied to its request.
    FakePmsp pmsp([](const pm::Message& m, int n) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request || (m.cp_port % 7 == 0 && n == 1)) {
            return {};  // lose some first requests too
        }
        auto port = static_cast<std::uint16_t>(10000 + m.cp_port % 1000);
        return {Reply::of(pm::make_accept(m, pm::Endpoint{m.ap_addr, port}, 0))};
    });
    boost::asio::io_context io;
    auto guard = boost::asio::make_work_guard(io);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    {
        pmclient::Resolver r(io, fast(pmsp.endpoint()));
        std::vector<std::future<pmclient::Result>> fs;
        for (std::uint16_t i = 0; i < 300; ++i) {
            fs.push_back(r.async_resolve(req(static_cast<std::uint16_t>(41000 + i)),
                                         boost::asio::use_future));
        }
        for (std::uint16_t i = 0; i < 300; ++i) {
            auto res = fs[i].get();
            ASSERT_EQ(res.kind, ResultKind::accepted) << i << " " << res.reason;
            EXPECT_EQ(res.sdp.port, 10000 + (41000 + i) % 1000);
        }
        std::set<pm::Endpoint> sources;
        for (const auto& g : pmsp.received()) {
            sources.insert(g.from);
        }
        EXPECT_EQ(sources.size(), 1u);
        EXPECT_EQ(r.in_flight(), 0u);
    }
    guard.reset();
    t1.join();
    t2.join();
}

TEST(ResolverTest, HostileDatagramsAtTheClientSocketAreCounted) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 0));
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    ASSERT_TRUE(r.async_resolve(req(), boost::asio::use_future).get().accepted());
    auto client = pmsp.received().at(0).from;
    UdpSocket attacker;
    std::vector<std::uint8_t> junk(5, 0xff);
    attacker.send_to(junk, client);
    std::vector<std::uint8_t> big(1500, 0x14);
    attacker.send_to(big, client);
    pm::Message fake;
    fake.type = pm::MessageType::accept;
    fake.assoc_handle = 77;
    auto w = pm::encode(fake);
    attacker.send_to(w, client);
    // The junk waits in the socket of the idle resolver and is read while the
    // next resolutions are in flight: counted, and none is confused by it.
    ASSERT_TRUE(resolve_until(r, 40300, [&] {
        auto c = r.counters();
        return c.drop_malformed == 2 && c.drop_unknown == 1;
    }));
}

TEST(ResolverTest, BadInputGivesErrorResult) {
    IoThread io;
    pmclient::Resolver r(io.io, fast(ep("127.0.0.1:9")));
    auto res = r.async_resolve(req(0), boost::asio::use_future).get();
    EXPECT_EQ(res.kind, ResultKind::error);
    EXPECT_EQ(res.error, pmclient::Errc::invalid_argument);
    EXPECT_NE(res.reason.find("CpPort"), std::string::npos);
    res = r.async_resolve(req(1, "127.0.0.1:0"), boost::asio::use_future).get();
    EXPECT_EQ(res.error, pmclient::Errc::invalid_argument);
    auto bad = req();
    bad.options = pmclient::RequestOptions{};
    bad.options->backoff_factor = 100;
    res = r.async_resolve(bad, boost::asio::use_future).get();
    EXPECT_EQ(res.error, pmclient::Errc::invalid_argument);

    pmclient::ResolverOptions o;
    o.pmsp_port = 0;
    EXPECT_THROW(pmclient::Resolver(io.io, o), std::invalid_argument);
}

TEST(ResolverTest, DestroyingResolverCancelsPending) {
    FakePmsp pmsp(silent());
    IoThread io;
    auto r = std::make_unique<pmclient::Resolver>(io.io, fast(pmsp.endpoint()));
    auto f = r->async_resolve(req(), boost::asio::use_future);
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::request, 1));
    r.reset();
    auto res = f.get();
    EXPECT_EQ(res.kind, ResultKind::error);
    EXPECT_EQ(res.error, pmclient::Errc::cancelled);
}

TEST(ResolverTest, Ipv6) {
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
    FakePmsp pmsp(accept_with(ep("[::1]:7001"), 255), "[::1]:0");
    IoThread io;
    pmclient::Resolver r(io.io, fast(pmsp.endpoint()));
    pmclient::ResolveRequest rq{ep("[::1]:7000"), ep("[::1]:40000"), {}};
    auto res = r.async_resolve(rq, boost::asio::use_future).get();
    ASSERT_EQ(res.kind, ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.sdp, ep("[::1]:7001"));
    EXPECT_EQ(pmsp.received().at(0).msg.ipv, pm::Family::v6);
}

// --- PMSP selection precedence: options > SDP_PMSP > pmclient.yaml > ApIPAddr ----

class PmspPrecedenceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir = std::filesystem::temp_directory_path() /
              ("pmclient-prec-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        path = (dir / "pmclient.yaml").string();
        setenv("SDP_PMCLIENT_CONFIG", path.c_str(), 1);
        unsetenv("SDP_PMSP");
    }
    void TearDown() override {
        unsetenv("SDP_PMCLIENT_CONFIG");
        unsetenv("SDP_PMSP");
        std::filesystem::remove_all(dir);
    }
    static pmclient::ResolverOptions env_opts() {
        auto o = fast(ep("127.0.0.1:9"));
        o.defaults.pmsp.reset();
        o.read_environment = true;
        return o;
    }
    std::filesystem::path dir;
    std::string path;
};

TEST_F(PmspPrecedenceTest, FileThenEnvThenOptions) {
    FakePmsp from_file(accept_with(ep("127.0.0.1:7101"), 0));
    FakePmsp from_env(accept_with(ep("127.0.0.1:7102"), 0));
    FakePmsp from_opts(accept_with(ep("127.0.0.1:7103"), 0));
    std::ofstream(path) << "pmsp: \"" << from_file.endpoint().to_string() << "\"\n";
    IoThread io;
    {
        pmclient::Resolver r(io.io, env_opts());
        std::string src;
        EXPECT_EQ(r.configured_pmsp(&src), from_file.endpoint());
        EXPECT_EQ(src, path);
        EXPECT_EQ(r.async_resolve(req(), boost::asio::use_future).get().sdp.port, 7101);
    }
    setenv("SDP_PMSP", from_env.endpoint().to_string().c_str(), 1);
    {
        pmclient::Resolver r(io.io, env_opts());
        EXPECT_EQ(r.async_resolve(req(), boost::asio::use_future).get().sdp.port, 7102);
        // A per-request PMSP beats everything.
        auto rq = req(40001);
        rq.options = env_opts().defaults;
        rq.options->pmsp = from_opts.endpoint();
        EXPECT_EQ(r.async_resolve(rq, boost::asio::use_future).get().sdp.port, 7103);
    }
    {
        auto o = env_opts();
        o.defaults.pmsp = from_opts.endpoint();
        pmclient::Resolver r(io.io, o);
        EXPECT_EQ(r.async_resolve(req(), boost::asio::use_future).get().sdp.port, 7103);
    }
}

TEST_F(PmspPrecedenceTest, DefaultIsApIpAddrAndPmspPort) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7201"), 0));
    IoThread io;
    auto o = env_opts();
    o.pmsp_port = pmsp.endpoint().port;
    pmclient::Resolver r(io.io, o);
    EXPECT_FALSE(r.configured_pmsp().has_value());
    auto res = r.async_resolve(req(), boost::asio::use_future).get();
    EXPECT_EQ(res.sdp.port, 7201);
    EXPECT_EQ(res.pmsp, pmsp.endpoint());
}

TEST_F(PmspPrecedenceTest, InvalidEnvironmentOrFileIsAnError) {
    IoThread io;
    setenv("SDP_PMSP", "not-an-endpoint", 1);
    EXPECT_THROW(pmclient::Resolver(io.io, env_opts()), std::invalid_argument);
    unsetenv("SDP_PMSP");
    std::ofstream(path) << "pmsp: 1.2.3.4:99999\n";
    EXPECT_THROW(pmclient::Resolver(io.io, env_opts()), std::invalid_argument);
    auto o = env_opts();
    o.defaults.pmsp = ep("127.0.0.1:9");  // options win: env and file not read
    EXPECT_NO_THROW(pmclient::Resolver(io.io, o));
}

// --- blocking API and the connect helper ------------------------------------------

struct TcpListener {
    int fd = -1;
    std::uint16_t port = 0;
    TcpListener() {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 16) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
            throw std::runtime_error("listen");
        }
        port = ntohs(a.sin_port);
    }
    ~TcpListener() { ::close(fd); }
};

// A loopback port with nothing listening (bound then closed).
std::uint16_t closed_port() {
    TcpListener l;
    return l.port;
}

TEST(BlockingResolverTest, ResolveBlocks) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 4));
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto res = r.resolve(req());
    ASSERT_TRUE(res.accepted());
    EXPECT_TRUE(r.resolve(req(40001)).from_cache);
    EXPECT_TRUE(pmclient::resolve(req(40002), fast(pmsp.endpoint())).accepted());
}

TEST(ConnectTest, AcceptConnectsToSdpAddress) {
    TcpListener sdp;
    TcpListener conventional;
    FakePmsp pmsp(accept_with(pm::Endpoint{ep("127.0.0.1:0").address, sdp.port}, 0));
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto c = pmclient::connect(r, pm::Endpoint{ep("127.0.0.1:0").address, conventional.port});
    ASSERT_TRUE(c.ok()) << c.reason;
    EXPECT_TRUE(c.used_sdp);
    EXPECT_EQ(c.peer.port, sdp.port);
    // The PMReq carried the CpPort of the socket that connected.
    EXPECT_EQ(pmsp.received().at(0).msg.cp_port, c.local.port);
    EXPECT_EQ(pmsp.received().at(0).msg.cp_addr, c.local.address);
    ::close(c.fd);
}

TEST(ConnectTest, DenyFallsBackToConventional) {
    TcpListener conventional;
    FakePmsp pmsp(deny_all());
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto c = pmclient::connect(r, pm::Endpoint{ep("127.0.0.1:0").address, conventional.port});
    ASSERT_TRUE(c.ok()) << c.reason;
    EXPECT_FALSE(c.used_sdp);
    EXPECT_EQ(c.resolution.kind, ResultKind::denied);
    EXPECT_EQ(c.peer.port, conventional.port);
    ::close(c.fd);
}

TEST(ConnectTest, RefusedSdpAddressFallsBackAndFlushesCache) {
    TcpListener conventional;
    FakePmsp pmsp(accept_with(pm::Endpoint{ep("127.0.0.1:0").address, closed_port()}, 255));
    pmclient::BlockingResolver r(fast(pmsp.endpoint()));
    auto c = pmclient::connect(r, pm::Endpoint{ep("127.0.0.1:0").address, conventional.port});
    ASSERT_TRUE(c.ok()) << c.reason;
    EXPECT_FALSE(c.used_sdp);
    EXPECT_EQ(c.resolution.kind, ResultKind::accepted);
    EXPECT_NE(c.reason.find("fell back"), std::string::npos);
    EXPECT_EQ(r.resolver().cache_size(), 0u);
    ::close(c.fd);
}

TEST(ConnectTest, TimeoutFallsBackToConventional) {
    TcpListener conventional;
    FakePmsp pmsp(silent());
    auto o = fast(pmsp.endpoint());
    o.defaults.max_retries = 1;
    o.defaults.initial_timeout = std::chrono::milliseconds(10);
    pmclient::BlockingResolver r(o);
    auto c = pmclient::connect(r, pm::Endpoint{ep("127.0.0.1:0").address, conventional.port});
    ASSERT_TRUE(c.ok()) << c.reason;
    EXPECT_FALSE(c.used_sdp);
    EXPECT_EQ(c.resolution.kind, ResultKind::timeout);
    ::close(c.fd);
}

TEST(ConnectTest, BadArgumentsAreErrors) {
    pmclient::BlockingResolver r(fast(ep("127.0.0.1:9")));
    auto c = pmclient::connect(r, ep("127.0.0.1:0"));
    EXPECT_FALSE(c.ok());
    EXPECT_EQ(c.resolution.error, pmclient::Errc::invalid_argument);
    c = pmclient::connect(r, ep("127.0.0.1:80"), ep("[::1]:0").address);
    EXPECT_FALSE(c.ok());
    EXPECT_EQ(c.resolution.error, pmclient::Errc::invalid_argument);
}

}  // namespace
