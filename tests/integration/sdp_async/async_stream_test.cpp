// SPDX-License-Identifier: Apache-2.0
// sdp::AsyncStream / sdp::AsyncAcceptor on loopback: against the blocking
// API in both roles (1 B, 1 MiB, 16 MiB with asio::async_read/async_write,
// both directions at once), half-close, abort, cancel of a pending read,
// completion tokens (use_future), concurrent startups of the async acceptor,
// and the Port Mapper path through the real sdp-pmd (SDP, PMDeny -> TCP,
// refused SDP port -> TCP). The io_context runs on the test thread in
// bounded steps (run_until); blocking peers run on threads whose calls are
// bounded by io_timeout / accept timeouts.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "integration/daemon/harness.hpp"
#include "integration/sdp/duplication_peer.hpp"
#include "integration/sdp/pmd_fixture.hpp"
#include "integration/sdp/sdp_test_util.hpp"
#include "sdp/async_stream.hpp"
#include "sdp/stream.hpp"

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using sdptest::check_pattern;
using sdptest::pattern;

sdp::StreamOptions opts() {
    sdp::StreamOptions o;
    o.io_timeout = 30s;
    o.handshake_timeout = 10s;
    o.linger = 10s;
    return o;
}

// Runs the io_context in small steps until pred() holds (bounded).
bool run_until(asio::io_context& io, const std::function<bool()>& pred,
               std::chrono::seconds bound = 60s) {
    const auto end = std::chrono::steady_clock::now() + bound;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= end) {
            return false;
        }
        io.restart();
        io.run_one_for(50ms);
    }
    return true;
}

// Runs ready handlers for about 100 ms without waiting for a completion:
// lets an advertisement (SrcAvail, SinkAvail) go out and the peer see it.
void settle(asio::io_context& io) {
    io.restart();
    for (int i = 0; i < 50; ++i) {
        io.poll();
        std::this_thread::sleep_for(2ms);
    }
}

// async_read_some into buf; the handler sets rec and done.
void start_read(sdp::AsyncStream& s, std::vector<std::uint8_t>& buf, error_code& rec, bool& done) {
    s.async_read_some(asio::buffer(buf), [&rec, &done](error_code e, std::size_t) {
        rec = e;
        done = true;
    });
}

// One async_accept, run until it completes without error.
void accept_one(asio::io_context& io, sdp::AsyncAcceptor& acc,
                std::optional<sdp::AsyncStream>& server) {
    error_code aec;
    bool done = false;
    acc.async_accept([&](error_code e, sdp::AsyncStream st) {
        aec = e;
        done = true;
        server.emplace(std::move(st));
    });
    ASSERT_TRUE(run_until(io, [&] { return done; }));
    ASSERT_FALSE(aec) << aec.message();
}

// async_connect, run until it completes: its error, or nullopt (no
// completion within run_until's bound).
std::optional<error_code> connect_and_wait(asio::io_context& io, sdp::AsyncStream& s,
                                           const pm::Endpoint& to, const sdp::StreamOptions& o) {
    std::optional<error_code> got;
    s.async_connect(to, o, [&](error_code e) { got = e; });
    if (!run_until(io, [&] { return got.has_value(); })) {
        return std::nullopt;
    }
    return got;
}

// async_connect_sdp (no Port Mapper), run until it completes.
std::optional<error_code> connect_sdp_and_wait(asio::io_context& io, sdp::AsyncStream& s,
                                               const pm::Endpoint& to,
                                               const sdp::StreamOptions& o) {
    std::optional<error_code> got;
    s.async_connect_sdp(to, o, [&](error_code e) { got = e; });
    if (!run_until(io, [&] { return got.has_value(); })) {
        return std::nullopt;
    }
    return got;
}

std::vector<std::uint8_t> make_pattern(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> v(n);
    pattern(v, 0, seed);
    return v;
}

// Blocking side: writes n pattern bytes, then half-closes.
std::error_code send_pattern(sdp::Stream& s, std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> buf;
    std::size_t off = 0;
    std::error_code ec;
    while (off < n) {
        const std::size_t k = std::min<std::size_t>(256 * 1024, n - off);
        buf.resize(k);
        pattern(buf, off, seed);
        s.write(buf, ec);
        if (ec) {
            return ec;
        }
        off += k;
    }
    return s.shutdown_write();
}

// Blocking side: reads until EOF; checks the pattern.
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

// A blocking acceptor on 127.0.0.1:0 and an async client connected to it
// (async_connect_sdp); `serve` runs on a thread with the accepted stream.
struct AsyncClientPair {
    asio::io_context io;
    sdp::Acceptor acc;
    sdp::AsyncStream client{io};
    sdp::Stream server;
    std::thread srv;
    std::error_code accept_ec;

    void start(const std::function<void(sdp::Stream&)>& serve,
               const sdp::StreamOptions& o = opts()) {
        sdp::AcceptorOptions ao;
        ao.stream = o;
        ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
        srv = std::thread([this, serve] {
            accept_ec = acc.accept(server, 30s);
            if (!accept_ec) {
                serve(server);
            }
        });
        bool done = false;
        error_code ec;
        client.async_connect_sdp(acc.local_endpoint(), o, [&](error_code e) {
            ec = e;
            done = true;
        });
        ASSERT_TRUE(run_until(io, [&] { return done; }));
        ASSERT_FALSE(ec) << ec.message() << " " << client.info().reason;
        ASSERT_EQ(client.used(), sdp::Transport::sdp);
        ASSERT_TRUE(client.is_open());
    }
    ~AsyncClientPair() {
        if (srv.joinable()) {
            client.close();
            srv.join();
        }
    }
};

// Async client sends n bytes and half-closes; the blocking server checks
// them, answers n bytes of another pattern and half-closes; the client
// reads them to EOF; then both close gracefully.
void async_to_blocking(std::size_t n) {
    AsyncClientPair p;
    std::error_code srv_rec, srv_wec;
    std::size_t srv_got = 0;
    bool srv_ok = false;
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        srv_got = recv_pattern(s, 7, srv_rec, srv_ok);
        srv_wec = send_pattern(s, n, 9);
        std::vector<std::uint8_t> b(16);
        std::error_code ec;
        s.read_some(b, ec);  // waits for the client's close (bounded)
        s.close();
    }));
    const auto out = make_pattern(n, 7);
    bool wrote = false;
    error_code wec;
    asio::async_write(p.client, asio::buffer(out), [&](error_code e, std::size_t k) {
        wec = e;
        EXPECT_EQ(k, n);
        p.client.async_shutdown([&](error_code e2) {
            EXPECT_FALSE(e2) << e2.message();
            wrote = true;
        });
    });
    std::vector<std::uint8_t> in;
    bool read_done = false;
    error_code rec;
    asio::async_read(p.client, asio::dynamic_buffer(in), [&](error_code e, std::size_t) {
        rec = e;
        read_done = true;
    });
    ASSERT_TRUE(run_until(
        p.io, [&] { return wrote && read_done; }, 120s));
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_EQ(rec, asio::error::eof) << rec.message();
    EXPECT_EQ(in.size(), n);
    EXPECT_TRUE(check_pattern(in, 0, 9));
    bool closed = false;
    error_code cec;
    p.client.async_close([&](error_code e) {
        cec = e;
        closed = true;
    });
    ASSERT_TRUE(run_until(p.io, [&] { return closed; }));
    EXPECT_FALSE(cec) << cec.message();
    EXPECT_FALSE(p.client.is_open());
    p.srv.join();
    EXPECT_FALSE(p.accept_ec) << p.accept_ec.message();
    EXPECT_FALSE(srv_rec) << srv_rec.message();
    EXPECT_FALSE(srv_wec) << srv_wec.message();
    EXPECT_EQ(srv_got, n);
    EXPECT_TRUE(srv_ok);
}

