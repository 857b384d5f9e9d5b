// SPDX-License-Identifier: Apache-2.0
// The rdma-core QP (RdmaQueuePair) on an in-memory fake device
// (fake_verbs.hpp): its real ibv_post_send / ibv_post_recv / ibv_poll_cq /
// ibv_req_notify_cq calls, work-request id tracking, regions with tagged
// offsets, error completions and flushes, and the SDP engine adapter on top.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <vector>

#include "fake_verbs.hpp"
#include "sdp/rdma/adapter.hpp"
#include "sdp/rdma/verbs_qp.hpp"

namespace {

using sdp::iwarp::Completion;
using sdp::iwarp::kAccessLocalWrite;
using sdp::iwarp::kAccessRemoteRead;
using sdp::iwarp::kAccessRemoteWrite;
using sdp::iwarp::QpState;
using sdp::iwarp::RecvWr;
using sdp::iwarp::SendWr;
using sdp::iwarp::VerbsError;
using sdp::iwarp::WcOpcode;
using sdp::iwarp::WcStatus;
using sdp::iwarp::WrOpcode;
using sdp::rdma::RdmaQueuePair;

sdp::rdma::QpResources resources(fakeverbs::Pair& p, fakeverbs::Qp& q, std::uint32_t max_send) {
    sdp::rdma::QpResources r;
    r.pd = &p.pd;
    r.qp = &q.qp;
    r.send_cq = &q.scq->cq;
    r.recv_cq = &q.rcq->cq;
    r.max_send_wr = max_send;
    r.max_recv_wr = q.max_recv_wr;
    r.max_inline = 32;
    r.iwarp = true;
    return r;
}

struct RdmaQpOnFakeDevice : testing::Test {
    fakeverbs::Pair dev;
    std::size_t mrs_before = fakeverbs::live_mrs();
    std::unique_ptr<RdmaQueuePair> a;
    std::unique_ptr<RdmaQueuePair> b;

    void SetUp() override {
        dev.a.max_recv_wr = dev.b.max_recv_wr = 64;
        dev.a.max_send_wr = dev.b.max_send_wr = 64;
        a = std::make_unique<RdmaQueuePair>(resources(dev, dev.a, 16));
        b = std::make_unique<RdmaQueuePair>(resources(dev, dev.b, 16));
    }

    std::vector<Completion> poll(RdmaQueuePair& q) {
        std::vector<Completion> out;
        Completion c[4];
        while (std::size_t n = q.poll_cq(c)) {
            out.insert(out.end(), c, c + n);
        }
        return out;
    }
};

TEST_F(RdmaQpOnFakeDevice, SendAndReceive) {
    std::vector<std::uint8_t> src(100), dst(256);
    for (std::size_t i = 0; i < src.size(); ++i) {
        src[i] = static_cast<std::uint8_t>(i + 1);
    }
    auto smr = a->reg_mr(src, 0, 0);
    auto rmr = b->reg_mr(dst, 0, kAccessLocalWrite);
    ASSERT_TRUE(smr && rmr);
    ASSERT_FALSE(b->post_recv(RecvWr{42, dst}));
    SendWr wr;
    wr.wr_id = 7;
    wr.opcode = WrOpcode::send_se;
    wr.data = src;
    ASSERT_FALSE(a->post_send(wr));

    ASSERT_EQ(dev.a.sent.size(), 1u);
    EXPECT_EQ(dev.a.sent[0].opcode, IBV_WR_SEND);
    EXPECT_EQ(dev.a.sent[0].send_flags,
              static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    EXPECT_NE(dev.a.sent[0].wr_id, 7u);  // the QP's own id, not the ULP's

    EXPECT_EQ(poll(*a), (std::vector<Completion>{{7, WcOpcode::send, WcStatus::success, 100}}));
    EXPECT_EQ(poll(*b), (std::vector<Completion>{{42, WcOpcode::recv, WcStatus::success, 100}}));
    EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), src.size()));
    EXPECT_EQ(a->sends_outstanding(), 0u);
    EXPECT_EQ(b->recvs_outstanding(), 0u);
}

