// SPDX-License-Identifier: Apache-2.0
// ChannelCore (sdp/soft): the decisions both soft-provider drivers share,
// driven over an in-memory pipe the way a driver would: gathered output
// written in pieces, the LLP requests, the startup outcome and its errors,
// the read/write errors, and a lost LLP while a write is in flight.
#include "sdp/soft/channel_core.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace {

using sdp::io::ChannelCore;
using Startup = ChannelCore::Startup;
using Llp = ChannelCore::Llp;

sdp::io::SessionConfig config() {
    sdp::io::SessionConfig c;
    c.engine.recv_buf_size = 4096;
    c.engine.send_buf_size = 4096;
    return c;
}

// A driver in miniature: writes next_output() (at most `chunk` bytes per
// write, like a short sendmsg), honours the LLP requests.
struct Pipe {
    ChannelCore& a;
    ChannelCore& b;
    std::size_t chunk = 1000;
    std::vector<Llp> a_llp, b_llp;

    void pump() {
        for (int round = 0; round < 100000; ++round) {
            if (!(move(a, b, a_llp) | move(b, a, b_llp))) {
                return;
            }
        }
    }
    bool move(ChannelCore& from, ChannelCore& to, std::vector<Llp>& llps) {
        bool moved = false;
        std::span<const std::uint8_t> segs[16];
        if (const std::size_t n = from.next_output(segs)) {
            std::vector<std::uint8_t> bytes;
            for (std::size_t i = 0; i < n && bytes.size() < chunk; ++i) {
                const auto take = std::min(segs[i].size(), chunk - bytes.size());
                bytes.insert(bytes.end(), segs[i].begin(), segs[i].begin() + take);
            }
            from.written(bytes.size());
            to.on_bytes(bytes);
            moved = true;
        }
        if (const Llp l = from.llp(); l != Llp::none) {
            llps.push_back(l);
            to.on_llp_lost();  // FIN or RST: the peer's TCP stream ends
            moved = true;
        }
        return moved;
    }
};

struct Pair {
    ChannelCore c{sdp::iwarp::MpaRole::initiator, config()};
    ChannelCore s{sdp::iwarp::MpaRole::responder, config()};
    Pipe p{c, s, 1000, {}, {}};
    void start() {
        c.set_mss(1460);
        s.set_mss(1460);
        ASSERT_TRUE(c.start());
        ASSERT_TRUE(s.start());
        p.pump();
        ASSERT_EQ(c.startup(), Startup::established) << c.describe();
        ASSERT_EQ(s.startup(), Startup::established) << s.describe();
    }
};

TEST(ChannelCore, DataBothWaysAndGracefulClose) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    std::vector<std::uint8_t> data(50000);
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<std::uint8_t>(i * 13 + 1);
    }
    std::size_t sent = 0;
    std::vector<std::uint8_t> got(data.size());
    std::size_t have = 0;
    std::error_code ec;
    for (int i = 0; i < 10000 && have < data.size(); ++i) {
        if (sent < data.size()) {
            if (auto n = x.c.write(std::span(data).subspan(sent), ec)) {
                sent += *n;
            }
            ASSERT_FALSE(ec) << ec.message();
        }
        x.p.pump();
        if (auto n = x.s.read(std::span(got).subspan(have), ec)) {
            ASSERT_FALSE(ec) << ec.message();
            have += *n;
        }
        x.p.pump();
    }
    EXPECT_EQ(got, data);
    EXPECT_FALSE(x.s.read(std::span(got), ec).has_value()) << "nothing more: wait";

    x.c.begin_close();
    x.p.pump();
    auto n = x.s.read(std::span(got), ec);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 0u) << "end of stream";
    EXPECT_FALSE(ec);
    EXPECT_EQ(x.c.write(std::span(data), ec), std::optional<std::size_t>(0));
    EXPECT_EQ(ec, std::errc::broken_pipe);
    x.s.begin_close();
    x.p.pump();
    EXPECT_TRUE(x.c.closed());
    EXPECT_TRUE(x.s.closed());
    EXPECT_FALSE(x.c.close_error());
    EXPECT_FALSE(x.c.take_fin()) << "the core already asked for the FIN";
}

