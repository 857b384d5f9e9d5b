// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/qp.hpp"

#include <gtest/gtest.h>
#include <algorithm>

#include <numeric>
#include <random>

#include "iwarp_pair.hpp"

using namespace sdp::iwarp;
using iwarp_test::Bytes;
using iwarp_test::EnginePair;

namespace {

constexpr std::size_t kMss = 1460;

Bytes pattern(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    Bytes b(n);
    for (auto& x : b) {
        x = static_cast<std::uint8_t>(rng());
    }
    return b;
}

struct Mode {
    bool crc;
    bool p2p;
    bool rtr_write;
    bool splits;
};

std::unique_ptr<EnginePair> make_pair(const Mode& m) {
    MpaConfig a;
    a.crc = m.crc;
    a.p2p = m.p2p;
    a.rtr_write = m.rtr_write;
    MpaConfig b;
    b.p2p = m.p2p;
    auto p = EnginePair::connect(a, b, kMss);
    if (p) {
        p->random_splits = m.splits;
    }
    return p;
}

std::vector<std::size_t> sizes() {
    const std::size_t su = max_ulpdu_for_mss(kMss) - kDdpUntaggedHeaderSize;
    const std::size_t tu = max_ulpdu_for_mss(kMss) - kDdpTaggedHeaderSize;
    return {0,  1,      kMss - 1, kMss, kMss + 1, su - 1,
            su, su + 1, tu - 1,   tu,   tu + 1,   std::size_t{1} << 20};
}

// Every FPDU in a stream fits the MSS.
void check_fpdu_sizes(const Bytes& stream, std::size_t skip, bool crc) {
    FpduReceiver rx(crc);
    std::size_t n = 0;
    rx.feed(std::span<const std::uint8_t>(stream).subspan(skip),
            [&](std::span<const std::uint8_t> u) {
                EXPECT_LE(fpdu_size(u.size()), kMss);
                ++n;
                return true;
            });
    EXPECT_FALSE(rx.error());
    EXPECT_TRUE(rx.at_boundary());
}

std::size_t mpa_frame_size(const Bytes& stream) {
    auto d = decode_mpa_frame(stream);
    return d ? d->consumed : 0;
}

class QpTransfer : public testing::TestWithParam<Mode> {};

}  // namespace

