// SPDX-License-Identifier: Apache-2.0
// The Flow Control Mode tables (sdp/engine/modes.hpp) against the rules of
// sections 11 and 12 stated in the draft's text, and against themselves
// (what one end may send, the other end may accept).
#include "sdp/engine/modes.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace {

using sdp::engine::HalfRole;
using sdp::engine::Limit;
using sdp::engine::may_change;
using sdp::engine::Mode;
using sdp::engine::mode_master;
using sdp::engine::on_mode_change;
using sdp::engine::permitted;
using sdp::engine::to_string;

constexpr std::array<Mode, 3> kModes{Mode::buffered, Mode::combined, Mode::pipelined};

TEST(SdpModes, Figure25WhatOneEndSendsTheOtherAccepts) {
    // A's out half is B's in half: A's view (out, in) is B's (in, out).
    for (Mode a_to_b : kModes) {
        for (Mode b_to_a : kModes) {
            const auto a = permitted(a_to_b, b_to_a);
            const auto b = permitted(b_to_a, a_to_b);
            EXPECT_EQ(a.send_src_avail, b.accept_src_avail)
                << to_string(a_to_b) << "/" << to_string(b_to_a);
            EXPECT_EQ(a.send_sink_avail, b.accept_sink_avail)
                << to_string(a_to_b) << "/" << to_string(b_to_a);
            EXPECT_EQ(a.send_transaction, b.accept_transaction)
                << to_string(a_to_b) << "/" << to_string(b_to_a);
        }
    }
}

TEST(SdpModes, Section11MechanismsPerMode) {
    for (Mode out : kModes) {
        for (Mode in : kModes) {
            const auto p = permitted(out, in);
            const std::string pair = std::string(to_string(out)) + "/" + std::string(to_string(in));
            // 11.1: Buffered Mode is Bcopy (and Transactions) only: no Read
            // Zcopy on a Buffered half, so no RDMA Read as its Data Sink.
            EXPECT_EQ(p.post_rdma_read, in != Mode::buffered) << pair;
            // Figure 24: Write Zcopy only in Pipelined Mode.
            EXPECT_EQ(p.post_rdma_write, out == Mode::pipelined) << pair;
            // 11.2: one SrcAvail at a time in Combined Mode; several in
            // Pipelined Mode; none in Buffered Mode.
            const Limit src = out == Mode::buffered   ? Limit::none
                              : out == Mode::combined ? Limit::one
                                                      : Limit::many;
            EXPECT_EQ(p.send_src_avail, src) << pair;
            // 11.3: SinkAvail (Write Zcopy) and Transactions (Figure 24, "if
            // the reverse half-connection is in Pipelined Mode") need the
            // half the Data Sink receives on to be Pipelined.
            EXPECT_EQ(p.send_sink_avail != Limit::none, in == Mode::pipelined) << pair;
            EXPECT_EQ(p.send_transaction != Limit::none, in == Mode::pipelined) << pair;
        }
    }
    // The case the Write Zcopy branch must respect: Combined both ways.
    EXPECT_EQ(permitted(Mode::combined, Mode::combined).send_sink_avail, Limit::none);
    EXPECT_EQ(permitted(Mode::combined, Mode::combined).accept_sink_avail, Limit::none);
}

TEST(SdpModes, Figure27ModeMaster) {
    EXPECT_EQ(mode_master(Mode::buffered), HalfRole::sink);
    EXPECT_EQ(mode_master(Mode::combined), HalfRole::source);
    EXPECT_EQ(mode_master(Mode::pipelined), HalfRole::source);
}

TEST(SdpModes, Figure26TransitionsOnlyByTheMaster) {
    int allowed = 0;
    for (Mode from : kModes) {
        for (Mode to : kModes) {
            for (HalfRole who : {HalfRole::source, HalfRole::sink}) {
                const bool ok = may_change(from, to, who);
                allowed += ok ? 1 : 0;
                if (from == to) {
                    EXPECT_FALSE(ok) << "12: never a ModeChange to the current mode";
                }
                if (ok) {
                    EXPECT_EQ(who, mode_master(from)) << "only the Mode Master changes";
                }
            }
        }
    }
    EXPECT_EQ(allowed, 4);                                                       // 12.1-12.4
    EXPECT_TRUE(may_change(Mode::combined, Mode::buffered, HalfRole::source));   // 12.1
    EXPECT_TRUE(may_change(Mode::buffered, Mode::combined, HalfRole::sink));     // 12.2
    EXPECT_TRUE(may_change(Mode::combined, Mode::pipelined, HalfRole::source));  // 12.3
    EXPECT_TRUE(may_change(Mode::pipelined, Mode::combined, HalfRole::source));  // 12.4
    EXPECT_FALSE(may_change(Mode::buffered, Mode::pipelined, HalfRole::sink));   // not in Figure 26
    EXPECT_FALSE(
        may_change(Mode::pipelined, Mode::buffered, HalfRole::source));  // not in Figure 26
}

TEST(SdpModes, Section6_3_8ModeChangeReceived) {
    using sdp::wire::ModeChange;
    // S=0: our receive half, asked by its Data Source (12.3, 12.1, 12.4).
    EXPECT_EQ(on_mode_change(Mode::combined, Mode::combined, ModeChange{false, Mode::pipelined}),
              Mode::pipelined);
    EXPECT_EQ(on_mode_change(Mode::combined, Mode::combined, ModeChange{false, Mode::buffered}),
              Mode::buffered);
    EXPECT_EQ(on_mode_change(Mode::combined, Mode::pipelined, ModeChange{false, Mode::combined}),
              Mode::combined);
    // A Buffered receive half is ours to change (we are its Data Sink, the
    // master): the peer may not.
    EXPECT_FALSE(on_mode_change(Mode::combined, Mode::buffered, ModeChange{false, Mode::combined}));
    // S=1: our send half, asked by its Data Sink: only out of Buffered (12.2).
    EXPECT_EQ(on_mode_change(Mode::buffered, Mode::combined, ModeChange{true, Mode::combined}),
              Mode::combined);
    EXPECT_FALSE(on_mode_change(Mode::combined, Mode::combined, ModeChange{true, Mode::pipelined}));
    // The current mode: never.
    EXPECT_FALSE(on_mode_change(Mode::combined, Mode::combined, ModeChange{false, Mode::combined}));
}

}  // namespace
