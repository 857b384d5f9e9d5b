// SPDX-License-Identifier: Apache-2.0
// Out-of-band data (9.5.3) between two engines back to back: the mark in
// the receive stream, read_oob(), inline mode, a newer urgent byte, and the
// sender's OOB_PEND rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "fake_qp.hpp"
#include "sdp/engine/connection.hpp"
#include "sdp/wire/message.hpp"

namespace e = sdp::engine;
namespace w = sdp::wire;
using namespace sdp::test;
using Bytes = std::vector<std::uint8_t>;

namespace {

Bytes bytes(const char* s) {
    return Bytes(s, s + std::char_traits<char>::length(s));
}

// One read() of up to 100 bytes.
Bytes read_once(e::Connection& c) {
    Bytes buf(100);
    const std::size_t n = c.read(buf);
    buf.resize(n);
    return buf;
}

// Per message a→b: payload size, the flags.
struct Sent {
    std::size_t payload = 0;
    std::uint8_t flags = 0;
    std::uint8_t last = 0;  // last payload byte
};

std::vector<Sent> sent(const Pair& p) {
    std::vector<Sent> out;
    for (const auto& pk : p.qa.sent_log) {
        auto r = w::decode(pk.bytes);
        if (!std::holds_alternative<w::Message>(r)) {
            ADD_FAILURE() << "undecodable message";
            continue;
        }
        const auto& m = std::get<w::Message>(r);
        Sent s{w::payload_size(m.body), m.flags, 0};
        if (const auto* d = std::get_if<w::Data>(&m.body); d && !d->payload.empty()) {
            s.last = d->payload.back();
        }
        if (m.flags & (w::flag::oob_pend | w::flag::oob_pres)) {
            EXPECT_TRUE(pk.solicited);
        }
        out.push_back(s);
    }
    return out;
}

// "abc" X "def" sent and delivered.
void abc_x_def(Pair& p) {
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(bytes("abc"));
    ASSERT_TRUE(p.a.write_oob('X'));
    p.a.write(bytes("def"));
    p.run();
}

}  // namespace

TEST(SdpEngineOobMark, ReadStopsAtTheMarkAndReadOobTakesTheByte) {
    Pair p;
    abc_x_def(p);
    EXPECT_TRUE(p.b.urgent_pending());
    EXPECT_FALSE(p.b.at_mark());
    EXPECT_EQ(p.b.readable(), 6u);            // the out-of-line byte not counted
    EXPECT_EQ(read_once(p.b), bytes("abc"));  // never across the mark
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_TRUE(p.b.at_urgent());
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('X'));
    EXPECT_FALSE(p.b.urgent_pending());
    EXPECT_FALSE(p.b.at_urgent());
    EXPECT_TRUE(p.b.at_mark());               // until the reader passes it (SIOCATMARK)
    EXPECT_EQ(p.b.read_oob(), std::nullopt);  // once
    EXPECT_FALSE(p.b.oob_not_yet());
    EXPECT_EQ(read_once(p.b), bytes("def"));
    EXPECT_FALSE(p.b.at_mark());
    EXPECT_EQ(p.b.oob_pending(), 0u);
}

TEST(SdpEngineOobMark, PlainReadsSkipTheOutOfLineByteAndLoseIt) {
    Pair p;
    abc_x_def(p);
    EXPECT_EQ(read_once(p.b), bytes("abc"));
    EXPECT_EQ(read_once(p.b), bytes("def"));  // skipped, as TCP does
    EXPECT_EQ(p.b.read_oob(), std::nullopt);  // passed: gone
    EXPECT_FALSE(p.b.urgent_pending());
    EXPECT_FALSE(p.b.at_mark());
}

TEST(SdpEngineOobMark, ReadUpToTheMarkOnlyInSmallSteps) {
    Pair p;
    abc_x_def(p);
    Bytes two(2);
    ASSERT_EQ(p.b.read(two), 2u);
    EXPECT_FALSE(p.b.at_mark());
    EXPECT_EQ(read_once(p.b), bytes("c"));
    EXPECT_TRUE(p.b.at_mark());
}

TEST(SdpEngineOobInline, TheByteStaysInTheStream) {
    e::Config cb;
    cb.oob_inline = true;
    Pair p({}, cb);
    abc_x_def(p);
    EXPECT_TRUE(p.b.oob_inline());
    EXPECT_EQ(p.b.readable(), 7u);
    EXPECT_EQ(read_once(p.b), bytes("abc"));  // still stops at the mark
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_FALSE(p.b.at_urgent());
    EXPECT_EQ(p.b.read_oob(), std::nullopt);  // EINVAL with SO_OOBINLINE
    EXPECT_FALSE(p.b.oob_not_yet());
    EXPECT_EQ(read_once(p.b), bytes("Xdef"));
    EXPECT_FALSE(p.b.at_mark());
}

