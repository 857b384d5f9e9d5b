// SPDX-License-Identifier: Apache-2.0
// The PMSP core against sections 7.4 and 7.5.2, driven with a fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "daemon/core/pmsp.hpp"

namespace {

using namespace std::chrono_literals;
using pm::Endpoint;
using pm::IpAddress;
using pm::Message;
using pm::MessageType;
using pmd::Outcome;
using pmd::Pmsp;
using pmd::Policy;
using pmd::Registry;
using pmd::Service;

IpAddress ip(const char* s) {
    return *IpAddress::parse(s);
}
Endpoint ep(const char* s) {
    return *Endpoint::parse(s);
}

Service service(const char* name, const char* conventional, std::vector<const char*> sdp,
                Policy policy = Policy::first, std::uint8_t pm_time = 120) {
    Service s;
    s.name = name;
    std::string conv = conventional;
    if (conv.rfind("*:", 0) == 0) {
        s.conventional_port = static_cast<std::uint16_t>(std::stoi(conv.substr(2)));
    } else {
        auto e = ep(conventional);
        s.conventional_address = e.address;
        s.conventional_port = e.port;
    }
    for (auto* a : sdp) {
        s.sdp.push_back(ep(a));
    }
    s.policy = policy;
    s.pm_time = pm_time;
    return s;
}

Message request(const char* ap, const char* cp, std::uint64_t handle = 0x1122334455667788ull) {
    auto a = ep(ap);
    auto c = ep(cp);
    Message m;
    m.type = MessageType::request;
    m.ipv = a.address.family();
    m.ap_addr = a.address;
    m.ap_port = a.port;
    m.cp_addr = c.address;
    m.cp_port = c.port;
    m.assoc_handle = handle;
    return m;
}

class PmspTest : public ::testing::Test {
  protected:
    void make(std::vector<Service> services, pmd::Limits limits = {}) {
        registry = std::make_shared<const Registry>(std::move(services));
        core = std::make_unique<Pmsp>(limits, registry, 42);
    }

    pmd::Result send(const Message& m, const char* source = "10.0.0.5:40000") {
        auto wire = pm::encode(m);
        return send_bytes({wire.begin(), wire.end()}, source);
    }

    pmd::Result send_bytes(std::vector<std::uint8_t> bytes, const char* source = "10.0.0.5:40000") {
        return core->on_datagram(bytes, ep(source), ip("192.0.2.10"), now);
    }

    static Message reply_of(const pmd::Result& r) {
        EXPECT_TRUE(r.reply.has_value());
        auto d = pm::decode(*r.reply);
        EXPECT_TRUE(std::holds_alternative<Message>(d));
        return std::get<Message>(d);
    }

    Message ack_for(const Message& accept) { return pm::make_ack(accept); }