TEST_P(QpTransfer, SendsWritesReadsOfEverySize) {
    const Mode m = GetParam();
    auto p = make_pair(m);
    ASSERT_TRUE(p);
    std::uint64_t id = 1;
    for (std::size_t n : sizes()) {
        SCOPED_TRACE(testing::Message() << "size " << n);
        // Send and Send+SE, initiator -> responder and back.
        for (bool se : {false, true}) {
            for (int dir = 0; dir < 2; ++dir) {
                QpEngine& tx = dir == 0 ? *p->ini : *p->res;
                QpEngine& rx = dir == 0 ? *p->res : *p->ini;
                const Bytes data = pattern(n, static_cast<std::uint32_t>(id));
                Bytes buf(n + 7, 0xEE);
                ASSERT_FALSE(rx.post_recv(RecvWr{id, buf}));
                SendWr wr;
                wr.wr_id = id + 1000;
                wr.opcode = se ? WrOpcode::send_se : WrOpcode::send;
                wr.data = data;
                ASSERT_FALSE(tx.post_send(wr));
                p->pump();
                auto rc = rx.poll_all();
                ASSERT_EQ(rc.size(), 1u);
                EXPECT_EQ(rc[0].wr_id, id);
                EXPECT_EQ(rc[0].status, WcStatus::success);
                EXPECT_EQ(rc[0].opcode, WcOpcode::recv);
                EXPECT_EQ(rc[0].byte_len, n);
                EXPECT_EQ(rc[0].solicited, se);
                EXPECT_TRUE(std::equal(data.begin(), data.end(), buf.begin()));
                EXPECT_EQ(buf[n], 0xEE);
                auto sc = tx.poll_all();
                ASSERT_EQ(sc.size(), 1u);
                EXPECT_EQ(sc[0].wr_id, id + 1000);
                EXPECT_EQ(sc[0].opcode, WcOpcode::send);
                EXPECT_EQ(sc[0].byte_len, n);
                ++id;
            }
        }
        // RDMA Write initiator -> responder at an offset into the region.
        {
            Bytes sink(n + 16, 0xEE);
            auto mr = p->res->reg_mr(sink, 0x10000, kAccessRemoteWrite);
            ASSERT_TRUE(mr);
            const Bytes data = pattern(n, static_cast<std::uint32_t>(id));
            SendWr wr;
            wr.wr_id = id;
            wr.opcode = WrOpcode::rdma_write;
            wr.data = data;
            wr.remote_stag = mr->stag;
            wr.remote_to = 0x10000 + 8;
            ASSERT_FALSE(p->ini->post_send(wr));
            p->pump();
            auto sc = p->ini->poll_all();
            ASSERT_EQ(sc.size(), 1u);
            EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_write);
            EXPECT_EQ(sc[0].status, WcStatus::success);
            EXPECT_TRUE(p->res->poll_all().empty());
            EXPECT_TRUE(std::equal(data.begin(), data.end(), sink.begin() + 8));
            EXPECT_EQ(sink[7], 0xEE);
            EXPECT_EQ(sink[8 + n], 0xEE);
            EXPECT_TRUE(p->res->dereg_mr(mr->stag));
            ++id;
        }
        // RDMA Read: responder reads from the initiator's region.
        {
            const Bytes src = pattern(n + 5, static_cast<std::uint32_t>(id));
            Bytes src_copy = src;
            auto smr = p->ini->reg_mr(src_copy, 0x7000'0000'0000ull, kAccessRemoteRead);
            Bytes sink(n + 3, 0xEE);
            auto dmr = p->res->reg_mr(sink, 0, kAccessLocalWrite);
            ASSERT_TRUE(smr && dmr);
            SendWr wr;
            wr.wr_id = id;
            wr.opcode = WrOpcode::rdma_read;
            wr.remote_stag = smr->stag;
            wr.remote_to = 0x7000'0000'0000ull + 5;
            wr.local_stag = dmr->stag;
            wr.local_to = 1;
            wr.read_length = static_cast<std::uint32_t>(n);
            ASSERT_FALSE(p->res->post_send(wr));
            p->pump();
            auto c = p->res->poll_all();
            ASSERT_EQ(c.size(), 1u);
            EXPECT_EQ(c[0].opcode, WcOpcode::rdma_read);
            EXPECT_EQ(c[0].status, WcStatus::success);
            EXPECT_EQ(c[0].byte_len, n);
            EXPECT_TRUE(std::equal(src.begin() + 5, src.end(), sink.begin() + 1));
            EXPECT_EQ(sink[0], 0xEE);
            EXPECT_EQ(sink[n + 1], 0xEE);
            EXPECT_TRUE(p->ini->poll_all().empty());
            ++id;
        }
    }
    EXPECT_EQ(p->ini->state(), QpState::rts);
    EXPECT_EQ(p->res->state(), QpState::rts);
    check_fpdu_sizes(p->ini_to_res, mpa_frame_size(p->ini_to_res), m.crc);
    check_fpdu_sizes(p->res_to_ini, mpa_frame_size(p->res_to_ini), m.crc);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, QpTransfer,
    testing::Values(Mode{false, false, true, false}, Mode{true, false, true, false},
                    Mode{true, true, true, false}, Mode{false, true, false, false},
                    Mode{true, true, false, true}, Mode{false, false, true, true}));

TEST(Qp, ResponderHoldsUntilFirstFpdu) {
    auto p = EnginePair::connect(MpaConfig{}, MpaConfig{}, kMss);
    ASSERT_TRUE(p);
    const Bytes data = {1, 2, 3};
    SendWr wr;
    wr.data = data;
    ASSERT_FALSE(p->res->post_send(wr));
    EXPECT_FALSE(p->res->has_output());
    EXPECT_TRUE(p->res->take_output().empty());
    Bytes buf(8);
    ASSERT_FALSE(p->ini->post_recv(RecvWr{1, buf}));
    ASSERT_FALSE(p->res->post_recv(RecvWr{2, buf}));
    ASSERT_FALSE(p->ini->post_send(wr));
    p->pump();
    EXPECT_EQ(p->ini->poll_all().size(), 2u);
    EXPECT_EQ(p->res->poll_all().size(), 2u);
}

