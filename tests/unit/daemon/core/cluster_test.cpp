// SPDX-License-Identifier: Apache-2.0
// The etcd backend's sans-I/O replica (core/cluster.hpp) with a fake clock:
// lease, snapshot and watch, writing its own registrations, merging every
// member's, conflicts, staleness, retries and resumption.
#include "daemon/core/cluster.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace pmd::cluster {
namespace {

using namespace std::chrono_literals;
using Kind = Request::Kind;

const TimePoint kT0 = TimePoint{} + 1000h;

Registration reg(const std::string& name, std::uint16_t port, const std::string& sdp,
                 Policy policy = Policy::round_robin) {
    Registration r;
    r.service.name = name;
    r.service.conventional_address = pm::IpAddress::parse("10.0.0.100");
    r.service.conventional_port = port;
    r.service.sdp.push_back(*pm::Endpoint::parse(sdp));
    r.service.policy = policy;
    r.service.dynamic = true;
    return r;
}

Settings settings(const std::string& member = "a") {
    Settings s;
    s.prefix = "/sdp-pm/";
    s.member = member;
    s.lease_ttl = 9s;
    s.max_staleness = 5s;
    s.retry_interval = 500ms;
    return s;
}

KeyValue kv(const Registration& r, const std::string& member, std::int64_t create,
            std::int64_t mod = 0) {
    return KeyValue{key_of("/sdp-pm/", r.service.name, member), r, create, mod ? mod : create};
}

std::vector<Request> of(const Actions& a, Kind k) {
    std::vector<Request> out;
    std::copy_if(a.requests.begin(), a.requests.end(), std::back_inserter(out),
                 [k](const Request& r) { return r.kind == k; });
    return out;
}

// A replica that holds lease 77 and has taken a snapshot at revision 10.
struct Running {
    Replica replica{settings()};
    explicit Running(std::vector<KeyValue> snapshot = {}, std::int64_t revision = 10) {
        Actions a;
        replica.start(kT0, a);
        EXPECT_EQ(of(a, Kind::grant).size(), 1u);
        EXPECT_EQ(of(a, Kind::snapshot).size(), 1u);
        Actions b;
        replica.granted(true, 77, 9s, kT0, b);
        Actions c;
        replica.snapshot_done(true, std::move(snapshot), revision, kT0, c);
        const auto watch = of(c, Kind::watch);
        EXPECT_EQ(watch.size(), 1u);
        if (!watch.empty()) {
            EXPECT_EQ(watch[0].revision, revision + 1);
        }
        last = c;
    }
    Actions last;
};

std::vector<std::string> sdp_of(const std::vector<Service>& services, const std::string& name) {
    std::vector<std::string> out;
    for (const Service& s : services) {
        if (s.name == name) {
            for (const auto& ep : s.sdp) {
                out.push_back(ep.to_string());
            }
        }
    }
    return out;
}

TEST(ClusterKeys, RoundTripAndRejects) {
    EXPECT_EQ(key_of("/p/", "web", "host-1"), "/p/registrations/web/host-1");
    auto parts = parse_key("/p/", "/p/registrations/web/host-1");
    ASSERT_TRUE(parts);
    EXPECT_EQ(parts->name, "web");
    EXPECT_EQ(parts->member, "host-1");
    EXPECT_FALSE(parse_key("/p/", "/q/registrations/web/host-1"));
    EXPECT_FALSE(parse_key("/p/", "/p/registrations/web"));
    EXPECT_FALSE(parse_key("/p/", "/p/registrations//host"));
    EXPECT_FALSE(parse_key("/p/", "/p/registrations/web/bad/member"));
    EXPECT_FALSE(parse_key("/p/", "/p/registrations/web/"));
}

TEST(ClusterSettings, Validate) {
    EXPECT_EQ(validate(settings()), "");
    Settings s = settings();
    s.prefix = "sdp";
    EXPECT_NE(validate(s), "");
    s = settings("has space");
    EXPECT_NE(validate(s), "");
    s = settings(std::string(65, 'x'));
    EXPECT_NE(validate(s), "");
    s = settings();
    s.lease_ttl = 1s;
    EXPECT_NE(validate(s), "");
}

TEST(ClusterSettings, EndpointUrls) {
    auto u = parse_endpoint_url("http://127.0.0.1:2379");
    ASSERT_TRUE(u);
    EXPECT_FALSE(u->tls);
    EXPECT_EQ(u->host, "127.0.0.1");
    EXPECT_EQ(u->port, 2379);
    u = parse_endpoint_url("https://[::1]:2379/");
    ASSERT_TRUE(u);
    EXPECT_TRUE(u->tls);
    EXPECT_EQ(u->host, "::1");
    u = parse_endpoint_url("https://etcd-1.example:2379");
    ASSERT_TRUE(u);
    EXPECT_EQ(u->host, "etcd-1.example");
    for (const char* bad :
         {"127.0.0.1:2379", "ftp://h:1", "http://h", "http://h:0", "http://h:65536",
          "http://[::1:2379", "http://[zz]:1", "http://:1", "http://h:12x", "http://a b:1"}) {
        EXPECT_FALSE(parse_endpoint_url(bad)) << bad;
    }
}

TEST(Cluster, NotFreshBeforeTheFirstSnapshot) {
    Replica r(settings());
    Actions a;
    r.start(kT0, a);
    EXPECT_FALSE(r.fresh(kT0));
    r.set_own(std::vector{reg("web", 80, "10.0.0.1:5000")}, kT0, a);
    const auto services = r.services({}, kT0);
    ASSERT_EQ(services.size(), 1u) << "its own registrations are answered from the start";
    EXPECT_EQ(services[0].name, "web");
    EXPECT_TRUE(of(a, Kind::put).empty()) << "no put before the lease and the snapshot";
}

TEST(Cluster, OwnRegistrationsArePutUnderTheLeaseAndLeftWhenRemoved) {
    Running run;
    Actions a;
    auto own = reg("web", 80, "10.0.0.1:5000");
    own.process = OwnerProcess{4242, 1, "boot"};
    own.lease = 30s;
    run.replica.set_own(std::vector{own}, kT0, a);
    EXPECT_TRUE(a.view_changed);
    auto puts = of(a, Kind::put);
    ASSERT_EQ(puts.size(), 1u);
    EXPECT_EQ(puts[0].key, "/sdp-pm/registrations/web/a");
    EXPECT_EQ(puts[0].lease, 77);
    EXPECT_FALSE(puts[0].registration.process) << "a pid means nothing on another host";
    EXPECT_FALSE(puts[0].registration.lease);
    // Answered before etcd echoes it: this replica serves its own at once.
    EXPECT_EQ(sdp_of(run.replica.services({}, kT0), "web"),
              std::vector<std::string>{"10.0.0.1:5000"});
    // The same set again: nothing to do while the put is in flight.
    Actions b;
    run.replica.set_own(std::vector{own}, kT0, b);
    EXPECT_TRUE(b.requests.empty());
    Actions c;
    run.replica.put_done(puts[0].key, true, kT0, c);
    EXPECT_TRUE(c.requests.empty());
    EXPECT_EQ(run.replica.status({}, kT0).own_written, 1u);
    // Removed here: deleted from etcd.
    Actions d;
    run.replica.set_own({}, kT0, d);
    auto dels = of(d, Kind::del);
    ASSERT_EQ(dels.size(), 1u);
    EXPECT_EQ(dels[0].key, puts[0].key);
    Actions e;
    run.replica.del_done(dels[0].key, true, kT0, e);
    EXPECT_TRUE(e.requests.empty());
}

TEST(Cluster, AChangeDuringAPutIsPutAfterIt) {
    Running run;
    Actions a;
    run.replica.set_own(std::vector{reg("web", 80, "10.0.0.1:5000")}, kT0, a);
    const auto key = of(a, Kind::put).at(0).key;
    Actions b;
    run.replica.set_own(std::vector{reg("web", 80, "10.0.0.1:6000")}, kT0, b);
    EXPECT_TRUE(of(b, Kind::put).empty()) << "one request per key at a time";
    Actions c;
    run.replica.put_done(key, true, kT0, c);
    auto again = of(c, Kind::put);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].registration.service.sdp.at(0).to_string(), "10.0.0.1:6000");
}