TEST_F(RdmaQpOnFakeDevice, UnsignaledSendsAreRetiredByTheNextCompletion) {
    std::vector<std::uint8_t> dst(64);
    ASSERT_TRUE(b->reg_mr(dst, 0, kAccessLocalWrite));
    for (std::uint64_t i = 0; i < 3; ++i) {
        ASSERT_FALSE(b->post_recv(RecvWr{100 + i, std::span(dst).subspan(i * 16, 16)}));
    }
    const std::uint8_t m[] = {1, 2, 3};
    SendWr wr;
    wr.data = m;  // small and unregistered: sent inline
    wr.signaled = false;
    wr.wr_id = 1;
    ASSERT_FALSE(a->post_send(wr));
    wr.wr_id = 2;
    ASSERT_FALSE(a->post_send(wr));
    wr.wr_id = 3;
    wr.signaled = true;
    ASSERT_FALSE(a->post_send(wr));
    EXPECT_EQ(a->sends_outstanding(), 3u);
    EXPECT_EQ(poll(*a), (std::vector<Completion>{{3, WcOpcode::send, WcStatus::success, 3}}));
    EXPECT_EQ(a->sends_outstanding(), 0u);
    EXPECT_EQ(dev.a.sent[0].send_flags, static_cast<unsigned>(IBV_SEND_INLINE));
    auto rc = poll(*b);
    ASSERT_EQ(rc.size(), 3u);
    EXPECT_EQ(rc[2].wr_id, 102u);
}

TEST_F(RdmaQpOnFakeDevice, RegionsAreRequiredWhereVerbsNeedThem) {
    std::vector<std::uint8_t> big(100), buf(64);
    SendWr wr;
    wr.data = big;  // larger than max_inline and not registered
    EXPECT_EQ(a->post_send(wr), VerbsError::invalid_region);
    EXPECT_EQ(a->post_recv(RecvWr{1, buf}), VerbsError::invalid_region);
    ASSERT_TRUE(a->reg_mr(buf, 0, kAccessRemoteRead));  // no local write
    EXPECT_EQ(a->post_recv(RecvWr{1, buf}), VerbsError::invalid_region);
    // A Read sink must be registered with local write.
    auto mr = a->reg_mr(big, 0x5000, kAccessRemoteRead);
    ASSERT_TRUE(mr);
    SendWr rd;
    rd.opcode = WrOpcode::rdma_read;
    rd.local_stag = mr->stag;
    rd.local_to = 0x5000;
    rd.read_length = 10;
    EXPECT_EQ(a->post_send(rd), VerbsError::invalid_region);
    rd.local_stag = 0x9999999;
    EXPECT_EQ(a->post_send(rd), VerbsError::invalid_region);
    EXPECT_EQ(a->state(), QpState::rts);
    EXPECT_EQ(dev.a.sent.size(), 0u);
}

