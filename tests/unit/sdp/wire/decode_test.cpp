// SPDX-License-Identifier: Apache-2.0
// Totality of the SDP decoder: typed errors, reserved bits, round trips, the
// solicited-event classification of 14.2, and the InfiniBand layout contrast.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <variant>
#include <vector>

#include "sdp/wire/message.hpp"

namespace w = sdp::wire;
using Bytes = std::vector<std::uint8_t>;

namespace {

w::DecodeError err(const Bytes& b) {
    auto r = w::decode(b);
    EXPECT_TRUE(std::holds_alternative<w::DecodeError>(r));
    return std::holds_alternative<w::DecodeError>(r) ? std::get<w::DecodeError>(r)
                                                     : w::DecodeError::too_short;
}

Bytes bsdh(std::uint8_t mid, std::uint32_t len) {
    return {0,
            0,
            0,
            mid,
            static_cast<std::uint8_t>(len >> 24),
            static_cast<std::uint8_t>(len >> 16),
            static_cast<std::uint8_t>(len >> 8),
            static_cast<std::uint8_t>(len),
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0};
}

}  // namespace

TEST(SdpDecode, TooShort) {
    for (std::size_t n = 0; n < w::kBsdhSize; ++n) {
        Bytes b(n, 0xFF);
        EXPECT_EQ(err(b), w::DecodeError::too_short) << n;
        EXPECT_TRUE(std::holds_alternative<w::DecodeError>(w::decode_bsdh(b)));
    }
}

TEST(SdpDecode, ReservedAndExperimentalMids) {
    for (int v = 0x0F; v <= 0x3F; ++v)
        EXPECT_EQ(err(bsdh(static_cast<std::uint8_t>(v), 16)), w::DecodeError::reserved_mid);
    for (int v = 0x40; v <= 0x7F; ++v)
        EXPECT_EQ(err(bsdh(static_cast<std::uint8_t>(v), 16)), w::DecodeError::experimental_mid);
    for (int v = 0x80; v <= 0xFC; ++v)
        EXPECT_EQ(err(bsdh(static_cast<std::uint8_t>(v), 16)), w::DecodeError::reserved_mid);
}

TEST(SdpDecode, LenMustMatchSize) {
    EXPECT_EQ(err(bsdh(0xFF, 17)), w::DecodeError::length_mismatch);
    EXPECT_EQ(err(bsdh(0xFF, 15)), w::DecodeError::length_mismatch);
    EXPECT_EQ(err(bsdh(0xFF, 0)), w::DecodeError::length_mismatch);
    EXPECT_EQ(err(bsdh(0xFF, 0xFFFFFFFF)), w::DecodeError::length_mismatch);
    Bytes d = bsdh(0xFF, 16);
    d.push_back(1);  // payload present but Len says 16
    EXPECT_EQ(err(d), w::DecodeError::length_mismatch);
}

TEST(SdpDecode, SizeMustFitMid) {
    // Extended header missing: Hello with only a BSDH, Len consistent.
    EXPECT_EQ(err(bsdh(0x00, 16)), w::DecodeError::bad_length);
    Bytes partial = bsdh(0xFE, 31);  // SrcAvail needs 32
    partial.resize(31);
    EXPECT_EQ(err(partial), w::DecodeError::bad_length);
    // BSDH-only messages carry nothing else.
    Bytes dis = bsdh(0x02, 17);
    dis.push_back(0);
    EXPECT_EQ(err(dis), w::DecodeError::bad_length);
    // Fixed extended header plus extra bytes.
    Bytes mc = bsdh(0x07, 21);
    mc.resize(21);
    EXPECT_EQ(err(mc), w::DecodeError::bad_length);
}

TEST(SdpDecode, ReservedFlagBitsDropped) {
    Bytes b = bsdh(0xFF, 16);
    b[2] = 0x1F;  // bits 3-7 only
    auto m = std::get<w::Message>(w::decode(b));
    EXPECT_EQ(m.flags, 0);
    b[2] = 0xFF;
    m = std::get<w::Message>(w::decode(b));
    EXPECT_EQ(m.flags, 0xE0);
    EXPECT_EQ(w::encode(m)[2], 0xE0);
}

TEST(SdpDecode, HelloRsvdNotChecked) {
    Bytes b = bsdh(0x00, 32);
    b.insert(b.end(), {0, 1, 0xAB, 0x11, 0, 0, 0x10, 0, 0, 0, 0x10, 0, 0, 1, 0, 1});
    auto m = std::get<w::Message>(w::decode(b));
    auto enc = w::encode(m);
    EXPECT_EQ(enc[18], 0);  // Rsvd sent as zero
    enc[18] = 0xAB;
    EXPECT_EQ(enc, b);
}

TEST(SdpDecode, SuspCommConstantsNotChecked) {
    Bytes b = bsdh(0x0D, 24);
    b.insert(b.end(), {1, 2, 3, 4, 0x12, 0x34, 9, 9});
    auto m = std::get<w::Message>(w::decode(b));
    EXPECT_EQ(std::get<w::SuspComm>(m.body).dest_port, 0x1234);
    Bytes enc = w::encode(m);
    EXPECT_EQ(Bytes(enc.begin() + 16, enc.end()), (Bytes{0, 0, 0, 0, 0x12, 0x34, 0, 1}));
}