TEST(SdpAsyncStream, OneByteToBlockingAcceptor) {
    async_to_blocking(1);
}

TEST(SdpAsyncStream, OneMiBToBlockingAcceptor) {
    async_to_blocking(1024 * 1024);
}

TEST(SdpAsyncStream, SixteenMiBToBlockingAcceptor) {
    async_to_blocking(16 * 1024 * 1024);
}

TEST(SdpAsyncStream, BothDirectionsAtOnce) {
    constexpr std::size_t n = 16 * 1024 * 1024;
    AsyncClientPair p;
    std::error_code srv_rec, srv_wec;
    std::size_t srv_got = 0;
    bool srv_ok = false;
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        std::thread w([&] { srv_wec = send_pattern(s, n, 21); });
        srv_got = recv_pattern(s, 20, srv_rec, srv_ok);
        w.join();
        s.close();
    }));
    const auto out = make_pattern(n, 20);
    bool wrote = false;
    error_code wec;
    asio::async_write(p.client, asio::buffer(out), [&](error_code e, std::size_t) {
        wec = e;
        p.client.async_shutdown([&](error_code) { wrote = true; });
    });
    std::vector<std::uint8_t> in;
    bool read_done = false;
    error_code rec;
    asio::async_read(p.client, asio::dynamic_buffer(in), [&](error_code e, std::size_t) {
        rec = e;
        read_done = true;
    });
    ASSERT_TRUE(run_until(
        p.io, [&] { return wrote && read_done; }, 180s));
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_EQ(rec, asio::error::eof) << rec.message();
    EXPECT_EQ(in.size(), n);
    EXPECT_TRUE(check_pattern(in, 0, 21));
    bool closed = false;
    p.client.async_close([&](error_code) { closed = true; });
    ASSERT_TRUE(run_until(p.io, [&] { return closed; }));
    p.srv.join();
    EXPECT_FALSE(srv_rec) << srv_rec.message();
    EXPECT_FALSE(srv_wec) << srv_wec.message();
    EXPECT_EQ(srv_got, n);
    EXPECT_TRUE(srv_ok);
}

// Socket duplication (13.1.1 Remote Peer, steps 3, 4, 8) on the Asio
// driver: 8 MiB each way with a SuspComm in the middle from the test peer
// (integration/sdp/duplication_peer.hpp), every byte checked, the new
// connection from the old source port (step 1).
TEST(SdpAsyncStream, Section13_1_1_ResumesOnTheNewPortWithEveryByteOnce) {
    namespace dup = sdptest::dup;
    sdptest::TcpListener first;
    ASSERT_TRUE(first.ok());
    dup::PeerReport r;
    std::thread peer([&] { dup::run_peer(first, r); });
    asio::io_context io;
    sdp::AsyncStream client{io};
    const auto cec = connect_sdp_and_wait(io, client, first.endpoint(), opts());
    if (!cec || *cec) {
        ADD_FAILURE() << "connect: " << (cec ? cec->message() : "no completion") << " "
                      << client.info().reason;
        peer.join();
        return;
    }
    std::vector<std::uint8_t> out(dup::kBytes);
    pattern(out, 0, dup::kClientSeed);
    std::vector<std::uint8_t> in(dup::kBytes);
    bool wrote = false;
    bool read_done = false;
    error_code wec;
    error_code rec;
    asio::async_write(client, asio::buffer(out), [&](error_code e, std::size_t) {
        wec = e;
        wrote = true;
    });
    asio::async_read(client, asio::buffer(in), [&](error_code e, std::size_t) {
        rec = e;
        read_done = true;
    });
    const bool finished = run_until(
        io, [&] { return wrote && read_done; }, 120s);
    EXPECT_TRUE(finished);
    EXPECT_FALSE(wec) << wec.message() << " " << client.describe();
    EXPECT_FALSE(rec) << rec.message() << " " << client.describe();
    EXPECT_TRUE(check_pattern(in, 0, dup::kPeerSeed))
        << "bytes from the peer lost, duplicated or reordered";
    bool closed = false;
    client.async_close([&](error_code) { closed = true; });
    EXPECT_TRUE(run_until(io, [&] { return closed; }));
    peer.join();
    EXPECT_TRUE(r.failure.empty()) << r.failure;
    EXPECT_EQ(r.received, dup::kBytes);
    EXPECT_TRUE(r.pattern_ok) << "bytes from the client lost, duplicated or reordered";
    EXPECT_EQ(r.susp_comm_ack_received, 1u);
    EXPECT_EQ(r.new_client.port, r.old_client.port) << "step 1: the same source port";
}

// 13.1.1 step 4 on the Asio driver: nobody listens on the SuspComm's port:
// the stream is reset with the reason, no hang.
TEST(SdpAsyncStream, Section13_1_1_FailedReconnectResetsTheStream) {
    sdptest::TcpListener first;
    ASSERT_TRUE(first.ok());
    std::atomic<bool> peer_ok{false};
    std::thread peer([&] { peer_ok = sdptest::dup::suspend_to_dead_port(first); });
    asio::io_context io;
    sdp::AsyncStream client{io};
    auto o = opts();
    o.handshake_timeout = 2s;
    const auto cec = connect_sdp_and_wait(io, client, first.endpoint(), o);
    if (!cec || *cec) {
        ADD_FAILURE() << "connect: " << (cec ? cec->message() : "no completion");
        peer.join();
        return;
    }
    std::vector<std::uint8_t> buf(1024);
    std::optional<error_code> rec;
    client.async_read_some(asio::buffer(buf), [&](error_code e, std::size_t) { rec = e; });
    EXPECT_TRUE(run_until(
        io, [&] { return rec.has_value(); }, 10s));
    // connection_reset, or bad_descriptor when the stream was already
    // reset before the read began (the refusal is quick on loopback).
    EXPECT_TRUE(rec &&
                (*rec == asio::error::connection_reset || *rec == asio::error::bad_descriptor))
        << (rec ? rec->message() : "no completion");
    EXPECT_FALSE(client.is_open());
    peer.join();
    EXPECT_TRUE(peer_ok);
}

TEST(SdpAsyncStream, HalfCloseThenReply) {
    AsyncClientPair p;
    std::string got;
    std::error_code srv_ec;
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        std::vector<std::uint8_t> b(64);
        while (true) {  // until the client's DisConn
            std::size_t k = s.read_some(b, srv_ec);
            if (srv_ec || k == 0) {
                break;
            }
            got.append(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(k));
        }
        const std::string pong = "pong";
        s.write(std::span(reinterpret_cast<const std::uint8_t*>(pong.data()), pong.size()), srv_ec);
        s.close();
    }));
    const std::string ping = "ping";
    bool sent = false;
    asio::async_write(p.client, asio::buffer(ping), [&](error_code e, std::size_t) {
        EXPECT_FALSE(e);
        p.client.async_shutdown([&](error_code e2) {
            EXPECT_FALSE(e2);
            sent = true;
        });
    });
    std::vector<std::uint8_t> in;
    bool done = false;
    error_code rec;
    asio::async_read(p.client, asio::dynamic_buffer(in), [&](error_code e, std::size_t) {
        rec = e;
        done = true;
    });
    ASSERT_TRUE(run_until(p.io, [&] { return sent && done; }));
    EXPECT_EQ(rec, asio::error::eof);
    EXPECT_EQ(std::string(in.begin(), in.end()), "pong");
    // Writing after the half-close fails.
    bool wdone = false;
    error_code wec;
    p.client.async_write_some(asio::buffer(ping), [&](error_code e, std::size_t) {
        wec = e;
        wdone = true;
    });
    ASSERT_TRUE(run_until(p.io, [&] { return wdone; }));
    EXPECT_TRUE(wec);
    p.client.close();
    p.srv.join();
    EXPECT_EQ(got, "ping");
}

