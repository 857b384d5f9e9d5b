// SPDX-License-Identifier: Apache-2.0
// Write Zcopy (9.3) with one advertisement per direction, in Pipelined Mode
// (11.3, Figure 25; ZPair::pipeline() gets there the way the engine does in
// use): two engines back to back on the fake QP pair with RDMA Read and
// Write emulated (regions, STags, remote invalidate, tagged placement
// checks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "zcopy_pair.hpp"

using namespace sdp::test;

namespace {

// b reads `expected` by read() (it came as Data), then lends `sink` again:
// NonDiscards and PotentialNonDiscards still agree (9.5.1), so a finds the
// new SinkAvail current.
void expect_bytes_then_current_sink(ZPair& p, Bytes& sink, const Bytes& expected) {
    Bytes got;
    p.read_b(got);
    EXPECT_EQ(got, expected);
    const auto stale = p.a.stats().sink_avail_stale;
    const auto current = p.a.stats().sink_avail_received;
    p.lend_b(sink);
    EXPECT_EQ(p.a.stats().sink_avail_stale, stale);
    EXPECT_EQ(p.a.stats().sink_avail_received, current + 1);
}

// b write()s `answer` into the `reply` buffer a lent (Write Zcopy, the
// reply of a Transaction, 9.4): a's advertisement ends with all of it
// RDMA-Written there.
void expect_answer_written(ZPair& p, const Bytes& answer, const Bytes& reply) {
    ASSERT_EQ(p.b.write(answer), answer.size());
    p.run();
    ASSERT_FALSE(p.a.sink_pending());
    ASSERT_EQ(p.a.take_zcopy_read(), std::optional<std::size_t>(answer.size()));
    EXPECT_TRUE(std::equal(answer.begin(), answer.end(), reply.begin()));
}

}  // namespace

// 9.3 steps 1-3: SinkAvail for the reader's whole buffer with NonDiscards
// (6.3.3.4), one RDMA Write of the queued bytes straight into it, one
// RdmaWrCompl counting them, as Send with SE and Invalidate of the sink's
// STag; both regions gone after.
TEST(SdpEngineWriteZcopy, SinkAvailRdmaWriteRdmaWrCompl) {
    ZPair p;
    p.pipeline();
    const auto zcopy_before = p.b.stats().zcopy_bytes_received;
    Bytes sink(100000);
    ASSERT_TRUE(p.b.post_sink(sink));
    EXPECT_TRUE(p.b.sink_pending());
    p.run();
    const auto avail = sent_with(p.qb.sent_log, w::Mid::sink_avail);
    ASSERT_EQ(avail.size(), 1u);
    const auto sa = std::get<w::SinkAvail>(decoded(avail[0]).body);
    EXPECT_EQ(sa.len, sink.size());
    EXPECT_EQ(sa.non_discards, kPipelinePayloads);
    EXPECT_TRUE(sa.payload.empty());
    EXPECT_EQ(p.a.stats().sink_avail_received, 1u);

    const Bytes data = pattern(sink.size(), 1);
    ASSERT_EQ(p.a.write(data), data.size());
    p.run();
    EXPECT_FALSE(p.b.sink_pending());
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(data.size()));
    EXPECT_EQ(sink, data);
    const auto compl_msgs = sent_with(p.qa.sent_log, w::Mid::rdma_wr_compl);
    ASSERT_EQ(compl_msgs.size(), 1u);
    EXPECT_EQ(std::get<w::RdmaWrCompl>(decoded(compl_msgs[0]).body).len, data.size());
    EXPECT_TRUE(compl_msgs[0].solicited);
    EXPECT_EQ(compl_msgs[0].invalidate, sa.stag);
    EXPECT_TRUE(sent_with(p.qa.sent_log, w::Mid::data).size() <= 1u) << "no Bcopy of the data";
    EXPECT_GE(p.qa.writes, 1u);
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.qb.regions.empty()) << "the sink's region is gone";
    EXPECT_EQ(p.a.stats().rdma_write_bytes, data.size());
    EXPECT_EQ(p.b.stats().sink_bytes_received, data.size());
    EXPECT_EQ(p.b.stats().zcopy_bytes_received - zcopy_before, data.size());
    EXPECT_TRUE(p.faults.empty());
    // The stream goes on (Bcopy), and a second SinkAvail is current again.
    const Bytes tail = pattern(1000, 2);
    ASSERT_EQ(p.a.write(tail), tail.size());
    p.run();
    expect_bytes_then_current_sink(p, sink, tail);
}

// 6.3.6.1: RdmaWrCompl Len may be less than the buffer: the reader gets
// what was written, the rest of the stream comes later.
TEST(SdpEngineWriteZcopy, PartialFill) {
    ZPair p;
    p.pipeline();
    Bytes sink(300000);
    const Bytes data = pattern(50000, 3);
    ASSERT_EQ(p.lend_and_fill(sink, data), std::optional<std::size_t>(data.size()));
    ASSERT_FALSE(p.b.sink_pending());
    EXPECT_TRUE(std::equal(data.begin(), data.end(), sink.begin()));
    EXPECT_EQ(std::get<w::RdmaWrCompl>(
                  decoded(sent_with(p.qa.sent_log, w::Mid::rdma_wr_compl).at(0)).body)
                  .len,
              data.size());
}

