// SPDX-License-Identifier: Apache-2.0
// Receive buffer resizing (10.6, 10.6.1, 10.6.2): ChRcvBuf and ChRcvBufAck
// between two engines on the fake QP pair (a connects, b accepts).
#include <gtest/gtest.h>

#include <cstdint>
#include <variant>
#include <vector>

#include "zcopy_pair.hpp"

namespace {

using namespace sdp::test;

// Sizes of the Data Messages with payload in a sent log.
std::vector<std::size_t> data_sizes(const std::vector<Packet>& log) {
    std::vector<std::size_t> out;
    for (const auto& p : log)
        if (!p.close && !p.write && w::mid_of(decoded(p).body) == w::Mid::data &&
            p.bytes.size() > w::kBsdhSize)
            out.push_back(p.bytes.size());
    return out;
}

e::Config sized(std::uint32_t size) {
    e::Config c;
    c.recv_buf_size = size;
    c.send_buf_size = 256 * 1024;  // our messages may grow with the peer's buffers
    c.grow_peer_buffers = false;   // only the requests the test makes
    c.max_recv_buf_size = 256 * 1024;
    return c;
}

// 10.6 / 10.6.2, a larger size: b posts buffers of the new size at once but
// acknowledges only once every buffer of the old size was consumed; a keeps
// the old size for its messages until the ChRcvBufAck, then uses the new.
TEST(SdpEngineResize, Section10_6IncreaseAcknowledgedAfterTheOldBuffers) {
    Pair p(sized(16384), sized(16384));
    p.qb.resizable = true;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.a.request_peer_recv_size(65536));
    EXPECT_TRUE(p.a.peer_resize_pending());
    EXPECT_FALSE(p.a.request_peer_recv_size(32768)) << "one unacknowledged at a time";
    p.run();
    EXPECT_EQ(p.b.local_recv_size(), 65536u) << "new buffers at once (10.6.2)";
    EXPECT_EQ(p.a.peer_recv_size(), 16384u) << "not before the ChRcvBufAck";
    EXPECT_TRUE(sent_with(p.qb.sent_log, w::Mid::ch_rcv_buf_ack).empty())
        << "old-size buffers are still posted";
    const Bytes data = pattern(2 << 20, 1);
    EXPECT_EQ(relay(p, p.a, p.b, data), data);
    const auto acks = sent_with(p.qb.sent_log, w::Mid::ch_rcv_buf_ack);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(std::get<w::ChRcvBufAck>(decoded(acks[0]).body).act_sz, 65536u);
    EXPECT_FALSE(p.a.peer_resize_pending());
    EXPECT_EQ(p.a.peer_recv_size(), 65536u);
    std::size_t largest = 0;
    for (std::size_t n : data_sizes(p.qa.sent_log))
        largest = std::max(largest, n);
    EXPECT_GT(largest, 16384u) << "larger messages after the ack";
    EXPECT_LE(largest, 65536u);
    EXPECT_EQ(p.b.stats().recv_resizes, 1u);
    EXPECT_TRUE(p.faults.empty()) << (p.faults.empty() ? "" : p.faults.front());
}

// 10.6, a smaller size: the asker uses it at once; the peer may (and does)
// acknowledge at once.
TEST(SdpEngineResize, Section10_6DecreaseAtOnce) {
    Pair p(sized(16384), sized(16384));
    p.qb.resizable = true;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.a.request_peer_recv_size(4096));
    EXPECT_EQ(p.a.peer_recv_size(), 4096u) << "at once";
    const Bytes data = pattern(300000, 2);
    EXPECT_EQ(relay(p, p.a, p.b, data), data);
    EXPECT_EQ(p.b.local_recv_size(), 4096u);
    const auto acks = sent_with(p.qb.sent_log, w::Mid::ch_rcv_buf_ack);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(std::get<w::ChRcvBufAck>(decoded(acks[0]).body).act_sz, 4096u);
    for (std::size_t n : data_sizes(p.qa.sent_log))
        EXPECT_LE(n, 4096u);
    EXPECT_TRUE(p.faults.empty()) << (p.faults.empty() ? "" : p.faults.front());
}