// The async client aborts: the blocking reader gets connection_reset.
TEST(SdpAsyncStream, AbortResetsTheBlockingPeer) {
    AsyncClientPair p;
    std::error_code srv_ec;
    std::atomic<bool> got_first{false};
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        std::vector<std::uint8_t> b(64 * 1024);
        for (int i = 0; i < 100000; ++i) {
            std::size_t k = s.read_some(b, srv_ec);
            if (srv_ec || k == 0) {
                break;
            }
            got_first = true;
        }
    }));
    const std::vector<std::uint8_t> out(64 * 1024, 1);
    bool wrote = false;
    p.client.async_write_some(asio::buffer(out), [&](error_code, std::size_t) { wrote = true; });
    ASSERT_TRUE(run_until(p.io, [&] { return wrote && got_first.load(); }));
    p.client.close();
    EXPECT_FALSE(p.client.is_open());
    p.srv.join();
    EXPECT_EQ(srv_ec, std::errc::connection_reset) << srv_ec.message();
}

// The blocking peer aborts: a pending async read completes with
// connection_reset.
TEST(SdpAsyncStream, PeerAbortResetsAPendingRead) {
    AsyncClientPair p;
    std::atomic<bool> go{false};
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        pmtest::wait_until([&] { return go.load(); }, 30s);
        s.abort();
    }));
    std::vector<std::uint8_t> b(16);
    bool done = false;
    error_code rec;
    start_read(p.client, b, rec, done);
    go = true;
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_EQ(rec, asio::error::connection_reset) << rec.message();
}

// cancel() completes a pending read with operation_aborted; the stream
// stays usable.
TEST(SdpAsyncStream, CancelPendingRead) {
    AsyncClientPair p;
    std::atomic<bool> go{false};
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        pmtest::wait_until([&] { return go.load(); }, 30s);
        std::vector<std::uint8_t> one{42};
        std::error_code ec;
        s.write(one, ec);
        std::vector<std::uint8_t> b(16);
        s.read_some(b, ec);  // until the client closes
    }));
    std::vector<std::uint8_t> b(16);
    bool done = false;
    error_code rec;
    start_read(p.client, b, rec, done);
    // Let the read get under way, then cancel it.
    p.io.restart();
    p.io.poll();
    EXPECT_FALSE(done);
    p.client.cancel();
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_EQ(rec, asio::error::operation_aborted) << rec.message();
    go = true;
    done = false;
    std::size_t n = 0;
    p.client.async_read_some(asio::buffer(b), [&](error_code e, std::size_t k) {
        rec = e;
        n = k;
        done = true;
    });
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_FALSE(rec) << rec.message();
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(b[0], 42);
    // close() aborts a pending read the same way.
    done = false;
    start_read(p.client, b, rec, done);
    p.client.close();
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_EQ(rec, asio::error::operation_aborted) << rec.message();
}

// Blocking side, after its writes: half-closes (unless `ec`), takes the
// stats, then waits until the client closes.
void half_close_and_wait(sdp::Stream& s, std::error_code& ec, sdp::StreamStats& stats) {
    if (!ec) {
        ec = s.shutdown_write();
    }
    stats = s.stats();
    std::vector<std::uint8_t> b(16);
    std::error_code rec;
    s.read_some(b, rec);
}

sdp::StreamOptions zcopy_opts() {
    auto o = opts();
    o.mechanism = sdp::Mechanism::zcopy;
    return o;
}

// Reads the server's n bytes (pattern `seed`) through 1 MiB async reads
// until EOF; true if every byte came in order.
bool read_to_eof(AsyncClientPair& p, std::size_t n, std::uint32_t seed, error_code& rec) {
    std::vector<std::uint8_t> in(n), buf(1 << 20);
    std::size_t got = 0;
    bool eof = false;
    std::function<void()> next = [&] {
        p.client.async_read_some(asio::buffer(buf), [&](error_code e, std::size_t k) {
            if (e) {
                eof = e == asio::error::eof;
                rec = eof ? error_code{} : e;
                return;
            }
            const std::size_t take = std::min(k, n - std::min(got, n));
            std::copy_n(buf.begin(), take, in.begin() + static_cast<std::ptrdiff_t>(got));
            got += k;
            next();
        });
    };
    next();
    if (!run_until(
            p.io, [&] { return eof || bool(rec); }, 120s)) {
        rec = asio::error::timed_out;
    }
    return got == n && check_pattern(in, 0, seed);
}

// Read Zcopy (9.2) on the async stream, mechanism zcopy on both ends: the
// async client's large write is advertised and RDMA-Read by the blocking
// server; the server's large writes are RDMA-Read by the client's
// async_read_some straight into its buffer. Every byte arrives.
TEST(SdpAsyncStream, ZeroCopyBothWays) {
    constexpr std::size_t n = 8u << 20;
    AsyncClientPair p;
    std::error_code srv_rec, srv_wec;
    std::size_t srv_got = 0;
    bool srv_ok = false;
    sdp::StreamStats srv_stats;
    ASSERT_NO_FATAL_FAILURE(p.start(
        [&](sdp::Stream& s) {
            srv_got = recv_pattern(s, 11, srv_rec, srv_ok);
            srv_wec = send_pattern(s, n, 12);
            half_close_and_wait(s, srv_wec, srv_stats);
        },
        zcopy_opts()));
    const auto out = make_pattern(n, 11);
    bool wrote = false;
    error_code wec;
    asio::async_write(p.client, asio::buffer(out), [&](error_code e, std::size_t k) {
        wec = e;
        EXPECT_EQ(k, n);
        p.client.async_shutdown([&](error_code) { wrote = true; });
    });
    ASSERT_TRUE(run_until(
        p.io, [&] { return wrote; }, 120s));
    EXPECT_FALSE(wec) << wec.message();
    // The server's writes, read with 1 MiB buffers.
    error_code rec;
    EXPECT_TRUE(read_to_eof(p, n, 12, rec)) << "bytes lost, duplicated or reordered";
    EXPECT_FALSE(rec) << rec.message();
    p.client.close();
    p.srv.join();
    EXPECT_FALSE(srv_rec) << srv_rec.message();
    EXPECT_FALSE(srv_wec) << srv_wec.message();
    EXPECT_EQ(srv_got, n);
    EXPECT_TRUE(srv_ok);
    EXPECT_GT(srv_stats.zcopy_bytes_received, n / 2) << "the client's write went zero copy";
    EXPECT_GT(srv_stats.zcopy_bytes_sent, n / 2) << "the client's reads took the server's";
}

