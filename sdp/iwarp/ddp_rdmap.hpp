// SPDX-License-Identifier: Apache-2.0
// DDP (RFC 5041) and RDMAP (RFC 5040) headers: the codec for the ULPDU carried
// in each FPDU. Decoding is total: any byte string gives a segment or a typed
// error; version and opcode values are kept as received so the QP engine can
// answer bad ones with the right Terminate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sdp/iwarp/result.hpp"

namespace sdp::iwarp {

inline constexpr std::size_t kDdpTaggedHeaderSize = 14;    // ctrl, sink STag, TO
inline constexpr std::size_t kDdpUntaggedHeaderSize = 18;  // ctrl, inval STag, QN, MSN, MO
inline constexpr std::size_t kReadRequestSize = 28;
inline constexpr std::size_t kTerminateCtrlSize = 4;
inline constexpr std::uint8_t kDdpVersion = 1;    // RFC 5041
inline constexpr std::uint8_t kRdmapVersion = 1;  // RFC 5040 (IETF RNIC)

inline constexpr std::uint16_t kCtrlTagged = 0x8000;
inline constexpr std::uint16_t kCtrlLast = 0x4000;

enum class Opcode : std::uint8_t {
    write = 0,
    read_request = 1,
    read_response = 2,
    send = 3,
    send_inv = 4,
    send_se = 5,
    send_se_inv = 6,
    terminate = 7,
};

// Untagged queue numbers (RFC 5040 section 5).
inline constexpr std::uint32_t kQnSend = 0;
inline constexpr std::uint32_t kQnReadRequest = 1;
inline constexpr std::uint32_t kQnTerminate = 2;

// One DDP header (tagged or untagged) with the RDMAP control bits.
struct DdpHeader {
    bool tagged = false;
    bool last = true;
    std::uint8_t ddp_version = kDdpVersion;
    std::uint8_t rdmap_version = kRdmapVersion;
    std::uint8_t opcode = 0;  // 4 bits, raw (reserved values kept)
    // tagged
    std::uint32_t stag = 0;  // sink STag
    std::uint64_t to = 0;    // tagged offset
    // untagged
    std::uint32_t inval_stag = 0;  // Send with Invalidate; zero otherwise
    std::uint32_t qn = 0;
    std::uint32_t msn = 0;
    std::uint32_t mo = 0;
    bool operator==(const DdpHeader&) const = default;

