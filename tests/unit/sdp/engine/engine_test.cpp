// SPDX-License-Identifier: Apache-2.0
// SDP engine pairs wired back to back through an in-memory QP pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <variant>
#include <vector>

#include "fake_qp.hpp"

namespace e = sdp::engine;
namespace w = sdp::wire;
using namespace sdp::test;
using Bytes = std::vector<std::uint8_t>;

namespace {

w::Message decoded(const Bytes& b) {
    auto r = w::decode(b);
    EXPECT_TRUE(std::holds_alternative<w::Message>(r));
    return std::holds_alternative<w::Message>(r) ? std::get<w::Message>(r) : w::Message{};
}

Bytes hello_bytes(std::uint8_t major, std::uint16_t max_adverts, std::uint16_t ird,
                  std::uint16_t ord, std::uint16_t bufs = 8) {
    w::Message m;
    m.bufs = bufs;
    m.body = w::Hello{.major = major,
                      .minor = 1,
                      .max_adverts = max_adverts,
                      .des_rem_rcv_sz = 4096,
                      .local_rcv_sz = 4096,
                      .loc_ird = ird,
                      .loc_ord = ord};
    return w::encode(m);
}

// Moves data both ways until every byte is read; readers use random sizes.
void transfer(Pair& p, const Bytes& ab, const Bytes& ba, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::size_t wa = 0, wb = 0;
    Bytes ra, rb, buf(70000);
    int idle = 0;
    while ((ra.size() < ba.size() || rb.size() < ab.size()) && idle < 1000) {
        bool progress = false;
        if (wa < ab.size()) {
            std::size_t n = p.a.write(std::span(ab).subspan(
                wa, std::min<std::size_t>(ab.size() - wa, rng() % 50000 + 1)));
            wa += n;
            progress = progress || n > 0;
        }
        if (wb < ba.size()) {
            std::size_t n = p.b.write(std::span(ba).subspan(
                wb, std::min<std::size_t>(ba.size() - wb, rng() % 50000 + 1)));
            wb += n;
            progress = progress || n > 0;
        }
        for (int i = 0; i < 64 && p.step(); ++i)
            progress = true;
        std::size_t n = p.b.read(std::span(buf).first(rng() % buf.size() + 1));
        rb.insert(rb.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        progress = progress || n > 0;
        n = p.a.read(std::span(buf).first(rng() % buf.size() + 1));
        ra.insert(ra.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        progress = progress || n > 0;
        idle = progress ? 0 : idle + 1;
    }
    EXPECT_EQ(rb.size(), ab.size());
    EXPECT_EQ(ra.size(), ba.size());
    EXPECT_TRUE(rb == ab);
    EXPECT_TRUE(ra == ba);
}

}  // namespace

TEST(SdpEngineSetup, HandshakeNegotiatesParameters) {
    e::Config ca, cb;
    ca.ird = 4;
    ca.ord = 8;
    ca.recv_buf_count = 10;
    ca.recv_buf_size = 8192;
    cb.ird = 2;
    cb.ord = 16;
    cb.minor = 3;
    cb.recv_buf_size = 4096;
    Pair p(ca, cb);
    auto hello = p.a.connect();
    ASSERT_EQ(hello.size(), 32u);  // fits MPA private data (<= 252 bytes)
    EXPECT_EQ(p.a.state(), e::State::connecting);
    EXPECT_EQ(p.qa.posted, 10u);  // receives posted before the Hello (8.1.1 1c)
    auto h = decoded(hello);
    EXPECT_EQ(h.bufs, 10);
    EXPECT_EQ(h.mseq, 0u);
    EXPECT_EQ(h.mseq_ack, 0u);
    EXPECT_EQ(std::get<w::Hello>(h.body).local_rcv_sz, 8192u);

    ASSERT_EQ(p.b.accept(hello), e::Error::none);
    EXPECT_EQ(p.b.state(), e::State::established);
    ASSERT_EQ(p.qb.sent_log.size(), 1u);
    EXPECT_TRUE(p.qb.sent_log[0].solicited);  // HelloAck: Send with SE (step 5)
    auto ack = decoded(p.qb.sent_log[0].bytes);
    EXPECT_EQ(ack.mseq, 0u);
    EXPECT_EQ(ack.mseq_ack, 0u);
    EXPECT_EQ(ack.bufs, 16);
    const auto& hah = std::get<w::HelloAck>(ack.body);
    // B: ORD reduced to A's LocIRD (4e), IRD reduced to A's LocORD (4d).
    EXPECT_EQ(hah.loc_ird, 2);
    EXPECT_EQ(hah.loc_ord, 4);
    EXPECT_EQ(hah.act_rcv_sz, 4096u);
    p.run();
    EXPECT_EQ(p.a.state(), e::State::established);
    EXPECT_EQ(p.a.ird(), 4);  // min(4, B's LocORD 4)
    EXPECT_EQ(p.a.ord(), 2);  // <= B's LocIRD 2 (7d)
    EXPECT_EQ(p.a.minor_version(), 1);
    EXPECT_EQ(p.b.minor_version(), 1);
    EXPECT_EQ(p.a.peer_recv_size(), 4096u);
    EXPECT_EQ(p.b.peer_recv_size(), 8192u);
    // Credits: A sees B's 16; B sees A's 10 minus the HelloAck.
    EXPECT_EQ(p.a.send_credits(), 16u);
    EXPECT_EQ(p.b.send_credits(), 9u);
    EXPECT_EQ(p.a.local_bufs(), 10u);  // the HelloAck's buffer was reposted
    EXPECT_TRUE(p.faults.empty());
}

TEST(SdpEngineSetup, MajorVersionMismatchRejected) {
    Pair p;
    EXPECT_EQ(p.b.accept(hello_bytes(2, 1, 1, 1)), e::Error::version_mismatch);
    EXPECT_EQ(p.b.state(), e::State::failed);
    EXPECT_TRUE(p.qb.sent_log.empty());
    EXPECT_EQ(p.qb.posted, 0u);
}

TEST(SdpEngineSetup, MinorMismatchAccepted) {
    Pair p;
    Bytes h = hello_bytes(1, 1, 1, 1);
    h[19] = 0x71;  // MinV 7, MajV 1
    EXPECT_EQ(p.b.accept(h), e::Error::none);
    EXPECT_EQ(p.b.minor_version(), 1);
}

TEST(SdpEngineSetup, HelloFieldChecks) {
    for (auto [h, want] : {std::pair{hello_bytes(1, 0, 1, 1), e::Error::bad_hello},
                           std::pair{hello_bytes(1, 1, 0, 1), e::Error::bad_hello},
                           std::pair{hello_bytes(1, 1, 1, 0), e::Error::bad_hello},
                           std::pair{hello_bytes(1, 1, 1, 1, 2), e::Error::bad_hello},
                           std::pair{Bytes{1, 2, 3}, e::Error::bad_hello}}) {
        Pair p;
        EXPECT_EQ(p.b.accept(h), want);
        EXPECT_TRUE(p.qb.sent_log.empty());
    }
}

TEST(SdpEngineSetup, BadHelloAckTerminates) {
    Pair p;
    (void)p.a.connect();
    w::Message m;
    m.bufs = 8;
    m.body = w::HelloAck{
        .major = 3, .minor = 1, .max_adverts = 1, .act_rcv_sz = 4096, .loc_ird = 1, .loc_ord = 1};
    p.qb.outbound.push_back({w::encode(m), true, false});
    p.run();
    EXPECT_EQ(p.a.state(), e::State::failed);
    EXPECT_EQ(p.a.error(), e::Error::version_mismatch);
    EXPECT_TRUE(p.llp_down);
    EXPECT_FALSE(p.qa.last_disconnect_graceful);
}

TEST(SdpEngineSetup, LlpLostDuringSetup) {
    Pair p;
    (void)p.a.connect();
    p.llp_teardown();
    EXPECT_EQ(p.a.state(), e::State::failed);
    EXPECT_EQ(p.a.error(), e::Error::llp_lost);
}

class SdpEngineData : public ::testing::TestWithParam<std::size_t> {};

TEST_P(SdpEngineData, BothDirections) {
    e::Config c;
    c.recv_buf_size = 4096;
    c.recv_buf_count = 8;
    c.send_queue_limit = 64 * 1024;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    const std::size_t n = GetParam();
    transfer(p, pattern(n, 1), pattern(n / 2 + 3, 2), static_cast<std::uint32_t>(n));
    EXPECT_TRUE(p.faults.empty()) << p.faults.front();
    EXPECT_EQ(p.a.state(), e::State::established);
    EXPECT_EQ(p.b.state(), e::State::established);
    // Every message fits the peer's buffer and Data carries at most 4096-16.
    for (const auto& pk : p.qa.sent_log)
        EXPECT_LE(pk.bytes.size(), 4096u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SdpEngineData,
                         ::testing::Values(0, 1, 4079, 4080, 4081, 65536, 100003, 1 << 20));

TEST(SdpEngineData, DifferentBufferSizesAndOneMiB) {
    e::Config ca, cb;
    ca.recv_buf_size = 37;  // the minimum: BSDH + SinkAH + 1
    ca.recv_buf_count = 3;
    cb.recv_buf_size = 65536;
    cb.recv_buf_count = 64;
    cb.send_buf_size = 1000;
    Pair p(ca, cb);
    ASSERT_EQ(p.handshake(), e::Error::none);
    transfer(p, pattern(1 << 20, 3), pattern(20000, 4), 9);
    EXPECT_TRUE(p.faults.empty());
    for (const auto& pk : p.qb.sent_log)
        EXPECT_LE(pk.bytes.size(), 37u);
    for (const auto& pk : p.qa.sent_log)
        EXPECT_LE(pk.bytes.size(), 65536u);
}

TEST(SdpEngineCredits, WriterBlocksThenResumesAfterGratuitousUpdate) {
    e::Config ca, cb;
    cb.recv_buf_count = 4;
    cb.recv_buf_size = 1024;
    ca.send_queue_limit = 8192;
    Pair p(ca, cb);
    ASSERT_EQ(p.handshake(), e::Error::none);
    EXPECT_EQ(p.a.send_credits(), 4u);
    Bytes data = pattern(20000, 5);
    std::size_t written = p.a.write(data);
    EXPECT_EQ(written, 8192u);
    p.run();
    // Two Data messages used 2 credits; the last 2 are reserved (10.5).
    EXPECT_EQ(p.a.send_credits(), 2u);
    EXPECT_EQ(p.a.stats().data_messages_sent, 2u);
    written += p.a.write(std::span(data).subspan(written));  // refill the queue
    EXPECT_EQ(written, 8192u + 2u * (1024 - 16));
    p.run();
    EXPECT_EQ(p.a.write(std::span(data).subspan(written)), 0u);  // full and blocked
    EXPECT_EQ(p.a.send_credits(), 2u);
    EXPECT_EQ(p.b.readable(), 2u * (1024 - 16));
    EXPECT_EQ(p.b.local_bufs(), 2u);
    EXPECT_EQ(p.b.stats().credit_updates_sent, 0u);

    Bytes got(data.size()), buf(3000);
    std::size_t r = 0;
    while (r < data.size()) {
        std::size_t n = p.b.read(buf);
        ASSERT_LE(r + n, got.size());
        std::copy_n(buf.begin(), n, got.begin() + static_cast<std::ptrdiff_t>(r));
        r += n;
        p.run();
        if (written < data.size())
            written += p.a.write(std::span(data).subspan(written));
        p.run();
        if (n == 0 && written == data.size() && p.a.send_queued() == 0 && p.b.readable() == 0)
            break;
    }
    EXPECT_EQ(r, data.size());
    EXPECT_TRUE(got == data);
    EXPECT_GT(p.b.stats().credit_updates_sent, 0u);  // B only reads: updates were gratuitous
    EXPECT_EQ(p.b.stats().data_messages_sent, 0u);
    EXPECT_TRUE(p.faults.empty());
}

TEST(SdpEngineCredits, GratuitousUpdatesAreEmptyUnsolicitedData) {
    e::Config cb;
    cb.recv_buf_count = 3;
    cb.recv_buf_size = 64;
    Pair p({}, cb);
    ASSERT_EQ(p.handshake(), e::Error::none);
    Bytes data = pattern(5000, 6);
    std::size_t w0 = p.a.write(data);
    ASSERT_EQ(w0, data.size());
    Bytes got, buf(100);
    for (int i = 0; i < 10000 && got.size() < data.size(); ++i) {
        p.run();
        std::size_t n = p.b.read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    EXPECT_TRUE(got == data);
    for (const auto& pk : p.qb.sent_log) {
        auto m = decoded(pk.bytes);
        if (w::mid_of(m.body) != w::Mid::data)
            continue;
        EXPECT_TRUE(std::get<w::Data>(m.body).payload.empty());
        EXPECT_FALSE(pk.solicited);
    }
    EXPECT_TRUE(p.faults.empty());
}

TEST(SdpEngineMseq, SequenceAndAcks) {
    e::Config c;
    c.recv_buf_size = 100;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    Bytes d = pattern(1000, 7);
    p.a.write(d);
    p.run();
    Bytes buf(2000);
    p.b.read(buf);
    p.run();
    p.b.write(pattern(300, 8));
    p.run();
    // A's messages: 1, 2, 3 ... with MSeqAck 0 until B's first message arrives.
    std::uint32_t expect = 1;
    for (const auto& pk : p.qa.sent_log) {
        auto m = decoded(pk.bytes);
        EXPECT_EQ(m.mseq, expect++);
    }
    EXPECT_EQ(decoded(p.qa.sent_log.front().bytes).mseq_ack, 0u);
    // B's first is the HelloAck (MSeq 0), then 1, 2, ...
    expect = 0;
    for (const auto& pk : p.qb.sent_log)
        EXPECT_EQ(decoded(pk.bytes).mseq, expect++);
    // B's MSeqAck in its last message is A's last MSeq received by then.
    EXPECT_EQ(p.b.last_received_mseq(), static_cast<std::uint32_t>(p.qa.sent_log.size()));
    EXPECT_EQ(p.a.last_received_mseq(), static_cast<std::uint32_t>(p.qb.sent_log.size() - 1));
}

// send_idle(): nothing queued and every message sent acknowledged by the
// peer's MSeqAck (6.1.6); a request/reply exchange makes both sides idle
// again, a one-way stream does not until the peer sends.
TEST(SdpEngineMseq, SendIdleUntilThePeerAcknowledges) {
    e::Config c;
    c.recv_buf_size = 100;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    EXPECT_TRUE(p.a.send_idle());
    EXPECT_TRUE(p.b.send_idle());
    p.a.write(pattern(64, 3));
    EXPECT_FALSE(p.a.send_idle());  // queued or sent, not acknowledged
    p.run();
    EXPECT_FALSE(p.a.send_idle()) << "B has sent nothing since: no MSeqAck yet";
    EXPECT_TRUE(p.b.send_idle());
    Bytes buf(64);
    p.b.read(buf);
    p.b.write(pattern(32, 4));  // the reply carries MSeqAck of A's message
    EXPECT_FALSE(p.b.send_idle());
    p.run();
    EXPECT_TRUE(p.a.send_idle());
    p.a.read(buf);
    p.a.write(pattern(8, 5));  // ... and this one B's
    p.run();
    EXPECT_TRUE(p.b.send_idle());
    EXPECT_FALSE(p.a.send_idle());
}

TEST(SdpEngineMseq, OutOfOrderMseqIsViolation) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    w::Message m;
    m.bufs = 16;
    m.mseq = 2;  // expected 1
    m.body = w::Data{{1, 2, 3}};
    p.inject_to_b(w::encode(m));
    p.run();
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::mseq_mismatch);
    EXPECT_TRUE(p.llp_down);  // no DisConn sent: LLP terminated at once
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::llp_lost);
}

TEST(SdpEngineMseq, AckOfUnsentMessageIsViolation) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    w::Message m;
    m.bufs = 16;
    m.mseq = 1;
    m.mseq_ack = 5;  // B has sent only the HelloAck (MSeq 0)
    m.body = w::Data{};
    p.inject_to_b(w::encode(m));
    p.run();
    EXPECT_EQ(p.b.error(), e::Error::bad_mseq_ack);
}

