// SPDX-License-Identifier: Apache-2.0
// The dynamic registrations (control socket `register`) without I/O: a
// sorted set of Registration values with their leases. Every operation takes
// the time as an argument (`now`, wall clock, because a lease must keep its
// meaning across a restart) and reports what changed and when the next lease
// runs out, so the shell only arms one timer, and saves and publishes when
// told that something changed. Reading and writing the state file, and
// building the registry snapshot the workers answer from, stay in the shell
// (io/state_file.hpp, io/server.hpp).
//
// The store never persists by itself: the shell saves registrations() after
// a change and, when the save fails, rolls back with restore(save_point()).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/service.hpp"

namespace pmd {

using WallClock = std::chrono::system_clock;

inline constexpr std::size_t kMaxRegistrations = 10'000;

// The local process a registration lives as long as (`register` with
// "pid"). The shell watches it (a pidfd) and calls
// RegistrationStore::owner_exited() when it exits; after a restart it checks
// that the same process still runs: same boot, same pid and, when the shell
// could read it, the same start time (docs/sdp-pmd.md, "Registrations and
// their owners").
struct OwnerProcess {
    std::int64_t pid = 0;
    // Start time in clock ticks after boot (/proc/PID/stat field 22);
    // nullopt when the shell could not read it (ProtectProc=invisible).
    std::optional<std::uint64_t> start_time;
    std::string boot_id;  // the kernel's boot ID when registered; "" unknown
    bool operator==(const OwnerProcess&) const = default;
};

struct Registration {
    Service service;  // dynamic = true
    std::string owner;
    std::optional<OwnerProcess> process;             // nullopt: not tied to a process
    std::optional<std::chrono::milliseconds> lease;  // nullopt: until unregistered
    std::optional<WallClock::time_point> expires;    // set when lease is

    bool operator==(const Registration&) const = default;

    bool expired(WallClock::time_point now) const { return expires && *expires <= now; }
    // (Re)starts the lease, if any, at `now`.
    void start_lease(WallClock::time_point now) {
        expires = lease ? std::optional(now + *lease) : std::nullopt;
    }
};

// The same Conventional Address ("*" only equals "*").
bool same_conventional(const Service& a, const Service& b);
// "IP:PORT" / "*:PORT" of the service's Conventional Address.
std::string conventional_text(const Service& s);

// Name or Conventional Address clash with a static service or another
// registration (one of the same name is a renewal, not a clash). Returns the
// reason.
std::optional<std::string> find_conflict(const Registration& r, std::span<const Service> statics,
                                         std::span<const Registration> dynamic);

class RegistrationStore {
  public:
    // How the registrations changed, for the registration_changes and
    // leases_expired counters.
    struct Counts {
        std::uint64_t changes = 0;      // added, renewed, removed or expired (one per operation)
        std::uint64_t expired = 0;      // leases run out (one per registration)
        std::uint64_t owner_exits = 0;  // removed because their owner process exited
    };

    // What one operation did. `changed`: the set differs, so the shell
    // publishes a new registry and saves the state. `removed`: registrations
    // that left the store without being asked to (lease expired, owner
    // exited, conflict), for the log. `next_deadline`: the earliest lease expiry left, to arm
    // the lease timer for (nullopt: no lease).
    enum class Cause : std::uint8_t { lease_expired, owner_exited, conflict };
    struct Removed {
        Registration registration;
        Cause cause = Cause::lease_expired;
        std::string conflict;  // Cause::conflict: the clash
    };
    struct Change {
        bool changed = false;
        std::vector<Removed> removed;
        std::optional<WallClock::time_point> next_deadline;
    };

    enum class Refusal : std::uint8_t { none, conflict, full, not_found, is_static };
    struct Outcome {
        Refusal refusal = Refusal::none;
        std::string reason;    // conflict: the clash
        bool renewal = false;  // register: a registration of that name was replaced
        Change change;
        bool ok() const { return refusal == Refusal::none; }
    };

    // The registrations, sorted by name.
    std::span<const Registration> registrations() const { return regs_; }
    std::size_t size() const { return regs_.size(); }
    const Counts& counts() const { return counts_; }
    void reset_counts() { counts_ = {}; }
    std::optional<WallClock::time_point> next_deadline() const;

    // Takes the registrations read from the state file at start: drops those
    // whose lease ran out while stopped (counted expired, in `removed`) and
    // those that clash with a static service or an earlier entry (in
    // `removed` too, not counted); a later entry of the same name replaces
    // an earlier one. `changed`: something was dropped, so the file needs
    // rewriting.
    Change load(std::vector<Registration> loaded, std::span<const Service> statics,
                WallClock::time_point now);
    // Registers or renews `r` against the static services `statics`; its
    // lease starts at `now`.
    Outcome add(Registration r, std::span<const Service> statics, WallClock::time_point now);
    // Removes the registration `name`; a static service of that name is
    // refused as is_static, an unknown name as not_found.
    Outcome remove(std::string_view name, std::span<const Service> statics);
    // Removes every registration whose lease ran out by `now`.
    Change expire(WallClock::time_point now);
    // Removes every registration tied to process `pid`: the shell saw it
    // exit (or, after a restart, found it gone).
    Change owner_exited(std::int64_t pid);
    // The processes registrations are tied to, each once, sorted by pid.
    std::vector<OwnerProcess> owners() const;
    // A reload: removes the registrations a static service of the new
    // configuration now claims (by name or Conventional Address).
    Change restrict_to(std::span<const Service> statics);

    // Rolling back an operation whose result could not be saved.
    struct SavePoint {
        std::vector<Registration> regs;
        Counts counts;
    };
    SavePoint save_point() const { return SavePoint{regs_, counts_}; }
    void restore(SavePoint p);

  private:
    Change made(bool changed, std::vector<Removed> removed = {}) const;
    // Removes the registrations `why` gives a reason for ("" for none),
    // counted and reported as `cause`.
    Change erase_where(const std::function<std::optional<std::string>(const Registration&)>& why,
                       Cause cause);

    std::vector<Registration> regs_;  // sorted by name
    Counts counts_;
};

}  // namespace pmd
