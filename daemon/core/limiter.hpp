// SPDX-License-Identifier: Apache-2.0
// Per-source admission control for the PMSP (section 15.2), sans-I/O.
//
// SourceLimiter: a token bucket per source address. Each source may send
// `rate` PMReqs per second on average with bursts of `burst`; a request
// finding its bucket empty is refused (the shell drops it, counted).
//
// SourceQuench: a source whose PMAccepts go un-acknowledged is quenched. Every
// PMAccept for a new transaction adds one to the source's count of un-acked
// accepts, every matching PMAck takes one away; when the count reaches
// `max_unacked` within one `window` the source is quenched for `period`
// (its PMReqs are dropped, counted). A legitimate client acks every accept
// within a round trip, so its count stays near zero; a flood of PMReqs from
// one address that never acks (section 15.2's state-exhaustion attack) is cut
// off after `max_unacked` transactions per window.
//
// Both keep their per-source state in a SourceTable: bounded to
// `max_sources` entries, the least recently seen source evicted first
// (counted), keyed by a hash seeded per process so that a remote peer cannot
// aim collisions at one bucket. Not thread-safe: one instance per shard, like
// pmd::Pmsp. Neither reads a clock: `now` is always passed in.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "daemon/core/slab_list.hpp"
#include "pmclient/address.hpp"

namespace pmd {

using LimiterTime = std::chrono::steady_clock::time_point;

// The seeded hash of an address (all 16 bytes and the family).
struct SeededAddressHash {
    std::uint64_t seed = 0;
    std::size_t operator()(const pm::IpAddress& a) const noexcept;
};

// A bounded map IpAddress -> State with least-recently-used eviction. Slab
// plus an intrusive LRU list; one allocation up front, none per lookup.
template <typename State>
class SourceTable {
  public:
    SourceTable(std::size_t capacity, std::uint64_t seed)
        : capacity_(capacity == 0 ? 1 : capacity), index_(0, SeededAddressHash{seed}) {
        slab_.reserve(capacity_);
        index_.reserve(capacity_);
    }

    // The state of `a`, created with `fresh` (evicting the least recently
    // used source when full) if absent; `created` tells which. Marks `a` most
    // recently used.
    State& get(const pm::IpAddress& a, const State& fresh, bool& created) {
        auto it = index_.find(a);
        if (it != index_.end()) {
            created = false;
            touch(it->second);
            return slab_[it->second].state;
        }
        created = true;
        std::uint32_t i;
        if (slab_.size() < capacity_) {
            i = static_cast<std::uint32_t>(slab_.size());
            slab_.push_back(Node{a, fresh});
        } else {
            i = lru_.tail;  // least recently used
            lru_.unlink(slab_, i);
            index_.erase(slab_[i].key);
            slab_[i] = Node{a, fresh};
            ++evictions_;
        }
        index_.emplace(a, i);
        lru_.push_front(slab_, i);
        return slab_[i].state;
    }
    // nullptr when absent; does not change the LRU order.
    State* find(const pm::IpAddress& a) {
        auto it = index_.find(a);
        return it == index_.end() ? nullptr : &slab_[it->second].state;
    }

    std::size_t size() const { return index_.size(); }
    std::size_t capacity() const { return capacity_; }
    std::uint64_t evictions() const { return evictions_; }

  private:
    struct Node {
        pm::IpAddress key;
        State state;
        std::uint32_t prev = kSlabNil;
        std::uint32_t next = kSlabNil;
    };
    void touch(std::uint32_t i) {
        if (lru_.head != i) {
            lru_.unlink(slab_, i);
            lru_.push_front(slab_, i);
        }
    }

    std::size_t capacity_;
    std::vector<Node> slab_;
    std::unordered_map<pm::IpAddress, std::uint32_t, SeededAddressHash> index_;
    SlabList lru_;  // most recently used first
    std::uint64_t evictions_ = 0;
};

struct LimiterConfig {
    double rate = 0;                  // PMReqs per second per source; 0: limiter off
    double burst = 0;                 // bucket size; below 1 is taken as 1
    std::size_t max_sources = 65536;  // sources tracked at once
};

struct LimiterCounters {
    std::uint64_t allowed = 0;
    std::uint64_t limited = 0;  // refused: bucket empty
    std::uint64_t evicted = 0;  // source state dropped to make room
};

class SourceLimiter {
  public:
    explicit SourceLimiter(LimiterConfig config = {}, std::uint64_t hash_seed = 0);

    // True when a PMReq from `source` may be processed now; takes a token.
    bool allow(const pm::IpAddress& source, LimiterTime now);

    bool enabled() const { return config_.rate > 0; }
    const LimiterConfig& config() const { return config_; }
    std::size_t sources() const { return table_.size(); }
    LimiterCounters counters() const;

  private:
    struct Bucket {
        double tokens = 0;
        LimiterTime last{};
    };
    LimiterConfig config_;
    SourceTable<Bucket> table_;
    LimiterCounters counters_;
};

struct QuenchConfig {
    std::uint32_t max_unacked = 0;            // 0: quench off
    std::chrono::milliseconds window{1000};   // counting window
    std::chrono::milliseconds period{10000};  // how long a source stays quenched
    std::size_t max_sources = 65536;
};

struct QuenchCounters {
    std::uint64_t quench_events = 0;  // sources that became quenched
    std::uint64_t dropped = 0;        // PMReqs refused while quenched
    std::uint64_t evicted = 0;
};

class SourceQuench {
  public:
    explicit SourceQuench(QuenchConfig config = {}, std::uint64_t hash_seed = 0);

    // True when `source` is quenched at `now`; counts the PMReq as dropped.
    // Call once per PMReq, before processing it.
    bool quenched(const pm::IpAddress& source, LimiterTime now);
    // A PMAccept for a new transaction was sent to `source`.
    void on_accept(const pm::IpAddress& source, LimiterTime now);
    // A PMAck from `source` matched a transaction.
    void on_ack(const pm::IpAddress& source, LimiterTime now);

    bool enabled() const { return config_.max_unacked > 0; }
    const QuenchConfig& config() const { return config_; }
    std::size_t sources() const { return table_.size(); }
    QuenchCounters counters() const;

  private:
    struct State {
        LimiterTime window_start{};
        LimiterTime quenched_until{};
        std::uint32_t unacked = 0;
    };
    void roll(State& s, LimiterTime now) const;
    QuenchConfig config_;
    SourceTable<State> table_;
    QuenchCounters counters_;
};

}  // namespace pmd