TEST(SdpEngineMseq, GarbageIsViolation) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.inject_to_b({0, 0, 0, 0x42, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0});
    p.run();
    EXPECT_EQ(p.b.error(), e::Error::bad_message);
    EXPECT_EQ(p.b.state(), e::State::reset);
}

TEST(SdpEngineClose, HalfCloseThenPeerStillSends) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    Bytes d1 = pattern(50000, 9);
    ASSERT_EQ(p.a.write(d1), d1.size());
    p.a.shutdown_write();
    EXPECT_EQ(p.a.write(d1), 0u);  // 8.2.1: send data after close is rejected
    Bytes got, buf(4096);
    for (int i = 0; i < 1000 && !p.b.eof(); ++i) {
        p.run();
        std::size_t n = p.b.read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    EXPECT_TRUE(got == d1);
    EXPECT_TRUE(p.a.disconn_sent());
    EXPECT_TRUE(p.b.disconn_received());
    EXPECT_TRUE(p.b.eof());
    EXPECT_FALSE(p.llp_down);
    // The other half-connection still works.
    Bytes d2 = pattern(300000, 10);
    std::size_t wr = 0;
    got.clear();
    for (int i = 0; i < 100000 && got.size() < d2.size(); ++i) {
        wr += p.b.write(std::span(d2).subspan(wr));
        p.run();
        std::size_t n = p.a.read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    EXPECT_TRUE(got == d2);
    EXPECT_EQ(p.a.state(), e::State::established);
    p.b.shutdown_write();
    p.run();
    EXPECT_TRUE(p.llp_down);
    EXPECT_EQ(p.a.state(), e::State::closed);
    EXPECT_EQ(p.b.state(), e::State::closed);
    EXPECT_TRUE(p.a.eof());
    EXPECT_EQ(p.a.error(), e::Error::none);
    EXPECT_EQ(p.b.error(), e::Error::none);
    // B, the second to close, tore down the LLP gracefully.
    EXPECT_EQ(p.qb.disconnects, 1);
    EXPECT_TRUE(p.qb.last_disconnect_graceful);
    EXPECT_TRUE(p.faults.empty());
}

TEST(SdpEngineClose, SimultaneousClose) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(pattern(100, 1));
    p.b.write(pattern(100, 2));
    p.a.shutdown_write();
    p.b.shutdown_write();
    p.run();
    EXPECT_EQ(p.a.state(), e::State::closed);
    EXPECT_EQ(p.b.state(), e::State::closed);
    EXPECT_EQ(p.a.readable(), 100u);  // data before DisConn stays readable
    EXPECT_EQ(p.b.readable(), 100u);
}

