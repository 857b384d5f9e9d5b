// SPDX-License-Identifier: Apache-2.0
// Service mappings (Conventional Address -> SDP Addresses) and the immutable
// registry snapshot the PMSP core looks them up in.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/health.hpp"
#include "pmclient/address.hpp"

namespace pmd {

enum class Policy : std::uint8_t {
    first,        // always the first SDP address
    round_robin,  // rotate through the SDP addresses, one step per new transaction
    hash,         // pick by a hash of CpIPAddr, so a client keeps its address
};

std::string_view to_string(Policy p);

// An on-demand service (docs/sdp-pmd.md, "On-demand SDP ports"): the SDP
// port is not fixed; the daemon has the registered acceptor open a listener
// on a free port of `ports` for each new transaction (io/on_demand.hpp).
struct OnDemand {
    std::vector<std::uint16_t> ports;  // the pool: sorted, no duplicates, none 0
    bool single_use = false;           // closed after the first connection
    bool operator==(const OnDemand&) const = default;
};

inline constexpr std::size_t kMaxOnDemandPorts = 1024;

// SDP addresses of one service (each is health-checked and has its own
// metrics series).
inline constexpr std::size_t kMaxSdpAddresses = 64;

struct Service {
    std::string name;
    // ApIPAddr clients ask for; nullopt is "*": any ApIPAddr with this port.
    std::optional<pm::IpAddress> conventional_address;
    std::uint16_t conventional_port = 0;
    // SDP Addresses handed out. An unspecified address ("*:8080", stored as
    // 0.0.0.0) means "the ApIPAddr the client asked for".
    std::vector<pm::Endpoint> sdp;
    Policy policy = Policy::first;
    std::uint8_t pm_time = 0;  // PmTime byte sent in PMAccept (7.3.1.4)
    // Client prefixes allowed; empty = any. Checked against both the datagram's
    // source address and CpIPAddr (see docs/protocol-notes.md).
    std::vector<pm::Prefix> allow;
    bool dynamic = false;  // registered at run time rather than configured
    // `health:` of this service; unset fields come from the top-level
    // `health:` (resolved by the shell, see daemon/core/health.hpp).
    HealthOverrides health;
    // Set: an on-demand service; the port of each `sdp` entry is a
    // placeholder replaced by the pool port opened for the transaction.
    std::optional<OnDemand> on_demand;

    // A copy-constructible description; the round-robin cursor lives in the
    // Registry so that snapshots can share Service values freely.
    bool operator==(const Service&) const = default;
};

// What became of the PMReqs a service answered.
struct ServiceCounts {
    std::uint64_t accepted = 0;            // new transactions
    std::uint64_t accepted_duplicate = 0;  // PMAccept re-sent for a duplicate PMReq
    std::uint64_t denied = 0;              // not allowed, no address of the family, none available
};

// Immutable snapshot of all services. Lookups are lock-free; a reload or a
// registration builds a new Registry and swaps the shared_ptr.
class Registry {
  public:
    Registry() = default;
    // `previous`: the snapshot this one replaces; services of the same name
    // keep counting from its per-service counts.
    explicit Registry(std::vector<Service> services, const Registry* previous = nullptr);

    // Exact (address, port) match first, then the "*" service for the port.
    // ap must be in canonical form (IPv4-mapped IPv6 is NOT unmapped here).
    const Service* find(const pm::IpAddress& ap, std::uint16_t port) const;
    std::span<const Service> services() const { return services_; }
    // Monotonic per-service cursor for round-robin; shared by all users of
    // this snapshot (relaxed atomic, no lock).
    std::uint64_t next_round_robin(const Service& s) const;

    // Per-service counts (relaxed atomics, no lock). A service of the same
    // name in the next snapshot shares the same count block, so counts made
    // through an old snapshot (a worker that has not switched yet) still count.
    void note_accept(const Service& s, bool duplicate) const;
    void note_deny(const Service& s) const;
    ServiceCounts counts(const Service& s) const;

    // Health of each SDP address (s.sdp[i]): relaxed atomics written by the
    // health checker on the main thread, read by every worker's Pmsp when it
    // picks an address. A service of the same name in the next snapshot
    // keeps the state of the SDP addresses it still has.
    void set_health(const Service& s, std::size_t address_index, HealthState state) const;
    HealthState health(const Service& s, std::size_t address_index) const;
    // Unknown counts as available: only `down` is skipped.
    bool available(const Service& s, std::size_t address_index) const {
        return health(s, address_index) != HealthState::down;
    }
    // The service of that name in this snapshot, or nullptr.
    const Service* find_by_name(std::string_view name) const;

  private:
    struct EndpointHash {
        std::size_t operator()(const pm::Endpoint& e) const noexcept {
            return std::hash<pm::IpAddress>{}(e.address) ^ (std::size_t{e.port} * 0x9E3779B1u);
        }
    };
    std::vector<Service> services_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> cursors_;
    struct AtomicCounts {
        std::atomic<std::uint64_t> accepted{0};
        std::atomic<std::uint64_t> accepted_duplicate{0};
        std::atomic<std::uint64_t> denied{0};
    };
    std::vector<std::shared_ptr<AtomicCounts>> counts_;
    struct HealthFlags {
        std::vector<pm::Endpoint> sdp;  // the addresses the flags are for
        std::unique_ptr<std::atomic<std::uint8_t>[]> state;
    };
    std::vector<std::shared_ptr<HealthFlags>> health_;
    std::unordered_map<std::string_view, std::size_t> by_name_;
    std::size_t index_of(const Service& s) const {
        return static_cast<std::size_t>(&s - services_.data());
    }
    std::unordered_map<pm::Endpoint, std::size_t, EndpointHash> exact_;
    std::unordered_map<std::uint16_t, std::size_t> wildcard_;
};

}  // namespace pmd
