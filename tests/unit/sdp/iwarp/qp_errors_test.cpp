// SPDX-License-Identifier: Apache-2.0
// Every protocol error gives the right Terminate (RFC 5040 7 / 5041 7 /
// 5044 8 codes), the QP moves to error and the peer sees the Terminate.
#include <gtest/gtest.h>

#include "sdp/iwarp/qp.hpp"

using namespace sdp::iwarp;
using Bytes = std::vector<std::uint8_t>;

namespace {

struct Expect {
    TermLayer layer;
    std::uint8_t etype;
    std::uint8_t ecode;
    bool ddp_hdr;
    bool rdma_hdr = false;
};

class QpErrors : public testing::Test {
  protected:
    void SetUp() override { make(false); }
    void make(bool crc) {
        QpConfig ci;
        ci.crc = crc;
        QpConfig cr = ci;
        cr.role = MpaRole::responder;
        ini = std::make_unique<QpEngine>(ci);
        res = std::make_unique<QpEngine>(cr);
        crc_ = crc;
    }
    Bytes fpdu(const DdpHeader& h, const Bytes& payload = {}) const {
        Bytes hdr = encode_ddp(h);
        Bytes out;
        append_fpdu(out, hdr, payload, crc_);
        return out;
    }
    static DdpHeader send(std::uint32_t msn = 1, std::uint32_t mo = 0) {
        DdpHeader h;
        h.opcode = static_cast<std::uint8_t>(Opcode::send);
        h.msn = msn;
        h.mo = mo;
        return h;
    }
    static DdpHeader write(std::uint32_t stag, std::uint64_t to) {
        DdpHeader h;
        h.tagged = true;
        h.opcode = static_cast<std::uint8_t>(Opcode::write);
        h.stag = stag;
        h.to = to;
        return h;
    }
    static DdpHeader read_req(std::uint32_t msn = 1) {
        DdpHeader h;
        h.opcode = static_cast<std::uint8_t>(Opcode::read_request);
        h.qn = kQnReadRequest;
        h.msn = msn;
        return h;
    }
    static Bytes rr_body(const ReadRequest& r) {
        Bytes b;
        encode_read_request(b, r);
        return b;
    }

    // Feeds `bytes` to the responder and checks its Terminate and the peer's view.
    void expect_terminate(const Bytes& bytes, const Expect& e) {
        auto r = res->on_bytes(bytes);
        EXPECT_TRUE(r.entered_error);
        EXPECT_EQ(res->state(), QpState::error);
        ASSERT_TRUE(res->terminate_sent());
        const TerminateHeader& t = *res->terminate_sent();
        EXPECT_EQ(t.layer, e.layer);
        EXPECT_EQ(t.etype, e.etype);
        EXPECT_EQ(t.ecode, e.ecode);
        EXPECT_EQ(t.d, e.ddp_hdr);
        EXPECT_EQ(t.m, e.ddp_hdr);
        EXPECT_EQ(t.r, e.rdma_hdr);
        if (e.ddp_hdr) {
            EXPECT_EQ(t.ddp_segment_length, bytes.size() >= 2 ? (bytes[0] << 8 | bytes[1]) : 0);
            ASSERT_GE(bytes.size(), 2 + t.ddp_header.size());
            EXPECT_TRUE(std::equal(t.ddp_header.begin(), t.ddp_header.end(), bytes.begin() + 2));
        }
        // The Terminate goes out even though the QP is in error, and only once.
        Bytes out = res->take_output();
        ASSERT_FALSE(out.empty());
        EXPECT_TRUE(res->take_output().empty());
        // Untagged, QN 2, MSN 1, opcode 7.
        EXPECT_EQ(out[2], 0x41);
        EXPECT_EQ(out[3], 0x47);
        ini->on_bytes(out);
        EXPECT_EQ(ini->state(), QpState::error);
        ASSERT_TRUE(ini->terminate_received());
        EXPECT_EQ(*ini->terminate_received(), t);
        // Later bytes are ignored.
        EXPECT_FALSE(res->on_bytes(fpdu(send())).entered_error);
        EXPECT_TRUE(res->take_output().empty());
    }

    std::unique_ptr<QpEngine> ini;
    std::unique_ptr<QpEngine> res;
    bool crc_ = false;
};

}  // namespace

TEST_F(QpErrors, BadStagOnWrite) {
    expect_terminate(fpdu(write(0xABCD, 0), Bytes{1}),
                     {TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTInvalidStag, true});
}

TEST_F(QpErrors, WriteOutOfBounds) {
    Bytes mem(16);
    auto mr = res->reg_mr(mem, 0x1000, kAccessRemoteWrite);
    expect_terminate(fpdu(write(mr->stag, 0x1000 + 10), Bytes(7, 1)),
                     {TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTBaseBounds, true});
    EXPECT_EQ(mem, Bytes(16, 0));  // nothing placed
}