// A write_zcopy() buffer meeting a current SinkAvail goes straight from the
// writer's buffer into the reader's; the rest (above the threshold) is
// advertised with SrcAvail and pulled with RDMA Read.
TEST(SdpEngineWriteZcopy, WriterBufferIntoSinkThenSrcAvailForTheRest) {
    ZPair p;
    p.pipeline();
    Bytes sink(100000);
    p.lend_b(sink);
    const Bytes data = pattern(300000, 4);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    ASSERT_FALSE(p.b.sink_pending());
    ASSERT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(sink.size()));
    Bytes got = sink;
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail).size(), 1u);
    for (int i = 0; i < 100 && got.size() < data.size(); ++i) {
        p.run();
        p.read_b(got);
        if (p.b.zcopy_readable() > 0) {
            const std::size_t at = got.size();
            got.resize(at + p.b.zcopy_readable());
            ASSERT_TRUE(p.b.read_zcopy(std::span(got).subspan(at)));
            p.run();
            got.resize(at + p.b.take_zcopy_read().value_or(0));
        }
    }
    EXPECT_EQ(got, data);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_EQ(p.a.stats().rdma_write_bytes, sink.size());
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.qb.regions.empty());
    EXPECT_TRUE(p.faults.empty());
}

// 9.5.1: a Data Message and a SinkAvail cross. The Data completes the
// SinkAvail at the sink (not counted in NonDiscards), the source discards
// the SinkAvail as stale (PotentialNonDiscards 1 != 0, then decremented),
// and the counters agree again: the next SinkAvail is current and used.
TEST(SdpEngineWriteZcopy, StaleSinkAvailViaNonDiscards) {
    ZPair p;
    p.pipeline();
    const Bytes small = pattern(1000, 5);
    ASSERT_EQ(p.a.write(small), small.size());  // a Data Message on its way
    Bytes sink(100000);
    ASSERT_TRUE(p.b.post_sink(sink));  // crosses it
    p.run();
    EXPECT_FALSE(p.b.sink_pending());
    EXPECT_FALSE(p.b.take_zcopy_read().has_value());
    EXPECT_EQ(p.b.stats().sink_avail_completed_by_data, 1u);
    EXPECT_EQ(p.a.stats().sink_avail_stale, 1u);
    Bytes got;
    p.read_b(got);
    EXPECT_EQ(got, small);

    const Bytes big = pattern(80000, 6);
    EXPECT_EQ(p.lend_and_fill(sink, big), std::optional<std::size_t>(big.size()));
    const auto avail = sent_with(p.qb.sent_log, w::Mid::sink_avail);
    ASSERT_EQ(avail.size(), 2u);
    EXPECT_EQ(std::get<w::SinkAvail>(decoded(avail[1]).body).non_discards, kPipelinePayloads);
    EXPECT_EQ(p.a.stats().sink_avail_received, 1u) << "current";
    EXPECT_TRUE(std::equal(big.begin(), big.end(), sink.begin()));
}

// 9.5.1's own example: SinkAvails whose NonDiscards differs from
// PotentialNonDiscards are stale and decrement it. 9.5.5: the current one
// is Unprocessed until used, so a SinkAvailCancel discards it with exactly
// one SinkCancelAck; "If all SinkAvail advertisements have been Processed,
// the Data Source MUST ignore the SinkAvailCancel Message".
TEST(SdpEngineWriteZcopy, Section9_5_1StaleRuleAndCancel) {
    ZPair p;
    p.pipeline(false);  // b's send half: b takes SinkAvails
    // b sends two Data Messages to a: PotentialNonDiscards grows by 2.
    const Bytes two = pattern(10, 1);
    p.b.write(two);
    p.run();
    p.b.write(two);
    p.run();
    const auto sent = p.qb.sent_log.size();
    // Three SinkAvails crossing those two messages, NonDiscards as before
    // them: the first two are stale, the third current.
    for (int i = 0; i < 3; ++i)
        p.inject(w::SinkAvail{
            .len = 100000, .stag = 9, .va = 0, .non_discards = kPipelinePayloads, .payload = {}});
    EXPECT_EQ(p.b.stats().sink_avail_stale, 2u);
    EXPECT_EQ(p.b.stats().sink_avail_received, 1u);
    p.inject(w::SinkAvailCancel{});
    p.inject(w::SinkAvailCancel{});  // nothing left: ignored
    EXPECT_EQ(p.b.state(), e::State::established);
    std::size_t acks = 0;
    for (std::size_t i = sent; i < p.qb.sent_log.size(); ++i)
        acks += w::mid_of(decoded(p.qb.sent_log[i]).body) == w::Mid::sink_cancel_ack;
    EXPECT_EQ(acks, 1u);
}

// 9.5.2.2: a small write goes as Data although a SinkAvail is current; the
// Data completes it at the sink, and neither side counts that message.
TEST(SdpEngineWriteZcopy, SmallWriteUsesDataInsteadOfTheSinkAvail) {
    ZPair p;
    p.pipeline();
    Bytes sink(100000);
    const Bytes small = pattern(500, 7);
    EXPECT_FALSE(p.lend_and_fill(sink, small).has_value()) << "nothing written into the sink";
    EXPECT_EQ(p.a.stats().sink_avail_bcopy, 1u);
    EXPECT_EQ(p.a.stats().rdma_writes, 0u);
    EXPECT_FALSE(p.b.sink_pending());
    expect_bytes_then_current_sink(p, sink, small);
}

