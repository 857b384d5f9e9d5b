// SPDX-License-Identifier: Apache-2.0
// EngineAdapter (the SDP engine on a verbs QueuePair) checked without a
// device: two adapters on the soft provider's QpEngines joined back to back.
// The same adapter runs on the rdma-core QP in production, so this covers
// the slot accounting, deferred posting, the Hello/HelloAck order, data,
// graceful teardown and the loss of the QP.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "sdp/iwarp/qp.hpp"
#include "sdp/rdma/adapter.hpp"
#include "sdp/rdma/translate.hpp"

namespace {

using sdp::engine::Role;
using sdp::engine::State;
using sdp::iwarp::QpEngine;
using sdp::rdma::EngineAdapter;

sdp::iwarp::QpConfig qp_config() {
    sdp::iwarp::QpConfig c;
    c.role = sdp::iwarp::MpaRole::initiator;  // neither side holds its first FPDU
    c.crc = false;
    c.mss = 1460;
    return c;
}

sdp::engine::Config engine_config() {
    sdp::engine::Config c;
    c.recv_buf_size = 4096;
    c.send_buf_size = 4096;
    c.recv_buf_count = 6;
    return c;
}

struct Harness {
    QpEngine qa{qp_config()};
    QpEngine qb{qp_config()};
    EngineAdapter a;
    EngineAdapter b;

    explicit Harness(std::uint32_t send_slots = 2)
        : a(Role::connecting, engine_config(), send_slots),
          b(Role::accepting, engine_config(), send_slots) {}

    // Moves FPDUs and completions until nothing moves.
    void pump() {
        for (int i = 0; i < 100000; ++i) {
            bool moved = a.progress();
            moved = b.progress() || moved;
            auto oa = qa.take_output();
            if (!oa.empty()) {
                qb.on_bytes(oa);
                moved = true;
            }
            auto ob = qb.take_output();
            if (!ob.empty()) {
                qa.on_bytes(ob);
                moved = true;
            }
            if (!moved) {
                return;
            }
        }
        FAIL() << "pump did not settle";
    }

    void establish() {
        ASSERT_FALSE(a.attach(qa));
        ASSERT_FALSE(b.attach(qb));
        const auto hello = a.sdp().connect();
        ASSERT_LE(hello.size(), sdp::rdma::kMaxPrivateData);
        a.progress();  // receive buffers posted before the Hello leaves
        ASSERT_EQ(b.sdp().accept(hello), sdp::engine::Error::none);
        b.progress();
        // ESTABLISHED on both sides: sends may go.
        a.set_can_send();
        b.set_can_send();
        pump();
        ASSERT_EQ(a.sdp().state(), State::established);
        ASSERT_EQ(b.sdp().state(), State::established);
    }
};

TEST(RdmaEngineAdapter, HelloAckIsHeldUntilTheQpCanSend) {
    Harness h;
    ASSERT_FALSE(h.a.attach(h.qa));
    ASSERT_FALSE(h.b.attach(h.qb));
    const auto hello = h.a.sdp().connect();
    h.a.progress();
    ASSERT_EQ(h.b.sdp().accept(hello), sdp::engine::Error::none);
    h.b.progress();
    // Before rdma_accept completes nothing may be posted to the send queue.
    EXPECT_FALSE(h.b.sends_drained());
    EXPECT_TRUE(h.qb.take_output().empty());
    h.a.set_can_send();
    h.b.set_can_send();
    h.pump();
    EXPECT_TRUE(h.b.sends_drained());
    EXPECT_EQ(h.a.sdp().state(), State::established);
}

TEST(RdmaEngineAdapter, MovesDataThroughFewSendSlots) {
    Harness h(1);  // one slot: every further message waits for a completion
    h.establish();
    std::vector<std::uint8_t> data(300 * 1000);
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<std::uint8_t>(i * 13 + (i >> 10));
    }
    std::vector<std::uint8_t> got;
    std::size_t off = 0;
    std::vector<std::uint8_t> buf(5000);
    for (int round = 0; round < 10000 && got.size() < data.size(); ++round) {
        off += h.a.sdp().write(std::span(data).subspan(off));
        h.pump();
        while (std::size_t n = h.b.sdp().read(buf)) {
            got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(n));
        }
        h.pump();
    }
    EXPECT_EQ(got, data);
    EXPECT_FALSE(h.a.broken());
    EXPECT_FALSE(h.b.broken());
    EXPECT_TRUE(h.a.sends_drained());
    EXPECT_EQ(h.a.big_sends(), 0u);
}

