// SPDX-License-Identifier: Apache-2.0
// SDP Base Sockets Direct Header (draft-pinkerton-iwarp-sdp-01, 6.1).
//
// Figure 2, read with IETF conventions (network byte order, bit 0 = MSB):
//
//   bytes 0-1    Bufs        bytes 2  Flags      byte 3  MID
//   bytes 4-7    Len         bytes 8-11 MSeq     bytes 12-15 MSeqAck
//
// Deployed InfiniBand SDP (sdp_defs.h) puts MID first and Flags second, then
// Bufs; see docs/sdp-wire.md. The byte layout lives in codec.cpp only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sdp::wire {

inline constexpr std::size_t kBsdhSize = 16;

// Figure 3. Values not listed are Reserved (0x0F-0x3F, 0x80-0xFC) or
// Experimental (0x40-0x7F); the codec rejects them.
enum class Mid : std::uint8_t {
    hello = 0x00,
    hello_ack = 0x01,
    dis_conn = 0x02,
    abort_conn = 0x03,
    send_sm = 0x04,
    rdma_wr_compl = 0x05,
    rdma_rd_compl = 0x06,
    mode_change = 0x07,
    src_avail_cancel = 0x08,
    sink_avail_cancel = 0x09,
    sink_cancel_ack = 0x0A,
    ch_rcv_buf = 0x0B,
    ch_rcv_buf_ack = 0x0C,
    susp_comm = 0x0D,
    susp_comm_ack = 0x0E,
    sink_avail = 0xFD,
    src_avail = 0xFE,
    data = 0xFF,
};

std::string_view to_string(Mid m);

// Figure 4: "bit position 0" is the most significant bit of the Flags byte.
namespace flag {
inline constexpr std::uint8_t oob_pres = 0x80;  // bit 0
inline constexpr std::uint8_t oob_pend = 0x40;  // bit 1
inline constexpr std::uint8_t req_pipe = 0x20;  // bit 2
// Bits 3-7 are reserved: sent as zero, not checked (decode drops them).
inline constexpr std::uint8_t known = oob_pres | oob_pend | req_pipe;
}  // namespace flag

// The decoded BSDH. Len is not stored in a Message: encode() derives it and
// decode() checks it against the size of the received SDP Message.
struct Bsdh {
    std::uint16_t bufs = 0;
    std::uint8_t flags = 0;
    Mid mid = Mid::data;
    std::uint32_t len = 0;
    std::uint32_t mseq = 0;
    std::uint32_t mseq_ack = 0;

    bool operator==(const Bsdh&) const = default;
};

}  // namespace sdp::wire
