// SPDX-License-Identifier: Apache-2.0
// The shared state of a Resolver, for libpmclient's other I/O shells (the
// loop driver of the C API) (internal).
#pragma once

#include <cstdint>
#include <memory>

#include "machine.hpp"
#include "pmclient/resolver.hpp"

namespace pmclient::detail {

struct ResolverAccess {
    // The PmTime cache shared by every machine of the resolver.
    static std::shared_ptr<SharedCache> cache(const Resolver& r);
    // The configuration of the resolver's machines.
    static MachineConfig machine_config(const Resolver& r);
    // Fills q from req and the resolver's configuration (PMSP precedence,
    // CpIPAddr routed towards ApIPAddr when unspecified). An error Result
    // (kind error) when q cannot be filled; nothing is counted.
    static Result prepare(const Resolver& r, const ResolveRequest& req, Query& q);
    // 64 random bits from getrandom(): an AssocHandle seed for Machine::start.
    static std::uint64_t random();
};

}  // namespace pmclient::detail
