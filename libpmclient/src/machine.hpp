// SPDX-License-Identifier: Apache-2.0
// The sans-I/O PM client: transactions of section 7.5.1 plus the PmTime cache.
//
// Internal to libpmclient (src/): not installed; tests reach it through the
// pmclient_core target.
//
// Fed with start requests, received datagrams (bytes, source, now) and timer
// ticks (now); answers through an Actions value: datagrams to send, completed
// resolutions, and the time of the next wake-up. It never reads a clock, never
// opens a socket and never starts a thread; it is not thread-safe (the I/O
// layer serialises calls). Random AssocHandle values come from the caller.
// Several machines may share one PmTime cache (SharedCache, which locks
// internally), e.g. one machine per thread that resolves.
//
// Matching replies (7.5): a PMAccept or PMDeny is looked up by AssocHandle and
// must then carry the transaction's CpPort, CpIPAddr (and IPV) — the 3-tuple
// of 7.5. With strict_source (default) it must also come from the PMSP
// endpoint the PMReq was sent to (7.4 says replies are sent using the PMReq's
// addresses). Anything else is dropped and counted.
//
// First reply wins (7.5.1, 7.5.2): the first matching PMAccept or PMDeny
// completes the transaction. A short-lived, bounded record of finished
// transactions classifies later replies as duplicates; a duplicate PMAccept
// identical to the one that won is answered with the same PMAck again (the
// PMSP re-sends PMAccept only when it saw a duplicate PMReq, so our PMAck was
// probably lost and re-acking lets it release state early). Other late
// replies are only counted.
//
// Several PMSPs (Query::pmsps, see RequestOptions in types.hpp for the
// schedule, the deadline slices and an example timeline): one transaction
// asks one PMSP at a time; each turn ("leg") has an AssocHandle of its own
// and the 7.5.1 schedule of its own. Strict source matching is per handle: a
// reply must come from the PMSP that handle's PMReq went to. While the
// transaction is open a matching reply to ANY of its handles completes it
// (first reply wins: a slow PMSP's PMAccept is as good as the next one's,
// the replicas share one registry); a PMDeny is an answer too (no failover).
// Once the transaction is complete, a late PMAccept to a handle that was
// superseded by a failover is counted as a duplicate and answered with a
// PMAck (bounded by kMaxReacks), so that PMSP releases its state at once
// instead of retransmitting the PMAccept until its own timer ends.
//
// PMSP health, shared by every transaction of the machine: a leg that ends
// without a reply is a failure of its PMSP, a matching reply clears the
// record. After pmsp_fail_threshold failures in a row the PMSP is skipped
// for pmsp_skip_period from the last failure: lists of two or more ask it
// after all the others, in its own slice of the deadline (a single PMSP is
// always asked, as before). When the
// period is over it is asked in its place again; one more failure skips it
// again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache.hpp"
#include "pmclient/types.hpp"

namespace pmclient {

using TxnId = std::uint64_t;

struct MachineConfig {
    std::size_t cache_capacity = 1024;  // 0 disables the cache (ignored with a shared cache)
    bool strict_source = true;
    Duration completed_linger = std::chrono::seconds(10);  // how long late replies are recognised
    std::size_t completed_capacity = 4096;
    std::size_t max_in_flight = 65536;
    // A PMSP is skipped after this many failed legs in a row (0: never).
    unsigned pmsp_fail_threshold = 3;
    Duration pmsp_skip_period = std::chrono::seconds(30);  // 0 .. 1 h
    // PMSPs with failures remembered at most (the oldest failure is forgotten).
    std::size_t pmsp_health_capacity = 1024;
};

// Returns an empty string when valid.
std::string validate(const MachineConfig& c);

// a += b, counter by counter (the I/O shells add up their machines' counts).
void add(Counters& a, const Counters& b);

struct Query {
    pm::Endpoint conventional;  // ApIPAddr, ApPort
    pm::Endpoint cp;            // CpIPAddr, CpPort
    pm::Endpoint pmsp;          // where the PMReq goes (when pmsps is empty)
    // Not empty: the PMSPs to ask, in order of preference (pmsp is ignored).
    std::vector<pm::Endpoint> pmsps;
    RequestOptions options;  // options.pmsp and options.pmsps are ignored here
};

// The PMSPs of q: q.pmsps, else {q.pmsp}.
std::vector<pm::Endpoint> pmsps_of(const Query& q);
// The address families of q's PMSPs (the sockets a driver needs), each once.
std::vector<pm::Family> pmsp_families(const Query& q);

struct Send {
    pm::Endpoint to;
    pm::Wire bytes;
};

struct Completion {
    TxnId id = 0;
    Result result;
};

struct Actions {
    std::vector<Send> sends;
    std::vector<Completion> completions;
    // When on_timer() wants to be called next (absolute); nullopt: no timer.
    std::optional<TimePoint> timer;

