// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/mpa.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

using namespace sdp::iwarp;
using Bytes = std::vector<std::uint8_t>;

namespace {

Bytes key_bytes(const char* k) {
    return Bytes(k, k + 16);
}

struct Pair {
    MpaNegotiator ini;
    MpaNegotiator res;
    Pair(MpaConfig ci, MpaConfig cr)
        : ini(MpaRole::initiator, std::move(ci)), res(MpaRole::responder, std::move(cr)) {}

    // Runs the exchange; the responder accepts with `reply_pd` unless it fails.
    void run(const Bytes& reply_pd = {}) {
        ASSERT_FALSE(ini.start());
        Bytes req = ini.take_output();
        EXPECT_EQ(res.on_bytes(req), req.size());
        if (res.state() == MpaState::request_received) {
            ASSERT_FALSE(res.accept(reply_pd));
        }
        Bytes rep = res.take_output();
        if (!rep.empty()) {
            EXPECT_EQ(ini.on_bytes(rep), rep.size());
        }
    }
};

}  // namespace

TEST(MpaCodec, RequestGolden) {
    MpaFrame f;
    f.key = MpaKey::request;
    f.crc = true;
    f.enhanced = true;
    f.rev = 2;
    f.private_data = {0x80, 0x80, 0x40, 0x80, 'h', 'i'};
    Bytes golden = key_bytes("MPA ID Req Frame");
    golden.insert(golden.end(), {0x50, 0x02, 0x00, 0x06, 0x80, 0x80, 0x40, 0x80, 'h', 'i'});
    auto enc = encode_mpa_frame(f);
    ASSERT_TRUE(enc);
    EXPECT_EQ(*enc, golden);
    auto dec = decode_mpa_frame(golden);
    ASSERT_TRUE(dec);
    EXPECT_EQ(dec->frame, f);
    EXPECT_EQ(dec->consumed, golden.size());
}

TEST(MpaCodec, ReplyRejectGolden) {
    MpaFrame f;
    f.key = MpaKey::reply;
    f.reject = true;
    f.rev = 1;
    Bytes golden = key_bytes("MPA ID Rep Frame");
    golden.insert(golden.end(), {0x20, 0x01, 0x00, 0x00});
    EXPECT_EQ(*encode_mpa_frame(f), golden);
    EXPECT_EQ(decode_mpa_frame(golden)->frame, f);
}

TEST(MpaCodec, ReservedFlagsIgnoredAndErrors) {
    Bytes b = key_bytes("MPA ID Rep Frame");
    b.insert(b.end(), {0x4F, 0x02, 0x00, 0x00});  // siw may set 0x08
    auto d = decode_mpa_frame(b);
    ASSERT_TRUE(d);
    EXPECT_TRUE(d->frame.crc);
    EXPECT_FALSE(d->frame.enhanced);

    Bytes bad = key_bytes("MPA ID Xxx Frame");
    bad.insert(bad.end(), {0, 1, 0, 0});
    EXPECT_EQ(decode_mpa_frame(bad).error(), MpaError::bad_key);
    EXPECT_EQ(decode_mpa_frame(Bytes{'G', 'E', 'T'}).error(), MpaError::bad_key);
    EXPECT_EQ(decode_mpa_frame(Bytes{'M', 'P', 'A'}).error(), MpaError::need_more);

    Bytes longpd = key_bytes("MPA ID Req Frame");
    longpd.insert(longpd.end(), {0, 1, 0x02, 0x01});  // 513
    EXPECT_EQ(decode_mpa_frame(longpd).error(), MpaError::pd_too_long);
    Bytes maxpd = key_bytes("MPA ID Req Frame");
    maxpd.insert(maxpd.end(), {0, 1, 0x02, 0x00});
    EXPECT_EQ(decode_mpa_frame(maxpd).error(), MpaError::need_more);
    maxpd.resize(maxpd.size() + 512);
    EXPECT_TRUE(decode_mpa_frame(maxpd));
}