TEST_F(RdmaQpOnFakeDevice, RdmaWriteAndReadUseTaggedOffsets) {
    std::vector<std::uint8_t> remote(4096, 0), local(64), sink(64, 0);
    for (std::size_t i = 0; i < local.size(); ++i) {
        local[i] = static_cast<std::uint8_t>(0xa0 + i);
    }
    // The base asked for is ignored: the iova is the buffer's address.
    auto rmr = b->reg_mr(remote, 0x10000, kAccessRemoteWrite | kAccessRemoteRead);
    ASSERT_TRUE(rmr);
    EXPECT_EQ(rmr->base, reinterpret_cast<std::uintptr_t>(remote.data()));
    ASSERT_TRUE(a->reg_mr(local, 0, 0));
    auto smr = a->reg_mr(sink, 0x700, kAccessLocalWrite);
    ASSERT_TRUE(smr);

    SendWr w;
    w.wr_id = 11;
    w.opcode = WrOpcode::rdma_write;
    w.data = local;
    w.remote_stag = rmr->stag;
    w.remote_to = rmr->base + 0x10;
    ASSERT_FALSE(a->post_send(w));
    EXPECT_EQ(dev.a.sent.back().opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(dev.a.sent.back().wr.rdma.rkey, rmr->stag);
    EXPECT_EQ(dev.a.sent.back().wr.rdma.remote_addr, rmr->base + 0x10);
    EXPECT_EQ(0, std::memcmp(remote.data() + 0x10, local.data(), local.size()));

    SendWr r;
    r.wr_id = 12;
    r.opcode = WrOpcode::rdma_read;
    r.remote_stag = rmr->stag;
    r.remote_to = rmr->base + 0x18;
    r.local_stag = smr->stag;
    r.local_to = smr->base + 8;
    r.read_length = 16;
    ASSERT_FALSE(a->post_send(r));
    EXPECT_EQ(0, std::memcmp(sink.data() + 8, local.data() + 8, 16));
    EXPECT_EQ(poll(*a),
              (std::vector<Completion>{{11, WcOpcode::rdma_write, WcStatus::success, 64},
                                       {12, WcOpcode::rdma_read, WcStatus::success, 16}}));
}

// siw completes an RDMA Read when its Read Response arrives, after Sends
// posted behind it have completed: the send queue's completions are not in
// posting order, and the Read's completion must still be reported (it was
// dropped once, and a zero-copy reader waited for ever).
TEST_F(RdmaQpOnFakeDevice, ReadCompletesAfterALaterSend) {
    std::vector<std::uint8_t> remote(256, 0x5a), sink(256, 0), dst(64);
    auto rmr = b->reg_mr(remote, 0, kAccessRemoteRead);
    auto smr = a->reg_mr(sink, 0, kAccessLocalWrite);
    ASSERT_TRUE(rmr && smr);
    ASSERT_TRUE(b->reg_mr(dst, 0, kAccessLocalWrite));
    ASSERT_FALSE(b->post_recv(RecvWr{100, dst}));
    dev.a.hold_reads = true;
    SendWr r;
    r.wr_id = 21;
    r.opcode = WrOpcode::rdma_read;
    r.remote_stag = rmr->stag;
    r.remote_to = rmr->base;
    r.local_stag = smr->stag;
    r.local_to = smr->base;
    r.read_length = 128;
    ASSERT_FALSE(a->post_send(r));
    const std::uint8_t m[] = {1, 2, 3};
    SendWr s;
    s.wr_id = 22;
    s.data = m;
    ASSERT_FALSE(a->post_send(s));
    EXPECT_EQ(poll(*a), (std::vector<Completion>{{22, WcOpcode::send, WcStatus::success, 3}}));
    EXPECT_EQ(a->sends_outstanding(), 1u);
    ASSERT_EQ(fakeverbs::release_reads(dev.a), 1u);
    EXPECT_EQ(poll(*a),
              (std::vector<Completion>{{21, WcOpcode::rdma_read, WcStatus::success, 128}}));
    EXPECT_EQ(a->sends_outstanding(), 0u);
}

TEST_F(RdmaQpOnFakeDevice, AccessErrorCompletesAndFlushes) {
    std::vector<std::uint8_t> remote(64), local(64), rbuf(64);
    auto rmr = b->reg_mr(remote, 0, kAccessRemoteRead);  // no remote write
    ASSERT_TRUE(a->reg_mr(local, 0, 0));
    ASSERT_TRUE(b->reg_mr(rbuf, 0, kAccessLocalWrite));
    ASSERT_FALSE(b->post_recv(RecvWr{55, rbuf}));
    SendWr w;
    w.wr_id = 5;
    w.opcode = WrOpcode::rdma_write;
    w.data = local;
    w.remote_stag = rmr->stag;
    ASSERT_FALSE(a->post_send(w));
    EXPECT_EQ(
        poll(*a),
        (std::vector<Completion>{{5, WcOpcode::rdma_write, WcStatus::remote_access_error, 0}}));
    EXPECT_EQ(a->state(), QpState::error);
    ASSERT_NE(a->last_error_status(), nullptr);
    EXPECT_EQ(*a->last_error_status(), IBV_WC_REM_ACCESS_ERR);
    // The peer's receive is flushed; garbage in the error wc is not used.
    EXPECT_EQ(poll(*b),
              (std::vector<Completion>{{55, WcOpcode::recv, WcStatus::wr_flush_error, 0}}));
    EXPECT_EQ(b->state(), QpState::error);
    EXPECT_EQ(a->post_send(w), VerbsError::qp_error);
    EXPECT_EQ(b->post_recv(RecvWr{56, rbuf}), VerbsError::qp_error);
}

TEST_F(RdmaQpOnFakeDevice, QueueLimits) {
    auto q = std::make_unique<RdmaQueuePair>(resources(dev, dev.a, 2));
    std::vector<std::uint8_t> dst(64);
    ASSERT_TRUE(b->reg_mr(dst, 0, kAccessLocalWrite));
    for (std::uint64_t i = 0; i < 4; ++i) {
        ASSERT_FALSE(b->post_recv(RecvWr{i, std::span(dst).subspan(i * 16, 16)}));
    }
    const std::uint8_t m[] = {1};
    SendWr wr;
    wr.data = m;
    ASSERT_FALSE(q->post_send(wr));
    ASSERT_FALSE(q->post_send(wr));
    EXPECT_EQ(q->post_send(wr), VerbsError::queue_full);
    EXPECT_EQ(poll(*q).size(), 2u);
    EXPECT_FALSE(q->post_send(wr));
    // The device's own limit (ENOMEM) is queue_full too.
    dev.b.max_recv_wr = 0;
    EXPECT_EQ(b->post_recv(RecvWr{9, std::span(dst).subspan(0, 16)}), VerbsError::queue_full);
    EXPECT_EQ(b->state(), QpState::rts);
}

TEST_F(RdmaQpOnFakeDevice, ToErrorFlushesReceives) {
    std::vector<std::uint8_t> dst(64);
    ASSERT_TRUE(b->reg_mr(dst, 0, kAccessLocalWrite));
    ASSERT_FALSE(b->post_recv(RecvWr{1, std::span(dst).subspan(0, 32)}));
    ASSERT_FALSE(b->post_recv(RecvWr{2, std::span(dst).subspan(32, 32)}));
    b->to_error();
    EXPECT_EQ(poll(*b),
              (std::vector<Completion>{{1, WcOpcode::recv, WcStatus::wr_flush_error, 0},
                                       {2, WcOpcode::recv, WcStatus::wr_flush_error, 0}}));
    EXPECT_EQ(b->state(), QpState::error);
}

TEST_F(RdmaQpOnFakeDevice, SolicitedOnlyArming) {
    std::vector<std::uint8_t> dst(64);
    ASSERT_TRUE(b->reg_mr(dst, 0, kAccessLocalWrite));
    ASSERT_FALSE(b->post_recv(RecvWr{1, std::span(dst).subspan(0, 32)}));
    ASSERT_FALSE(b->post_recv(RecvWr{2, std::span(dst).subspan(32, 32)}));
    ASSERT_TRUE(b->arm(true));
    EXPECT_EQ(dev.b.rcq->armed, 1);
    EXPECT_EQ(dev.b.scq->armed, 0);  // send completions always wake
    const std::uint8_t m[] = {1};
    SendWr wr;
    wr.data = m;
    ASSERT_FALSE(a->post_send(wr));  // plain Send: no event
    EXPECT_EQ(dev.b.rcq->events, 0);
    wr.opcode = WrOpcode::send_se;
    ASSERT_FALSE(a->post_send(wr));  // Send with SE: event
    EXPECT_EQ(dev.b.rcq->events, 1);
    ASSERT_TRUE(b->arm(false));
    EXPECT_EQ(dev.b.rcq->armed, 0);
}

TEST_F(RdmaQpOnFakeDevice, RegionsAreDeregistered) {
    std::vector<std::uint8_t> m1(64), m2(64);
    auto r1 = a->reg_mr(m1, 0, kAccessLocalWrite);
    auto r2 = a->reg_mr(m2, 0, kAccessRemoteWrite);
    ASSERT_TRUE(r1 && r2);
    EXPECT_NE(r1->stag, r2->stag);
    EXPECT_EQ(fakeverbs::live_mrs(), mrs_before + 2);
    EXPECT_TRUE(a->dereg_mr(r1->stag));
    EXPECT_FALSE(a->dereg_mr(r1->stag));
    EXPECT_EQ(a->post_recv(RecvWr{1, m1}), VerbsError::invalid_region);
    EXPECT_FALSE(a->post_recv(RecvWr{1, m2}));
    EXPECT_FALSE(a->reg_mr({}, 0, 0));  // empty regions are refused
    a.reset();                          // the destructor deregisters what is left
    EXPECT_EQ(fakeverbs::live_mrs(), mrs_before);
}

// Registration as on a real kernel: the fake refuses an iova whose offset in
// the page differs from the buffer's (EINVAL, as ib_umem does), so a buffer
// that is not page aligned registers only with iova = its address.
TEST_F(RdmaQpOnFakeDevice, UnalignedBuffersRegisterWithTheirAddressAsIova) {
    std::vector<std::uint8_t> mem(5000);
    for (std::size_t off : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{123}}) {
        std::span<std::uint8_t> s(mem.data() + off, 4000);
        auto mr = a->reg_mr(s, 0, kAccessLocalWrite);
        ASSERT_TRUE(mr) << off << ": " << a->reg_error_text();
        EXPECT_EQ(mr->base, reinterpret_cast<std::uintptr_t>(s.data()));
        EXPECT_TRUE(a->dereg_mr(mr->stag));
    }
}

