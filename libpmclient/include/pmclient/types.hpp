// SPDX-License-Identifier: Apache-2.0
// Value types shared by the PM client core (sans-I/O), the Asio resolver and
// the C API: options, the outcome of one resolution and the counters.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pmclient/address.hpp"
#include "pmclient/export.h"
#include "pmclient/message.hpp"
#include "pmclient/pm_time.hpp"

namespace pmclient {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

// At most this many PMSPs in one list (RequestOptions::pmsps, SDP_PMSP,
// pmclient.yaml, pmc_options.pmsp).
inline constexpr std::size_t kMaxPmsps = 16;

// Retransmission and caching knobs for one resolution (section 7.5.1).
//
// Schedule: the PMReq is sent at t0; when no reply came within the current
// timeout the identical PMReq is sent again and the timeout is multiplied by
// backoff_factor, at most max_retries times. The transaction ends with
// ResultKind::timeout when a timeout expires after the last retransmission or
// when `deadline` (measured from t0) passes, whichever is first. With the
// defaults the PMReq leaves at 0, 250, 750 and 1750 ms and the resolution
// gives up at 3000 ms (the deadline cuts the 4th retransmission, due at
// 3750 ms).
//
// Several PMSPs (replicas that share one registry): the list order is the
// preference order. The resolution asks one PMSP at a time, the first one
// that is not being skipped (see MachineConfig: a PMSP that failed
// `pmsp_fail_threshold` resolutions in a row is skipped for
// `pmsp_skip_period` and asked only after every other one). The schedule
// above runs per PMSP, each with a fresh AssocHandle (a new PMReq), inside
// the ONE `deadline` of the resolution. A PMSP's turn ends when its schedule
// is exhausted (the last timeout expired) or when its slice of the deadline
// is used up, whichever is first; then the next PMSP is asked. Its slice,
// fixed when its turn starts:
//     per_pmsp_timeout                     when set (non-zero), else
//     (deadline_at - now) / R              R = PMSPs still to ask (this one
//                                          included; skipped ones too: they
//                                          come last, but they are asked)
// always cut by the deadline. A single PMSP gets the whole deadline: exactly
// the schedule above. A PMDeny is an answer: it ends the resolution, no
// other PMSP is asked. A reply to the handle of an earlier PMSP, while the
// resolution is still open, also ends it (first reply wins).
//
// Example, defaults, pmsps = {A, B}, A silent, B answers:
//     0 ms  PMReq h1 -> A     slice of A = 3000 / 2 = 1500 ms
//   250 ms  PMReq h1 -> A     (retransmission)
//   750 ms  PMReq h1 -> A     (next one would be at 1750: past the slice)
//  1500 ms  PMReq h2 -> B     failover; slice of B = 1500 / 1 = 1500 ms
//  1750 ms  PMReq h2 -> B     ...B answers: accepted, Result::pmsp = B
//  (silent B: 2250 ms h2 -> B again, timeout at 3000 ms, attempts 6)
// With three PMSPs each gets 1000 ms: sends at 0, 250, 750 | 1000, 1250,
// 1750 | 2000, 2250, 2750, timeout at 3000. An early reply ends it at once,
// so a healthy first PMSP costs nothing; a dead one costs its slice until it
// is skipped (then the others are asked first).
struct RequestOptions {
    // PMSPs to ask, in order of preference (at most kMaxPmsps, no
    // duplicates). Precedence: `pmsps` when not empty, else `pmsp` (a list of
    // one, kept for compatibility); setting both is invalid. Neither set:
    // the resolver's configured PMSPs (options, SDP_PMSP, pmclient.yaml),
    // else ApIPAddr:pmsp_port.
    std::optional<pm::Endpoint> pmsp;
    std::vector<pm::Endpoint> pmsps;
    std::chrono::milliseconds initial_timeout{250};  // 1 ms .. 60 s
    double backoff_factor = 2.0;                     // 1.0 .. 16.0
    unsigned max_retries = 4;                        // 0 .. 32
    std::chrono::milliseconds deadline{3000};        // 1 ms .. 10 min
    bool use_cache = true;  // answer from, and store into, the PmTime cache
    // The longest turn of one PMSP of a list; 0: the deadline shared out (see
    // above). 0 .. 10 min.
    std::chrono::milliseconds per_pmsp_timeout{0};
};

// Parses a PMSP list as SDP_PMSP, pmclient.yaml, pmc_options.pmsp and the
// tools take it: comma-separated entries, each "a.b.c.d:port", "[v6]:port"
// or a bare address (port 3935), spaces around entries ignored, e.g.
// "10.0.0.1:3935,10.0.0.2,[fd00::1]:3935". At most kMaxPmsps, none twice,
// no port 0, no unspecified address, no empty entry. On error returns an
// empty list and sets `error` to a message naming the bad entry.
PMCLIENT_API std::vector<pm::Endpoint> parse_pmsp_list(std::string_view text, std::string& error);

// The PMSPs `o` names, in order (pmsps, else pmsp, else empty).
PMCLIENT_API std::vector<pm::Endpoint> pmsp_list(const RequestOptions& o);

// Returns an empty string when the options are valid, else what is wrong.
PMCLIENT_API std::string validate(const RequestOptions& o);
// The same for a list of PMSPs: at most kMaxPmsps, each with a non-zero port
// and a specified address, none twice. The error names the entry.
PMCLIENT_API std::string validate_pmsp_list(const std::vector<pm::Endpoint>& list);

enum class ResultKind : std::uint8_t { accepted, denied, timeout, error };
PMCLIENT_API std::string_view to_string(ResultKind k);

// Why a resolution ended with ResultKind::error.
enum class Errc : std::uint8_t {
    none,
    invalid_argument,  // bad address, zero port, family mix, options out of range
    config,            // SDP_PMSP or pmclient.yaml unusable
    socket,            // the UDP socket could not be opened or used
    busy,              // too many resolutions in flight
    cancelled,         // resolver shut down or cancel()
    internal,          // unexpected exception (a bug)
};
PMCLIENT_API std::string_view to_string(Errc e);

struct Result {
    ResultKind kind = ResultKind::error;
    Errc error = Errc::none;
    pm::Endpoint sdp;                  // accepted: ApIPAddr:ApPort of the PMAccept
    std::uint8_t pm_time = 0;          // accepted: PmTime of the PMAccept
    pm::CacheLifetime lifetime;        // accepted: pm_time decoded (7.3.1.4)
    bool from_cache = false;           // answered from the cache, nothing sent
    unsigned attempts = 0;             // PMReq transmissions (0 from cache)
    std::chrono::microseconds rtt{0};  // last PMReq transmission -> reply
    pm::Endpoint pmsp;                 // PMSP that answered, else the last one asked
    unsigned pmsps_tried = 0;          // PMSPs asked (0 from cache)
    std::uint64_t assoc_handle = 0;    // 0 for cache hits and early errors
    std::string reason;                // human-readable detail