TEST(SdpEngineClose, DisConnWaitsForQueuedData) {
    e::Config cb;
    cb.recv_buf_count = 3;
    cb.recv_buf_size = 100;
    Pair p({}, cb);
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(pattern(1000, 3));
    p.a.shutdown_write();
    p.run();
    EXPECT_FALSE(p.a.disconn_sent());  // B is not reading: data still queued
    Bytes buf(2000), got;
    for (int i = 0; i < 100 && !p.b.eof(); ++i) {
        std::size_t n = p.b.read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        p.run();
    }
    EXPECT_EQ(got, pattern(1000, 3));
    EXPECT_TRUE(p.b.eof());
}

TEST(SdpEngineClose, AbortWithoutDisConnTerminatesLlp) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(pattern(100, 1));
    p.a.abort();
    const auto sent = p.qa.sent_log.size();
    p.run();
    EXPECT_EQ(p.qa.sent_log.size(), sent);  // no further SDP Messages (8.2.2)
    EXPECT_FALSE(p.qa.last_disconnect_graceful);
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::local_abort);
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::llp_lost);
}

TEST(SdpEngineClose, AbortAfterDisConnSendsAbortConn) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.shutdown_write();
    p.run();
    ASSERT_TRUE(p.b.disconn_received());
    p.a.abort();
    auto last = decoded(p.qa.sent_log.back().bytes);
    EXPECT_EQ(w::mid_of(last.body), w::Mid::abort_conn);
    EXPECT_TRUE(p.qa.sent_log.back().solicited);
    p.run();
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::peer_abort);
    EXPECT_TRUE(p.llp_down);
    EXPECT_TRUE(p.qa.last_disconnect_graceful);  // LLP teardown after AbortConn
}

