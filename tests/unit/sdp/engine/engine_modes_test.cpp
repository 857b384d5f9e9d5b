// SPDX-License-Identifier: Apache-2.0
// ModeChange received by the engine (12, 6.3.8): the slave switches at
// once, and a ModeChange its sender may not send resets the connection.
#include <gtest/gtest.h>

#include "zcopy_pair.hpp"

namespace {

using namespace sdp::test;
using e::Mode;

TEST(SdpEngineModes, Section12StartsCombinedBothWays) {
    ZPair p;
    EXPECT_EQ(p.b.mode_out(), Mode::combined);
    EXPECT_EQ(p.b.mode_in(), Mode::combined);
}

TEST(SdpEngineModes, Section12_3And12_4DataSourceMovesOurReceiveHalf) {
    ZPair p;
    p.inject(w::ModeChange{false, Mode::pipelined});  // S=0: the sender is its Data Source
    EXPECT_EQ(p.b.state(), e::State::established);
    EXPECT_EQ(p.b.mode_in(), Mode::pipelined);
    EXPECT_EQ(p.b.mode_out(), Mode::combined);
    p.inject(w::ModeChange{false, Mode::combined});
    EXPECT_EQ(p.b.mode_in(), Mode::combined);
    p.inject(w::ModeChange{false, Mode::buffered});  // 12.1
    EXPECT_EQ(p.b.mode_in(), Mode::buffered);
    EXPECT_EQ(p.b.stats().mode_changes_received, 3u);
}

TEST(SdpEngineModes, Section12_2DataSinkMovesOurSendHalfOutOfBufferedOnly) {
    // Our send half in Combined: its master is us (the Data Source), so the
    // peer as its Data Sink may not change it.
    ZPair p;
    p.inject(w::ModeChange{true, Mode::buffered});
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::bad_mode_change);
}

TEST(SdpEngineModes, Section12NeverToTheCurrentModeNorOutsideFigure26) {
    {
        ZPair p;
        p.inject(w::ModeChange{false, Mode::combined});  // the current mode
        EXPECT_EQ(p.b.error(), e::Error::bad_mode_change);
    }
    {
        ZPair p;
        p.inject(w::ModeChange{false, Mode::buffered});
        ASSERT_EQ(p.b.mode_in(), Mode::buffered);
        // Buffered -> Pipelined is not in Figure 26, and a Buffered half's
        // master is its Data Sink (us), not the sender.
        p.inject(w::ModeChange{false, Mode::pipelined});
        EXPECT_EQ(p.b.error(), e::Error::bad_mode_change);
    }
}

}  // namespace
