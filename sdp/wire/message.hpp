// SPDX-License-Identifier: Apache-2.0
// SDP messages of draft-pinkerton-iwarp-sdp-01 section 6: the BSDH plus the
// extended header and payload each MID implies (Figure 3).
//
// decode() is total: every byte string (one whole SDP Message, i.e. one
// iWARP Send payload or the Hello in MPA private data) yields either a
// Message or a typed DecodeError. encode() is its exact inverse for every
// byte string that decodes and already has its reserved bits zero:
// reserved fields and reserved Flags bits are sent as zero and never checked.
// Semantic rules (MaxAdverts != 0, versions, credits, ...) belong to the
// engine, not to the codec. Layout details: docs/sdp-wire.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "sdp/wire/bsdh.hpp"

namespace sdp::wire {

// Sizes of the extended headers (Figures 5-15).
inline constexpr std::size_t kHelloHeaderSize = 16;      // HH
inline constexpr std::size_t kHelloAckHeaderSize = 12;   // HAH
inline constexpr std::size_t kSrcAvailHeaderSize = 16;   // SrcAH
inline constexpr std::size_t kSinkAvailHeaderSize = 20;  // SinkAH, the largest
inline constexpr std::size_t kWordHeaderSize = 4;        // RWCH RRCH MCH CRBH CRBAH
inline constexpr std::size_t kSuspCommHeaderSize = 8;    // SuspCH
// Section 10 rule 4: private buffers hold at least BSDH + SinkAH + 1 byte.
inline constexpr std::size_t kMinPrivateBufferSize = kBsdhSize + kSinkAvailHeaderSize + 1;

inline constexpr std::uint8_t kMajorVersion = 1;  // 6.2.1.1
inline constexpr std::uint8_t kMinorVersion = 1;  // 6.2.1.2

// 6.2.1, Figure 5.
struct Hello {
    std::uint8_t major = kMajorVersion;  // 4 bits
    std::uint8_t minor = kMinorVersion;  // 4 bits
    std::uint16_t max_adverts = 1;
    std::uint32_t des_rem_rcv_sz = 0;
    std::uint32_t local_rcv_sz = 0;
    std::uint16_t loc_ird = 1;
    std::uint16_t loc_ord = 1;
    bool operator==(const Hello&) const = default;
};

// 6.2.2, Figure 6.
struct HelloAck {
    std::uint8_t major = kMajorVersion;  // 4 bits
    std::uint8_t minor = kMinorVersion;  // 4 bits
    std::uint16_t max_adverts = 1;
    std::uint32_t act_rcv_sz = 0;
    std::uint16_t loc_ird = 1;
    std::uint16_t loc_ord = 1;
    bool operator==(const HelloAck&) const = default;
};

// BSDH-only messages.
struct DisConn {
    bool operator==(const DisConn&) const = default;
};
struct AbortConn {
    bool operator==(const AbortConn&) const = default;
};
struct SendSm {
    bool operator==(const SendSm&) const = default;
};
struct SrcAvailCancel {
    bool operator==(const SrcAvailCancel&) const = default;
};
struct SinkAvailCancel {
    bool operator==(const SinkAvailCancel&) const = default;
};
struct SinkCancelAck {
    bool operator==(const SinkCancelAck&) const = default;
};
struct SuspCommAck {
    bool operator==(const SuspCommAck&) const = default;
};

// 6.3.6 / 6.3.7, Figures 9 and 10.
struct RdmaWrCompl {
    std::uint32_t len = 0;
    bool operator==(const RdmaWrCompl&) const = default;
};
struct RdmaRdCompl {
    std::uint32_t len = 0;
    bool operator==(const RdmaRdCompl&) const = default;
};

// Figure 12.
enum class FlowMode : std::uint8_t { buffered = 0, combined = 1, pipelined = 2 };

// 6.3.8, Figure 11: Rsvd (28 bits) | Mode (3 bits) | S (1 bit, the LSB).
struct ModeChange {
    bool send_half = false;  // S: 1 = change the receiver's send half-connection
    FlowMode mode = FlowMode::buffered;
    bool operator==(const ModeChange&) const = default;
};

// 6.4.1 / 6.4.2, Figures 13 and 14.
struct ChRcvBuf {
    std::uint32_t des_sz = 0;
    bool operator==(const ChRcvBuf&) const = default;
};
struct ChRcvBufAck {
    std::uint32_t act_sz = 0;
    bool operator==(const ChRcvBufAck&) const = default;
};

// 6.5.1, Figure 15. Constant1 (0) and Constant2 (1) are written by encode()
// and, like reserved fields, not checked by decode().
struct SuspComm {
    std::uint16_t dest_port = 0;
    bool operator==(const SuspComm&) const = default;
};

// 6.3.2, Figure 7. VA is sent as a 64-bit big-endian value (high word first).
struct SrcAvail {
    std::uint32_t len = 0;
    std::uint32_t stag = 0;
    std::uint64_t va = 0;
    std::vector<std::uint8_t> payload;
    bool operator==(const SrcAvail&) const = default;
};

// 6.3.3, Figure 8.
struct SinkAvail {
    std::uint32_t len = 0;
    std::uint32_t stag = 0;
    std::uint64_t va = 0;
    std::uint32_t non_discards = 0;
    std::vector<std::uint8_t> payload;
    bool operator==(const SinkAvail&) const = default;
};

// 6.3.1.
struct Data {
    std::vector<std::uint8_t> payload;
    bool operator==(const Data&) const = default;
};

using Body = std::variant<Hello, HelloAck, DisConn, AbortConn, SendSm, RdmaWrCompl, RdmaRdCompl,
                          ModeChange, SrcAvailCancel, SinkAvailCancel, SinkCancelAck, ChRcvBuf,
                          ChRcvBufAck, SuspComm, SuspCommAck, SinkAvail, SrcAvail, Data>;

struct Message {
    std::uint16_t bufs = 0;
    std::uint8_t flags = 0;  // only flag::known bits survive decode
    std::uint32_t mseq = 0;
    std::uint32_t mseq_ack = 0;
    Body body = Data{};