// 9.5.5 with something to cancel: the source discards the Unprocessed
// SinkAvail and sends exactly one SinkCancelAck; the buffer is the
// reader's again only then, and data after it comes by Bcopy.
TEST(SdpEngineWriteZcopy, SinkAvailCancelWithSomethingToCancel) {
    ZPair p;
    p.pipeline();
    Bytes sink(100000);
    p.lend_b(sink);
    p.b.cancel_sink();
    EXPECT_TRUE(p.b.sink_pending()) << "lent until the cancel is Processed";
    p.b.cancel_sink();  // no second SinkAvailCancel (9.5.5)
    p.run();
    EXPECT_EQ(sent_with(p.qb.sent_log, w::Mid::sink_avail_cancel).size(), 1u);
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::sink_cancel_ack).size(), 1u);
    EXPECT_FALSE(p.b.sink_pending());
    EXPECT_FALSE(p.b.take_zcopy_read().has_value());
    EXPECT_TRUE(p.qb.regions.empty());
    const Bytes data = pattern(100000, 8);
    ASSERT_EQ(p.a.write(data), data.size());
    p.run();
    Bytes got;
    p.read_b(got);
    EXPECT_EQ(got, data);
    EXPECT_EQ(p.a.stats().rdma_writes, 0u);
}

// 9.5.5 with nothing to cancel: the SinkAvail was Processed (used up by a
// Data Message, or filled by an RDMA Write) before the cancel arrived: the
// cancel is ignored (no SinkCancelAck) and the data or RdmaWrCompl that
// crossed it completes the buffer.
TEST(SdpEngineWriteZcopy, SinkAvailCancelWithNothingToCancel) {
    {
        ZPair p;
        p.pipeline();
        Bytes sink(100000);
        p.lend_b(sink);
        const Bytes small = pattern(300, 9);
        ASSERT_EQ(p.a.write(small), small.size());  // Data on its way
        p.b.cancel_sink();                          // crosses it
        p.run();
        EXPECT_FALSE(p.b.sink_pending());
        EXPECT_TRUE(sent_with(p.qa.sent_log, w::Mid::sink_cancel_ack).empty());
        expect_bytes_then_current_sink(p, sink, small);
    }
    {
        ZPair p;
        p.pipeline();
        Bytes sink(100000);
        p.lend_b(sink);
        const Bytes data = pattern(70000, 10);
        ASSERT_EQ(p.a.write(data), data.size());  // RDMA Write + RdmaWrCompl on their way
        p.b.cancel_sink();
        p.run();
        EXPECT_FALSE(p.b.sink_pending());
        EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(data.size()));
        EXPECT_TRUE(std::equal(data.begin(), data.end(), sink.begin()));
        EXPECT_TRUE(sent_with(p.qa.sent_log, w::Mid::sink_cancel_ack).empty());
        EXPECT_EQ(p.a.state(), e::State::established);
        EXPECT_EQ(p.b.state(), e::State::established);
    }
    {
        ZPair p;  // a SinkCancelAck nobody waits for is ignored
        p.inject(w::SinkCancelAck{});
        EXPECT_EQ(p.b.state(), e::State::established);
    }
}

// Combined Mode (11.2, Figure 25): no SinkAvail at all. A large reader
// cannot lend its buffer until the Data Source has moved the half to
// Pipelined Mode; it asks with REQ_PIPE in its RdmaRdCompl (6.1.2), which
// the Data Source takes (12.3): ModeChange S=0 PIPE_MODE, then SrcAvails
// without payload (11.3).
TEST(SdpEngineWriteZcopy, Section11_2NoSinkAvailUntilPipelined) {
    ZPair p;
    Bytes sink(100000);
    EXPECT_FALSE(p.b.post_sink(sink)) << "Combined Mode";
    EXPECT_TRUE(sent_with(p.qb.sent_log, w::Mid::sink_avail).empty());
    p.pipeline();
    EXPECT_EQ(p.a.stats().mode_changes_sent, 1u);
    EXPECT_EQ(p.b.stats().mode_changes_received, 1u);
    EXPECT_EQ(p.a.mode_in(), e::Mode::combined) << "the other half stays";
    EXPECT_EQ(p.b.mode_out(), e::Mode::combined);
    const Bytes data = pattern(200000, 11);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    const auto avail = sent_with(p.qa.sent_log, w::Mid::src_avail);
    ASSERT_EQ(avail.size(), 1u);
    EXPECT_TRUE(std::get<w::SrcAvail>(decoded(avail[0]).body).payload.empty()) << "11.3";
    EXPECT_EQ(p.b.zcopy_readable(), data.size());
    Bytes got(data.size());
    ASSERT_TRUE(p.b.read_zcopy(got));
    p.run();
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(data.size()));
    EXPECT_EQ(got, data);
    EXPECT_TRUE(p.b.post_sink(sink)) << "Pipelined Mode";
    EXPECT_TRUE(p.faults.empty());
}

