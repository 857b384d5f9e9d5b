// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/crc32c.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

using namespace sdp::iwarp;

namespace {
std::span<const std::uint8_t> bytes(std::string_view s) {
    return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
}  // namespace

TEST(Crc32c, ZerosVectorFromNotes) {
    std::vector<std::uint8_t> z(32, 0);
    EXPECT_EQ(crc32c(z), 0x8A9136AAu);
}

TEST(Crc32c, Rfc3720Vectors) {
    std::vector<std::uint8_t> ff(32, 0xFF);
    EXPECT_EQ(crc32c(ff), 0x62A8AB43u);
    std::vector<std::uint8_t> inc(32);
    for (std::size_t i = 0; i < inc.size(); ++i) {
        inc[i] = static_cast<std::uint8_t>(i);
    }
    EXPECT_EQ(crc32c(inc), 0x46DD794Eu);
    EXPECT_EQ(crc32c(bytes("123456789")), 0xE3069283u);
    EXPECT_EQ(crc32c({}), 0u);
}

TEST(Crc32c, IncrementalEqualsOneShot) {
    std::mt19937 rng(7);
    std::vector<std::uint8_t> data(5000);
    for (auto& b : data) {
        b = static_cast<std::uint8_t>(rng());
    }
    const std::uint32_t whole = crc32c(data);
    for (int round = 0; round < 50; ++round) {
        Crc32c c;
        std::size_t off = 0;
        while (off < data.size()) {
            const std::size_t n = std::min<std::size_t>(rng() % 37, data.size() - off);
            c.update(std::span<const std::uint8_t>(data).subspan(off, n));
            off += n;
        }
        EXPECT_EQ(c.value(), whole);
    }
}

TEST(Crc32c, HardwareAndTableAgree) {
    if (!detail::crc32c_hw_available()) {
        GTEST_SKIP() << "no SSE4.2 on this CPU";
    }
    std::mt19937 rng(11);
    for (int round = 0; round < 300; ++round) {
        std::vector<std::uint8_t> data(rng() % 300);
        for (auto& b : data) {
            b = static_cast<std::uint8_t>(rng());
        }
        const std::uint32_t seed = rng();
        const std::uint32_t sw = detail::crc32c_update_sw(seed, data.data(), data.size());
        const std::uint32_t hw = detail::crc32c_update_hw(seed, data.data(), data.size());
        EXPECT_EQ(sw, hw) << "size " << data.size();
    }
}

// The three-stream path (inputs of 768 bytes and more) against the tables on
// every length 0..4096 at random alignments and seeds, and on long inputs
// around the 12 KiB block boundaries.
TEST(Crc32c, MultiStreamMatchesTablesAllLengths) {
    if (!detail::crc32c_hw_available()) {
        GTEST_SKIP() << "no SSE4.2 on this CPU";
    }
    std::mt19937 rng(23);
    std::vector<std::uint8_t> buf(40000 + 64);
    for (auto& b : buf) {
        b = static_cast<std::uint8_t>(rng());
    }
    auto check = [&](std::size_t n) {
        const std::size_t align = rng() % 64;
        const std::uint32_t seed = rng();
        const std::uint8_t* p = buf.data() + align;
        const std::uint32_t sw = detail::crc32c_update_sw(seed, p, n);
        EXPECT_EQ(detail::crc32c_update_hw(seed, p, n), sw) << "n " << n << " align " << align;
        EXPECT_EQ(detail::crc32c_update_hw1(seed, p, n), sw) << "n " << n << " align " << align;
    };
    for (std::size_t n = 0; n <= 4096; ++n) {
        check(n);
    }
    for (std::size_t n :
         {12287u, 12288u, 12289u, 13055u, 13056u, 13057u, 24576u, 25343u, 36864u, 40000u}) {
        check(n);
    }
    for (int i = 0; i < 200; ++i) {
        check(rng() % 40000);
    }
}

// Split anywhere: the incremental object gives the one-shot value.
TEST(Crc32c, MultiStreamSplitPoints) {
    std::mt19937 rng(29);
    std::vector<std::uint8_t> data(20000);
    for (auto& b : data) {
        b = static_cast<std::uint8_t>(rng());
    }
    const std::uint32_t whole = ~detail::crc32c_update_sw(0xFFFFFFFFu, data.data(), data.size());
    EXPECT_EQ(crc32c(data), whole);
    for (int round = 0; round < 300; ++round) {
        const std::size_t a = rng() % (data.size() + 1);
        const std::size_t b = a + rng() % (data.size() - a + 1);
        Crc32c c;
        c.update(std::span<const std::uint8_t>(data).first(a));
        c.update(std::span<const std::uint8_t>(data).subspan(a, b - a));
        c.update(std::span<const std::uint8_t>(data).subspan(b));
        EXPECT_EQ(c.value(), whole) << a << " " << b;
    }
}

TEST(Crc32c, ShiftByZerosIsLinear) {
    if (!detail::crc32c_hw_available()) {
        GTEST_SKIP() << "no SSE4.2 on this CPU";
    }
    std::mt19937 rng(31);
    std::vector<std::uint8_t> z(5000, 0);
    for (int i = 0; i < 50; ++i) {
        const std::uint32_t s = rng();
        const std::size_t n = rng() % z.size();
        EXPECT_EQ(detail::crc32c_shift_zeros_sw(s, n), detail::crc32c_update_hw(s, z.data(), n));
    }
}

// ---------------------------------------------------------------------------
// The VPCLMULQDQ folding path (AVX-512). Every test skips on CPUs without it:
// calling it there would execute illegal instructions.

namespace {

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::uint8_t> v(n);
    for (auto& b : v) {
        b = static_cast<std::uint8_t>(rng());
    }
    return v;
}

}  // namespace

