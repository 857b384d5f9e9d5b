// SPDX-License-Identifier: Apache-2.0
// End-to-end SDP streams over loopback on the soft iWARP provider (no port
// mapper): sizes with content checks, both directions at once, half-close,
// abort, a killed peer, startup failures. Every wait is bounded by
// StreamOptions::io_timeout / handshake_timeout or a join of a thread whose
// own calls are bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using sdptest::check_pattern;
using sdptest::pattern;

sdp::StreamOptions opts() {
    sdp::StreamOptions o;
    o.io_timeout = 20s;
    o.handshake_timeout = 5s;
    o.linger = 5s;
    return o;
}

struct Pair {
    sdp::Acceptor acc;
    sdp::Stream client;
    sdp::Stream server;
};

// Opens an acceptor on 127.0.0.1:0 (with `server` options, default: the
// client's) and connects a client to it.
void make_pair(Pair& p, const sdp::StreamOptions& o = opts(),
               const std::optional<sdp::StreamOptions>& server = std::nullopt) {
    sdp::AcceptorOptions ao;
    ao.stream = server.value_or(o);
    ASSERT_FALSE(p.acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    std::error_code aec;
    std::thread t([&] { aec = p.acc.accept(p.server, 10s); });
    auto cec = p.client.connect_sdp(p.acc.local_endpoint(), o);
    t.join();
    ASSERT_FALSE(cec) << cec.message() << " " << p.client.info().reason;
    ASSERT_FALSE(aec) << aec.message() << " " << p.acc.last_error();
    ASSERT_EQ(p.client.used(), sdp::Transport::sdp);
    ASSERT_EQ(p.server.used(), sdp::Transport::sdp);
}

// Writes `n` pattern bytes (seeded) in chunks of `chunk`.
// pause: before each write (a slow writer: the reader waits first).
std::error_code send_pattern(sdp::Stream& s, std::size_t n, std::uint32_t seed,
                             std::size_t chunk = 256 * 1024, std::chrono::milliseconds pause = {}) {
    std::vector<std::uint8_t> buf;
    std::size_t off = 0;
    std::error_code ec;
    while (off < n) {
        const std::size_t k = std::min(chunk, n - off);
        buf.resize(k);
        pattern(buf, off, seed);
        std::this_thread::sleep_for(pause);
        s.write(buf, ec);
        if (ec) {
            return ec;
        }
        off += k;
    }
    return {};
}

// Reads until EOF; checks the pattern; returns the count.
std::size_t recv_pattern(sdp::Stream& s, std::uint32_t seed, std::error_code& ec, bool& ok) {
    std::vector<std::uint8_t> buf(300 * 1024);
    std::size_t off = 0;
    ok = true;
    while (true) {
        std::size_t n = s.read_some(buf, ec);
        if (ec || n == 0) {
            return off;
        }
        if (ok && !check_pattern(std::span(buf.data(), n), off, seed)) {
            ok = false;
        }
        off += n;
    }
}

void transfer(std::size_t n) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::error_code wec;
    std::thread w([&] {
        wec = send_pattern(p.client, n, 7);
        if (!wec) {
            wec = p.client.shutdown_write();
        }
    });
    std::error_code rec;
    bool ok = false;
    const std::size_t got = recv_pattern(p.server, 7, rec, ok);
    w.join();
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_FALSE(rec) << rec.message() << " " << p.server.describe();
    EXPECT_EQ(got, n);
    EXPECT_TRUE(ok);
    // Graceful close from both sides (8.2.1).
    std::error_code sc;
    std::thread c([&] { sc = p.server.close(); });
    std::vector<std::uint8_t> b(16);
    std::error_code ec;
    EXPECT_EQ(p.client.read_some(b, ec), 0u);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_FALSE(p.client.close());
    c.join();
    EXPECT_FALSE(sc) << sc.message();
}

// Read Zcopy (9.2) end to end on the soft provider: both ends zcopy, both
// directions at once (the crossing advertisements of 9.2's deadlock rule),
// and the reader's buffer sometimes too small (SendSm, 9.5.2.1). Every byte
// arrives in order; the counters show which mechanism moved it.
struct ZcopyRun {
    std::size_t n = 0;
    std::size_t write_chunk = 0;
    std::size_t read_buf = 0;
    sdp::StreamStats client, server;
    std::chrono::milliseconds write_pause{};
    bool read_exactly = false;  // Stream::read() instead of read_some()
    bool lend = false;          // no io_timeout: reads may lend (Write Zcopy)
};