    pmd::TimePoint now{std::chrono::seconds(1000)};
    std::shared_ptr<const Registry> registry;
    std::unique_ptr<Pmsp> core;
};

TEST_F(PmspTest, AcceptCarriesFieldsOfSection74) {
    make({service("web", "192.0.2.10:80", {"198.51.100.10:8080"}, Policy::first, 120)});
    Message req = request("192.0.2.10:80", "10.0.0.5:51000");
    auto r = send(req);
    ASSERT_EQ(r.outcome, Outcome::accepted);
    Message a = reply_of(r);
    EXPECT_EQ(a.type, MessageType::accept);
    EXPECT_EQ(a.ipv, req.ipv);
    EXPECT_EQ(a.pm_time, 120);
    EXPECT_EQ(a.ap_port, 8080);                   // SDP listen port
    EXPECT_EQ(a.ap_addr, ip("198.51.100.10"));    // may differ from the request's
    EXPECT_EQ(a.cp_port, req.cp_port);            // reflected
    EXPECT_EQ(a.cp_addr, req.cp_addr);            // reflected
    EXPECT_EQ(a.assoc_handle, req.assoc_handle);  // reflected
    EXPECT_EQ(core->transactions(), 1u);
    EXPECT_EQ(core->next_deadline(), now + 5s);
}

TEST_F(PmspTest, AcceptOverIpv6) {
    make({service("web6", "[2001:db8::10]:80", {"[2001:db8::20]:8080", "192.0.2.1:8080"})});
    Message req = request("[2001:db8::10]:80", "[2001:db8::5]:51000");
    Message a = reply_of(send(req, "[2001:db8::5]:40000"));
    EXPECT_EQ(a.type, MessageType::accept);
    EXPECT_EQ(a.ipv, pm::Family::v6);
    EXPECT_EQ(a.ap_addr, ip("2001:db8::20"));  // the IPv4 SDP address is skipped
    EXPECT_EQ(a.cp_addr, ip("2001:db8::5"));
}

TEST_F(PmspTest, DenyForUnknownServiceReflectsRequest) {
    make({service("web", "192.0.2.10:80", {"198.51.100.10:8080"})});
    Message req = request("192.0.2.10:81", "10.0.0.5:51000");
    req.pm_time = 77;  // must be ignored on receipt
    auto r = send(req);
    ASSERT_EQ(r.outcome, Outcome::denied_no_service);
    Message d = reply_of(r);
    EXPECT_EQ(d.type, MessageType::deny);
    EXPECT_EQ(d.pm_time, 0);
    EXPECT_EQ(d.ipv, req.ipv);
    EXPECT_EQ(d.ap_port, req.ap_port);  // 7.4 echo (see docs/protocol-notes.md)
    EXPECT_EQ(d.ap_addr, req.ap_addr);
    EXPECT_EQ(d.cp_port, req.cp_port);
    EXPECT_EQ(d.cp_addr, req.cp_addr);
    EXPECT_EQ(d.assoc_handle, req.assoc_handle);
    EXPECT_EQ(core->transactions(), 0u);  // a deny keeps no state
}

TEST_F(PmspTest, DenyApPortZeroWhenConfigured) {
    pmd::Limits limits;
    limits.deny_ap_port = pm::DenyApPort::zero;
    make({}, limits);
    EXPECT_EQ(reply_of(send(request("192.0.2.10:81", "10.0.0.5:51000"))).ap_port, 0);
}

TEST_F(PmspTest, AllowListChecksSourceAndCpIpAddr) {
    Service s = service("web", "192.0.2.10:80", {"198.51.100.10:8080"});
    s.allow = {*pm::Prefix::parse("10.0.0.0/8")};
    make({s});
    EXPECT_EQ(send(request("192.0.2.10:80", "10.1.1.1:1000"), "10.1.1.1:5000").outcome,
              Outcome::accepted);
    auto r = send(request("192.0.2.10:80", "11.1.1.1:1000"), "10.1.1.1:5000");
    EXPECT_EQ(r.outcome, Outcome::denied_not_allowed);
    EXPECT_EQ(reply_of(r).type, MessageType::deny);
    EXPECT_EQ(send(request("192.0.2.10:80", "10.1.1.2:1000"), "11.1.1.1:5000").outcome,
              Outcome::denied_not_allowed);
    EXPECT_EQ(core->counters()[Outcome::denied_not_allowed], 2u);
}

TEST_F(PmspTest, DenyWhenNoAddressOfTheFamily) {
    make({service("web", "*:80", {"[2001:db8::20]:8080"})});
    auto r = send(request("192.0.2.10:80", "10.0.0.5:51000"));
    EXPECT_EQ(r.outcome, Outcome::denied_no_address);
    EXPECT_EQ(reply_of(r).type, MessageType::deny);
}

TEST_F(PmspTest, ExactServiceBeatsWildcardAndWildcardMatchesAnyAddress) {
    make({service("any", "*:80", {"198.51.100.1:8080"}),
          service("exact", "192.0.2.10:80", {"198.51.100.2:8080"})});
    EXPECT_EQ(reply_of(send(request("192.0.2.10:80", "10.0.0.5:1"))).ap_addr, ip("198.51.100.2"));
    EXPECT_EQ(reply_of(send(request("192.0.2.99:80", "10.0.0.5:2"))).ap_addr, ip("198.51.100.1"));
}

TEST_F(PmspTest, WildcardSdpAddressIsTheAddressAskedFor) {
    make({service("any", "*:80", {"0.0.0.0:8080"})});
    Message a = reply_of(send(request("192.0.2.77:80", "10.0.0.5:1")));
    EXPECT_EQ(a.ap_addr, ip("192.0.2.77"));
    EXPECT_EQ(a.ap_port, 8080);
    Message a6 = reply_of(send(request("[2001:db8::77]:80", "[2001:db8::5]:1")));
    EXPECT_EQ(a6.ap_addr, ip("2001:db8::77"));
}

TEST_F(PmspTest, RoundRobinRotatesOverNewTransactions) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2", "198.51.100.3:3"},
                  Policy::round_robin)});
    std::vector<std::uint16_t> ports;
    for (std::uint16_t cp = 1; cp <= 6; ++cp) {
        auto req = request("192.0.2.10:80", "10.0.0.5:1");
        req.cp_port = cp;
        ports.push_back(reply_of(send(req)).ap_port);
    }
    EXPECT_EQ(ports, (std::vector<std::uint16_t>{1, 2, 3, 1, 2, 3}));
}

TEST_F(PmspTest, HashPolicyIsStablePerClientAndSpreads) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2", "198.51.100.3:3"},
                  Policy::hash)});
    std::set<std::uint16_t> seen;
    for (int host = 1; host <= 40; ++host) {
        std::string cp = "10.0.0." + std::to_string(host) + ":1000";
        auto first = reply_of(send(request("192.0.2.10:80", cp.c_str(), 1))).ap_port;
        auto again = reply_of(send(request("192.0.2.10:80", cp.c_str(), 2))).ap_port;
        EXPECT_EQ(first, again) << cp;
        seen.insert(first);
    }
    EXPECT_EQ(seen.size(), 3u);
}

