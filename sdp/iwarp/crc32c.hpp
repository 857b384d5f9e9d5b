// SPDX-License-Identifier: Apache-2.0
// CRC32c (Castagnoli): the MPA FPDU digest (RFC 5044 section 6.1).
// Reflected polynomial 0x82F63B78, initial value ~0, final xor ~0.
//
// Implementations, chosen once at run time (__builtin_cpu_supports); all give
// identical results:
//  - carry-less multiply folding with VPCLMULQDQ on 512-bit registers
//    (AVX-512F/VL/BW + VPCLMULQDQ) for inputs of 128 bytes and more: four
//    512-bit accumulators folded 256 bytes per iteration, reduced to 128 bits
//    and finished with the crc32 instruction (which also takes the last < 64
//    bytes and inputs under 128 bytes); ~4x the next path from 1 KiB on;
//  - the SSE4.2 crc32 instruction (three interleaved streams on long inputs,
//    combined with shift tables);
//  - slicing-by-8 tables.
// The rest of the project keeps its default -march: only the functions of
// each path are compiled for their instruction set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sdp::iwarp {

// Incremental CRC32c: update() any number of times, then value().
class Crc32c {
  public:
    void update(std::span<const std::uint8_t> data);
    [[nodiscard]] std::uint32_t value() const { return ~state_; }
    void reset() { state_ = 0xFFFFFFFFu; }

  private:
    std::uint32_t state_ = 0xFFFFFFFFu;
};

// One-shot CRC32c of data.
[[nodiscard]] std::uint32_t crc32c(std::span<const std::uint8_t> data);

namespace detail {
// Raw state update (no initial/final inversion); exposed so tests can compare
// both implementations.
[[nodiscard]] std::uint32_t crc32c_update_sw(std::uint32_t state, const std::uint8_t* p,
                                             std::size_t n);
[[nodiscard]] std::uint32_t crc32c_update_hw(std::uint32_t state, const std::uint8_t* p,
                                             std::size_t n);
// The single-stream hardware loop (the multi-stream path's tail).
[[nodiscard]] std::uint32_t crc32c_update_hw1(std::uint32_t state, const std::uint8_t* p,
                                              std::size_t n);
// The state after n zero bytes (bytewise tables; for tests).
[[nodiscard]] std::uint32_t crc32c_shift_zeros_sw(std::uint32_t state, std::size_t n);
[[nodiscard]] bool crc32c_hw_available();
// The VPCLMULQDQ folding path (any length: below 128 bytes it runs the crc32
// instruction loop). Call only when crc32c_vpclmul_available(): it executes
// AVX-512 instructions. On non-x86 builds it is the table path.
[[nodiscard]] std::uint32_t crc32c_update_vpclmul(std::uint32_t state, const std::uint8_t* p,
                                                  std::size_t n);
[[nodiscard]] bool crc32c_vpclmul_available();
}  // namespace detail

}  // namespace sdp::iwarp
