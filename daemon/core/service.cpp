#include "core/service.hpp"

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

Registry::Registry(std::vector<Service> services)
    : services_(std::move(services)),
      cursors_(std::make_unique<std::atomic<std::uint64_t>[]>(services_.size())) {
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
    auto index = static_cast<std::size_t>(&s - services_.data());
    return cursors_[index].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pmd
