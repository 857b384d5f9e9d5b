// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/limiter.hpp"

#include <algorithm>
#include <cstring>

namespace pmd {

namespace {

std::uint64_t mix(std::uint64_t x) {
    // splitmix64 finaliser: every input bit affects every output bit.
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

}  // namespace

std::size_t SeededAddressHash::operator()(const pm::IpAddress& a) const noexcept {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    std::memcpy(&lo, a.bytes().data(), 8);
    std::memcpy(&hi, a.bytes().data() + 8, 8);
    std::uint64_t h = mix(seed ^ static_cast<std::uint64_t>(a.family()));
    h = mix(h ^ lo);
    h = mix(h ^ hi);
    return static_cast<std::size_t>(h);
}

// ---- SourceLimiter ----

SourceLimiter::SourceLimiter(LimiterConfig config, std::uint64_t hash_seed)
    : config_(config), table_(config.rate > 0 ? config.max_sources : 1, hash_seed) {
    if (config_.burst < 1) {
        config_.burst = 1;
    }
}

bool SourceLimiter::allow(const pm::IpAddress& source, LimiterTime now) {
    if (!enabled()) {
        ++counters_.allowed;
        return true;
    }
    bool created = false;
    Bucket& b = table_.get(source, Bucket{config_.burst, now}, created);
    if (!created && now > b.last) {
        const double dt = std::chrono::duration<double>(now - b.last).count();
        b.tokens = std::min(config_.burst, b.tokens + dt * config_.rate);
    }
    if (now > b.last) {
        b.last = now;
    }
    if (b.tokens >= 1.0) {
        b.tokens -= 1.0;
        ++counters_.allowed;
        return true;
    }
    ++counters_.limited;
    return false;
}

LimiterCounters SourceLimiter::counters() const {
    LimiterCounters c = counters_;
    c.evicted = table_.evictions();
    return c;
}

// ---- SourceQuench ----

SourceQuench::SourceQuench(QuenchConfig config, std::uint64_t hash_seed)
    : config_(config), table_(config.max_unacked > 0 ? config.max_sources : 1, hash_seed) {}

void SourceQuench::roll(State& s, LimiterTime now) const {
    if (now - s.window_start >= config_.window) {
        s.window_start = now;
        s.unacked = 0;
    }
}

bool SourceQuench::quenched(const pm::IpAddress& source, LimiterTime now) {
    if (!enabled()) {
        return false;
    }
    State* s = table_.find(source);
    if (s == nullptr || now >= s->quenched_until) {
        return false;
    }
    ++counters_.dropped;
    return true;
}

void SourceQuench::on_accept(const pm::IpAddress& source, LimiterTime now) {
    if (!enabled()) {
        return;
    }
    bool created = false;
    State& s = table_.get(source, State{now, LimiterTime{}, 0}, created);
    roll(s, now);
    if (++s.unacked >= config_.max_unacked) {
        s.quenched_until = now + config_.period;
        // The next window starts when the quench ends.
        s.window_start = s.quenched_until;
        s.unacked = 0;
        ++counters_.quench_events;
    }
}

void SourceQuench::on_ack(const pm::IpAddress& source, LimiterTime now) {
    if (!enabled()) {
        return;
    }
    State* s = table_.find(source);
    if (s == nullptr) {
        return;
    }
    if (now >= s->window_start) {
        roll(*s, now);
    }
    if (s->unacked > 0) {
        --s->unacked;
    }
}

QuenchCounters SourceQuench::counters() const {
    QuenchCounters c = counters_;
    c.evicted = table_.evictions();
    return c;
}

}  // namespace pmd
