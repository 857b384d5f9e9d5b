// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/health.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <utility>

namespace pmd {

namespace {

constexpr std::uint32_t kDefaultRise = 2;
constexpr std::uint32_t kDefaultFall = 2;
constexpr std::chrono::milliseconds kDefaultInterval{1000};
constexpr std::chrono::milliseconds kDefaultTimeout{1000};

// What a probe result does in a state. `count` steps move the streak toward
// the threshold (rise or fall) and take `to` when it is reached; `reset`
// clears the streak (the result agrees with the state).
enum class Step : std::uint8_t { go, count, reset };

struct Rule {
    HealthState from;
    bool pass;
    Step step;
    HealthState to;
};

// Every transition of the health state machine.
constexpr std::array<Rule, 6> kRules{{
    {HealthState::unknown, true, Step::go, HealthState::up},
    {HealthState::unknown, false, Step::go, HealthState::down},
    {HealthState::up, true, Step::reset, HealthState::up},
    {HealthState::up, false, Step::count, HealthState::down},  // after `fall`
    {HealthState::down, true, Step::count, HealthState::up},   // after `rise`
    {HealthState::down, false, Step::reset, HealthState::down},
}};

const Rule& rule_for(HealthState s, bool pass) {
    for (const Rule& r : kRules) {
        if (r.from == s && r.pass == pass) {
            return r;
        }
    }
    return kRules[0];  // unreachable: the table is complete
}

}  // namespace

std::string_view to_string(HealthCheck c) {
    switch (c) {
        case HealthCheck::listener:
            return "listener";
        case HealthCheck::connect:
            return "connect";
        case HealthCheck::off:
            return "off";
    }
    return "?";
}

std::string_view to_string(HealthState s) {
    switch (s) {
        case HealthState::unknown:
            return "unknown";
        case HealthState::up:
            return "up";
        case HealthState::down:
            return "down";
    }
    return "?";
}

HealthSettings resolve_health(const HealthOverrides& service, const HealthOverrides& defaults) {
    HealthSettings s;
    s.check = service.check ? service.check : defaults.check;
    s.interval = service.interval.value_or(defaults.interval.value_or(kDefaultInterval));
    s.timeout = service.timeout.value_or(defaults.timeout.value_or(kDefaultTimeout));
    s.rise = service.rise.value_or(defaults.rise.value_or(kDefaultRise));
    s.fall = service.fall.value_or(defaults.fall.value_or(kDefaultFall));
    return s;
}

HealthCheck effective_check(const HealthSettings& s, bool local) {
    if (s.check) {
        return *s.check;
    }
    // Probing other hosts is traffic the operator opts into (docs/sdp-pmd.md).
    return local ? HealthCheck::listener : HealthCheck::off;
}

HealthTracker::HealthTracker(std::uint32_t rise, std::uint32_t fall, HealthTime now)
    : rise_(std::max<std::uint32_t>(rise, 1)),
      fall_(std::max<std::uint32_t>(fall, 1)),
      since_(now) {}

void HealthTracker::set_thresholds(std::uint32_t rise, std::uint32_t fall) {
    rise_ = std::max<std::uint32_t>(rise, 1);
    fall_ = std::max<std::uint32_t>(fall, 1);
}

std::optional<HealthTransition> HealthTracker::on_result(bool pass, HealthTime now) {
    const Rule& r = rule_for(state_, pass);
    switch (r.step) {
        case Step::reset:
            streak_ = 0;
            return std::nullopt;
        case Step::count: {
            ++streak_;
            const std::uint32_t threshold = r.to == HealthState::up ? rise_ : fall_;
            if (streak_ < threshold) {
                return std::nullopt;
            }
            break;
        }
        case Step::go:
            break;
    }
    HealthTransition t{state_, r.to};
    state_ = r.to;
    streak_ = 0;
    since_ = now;
    ++transitions_;
    return t;
}

void HealthMonitor::set_targets(std::vector<HealthTarget> targets, HealthTime now) {
    using Key = std::tuple<std::string_view, pm::Endpoint, HealthCheck>;
    std::map<Key, std::size_t> old;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        const auto& t = entries_[i].target;
        old.emplace(Key{t.service, t.address, t.check}, i);
    }
    std::vector<HealthEntry> next;
    next.reserve(targets.size());
    for (auto& t : targets) {
        auto it = old.find(Key{t.service, t.address, t.check});
        if (it != old.end()) {
            HealthEntry e = entries_[it->second];
            old.erase(it);  // one entry per key
            e.tracker.set_thresholds(t.settings.rise, t.settings.fall);
            if (t.settings.interval < e.target.settings.interval) {
                e.next_probe = std::min(e.next_probe, now + t.settings.interval);
            }
            e.target = std::move(t);
            next.push_back(std::move(e));
        } else {
            HealthTracker tracker(t.settings.rise, t.settings.fall, now);
            next.push_back(HealthEntry{std::move(t), next_id_++, tracker, now, false, 0});
        }
    }
    entries_ = std::move(next);
    index_.clear();
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        index_.emplace(entries_[i].id, i);
    }
}

std::vector<std::uint64_t> HealthMonitor::start_due(HealthCheck check, HealthTime now,
                                                    std::size_t limit) {
    std::vector<std::uint64_t> out;
    for (auto& e : entries_) {
        if (out.size() >= limit) {
            break;
        }
        if (check == HealthCheck::off || e.target.check != check || e.in_flight ||
            e.next_probe > now) {
            continue;
        }
        e.in_flight = true;
        e.next_probe = now + e.target.settings.interval;
        ++e.probes;
        out.push_back(e.id);
    }
    return out;
}

HealthMonitor::Applied HealthMonitor::on_result(std::uint64_t id, bool pass, HealthTime now) {
    HealthEntry* e = find_mut(id);
    if (!e) {
        return {};
    }
    e->in_flight = false;
    return {e, e->tracker.on_result(pass, now)};
}

void HealthMonitor::abandon(std::uint64_t id) {
    if (HealthEntry* e = find_mut(id)) {
        e->in_flight = false;
    }
}

std::optional<HealthTime> HealthMonitor::next_deadline(bool listener_blocked,
                                                       bool connect_blocked) const {
    std::optional<HealthTime> best;
    for (const auto& e : entries_) {
        if (e.target.check == HealthCheck::off || e.in_flight ||
            (e.target.check == HealthCheck::listener && listener_blocked) ||
            (e.target.check == HealthCheck::connect && connect_blocked)) {
            continue;
        }
        if (!best || e.next_probe < *best) {
            best = e.next_probe;
        }
    }
    return best;
}

const HealthEntry* HealthMonitor::find(std::uint64_t id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &entries_[it->second];
}

HealthEntry* HealthMonitor::find_mut(std::uint64_t id) {
    return const_cast<HealthEntry*>(std::as_const(*this).find(id));
}

bool has_listener(const pm::Endpoint& address, const std::vector<Listener>& listeners) {
    const bool any_address = address.address.is_unspecified();
    const pm::IpAddress want = address.address.unmapped();
    for (const Listener& l : listeners) {
        if (l.local.port != address.port) {
            continue;
        }
        if (any_address) {
            return true;  // "*:P": any listener on the port
        }
        const pm::IpAddress& have = l.local.address;
        if (have.is_unspecified()) {
            if (have.family() == want.family()) {
                return true;
            }
            // A dual-stack [::]:P socket also accepts IPv4.
            if (have.is_v6() && want.is_v4() && !l.v6only) {
                return true;
            }
            continue;
        }
        if (have.unmapped() == want) {
            return true;
        }
    }
    return false;
}

}  // namespace pmd
