// SoftSession's direct placement (begin_landing / end_landing): Data
// Message payloads placed straight into a reader's buffer must give exactly
// the byte stream the private-buffer path gives, in order, whatever the
// FPDU size, the split of the TCP bytes, the zone size and the moment the
// landing ends (a message placed in part goes back to its private buffer).
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "sdp/io/soft_session.hpp"
#include "sdp/wire/bsdh.hpp"

namespace {

using sdp::io::SessionPhase;
using sdp::io::SoftSession;
using Bytes = std::vector<std::uint8_t>;

constexpr std::uint32_t kBuf = 8192;

sdp::io::SessionConfig config() {
    sdp::io::SessionConfig c;
    c.engine.recv_buf_size = kBuf;
    c.engine.send_buf_size = kBuf;
    c.engine.recv_buf_count = 6;
    c.engine.send_queue_limit = 64 * 1024;
    return c;
}

// One direction of the TCP stream: what `from` wrote and `to` has not been
// given yet.
struct Pipe {
    Bytes pending;
    std::size_t off = 0;

    void collect(SoftSession& from) {
        Bytes out;
        do {
            from.take_output(out);
        } while (from.has_output());
        pending.insert(pending.end(), out.begin(), out.end());
    }
    // Feeds up to `max` bytes in pieces of at most `piece`.
    std::size_t feed(SoftSession& to, std::size_t max, std::size_t piece, std::mt19937& rng) {
        std::size_t fed = 0;
        while (fed < max && off < pending.size()) {
            const std::size_t k = std::min(
                {pending.size() - off, max - fed, 1 + rng() % std::max<std::size_t>(1, piece)});
            to.on_bytes(std::span<const std::uint8_t>(pending).subspan(off, k));
            off += k;
            fed += k;
        }
        if (off == pending.size()) {
            pending.clear();
            off = 0;
        }
        return fed;
    }
    [[nodiscard]] bool empty() const { return off == pending.size(); }
};

struct Pair {
    SoftSession c{sdp::iwarp::MpaRole::initiator, config()};
    SoftSession s{sdp::iwarp::MpaRole::responder, config()};
    Pipe cs, sc;
    std::mt19937 rng;