void zcopy_transfer(ZcopyRun& r, sdp::Mechanism client_mech, sdp::Mechanism server_mech,
                    bool both_ways) {
    auto oc = opts(), os = opts();
    oc.mechanism = client_mech;
    os.mechanism = server_mech;
    if (r.lend)
        oc.io_timeout = os.io_timeout = {};
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p, oc, os));
    auto reader = [&](sdp::Stream& s, std::uint32_t seed, std::size_t& got, bool& ok,
                      std::error_code& ec) {
        std::vector<std::uint8_t> buf(r.read_buf);
        ok = true;
        while (true) {
            const std::size_t k = r.read_exactly ? s.read(buf, ec) : s.read_some(buf, ec);
            if (ec || k == 0)
                return;
            ok = ok && check_pattern(std::span(buf.data(), k), got, seed);
            got += k;
        }
    };
    std::error_code w1, w2, r1, r2;
    std::size_t g1 = 0, g2 = 0;
    bool ok1 = false, ok2 = true;
    std::thread cw([&] {
        w1 = send_pattern(p.client, r.n, 21, r.write_chunk, r.write_pause);
        if (!w1)
            w1 = p.client.shutdown_write();
    });
    std::thread sw;
    if (both_ways) {
        sw = std::thread([&] {
            w2 = send_pattern(p.server, r.n, 22, r.write_chunk);
            if (!w2)
                w2 = p.server.shutdown_write();
        });
    } else {
        ASSERT_FALSE(p.server.shutdown_write());
    }
    std::thread cr([&] { reader(p.client, 22, g2, ok2, r2); });
    reader(p.server, 21, g1, ok1, r1);
    cw.join();
    if (sw.joinable())
        sw.join();
    cr.join();
    EXPECT_FALSE(w1) << w1.message();
    EXPECT_FALSE(w2) << w2.message();
    EXPECT_FALSE(r1) << r1.message() << " " << p.server.describe();
    EXPECT_FALSE(r2) << r2.message() << " " << p.client.describe();
    EXPECT_EQ(g1, r.n);
    EXPECT_TRUE(ok1);
    EXPECT_EQ(g2, both_ways ? r.n : 0u);
    EXPECT_TRUE(ok2);
    r.client = p.client.stats();
    r.server = p.server.stats();
    EXPECT_EQ(r.server.bytes_received, r.n);
    EXPECT_FALSE(p.client.close());
    EXPECT_FALSE(p.server.close());
}

TEST(SdpStreamZcopy, OneWayLargeWritesAreReadByTheReader) {
    ZcopyRun r{
        .n = 32u << 20, .write_chunk = 1 << 20, .read_buf = 1 << 20, .client = {}, .server = {}};
    zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::zcopy, false);
    EXPECT_GT(r.client.zcopy_bytes_sent, r.n / 2);
    EXPECT_EQ(r.server.zcopy_bytes_received, r.client.zcopy_bytes_sent);
}

// Write Zcopy (9.3): the reader's 1 MiB buffers are lent with SinkAvail
// whenever nothing is queued, and the (slow) writer's large writes go
// straight into them by RDMA Write (RdmaWrCompl). A writer that is ahead
// advertises first (SrcAvail); when they cross, Write Zcopy wins (11.3).
TEST(SdpStreamZcopy, WriteZcopyIntoLentReaderBuffers) {
    ZcopyRun r{.n = 16u << 20,
               .write_chunk = 1 << 20,
               .read_buf = 1 << 20,
               .client = {},
               .server = {},
               .write_pause = 5ms,
               .lend = true};
    zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::zcopy, false);
    // The first large write goes by Read Zcopy in Combined Mode; its
    // RdmaRdCompl carries the reader's REQ_PIPE and the writer moves the
    // half to Pipelined Mode, where the reader may lend buffers (12.3).
    EXPECT_EQ(r.client.mode_changes_sent, 1u);
    EXPECT_EQ(r.server.mode_changes_received, 1u);
    EXPECT_GT(r.server.sink_avail_sent, 0u);
    EXPECT_GT(r.server.write_zcopy_bytes_received, 0u);
    EXPECT_EQ(r.server.write_zcopy_bytes_received, r.client.write_zcopy_bytes_sent);
    EXPECT_EQ(r.server.zcopy_bytes_received, r.client.zcopy_bytes_sent);
}

// 9.3: a reader that needs its buffer filled (Stream::read, MSG_WAITALL
// style) never lends it; nor does a reader whose peer writes by Bcopy only:
// that Data Source never moves its half to Pipelined Mode (12.3), and
// SinkAvail exists only there (Figure 25).
TEST(SdpStreamZcopy, ReadExactlyNeverLendsAndBcopyPeerFillsByData) {
    {
        ZcopyRun r{.n = 8u << 20,
                   .write_chunk = 1 << 20,
                   .read_buf = 1 << 20,
                   .client = {},
                   .server = {},
                   .write_pause = 2ms,
                   .read_exactly = true,
                   .lend = true};
        zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::zcopy, false);
        EXPECT_EQ(r.server.sink_avail_sent, 0u);
    }
    {
        ZcopyRun r{.n = 4u << 20,
                   .write_chunk = 512 * 1024,
                   .read_buf = 1 << 20,
                   .client = {},
                   .server = {},
                   .write_pause = 2ms,
                   .lend = true};
        zcopy_transfer(r, sdp::Mechanism::bcopy, sdp::Mechanism::zcopy, false);
        EXPECT_EQ(r.server.sink_avail_sent, 0u);
        EXPECT_EQ(r.client.write_zcopy_bytes_sent, 0u);
        EXPECT_EQ(r.server.write_zcopy_bytes_received, 0u);
    }
}