// Random byte strings: decode never fails to return, and whatever decodes
// re-encodes to the input with reserved bits cleared.
TEST(SdpDecode, RandomRoundTrip) {
    std::mt19937 rng(7);
    const std::uint8_t mids[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                                 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0xFD, 0xFE, 0xFF};
    int decoded = 0;
    for (int i = 0; i < 20000; ++i) {
        Bytes b(rng() % 48);
        for (auto& x : b)
            x = static_cast<std::uint8_t>(rng());
        if (b.size() >= 16 && rng() % 4 != 0) {
            b[3] = mids[rng() % std::size(mids)];
            b[4] = b[5] = b[6] = 0;
            b[7] = static_cast<std::uint8_t>(b.size());
        }
        auto r = w::decode(b);
        if (auto* m = std::get_if<w::Message>(&r)) {
            ++decoded;
            auto enc = w::encode(*m);
            ASSERT_EQ(enc.size(), b.size());
            auto again = w::decode(enc);
            ASSERT_TRUE(std::holds_alternative<w::Message>(again));
            EXPECT_EQ(std::get<w::Message>(again), *m);
        }
    }
    EXPECT_GT(decoded, 1000);
}

TEST(SdpSolicited, Section14_2Lists) {
    auto msg = [](w::Body b, std::uint8_t flags = 0) {
        w::Message m;
        m.flags = flags;
        m.body = std::move(b);
        return m;
    };
    for (const w::Body& b :
         {w::Body{w::AbortConn{}}, w::Body{w::SuspComm{}}, w::Body{w::SuspCommAck{}},
          w::Body{w::SendSm{}}, w::Body{w::SrcAvailCancel{}}, w::Body{w::SinkAvailCancel{}},
          w::Body{w::HelloAck{}}, w::Body{w::RdmaWrCompl{}}, w::Body{w::RdmaRdCompl{}},
          w::Body{w::SinkCancelAck{}}})
        EXPECT_TRUE(w::is_solicited(msg(b))) << w::to_string(w::mid_of(b));
    for (const w::Body& b : {w::Body{w::DisConn{}}, w::Body{w::SrcAvail{}}, w::Body{w::SinkAvail{}},
                             w::Body{w::Data{}}, w::Body{w::ModeChange{}}, w::Body{w::ChRcvBuf{}},
                             w::Body{w::ChRcvBufAck{}}})
        EXPECT_FALSE(w::is_solicited(msg(b))) << w::to_string(w::mid_of(b));
    EXPECT_TRUE(w::is_solicited(msg(w::Data{}, w::flag::oob_pend)));
    EXPECT_TRUE(w::is_solicited(msg(w::Data{{1}}, w::flag::oob_pres)));
    EXPECT_FALSE(w::is_solicited(msg(w::Data{}, w::flag::req_pipe)));
}

// Deployed InfiniBand SDP (sdp_defs.h, seed 003) lays the BSDH out as
// mid, flags, bufs, len, m_seq, m_seq_ack with "little endian bit ordering":
// SDP_OOB_PRES / OOB_PEND / REQ_PIPE are bit numbers 0 / 1 / 2 counted from
// the LSB, i.e. masks 0x01 / 0x02 / 0x04. The iWARP draft (Figure 2, IETF
// bit order) puts Bufs first and MID last, with OOB_PRES the MSB (0x80).
// This codec implements the iWARP layout only; the test pins the difference.
TEST(SdpIbLayout, SameFieldsDifferentBytes) {
    // A Data message with Bufs = 3, OOB_PRES, MSeq 1, one payload byte, as
    // each specification would put it on the wire.
    const Bytes iwarp = {0x00, 0x03, 0x80, 0xFF, 0, 0, 0, 17, 0, 0, 0, 1, 0, 0, 0, 0, 'z'};
    const Bytes ib = {0xFF, 0x01, 0x00, 0x03, 0, 0, 0, 17, 0, 0, 0, 1, 0, 0, 0, 0, 'z'};
    w::Message m;
    m.bufs = 3;
    m.flags = w::flag::oob_pres;
    m.mseq = 1;
    m.body = w::Data{{'z'}};
    EXPECT_EQ(w::encode(m), iwarp);
    EXPECT_NE(w::encode(m), ib);
    // The IB bytes read as iWARP: Bufs 0xFF01, MID 0x03 (AbortConn) with a
    // wrong length -> rejected, never silently misread as Data.
    EXPECT_EQ(std::get<w::Bsdh>(w::decode_bsdh(ib)).bufs, 0xFF01);
    EXPECT_EQ(std::get<w::Bsdh>(w::decode_bsdh(ib)).mid, w::Mid::abort_conn);
    EXPECT_EQ(err(ib), w::DecodeError::bad_length);
    // IB REQ_PIPE (bit 2 from the LSB = 0x04) lands in the iWARP reserved bits.
    EXPECT_EQ(0x04 & w::flag::known, 0);
    // IB Hello differs beyond the BSDH too: maj_vers/min_vers first, an 8-bit
    // max_adverts, ip_vers, addresses, and no LocIRD/LocORD; the iWARP HH is
    // 16 bytes with MaxAdverts (16 bits) first and MinV/MajV in byte 3.
    EXPECT_EQ(w::kHelloHeaderSize, 16u);
    EXPECT_EQ(w::kHelloAckHeaderSize, 12u);
}
