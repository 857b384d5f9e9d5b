// SPDX-License-Identifier: Apache-2.0
// sdp::Handoff::encode()/decode() (socket duplication initiated here,
// 13.1.1 step 5): round trips, every truncation, trailing bytes, bad
// fields and random garbage; decode() never crashes and rejects them all.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sdp/stream.hpp"

namespace {

sdp::Handoff sample(bool v6) {
    sdp::Handoff h;
    h.peer = *pm::Endpoint::parse(v6 ? "[2001:db8::7]:40001" : "192.0.2.7:40001");
    h.local = *pm::Endpoint::parse(v6 ? "[2001:db8::1]:5001" : "192.0.2.1:5001");
    for (int i = 0; i < 300; ++i)
        h.unread.push_back(static_cast<std::uint8_t>(i * 7));
    for (int i = 0; i < 1000; ++i)
        h.unsent.push_back(static_cast<std::uint8_t>(i * 13 + 1));
    h.write_shut = true;
    h.peer_accepted = v6;  // both values of the flag
    h.recv_buf_size = 64 * 1024;
    h.ird = 4;
    h.ord = 2;
    return h;
}

void expect_same(const sdp::Handoff& a, const sdp::Handoff& b) {
    EXPECT_EQ(a.peer, b.peer);
    EXPECT_EQ(a.local, b.local);
    EXPECT_EQ(a.unread, b.unread);
    EXPECT_EQ(a.unsent, b.unsent);
    EXPECT_EQ(a.write_shut, b.write_shut);
    EXPECT_EQ(a.peer_accepted, b.peer_accepted);
    EXPECT_EQ(a.recv_buf_size, b.recv_buf_size);
    EXPECT_EQ(a.ird, b.ird);
    EXPECT_EQ(a.ord, b.ord);
}

}  // namespace

TEST(SdpHandoffCodec, RoundTripV4V6AndEmpty) {
    for (bool v6 : {false, true}) {
        const auto h = sample(v6);
        auto d = sdp::Handoff::decode(h.encode());
        ASSERT_TRUE(d);
        expect_same(h, *d);
    }
    sdp::Handoff e;
    e.peer = *pm::Endpoint::parse("127.0.0.1:1");
    auto d = sdp::Handoff::decode(e.encode());
    ASSERT_TRUE(d);
    expect_same(e, *d);
}

TEST(SdpHandoffCodec, EveryTruncationAndTrailingByteRejected) {
    for (bool v6 : {false, true}) {
        const auto bytes = sample(v6).encode();
        for (std::size_t n = 0; n < bytes.size(); ++n)
            EXPECT_FALSE(sdp::Handoff::decode(std::span(bytes).first(n))) << "length " << n;
        auto longer = bytes;
        longer.push_back(0);
        EXPECT_FALSE(sdp::Handoff::decode(longer));
    }
}

TEST(SdpHandoffCodec, BadFieldsRejected) {
    const auto good = sample(false).encode();
    auto bad = [&](std::size_t at, std::uint8_t v) {
        auto b = good;
        b[at] = v;
        return !sdp::Handoff::decode(b).has_value();
    };
    EXPECT_TRUE(bad(0, 'X'));   // magic
    EXPECT_TRUE(bad(4, 2));     // version
    EXPECT_TRUE(bad(5, 0x80));  // unknown flags
    EXPECT_TRUE(bad(5, 0x04));
    EXPECT_FALSE(bad(5, 0x03));  // write_shut and peer_accepted
    EXPECT_TRUE(bad(14, 5));     // peer family
    // Lengths beyond 64 MiB, or not matching what follows.
    const std::size_t lens = good.size() - 300 - 1000 - 8;
    auto b = good;
    b[lens] = 0x10;  // unread length 256 MiB + 300
    EXPECT_FALSE(sdp::Handoff::decode(b));
    b = good;
    b[lens + 3] = static_cast<std::uint8_t>(b[lens + 3] + 1);
    EXPECT_FALSE(sdp::Handoff::decode(b));
}

TEST(SdpHandoffCodec, RandomGarbageNeverCrashes) {
    std::mt19937 rng(42);
    const auto good = sample(true).encode();
    for (int i = 0; i < 20000; ++i) {
        std::vector<std::uint8_t> b;
        if (i % 2 == 0) {
            b.resize(rng() % 128);
            for (auto& x : b)
                x = static_cast<std::uint8_t>(rng());
        } else {
            b = good;  // a valid one with a few bytes flipped
            for (int k = 0; k < 3; ++k)
                b[rng() % b.size()] ^= static_cast<std::uint8_t>(1 + rng() % 255);
        }
        auto d = sdp::Handoff::decode(b);
        if (d) {
            EXPECT_LE(d->unread.size() + d->unsent.size(), 64u * 1024 * 1024);
        }
    }
}