// 11.3's crossing rules: b's SinkAvail and a's SrcAvail cross. b ignores
// the SrcAvail (rule 2b), a takes it as discarded and uses Write Zcopy
// (rule 1a/b), then advertises what the SinkAvail left with a new SrcAvail,
// which b reads (rule 2a: it has no SinkAvail then). While the peer's
// SrcAvail is in process, b does not advertise.
TEST(SdpEngineWriteZcopy, Section11_3CrossingSrcAvailAndSinkAvail) {
    ZPair p;
    p.pipeline();
    Bytes sink(100000);
    ASSERT_TRUE(p.b.post_sink(sink));
    const Bytes data = pattern(200000, 11);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    EXPECT_EQ(p.b.stats().src_avail_ignored, 1u);
    EXPECT_EQ(p.a.stats().src_avail_superseded, 1u);
    EXPECT_EQ(p.a.stats().sink_avail_stale, 0u) << "no payload crossed it";
    EXPECT_FALSE(p.b.sink_pending());
    ASSERT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(sink.size()));
    EXPECT_TRUE(std::equal(sink.begin(), sink.end(), data.begin()));
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail).size(), 2u) << "advertised again";
    ASSERT_EQ(p.b.zcopy_readable(), data.size() - sink.size());
    Bytes other(100000);
    EXPECT_FALSE(p.b.post_sink(other)) << "the peer's SrcAvail is in process (2a)";
    Bytes got = sink;
    got.resize(data.size());
    ASSERT_TRUE(p.b.read_zcopy(std::span(got).subspan(sink.size())));
    p.run();
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(data.size() - sink.size()));
    EXPECT_EQ(got, data);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.qb.regions.empty());
    EXPECT_TRUE(p.faults.empty());
}

// 11.3 rule 2a: a Data Sink that receives a SrcAvail while it has no
// Unprocessed or In-Process SinkAvail MUST NOT send a SinkAvail. b lends a
// buffer while it has no credit for the SinkAvail (10.5: one credit left
// that gives none), so the SinkAvail waits unsent; a's SrcAvail, sent
// before a learnt of that, arrives: the waiting SinkAvail is withdrawn
// (never sent, not even once credit is back; its region gone) and the
// bytes come by Read Zcopy, once and in stream order.
TEST(SdpEngineWriteZcopy, Section11_3Rule2aUnsentSinkAvailIsWithdrawn) {
    ZPair p;
    p.pipeline();
    // b to a: Data until b keeps the two credits 10.5 reserves (a reads
    // none), then a ChRcvBuf (no payload) takes one more and stays on the
    // wire, so a sends b no credit for it yet.
    const Bytes back = pattern(256 * 1024, 30);
    std::size_t off = 0;
    feed(p.b, back, off);
    p.run();
    ASSERT_EQ(p.b.send_credits(), 2u);
    ASSERT_TRUE(p.b.request_peer_recv_size(2 * p.b.peer_recv_size()));
    ASSERT_EQ(p.b.send_credits(), 1u);

    Bytes sink(100000);
    ASSERT_TRUE(p.b.post_sink(sink));
    ASSERT_TRUE(p.b.sink_pending());
    ASSERT_TRUE(sent_with(p.qb.sent_log, w::Mid::sink_avail).empty()) << "no credit for it";
    ASSERT_EQ(p.qb.regions.size(), 1u);

    const Bytes data = pattern(200000, 31);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run_to_b();
    EXPECT_FALSE(p.b.sink_pending()) << "withdrawn";
    EXPECT_FALSE(p.b.take_zcopy_read().has_value()) << "nothing was written into it";
    EXPECT_TRUE(p.qb.regions.empty()) << "the withdrawn buffer's region is gone";
    EXPECT_EQ(p.b.stats().src_avail_ignored, 0u) << "rule 2a, not 2b";
    ASSERT_EQ(p.b.zcopy_readable(), data.size());
    Bytes got(data.size());
    ASSERT_TRUE(p.b.read_zcopy(got));
    p.run();
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(data.size()));

    // a reads what b sent; with credit back, b still sends no SinkAvail.
    EXPECT_EQ(relay(p, p.b, p.a, back, off), back);
    p.read_b(got);
    EXPECT_EQ(got, data) << "once, in order";
    EXPECT_TRUE(sent_with(p.qb.sent_log, w::Mid::sink_avail).empty());
    EXPECT_EQ(p.b.stats().sink_avail_sent, 0u);
    EXPECT_EQ(p.a.stats().sink_avail_received, 0u);
    EXPECT_EQ(p.a.stats().rdma_writes, 0u);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.faults.empty());
    EXPECT_EQ(p.b.state(), e::State::established);
}