TEST_F(RdmaQpOnFakeDevice, LockLimitFailureIsExplained) {
    std::vector<std::uint8_t> mem(64);
    fakeverbs::fail_next_reg = ENOMEM;
    auto mr = a->reg_mr(mem, 0, kAccessLocalWrite);
    ASSERT_FALSE(mr);
    EXPECT_EQ(mr.error(), VerbsError::invalid_region);
    EXPECT_NE(a->reg_error_text().find("ibv_reg_mr of 64 bytes failed"), std::string::npos)
        << a->reg_error_text();
    // The next registration works again.
    EXPECT_TRUE(a->reg_mr(mem, 0, kAccessLocalWrite));
}

// The SDP engine through EngineAdapter on two RdmaQueuePairs: a connected
// pair (Hello/HelloAck exchanged) and a pump that moves work until idle.
struct SdpOnFakeDevice : RdmaQpOnFakeDevice {
    std::unique_ptr<sdp::rdma::EngineAdapter> ca;
    std::unique_ptr<sdp::rdma::EngineAdapter> sa;

    // 2 KiB private buffers; zero copy above `threshold` (0: Bcopy only).
    static sdp::engine::Config small_buffers(std::size_t threshold) {
        sdp::engine::Config cfg;
        cfg.recv_buf_size = 2048;
        cfg.send_buf_size = 2048;
        cfg.recv_buf_count = 8;
        cfg.bcopy_threshold = threshold;
        return cfg;
    }
    void connect(const sdp::engine::Config& cfg) {
        using sdp::engine::Role;
        ca = std::make_unique<sdp::rdma::EngineAdapter>(Role::connecting, cfg, 4);
        sa = std::make_unique<sdp::rdma::EngineAdapter>(Role::accepting, cfg, 4);
        ASSERT_FALSE(ca->attach(*a));
        ASSERT_FALSE(sa->attach(*b));
        const auto hello = ca->sdp().connect();
        ca->progress();
        ASSERT_EQ(sa->sdp().accept(hello), sdp::engine::Error::none);
        sa->progress();
        ca->set_can_send();
        sa->set_can_send();
        pump();
        ASSERT_EQ(ca->sdp().state(), sdp::engine::State::established);
        ASSERT_EQ(sa->sdp().state(), sdp::engine::State::established);
    }
    void pump() {
        for (int i = 0; i < 100000; ++i) {
            const bool moved = ca->progress() | sa->progress();
            if (!moved) {
                return;
            }
        }
    }
    void close_both() {
        using sdp::engine::State;
        ca->sdp().shutdown_write();
        pump();
        EXPECT_TRUE(sa->sdp().eof());
        sa->sdp().shutdown_write();
        pump();
        EXPECT_EQ(ca->teardown(), sdp::rdma::EngineAdapter::Teardown::graceful);
        EXPECT_TRUE(ca->sends_drained());
        ca->llp_closed();
        sa->llp_closed();
        EXPECT_EQ(ca->sdp().state(), State::closed);
        EXPECT_EQ(sa->sdp().state(), State::closed);
    }
    // Read Zcopy of `data` (a SrcAvail from ca) with sa's RDMA Read posted
    // into `buf` and its completion held back (as siw: until the Read
    // Response arrives); `got` has the Combined Mode inline bytes.
    void start_held_read(const std::vector<std::uint8_t>& data, std::vector<std::uint8_t>& buf,
                         std::vector<std::uint8_t>& got) {
        connect(small_buffers(4096));
        dev.b.hold_reads = true;
        ASSERT_TRUE(ca->sdp().write_zcopy(data));
        pump();
        got.assign(buf.begin(), buf.begin() + static_cast<long>(sa->sdp().read(buf)));
        ASSERT_GT(sa->sdp().zcopy_readable(), 0u);
        ASSERT_TRUE(sa->sdp().read_zcopy(buf));
        pump();
        ASSERT_TRUE(sa->sdp().zcopy_read_pending());
    }
    // Posted send work requests of `q` with this opcode.
    static std::size_t count_sent(const fakeverbs::Qp& q, ibv_wr_opcode op) {
        std::size_t n = 0;
        for (const auto& w : q.sent) {
            n += w.opcode == op ? 1 : 0;
        }
        return n;
    }
};

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
    std::vector<std::uint8_t> data(n);
    for (std::size_t i = 0; i < n; ++i) {
        data[i] = static_cast<std::uint8_t>((i * seed) ^ (i >> 8));
    }
    return data;
}

