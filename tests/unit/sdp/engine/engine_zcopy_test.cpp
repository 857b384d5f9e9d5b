// SPDX-License-Identifier: Apache-2.0
// Read Zcopy (9.2) in Combined Mode (11.2): two engines back to back on the
// fake QP pair with RDMA Read emulated (regions, STags, remote invalidate).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "zcopy_pair.hpp"

using namespace sdp::test;

// 9.2 steps 1-3: SrcAvail with the first bytes inline (11.2), one RDMA Read
// into the reader's buffer, RdmaRdCompl counting the bytes read (not the
// inline ones) as Send with SE and Invalidate of the source's STag.
TEST(SdpEngineReadZcopy, OneBufferPulledWithOneRead) {
    ZPair p;
    const Bytes data = pattern(1 << 20, 1);
    ASSERT_TRUE(p.a.write_zcopy(data));
    EXPECT_TRUE(p.a.zcopy_write_pending());
    EXPECT_EQ(p.a.write_space(), 0u) << "nothing behind a SrcAvail in process (11.2)";
    p.run();
    const auto avail = sent_with(p.qa.sent_log, w::Mid::src_avail);
    ASSERT_EQ(avail.size(), 1u);
    const auto sa = std::get<w::SrcAvail>(decoded(avail[0]).body);
    EXPECT_EQ(sa.len, data.size());
    EXPECT_FALSE(sa.payload.empty());
    EXPECT_TRUE(std::equal(sa.payload.begin(), sa.payload.end(), data.begin()));
    EXPECT_EQ(p.b.readable(), sa.payload.size());

    Bytes got;
    p.drain_b(got, data.size());
    EXPECT_EQ(got, data);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    const auto compl_msgs = sent_with(p.qb.sent_log, w::Mid::rdma_rd_compl);
    ASSERT_EQ(compl_msgs.size(), 1u);
    EXPECT_EQ(std::get<w::RdmaRdCompl>(decoded(compl_msgs[0]).body).len,
              data.size() - sa.payload.size());
    EXPECT_TRUE(compl_msgs[0].solicited);
    EXPECT_EQ(compl_msgs[0].invalidate, sa.stag);
    EXPECT_TRUE(p.qa.regions.empty()) << "the source's region is gone";
    EXPECT_TRUE(p.qb.regions.empty()) << "the sink's region is gone";
    EXPECT_EQ(p.a.stats().zcopy_bytes_sent, data.size() - sa.payload.size());
    EXPECT_EQ(p.b.stats().zcopy_bytes_received, data.size() - sa.payload.size());
    EXPECT_TRUE(p.faults.empty());
    // The stream goes on with Bcopy after it.
    const Bytes tail = pattern(1000, 2);
    EXPECT_EQ(p.a.write(tail), tail.size());
    Bytes more;
    p.drain_b(more, 1 << 20);
    EXPECT_EQ(more, tail);
}

// 9.2: partial reads, each RdmaRdCompl counting the bytes since the last;
// only the final one invalidates.
TEST(SdpEngineReadZcopy, PartialReadsWithIncrementalCompletions) {
    ZPair p;
    const Bytes data = pattern(300000, 3);
    ASSERT_TRUE(p.a.write_zcopy(data));
    Bytes got;
    p.drain_b(got, 64 * 1024);
    EXPECT_EQ(got, data);
    const auto compl_msgs = sent_with(p.qb.sent_log, w::Mid::rdma_rd_compl);
    ASSERT_GT(compl_msgs.size(), 4u);
    std::size_t sum = 0;
    for (std::size_t i = 0; i < compl_msgs.size(); ++i) {
        sum += std::get<w::RdmaRdCompl>(decoded(compl_msgs[i]).body).len;
        EXPECT_EQ(compl_msgs[i].invalidate != 0, i + 1 == compl_msgs.size());
    }
    EXPECT_EQ(sum, p.a.stats().zcopy_bytes_sent);
    EXPECT_FALSE(p.a.zcopy_write_pending());
}