// 12.4, the Data Sink's side: a ModeChange back to Combined Mode ends our
// outstanding SinkAvail (its state is invalidated, nothing was written) and
// no SinkAvail may go after it; SrcAvails carry payload again (11.2).
TEST(SdpEngineWriteZcopy, Section12_4BackToCombinedEndsTheSinkAvail) {
    ZPair p;
    p.pipeline();
    Bytes sink(100000);
    p.lend_b(sink);
    ASSERT_FALSE(p.qb.regions.empty());
    p.inject(w::ModeChange{false, e::Mode::combined});
    EXPECT_EQ(p.b.state(), e::State::established);
    EXPECT_EQ(p.b.mode_in(), e::Mode::combined);
    EXPECT_FALSE(p.b.sink_pending());
    EXPECT_FALSE(p.b.take_zcopy_read().has_value());
    EXPECT_TRUE(p.qb.regions.empty());
    EXPECT_FALSE(p.b.post_sink(sink));
    // A SrcAvail without payload is Pipelined-only (11.2: more than zero).
    p.inject(w::SrcAvail{.len = 100000, .stag = 5, .va = 0, .payload = {}});
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::unexpected_message);
}

// 11.3: in Pipelined Mode a SrcAvail MUST NOT carry payload; 12.1: the
// Data Source may not move to Buffered Mode while its SrcAvail is
// unprocessed; Figure 25: no SrcAvail towards a Buffered half.
TEST(SdpEngineWriteZcopy, ModeRulesOnSrcAvail) {
    {
        ZPair p;
        p.pipeline();
        p.inject(w::SrcAvail{.len = 100000, .stag = 5, .va = 0, .payload = pattern(10, 1)});
        EXPECT_EQ(p.b.state(), e::State::reset);
        EXPECT_EQ(p.b.error(), e::Error::unexpected_message);
    }
    {
        ZPair p;
        p.inject(w::SrcAvail{.len = 100000, .stag = 5, .va = 0, .payload = pattern(10, 1)});
        ASSERT_EQ(p.b.state(), e::State::established);
        p.inject(w::ModeChange{false, e::Mode::buffered});
        EXPECT_EQ(p.b.error(), e::Error::bad_mode_change);
    }
    {
        ZPair p;
        p.inject(w::ModeChange{false, e::Mode::buffered});
        ASSERT_EQ(p.b.mode_in(), e::Mode::buffered);
        p.inject(w::SrcAvail{.len = 100000, .stag = 5, .va = 0, .payload = pattern(10, 1)});
        EXPECT_EQ(p.b.error(), e::Error::mode_violation);
    }
}

// A SendSm'd rest goes as Data Messages (9.5.2.1) even when the sink then
// advertises a buffer: that Data completes the SinkAvail instead.
TEST(SdpEngineWriteZcopy, SendSmRestIsNotWrittenIntoASinkAvail) {
    ZPair p;
    p.pipeline();
    const Bytes data = pattern(200000, 12);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    Bytes got;
    p.read_b(got);
    p.b.decline_zcopy();  // SendSm
    Bytes sink(150000);
    if (p.b.post_sink(sink)) {
        p.run();
        EXPECT_FALSE(p.b.sink_pending());
    }
    for (int i = 0; i < 1000 && got.size() < data.size(); ++i) {
        p.run();
        p.read_b(got);
    }
    EXPECT_EQ(got, data);
    EXPECT_EQ(p.a.stats().rdma_writes, 0u);
}

// 9.3 / 9.5.1: what never advertises. A buffer not larger than both the
// Bcopy Threshold and the private buffer size, with bytes readable, after
// DisConn, or without RDMA; a read-exactly caller (MSG_WAITALL) simply
// never calls post_sink() (the Stream driver's read(), see the stream tests).
TEST(SdpEngineWriteZcopy, WhatNeverAdvertises) {
    {
        ZPair p;
        Bytes big(100000);
        EXPECT_FALSE(p.b.post_sink(big)) << "Combined Mode (Figure 25)";
    }
    {
        ZPair p;
        p.pipeline();
        Bytes buf(16384);  // the private buffer size
        EXPECT_FALSE(p.b.post_sink(buf));
        Bytes big(100000);
        ASSERT_EQ(p.a.write(pattern(10, 1)), 10u);
        p.run();
        EXPECT_FALSE(p.b.post_sink(big)) << "bytes are readable";
        p.a.shutdown_write();
        p.run();
        Bytes got;
        p.read_b(got);
        EXPECT_FALSE(p.b.post_sink(big)) << "after DisConn";
    }
    {
        ZPair p(zcopy_config(0), zcopy_config(0));
        Bytes big(100000);
        EXPECT_FALSE(p.b.post_sink(big)) << "Bcopy only";
    }
    {
        ZPair p;
        p.pipeline();
        p.qb.refuse_registration = true;
        Bytes big(100000);
        EXPECT_FALSE(p.b.post_sink(big));
        EXPECT_TRUE(sent_with(p.qb.sent_log, w::Mid::sink_avail).empty());
    }
    {
        // DisConn while the SinkAvail waits: nothing will be written.
        ZPair p;
        p.pipeline();
        Bytes sink(100000);
        p.lend_b(sink);
        p.a.shutdown_write();
        p.run();
        EXPECT_FALSE(p.b.sink_pending());
        EXPECT_TRUE(p.b.eof());
        EXPECT_TRUE(p.qb.regions.empty());
    }
}