    bool operator==(const Message&) const = default;
};

Mid mid_of(const Body& b);
// BSDH + extended header + payload: the value of Len.
std::size_t encoded_size(const Message& m);
// ULP payload bytes carried (Data, SrcAvail, SinkAvail), else 0.
std::size_t payload_size(const Body& b);

// Section 14.2: messages that MUST travel as iWARP Send with Solicited Event.
// Hello travels in MPA private data and is neither.
bool is_solicited(const Message& m);

enum class DecodeError : std::uint8_t {
    too_short,         // fewer than 16 bytes: no whole BSDH
    reserved_mid,      // MID in 0x0F-0x3F or 0x80-0xFC
    experimental_mid,  // MID in 0x40-0x7F
    length_mismatch,   // BSDH Len differs from the number of bytes received
    bad_length,        // size wrong for the MID (missing or extra bytes)
    reserved_mode,     // ModeChange Mode 3-7
};

std::string_view to_string(DecodeError e);

using DecodeResult = std::variant<Message, DecodeError>;

DecodeResult decode(std::span<const std::uint8_t> bytes);
// The BSDH alone (no MID or length checks beyond the 16 bytes).
std::variant<Bsdh, DecodeError> decode_bsdh(std::span<const std::uint8_t> bytes);

std::vector<std::uint8_t> encode(const Message& m);
// Appends the encoding of m to out.
void encode_append(const Message& m, std::vector<std::uint8_t>& out);
// Appends the encoding of m with `extra` appended to its payload (for a Data
// Message: m carries an empty payload, the bytes come from the send queue
// without an intermediate copy). Len counts the extra bytes.
void encode_append(const Message& m, std::span<const std::uint8_t> extra,
                   std::vector<std::uint8_t>& out);
// Writes only the BSDH of m, with Len counting `extra` more payload bytes,
// into out: for a Data Message (no extended header, empty payload in m)
// whose payload already follows the 16 bytes in the caller's buffer.
void encode_bsdh_into(const Message& m, std::size_t extra, std::span<std::uint8_t, kBsdhSize> out);

}  // namespace sdp::wire