TEST_F(QpErrors, WriteBelowBase) {
    Bytes mem(16);
    auto mr = res->reg_mr(mem, 0x1000, kAccessRemoteWrite);
    expect_terminate(fpdu(write(mr->stag, 0xFFF), Bytes(1, 1)),
                     {TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTBaseBounds, true});
}

TEST_F(QpErrors, WriteToWrap) {
    Bytes mem(16);
    auto mr = res->reg_mr(mem, 0, kAccessRemoteWrite);
    expect_terminate(fpdu(write(mr->stag, ~std::uint64_t{0}), Bytes(2, 1)),
                     {TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTToWrap, true});
}

TEST_F(QpErrors, WriteWithoutAccess) {
    Bytes mem(16);
    auto mr = res->reg_mr(mem, 0, kAccessRemoteRead | kAccessLocalWrite);
    expect_terminate(
        fpdu(write(mr->stag, 0), Bytes(2, 1)),
        {TermLayer::rdmap, term::kRdmapRemoteProtection, term::kRdmapAccessRights, true});
}

TEST_F(QpErrors, ZeroLengthWriteNeedsNoStag) {
    EXPECT_FALSE(res->on_bytes(fpdu(write(1, 0))).entered_error);
    EXPECT_EQ(res->state(), QpState::rts);
}

TEST_F(QpErrors, MsnGap) {
    Bytes buf(64);
    ASSERT_FALSE(res->post_recv(RecvWr{1, buf}));
    ASSERT_FALSE(res->post_recv(RecvWr{2, buf}));
    expect_terminate(fpdu(send(2), Bytes{1}),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidMsnRange, true});
    auto c = res->poll_all();
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].status, WcStatus::wr_flush_error);
    EXPECT_EQ(c[1].status, WcStatus::wr_flush_error);
}

TEST_F(QpErrors, NoReceiveBuffer) {
    expect_terminate(fpdu(send(), Bytes{1, 2}),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUNoBuffer, true});
}

TEST_F(QpErrors, InvalidQn) {
    DdpHeader h = send();
    h.qn = 5;
    expect_terminate(fpdu(h, Bytes{1}),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidQn, true});
}

TEST_F(QpErrors, InvalidMoAndTooLong) {
    Bytes buf(8);
    ASSERT_FALSE(res->post_recv(RecvWr{1, buf}));
    expect_terminate(fpdu(send(1, 9), Bytes{1}),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidMo, true});
    make(false);
    ASSERT_FALSE(res->post_recv(RecvWr{1, buf}));
    expect_terminate(fpdu(send(1, 4), Bytes(5, 1)),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUTooLong, true});
}

TEST_F(QpErrors, BadDdpVersion) {
    DdpHeader h = send();
    h.ddp_version = 0;
    expect_terminate(fpdu(h, Bytes{1}),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidVersion, true});
    make(false);
    DdpHeader t = write(1, 0);
    t.ddp_version = 2;
    expect_terminate(fpdu(t, Bytes{1}),
                     {TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTInvalidVersion, true});
}

TEST_F(QpErrors, BadRdmapVersion) {
    DdpHeader h = send();
    h.rdmap_version = 0;  // RDMAC version: not what we speak
    expect_terminate(fpdu(h, Bytes{1}), {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                         term::kRdmapInvalidVersion, true});
}

TEST_F(QpErrors, BadOpcode) {
    DdpHeader h = send();
    h.opcode = 9;
    expect_terminate(fpdu(h, Bytes{1}), {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                         term::kRdmapUnexpectedOpcode, true});
    make(false);
    DdpHeader t = write(1, 0);
    t.opcode = static_cast<std::uint8_t>(Opcode::send);  // tagged Send
    expect_terminate(fpdu(t, Bytes{1}), {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                         term::kRdmapUnexpectedOpcode, true});
}

TEST_F(QpErrors, UnexpectedReadResponse) {
    DdpHeader h = write(1, 0);
    h.opcode = static_cast<std::uint8_t>(Opcode::read_response);
    expect_terminate(fpdu(h, Bytes{1}), {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                         term::kRdmapUnexpectedOpcode, true});
}

TEST_F(QpErrors, CrcError) {
    make(true);
    Bytes buf(8);
    ASSERT_FALSE(res->post_recv(RecvWr{1, buf}));
    Bytes b = fpdu(send(), Bytes{1, 2, 3});
    b[b.size() - 5] ^= 1;  // a pad byte: covered by the CRC
    expect_terminate(b, {TermLayer::llp, term::kLlpMpa, term::kMpaCrc, false});
    EXPECT_EQ(buf, Bytes(8, 0));
}

TEST_F(QpErrors, ZeroUlpduLength) {
    expect_terminate(Bytes{0, 0, 0, 0, 0, 0}, {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                               term::kRdmapCatastrophicStream, false});
}