TEST_F(PmspTest, DuplicateRequestGetsSameAcceptAndResetsTimer) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2"},
                  Policy::round_robin)});
    Message req = request("192.0.2.10:80", "10.0.0.5:51000");
    auto first = send(req);
    now += 4s;
    auto dup = send(req);
    EXPECT_EQ(dup.outcome, Outcome::accepted_duplicate);
    EXPECT_EQ(*dup.reply, *first.reply);  // same address despite round-robin
    EXPECT_EQ(core->transactions(), 1u);
    now += 4s;  // 8 s after the first PMAccept, 4 s after the second
    EXPECT_EQ(core->on_timer(now), 0u);
    EXPECT_EQ(core->transactions(), 1u);
    now += 1s;
    EXPECT_EQ(core->on_timer(now), 1u);
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_EQ(core->counters().timeouts, 1u);
}

TEST_F(PmspTest, DuplicateAnsweredFromMostRecentServiceState) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2"})});
    Message req = request("192.0.2.10:80", "10.0.0.5:51000");
    EXPECT_EQ(reply_of(send(req)).ap_port, 1);
    // The address handed out is withdrawn: the duplicate gets the other one.
    core->set_registry(std::make_shared<const Registry>(
        std::vector<Service>{service("web", "192.0.2.10:80", {"198.51.100.2:2"})}));
    auto r = send(req);
    EXPECT_EQ(r.outcome, Outcome::accepted_duplicate);
    EXPECT_EQ(reply_of(r).ap_port, 2);
    // The service goes away: the duplicate is denied and the state released.
    core->set_registry(std::make_shared<const Registry>());
    r = send(req);
    EXPECT_EQ(r.outcome, Outcome::denied_no_service);
    EXPECT_EQ(reply_of(r).type, MessageType::deny);
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_EQ(core->counters().released_on_deny, 1u);
    // And comes back: the next duplicate is a new transaction.
    core->set_registry(registry);
    EXPECT_EQ(send(req).outcome, Outcome::accepted);
}

TEST_F(PmspTest, NewAssocHandleOnSameFourTupleSupersedesPriorState) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    Message old_req = request("192.0.2.10:80", "10.0.0.5:51000", 1);
    Message old_accept = reply_of(send(old_req));
    Message new_req = request("192.0.2.10:80", "10.0.0.5:51000", 2);
    auto r = send(new_req);
    EXPECT_EQ(r.outcome, Outcome::accepted);  // processed as new
    EXPECT_EQ(core->transactions(), 1u);
    EXPECT_EQ(core->counters().superseded, 1u);
    // The old transaction is gone: its PMAck relates to no state.
    EXPECT_EQ(send(ack_for(old_accept)).outcome, Outcome::ack_unknown);
    EXPECT_EQ(send(ack_for(reply_of(r))).outcome, Outcome::acked);
    EXPECT_EQ(core->transactions(), 0u);
}

TEST_F(PmspTest, AckReleasesStateAndLaterAcksAreDiscarded) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    Message accept = reply_of(send(request("192.0.2.10:80", "10.0.0.5:51000")));
    auto r = send(ack_for(accept));
    EXPECT_EQ(r.outcome, Outcome::acked);
    EXPECT_FALSE(r.reply);  // nothing is sent in answer to a PMAck
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_FALSE(core->next_deadline());
    auto again = send(ack_for(accept));
    EXPECT_EQ(again.outcome, Outcome::ack_unknown);
    EXPECT_FALSE(again.reply);
}

TEST_F(PmspTest, AckMustEchoTheMappedAddress) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    Message accept = reply_of(send(request("192.0.2.10:80", "10.0.0.5:51000")));
    Message wrong_port = ack_for(accept);
    wrong_port.ap_port = 80;
    EXPECT_EQ(send(wrong_port).outcome, Outcome::ack_unknown);
    Message wrong_cp = ack_for(accept);
    wrong_cp.cp_port += 1;
    EXPECT_EQ(send(wrong_cp).outcome, Outcome::ack_unknown);
    Message wrong_handle = ack_for(accept);
    wrong_handle.assoc_handle ^= 1;
    EXPECT_EQ(send(wrong_handle).outcome, Outcome::ack_unknown);
    EXPECT_EQ(core->transactions(), 1u);
    EXPECT_EQ(send(ack_for(accept)).outcome, Outcome::acked);
}

TEST_F(PmspTest, TimerExpiryReleasesEverything) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    Message accept = reply_of(send(request("192.0.2.10:80", "10.0.0.5:1")));
    now += 1s;
    send(request("192.0.2.10:80", "10.0.0.5:2"));
    EXPECT_EQ(core->next_deadline(), now + 4s);
    now += 4s;
    EXPECT_EQ(core->on_timer(now), 1u);
    EXPECT_EQ(core->next_deadline(), now + 1s);
    EXPECT_EQ(send(ack_for(accept)).outcome, Outcome::ack_unknown);
    now += 1s;
    EXPECT_EQ(core->on_timer(now), 1u);
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_FALSE(core->next_deadline());
    // A late duplicate after expiry is a new request (7.5.2).
    EXPECT_EQ(send(request("192.0.2.10:80", "10.0.0.5:1")).outcome, Outcome::accepted);
}

