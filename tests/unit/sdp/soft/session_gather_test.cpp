// SPDX-License-Identifier: Apache-2.0
// SoftSession's gathered output (prepare_output / peek_output /
// consume_output, what the socket shell writes with sendmsg) against the
// contiguous take_output(): two identical session pairs, one driven each
// way, must put the same bytes on the wire and deliver the same data.
// Partial consumes at random points check that send buffers stay valid
// until their bytes are consumed.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sdp/soft/soft_session.hpp"

namespace {

using sdp::io::LlpRequest;
using sdp::io::SessionPhase;
using sdp::io::SoftSession;
using Bytes = std::vector<std::uint8_t>;

sdp::io::SessionConfig config() {
    sdp::io::SessionConfig c;
    c.engine.recv_buf_size = 8192;
    c.engine.send_buf_size = 8192;
    c.engine.recv_buf_count = 6;
    c.engine.send_queue_limit = 64 * 1024;
    return c;
}

// Takes the output of `from` (gathered or contiguous), logs it and feeds it
// to `to` in pieces.
struct Link {
    bool gather;
    std::mt19937 rng{99};
    Bytes wire;

    bool move(SoftSession& from, SoftSession& to) {
        Bytes out;
        // Both ways drain everything the session has now, so the two runs
        // see the same sequence of events.
        if (!gather) {
            do {
                from.take_output(out);
            } while (from.has_output());
        } else {
            std::size_t before = 0;
            do {
                before = from.output_queued();
                from.prepare_output(before + 1 + rng() % 100000);
            } while (from.output_queued() > before);
            while (from.output_queued() > 0) {
                std::span<const std::uint8_t> segs[5];
                const std::size_t n = from.peek_output(segs);
                // Write a random part of what is offered, as a short
                // sendmsg() would.
                std::size_t offered = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    offered += segs[i].size();
                }
                std::size_t take = 1 + rng() % offered;
                const std::size_t took = take;
                for (std::size_t i = 0; i < n && take > 0; ++i) {
                    const std::size_t k = std::min(take, segs[i].size());
                    out.insert(out.end(), segs[i].begin(),
                               segs[i].begin() + static_cast<std::ptrdiff_t>(k));
                    take -= k;
                }
                from.consume_output(took);
            }
        }
        wire.insert(wire.end(), out.begin(), out.end());
        for (std::size_t off = 0; off < out.size();) {
            const std::size_t k = std::min<std::size_t>(out.size() - off, 1 + rng() % 20000);
            to.on_bytes(std::span<const std::uint8_t>(out).subspan(off, k));
            off += k;
        }
        return !out.empty();
    }
};

struct Outcome {
    Bytes c2s, s2c, got_s, got_c;
};

Outcome run(bool gather) {
    SoftSession c(sdp::iwarp::MpaRole::initiator, config());
    SoftSession s(sdp::iwarp::MpaRole::responder, config());
    c.set_mss(1460);
    s.set_mss(1460);
    EXPECT_TRUE(c.start());
    Link lc{gather, std::mt19937(99), {}}, ls{gather, std::mt19937(98), {}};
    auto pump = [&] {
        for (int i = 0; i < 100000; ++i) {
            if (!(lc.move(c, s) | ls.move(s, c))) {
                break;
            }
        }
    };
    pump();
    EXPECT_EQ(c.phase(), SessionPhase::established) << c.describe_error();
    EXPECT_EQ(s.phase(), SessionPhase::established) << s.describe_error();
    Bytes a(300000), b(50001);
    for (std::size_t i = 0; i < a.size(); ++i) {
        a[i] = static_cast<std::uint8_t>(i * 13 + 5);
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
        b[i] = static_cast<std::uint8_t>(i * 3 + 1);
    }
    std::mt19937 rng(7);
    std::size_t wa = 0, wb = 0;
    Outcome r;
    Bytes buf(10000);
    for (int i = 0; i < 100000 && (r.got_s.size() < a.size() || r.got_c.size() < b.size()); ++i) {
        wa += c.sdp().write(
            std::span(a).subspan(wa, std::min<std::size_t>(a.size() - wa, 1 + rng() % 20000)));
        wb += s.sdp().write(
            std::span(b).subspan(wb, std::min<std::size_t>(b.size() - wb, 1 + rng() % 3000)));
        pump();
        std::size_t n = s.sdp().read(std::span(buf).first(1 + rng() % buf.size()));
        r.got_s.insert(r.got_s.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        n = c.sdp().read(std::span(buf).first(1 + rng() % buf.size()));
        r.got_c.insert(r.got_c.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        pump();
    }
    EXPECT_EQ(r.got_s, a);
    EXPECT_EQ(r.got_c, b);
    c.sdp().shutdown_write();
    pump();
    EXPECT_TRUE(s.sdp().eof());
    EXPECT_EQ(c.llp_request(), LlpRequest::none);  // the server has not closed yet
    EXPECT_TRUE(c.sends_flushed());
    EXPECT_EQ(c.output_queued(), 0u);
    r.c2s = lc.wire;
    r.s2c = ls.wire;
    return r;
}

}  // namespace

TEST(SoftSessionGather, SameWireBytesAsContiguousOutput) {
    const Outcome plain = run(false);
    const Outcome gathered = run(true);
    EXPECT_EQ(gathered.c2s.size(), plain.c2s.size());
    EXPECT_TRUE(gathered.c2s == plain.c2s);
    EXPECT_TRUE(gathered.s2c == plain.s2c);
}