    [[nodiscard]] std::size_t size() const {
        return tagged ? kDdpTaggedHeaderSize : kDdpUntaggedHeaderSize;
    }
    [[nodiscard]] std::uint16_t ctrl() const;
};

enum class DdpError : std::uint8_t {
    too_short,  // ULPDU shorter than its DDP header (or an RDMAP header)
};
const char* to_string(DdpError e);

struct DdpSegment {
    DdpHeader header;
    std::span<const std::uint8_t> payload;  // bytes after the DDP header
};

[[nodiscard]] Result<DdpSegment, DdpError> decode_ddp(std::span<const std::uint8_t> ulpdu);
void encode_ddp(std::vector<std::uint8_t>& out, const DdpHeader& h);
[[nodiscard]] std::vector<std::uint8_t> encode_ddp(const DdpHeader& h);

// RDMA Read Request header (RFC 5040 section 4.4), the payload of opcode 1.
struct ReadRequest {
    std::uint32_t sink_stag = 0;
    std::uint64_t sink_to = 0;
    std::uint32_t size = 0;
    std::uint32_t src_stag = 0;
    std::uint64_t src_to = 0;
    bool operator==(const ReadRequest&) const = default;
};
[[nodiscard]] Result<ReadRequest, DdpError> decode_read_request(std::span<const std::uint8_t> p);
void encode_read_request(std::vector<std::uint8_t>& out, const ReadRequest& r);

// Terminate layers / error types / codes (RFC 5040 7.2, RFC 5041 7.2,
// RFC 5044 8, RFC 6581).
enum class TermLayer : std::uint8_t { rdmap = 0, ddp = 1, llp = 2 };
namespace term {
// RDMAP error types
inline constexpr std::uint8_t kRdmapLocalCatastrophic = 0x0;
inline constexpr std::uint8_t kRdmapRemoteProtection = 0x1;
inline constexpr std::uint8_t kRdmapRemoteOperation = 0x2;
// RDMAP error codes
inline constexpr std::uint8_t kRdmapInvalidStag = 0x00;
inline constexpr std::uint8_t kRdmapBaseBounds = 0x01;
inline constexpr std::uint8_t kRdmapAccessRights = 0x02;
inline constexpr std::uint8_t kRdmapStagNotAssociated = 0x03;
inline constexpr std::uint8_t kRdmapToWrap = 0x04;
inline constexpr std::uint8_t kRdmapInvalidVersion = 0x05;
inline constexpr std::uint8_t kRdmapUnexpectedOpcode = 0x06;
inline constexpr std::uint8_t kRdmapCatastrophicStream = 0x07;
inline constexpr std::uint8_t kRdmapCatastrophicGlobal = 0x08;
inline constexpr std::uint8_t kRdmapCannotInvalidate = 0x09;
inline constexpr std::uint8_t kRdmapUnspecified = 0xFF;
// DDP error types
inline constexpr std::uint8_t kDdpLocalCatastrophic = 0x0;
inline constexpr std::uint8_t kDdpTaggedBuffer = 0x1;
inline constexpr std::uint8_t kDdpUntaggedBuffer = 0x2;
inline constexpr std::uint8_t kDdpReserved = 0x3;
// DDP tagged error codes
inline constexpr std::uint8_t kDdpTInvalidStag = 0x00;
inline constexpr std::uint8_t kDdpTBaseBounds = 0x01;
inline constexpr std::uint8_t kDdpTStagNotAssociated = 0x02;
inline constexpr std::uint8_t kDdpTToWrap = 0x03;
inline constexpr std::uint8_t kDdpTInvalidVersion = 0x04;
// DDP untagged error codes
inline constexpr std::uint8_t kDdpUInvalidQn = 0x01;
inline constexpr std::uint8_t kDdpUNoBuffer = 0x02;
inline constexpr std::uint8_t kDdpUInvalidMsnRange = 0x03;
inline constexpr std::uint8_t kDdpUInvalidMo = 0x04;
inline constexpr std::uint8_t kDdpUTooLong = 0x05;
inline constexpr std::uint8_t kDdpUInvalidVersion = 0x06;
// LLP (MPA) error type / codes
inline constexpr std::uint8_t kLlpMpa = 0x0;
inline constexpr std::uint8_t kMpaTcpLost = 0x01;
inline constexpr std::uint8_t kMpaCrc = 0x02;
inline constexpr std::uint8_t kMpaMarkerMismatch = 0x03;
inline constexpr std::uint8_t kMpaInvalidFrame = 0x04;
inline constexpr std::uint8_t kMpaLocalCatastrophic = 0x05;
inline constexpr std::uint8_t kMpaInsufficientIrd = 0x06;
inline constexpr std::uint8_t kMpaNoMatchingRtr = 0x07;
}  // namespace term

// Terminate header (RFC 5040 section 4.8): Terminate Control (layer, etype,
// ecode, M/D/R) + 13 reserved bits, then DDP Segment Length (when M or D),
// the terminated DDP header (when D; 14 or 18 bytes by its T bit) and the
// terminated RDMA Read Request header (when R; 28 bytes).
struct TerminateHeader {
    TermLayer layer = TermLayer::rdmap;
    std::uint8_t etype = 0;  // 4 bits
    std::uint8_t ecode = 0;
    bool m = false;  // DDP Segment Length valid
    bool d = false;  // DDP header included
    bool r = false;  // RDMA header included
    std::uint16_t ddp_segment_length = 0;
    std::vector<std::uint8_t> ddp_header;   // when d
    std::vector<std::uint8_t> rdma_header;  // when r
    bool operator==(const TerminateHeader&) const = default;
};
[[nodiscard]] Result<TerminateHeader, DdpError> decode_terminate(std::span<const std::uint8_t> p);
void encode_terminate(std::vector<std::uint8_t>& out, const TerminateHeader& t);

}  // namespace sdp::iwarp
