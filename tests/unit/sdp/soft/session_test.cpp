// SPDX-License-Identifier: Apache-2.0
// Two SoftSessions (MPA + soft QP + SDP engine, sans-I/O) joined by an
// in-memory byte pipe: startup, data both ways, half-close and teardown,
// abort, and startup against a peer that is not SDP.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "sdp/iwarp/mpa.hpp"
#include "sdp/soft/soft_session.hpp"

namespace {

using sdp::io::LlpRequest;
using sdp::io::SessionPhase;
using sdp::io::SoftSession;

// Moves bytes both ways until nothing moves; honours FIN requests.
struct Pipe {
    SoftSession& a;
    SoftSession& b;
    bool a_fin = false, b_fin = false;
    std::size_t chunk = 7;  // odd split sizes

    void pump() {
        for (int round = 0; round < 100000; ++round) {
            bool moved = move(a, b, a_fin) | move(b, a, b_fin);
            if (!moved) {
                return;
            }
        }
    }
    bool move(SoftSession& from, SoftSession& to, bool& fin) {
        std::vector<std::uint8_t> out;
        from.take_output(out);
        for (std::size_t off = 0; off < out.size(); off += chunk) {
            to.on_bytes(std::span(out).subspan(off, std::min(chunk, out.size() - off)));
        }
        bool moved = !out.empty();
        if (!fin && from.llp_request() == LlpRequest::fin && !from.has_output()) {
            fin = true;
            to.on_eof();
            moved = true;
        }
        return moved;
    }
};

sdp::io::SessionConfig config() {
    sdp::io::SessionConfig c;
    c.engine.recv_buf_size = 4096;
    c.engine.send_buf_size = 4096;
    return c;
}

TEST(SoftSession, StartupDataAndGracefulClose) {
    SoftSession c(sdp::iwarp::MpaRole::initiator, config());
    SoftSession s(sdp::iwarp::MpaRole::responder, config());
    c.set_mss(1460);
    s.set_mss(1460);
    ASSERT_TRUE(c.start());
    Pipe p{c, s};
    p.pump();
    ASSERT_EQ(c.phase(), SessionPhase::established) << c.describe_error();
    ASSERT_EQ(s.phase(), SessionPhase::established) << s.describe_error();
    EXPECT_TRUE(c.mpa().outcome().crc);
    EXPECT_TRUE(c.mpa().outcome().p2p);

    std::vector<std::uint8_t> data(100000);
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<std::uint8_t>(i * 31 + 7);
    }
    std::size_t sent = 0;
    std::vector<std::uint8_t> got;
    std::vector<std::uint8_t> buf(3000);
    for (int i = 0; i < 10000 && got.size() < data.size(); ++i) {
        sent += c.sdp().write(std::span(data).subspan(sent));
        p.pump();
        std::size_t n = s.sdp().read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        p.pump();
    }
    EXPECT_EQ(got, data);

    c.sdp().shutdown_write();
    p.pump();
    EXPECT_TRUE(s.sdp().eof());
    s.sdp().shutdown_write();
    p.pump();
    EXPECT_EQ(c.sdp().state(), sdp::engine::State::closed);
    EXPECT_EQ(s.sdp().state(), sdp::engine::State::closed);
}