TEST(SdpEngineClose, DataAfterDisConnIsViolation) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    w::Message m;
    m.bufs = 16;
    m.mseq = 1;
    m.body = w::DisConn{};
    p.inject_to_b(w::encode(m));
    m.mseq = 2;
    m.body = w::Data{{1}};
    p.inject_to_b(w::encode(m));
    p.run();
    EXPECT_EQ(p.b.error(), e::Error::unexpected_message);
}

TEST(SdpEngineSolicited, Section14_2) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(pattern(10, 1));
    p.a.shutdown_write();
    p.run();
    for (const auto& pk : p.qa.sent_log) {
        auto m = decoded(pk.bytes);
        EXPECT_EQ(pk.solicited, w::is_solicited(m));
        EXPECT_FALSE(pk.solicited);  // Data without OOB flags, DisConn
    }
    EXPECT_TRUE(p.qb.sent_log.front().solicited);  // HelloAck
}

TEST(SdpEngineOob, OobByteAndPendingFlag) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(Bytes{'a', 'b', 'c'});
    ASSERT_TRUE(p.a.write_oob('X'));
    p.a.write(Bytes{'d', 'e', 'f'});
    p.run();
    int pend = 0, pres = 0;
    for (const auto& pk : p.qa.sent_log) {
        auto m = decoded(pk.bytes);
        pend += (m.flags & w::flag::oob_pend) != 0;
        if (m.flags & w::flag::oob_pres) {
            ++pres;
            EXPECT_EQ(std::get<w::Data>(m.body).payload.back(), 'X');
            EXPECT_TRUE(pk.solicited);
        }
    }
    EXPECT_EQ(pend, 1);  // exactly once per OOB indication
    EXPECT_EQ(pres, 1);
    // The read stops at the mark; the urgent byte is out of line.
    Bytes buf(100);
    std::size_t n = p.b.read(buf);
    EXPECT_EQ(Bytes(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n)),
              (Bytes{'a', 'b', 'c'}));
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('X'));
    n = p.b.read(buf);
    EXPECT_EQ(Bytes(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n)),
              (Bytes{'d', 'e', 'f'}));
    EXPECT_EQ(p.b.read_oob(), std::nullopt);
    EXPECT_EQ(p.b.oob_pending(), 0u);
}

