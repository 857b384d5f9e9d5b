// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/service.hpp"

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
      counts_(services_.size()) {
    std::unordered_map<std::string_view, std::size_t> by_name;
    if (previous) {
        for (std::size_t i = 0; i < previous->services_.size(); ++i) {
            by_name.emplace(previous->services_[i].name, i);
        }
    }
    for (std::size_t i = 0; i < services_.size(); ++i) {
        if (auto it = by_name.find(services_[i].name); it != by_name.end()) {
            counts_[i] = previous->counts_[it->second];
        } else {
            counts_[i] = std::make_shared<AtomicCounts>();
        }
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

}  // namespace pmd
