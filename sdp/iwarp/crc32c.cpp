// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/crc32c.hpp"

#include <array>
#include <cstring>

#include "sdp/bytes/byte_order.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
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

using UpdateFn = std::uint32_t (*)(std::uint32_t, const std::uint8_t*, std::size_t);

// Chosen once: carry-less multiply folding (VPCLMULQDQ + AVX-512), else the
// crc32 instruction, else the tables.
UpdateFn selected() {
    static const UpdateFn fn = detail::crc32c_vpclmul_available() ? &detail::crc32c_update_vpclmul
                               : detail::crc32c_hw_available()    ? &detail::crc32c_update_hw
                                                                  : &detail::crc32c_update_sw;
    return fn;
}

}  // namespace

namespace detail {

std::uint32_t crc32c_update_sw(std::uint32_t state, const std::uint8_t* p, std::size_t n) {
    std::uint32_t c = state;
    while (n >= 8) {
        const std::uint32_t lo = bytes::get32<bytes::Order::little>(p) ^ c;
        const std::uint32_t hi = bytes::get32<bytes::Order::little>(p + 4);
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
    // The last 0..7 bytes: at most one 4-, one 2- and one 1-byte step.
    auto c32 = static_cast<std::uint32_t>(c);
    if (n & 4u) {
        std::uint32_t v;
        std::memcpy(&v, p, 4);
        c32 = _mm_crc32_u32(c32, v);
        p += 4;
    }
    if (n & 2u) {
        std::uint16_t v;
        std::memcpy(&v, p, 2);
        c32 = _mm_crc32_u16(c32, v);
        p += 2;
    }
    if (n & 1u) {
        c32 = _mm_crc32_u8(c32, *p);
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

namespace {

// ---------------------------------------------------------------------------
// Carry-less multiply folding (VPCLMULQDQ on 512-bit registers).
//
// Notation. The raw update is state' = (state * x^(8n) + M(x) * x^32) mod P,
// where M is the message polynomial; in this reflected CRC bit 0 of byte 0 is
// M's highest coefficient. Equivalently, the state is xored into the first 4
// bytes and the update starts from state 0. Loading 16 message bytes into a
// 128-bit register (little endian) gives register bit i = coefficient of
// x^(127 - i) of that block's polynomial, so the register's low qword H holds
// the high-degree half: block = H * x^64 + L (L = high qword).
//
// Folding. A block X followed by D more message bits contributes X * x^D. As
// only the residue mod P matters, it can be replaced by
//     H * (x^(64+D) mod P) + L * (x^D mod P),
// a polynomial of degree < 95 that is simply xored into the block D bits
// later. Each product is one 64 x 32 bit carry-less multiply. With a constant
// K stored as a reflected 32-bit value (bit j = coefficient of x^(31 - j)) in
// the low half of a qword, the 95-bit product of a reflected qword and K, read
// back as a 128-bit register, is the polynomial product times x^33 (bit k of
// the product is the coefficient of x^(94 - k), the register reads it as
// x^(127 - k)). Hence the constants are x^(D+31) mod P for H and x^(D-33) mod
// P for L, computed below from kPoly (no tables of magic numbers).
//
// Each 512-bit register holds four independent 128-bit lanes; the main loop
// keeps four registers (256 bytes), so every lane moves D = 4 * 512 bits per
// iteration. The four registers are then folded into one (D = 1536, 1024,
// 512; inputs under 256 bytes start with one register), further 64-byte
// blocks folded into that (D = 512), its four lanes folded into one 128-bit
// value (D = 384, 256, 128) and that value is, modulo P, the whole message
// so far: its CRC from state 0 (two crc32 instructions over its 16 bytes) is
// the state after the folded bytes. The remaining < 64 bytes go through the
// crc32 instruction.
// ---------------------------------------------------------------------------

// x^e mod P, reflected (bit j = coefficient of x^(31 - j)): x^0 is bit 31 and
// multiplying by x is one step of the bitwise CRC (a shift towards bit 0, and
// x^32 = kPoly mod P on the way out).
constexpr std::uint32_t xpow_mod_p(std::uint32_t e) {
    std::uint32_t v = 0x80000000u;
    for (std::uint32_t i = 0; i < e; ++i) {
        v = (v & 1u) ? (v >> 1) ^ kPoly : v >> 1;
    }
    return v;
}

// The multipliers that move a 128-bit lane forward by d bits: low qword for
// the register's low qword (x^(d+31)), high qword for its high qword
// (x^(d-33)).
struct FoldConst {
    std::uint64_t lo;
    std::uint64_t hi;
};

constexpr FoldConst fold_const(std::uint32_t d_bits) {
    return {xpow_mod_p(d_bits + 31), xpow_mod_p(d_bits - 33)};
}

// Checks of the representation: x^31 is bit 0; x^32 reduces to P's 32 low
// coefficients, which is kPoly.
static_assert(xpow_mod_p(31) == 1u);
static_assert(xpow_mod_p(32) == kPoly);

constexpr FoldConst kFold2048 = fold_const(4 * 512);  // main loop, four registers
constexpr FoldConst kFold1536 = fold_const(3 * 512);  // register 0 onto register 3
constexpr FoldConst kFold1024 = fold_const(2 * 512);  // register 1 onto register 3
constexpr FoldConst kFold512 = fold_const(512);       // register 2; one-register loop
constexpr FoldConst kFold384 = fold_const(384);       // lane 0 onto lane 3
constexpr FoldConst kFold256 = fold_const(256);       // lane 1 onto lane 3
constexpr FoldConst kFold128 = fold_const(128);       // lane 2 onto lane 3

// Below this many bytes the crc32-instruction path is as fast or faster: the
// folding path has a fixed cost (the reduction of the registers, two
// dependent crc32 and the < 64-byte tail) worth ~100 bytes of crc32. Measured
// with bench/crc32c on a Xeon (Sapphire Rapids class): 64-112 bytes 0.93-0.99x
// the crc32 path, 128 bytes 1.5x, 256 bytes 2.9x.
constexpr std::size_t kVpclmulMin = 128;

#define SDP_IWARP_VPCLMUL_TARGET \
    __attribute__((target("avx512f,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.2")))

SDP_IWARP_VPCLMUL_TARGET inline __m512i broadcast_fold(FoldConst k) {
    return _mm512_set_epi64(static_cast<long long>(k.hi), static_cast<long long>(k.lo),
                            static_cast<long long>(k.hi), static_cast<long long>(k.lo),
                            static_cast<long long>(k.hi), static_cast<long long>(k.lo),
                            static_cast<long long>(k.hi), static_cast<long long>(k.lo));
}

SDP_IWARP_VPCLMUL_TARGET inline __m512i load512(const std::uint8_t* p) {
    return _mm512_loadu_si512(p);
}

// acc moved forward by the constant's distance, xored into next (per lane).
SDP_IWARP_VPCLMUL_TARGET inline __m512i fold512(__m512i acc, __m512i k, __m512i next) {
    const __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x00);  // H * x^(d+31)
    const __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x11);  // L * x^(d-33)
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96);       // lo ^ hi ^ next
}

}  // namespace

SDP_IWARP_VPCLMUL_TARGET std::uint32_t crc32c_update_vpclmul(std::uint32_t state,
                                                             const std::uint8_t* p, std::size_t n) {
    // Short inputs: straight to the single-stream loop (the three-stream path
    // starts above kVpclmulMin anyway).
    static_assert(kVpclmulMin >= 64, "the folding path needs one full 512-bit block");
    static_assert(kVpclmulMin <= 3 * kShortBlock);
    if (n < kVpclmulMin) {
        return crc32c_update_hw1(state, p, n);
    }

    // The incoming state enters as data: xored into the first 4 bytes.
    __m512i x0 = _mm512_xor_si512(
        load512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(state))));
    if (n >= 256) {
        __m512i x1 = load512(p + 64);
        __m512i x2 = load512(p + 128);
        __m512i x3 = load512(p + 192);
        p += 256;
        n -= 256;
        const __m512i k2048 = broadcast_fold(kFold2048);
        while (n >= 256) {
            x0 = fold512(x0, k2048, load512(p));
            x1 = fold512(x1, k2048, load512(p + 64));
            x2 = fold512(x2, k2048, load512(p + 128));
            x3 = fold512(x3, k2048, load512(p + 192));
            p += 256;
            n -= 256;
        }
        // Independent products: the three folds run in parallel.
        x3 = fold512(x0, broadcast_fold(kFold1536), x3);
        x3 = fold512(x1, broadcast_fold(kFold1024), x3);
        x0 = fold512(x2, broadcast_fold(kFold512), x3);
    } else {
        p += 64;
        n -= 64;
    }
    const __m512i k512 = broadcast_fold(kFold512);
    while (n >= 64) {
        x0 = fold512(x0, k512, load512(p));
        p += 64;
        n -= 64;
    }

    // Four lanes into one: lanes 0..2 move by 384, 256 and 128 bits onto
    // lane 3; lane 3's multipliers are zero and its own value is added as is.
    const __m512i klanes = _mm512_set_epi64(
        0, 0, static_cast<long long>(kFold128.hi), static_cast<long long>(kFold128.lo),
        static_cast<long long>(kFold256.hi), static_cast<long long>(kFold256.lo),
        static_cast<long long>(kFold384.hi), static_cast<long long>(kFold384.lo));
    const __m512i t = fold512(x0, klanes, _mm512_maskz_mov_epi64(0xC0, x0));
    // Sum of the four lanes by lane shuffles. (The zero-masked forms with a
    // full mask: the unmasked and extract intrinsics use an "undefined"
    // source that g++ 12 flags with -Wmaybe-uninitialized.)
    const __m512i h = _mm512_xor_si512(t, _mm512_maskz_shuffle_i64x2(0xFF, t, t, 0x4E));  // 2301
    const __m512i v = _mm512_xor_si512(h, _mm512_maskz_shuffle_i64x2(0xFF, h, h, 0xB1));  // 1032

    // v's lane 0 is congruent (mod P) to everything folded so far, placed at
    // the end of the folded bytes: the state after them is the CRC of its 16
    // bytes from state 0.
    std::uint64_t c = _mm_crc32_u64(0, static_cast<std::uint64_t>(v[0]));
    c = _mm_crc32_u64(c, static_cast<std::uint64_t>(v[1]));
    return crc32c_update_hw1(static_cast<std::uint32_t>(c), p, n);
}

#undef SDP_IWARP_VPCLMUL_TARGET

bool crc32c_vpclmul_available() {
    // Every feature named in the target attribute above, so the compiler may
    // use any of them there. libgcc's avx512 bits also check that the OS
    // saves the zmm state (XCR0).
    return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq");
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

std::uint32_t crc32c_update_vpclmul(std::uint32_t state, const std::uint8_t* p, std::size_t n) {
    return crc32c_update_sw(state, p, n);
}

bool crc32c_vpclmul_available() {
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