    explicit Pair(std::size_t mss, unsigned seed) : rng(seed) {
        c.set_mss(mss);
        s.set_mss(mss);
    }
    // Everything both ways until quiet.
    void settle() {
        for (int i = 0; i < 10000; ++i) {
            cs.collect(c);
            sc.collect(s);
            if (cs.empty() && sc.empty()) {
                return;
            }
            cs.feed(s, SIZE_MAX, SIZE_MAX, rng);
            sc.feed(c, SIZE_MAX, SIZE_MAX, rng);
        }
    }
    bool establish() {
        if (!c.start()) {
            return false;
        }
        settle();
        return c.phase() == SessionPhase::established && s.phase() == SessionPhase::established &&
               c.sdp().state() == sdp::engine::State::established;
    }
};

Bytes pattern(std::size_t n, unsigned seed) {
    Bytes b(n);
    std::mt19937 r(seed);
    for (auto& x : b) {
        x = static_cast<std::uint8_t>(r());
    }
    return b;
}

struct Totals {
    std::size_t landed = 0;
    std::size_t copied = 0;
};

// The client streams `data`; the server reads it, landing when nothing is
// readable (like SoftChannel::read_some) with random zones and random
// amounts of input fed while the landing is active.
Totals stream_through(std::size_t mss, unsigned seed, const Bytes& data, std::size_t max_zone) {
    Pair p(mss, seed);
    EXPECT_TRUE(p.establish()) << p.c.describe_error() << " / " << p.s.describe_error();
    auto& rng = p.rng;
    Bytes got;
    Totals t;
    std::size_t wrote = 0;
    Bytes zone(max_zone);
    Bytes buf(3 * kBuf);
    for (int round = 0; round < 200000 && got.size() < data.size(); ++round) {
        if (wrote < data.size()) {
            wrote += p.c.sdp().write(std::span(data).subspan(
                wrote, std::min<std::size_t>(data.size() - wrote, 1 + rng() % 30000)));
        }
        p.cs.collect(p.c);
        const std::size_t feed_max = rng() % 40000;
        const std::size_t piece = 1 + rng() % (rng() % 2 ? 64 : 20000);
        if (p.s.sdp().readable() == 0 && rng() % 4 != 0) {
            const std::size_t zsize = 1 + rng() % max_zone;
            EXPECT_TRUE(p.s.begin_landing(std::span(zone).first(zsize)));
            EXPECT_FALSE(p.s.begin_landing(std::span(zone).first(zsize)));  // one at a time
            p.cs.feed(p.s, feed_max, piece, rng);
            EXPECT_TRUE(p.s.landing());
            const std::size_t before = p.s.landed();
            const std::size_t n = p.s.end_landing();
            EXPECT_EQ(n, before);
            EXPECT_LE(n, zsize);
            EXPECT_FALSE(p.s.landing());
            EXPECT_EQ(p.s.landed(), 0u);
            got.insert(got.end(), zone.begin(), zone.begin() + static_cast<std::ptrdiff_t>(n));
            t.landed += n;
        } else {
            p.cs.feed(p.s, feed_max, piece, rng);
        }
        // Whatever did not land is read the ordinary way, after it.
        const std::size_t n = p.s.sdp().read(std::span(buf).first(1 + rng() % buf.size()));
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        t.copied += n;
        // Credit updates back to the writer.
        p.sc.collect(p.s);
        p.sc.feed(p.c, SIZE_MAX, SIZE_MAX, rng);
    }
    EXPECT_EQ(got.size(), data.size());
    EXPECT_TRUE(got == data) << "stream differs (mss " << mss << ", seed " << seed << ")";
    EXPECT_EQ(p.s.sdp().state(), sdp::engine::State::established);
    return t;
}

TEST(SoftSessionLanding, SameStreamAtEverySplitAndZone) {
    const Bytes data = pattern(400000, 3);
    std::size_t landed = 0, copied = 0;
    for (std::size_t mss : {200u, 1460u, 9000u, 65483u}) {
        for (unsigned seed = 1; seed <= 4; ++seed) {
            const Totals t = stream_through(mss, seed, data, 3 * kBuf + 100);
            landed += t.landed;
            copied += t.copied;
        }
    }
    // Both paths were taken, many times.
    EXPECT_GT(landed, data.size());
    EXPECT_GT(copied, data.size());
}

TEST(SoftSessionLanding, ZonesSmallerThanAMessage) {
    // Zones too small for a whole message: nothing may land in part.
    const Bytes data = pattern(100000, 5);
    const Totals t = stream_through(1460, 9, data, kBuf / 2);
    EXPECT_GT(t.copied, 0u);
}

TEST(SoftSessionLanding, WholeMessagesLandAndCreditComesBack) {
    Pair p(1460, 11);
    ASSERT_TRUE(p.establish());
    const Bytes data = pattern(6 * (kBuf - sdp::wire::kBsdhSize), 12);
    // More than the 6 posted buffers' worth, in rounds: each round's
    // landing must return the credit, or the writer stalls.
    Bytes got;
    Bytes zone(2 * kBuf);
    std::size_t wrote = 0;
    for (int round = 0; round < 100 && got.size() < data.size(); ++round) {
        wrote += p.c.sdp().write(std::span(data).subspan(wrote));
        p.cs.collect(p.c);
        ASSERT_TRUE(p.s.begin_landing(zone));
        p.cs.feed(p.s, SIZE_MAX, 5000, p.rng);
        const std::size_t n = p.s.end_landing();
        got.insert(got.end(), zone.begin(), zone.begin() + static_cast<std::ptrdiff_t>(n));
        Bytes rest(kBuf * 8);
        const std::size_t k = p.s.sdp().read(rest);
        got.insert(got.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
        p.sc.collect(p.s);
        p.sc.feed(p.c, SIZE_MAX, SIZE_MAX, p.rng);
    }
    EXPECT_TRUE(got == data);
    EXPECT_EQ(p.s.sdp().stats().bytes_received, data.size());
}

TEST(SoftSessionLanding, OutOfBandMessageIsNotLandedAndOrderHolds) {
    Pair p(1460, 21);
    ASSERT_TRUE(p.establish());
    const Bytes a = pattern(3000, 1), b = pattern(3000, 2);
    ASSERT_EQ(p.c.sdp().write(a), a.size());
    ASSERT_TRUE(p.c.sdp().write_oob(0x5A));
    ASSERT_EQ(p.c.sdp().write(b), b.size());
    p.cs.collect(p.c);
    Bytes zone(4 * kBuf);
    ASSERT_TRUE(p.s.begin_landing(zone));
    p.cs.feed(p.s, SIZE_MAX, 700, p.rng);
    const std::size_t n = p.s.end_landing();
    Bytes got(zone.begin(), zone.begin() + static_cast<std::ptrdiff_t>(n));
    // The OOB message went to its private buffer, so nothing after it landed.
    EXPECT_LE(n, a.size());
    Bytes rest(4 * kBuf);
    const std::size_t k = p.s.sdp().read(rest);
    got.insert(got.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
    Bytes want = a;
    want.insert(want.end(), b.begin(), b.end());
    EXPECT_TRUE(got == want);
    EXPECT_EQ(p.s.sdp().read_oob(), std::optional<std::uint8_t>(0x5A));
}

TEST(SoftSessionLanding, PartialMessageGoesBackToItsPrivateBuffer) {
    Pair p(1460, 31);
    ASSERT_TRUE(p.establish());
    const Bytes a = pattern(kBuf - sdp::wire::kBsdhSize, 4);  // one full message
    ASSERT_EQ(p.c.sdp().write(a), a.size());
    p.cs.collect(p.c);
    const std::size_t total = p.cs.pending.size();
    Bytes zone(kBuf);
    ASSERT_TRUE(p.s.begin_landing(zone));
    p.cs.feed(p.s, total / 2, total, p.rng);  // half the message
    EXPECT_EQ(p.s.landed(), 0u);
    EXPECT_EQ(p.s.end_landing(), 0u);
    // Overwrite the zone: the landed half must have been copied back.
    std::fill(zone.begin(), zone.end(), 0xEE);
    p.cs.feed(p.s, SIZE_MAX, SIZE_MAX, p.rng);
    Bytes got(kBuf);
    got.resize(p.s.sdp().read(got));
    EXPECT_TRUE(got == a);
}

TEST(SoftSessionLanding, MessageBegunBeforeTheLandingFinishesInTheZone) {
    Pair p(1460, 41);
    ASSERT_TRUE(p.establish());
    const Bytes a = pattern(kBuf - sdp::wire::kBsdhSize, 6);
    ASSERT_EQ(p.c.sdp().write(a), a.size());
    p.cs.collect(p.c);
    const std::size_t total = p.cs.pending.size();
    p.cs.feed(p.s, total / 2, total, p.rng);  // first half: private buffer
    EXPECT_EQ(p.s.sdp().readable(), 0u);
    Bytes zone(kBuf);
    ASSERT_TRUE(p.s.begin_landing(zone));
    p.cs.feed(p.s, SIZE_MAX, SIZE_MAX, p.rng);
    const std::size_t n = p.s.end_landing();
    ASSERT_EQ(n, a.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), zone.begin()));
    EXPECT_EQ(p.s.sdp().readable(), 0u);
}

}  // namespace