TEST(ChannelCore, AbortResetsAndThePeerSeesConnectionReset) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    x.c.abort();
    x.p.pump();
    ASSERT_FALSE(x.p.a_llp.empty());
    EXPECT_EQ(x.p.a_llp.back(), Llp::reset);
    EXPECT_TRUE(x.c.rst_done());
    EXPECT_FALSE(x.c.take_reset()) << "the RST went already";
    std::uint8_t buf[16];
    std::error_code ec;
    EXPECT_EQ(x.s.read(buf, ec), std::optional<std::size_t>(0));
    EXPECT_EQ(ec, std::errc::connection_reset);
    EXPECT_EQ(x.s.close_error(), std::errc::connection_reset);
    EXPECT_EQ(x.c.read(buf, ec), std::optional<std::size_t>(0));
    EXPECT_EQ(ec, std::errc::not_connected) << "our own abort";
}

// 8.2.2: an abort after our DisConn sends AbortConn, then the normal LLP
// teardown (a FIN, not a reset), and the driver is told to keep the socket
// moving until both are written.
TEST(ChannelCore, AbortAfterShutdownSendsAbortConnThenFin) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    ASSERT_FALSE(x.c.shutdown_write());
    x.p.pump();  // the DisConn reaches s
    EXPECT_FALSE(x.c.abort_unsent()) << "nothing to send before the abort";
    x.c.abort();
    EXPECT_TRUE(x.c.abort_unsent()) << "the AbortConn is not written yet";
    EXPECT_FALSE(x.c.abort_written());
    x.p.pump();
    EXPECT_FALSE(x.c.abort_unsent());
    EXPECT_TRUE(x.c.abort_written());
    ASSERT_FALSE(x.p.a_llp.empty());
    EXPECT_EQ(x.p.a_llp.back(), Llp::shutdown_write) << "a FIN after the AbortConn";
    EXPECT_EQ(x.s.sdp().error(), sdp::engine::Error::peer_abort) << x.s.describe();
    EXPECT_TRUE(x.c.take_reset()) << "the driver decides; the core has not reset";
}

// Without a DisConn sent there is no AbortConn: the LLP is reset at once.
TEST(ChannelCore, AbortBeforeDisConnIsAReset) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    x.c.abort();
    EXPECT_FALSE(x.c.abort_unsent());
    EXPECT_FALSE(x.c.abort_written());
}

TEST(ChannelCore, LostLlpWaitsForTheWriteInFlight) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    std::vector<std::uint8_t> data(20000, 0x5a);
    std::error_code ec;
    ASSERT_TRUE(x.c.write(data, ec).value_or(0) > 0);
    std::span<const std::uint8_t> segs[16];
    const std::size_t n = x.c.next_output(segs);
    ASSERT_GT(n, 0u);
    EXPECT_TRUE(x.c.writing());
    EXPECT_EQ(x.c.next_output(segs), 0u) << "one write at a time";
    const std::vector<std::uint8_t> first(segs[0].begin(), segs[0].end());
    x.c.on_llp_lost(104);
    EXPECT_TRUE(x.c.rd_eof());
    EXPECT_FALSE(x.c.session().eof_seen()) << "the spans in flight stay valid";
    EXPECT_TRUE(std::equal(first.begin(), first.end(), segs[0].begin()));
    x.c.written(segs[0].size());
    EXPECT_TRUE(x.c.session().eof_seen());
    EXPECT_EQ(x.c.llp_error(), 104);
    EXPECT_FALSE(x.c.tx_pending());
}