// Both ways at once with lending readers: SinkAvails and SrcAvails cross
// in both directions (9.5.1 decides each crossing) and nothing hangs.
// Mechanism::automatic: the writer tries both mechanisms on each size class
// (three writes each), then keeps to what measured cheaper, trying the
// other every 16th write; the bytes arrive intact either way, and the
// reader never lends (Write Zcopy is not an automatic choice).
TEST(SdpStreamZcopy, AutomaticTriesBothAndDeliversEveryByte) {
    ZcopyRun r{.n = 24u << 20,
               .write_chunk = 1 << 20,
               .read_buf = 1 << 20,
               .client = {},
               .server = {},
               .lend = true};
    zcopy_transfer(r, sdp::Mechanism::automatic, sdp::Mechanism::automatic, false);
    EXPECT_GE(r.client.zcopy_bytes_sent, 3u * (1 << 20) - 3 * 64) << "three zero-copy tries";
    EXPECT_GE(r.client.bytes_sent - r.client.zcopy_bytes_sent, 3u * (1 << 20)) << "and Bcopy ones";
    EXPECT_EQ(r.server.sink_avail_sent, 0u);
    EXPECT_EQ(r.server.zcopy_bytes_received, r.client.zcopy_bytes_sent);
}

TEST(SdpStreamZcopy, BothWaysAtOnceWithLentBuffers) {
    ZcopyRun r{.n = 16u << 20,
               .write_chunk = 256 * 1024,
               .read_buf = 300 * 1024,
               .client = {},
               .server = {},
               .lend = true};
    zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::zcopy, true);
    EXPECT_GT(r.client.sink_avail_sent + r.server.sink_avail_sent, 0u);
}

TEST(SdpStreamZcopy, BothWaysAtOnce) {
    ZcopyRun r{.n = 16u << 20,
               .write_chunk = 256 * 1024,
               .read_buf = 300 * 1024,
               .client = {},
               .server = {}};
    zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::zcopy, true);
    EXPECT_GT(r.client.zcopy_bytes_sent + r.server.zcopy_bytes_sent, 0u);
}

TEST(SdpStreamZcopy, SmallReaderBuffersForceBcopy) {
    ZcopyRun r{
        .n = 4u << 20, .write_chunk = 512 * 1024, .read_buf = 4000, .client = {}, .server = {}};
    zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::zcopy, false);
    EXPECT_GT(r.server.send_sm_sent, 0u);
    EXPECT_EQ(r.client.send_sm_received, r.server.send_sm_sent);
}

TEST(SdpStreamZcopy, BcopyPeerAnswersSendSm) {
    ZcopyRun r{
        .n = 4u << 20, .write_chunk = 512 * 1024, .read_buf = 1 << 20, .client = {}, .server = {}};
    zcopy_transfer(r, sdp::Mechanism::zcopy, sdp::Mechanism::bcopy, false);
    EXPECT_EQ(r.client.zcopy_bytes_sent, 0u);
    EXPECT_GT(r.server.send_sm_sent, 0u);
}

// A reader that closes while the peer's zero-copy write waits for it: the
// advertisement is declined (SendSm), the rest is discarded, and both sides
// close gracefully (before, the close ran into its linger and aborted).
TEST(SdpStreamZcopy, CloseWhilePeerWaitsForItsBufferToBeRead) {
    auto o = opts();
    o.mechanism = sdp::Mechanism::zcopy;
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p, o));
    std::error_code wec;
    std::thread w([&] {
        wec = send_pattern(p.client, 4u << 20, 3, 1 << 20);
        if (!wec)
            wec = p.client.shutdown_write();
    });
    std::vector<std::uint8_t> first(16);
    std::error_code ec;
    ASSERT_GT(p.server.read_some(first, ec), 0u) << ec.message();
    EXPECT_FALSE(p.server.close());  // graceful: no timed_out after linger
    w.join();
    EXPECT_FALSE(wec) << wec.message();
    std::vector<std::uint8_t> b(16);
    EXPECT_EQ(p.client.read_some(b, ec), 0u);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_FALSE(p.client.close());
}

// io_timeout bounds a zero-copy write whose peer never reads: timed_out, and
// the connection is reset (the region is gone before write() returns).
TEST(SdpStreamZcopy, WriteTimesOutWhenThePeerNeverReads) {
    auto o = opts();
    o.mechanism = sdp::Mechanism::zcopy;
    o.io_timeout = 300ms;
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p, o));
    std::vector<std::uint8_t> big(1 << 20, 1);
    std::error_code ec;
    p.client.write(big, ec);
    EXPECT_EQ(ec, std::errc::timed_out) << ec.message();
    std::vector<std::uint8_t> b(16);
    p.client.read_some(b, ec);
    EXPECT_TRUE(ec) << "the stream was reset";
}

