// SPDX-License-Identifier: Apache-2.0
// MPA connection setup (RFC 5044 section 7, RFC 6581): the startup frame
// codec and a sans-I/O negotiation machine for both roles.
//
// Decisions (see docs/iwarp.md): rev 2 + Enhanced preferred, rev 1 accepted;
// CRC is used if either side sets C; markers are never supported (a Request
// with M is answered with R); the responder takes the initiator's IRD as its
// ORD and the initiator's ORD as its IRD, capped by its own limits; in
// peer-to-peer mode the zero-length RDMA Write RTR is preferred over the
// zero-length RDMA Read RTR.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "sdp/iwarp/result.hpp"

namespace sdp::iwarp {

// The key an MPA Request starts with (RFC 5044 section 7.1): what a
// listener can check before the startup to tell an MPA peer from others.
inline constexpr std::string_view kMpaRequestKey = "MPA ID Req Frame";

inline constexpr std::size_t kMpaHeaderSize = 20;        // key[16] flags rev pd_len
inline constexpr std::size_t kMpaMaxPrivateData = 512;   // RFC 5044 7.1: receive limit
inline constexpr std::size_t kMpaMaxSendPrivData = 256;  // Linux limit, incl. the v2 block
inline constexpr std::size_t kMpaV2BlockSize = 4;
inline constexpr std::size_t kMpaMaxUlpPrivData = kMpaMaxSendPrivData - kMpaV2BlockSize;
inline constexpr std::uint16_t kMpaIrdOrdMax = 0x3FFF;

inline constexpr std::uint8_t kMpaFlagMarkers = 0x80;
inline constexpr std::uint8_t kMpaFlagCrc = 0x40;
inline constexpr std::uint8_t kMpaFlagReject = 0x20;
inline constexpr std::uint8_t kMpaFlagEnhanced = 0x10;

enum class MpaKey : std::uint8_t { request, reply };

// One startup frame. private_data is everything after pd_len, including the
// v2 IRD/ORD block when present. Reserved flag bits are dropped on decode and
// sent as zero.
struct MpaFrame {
    MpaKey key = MpaKey::request;
    bool markers = false;
    bool crc = false;
    bool reject = false;
    bool enhanced = false;
    std::uint8_t rev = 2;
    std::vector<std::uint8_t> private_data;
    bool operator==(const MpaFrame&) const = default;
};

enum class MpaError : std::uint8_t {
    need_more,              // decoder: the frame is incomplete
    bad_key,                // not "MPA ID Req Frame" / "MPA ID Rep Frame" (or the wrong one)
    bad_rev,                // revision 0, > 2, or higher than offered
    pd_too_long,            // pd_len above the 512-byte limit of RFC 5044
    bad_v2_block,           // Enhanced set but private data shorter than 4 bytes
    markers_not_supported,  // peer asked for (or granted) markers
    rejected_by_peer,       // Reply had R set
    rejected_locally,       // our ULP rejected the Request
    no_matching_rtr,        // peer-to-peer without a common RTR message
    ulp_pd_too_long,        // our ULP private data exceeds 252 (rev 2) / 256 bytes
    wrong_state,            // call not allowed in this state
};
const char* to_string(MpaError e);

struct MpaDecoded {
    MpaFrame frame;
    std::size_t consumed = 0;
};

// Decodes one frame from the front of `in` (need_more if incomplete).
[[nodiscard]] Result<MpaDecoded, MpaError> decode_mpa_frame(std::span<const std::uint8_t> in);
// Encodes a frame; pd_too_long if private data does not fit the 16-bit length.
[[nodiscard]] Result<std::vector<std::uint8_t>, MpaError> encode_mpa_frame(const MpaFrame& f);

// RFC 6581 IRD/ORD block at the start of Enhanced private data.
struct MpaV2Params {
    bool p2p = false;        // IRD bit 15
    bool send_rtr = false;   // IRD bit 14: zero-length Send
    bool write_rtr = false;  // ORD bit 15: zero-length RDMA Write
    bool read_rtr = false;   // ORD bit 14: zero-length RDMA Read
    std::uint16_t ird = 0;   // 14 bits
    std::uint16_t ord = 0;   // 14 bits
    bool operator==(const MpaV2Params&) const = default;
};
[[nodiscard]] std::array<std::uint8_t, kMpaV2BlockSize> encode_mpa_v2(const MpaV2Params& p);
[[nodiscard]] MpaV2Params decode_mpa_v2(std::span<const std::uint8_t, kMpaV2BlockSize> b);

// How the initiator signals "ready to receive" in peer-to-peer mode.
enum class RtrMode : std::uint8_t { none, write, read };

enum class MpaRole : std::uint8_t { initiator, responder };

struct MpaConfig {
    bool enhanced = true;   // offer / accept rev 2 Enhanced
    bool crc = false;       // ask for CRC (used if either side asks)
    bool p2p = false;       // want peer-to-peer mode (RTR)
    bool rtr_write = true;  // RTR kinds we can send (initiator) / accept (responder)
    bool rtr_read = true;
    std::uint16_t ird = 128;  // our limits (siw default 128)
    std::uint16_t ord = 128;
    std::vector<std::uint8_t> private_data;  // initiator's ULP data for the Request
};

// What was agreed; valid once the machine is established (responder: from
// request_received on).
struct MpaOutcome {
    std::uint8_t rev = 1;
    bool enhanced = false;
    bool crc = false;
    bool p2p = false;
    RtrMode rtr = RtrMode::none;
    std::uint16_t ird = 0;                        // inbound RDMA Reads we serve at once
    std::uint16_t ord = 0;                        // outbound RDMA Reads we may have outstanding
    std::vector<std::uint8_t> peer_private_data;  // peer's ULP data (v2 block removed)
};

enum class MpaState : std::uint8_t {
    idle,              // initiator before start()
    awaiting_reply,    // initiator: Request queued
    awaiting_request,  // responder
    request_received,  // responder: call accept() or reject()
    established,
    failed,
};

class MpaNegotiator {
  public:
    MpaNegotiator(MpaRole role, MpaConfig cfg);