TEST(Qp, P2pRtrLetsResponderSendFirst) {
    for (bool write_rtr : {true, false}) {
        MpaConfig a;
        a.p2p = true;
        a.rtr_write = write_rtr;
        MpaConfig b;
        b.p2p = true;
        auto p = EnginePair::connect(a, b, kMss);
        ASSERT_TRUE(p);
        const Bytes data = {'h', 'e', 'l', 'l', 'o'};
        Bytes buf(8);
        ASSERT_FALSE(p->ini->post_recv(RecvWr{1, buf}));
        SendWr wr;
        wr.data = data;
        ASSERT_FALSE(p->res->post_send(wr));
        EXPECT_TRUE(p->ini->has_output());  // the RTR
        p->pump();
        auto c = p->ini->poll_all();
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].byte_len, 5u);
        EXPECT_EQ(p->res->poll_all().size(), 1u);
        // The RTR itself produced no completion and no error anywhere.
        EXPECT_EQ(p->ini->state(), QpState::rts);
        EXPECT_EQ(p->res->state(), QpState::rts);
    }
}

TEST(Qp, OrdLimitsOutstandingReads) {
    MpaConfig a;
    a.ord = 1;
    MpaConfig b;
    auto p = EnginePair::connect(a, b, kMss);
    ASSERT_TRUE(p);
    ASSERT_EQ(p->ini->max_ulpdu(), max_ulpdu_for_mss(kMss));
    Bytes src = pattern(100, 1);
    auto smr = p->res->reg_mr(src, 0, kAccessRemoteRead);
    Bytes sink(200);
    auto dmr = p->ini->reg_mr(sink, 0, kAccessLocalWrite);
    for (int i = 0; i < 2; ++i) {
        SendWr wr;
        wr.wr_id = static_cast<std::uint64_t>(i);
        wr.opcode = WrOpcode::rdma_read;
        wr.remote_stag = smr->stag;
        wr.local_stag = dmr->stag;
        wr.local_to = static_cast<std::uint64_t>(i) * 100;
        wr.read_length = 100;
        ASSERT_FALSE(p->ini->post_send(wr));
    }
    Bytes first = p->ini->take_output();
    EXPECT_EQ(first.size(), fpdu_size(kDdpUntaggedHeaderSize + kReadRequestSize));
    EXPECT_FALSE(p->ini->has_output());
    p->res->on_bytes(first);
    p->ini->on_bytes(p->res->take_output());
    EXPECT_TRUE(p->ini->has_output());
    p->pump();
    EXPECT_EQ(p->ini->poll_all().size(), 2u);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), sink.begin() + 100));
}

TEST(Qp, PostChecks) {
    QpEngine e(QpConfig{});
    SendWr rd;
    rd.opcode = WrOpcode::rdma_read;
    rd.local_stag = 0x1234;
    rd.read_length = 4;
    EXPECT_EQ(e.post_send(rd), VerbsError::invalid_region);
    Bytes m(4);
    auto mr = e.reg_mr(m, 0, kAccessRemoteRead);
    rd.local_stag = mr->stag;
    EXPECT_EQ(e.post_send(rd), VerbsError::invalid_region);  // no local write
    QpConfig small;
    small.max_recv_wr = 1;
    QpEngine f(small);
    EXPECT_FALSE(f.post_recv(RecvWr{1, m}));
    EXPECT_EQ(f.post_recv(RecvWr{2, m}), VerbsError::queue_full);
}

// STags are drawn at random (RFC 5040 8.2, RDDP security): not sequential,
// never 0 or 1 (RTR), never one still in use, and another seed gives others.
TEST(MrTable, StagsAreUnguessable) {
    std::vector<std::uint8_t> mem(64);
    sdp::iwarp::MrTable a(1), b(2);
    std::vector<std::uint32_t> sa, sb;
    for (int i = 0; i < 1000; ++i) {
        sa.push_back(a.add(mem, 0, sdp::iwarp::kAccessRemoteRead).stag);
        sb.push_back(b.add(mem, 0, sdp::iwarp::kAccessRemoteRead).stag);
    }
    std::size_t near = 0;
    for (std::size_t i = 0; i < sa.size(); ++i) {
        EXPECT_GT(sa[i], 1u);
        if (i > 0 && (sa[i] - sa[i - 1] < 0x1000 || sa[i - 1] - sa[i] < 0x1000))
            ++near;
    }
    EXPECT_LT(near, 5u) << "consecutive STags close together: sequential";
    auto sorted = sa;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "duplicates in use";
    EXPECT_NE(sa, sb);
    // A removed STag is refused afterwards (a stale STag).
    std::uint8_t* where = nullptr;
    ASSERT_TRUE(a.remove(sa[0]));
    EXPECT_EQ(a.check(sa[0], 0, 1, sdp::iwarp::kAccessRemoteRead, &where),
              sdp::iwarp::MrTable::Check::invalid_stag);
}
