// SPDX-License-Identifier: Apache-2.0
// The connect-and-fall-back procedure (section 7.5.1), driven with scripted
// action results: every fallback and failure branch, and the actions'
// arguments.
#include "libpmclient/src/connect_core/connect_procedure.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace pmclient {
namespace {

using Step = ConnectProcedure::Step;
using Options = ConnectProcedure::Options;

pm::Endpoint ep(const char* s) {
    auto e = pm::Endpoint::parse(s);
    EXPECT_TRUE(e.has_value()) << s;
    return e.value_or(pm::Endpoint{});
}

pm::IpAddress ip(const char* s) {
    auto a = pm::IpAddress::parse(s);
    EXPECT_TRUE(a.has_value()) << s;
    return a.value_or(pm::IpAddress{});
}

std::error_code E(int e) {
    return {e, std::generic_category()};
}

Result answer(ResultKind k, const char* sdp = "10.0.0.2:7000") {
    Result r;
    r.kind = k;
    if (k == ResultKind::accepted) {
        r.sdp = ep(sdp);
    }
    return r;
}

Result resolution_failure(Errc e) {
    Result r;
    r.kind = ResultKind::error;
    r.error = e;
    r.reason = "resolver says no";
    return r;
}

bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

// Drives the procedure up to the resolve action (route -> bind -> resolve).
class ProcedureTest : public ::testing::Test {
  protected:
    ConnectProcedure& make(Options o = {}, const char* conventional = "10.0.0.2:80") {
        p.emplace(ep(conventional), o);
        return *p;
    }
    // start, route (10.0.0.1), bind (:40000): at resolve.
    const ConnectProcedure::Action& to_resolve(Options o = {}) {
        auto& proc = make(o);
        const auto& a = proc.start();
        EXPECT_EQ(a.step, Step::route);
        EXPECT_EQ(a.address, ip("10.0.0.2"));
        const auto& b = proc.on_route(0, ip("10.0.0.1"));
        EXPECT_EQ(b.step, Step::bind);
        EXPECT_EQ(b.address, ip("10.0.0.1"));
        const auto& r = proc.on_bound(ep("10.0.0.1:40000"));
        EXPECT_EQ(r.step, Step::resolve);
        EXPECT_EQ(r.endpoint, ep("10.0.0.2:80"));
        EXPECT_EQ(r.local, ep("10.0.0.1:40000"));
        return r;
    }
    // ... and PMAccept for 10.0.0.2:7000: at connect.
    const ConnectProcedure::Action& to_connect(Options o = {}) {
        to_resolve(o);
        const auto& a = p->on_resolved(answer(ResultKind::accepted));
        EXPECT_EQ(a.step, Step::connect);
        EXPECT_EQ(a.endpoint, ep("10.0.0.2:7000"));
        return a;
    }
    void expect_fallback(const ConnectProcedure::Action& a, bool flush) {
        EXPECT_EQ(a.step, Step::fallback);
        EXPECT_EQ(a.endpoint, ep("10.0.0.2:80"));
        EXPECT_TRUE(a.bind_cp);
        EXPECT_EQ(a.address, ip("10.0.0.1"));
        EXPECT_EQ(a.flush_cache, flush);
        EXPECT_TRUE(has(p->reason(), "fell back to TCP to the Conventional Address"))
            << p->reason();
    }
    void expect_tcp_done() {
        const auto& d = p->on_fallback({});
        EXPECT_EQ(d.step, Step::done);
        EXPECT_FALSE(d.sdp);
        EXPECT_FALSE(d.flush_cache);
        EXPECT_EQ(p->peer(), ep("10.0.0.2:80"));
        EXPECT_FALSE(p->error());
    }
    std::optional<ConnectProcedure> p;
};

TEST_F(ProcedureTest, AcceptAndConnectIsSdpWithoutHandshakeStep) {
    to_connect();
    const auto& d = p->on_connected({});
    EXPECT_EQ(d.step, Step::done);
    EXPECT_TRUE(d.sdp);
    EXPECT_EQ(p->peer(), ep("10.0.0.2:7000"));
    EXPECT_TRUE(p->reason().empty());
    EXPECT_TRUE(p->asked());
    EXPECT_TRUE(p->resolution().accepted());
}

TEST_F(ProcedureTest, HandshakeStepWhenAskedFor) {
    Options o;
    o.handshake = true;
    to_connect(o);
    const auto& h = p->on_connected({});
    EXPECT_EQ(h.step, Step::handshake);
    EXPECT_EQ(h.endpoint, ep("10.0.0.2:7000"));
    const auto& d = p->on_handshake({});
    EXPECT_EQ(d.step, Step::done);
    EXPECT_TRUE(d.sdp);
}

TEST_F(ProcedureTest, DenyAndTimeoutFallBackWithoutFlush) {
    for (auto k : {ResultKind::denied, ResultKind::timeout}) {
        to_resolve();
        const auto& a = p->on_resolved(answer(k));
        expect_fallback(a, false);
        EXPECT_TRUE(has(p->reason(),
                        k == ResultKind::denied ? "PMDeny; fell back" : "PM timeout; fell back"))
            << p->reason();
        expect_tcp_done();
        EXPECT_EQ(p->resolution().kind, k);
    }
}

TEST_F(ProcedureTest, ResolutionErrorsFail) {
    const std::pair<Errc, std::errc> cases[] = {
        {Errc::invalid_argument, std::errc::invalid_argument},
        {Errc::config, std::errc::invalid_argument},
        {Errc::cancelled, std::errc::operation_canceled},
        {Errc::socket, std::errc::host_unreachable},
        {Errc::busy, std::errc::host_unreachable},
    };
    for (auto [in, out] : cases) {
        to_resolve();
        const auto& a = p->on_resolved(resolution_failure(in));
        EXPECT_EQ(a.step, Step::failed);
        EXPECT_FALSE(a.flush_cache);
        EXPECT_EQ(p->error(), std::make_error_code(out));
        EXPECT_EQ(p->reason(), "resolver says no");
        EXPECT_TRUE(p->asked());
        EXPECT_EQ(p->resolution().error, in);
    }
}

TEST_F(ProcedureTest, SdpAddressThatDoesNotTakeTheConnectionFallsBackAndFlushes) {
    for (int err : {ECONNREFUSED, ECONNRESET, ECONNABORTED, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH}) {
        to_connect();
        const auto& a = p->on_connected(E(err));
        expect_fallback(a, true);
        EXPECT_TRUE(has(p->reason(), "SDP Address 10.0.0.2:7000: ")) << p->reason();
        EXPECT_TRUE(has(p->reason(), std::strerror(err))) << p->reason();
        expect_tcp_done();
    }
}

TEST_F(ProcedureTest, DriverDetailReplacesTheErrorText) {
    to_connect();
    p->on_connected(std::make_error_code(std::errc::connection_refused), "rdma: rejected");
    EXPECT_TRUE(has(p->reason(), "SDP Address 10.0.0.2:7000: rdma: rejected; fell back"))
        << p->reason();
}

TEST_F(ProcedureTest, LocalConnectErrorsFailWithoutFlush) {
    for (int err : {EADDRNOTAVAIL, EACCES, EMFILE, EINVAL}) {
        to_connect();
        const auto& a = p->on_connected(E(err));
        EXPECT_EQ(a.step, Step::failed);
        EXPECT_EQ(p->failed_at(), Step::connect);
        EXPECT_FALSE(a.flush_cache);
        EXPECT_EQ(p->error(), E(err));
        EXPECT_TRUE(has(p->reason(), "connect to SDP Address 10.0.0.2:7000")) << p->reason();
    }
}

TEST_F(ProcedureTest, StartupRefusedResetOrTimedOutFallsBackAndFlushes) {
    Options o;
    o.handshake = true;
    for (auto e : {std::errc::connection_refused, std::errc::connection_reset, std::errc::timed_out,
                   std::errc::connection_aborted}) {
        to_connect(o);
        p->on_connected({});
        const auto& a = p->on_handshake(std::make_error_code(e), "MPA rejected");
        expect_fallback(a, true);
        EXPECT_TRUE(has(p->reason(), "SDP startup failed (")) << p->reason();
        EXPECT_TRUE(has(p->reason(), "MPA rejected")) << p->reason();
        expect_tcp_done();
    }
}

TEST_F(ProcedureTest, StartupWithANonSdpPeerFails) {
    Options o;
    o.handshake = true;
    to_connect(o);
    p->on_connected({});
    const auto& a = p->on_handshake(std::make_error_code(std::errc::protocol_error), "garbage");
    EXPECT_EQ(a.step, Step::failed);
    EXPECT_FALSE(a.flush_cache);
    EXPECT_EQ(p->error(), std::errc::protocol_error);
    EXPECT_TRUE(has(p->reason(), "garbage")) << p->reason();
}

// A stop of the caller (docs/protocol-notes.md, 7.4/7.5.1 "giving up")
// reaches the procedure as operation_canceled from the step it ended: that
// is no failure of the SDP Address, so no fallback and no flush.
TEST_F(ProcedureTest, AStopAtConnectOrStartupFailsWithoutFallbackOrFlush) {
    const auto cancelled = std::make_error_code(std::errc::operation_canceled);
    for (bool at_startup : {false, true}) {
        Options o;
        o.handshake = true;
        to_connect(o);
        const auto* a = &p->on_connected(at_startup ? std::error_code{} : cancelled, "cancelled");
        if (at_startup) {
            ASSERT_EQ(a->step, Step::handshake);
            a = &p->on_handshake(cancelled, "cancelled");
        }
        EXPECT_EQ(a->step, Step::failed) << at_startup;
        EXPECT_EQ(p->failed_at(), at_startup ? Step::handshake : Step::connect);
        EXPECT_FALSE(a->flush_cache);
        EXPECT_EQ(p->error(), std::errc::operation_canceled);
        EXPECT_FALSE(has(p->reason(), "fell back")) << p->reason();
    }
    // During the fallback's own connect: failed, with both reasons.
    to_resolve();
    p->on_resolved(answer(ResultKind::denied));
    const auto& f = p->on_fallback(cancelled, "cancelled");
    EXPECT_EQ(f.step, Step::failed);
    EXPECT_EQ(p->error(), std::errc::operation_canceled);
}

TEST_F(ProcedureTest, FallbackConnectFailureFailsWithBothReasons) {
    to_resolve();
    p->on_resolved(answer(ResultKind::denied));
    const auto& a = p->on_fallback(E(ECONNREFUSED));
    EXPECT_EQ(a.step, Step::failed);
    EXPECT_EQ(p->failed_at(), Step::fallback);
    EXPECT_FALSE(a.flush_cache);
    EXPECT_EQ(p->error(), std::errc::connection_refused);
    EXPECT_TRUE(has(p->reason(), "PMDeny; fell back")) << p->reason();
    EXPECT_TRUE(has(p->reason(), "; connect to Conventional Address 10.0.0.2:80: ")) << p->reason();
}

TEST_F(ProcedureTest, FallbackDisabledRefusesEveryFallback) {
    Options o;
    o.fallback = false;
    to_resolve(o);
    const auto& a = p->on_resolved(answer(ResultKind::denied));
    EXPECT_EQ(a.step, Step::failed);
    EXPECT_FALSE(a.flush_cache);
    EXPECT_EQ(p->error(), std::errc::connection_refused);
    EXPECT_TRUE(has(p->reason(), "PMDeny; fallback disabled")) << p->reason();

    to_connect(o);
    const auto& b = p->on_connected(E(ECONNRESET));
    EXPECT_EQ(b.step, Step::failed);
    EXPECT_TRUE(b.flush_cache) << "the mapping did not work: flushed all the same";
    EXPECT_EQ(p->error(), std::errc::connection_refused);

    o.handshake = true;
    to_connect(o);
    p->on_connected({});
    const auto& c = p->on_handshake(std::make_error_code(std::errc::timed_out));
    EXPECT_EQ(c.step, Step::failed);
    EXPECT_TRUE(c.flush_cache);
    EXPECT_EQ(p->error(), std::errc::connection_refused);
}

TEST_F(ProcedureTest, UnusableProviderGoesStraightToTcpWithoutAsking) {
    Options o;
    o.unusable = "provider rdma: no device";
    auto& proc = make(o);
    const auto& a = proc.start();
    EXPECT_EQ(a.step, Step::fallback);
    EXPECT_FALSE(a.bind_cp);
    EXPECT_FALSE(a.flush_cache);
    EXPECT_EQ(a.endpoint, ep("10.0.0.2:80"));
    EXPECT_EQ(proc.reason(),
              "provider rdma: no device; fell back to TCP to the Conventional Address");
    EXPECT_FALSE(proc.asked());
    EXPECT_EQ(proc.on_fallback({}).step, Step::done);

    o.fallback = false;
    auto& q = make(o);
    EXPECT_EQ(q.start().step, Step::failed);
    EXPECT_EQ(q.error(), std::errc::no_such_device);
    EXPECT_EQ(q.failed_at(), Step::route);
    EXPECT_TRUE(has(q.reason(), "provider rdma: no device")) << q.reason();
}

TEST_F(ProcedureTest, ProviderUnusableFromCpIPAddrFallsBackBoundToIt) {
    auto& proc = make();
    proc.start();
    proc.on_route(0, ip("10.0.0.1"));
    const auto& a = proc.on_bind_failed(std::make_error_code(std::errc::no_such_device),
                                        "rdma: cannot bind", true);
    expect_fallback(a, false);
    EXPECT_FALSE(proc.asked());
    EXPECT_TRUE(has(proc.reason(), "rdma: cannot bind; fell back")) << proc.reason();
}

TEST_F(ProcedureTest, BindAndRouteErrorsFailBeforeAsking) {
    auto& proc = make();
    proc.start();
    proc.on_route(0, ip("10.0.0.1"));
    const auto& a = proc.on_bind_failed(E(EADDRINUSE), {});
    EXPECT_EQ(a.step, Step::failed);
    EXPECT_EQ(proc.error(), E(EADDRINUSE));
    EXPECT_TRUE(has(proc.reason(), "cannot bind TCP socket: ")) << proc.reason();
    EXPECT_FALSE(proc.asked());
    EXPECT_EQ(proc.resolution().kind, ResultKind::error);
    EXPECT_EQ(proc.resolution().error, Errc::socket);

    auto& q = make();
    q.start();
    EXPECT_EQ(q.on_route(ENETUNREACH, {}).step, Step::failed);
    EXPECT_EQ(q.error(), E(ENETUNREACH));
    EXPECT_TRUE(has(q.reason(), "no route to 10.0.0.2: ")) << q.reason();
    EXPECT_EQ(q.resolution().error, Errc::socket);
}

TEST_F(ProcedureTest, BadArgumentsFailAtStart) {
    for (const char* bad : {"10.0.0.2:0", "0.0.0.0:80", "[::]:80"}) {
        auto& proc = make({}, bad);
        EXPECT_EQ(proc.start().step, Step::failed) << bad;
        EXPECT_EQ(proc.error(), std::errc::invalid_argument);
        EXPECT_EQ(proc.resolution().error, Errc::invalid_argument);
    }
    for (auto t : {std::chrono::milliseconds(0), std::chrono::milliseconds(600'001)}) {
        Options o;
        o.connect_timeout = t;
        auto& proc = make(o);
        EXPECT_EQ(proc.start().step, Step::failed);
        EXPECT_TRUE(has(proc.reason(), "connect_timeout")) << proc.reason();
    }
    Options o;
    o.cp = ip("::1");
    auto& proc = make(o);
    EXPECT_EQ(proc.start().step, Step::failed);
    EXPECT_EQ(proc.resolution().error, Errc::invalid_argument);
    EXPECT_TRUE(has(proc.reason(), "same IP version")) << proc.reason();
}

TEST_F(ProcedureTest, GivenCpIPAddrSkipsTheRouteAndMappedAddressesAreUnmapped) {
    Options o;
    o.cp = ip("::ffff:10.0.0.9");
    auto& proc = make(o, "[::ffff:10.0.0.2]:80");
    const auto& a = proc.start();
    EXPECT_EQ(a.step, Step::bind);
    EXPECT_EQ(a.address, ip("10.0.0.9"));
    EXPECT_EQ(proc.conventional(), ep("10.0.0.2:80"));
}

}  // namespace
}  // namespace pmclient