// 10.6: a peer that cannot resize answers with the original size; the asker
// keeps that size and never asks for an increase again (a decrease it may).
TEST(SdpEngineResize, Section10_6UnableAnswersTheOriginalSize) {
    Pair p(sized(16384), sized(16384));
    ASSERT_EQ(p.handshake(), e::Error::none);  // qb cannot resize
    ASSERT_TRUE(p.a.request_peer_recv_size(65536));
    p.run();
    const auto acks = sent_with(p.qb.sent_log, w::Mid::ch_rcv_buf_ack);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(std::get<w::ChRcvBufAck>(decoded(acks[0]).body).act_sz, 16384u);
    EXPECT_EQ(p.a.peer_recv_size(), 16384u);
    EXPECT_EQ(p.b.local_recv_size(), 16384u);
    EXPECT_FALSE(p.a.request_peer_recv_size(32768)) << "no further increase";
    EXPECT_TRUE(p.a.request_peer_recv_size(8192)) << "a decrease is another matter";
}

// 10.6: the granted size is bounded: not beyond max_recv_buf_size for an
// increase, not below the request (nor the minimum of 10 rule 4) for a
// decrease.
TEST(SdpEngineResize, Section10_6GrantedSizeBounds) {
    {
        auto cb = sized(16384);
        cb.max_recv_buf_size = 40000;
        Pair p(sized(16384), cb);
        p.qb.resizable = true;
        ASSERT_EQ(p.handshake(), e::Error::none);
        ASSERT_TRUE(p.a.request_peer_recv_size(1 << 20));
        const Bytes data = pattern(1 << 20, 3);
        EXPECT_EQ(relay(p, p.a, p.b, data), data);
        EXPECT_EQ(p.b.local_recv_size(), 40000u);
        EXPECT_EQ(p.a.peer_recv_size(), 40000u);
    }
    {
        Pair p(sized(16384), sized(16384));
        p.qb.resizable = true;
        ASSERT_EQ(p.handshake(), e::Error::none);
        EXPECT_FALSE(p.a.request_peer_recv_size(36)) << "below the minimum (10 rule 4)";
        EXPECT_FALSE(p.a.request_peer_recv_size(16384)) << "the current size";
        ASSERT_TRUE(p.a.request_peer_recv_size(37));
        p.run();
        EXPECT_EQ(p.b.local_recv_size(), 37u);
        EXPECT_EQ(p.a.peer_recv_size(), 37u);
        const Bytes data = pattern(5000, 4);
        EXPECT_EQ(relay(p, p.a, p.b, data), data);
    }
}

// 10.6.1: both ask at once. The Accepting Peer (b) disregards a's; a
// answers b's and takes its own as disregarded.
TEST(SdpEngineResize, Section10_6_1ConcurrentRequests) {
    Pair p(sized(16384), sized(16384));
    p.qa.resizable = p.qb.resizable = true;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.a.request_peer_recv_size(8192));
    ASSERT_TRUE(p.b.request_peer_recv_size(4096));
    p.run();
    EXPECT_EQ(p.b.stats().ch_rcv_buf_disregarded, 1u);
    EXPECT_TRUE(sent_with(p.qb.sent_log, w::Mid::ch_rcv_buf_ack).empty());
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::ch_rcv_buf_ack).size(), 1u);
    EXPECT_EQ(p.a.local_recv_size(), 4096u);
    EXPECT_EQ(p.b.peer_recv_size(), 4096u);
    EXPECT_FALSE(p.a.peer_resize_pending());
    EXPECT_EQ(p.a.peer_recv_size(), 16384u) << "b's buffers did not change";
    EXPECT_EQ(p.b.local_recv_size(), 16384u);
    // a may ask again now.
    ASSERT_TRUE(p.a.request_peer_recv_size(8192));
    p.run();
    EXPECT_EQ(p.b.local_recv_size(), 8192u);
    const Bytes data = pattern(100000, 5);
    EXPECT_EQ(relay(p, p.a, p.b, data), data);
    EXPECT_TRUE(p.faults.empty()) << (p.faults.empty() ? "" : p.faults.front());
}