TEST_F(PmspTest, MaxTransactionsShedsOldestFirst) {
    pmd::Limits limits;
    limits.max_transactions = 3;
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})}, limits);
    std::vector<Message> accepts;
    for (std::uint16_t cp = 1; cp <= 5; ++cp) {
        auto req = request("192.0.2.10:80", "10.0.0.5:1");
        req.cp_port = cp;
        accepts.push_back(reply_of(send(req)));
        now += 1ms;
    }
    EXPECT_EQ(core->transactions(), 3u);
    EXPECT_EQ(core->counters().shed, 2u);
    EXPECT_EQ(send(ack_for(accepts[0])).outcome, Outcome::ack_unknown);
    EXPECT_EQ(send(ack_for(accepts[1])).outcome, Outcome::ack_unknown);
    EXPECT_EQ(send(ack_for(accepts[2])).outcome, Outcome::acked);
    limits.max_transactions = 1;
    core->set_limits(limits);
    EXPECT_EQ(core->transactions(), 1u);
    EXPECT_EQ(send(ack_for(accepts[4])).outcome, Outcome::acked);
}

TEST_F(PmspTest, MalformedAndMisdirectedDatagramsAreCountedDrops) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    auto good = pm::encode(request("192.0.2.10:80", "10.0.0.5:1"));
    std::vector<std::uint8_t> base(good.begin(), good.end());

    auto shortened = base;
    shortened.pop_back();
    auto longer = base;
    longer.push_back(0);
    auto version = base;
    version[0] |= 0x40;
    auto ipv = base;
    ipv[0] = (ipv[0] & 0xf0) | 0x5;
    auto accept = base;
    accept[0] = 0x14;
    auto deny = base;
    deny[0] = 0x34;
    Message zero_port = request("192.0.2.10:80", "10.0.0.5:1");
    zero_port.cp_port = 0;
    auto bad_req = pm::encode(zero_port);

    struct Case {
        std::vector<std::uint8_t> bytes;
        Outcome expected;
    };
    std::vector<Case> cases = {
        {{}, Outcome::drop_too_short},
        {shortened, Outcome::drop_too_short},
        {longer, Outcome::drop_too_long},
        {version, Outcome::drop_bad_version},
        {ipv, Outcome::drop_reserved_ipv},
        {accept, Outcome::drop_not_for_server},
        {deny, Outcome::drop_not_for_server},
        {{bad_req.begin(), bad_req.end()}, Outcome::drop_bad_request},
    };
    for (const auto& c : cases) {
        auto before = core->counters()[c.expected];
        auto r = send_bytes(c.bytes);
        EXPECT_EQ(r.outcome, c.expected) << pmd::to_string(c.expected);
        EXPECT_TRUE(pmd::is_drop(r.outcome));
        EXPECT_FALSE(r.reply) << pmd::to_string(c.expected);
        EXPECT_EQ(core->counters()[c.expected], before + 1) << pmd::to_string(c.expected);
    }
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_EQ(core->counters().datagrams, cases.size());
}

TEST_F(PmspTest, IwpmdSixtyFourByteRequestGetsFortyEightByteReply) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    auto wire = pm::encode(request("192.0.2.10:80", "10.0.0.5:1"));
    std::vector<std::uint8_t> bytes(wire.begin(), wire.end());
    bytes.resize(pm::kIwpmRequestSize, 0xab);
    auto r = send_bytes(bytes);
    EXPECT_EQ(r.outcome, Outcome::accepted);
    EXPECT_EQ(r.reply->size(), pm::kMessageSize);
    EXPECT_EQ(core->counters().iwpm_requests, 1u);

    pmd::Limits limits;
    limits.accept_iwpm_request = false;
    core->set_limits(limits);
    EXPECT_EQ(send_bytes(bytes).outcome, Outcome::drop_iwpm_disabled);
}

TEST_F(PmspTest, ListsLiveTransactions) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    send(request("192.0.2.10:80", "10.0.0.5:7"));
    std::vector<std::string> seen;
    core->for_each_transaction([&](const pmd::TransactionView& t) {
        seen.push_back(std::string(t.service) + " " + t.sdp.to_string() + " " +
                       std::to_string(t.request.cp_port));
        EXPECT_EQ(t.expires, now + 5s);
    });
    EXPECT_EQ(seen, (std::vector<std::string>{"web 198.51.100.1:1 7"}));
}