    // Initiator: queue the Request frame.
    std::optional<MpaError> start();
    // Consumes bytes of the peer's frame and nothing beyond it: the rest of
    // the stream (FPDUs) belongs to the QP engine. Returns bytes consumed.
    std::size_t on_bytes(std::span<const std::uint8_t> in);
    // Responder, in request_received.
    std::optional<MpaError> accept(std::span<const std::uint8_t> ulp_private_data);
    std::optional<MpaError> reject(std::span<const std::uint8_t> ulp_private_data);

    // Bytes to send (Request, Reply or an automatic reject).
    std::vector<std::uint8_t> take_output();

    [[nodiscard]] MpaRole role() const { return role_; }
    [[nodiscard]] MpaState state() const { return state_; }
    [[nodiscard]] std::optional<MpaError> error() const { return error_; }
    [[nodiscard]] const MpaOutcome& outcome() const { return outcome_; }

  private:
    void handle_frame(const MpaFrame& f);
    void handle_request(const MpaFrame& f);
    void handle_reply(const MpaFrame& f);
    void fail(MpaError e);
    void send_reply(bool reject, std::span<const std::uint8_t> ulp_pd);
    // Takes the peer's MPA v2 block (RFC 6581) off the front of `ulp`:
    // IRD/ORD, and peer-to-peer mode with the first RTR message both allow
    // (RDMA Write before RDMA Read). False: both asked for peer-to-peer and
    // no RTR message is common (p2p is left set; the caller fails).
    bool take_v2_block(std::span<const std::uint8_t>& ulp);

    MpaRole role_;
    MpaConfig cfg_;
    MpaState state_;
    std::optional<MpaError> error_;
    MpaOutcome outcome_;
    std::uint8_t sent_rev_ = 0;
    std::uint8_t reply_rev_ = 1;
    std::vector<std::uint8_t> in_;
    std::vector<std::uint8_t> out_;
};

}  // namespace sdp::iwarp
