// SPDX-License-Identifier: Apache-2.0
// Connection teardown (draft-pinkerton-iwarp-sdp-01, 8.2) as two small state
// machines, one per half-connection, each with every transition in one table
// (teardown.cpp) in the manner of h11's _state.py:
//
//   SendTeardown: what this side sent (DisConn, AbortConn, the LLP teardown).
//   RecvTeardown: what the peer sent (DisConn, AbortConn) and the LLP's end.
//
// next() is pure: it returns the state an event leads to, or nullopt when the
// table has no such transition (the event is rejected and the state stays).
// The Connection decides what a rejection means: a protocol violation (a
// second DisConn), the other branch of a rule (no DisConn sent: no AbortConn,
// the LLP is torn down at once) or nothing (shutdown_write() twice).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sdp::engine {

enum class SendTeardown : std::uint8_t {
    open,           // writes accepted
    draining,       // shutdown_write(): DisConn after the queued data (8.2.1 step 2)
    disconn_sent,   // DisConn sent (8.2.1 step 3)
    closing,        // DisConn sent and received: graceful LLP teardown asked (8.2.1 step 4)
    abort_pending,  // reset after DisConn: AbortConn waits for credit (8.2.2)
    abort_sent,     // AbortConn sent, then the normal LLP teardown (8.2.2)
    abort_dropped,  // AbortConn given up: the peer overran our buffers, or the LLP went
};

enum class SendEvent : std::uint8_t {
    shutdown,      // the ULP closed the send half
    disconn,       // DisConn went out
    llp_teardown,  // DisConn also received: the graceful LLP teardown is asked for
    abort,         // abortive close with the LLP up and no AbortConn from the peer
    abort_conn,    // AbortConn went out
    give_up,       // AbortConn abandoned
};

enum class RecvTeardown : std::uint8_t {
    open,             // data may still arrive
    disconn,          // DisConn received: no more data (8.2.1)
    aborted,          // AbortConn received without a DisConn before it (8.2.2)
    disconn_aborted,  // DisConn, then AbortConn: abortive after all (8.2.2)
    closed,           // LLP gone after a DisConn alone: graceful (8.2.1 step 4)
    lost,             // LLP gone without a DisConn: abortive (8.2.2)
    disconn_lost,     // LLP gone after DisConn and AbortConn: abortive (8.2.2)
};

enum class RecvEvent : std::uint8_t {
    disconn,     // DisConn received
    abort_conn,  // AbortConn received
    llp_closed,  // the LLP connection is gone (FIN, RST or error)
};

std::optional<SendTeardown> next(SendTeardown s, SendEvent e);
std::optional<RecvTeardown> next(RecvTeardown s, RecvEvent e);

// Takes the transition for `e` if the table has one: true if it did; false,
// with `s` unchanged, if the event was rejected.
template <class State, class Event>
bool step(State& s, Event e) {
    const auto to = next(s, e);
    if (to)
        s = *to;
    return to.has_value();
}

std::string_view to_string(SendTeardown s);
std::string_view to_string(SendEvent e);
std::string_view to_string(RecvTeardown s);
std::string_view to_string(RecvEvent e);

// DisConn was sent (in this state or on the way to it).
bool disconn_sent(SendTeardown s);
// DisConn was received (in this state or on the way to it).
bool disconn_received(RecvTeardown s);
// AbortConn was received and the LLP is still there.
bool abort_received(RecvTeardown s);
// The LLP connection is gone.
bool llp_closed(RecvTeardown s);

}  // namespace sdp::engine