// 10.6.1, a request never sent: x's ChRcvBuf waits for credit when the
// peer's comes. Not sent is not concurrent: x answers the peer's, in either
// role, and withdraws its own (nothing withdrawn goes out; x's decrease is
// undone, the peer's buffers did not change). The peer is scripted: its
// Bufs hold x's credit at 0.
TEST(SdpEngineResize, Section10_6_1QueuedRequestWithdrawn) {
    for (const bool accepting : {false, true}) {
        SCOPED_TRACE(accepting ? "the Accepting Peer's" : "the Connecting Peer's");
        Pair p(sized(16384), sized(16384));
        p.qa.resizable = p.qb.resizable = true;
        ASSERT_EQ(p.handshake(), e::Error::none);
        e::Connection& x = accepting ? p.b : p.a;
        const std::vector<Packet>& log = accepting ? p.qb.sent_log : p.qa.sent_log;
        auto to_x = [&](w::Body body, std::uint16_t bufs) {
            x.on_recv(w::encode(next_message_to(x, std::move(body), bufs)), false);
        };
        to_x(w::Data{}, 0);
        ASSERT_EQ(x.send_credits(), 0u);
        const std::size_t sent_before = log.size();
        ASSERT_TRUE(x.request_peer_recv_size(4096));
        EXPECT_EQ(x.peer_recv_size(), 4096u) << "smaller at once";
        to_x(w::ChRcvBuf{8192}, 0);
        EXPECT_EQ(log.size(), sent_before) << "no credit yet";
        EXPECT_FALSE(x.peer_resize_pending()) << "withdrawn";
        EXPECT_EQ(x.peer_recv_size(), 16384u) << "the peer's buffers did not change";
        EXPECT_EQ(x.local_recv_size(), 8192u);
        EXPECT_EQ(x.stats().ch_rcv_buf_disregarded, 0u);
        to_x(w::Data{}, 4);  // credit: x answers
        EXPECT_TRUE(sent_with(log, w::Mid::ch_rcv_buf).empty()) << "nothing withdrawn goes out";
        const auto acks = sent_with(log, w::Mid::ch_rcv_buf_ack);
        ASSERT_EQ(acks.size(), 1u);
        EXPECT_EQ(std::get<w::ChRcvBufAck>(decoded(acks[0]).body).act_sz, 8192u);
        EXPECT_EQ(x.stats().ch_rcv_buf_sent, 0u);
        // x may ask again, and this one goes.
        ASSERT_TRUE(x.request_peer_recv_size(4096));
        EXPECT_EQ(sent_with(log, w::Mid::ch_rcv_buf).size(), 1u);
        EXPECT_EQ(x.stats().ch_rcv_buf_sent, 1u);
        EXPECT_EQ(x.error(), e::Error::none);
    }
}

// By default (max_recv_buf_size 0) buffers never grow beyond their
// configured size: a request for more gets the unchanged size (10.6), one
// for less is granted.
TEST(SdpEngineResize, Section10_6DefaultNeverGrows) {
    e::Config c;
    Pair p(c, c);
    p.qb.resizable = true;
    ASSERT_EQ(p.handshake(), e::Error::none);
    const auto size = p.b.local_recv_size();
    ASSERT_TRUE(p.a.request_peer_recv_size(size * 4));
    p.run();
    EXPECT_EQ(p.b.local_recv_size(), size);
    EXPECT_EQ(p.a.peer_recv_size(), size);
    EXPECT_FALSE(p.a.peer_resize_pending());
    ASSERT_TRUE(p.a.request_peer_recv_size(size / 2));
    p.run();
    EXPECT_EQ(p.b.local_recv_size(), size / 2);
}