// Many live transactions acked, superseded and expired in random order: each
// is found exactly once, whatever the order of removals (the indexes use
// open addressing with backward-shift deletion).
TEST_F(PmspTest, IndexesSurviveHeavyChurn) {
    pmd::Limits limits;
    limits.max_transactions = 100000;
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})}, limits);
    std::mt19937_64 rng(11);
    std::vector<Message> live;
    for (std::uint16_t cp = 1; cp <= 20000; ++cp) {
        auto req = request("192.0.2.10:80", "10.0.0.5:1", rng());
        req.cp_port = cp;
        live.push_back(reply_of(send(req)));
    }
    EXPECT_EQ(core->transactions(), 20000u);
    std::shuffle(live.begin(), live.end(), rng);
    for (std::size_t i = 0; i < live.size(); ++i) {
        if (i % 3 == 0) {
            // Supersede: same 4-tuple, new AssocHandle, then ack the new one.
            auto req = request("192.0.2.10:80", "10.0.0.5:1", live[i].assoc_handle ^ 0xffff);
            req.cp_port = live[i].cp_port;
            auto r = send(req);
            ASSERT_EQ(r.outcome, Outcome::accepted);
            ASSERT_EQ(send(ack_for(live[i])).outcome, Outcome::ack_unknown);
            ASSERT_EQ(send(ack_for(reply_of(r))).outcome, Outcome::acked);
        } else {
            ASSERT_EQ(send(ack_for(live[i])).outcome, Outcome::acked) << i;
            ASSERT_EQ(send(ack_for(live[i])).outcome, Outcome::ack_unknown) << i;
        }
        ASSERT_EQ(core->transactions(), live.size() - i - 1);
    }
    EXPECT_FALSE(core->next_deadline());
}

TEST_F(PmspTest, PerSourceTokenBucketDropsTheExcess) {
    pmd::Limits limits;
    limits.per_source.rate = 10;  // per second
    limits.per_source.burst = 5;
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})}, limits);
    int accepted = 0;
    int limited = 0;
    for (std::uint16_t cp = 1; cp <= 20; ++cp) {
        auto req = request("192.0.2.10:80", "10.0.0.5:1");
        req.cp_port = cp;
        auto r = send(req, "10.0.0.5:4000");
        (r.outcome == Outcome::accepted ? accepted : limited)++;
        if (r.outcome == Outcome::drop_rate_limited) {
            EXPECT_FALSE(r.reply);
        }
    }
    EXPECT_EQ(accepted, 5);  // the burst, no time has passed
    EXPECT_EQ(limited, 15);
    // Another source has its own bucket.
    EXPECT_EQ(send(request("192.0.2.10:80", "10.0.0.6:1"), "10.0.0.6:4000").outcome,
              Outcome::accepted);
    // Tokens come back with time: 10 per second.
    now += 1s;
    auto req = request("192.0.2.10:80", "10.0.0.5:1");
    req.cp_port = 100;
    EXPECT_EQ(send(req, "10.0.0.5:4000").outcome, Outcome::accepted);
    EXPECT_EQ(core->counters()[Outcome::drop_rate_limited], 15u);
    EXPECT_EQ(core->counters().requests, 22u);  // limited ones are requests too
}

TEST_F(PmspTest, SourceLeavingAcceptsUnackedIsQuenched) {
    pmd::Limits limits;
    limits.quench.max_unacked = 3;
    limits.quench.window = 1s;
    limits.quench.period = 10s;
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})}, limits);
    auto from = [](std::uint16_t cp) {
        auto req = request("192.0.2.10:80", "10.0.0.9:1");
        req.cp_port = cp;
        return req;
    };
    // A client that acks every PMAccept is never quenched.
    for (std::uint16_t cp = 1; cp <= 10; ++cp) {
        auto r = send(from(cp), "10.0.0.8:4000");
        ASSERT_EQ(r.outcome, Outcome::accepted);
        ASSERT_EQ(send(ack_for(reply_of(r)), "10.0.0.8:4000").outcome, Outcome::acked);
    }
    // One that never acks is cut off after max_unacked accepts.
    for (std::uint16_t cp = 1; cp <= 3; ++cp) {
        EXPECT_EQ(send(from(cp), "10.0.0.9:4000").outcome, Outcome::accepted);
    }
    auto r = send(from(4), "10.0.0.9:4000");
    EXPECT_EQ(r.outcome, Outcome::drop_quenched);
    EXPECT_FALSE(r.reply);
    EXPECT_EQ(core->counters().quench_events, 1u);
    EXPECT_EQ(send(from(11), "10.0.0.8:4000").outcome, Outcome::accepted);
    // The quench ends after its period.
    now += 11s;
    EXPECT_EQ(send(from(5), "10.0.0.9:4000").outcome, Outcome::accepted);
}

TEST_F(PmspTest, PerServiceCountsSurviveANewSnapshot) {
    Service web = service("web", "192.0.2.10:80", {"198.51.100.1:1"});
    Service closed = service("closed", "192.0.2.10:81", {"198.51.100.1:2"});
    closed.allow = {*pm::Prefix::parse("203.0.113.0/24")};
    make({web, closed});
    Message req = request("192.0.2.10:80", "10.0.0.5:1");
    send(req);
    send(req);                                     // duplicate
    send(request("192.0.2.10:81", "10.0.0.5:2"));  // not allowed
    send(request("192.0.2.10:82", "10.0.0.5:3"));  // no service: counted nowhere
    const auto& reg = core->registry();
    EXPECT_EQ(reg.counts(reg.services()[0]).accepted, 1u);
    EXPECT_EQ(reg.counts(reg.services()[0]).accepted_duplicate, 1u);
    EXPECT_EQ(reg.counts(reg.services()[1]).denied, 1u);
    // A registration or reload builds a new snapshot: counts carry over by name.
    auto next = std::make_shared<const Registry>(std::vector<Service>{closed, web}, &reg);
    core->set_registry(next);
    EXPECT_EQ(next->counts(next->services()[1]).accepted, 1u);
    EXPECT_EQ(next->counts(next->services()[0]).denied, 1u);
}

