// SPDX-License-Identifier: Apache-2.0
// The two teardown machines (sdp/engine/teardown.hpp): every legal
// transition, every rejected one, and the states a Connection goes through.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fake_qp.hpp"
#include "sdp/engine/teardown.hpp"

namespace e = sdp::engine;
using e::RecvEvent;
using e::RecvTeardown;
using e::SendEvent;
using e::SendTeardown;
using sdp::test::Pair;

namespace {

const std::vector<SendTeardown> kSendStates = {
    SendTeardown::open,          SendTeardown::draining,      SendTeardown::disconn_sent,
    SendTeardown::closing,       SendTeardown::abort_pending, SendTeardown::abort_sent,
    SendTeardown::abort_dropped,
};
const std::vector<SendEvent> kSendEvents = {
    SendEvent::shutdown, SendEvent::disconn,    SendEvent::llp_teardown,
    SendEvent::abort,    SendEvent::abort_conn, SendEvent::give_up,
};
const std::vector<RecvTeardown> kRecvStates = {
    RecvTeardown::open,         RecvTeardown::disconn,
    RecvTeardown::aborted,      RecvTeardown::disconn_aborted,
    RecvTeardown::closed,       RecvTeardown::lost,
    RecvTeardown::disconn_lost,
};
const std::vector<RecvEvent> kRecvEvents = {
    RecvEvent::disconn,
    RecvEvent::abort_conn,
    RecvEvent::llp_closed,
};

// The expected tables, written out independently of teardown.cpp.
const std::map<std::pair<SendTeardown, SendEvent>, SendTeardown> kSendLegal = {
    {{SendTeardown::open, SendEvent::shutdown}, SendTeardown::draining},
    {{SendTeardown::draining, SendEvent::disconn}, SendTeardown::disconn_sent},
    {{SendTeardown::disconn_sent, SendEvent::llp_teardown}, SendTeardown::closing},
    {{SendTeardown::disconn_sent, SendEvent::abort}, SendTeardown::abort_pending},
    {{SendTeardown::closing, SendEvent::abort}, SendTeardown::abort_pending},
    {{SendTeardown::abort_pending, SendEvent::abort_conn}, SendTeardown::abort_sent},
    {{SendTeardown::abort_pending, SendEvent::give_up}, SendTeardown::abort_dropped},
};
const std::map<std::pair<RecvTeardown, RecvEvent>, RecvTeardown> kRecvLegal = {
    {{RecvTeardown::open, RecvEvent::disconn}, RecvTeardown::disconn},
    {{RecvTeardown::open, RecvEvent::abort_conn}, RecvTeardown::aborted},
    {{RecvTeardown::disconn, RecvEvent::abort_conn}, RecvTeardown::disconn_aborted},
    {{RecvTeardown::open, RecvEvent::llp_closed}, RecvTeardown::lost},
    {{RecvTeardown::disconn, RecvEvent::llp_closed}, RecvTeardown::closed},
    {{RecvTeardown::aborted, RecvEvent::llp_closed}, RecvTeardown::lost},
    {{RecvTeardown::disconn_aborted, RecvEvent::llp_closed}, RecvTeardown::disconn_lost},
};

}  // namespace

namespace {

// Asks next() about every (state, event) pair: those in `legal` must lead
// where it says, all others must be rejected. Returns how many were legal.
template <class State, class Event>
int check_table(const std::vector<State>& states, const std::vector<Event>& events,
                const std::map<std::pair<State, Event>, State>& legal) {
    int n = 0;
    for (auto s : states) {
        for (auto ev : events) {
            const auto got = e::next(s, ev);
            const auto it = legal.find({s, ev});
            const std::string what =
                std::string(e::to_string(s)) + " + " + std::string(e::to_string(ev));
            if (it != legal.end()) {
                ++n;
                EXPECT_EQ(got, std::optional<State>(it->second)) << what;
            } else {
                EXPECT_FALSE(got.has_value()) << what << " -> " << e::to_string(got.value_or(s));
            }
        }
    }
    return n;
}

}  // namespace