// Hostile or broken peers (8.2.2): an RdmaWrCompl without a SinkAvail, for
// more than the buffer, or invalidating a foreign STag; a SinkAvail with
// Len 0 (6.3.3.1); a second current SinkAvail (9.5.5); an RDMA Write into
// a stale STag (the QP's Terminate).
TEST(SdpEngineWriteZcopy, ViolationsResetTheConnection) {
    {
        ZPair p;
        p.inject(w::RdmaWrCompl{10});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;
        p.pipeline();
        Bytes sink(100000);
        p.lend_b(sink);
        p.inject(w::RdmaWrCompl{100001});
        EXPECT_EQ(p.b.state(), e::State::reset);
        EXPECT_TRUE(p.qb.regions.empty()) << "a reset invalidates the lent buffer";
    }
    {
        ZPair p;
        p.pipeline();
        Bytes sink(100000);
        p.lend_b(sink);
        p.inject(w::RdmaWrCompl{100}, 0xdead);
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;  // Figure 25: towards a Combined half
        p.inject(w::SinkAvail{.len = 100, .stag = 9, .va = 0, .non_discards = 0, .payload = {}});
        EXPECT_EQ(p.b.state(), e::State::reset);
        EXPECT_EQ(p.b.error(), e::Error::mode_violation);
    }
    {
        ZPair p;
        p.pipeline(false);
        p.inject(w::SinkAvail{
            .len = 0, .stag = 9, .va = 0, .non_discards = kPipelinePayloads, .payload = {}});
        EXPECT_EQ(p.b.state(), e::State::reset);
        EXPECT_EQ(p.b.error(), e::Error::unexpected_message);
    }
    {
        ZPair p;
        p.pipeline(false);
        const w::SinkAvail sa{
            .len = 100000, .stag = 9, .va = 0, .non_discards = kPipelinePayloads, .payload = {}};
        p.inject(sa);
        EXPECT_EQ(p.b.state(), e::State::established);
        p.inject(sa);
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;
        p.pipeline();
        Bytes sink(100000);
        p.lend_b(sink);
        const std::uint32_t stag = p.qb.regions.begin()->first;
        p.b.cancel_sink();
        p.run();
        ASSERT_FALSE(p.b.sink_pending());
        p.qa.post_rdma_write(pattern(10, 1), stag, 0);  // the STag is stale now
        p.run();
        ASSERT_EQ(p.faults.size(), 1u);
        EXPECT_TRUE(p.llp_down);
    }
}

// 9.4 / 9.5.1 step 1, the receiving side of a Transaction: a SinkAvail with
// ULP payload. Its payload is data for this direction (delivered, and it
// completes our own outstanding SinkAvail, not counted in NonDiscards); the
// SinkAvail itself, current, is filled by the next large write.
TEST(SdpEngineWriteZcopy, TransactionSinkAvailWithPayload) {
    ZPair p;
    p.pipeline();       // a to b: b may lend
    p.pipeline(false);  // b to a: b may accept a Transaction (Figure 25)
    Bytes own(100000);
    ASSERT_TRUE(p.b.post_sink(own));  // b lends a buffer for a's data
    p.run();
    Bytes reply(100000);
    auto region = p.qa.register_region(reply, e::Access::remote_write);
    ASSERT_TRUE(region);
    const Bytes command = pattern(200, 14);
    p.inject(w::SinkAvail{.len = static_cast<std::uint32_t>(reply.size()),
                          .stag = region->stag,
                          .va = region->to,
                          .non_discards = kPipelinePayloads,
                          .payload = command});
    EXPECT_EQ(p.b.state(), e::State::established);
    EXPECT_FALSE(p.b.sink_pending()) << "the payload completed b's SinkAvail";
    EXPECT_EQ(p.b.stats().sink_avail_completed_by_data, 1u);
    EXPECT_EQ(p.b.stats().sink_avail_received, 1u);
    Bytes got;
    p.read_b(got);
    EXPECT_EQ(got, command);
    const Bytes answer = pattern(60000, 15);
    ASSERT_EQ(p.b.write(answer), answer.size());
    std::size_t writes = 0;
    for (const auto& pk : p.qb.outbound)
        writes += pk.write ? 1 : 0;
    EXPECT_GE(writes, 1u);
    ASSERT_FALSE(p.qb.outbound.empty());
    EXPECT_EQ(w::mid_of(decoded(p.qb.outbound.back()).body), w::Mid::rdma_wr_compl);
    EXPECT_EQ(p.qb.outbound.back().invalidate, region->stag);
}

// 9.4, the sending side of a Transaction: one SinkAvail carries the
// command (ULP payload of our send half) and lends the reply buffer (our
// receive half, which must be Pipelined, Figure 25); the peer reads the
// command and RDMA-Writes its reply straight into the buffer.
TEST(SdpEngineWriteZcopy, Section9_4TransactionCommandAndReply) {
    ZPair p;
    p.pipeline(false);  // b to a: a may lend
    const Bytes command = pattern(300, 20);
    Bytes reply(200000);
    ASSERT_TRUE(p.a.transact(command, reply));
    p.run();
    const auto avail = sent_with(p.qa.sent_log, w::Mid::sink_avail);
    ASSERT_EQ(avail.size(), 1u);
    const auto sa = std::get<w::SinkAvail>(decoded(avail[0]).body);
    EXPECT_EQ(sa.payload, command);
    EXPECT_EQ(sa.len, reply.size());
    EXPECT_TRUE(sent_with(p.qa.sent_log, w::Mid::data).empty()) << "one message, not two";
    EXPECT_EQ(p.a.stats().transactions_sent, 1u);
    EXPECT_EQ(p.b.stats().sink_avail_received, 1u);
    Bytes got(command.size() + 10);
    ASSERT_EQ(p.b.read(got), command.size());
    got.resize(command.size());
    EXPECT_EQ(got, command);
    ASSERT_NO_FATAL_FAILURE(expect_answer_written(p, pattern(150000, 21), reply));
    EXPECT_GE(p.qb.writes, 1u);
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.faults.empty());
    // The next command goes the same way: the counters still agree (9.5.1).
    ASSERT_TRUE(p.a.transact(command, reply));
    p.run();
    EXPECT_EQ(p.b.stats().sink_avail_received, 2u);
    EXPECT_EQ(p.b.stats().sink_avail_stale, 0u);
}

