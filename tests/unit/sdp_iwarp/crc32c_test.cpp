#include "iwarp/crc32c.hpp"

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
