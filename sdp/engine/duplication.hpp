// SPDX-License-Identifier: Apache-2.0
// Socket duplication (draft-pinkerton-iwarp-sdp-01, 13.1.1 and 13.1.2) as one
// small state machine with every transition in one table (duplication.cpp),
// in the style of teardown.hpp.
//
//   Local Peer (initiator, 13.1.1 step 2):
//     none -suspend-> local_waiting -susp_comm_sent-> local_sent
//          -susp_comm_ack-> local_done
//   Remote Peer (responder, steps 3, 4, 8):
//     none -susp_comm-> remote_waiting -susp_comm_ack_sent-> remote_acked
//          -llp_closed-> reconnecting  (the driver connects to the new port)
//   13.1.2 (both sent SuspComm): the Accepting Peer disregards the peer's
//   (local_sent stays), the Connecting Peer answers it (remote_waiting) and
//   sends its own again once the new connection is up.
//
// next() is pure; a rejected event is a protocol violation that the
// Connection answers with a reset (a second SuspComm, a SuspCommAck nobody
// asked for).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sdp::engine {

enum class Dup : std::uint8_t {
    none,            // no duplication in progress
    local_waiting,   // suspend(): In-Process operations finish, SuspComm not sent yet
    local_sent,      // SuspComm sent: quiet (step 2), waiting for SuspCommAck
    local_done,      // SuspCommAck received: suspended, the state may be handed over (step 5)
    remote_waiting,  // SuspComm received: In-Process operations finish (step 3)
    remote_acked,    // SuspCommAck sent: quiet, the LLP closes after it (step 4)
    reconnecting,    // LLP closed: the driver connects to the SuspComm's port (step 4)
};

enum class DupEvent : std::uint8_t {
    suspend,                 // the ULP asked to suspend (Local Peer)
    susp_comm_sent,          // our SuspComm went out
    susp_comm_at_connector,  // SuspComm received by the Connecting Peer
    susp_comm_at_acceptor,   // SuspComm received by the Accepting Peer
    susp_comm_ack_sent,      // our SuspCommAck went out
    susp_comm_ack,           // SuspCommAck received
    llp_closed,              // the LLP connection is gone
};

std::optional<Dup> next(Dup s, DupEvent e);

std::string_view to_string(Dup s);
std::string_view to_string(DupEvent e);

// No SDP Message may go out in this state (13.1.1 steps 2 and 3).
bool dup_quiet(Dup s);
// The peer may send no SDP Message in this state (it sent SuspComm or
// SuspCommAck): anything that arrives is a protocol violation.
bool dup_peer_quiet(Dup s);

}  // namespace sdp::engine