TEST(ChannelCore, WriteFailureEndsTheStream) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    std::vector<std::uint8_t> data(5000, 1);
    std::error_code ec;
    ASSERT_TRUE(x.c.write(data, ec).has_value());
    std::span<const std::uint8_t> segs[16];
    ASSERT_GT(x.c.next_output(segs), 0u);
    x.c.write_failed(32);
    EXPECT_FALSE(x.c.writing());
    EXPECT_TRUE(x.c.rd_eof());
    EXPECT_TRUE(x.c.session().eof_seen());
    EXPECT_EQ(x.c.write(data, ec), std::optional<std::size_t>(0));
    EXPECT_TRUE(ec);
}

TEST(ChannelCore, StartupErrors) {
    // Not an MPA peer: protocol_error.
    ChannelCore s(sdp::iwarp::MpaRole::responder, config());
    const std::string junk = "GET / HTTP/1.0\r\n\r\n";
    s.on_bytes(std::span(reinterpret_cast<const std::uint8_t*>(junk.data()), junk.size()));
    EXPECT_EQ(s.startup(), Startup::failed);
    std::string why;
    EXPECT_EQ(s.startup_error(&why), std::errc::protocol_error);
    EXPECT_FALSE(why.empty());

    // The LLP went away during the startup: connection_reset.
    ChannelCore c(sdp::iwarp::MpaRole::initiator, config());
    ASSERT_TRUE(c.start());
    EXPECT_EQ(c.startup(), Startup::running);
    c.on_llp_lost();
    EXPECT_EQ(c.startup(), Startup::failed);
    EXPECT_EQ(c.startup_error(nullptr), std::errc::connection_reset);
}

TEST(ChannelCore, ShutdownWriteThenFinOnceDrained) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    EXPECT_FALSE(x.c.shutdown_write());
    x.p.pump();
    std::uint8_t buf[8];
    std::error_code ec;
    EXPECT_EQ(x.s.read(buf, ec), std::optional<std::size_t>(0));
    EXPECT_FALSE(ec) << "end of stream, not an error";
    EXPECT_FALSE(x.c.shutdown_write()) << "again: no error";
}

}  // namespace

// Socket duplication initiated here (13.1.1 step 5): while the Local Peer
// suspends, reads wait even after the old LLP's EOF; once the state is
// handed over every read and write fails with operation_canceled, and a
// close reports no error.
TEST(ChannelCore, HandingOffWaitsThenCancels) {
    Pair x;
    ASSERT_NO_FATAL_FAILURE(x.start());
    ASSERT_TRUE(x.s.sdp().suspend(5000));
    EXPECT_TRUE(x.s.handing_off());
    x.p.pump();  // SuspComm, SuspCommAck, the Remote Peer's FIN
    EXPECT_EQ(x.s.sdp().duplication(), sdp::engine::Dup::local_done) << x.s.describe();
    EXPECT_TRUE(x.s.rd_eof()) << "the Remote Peer closed the old LLP";
    EXPECT_TRUE(x.c.resume_due());
    std::vector<std::uint8_t> buf(100);
    std::error_code ec;
    EXPECT_FALSE(x.s.read_ready());
    EXPECT_FALSE(x.s.read(buf, ec).has_value()) << "waits for the hand-off: " << ec.message();

    auto carry = x.s.sdp().hand_over();
    ASSERT_TRUE(carry);
    EXPECT_FALSE(x.s.handing_off());
    EXPECT_TRUE(x.s.read_ready());
    EXPECT_EQ(x.s.read(buf, ec), std::optional<std::size_t>(0));
    EXPECT_EQ(ec, std::errc::operation_canceled);
    EXPECT_EQ(x.s.write(buf, ec), std::optional<std::size_t>(0));
    EXPECT_EQ(ec, std::errc::operation_canceled);
    x.s.begin_close();
    EXPECT_TRUE(x.s.closed());
    EXPECT_FALSE(x.s.close_error());
}
