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

std::uint32_t crc32c_shift_zeros_sw(std::uint32_t state, std::size_t n) {
    // The raw update is linear in the state: feeding n zero bytes is the
    // same as multiplying by x^(8n) mod P. Plain byte loop: tests only.
    std::uint32_t c = state;
    while (n-- > 0) {
        c = (c >> 8) ^ kTables[0][c & 0xFFu];
    }
    return c;
}

#ifdef SDP_IWARP_SSE42
namespace {

// The crc32 instruction has a latency of 3 cycles and a throughput of one
// per cycle: three independent streams over three adjacent blocks keep the
// unit busy. The partial CRCs are then combined with "shift by one block of
// zero bytes" operators, each a 4 x 256 table (linear in the 32-bit state).
struct ShiftTable {
    std::uint32_t t[4][256];
    [[nodiscard]] std::uint32_t apply(std::uint32_t c) const {
        return t[0][c & 0xFFu] ^ t[1][(c >> 8) & 0xFFu] ^ t[2][(c >> 16) & 0xFFu] ^ t[3][c >> 24];
    }
};

__attribute__((target("sse4.2"))) std::uint32_t crc_zeros_hw(std::uint32_t c, std::size_t n) {
    std::uint64_t v = c;
    for (std::size_t i = 0; i < n / 8; ++i) {
        v = _mm_crc32_u64(v, 0);
    }
    return static_cast<std::uint32_t>(v);
}

ShiftTable make_shift(std::size_t block) {
    ShiftTable s{};
    std::uint32_t basis[32];
    for (int b = 0; b < 32; ++b) {
        basis[b] = crc_zeros_hw(1u << b, block);
    }
    for (int k = 0; k < 4; ++k) {
        for (std::uint32_t v = 0; v < 256; ++v) {
            std::uint32_t r = 0;
            for (int bit = 0; bit < 8; ++bit) {
                if ((v >> bit) & 1u) {
                    r ^= basis[k * 8 + bit];
                }
            }
            s.t[k][v] = r;
        }
    }
    return s;
}

constexpr std::size_t kLongBlock = 4096;  // per stream: 12 KiB per round
constexpr std::size_t kShortBlock = 256;  // per stream: 768 bytes per round

const ShiftTable& shift_long() {
    static const ShiftTable t = make_shift(kLongBlock);
    return t;
}
const ShiftTable& shift_short() {
    static const ShiftTable t = make_shift(kShortBlock);
    return t;
}

__attribute__((target("sse4.2"))) inline std::uint64_t load64(const std::uint8_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

// Three streams over [p, p + 3 * block); returns the combined state.
__attribute__((target("sse4.2"))) inline std::uint32_t crc3(std::uint32_t state,
                                                            const std::uint8_t* p,
                                                            std::size_t block,
                                                            const ShiftTable& shift) {
    std::uint64_t a = state, b = 0, c = 0;
    const std::uint8_t* pb = p + block;
    const std::uint8_t* pc = p + 2 * block;
    for (std::size_t i = 0; i < block; i += 8) {
        a = _mm_crc32_u64(a, load64(p + i));
        b = _mm_crc32_u64(b, load64(pb + i));
        c = _mm_crc32_u64(c, load64(pc + i));
    }
    const std::uint32_t ab =
        shift.apply(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b);
    return shift.apply(ab) ^ static_cast<std::uint32_t>(c);
}

}  // namespace

__attribute__((target("sse4.2"))) std::uint32_t crc32c_update_hw1(std::uint32_t state,
                                                                  const std::uint8_t* p,
                                                                  std::size_t n) {
    std::uint64_t c = state;
    while (n >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        n -= 8;
    }
    auto c32 = static_cast<std::uint32_t>(c);
    while (n-- > 0) {
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_update_hw(std::uint32_t state,
                                                                 const std::uint8_t* p,
                                                                 std::size_t n) {
    if (n >= 3 * kLongBlock) {
        const ShiftTable& sl = shift_long();
        while (n >= 3 * kLongBlock) {
            state = crc3(state, p, kLongBlock, sl);
            p += 3 * kLongBlock;
            n -= 3 * kLongBlock;
        }
    }
    if (n >= 3 * kShortBlock) {
        const ShiftTable& ss = shift_short();
        while (n >= 3 * kShortBlock) {
            state = crc3(state, p, kShortBlock, ss);
            p += 3 * kShortBlock;
            n -= 3 * kShortBlock;
        }
    }
    return crc32c_update_hw1(state, p, n);
}

bool crc32c_hw_available() {
    return __builtin_cpu_supports("sse4.2") != 0;
}
#else
std::uint32_t crc32c_update_hw(std::uint32_t state, const std::uint8_t* p, std::size_t n) {
    return crc32c_update_sw(state, p, n);
}

std::uint32_t crc32c_update_hw1(std::uint32_t state, const std::uint8_t* p, std::size_t n) {
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