// With io_timeout a read never lends its buffer (it could not give it back
// on time if the peer is idle, 9.5.5): it times out as with Bcopy, and the
// stream goes on.
TEST(SdpStreamZcopy, ReadWithTimeoutDoesNotLend) {
    auto o = opts();
    o.mechanism = sdp::Mechanism::zcopy;
    o.io_timeout = 300ms;
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p, o));
    std::vector<std::uint8_t> buf(1 << 20);
    std::error_code ec;
    EXPECT_EQ(p.server.read_some(buf, ec), 0u);
    EXPECT_EQ(ec, std::errc::timed_out) << ec.message();
    EXPECT_EQ(p.server.stats().sink_avail_sent, 0u);
    std::vector<std::uint8_t> data(200000);
    pattern(data, 0, 9);
    std::error_code wec;
    std::thread w([&] { p.client.write(data, wec); });
    std::size_t got = 0;
    bool ok = true;
    while (got < data.size()) {
        const std::size_t k = p.server.read_some(buf, ec);
        ASSERT_FALSE(ec) << ec.message();
        ASSERT_GT(k, 0u);
        ok = ok && check_pattern(std::span(buf.data(), k), got, 9);
        got += k;
    }
    w.join();
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_TRUE(ok);
}

// Transactions (9.4) end to end: once the server has moved its send half
// to Pipelined Mode (its first large write goes by Read Zcopy; the client's
// RdmaRdCompl carries REQ_PIPE), each transact() sends the command inside
// the SinkAvail that lends the reply buffer, and the server's reply write
// goes straight into it. Every reply is checked; the same calls over Bcopy
// are write() + read_some() and give the same bytes.
std::vector<std::uint8_t> pattern_bytes(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> v(n);
    pattern(v, 0, seed);
    return v;
}

void transactions(sdp::Mechanism mech, sdp::StreamStats& client_stats) {
    auto o = opts();
    o.mechanism = mech;
    o.io_timeout = {};  // reads may lend only without it
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p, o, o));
    constexpr int kRounds = 20;
    constexpr std::size_t kReply = 200 * 1024;
    std::error_code sec;
    std::thread server([&] {
        sec = send_pattern(p.server, 1 << 20, 30);  // the greeting
        std::vector<std::uint8_t> cmd(8);
        for (int i = 0; i < kRounds && !sec; ++i) {
            if (p.server.read(cmd, sec) != cmd.size())
                break;
            const std::vector<std::uint8_t> reply = pattern_bytes(kReply, cmd[0]);
            p.server.write(reply, sec);
        }
    });
    std::error_code ec;
    std::vector<std::uint8_t> greeting(1 << 20);
    ASSERT_EQ(p.client.read(greeting, ec), greeting.size()) << ec.message();
    bool ok = true;
    for (int i = 0; i < kRounds && ok; ++i) {
        std::vector<std::uint8_t> cmd(8, static_cast<std::uint8_t>(40 + i));
        std::vector<std::uint8_t> reply(256 * 1024);
        std::size_t n = p.client.transact(cmd, reply, ec);
        while (!ec && n > 0 && n < kReply) {
            const std::size_t k = p.client.read_some(std::span(reply).subspan(n, kReply - n), ec);
            if (k == 0)
                break;
            n += k;
        }
        ASSERT_FALSE(ec) << ec.message() << " " << p.client.describe();
        ASSERT_EQ(n, kReply);
        reply.resize(kReply);
        ok = reply == pattern_bytes(kReply, cmd[0]);
        EXPECT_TRUE(ok) << "round " << i;
    }
    server.join();
    EXPECT_FALSE(sec) << sec.message();
    client_stats = p.client.stats();
    std::error_code sc;
    std::thread closer([&] { sc = p.server.close(); });
    EXPECT_FALSE(p.client.close());
    closer.join();
    EXPECT_FALSE(sc) << sc.message();
}

TEST(SdpStreamZcopy, Section9_4TransactionsLendTheReplyBuffer) {
    sdp::StreamStats st;
    ASSERT_NO_FATAL_FAILURE(transactions(sdp::Mechanism::zcopy, st));
    EXPECT_GT(st.transactions_sent, 0u);
    EXPECT_GT(st.write_zcopy_bytes_received, 0u);
    EXPECT_EQ(st.mode_changes_received, 1u);
}

TEST(SdpStreamZcopy, Section9_4TransactionsOverBcopyAreWriteAndRead) {
    sdp::StreamStats st;
    ASSERT_NO_FATAL_FAILURE(transactions(sdp::Mechanism::bcopy, st));
    EXPECT_EQ(st.transactions_sent, 0u);
    EXPECT_EQ(st.zcopy_bytes_received, 0u);
}

TEST(SdpStream, OneByte) {
    transfer(1);
}

TEST(SdpStream, SixtyFourKiB) {
    transfer(64 * 1024);
}

TEST(SdpStream, SixtyFourMiB) {
    transfer(64u * 1024 * 1024);
}