// 9.2 step 2a / 9.5.2.1: a reader buffer below the threshold and the rest
// asks for Bcopy; the Data Source sends the rest as Data Messages.
TEST(SdpEngineReadZcopy, SmallReaderBufferForcesBcopy) {
    ZPair p;
    const Bytes data = pattern(200000, 4);
    ASSERT_TRUE(p.a.write_zcopy(data));
    // The SendSm goes out from read_zcopy() itself (a driver that waits
    // for the socket next calls nothing else).
    p.run();
    Bytes first(64);
    ASSERT_EQ(p.b.read(first), 64u);  // the inline bytes
    const auto before = p.qb.sent_log.size();
    Bytes small(1000);
    EXPECT_FALSE(p.b.read_zcopy(small));
    ASSERT_EQ(p.qb.sent_log.size(), before + 1);
    EXPECT_EQ(w::mid_of(decoded(p.qb.sent_log.back()).body), w::Mid::send_sm);
    Bytes got(data.begin(), data.begin() + 64);
    p.drain_b(got, 1000);  // below the 8192 threshold
    EXPECT_EQ(got, data);
    EXPECT_EQ(sent_with(p.qb.sent_log, w::Mid::send_sm).size(), 1u);
    EXPECT_EQ(p.b.stats().zcopy_reads, 0u);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_TRUE(p.qa.regions.empty()) << "invalidated after SendSm";
}