TEST(Cluster, APreviousRunsKeysAreDeleted) {
    auto old = reg("gone", 81, "10.0.0.1:5001");
    auto kept = reg("web", 80, "10.0.0.1:5000");
    Replica r(settings());
    Actions a;
    r.start(kT0, a);
    r.set_own(std::vector{kept}, kT0, a);
    Actions b;
    r.granted(true, 5, 9s, kT0, b);
    Actions c;
    r.snapshot_done(true, {kv(old, "a", 3), kv(kept, "a", 4)}, 9, kT0, c);
    auto dels = of(c, Kind::del);
    ASSERT_EQ(dels.size(), 1u);
    EXPECT_EQ(dels[0].key, "/sdp-pm/registrations/gone/a");
    // Written again under this run's lease.
    auto puts = of(c, Kind::put);
    ASSERT_EQ(puts.size(), 1u);
    EXPECT_EQ(puts[0].lease, 5);
    EXPECT_TRUE(sdp_of(r.services({}, kT0), "gone").empty());
}

TEST(Cluster, MembersMergeByCreateRevision) {
    auto b1 = reg("web", 80, "10.0.0.2:5000", Policy::hash);
    auto c1 = reg("web", 80, "10.0.0.3:5000", Policy::first);
    auto c2 = reg("web", 80, "10.0.0.2:5000");  // the same address twice: once
    Running run({kv(c1, "c", 8), kv(b1, "b", 4)});
    Actions a;
    run.replica.events({WatchEvent{false, kv(c2, "d", 11)}}, 11, kT0, a);
    EXPECT_TRUE(a.view_changed);
    run.replica.set_own(std::vector{reg("web", 80, "10.0.0.1:5000")}, kT0, a);
    const auto services = run.replica.services({}, kT0);
    ASSERT_EQ(services.size(), 1u);
    EXPECT_EQ(services[0].policy, Policy::hash) << "the first registration's policy";
    EXPECT_TRUE(services[0].dynamic);
    EXPECT_EQ(sdp_of(services, "web"),
              (std::vector<std::string>{"10.0.0.2:5000", "10.0.0.3:5000", "10.0.0.1:5000"}))
        << "in create-revision order; this replica's own, not yet in etcd, last";
    // Every replica merges the same way: another member with the same view.
    Replica other(settings("z"));
    Actions o;
    other.start(kT0, o);
    other.granted(true, 1, 9s, kT0, o);
    other.snapshot_done(true, {kv(c1, "c", 8), kv(b1, "b", 4), kv(c2, "d", 11)}, 11, kT0, o);
    EXPECT_EQ(sdp_of(other.services({}, kT0), "web"),
              (std::vector<std::string>{"10.0.0.2:5000", "10.0.0.3:5000"}));
}