TEST(SdpStream, OddSizesAndSmallWrites) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    const std::size_t n = 3 * 1024 * 1024 + 17;
    std::error_code wec;
    std::thread w([&] {
        wec = send_pattern(p.client, n, 3, 1000);
        p.client.shutdown_write();
    });
    std::error_code rec;
    bool ok = false;
    EXPECT_EQ(recv_pattern(p.server, 3, rec, ok), n);
    w.join();
    EXPECT_TRUE(ok);
    EXPECT_FALSE(wec);
    EXPECT_FALSE(rec);
}

TEST(SdpStream, BothDirectionsAtOnce) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    const std::size_t n = 16u * 1024 * 1024;
    std::error_code w1, w2, r1, r2;
    bool ok1 = false, ok2 = false;
    std::size_t g1 = 0, g2 = 0;
    std::thread tw1([&] {
        w1 = send_pattern(p.client, n, 11);
        p.client.shutdown_write();
    });
    std::thread tw2([&] {
        w2 = send_pattern(p.server, n, 22);
        p.server.shutdown_write();
    });
    std::thread tr1([&] { g1 = recv_pattern(p.client, 22, r1, ok1); });
    g2 = recv_pattern(p.server, 11, r2, ok2);
    tw1.join();
    tw2.join();
    tr1.join();
    EXPECT_FALSE(w1) << w1.message();
    EXPECT_FALSE(w2) << w2.message();
    EXPECT_FALSE(r1) << r1.message();
    EXPECT_FALSE(r2) << r2.message();
    EXPECT_EQ(g1, n);
    EXPECT_EQ(g2, n);
    EXPECT_TRUE(ok1);
    EXPECT_TRUE(ok2);
    // Both sides sent DisConn: close() completes at once on both.
    std::error_code c1;
    std::thread tc([&] { c1 = p.client.close(); });
    EXPECT_FALSE(p.server.close());
    tc.join();
    EXPECT_FALSE(c1);
}

TEST(SdpStream, HalfCloseThenReply) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::error_code ec;
    const std::string req = "request";
    p.client.write(std::span(reinterpret_cast<const std::uint8_t*>(req.data()), req.size()), ec);
    ASSERT_FALSE(ec);
    ASSERT_FALSE(p.client.shutdown_write());
    // Writing after the half-close fails like a socket (EPIPE).
    p.client.write(std::span(reinterpret_cast<const std::uint8_t*>(req.data()), 1), ec);
    EXPECT_EQ(ec, std::errc::broken_pipe);

    std::vector<std::uint8_t> buf(64);
    std::string got;
    while (true) {
        std::size_t n = p.server.read_some(buf, ec);
        ASSERT_FALSE(ec) << ec.message();
        if (n == 0) {
            break;
        }
        got.append(reinterpret_cast<const char*>(buf.data()), n);
    }
    EXPECT_EQ(got, req);
    // The server's write half is still open after the client's half-close.
    ASSERT_FALSE(send_pattern(p.server, 200000, 5));
    std::error_code sc;
    std::thread t([&] { sc = p.server.close(); });
    bool ok = false;
    EXPECT_EQ(recv_pattern(p.client, 5, ec, ok), 200000u);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(ok);
    EXPECT_FALSE(p.client.close());
    t.join();
    EXPECT_FALSE(sc) << sc.message();
}

// Stream::try_write (the preload library's direct path): queues what fits
// without waiting, then says EAGAIN; every byte taken arrives in order.
TEST(SdpStream, TryWriteQueuesWhatFitsThenSaysTryAgain) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::vector<std::uint8_t> buf(64 * 1024);
    std::uint64_t off = 0;
    std::error_code ec;
    // The server does not read: credits (16 x 64 KiB) and send_queue_limit
    // (256 KiB) run out long before 64 MiB.
    for (int i = 0; i < 1024 && !ec; ++i) {
        pattern(buf, off, 9);
        const std::size_t n = p.client.try_write(buf, ec);
        if (n == 0) {
            break;
        }
        ASSERT_FALSE(ec) << "an error with bytes taken: " << ec.message();
        // Up to Stream::kTryWriteWhole: whole or not at all.
        ASSERT_EQ(n, buf.size());
        off += n;
    }
    EXPECT_EQ(ec, std::errc::resource_unavailable_try_again) << ec.message();
    EXPECT_GT(off, 0u);
    EXPECT_LT(off, 64u * 1024 * 1024);
    // Smaller writes still find room a 64 KiB one did not (the queue is
    // not quite full): each is taken whole too, until none fits.
    std::vector<std::uint8_t> small(1000);
    for (int i = 0; i < 1000; ++i) {
        pattern(small, off, 9);
        const std::size_t n = p.client.try_write(small, ec);
        if (n == 0) {
            break;
        }
        ASSERT_EQ(n, small.size());
        off += n;
    }
    EXPECT_EQ(ec, std::errc::resource_unavailable_try_again) << ec.message();
    ASSERT_FALSE(p.client.shutdown_write());
    std::uint8_t one = 0;
    p.client.try_write(std::span(&one, 1), ec);
    EXPECT_EQ(ec, std::errc::broken_pipe);  // as write() after the half-close
    bool ok = false;
    EXPECT_EQ(recv_pattern(p.server, 9, ec, ok), off);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(ok);
}