TEST(SdpTeardownSend, EveryTransitionLegalOrRejected) {
    EXPECT_EQ(check_table(kSendStates, kSendEvents, kSendLegal), 7);
}

TEST(SdpTeardownRecv, EveryTransitionLegalOrRejected) {
    EXPECT_EQ(check_table(kRecvStates, kRecvEvents, kRecvLegal), 7);
}

TEST(SdpTeardownSend, RejectedTransitionsOfNote) {
    // A second shutdown_write(), DisConn before shutdown or twice.
    EXPECT_FALSE(e::next(SendTeardown::draining, SendEvent::shutdown));
    EXPECT_FALSE(e::next(SendTeardown::open, SendEvent::disconn));
    EXPECT_FALSE(e::next(SendTeardown::disconn_sent, SendEvent::disconn));
    // 8.2.2: no AbortConn without an earlier DisConn; none twice.
    EXPECT_FALSE(e::next(SendTeardown::open, SendEvent::abort));
    EXPECT_FALSE(e::next(SendTeardown::draining, SendEvent::abort));
    EXPECT_FALSE(e::next(SendTeardown::abort_pending, SendEvent::abort));
    EXPECT_FALSE(e::next(SendTeardown::abort_sent, SendEvent::abort_conn));
    // The graceful LLP teardown is asked for once.
    EXPECT_FALSE(e::next(SendTeardown::closing, SendEvent::llp_teardown));
    // Nothing to give up unless an AbortConn waits.
    EXPECT_FALSE(e::next(SendTeardown::disconn_sent, SendEvent::give_up));
}

TEST(SdpTeardownRecv, RejectedTransitionsOfNote) {
    EXPECT_FALSE(e::next(RecvTeardown::disconn, RecvEvent::disconn));  // a second DisConn
    EXPECT_FALSE(e::next(RecvTeardown::aborted, RecvEvent::abort_conn));
    EXPECT_FALSE(e::next(RecvTeardown::disconn_aborted, RecvEvent::disconn));
    for (auto s : {RecvTeardown::closed, RecvTeardown::lost, RecvTeardown::disconn_lost}) {
        for (auto ev : kRecvEvents)
            EXPECT_FALSE(e::next(s, ev)) << e::to_string(s);  // the LLP is gone
    }
}

TEST(SdpTeardown, StepTakesLegalAndKeepsStateOnRejected) {
    SendTeardown s = SendTeardown::open;
    EXPECT_FALSE(e::step(s, SendEvent::disconn));
    EXPECT_EQ(s, SendTeardown::open);
    EXPECT_TRUE(e::step(s, SendEvent::shutdown));
    EXPECT_EQ(s, SendTeardown::draining);
    RecvTeardown r = RecvTeardown::closed;
    EXPECT_FALSE(e::step(r, RecvEvent::llp_closed));
    EXPECT_EQ(r, RecvTeardown::closed);
}

TEST(SdpTeardown, Predicates) {
    std::set<SendTeardown> sent;
    for (auto s : kSendStates) {
        if (e::disconn_sent(s))
            sent.insert(s);
    }
    EXPECT_EQ(sent, (std::set<SendTeardown>{SendTeardown::disconn_sent, SendTeardown::closing,
                                            SendTeardown::abort_pending, SendTeardown::abort_sent,
                                            SendTeardown::abort_dropped}));
    for (auto s : kRecvStates) {
        const bool d = s == RecvTeardown::disconn || s == RecvTeardown::disconn_aborted ||
                       s == RecvTeardown::closed || s == RecvTeardown::disconn_lost;
        EXPECT_EQ(e::disconn_received(s), d) << e::to_string(s);
        const bool a = s == RecvTeardown::aborted || s == RecvTeardown::disconn_aborted;
        EXPECT_EQ(e::abort_received(s), a) << e::to_string(s);
        const bool l =
            s == RecvTeardown::closed || s == RecvTeardown::lost || s == RecvTeardown::disconn_lost;
        EXPECT_EQ(e::llp_closed(s), l) << e::to_string(s);
    }
}

