// SPDX-License-Identifier: Apache-2.0
#include "cache.hpp"

#include <algorithm>

namespace pmclient {

namespace {
std::size_t mix(std::size_t h, std::size_t v) {
    return h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
}
}  // namespace

std::size_t CacheKeyHash::operator()(const CacheKey& k) const noexcept {
    std::hash<pm::IpAddress> ha;
    std::size_t h = ha(k.conventional.address);
    h = mix(h, k.conventional.port);
    h = mix(h, ha(k.cp_addr));
    h = mix(h, ha(k.pmsp.address));
    h = mix(h, k.pmsp.port);
    for (const auto& e : k.pmsp_set) {
        h = mix(h, ha(e.address));
        h = mix(h, e.port);
    }
    return h;
}

CacheKey make_cache_key(const pm::Endpoint& conventional, const pm::IpAddress& cp_addr,
                        const std::vector<pm::Endpoint>& pmsps) {
    CacheKey k{conventional, cp_addr, {}, {}};
    if (pmsps.size() == 1) {
        k.pmsp = pmsps.front();
    } else {
        k.pmsp_set = pmsps;
        std::sort(k.pmsp_set.begin(), k.pmsp_set.end());
    }
    return k;
}

std::optional<CacheEntry> Cache::lookup(const CacheKey& key, TimePoint now) {
    auto it = map_.find(key);
    if (it == map_.end()) {
        return std::nullopt;
    }
    auto node = it->second;
    if (node->entry.expires && now >= *node->entry.expires) {
        lru_.erase(node);
        map_.erase(it);
        ++expirations_;
        return std::nullopt;
    }
    lru_.splice(lru_.begin(), lru_, node);
    return node->entry;
}

void Cache::store(const CacheKey& key, const pm::Endpoint& sdp, std::uint8_t pm_time,
                  TimePoint now) {
    auto life = pm::pm_time_lifetime(pm_time);
    if (life.kind == pm::CacheLifetime::Kind::single_use || capacity_ == 0) {
        erase(key);
        return;
    }
    CacheEntry e;
    e.sdp = sdp;
    e.pm_time = pm_time;
    e.stored = now;
    if (life.kind == pm::CacheLifetime::Kind::timed) {
        e.expires = now + life.duration;
    }
    auto it = map_.find(key);
    if (it != map_.end()) {
        it->second->entry = e;
        lru_.splice(lru_.begin(), lru_, it->second);
        return;
    }
    while (map_.size() >= capacity_ && !lru_.empty()) {
        map_.erase(lru_.back().key);
        lru_.pop_back();
        ++evictions_;
    }
    lru_.push_front(Node{key, e});
    map_.emplace(key, lru_.begin());
}

bool Cache::erase(const CacheKey& key) {
    auto it = map_.find(key);
    if (it == map_.end()) {
        return false;
    }
    lru_.erase(it->second);
    map_.erase(it);
    return true;
}

std::size_t Cache::erase_conventional(const pm::Endpoint& conventional) {
    std::size_t n = 0;
    for (auto it = lru_.begin(); it != lru_.end();) {
        if (it->key.conventional == conventional) {
            map_.erase(it->key);
            it = lru_.erase(it);
            ++n;
        } else {
            ++it;
        }
    }
    return n;
}

void Cache::clear() {
    lru_.clear();
    map_.clear();
}

}  // namespace pmclient