// Mechanism automatic on the async stream (engine::MechanismChooser): the
// warm-up alternates Bcopy and Read Zcopy in each size class, so eight
// 512 KiB writes take both; every byte arrives in order.
TEST(SdpAsyncStream, AutomaticWritesTakeBothMechanisms) {
    constexpr std::size_t kChunk = 512 * 1024;
    constexpr std::size_t n = 8 * kChunk;
    AsyncClientPair p;
    std::error_code srv_rec;
    std::size_t srv_got = 0;
    bool srv_ok = false;
    sdp::StreamStats srv_stats;
    std::atomic<bool> srv_done{false};
    auto o = opts();
    o.mechanism = sdp::Mechanism::automatic;
    ASSERT_NO_FATAL_FAILURE(p.start(
        [&](sdp::Stream& s) {
            srv_got = recv_pattern(s, 21, srv_rec, srv_ok);
            srv_stats = s.stats();
            srv_done = true;
        },
        o));
    const auto out = make_pattern(n, 21);
    std::size_t sent = 0;
    bool done = false;
    error_code wec;
    std::function<void()> next = [&] {
        if (sent == n) {
            p.client.async_shutdown([&](error_code) { done = true; });
            return;
        }
        asio::async_write(p.client, asio::buffer(out.data() + sent, kChunk),
                          [&](error_code e, std::size_t k) {
                              wec = e;
                              sent += k;
                              if (e) {
                                  done = true;
                                  return;
                              }
                              next();
                          });
    };
    next();
    // A Bcopy write completes once its bytes are queued: the io_context
    // keeps running until the server has read them all and the DisConn.
    ASSERT_TRUE(run_until(
        p.io, [&] { return done && srv_done; }, 120s));
    EXPECT_FALSE(wec) << wec.message();
    p.srv.join();
    EXPECT_FALSE(srv_rec) << srv_rec.message();
    EXPECT_EQ(srv_got, n);
    EXPECT_TRUE(srv_ok) << "bytes lost, duplicated or reordered";
    EXPECT_GT(srv_stats.zcopy_bytes_received, 0u) << "no write went zero copy";
    // All by zero copy would leave only the SrcAvails' inline bytes (64 B
    // each in Combined Mode) to Bcopy; a Bcopy write in the warm-up moves
    // up to the send queue's 256 KiB.
    EXPECT_GT(n - srv_stats.zcopy_bytes_received, 64u * 1024) << "no write went by Bcopy";
}

// Warm-up for lending: 1 MiB writes with pauses (the reader is ahead). The
// first goes by Read Zcopy and the reader's RdmaRdCompl carries REQ_PIPE:
// the writer moves the half to Pipelined Mode (12.3), where reads may lend.
std::error_code write_warm_up(sdp::Stream& s, std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> buf(1 << 20);
    std::error_code ec;
    for (std::size_t off = 0; off < n && !ec; off += buf.size()) {
        pattern(buf, off, seed);
        s.write(buf, ec);
        std::this_thread::sleep_for(5ms);
    }
    return ec;
}

void read_warm_up(AsyncClientPair& p, std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> in(n), buf(1 << 20);
    std::size_t got = 0;
    error_code rec;
    while (got < n && !rec) {
        bool done = false;
        p.client.async_read_some(asio::buffer(buf), [&](error_code e, std::size_t k) {
            rec = e;
            if (!e) {
                const std::size_t take = std::min(k, n - got);
                std::copy_n(buf.begin(), take, in.begin() + static_cast<std::ptrdiff_t>(got));
                got += k;
            }
            done = true;
        });
        ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    }
    ASSERT_FALSE(rec) << rec.message();
    ASSERT_EQ(got, n);
    EXPECT_TRUE(check_pattern(in, 0, seed));
}

// Write Zcopy (9.3) into an async reader: with mechanism zcopy an
// async_read_some that finds nothing to read lends its 1 MiB buffer
// (SinkAvail) and the slower blocking writer RDMA-Writes into it.
TEST(SdpAsyncStream, ReadsLendTheirBuffersForWriteZcopy) {
    constexpr std::size_t n = 16u << 20;
    AsyncClientPair p;
    std::error_code srv_wec;
    sdp::StreamStats srv_stats;
    ASSERT_NO_FATAL_FAILURE(p.start(
        [&](sdp::Stream& s) {
            srv_wec = write_warm_up(s, n, 31);  // the reader is ahead
            half_close_and_wait(s, srv_wec, srv_stats);
        },
        zcopy_opts()));
    error_code rec;
    EXPECT_TRUE(read_to_eof(p, n, 31, rec)) << "bytes lost, duplicated or reordered";
    EXPECT_FALSE(rec) << rec.message();
    p.client.close();
    p.srv.join();
    EXPECT_FALSE(srv_wec) << srv_wec.message();
    EXPECT_GT(srv_stats.sink_avail_received, 0u) << "the async reads never lent";
    EXPECT_GT(srv_stats.write_zcopy_bytes_sent, 0u) << "nothing was RDMA-Written into them";
}

// A lent read cannot be called back at once (the peer may be writing into
// it): cancel() revokes it (SinkAvailCancel, 9.5.5), and the handler runs
// with operation_aborted once the peer answered (SinkCancelAck). The
// stream is not reset: both directions work after it.
TEST(SdpAsyncStream, CancelRevokesALentReadAndTheStreamGoesOn) {
    constexpr std::size_t warm = 4u << 20;
    AsyncClientPair p;
    std::error_code srv_ec;
    std::size_t srv_got = 0;
    std::uint8_t srv_byte = 0;
    std::atomic<bool> srv_waiting{false};
    sdp::StreamStats srv_stats;
    ASSERT_NO_FATAL_FAILURE(p.start(
        [&](sdp::Stream& s) {
            srv_ec = write_warm_up(s, warm, 32);
            // Then wait for the client's byte: this read answers the cancel.
            std::vector<std::uint8_t> b(16);
            srv_waiting = true;
            srv_got = srv_ec ? 0 : s.read_some(b, srv_ec);
            srv_byte = b[0];
            const std::vector<std::uint8_t> reply{7, 8, 9};
            if (!srv_ec) {
                s.write(reply, srv_ec);
            }
            srv_stats = s.stats();
            if (!srv_ec) {
                s.read_some(b, srv_ec);  // until the client closes
            }
        },
        zcopy_opts()));
    ASSERT_NO_FATAL_FAILURE(read_warm_up(p, warm, 32));
    ASSERT_TRUE(pmtest::wait_until([&] { return srv_waiting.load(); }, 30s));
    std::vector<std::uint8_t> buf(1 << 20);
    bool done = false;
    error_code rec;
    start_read(p.client, buf, rec, done);
    settle(p.io);
    EXPECT_FALSE(done);
    p.client.cancel();
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_EQ(rec, asio::error::operation_aborted) << rec.message();
    // Both directions still work: a byte to the server, its reply back.
    const std::vector<std::uint8_t> one{42};
    bool wrote = false;
    error_code wec;
    asio::async_write(p.client, asio::buffer(one), [&](error_code e, std::size_t) {
        wec = e;
        wrote = true;
    });
    std::vector<std::uint8_t> reply(3);
    bool got_reply = false;
    asio::async_read(p.client, asio::buffer(reply), [&](error_code e, std::size_t) {
        rec = e;
        got_reply = true;
    });
    ASSERT_TRUE(run_until(p.io, [&] { return wrote && got_reply; }));
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_FALSE(rec) << rec.message();
    EXPECT_EQ(reply, (std::vector<std::uint8_t>{7, 8, 9}));
    p.client.close();
    p.srv.join();
    EXPECT_EQ(srv_got, 1u);
    EXPECT_EQ(srv_byte, 42);
    EXPECT_GT(srv_stats.sink_avail_received, 0u);
    EXPECT_GT(srv_stats.sink_cancel_ack_sent, 0u) << "the read was not lent, or not revoked";
}