// Hostile input never crashes, never answers with more bytes than it got, and
// never grows the table past its bound.
TEST_F(PmspTest, RandomDatagramsNeverAmplifyOrGrowPastBounds) {
    pmd::Limits limits;
    limits.max_transactions = 64;
    make({service("any", "*:80", {"0.0.0.0:8080"}),
          service("web", "192.0.2.10:80", {"198.51.100.1:1"})},
         limits);
    std::mt19937_64 rng(7);
    std::map<Outcome, int> seen;
    for (int i = 0; i < 200000; ++i) {
        std::size_t len = rng() % 4 == 0 ? rng() % 80 : (rng() % 2 ? 48 : 64);
        std::vector<std::uint8_t> bytes(len);
        for (auto& b : bytes)
            b = static_cast<std::uint8_t>(rng());
        if (len >= 48 && rng() % 2) {
            bytes[0] = static_cast<std::uint8_t>((rng() % 4) << 4 | (rng() % 2 ? 4 : 6));
            bytes[4] = 0;
            bytes[5] = 80;
        }
        auto r = send_bytes(bytes);
        ++seen[r.outcome];
        if (r.reply) {
            ASSERT_LE(r.reply->size(), bytes.size());
        }
        ASSERT_LE(core->transactions(), limits.max_transactions);
        now += 1ms;
        core->on_timer(now);
    }
    EXPECT_GT(seen[Outcome::accepted], 0);
    EXPECT_GT(seen[Outcome::drop_too_short], 0);
    EXPECT_GT(seen[Outcome::ack_unknown], 0);
    EXPECT_GT(core->counters().shed + core->counters().timeouts, 0u);
}

}  // namespace

// --- Health of SDP addresses (issue #15): policies skip down addresses -----

class PmspHealthTest : public PmspTest {
  protected:
    void set(std::size_t address, pmd::HealthState state) {
        registry->set_health(registry->services()[0], address, state);
    }
};

TEST_F(PmspHealthTest, FirstSkipsDownAddressesAndUnknownCountsAsAvailable) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2"})});
    // Nothing checked yet: unknown is available.
    EXPECT_EQ(reply_of(send(request("192.0.2.10:80", "10.0.0.5:1000", 1))).ap_port, 1);
    set(0, pmd::HealthState::down);
    set(1, pmd::HealthState::up);
    EXPECT_EQ(reply_of(send(request("192.0.2.10:80", "10.0.0.5:1001", 2))).ap_port, 2);
    set(0, pmd::HealthState::up);
    EXPECT_EQ(reply_of(send(request("192.0.2.10:80", "10.0.0.5:1002", 3))).ap_port, 1);
}

TEST_F(PmspHealthTest, NoAvailableAddressIsDeniedUnavailable) {
    make(
        {service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2", "[2001:db8::1]:3"})});
    set(0, pmd::HealthState::down);
    set(1, pmd::HealthState::down);
    // The IPv6 address is up but of the other family: it does not count.
    set(2, pmd::HealthState::up);
    auto r = send(request("192.0.2.10:80", "10.0.0.5:1000"));
    EXPECT_EQ(r.outcome, Outcome::denied_unavailable);
    EXPECT_EQ(reply_of(r).type, MessageType::deny);
    EXPECT_EQ(core->counters()[Outcome::denied_unavailable], 1u);
    EXPECT_EQ(core->counters()[Outcome::denied_no_address], 0u);
    EXPECT_EQ(registry->counts(registry->services()[0]).denied, 1u);
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_EQ(pmd::to_string(Outcome::denied_unavailable), "denied_unavailable");
}

TEST_F(PmspHealthTest, WildcardSdpAddressFollowsItsHealth) {
    make({service("web", "*:80", {"0.0.0.0:8080"})});  // "*:8080"
    EXPECT_EQ(send(request("192.0.2.10:80", "10.0.0.5:1000", 1)).outcome, Outcome::accepted);
    set(0, pmd::HealthState::down);
    EXPECT_EQ(send(request("192.0.2.10:80", "10.0.0.5:1001", 2)).outcome,
              Outcome::denied_unavailable);
}

TEST_F(PmspHealthTest, RoundRobinRotatesOverAvailableAddressesOnly) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2", "198.51.100.3:3"},
                  Policy::round_robin)});
    set(1, pmd::HealthState::down);
    std::vector<std::uint16_t> ports;
    for (std::uint16_t cp = 1; cp <= 6; ++cp) {
        auto req = request("192.0.2.10:80", "10.0.0.5:1");
        req.cp_port = cp;
        ports.push_back(reply_of(send(req)).ap_port);
    }
    EXPECT_EQ(std::count(ports.begin(), ports.end(), 2), 0);
    EXPECT_EQ(std::count(ports.begin(), ports.end(), 1), 3);
    EXPECT_EQ(std::count(ports.begin(), ports.end(), 3), 3);
}

