// SPDX-License-Identifier: Apache-2.0
// Socket duplication (13.1.1, 13.1.2, 6.5): two engines back to back on the
// fake QP pair. The Remote Peer answers a SuspComm, the LLP closes, both
// restart() on a "new LLP" (fresh fake QPs) and the streams go on.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "zcopy_pair.hpp"

using namespace sdp::test;

namespace {

w::Mid mid_of_packet(const Packet& p) {
    auto r = w::decode(p.bytes);
    return std::holds_alternative<w::Message>(r) ? w::mid_of(std::get<w::Message>(r).body)
                                                 : w::Mid::data;
}

std::vector<w::Mid> mids(const std::deque<Packet>& q) {
    std::vector<w::Mid> out;
    for (const auto& p : q)
        if (!p.close)
            out.push_back(mid_of_packet(p));
    return out;
}

// A message as b's engine would send it next (b's engine does not know).
Bytes from_b(const Pair& p, w::Body body, std::uint32_t ahead = 0) {
    w::Message m;
    m.bufs = static_cast<std::uint16_t>(p.b.local_bufs());
    m.mseq = p.b.next_mseq() + ahead;
    m.mseq_ack = p.b.last_received_mseq();
    m.body = std::move(body);
    return w::encode(m);
}

// Hands one message straight to a (no RDMA Read served meanwhile).
void to_a(Pair& p, const Bytes& bytes) {
    ASSERT_GT(p.qa.posted, 0u);
    --p.qa.posted;
    p.a.on_recv(bytes, false);
}

// Delivers what b queued for a, one by one, without serving reads.
void flush_b_to_a(Pair& p) {
    while (!p.qb.outbound.empty()) {
        auto pkt = std::move(p.qb.outbound.front());
        p.qb.outbound.pop_front();
        if (pkt.close)
            continue;
        to_a(p, pkt.bytes);
    }
}

// A new LLP connection: fresh queue pairs on both ends.
void new_llp(Pair& p) {
    for (FakeQp* q : {&p.qa, &p.qb}) {
        q->outbound.clear();
        q->posted = 0;
        q->down = false;
        q->abortive = false;
        q->reads.clear();
    }
    p.llp_down = false;
}

// Steps 4-8 on a new LLP: a (Remote Peer) connects, b accepts.
void resume(Pair& p) {
    new_llp(p);
    ASSERT_TRUE(p.a.restart(e::Role::connecting));
    ASSERT_TRUE(p.b.restart(e::Role::accepting));
    ASSERT_EQ(p.b.accept(p.a.connect()), e::Error::none);
}

}  // namespace

// 13.1.1 steps 2-8 with data in flight both ways and unread data at the
// Remote Peer: SuspComm, SuspCommAck, LLP closed after it, a new connection
// from the Remote Peer (Hello/HelloAck afresh), and every byte once, in order.
TEST(SdpEngineDuplication, Section13_1_1_RemotePeerResumesWithoutLossOrDuplication) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    const Bytes to_b = pattern(600 * 1024, 1);
    const Bytes to_a_bytes = pattern(500 * 1024, 2);
    std::size_t oa = 0, ob = 0;
    feed(p.a, to_b, oa);
    feed(p.b, to_a_bytes, ob);
    for (int i = 0; i < 6; ++i)
        p.step();
    Bytes got_a, got_b;
    drain(p.b, got_b);  // b reads some; a leaves what it got unread
    ASSERT_GT(p.a.readable(), 0u);
    const std::size_t unread_before = p.a.readable();

    // The Local Peer (b, Accepting) suspends; a answers as the Remote Peer.
    ASSERT_TRUE(p.b.suspend(7777));
    EXPECT_EQ(p.b.duplication(), e::Dup::local_sent);
    EXPECT_FALSE(p.b.suspend(7778)) << "one suspension at a time";
    p.run();
    EXPECT_TRUE(p.llp_down) << "the Remote Peer closed the LLP after its SuspCommAck";
    EXPECT_EQ(p.a.duplication(), e::Dup::reconnecting);
    EXPECT_EQ(p.a.resume_port(), 7777);
    EXPECT_EQ(p.b.duplication(), e::Dup::local_done);
    EXPECT_EQ(p.a.state(), e::State::established) << p.a.describe();
    EXPECT_GE(p.a.readable(), unread_before) << "unread bytes stay";
    EXPECT_EQ(p.a.stats().susp_comm_received, 1u);
    EXPECT_EQ(p.a.stats().susp_comm_ack_sent, 1u);
    EXPECT_EQ(p.b.stats().susp_comm_sent, 1u);
    EXPECT_EQ(p.b.stats().susp_comm_ack_received, 1u);
    // Step 3: SuspCommAck is the Remote Peer's last message.
    const auto& last = p.qa.sent_log.back();
    EXPECT_EQ(mid_of_packet(last), w::Mid::susp_comm_ack);
    // Writes while suspended are queued for the new connection.
    feed(p.a, to_b, oa);

    // Step 4: the Remote Peer connects; the Local side accepts (steps 6-7).
    new_llp(p);
    ASSERT_TRUE(p.a.restart(e::Role::connecting));
    ASSERT_TRUE(p.b.restart(e::Role::accepting));
    EXPECT_EQ(p.a.state(), e::State::idle);
    auto hello = p.a.connect();
    ASSERT_FALSE(hello.empty());
    ASSERT_EQ(p.b.accept(hello), e::Error::none);
    for (int round = 0; round < 100000; ++round) {
        feed(p.a, to_b, oa);
        feed(p.b, to_a_bytes, ob);
        const bool moved = p.step();
        drain(p.a, got_a);
        drain(p.b, got_b);
        if (!moved && oa == to_b.size() && ob == to_a_bytes.size() && p.a.send_queued() == 0 &&
            p.b.send_queued() == 0 && p.qa.outbound.empty() && p.qb.outbound.empty())
            break;
    }
    EXPECT_EQ(got_a, to_a_bytes);
    EXPECT_EQ(got_b, to_b);
    EXPECT_EQ(p.a.stats().resumes, 1u);
    EXPECT_EQ(p.b.stats().resumes, 1u);
    EXPECT_EQ(p.a.next_mseq() > 1, true) << "sequence numbers started afresh and went on";
    EXPECT_TRUE(p.faults.empty());
}

