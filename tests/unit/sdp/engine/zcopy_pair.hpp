// SPDX-License-Identifier: Apache-2.0
// Helpers of the zero-copy engine tests (Read Zcopy 9.2, Write Zcopy 9.3):
// a fake QP pair with RDMA on and the handshake done, and message lookups.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "fake_qp.hpp"

namespace sdp::test {

namespace e = sdp::engine;
namespace w = sdp::wire;
using Bytes = std::vector<std::uint8_t>;

inline w::Message decoded(const Packet& p) {
    auto r = w::decode(p.bytes);
    EXPECT_TRUE(std::holds_alternative<w::Message>(r));
    return std::holds_alternative<w::Message>(r) ? std::get<w::Message>(r) : w::Message{};
}

inline std::vector<Packet> sent_with(const std::vector<Packet>& log, w::Mid mid) {
    std::vector<Packet> out;
    for (const auto& p : log)
        if (!p.close && w::mid_of(decoded(p).body) == mid)
            out.push_back(p);
    return out;
}

inline e::Config zcopy_config(std::size_t threshold = 8192) {
    e::Config c;
    c.bcopy_threshold = threshold;
    return c;
}

// Messages with ULP payload that pipeline() sends (its SrcAvail's inline
// bytes): they count in NonDiscards / PotentialNonDiscards (9.5.1).
inline constexpr std::uint32_t kPipelinePayloads = 1;

struct ZPair : Pair {
    explicit ZPair(const e::Config& ca = zcopy_config(), const e::Config& cb = zcopy_config())
        : Pair(ca, cb) {
        qa.rdma = qb.rdma = true;
        EXPECT_EQ(handshake(), e::Error::none);
    }
    // Reads everything b can get into `got` (inline part with read(), the
    // advertised rest with read_zcopy() into buffers of `zbuf` bytes).
    void drain_b(Bytes& got, std::size_t zbuf, int rounds = 10000) {
        Bytes buf(64 * 1024);
        for (int i = 0; i < rounds; ++i) {
            run();
            if (std::size_t n = b.read(buf)) {
                got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
                continue;
            }
            if (b.zcopy_readable() > 0) {
                const std::size_t at = got.size();
                got.resize(at + zbuf);
                if (b.read_zcopy(std::span(got).subspan(at))) {
                    run();
                    auto n = b.take_zcopy_read();
                    EXPECT_TRUE(n.has_value());
                    got.resize(at + n.value_or(0));
                } else {
                    got.resize(at);
                }
                continue;
            }
            if (!a.zcopy_write_pending() && a.send_queued() == 0 && qa.outbound.empty())
                break;
        }
    }
    // Moves the half from `src` to `sink` (a to b by default) to Pipelined
    // Mode the way it happens in use (12.3): a Combined-Mode Read Zcopy of
    // 3 * threshold bytes, whose RdmaRdCompl carries REQ_PIPE (6.1.2); the
    // source answers with ModeChange. The bytes are checked and consumed,
    // the sent logs cleared.
    void pipeline(bool a_to_b = true) {
        e::Connection& src = a_to_b ? a : b;
        e::Connection& dst = a_to_b ? b : a;
        const Bytes data = pattern(3 * src.bcopy_threshold(), 77);
        ASSERT_TRUE(src.write_zcopy(data));
        run();
        Bytes got(data.size());
        const std::size_t inline_n = dst.read(got);
        ASSERT_GT(inline_n, 0u);
        ASSERT_TRUE(dst.read_zcopy(std::span(got).subspan(inline_n)));
        run();
        ASSERT_EQ(dst.take_zcopy_read(), std::optional<std::size_t>(data.size() - inline_n));
        ASSERT_EQ(got, data);
        ASSERT_EQ(src.mode_out(), e::Mode::pipelined);
        ASSERT_EQ(dst.mode_in(), e::Mode::pipelined);
        qa.sent_log.clear();
        qb.sent_log.clear();
    }
    // Everything b can read() now, appended to `got`.
    void read_b(Bytes& got) {
        Bytes buf(1 << 20);
        while (std::size_t n = b.read(buf))
            got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    // b lends `sink` (Write Zcopy, 9.3) and the SinkAvail reaches a.
    void lend_b(std::span<std::uint8_t> sink) {
        EXPECT_TRUE(b.post_sink(sink));
        run();
    }
    // Write Zcopy of `data` into `sink` (9.3): b lends it (lend_b), a
    // write()s all of `data` and the transfer runs. Returns what b's
    // take_zcopy_read() says then: the bytes a RDMA-Wrote into `sink`
    // (RdmaWrCompl), or nothing if they came another way (read() them).
    std::optional<std::size_t> lend_and_fill(std::span<std::uint8_t> sink, const Bytes& data) {
        lend_b(sink);
        EXPECT_EQ(a.write(data), data.size());
        run();
        return b.take_zcopy_read();
    }
};

}  // namespace sdp::test
