// SPDX-License-Identifier: Apache-2.0
// Gathered FPDU output (QpEngine::take_output_to) against the contiguous
// path (take_output / append_fpdu): byte-identical streams.
#include <gtest/gtest.h>

#include <random>

#include "sdp/iwarp/fpdu.hpp"
#include "sdp/iwarp/qp.hpp"

using namespace sdp::iwarp;

namespace {

using Bytes = std::vector<std::uint8_t>;

// Concatenates what the QP hands over; a stable payload is kept as a span
// (checked to be still valid at the end), an unstable one copied at once.
class CollectSink final : public FpduSink {
  public:
    void fpdu(std::span<const std::uint8_t> header, std::span<const std::uint8_t> payload,
              bool payload_stable, bool crc) override {
        FpduFrame f;
        frame_fpdu(f, header, payload, crc);
        add(Bytes(f.prefix, f.prefix + f.prefix_len));
        if (payload_stable) {
            spans_.push_back({pieces_.size(), payload});
            pieces_.emplace_back();
            size_ += payload.size();
        } else {
            add(Bytes(payload.begin(), payload.end()));
        }
        add(Bytes(f.trailer, f.trailer + f.trailer_len));
    }
    void raw(std::vector<std::uint8_t>&& bytes) override { add(std::move(bytes)); }
    [[nodiscard]] std::size_t size() const override { return size_; }
    Bytes bytes() const {
        std::vector<Bytes> p = pieces_;
        for (const auto& [i, s] : spans_) {
            p[i].assign(s.begin(), s.end());
        }
        Bytes out;
        for (const auto& b : p) {
            out.insert(out.end(), b.begin(), b.end());
        }
        return out;
    }

  private:
    void add(Bytes b) {
        size_ += b.size();
        pieces_.push_back(std::move(b));
    }
    std::vector<Bytes> pieces_;
    std::vector<std::pair<std::size_t, std::span<const std::uint8_t>>> spans_;
    std::size_t size_ = 0;
};

QpConfig config(bool crc, std::size_t mss) {
    QpConfig c;
    c.role = MpaRole::initiator;
    c.crc = crc;
    c.mss = mss;
    c.p2p = true;
    c.rtr = RtrMode::write;
    return c;
}

}  // namespace

TEST(FpduGather, FrameMatchesAppendFpdu) {
    std::mt19937 rng(5);
    for (bool crc : {false, true}) {
        for (int i = 0; i < 500; ++i) {
            Bytes h(rng() % (kFpduMaxFramedHeader + 1));
            Bytes p(rng() % 3000);
            for (auto& b : h) {
                b = static_cast<std::uint8_t>(rng());
            }
            for (auto& b : p) {
                b = static_cast<std::uint8_t>(rng());
            }
            Bytes want;
            append_fpdu(want, h, p, crc);
            FpduFrame f;
            frame_fpdu(f, h, p, crc);
            Bytes got(f.prefix, f.prefix + f.prefix_len);
            got.insert(got.end(), p.begin(), p.end());
            got.insert(got.end(), f.trailer, f.trailer + f.trailer_len);
            EXPECT_EQ(got, want) << h.size() << " " << p.size();
        }
    }
}

TEST(FpduGather, SameStreamAsContiguousOutput) {
    std::mt19937 rng(17);
    for (bool crc : {false, true}) {
        for (std::size_t mss : {std::size_t{100}, std::size_t{1460}, std::size_t{65483}}) {
            QpEngine a(config(crc, mss));
            QpEngine b(config(crc, mss));
            std::vector<Bytes> msgs;
            for (int i = 0; i < 40; ++i) {
                Bytes m(rng() % 3 == 0 ? rng() % 200000 : rng() % 100);
                for (auto& x : m) {
                    x = static_cast<std::uint8_t>(rng());
                }
                msgs.push_back(std::move(m));
            }
            for (std::size_t i = 0; i < msgs.size(); ++i) {
                SendWr wr;
                wr.wr_id = i;
                wr.opcode = i % 5 == 0 ? WrOpcode::send_se : WrOpcode::send;
                wr.data = msgs[i];
                ASSERT_FALSE(a.post_send(wr));
                ASSERT_FALSE(b.post_send(wr));
            }
            Bytes contiguous;
            while (a.has_output()) {
                a.take_output_into(contiguous, 1 + rng() % 300000);
            }
            CollectSink sink;
            while (b.has_output()) {
                b.take_output_to(sink, 1 + rng() % 300000);
            }
            EXPECT_EQ(sink.bytes(), contiguous) << "crc " << crc << " mss " << mss;
            EXPECT_EQ(sink.size(), contiguous.size());
            EXPECT_EQ(a.poll_all(), b.poll_all());
        }
    }
}
