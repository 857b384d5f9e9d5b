// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/fpdu.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace sdp::iwarp;
using Bytes = std::vector<std::uint8_t>;

namespace {

Bytes random_bytes(std::mt19937& rng, std::size_t n) {
    Bytes b(n);
    for (auto& x : b) {
        x = static_cast<std::uint8_t>(rng());
    }
    return b;
}

struct Collected {
    std::vector<Bytes> ulpdus;
    std::optional<FpduError> error;
};

// Feeds `stream` in chunks chosen by `next_chunk`.
template <class Chunker>
Collected feed_split(const Bytes& stream, bool crc, Chunker next_chunk) {
    FpduReceiver rx(crc);
    Collected c;
    std::size_t off = 0;
    while (off < stream.size() && !rx.error()) {
        const std::size_t n = std::min(next_chunk(), stream.size() - off);
        const std::size_t used = rx.feed(std::span<const std::uint8_t>(stream).subspan(off, n),
                                         [&](std::span<const std::uint8_t> u) {
                                             c.ulpdus.emplace_back(u.begin(), u.end());
                                             return true;
                                         });
        if (!rx.error()) {
            EXPECT_EQ(used, n);
        }
        off += n;
    }
    c.error = rx.error();
    return c;
}

}  // namespace

TEST(Fpdu, PadAndSize) {
    EXPECT_EQ(fpdu_pad(14), 0u);
    EXPECT_EQ(fpdu_pad(18), 0u);
    EXPECT_EQ(fpdu_pad(15), 3u);
    EXPECT_EQ(fpdu_pad(16), 2u);
    EXPECT_EQ(fpdu_pad(17), 1u);
    EXPECT_EQ(fpdu_size(18), 24u);
    EXPECT_EQ(fpdu_size(19), 28u);
}

TEST(Fpdu, MssSizing) {
    EXPECT_EQ(max_ulpdu_for_mss(1460), 1456u - 6);
    EXPECT_EQ(max_ulpdu_for_mss(1448), 1448u - 6);
    EXPECT_EQ(max_ulpdu_for_mss(1455), 1448u - 6);
    EXPECT_EQ(max_ulpdu_for_mss(8960), 8960u - 6);
    EXPECT_EQ(max_ulpdu_for_mss(6), 0u);
    EXPECT_EQ(fpdu_size(max_ulpdu_for_mss(1460)), 1456u);
    EXPECT_LE(max_ulpdu_for_mss(1u << 20), kFpduMaxUlpdu);
    EXPECT_EQ(fpdu_pad(max_ulpdu_for_mss(1u << 20)), 0u);
}

TEST(Fpdu, GoldenWithCrc) {
    // length 0x0002, ULPDU 00 00, no pad: the CRC covers 00 02 00 00.
    Bytes out;
    const Bytes ulpdu = {0x00, 0x00};
    append_fpdu(out, ulpdu, {}, true);
    ASSERT_EQ(out.size(), 8u);
    EXPECT_EQ(out[0], 0x00);
    EXPECT_EQ(out[1], 0x02);
    const Bytes hashed = {0x00, 0x02, 0x00, 0x00};
    const std::uint32_t v = crc32c(hashed);
    EXPECT_EQ(out[4], static_cast<std::uint8_t>(v));
    EXPECT_EQ(out[7], static_cast<std::uint8_t>(v >> 24));
}

TEST(Fpdu, CrcLittleEndianOnWire) {
    // 26-byte ULPDU: 28 hashed bytes, no pad; the trailer is the
    // little-endian CRC32c of exactly those bytes.
    Bytes ulpdu(26, 0);
    Bytes out;
    append_fpdu(out, ulpdu, {}, true);
    ASSERT_EQ(out.size(), 32u);
    const std::uint32_t v = crc32c(std::span<const std::uint8_t>(out).first(28));
    EXPECT_EQ(out[28] | out[29] << 8 | out[30] << 16 | static_cast<std::uint32_t>(out[31]) << 24,
              v);
}

