// SPDX-License-Identifier: Apache-2.0
// Socket duplication initiated here (13.1.1, the Local Peer, step 5): the
// suspended engine hands its state over (Connection::hand_over()) and a
// fresh accepting engine takes it (carry_in()) on a new LLP, facing the same
// Remote Peer engine, on the fake QP pair of engine_dup_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fake_qp.hpp"

namespace e = sdp::engine;
using namespace sdp::test;
using Bytes = std::vector<std::uint8_t>;

namespace {

Bytes slice(const Bytes& b, std::size_t from, std::size_t n) {
    return {b.begin() + static_cast<std::ptrdiff_t>(from),
            b.begin() + static_cast<std::ptrdiff_t>(from + n)};
}

// The new LLP between the Remote Peer (x, on its own QP) and the engine
// that took over (y): one packet each way per step, into posted receives.
struct Link {
    FakeQp& qx;
    e::Connection& x;
    FakeQp& qy;
    e::Connection& y;
    std::vector<std::string> faults;

    bool one(FakeQp& from, FakeQp& to, e::Connection& dst) {
        if (from.outbound.empty())
            return false;
        auto p = std::move(from.outbound.front());
        from.outbound.pop_front();
        if (p.close)
            return true;  // not expected here; nothing to tear down
        if (to.posted == 0 || p.bytes.size() > dst.local_recv_size()) {
            faults.push_back("send without a posted receive, or too large");
            return true;
        }
        --to.posted;
        dst.on_recv(p.bytes, p.solicited);
        return true;
    }
    bool step() {
        const bool a = one(qx, qy, y);
        const bool b = one(qy, qx, x);
        return a || b;
    }
};

}  // namespace

// Step 5: the Local Peer (b) suspends with the Remote Peer's data unread and
// its own data unsent; hand_over() returns exactly those bytes, and a fresh
// engine that carries them in delivers the unread bytes first and sends the
// unsent ones first (steps 6-8), counted as a resume on both sides.
TEST(SdpEngineHandoff, Section13_1_1_LocalPeerHandsOverUnreadAndUnsentExactly) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    const Bytes r_to_l = pattern(300 * 1024, 11);
    const Bytes l_to_r = pattern(2 * 1024 * 1024, 12);
    std::size_t off_r = 0, off_l = 0;
    feed(p.a, r_to_l, off_r);
    feed(p.b, l_to_r, off_l);
    for (int i = 0; i < 8; ++i)
        p.step();
    feed(p.a, r_to_l, off_r);
    feed(p.b, l_to_r, off_l);
    Bytes got_r;
    drain(p.a, got_r);  // R reads part of L's data; L reads nothing
    ASSERT_GT(p.b.readable(), 0u);
    ASSERT_GT(p.b.send_queued(), 0u);

    ASSERT_TRUE(p.b.suspend(6000));
    EXPECT_FALSE(p.b.hand_over()) << "not before the SuspCommAck";
    p.run();
    ASSERT_EQ(p.b.duplication(), e::Dup::local_done) << p.b.describe();
    ASSERT_EQ(p.a.duplication(), e::Dup::reconnecting) << p.a.describe();
    ASSERT_TRUE(p.faults.empty());
    drain(p.a, got_r);  // R may read everything L sent before the SuspComm
    const std::size_t l_readable = p.b.readable();

    auto carry = p.b.hand_over();
    ASSERT_TRUE(carry);
    EXPECT_EQ(carry->unread.size(), l_readable);
    EXPECT_EQ(carry->unread, slice(r_to_l, 0, carry->unread.size())) << "L read nothing";
    ASSERT_EQ(got_r.size() + carry->unsent.size(), off_l);
    EXPECT_EQ(got_r, slice(l_to_r, 0, got_r.size()));
    EXPECT_EQ(carry->unsent, slice(l_to_r, got_r.size(), carry->unsent.size()));
    EXPECT_FALSE(carry->write_shut);
    EXPECT_EQ(carry->recv_buf_size, p.b.local_recv_size());
    EXPECT_EQ(carry->ird, p.b.ird());
    EXPECT_EQ(carry->ord, p.b.ord());
    // The old engine is done.
    EXPECT_EQ(p.b.state(), e::State::reset);
    EXPECT_EQ(p.b.error(), e::Error::handed_off);
    EXPECT_EQ(p.b.readable(), 0u);
    EXPECT_FALSE(p.b.eof());
    const Bytes more = pattern(10, 13);
    EXPECT_EQ(p.b.write(more), 0u);
    EXPECT_FALSE(p.b.hand_over()) << "once";

    // Steps 6-7: a fresh accepting engine with the old buffer size.
    e::Config cfg;
    cfg.recv_buf_size = carry->recv_buf_size;
    FakeQp qc;
    e::Connection c(e::Role::accepting, cfg, qc);
    ASSERT_TRUE(c.carry_in(carry->unread, carry->unsent, carry->write_shut));
    for (FakeQp* q : {&p.qa}) {
        q->outbound.clear();
        q->posted = 0;
        q->down = false;
    }
    ASSERT_TRUE(p.a.restart(e::Role::connecting));
    ASSERT_EQ(c.accept(p.a.connect()), e::Error::none);
    EXPECT_FALSE(c.carry_in({}, {}, false)) << "only before the setup";
    // The carried bytes come first and free no private buffer.
    const std::uint32_t bufs = c.local_bufs();
    Bytes got_l;
    Bytes buf(carry->unread.size() + 1);
    ASSERT_EQ(c.read(buf), carry->unread.size());
    got_l.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(carry->unread.size()));
    EXPECT_EQ(c.local_bufs(), bufs) << "a carried chunk reposts no buffer";

    Link link{p.qa, p.a, qc, c, {}};
    for (int round = 0; round < 1'000'000; ++round) {
        feed(p.a, r_to_l, off_r);
        feed(c, l_to_r, off_l);
        const bool moved = link.step();
        drain(p.a, got_r);
        drain(c, got_l);
        if (!moved && off_r == r_to_l.size() && off_l == l_to_r.size() && p.a.send_queued() == 0 &&
            c.send_queued() == 0)
            break;
    }
    EXPECT_TRUE(link.faults.empty()) << link.faults.front();
    EXPECT_EQ(got_l, r_to_l);
    EXPECT_EQ(got_r, l_to_r);
    EXPECT_EQ(p.a.stats().resumes, 1u);
    EXPECT_EQ(c.stats().resumes, 1u);
    EXPECT_LE(c.local_bufs(), cfg.recv_buf_count);
}