TEST_F(SdpOnFakeDevice, BcopyStream) {
    connect(small_buffers(0));
    const auto data = pattern(200 * 1000, 1);
    std::vector<std::uint8_t> got, buf(3000);
    std::size_t off = 0;
    for (int round = 0; round < 10000 && got.size() < data.size(); ++round) {
        off += ca->sdp().write(std::span(data).subspan(off));
        pump();
        while (std::size_t n = sa->sdp().read(buf)) {
            got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(n));
        }
        pump();
    }
    EXPECT_EQ(got, data);
    EXPECT_FALSE(ca->broken());
    EXPECT_FALSE(sa->broken());
    close_both();
}

// Read Zcopy (9.2) on the rdma-core QP: the SrcAvail's buffer registered
// for remote read, pulled by RDMA Read into the reader's registered buffer,
// the RdmaRdCompl as Send with Invalidate of the source's STag, every
// transfer region deregistered afterwards. Then Write Zcopy (9.3): the
// Data Sink (Pipelined after the REQ_PIPE hint of its RdmaRdCompl, 12.3)
// lends its buffer with SinkAvail and the source RDMA-Writes into it.
TEST_F(SdpOnFakeDevice, ZeroCopyBothMechanisms) {
    connect(small_buffers(4096));
    const std::size_t mrs_connected = fakeverbs::live_mrs();

    // Read Zcopy, in three partial reads of the one advertisement.
    const auto data = pattern(96 * 1024, 7);
    ASSERT_TRUE(ca->sdp().write_zcopy(data));
    pump();
    std::vector<std::uint8_t> got;
    std::vector<std::uint8_t> buf(32 * 1024);
    for (int round = 0; round < 100 && got.size() < data.size(); ++round) {
        if (std::size_t n = sa->sdp().read(buf)) {  // the Combined Mode payload
            got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(n));
            continue;
        }
        ASSERT_GT(sa->sdp().zcopy_readable(), 0u);
        ASSERT_TRUE(sa->sdp().read_zcopy(buf));
        pump();
        const auto n = sa->sdp().take_zcopy_read();
        ASSERT_TRUE(n.has_value());
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(*n));
        pump();
    }
    EXPECT_EQ(got, data);
    EXPECT_FALSE(ca->sdp().zcopy_write_pending());
    EXPECT_GE(sa->sdp().stats().zcopy_reads, 3u);
    EXPECT_GE(count_sent(dev.b, IBV_WR_RDMA_READ), 3u);
    // The final RdmaRdCompl invalidated the source's STag remotely.
    EXPECT_EQ(count_sent(dev.b, IBV_WR_SEND_WITH_INV), 1u);
    EXPECT_EQ(fakeverbs::live_mrs(), mrs_connected);

    // Write Zcopy: the source's half went Pipelined on the REQ_PIPE hint.
    ASSERT_GT(ca->sdp().stats().mode_changes_sent, 0u);
    std::vector<std::uint8_t> sink(64 * 1024);
    ASSERT_TRUE(sa->sdp().post_sink(sink));
    pump();
    const auto more = pattern(64 * 1024, 13);
    ASSERT_TRUE(ca->sdp().write_zcopy(more));
    pump();
    EXPECT_FALSE(sa->sdp().sink_pending());
    const auto n = sa->sdp().take_zcopy_read();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, more.size());
    EXPECT_EQ(sink, more);
    EXPECT_GE(count_sent(dev.a, IBV_WR_RDMA_WRITE), 1u);
    EXPECT_GE(sa->sdp().stats().sink_avail_sent, 1u);
    EXPECT_EQ(fakeverbs::live_mrs(), mrs_connected);
    EXPECT_FALSE(ca->broken());
    EXPECT_FALSE(sa->broken());
    close_both();
}