TEST(SdpEngineOob, PendingFlagWithin64KiBOfTheByte) {
    e::Config c;
    c.recv_buf_count = 64;
    c.send_queue_limit = 1 << 20;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    Bytes big = pattern(200000, 4);
    p.a.write(big);
    p.a.write_oob('!');
    Bytes buf(1 << 18);
    std::size_t got = 0;
    for (int i = 0; i < 1000 && got < big.size(); ++i) {
        p.run();
        got += p.b.read(buf);
    }
    std::uint64_t pos = 0, pend_at = 0, pres_at = 0;
    for (const auto& pk : p.qa.sent_log) {
        auto m = decoded(pk.bytes);
        if (m.flags & w::flag::oob_pend)
            pend_at = pos;
        pos += w::payload_size(m.body);
        if (m.flags & w::flag::oob_pres)
            pres_at = pos;
    }
    EXPECT_GT(pres_at, 0u);
    EXPECT_LE(pres_at - pend_at, 65535u);
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('!'));
}

TEST(SdpEngineZcopyFallback, SrcAvailAnsweredWithSendSm) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    w::Message m;
    m.bufs = 16;
    m.mseq = 1;
    m.body = w::SrcAvail{.len = 10000, .stag = 7, .va = 0x1000, .payload = {'h', 'i'}};
    p.inject_to_b(w::encode(m));
    p.run_to_b();
    EXPECT_EQ(p.b.error(), e::Error::none) << e::to_string(p.b.error());
    EXPECT_EQ(p.b.readable(), 2u);
    auto reply = decoded(p.qb.sent_log.back().bytes);
    EXPECT_EQ(w::mid_of(reply.body), w::Mid::send_sm);
    EXPECT_TRUE(p.qb.sent_log.back().solicited);
    EXPECT_EQ(reply.mseq_ack, 1u);
}