    bool accepted() const { return kind == ResultKind::accepted; }
};

// What the client saw. Every dropped datagram is counted exactly once in one
// of the drop_* counters.
struct Counters {
    std::uint64_t requests_started = 0;
    std::uint64_t cache_hits = 0;
    std::uint64_t cache_misses = 0;
    std::uint64_t pmreq_sent = 0;  // including retransmissions
    std::uint64_t retransmissions = 0;
    std::uint64_t pmack_sent = 0;  // including re-acks
    std::uint64_t reacks = 0;      // PMAck re-sent for a duplicate PMAccept
    std::uint64_t accepted = 0;
    std::uint64_t denied = 0;
    std::uint64_t timeouts = 0;
    std::uint64_t errors = 0;
    std::uint64_t datagrams = 0;            // every datagram handed in
    std::uint64_t drop_malformed = 0;       // codec rejected it
    std::uint64_t drop_not_reply = 0;       // PMReq or PMAck sent to a client
    std::uint64_t drop_unknown = 0;         // no transaction with that AssocHandle
    std::uint64_t drop_tuple_mismatch = 0;  // AssocHandle known, CpPort/CpIPAddr/IPV differ
    std::uint64_t drop_wrong_source = 0;    // not from the PMSP that was asked
    std::uint64_t drop_duplicate = 0;       // a later reply to a finished transaction
    std::uint64_t drop_invalid_accept = 0;  // PMAccept with ApPort 0 or unspecified ApIPAddr
    std::uint64_t receive_errors = 0;       // socket receive errors (I/O layer)
    std::uint64_t send_errors = 0;          // socket send errors (I/O layer)
    std::uint64_t pmsp_failovers = 0;       // a PMSP's turn ended unanswered, the next was asked
    std::uint64_t pmsp_skipped = 0;         // a PMSP moved to the end of a list (being skipped)
};

}  // namespace pmclient