TEST(Cluster, ConflictsAreLeftOutTheSameWayEverywhere) {
    auto first = reg("web", 80, "10.0.0.2:5000");
    auto other_port = reg("web", 81, "10.0.0.3:5000");  // same name, other address
    auto other_name = reg("www", 80, "10.0.0.4:5000");  // same address, other name
    auto static_clash = reg("dns", 53, "10.0.0.5:5000");
    Service st;
    st.name = "dns";
    st.conventional_address = pm::IpAddress::parse("10.0.0.100");
    st.conventional_port = 5353;
    st.sdp.push_back(*pm::Endpoint::parse("10.0.0.9:1"));
    Running run({kv(first, "b", 4), kv(other_port, "c", 5), kv(other_name, "d", 6),
                 kv(static_clash, "e", 7)});
    const std::vector<Service> statics{st};
    const auto services = run.replica.services(statics, kT0);
    ASSERT_EQ(services.size(), 1u);
    EXPECT_EQ(services[0].name, "web");
    EXPECT_EQ(services[0].conventional_port, 80);
    EXPECT_EQ(run.replica.status(statics, kT0).conflicts, 3u);
    // This replica refuses to register what would clash.
    EXPECT_TRUE(run.replica.conflict(reg("web", 82, "10.0.0.1:1")));
    EXPECT_TRUE(run.replica.conflict(reg("new", 80, "10.0.0.1:1")));
    EXPECT_FALSE(run.replica.conflict(reg("web", 80, "10.0.0.1:1")))
        << "the same name and address from another host merges";
    EXPECT_FALSE(run.replica.conflict(reg("free", 90, "10.0.0.1:1")));
}

