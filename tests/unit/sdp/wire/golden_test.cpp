// SPDX-License-Identifier: Apache-2.0
// Golden bytes for every SDP message of section 6, written by hand from the
// figures of draft-pinkerton-iwarp-sdp-01 (network byte order, bit 0 = MSB),
// not produced by the encoder.
#include <gtest/gtest.h>

#include <cstdint>
#include <variant>
#include <vector>

#include "sdp/wire/message.hpp"

namespace w = sdp::wire;
using Bytes = std::vector<std::uint8_t>;

namespace {

w::Message decoded(const Bytes& b) {
    auto r = w::decode(b);
    if (auto* e = std::get_if<w::DecodeError>(&r)) {
        ADD_FAILURE() << "decode failed: " << w::to_string(*e);
        return {};
    }
    return std::get<w::Message>(r);
}

// Checks decode(bytes) == msg and encode(msg) == bytes.
void golden(const Bytes& bytes, const w::Message& msg) {
    EXPECT_EQ(decoded(bytes), msg);
    EXPECT_EQ(w::encode(msg), bytes);
    EXPECT_EQ(w::encoded_size(msg), bytes.size());
}

w::Message with(w::Body body, std::uint16_t bufs = 0, std::uint8_t flags = 0,
                std::uint32_t mseq = 0, std::uint32_t ack = 0) {
    w::Message m;
    m.bufs = bufs;
    m.flags = flags;
    m.mseq = mseq;
    m.mseq_ack = ack;
    m.body = std::move(body);
    return m;
}

}  // namespace

// Figure 2: Bufs(16) Flags(8) MID(8) | Len | MSeq | MSeqAck.
TEST(SdpGolden, BsdhFieldOrder) {
    Bytes b = {0x12, 0x34, 0x00, 0xFF,   // Bufs 0x1234, Flags 0, MID Data
               0x00, 0x00, 0x00, 0x10,   // Len 16
               0xA1, 0xA2, 0xA3, 0xA4,   // MSeq
               0xB1, 0xB2, 0xB3, 0xB4};  // MSeqAck
    golden(b, with(w::Data{}, 0x1234, 0, 0xA1A2A3A4, 0xB1B2B3B4));
    auto h = std::get<w::Bsdh>(w::decode_bsdh(b));
    EXPECT_EQ(h.bufs, 0x1234);
    EXPECT_EQ(h.mid, w::Mid::data);
    EXPECT_EQ(h.len, 16u);
}

// Figure 4: bit position 0 is the MSB of Flags.
TEST(SdpGolden, FlagBitPositions) {
    EXPECT_EQ(w::flag::oob_pres, 0x80);
    EXPECT_EQ(w::flag::oob_pend, 0x40);
    EXPECT_EQ(w::flag::req_pipe, 0x20);
    Bytes b = {0x00, 0x03, 0xC0, 0xFF, 0, 0, 0, 17, 0, 0, 0, 5, 0, 0, 0, 4, 'x'};
    golden(b, with(w::Data{{'x'}}, 3, w::flag::oob_pres | w::flag::oob_pend, 5, 4));
    Bytes rwc = {0x00, 0x00, 0x20, 0x05, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0};
    golden(rwc, with(w::RdmaWrCompl{4096}, 0, w::flag::req_pipe, 1, 0));
}

// Figure 5: MaxAdverts(16) Rsvd(8) MinV(4) MajV(4) | DesRemRcvSz | LocalRcvSz |
// LocIRD(16) LocORD(16).
TEST(SdpGolden, Hello) {
    Bytes b = {0x00, 0x08, 0x00, 0x00,              // Bufs 8, Flags 0, MID Hello
               0x00, 0x00, 0x00, 0x20,              // Len 32
               0,    0,    0,    0,    0, 0, 0, 0,  // MSeq, MSeqAck
               0x00, 0x04, 0x00, 0x21,              // MaxAdverts 4, Rsvd, MinV 2, MajV 1
               0x00, 0x00, 0x10, 0x00,              // DesRemRcvSz 4096
               0x00, 0x01, 0x00, 0x00,              // LocalRcvSz 65536
               0x00, 0x10, 0x00, 0x08};             // LocIRD 16, LocORD 8
    w::Hello h{.major = 1,
               .minor = 2,
               .max_adverts = 4,
               .des_rem_rcv_sz = 4096,
               .local_rcv_sz = 65536,
               .loc_ird = 16,
               .loc_ord = 8};
    golden(b, with(h, 8));
}

