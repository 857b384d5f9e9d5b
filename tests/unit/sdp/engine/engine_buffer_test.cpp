// SPDX-License-Identifier: Apache-2.0
// Receive completions delivered as whole private buffers
// (Connection::on_recv_buffer, the soft provider's path) against span
// delivery (on_recv): same bytes, same messages, same checks.
#include <gtest/gtest.h>

#include <random>
#include <variant>
#include <vector>

#include "fake_qp.hpp"

namespace e = sdp::engine;
namespace w = sdp::wire;
using namespace sdp::test;
using Bytes = std::vector<std::uint8_t>;

namespace {

struct Outcome {
    Bytes a_got, b_got;
    std::vector<Bytes> a_sent, b_sent;
    std::optional<std::uint8_t> oob;
    e::State a_state{}, b_state{};
    std::uint64_t b_bytes_received = 0;
    std::vector<std::string> faults;
};

// Both directions, random write and read sizes, an OOB byte, half-closes.
Outcome scenario(Pair::Delivery d, std::uint32_t seed) {
    e::Config c;
    c.recv_buf_size = 4096;
    c.recv_buf_count = 6;
    c.send_queue_limit = 32 * 1024;
    Pair p(c, c);
    p.delivery = d;
    EXPECT_EQ(p.handshake(), e::Error::none);
    std::mt19937 rng(seed);
    const Bytes ab = pattern(200000, seed), ba = pattern(70001, seed + 1);
    std::size_t wa = 0, wb = 0;
    Outcome o;
    Bytes buf(9000);
    bool oob_sent = false, shut_a = false, shut_b = false;
    for (int round = 0; round < 100000; ++round) {
        if (wa < ab.size())
            wa += p.a.write(
                std::span(ab).subspan(wa, std::min<std::size_t>(ab.size() - wa, rng() % 9000 + 1)));
        if (!oob_sent && wa > 50000) {
            oob_sent = p.a.write_oob('!');
        }
        if (wb < ba.size())
            wb += p.b.write(
                std::span(ba).subspan(wb, std::min<std::size_t>(ba.size() - wb, rng() % 3000 + 1)));
        if (wa == ab.size() && oob_sent && !shut_a) {
            p.a.shutdown_write();
            shut_a = true;
        }
        if (wb == ba.size() && !shut_b) {
            p.b.shutdown_write();
            shut_b = true;
        }
        for (int i = 0; i < 16 && p.step(); ++i) {
        }
        std::size_t n = p.b.read(std::span(buf).first(rng() % buf.size() + 1));
        o.b_got.insert(o.b_got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        if (auto x = p.b.read_oob())
            o.oob = x;
        n = p.a.read(std::span(buf).first(rng() % buf.size() + 1));
        o.a_got.insert(o.a_got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        if (p.a.eof() && p.b.eof())
            break;
    }
    p.run();
    for (const auto& pk : p.qa.sent_log)
        o.a_sent.push_back(pk.bytes);
    for (const auto& pk : p.qb.sent_log)
        o.b_sent.push_back(pk.bytes);
    o.a_state = p.a.state();
    o.b_state = p.b.state();
    o.b_bytes_received = p.b.stats().bytes_received;
    o.faults = p.faults;
    EXPECT_EQ(o.b_got, ab);
    EXPECT_EQ(o.a_got, ba);
    return o;
}

}  // namespace

TEST(SdpEngineBuffers, SameAsSpanDelivery) {
    for (std::uint32_t seed : {1u, 2u, 3u}) {
        const Outcome s = scenario(Pair::Delivery::span, seed);
        const Outcome b = scenario(Pair::Delivery::buffer, seed);
        const Outcome m = scenario(Pair::Delivery::alternate, seed);
        EXPECT_TRUE(s.faults.empty());
        EXPECT_TRUE(b.faults.empty());
        EXPECT_TRUE(m.faults.empty());
        EXPECT_EQ(s.oob, std::optional<std::uint8_t>('!'));
        EXPECT_EQ(b.oob, s.oob);
        EXPECT_EQ(m.oob, s.oob);
        // Same wire messages in both directions (credit updates included).
        EXPECT_EQ(b.a_sent, s.a_sent);
        EXPECT_EQ(b.b_sent, s.b_sent);
        EXPECT_EQ(m.a_sent, s.a_sent);
        EXPECT_EQ(b.a_state, e::State::closed);
        EXPECT_EQ(b.b_state, e::State::closed);
        EXPECT_EQ(b.b_bytes_received, s.b_bytes_received);
    }
}

TEST(SdpEngineBuffers, ViolationsInBufferPath) {
    auto run = [](std::vector<w::Message> msgs, e::Error want) {
        Pair p;
        p.delivery = Pair::Delivery::buffer;
        ASSERT_EQ(p.handshake(), e::Error::none);
        for (const auto& m : msgs)
            p.inject_to_b(w::encode(m));
        p.run();
        EXPECT_EQ(p.b.error(), want);
        EXPECT_EQ(p.b.state(), e::State::reset);
    };
    w::Message d;
    d.bufs = 16;
    d.mseq = 1;
    d.body = w::Data{{1, 2, 3}};
    w::Message dc = d;
    dc.body = w::DisConn{};
    w::Message d2 = d;
    d2.mseq = 2;
    run({dc, d2}, e::Error::unexpected_message);  // payload after DisConn
    w::Message skip = d;
    skip.mseq = 5;
    run({skip}, e::Error::mseq_mismatch);
    w::Message ack = d;
    ack.mseq_ack = 1000;
    run({ack}, e::Error::bad_mseq_ack);
    // BSDH Len disagreeing with the received size.
    Pair p;
    p.delivery = Pair::Delivery::buffer;
    ASSERT_EQ(p.handshake(), e::Error::none);
    Bytes bad = w::encode(d);
    bad[7] ^= 1;
    p.inject_to_b(bad);
    p.run();
    EXPECT_EQ(p.b.error(), e::Error::bad_message);
}