// 9.4 / Figure 25 / stream order: when a Transaction may not be sent.
TEST(SdpEngineWriteZcopy, Section9_4WhenNoTransaction) {
    const Bytes command = pattern(100, 22);
    Bytes reply(200000);
    {
        ZPair p;
        EXPECT_FALSE(p.a.transact(command, reply)) << "receive half Combined (Figure 25)";
    }
    {
        ZPair p;
        p.pipeline(false);
        EXPECT_FALSE(p.a.transact({}, reply)) << "no request";
        const Bytes big = pattern(p.a.max_transaction_request() + 1, 1);
        EXPECT_FALSE(p.a.transact(big, reply)) << "larger than one message";
        Bytes small(1000);
        EXPECT_FALSE(p.a.transact(command, small)) << "reply buffer below the threshold";
        EXPECT_FALSE(p.a.sink_pending());
        EXPECT_TRUE(p.qa.regions.empty());
    }
    {
        ZPair p;
        p.pipeline(false);
        p.a.shutdown_write();
        EXPECT_FALSE(p.a.transact(command, reply)) << "after shutdown_write";
    }
    {
        ZPair p;
        p.pipeline(false);
        const Bytes first = pattern(p.a.bcopy_threshold() * 3, 23);
        ASSERT_TRUE(p.a.write_zcopy(first));
        EXPECT_FALSE(p.a.transact(command, reply)) << "behind an advertised buffer (11.2)";
    }
}

// 9.4 with credit for a message without payload but not for one with
// payload (10.5: two credits): transact() still lends the reply buffer and
// returns true, but the SinkAvail goes bare and the request as the next
// Data Message once credit is back; the reply is RDMA-Written as usual.
TEST(SdpEngineWriteZcopy, Section9_4TransactionWithTwoCreditsSendsTheRequestAsData) {
    ZPair p;
    p.pipeline(false);  // b to a: a may lend
    // a to b: full Data Messages until a keeps two credits, nothing queued
    // (b reads none).
    const std::size_t per_message = p.a.peer_recv_size() - w::kBsdhSize;
    const Bytes first = pattern((p.a.send_credits() - 2) * per_message, 28);
    ASSERT_EQ(p.a.write(first), first.size());
    p.run();
    ASSERT_EQ(p.a.send_credits(), 2u);
    ASSERT_EQ(p.a.send_queued(), 0u);

    const Bytes command = pattern(300, 29);
    Bytes reply(200000);
    ASSERT_TRUE(p.a.transact(command, reply));
    EXPECT_TRUE(p.a.sink_pending());
    EXPECT_EQ(p.a.send_queued(), command.size()) << "the request waits as Data";
    p.run();
    const auto avail = sent_with(p.qa.sent_log, w::Mid::sink_avail);
    ASSERT_EQ(avail.size(), 1u);
    EXPECT_TRUE(std::get<w::SinkAvail>(decoded(avail[0]).body).payload.empty());
    EXPECT_EQ(p.a.stats().transactions_sent, 0u);
    EXPECT_EQ(p.b.stats().sink_avail_received, 1u);

    // b reads: credit back, the request follows, after a's earlier bytes.
    Bytes got;
    for (int i = 0; i < 100 && got.size() < first.size() + command.size(); ++i) {
        p.read_b(got);
        p.run();
    }
    Bytes want = first;
    want.insert(want.end(), command.begin(), command.end());
    EXPECT_EQ(got, want);
    ASSERT_NO_FATAL_FAILURE(expect_answer_written(p, pattern(150000, 30), reply));
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_TRUE(p.faults.empty());
}

