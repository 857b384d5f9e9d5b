// SPDX-License-Identifier: Apache-2.0
// The PmTime cache of PMAccept answers (section 7.3.1.4). Sans-I/O: the
// caller passes `now`; nothing here reads a clock.
//
// Internal to libpmclient (src/): not installed; tests reach it through the
// pmclient_core target.
//
// Key: the Conventional Address (ApIPAddr, ApPort), the CpIPAddr the PMReq
// carried and the PMSP asked. With a list of PMSPs (replicas sharing one
// registry) the key holds the list as a set (sorted) instead of one PMSP:
// whichever replica answered, the answer belongs to the list, so the next
// resolution with the same list is answered from the cache even when another
// replica would be asked first; a different list (another cluster) has
// entries of its own. A list of one is keyed exactly like a single PMSP.
// CpPort is not part of the key: every connection
// uses a new local port, and reusing an answer across local ports is the point
// of the cache. Entries live PmTime x 250 ms (1..127) or PmTime x 1 s
// (128..254) from the receipt of the PMAccept; 255 stays until flushed or
// evicted; 0 is never stored. The cache is bounded: when full the least
// recently used entry is evicted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "pmclient/types.hpp"

namespace pmclient {

struct CacheKey {
    pm::Endpoint conventional;
    pm::IpAddress cp_addr;
    pm::Endpoint pmsp;                     // the PMSP (a list of one), else unset
    std::vector<pm::Endpoint> pmsp_set{};  // a list of two or more, sorted
    bool operator==(const CacheKey&) const = default;
};

// The key of a resolution asking `pmsps` (in any order, at least one).
CacheKey make_cache_key(const pm::Endpoint& conventional, const pm::IpAddress& cp_addr,
                        const std::vector<pm::Endpoint>& pmsps);

struct CacheKeyHash {
    std::size_t operator()(const CacheKey& k) const noexcept;
};

struct CacheEntry {
    pm::Endpoint sdp;
    std::uint8_t pm_time = 0;
    TimePoint stored{};
    std::optional<TimePoint> expires;  // nullopt: permanent (PmTime 255)
};

class Cache {
  public:
    explicit Cache(std::size_t capacity) : capacity_(capacity) {}

    // The live entry for key, refreshed as most recently used; an expired
    // entry is removed and nullopt returned.
    std::optional<CacheEntry> lookup(const CacheKey& key, TimePoint now);
    // Stores a PMAccept answer received at `now`. PmTime 0 stores nothing and
    // removes any older entry for the key (the newest answer wins).
    void store(const CacheKey& key, const pm::Endpoint& sdp, std::uint8_t pm_time, TimePoint now);
    bool erase(const CacheKey& key);
    // Erases every entry whose Conventional Address is `conventional`.
    std::size_t erase_conventional(const pm::Endpoint& conventional);
    void clear();

    std::size_t size() const { return map_.size(); }
    std::size_t capacity() const { return capacity_; }
    std::uint64_t evictions() const { return evictions_; }
    std::uint64_t expirations() const { return expirations_; }

  private:
    struct Node {
        CacheKey key;
        CacheEntry entry;
    };
    std::size_t capacity_;
    std::list<Node> lru_;  // front = most recently used
    std::unordered_map<CacheKey, std::list<Node>::iterator, CacheKeyHash> map_;
    std::uint64_t evictions_ = 0;
    std::uint64_t expirations_ = 0;
};

// A Cache behind a mutex: one PmTime cache shared by machines that run on
// different threads (the Resolver's machine and the caller-thread machines of
// BlockingResolver). Every call locks once; nothing is held between calls.
class SharedCache {
  public:
    explicit SharedCache(std::size_t capacity) : cache_(capacity) {}

    std::optional<CacheEntry> lookup(const CacheKey& key, TimePoint now) {
        std::lock_guard lock(mu_);
        return cache_.lookup(key, now);
    }
    void store(const CacheKey& key, const pm::Endpoint& sdp, std::uint8_t pm_time, TimePoint now) {
        std::lock_guard lock(mu_);
        cache_.store(key, sdp, pm_time, now);
    }
    bool erase(const CacheKey& key) {
        std::lock_guard lock(mu_);
        return cache_.erase(key);
    }
    std::size_t erase_conventional(const pm::Endpoint& conventional) {
        std::lock_guard lock(mu_);
        return cache_.erase_conventional(conventional);
    }
    void clear() {
        std::lock_guard lock(mu_);
        cache_.clear();
    }
    std::size_t size() const {
        std::lock_guard lock(mu_);
        return cache_.size();
    }
    std::size_t capacity() const {
        std::lock_guard lock(mu_);
        return cache_.capacity();
    }
    std::uint64_t evictions() const {
        std::lock_guard lock(mu_);
        return cache_.evictions();
    }
    std::uint64_t expirations() const {
        std::lock_guard lock(mu_);
        return cache_.expirations();
    }

  private:
    mutable std::mutex mu_;
    Cache cache_;
};

}  // namespace pmclient