// The end of 9.2: both sides advertise at once and nobody reads: each Data
// Sink sees its own SrcAvail outstanding and answers SendSm, so both writes
// complete by Bcopy instead of waiting for each other.
TEST(SdpEngineReadZcopy, CrossingSrcAvailsDoNotDeadlock) {
    ZPair p;
    const Bytes ab = pattern(100000, 5), ba = pattern(90000, 6);
    ASSERT_TRUE(p.a.write_zcopy(ab));
    ASSERT_TRUE(p.b.write_zcopy(ba));
    Bytes ra, rb, buf(70000);
    for (int i = 0; i < 10000 && (ra.size() < ba.size() || rb.size() < ab.size()); ++i) {
        p.run();
        std::size_t n = p.a.read(buf);
        ra.insert(ra.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        n = p.b.read(buf);
        rb.insert(rb.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    EXPECT_EQ(ra, ba);
    EXPECT_EQ(rb, ab);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_FALSE(p.b.zcopy_write_pending());
}

// Without RDMA on either side, or below the threshold: write_zcopy() says
// no and nothing changes.
TEST(SdpEngineReadZcopy, NotStartedWhenItCannotBe) {
    {
        ZPair p;
        EXPECT_FALSE(p.a.write_zcopy(pattern(8192, 1))) << "not larger than the threshold";
        const Bytes one = pattern(100000, 1);
        ASSERT_TRUE(p.a.write_zcopy(one));
        EXPECT_FALSE(p.a.write_zcopy(one)) << "one in process at a time (11.2)";
        EXPECT_EQ(p.a.write(one), 0u);
    }
    {
        ZPair p;
        p.qa.refuse_registration = true;
        EXPECT_FALSE(p.a.write_zcopy(pattern(100000, 1)));
        EXPECT_FALSE(p.a.zcopy_write_pending());
    }
    {
        ZPair p(zcopy_config(0), zcopy_config(0));
        EXPECT_FALSE(p.a.write_zcopy(pattern(100000, 1))) << "Bcopy only";
    }
}

// A sink without RDMA (or Bcopy only) answers a SrcAvail with SendSm.
TEST(SdpEngineReadZcopy, SinkWithoutRdmaForcesBcopy) {
    ZPair p(zcopy_config(), zcopy_config(0));
    const Bytes data = pattern(50000, 8);
    ASSERT_TRUE(p.a.write_zcopy(data));
    Bytes got;
    p.drain_b(got, 1 << 20);
    EXPECT_EQ(got, data);
    EXPECT_EQ(p.b.stats().send_sm_sent, 1u);
}

// Hostile or broken Data Sources and Sinks: protocol violations (8.2.2).
TEST(SdpEngineReadZcopy, ViolationsResetTheConnection) {
    const w::SrcAvail avail{.len = 100000, .stag = 77, .va = 0x1000, .payload = {1, 2, 3}};
    {
        ZPair p;  // a second SrcAvail while one is in process (11.2)
        p.inject(avail);
        p.inject(avail);
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;  // Data with payload while a SrcAvail is in process (11.2)
        p.inject(avail);
        p.inject(w::Data{{9, 9}});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;  // a SinkAvail with payload while a SrcAvail is in process (11.2)
        p.inject(avail);
        p.inject(
            w::SinkAvail{.len = 100000, .stag = 5, .va = 0, .non_discards = 0, .payload = {7}});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;  // a Combined-Mode SrcAvail without payload (11.2)
        p.inject(w::SrcAvail{.len = 100000, .stag = 77, .va = 0, .payload = {}});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;  // RdmaRdCompl with nothing advertised
        p.inject(w::RdmaRdCompl{10});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;  // RdmaRdCompl for more than the rest; a foreign STag invalidated
        const Bytes lent1 = pattern(100000, 1);  // lent until done
        ASSERT_TRUE(p.b.write_zcopy(lent1));
        p.run_to_b();
        ASSERT_TRUE(p.b.zcopy_write_pending());
        p.inject(w::RdmaRdCompl{200000});
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
    {
        ZPair p;
        const Bytes lent2 = pattern(100000, 1);  // lent until done
        ASSERT_TRUE(p.b.write_zcopy(lent2));
        p.inject(w::RdmaRdCompl{100000 - 64}, 0xdead);
        EXPECT_EQ(p.b.state(), e::State::reset);
        EXPECT_TRUE(p.qb.regions.empty()) << "a reset invalidates the advertised buffer";
    }
    {
        ZPair p;  // Send with Invalidate on a message that may not carry it
        p.inject(w::Data{{1}}, 5);
        EXPECT_EQ(p.b.state(), e::State::reset);
    }
}

// 9.5.4: SrcAvailCancel. Unprocessed: discarded with exactly one SendSm.
// In process: the read finishes, RdmaRdCompl, then SendSm for the rest, and
// MSeqAck stays below the cancel's MSeq until then.
TEST(SdpEngineReadZcopy, SrcAvailCancel) {
    Bytes source = pattern(100000, 9);
    {
        ZPair p;
        p.inject(w::SrcAvail{.len = 100000, .stag = 77, .va = 0, .payload = {1}});
        p.inject(w::SrcAvailCancel{});
        EXPECT_EQ(sent_with(p.qb.sent_log, w::Mid::send_sm).size(), 1u);
        EXPECT_EQ(p.b.zcopy_readable(), 0u);
        p.inject(w::SrcAvailCancel{});  // all Processed now: ignored
        EXPECT_EQ(sent_with(p.qb.sent_log, w::Mid::send_sm).size(), 1u);
        EXPECT_EQ(p.b.state(), e::State::established);
    }
    {
        ZPair p;
        // a's QP holds the "source" region the injected SrcAvail names.
        auto region = p.qa.register_region(source, e::Access::remote_read);
        ASSERT_TRUE(region);
        p.inject(w::SrcAvail{
            .len = 100000, .stag = region->stag, .va = region->to, .payload = {source[0]}});
        Bytes out(30000);
        EXPECT_EQ(p.b.zcopy_readable(), 0u) << "the inline byte comes first";
        ASSERT_EQ(p.b.read(std::span(out).first(1)), 1u);
        ASSERT_TRUE(p.b.read_zcopy(out));
        const auto cancel_mseq = p.inject(w::SrcAvailCancel{});
        p.inject(w::SrcAvailCancel{});  // a second one may not raise the hold
        // Other messages meanwhile keep MSeqAck below the cancel.
        ASSERT_EQ(p.b.write(pattern(100, 1)), 100u);
        ASSERT_FALSE(p.qb.outbound.empty());
        for (const auto& pk : p.qb.outbound)
            EXPECT_LT(decoded(pk).mseq_ack, cancel_mseq);
        p.qb.outbound.clear();
        ASSERT_TRUE(p.serve_read(p.qb, p.qa, p.b));
        EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(30000));
        EXPECT_TRUE(std::equal(out.begin(), out.end(), source.begin() + 1));
        const auto& log = p.qb.sent_log;
        ASSERT_GE(log.size(), 2u);
        EXPECT_EQ(w::mid_of(decoded(log[log.size() - 2]).body), w::Mid::rdma_rd_compl);
        EXPECT_EQ(w::mid_of(decoded(log.back()).body), w::Mid::send_sm);
        EXPECT_GE(decoded(log.back()).mseq_ack, cancel_mseq);
        EXPECT_EQ(p.b.state(), e::State::established);
    }
}

// 9.5.4 from the Data Source: a zero-copy write given up (io_timeout) is
// revoked with SrcAvailCancel and stays lent until the peer answers (here
// SendSm: it had not begun reading). The write then counts the inline bytes
// only; the rest is not sent, and the stream goes on after them.
TEST(SdpEngineReadZcopy, Section9_5_4_RevokedBeforeAnyReadCountsTheInlineBytes) {
    ZPair p;
    const Bytes data = pattern(1 << 20, 3);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    const auto avail = sent_with(p.qa.sent_log, w::Mid::src_avail);
    ASSERT_EQ(avail.size(), 1u);
    const std::size_t inline_n = std::get<w::SrcAvail>(decoded(avail[0]).body).payload.size();
    ASSERT_GT(inline_n, 0u);
    p.a.revoke_zcopy_write();
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail_cancel).size(), 1u);
    EXPECT_TRUE(p.a.zcopy_write_pending()) << "lent until the peer answers";
    EXPECT_FALSE(p.qa.regions.empty()) << "the peer may be reading it";
    p.a.revoke_zcopy_write();  // once
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail_cancel).size(), 1u);
    p.run();
    EXPECT_EQ(sent_with(p.qb.sent_log, w::Mid::send_sm).size(), 1u);
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_TRUE(p.qa.regions.empty());
    EXPECT_EQ(p.a.take_zcopy_write_count(data.size()), inline_n);
    EXPECT_EQ(p.a.take_zcopy_write_count(data.size()), data.size()) << "taken once";
    EXPECT_EQ(p.a.stats().src_avail_cancel_sent, 1u);
    const Bytes tail = pattern(1000, 4);
    EXPECT_EQ(p.a.write(tail), tail.size());
    Bytes got;
    p.drain_b(got, 1 << 20);
    Bytes want(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(inline_n));
    want.insert(want.end(), tail.begin(), tail.end());
    EXPECT_EQ(got, want);
    EXPECT_EQ(p.a.state(), e::State::established);
    EXPECT_EQ(p.b.state(), e::State::established);
    EXPECT_TRUE(p.faults.empty());
}