// 13.1.1 step 3 with the Remote Peer's credit used up by its messages in
// flight (the Local Peer sends no update after its SuspComm): the
// SuspCommAck still goes (docs/protocol-notes.md, 13.1.1).
TEST(SdpEngineDuplication, Section13_1_1_SuspCommAckWithoutCredit) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    const Bytes data = pattern(200 * 1024, 5);
    ASSERT_GT(p.a.write(data), 0u);  // a's Data Messages in flight, not delivered
    const std::uint32_t in_flight = (p.a.next_mseq() - 1) - p.b.last_received_mseq();
    ASSERT_GT(in_flight, 0u);
    const std::size_t queued = p.qa.outbound.size();
    w::Message m;
    m.bufs = static_cast<std::uint16_t>(in_flight);  // every one used by a's messages
    m.mseq = p.b.next_mseq();
    m.mseq_ack = p.b.last_received_mseq();
    m.body = w::SuspComm{4000};
    to_a(p, w::encode(m));
    EXPECT_EQ(p.a.send_credits(), 0u);
    EXPECT_EQ(p.a.duplication(), e::Dup::remote_acked) << p.a.describe();
    ASSERT_EQ(p.qa.outbound.size(), queued + 2);
    EXPECT_EQ(mid_of_packet(p.qa.outbound[queued]), w::Mid::susp_comm_ack);
    EXPECT_TRUE(p.qa.outbound.back().close);
}

// 13.1.1 step 2: the Local Peer posts one receive buffer more than its
// SuspComm advertised, for the SuspCommAck; the whole exchange then runs
// with the Remote Peer's data in flight and nothing read.
TEST(SdpEngineDuplication, Section13_1_1_LocalPeerKeepsABufferForTheAck) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    const Bytes data = pattern(1 << 20, 6);
    std::size_t off = 0;
    feed(p.a, data, off);
    const std::uint64_t posted = p.qb.posted;
    ASSERT_TRUE(p.b.suspend(4000));
    EXPECT_EQ(p.qb.posted, posted + 1);
    EXPECT_EQ(p.b.local_bufs(), posted + 1);
    p.run();  // b reads nothing
    EXPECT_EQ(p.a.duplication(), e::Dup::reconnecting) << p.a.describe();
    EXPECT_EQ(p.b.duplication(), e::Dup::local_done) << p.b.describe();
    EXPECT_TRUE(p.faults.empty());
    resume(p);
    EXPECT_EQ(relay(p, p.a, p.b, data, off), data);
}

