// SPDX-License-Identifier: Apache-2.0
// Dynamic registrations (control socket `register`) as JSON, and the state
// file that keeps them across restarts. The registrations themselves live in
// core/registrations.hpp.
//
// A registration is a Service (dynamic = true) plus an owner and an optional
// lease. Leases are wall-clock deadlines so that they keep their meaning
// across a restart. The state file is one JSON document, rewritten
// atomically (temporary file in the same directory, fsync, rename, fsync of
// the directory) on every change:
//
//   {"version": 1, "registrations": [{"name": "web", "conventional": "...",
//     "sdp": ["..."], "policy": "first", "pm_time": 120, "allow": ["..."],
//     "owner": "...", "lease": "30000ms", "expires_at": 1700000000000,
//     "pid": 4242, "pid_start_time": 123456, "boot_id": "..."}]}
#pragma once

#include <chrono>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "daemon/core/registrations.hpp"

namespace pmd::io {

inline constexpr std::chrono::milliseconds kMinLease{1000};
inline constexpr std::chrono::milliseconds kMaxLease = std::chrono::hours{24 * 365};
inline constexpr std::size_t kMaxOwner = 256;
// PID_MAX_LIMIT on 64-bit Linux.
inline constexpr std::int64_t kMaxPid = 4'194'304;
// Reads `register` arguments (or, with from_state, a state file entry, which
// may carry "expires_at", "pid_start_time" and "boot_id"). A "pid" of
// "peer" must have been replaced by the caller's pid already. The lease starts at `now`. On error
// returns one line naming the argument at fault.
std::variant<Registration, std::string> parse_registration(const nlohmann::json& args,
                                                           bool from_state,
                                                           WallClock::time_point now);

// The service as listed by `services` and `register` (without counters).
nlohmann::json service_json(const Service& s);
nlohmann::json registration_json(const Registration& r, WallClock::time_point now);

// One registration as the state file (and the etcd backend's values) keep
// it; parse_registration(entry, true, now) reads it back.
nlohmann::json registration_entry(const Registration& r);

struct StateLoad {
    std::vector<Registration> registrations;
    bool missing = false;              // no file: a first start
    std::optional<std::string> error;  // unreadable, torn or invalid: the file is corrupt
};
StateLoad read_state_file(const std::string& path, WallClock::time_point now);
// Parses the text of a state file (exposed for tests and fuzzing).
StateLoad parse_state(const std::string& text, WallClock::time_point now);
std::string state_text(std::span<const Registration> registrations);

// Writes atomically; returns the error, if any. Creates the directory when
// missing.
std::optional<std::string> write_state_file(const std::string& path,
                                            std::span<const Registration> registrations);
// Renames a corrupt file to PATH.corrupt-YYYYmmddTHHMMSS (UTC); returns the
// new name, or an error text in `error`.
std::optional<std::string> move_aside(const std::string& path, std::string& error);

}  // namespace pmd::io
