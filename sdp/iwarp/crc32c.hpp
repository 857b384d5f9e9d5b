// CRC32c (Castagnoli): the MPA FPDU digest (RFC 5044 section 6.1).
// Reflected polynomial 0x82F63B78, initial value ~0, final xor ~0. Uses the
// SSE4.2 crc32 instruction when the CPU has it (three interleaved streams on
// long inputs, combined with shift tables), slicing-by-8 tables otherwise.
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
}  // namespace detail

}  // namespace sdp::iwarp