// Every length 0..4096 (the short-input fallback below 128 bytes, the
// one-register path below 256, the four-register loop and every tail length)
// at every offset 0..63 into the buffer, a different start state per offset.
// The reference for length n + 1 extends the one for n by one byte through
// the tables, so the whole sweep costs one table pass per offset.
TEST(Crc32cVpclmul, MatchesTablesAllLengthsAllOffsets) {
    if (!detail::crc32c_vpclmul_available()) {
        GTEST_SKIP() << "no VPCLMULQDQ / AVX-512 on this CPU";
    }
    constexpr std::size_t kMaxLen = 4096;
    const std::vector<std::uint8_t> buf = random_bytes(kMaxLen + 64, 41);
    std::mt19937 rng(43);
    for (std::size_t off = 0; off < 64; ++off) {
        const std::uint8_t* p = buf.data() + off;
        const std::uint32_t seed = off == 0 ? 0xFFFFFFFFu : off == 1 ? 0u : rng();
        std::uint32_t ref = seed;
        int failures = 0;
        for (std::size_t n = 0; n <= kMaxLen && failures < 5; ++n) {
            const std::uint32_t got = detail::crc32c_update_vpclmul(seed, p, n);
            if (got != ref) {
                ++failures;
                ADD_FAILURE() << "n " << n << " offset " << off << " seed " << seed << ": got "
                              << got << " want " << ref;
            }
            if (n < kMaxLen) {
                ref = detail::crc32c_update_sw(ref, p + n, 1);
            }
        }
    }
}

// Long inputs: every length in a 256-byte window (one full turn of the
// four-register loop) around several sizes up to 1 MiB, and random lengths up
// to 1 MiB, at random offsets and states. As above, the window's references
// extend one table pass byte by byte.
TEST(Crc32cVpclmul, MatchesTablesLongInputs) {
    if (!detail::crc32c_vpclmul_available()) {
        GTEST_SKIP() << "no VPCLMULQDQ / AVX-512 on this CPU";
    }
    constexpr std::size_t kMiB = std::size_t{1} << 20;
    const std::vector<std::uint8_t> buf = random_bytes(kMiB + 64, 47);
    std::mt19937 rng(53);
    for (std::size_t first : {std::size_t{8192 - 128}, std::size_t{65536 - 128},
                              std::size_t{65536 + 128}, std::size_t{1000000}, kMiB - 256}) {
        const std::size_t off = rng() % 64;
        const std::uint32_t seed = rng();
        const std::uint8_t* p = buf.data() + off;
        std::uint32_t ref = detail::crc32c_update_sw(seed, p, first);
        for (std::size_t n = first; n <= first + 256; ++n) {
            ASSERT_EQ(detail::crc32c_update_vpclmul(seed, p, n), ref)
                << "n " << n << " offset " << off << " seed " << seed;
            ref = detail::crc32c_update_sw(ref, p + n, 1);
        }
    }
    for (int i = 0; i < 40; ++i) {
        const std::size_t n = i == 0 ? kMiB : rng() % (kMiB + 1);
        const std::size_t off = rng() % 64;
        const std::uint32_t seed = rng();
        const std::uint8_t* p = buf.data() + off;
        EXPECT_EQ(detail::crc32c_update_vpclmul(seed, p, n), detail::crc32c_update_sw(seed, p, n))
            << "n " << n << " offset " << off << " seed " << seed;
    }
}

