// SPDX-License-Identifier: Apache-2.0
// Socket duplication (13.1.1, 13.1.2) end to end: a real sdp::Stream (the
// Remote Peer) against a test peer that plays the Controlling and then the
// non-Controlling Address Space with the project's soft session
// (sdp/soft/soft_session.hpp) on raw loopback sockets, pumped by hand:
// SuspComm with a new port, the SuspCommAck, the old LLP closed, the new
// connection accepted on the new port from the old source address and port
// (step 1), HelloAck with the old private buffer size (step 7a), and
// 8 MiB each way checked byte for byte with the suspension in the middle.
// Every wait is bounded (poll timeouts, io_timeout, a deadline per phase).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "duplication_peer.hpp"
#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using namespace sdptest::dup;  // the test peer (duplication_peer.hpp)

}  // namespace

// 13.1.1 (Remote Peer, steps 3, 4, 8) with 8 MiB each way, suspended in the
// middle; 13.1.1 step 1 (addresses), step 7a (private buffer size).
TEST(SdpDuplication, Section13_1_1_StreamResumesOnTheNewPortWithEveryByteOnce) {
    sdptest::TcpListener first;
    ASSERT_TRUE(first.ok());
    PeerReport r;
    std::thread peer([&] { run_peer(first, r); });

    sdp::StreamOptions o;
    o.io_timeout = 60s;
    o.handshake_timeout = 5s;
    o.linger = 5s;
    sdp::Stream client;
    auto ec = client.connect_sdp(first.endpoint(), o);
    if (ec) {
        ADD_FAILURE() << ec.message() << " " << client.info().reason;
        peer.join();
        return;
    }

    std::error_code wec;
    std::thread writer([&] {
        std::vector<std::uint8_t> buf(100 * 1000);
        std::size_t sent = 0;
        while (sent < kBytes && !wec) {
            const std::size_t k = std::min(buf.size(), kBytes - sent);
            sdptest::pattern(std::span(buf).first(k), sent, kClientSeed);
            sent += client.write(std::span(buf).first(k), wec);
        }
    });
    std::vector<std::uint8_t> buf(77 * 1000);
    std::size_t got = 0;
    bool ok = true;
    std::error_code rec;
    while (got < kBytes) {
        const std::size_t n = client.read_some(buf, rec);
        if (rec || n == 0) {
            break;
        }
        ok = ok && sdptest::check_pattern(std::span(buf).first(n), got, kPeerSeed);
        got += n;
    }
    writer.join();
    EXPECT_FALSE(rec) << rec.message() << " " << client.describe();
    EXPECT_FALSE(wec) << wec.message() << " " << client.describe();
    EXPECT_EQ(got, kBytes);
    EXPECT_TRUE(ok) << "bytes from the peer lost, duplicated or reordered";
    // End of stream after the peer's DisConn, then the graceful close.
    if (got == kBytes) {
        EXPECT_EQ(client.read_some(buf, rec), 0u);
        EXPECT_FALSE(rec) << rec.message();
    }
    const auto st = client.stats();
    EXPECT_EQ(st.susp_comm_received, 1u);
    EXPECT_EQ(st.susp_comm_ack_sent, 1u);
    EXPECT_EQ(st.resumes, 1u);
    EXPECT_FALSE(client.close());
    peer.join();

    EXPECT_TRUE(r.failure.empty()) << r.failure;
    EXPECT_EQ(r.received, kBytes);
    EXPECT_TRUE(r.pattern_ok) << "bytes from the client lost, duplicated or reordered";
    EXPECT_EQ(r.susp_comm_ack_received, 1u);
    EXPECT_EQ(r.new_client.port, r.old_client.port) << "step 1: the same source port";
    EXPECT_EQ(r.new_recv_size, r.old_recv_size) << "step 7a: the old private buffer size";
}

// 13.1.1 step 4: the new connection cannot be made (nobody listens on the
// SuspComm's port): the stream is reset with the reason, no hang.
TEST(SdpDuplication, Section13_1_1_FailedReconnectResetsTheStream) {
    sdptest::TcpListener first;
    ASSERT_TRUE(first.ok());
    std::atomic<bool> peer_ok{false};
    std::thread peer([&] { peer_ok = sdptest::dup::suspend_to_dead_port(first); });
    sdp::StreamOptions o;
    o.io_timeout = 20s;
    o.handshake_timeout = 2s;
    sdp::Stream client;
    auto ec = client.connect_sdp(first.endpoint(), o);
    if (ec) {
        ADD_FAILURE() << ec.message();
        peer.join();
        return;
    }
    std::vector<std::uint8_t> buf(1024);
    std::error_code rec;
    const auto t0 = Clock::now();
    EXPECT_EQ(client.read_some(buf, rec), 0u);
    EXPECT_EQ(rec, std::errc::connection_reset) << rec.message();
    EXPECT_LT(Clock::now() - t0, 10s);
    EXPECT_NE(client.describe().find("duplication"), std::string::npos) << client.describe();
    peer.join();
    EXPECT_TRUE(peer_ok);
}