TEST(SdpEngineOobInline, SwitchedOnAfterArrivalAppliesToTheByte) {
    Pair p;
    abc_x_def(p);
    EXPECT_EQ(read_once(p.b), bytes("abc"));
    p.b.set_oob_inline(true);  // decided at read time, as Linux
    EXPECT_EQ(read_once(p.b), bytes("Xdef"));
}

TEST(SdpEngineOobSecond, ANewerByteLeavesTheUnreadOlderOneInLine) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(bytes("ab"));
    ASSERT_TRUE(p.a.write_oob('X'));
    p.a.write(bytes("cd"));
    ASSERT_TRUE(p.a.write_oob('Y'));
    p.a.write(bytes("ef"));
    p.run();
    // Linux tcp_check_urg(): the older urgent byte becomes normal data.
    EXPECT_EQ(read_once(p.b), bytes("abXcd"));
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('Y'));
    EXPECT_EQ(read_once(p.b), bytes("ef"));
}

TEST(SdpEngineOobSecond, AReaderStandingOnTheOlderByteDropsIt) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(bytes("ab"));
    ASSERT_TRUE(p.a.write_oob('X'));
    p.run();
    EXPECT_EQ(read_once(p.b), bytes("ab"));
    ASSERT_TRUE(p.b.at_mark());
    p.a.write(bytes("cd"));
    ASSERT_TRUE(p.a.write_oob('Y'));
    p.run();
    // The reader stood on X: X goes (Linux skips it), Y is the mark now.
    EXPECT_FALSE(p.b.at_mark());
    EXPECT_EQ(read_once(p.b), bytes("cd"));
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('Y'));
}

TEST(SdpEngineOobSecond, ANewerByteAfterTheOlderWasReadOutOfBand) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.write(bytes("ab"));
    ASSERT_TRUE(p.a.write_oob('X'));
    p.run();
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('X'));
    p.a.write(bytes("cd"));
    ASSERT_TRUE(p.a.write_oob('Y'));
    p.run();
    // Read out of band, yet still in the queue when Y's notice came: in
    // line (Linux keeps the byte in the queue and only skips it at urg_seq).
    EXPECT_EQ(read_once(p.b), bytes("abXcd"));
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('Y'));
}

TEST(SdpEngineOobAlone, TheUrgentByteAsTheOnlyByteOfAMessage) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    const std::size_t before = p.qa.sent_log.size();
    ASSERT_TRUE(p.a.write_oob('Z'));
    p.run();
    const auto s = sent(p);
    ASSERT_GT(s.size(), before);
    const Sent& m = s[before];
    EXPECT_EQ(m.payload, 1u);
    EXPECT_EQ(m.flags & (w::flag::oob_pend | w::flag::oob_pres),
              w::flag::oob_pend | w::flag::oob_pres);
    EXPECT_EQ(m.last, 'Z');
    EXPECT_EQ(p.b.readable(), 0u);  // nothing in line
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_TRUE(p.b.urgent_pending());
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('Z'));
    p.a.write(bytes("after"));
    p.run();
    EXPECT_EQ(read_once(p.b), bytes("after"));
}

TEST(SdpEngineOobAlone, EndOfStreamBehindALoneUrgentByte) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    ASSERT_TRUE(p.a.write_oob('Z'));
    p.a.shutdown_write();
    p.run();
    EXPECT_TRUE(p.b.eof());  // nothing in line is left
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('Z'));
}

TEST(SdpEngineOobPend, AnnouncedButNotArrivedIsTryAgain) {
    // The flag may go well ahead of the byte (at most 65535 bytes): with
    // few credits the byte's message waits while the flag is out.
    e::Config ca;
    ca.send_queue_limit = 1 << 20;
    e::Config cb;
    cb.recv_buf_count = 4;  // 4 messages of credit
    Pair p(ca, cb);
    ASSERT_EQ(p.handshake(), e::Error::none);
    // Two messages use a's credit; the rest and the byte wait for more.
    Bytes first = pattern(32736, 3), rest = pattern(40000, 4);
    ASSERT_EQ(p.a.write(first), first.size());
    ASSERT_EQ(p.a.write(rest), rest.size());
    ASSERT_TRUE(p.a.write_oob('Q'));
    p.run();
    Bytes buf(1 << 16);
    std::size_t got = p.b.read(buf);
    p.run();  // credit back: a sends on, flag first, until credit runs out
    ASSERT_EQ(p.b.oob_pending(), 1u) << "the flag went with the byte";
    EXPECT_TRUE(p.b.urgent_pending());
    EXPECT_TRUE(p.b.oob_not_yet());  // read_oob: EAGAIN
    EXPECT_EQ(p.b.read_oob(), std::nullopt);
    EXPECT_FALSE(p.b.at_mark());
    for (int i = 0; i < 1000 && !p.b.at_mark(); ++i) {
        got += p.b.read(buf);
        p.run();
    }
    EXPECT_EQ(got, first.size() + rest.size());
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('Q'));
}