// A revoked lent read whose peer does not answer (a blocking peer that is
// not calling in processes nothing) is bounded: after handshake_timeout the
// stream is reset (the buffer's STag invalidated) and the handler runs.
TEST(SdpAsyncStream, CancelOfALentReadToAnIdlePeerResetsAfterTheBound) {
    constexpr std::size_t warm = 2u << 20;
    AsyncClientPair p;
    std::atomic<bool> warmed{false};
    std::atomic<bool> go{false};
    std::error_code srv_ec;
    auto o = zcopy_opts();
    o.handshake_timeout = 1s;
    ASSERT_NO_FATAL_FAILURE(p.start(
        [&](sdp::Stream& s) {
            srv_ec = write_warm_up(s, warm, 33);
            warmed = true;
            pmtest::wait_until([&] { return go.load(); }, 60s);  // idle
            std::vector<std::uint8_t> b(16);
            while (!srv_ec && s.read_some(b, srv_ec) > 0) {
            }
        },
        o));
    ASSERT_NO_FATAL_FAILURE(read_warm_up(p, warm, 33));
    ASSERT_TRUE(pmtest::wait_until([&] { return warmed.load(); }, 30s));
    auto buf = std::make_unique<std::vector<std::uint8_t>>(1 << 20);
    bool done = false;
    error_code rec;
    start_read(p.client, *buf, rec, done);
    settle(p.io);
    EXPECT_FALSE(done);
    const auto t0 = std::chrono::steady_clock::now();
    p.client.cancel();
    p.io.restart();
    p.io.poll();
    EXPECT_FALSE(done) << "lent: not before the peer answered or the bound passed";
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
    EXPECT_EQ(rec, asio::error::operation_aborted) << rec.message();
    buf.reset();  // the caller's again
    done = false;
    std::vector<std::uint8_t> b(16);
    start_read(p.client, b, rec, done);
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_TRUE(rec) << "the stream was reset";
    go = true;
    p.client.close();
    p.srv.join();
    EXPECT_TRUE(srv_ec) << "the server saw the reset";
}

// A pending zero-copy write cannot be called back: cancel() resets the
// stream (the advertised buffer's STag is invalidated), then the handler
// gets operation_aborted and the buffer is the caller's again: the peer's
// RDMA Read of it fails instead of reading freed memory.
TEST(SdpAsyncStream, CancelPendingZeroCopyWriteResetsTheStream) {
    AsyncClientPair p;
    std::atomic<bool> go{false};
    std::error_code srv_rec;
    ASSERT_NO_FATAL_FAILURE(p.start(
        [&](sdp::Stream& s) {
            pmtest::wait_until([&] { return go.load(); }, 30s);
            std::vector<std::uint8_t> b(1 << 20);
            while (!srv_rec && s.read_some(b, srv_rec) > 0) {
            }
        },
        zcopy_opts()));
    auto out = std::make_unique<std::vector<std::uint8_t>>(make_pattern(1 << 20, 13));
    bool done = false;
    error_code wec;
    p.client.async_write_some(asio::buffer(*out), [&](error_code e, std::size_t) {
        wec = e;
        done = true;
    });
    // Let the SrcAvail go out; the server does not read yet.
    settle(p.io);
    EXPECT_FALSE(done) << "a zero-copy write completes when the peer has read it";
    p.client.cancel();
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_EQ(wec, asio::error::operation_aborted) << wec.message();
    out.reset();  // the caller's again
    go = true;
    std::vector<std::uint8_t> b(16);
    done = false;
    error_code rec;
    start_read(p.client, b, rec, done);
    ASSERT_TRUE(run_until(p.io, [&] { return done; }));
    EXPECT_TRUE(rec) << "the stream was reset";
    p.client.close();
    p.srv.join();
    EXPECT_TRUE(srv_rec) << "the server's read of the advertised buffer failed";
}

TEST(SdpAsyncStream, RefusedSdpConnect) {
    sdptest::TcpListener l;
    const auto ep = l.endpoint();
    l.close();
    asio::io_context io;
    sdp::AsyncStream s(io);
    bool done = false;
    error_code ec;
    s.async_connect_sdp(ep, opts(), [&](error_code e) {
        ec = e;
        done = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return done; }));
    EXPECT_EQ(ec, asio::error::connection_refused) << ec.message();
    EXPECT_FALSE(s.is_open());
}

// A server that accepts TCP but never answers: the startup times out.
TEST(SdpAsyncStream, HandshakeTimesOutAgainstASilentServer) {
    sdptest::TcpListener l;  // the kernel completes the TCP handshake; nobody reads
    asio::io_context io;
    sdp::AsyncStream s(io);
    auto o = opts();
    o.handshake_timeout = 300ms;
    bool done = false;
    error_code ec;
    s.async_connect_sdp(l.endpoint(), o, [&](error_code e) {
        ec = e;
        done = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return done; }));
    EXPECT_EQ(ec, asio::error::timed_out) << ec.message();
    EXPECT_FALSE(s.is_open());
}

// use_future as the completion token, with the io_context on another thread.
TEST(SdpAsyncStream, UseFutureToken) {
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::thread runner([&] { io.run_for(60s); });
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    sdp::Stream server;
    std::error_code aec;
    std::thread srv([&] {
        aec = acc.accept(server, 30s);
        if (!aec) {
            std::vector<std::uint8_t> b(3);
            std::error_code ec;
            if (server.read(b, ec) == 3) {
                server.write(b, ec);
            }
        }
    });
    sdp::AsyncStream s(io);
    // The stream is used from the runner thread only through posted calls.
    auto connected =
        asio::post(io, asio::use_future([&] {
                       return s.async_connect_sdp(acc.local_endpoint(), opts(), asio::use_future);
                   }))
            .get();
    EXPECT_NO_THROW(connected.get());
    const std::string abc = "abc";
    auto wrote = asio::post(io, asio::use_future([&] {
                                return asio::async_write(s, asio::buffer(abc), asio::use_future);
                            }))
                     .get();
    EXPECT_EQ(wrote.get(), 3u);
    std::vector<std::uint8_t> b(3);
    auto got = asio::post(io, asio::use_future([&] {
                              return asio::async_read(s, asio::buffer(b), asio::use_future);
                          }))
                   .get();
    EXPECT_EQ(got.get(), 3u);
    EXPECT_EQ(std::string(b.begin(), b.end()), "abc");
    asio::post(io, asio::use_future([&] { s.close(); })).get();
    srv.join();
    EXPECT_FALSE(aec) << aec.message();
    work.reset();
    io.stop();
    runner.join();
}