// try_read() never waits: nothing there is "try again"; wait_readable()
// blocks until data (true) or until read_some() has something else to say
// (false: here the end of stream), without taking the bytes.
TEST(SdpStream, TryReadTakesWhatIsThereAndWaitReadableSaysWhen) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::vector<std::uint8_t> buf(300 * 1024);
    std::error_code ec;
    EXPECT_EQ(p.server.try_read(buf, ec), 0u);
    EXPECT_EQ(ec, std::errc::resource_unavailable_try_again) << ec.message();
    EXPECT_EQ(p.server.try_read({}, ec), 0u);  // an empty buffer: nothing to say
    EXPECT_FALSE(ec) << ec.message();
    // 200 KiB in 5 writes: once wait_readable() says so, try_read() takes
    // bytes, in order, until it says "try again"; then it waits again.
    std::vector<std::uint8_t> out(200 * 1024);
    pattern(out, 0, 4);
    std::thread w([&] {
        std::error_code wec;
        for (std::size_t off = 0; off < out.size(); off += 40 * 1024) {
            p.client.write(std::span(out).subspan(off, 40 * 1024), wec);
            std::this_thread::sleep_for(5ms);
        }
        p.client.shutdown_write();
    });
    // (No ASSERT while the writer runs: it must be joined. Its 200 KiB fit
    // the server's credit, so it ends without the reader.)
    std::vector<std::uint8_t> in;
    bool failed = false;
    for (int waits = 0; !failed && waits < 100000; ++waits) {
        const bool data = p.server.wait_readable(ec);
        if (ec || !data) {
            EXPECT_FALSE(ec) << ec.message();
            break;
        }
        std::size_t n = 0;
        do {
            // Small pieces: never more than asked, up to what is there.
            n = p.server.try_read(std::span(buf).first(7000), ec);
            failed = n > 7000;
            EXPECT_FALSE(failed) << n << " bytes";
            in.insert(in.end(), buf.begin(),
                      buf.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(n, 7000)));
        } while (n > 0 && !failed);
        EXPECT_EQ(ec, std::errc::resource_unavailable_try_again) << ec.message();
    }
    w.join();
    EXPECT_EQ(in, out);
    // The end of stream: wait_readable() false at once, try_read() nothing,
    // read_some() the EOF.
    EXPECT_FALSE(p.server.wait_readable(ec));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(p.server.try_read(buf, ec), 0u);
    EXPECT_EQ(ec, std::errc::resource_unavailable_try_again);
    EXPECT_EQ(p.server.read_some(buf, ec), 0u);
    EXPECT_FALSE(ec) << ec.message();
}

// The urgent byte (9.5.3): try_read() stops at the mark, and with
// stop_at_urgent takes nothing while the byte stands at the read position;
// wait_readable(stop_at_urgent) leaves it to read_some() (false).
TEST(SdpStream, TryReadStopsAtTheUrgentByte) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::error_code ec;
    const std::vector<std::uint8_t> before(100, 0x11);
    p.client.write(before, ec);
    ASSERT_FALSE(ec);
    ASSERT_FALSE(p.client.send_oob(0x7e));
    const std::vector<std::uint8_t> after(50, 0x22);
    p.client.write(after, ec);
    ASSERT_FALSE(ec);
    std::vector<std::uint8_t> buf(1000);
    ASSERT_TRUE(p.server.wait_readable(ec, true)) << ec.message();
    // Until all 151 bytes have arrived, a read may take fewer than the 100.
    std::size_t got = 0;
    for (int i = 0; i < 1000 && got < before.size(); ++i) {
        const std::size_t n = p.server.try_read(std::span(buf).subspan(got), ec, true);
        got += n;
        if (n == 0) {
            std::this_thread::sleep_for(2ms);
        }
    }
    ASSERT_EQ(got, before.size());
    EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + 100, [](auto b) { return b == 0x11; }));
    EXPECT_EQ(p.server.try_read(buf, ec, true), 0u);
    EXPECT_EQ(ec, std::errc::resource_unavailable_try_again);
    EXPECT_FALSE(p.server.wait_readable(ec, true));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(p.server.read_some(buf, ec, true), 0u);
    EXPECT_EQ(ec, std::errc::interrupted);
    EXPECT_EQ(p.server.read_oob(ec), 0x7e);
    ASSERT_TRUE(p.server.wait_readable(ec, true)) << ec.message();
    EXPECT_EQ(p.server.try_read(buf, ec, true), after.size());
}

