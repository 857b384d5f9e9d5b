// SPDX-License-Identifier: Apache-2.0
// ModeChange received by the engine (12, 6.3.8): the slave switches at
// once, and a ModeChange its sender may not send resets the connection;
// the REQ_PIPE hint (6.1.2) set and examined by the right end only.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <variant>

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

// 6.1.2 / Figure 27: REQ_PIPE is the Mode Slave's hint, and an
// RdmaWrCompl's bit speaks for the opposite half: the one we receive on,
// whose slave we are in Combined and Pipelined Mode (able to do zero copy,
// we set it) and whose master we are in Buffered Mode (the Data Sink, 12.2;
// the master ignores the bit there): then the bit is zero.
TEST(SdpEngineModes, Section6_1_2ReqPipeClearWhenOurReceiveHalfIsBuffered) {
    for (const Mode in : {Mode::combined, Mode::pipelined, Mode::buffered}) {
        SCOPED_TRACE(e::to_string(in));
        ZPair p;
        if (in == Mode::pipelined)
            p.pipeline();   // a to b
        p.pipeline(false);  // b to a: b, as Data Source, takes SinkAvails
        if (in == Mode::buffered)
            p.inject(w::ModeChange{false, Mode::buffered});  // 12.1, a as Data Source
        ASSERT_EQ(p.b.mode_in(), in);
        ASSERT_EQ(p.b.mode_out(), Mode::pipelined);
        Bytes reply(100000);
        const auto region = p.qa.register_region(reply, e::Access::remote_write);
        ASSERT_TRUE(region);
        p.inject(w::SinkAvail{.len = static_cast<std::uint32_t>(reply.size()),
                              .stag = region->stag,
                              .va = region->to,
                              .non_discards = kPipelinePayloads,
                              .payload = {}});
        ASSERT_EQ(p.b.stats().sink_avail_received, 1u);
        const Bytes answer = pattern(60000, 40);
        ASSERT_EQ(p.b.write(answer), answer.size());
        const auto wr = sent_with(p.qb.sent_log, w::Mid::rdma_wr_compl);
        ASSERT_EQ(wr.size(), 1u);
        EXPECT_EQ((decoded(wr[0]).flags & w::flag::req_pipe) != 0, in != Mode::buffered);
        EXPECT_EQ(p.b.state(), e::State::established);
    }
}

// 6.1.2: "The Mode Master MUST NOT check the REQ_PIPE bit in any other SDP
// Message" than RdmaRdCompl and RdmaWrCompl: set in Data (with and without
// payload) it leaves our Combined send half alone; in an RdmaWrCompl for our
// SinkAvail it moves that half to Pipelined Mode (12.3), once.
TEST(SdpEngineModes, Section6_1_2ReqPipeExaminedInCompletionsOnly) {
    ZPair p;
    p.pipeline();  // a to b: b may lend
    const Bytes data = pattern(100, 41);
    p.inject(w::Data{data}, 0, w::flag::req_pipe);
    p.inject(w::Data{}, 0, w::flag::req_pipe);
    EXPECT_EQ(p.b.state(), e::State::established);
    EXPECT_EQ(p.b.mode_out(), Mode::combined);
    EXPECT_EQ(p.b.stats().mode_changes_sent, 0u);
    Bytes got;
    p.read_b(got);
    EXPECT_EQ(got, data);

    Bytes sink(100000);
    ASSERT_TRUE(p.b.post_sink(sink));
    ASSERT_EQ(p.qb.regions.size(), 1u);
    const std::uint32_t stag = p.qb.regions.begin()->first;
    p.inject(w::RdmaWrCompl{100}, stag, w::flag::req_pipe);
    EXPECT_EQ(p.b.state(), e::State::established);
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(100));
    EXPECT_EQ(p.b.mode_out(), Mode::pipelined);
    EXPECT_EQ(p.b.stats().mode_changes_sent, 1u);
    const auto mc = sent_with(p.qb.sent_log, w::Mid::mode_change);
    ASSERT_EQ(mc.size(), 1u);
    EXPECT_EQ(std::get<w::ModeChange>(decoded(mc[0]).body),
              (w::ModeChange{false, Mode::pipelined}));
    // Already Pipelined: the hint asks for the current mode, and no
    // ModeChange may name that (12).
    ASSERT_TRUE(p.b.post_sink(sink));
    p.inject(w::RdmaWrCompl{100}, p.qb.regions.begin()->first, w::flag::req_pipe);
    EXPECT_EQ(p.b.take_zcopy_read(), std::optional<std::size_t>(100));
    EXPECT_EQ(p.b.mode_out(), Mode::pipelined);
    EXPECT_EQ(p.b.stats().mode_changes_sent, 1u);
    EXPECT_EQ(p.b.state(), e::State::established);
}

}  // namespace