// A blocking client against the async acceptor, 1 MiB each way.
TEST(SdpAsyncAcceptor, BlockingClientBothWays) {
    constexpr std::size_t n = 1024 * 1024;
    asio::io_context io;
    sdp::AsyncAcceptor acc(io);
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    sdp::Stream client;
    std::error_code cec, crec, cwec;
    std::size_t cgot = 0;
    bool cok = false;
    std::thread cl([&] {
        cec = client.connect_sdp(acc.local_endpoint(), opts());
        if (cec) {
            return;
        }
        std::thread w([&] { cwec = send_pattern(client, n, 31); });
        cgot = recv_pattern(client, 32, crec, cok);
        w.join();
        client.close();
    });
    std::optional<sdp::AsyncStream> server;
    ASSERT_NO_FATAL_FAILURE(accept_one(io, acc, server));
    EXPECT_EQ(server->used(), sdp::Transport::sdp);
    const auto out = make_pattern(n, 32);
    bool wrote = false, read_done = false;
    error_code wec, rec;
    asio::async_write(*server, asio::buffer(out), [&](error_code e, std::size_t) {
        wec = e;
        server->async_shutdown([&](error_code) { wrote = true; });
    });
    std::vector<std::uint8_t> in;
    asio::async_read(*server, asio::dynamic_buffer(in), [&](error_code e, std::size_t) {
        rec = e;
        read_done = true;
    });
    ASSERT_TRUE(run_until(
        io, [&] { return wrote && read_done; }, 120s));
    EXPECT_FALSE(wec) << wec.message();
    EXPECT_EQ(rec, asio::error::eof) << rec.message();
    EXPECT_EQ(in.size(), n);
    EXPECT_TRUE(check_pattern(in, 0, 31));
    bool closed = false;
    server->async_close([&](error_code) { closed = true; });
    ASSERT_TRUE(run_until(io, [&] { return closed; }));
    cl.join();
    EXPECT_FALSE(cec) << cec.message();
    EXPECT_FALSE(crec) << crec.message();
    EXPECT_FALSE(cwec) << cwec.message();
    EXPECT_EQ(cgot, n);
    EXPECT_TRUE(cok);
    EXPECT_EQ(acc.stats().established, 1u);
}

// 9.5.4 from a blocking writer: a zero-copy write the peer does not read
// within io_timeout is revoked (SrcAvailCancel). The async peer's driver
// answers (SendSm) although no read is pending; the write returns the bytes
// the peer took with timed_out, the stream is intact, and writing the rest
// delivers every byte once, in order.
TEST(SdpAsyncAcceptor, BlockingZeroCopyWriteTimesOutRevokedAndTheStreamGoesOn) {
    constexpr std::size_t n = 1024 * 1024;
    asio::io_context io;
    sdp::AsyncAcceptor acc(io);
    sdp::AcceptorOptions ao;
    ao.stream = zcopy_opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    auto co = zcopy_opts();
    co.io_timeout = 300ms;
    sdp::Stream client;
    std::error_code cec, first_ec, rest_ec;
    std::size_t first = 0;
    std::atomic<bool> first_done{false};
    sdp::StreamStats cstats;
    const auto out = make_pattern(n, 41);
    std::thread cl([&] {
        cec = client.connect_sdp(acc.local_endpoint(), co);
        if (cec) {
            first_done = true;
            return;
        }
        first = client.write(out, first_ec);
        first_done = true;
        if (first < n) {
            client.write(std::span(out).subspan(first), rest_ec);
        }
        if (!rest_ec) {
            rest_ec = client.shutdown_write();
        }
        cstats = client.stats();
        std::vector<std::uint8_t> b(16);
        std::error_code ec;
        client.read_some(b, ec);  // until the server closes
        client.close();
    });
    std::optional<sdp::AsyncStream> server;
    ASSERT_NO_FATAL_FAILURE(accept_one(io, acc, server));
    // The server's driver runs, but nothing reads the advertised buffer.
    ASSERT_TRUE(run_until(io, [&] { return first_done.load(); }));
    std::vector<std::uint8_t> in;
    bool read_done = false;
    error_code rec;
    asio::async_read(*server, asio::dynamic_buffer(in), [&](error_code e, std::size_t) {
        rec = e;
        read_done = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return read_done; }));
    bool closed = false;
    server->async_close([&](error_code) { closed = true; });
    ASSERT_TRUE(run_until(io, [&] { return closed; }));
    cl.join();
    ASSERT_FALSE(cec) << cec.message();
    EXPECT_EQ(first_ec, std::errc::timed_out) << first_ec.message();
    EXPECT_LT(first, n);
    EXPECT_EQ(cstats.src_avail_cancel_sent, 1u);
    EXPECT_FALSE(rest_ec) << rest_ec.message();
    EXPECT_EQ(rec, asio::error::eof) << rec.message();
    EXPECT_EQ(in.size(), n);
    EXPECT_TRUE(check_pattern(in, 0, 41)) << "bytes lost, duplicated or reordered";
}

// Async stream to async acceptor: concurrent startups. Silent TCP clients
// connect first; the real SDP client is still accepted while they wait.
TEST(SdpAsyncAcceptor, SilentClientsDoNotDelayARealOne) {
    asio::io_context io;
    sdp::AsyncAcceptor acc(io);
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ao.stream.handshake_timeout = 60s;  // the silent ones stay pending
    std::vector<std::string> failures;
    ao.on_handshake_error = [&](const std::string& m) { failures.push_back(m); };
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    std::vector<int> silent;
    for (int i = 0; i < 5; ++i) {
        int fd = sdptest::tcp_connect(acc.local_endpoint());
        ASSERT_GE(fd, 0);
        silent.push_back(fd);
    }
    ASSERT_TRUE(run_until(io, [&] { return acc.stats().pending == 5; }));
    sdp::AsyncStream client(io);
    bool connected = false;
    error_code cec;
    client.async_connect_sdp(acc.local_endpoint(), opts(), [&](error_code e) {
        cec = e;
        connected = true;
    });
    std::optional<sdp::AsyncStream> server;
    acc.async_accept([&](error_code e, sdp::AsyncStream s) {
        EXPECT_FALSE(e) << e.message();
        server.emplace(std::move(s));
    });
    ASSERT_TRUE(run_until(io, [&] { return connected && server.has_value(); }));
    EXPECT_FALSE(cec) << cec.message();
    EXPECT_EQ(acc.stats().pending, 5u);  // the silent ones are still waiting
    // Data flows on the accepted stream.
    const std::string hi = "hi";
    bool wrote = false;
    asio::async_write(client, asio::buffer(hi), [&](error_code, std::size_t) { wrote = true; });
    std::vector<std::uint8_t> b(2);
    bool got = false;
    asio::async_read(*server, asio::buffer(b), [&](error_code e, std::size_t) {
        EXPECT_FALSE(e);
        got = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return wrote && got; }));
    EXPECT_EQ(std::string(b.begin(), b.end()), "hi");
    // The silent clients hang up: their startups fail and are counted, not
    // returned.
    for (int fd : silent) {
        ::close(fd);
    }
    ASSERT_TRUE(run_until(io, [&] { return acc.stats().pending == 0; }));
    EXPECT_EQ(acc.stats().handshake_failures, 5u);
    EXPECT_EQ(failures.size(), 5u);
    client.close();
    server->close();
    acc.close();
}