TEST(Fpdu, NoCrcIsZero) {
    Bytes out;
    append_fpdu(out, Bytes{1, 2, 3}, Bytes{4}, false);
    const Bytes golden = {0, 4, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(out, golden);
}

TEST(Fpdu, ReceiveOneByteAtATimeAndRandomSplits) {
    std::mt19937 rng(1234);
    for (bool crc : {false, true}) {
        std::vector<Bytes> sent;
        Bytes stream;
        for (int i = 0; i < 60; ++i) {
            Bytes u = random_bytes(rng, 1 + rng() % 700);
            const std::size_t cut = rng() % u.size();
            append_fpdu(stream, std::span<const std::uint8_t>(u).first(cut),
                        std::span<const std::uint8_t>(u).subspan(cut), crc);
            sent.push_back(std::move(u));
        }
        auto one = feed_split(stream, crc, [] { return std::size_t{1}; });
        EXPECT_FALSE(one.error);
        EXPECT_EQ(one.ulpdus, sent);
        for (int seed = 0; seed < 20; ++seed) {
            std::mt19937 split(static_cast<unsigned>(seed));
            auto r = feed_split(stream, crc, [&] { return 1 + split() % 1500; });
            EXPECT_FALSE(r.error);
            EXPECT_EQ(r.ulpdus, sent) << "seed " << seed;
        }
        auto whole = feed_split(stream, crc, [&] { return stream.size(); });
        EXPECT_EQ(whole.ulpdus, sent);
    }
}

TEST(Fpdu, CrcErrorDetectedAnywhere) {
    std::mt19937 rng(99);
    Bytes stream;
    append_fpdu(stream, random_bytes(rng, 100), {}, true);
    for (std::size_t pos = 0; pos < stream.size(); ++pos) {
        Bytes bad = stream;
        bad[pos] ^= 0x10;
        auto r = feed_split(bad, true, [] { return std::size_t{1}; });
        if (pos < 2) {
            // A corrupted length changes the frame extent; it is caught either
            // as a CRC error or (length 0) as a length error, or stays
            // incomplete — never delivered.
            EXPECT_TRUE(r.ulpdus.empty());
        } else {
            EXPECT_EQ(r.error, FpduError::crc) << pos;
            EXPECT_TRUE(r.ulpdus.empty());
        }
    }
    // Without CRC the same corruption of the trailer is ignored.
    Bytes nocrc;
    append_fpdu(nocrc, Bytes{1, 2, 3, 4}, {}, false);
    nocrc.back() = 0x55;
    auto r = feed_split(nocrc, false, [] { return std::size_t{3}; });
    EXPECT_FALSE(r.error);
    EXPECT_EQ(r.ulpdus.size(), 1u);
}

TEST(Fpdu, LengthErrors) {
    const Bytes zero = {0, 0, 0, 0, 0, 0};
    EXPECT_EQ(feed_split(zero, false, [] { return std::size_t{1}; }).error, FpduError::length);
    FpduReceiver rx(false, 100);
    Bytes big;
    append_fpdu(big, Bytes(101, 0), {}, false);
    rx.feed(big, [](auto) { return true; });
    EXPECT_EQ(rx.error(), FpduError::length);
}

TEST(Fpdu, SinkCanStop) {
    Bytes stream;
    append_fpdu(stream, Bytes{1}, {}, false);
    append_fpdu(stream, Bytes{2}, {}, false);
    FpduReceiver rx(false);
    int calls = 0;
    const std::size_t used = rx.feed(stream, [&](auto) {
        ++calls;
        return false;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(used, fpdu_size(1));
    EXPECT_TRUE(rx.at_boundary());
}

// Every split point of a stream of FPDUs (in-place path for whole FPDUs,
// gathered path for the one cut), with and without CRC.
TEST(Fpdu, EverySplitPointInPlaceAndGathered) {
    std::mt19937 rng(4321);
    for (bool crc : {false, true}) {
        std::vector<Bytes> sent;
        Bytes stream;
        for (std::size_t len : {1u, 2u, 3u, 5u, 18u, 300u, 1000u}) {
            Bytes u = random_bytes(rng, len);
            append_fpdu(stream, u, {}, crc);
            sent.push_back(std::move(u));
        }
        for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
            FpduReceiver rx(crc);
            std::vector<Bytes> got;
            auto sink = [&](std::span<const std::uint8_t> u) {
                got.emplace_back(u.begin(), u.end());
                return true;
            };
            const std::span<const std::uint8_t> all(stream);
            EXPECT_EQ(rx.feed(all.first(cut), sink), cut);
            EXPECT_EQ(rx.feed(all.subspan(cut), sink), stream.size() - cut);
            EXPECT_FALSE(rx.error());
            EXPECT_TRUE(rx.at_boundary());
            EXPECT_EQ(got, sent) << "cut " << cut;
        }
    }
}

// A corrupted byte of an FPDU received whole (the in-place path) is a CRC
// error and nothing is delivered from that FPDU on.
TEST(Fpdu, CrcErrorInPlace) {
    std::mt19937 rng(77);
    Bytes stream;
    append_fpdu(stream, random_bytes(rng, 64), {}, true);
    const std::size_t first = stream.size();
    append_fpdu(stream, random_bytes(rng, 2000), {}, true);
    for (std::size_t pos = first + 2; pos < stream.size(); pos += 7) {
        Bytes bad = stream;
        bad[pos] ^= 0x01;
        FpduReceiver rx(true);
        int n = 0;
        rx.feed(bad, [&](auto) {
            ++n;
            return true;
        });
        EXPECT_EQ(rx.error(), FpduError::crc) << pos;
        EXPECT_EQ(n, 1) << pos;
    }
}
