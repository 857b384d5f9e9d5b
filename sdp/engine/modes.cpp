// SPDX-License-Identifier: Apache-2.0
#include "sdp/engine/modes.hpp"

#include <array>

namespace sdp::engine {

namespace {

struct Transition {
    Mode from;
    Mode to;
    HalfRole by;  // the Mode Master that sends the ModeChange
};

// Figure 26, with the masters of Figure 27 (12.1-12.4).
constexpr std::array<Transition, 4> kTransitions{{
    {Mode::combined, Mode::buffered, HalfRole::source},   // 12.1
    {Mode::buffered, Mode::combined, HalfRole::sink},     // 12.2
    {Mode::combined, Mode::pipelined, HalfRole::source},  // 12.3
    {Mode::pipelined, Mode::combined, HalfRole::source},  // 12.4
}};

struct Row {
    Mode out;  // "A to B"
    Mode in;   // "B to A"
    Permitted p;
};

constexpr Limit N = Limit::none;
constexpr Limit O = Limit::one;
constexpr Limit Y = Limit::many;

// Figure 25, row by row: Post RDMA Read Req, Post RDMA Write; Send SrcAvail,
// SinkAvail, Transaction; Accept SrcAvail, SinkAvail, Transaction.
constexpr std::array<Row, 9> kFigure25{{
    {Mode::buffered, Mode::buffered, {false, false, N, N, N, N, N, N}},
    {Mode::buffered, Mode::combined, {true, false, N, N, N, O, N, N}},
    {Mode::buffered, Mode::pipelined, {true, false, N, Y, Y, Y, N, N}},
    {Mode::combined, Mode::buffered, {false, false, O, N, N, N, N, N}},
    {Mode::combined, Mode::combined, {true, false, O, N, N, O, N, N}},
    {Mode::combined, Mode::pipelined, {true, false, O, Y, Y, Y, N, N}},
    {Mode::pipelined, Mode::buffered, {false, true, Y, N, N, N, Y, Y}},
    {Mode::pipelined, Mode::combined, {true, true, Y, N, N, O, Y, Y}},
    {Mode::pipelined, Mode::pipelined, {true, true, Y, Y, Y, Y, Y, Y}},
}};

}  // namespace

HalfRole mode_master(Mode m) {
    return m == Mode::buffered ? HalfRole::sink : HalfRole::source;
}

bool may_change(Mode from, Mode to, HalfRole who) {
    for (const Transition& t : kTransitions) {
        if (t.from == from && t.to == to) {
            return t.by == who && mode_master(from) == who;
        }
    }
    return false;  // the current mode, or not a transition of Figure 26
}

Permitted permitted(Mode out, Mode in) {
    for (const Row& r : kFigure25) {
        if (r.out == out && r.in == in) {
            return r.p;
        }
    }
    return {};  // not reached: every pair is a row
}

std::optional<Mode> on_mode_change(Mode out, Mode in, const wire::ModeChange& m) {
    // S=1: our send half, whose Data Sink (the sender) asks; S=0: our
    // receive half, whose Data Source (the sender) asks.
    const Mode current = m.send_half ? out : in;
    const HalfRole sender = m.send_half ? HalfRole::sink : HalfRole::source;
    if (!may_change(current, m.mode, sender)) {
        return std::nullopt;
    }
    return m.mode;
}

std::string_view to_string(Mode m) {
    switch (m) {
        case Mode::buffered:
            return "buffered";
        case Mode::combined:
            return "combined";
        case Mode::pipelined:
            return "pipelined";
    }
    return "unknown";
}

}  // namespace sdp::engine