TEST(SdpTeardown, NamesAreDistinct) {
    std::set<std::string> names;
    for (auto s : kSendStates)
        names.insert(std::string(e::to_string(s)));
    EXPECT_EQ(names.size(), kSendStates.size());
    names.clear();
    for (auto s : kRecvStates)
        names.insert(std::string(e::to_string(s)));
    EXPECT_EQ(names.size(), kRecvStates.size());
    names.clear();
    for (auto ev : kSendEvents)
        names.insert(std::string(e::to_string(ev)));
    EXPECT_EQ(names.size(), kSendEvents.size());
    names.clear();
    for (auto ev : kRecvEvents)
        names.insert(std::string(e::to_string(ev)));
    EXPECT_EQ(names.size(), kRecvEvents.size());
}

// The machines as a Connection drives them.

TEST(SdpTeardownConnection, GracefulCloseBothSides) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    EXPECT_EQ(p.a.describe(), "established, send open, recv open");
    p.a.shutdown_write();
    p.run();
    EXPECT_EQ(p.a.send_teardown(), SendTeardown::disconn_sent);
    EXPECT_EQ(p.b.recv_teardown(), RecvTeardown::disconn);
    p.a.shutdown_write();  // rejected by the machine: nothing changes
    EXPECT_EQ(p.a.send_teardown(), SendTeardown::disconn_sent);
    p.b.shutdown_write();
    p.run();
    EXPECT_TRUE(p.llp_down);
    // Each side, having sent and received DisConn, asked for the graceful
    // LLP teardown (B after sending its DisConn, A on receiving it).
    EXPECT_EQ(p.b.send_teardown(), SendTeardown::closing);
    EXPECT_EQ(p.a.send_teardown(), SendTeardown::closing);
    EXPECT_EQ(p.a.recv_teardown(), RecvTeardown::closed);
    EXPECT_EQ(p.b.recv_teardown(), RecvTeardown::closed);
    EXPECT_EQ(p.a.describe(), "closed, send closing, recv closed");
    EXPECT_TRUE(p.a.disconn_received());
    EXPECT_TRUE(p.b.disconn_sent());
}

TEST(SdpTeardownConnection, AbortAfterDisConn) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.shutdown_write();
    p.run();
    p.a.abort();
    EXPECT_EQ(p.a.send_teardown(), SendTeardown::abort_sent);
    p.run();
    EXPECT_EQ(p.b.recv_teardown(), RecvTeardown::disconn_lost);
    EXPECT_TRUE(p.b.disconn_received());
    EXPECT_EQ(p.b.describe(), "reset (peer_abort), send open, recv disconn_lost");
}

TEST(SdpTeardownConnection, AbortWithoutDisConn) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    p.a.abort();
    EXPECT_EQ(p.a.send_teardown(), SendTeardown::open);  // no AbortConn (8.2.2)
    p.run();
    EXPECT_EQ(p.a.recv_teardown(), RecvTeardown::lost);
    EXPECT_EQ(p.b.recv_teardown(), RecvTeardown::lost);
    EXPECT_EQ(p.b.describe(), "reset (llp_lost), send open, recv lost");
}

TEST(SdpTeardownConnection, SecondDisConnIsViolation) {
    Pair p;
    ASSERT_EQ(p.handshake(), e::Error::none);
    sdp::wire::Message m;
    m.bufs = 16;
    m.mseq = 1;
    m.body = sdp::wire::DisConn{};
    p.inject_to_b(sdp::wire::encode(m));
    m.mseq = 2;
    p.inject_to_b(sdp::wire::encode(m));
    p.run();
    EXPECT_EQ(p.b.error(), e::Error::unexpected_message);
    EXPECT_EQ(p.b.state(), e::State::reset);
}
