// SPDX-License-Identifier: Apache-2.0
// The SDP Port Mapper wire codec (draft-pinkerton-iwarp-sdp, section 7.3).
//
// Every PM message is one 48-byte datagram laid out as Figure 17:
//
//   byte 0      Ver (2 bits, MSB first) | MT (2 bits) | IPV (4 bits)
//   byte 1      PmTime
//   bytes 2-3   Reserved (sent as zero, never checked)
//   bytes 4-5   ApPort            bytes 6-7   CpPort
//   bytes 8-15  AssocHandle
//   bytes 16-31 CpIPAddr          bytes 32-47 ApIPAddr
//
// All fields are in network byte order. With IPV 4 only the first 4 bytes of
// each address field are meaningful; the other 12 are sent as zero and
// ignored on receipt. decode() is total: every byte string yields either a
// Message or a typed DecodeError, and encode(decode(x)) == x for every x that
// decodes and already has its ignored bytes zero.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "pmclient/address.hpp"

namespace pm {

inline constexpr std::size_t kMessageSize = 48;
// rdma-core's iwpmd appends a 16-byte mapped CpIPAddr to its PMReq; the first
// 48 bytes are Figure 17. See docs/protocol-notes.md.
inline constexpr std::size_t kIwpmRequestSize = 64;
inline constexpr std::uint16_t kDefaultPort = 3935;  // section 16

enum class MessageType : std::uint8_t { request = 0, accept = 1, ack = 2, deny = 3 };

std::string_view to_string(MessageType t);

struct Message {
    MessageType type = MessageType::request;
    Family ipv = Family::v4;
    std::uint8_t pm_time = 0;
    std::uint16_t ap_port = 0;
    std::uint16_t cp_port = 0;
    std::uint64_t assoc_handle = 0;
    IpAddress cp_addr;  // family() == ipv
    IpAddress ap_addr;  // family() == ipv
    // True when the datagram was iwpmd's 64-byte PMReq; its trailer is ignored.
    bool iwpm_trailer = false;

    bool operator==(const Message&) const = default;
};

enum class DecodeError : std::uint8_t {
    too_short,     // fewer than 48 bytes
    too_long,      // more than 48 bytes (and not iwpmd's 64-byte PMReq)
    bad_version,   // Ver != 0
    reserved_ipv,  // IPV other than 4 or 6
};

std::string_view to_string(DecodeError e);

using DecodeResult = std::variant<Message, DecodeError>;

DecodeResult decode(std::span<const std::uint8_t> bytes);

using Wire = std::array<std::uint8_t, kMessageSize>;

// Encodes m. Address bytes are taken according to m.ipv: for IPv4 the first
// four bytes of each address, the rest of the field zero. Reserved is zero.
Wire encode(const Message& m);
void encode(const Message& m, std::span<std::uint8_t, kMessageSize> out);

// Builders for the replies of section 7.4; they copy every field the section
// says to reflect and set the others.
Message make_accept(const Message& req, const Endpoint& sdp, std::uint8_t pm_time);
// ApPort of a PMDeny: 7.3.1.6 says zero, 7.4 says echo the PMReq's.
enum class DenyApPort : std::uint8_t { echo, zero };
Message make_deny(const Message& req, DenyApPort ap_port = DenyApPort::echo);
Message make_ack(const Message& accept);

}  // namespace pm