TEST(SdpAsyncAcceptor, PendingHandshakesAreBounded) {
    asio::io_context io;
    sdp::AsyncAcceptor acc(io);
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ao.stream.handshake_timeout = 60s;
    ao.max_pending_handshakes = 3;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    std::vector<int> silent;
    for (int i = 0; i < 5; ++i) {
        int fd = sdptest::tcp_connect(acc.local_endpoint());
        ASSERT_GE(fd, 0);
        silent.push_back(fd);
    }
    ASSERT_TRUE(run_until(io, [&] { return acc.stats().tcp_accepted == 5; }));
    EXPECT_EQ(acc.stats().pending, 3u);
    EXPECT_EQ(acc.stats().over_limit, 2u);
    for (int fd : silent) {
        ::close(fd);
    }
    ASSERT_TRUE(run_until(io, [&] { return acc.stats().pending == 0; }));
    // Room again: a real client gets through.
    sdp::AsyncStream client(io);
    bool connected = false;
    error_code cec;
    client.async_connect_sdp(acc.local_endpoint(), opts(), [&](error_code e) {
        cec = e;
        connected = true;
    });
    bool accepted = false;
    acc.async_accept([&](error_code e, sdp::AsyncStream) {
        EXPECT_FALSE(e);
        accepted = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return connected && accepted; }));
    EXPECT_FALSE(cec) << cec.message();
    acc.close();
}

TEST(SdpAsyncAcceptor, CancelAndCloseAbortPendingAccepts) {
    asio::io_context io;
    sdp::AsyncAcceptor acc(io);
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), {}));
    int calls = 0;
    error_code e1, e2;
    acc.async_accept([&](error_code e, sdp::AsyncStream) {
        e1 = e;
        ++calls;
    });
    acc.cancel();
    ASSERT_TRUE(run_until(io, [&] { return calls == 1; }));
    EXPECT_EQ(e1, asio::error::operation_aborted);
    acc.async_accept([&](error_code e, sdp::AsyncStream) {
        e2 = e;
        ++calls;
    });
    acc.close();
    ASSERT_TRUE(run_until(io, [&] { return calls == 2; }));
    EXPECT_EQ(e2, asio::error::operation_aborted);
}

// ---------------------------------------------------------------------------
// Through the real sdp-pmd.

class SdpAsyncPortMapper : public sdptest::PmdFixture {
  protected:
    sdp::StreamOptions popts() const {
        auto o = opts();
        o.pmsp = pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), port_};
        o.resolve_deadline = 3s;
        o.use_pm_cache = false;
        return o;
    }
    // Connects through the Port Mapper; a thread answers "ping" with "pong"
    // on whatever accepted (`serve`); checks the transport.
    void ping_pong(const pm::Endpoint& conventional, const sdp::StreamOptions& o,
                   sdp::Transport expect, const std::function<void()>& serve) {
        asio::io_context io;
        std::thread srv(serve);
        sdp::AsyncStream s(io);
        bool done = false;
        error_code ec;
        s.async_connect(conventional, o, [&](error_code e) {
            ec = e;
            done = true;
        });
        const bool finished = run_until(io, [&] { return done; });
        if (!finished || ec) {
            int fd = sdptest::tcp_connect(conventional);  // unblock a TCP server
            if (fd >= 0) {
                ::close(fd);
            }
        }
        if (finished && !ec) {
            EXPECT_EQ(s.used(), expect) << s.info().reason;
            EXPECT_FALSE(expect == sdp::Transport::tcp && s.info().reason.empty());
            const std::string ping = "ping";
            std::vector<std::uint8_t> b(4);
            bool ok = false;
            asio::async_write(s, asio::buffer(ping), [&](error_code e, std::size_t) {
                EXPECT_FALSE(e);
                asio::async_read(s, asio::buffer(b), [&](error_code e2, std::size_t) {
                    EXPECT_FALSE(e2) << e2.message();
                    ok = true;
                });
            });
            EXPECT_TRUE(run_until(io, [&] { return ok; }));
            EXPECT_EQ(std::string(b.begin(), b.end()), "pong");
            s.close();
        }
        srv.join();
        ASSERT_TRUE(finished);
        ASSERT_FALSE(ec) << ec.message() << " " << s.info().reason;
    }
};

std::function<void()> tcp_pong(sdptest::TcpListener& conv) {
    return [&conv] {
        int fd = conv.accept(30000);
        if (fd < 0) {
            return;
        }
        char b[4];
        if (::recv(fd, b, 4, MSG_WAITALL) == 4) {
            (void)!::send(fd, "pong", 4, MSG_NOSIGNAL);
        }
        char x;
        (void)!::recv(fd, &x, 1, 0);  // until the client closes
        ::close(fd);
    };
}

TEST_F(SdpAsyncPortMapper, AcceptedMappingUsesSdp) {
    sdptest::TcpListener conv;
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) +
              "\"\n    sdp: [\"127.0.0.1:" + std::to_string(acc.local_endpoint().port) + "\"]\n"));
    ASSERT_NO_FATAL_FAILURE(ping_pong(conv.endpoint(), popts(), sdp::Transport::sdp, [&] {
        sdp::Stream s;
        if (acc.accept(s, 30s)) {
            return;
        }
        std::vector<std::uint8_t> b(4);
        std::error_code ec;
        if (s.read(b, ec) == 4) {
            const std::string pong = "pong";
            s.write(std::span(reinterpret_cast<const std::uint8_t*>(pong.data()), 4), ec);
        }
        s.read_some(b, ec);  // until the client closes
    }));
}

// AsyncAcceptor registers through the control socket; an async client
// resolves the mapping and lands on SDP; close() unregisters it.
TEST_F(SdpAsyncPortMapper, AsyncAcceptorRegistersAndAsyncClientUsesSdp) {
    const auto sock = dir_.path() / "control.sock";
    ASSERT_NO_FATAL_FAILURE(start("listen: [\"127.0.0.1:{PORT}\"]\ncontrol:\n  socket: \"" +
                                  sock.string() + "\"\nstate_file: \"" +
                                  (dir_.path() / "state.json").string() + "\"\n"));
    if (!pmtest::wait_until([&] { return std::filesystem::exists(sock); }, 2000ms)) {
        GTEST_SKIP() << "sdp-pmd has no control socket: " << log();
    }
    sdptest::TcpListener conv;
    asio::io_context io;
    sdp::AsyncAcceptor acc(io);
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ao.control_socket = sock.string();
    ao.conventional = conv.endpoint().to_string();
    ao.service_name = "async-test";
    auto oec = acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao);
    ASSERT_FALSE(oec) << oec.message() << ": " << acc.registration_error();
    EXPECT_TRUE(acc.registered());
    std::optional<sdp::AsyncStream> server;
    acc.async_accept([&](error_code e, sdp::AsyncStream s) {
        EXPECT_FALSE(e) << e.message();
        server.emplace(std::move(s));
    });
    sdp::AsyncStream client(io);
    bool connected = false;
    error_code cec;
    client.async_connect(conv.endpoint(), popts(), [&](error_code e) {
        cec = e;
        connected = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return connected && server.has_value(); }));
    ASSERT_FALSE(cec) << cec.message() << " " << client.info().reason;
    EXPECT_EQ(client.used(), sdp::Transport::sdp) << client.info().reason;
    EXPECT_EQ(client.info().resolution, "accept");
    EXPECT_EQ(client.info().peer, acc.local_endpoint());
    const std::string ping = "ping";
    std::vector<std::uint8_t> b(4);
    bool ok = false;
    asio::async_write(client, asio::buffer(ping), [&](error_code, std::size_t) {});
    asio::async_read(*server, asio::buffer(b), [&](error_code e, std::size_t) {
        EXPECT_FALSE(e);
        ok = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return ok; }));
    EXPECT_EQ(std::string(b.begin(), b.end()), "ping");
    client.close();
    server->close();
    EXPECT_FALSE(acc.close()) << acc.registration_error();
    EXPECT_FALSE(acc.registered());
}