TEST(RdmaEngineAdapter, GracefulTeardown) {
    Harness h;
    h.establish();
    const std::uint8_t msg[] = {1, 2, 3};
    ASSERT_EQ(h.a.sdp().write(msg), 3u);
    h.a.sdp().shutdown_write();
    h.pump();
    std::uint8_t buf[8];
    EXPECT_EQ(h.b.sdp().read(buf), 3u);
    EXPECT_TRUE(h.b.sdp().eof());
    h.b.sdp().shutdown_write();
    h.pump();
    // Both DisConns crossed: the engines ask for a graceful LLP teardown,
    // which the connection manager does once the sends drained.
    EXPECT_EQ(h.a.teardown(), EngineAdapter::Teardown::graceful);
    EXPECT_EQ(h.b.teardown(), EngineAdapter::Teardown::graceful);
    EXPECT_TRUE(h.a.sends_drained());
    EXPECT_TRUE(h.b.sends_drained());
    // rdma_disconnect -> DISCONNECTED on both sides.
    h.qa.on_llp_closed();
    h.qb.on_llp_closed();
    h.a.llp_closed();
    h.b.llp_closed();
    EXPECT_EQ(h.a.sdp().state(), State::closed);
    EXPECT_EQ(h.b.sdp().state(), State::closed);
}

// What RdmaSession's graceful teardown waits for (8.2.1, 6.1.6): a side
// may start the LLP teardown once the peer's MSeqAck covers its last
// message. The first closer learns it from the peer's DisConn; the second
// closer's DisConn is acknowledged by nobody, so it waits for the first
// closer's teardown instead of resetting the connection under its own
// last bytes.
TEST(RdmaEngineAdapter, OnlyTheFirstCloserHasItsDisConnAcknowledged) {
    Harness h;
    h.establish();
    std::vector<std::uint8_t> data(20000, 7);
    ASSERT_EQ(h.a.sdp().write(data), data.size());
    h.a.sdp().shutdown_write();  // a closes first
    h.pump();
    EXPECT_FALSE(h.a.sdp().all_acked());
    std::vector<std::uint8_t> buf(data.size() + 1);
    std::size_t got = 0;
    for (int i = 0; i < 100 && got < data.size(); ++i) {
        got += h.b.sdp().read(std::span(buf).subspan(got));
        h.pump();
    }
    ASSERT_EQ(got, data.size());
    ASSERT_TRUE(h.b.sdp().eof());
    const std::uint8_t tail[] = {1, 2, 3};
    ASSERT_EQ(h.b.sdp().write(tail), 3u);  // b still sends, then closes
    h.b.sdp().shutdown_write();
    h.pump();
    EXPECT_EQ(h.a.sdp().read(buf), 3u);
    EXPECT_TRUE(h.a.sdp().eof());
    EXPECT_TRUE(h.a.sdp().all_acked());   // b's DisConn acknowledged a's
    EXPECT_FALSE(h.b.sdp().all_acked());  // nothing acknowledges b's DisConn
    EXPECT_LT(h.b.sdp().peer_mseq_ack(), h.b.sdp().next_mseq() - 1);
}

TEST(RdmaEngineAdapter, LostQpResetsTheConnection) {
    Harness h;
    h.establish();
    // The LLP breaks under b: its QP flushes; the adapter sees the error.
    h.qb.on_llp_closed();
    h.b.progress();
    EXPECT_TRUE(h.b.broken());
    EXPECT_FALSE(h.b.error_text().empty());
    h.b.llp_closed();
    EXPECT_EQ(h.b.sdp().state(), State::reset);
    EXPECT_TRUE(h.b.llp_reported());
    // Nothing is posted after the loss.
    const std::uint8_t msg[] = {9};
    (void)h.b.sdp().write(msg);
    h.b.progress();
    EXPECT_TRUE(h.qb.take_output().empty());
}

TEST(RdmaEngineAdapter, AbortAsksForAnAbortiveTeardown) {
    Harness h;
    h.establish();
    h.a.sdp().abort();  // no DisConn sent yet: straight to the LLP reset (8.2.2)
    h.pump();
    EXPECT_EQ(h.a.teardown(), EngineAdapter::Teardown::abortive);
    EXPECT_EQ(h.a.sdp().state(), State::reset);
    // The connection manager moves the QP to error and disconnects; the
    // peer sees its LLP go.
    h.qb.on_llp_closed();
    h.b.progress();
    h.b.llp_closed();
    EXPECT_EQ(h.b.sdp().state(), State::reset);
    EXPECT_EQ(h.b.sdp().error(), sdp::engine::Error::llp_lost);
}

TEST(RdmaEngineAdapter, AbortAfterDisConnSendsAbortConnFirst) {
    Harness h;
    h.establish();
    h.a.sdp().shutdown_write();
    h.pump();
    h.a.sdp().abort();  // DisConn sent: AbortConn, then the normal teardown
    h.pump();
    EXPECT_TRUE(h.a.sends_drained());  // the AbortConn left
    EXPECT_EQ(h.b.sdp().state(), State::reset);
    EXPECT_EQ(h.b.sdp().error(), sdp::engine::Error::peer_abort);
}

}  // namespace
