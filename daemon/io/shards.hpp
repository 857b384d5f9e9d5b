// SPDX-License-Identifier: Apache-2.0
// The UDP worker shards of sdp-pmd (io/worker.hpp) as one object: creating
// them with their share of the limits, starting and stopping their threads,
// and everything the main thread asks of them, always without blocking
// (io/gather.hpp): counters, a new registry snapshot or limits, a counter
// reset, the watchdog ping.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/pmsp.hpp"
#include "daemon/io/gather.hpp"
#include "daemon/io/metrics.hpp"
#include "daemon/io/worker.hpp"

namespace pmd::io {

Limits limits_from(const Config& config);
// The limits of shard `index` of `workers`: the memory bounds
// max_transactions and limits.*.max_sources are totals for the daemon, split
// evenly (at least 1 each).
Limits shard_limits(const Config& config, unsigned index, unsigned workers);
// `workers:` resolved: "auto" (0) is the CPUs of the affinity mask.
unsigned resolve_workers(unsigned configured);

class Shards {
  public:
    // resolve_workers(config.workers) shards, answering from `registry`;
    // completions run on `main`.
    Shards(boost::asio::io_context& main, const Config& config,
           std::shared_ptr<const Registry> registry);
    ~Shards();
    Shards(const Shards&) = delete;
    Shards& operator=(const Shards&) = delete;

    std::vector<std::unique_ptr<Worker>>& workers() { return workers_; }
    std::size_t size() const { return workers_.size(); }
    bool running() const { return running_; }
    // Starts the threads.
    void start();
    // Closes the workers' sockets and joins their threads; from then on
    // every question is answered directly.
    void stop();

    // Runs f on every worker's thread; done(answers) on the main thread.
    template <class R>
    void ask(std::function<R(Worker&)> f, std::function<void(std::vector<std::optional<R>>)> done) {
        gather<R>(main_, workers_, running_, std::move(f), std::move(done));
    }
    // Every worker's counters, aggregated.
    void snapshots(std::function<void(Aggregate)> done);
    // Every worker answers from `registry` (and, with `config`, with its
    // share of the new limits) once done runs.
    void publish(std::shared_ptr<const Registry> registry, const Config* config,
                 std::function<void()> done);
    void reset_counters(std::function<void()> done);
    // The watchdog round: the workers that have not run the previous ping
    // (stuck), then the next ping posted to every worker.
    std::vector<unsigned> ping();

  private:
    boost::asio::io_context& main_;
    std::vector<std::unique_ptr<Worker>> workers_;
    bool running_ = false;
    std::uint64_t ping_seq_ = 0;  // last ping posted to the workers
};

}  // namespace pmd::io
