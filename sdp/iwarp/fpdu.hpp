// SPDX-License-Identifier: Apache-2.0
// MPA FPDU framing (RFC 5044 section 4): ULPDU_Length be16 | ULPDU | pad to 4 |
// CRC32c. The CRC covers length + ULPDU + pad and is sent as the
// little-endian bytes of the value; without negotiated CRC it is sent as zero
// and not checked. Markers are never used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sdp/iwarp/crc32c.hpp"

namespace sdp::iwarp {

inline constexpr std::size_t kFpduHeaderSize = 2;
inline constexpr std::size_t kFpduCrcSize = 4;
inline constexpr std::size_t kFpduMaxUlpdu = 0xFFFF;

[[nodiscard]] constexpr std::size_t fpdu_pad(std::size_t ulpdu_len) {
    return (4 - ((kFpduHeaderSize + ulpdu_len) & 3)) & 3;
}
[[nodiscard]] constexpr std::size_t fpdu_size(std::size_t ulpdu_len) {
    return kFpduHeaderSize + ulpdu_len + fpdu_pad(ulpdu_len) + kFpduCrcSize;
}
// Largest ULPDU of an FPDU that fits one TCP segment: the MSS rounded down to
// a multiple of 8, minus the length field and CRC (no pad is then needed).
// 0 if the MSS is too small to carry anything.
[[nodiscard]] constexpr std::size_t max_ulpdu_for_mss(std::size_t mss) {
    const std::size_t m = mss & ~static_cast<std::size_t>(7);
    if (m <= kFpduHeaderSize + kFpduCrcSize) {
        return 0;
    }
    const std::size_t u = m - kFpduHeaderSize - kFpduCrcSize;
    return u > kFpduMaxUlpdu ? (kFpduMaxUlpdu & ~static_cast<std::size_t>(3)) - 2 : u;
}

// The bytes of one FPDU around its payload, for gathered writes: prefix =
// ULPDU_Length + ULPDU header, trailer = pad + CRC. prefix, payload, trailer
// concatenated are exactly what append_fpdu() writes.
inline constexpr std::size_t kFpduMaxFramedHeader = 62;
struct FpduFrame {
    std::uint8_t prefix[kFpduHeaderSize + kFpduMaxFramedHeader];
    std::uint8_t prefix_len = 0;
    std::uint8_t trailer[3 + kFpduCrcSize];
    std::uint8_t trailer_len = 0;
};
// header.size() <= kFpduMaxFramedHeader; header + payload <= kFpduMaxUlpdu.
void frame_fpdu(FpduFrame& f, std::span<const std::uint8_t> header,
                std::span<const std::uint8_t> payload, bool crc);

// Appends one FPDU whose ULPDU is header followed by payload (gathered).
// header.size() + payload.size() must be at most kFpduMaxUlpdu.
void append_fpdu(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> header,
                 std::span<const std::uint8_t> payload, bool crc);

enum class FpduError : std::uint8_t {
    crc,     // CRC32c mismatch
    length,  // ULPDU_Length zero or above the configured limit
};
const char* to_string(FpduError e);

// Receive machine: header -> data (+pad) -> trailer, CRC computed as bytes
// arrive. Accepts any split of the stream. Errors are sticky.
class FpduReceiver {
  public:
    explicit FpduReceiver(bool crc, std::size_t max_ulpdu = kFpduMaxUlpdu)
        : crc_(crc), max_ulpdu_(max_ulpdu) {}

    // Feeds bytes; calls on_ulpdu(span) for each complete ULPDU. If on_ulpdu
    // returns false, feeding stops after that ULPDU. Returns bytes consumed.
    //
    // An FPDU that lies whole in `in` is checked and handed out in place (no
    // copy); one split across calls is gathered in an internal buffer.
    template <class Sink>
    std::size_t feed(std::span<const std::uint8_t> in, Sink&& on_ulpdu) {
        std::size_t used = 0;
        while (used < in.size() && !error_) {
            if (at_boundary()) {
                const std::size_t whole = whole_fpdu(in.subspan(used));
                if (whole > 0) {
                    const std::uint8_t* p = in.data() + used;
                    used += whole;
                    if (error_) {
                        break;
                    }
                    if (!on_ulpdu(std::span<const std::uint8_t>(p + kFpduHeaderSize, len_))) {
                        break;
                    }
                    continue;
                }
            }
            used += step(in.subspan(used));
            if (complete_) {
                complete_ = false;
                if (!on_ulpdu(std::span<const std::uint8_t>(ulpdu_))) {
                    break;
                }
            }
        }
        return used;
    }

    [[nodiscard]] std::optional<FpduError> error() const { return error_; }
    // The ULPDU length of the FPDU being received (for Terminate reports).
    [[nodiscard]] std::size_t current_length() const { return len_; }
    // True between FPDUs (nothing partial buffered).
    [[nodiscard]] bool at_boundary() const { return state_ == State::header && hdr_fill_ == 0; }

  private:
    enum class State : std::uint8_t { header, data, trailer };
    std::size_t step(std::span<const std::uint8_t> in);
    // At a boundary: if `in` starts with a whole FPDU of valid length, checks
    // its CRC (sets error_ on a mismatch), sets len_ and returns its size;
    // otherwise 0 (the byte-wise machine takes over).
    std::size_t whole_fpdu(std::span<const std::uint8_t> in);

    bool crc_;
    std::size_t max_ulpdu_;
    State state_ = State::header;
    std::uint8_t hdr_[kFpduHeaderSize] = {};
    std::size_t hdr_fill_ = 0;
    std::size_t len_ = 0;
    std::size_t data_need_ = 0;  // ULPDU + pad still to come
    std::uint8_t trailer_[kFpduCrcSize] = {};
    std::size_t trailer_fill_ = 0;
    std::vector<std::uint8_t> ulpdu_;
    Crc32c crc32_;
    bool complete_ = false;
    std::optional<FpduError> error_;
};

}  // namespace sdp::iwarp
