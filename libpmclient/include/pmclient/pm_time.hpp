// SPDX-License-Identifier: Apache-2.0
// PmTime (section 7.3.1.4): how long a PM client may cache a PMAccept.
//
//   0        single use: the answer must not be cached
//   1..127   PmTime x 250 ms
//   128..254 PmTime x 1 s
//   255      may be cached permanently
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace pm {

inline constexpr std::uint8_t kPmTimeSingleUse = 0;
inline constexpr std::uint8_t kPmTimePermanent = 255;

struct CacheLifetime {
    enum class Kind : std::uint8_t { single_use, timed, permanent };
    Kind kind = Kind::single_use;
    std::chrono::milliseconds duration{0};  // meaningful for Kind::timed only

    bool operator==(const CacheLifetime&) const = default;
};

CacheLifetime pm_time_lifetime(std::uint8_t pm_time);

// The PmTime byte for a configured cache duration. Rounds down to the nearest
// representable lifetime so a client never caches longer than configured:
// a duration of zero is single use; durations below 250 ms become 1 (250 ms,
// the shortest timed lifetime); 31.75 s..127 s become 127 (31.75 s, there is
// no value in between); anything at or above 254 s becomes 254. Permanent is
// never produced from a duration: ask for kPmTimePermanent explicitly.
std::uint8_t pm_time_from_duration(std::chrono::milliseconds d);

// "single-use", "permanent", "31.75s"... for logs and tools.
std::string pm_time_to_string(std::uint8_t pm_time);

}  // namespace pm