TEST(MpaCodec, V2Block) {
    MpaV2Params p{true, false, true, true, 128, 0x3FFF};
    const auto b = encode_mpa_v2(p);
    EXPECT_EQ(b, (std::array<std::uint8_t, 4>{0x80, 0x80, 0xFF, 0xFF}));
    EXPECT_EQ(decode_mpa_v2(b), p);
}

TEST(MpaNegotiation, DefaultsRev2NoCrc) {
    MpaConfig ci;
    ci.private_data = {1, 2, 3};
    Pair p(ci, MpaConfig{});
    p.run(Bytes{9, 8});
    ASSERT_EQ(p.ini.state(), MpaState::established);
    ASSERT_EQ(p.res.state(), MpaState::established);
    for (auto* n : {&p.ini, &p.res}) {
        EXPECT_EQ(n->outcome().rev, 2);
        EXPECT_TRUE(n->outcome().enhanced);
        EXPECT_FALSE(n->outcome().crc);
        EXPECT_FALSE(n->outcome().p2p);
    }
    EXPECT_EQ(p.res.outcome().peer_private_data, (Bytes{1, 2, 3}));
    EXPECT_EQ(p.ini.outcome().peer_private_data, (Bytes{9, 8}));
}

TEST(MpaNegotiation, CrcMatrix) {
    for (int rev_i = 1; rev_i <= 2; ++rev_i) {
        for (int rev_r = 1; rev_r <= 2; ++rev_r) {
            for (int ci = 0; ci < 2; ++ci) {
                for (int cr = 0; cr < 2; ++cr) {
                    MpaConfig a;
                    a.enhanced = rev_i == 2;
                    a.crc = ci != 0;
                    MpaConfig b;
                    b.enhanced = rev_r == 2;
                    b.crc = cr != 0;
                    Pair p(a, b);
                    p.run();
                    SCOPED_TRACE(testing::Message() << rev_i << rev_r << ci << cr);
                    ASSERT_EQ(p.ini.state(), MpaState::established);
                    ASSERT_EQ(p.res.state(), MpaState::established);
                    const bool crc = ci || cr;
                    const int rev = std::min(rev_i, rev_r);
                    EXPECT_EQ(p.ini.outcome().crc, crc);
                    EXPECT_EQ(p.res.outcome().crc, crc);
                    EXPECT_EQ(p.ini.outcome().rev, rev);
                    EXPECT_EQ(p.res.outcome().rev, rev);
                    EXPECT_EQ(p.ini.outcome().enhanced, rev == 2);
                    EXPECT_EQ(p.res.outcome().enhanced, rev == 2);
                }
            }
        }
    }
}

TEST(MpaNegotiation, MarkersRequestRejected) {
    MpaFrame req;
    req.markers = true;
    req.rev = 1;
    MpaNegotiator res(MpaRole::responder, MpaConfig{});
    Bytes b = *encode_mpa_frame(req);
    res.on_bytes(b);
    EXPECT_EQ(res.state(), MpaState::failed);
    EXPECT_EQ(res.error(), MpaError::markers_not_supported);
    auto rep = decode_mpa_frame(res.take_output());
    ASSERT_TRUE(rep);
    EXPECT_TRUE(rep->frame.reject);
    EXPECT_FALSE(rep->frame.markers);
    EXPECT_EQ(rep->frame.key, MpaKey::reply);

    // An initiator given a Reply granting markers fails too.
    MpaNegotiator ini(MpaRole::initiator, MpaConfig{});
    ASSERT_FALSE(ini.start());
    MpaFrame r2;
    r2.key = MpaKey::reply;
    r2.markers = true;
    r2.rev = 1;
    ini.on_bytes(*encode_mpa_frame(r2));
    EXPECT_EQ(ini.error(), MpaError::markers_not_supported);
}