TEST_F(SdpAsyncPortMapper, DenyFallsBackToTcp) {
    sdptest::TcpListener conv;
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) +
              "\"\n    sdp: [\"127.0.0.1:9\"]\n    allow: [\"10.0.0.0/8\"]\n"));
    ASSERT_NO_FATAL_FAILURE(
        ping_pong(conv.endpoint(), popts(), sdp::Transport::tcp, tcp_pong(conv)));
}

TEST_F(SdpAsyncPortMapper, RefusedSdpPortFallsBackToTcp) {
    sdptest::TcpListener conv;
    sdptest::TcpListener gone;
    const auto dead = gone.port();
    gone.close();
    // health: off, so that the PMAccept names the dead port (the health check
    // would deny it): this test is about the refused connect.
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nhealth: off\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) + "\"\n    sdp: [\"127.0.0.1:" + std::to_string(dead) +
              "\"]\n"));
    ASSERT_NO_FATAL_FAILURE(
        ping_pong(conv.endpoint(), popts(), sdp::Transport::tcp, tcp_pong(conv)));
}

TEST_F(SdpAsyncPortMapper, PmTimeoutFallsBackAndNoFallbackRefuses) {
    sdptest::TcpListener conv;
    auto silent = pmtest::free_udp_port(false);  // nobody answers there
    ASSERT_TRUE(silent.has_value());
    port_ = *silent;
    auto o = popts();
    o.resolve_deadline = 300ms;
    o.resolve_initial_timeout = 100ms;
    ASSERT_NO_FATAL_FAILURE(ping_pong(conv.endpoint(), o, sdp::Transport::tcp, tcp_pong(conv)));
    o.fallback = false;
    asio::io_context io;
    sdp::AsyncStream s(io);
    const auto ec = connect_and_wait(io, s, conv.endpoint(), o);
    ASSERT_TRUE(ec.has_value());
    EXPECT_EQ(*ec, asio::error::connection_refused) << ec->message();
    EXPECT_FALSE(s.is_open());
}

// The async API carries SDP over the soft provider only: iwarp_provider rdma
// is an unusable provider for the 7.5.1 procedure, as it is for
// Stream::connect without a device: TCP to the Conventional Address with no
// Port Mapper question, or no_such_device without fallback.
TEST(SdpAsyncProvider, RdmaIsUnusableHereAndFallsBackWithoutAsking) {
    sdptest::TcpListener conv;
    auto o = opts();
    o.iwarp_provider = sdp::Provider::rdma;
    o.pmsp = *pm::Endpoint::parse("127.0.0.1:9");  // never asked
    asio::io_context io;
    std::thread srv(tcp_pong(conv));
    sdp::AsyncStream s(io);
    const auto ec = connect_and_wait(io, s, conv.endpoint(), o);
    ASSERT_TRUE(ec.has_value());
    EXPECT_FALSE(*ec) << ec->message() << " " << s.info().reason;
    EXPECT_EQ(s.used(), sdp::Transport::tcp);
    EXPECT_EQ(s.info().provider, "tcp");
    EXPECT_EQ(s.info().resolution, "") << "no Port Mapper question";
    EXPECT_NE(s.info().reason.find("soft provider only"), std::string::npos) << s.info().reason;
    EXPECT_NE(s.info().reason.find("fell back to TCP"), std::string::npos) << s.info().reason;
    s.close();
    srv.join();

    o.fallback = false;
    sdp::AsyncStream t(io);
    const auto ec2 = connect_and_wait(io, t, conv.endpoint(), o);
    ASSERT_TRUE(ec2.has_value());
    EXPECT_EQ(*ec2, asio::error::no_such_device) << ec2->message();
    EXPECT_EQ(t.info().provider, "rdma");
    EXPECT_FALSE(t.is_open());
}

}  // namespace

// Out-of-band data (9.5.3) on the async stream: async_read_some stops at the
// mark, read_oob/at_mark/urgent_pending are synchronous; send_oob reaches a
// blocking peer as its urgent byte. Keepalive (14.3) on its socket.
TEST(SdpAsyncStream, OutOfBandDataBothWaysAndKeepalive) {
    AsyncClientPair p;
    std::error_code s_ec, s_oob_ec;
    std::string s_before;
    std::uint8_t s_oob = 0;
    std::atomic<bool> s_done{false};
    ASSERT_NO_FATAL_FAILURE(p.start([&](sdp::Stream& s) {
        const std::string a = "hello", b = "world";
        std::error_code ec;
        s.write({reinterpret_cast<const std::uint8_t*>(a.data()), a.size()}, ec);
        s_ec = s.send_oob('!');
        s.write({reinterpret_cast<const std::uint8_t*>(b.data()), b.size()}, ec);
        // The client's urgent byte: read up to it, then take it.
        std::uint8_t buf[16];
        for (int i = 0; i < 100; ++i) {
            const std::size_t n = s.read_some(buf, ec, true);
            s_before.append(reinterpret_cast<const char*>(buf), n);
            if (ec) {
                break;
            }
        }
        if (ec == std::errc::interrupted) {
            s_oob = s.read_oob(s_oob_ec);
        } else {
            s_oob_ec = ec;
        }
        s_done = true;
        s.read_some(buf, ec);  // the client's close (bounded by io_timeout)
        s.close();
    }));
    ASSERT_TRUE(run_until(
        p.io, [&] { return p.client.urgent_pending(); }, 20s));
    std::error_code ec;
    auto read_once = [&] {
        std::vector<std::uint8_t> buf(100);
        std::size_t got = 0;
        bool done = false;
        p.client.async_read_some(asio::buffer(buf), [&](error_code e, std::size_t n) {
            EXPECT_FALSE(e) << e.message();
            got = n;
            done = true;
        });
        EXPECT_TRUE(run_until(
            p.io, [&] { return done; }, 20s));
        return std::string(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(got));
    };
    EXPECT_EQ(read_once(), "hello");  // stops at the mark
    EXPECT_TRUE(p.client.at_mark());
    EXPECT_EQ(p.client.read_oob(ec), '!');
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_FALSE(p.client.urgent_pending());
    EXPECT_EQ(read_once(), "world");
    EXPECT_FALSE(p.client.at_mark());

    // Keepalive on the async stream's socket.
    sdp::Keepalive k;
    k.enabled = true;
    k.idle = 13s;
    k.interval = 2s;
    k.count = 3;
    ASSERT_FALSE(p.client.set_keepalive(k));
    int v = 0;
    socklen_t len = sizeof v;
    ASSERT_EQ(::getsockopt(p.client.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
    EXPECT_EQ(v, 13);

    // The other way: "ab", urgent 'K'.
    bool wrote = false;
    const std::string ab = "ab";
    asio::async_write(p.client, asio::buffer(ab), [&](error_code e, std::size_t) {
        EXPECT_FALSE(e);
        wrote = true;
    });
    ASSERT_TRUE(run_until(p.io, [&] { return wrote; }));
    EXPECT_FALSE(p.client.send_oob('K'));
    // Keep the client's side moving until the server has taken the byte.
    ASSERT_TRUE(run_until(
        p.io, [&] { return s_done.load(); }, 20s));
    p.client.close();
    p.srv.join();
    EXPECT_FALSE(s_ec) << s_ec.message();
    EXPECT_EQ(s_before, "ab");
    EXPECT_FALSE(s_oob_ec) << s_oob_ec.message();
    EXPECT_EQ(s_oob, 'K');
}