TEST(SdpEngineZcopyFallback, ChRcvBufAnsweredWithCurrentSize) {
    e::Config cb;
    cb.recv_buf_size = 5000;
    Pair p({}, cb);
    ASSERT_EQ(p.handshake(), e::Error::none);
    w::Message m;
    m.bufs = 16;
    m.mseq = 1;
    m.body = w::ChRcvBuf{9000};
    p.inject_to_b(w::encode(m));
    p.run_to_b();
    auto reply = decoded(p.qb.sent_log.back().bytes);
    EXPECT_EQ(std::get<w::ChRcvBufAck>(reply.body).act_sz, 5000u);
    EXPECT_FALSE(p.qb.sent_log.back().solicited);
}

TEST(SdpEngineCredits, MinimumBuffersBothWaysAndNoUpdatePingPong) {
    e::Config c;
    c.recv_buf_count = 3;
    c.recv_buf_size = 200;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    // Right after setup each side can send payload (>= 3 credits).
    EXPECT_GE(p.a.send_credits(), 3u);
    EXPECT_GE(p.b.send_credits(), 3u);
    transfer(p, pattern(100000, 11), pattern(70000, 12), 5);
    EXPECT_TRUE(p.faults.empty());
    const auto na = p.qa.sent_log.size(), nb = p.qb.sent_log.size();
    p.run();
    EXPECT_EQ(p.qa.sent_log.size(), na);  // idle connection stays idle
    EXPECT_EQ(p.qb.sent_log.size(), nb);
    // Updates are a fraction of the traffic, not an exchange per message.
    EXPECT_LT(p.a.stats().credit_updates_sent + p.b.stats().credit_updates_sent,
              p.a.stats().data_messages_sent + p.b.stats().data_messages_sent);
}

