// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/service.hpp"

#include <algorithm>

namespace pmd {

std::string_view to_string(Policy p) {
    switch (p) {
        case Policy::first:
            return "first";
        case Policy::round_robin:
            return "round-robin";
        case Policy::hash:
            return "hash";
    }
    return "?";
}

Registry::Registry(std::vector<Service> services, const Registry* previous)
    : services_(std::move(services)),
      cursors_(std::make_unique<std::atomic<std::uint64_t>[]>(services_.size())),
      counts_(services_.size()),
      health_(services_.size()) {
    std::unordered_map<std::string_view, std::size_t> by_name;
    if (previous) {
        for (std::size_t i = 0; i < previous->services_.size(); ++i) {
            by_name.emplace(previous->services_[i].name, i);
        }
    }
    for (std::size_t i = 0; i < services_.size(); ++i) {
        const Service& s = services_[i];
        const auto it = by_name.find(s.name);
        const std::shared_ptr<HealthFlags>* old_health = nullptr;
        if (it != by_name.end()) {
            counts_[i] = previous->counts_[it->second];
            old_health = &previous->health_[it->second];
        } else {
            counts_[i] = std::make_shared<AtomicCounts>();
        }
        if (old_health && (*old_health)->sdp == s.sdp) {
            health_[i] = *old_health;  // the same addresses: the same flags
        } else {
            auto flags = std::make_shared<HealthFlags>();
            flags->sdp = s.sdp;
            flags->state = std::make_unique<std::atomic<std::uint8_t>[]>(s.sdp.size());
            for (std::size_t a = 0; a < s.sdp.size(); ++a) {
                std::uint8_t v = 0;
                if (old_health) {
                    const auto& o = **old_health;
                    auto found = std::find(o.sdp.begin(), o.sdp.end(), s.sdp[a]);
                    if (found != o.sdp.end()) {
                        v = o.state[static_cast<std::size_t>(found - o.sdp.begin())].load(
                            std::memory_order_relaxed);
                    }
                }
                flags->state[a].store(v, std::memory_order_relaxed);
            }
            health_[i] = std::move(flags);
        }
        by_name_.try_emplace(services_[i].name, i);
    }
    // First definition wins; the config loader already refuses duplicates.
    for (std::size_t i = 0; i < services_.size(); ++i) {
        const auto& s = services_[i];
        if (s.conventional_address) {
            exact_.try_emplace(pm::Endpoint{*s.conventional_address, s.conventional_port}, i);
        } else {
            wildcard_.try_emplace(s.conventional_port, i);
        }
    }
}

const Service* Registry::find(const pm::IpAddress& ap, std::uint16_t port) const {
    if (auto it = exact_.find(pm::Endpoint{ap, port}); it != exact_.end()) {
        return &services_[it->second];
    }
    if (auto it = wildcard_.find(port); it != wildcard_.end()) {
        return &services_[it->second];
    }
    return nullptr;
}

std::uint64_t Registry::next_round_robin(const Service& s) const {
    return cursors_[index_of(s)].fetch_add(1, std::memory_order_relaxed);
}

void Registry::note_accept(const Service& s, bool duplicate) const {
    auto& c = *counts_[index_of(s)];
    (duplicate ? c.accepted_duplicate : c.accepted).fetch_add(1, std::memory_order_relaxed);
}

void Registry::note_deny(const Service& s) const {
    counts_[index_of(s)]->denied.fetch_add(1, std::memory_order_relaxed);
}

ServiceCounts Registry::counts(const Service& s) const {
    const auto& c = *counts_[index_of(s)];
    return {c.accepted.load(std::memory_order_relaxed),
            c.accepted_duplicate.load(std::memory_order_relaxed),
            c.denied.load(std::memory_order_relaxed)};
}

void Registry::set_health(const Service& s, std::size_t address_index, HealthState state) const {
    const auto& flags = *health_[index_of(s)];
    if (address_index < flags.sdp.size()) {
        flags.state[address_index].store(static_cast<std::uint8_t>(state),
                                         std::memory_order_relaxed);
    }
}

HealthState Registry::health(const Service& s, std::size_t address_index) const {
    const auto& flags = *health_[index_of(s)];
    if (address_index >= flags.sdp.size()) {
        return HealthState::unknown;
    }
    const auto v = flags.state[address_index].load(std::memory_order_relaxed);
    return v <= static_cast<std::uint8_t>(HealthState::down) ? static_cast<HealthState>(v)
                                                             : HealthState::unknown;
}

const Service* Registry::find_by_name(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &services_[it->second];
}

}  // namespace pmd