// One SrcAvailCancel per advertisement: a suspend (13.1.1) cancelled it
// already, so the revocation that follows sends no second one.
TEST(SdpEngineReadZcopy, Section9_5_4_OneCancelWhenASuspendCancelledFirst) {
    ZPair p;
    const Bytes data = pattern(1 << 20, 9);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run_to_b();
    ASSERT_TRUE(p.a.suspend(4000));
    ASSERT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail_cancel).size(), 1u) << "the suspend's";
    p.a.revoke_zcopy_write();
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail_cancel).size(), 1u);
    EXPECT_EQ(p.a.stats().src_avail_cancel_sent, 1u);
    EXPECT_TRUE(p.a.zcopy_write_pending()) << "lent until the peer answers";
}

// 9.5.4: the cancel meets an RDMA Read in process; the Data Sink finishes
// it, sends its RdmaRdCompl and then SendSm for the rest. The revoked write
// counts the inline bytes and the bytes read.
TEST(SdpEngineReadZcopy, Section9_5_4_RevokedDuringAReadCountsWhatWasRead) {
    ZPair p;
    const Bytes data = pattern(1 << 20, 5);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    Bytes got(data.size());
    const std::size_t inline_n = p.b.read(got);
    ASSERT_GT(inline_n, 0u);
    ASSERT_TRUE(p.b.read_zcopy(std::span(got).subspan(inline_n, 30000)));
    p.a.revoke_zcopy_write();  // crosses the Read Request
    p.run();
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(30000));
    EXPECT_FALSE(p.a.zcopy_write_pending());
    const std::size_t n = p.a.take_zcopy_write_count(data.size());
    EXPECT_EQ(n, inline_n + 30000);
    got.resize(inline_n + 30000);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
    const Bytes tail = pattern(5000, 6);
    EXPECT_EQ(p.a.write(tail), tail.size());
    Bytes more;
    p.drain_b(more, 1 << 20);
    EXPECT_EQ(more, tail) << "nothing of the revoked rest";
    EXPECT_TRUE(p.faults.empty()) << "the region stayed valid for the read in process";
    EXPECT_EQ(p.a.state(), e::State::established);
}