TEST(SdpEngineCredits, PeerSendingWithoutCreditIsViolation) {
    // A peer that ignores the advertised Bufs (10.2) and sends one message
    // more than the engine has buffers posted. A real QP would terminate the
    // stream first; the engine, driven directly here, must fail the
    // connection too rather than count a buffer it never posted (found by
    // fuzz_sdp_engine).
    FakeQp qp;
    e::Connection b(e::Role::accepting, e::Config{}, qp);
    ASSERT_EQ(b.accept(hello_bytes(1, 2, 1, 1)), e::Error::none);
    const std::uint32_t posted = b.local_bufs();
    ASSERT_EQ(qp.posted, posted);
    std::uint32_t sent = 0;
    for (std::uint32_t mseq = 1; mseq <= posted + 1 && b.state() == e::State::established; ++mseq) {
        w::Message m;
        m.bufs = 8;
        m.mseq = mseq;
        m.body = w::Data{pattern(100, mseq)};
        b.on_recv(w::encode(m), false);
        ++sent;
    }
    EXPECT_EQ(sent, posted + 1);  // nothing read: every buffer stays in use
    EXPECT_EQ(b.state(), e::State::reset);
    EXPECT_EQ(b.error(), e::Error::credit_overrun);
    EXPECT_EQ(b.local_bufs(), 0u);
    EXPECT_TRUE(qp.abortive);
}

TEST(SdpEngineClose, ResetAfterDisConnIsNotEndOfStream) {
    // Data, DisConn, then AbortConn before the data was read: the unread
    // byte is lost, so readers must see a reset, not a clean end of stream.
    FakeQp qp;
    e::Connection b(e::Role::accepting, e::Config{}, qp);
    ASSERT_EQ(b.accept(hello_bytes(1, 2, 1, 1)), e::Error::none);
    std::uint32_t mseq = 1;
    auto send = [&](w::Body body) {
        w::Message m;
        m.bufs = 8;
        m.mseq = mseq++;
        m.body = std::move(body);
        b.on_recv(w::encode(m), false);
    };
    send(w::Data{{0x42}});
    send(w::DisConn{});
    EXPECT_EQ(b.readable(), 1u);
    EXPECT_FALSE(b.eof());  // one byte still to read
    send(w::AbortConn{});
    EXPECT_EQ(b.state(), e::State::reset);
    EXPECT_EQ(b.readable(), 0u);
    EXPECT_FALSE(b.eof());
}

TEST(SdpEngineClose, DisConnAfterReadIsEndOfStream) {
    FakeQp qp;
    e::Connection b(e::Role::accepting, e::Config{}, qp);
    ASSERT_EQ(b.accept(hello_bytes(1, 2, 1, 1)), e::Error::none);
    w::Message m;
    m.bufs = 8;
    m.mseq = 1;
    m.body = w::Data{{0x42}};
    b.on_recv(w::encode(m), false);
    m.mseq = 2;
    m.body = w::DisConn{};
    b.on_recv(w::encode(m), false);
    Bytes buf(4);
    EXPECT_EQ(b.read(buf), 1u);
    EXPECT_TRUE(b.eof());
}

