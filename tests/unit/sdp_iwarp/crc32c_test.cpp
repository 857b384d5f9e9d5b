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
    if (!detail::crc32c_hw_available()) {
        GTEST_SKIP() << "no SSE4.2: the hardware path fell back to tables";
    }
}