// Urgent data is flattened (docs/protocol-notes.md, 13.1.1): an out-of-line
// urgent byte not read yet is left out of `unread` (reads skip it), an
// inline one stays; a pending shutdown_write() comes out as write_shut and
// the new engine sends DisConn after the carried bytes.
TEST(SdpEngineHandoff, Section13_1_1_UrgentByteFlattenedAndShutdownCarried) {
    for (const bool inline_oob : {false, true}) {
        SCOPED_TRACE(inline_oob ? "oob_inline" : "out of line");
        Pair p;
        ASSERT_EQ(p.handshake(), e::Error::none);
        p.b.set_oob_inline(inline_oob);
        const Bytes before = pattern(1000, 21);
        const Bytes after = pattern(500, 22);
        ASSERT_EQ(p.a.write(before), before.size());
        ASSERT_TRUE(p.a.write_oob(0xAB));
        ASSERT_EQ(p.a.write(after), after.size());
        p.run();
        // b: data held back for credit (a reads nothing, so its buffers
        // run out), then half-closed: the DisConn waits behind the data.
        const Bytes tail = pattern(1024 * 1024, 23);
        std::size_t off = 0;
        feed(p.b, tail, off);
        p.run();
        ASSERT_GT(p.b.send_queued(), 0u);
        p.b.shutdown_write();
        ASSERT_FALSE(p.b.disconn_sent());
        ASSERT_TRUE(p.b.suspend(6001));
        p.run();
        ASSERT_EQ(p.b.duplication(), e::Dup::local_done) << p.b.describe();
        Bytes got_r;
        drain(p.a, got_r);
        auto carry = p.b.hand_over();
        ASSERT_TRUE(carry);
        Bytes want = before;
        if (inline_oob)
            want.push_back(0xAB);
        want.insert(want.end(), after.begin(), after.end());
        EXPECT_EQ(carry->unread, want);
        EXPECT_EQ(got_r.size() + carry->unsent.size(), off);
        EXPECT_EQ(got_r, slice(tail, 0, got_r.size()));
        EXPECT_EQ(carry->unsent, slice(tail, got_r.size(), carry->unsent.size()));
        EXPECT_TRUE(carry->write_shut);

        // The new engine: the carried bytes, then DisConn (8.2.1).
        e::Connection c(e::Role::accepting, e::Config{}, p.qb);
        ASSERT_TRUE(c.carry_in(carry->unread, carry->unsent, carry->write_shut));
        for (FakeQp* q : {&p.qa, &p.qb}) {
            q->outbound.clear();
            q->posted = 0;
            q->down = false;
        }
        ASSERT_TRUE(p.a.restart(e::Role::connecting));
        ASSERT_EQ(c.accept(p.a.connect()), e::Error::none);
        Link link{p.qa, p.a, p.qb, c, {}};
        for (int i = 0; i < 100000 && link.step(); ++i)
            drain(p.a, got_r);
        drain(p.a, got_r);
        EXPECT_EQ(got_r, slice(tail, 0, off));
        EXPECT_TRUE(p.a.eof()) << p.a.describe();
        EXPECT_TRUE(link.faults.empty());
    }
}

// Not suspended, or suspended but without the SuspCommAck: nothing comes out.
TEST(SdpEngineHandoff, Section13_1_1_HandOverOnlyInLocalDone) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    EXPECT_FALSE(p.b.hand_over());
    ASSERT_TRUE(p.b.suspend(6002));
    EXPECT_EQ(p.b.duplication(), e::Dup::local_sent);
    EXPECT_FALSE(p.b.hand_over());
    EXPECT_EQ(p.b.state(), e::State::established);
}
