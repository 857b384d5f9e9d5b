// SPDX-License-Identifier: Apache-2.0
// One replica's side of the `etcd` registry backend, without I/O
// (docs/cluster.md). The shell (io/registry_backend.cpp) turns the Requests
// this machine returns into etcd calls and feeds their answers back, with
// the time; it never decides anything itself.
//
// What the machine keeps:
//   - the lease: one etcd lease per replica (TTL Settings::lease_ttl), kept
//     alive every TTL/3; this replica's keys hang on it, so when the replica
//     dies (or is cut off from etcd for longer than the TTL) its keys expire
//     and every replica stops answering for them. A lost lease (keep-alive
//     says TTL 0) is granted anew and every key re-put.
//   - own: the registrations this replica's control socket holds (the
//     RegistrationStore's, minus on-demand ones, which need the acceptor's
//     local connection), each under KEY = prefix "registrations/" NAME "/"
//     MEMBER. Written with the current lease; what etcd holds for this
//     member but is not in `own` any more (a previous run's) is deleted.
//   - the view: every key under prefix "registrations/" as of `revision`,
//     from one range (the snapshot) and then one watch from revision + 1. A
//     broken watch resumes from revision + 1 (nothing missed, nothing
//     replayed); a compacted one takes a new snapshot. A watch that brought
//     nothing for max_staleness / 2 is opened anew from revision + 1 (the
//     same lossless resume), so a stream that died without a close (a
//     vanished peer) cannot leave the view behind for longer than that.
//   - freshness: the time the view was last known current: a snapshot, a
//     watch batch, or the watch's creation (an empty batch). Keep-alives
//     keep the lease, not the view. The view is served while it is at most
//     Settings::max_staleness old; then services() returns this replica's
//     own registrations only (the replica denies the others' services)
//     until the view is current again. Three watch failures in a row at the
//     same revision take a new snapshot instead of retrying the watch.
//   - what is shared: a registration whose Conventional Address is "*" or
//     one of whose SDP addresses is unspecified means "this host" and stays
//     local (shareable()), as do on-demand ones.
//
// Merging (services()): the entries of every member, ordered by etcd's
// create revision (then member), make one service per name: the first
// entry gives the Conventional Address, policy, PmTime and allow list; every
// later entry of the same name and Conventional Address adds its SDP
// addresses, so the policy spans hosts. An entry whose name is a static
// service's, whose Conventional Address is a static service's or another
// name's, or whose name has another Conventional Address, is left out
// (`conflicts`). Every replica sees the same revisions, so every replica
// merges the same way. This replica's own registrations count from their
// create revision once etcd has them, and after every other entry before.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/pmsp.hpp"
#include "daemon/core/registrations.hpp"
#include "daemon/core/service.hpp"