TEST(MpaNegotiation, BadRevAndKey) {
    for (std::uint8_t rev : {0, 3, 255}) {
        MpaFrame req;
        req.rev = rev;
        MpaNegotiator res(MpaRole::responder, MpaConfig{});
        res.on_bytes(*encode_mpa_frame(req));
        EXPECT_EQ(res.error(), MpaError::bad_rev);
        auto rep = decode_mpa_frame(res.take_output());
        ASSERT_TRUE(rep);
        EXPECT_TRUE(rep->frame.reject);
        EXPECT_EQ(rep->frame.rev, 2);
    }
    // A Reply key sent to a responder.
    MpaFrame wrong;
    wrong.key = MpaKey::reply;
    MpaNegotiator res(MpaRole::responder, MpaConfig{});
    res.on_bytes(*encode_mpa_frame(wrong));
    EXPECT_EQ(res.error(), MpaError::bad_key);
    EXPECT_TRUE(res.take_output().empty());
    // Garbage instead of a Reply.
    MpaNegotiator ini(MpaRole::initiator, MpaConfig{});
    ASSERT_FALSE(ini.start());
    const std::string http = "HTTP/1.1 200 OK\r\n\r\n";
    ini.on_bytes(Bytes(http.begin(), http.end()));
    EXPECT_EQ(ini.error(), MpaError::bad_key);
    // A rev 2 Reply to a rev 1 Request.
    MpaConfig c1;
    c1.enhanced = false;
    MpaNegotiator ini1(MpaRole::initiator, c1);
    ASSERT_FALSE(ini1.start());
    MpaFrame r2;
    r2.key = MpaKey::reply;
    r2.rev = 2;
    ini1.on_bytes(*encode_mpa_frame(r2));
    EXPECT_EQ(ini1.error(), MpaError::bad_rev);
}

TEST(MpaNegotiation, PrivateDataLimits) {
    MpaConfig ok;
    ok.private_data = Bytes(252, 7);
    Pair p(ok, MpaConfig{});
    p.run(Bytes(252, 5));
    EXPECT_EQ(p.ini.state(), MpaState::established);
    EXPECT_EQ(p.res.outcome().peer_private_data.size(), 252u);
    EXPECT_EQ(p.ini.outcome().peer_private_data.size(), 252u);

    MpaConfig too_long;
    too_long.private_data = Bytes(253, 7);
    MpaNegotiator ini(MpaRole::initiator, too_long);
    EXPECT_EQ(ini.start(), MpaError::ulp_pd_too_long);
    EXPECT_EQ(ini.state(), MpaState::idle);

    MpaConfig rev1;
    rev1.enhanced = false;
    rev1.private_data = Bytes(256, 1);
    MpaNegotiator ini1(MpaRole::initiator, rev1);
    EXPECT_FALSE(ini1.start());

    // Responder: accept with too much, then with the limit.
    MpaNegotiator res(MpaRole::responder, MpaConfig{});
    MpaNegotiator ini2(MpaRole::initiator, MpaConfig{});
    ASSERT_FALSE(ini2.start());
    res.on_bytes(ini2.take_output());
    ASSERT_EQ(res.state(), MpaState::request_received);
    EXPECT_EQ(res.accept(Bytes(253, 0)), MpaError::ulp_pd_too_long);
    EXPECT_EQ(res.state(), MpaState::request_received);
    EXPECT_FALSE(res.accept(Bytes(252, 0)));
}

TEST(MpaNegotiation, IrdOrdExchange) {
    MpaConfig a;
    a.ird = 16;
    a.ord = 4;
    MpaConfig b;
    b.ird = 2;
    b.ord = 32;
    Pair p(a, b);
    p.run();
    ASSERT_EQ(p.ini.state(), MpaState::established);
    // Responder: ORD = min(initiator IRD 16, own ORD 32) = 16;
    //            IRD = min(initiator ORD 4, own IRD 2) = 2.
    EXPECT_EQ(p.res.outcome().ord, 16);
    EXPECT_EQ(p.res.outcome().ird, 2);
    // Initiator: ORD = min(own 4, responder IRD 2) = 2; IRD = min(own 16, responder ORD 16).
    EXPECT_EQ(p.ini.outcome().ord, 2);
    EXPECT_EQ(p.ini.outcome().ird, 16);
}