// Over plain TCP there is no try_read() (the rdma provider has none either;
// no device here).
TEST(SdpStream, TryReadIsTheSoftProvidersOnly) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    sdp::Stream s;
    std::vector<std::uint8_t> buf(16);
    std::error_code ec;
    EXPECT_EQ(s.try_read(buf, ec), 0u);
    EXPECT_EQ(ec, std::errc::not_connected);
    ASSERT_FALSE(s.connect_tcp(acc.local_endpoint(), opts()));
    EXPECT_EQ(s.try_read(buf, ec), 0u);
    EXPECT_EQ(ec, std::errc::operation_not_supported);
    EXPECT_FALSE(s.wait_readable(ec));
    EXPECT_EQ(ec, std::errc::operation_not_supported);
}

// send_idle(): false from a write until the peer's next message
// acknowledges it (its MSeqAck) and a call of ours takes that message in
// (soft provider); over TCP always true. The engine's rule is unit-tested; this is the
// stream's view of it.
TEST(SdpStream, SendIdleUntilThePeerAcknowledges) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    // (Retries only while another thread holds the stream: send_idle()
    // takes no input in.)
    const auto idle_soon = [](sdp::Stream& s) {
        for (int i = 0; i < 5000; ++i) {
            if (s.send_idle()) {
                return true;
            }
            std::this_thread::sleep_for(1ms);
        }
        return false;
    };
    EXPECT_TRUE(idle_soon(p.client)) << "nothing written yet";
    std::error_code ec;
    const std::uint8_t one = 0x5a;
    p.client.write(std::span(&one, 1), ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_FALSE(p.client.send_idle()) << "the client has taken no input in since";
    std::uint8_t got = 0;
    ASSERT_EQ(p.server.read(std::span(&got, 1), ec), 1u) << ec.message();
    EXPECT_EQ(got, one);
    // Whatever the server sent by now, the client takes in (urgent_pending()
    // reads the socket): a read alone sends no message here.
    std::this_thread::sleep_for(20ms);
    (void)p.client.urgent_pending();
    EXPECT_FALSE(p.client.send_idle()) << "the server's read sent a message";
    p.server.write(std::span(&one, 1), ec);  // carries the MSeqAck
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_EQ(p.client.read(std::span(&got, 1), ec), 1u) << ec.message();
    EXPECT_TRUE(idle_soon(p.client));

    sdp::Stream tcp;
    EXPECT_FALSE(tcp.send_idle()) << "not connected";
    ASSERT_FALSE(tcp.connect_tcp(p.acc.local_endpoint(), opts()));
    tcp.write(std::span(&one, 1), ec);  // (waits in the acceptor's backlog)
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_TRUE(tcp.send_idle()) << "TCP: always";
}

// A write the mechanism would measure or send by zero copy must wait for
// the peer: try_write refuses it rather than block.
TEST(SdpStream, TryWriteRefusesWritesThatZeroCopyWouldWaitFor) {
    for (const auto m : {sdp::Mechanism::zcopy, sdp::Mechanism::automatic}) {
        auto o = opts();
        o.mechanism = m;
        Pair p;
        ASSERT_NO_FATAL_FAILURE(make_pair(p, o));
        std::vector<std::uint8_t> big(o.zcopy_threshold + 1);
        std::error_code ec;
        EXPECT_EQ(p.client.try_write(big, ec), 0u);
        EXPECT_EQ(ec, std::errc::operation_not_supported);
        std::vector<std::uint8_t> small(16, 1);
        const std::size_t n = p.client.try_write(small, ec);
        if (m == sdp::Mechanism::zcopy) {
            EXPECT_EQ(n, small.size()) << ec.message();  // Bcopy below the threshold
        } else {
            EXPECT_EQ(ec, std::errc::operation_not_supported);  // automatic measures
        }
    }
}

TEST(SdpStream, AbortMidTransferResetsTheReader) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::error_code wec;
    std::atomic<bool> started{false};
    std::thread w([&] {
        std::vector<std::uint8_t> buf(64 * 1024, 0x5a);
        std::error_code ec;
        p.client.write(buf, ec);
        started = true;
    });
    std::vector<std::uint8_t> buf(64 * 1024);
    std::error_code ec;
    std::size_t total = 0;
    while (total < 64 * 1024) {
        std::size_t n = p.server.read_some(buf, ec);
        ASSERT_FALSE(ec);
        ASSERT_GT(n, 0u);
        total += n;
    }
    w.join();
    p.client.abort();
    // The reader sees a reset (AbortConn or RST), never a clean EOF.
    std::size_t n = 1;
    while (!ec && n > 0) {
        n = p.server.read_some(buf, ec);
    }
    EXPECT_EQ(ec, std::errc::connection_reset) << ec.message();
}

TEST(SdpStream, AbortMidTransferFailsTheWriter) {
    Pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    std::error_code wec;
    std::thread w([&] { wec = send_pattern(p.client, 1u << 30, 1); });
    std::vector<std::uint8_t> buf(1024 * 1024);
    std::error_code ec;
    std::size_t total = 0;
    while (total < 4 * 1024 * 1024) {
        std::size_t n = p.server.read_some(buf, ec);
        ASSERT_FALSE(ec);
        total += n;
    }
    p.server.abort();
    w.join();
    EXPECT_TRUE(wec == std::errc::connection_reset || wec == std::errc::broken_pipe)
        << wec.message();
}

