// SPDX-License-Identifier: Apache-2.0
// Drives many concurrent resolutions through libpmclient's Resolver and
// tallies how each ended. Shared by the pm-resolve-many tool and the fault
// tests. Bounded: every resolution ends by its deadline, and the whole run
// by `bound`.
#pragma once

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pmclient/resolver.hpp"

namespace pmtools {

struct ResolveManyOptions {
    pm::Endpoint pmsp;
    pm::Endpoint conventional;
    pm::IpAddress cp_address;
    std::uint16_t cp_port_base = 20000;  // resolution i uses CpPort base + i
    std::uint32_t count = 1000;
    std::uint32_t concurrency = 256;
    pmclient::RequestOptions request;  // pmsp is set from `pmsp`
    std::chrono::milliseconds bound{120'000};
};

struct ResolveManyResult {
    std::uint64_t started = 0;
    std::uint64_t completed = 0;
    std::uint64_t accepted = 0;
    std::uint64_t denied = 0;
    std::uint64_t timeout = 0;
    std::uint64_t error = 0;
    std::uint64_t attempts = 0;                // PMReq transmissions in total
    std::chrono::milliseconds max_elapsed{0};  // start -> completion, worst
    std::string first_error;
    pmclient::Counters counters;
};

inline ResolveManyResult resolve_many(const ResolveManyOptions& o) {
    ResolveManyResult res;
    boost::asio::io_context io;
    pmclient::ResolverOptions ro;
    ro.defaults = o.request;
    ro.defaults.pmsp = o.pmsp;
    ro.defaults.use_cache = false;
    ro.cache_capacity = 0;
    ro.read_environment = false;
    const std::uint32_t count =
        std::min<std::uint32_t>(o.count, static_cast<std::uint32_t>(65535u - o.cp_port_base));
    {
        pmclient::Resolver resolver(io, ro);
        using Clock = std::chrono::steady_clock;
        std::function<void()> start_next;
        start_next = [&] {
            if (res.started >= count) {
                return;
            }
            const auto i = static_cast<std::uint32_t>(res.started++);
            pmclient::ResolveRequest req;
            req.conventional = o.conventional;
            req.cp = pm::Endpoint{o.cp_address, static_cast<std::uint16_t>(o.cp_port_base + i)};
            const auto t0 = Clock::now();
            resolver.async_resolve(req, [&, t0](pmclient::Result r) {
                ++res.completed;
                res.attempts += r.attempts;
                res.max_elapsed = std::max(
                    res.max_elapsed,
                    std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0));
                switch (r.kind) {
                    case pmclient::ResultKind::accepted:
                        ++res.accepted;
                        break;
                    case pmclient::ResultKind::denied:
                        ++res.denied;
                        break;
                    case pmclient::ResultKind::timeout:
                        ++res.timeout;
                        break;
                    case pmclient::ResultKind::error:
                        ++res.error;
                        if (res.first_error.empty()) {
                            res.first_error = r.reason;
                        }
                        break;
                }
                start_next();
                if (res.completed == count) {
                    io.stop();  // the resolver's socket keeps the context busy
                }
            });
        };
        for (std::uint32_t k = 0; k < o.concurrency && res.started < count; ++k) {
            start_next();
        }
        io.run_for(o.bound);
        res.counters = resolver.counters();
    }
    // The Resolver's destructor completes what is left as cancelled.
    io.restart();
    io.run_for(std::chrono::seconds(1));
    return res;
}

}  // namespace pmtools