TEST(MpaNegotiation, PeerToPeerRtr) {
    struct Case {
        bool iw, ir, rw, rr;
        RtrMode want;
        bool ok;
    };
    const Case cases[] = {
        {true, true, true, true, RtrMode::write, true},
        {false, true, true, true, RtrMode::read, true},
        {true, true, false, true, RtrMode::read, true},
        {true, false, false, true, RtrMode::none, false},
    };
    for (const auto& c : cases) {
        MpaConfig a;
        a.p2p = true;
        a.rtr_write = c.iw;
        a.rtr_read = c.ir;
        MpaConfig b;
        b.p2p = true;
        b.rtr_write = c.rw;
        b.rtr_read = c.rr;
        Pair p(a, b);
        p.run();
        if (c.ok) {
            ASSERT_EQ(p.ini.state(), MpaState::established);
            EXPECT_TRUE(p.ini.outcome().p2p);
            EXPECT_EQ(p.ini.outcome().rtr, c.want);
            EXPECT_EQ(p.res.outcome().rtr, c.want);
        } else {
            EXPECT_EQ(p.res.error(), MpaError::no_matching_rtr);
            EXPECT_EQ(p.ini.error(), MpaError::rejected_by_peer);
        }
    }
    // Responder without p2p: client-server mode.
    MpaConfig a;
    a.p2p = true;
    Pair p(a, MpaConfig{});
    p.run();
    ASSERT_EQ(p.ini.state(), MpaState::established);
    EXPECT_FALSE(p.ini.outcome().p2p);
    EXPECT_FALSE(p.res.outcome().p2p);
}

TEST(MpaNegotiation, LocalRejectCarriesPrivateData) {
    MpaNegotiator ini(MpaRole::initiator, MpaConfig{});
    MpaNegotiator res(MpaRole::responder, MpaConfig{});
    ASSERT_FALSE(ini.start());
    res.on_bytes(ini.take_output());
    ASSERT_FALSE(res.reject(Bytes{'n', 'o'}));
    EXPECT_EQ(res.error(), MpaError::rejected_locally);
    ini.on_bytes(res.take_output());
    EXPECT_EQ(ini.error(), MpaError::rejected_by_peer);
    EXPECT_EQ(ini.outcome().peer_private_data, (Bytes{'n', 'o'}));
}

TEST(MpaNegotiation, AnySplitAndTrailingBytesLeftAlone) {
    std::mt19937 rng(5);
    for (int round = 0; round < 200; ++round) {
        MpaConfig ci;
        ci.private_data = Bytes(rng() % 100, 3);
        MpaNegotiator ini(MpaRole::initiator, ci);
        MpaNegotiator res(MpaRole::responder, MpaConfig{});
        ASSERT_FALSE(ini.start());
        Bytes req = ini.take_output();
        const Bytes fpdu_bytes = {0xDE, 0xAD, 0xBE, 0xEF};
        req.insert(req.end(), fpdu_bytes.begin(), fpdu_bytes.end());
        std::size_t off = 0;
        while (off < req.size() && res.state() == MpaState::awaiting_request) {
            const std::size_t n =
                std::min<std::size_t>(round == 0 ? 1 : 1 + rng() % 40, req.size() - off);
            off += res.on_bytes(std::span<const std::uint8_t>(req).subspan(off, n));
        }
        ASSERT_EQ(res.state(), MpaState::request_received);
        EXPECT_EQ(req.size() - off, 4u);
        EXPECT_EQ(res.on_bytes(fpdu_bytes), 0u);
        EXPECT_EQ(res.outcome().peer_private_data, ci.private_data);
    }
}

TEST(MpaNegotiation, WrongStateCalls) {
    MpaNegotiator res(MpaRole::responder, MpaConfig{});
    EXPECT_EQ(res.start(), MpaError::wrong_state);
    EXPECT_EQ(res.accept({}), MpaError::wrong_state);
    MpaNegotiator ini(MpaRole::initiator, MpaConfig{});
    ASSERT_FALSE(ini.start());
    EXPECT_EQ(ini.start(), MpaError::wrong_state);
}
