// SPDX-License-Identifier: Apache-2.0
#include "sdp/engine/teardown.hpp"

#include <array>

namespace sdp::engine {

namespace {

template <class State, class Event>
struct Transition {
    State from;
    Event on;
    State to;
};

using SS = SendTeardown;
using SE = SendEvent;
using RS = RecvTeardown;
using RE = RecvEvent;

// Every legal transition of the send half; anything else is rejected.
constexpr std::array<Transition<SS, SE>, 7> kSendTable{{
    {SS::open, SE::shutdown, SS::draining},
    {SS::draining, SE::disconn, SS::disconn_sent},
    {SS::disconn_sent, SE::llp_teardown, SS::closing},
    // 8.2.2: AbortConn only if a DisConn went out (and the LLP is still up,
    // which the caller checks); without one the LLP is torn down at once.
    {SS::disconn_sent, SE::abort, SS::abort_pending},
    {SS::closing, SE::abort, SS::abort_pending},
    {SS::abort_pending, SE::abort_conn, SS::abort_sent},
    {SS::abort_pending, SE::give_up, SS::abort_dropped},
}};

// Every legal transition of the receive half; anything else is rejected.
constexpr std::array<Transition<RS, RE>, 7> kRecvTable{{
    {RS::open, RE::disconn, RS::disconn},
    {RS::open, RE::abort_conn, RS::aborted},
    {RS::disconn, RE::abort_conn, RS::disconn_aborted},
    // 8.2.1 step 4 / 8.2.2: graceful only after a DisConn without AbortConn.
    {RS::open, RE::llp_closed, RS::lost},
    {RS::disconn, RE::llp_closed, RS::closed},
    {RS::aborted, RE::llp_closed, RS::lost},
    {RS::disconn_aborted, RE::llp_closed, RS::disconn_lost},
}};

template <class State, class Event, std::size_t N>
std::optional<State> lookup(const std::array<Transition<State, Event>, N>& table, State s,
                            Event e) {
    for (const auto& t : table) {
        if (t.from == s && t.on == e)
            return t.to;
    }
    return std::nullopt;
}

}  // namespace

std::optional<SendTeardown> next(SendTeardown s, SendEvent e) {
    return lookup(kSendTable, s, e);
}

std::optional<RecvTeardown> next(RecvTeardown s, RecvEvent e) {
    return lookup(kRecvTable, s, e);
}

std::string_view to_string(SendTeardown s) {
    switch (s) {
        case SS::open:
            return "open";
        case SS::draining:
            return "draining";
        case SS::disconn_sent:
            return "disconn_sent";
        case SS::closing:
            return "closing";
        case SS::abort_pending:
            return "abort_pending";
        case SS::abort_sent:
            return "abort_sent";
        case SS::abort_dropped:
            return "abort_dropped";
    }
    return "?";
}

std::string_view to_string(SendEvent e) {
    switch (e) {
        case SE::shutdown:
            return "shutdown";
        case SE::disconn:
            return "disconn";
        case SE::llp_teardown:
            return "llp_teardown";
        case SE::abort:
            return "abort";
        case SE::abort_conn:
            return "abort_conn";
        case SE::give_up:
            return "give_up";
    }
    return "?";
}

std::string_view to_string(RecvTeardown s) {
    switch (s) {
        case RS::open:
            return "open";
        case RS::disconn:
            return "disconn";
        case RS::aborted:
            return "aborted";
        case RS::disconn_aborted:
            return "disconn_aborted";
        case RS::closed:
            return "closed";
        case RS::lost:
            return "lost";
        case RS::disconn_lost:
            return "disconn_lost";
    }
    return "?";
}

std::string_view to_string(RecvEvent e) {
    switch (e) {
        case RE::disconn:
            return "disconn";
        case RE::abort_conn:
            return "abort_conn";
        case RE::llp_closed:
            return "llp_closed";
    }
    return "?";
}

bool disconn_sent(SendTeardown s) {
    return s != SS::open && s != SS::draining;
}

bool disconn_received(RecvTeardown s) {
    return s == RS::disconn || s == RS::disconn_aborted || s == RS::closed || s == RS::disconn_lost;
}

bool abort_received(RecvTeardown s) {
    return s == RS::aborted || s == RS::disconn_aborted;
}

bool llp_closed(RecvTeardown s) {
    return s == RS::closed || s == RS::lost || s == RS::disconn_lost;
}

}  // namespace sdp::engine