TEST(Cluster, DeletesAndUndecodableValues) {
    auto b1 = reg("web", 80, "10.0.0.2:5000");
    Running run({kv(b1, "b", 4)});
    Actions a;
    KeyValue junk{"/sdp-pm/registrations/bad/b", std::nullopt, 12, 12};
    KeyValue wrong_name = kv(b1, "c", 13);
    wrong_name.key = "/sdp-pm/registrations/other/c";
    run.replica.events({WatchEvent{false, junk}, WatchEvent{false, wrong_name}}, 13, kT0, a);
    EXPECT_EQ(run.replica.counters().bad_values, 2u);
    EXPECT_EQ(run.replica.services({}, kT0).size(), 1u);
    Actions b;
    run.replica.events({WatchEvent{true, KeyValue{kv(b1, "b", 4).key, std::nullopt, 0, 14}}}, 14,
                       kT0, b);
    EXPECT_TRUE(b.view_changed);
    EXPECT_TRUE(run.replica.services({}, kT0).empty());
    EXPECT_EQ(run.replica.status({}, kT0).revision, 14);
}

TEST(Cluster, StaleAfterMaxStalenessWithoutAViewThenFreshAgain) {
    Running run({kv(reg("web", 80, "10.0.0.2:5000"), "b", 4)});
    Actions own;
    run.replica.set_own(std::vector{reg("mine", 81, "10.0.0.1:5000")}, kT0, own);
    EXPECT_EQ(run.replica.services({}, kT0).size(), 2u);
    // Keep-alives succeed, but the watch never comes back: keep-alives keep
    // the lease, not the view.
    TimePoint t = kT0;
    bool reported = false;
    for (int i = 0; i < 100 && t < kT0 + 20s; ++i) {
        auto next = run.replica.next_wakeup();
        ASSERT_TRUE(next);
        t = std::max(t, *next);
        Actions a;
        run.replica.on_timer(t, a);
        for (const Request& r : a.requests) {
            Actions b;
            if (r.kind == Kind::keepalive) {
                run.replica.kept_alive(true, 9s, t, b);
            } else if (r.kind == Kind::watch) {
                run.replica.watch_ended(false, t, b);
            } else if (r.kind == Kind::snapshot) {
                run.replica.snapshot_done(false, {}, 0, t, b);
            } else if (r.kind == Kind::put) {
                run.replica.put_done(r.key, true, t, b);
            }
        }
        if (a.view_changed && !run.replica.fresh(t)) {
            reported = true;
            break;
        }
    }
    ASSERT_TRUE(reported) << "the flip to stale is reported as a view change";
    EXPECT_GT(t, kT0 + 5s);
    EXPECT_LE(t, kT0 + 5s + 1ms);
    // The others' services are denied; this replica's own still answer.
    const auto stale = run.replica.services({}, t);
    ASSERT_EQ(stale.size(), 1u);
    EXPECT_EQ(stale[0].name, "mine");
    // The watch is back (created: an empty batch): served at once.
    Actions c;
    run.replica.events({}, 0, t + 1s, c);
    EXPECT_TRUE(c.view_changed);
    EXPECT_EQ(run.replica.services({}, t + 1s).size(), 2u);
    EXPECT_EQ(run.replica.status({}, t + 1s).revision, 10) << "an empty batch moves nothing";
}

TEST(Cluster, RepeatedWatchFailuresTakeASnapshot) {
    Running run;
    for (int i = 0; i < 2; ++i) {
        Actions a;
        run.replica.watch_ended(false, kT0, a);
        Actions b;
        run.replica.on_timer(kT0 + 10s, b);  // past the retry
        EXPECT_EQ(of(b, Kind::watch).size(), 1u) << i;
    }
    Actions a;
    run.replica.watch_ended(false, kT0 + 10s, a);
    Actions b;
    run.replica.on_timer(kT0 + 20s, b);
    EXPECT_TRUE(of(b, Kind::watch).empty());
    EXPECT_EQ(of(b, Kind::snapshot).size(), 1u);
}

TEST(Cluster, ARenewalIsNotRefusedBecauseOfALaterClash) {
    auto mine = reg("web", 80, "10.0.0.1:5000");
    Running run;
    Actions a;
    run.replica.set_own(std::vector{mine}, kT0, a);
    // etcd has ours at revision 11; another replica's web at another
    // address came later (12) and is left out everywhere.
    Actions b;
    run.replica.events({WatchEvent{false, kv(mine, "a", 11)},
                        WatchEvent{false, kv(reg("web", 81, "10.0.0.3:5000"), "c", 12)}},
                       12, kT0, b);
    EXPECT_FALSE(run.replica.conflict(mine)) << "ours wins the merge: renewing is fine";
    const auto services = run.replica.services({}, kT0);
    ASSERT_EQ(services.size(), 1u);
    EXPECT_EQ(services[0].conventional_port, 80);
    // A new name for the address the earlier entry holds is refused.
    EXPECT_TRUE(run.replica.conflict(reg("www", 80, "10.0.0.1:5001")));
}