// The peer process dies (SIGKILL): the kernel closes its socket without
// DisConn, and the survivor gets an error instead of EOF or a hang.
TEST(SdpStream, PeerKilledWhileSending) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    const auto ep = acc.local_endpoint();
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        sdp::Stream s;
        if (s.connect_sdp(ep, opts())) {
            ::_exit(3);
        }
        std::vector<std::uint8_t> buf(64 * 1024, 1);
        std::error_code ec;
        while (!ec) {
            s.write(buf, ec);
        }
        ::_exit(4);
    }
    sdp::Stream server;
    auto aec = acc.accept(server, 10s);
    ASSERT_FALSE(aec) << aec.message() << acc.last_error();
    std::vector<std::uint8_t> buf(256 * 1024);
    std::error_code ec;
    std::size_t total = 0;
    while (total < 1024 * 1024) {
        std::size_t n = server.read_some(buf, ec);
        ASSERT_FALSE(ec) << ec.message();
        ASSERT_GT(n, 0u);
        total += n;
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::size_t n = 1;
    while (!ec && n > 0) {
        n = server.read_some(buf, ec);
    }
    EXPECT_EQ(ec, std::errc::connection_reset) << ec.message();
}

TEST(SdpStream, PeerKilledWhileReceiving) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    const auto ep = acc.local_endpoint();
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(ready[0]);
        sdp::Stream s;
        if (s.connect_sdp(ep, opts())) {
            ::_exit(3);
        }
        std::vector<std::uint8_t> buf(1000);
        std::error_code ec;
        s.read_some(buf, ec);
        (void)!::write(ready[1], "r", 1);
        ::pause();
        ::_exit(4);
    }
    ::close(ready[1]);
    sdp::Stream server;
    ASSERT_FALSE(acc.accept(server, 10s));
    std::error_code ec;
    std::vector<std::uint8_t> one(1, 9);
    server.write(one, ec);
    ASSERT_FALSE(ec);
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Keep writing: credits run out or the socket errors; either way the
    // write fails (bounded by io_timeout at worst).
    auto wec = send_pattern(server, 1u << 30, 2);
    EXPECT_TRUE(wec == std::errc::connection_reset || wec == std::errc::broken_pipe)
        << wec.message();
}

TEST(SdpStream, HandshakeTimesOutAgainstASilentServer) {
    // A plain TCP listener that never answers the MPA Request.
    sdptest::TcpListener silent;
    ASSERT_TRUE(silent.ok());
    auto o = opts();
    o.handshake_timeout = 300ms;
    sdp::Stream s;
    auto ec = s.connect_sdp(silent.endpoint(), o);
    EXPECT_EQ(ec, std::errc::timed_out) << ec.message();
    EXPECT_FALSE(s.is_open());
}

TEST(SdpStream, NonSdpServerIsAProtocolError) {
    sdptest::TcpListener garbage;
    ASSERT_TRUE(garbage.ok());
    std::thread t([&] { garbage.accept_and_send("HTTP/1.0 400 Bad Request\r\n\r\n"); });
    sdp::Stream s;
    auto ec = s.connect_sdp(garbage.endpoint(), opts());
    t.join();
    EXPECT_TRUE(ec == std::errc::protocol_error || ec == std::errc::connection_reset)
        << ec.message();
}

TEST(SdpStream, ConnectRefused) {
    sdptest::TcpListener l;
    auto ep = l.endpoint();
    l.close();
    sdp::Stream s;
    EXPECT_EQ(s.connect_sdp(ep, opts()), std::errc::connection_refused);
}

TEST(SdpStream, AcceptorSurvivesABadClient) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ao.stream.handshake_timeout = 500ms;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    // A client that sends garbage, then a real one.
    int fd = sdptest::tcp_connect(acc.local_endpoint());
    ASSERT_GE(fd, 0);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    ASSERT_GT(::send(fd, junk, sizeof junk - 1, MSG_NOSIGNAL), 0);
    sdp::Stream client;
    std::error_code cec;
    std::thread t([&] { cec = client.connect_sdp(acc.local_endpoint(), opts()); });
    sdp::Stream server;
    EXPECT_FALSE(acc.accept(server, 10s));
    t.join();
    ::close(fd);
    EXPECT_FALSE(cec);
    // The garbage client's startup fails concurrently; it is only counted.
    EXPECT_TRUE(sdptest::wait_for([&] { return !acc.last_error().empty(); }));
    EXPECT_EQ(acc.stats().handshake_failures, 1u);
    std::error_code ec;
    std::vector<std::uint8_t> b{42};
    client.write(b, ec);
    EXPECT_FALSE(ec);
    std::vector<std::uint8_t> r(1);
    EXPECT_EQ(server.read_some(r, ec), 1u);
    EXPECT_EQ(r[0], 42);
}

}  // namespace