namespace pmd::cluster {

struct Settings {
    std::string prefix = "/sdp-pm/";  // every key lives under it
    std::string member;               // this replica's name: unique in the cluster
    std::chrono::seconds lease_ttl{10};
    std::chrono::milliseconds max_staleness{30'000};
    std::chrono::milliseconds retry_interval{1'000};  // after a failed etcd call
};

// Returns "" when valid, else what is wrong.
std::string validate(const Settings& s);
// Member names: 1-64 of letters, digits, '.', '_', '-'.
bool is_valid_member(std::string_view member);

// An etcd client URL: "http://HOST:PORT" or "https://HOST:PORT"; HOST is a
// name, an IPv4 address or a bracketed IPv6 address; PORT 1-65535.
struct EndpointUrl {
    bool tls = false;
    std::string host;  // without brackets
    std::uint16_t port = 0;
};
std::optional<EndpointUrl> parse_endpoint_url(std::string_view url);

// Whether a registration can mean the same on every replica (see above).
bool shareable(const Registration& r);

std::string registrations_prefix(std::string_view prefix);
std::string key_of(std::string_view prefix, std::string_view name, std::string_view member);
struct KeyParts {
    std::string name;
    std::string member;
};
std::optional<KeyParts> parse_key(std::string_view prefix, std::string_view key);

// A key under registrations_prefix() as etcd holds it; `registration` is
// nullopt when its value did not decode (counted, left out).
struct KeyValue {
    std::string key;
    std::optional<Registration> registration;
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
};
struct WatchEvent {
    bool deleted = false;
    KeyValue kv;  // deleted: the key only
};

// What the shell must ask etcd for. Each answer comes back through the
// matching Replica call below, exactly once.
struct Request {
    enum class Kind : std::uint8_t { grant, keepalive, put, del, snapshot, watch };
    Kind kind = Kind::grant;
    std::string key;            // put, del
    Registration registration;  // put: the value
    std::int64_t lease = 0;     // keepalive, put
    std::int64_t revision = 0;  // watch: the start revision
};

struct Actions {
    std::vector<Request> requests;
    bool view_changed = false;  // services() may differ: publish a new registry
};

struct Counters {
    std::uint64_t etcd_errors = 0;     // failed calls (each retried)
    std::uint64_t leases_granted = 0;  // including re-grants after a lost lease
    std::uint64_t leases_lost = 0;
    std::uint64_t snapshots = 0;  // including those after a compaction
    std::uint64_t compactions = 0;
    std::uint64_t watch_restarts = 0;
    std::uint64_t watch_refreshes = 0;  // idle watches opened anew
    std::uint64_t events = 0;
    std::uint64_t puts = 0;
    std::uint64_t deletes = 0;
    std::uint64_t bad_values = 0;  // keys whose value did not decode
};

struct Status {
    bool fresh = false;
    bool have_snapshot = false;
    std::int64_t lease = 0;  // 0: none held
    std::int64_t revision = 0;
    std::optional<std::chrono::milliseconds> since_contact;  // nullopt: never
    std::optional<std::chrono::milliseconds> view_age;       // nullopt: no view yet
    std::size_t keys = 0;                                    // in the view
    std::size_t own = 0;
    std::size_t own_written = 0;                 // own keys etcd holds with the current lease
    std::map<std::string, std::size_t> members;  // keys per member in the view
    std::size_t conflicts = 0;                   // entries left out by the merge
};

class Replica {
  public:
    explicit Replica(Settings s);

    const Settings& settings() const { return settings_; }

    // Asks for a lease and the snapshot.
    void start(TimePoint now, Actions& out);
    // The registrations this replica holds now (on-demand ones are skipped).
    void set_own(std::span<const Registration> own, TimePoint now, Actions& out);

    // Answers, `ok` false for any failure of the call.
    void granted(bool ok, std::int64_t lease, std::chrono::seconds ttl, TimePoint now,
                 Actions& out);
    // ok with ttl 0: the lease is gone.
    void kept_alive(bool ok, std::chrono::seconds ttl, TimePoint now, Actions& out);
    void put_done(const std::string& key, bool ok, TimePoint now, Actions& out);
    void del_done(const std::string& key, bool ok, TimePoint now, Actions& out);
    void snapshot_done(bool ok, std::vector<KeyValue> kvs, std::int64_t revision, TimePoint now,
                       Actions& out);
    // A batch of watch events that brings the view to `revision`; an empty
    // batch (the watch was created, or etcd reported progress) only says the
    // stream is live, and `revision` is ignored.
    void events(std::vector<WatchEvent> events, std::int64_t revision, TimePoint now, Actions& out);
    // The watch stopped: `compacted` when its start revision is gone.
    void watch_ended(bool compacted, TimePoint now, Actions& out);
    void on_timer(TimePoint now, Actions& out);
    std::optional<TimePoint> next_wakeup() const;

    bool fresh(TimePoint now) const;
    // The merged cluster services (this replica's own only when not
    // fresh); statics win.
    std::vector<Service> services(std::span<const Service> statics, TimePoint now) const;
    // Why `r` may not be registered here, given what the other members hold.
    std::optional<std::string> conflict(const Registration& r) const;
    Status status(std::span<const Service> statics, TimePoint now) const;
    const Counters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }

  private:
    struct Entry {
        std::string member;
        Registration registration;
        std::int64_t create_revision = 0;
        std::int64_t mod_revision = 0;
    };
    enum class LeaseState : std::uint8_t { none, granting, held };

    void contact(TimePoint now);
    void failed(TimePoint now);
    void sync(Actions& out);
    void apply(const KeyValue& kv);
    void ask_snapshot(Actions& out);
    void ask_watch(Actions& out, std::optional<TimePoint> now = std::nullopt);
    std::chrono::milliseconds watch_refresh() const;
    // The freshness as last reported; flips are reported as view changes.
    void note_freshness(TimePoint now, Actions& out);
    struct Merged {
        std::vector<Service> services;
        std::size_t conflicts = 0;
        std::vector<const Registration*> left_out;  // the conflicting entries
    };
    Merged merge(std::span<const Service> statics, const std::map<std::string, Registration>& own,
                 bool with_view) const;

    Settings settings_;
    Counters counters_;
    bool started_ = false;

    LeaseState lease_state_ = LeaseState::none;
    std::int64_t lease_ = 0;
    std::chrono::seconds lease_ttl_{0};
    bool keepalive_in_flight_ = false;
    std::optional<TimePoint> next_keepalive_;

    std::map<std::string, Registration> own_;      // by key
    std::map<std::string, Registration> written_;  // by key: etcd has it, current lease
    // Keys with a put (the value put, under `lease`) or a del (nullopt)
    // outstanding.
    struct Flight {
        std::optional<Registration> value;
        std::int64_t lease = 0;
    };
    std::map<std::string, Flight> in_flight_;

    std::map<std::string, Entry> view_;  // by key
    std::int64_t revision_ = 0;
    bool have_snapshot_ = false;
    bool snapshot_in_flight_ = false;
    bool watching_ = false;
    std::optional<TimePoint> watch_active_;  // watch asked for, or its last events
    bool want_snapshot_ = false;             // retry one at retry_at_
    bool want_watch_ = false;                // retry one at retry_at_

    std::optional<TimePoint> retry_at_;      // failed calls are retried then
    std::optional<TimePoint> last_contact_;  // any answer from etcd
    std::optional<TimePoint> view_current_;  // the view was last known current
    unsigned watch_failures_ = 0;            // in a row, at the same revision
    bool reported_fresh_ = false;
};

}  // namespace pmd::cluster