TEST(Cluster, HostRelativeAddressesStayLocal) {
    Running run;
    auto wildcard = reg("any", 80, "10.0.0.1:5000");
    wildcard.service.conventional_address.reset();  // "*:80"
    auto unspecified = reg("here", 81, "0.0.0.0:5000");
    Actions a;
    run.replica.set_own(std::vector{wildcard, unspecified}, kT0, a);
    EXPECT_TRUE(of(a, Kind::put).empty());
    EXPECT_FALSE(run.replica.conflict(wildcard));
    EXPECT_EQ(run.replica.status({}, kT0).own, 0u);
}

TEST(Cluster, AnOwnKeyMissingFromANewSnapshotIsWrittenAgain) {
    Running run;
    Actions a;
    run.replica.set_own(std::vector{reg("web", 80, "10.0.0.1:5000")}, kT0, a);
    const auto key = of(a, Kind::put).at(0).key;
    run.replica.put_done(key, true, kT0, a);
    Actions b;
    run.replica.watch_ended(true, kT0, b);  // compacted: a new snapshot
    Actions c;
    run.replica.snapshot_done(true, {}, 30, kT0, c);  // without our key
    auto puts = of(c, Kind::put);
    ASSERT_EQ(puts.size(), 1u);
    EXPECT_EQ(puts[0].key, key);
}

TEST(Cluster, KeepAliveEveryThirdOfTheTtl) {
    Running run;
    auto next = run.replica.next_wakeup();
    ASSERT_TRUE(next);
    EXPECT_EQ(*next, kT0 + 2500ms) << "the idle watch refresh comes first";
    Actions w;
    run.replica.on_timer(*next, w);
    EXPECT_TRUE(of(w, Kind::keepalive).empty());
    Actions a;
    run.replica.on_timer(kT0 + 3s, a);
    ASSERT_EQ(of(a, Kind::keepalive).size(), 1u);
    Actions b;
    run.replica.on_timer(kT0 + 3s, b);
    EXPECT_TRUE(of(b, Kind::keepalive).empty()) << "one keep-alive in flight at a time";
    run.replica.kept_alive(true, 9s, kT0 + 3s, b);
    Actions c;
    run.replica.on_timer(kT0 + 6s - 1ms, c);
    EXPECT_TRUE(of(c, Kind::keepalive).empty());
    run.replica.on_timer(kT0 + 6s, c);
    EXPECT_EQ(of(c, Kind::keepalive).size(), 1u);
}

TEST(Cluster, ALostLeaseIsGrantedAgainAndEveryKeyRewritten) {
    Running run;
    Actions a;
    run.replica.set_own(
        std::vector{reg("web", 80, "10.0.0.1:5000"), reg("db", 81, "10.0.0.1:5001")}, kT0, a);
    for (const Request& r : of(a, Kind::put)) {
        run.replica.put_done(r.key, true, kT0, a);
    }
    EXPECT_EQ(run.replica.status({}, kT0).own_written, 2u);
    Actions b;
    run.replica.on_timer(kT0 + 3s, b);
    Actions c;
    run.replica.kept_alive(true, 0s, kT0 + 3s, c);
    EXPECT_EQ(run.replica.counters().leases_lost, 1u);
    EXPECT_EQ(of(c, Kind::grant).size(), 1u);
    EXPECT_EQ(run.replica.status({}, kT0).own_written, 0u);
    Actions d;
    run.replica.granted(true, 99, 9s, kT0 + 3s, d);
    auto puts = of(d, Kind::put);
    ASSERT_EQ(puts.size(), 2u);
    EXPECT_EQ(puts[0].lease, 99);
    EXPECT_EQ(puts[1].lease, 99);
}

TEST(Cluster, AnOwnKeyDeletedInEtcdIsWrittenAgain) {
    Running run;
    Actions a;
    run.replica.set_own(std::vector{reg("web", 80, "10.0.0.1:5000")}, kT0, a);
    const auto key = of(a, Kind::put).at(0).key;
    run.replica.put_done(key, true, kT0, a);
    Actions b;
    run.replica.events({WatchEvent{true, KeyValue{key, std::nullopt, 0, 20}}}, 20, kT0, b);
    auto puts = of(b, Kind::put);
    ASSERT_EQ(puts.size(), 1u);
    EXPECT_EQ(puts[0].key, key);
}

