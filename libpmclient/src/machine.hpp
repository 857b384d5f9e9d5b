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
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
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
};

// Returns an empty string when valid.
std::string validate(const MachineConfig& c);

// a += b, counter by counter (the I/O shells add up their machines' counts).
void add(Counters& a, const Counters& b);

struct Query {
    pm::Endpoint conventional;  // ApIPAddr, ApPort
    pm::Endpoint cp;            // CpIPAddr, CpPort
    pm::Endpoint pmsp;          // where the PMReq goes
    RequestOptions options;     // options.pmsp is ignored here
};

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

  private:
    struct Txn {
        TxnId id = 0;
        pm::Message req;
        pm::Wire wire{};
        Query query;
        TimePoint started{};
        TimePoint last_sent{};
        TimePoint next_at{};
        TimePoint deadline_at{};
        Duration timeout{};
        unsigned attempts = 0;
    };
    struct Done {
        std::uint16_t cp_port = 0;
        pm::IpAddress cp_addr;
        pm::Endpoint pmsp;
        bool accepted = false;
        pm::Message accept;  // the PMAccept that won (accepted only)
        unsigned reacks = 0;
    };

    void complete(Txn& t, Result r, Actions& out);
    void finish_timer(Actions& out) { out.timer = next_wakeup(); }
    void expire_completed(TimePoint now);
    void remember(std::uint64_t handle, Done d, TimePoint now);
    std::uint64_t unique_handle(std::uint64_t random) const;
    Result error_result(Errc e, std::string reason) const;

    MachineConfig config_;
    std::shared_ptr<SharedCache> cache_;
    Counters counters_;
    TxnId next_id_ = 1;
    std::unordered_map<std::uint64_t, Txn> active_;                    // by AssocHandle
    std::unordered_map<TxnId, std::uint64_t> by_id_;                   // id -> AssocHandle
    std::set<std::pair<TimePoint, std::uint64_t>> schedule_;           // (next_at, AssocHandle)
    std::unordered_map<std::uint64_t, Done> completed_;                // by AssocHandle
    std::deque<std::pair<TimePoint, std::uint64_t>> completed_order_;  // (expiry, handle)
};

// Re-acks per finished transaction are capped at this many.
inline constexpr unsigned kMaxReacks = 8;

}  // namespace pmclient