// A revocation after the peer forced Bcopy (SendSm, 9.5.2.1): what was fed
// into the send queue is the stream's, the rest is not fed.
TEST(SdpEngineReadZcopy, Section9_5_4_RevokedAfterSendSmKeepsWhatWasQueued) {
    auto ca = zcopy_config();
    ca.send_queue_limit = 64 * 1024;
    ZPair p(ca);
    const Bytes data = pattern(1 << 20, 7);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    Bytes got(p.b.readable());  // the inline bytes
    ASSERT_EQ(p.b.read(got), got.size());
    Bytes small(1000);
    ASSERT_FALSE(p.b.read_zcopy(small));  // SendSm: the rest by Bcopy
    ASSERT_EQ(sent_with(p.qb.sent_log, w::Mid::send_sm).size(), 1u);
    p.run();  // b reads nothing more: a's queue fills
    ASSERT_TRUE(p.a.zcopy_write_pending()) << "the rest is fed as the queue drains";
    p.a.revoke_zcopy_write();
    EXPECT_FALSE(p.a.zcopy_write_pending());
    EXPECT_EQ(sent_with(p.qa.sent_log, w::Mid::src_avail_cancel).size(), 0u);
    const std::size_t n = p.a.take_zcopy_write_count(data.size());
    EXPECT_GT(n, 64u * 1024 / 2);
    EXPECT_LT(n, data.size());
    p.drain_b(got, 1000);  // what was queued, nothing after it
    EXPECT_EQ(got.size(), n);
    const Bytes tail = pattern(3000, 8);
    EXPECT_EQ(p.a.write(tail), tail.size());
    p.drain_b(got, 1000);
    Bytes want(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
    want.insert(want.end(), tail.begin(), tail.end());
    EXPECT_EQ(got, want);
}

// A differential test: the same random writes and reads on a Bcopy-only
// pair and on a zero-copy pair deliver the same bytes in the same order.
// The zero-copy reader also lends large buffers with SinkAvail (Write
// Zcopy, 9.3) and sometimes cancels them (9.5.5).
TEST(SdpEngineReadZcopy, RandomWorkloadMatchesBcopy) {
    std::uint64_t written_into_sinks = 0, sinks_stale = 0;
    for (std::uint32_t seed = 1; seed <= 6; ++seed) {
        std::mt19937 rng(seed);
        std::vector<Bytes> writes;
        std::size_t total = 0;
        while (total < (3u << 20)) {
            const std::size_t n = rng() % 4 == 0 ? 1 + rng() % 4000 : 1 + rng() % (1 << 20);
            writes.push_back(pattern(n, rng()));
            total += n;
        }
        Bytes expect;
        for (const auto& wb : writes)
            expect.insert(expect.end(), wb.begin(), wb.end());
        for (const bool zcopy : {false, true}) {
            ZPair p(zcopy_config(zcopy ? 16384 : 0), zcopy_config(zcopy ? 16384 : 0));
            std::mt19937 r2(seed * 7);
            Bytes got, sink;
            bool sinking = false;
            std::size_t wi = 0, woff = 0;
            for (int round = 0; round < 200000 && got.size() < expect.size(); ++round) {
                // The writer pauses now and then, so the reader catches up
                // and (zero copy) lends its next buffer before data comes.
                if (wi < writes.size() && !p.a.zcopy_write_pending() && r2() % 3 != 0) {
                    const Bytes& cur = writes[wi];
                    if (woff == 0 && p.a.write_zcopy(cur)) {
                        ++wi;
                    } else {
                        woff += p.a.write(std::span(cur).subspan(woff));
                        if (woff == cur.size()) {
                            ++wi;
                            woff = 0;
                        }
                    }
                }
                p.run();
                if (sinking) {
                    if (p.b.sink_pending()) {
                        if (r2() % 16 == 0)
                            p.b.cancel_sink();
                        continue;
                    }
                    sinking = false;
                    const std::size_t n = p.b.take_zcopy_read().value_or(0);
                    got.insert(got.end(), sink.begin(),
                               sink.begin() + static_cast<std::ptrdiff_t>(n));
                    continue;
                }
                const std::size_t sz = 1 + r2() % (1 << 20);
                if (zcopy && r2() % 4 != 0 && p.b.readable() == 0) {
                    sink.resize(sz);
                    if (p.b.post_sink(sink)) {
                        sinking = true;
                        if (r2() % 4 != 0)
                            p.run();  // the SinkAvail reaches the writer first
                        continue;
                    }
                }
                if (p.b.zcopy_readable() > 0) {
                    const std::size_t at = got.size();
                    got.resize(at + sz);
                    if (p.b.read_zcopy(std::span(got).subspan(at))) {
                        p.run();
                        got.resize(at + p.b.take_zcopy_read().value_or(0));
                    } else {
                        got.resize(at);
                    }
                } else {
                    Bytes buf(sz);
                    const std::size_t n = p.b.read(buf);
                    got.insert(got.end(), buf.begin(),
                               buf.begin() + static_cast<std::ptrdiff_t>(n));
                }
            }
            ASSERT_EQ(got.size(), expect.size()) << "seed " << seed << " zcopy " << zcopy;
            EXPECT_TRUE(got == expect) << "seed " << seed << " zcopy " << zcopy;
            EXPECT_TRUE(p.faults.empty());
            EXPECT_EQ(p.a.state(), e::State::established);
            EXPECT_EQ(p.b.state(), e::State::established);
            if (zcopy)
                EXPECT_GT(p.b.stats().zcopy_bytes_received, 0u);
            else
                EXPECT_EQ(p.b.stats().zcopy_bytes_received, 0u);
            written_into_sinks += p.b.stats().sink_bytes_received;
            sinks_stale += p.a.stats().sink_avail_stale;
            EXPECT_EQ(p.b.stats().sink_bytes_received, p.a.stats().rdma_write_bytes);
            EXPECT_TRUE(p.qa.regions.empty());
            EXPECT_TRUE(p.qb.regions.empty());
        }
    }
    EXPECT_GT(written_into_sinks, 0u) << "Write Zcopy exercised";
    RecordProperty("bytes_written_into_sinks", std::to_string(written_into_sinks));
    RecordProperty("stale_sink_avails", std::to_string(sinks_stale));
}

// 9.5.2.1 with a large buffer: after SendSm the rest is fed into the send
// queue as it has room (no copy of the whole remainder at once), and the
// buffer stays lent until all of it is queued.
TEST(SdpEngineReadZcopy, SendSmRestIsFedWithinTheSendQueueLimit) {
    e::Config ca = zcopy_config();
    ca.send_queue_limit = 64 * 1024;
    ZPair p(ca, zcopy_config(0));  // the sink forces Bcopy
    const Bytes data = pattern(4 << 20, 11);
    ASSERT_TRUE(p.a.write_zcopy(data));
    Bytes got, buf(100000);
    std::size_t max_queued = 0;
    for (int i = 0; i < 100000 && got.size() < data.size(); ++i) {
        p.step();
        max_queued = std::max(max_queued, p.a.send_queued());
        const std::size_t n = p.b.read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    EXPECT_EQ(got, data);
    EXPECT_LE(max_queued, ca.send_queue_limit);
    EXPECT_FALSE(p.a.zcopy_write_pending());
}

// A reader that closes, or a writer that advertises while the peer's
// SrcAvail waits for a reader (9.2's deadlock from this side): the peer's
// advertisement is declined with SendSm.
TEST(SdpEngineReadZcopy, DeclinedAdvertisements) {
    {
        ZPair p;
        const Bytes lent3 = pattern(100000, 1);  // lent until done
        ASSERT_TRUE(p.a.write_zcopy(lent3));
        p.run();
        ASSERT_GT(p.b.zcopy_readable() + p.b.readable(), 0u);
        p.b.decline_zcopy();
        p.run();
        EXPECT_EQ(p.b.stats().send_sm_sent, 1u);
        EXPECT_FALSE(p.a.zcopy_write_pending());
    }
    {
        ZPair p;
        const Bytes lent4 = pattern(100000, 2);  // lent until done
        ASSERT_TRUE(p.a.write_zcopy(lent4));
        p.run_to_b();                            // b holds a's SrcAvail, no reader
        const Bytes lent5 = pattern(100000, 3);  // lent until done
        ASSERT_TRUE(p.b.write_zcopy(lent5));
        EXPECT_EQ(p.b.stats().send_sm_sent, 1u);
    }
}

// Section 10 rule 5 / 9.5.1: the Data Sink's threshold is at least its
// private buffer size: a reader buffer smaller than that (and than the rest)
// gets Bcopy even when it is above the configured threshold.
TEST(SdpEngineReadZcopy, SinkThresholdAtLeastThePrivateBufferSize) {
    e::Config cb = zcopy_config(1024);
    cb.recv_buf_size = 16384;
    ZPair p(zcopy_config(1024), cb);
    const Bytes lent6 = pattern(100000, 4);  // lent until done
    ASSERT_TRUE(p.a.write_zcopy(lent6));
    p.run();
    Bytes first(64), out(8192);
    ASSERT_EQ(p.b.read(first), 64u);
    EXPECT_FALSE(p.b.read_zcopy(out));
    EXPECT_EQ(p.b.stats().send_sm_sent, 1u);
}

// Bytes a finished RDMA Read placed stay the reader's even when the
// connection closes gracefully before it takes them (a race seen in the
// both-ways stream test).
TEST(SdpEngineReadZcopy, PlacedBytesSurviveAGracefulClose) {
    ZPair p;
    const Bytes data = pattern(100000, 12);
    ASSERT_TRUE(p.a.write_zcopy(data));
    p.run();
    Bytes got(data.size());
    ASSERT_EQ(p.b.read(got), 64u);
    ASSERT_TRUE(p.b.read_zcopy(std::span(got).subspan(64)));
    p.run();
    p.a.shutdown_write();
    p.b.shutdown_write();
    p.run();
    ASSERT_EQ(p.b.state(), e::State::closed);
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(data.size() - 64));
    EXPECT_EQ(got, data);
    EXPECT_TRUE(p.b.eof());
}