TEST(Cluster, FailedCallsAreRetriedAfterTheInterval) {
    Running run;
    Actions a;
    run.replica.set_own(std::vector{reg("web", 80, "10.0.0.1:5000")}, kT0, a);
    const auto key = of(a, Kind::put).at(0).key;
    Actions b;
    run.replica.put_done(key, false, kT0, b);
    EXPECT_TRUE(b.requests.empty()) << "no retry before the interval: no busy loop";
    EXPECT_EQ(run.replica.next_wakeup(), kT0 + 500ms);
    Actions c;
    run.replica.on_timer(kT0 + 500ms, c);
    ASSERT_EQ(of(c, Kind::put).size(), 1u);
    EXPECT_EQ(run.replica.counters().etcd_errors, 1u);
}

TEST(Cluster, AFailedGrantIsRetried) {
    Replica r(settings());
    Actions a;
    r.start(kT0, a);
    Actions b;
    r.granted(false, 0, 0s, kT0, b);
    EXPECT_TRUE(b.requests.empty());
    Actions c;
    r.on_timer(kT0 + 500ms, c);
    EXPECT_EQ(of(c, Kind::grant).size(), 1u);
}

TEST(Cluster, ABrokenWatchResumesAfterTheLastRevision) {
    Running run;
    Actions a;
    run.replica.events({WatchEvent{false, kv(reg("web", 80, "10.0.0.2:5000"), "b", 15)}}, 15, kT0,
                       a);
    Actions b;
    run.replica.watch_ended(false, kT0, b);
    EXPECT_TRUE(of(b, Kind::watch).empty());
    Actions c;
    run.replica.on_timer(kT0 + 500ms, c);
    auto watch = of(c, Kind::watch);
    ASSERT_EQ(watch.size(), 1u);
    EXPECT_EQ(watch[0].revision, 16) << "nothing missed, nothing replayed";
    EXPECT_EQ(run.replica.counters().watch_restarts, 1u);
}

TEST(Cluster, AQuietWatchIsOpenedAnewFromTheSameRevision) {
    Running run;
    Actions a;
    run.replica.events({WatchEvent{false, kv(reg("web", 80, "10.0.0.2:5000"), "b", 15)}}, 15,
                       kT0 + 1s, a);
    // max_staleness 5 s: a watch quiet for 2.5 s is opened anew.
    Actions b;
    run.replica.on_timer(kT0 + 3s, b);
    EXPECT_TRUE(of(b, Kind::watch).empty());
    Actions c;
    run.replica.on_timer(kT0 + 3500ms, c);
    auto watch = of(c, Kind::watch);
    ASSERT_EQ(watch.size(), 1u);
    EXPECT_EQ(watch[0].revision, 16);
    EXPECT_EQ(run.replica.counters().watch_refreshes, 1u);
    EXPECT_EQ(run.replica.services({}, kT0 + 3500ms).size(), 1u) << "the view stays";
}

TEST(Cluster, ACompactedWatchTakesANewSnapshot) {
    Running run({kv(reg("old", 80, "10.0.0.2:5000"), "b", 4)});
    Actions a;
    run.replica.watch_ended(true, kT0, a);
    ASSERT_EQ(of(a, Kind::snapshot).size(), 1u);
    Actions b;
    run.replica.snapshot_done(true, {kv(reg("new", 81, "10.0.0.3:5000"), "c", 40)}, 50, kT0, b);
    EXPECT_TRUE(b.view_changed);
    auto watch = of(b, Kind::watch);
    ASSERT_EQ(watch.size(), 1u);
    EXPECT_EQ(watch[0].revision, 51);
    const auto services = run.replica.services({}, kT0);
    ASSERT_EQ(services.size(), 1u);
    EXPECT_EQ(services[0].name, "new");
    EXPECT_EQ(run.replica.counters().compactions, 1u);
}

TEST(Cluster, OnDemandRegistrationsStayLocal) {
    Running run;
    auto od = reg("od", 80, "10.0.0.1:0");
    od.service.on_demand = OnDemand{{7000, 7001}, false};
    Actions a;
    run.replica.set_own(std::vector{od}, kT0, a);
    EXPECT_TRUE(a.requests.empty());
    EXPECT_EQ(run.replica.status({}, kT0).own, 0u);
}

}  // namespace
}  // namespace pmd::cluster