// 10.6.1 with two increases: b's ChRcvBufAck waits for b's old buffers, and
// b may not ask for its own meanwhile (a would take it as concurrent and
// disregard it); once b has acknowledged, its request goes and is granted.
TEST(SdpEngineResize, Section10_6_1NoRequestWhileOurAckIsDue) {
    Pair p(sized(16384), sized(16384));
    p.qa.resizable = p.qb.resizable = true;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.a.request_peer_recv_size(65536));
    p.run();
    EXPECT_FALSE(p.b.request_peer_recv_size(65536)) << "our ChRcvBufAck is due";
    const Bytes data = pattern(1 << 20, 8);
    EXPECT_EQ(relay(p, p.a, p.b, data), data);
    EXPECT_EQ(p.a.peer_recv_size(), 65536u) << "acknowledged after the old buffers";
    ASSERT_TRUE(p.b.request_peer_recv_size(65536));
    // a's old buffers are consumed by b's data.
    const Bytes back = pattern(1 << 20, 9);
    EXPECT_EQ(relay(p, p.b, p.a, back), back);
    EXPECT_EQ(p.b.peer_recv_size(), 65536u);
    EXPECT_EQ(p.a.stats().ch_rcv_buf_disregarded + p.b.stats().ch_rcv_buf_disregarded, 0u);
    EXPECT_TRUE(p.faults.empty());
}

// Config::grow_peer_buffers: a Data Source with a backlog and larger send
// buffers than the peer's receive buffers asks once for its size.
TEST(SdpEngineResize, Section10_6DataSourceAsksForLargerBuffersUnderLoad) {
    auto ca = sized(16384);
    ca.grow_peer_buffers = true;
    ca.send_buf_size = 65536;
    Pair p(ca, sized(16384));
    p.qb.resizable = true;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_EQ(p.a.write(pattern(1000, 6)), 1000u);
    p.run();
    EXPECT_EQ(p.a.stats().ch_rcv_buf_sent, 0u) << "no backlog, no request";
    EXPECT_FALSE(p.a.peer_resize_pending());
    Bytes got;
    drain(p.b, got);
    const Bytes data = pattern(1 << 20, 7);
    got = relay(p, p.a, p.b, data);
    EXPECT_EQ(got, data);
    EXPECT_EQ(p.a.stats().ch_rcv_buf_sent, 1u);
    EXPECT_EQ(p.a.peer_recv_size(), 65536u);
    EXPECT_EQ(p.b.local_recv_size(), 65536u);
    EXPECT_TRUE(p.faults.empty());
}

// Broken peers: a second ChRcvBuf before we acknowledged the first (10.6),
// an acknowledgement outside what was asked (10.6), and a message larger
// than the old-size buffer it lands in while an increase is pending (10.6:
// the new size only after our ChRcvBufAck). An unasked ChRcvBufAck is
// counted and ignored.
TEST(SdpEngineResize, Section10_6Violations) {
    {
        Pair p(sized(16384), sized(16384));
        p.qb.resizable = true;
        ASSERT_EQ(p.handshake(), e::Error::none);
        p.inject(w::ChRcvBuf{65536});
        ASSERT_EQ(p.b.state(), e::State::established);
        p.inject(w::ChRcvBuf{131072});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        Pair p(sized(16384), sized(16384));
        p.qb.resizable = true;
        ASSERT_EQ(p.handshake(), e::Error::none);
        p.inject(w::ChRcvBuf{65536});
        ASSERT_EQ(p.b.local_recv_size(), 65536u);
        p.inject(w::Data{Bytes(20000, 0x5A)});  // into an old 16 KiB buffer
        EXPECT_EQ(p.b.state(), e::State::reset);
        EXPECT_EQ(p.b.error(), e::Error::oversize);
    }
    {
        Pair p(sized(16384), sized(16384));
        ASSERT_EQ(p.handshake(), e::Error::none);
        p.inject(w::ChRcvBufAck{4096});
        EXPECT_EQ(p.b.state(), e::State::established);
        EXPECT_EQ(p.b.stats().ignored, 1u);
    }
    {
        Pair p(sized(16384), sized(16384));
        ASSERT_EQ(p.handshake(), e::Error::none);
        ASSERT_TRUE(p.b.request_peer_recv_size(65536));
        p.inject(w::ChRcvBufAck{8192});  // smaller than before an increase
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        Pair p(sized(16384), sized(16384));
        ASSERT_EQ(p.handshake(), e::Error::none);
        ASSERT_TRUE(p.b.request_peer_recv_size(4096));
        p.inject(w::ChRcvBufAck{2048});  // below the size asked
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
}

}  // namespace