TEST_F(QpErrors, ReadRequestBadSourceStag) {
    ReadRequest r{0x100, 0, 8, 0x999, 0};
    expect_terminate(fpdu(read_req(), rr_body(r)), {TermLayer::rdmap, term::kRdmapRemoteProtection,
                                                    term::kRdmapInvalidStag, true, true});
    EXPECT_EQ(res->terminate_sent()->rdma_header, rr_body(r));
}

TEST_F(QpErrors, ReadRequestBoundsAndAccess) {
    Bytes mem(16);
    auto mr = res->reg_mr(mem, 0, kAccessRemoteRead);
    expect_terminate(
        fpdu(read_req(), rr_body({0x100, 0, 17, mr->stag, 0})),
        {TermLayer::rdmap, term::kRdmapRemoteProtection, term::kRdmapBaseBounds, true, true});
    make(false);
    auto mr2 = res->reg_mr(mem, 0, kAccessRemoteWrite);
    expect_terminate(
        fpdu(read_req(), rr_body({0x100, 0, 4, mr2->stag, 0})),
        {TermLayer::rdmap, term::kRdmapRemoteProtection, term::kRdmapAccessRights, true, true});
}

TEST_F(QpErrors, ReadRequestMsnGapAndShortBody) {
    expect_terminate(fpdu(read_req(3), rr_body({})),
                     {TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidMsnRange, true});
    make(false);
    expect_terminate(fpdu(read_req(), Bytes(20, 0)), {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                                      term::kRdmapCatastrophicStream, true});
}

TEST_F(QpErrors, IrdExceeded) {
    QpConfig cr;
    cr.role = MpaRole::responder;
    cr.ird = 1;
    res = std::make_unique<QpEngine>(cr);
    EXPECT_FALSE(res->on_bytes(fpdu(read_req(1), rr_body({}))).entered_error);
    expect_terminate(fpdu(read_req(2), rr_body({})), {TermLayer::rdmap, term::kRdmapRemoteOperation,
                                                      term::kRdmapCatastrophicStream, true, true});
}

TEST_F(QpErrors, ZeroLengthReadNeedsNoStag) {
    // The p2p Read RTR: size 0, sink STag 0, source STag 1.
    EXPECT_FALSE(res->on_bytes(fpdu(read_req(), rr_body({0, 0, 0, 1, 0}))).entered_error);
    Bytes out = res->take_output();
    ASSERT_EQ(out.size(), fpdu_size(kDdpTaggedHeaderSize));
    EXPECT_EQ(out[2], 0xC1);
    EXPECT_EQ(out[3], 0x42);
}

TEST_F(QpErrors, SendWithInvalidate) {
    Bytes mem(8);
    auto mr = res->reg_mr(mem, 0, kAccessRemoteWrite);
    Bytes buf(8);
    ASSERT_FALSE(res->post_recv(RecvWr{1, buf}));
    ASSERT_FALSE(res->post_recv(RecvWr{2, buf}));
    DdpHeader h = send();
    h.opcode = static_cast<std::uint8_t>(Opcode::send_se_inv);
    h.inval_stag = mr->stag;
    EXPECT_FALSE(res->on_bytes(fpdu(h, Bytes{1})).entered_error);
    auto c = res->poll_all();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_TRUE(c[0].solicited);
    EXPECT_EQ(c[0].invalidated_stag, mr->stag);
    // Second time: the STag is gone.
    h.msn = 2;
    expect_terminate(fpdu(h, Bytes{1}), {TermLayer::rdmap, term::kRdmapRemoteProtection,
                                         term::kRdmapCannotInvalidate, true});
}

TEST_F(QpErrors, TerminateFlushesPeerWork) {
    Bytes buf(8);
    ASSERT_FALSE(ini->post_recv(RecvWr{7, buf}));
    Bytes data = {1};
    SendWr wr;
    wr.wr_id = 8;
    wr.data = data;
    ASSERT_FALSE(ini->post_send(wr));
    EXPECT_FALSE(ini->take_output().empty());  // the Send goes out (and completes)
    expect_terminate(fpdu(write(0x77, 0), Bytes{1}),
                     {TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTInvalidStag, true});
    auto c = ini->poll_all();
    // The Send already went out (completed), the receive is flushed.
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 8u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[1].wr_id, 7u);
    EXPECT_EQ(c[1].status, WcStatus::wr_flush_error);
    EXPECT_EQ(ini->post_send(wr), VerbsError::qp_error);
}

TEST_F(QpErrors, LlpClosedFlushes) {
    Bytes buf(8);
    ASSERT_FALSE(res->post_recv(RecvWr{1, buf}));
    res->on_llp_closed();
    auto c = res->poll_all();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::wr_flush_error);
    EXPECT_FALSE(res->terminate_sent());
}
