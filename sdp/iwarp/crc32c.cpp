#include "iwarp/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define SDP_IWARP_SSE42 1
#endif

namespace sdp::iwarp {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) {
            c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
        }
        t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i) {
        for (std::size_t s = 1; s < 8; ++s) {
            const std::uint32_t prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][prev & 0xFFu];
        }
    }
    return t;
}

constexpr Tables kTables = make_tables();

std::uint32_t load_le32(const std::uint8_t* p) {
    return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
           static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

using UpdateFn = std::uint32_t (*)(std::uint32_t, const std::uint8_t*, std::size_t);

UpdateFn selected() {
    static const UpdateFn fn =
        detail::crc32c_hw_available() ? &detail::crc32c_update_hw : &detail::crc32c_update_sw;
    return fn;
}

}  // namespace

namespace detail {

std::uint32_t crc32c_update_sw(std::uint32_t state, const std::uint8_t* p, std::size_t n) {
    std::uint32_t c = state;
    while (n >= 8) {
        const std::uint32_t lo = load_le32(p) ^ c;
        const std::uint32_t hi = load_le32(p + 4);
        c = kTables[7][lo & 0xFFu] ^ kTables[6][(lo >> 8) & 0xFFu] ^
            kTables[5][(lo >> 16) & 0xFFu] ^ kTables[4][lo >> 24] ^ kTables[3][hi & 0xFFu] ^
            kTables[2][(hi >> 8) & 0xFFu] ^ kTables[1][(hi >> 16) & 0xFFu] ^ kTables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) {
        c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFFu];
    }
    return c;
}

#ifdef SDP_IWARP_SSE42
__attribute__((target("sse4.2"))) std::uint32_t crc32c_update_hw(std::uint32_t state,
                                                                 const std::uint8_t* p,
                                                                 std::size_t n) {
    std::uint64_t c = state;
    while (n >= 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    auto c32 = static_cast<std::uint32_t>(c);
    while (n-- > 0) {
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32;
}

bool crc32c_hw_available() {
    return __builtin_cpu_supports("sse4.2") != 0;
}
#else
std::uint32_t crc32c_update_hw(std::uint32_t state, const std::uint8_t* p, std::size_t n) {
    return crc32c_update_sw(state, p, n);
}

bool crc32c_hw_available() {
    return false;
}
#endif

}  // namespace detail

void Crc32c::update(std::span<const std::uint8_t> data) {
    if (!data.empty()) {
        state_ = selected()(state_, data.data(), data.size());
    }
}

std::uint32_t crc32c(std::span<const std::uint8_t> data) {
    Crc32c c;
    c.update(data);
    return c.value();
}

}  // namespace sdp::iwarp