// 10.5: "MUST send an SDP Message that provides additional credit(s) if the
// Remote Peer's credits drop to one or fewer". Both sides keep two buffers
// free (the rest hold unread data); each side's DisConn (no payload) needs
// two credits or one that gives credit. Before the fix the update that the
// rule demands after a peer's pure update was suppressed by the ping-pong
// guard and a DisConn could wait forever.
TEST(SdpEngineCredits, MandatoryUpdateAfterPeersPureUpdateAndNoEndlessExchange) {
    e::Config c;
    c.recv_buf_count = 4;
    c.recv_buf_size = 200;
    for (int order = 0; order < 4; ++order) {
        Pair p(c, c);
        ASSERT_EQ(p.handshake(), e::Error::none);
        const Bytes chunk = pattern(150, 3);
        // Each side sends what its credit allows; nobody reads.
        for (int i = 0; i < 8; ++i) {
            p.a.write(chunk);
            p.b.write(chunk);
            p.run();
        }
        ASSERT_GT(p.b.readable(), 0u);
        ASSERT_GT(p.a.readable(), 0u);
        // One side reads a little (a real gain, then a pure update), the
        // other does not; then both close their send halves.
        Bytes buf(150);
        if (order & 1)
            p.a.read(buf);
        else
            p.b.read(buf);
        p.run();
        const auto before = p.qa.sent_log.size() + p.qb.sent_log.size();
        if (order & 2) {
            p.a.shutdown_write();
            p.b.shutdown_write();
        } else {
            p.b.shutdown_write();
            p.a.shutdown_write();
        }
        p.run(100000);
        EXPECT_TRUE(p.faults.empty());
        // Bounded: no endless exchange of credit updates.
        EXPECT_LT(p.qa.sent_log.size() + p.qb.sent_log.size() - before, 40u);
        // Both DisConns went out once the unsent data could go.
        Bytes sink(100000);
        for (int i = 0; i < 100 && !(p.a.eof() && p.b.eof()); ++i) {
            p.a.read(sink);
            p.b.read(sink);
            p.run(100000);
        }
        EXPECT_TRUE(p.a.eof()) << order << " " << p.a.describe();
        EXPECT_TRUE(p.b.eof()) << order << " " << p.b.describe();
    }
}

// The Bufs of a peer left with no credit by its own pure update is restored
// at once (10.5): here A spends its last credit on an update.
TEST(SdpEngineCredits, PeerWithNoCreditLeftIsUpdated) {
    FakeQp qp;
    e::Config cb;
    cb.recv_buf_count = 4;
    e::Connection b(e::Role::accepting, cb, qp);
    ASSERT_EQ(b.accept(hello_bytes(1, 1, 1, 1)), e::Error::none);
    ASSERT_EQ(qp.sent_log.size(), 1u);  // HelloAck advertising 4 buffers
    std::uint32_t mseq = 1;
    auto inject = [&](Bytes payload) {
        w::Message m;
        m.bufs = 8;
        m.mseq = mseq++;
        m.body = w::Data{std::move(payload)};
        b.on_recv(w::encode(m), false);
    };
    inject(pattern(100, 1));  // A: 3 credits left
    inject(pattern(100, 2));  // 2 left; B holds both messages unread
    EXPECT_EQ(qp.sent_log.size(), 1u);
    inject({});                         // A's pure update at 2 credits: 1 left
    EXPECT_EQ(qp.sent_log.size(), 2u);  // B must give credit (10.5)
    inject({});                         // A answers B's update: 1 left again
    EXPECT_EQ(qp.sent_log.size(), 3u);  // the MUST again: one reply
    inject({});                         // and again: the exchange is cut here (at 1, A can
    EXPECT_EQ(qp.sent_log.size(), 3u);  // still send credit-giving updates)
    inject({});                         // A spends its last credit: it holds none, B must answer
    EXPECT_EQ(qp.sent_log.size(), 4u);
    EXPECT_EQ(b.state(), e::State::established);
}