TEST_F(PmspHealthTest, HashKeepsLiveAddressesAndMovesClientsOfADeadOneStably) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2", "198.51.100.3:3"},
                  Policy::hash)});
    std::map<std::string, std::uint16_t> before;
    std::uint64_t handle = 1;
    for (int host = 1; host <= 60; ++host) {
        std::string cp = "10.0.0." + std::to_string(host) + ":1000";
        before[cp] = reply_of(send(request("192.0.2.10:80", cp.c_str(), handle++))).ap_port;
    }
    set(1, pmd::HealthState::down);  // port 2
    std::set<std::uint16_t> moved_to;
    for (const auto& [cp, port] : before) {
        auto now1 = reply_of(send(request("192.0.2.10:80", cp.c_str(), handle++))).ap_port;
        auto now2 = reply_of(send(request("192.0.2.10:80", cp.c_str(), handle++))).ap_port;
        EXPECT_EQ(now1, now2) << cp;  // deterministic
        EXPECT_NE(now1, 2) << cp;
        if (port != 2) {
            EXPECT_EQ(now1, port) << cp;  // a client whose address is up keeps it
        } else {
            moved_to.insert(now1);
        }
    }
    // The clients of the dead address spread over the rest.
    EXPECT_EQ(moved_to, (std::set<std::uint16_t>{1, 3}));
}

TEST_F(PmspHealthTest, DuplicateAfterItsAddressWentDownGetsALiveOne) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2"})});
    Message req = request("192.0.2.10:80", "10.0.0.5:51000");
    EXPECT_EQ(reply_of(send(req)).ap_port, 1);
    set(0, pmd::HealthState::down);
    auto r = send(req);
    EXPECT_EQ(r.outcome, Outcome::accepted_duplicate);
    Message a = reply_of(r);
    EXPECT_EQ(a.ap_port, 2);
    EXPECT_EQ(core->transactions(), 1u);
    // The PMAck echoes the address now handed out.
    EXPECT_EQ(send(ack_for(a)).outcome, Outcome::acked);
}

TEST_F(PmspHealthTest, DuplicateAcceptTurnsIntoDenyAndBackAsTheStateChanges) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1"})});
    Message req = request("192.0.2.10:80", "10.0.0.5:51000");
    EXPECT_EQ(send(req).outcome, Outcome::accepted);
    // 7.4: a duplicate gets the most recent state of the service.
    set(0, pmd::HealthState::down);
    auto r = send(req);
    EXPECT_EQ(r.outcome, Outcome::denied_unavailable);
    EXPECT_EQ(reply_of(r).type, MessageType::deny);
    EXPECT_EQ(core->counters().released_on_deny, 1u);
    EXPECT_EQ(core->transactions(), 0u);
    // Still down: the retransmission is denied again (no state is kept).
    EXPECT_EQ(send(req).outcome, Outcome::denied_unavailable);
    // Up again: the same PMReq is now accepted, as a new transaction.
    set(0, pmd::HealthState::up);
    r = send(req);
    EXPECT_EQ(r.outcome, Outcome::accepted);
    EXPECT_EQ(reply_of(r).type, MessageType::accept);
    EXPECT_EQ(core->transactions(), 1u);
}