// Figure 6: MaxAdverts(16) Rsvd(8) MinV(4) MajV(4) | ActRcvSz | LocIRD LocORD.
TEST(SdpGolden, HelloAck) {
    Bytes b = {0x00, 0x20, 0x00, 0x01,              // Bufs 32, MID HelloAck
               0x00, 0x00, 0x00, 0x1C,              // Len 28
               0,    0,    0,    0,    0, 0, 0, 0,  // MSeq, MSeqAck
               0xFF, 0xFF, 0x00, 0x11,              // MaxAdverts 65535, MinV 1, MajV 1
               0x00, 0x00, 0x40, 0x00,              // ActRcvSz 16384
               0x00, 0x02, 0x00, 0x03};             // LocIRD 2, LocORD 3
    w::HelloAck a{.major = 1,
                  .minor = 1,
                  .max_adverts = 0xFFFF,
                  .act_rcv_sz = 16384,
                  .loc_ird = 2,
                  .loc_ord = 3};
    golden(b, with(a, 32));
}

// BSDH-only messages: MID values of Figure 3, Len 16.
TEST(SdpGolden, BsdhOnlyMessages) {
    struct Case {
        std::uint8_t mid;
        w::Body body;
    };
    const Case cases[] = {
        {0x02, w::DisConn{}},         {0x03, w::AbortConn{}},
        {0x04, w::SendSm{}},          {0x08, w::SrcAvailCancel{}},
        {0x09, w::SinkAvailCancel{}}, {0x0A, w::SinkCancelAck{}},
        {0x0E, w::SuspCommAck{}},     {0xFF, w::Data{}},
    };
    for (const auto& c : cases) {
        Bytes b = {0x00, 0x05, 0x00, c.mid, 0x00, 0x00, 0x00, 0x10,
                   0x00, 0x00, 0x00, 0x07,  0x00, 0x00, 0x00, 0x06};
        SCOPED_TRACE(static_cast<int>(c.mid));
        golden(b, with(c.body, 5, 0, 7, 6));
        EXPECT_EQ(static_cast<std::uint8_t>(w::mid_of(c.body)), c.mid);
    }
}

// Figures 9 and 10: one 32-bit Len.
TEST(SdpGolden, RdmaCompletions) {
    Bytes wr = {0, 1, 0, 0x05, 0, 0, 0, 20, 0, 0, 0, 9, 0, 0, 0, 8, 0x00, 0x01, 0x02, 0x03};
    golden(wr, with(w::RdmaWrCompl{0x00010203}, 1, 0, 9, 8));
    Bytes rd = {0, 1, 0, 0x06, 0, 0, 0, 20, 0, 0, 0, 9, 0, 0, 0, 8, 0x80, 0x00, 0x00, 0x00};
    golden(rd, with(w::RdmaRdCompl{0x80000000}, 1, 0, 9, 8));
}

// Figure 11: Rsvd(28) | Mode(3) | S(1) with S the least significant bit.
TEST(SdpGolden, ModeChange) {
    Bytes base = {0, 0, 0, 0x07, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0};
    auto mk = [&](std::uint8_t last) {
        Bytes b = base;
        b.insert(b.end(), {0, 0, 0, last});
        return b;
    };
    golden(mk(0x00), with(w::ModeChange{false, w::FlowMode::buffered}, 0, 0, 1));
    golden(mk(0x01), with(w::ModeChange{true, w::FlowMode::buffered}, 0, 0, 1));
    golden(mk(0x02), with(w::ModeChange{false, w::FlowMode::combined}, 0, 0, 1));
    golden(mk(0x05), with(w::ModeChange{true, w::FlowMode::pipelined}, 0, 0, 1));
    // Mode 3..7 are reserved values (Figure 12).
    EXPECT_EQ(std::get<w::DecodeError>(w::decode(mk(0x06))), w::DecodeError::reserved_mode);
    EXPECT_EQ(std::get<w::DecodeError>(w::decode(mk(0x0F))), w::DecodeError::reserved_mode);
    // The 28 Rsvd bits are not checked (6.3.8.3) and are sent as zero.
    Bytes rsvd = base;
    rsvd.insert(rsvd.end(), {0xFF, 0xFF, 0xFF, 0xF3});
    auto m = decoded(rsvd);
    EXPECT_EQ(m, with(w::ModeChange{true, w::FlowMode::combined}, 0, 0, 1));
    EXPECT_EQ(w::encode(m), mk(0x03));
}

// Figures 13 and 14.
TEST(SdpGolden, ChRcvBuf) {
    Bytes c = {0, 2, 0, 0x0B, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, 2, 0x00, 0x00, 0x80, 0x00};
    golden(c, with(w::ChRcvBuf{32768}, 2, 0, 3, 2));
    Bytes a = {0, 2, 0, 0x0C, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, 2, 0x00, 0x00, 0x20, 0x00};
    golden(a, with(w::ChRcvBufAck{8192}, 2, 0, 3, 2));
}