// Each OOB_PEND at most 65535 bytes before its byte (counted from the
// flagged message's first payload byte, the byte included) and exactly one
// per byte, with messages larger than 64 KiB (the sender must cut one).
class SdpEngineOobPendDistance : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(SdpEngineOobPendDistance, ExactlyOnceAndWithin65535Bytes) {
    e::Config c;
    c.recv_buf_size = GetParam();
    c.send_buf_size = GetParam();
    c.recv_buf_count = 32;
    c.send_queue_limit = 4 << 20;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    const std::vector<std::size_t> gaps{200000, 1, 65534, 65535, 65536, 300000, 0};
    Bytes expect, got, buf(1 << 18);
    std::vector<std::uint8_t> urgent, oob;
    std::uint32_t seed = 7;
    for (std::size_t g : gaps) {
        Bytes d = pattern(g, seed++);
        std::size_t w = 0;
        const auto u = static_cast<std::uint8_t>(0xA0 + urgent.size());
        urgent.push_back(u);
        expect.insert(expect.end(), d.begin(), d.end());
        // The reader takes each urgent byte before the next is sent (a newer
        // one would leave it in line, as TCP).
        bool sent_oob = false;
        for (int i = 0; i < 100000 && oob.size() < urgent.size(); ++i) {
            w += p.a.write(std::span(d).subspan(w));
            if (w == d.size() && !sent_oob) {
                sent_oob = p.a.write_oob(u);
            }
            p.run();
            if (p.b.at_urgent()) {
                auto b = p.b.read_oob();
                ASSERT_TRUE(b.has_value());
                oob.push_back(*b);
            }
            const std::size_t n = p.b.read(buf);
            got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        }
    }
    EXPECT_TRUE(got == expect) << got.size() << " of " << expect.size();
    EXPECT_EQ(oob, urgent);
    // The flags on the wire.
    std::uint64_t pos = 0;
    std::vector<std::uint64_t> pend_at;
    std::size_t pres = 0;
    for (const Sent& m : sent(p)) {
        if (m.flags & w::flag::oob_pend)
            pend_at.push_back(pos);
        pos += m.payload;
        if (m.flags & w::flag::oob_pres) {
            ASSERT_LT(pres, pend_at.size()) << "OOB_PRES before its OOB_PEND";
            EXPECT_LE(pos - pend_at[pres], 65535u) << "byte " << pres;
            EXPECT_EQ(m.last, urgent[pres]);
            ++pres;
        }
    }
    EXPECT_EQ(pend_at.size(), urgent.size());
    EXPECT_EQ(pres, urgent.size());
    EXPECT_EQ(p.b.oob_pending(), 0u);
}

INSTANTIATE_TEST_SUITE_P(BufferSizes, SdpEngineOobPendDistance,
                         ::testing::Values(16u * 1024, 64u * 1024, 256u * 1024, 1024u * 1024));

// With private buffers over 64 KiB, the byte may be queued more than 65535
// bytes behind the start of the message that would carry it, with no
// message before it to take OOB_PEND: that message is cut 65535 bytes
// before the byte so the next one (the byte's) may carry the flag.
TEST(SdpEngineOobPend, LargeBuffersCutTheCarryingMessage) {
    e::Config c;
    c.recv_buf_size = 256 * 1024;
    c.send_buf_size = 256 * 1024;
    c.recv_buf_count = 4;  // two payload messages of credit, then a waits
    c.send_queue_limit = 4 << 20;
    Pair p(c, c);
    ASSERT_EQ(p.handshake(), e::Error::none);
    const Bytes d = pattern(600000, 11);
    ASSERT_EQ(p.a.write(d), d.size());  // two messages go, the rest waits
    ASSERT_TRUE(p.a.write_oob('!'));
    Bytes got, buf(1 << 20);
    for (int i = 0; i < 1000 && got.size() < d.size(); ++i) {
        p.run();
        const std::size_t n = p.b.read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    EXPECT_TRUE(got == d);
    EXPECT_TRUE(p.b.at_mark());
    EXPECT_EQ(p.b.read_oob(), std::optional<std::uint8_t>('!'));
    std::uint64_t pos = 0, pend_at = 0;
    int pend = 0, pres = 0;
    std::size_t carrier = 0;
    for (const Sent& m : sent(p)) {
        if (m.flags & w::flag::oob_pend) {
            pend_at = pos;
            ++pend;
        }
        pos += m.payload;
        if (m.flags & w::flag::oob_pres) {
            ++pres;
            carrier = m.payload;
            EXPECT_LE(pos - pend_at, 65535u);
        }
    }
    EXPECT_EQ(pend, 1);
    EXPECT_EQ(pres, 1);
    EXPECT_EQ(carrier, 65535u);  // the cut: exactly 65535 bytes with the byte
}
