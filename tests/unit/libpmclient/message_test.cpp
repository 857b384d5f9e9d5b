// SPDX-License-Identifier: Apache-2.0
// Golden bytes written by hand from Figure 17 (section 7.3) of the SDP draft.
#include <gtest/gtest.h>

#include <vector>

#include "pmclient/message.hpp"

namespace {

using pm::DecodeError;
using pm::IpAddress;
using pm::Message;
using pm::MessageType;

// PMReq, IPv4: Ver 0, MT 0, IPV 4 -> byte 0 = 0b00'00'0100 = 0x04.
// ApPort 80, CpPort 49152, AssocHandle 0x0102030405060708,
// CpIPAddr 10.1.2.3, ApIPAddr 192.0.2.10.
const std::vector<std::uint8_t> kReqV4 = {
    0x04, 0x00, 0x00, 0x00,                          // Ver|MT|IPV, PmTime, Reserved
    0x00, 0x50, 0xc0, 0x00,                          // ApPort 80, CpPort 49152
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // AssocHandle
    10,   1,    2,    3,    0,    0,    0,    0,     // CpIPAddr (first 32 bits)
    0,    0,    0,    0,    0,    0,    0,    0,     //
    192,  0,    2,    10,   0,    0,    0,    0,     // ApIPAddr
    0,    0,    0,    0,    0,    0,    0,    0,
};

// PMAccept, IPv6: MT 1, IPV 6 -> byte 0 = 0b00'01'0110 = 0x16, PmTime 120.
const std::vector<std::uint8_t> kAcceptV6 = {
    0x16, 120,  0x00, 0x00,                                                        //
    0x1f, 0x90, 0xff, 0xff,                                                        // 8080, 65535
    0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88,                                //
    0x20, 0x01, 0x0d, 0xb8, 0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0,    0x01,  // 2001:db8::1
    0x20, 0x01, 0x0d, 0xb8, 0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0x12, 0x34,  // 2001:db8::1234
};

Message decoded(const std::vector<std::uint8_t>& bytes) {
    auto r = pm::decode(bytes);
    EXPECT_TRUE(std::holds_alternative<Message>(r));
    return std::get<Message>(r);
}

TEST(Codec, DecodesRequestV4FromFigure17) {
    Message m = decoded(kReqV4);
    EXPECT_EQ(m.type, MessageType::request);
    EXPECT_EQ(m.ipv, pm::Family::v4);
    EXPECT_EQ(m.pm_time, 0);
    EXPECT_EQ(m.ap_port, 80);
    EXPECT_EQ(m.cp_port, 49152);
    EXPECT_EQ(m.assoc_handle, 0x0102030405060708ull);
    EXPECT_EQ(m.cp_addr, *IpAddress::parse("10.1.2.3"));
    EXPECT_EQ(m.ap_addr, *IpAddress::parse("192.0.2.10"));
    EXPECT_FALSE(m.iwpm_trailer);
}

TEST(Codec, EncodeIsInverseOfDecode) {
    for (const auto* golden : {&kReqV4, &kAcceptV6}) {
        Message m = decoded(*golden);
        auto wire = pm::encode(m);
        EXPECT_EQ(std::vector<std::uint8_t>(wire.begin(), wire.end()), *golden);
    }
}

TEST(Codec, DecodesAcceptV6) {
    Message m = decoded(kAcceptV6);
    EXPECT_EQ(m.type, MessageType::accept);
    EXPECT_EQ(m.ipv, pm::Family::v6);
    EXPECT_EQ(m.pm_time, 120);
    EXPECT_EQ(m.ap_port, 8080);
    EXPECT_EQ(m.cp_port, 65535);
    EXPECT_EQ(m.assoc_handle, 0xffeeddccbbaa9988ull);
    EXPECT_EQ(m.cp_addr, *IpAddress::parse("2001:db8::1"));
    EXPECT_EQ(m.ap_addr, *IpAddress::parse("2001:db8::1234"));
}

TEST(Codec, MessageTypeBitsSitBetweenVersionAndIpv) {
    for (unsigned mt = 0; mt < 4; ++mt) {
        auto bytes = kReqV4;
        bytes[0] = static_cast<std::uint8_t>(mt << 4 | 4);
        EXPECT_EQ(static_cast<unsigned>(decoded(bytes).type), mt);
    }
}

TEST(Codec, ReservedFieldIsNeverChecked) {
    auto bytes = kReqV4;
    bytes[2] = 0xde;
    bytes[3] = 0xad;
    Message m = decoded(bytes);
    EXPECT_EQ(m.ap_port, 80);
    // ...and always sent as zero.
    auto wire = pm::encode(m);
    EXPECT_EQ(wire[2], 0);
    EXPECT_EQ(wire[3], 0);
}

TEST(Codec, Ipv4IgnoresTrailing96BitsOnReceiptAndSendsZero) {
    auto bytes = kReqV4;
    for (int i = 20; i < 32; ++i)
        bytes[i] = 0xaa;
    for (int i = 36; i < 48; ++i)
        bytes[i] = 0x55;
    Message m = decoded(bytes);
    EXPECT_EQ(m.cp_addr, *IpAddress::parse("10.1.2.3"));
    EXPECT_EQ(m.ap_addr, *IpAddress::parse("192.0.2.10"));
    auto wire = pm::encode(m);
    EXPECT_EQ(std::vector<std::uint8_t>(wire.begin(), wire.end()), kReqV4);
}

TEST(Codec, RejectsShortAndLongDatagrams) {
    for (std::size_t n : {0u, 1u, 47u}) {
        std::vector<std::uint8_t> b(kReqV4.begin(), kReqV4.begin() + n);
        auto r = pm::decode(b);
        ASSERT_TRUE(std::holds_alternative<DecodeError>(r)) << n;
        EXPECT_EQ(std::get<DecodeError>(r), DecodeError::too_short);
    }
    for (std::size_t n : {49u, 63u, 65u, 1500u}) {
        auto b = kReqV4;
        b.resize(n, 0);
        auto r = pm::decode(b);
        ASSERT_TRUE(std::holds_alternative<DecodeError>(r)) << n;
        EXPECT_EQ(std::get<DecodeError>(r), DecodeError::too_long);
    }
}

TEST(Codec, AcceptsIwpmdSixtyFourBytePmReqOnly) {
    auto b = kReqV4;
    b.resize(64, 0x77);
    Message m = decoded(b);
    EXPECT_TRUE(m.iwpm_trailer);
    EXPECT_EQ(m.ap_port, 80);
    // A 64-byte message of any other type is too long.
    b[0] = 0x14;  // PMAccept
    auto r = pm::decode(b);
    ASSERT_TRUE(std::holds_alternative<DecodeError>(r));
    EXPECT_EQ(std::get<DecodeError>(r), DecodeError::too_long);
}

TEST(Codec, RejectsNonZeroVersion) {
    for (unsigned ver = 1; ver < 4; ++ver) {
        auto b = kReqV4;
        b[0] = static_cast<std::uint8_t>(ver << 6 | 4);
        auto r = pm::decode(b);
        ASSERT_TRUE(std::holds_alternative<DecodeError>(r));
        EXPECT_EQ(std::get<DecodeError>(r), DecodeError::bad_version);
    }
}

TEST(Codec, RejectsEveryReservedIpv) {
    for (unsigned ipv = 0; ipv < 16; ++ipv) {
        auto b = kReqV4;
        b[0] = static_cast<std::uint8_t>(ipv);
        auto r = pm::decode(b);
        if (ipv == 4 || ipv == 6) {
            EXPECT_TRUE(std::holds_alternative<Message>(r));
        } else {
            ASSERT_TRUE(std::holds_alternative<DecodeError>(r)) << ipv;
            EXPECT_EQ(std::get<DecodeError>(r), DecodeError::reserved_ipv);
        }
    }
}

TEST(Codec, DecodeIsTotalOverEveryFirstByte) {
    // Every value of the header byte decodes to a message or an error and
    // re-encodes to the same header byte when it decodes.
    for (unsigned b0 = 0; b0 < 256; ++b0) {
        auto b = kReqV4;
        b[0] = static_cast<std::uint8_t>(b0);
        auto r = pm::decode(b);
        if (auto* m = std::get_if<Message>(&r)) {
            EXPECT_EQ(pm::encode(*m)[0], b0);
        }
    }
}

TEST(Codec, ReplyBuildersFollowSection74) {
    Message req = decoded(kReqV4);
    auto sdp = *pm::Endpoint::parse("198.51.100.7:8080");
    Message acc = pm::make_accept(req, sdp, 120);
    EXPECT_EQ(acc.type, MessageType::accept);
    EXPECT_EQ(acc.ipv, req.ipv);
    EXPECT_EQ(acc.pm_time, 120);
    EXPECT_EQ(acc.ap_port, 8080);
    EXPECT_EQ(acc.ap_addr, sdp.address);
    EXPECT_EQ(acc.cp_port, req.cp_port);
    EXPECT_EQ(acc.cp_addr, req.cp_addr);
    EXPECT_EQ(acc.assoc_handle, req.assoc_handle);
    EXPECT_EQ(pm::encode(acc)[0], 0x14);

    Message ack = pm::make_ack(acc);
    EXPECT_EQ(ack.type, MessageType::ack);
    EXPECT_EQ(ack.pm_time, 0);
    EXPECT_EQ(ack.ap_port, acc.ap_port);
    EXPECT_EQ(ack.ap_addr, acc.ap_addr);
    EXPECT_EQ(pm::encode(ack)[0], 0x24);

    Message deny = pm::make_deny(req);
    EXPECT_EQ(deny.type, MessageType::deny);
    EXPECT_EQ(deny.pm_time, 0);
    EXPECT_EQ(deny.ap_port, req.ap_port);
    EXPECT_EQ(deny.ap_addr, req.ap_addr);
    EXPECT_EQ(deny.cp_port, req.cp_port);
    EXPECT_EQ(deny.assoc_handle, req.assoc_handle);
    EXPECT_EQ(pm::encode(deny)[0], 0x34);
    EXPECT_EQ(pm::make_deny(req, pm::DenyApPort::zero).ap_port, 0);
}

}  // namespace