// Read Zcopy (9.2) over the soft QP: the SrcAvail's STag names the writer's
// own buffer, the reader's RDMA Read places the rest straight into its
// buffer, the final RdmaRdCompl invalidates the writer's STag remotely.
TEST(SoftSession, ReadZcopyThroughTheSoftQp) {
    auto cfg = config();
    cfg.engine.bcopy_threshold = 8192;
    cfg.stag_seed = 42;
    SoftSession c(sdp::iwarp::MpaRole::initiator, cfg);
    cfg.stag_seed = 43;
    SoftSession s(sdp::iwarp::MpaRole::responder, cfg);
    c.set_mss(1460);
    s.set_mss(1460);
    ASSERT_TRUE(c.start());
    Pipe p{c, s};
    p.chunk = 1500;
    p.pump();
    ASSERT_EQ(c.phase(), SessionPhase::established) << c.describe_error();

    std::vector<std::uint8_t> data(1 << 20);
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<std::uint8_t>(i * 131 + 3);
    }
    ASSERT_TRUE(c.sdp().write_zcopy(data));
    p.pump();
    std::vector<std::uint8_t> got(data.size());
    const std::size_t inline_n = s.sdp().read(got);
    ASSERT_GT(inline_n, 0u);
    ASSERT_EQ(s.sdp().zcopy_readable(), data.size() - inline_n);
    ASSERT_TRUE(s.sdp().read_zcopy(std::span(got).subspan(inline_n)));
    p.pump();
    EXPECT_EQ(s.sdp().take_zcopy_read(), std::optional<std::size_t>(data.size() - inline_n));
    EXPECT_EQ(got, data);
    EXPECT_FALSE(c.sdp().zcopy_write_pending());
    EXPECT_EQ(c.sdp().stats().zcopy_bytes_sent, data.size() - inline_n);
    EXPECT_EQ(s.sdp().state(), sdp::engine::State::established) << s.describe_error();
    EXPECT_EQ(c.sdp().state(), sdp::engine::State::established) << c.describe_error();
    // Bcopy goes on after it.
    const std::vector<std::uint8_t> tail(5000, 9);
    EXPECT_EQ(c.sdp().write(tail), tail.size());
    p.pump();
    std::vector<std::uint8_t> buf(8000);
    EXPECT_EQ(s.sdp().read(buf), tail.size());
}

TEST(SoftSession, AbortRequestsReset) {
    SoftSession c(sdp::iwarp::MpaRole::initiator, config());
    SoftSession s(sdp::iwarp::MpaRole::responder, config());
    ASSERT_TRUE(c.start());
    Pipe p{c, s};
    p.pump();
    ASSERT_EQ(s.phase(), SessionPhase::established);
    c.sdp().abort();
    EXPECT_EQ(c.llp_request(), LlpRequest::rst);
    s.on_eof();  // the RST
    EXPECT_EQ(s.sdp().state(), sdp::engine::State::reset);
}

TEST(SoftSession, GarbageFailsTheStartup) {
    SoftSession s(sdp::iwarp::MpaRole::responder, config());
    const std::string junk = "GET / HTTP/1.0\r\n\r\n";
    s.on_bytes(std::span(reinterpret_cast<const std::uint8_t*>(junk.data()), junk.size()));
    EXPECT_EQ(s.phase(), SessionPhase::failed);
    EXPECT_FALSE(s.describe_error().empty());
}

// An MPA initiator without peer-to-peer mode (stock Linux siw) cannot get a
// HelloAck within RFC 5044 7.1.2: the responder rejects at once, clearly.
TEST(SoftSession, InitiatorWithoutPeerToPeerIsRejectedAtOnce) {
    sdp::iwarp::MpaConfig m;
    m.enhanced = true;
    m.p2p = false;
    SoftSession hello_source(sdp::iwarp::MpaRole::initiator, config());
    ASSERT_TRUE(hello_source.start());
    // The Hello the real initiator would carry: our initiator's request,
    // taken apart, gives it; rebuild the request without peer-to-peer.
    std::vector<std::uint8_t> p2p_request;
    hello_source.take_output(p2p_request);
    sdp::iwarp::MpaNegotiator probe(sdp::iwarp::MpaRole::responder, sdp::iwarp::MpaConfig{});
    (void)probe.on_bytes(p2p_request);
    ASSERT_EQ(probe.state(), sdp::iwarp::MpaState::request_received);
    m.private_data = probe.outcome().peer_private_data;
    sdp::iwarp::MpaNegotiator init(sdp::iwarp::MpaRole::initiator, m);
    ASSERT_FALSE(init.start());
    const std::vector<std::uint8_t> request = init.take_output();

    SoftSession s(sdp::iwarp::MpaRole::responder, config());
    s.on_bytes(request);
    EXPECT_EQ(s.phase(), SessionPhase::failed);
    EXPECT_NE(s.describe_error().find("peer-to-peer"), std::string::npos) << s.describe_error();
    EXPECT_EQ(s.llp_request(), LlpRequest::fin);
    std::vector<std::uint8_t> reply;
    s.take_output(reply);
    (void)init.on_bytes(reply);
    EXPECT_EQ(init.state(), sdp::iwarp::MpaState::failed);  // the Reject bit
}

TEST(SoftSession, EofDuringStartupFails) {
    SoftSession c(sdp::iwarp::MpaRole::initiator, config());
    ASSERT_TRUE(c.start());
    c.on_eof();
    EXPECT_EQ(c.phase(), SessionPhase::failed);
}

}  // namespace