    void clear() {
        sends.clear();
        completions.clear();
        timer.reset();
    }
};

class Machine {
  public:
    // `cache`: a PmTime cache shared with other machines; null: a cache of
    // its own with config.cache_capacity entries.
    explicit Machine(MachineConfig config = {}, std::shared_ptr<SharedCache> cache = nullptr);

    // Where the AssocHandle of a failover leg comes from (64 random bits from
    // the OS, like start()'s `random`). Unset: derived from the previous
    // handle (deterministic; for tests).
    void set_random(std::function<std::uint64_t()> random) { random_ = std::move(random); }

    // Starts one resolution. `random` is 64 random bits from the OS
    // (getrandom()); if that AssocHandle is in use, or was used by a recent
    // transaction, it is rehashed until unique within this machine. A cache
    // hit, or invalid input, completes at once (in `out`) with nothing sent.
    TxnId start(const Query& q, TimePoint now, std::uint64_t random, Actions& out);

    void on_datagram(std::span<const std::uint8_t> bytes, const pm::Endpoint& from, TimePoint now,
                     Actions& out);
    void on_timer(TimePoint now, Actions& out);

    // Completes the transaction with Errc::cancelled. False if unknown.
    bool cancel(TxnId id, TimePoint now, Actions& out);
    void cancel_all(TimePoint now, Actions& out);

    std::optional<TimePoint> next_wakeup() const;

    void flush_cache() { cache_->clear(); }
    std::size_t flush_cache(const pm::Endpoint& conventional) {
        return cache_->erase_conventional(conventional);
    }
    bool forget(const CacheKey& key) { return cache_->erase(key); }
    const SharedCache& cache() const { return *cache_; }
    const std::shared_ptr<SharedCache>& shared_cache() const { return cache_; }
    const Counters& counters() const { return counters_; }
    std::size_t in_flight() const { return active_.size(); }
    std::size_t completed_records() const { return completed_.size(); }
    const MachineConfig& config() const { return config_; }

    // True while `pmsp` is being skipped (see above).
    bool pmsp_skipped(const pm::Endpoint& pmsp, TimePoint now) const;
    // Failed legs in a row of `pmsp` (0 when it answered last).
    unsigned pmsp_failures(const pm::Endpoint& pmsp) const;

  private:
    // One PMSP's turn: its AssocHandle, where it went, when it last went.
    struct Leg {
        std::uint64_t handle = 0;
        pm::Endpoint pmsp;
        TimePoint last_sent{};
    };
    struct Txn {
        TxnId id = 0;
        pm::Message req;  // of the current leg
        pm::Wire wire{};
        Query query;
        CacheKey key;
        std::vector<pm::Endpoint> order;  // asking order: healthy, then skipped
        std::vector<Leg> legs;            // legs.back() is the current one
        TimePoint started{};
        TimePoint next_at{};
        TimePoint leg_end{};
        TimePoint deadline_at{};
        Duration timeout{};
        unsigned attempts = 0;      // PMReqs sent, every leg
        unsigned leg_attempts = 0;  // PMReqs sent in the current leg
    };
    struct Done {
        std::uint16_t cp_port = 0;
        pm::IpAddress cp_addr;
        pm::Endpoint pmsp;
        bool accepted = false;
        pm::Message accept;  // the PMAccept that won (accepted only)
        unsigned reacks = 0;
        bool superseded = false;  // a failover replaced this handle
    };
    struct Health {
        unsigned failures = 0;  // failed legs in a row
        TimePoint last_failure{};
    };

    void start_leg(Txn& t, TimePoint now, std::uint64_t random, Actions& out);
    // Ends t: remembers every handle (`winner`: the one answered, 0 none;
    // `accept`: its PMAccept), erases t, queues the completion.
    void complete(Txn& t, Result r, std::uint64_t winner, const pm::Message* accept, TimePoint now,
                  Actions& out);
    void finish_timer(Actions& out) { out.timer = next_wakeup(); }
    void expire_completed(TimePoint now);
    void remember(std::uint64_t handle, Done d, TimePoint now);
    std::uint64_t unique_handle(std::uint64_t random) const;
    Result error_result(Errc e, std::string reason) const;
    void pmsp_failed(const pm::Endpoint& pmsp, TimePoint now);
    void pmsp_answered(const pm::Endpoint& pmsp) { health_.erase(pmsp); }

    MachineConfig config_;
    std::shared_ptr<SharedCache> cache_;
    std::function<std::uint64_t()> random_;
    Counters counters_;
    TxnId next_id_ = 1;
    std::unordered_map<TxnId, Txn> active_;                            // by id
    std::unordered_map<std::uint64_t, TxnId> handles_;                 // every handle of active_
    std::set<std::pair<TimePoint, TxnId>> schedule_;                   // (next_at, id)
    std::map<pm::Endpoint, Health> health_;                            // PMSPs with failures
    std::unordered_map<std::uint64_t, Done> completed_;                // by AssocHandle
    std::deque<std::pair<TimePoint, std::uint64_t>> completed_order_;  // (expiry, handle)
};

// Re-acks per finished transaction are capped at this many.
inline constexpr unsigned kMaxReacks = 8;

}  // namespace pmclient
