// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the etcd backend's sans-I/O replica (daemon/core/cluster.hpp)
// driven by an arbitrary sequence of etcd answers, changes of its own
// registrations, clock steps and watch events, including answers nobody
// asked for. Each input byte pair is (operation, argument). Invariants: no
// crash; at most one request per key outstanding, one grant, one
// keep-alive and one snapshot at a time; a watch starts right
// after the revision the replica holds; the merged services have unique
// names and unique Conventional Addresses, at most kMaxSdpAddresses each,
// none clashing with a static service; only its own when not fresh.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/cluster.hpp"

namespace {

using pmd::Registration;
using pmd::cluster::Actions;
using pmd::cluster::KeyValue;
using pmd::cluster::Request;

#define CHECK(c)          \
    do {                  \
        if (!(c)) {       \
            std::abort(); \
        }                 \
    } while (0)

Registration reg(unsigned i) {
    Registration r;
    r.service.name = "s" + std::to_string(i % 5);
    r.service.conventional_address = pm::IpAddress::parse("10.0.0.1");
    r.service.conventional_port = static_cast<std::uint16_t>(80 + (i / 5) % 3);
    r.service.sdp.push_back(
        pm::Endpoint{*pm::IpAddress::parse("10.0.1.1"), static_cast<std::uint16_t>(5000 + i)});
    r.service.policy = (i & 1) ? pmd::Policy::round_robin : pmd::Policy::first;
    r.service.dynamic = true;
    if (i % 7 == 0) {
        r.service.on_demand = pmd::OnDemand{{7000}, false};
    }
    return r;
}

const char* kMembers[] = {"a", "b", "c", "self"};

struct Driver {
    pmd::cluster::Replica replica;
    pmd::TimePoint now{};
    std::map<std::string, int> puts_dels;  // outstanding per key
    int grants = 0, keepalives = 0, snapshots = 0, watches = 0;
    std::int64_t revision = 0;  // what the fake etcd is at
    std::int64_t held = 0;      // the replica's revision as the driver knows it
    std::vector<pmd::Service> statics;
    std::set<std::string> own_names;  // shareable registrations of set_own

    explicit Driver(pmd::cluster::Settings s) : replica(std::move(s)) {
        pmd::Service st;
        st.name = "s4";
        st.conventional_address = pm::IpAddress::parse("10.0.0.1");
        st.conventional_port = 99;
        st.sdp.push_back(*pm::Endpoint::parse("10.0.2.1:1"));
        statics.push_back(st);
    }

    void take(const Actions& a) {
        for (const Request& r : a.requests) {
            switch (r.kind) {
                case Request::Kind::grant:
                    CHECK(grants == 0);
                    ++grants;
                    break;
                case Request::Kind::keepalive:
                    CHECK(keepalives == 0);
                    ++keepalives;
                    break;
                case Request::Kind::put:
                case Request::Kind::del:
                    CHECK(puts_dels[r.key] == 0);
                    ++puts_dels[r.key];
                    break;
                case Request::Kind::snapshot:
                    CHECK(snapshots == 0);
                    ++snapshots;
                    break;
                case Request::Kind::watch:
                    // A new watch replaces a running one (the shell cancels
                    // it); it always resumes right after what is held.
                    CHECK(r.revision == held + 1);
                    watches = 1;
                    break;
            }
        }
    }