// 13.1.1 step 3: the SuspCommAck waits for the In-Process RDMA Read; its
// RdmaRdCompl goes first, the rest of the advertisement is cancelled (13)
// and comes as Data on the new connection.
TEST(SdpEngineDuplication, Section13_1_1_WaitsForInProcessRdmaRead) {
    ZPair p;
    const Bytes data = pattern(200000, 3);
    ASSERT_TRUE(p.b.write_zcopy(data));
    flush_b_to_a(p);  // the SrcAvail
    Bytes got;
    drain(p.a, got);  // its inline bytes
    ASSERT_GT(p.a.zcopy_readable(), 0u);
    Bytes zbuf(50000);
    ASSERT_TRUE(p.a.read_zcopy(zbuf));
    ASSERT_EQ(p.qa.reads.size(), 1u);
    // A SuspComm arrives while the read runs (as from a peer that does not
    // count its advertisement as In-Process).
    to_a(p, from_b(p, w::SuspComm{4242}));
    EXPECT_EQ(p.a.duplication(), e::Dup::remote_waiting);
    EXPECT_TRUE(p.qa.outbound.empty()) << "no SuspCommAck before the read completed";
    EXPECT_EQ(p.a.zcopy_readable(), 0u);
    ASSERT_TRUE(p.serve_read(p.qa, p.qb, p.a));
    EXPECT_EQ(mids(p.qa.outbound),
              (std::vector<w::Mid>{w::Mid::rdma_rd_compl, w::Mid::susp_comm_ack}));
    EXPECT_TRUE(p.qa.outbound.back().close) << "LLP closed after the SuspCommAck";
    EXPECT_EQ(p.a.take_zcopy_read(), std::optional<std::size_t>(50000));
    EXPECT_EQ(p.a.duplication(), e::Dup::remote_acked);
}

// 13.1.1 step 2 (Local Peer): our advertised SrcAvail is In-Process: it is
// cancelled (9.5.4) and the SuspComm waits for the answer; the rest of the
// buffer goes as Data on the new connection.
TEST(SdpEngineDuplication, Section13_1_1_LocalPeerCancelsItsSrcAvailFirst) {
    ZPair p;
    const Bytes data = pattern(200000, 4);
    ASSERT_TRUE(p.b.write_zcopy(data));
    p.run();
    ASSERT_TRUE(p.b.suspend(5555));
    EXPECT_EQ(p.b.duplication(), e::Dup::local_waiting);
    p.run();
    EXPECT_EQ(p.b.duplication(), e::Dup::local_done);
    EXPECT_FALSE(p.b.zcopy_write_pending()) << "the buffer is back: its rest is queued";
    EXPECT_EQ(p.a.duplication(), e::Dup::reconnecting);
    resume(p);
    Bytes got;
    for (int i = 0; i < 100000 && got.size() < data.size(); ++i) {
        p.run();
        drain(p.a, got);
    }
    EXPECT_EQ(got, data);
    EXPECT_TRUE(p.faults.empty());
}

// 13.1.2: both send SuspComm. The Accepting Peer (b) disregards a's; the
// Connecting Peer (a) answers b's and sends its own again once the new
// connection is up, which b, now the Remote Peer, answers.
TEST(SdpEngineDuplication, Section13_1_2_ConflictConnectingAnswersAcceptingDisregards) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.a.suspend(1111));
    ASSERT_TRUE(p.b.suspend(2222));
    p.run();
    EXPECT_EQ(p.b.stats().susp_comm_disregarded, 1u);
    EXPECT_EQ(p.b.duplication(), e::Dup::local_done);
    EXPECT_EQ(p.a.duplication(), e::Dup::reconnecting);
    EXPECT_EQ(p.a.resume_port(), 2222);
    EXPECT_EQ(p.a.stats().susp_comm_ack_sent, 1u);
    EXPECT_EQ(p.b.stats().susp_comm_ack_sent, 0u);

    resume(p);
    p.run();
    // a's SuspComm again: b (Accepting now) is the Remote Peer this time.
    EXPECT_EQ(p.a.stats().susp_comm_sent, 2u);
    EXPECT_EQ(p.a.duplication(), e::Dup::local_done);
    EXPECT_EQ(p.b.duplication(), e::Dup::reconnecting);
    EXPECT_EQ(p.b.resume_port(), 1111);
    EXPECT_TRUE(p.faults.empty());
}

// 6.5.1.1 / 13.1.1: a SuspComm naming port 0 resets the connection.
TEST(SdpEngineDuplication, Section6_5_1_PortZeroResets) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    EXPECT_FALSE(p.b.suspend(0));
    to_a(p, from_b(p, w::SuspComm{0}));
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::bad_susp_comm);
}