// Read Zcopy with the Read's completion as siw gives it: the reader sends
// Bcopy data the other way after posting its RDMA Read, and that Send
// completes first. The Read must still finish the transfer (the session-11
// VM lab stall: the reader waited for ever, the writer's buffer stayed lent).
TEST_F(SdpOnFakeDevice, ReadZcopyCompletesAfterALaterSend) {
    const auto data = pattern(32 * 1024, 5);
    std::vector<std::uint8_t> buf(data.size()), got;
    ASSERT_NO_FATAL_FAILURE(start_held_read(data, buf, got));
    const auto back = pattern(1000, 11);
    ASSERT_EQ(sa->sdp().write(back), back.size());
    pump();
    std::vector<std::uint8_t> back_got(back.size());
    EXPECT_EQ(ca->sdp().read(back_got), back.size());
    EXPECT_EQ(back_got, back);
    EXPECT_TRUE(sa->sdp().zcopy_read_pending());  // its Response has not come
    ASSERT_EQ(fakeverbs::release_reads(dev.b), 1u);
    pump();
    const auto n = sa->sdp().take_zcopy_read();
    ASSERT_TRUE(n.has_value());
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(*n));
    EXPECT_EQ(got, data);
    EXPECT_FALSE(ca->sdp().zcopy_write_pending());
    EXPECT_FALSE(ca->broken());
    EXPECT_FALSE(sa->broken());
    close_both();
}

