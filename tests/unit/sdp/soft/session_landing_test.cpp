// SPDX-License-Identifier: Apache-2.0
// SoftSession's direct placement (begin_landing / end_landing): Data
// Message payloads placed straight into a reader's buffer must give exactly
// the byte stream the private-buffer path gives, in order, whatever the
// FPDU size, the split of the TCP bytes, the zone size and the moment the
// landing ends (a message placed in part goes back to its private buffer).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "sdp/io/channel.hpp"

#include "sdp/iwarp/ddp_rdmap.hpp"
#include "sdp/iwarp/fpdu.hpp"
#include "sdp/soft/soft_session.hpp"
#include "sdp/wire/bsdh.hpp"
#include "sdp/wire/message.hpp"

#include "../io/loopback.hpp"

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
    // A read stops at the mark (9.5.3, as TCP): the rest of `a` (if any did
    // not land), the urgent byte out of line, then `b`.
    Bytes rest(4 * kBuf);
    std::size_t k = got.size() < a.size() ? p.s.sdp().read(rest) : 0;
    got.insert(got.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
    EXPECT_TRUE(got == a);
    EXPECT_TRUE(p.s.sdp().at_mark());
    EXPECT_EQ(p.s.sdp().read_oob(), std::optional<std::uint8_t>(0x5A));
    k = p.s.sdp().read(rest);
    got.insert(got.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
    Bytes want = a;
    want.insert(want.end(), b.begin(), b.end());
    EXPECT_TRUE(got == want);
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

// --- Hostile segmentation (review of 8d03889) ------------------------------
// The client's next Data Message is taken off the wire and re-sent to the
// server as hand-made DDP segments; the same segments are fed once with a
// landing active and once without, and the reader must get the same bytes.

struct Seg {
    std::uint32_t mo = 0;
    Bytes bytes;
    bool last = false;
};

struct WireMsg {
    std::uint32_t msn = 0;
    Bytes bytes;  // BSDH + payload
};

WireMsg take_message(Pair& p, const Bytes& data) {
    EXPECT_EQ(p.c.sdp().write(data), data.size());
    p.cs.collect(p.c);
    WireMsg m;
    const Bytes& w = p.cs.pending;
    std::size_t off = p.cs.off;
    while (off + 2 <= w.size()) {
        const std::size_t len = static_cast<std::size_t>(w[off]) << 8 | w[off + 1];
        auto seg = sdp::iwarp::decode_ddp(std::span<const std::uint8_t>(w).subspan(off + 2, len));
        EXPECT_TRUE(seg);
        const auto& h = seg->header;
        if (!h.tagged) {
            m.msn = h.msn;
            if (m.bytes.size() < h.mo + seg->payload.size()) {
                m.bytes.resize(h.mo + seg->payload.size());
            }
            std::copy(seg->payload.begin(), seg->payload.end(), m.bytes.begin() + h.mo);
        }
        off += sdp::iwarp::fpdu_size(len);
    }
    p.cs.pending.clear();
    p.cs.off = 0;
    return m;
}

void inject(SoftSession& s, std::uint32_t msn, const Seg& g) {
    sdp::iwarp::DdpHeader h;
    h.opcode = static_cast<std::uint8_t>(sdp::iwarp::Opcode::send);
    h.last = g.last;
    h.qn = 0;
    h.msn = msn;
    h.mo = g.mo;
    Bytes hdr;
    sdp::iwarp::encode_ddp(hdr, h);
    Bytes fpdu;
    sdp::iwarp::append_fpdu(fpdu, hdr, g.bytes, s.mpa().outcome().crc);
    s.on_bytes(fpdu);
}

// The message's BSDH with Len set to `len`.
Bytes bsdh_with_len(const Bytes& msg, std::uint32_t len) {
    const auto b = std::get<sdp::wire::Bsdh>(
        sdp::wire::decode_bsdh(std::span<const std::uint8_t>(msg).first(sdp::wire::kBsdhSize)));
    sdp::wire::Message m;
    m.bufs = b.bufs;
    m.flags = b.flags;
    m.mseq = b.mseq;
    m.mseq_ack = b.mseq_ack;
    Bytes out(sdp::wire::kBsdhSize);
    sdp::wire::encode_bsdh_into(
        m, len - sdp::wire::kBsdhSize,
        std::span<std::uint8_t, sdp::wire::kBsdhSize>(out.data(), sdp::wire::kBsdhSize));
    return out;
}

Bytes slice(const Bytes& b, std::size_t from, std::size_t to) {
    return Bytes(b.begin() + static_cast<std::ptrdiff_t>(from),
                 b.begin() + static_cast<std::ptrdiff_t>(to));
}

struct Outcome {
    Bytes got;
    sdp::engine::State state{};
    std::uint64_t bytes_received = 0;
    std::size_t landed = 0;
};

// Feeds segs[0..land_at) plainly, then (if land) begins a landing on a zone
// of 0xEE bytes and feeds the rest (ending the landing after
// segs[0..end_at)), then reads what is readable.
template <class MakeSegs>
Outcome run_hostile(bool land, std::size_t payload, std::size_t land_at, std::size_t end_at,
                    MakeSegs make) {
    Pair p(1460, 77);
    EXPECT_TRUE(p.establish());
    const WireMsg m = take_message(p, pattern(payload, 99));
    const std::vector<Seg> segs = make(m.bytes);
    Outcome o;
    Bytes zone(4 * kBuf, 0xEE);
    for (std::size_t i = 0; i < segs.size(); ++i) {
        if (land && i == land_at) {
            EXPECT_TRUE(p.s.begin_landing(zone));
        }
        if (land && i == end_at && p.s.landing()) {
            o.landed = p.s.end_landing();
            o.got.insert(o.got.end(), zone.begin(),
                         zone.begin() + static_cast<std::ptrdiff_t>(o.landed));
        }
        inject(p.s, m.msn, segs[i]);
    }
    if (p.s.landing()) {
        o.landed = p.s.end_landing();
        o.got.insert(o.got.end(), zone.begin(),
                     zone.begin() + static_cast<std::ptrdiff_t>(o.landed));
    }
    Bytes rest(4 * kBuf);
    rest.resize(p.s.sdp().read(rest));
    o.got.insert(o.got.end(), rest.begin(), rest.end());
    o.state = p.s.sdp().state();
    o.bytes_received = p.s.sdp().stats().bytes_received;
    return o;
}

template <class MakeSegs>
void expect_same(std::size_t payload, std::size_t land_at, std::size_t end_at, MakeSegs make) {
    const Outcome plain = run_hostile(false, payload, land_at, end_at, make);
    const Outcome landed = run_hostile(true, payload, land_at, end_at, make);
    EXPECT_EQ(plain.state, landed.state);
    EXPECT_EQ(plain.bytes_received, landed.bytes_received);
    EXPECT_EQ(plain.got.size(), landed.got.size());
    EXPECT_TRUE(plain.got == landed.got) << "landing delivered different bytes";
    // Whatever the engine counted as received must reach the reader.
    EXPECT_EQ(landed.bytes_received, landed.got.size());
}

TEST(SoftSessionLandingHostile, BsdhRewrittenByALaterMoZeroSegment) {
    // Segment 1 carries the whole message (BSDH Len 1000) but is not last;
    // segment 2 rewrites MO 0 with a BSDH of Len 116 and is last (byte_len
    // 116). The engine takes a 100-byte message either way; the landing path
    // must not drop it.
    expect_same(984, 0, SIZE_MAX, [](const Bytes& msg) {
        Bytes second = bsdh_with_len(msg, 116);
        second.insert(second.end(), msg.begin() + 16, msg.begin() + 116);
        return std::vector<Seg>{{0, msg, false}, {0, second, true}};
    });
}

TEST(SoftSessionLandingHostile, SegmentsOutOfOrderBeforeTheLanding) {
    // MO 0 (BSDH only) and MO 500..600 arrive before the landing, MO 16..500
    // and the last segment during it.
    expect_same(984, 2, SIZE_MAX, [](const Bytes& msg) {
        return std::vector<Seg>{{0, slice(msg, 0, 16), false},
                                {500, slice(msg, 500, 600), false},
                                {16, slice(msg, 16, 500), false},
                                {600, slice(msg, 600, 1000), true}};
    });
}

TEST(SoftSessionLandingHostile, SegmentsOutOfOrderDuringTheLanding) {
    // All in the landing: MO 0..16, then a later part, then the gap, last.
    expect_same(984, 0, SIZE_MAX, [](const Bytes& msg) {
        return std::vector<Seg>{{0, slice(msg, 0, 100), false},
                                {500, slice(msg, 500, 1000), false},
                                {100, slice(msg, 100, 500), true}};
    });
}

TEST(SoftSessionLandingHostile, FirstSegmentShorterThanTheBsdh) {
    for (std::size_t land_at : {0u, 1u, 2u}) {
        expect_same(984, land_at, SIZE_MAX, [](const Bytes& msg) {
            return std::vector<Seg>{{0, slice(msg, 0, 10), false},
                                    {10, slice(msg, 10, 400), false},
                                    {400, slice(msg, 400, 1000), true}};
        });
    }
}

TEST(SoftSessionLandingHostile, LandingEndsBetweenSegments) {
    for (std::size_t end_at : {1u, 2u}) {
        expect_same(984, 0, end_at, [](const Bytes& msg) {
            return std::vector<Seg>{{0, slice(msg, 0, 300), false},
                                    {300, slice(msg, 300, 700), false},
                                    {700, slice(msg, 700, 1000), true}};
        });
    }
}

TEST(SoftSessionLandingHostile, SegmentPastBsdhLen) {
    // Len says 500; the peer sends 1000 bytes (the engine resets).
    expect_same(984, 0, SIZE_MAX, [](const Bytes& msg) {
        Bytes first = bsdh_with_len(msg, 500);
        first.insert(first.end(), msg.begin() + 16, msg.begin() + 300);
        return std::vector<Seg>{{0, first, false}, {300, slice(msg, 300, 1000), true}};
    });
}

// --- SoftChannel over loopback TCP (review of 8d03889) ---------------------
// Both directions stream at once (credit updates interleave with data), the
// readers use fresh heap buffers of random sizes (ASan sees any write into a
// zone after read_some() returned) and optionally a short io_timeout (landings
// end with messages placed in part).

using sdp::test::tcp_pair;

struct ChannelPair {
    std::unique_ptr<sdp::io::SoftChannel> c, s;
    explicit ChannelPair(std::chrono::milliseconds io_timeout) {
        auto [fc, fs] = tcp_pair();
        sdp::io::ChannelOptions o;
        o.session = config();
        o.io_timeout = io_timeout;
        std::error_code ec1, ec2;
        std::thread t([&] {
            s = sdp::io::SoftChannel::handshake(fs, sdp::iwarp::MpaRole::responder, o, ec2);
        });
        c = sdp::io::SoftChannel::handshake(fc, sdp::iwarp::MpaRole::initiator, o, ec1);
        t.join();
        EXPECT_TRUE(c && s) << ec1.message() << " / " << ec2.message();
    }
};

void write_all(sdp::io::SoftChannel& ch, const Bytes& data, unsigned seed) {
    std::mt19937 rng(seed);
    std::size_t off = 0;
    while (off < data.size()) {
        std::error_code ec;
        const std::size_t k = std::min<std::size_t>(data.size() - off, 1 + rng() % 70000);
        off += ch.write(std::span(data).subspan(off, k), ec);
        if (ec && ec != std::errc::timed_out) {
            ADD_FAILURE() << "write: " << ec.message();
            return;
        }
    }
}

void read_check(sdp::io::SoftChannel& ch, const Bytes& want, unsigned seed) {
    std::mt19937 rng(seed);
    std::size_t got = 0;
    while (got < want.size()) {
        std::error_code ec;
        const std::size_t sz = 1 + rng() % (rng() % 3 == 0 ? 100 : 3 * kBuf + 5000);
        auto buf = std::make_unique<std::uint8_t[]>(sz);  // exact size, freed after
        std::fill_n(buf.get(), sz, std::uint8_t{0xEE});
        const std::size_t n = ch.read_some(std::span(buf.get(), sz), ec);
        if (ec && ec != std::errc::timed_out) {
            ADD_FAILURE() << "read: " << ec.message() << " at " << got;
            return;
        }
        if (n > sz || got + n > want.size() ||
            !std::equal(buf.get(), buf.get() + n,
                        want.begin() + static_cast<std::ptrdiff_t>(got))) {
            ADD_FAILURE() << "stream differs at " << got << " (n " << n << ")";
            return;
        }
        got += n;
    }
}

void bidirectional(std::chrono::milliseconds io_timeout, std::size_t bytes) {
    ChannelPair p(io_timeout);
    ASSERT_TRUE(p.c && p.s);
    const Bytes a = pattern(bytes, 1), b = pattern(bytes, 2);
    std::thread w1([&] { write_all(*p.c, a, 3); });
    std::thread w2([&] { write_all(*p.s, b, 4); });
    std::thread r1([&] { read_check(*p.s, a, 5); });
    std::thread r2([&] { read_check(*p.c, b, 6); });
    w1.join();
    w2.join();
    r1.join();
    r2.join();
}

TEST(SoftChannelLanding, BidirectionalStream) {
    bidirectional(std::chrono::milliseconds(0), 8 << 20);
}

TEST(SoftChannelLanding, BidirectionalStreamWithShortTimeouts) {
    bidirectional(std::chrono::milliseconds(1), 8 << 20);
}

TEST(SoftChannelLanding, TwoReadersOneWriter) {
    // Two threads read the same stream (order between them is unspecified):
    // every byte must arrive exactly once; checked by the byte sum and count.
    ChannelPair p(std::chrono::milliseconds(0));
    ASSERT_TRUE(p.c && p.s);
    const Bytes a = pattern(4 << 20, 7);
    std::uint64_t want_sum = 0;
    for (auto x : a)
        want_sum += x;
    std::atomic<std::uint64_t> sum{0}, count{0};
    auto reader = [&](unsigned seed) {
        std::mt19937 rng(seed);
        while (count.load() < a.size()) {
            std::error_code ec;
            const std::size_t sz = 1 + rng() % (3 * kBuf + 5000);
            auto buf = std::make_unique<std::uint8_t[]>(sz);
            const std::size_t n = p.s->read_some(std::span(buf.get(), sz), ec);
            if (ec || n == 0)
                return;
            std::uint64_t t = 0;
            for (std::size_t i = 0; i < n; ++i)
                t += buf[i];
            sum += t;
            count += n;
        }
    };
    std::thread w([&] {
        write_all(*p.c, a, 3);
        std::error_code ec;
        p.c->shutdown_write(ec);
    });
    std::thread r1(reader, 1), r2(reader, 2);
    w.join();
    r1.join();
    r2.join();
    EXPECT_EQ(count.load(), a.size());
    EXPECT_EQ(sum.load(), want_sum);
}

}  // namespace