    void check() {
        // Liveness: without a timer, something must be outstanding, or the
        // replica would never move again.
        if (!replica.next_wakeup()) {
            std::size_t keyed = 0;
            for (const auto& [key, n] : puts_dels) {
                keyed += static_cast<std::size_t>(n);
            }
            CHECK(grants + keepalives + snapshots + watches > 0 || keyed > 0);
        }
        const auto services = replica.services(statics, now);
        if (!replica.fresh(now)) {
            for (const auto& svc : services) {  // only its own, first hand
                CHECK(own_names.contains(svc.name));
            }
        }
        std::set<std::string> names;
        std::set<std::pair<std::uint16_t, bool>> conventional;
        for (const auto& s : services) {
            CHECK(names.insert(s.name).second);
            CHECK(conventional.insert({s.conventional_port, s.conventional_address.has_value()})
                      .second);
            CHECK(s.sdp.size() <= pmd::kMaxSdpAddresses);
            CHECK(s.name != "s4");
            CHECK(s.conventional_port != 99);
        }
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    pmd::cluster::Settings s;
    s.prefix = "/f/";
    s.member = "self";
    s.lease_ttl = std::chrono::seconds(3);
    s.max_staleness = std::chrono::milliseconds(2000);
    s.retry_interval = std::chrono::milliseconds(100);
    Driver d(s);
    Actions a;
    d.replica.start(d.now, a);
    d.take(a);
    for (std::size_t i = 0; i + 1 < size && i < 4096; i += 2) {
        const std::uint8_t op = data[i];
        const std::uint8_t arg = data[i + 1];
        Actions out;
        const bool ok = (arg & 0x80) == 0;
        switch (op % 11) {
            case 0: {  // own registrations: a subset of the pool
                std::vector<Registration> own;
                for (unsigned b = 0; b < 7; ++b) {
                    if (arg & (1u << b)) {
                        own.push_back(reg(b + (op >> 4)));
                    }
                }
                d.own_names.clear();
                for (const auto& r : own) {
                    if (pmd::cluster::shareable(r)) {
                        d.own_names.insert(r.service.name);
                    }
                }
                d.replica.set_own(own, d.now, out);
                break;
            }
            case 1:
                if (d.grants > 0 || (arg & 0x40)) {  // sometimes unasked
                    d.grants = std::max(0, d.grants - 1);
                    d.replica.granted(ok, arg % 3, std::chrono::seconds(arg % 4), d.now, out);
                }
                break;
            case 2:
                if (d.keepalives > 0 || (arg & 0x40)) {
                    d.keepalives = std::max(0, d.keepalives - 1);
                    d.replica.kept_alive(ok, std::chrono::seconds(arg % 3), d.now, out);
                }
                break;
            case 3:
            case 4: {  // answer the outstanding put/del of some key
                if (d.puts_dels.empty()) {
                    break;
                }
                auto it = d.puts_dels.begin();
                std::advance(it, arg % d.puts_dels.size());
                const std::string key = it->first;
                d.puts_dels.erase(it);
                if (op % 11 == 3) {
                    d.replica.put_done(key, ok, d.now, out);
                } else {
                    d.replica.del_done(key, ok, d.now, out);
                }
                break;
            }
            case 5: {  // snapshot answer with a few entries
                if (d.snapshots == 0 && !(arg & 0x40)) {
                    break;
                }
                d.snapshots = std::max(0, d.snapshots - 1);
                std::vector<KeyValue> kvs;
                for (unsigned b = 0; b < (arg & 7u); ++b) {
                    const unsigned n = (arg >> 3) + b;
                    KeyValue kv;
                    kv.key = pmd::cluster::key_of("/f/", reg(n).service.name, kMembers[n % 4]);
                    if (n % 5 != 4) {
                        kv.registration = reg(n);
                    }
                    kv.create_revision = static_cast<std::int64_t>(n % 9);
                    kvs.push_back(std::move(kv));
                }
                d.revision += 1;
                if (ok) {
                    d.held = d.revision;
                }
                d.replica.snapshot_done(ok, std::move(kvs), d.revision, d.now, out);
                break;
            }
            case 6: {  // a watch batch
                if (d.watches == 0) {
                    break;
                }
                std::vector<pmd::cluster::WatchEvent> events;
                const unsigned n = arg & 0x3f;
                pmd::cluster::WatchEvent ev;
                ev.deleted = (arg & 0x40) != 0;
                ev.kv.key = (n & 1)
                                ? "/f/registrations/garbage"
                                : pmd::cluster::key_of("/f/", reg(n).service.name, kMembers[n % 4]);
                if (!ev.deleted) {
                    ev.kv.registration = reg(n);
                }
                ev.kv.create_revision = ++d.revision;
                events.push_back(ev);
                d.held = d.revision;
                d.replica.events(std::move(events), d.revision, d.now, out);
                break;
            }
            case 7:
                if (d.watches > 0) {
                    d.watches = 0;
                    d.replica.watch_ended(ok, d.now, out);
                }
                break;
            case 8:
            case 9:  // the clock
                d.now += std::chrono::milliseconds(arg * 16);
                d.replica.on_timer(d.now, out);
                break;
            case 10:
                if (auto next = d.replica.next_wakeup()) {
                    d.now = std::max(d.now, *next);
                    d.replica.on_timer(d.now, out);
                }
                break;
        }
        d.take(out);
        d.check();
        (void)d.replica.status(d.statics, d.now);
        (void)d.replica.conflict(reg(arg));
    }
    return 0;
}