// Degenerate data: all zero bytes (the folded accumulators stay zero when
// the start state is zero) and all 0xFF, from the usual and arbitrary states.
TEST(Crc32cVpclmul, MatchesTablesConstantData) {
    if (!detail::crc32c_vpclmul_available()) {
        GTEST_SKIP() << "no VPCLMULQDQ / AVX-512 on this CPU";
    }
    std::mt19937 rng(59);
    for (std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xFF}}) {
        const std::vector<std::uint8_t> buf((std::size_t{1} << 18) + 64, fill);
        std::vector<std::size_t> lengths = {0,    1,    32,    63,     64,    127,  128,
                                            255,  256,  257,   511,    512,   4095, 4096,
                                            4097, 9000, 65536, 100003, 262144};
        for (int i = 0; i < 20; ++i) {
            lengths.push_back(rng() % (std::size_t{1} << 18));
        }
        for (std::size_t n : lengths) {
            for (std::uint32_t seed : {0u, 0xFFFFFFFFu, static_cast<std::uint32_t>(rng())}) {
                const std::uint8_t* p = buf.data() + rng() % 64;
                EXPECT_EQ(detail::crc32c_update_vpclmul(seed, p, n),
                          detail::crc32c_update_sw(seed, p, n))
                    << "fill " << int{fill} << " n " << n << " seed " << seed;
            }
        }
        // Zero bytes only shift the state: the linear map of the tests above.
        if (fill == 0) {
            const std::uint32_t s = rng();
            EXPECT_EQ(detail::crc32c_update_vpclmul(s, buf.data(), 5000),
                      detail::crc32c_shift_zeros_sw(s, 5000));
        }
    }
}

// The check values of RFC 3720 (iSCSI) B.4, through the public API (which
// selects the folding path when the CPU has it) and through the folding path
// directly; and long inputs through the public API against the tables.
TEST(Crc32cVpclmul, Rfc3720VectorsAndPublicApi) {
    std::vector<std::uint8_t> zeros(32, 0x00);
    std::vector<std::uint8_t> ones(32, 0xFF);
    std::vector<std::uint8_t> ascending(32);
    for (std::size_t i = 0; i < ascending.size(); ++i) {
        ascending[i] = static_cast<std::uint8_t>(i);
    }
    EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
    EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
    EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);

    const std::vector<std::uint8_t> big = random_bytes(300000, 61);
    for (std::size_t n :
         {std::size_t{128}, std::size_t{1460}, std::size_t{65536}, std::size_t{300000}}) {
        const auto s = std::span<const std::uint8_t>(big).first(n);
        EXPECT_EQ(crc32c(s), ~detail::crc32c_update_sw(0xFFFFFFFFu, s.data(), n)) << "n " << n;
    }

    if (!detail::crc32c_vpclmul_available()) {
        GTEST_SKIP() << "no VPCLMULQDQ / AVX-512 on this CPU";
    }
    auto vp = [](const std::vector<std::uint8_t>& v) {
        return ~detail::crc32c_update_vpclmul(0xFFFFFFFFu, v.data(), v.size());
    };
    EXPECT_EQ(vp(zeros), 0x8A9136AAu);
    EXPECT_EQ(vp(ones), 0x62A8AB43u);
    EXPECT_EQ(vp(ascending), 0x46DD794Eu);
}

// Incremental updates split anywhere through the folding path equal one pass.
TEST(Crc32cVpclmul, SplitPoints) {
    if (!detail::crc32c_vpclmul_available()) {
        GTEST_SKIP() << "no VPCLMULQDQ / AVX-512 on this CPU";
    }
    const std::vector<std::uint8_t> data = random_bytes(70000, 67);
    const std::uint32_t whole = detail::crc32c_update_sw(0xFFFFFFFFu, data.data(), data.size());
    std::mt19937 rng(71);
    for (int round = 0; round < 200; ++round) {
        const std::size_t a = rng() % (data.size() + 1);
        const std::size_t b = a + rng() % (data.size() - a + 1);
        std::uint32_t s = detail::crc32c_update_vpclmul(0xFFFFFFFFu, data.data(), a);
        s = detail::crc32c_update_vpclmul(s, data.data() + a, b - a);
        s = detail::crc32c_update_vpclmul(s, data.data() + b, data.size() - b);
        EXPECT_EQ(s, whole) << a << " " << b;
    }
}
