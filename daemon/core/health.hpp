// SPDX-License-Identifier: Apache-2.0
// Health of SDP Addresses, sans-I/O (issue #15; draft section 7: "the PM
// Server verifies that the service is available").
//
// Per (service, SDP address) a state machine unknown / up / down with rise
// and fall counts, fed probe results and `now` (steady time) by the I/O shell
// (daemon/io/health_checker.*), which also does the probing: this file never
// opens a socket and never reads a clock. Every transition is in one table
// (kRules in health.cpp), in the style of h11's _state.py.
//
//   unknown --pass--> up          the first result decides at once, so a
//   unknown --fail--> down        fresh daemon neither denies for `rise`
//                                 intervals nor accepts a dead address
//   up      --fail x fall--> down
//   down    --pass x rise--> up
//
// A state of unknown (no result yet, or check off) counts as available.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pmclient/address.hpp"

namespace pmd {

using HealthTime = std::chrono::steady_clock::time_point;

enum class HealthCheck : std::uint8_t {
    listener,  // a local address: is a TCP listener there (sock_diag, never a connect)
    connect,   // a TCP connect probe with a timeout (the only way to check a remote host)
    off,       // not checked: always available
};
std::string_view to_string(HealthCheck c);

enum class HealthState : std::uint8_t {
    unknown = 0,  // no result yet, or not checked: available
    up = 1,
    down = 2,
};
std::string_view to_string(HealthState s);

// What a `health:` map says; unset fields fall back to the top-level
// `health:`, then to the built-in defaults (resolve_health()).
struct HealthOverrides {
    std::optional<HealthCheck> check;  // unset: listener for local addresses, off for remote
    std::optional<std::chrono::milliseconds> interval;
    std::optional<std::chrono::milliseconds> timeout;
    std::optional<std::uint32_t> rise;
    std::optional<std::uint32_t> fall;
    bool operator==(const HealthOverrides&) const = default;
};

struct HealthSettings {
    std::optional<HealthCheck> check;  // nullopt: by locality (decided by the shell)
    std::chrono::milliseconds interval{1000};
    std::chrono::milliseconds timeout{1000};
    std::uint32_t rise = 2;
    std::uint32_t fall = 2;
    bool operator==(const HealthSettings&) const = default;
};

// Service's own fields first, then the top-level defaults, then built-ins.
HealthSettings resolve_health(const HealthOverrides& service, const HealthOverrides& defaults);
// The check an address gets: the configured one, or by locality.
HealthCheck effective_check(const HealthSettings& s, bool local);

struct HealthTransition {
    HealthState from;
    HealthState to;
};

// One (service, SDP address).
class HealthTracker {
  public:
    HealthTracker(std::uint32_t rise, std::uint32_t fall, HealthTime now);

    // A probe result. Returns the transition when the state changed.
    std::optional<HealthTransition> on_result(bool pass, HealthTime now);

    HealthState state() const { return state_; }
    HealthTime since() const { return since_; }  // when the state last changed
    // Consecutive results against the current state (towards rise or fall).
    std::uint32_t streak() const { return streak_; }
    std::uint64_t transitions() const { return transitions_; }
    void set_thresholds(std::uint32_t rise, std::uint32_t fall);

  private:
    std::uint32_t rise_;
    std::uint32_t fall_;
    HealthState state_ = HealthState::unknown;
    HealthTime since_;
    std::uint32_t streak_ = 0;
    std::uint64_t transitions_ = 0;
};

// What the shell wants checked: one SDP address of one service.
struct HealthTarget {
    std::string service;
    std::size_t address_index = 0;  // into Service::sdp
    pm::Endpoint address;           // as configured (0.0.0.0:P for "*:P")
    HealthCheck check = HealthCheck::off;
    HealthSettings settings;
};

// A target with its tracker and probe schedule.
struct HealthEntry {
    HealthTarget target;
    std::uint64_t id = 0;  // names the entry in on_result(); never reused
    HealthTracker tracker;
    HealthTime next_probe;
    bool in_flight = false;
    std::uint64_t probes = 0;
};

// Every target and its schedule. Probes of an entry start `interval` apart
// (from the start of the previous one); an entry whose probe is in flight is
// not due again until its result arrives.
class HealthMonitor {
  public:
    // Replaces the targets. A target with the same service, address and
    // check as before keeps its state, history and schedule; new ones start
    // unknown and are due at once. Results for dropped entries are ignored.
    void set_targets(std::vector<HealthTarget> targets, HealthTime now);

    // Entries of `check` due by `now`, at most `limit`; each is marked in
    // flight and scheduled one interval from now.
    std::vector<std::uint64_t> start_due(HealthCheck check, HealthTime now,
                                         std::size_t limit = SIZE_MAX);
    // A probe result for entry `id` (ignored, nullptr, when it is gone).
    struct Applied {
        const HealthEntry* entry = nullptr;
        std::optional<HealthTransition> transition;
    };
    Applied on_result(std::uint64_t id, bool pass, HealthTime now);
    // The probe of `id` ended without a verdict (an error of the checker
    // itself): no result is counted, the entry is due again on schedule.
    void abandon(std::uint64_t id);

    // Earliest next probe of an entry not in flight, leaving out the checks
    // the shell cannot start now (a dump already running, the probe cap).
    std::optional<HealthTime> next_deadline(bool listener_blocked = false,
                                            bool connect_blocked = false) const;

    const std::vector<HealthEntry>& entries() const { return entries_; }
    const HealthEntry* find(std::uint64_t id) const;

  private:
    HealthEntry* find_mut(std::uint64_t id);
    std::vector<HealthEntry> entries_;
    std::unordered_map<std::uint64_t, std::size_t> index_;  // id -> entries_ position
    std::uint64_t next_id_ = 1;
};

// Listeners as sock_diag reports them (TCP, state LISTEN).
struct Listener {
    pm::Endpoint local;   // 0.0.0.0:P or [::]:P for wildcard listeners
    bool v6only = false;  // IPV6_V6ONLY (AF_INET6 only)
};

// Whether `address` (a local SDP address; 0.0.0.0:P for "*:P") has a
// listener: an exact match, a wildcard of its family on the port, a [::]:P
// listener without v6only for an IPv4 address, an IPv4-mapped [::ffff:a]:P
// listener; "*:P" is covered by any listener on port P.
bool has_listener(const pm::Endpoint& address, const std::vector<Listener>& listeners);

}  // namespace pmd