// 13.1.1 step 2: a second SuspComm (the peer is quiet after its first).
TEST(SdpEngineDuplication, Section13_1_1_SecondSuspCommResets) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    to_a(p, from_b(p, w::SuspComm{3000}));
    EXPECT_EQ(p.a.duplication(), e::Dup::remote_acked);
    to_a(p, from_b(p, w::SuspComm{3001}, 1));
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::suspended_message);
    EXPECT_TRUE(p.qa.abortive);
}

// 13.1.1 steps 2-3: data from the peer after its SuspComm (here after our
// SuspCommAck) resets the connection.
TEST(SdpEngineDuplication, Section13_1_1_DataAfterSuspCommAckResets) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    to_a(p, from_b(p, w::SuspComm{3000}));
    ASSERT_EQ(p.a.duplication(), e::Dup::remote_acked);
    w::Message m;
    m.bufs = static_cast<std::uint16_t>(p.b.local_bufs());
    m.mseq = p.b.next_mseq() + 1;
    m.mseq_ack = p.b.last_received_mseq();
    m.body = w::Data{{42}};
    to_a(p, w::encode(m));
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::suspended_message);
}

// 6.5.2: a SuspCommAck nobody asked for.
TEST(SdpEngineDuplication, Section6_5_2_UnaskedSuspCommAckResets) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    to_a(p, from_b(p, w::SuspCommAck{}));
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::bad_susp_comm);
}

// 13.1.1 step 4: the driver could not set up the new connection.
TEST(SdpEngineDuplication, Section13_1_1_FailedReconnectResets) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.b.suspend(6000));
    p.run();
    ASSERT_EQ(p.a.duplication(), e::Dup::reconnecting);
    p.a.resume_failed();
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::resume_failed);
    EXPECT_FALSE(p.a.restart(e::Role::connecting));
}

// 13.1: a driver that cannot reconnect resets with a reason.
TEST(SdpEngineDuplication, Section13_1_DriverWithoutReconnectResets) {
    e::Config no;
    no.duplication = false;
    Pair p(no, {});
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.b.suspend(6000));
    p.run();
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::duplication_unsupported);
}

// 13.1.1: a socket whose teardown began is not duplicated.
TEST(SdpEngineDuplication, Section13_1_1_SuspCommAfterDisConnResets) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.b.shutdown_write();
    p.run();
    ASSERT_TRUE(p.a.disconn_received());
    EXPECT_FALSE(p.b.suspend(6000));
    to_a(p, from_b(p, w::SuspComm{6000}));
    EXPECT_EQ(p.a.state(), e::State::reset);
    EXPECT_EQ(p.a.error(), e::Error::bad_susp_comm);
}

// 13 with Write Zcopy (9.3): both sides lent a buffer (SinkAvail) that the
// other holds unused. The transition cancels both: the Local Peer drops the
// peer's at suspend(), the Remote Peer drops it and gives its own back when
// the SuspComm arrives, the Local Peer gives its own back with the
// SuspCommAck. Nothing is written into them, their regions are gone, and
// the streams go on afresh on the new connection.
TEST(SdpEngineDuplication, Section13_1_1_LentBuffersEndWithTheTransition) {
    ZPair p;
    p.pipeline();
    p.pipeline(false);
    Bytes sink_a(100000), sink_b(100000);
    ASSERT_TRUE(p.a.post_sink(sink_a));
    ASSERT_TRUE(p.b.post_sink(sink_b));
    p.run();
    ASSERT_EQ(p.a.stats().sink_avail_received, 1u);
    ASSERT_EQ(p.b.stats().sink_avail_received, 1u);
    ASSERT_TRUE(p.b.suspend(7777));
    p.run();
    EXPECT_EQ(p.a.duplication(), e::Dup::reconnecting);
    EXPECT_EQ(p.b.duplication(), e::Dup::local_done);
    EXPECT_FALSE(p.a.sink_pending());
    EXPECT_FALSE(p.b.sink_pending());
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.qb.regions.empty());
    EXPECT_EQ(p.qa.writes + p.qb.writes, 0u);
    ASSERT_NO_FATAL_FAILURE(resume(p));
    const Bytes data = pattern(100000, 9);
    EXPECT_EQ(relay(p, p.b, p.a, data), data);
    EXPECT_TRUE(p.faults.empty());
}