// Figure 15: Constant1 (32) = 0 | DestPort (16) | Constant2 (16) = 1.
TEST(SdpGolden, SuspComm) {
    Bytes b = {0, 0, 0, 0x0D, 0,    0,    0,    24,   0,    0,    0,    4,
               0, 0, 0, 3,    0x00, 0x00, 0x00, 0x00, 0x1F, 0x90, 0x00, 0x01};
    golden(b, with(w::SuspComm{8080}, 0, 0, 4, 3));
}

// Figure 7: Len | STag | VA(32-63) | VA(0-31), then optional ULP payload.
TEST(SdpGolden, SrcAvail) {
    Bytes b = {0,    4,    0,    0xFE, 0, 0, 0,    35,   0,    0,
               0,    10,   0,    0,    0, 9, 0x00, 0x00, 0x10, 0x00,  // Len 4096
               0xDE, 0xAD, 0xBE, 0xEF,                                // STag
               0x01, 0x23, 0x45, 0x67,                                // VA high word
               0x89, 0xAB, 0xCD, 0xEF,                                // VA low word
               'a',  'b',  'c'};
    w::SrcAvail s{
        .len = 4096, .stag = 0xDEADBEEF, .va = 0x0123456789ABCDEFull, .payload = {'a', 'b', 'c'}};
    golden(b, with(s, 4, 0, 10, 9));
}

// Figure 8: Len | STag | VA(32-63) | VA(0-31) | NonDiscards, then payload.
TEST(SdpGolden, SinkAvail) {
    Bytes b = {0,    4,    0,    0xFD, 0, 0, 0,    36,   0,    0,
               0,    10,   0,    0,    0, 9, 0x7F, 0xFF, 0xFF, 0xFF,  // Len
               0x00, 0x00, 0x00, 0x2A,                                // STag
               0x00, 0x00, 0x00, 0x01,                                // VA high
               0x00, 0x00, 0x00, 0x02,                                // VA low
               0x00, 0x00, 0x00, 0x63};                               // NonDiscards 99
    w::SinkAvail s{.len = 0x7FFFFFFF,
                   .stag = 42,
                   .va = 0x0000000100000002ull,
                   .non_discards = 99,
                   .payload = {}};
    golden(b, with(s, 4, 0, 10, 9));
    b.push_back(0x55);
    b[7] = 37;
    s.payload = {0x55};
    golden(b, with(s, 4, 0, 10, 9));
}

TEST(SdpGolden, DataWithPayload) {
    Bytes b = {0x00, 0x10, 0x00, 0xFF, 0, 0,   0,   21,  0xFF, 0xFF, 0xFF,
               0xFF, 0,    0,    0,    0, 'h', 'e', 'l', 'l',  'o'};
    golden(b, with(w::Data{{'h', 'e', 'l', 'l', 'o'}}, 16, 0, 0xFFFFFFFF, 0));
}

// Every MID of Figure 3 decodes to the message type of that name.
TEST(SdpGolden, AllSeventeenPlusDataMidsKnown) {
    const std::uint8_t mids[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                                 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0xFD, 0xFE, 0xFF};
    for (int v = 0; v < 256; ++v) {
        bool known = false;
        for (auto m : mids)
            known = known || m == v;
        if (!known)
            continue;
        EXPECT_NE(w::to_string(static_cast<w::Mid>(v)), "?");
    }
}

// The in-place Data encoders give the same bytes as encode().
TEST(SdpGolden, DataEncodedInPlaceMatchesEncode) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4000}, std::size_t{65520}}) {
        std::vector<std::uint8_t> payload(n);
        for (std::size_t i = 0; i < n; ++i)
            payload[i] = static_cast<std::uint8_t>(i * 7 + 1);
        for (std::uint8_t flags : {std::uint8_t{0}, std::uint8_t{0xFF}, w::flag::oob_pres}) {
            w::Message full;
            full.bufs = 0xABCD;
            full.flags = flags;
            full.mseq = 0x01020304;
            full.mseq_ack = 0xFFFFFFFE;
            full.body = w::Data{payload};
            const auto want = w::encode(full);
            w::Message empty = full;
            empty.body = w::Data{};
            std::vector<std::uint8_t> appended;
            w::encode_append(empty, payload, appended);
            EXPECT_EQ(appended, want);
            std::vector<std::uint8_t> block(w::kBsdhSize);
            block.insert(block.end(), payload.begin(), payload.end());
            w::encode_bsdh_into(empty, n,
                                std::span<std::uint8_t, w::kBsdhSize>(block.data(), w::kBsdhSize));
            EXPECT_EQ(block, want);
        }
    }
}
