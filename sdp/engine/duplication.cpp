// SPDX-License-Identifier: Apache-2.0
#include "sdp/engine/duplication.hpp"

#include <array>

namespace sdp::engine {

namespace {

struct Transition {
    Dup from;
    DupEvent on;
    Dup to;
};

using D = Dup;
using E = DupEvent;

// Every legal transition; anything else is rejected.
constexpr std::array<Transition, 12> kTable{{
    // 13.1.1 step 2: the Local Peer.
    {D::none, E::suspend, D::local_waiting},
    {D::local_waiting, E::susp_comm_sent, D::local_sent},
    {D::local_sent, E::susp_comm_ack, D::local_done},
    // Step 3: the Remote Peer, either role.
    {D::none, E::susp_comm_at_connector, D::remote_waiting},
    {D::none, E::susp_comm_at_acceptor, D::remote_waiting},
    // Ours was not sent yet, so nothing is concurrent: answer the peer's and
    // send ours again on the new connection (as 13.1.2 does).
    {D::local_waiting, E::susp_comm_at_connector, D::remote_waiting},
    {D::local_waiting, E::susp_comm_at_acceptor, D::remote_waiting},
    // 13.1.2: both sent SuspComm. The Connecting Peer responds; the
    // Accepting Peer disregards the incoming one.
    {D::local_sent, E::susp_comm_at_connector, D::remote_waiting},
    {D::local_sent, E::susp_comm_at_acceptor, D::local_sent},
    // Steps 3-4: SuspCommAck sent, then the LLP closed after it.
    {D::remote_waiting, E::susp_comm_ack_sent, D::remote_acked},
    {D::remote_acked, E::llp_closed, D::reconnecting},
    // Step 5: the suspended Local Peer's LLP goes; its state stays for the
    // new Controlling Address Space.
    {D::local_done, E::llp_closed, D::local_done},
}};

}  // namespace

std::optional<Dup> next(Dup s, DupEvent e) {
    for (const auto& t : kTable) {
        if (t.from == s && t.on == e)
            return t.to;
    }
    return std::nullopt;
}

std::string_view to_string(Dup s) {
    switch (s) {
        case D::none:
            return "none";
        case D::local_waiting:
            return "local_waiting";
        case D::local_sent:
            return "local_sent";
        case D::local_done:
            return "local_done";
        case D::remote_waiting:
            return "remote_waiting";
        case D::remote_acked:
            return "remote_acked";
        case D::reconnecting:
            return "reconnecting";
    }
    return "?";
}

std::string_view to_string(DupEvent e) {
    switch (e) {
        case E::suspend:
            return "suspend";
        case E::susp_comm_sent:
            return "susp_comm_sent";
        case E::susp_comm_at_connector:
            return "susp_comm_at_connector";
        case E::susp_comm_at_acceptor:
            return "susp_comm_at_acceptor";
        case E::susp_comm_ack_sent:
            return "susp_comm_ack_sent";
        case E::susp_comm_ack:
            return "susp_comm_ack";
        case E::llp_closed:
            return "llp_closed";
    }
    return "?";
}

bool dup_quiet(Dup s) {
    return s == D::local_sent || s == D::local_done || s == D::remote_acked || s == D::reconnecting;
}

bool dup_peer_quiet(Dup s) {
    return s == D::local_done || s == D::remote_waiting || s == D::remote_acked ||
           s == D::reconnecting;
}

}  // namespace sdp::engine