TEST_F(PmspHealthTest, HealthSurvivesANewSnapshotOfTheSameAddresses) {
    make({service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2"})});
    set(0, pmd::HealthState::down);
    auto next = std::make_shared<const Registry>(
        std::vector<Service>{service("web", "192.0.2.10:80", {"198.51.100.1:1", "198.51.100.2:2"})},
        registry.get());
    core->set_registry(next);
    EXPECT_EQ(reply_of(send(request("192.0.2.10:80", "10.0.0.5:1000"))).ap_port, 2);
    // Written through either snapshot, seen through both.
    registry->set_health(registry->services()[0], 0, pmd::HealthState::up);
    EXPECT_EQ(next->health(next->services()[0], 0), pmd::HealthState::up);
}

// --- on-demand services (section 7.4: dynamically created SDP listen ports) ---

Service on_demand_service(bool single_use = false) {
    Service s = service("od", "192.0.2.10:90", {"198.51.100.10:0"});
    s.on_demand = pmd::OnDemand{{7001, 7002}, single_use};
    return s;
}

TEST_F(PmspTest, OnDemandWaitsForItsListenerThenAccepts) {
    make({on_demand_service()});
    Message req = request("192.0.2.10:90", "10.0.0.5:51000");
    auto r = send(req);
    ASSERT_EQ(r.outcome, Outcome::pending);
    EXPECT_FALSE(r.reply);  // no PMAccept before the listener exists
    ASSERT_TRUE(r.pool);
    EXPECT_EQ(r.pool->kind, pmd::PoolNote::Kind::open);
    EXPECT_EQ(r.pool->service, "od");
    EXPECT_EQ(core->pending(), 1u);
    int listed = 0;
    core->for_each_transaction([&](const pmd::TransactionView& t) {
        ++listed;
        EXPECT_TRUE(t.pending);
        EXPECT_EQ(t.sdp.port, 0);
        EXPECT_EQ(t.service, "od");
    });
    EXPECT_EQ(listed, 1);

    // Retransmissions while it waits are absorbed.
    auto dup = send(req);
    EXPECT_EQ(dup.outcome, Outcome::pending_duplicate);
    EXPECT_FALSE(dup.reply);
    EXPECT_FALSE(dup.pool);
    // Nothing to acknowledge yet.
    Message early = pm::make_ack(pm::make_accept(req, ep("198.51.100.10:7001"), 120));
    EXPECT_EQ(send(early).outcome, Outcome::ack_unknown);

    now += 10ms;
    auto done = core->on_port(r.pool->request, 7001, Outcome::denied_open_failed, now);
    EXPECT_FALSE(done.orphan);
    EXPECT_EQ(done.outcome, Outcome::accepted);
    ASSERT_TRUE(done.reply);
    Message a = std::get<Message>(pm::decode(*done.reply));
    EXPECT_EQ(a.type, MessageType::accept);
    EXPECT_EQ(a.ap_addr, ip("198.51.100.10"));
    EXPECT_EQ(a.ap_port, 7001);
    EXPECT_EQ(a.assoc_handle, req.assoc_handle);
    EXPECT_EQ(core->pending(), 0u);
    EXPECT_EQ(core->next_deadline(), now + 5s);  // the PMAck timer starts now

    // A duplicate now gets the same port and restarts the pool's timer.
    auto again = send(req);
    EXPECT_EQ(again.outcome, Outcome::accepted_duplicate);
    EXPECT_EQ(reply_of(again).ap_port, 7001);
    ASSERT_TRUE(again.pool);
    EXPECT_EQ(again.pool->kind, pmd::PoolNote::Kind::touch);
    EXPECT_EQ(again.pool->port, 7001);

    // The PMAck goes to the pool too.
    auto ack = send(pm::make_ack(a));
    EXPECT_EQ(ack.outcome, Outcome::acked);
    ASSERT_TRUE(ack.pool);
    EXPECT_EQ(ack.pool->kind, pmd::PoolNote::Kind::acked);
    EXPECT_EQ(ack.pool->port, 7001);
    EXPECT_EQ(core->counters()[Outcome::pending], 1u);
    EXPECT_EQ(core->counters()[Outcome::pending_duplicate], 1u);
    EXPECT_EQ(core->counters()[Outcome::accepted], 1u);
}

TEST_F(PmspTest, OnDemandFailureIsAPMDeny) {
    make({on_demand_service()});
    Message req = request("192.0.2.10:90", "10.0.0.5:51000");
    auto r = send(req);
    ASSERT_TRUE(r.pool);
    auto done = core->on_port(r.pool->request, std::nullopt, Outcome::denied_pool_exhausted, now);
    EXPECT_FALSE(done.orphan);
    EXPECT_EQ(done.outcome, Outcome::denied_pool_exhausted);
    ASSERT_TRUE(done.reply);
    EXPECT_EQ(std::get<Message>(pm::decode(*done.reply)).type, MessageType::deny);
    EXPECT_EQ(core->transactions(), 0u);
    EXPECT_EQ(core->counters()[Outcome::denied_pool_exhausted], 1u);
    // A second answer for the same request finds nothing.
    EXPECT_TRUE(core->on_port(r.pool->request, 7002, Outcome::denied_open_failed, now).orphan);
}

TEST_F(PmspTest, OnDemandAnswerAfterTheTransactionWentIsAnOrphan) {
    make({on_demand_service()});
    Message req = request("192.0.2.10:90", "10.0.0.5:51000");
    auto r = send(req);
    ASSERT_TRUE(r.pool);
    now += 6s;
    EXPECT_EQ(core->on_timer(now), 1u);  // the wait is bounded by the PMAck timer
    EXPECT_EQ(core->pending(), 0u);
    auto done = core->on_port(r.pool->request, 7001, Outcome::denied_open_failed, now);
    EXPECT_TRUE(done.orphan);  // the shell releases port 7001
    EXPECT_FALSE(done.reply);
}

TEST_F(PmspTest, OnDemandWaitingTransactionsAreBounded) {
    pmd::Limits limits;
    limits.max_pending_opens = 3;
    make({on_demand_service()}, limits);
    int pending = 0;
    int denied = 0;
    for (int i = 0; i < 10; ++i) {
        std::string cp = "10.0.0.5:" + std::to_string(50000 + i);
        auto r = send(request("192.0.2.10:90", cp.c_str()));
        pending += r.outcome == Outcome::pending;
        if (r.outcome == Outcome::denied_pool_exhausted) {
            ++denied;
            EXPECT_EQ(reply_of(r).type, MessageType::deny);
        }
    }
    EXPECT_EQ(pending, 3);
    EXPECT_EQ(denied, 7);
    EXPECT_EQ(core->pending(), 3u);
}