// 9.4, when transact() cannot carry the request in a SinkAvail (our
// receive half not Pipelined, Figure 25; or the request larger than one
// message, max_transaction_request()): it returns false and does nothing,
// the caller write()s the request and it goes as plain Data; the reply,
// with no buffer lent, comes back by Bcopy (Data Messages) for read().
TEST(SdpEngineWriteZcopy, Section9_4NoTransactionRequestAsDataReplyByBcopy) {
    enum class Case { combined, send_half_pipelined, request_too_large };
    for (const Case c : {Case::combined, Case::send_half_pipelined, Case::request_too_large}) {
        SCOPED_TRACE(static_cast<int>(c));
        ZPair p;
        if (c == Case::send_half_pipelined)
            p.pipeline();  // a to b only: a's receive half stays Combined
        if (c == Case::request_too_large)
            p.pipeline(false);  // b to a: a may lend
        const Bytes request =
            pattern(c == Case::request_too_large ? p.a.max_transaction_request() + 1 : 300, 26);
        Bytes reply(200000);
        EXPECT_FALSE(p.a.transact(request, reply));
        EXPECT_FALSE(p.a.sink_pending());
        EXPECT_TRUE(p.qa.regions.empty()) << "the reply buffer is not lent";
        EXPECT_TRUE(p.qa.outbound.empty()) << "nothing sent";

        ASSERT_EQ(p.a.write(request), request.size());
        p.run();
        Bytes got;
        p.read_b(got);
        EXPECT_EQ(got, request);
        EXPECT_FALSE(sent_with(p.qa.sent_log, w::Mid::data).empty()) << "as Data";
        EXPECT_TRUE(sent_with(p.qa.sent_log, w::Mid::sink_avail).empty());
        EXPECT_EQ(p.a.stats().transactions_sent, 0u);
        EXPECT_EQ(p.b.stats().sink_avail_received, 0u);

        const Bytes answer = pattern(150000, 27);
        EXPECT_EQ(relay(p, p.b, p.a, answer), answer);
        EXPECT_EQ(p.qb.writes, 0u) << "no RDMA Write: Bcopy";
        EXPECT_EQ(p.a.stats().sink_bytes_received, 0u);
        EXPECT_FALSE(sent_with(p.qb.sent_log, w::Mid::data).empty());
        EXPECT_TRUE(p.faults.empty());
    }
}

// 6.1.2: REQ_PIPE goes in RdmaRdCompl and RdmaWrCompl only. The bit in an
// RdmaWrCompl applies to the opposite half: b, which lent a buffer on the a
// to b half, gets a's RdmaWrCompl with REQ_PIPE and moves its own send half
// (b to a) to Pipelined Mode (12.3).
TEST(SdpEngineWriteZcopy, Section6_1_2ReqPipeOnlyInCompletions) {
    ZPair p;
    p.pipeline();
    Bytes sink(100000);
    const Bytes data = pattern(80000, 24);
    ASSERT_EQ(p.lend_and_fill(sink, data), std::optional<std::size_t>(data.size()));
    const auto wr = sent_with(p.qa.sent_log, w::Mid::rdma_wr_compl);
    ASSERT_EQ(wr.size(), 1u);
    EXPECT_TRUE(decoded(wr[0]).flags & w::flag::req_pipe);
    EXPECT_EQ(p.b.mode_out(), e::Mode::pipelined);
    EXPECT_EQ(p.a.mode_in(), e::Mode::pipelined);
    EXPECT_EQ(p.b.stats().mode_changes_sent, 1u);
    const auto mc = sent_with(p.qb.sent_log, w::Mid::mode_change);
    ASSERT_EQ(mc.size(), 1u);
    EXPECT_EQ(std::get<w::ModeChange>(decoded(mc[0]).body),
              (w::ModeChange{false, e::Mode::pipelined}));
    // And nowhere else.
    for (const auto* log : {&p.qa.sent_log, &p.qb.sent_log}) {
        for (const auto& pk : *log) {
            if (pk.close || pk.write)
                continue;
            const w::Message m = decoded(pk);
            const auto mid = w::mid_of(m.body);
            if (mid != w::Mid::rdma_rd_compl && mid != w::Mid::rdma_wr_compl) {
                EXPECT_FALSE(m.flags & w::flag::req_pipe) << w::to_string(mid);
            }
        }
    }
}

// 11.3 rule 2a from the other side: a Data Sink that began reading our
// SrcAvail (an RdmaRdCompl for part of it) may not send a SinkAvail; a
// current one then is a violation, not a reason to drop the SrcAvail.
TEST(SdpEngineWriteZcopy, Section11_3SinkAvailAfterAPartialReadIsAViolation) {
    ZPair p;
    p.pipeline(false);  // b to a
    const Bytes data = pattern(100000, 25);
    ASSERT_TRUE(p.b.write_zcopy(data));
    p.run();
    ASSERT_EQ(p.a.zcopy_readable(), data.size());
    Bytes part(40000);
    ASSERT_TRUE(p.a.read_zcopy(part));
    p.run();
    ASSERT_EQ(p.a.take_zcopy_read(), std::optional<std::size_t>(part.size()));
    ASSERT_TRUE(p.b.zcopy_write_pending());
    p.inject(w::SinkAvail{
        .len = 100000, .stag = 9, .va = 0, .non_discards = kPipelinePayloads, .payload = {}});
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::unexpected_message);
    EXPECT_EQ(p.b.stats().src_avail_superseded, 0u);
}

// 6.2.1.3: we announce MaxAdverts 1, the most the engine tracks.
TEST(SdpEngineWriteZcopy, HelloAnnouncesMaxAdvertsOne) {
    FakeQp q;
    e::Connection c(e::Role::connecting, zcopy_config(), q);
    const auto r = w::decode(c.connect());
    ASSERT_TRUE(std::holds_alternative<w::Message>(r));
    EXPECT_EQ(std::get<w::Hello>(std::get<w::Message>(r).body).max_adverts, 1u);
}