// A Read still waiting for its Response when the QP goes to error is
// flushed: the reader's transfer ends (rdma_failed), nothing waits for ever.
TEST_F(SdpOnFakeDevice, HeldReadIsFlushedWhenTheQpFails) {
    const auto data = pattern(32 * 1024, 5);
    std::vector<std::uint8_t> buf(data.size()), got;
    ASSERT_NO_FATAL_FAILURE(start_held_read(data, buf, got));
    b->to_error();
    pump();
    EXPECT_FALSE(sa->sdp().zcopy_read_pending());
    EXPECT_FALSE(sa->sdp().take_zcopy_read().has_value());
    EXPECT_EQ(sa->sdp().state(), sdp::engine::State::reset);
    EXPECT_TRUE(sa->broken());
}

// A stale STag (the source's region invalid under its advertisement) is
// the peer's to refuse (RDMAP Terminate): the RDMA Read completes with an
// error, the reader's connection resets with rdma_failed, nothing crashes.
TEST_F(SdpOnFakeDevice, ReadOfAStaleStagResets) {
    connect(small_buffers(4096));
    const auto data = pattern(64 * 1024, 3);
    ASSERT_TRUE(ca->sdp().write_zcopy(data));
    pump();
    std::vector<std::uint8_t> buf(64 * 1024);
    while (sa->sdp().read(buf) > 0) {
    }
    ASSERT_GT(sa->sdp().zcopy_readable(), 0u);
    ASSERT_EQ(fakeverbs::invalidate_with_access(IBV_ACCESS_REMOTE_READ), 1u);
    ASSERT_TRUE(sa->sdp().read_zcopy(buf));
    pump();
    EXPECT_EQ(sa->sdp().state(), sdp::engine::State::reset);
    EXPECT_EQ(sa->sdp().error(), sdp::engine::Error::rdma_failed);
    EXPECT_FALSE(sa->sdp().take_zcopy_read().has_value());
    EXPECT_TRUE(sa->broken());
}

}  // namespace
