// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/shards.hpp"

#include <algorithm>
#include <random>

#include "daemon/io/reuseport.hpp"

namespace pmd::io {

namespace {

std::uint64_t random_seed() {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// `total` split over `n` shards; shard `i` gets its share (at least 1).
std::size_t share(std::size_t total, unsigned i, unsigned n) {
    const std::size_t q = total / n;
    const std::size_t r = total % n;
    return std::max<std::size_t>(1, q + (i < r ? 1 : 0));
}

}  // namespace

Limits limits_from(const Config& c) {
    Limits l;
    l.ack_timeout = c.ack_timeout;
    l.max_transactions = c.max_transactions;
    l.deny_ap_port = c.deny_ap_port;
    l.accept_iwpm_request = c.accept_iwpm_request;
    l.per_source = c.per_source;
    l.quench = c.quench;
    return l;
}

Limits shard_limits(const Config& c, unsigned index, unsigned workers) {
    Limits l = limits_from(c);
    if (workers > 1) {
        l.max_transactions = share(c.max_transactions, index, workers);
        l.per_source.max_sources = share(c.per_source.max_sources, index, workers);
        l.quench.max_sources = share(c.quench.max_sources, index, workers);
    }
    return l;
}

unsigned resolve_workers(unsigned configured) {
    return configured == 0 ? available_cpus(kMaxWorkers) : std::min(configured, kMaxWorkers);
}

Shards::Shards(boost::asio::io_context& main, const Config& config,
               std::shared_ptr<const Registry> registry)
    : main_(main) {
    const unsigned n = resolve_workers(config.workers);
    for (unsigned i = 0; i < n; ++i) {
        workers_.push_back(
            std::make_unique<Worker>(i, shard_limits(config, i, n), registry, random_seed()));
    }
}

Shards::~Shards() {
    stop();
}

void Shards::start() {
    for (auto& w : workers_) {
        w->start();
    }
    running_ = true;
}

void Shards::stop() {
    for (auto& w : workers_) {
        w->stop();
    }
    running_ = false;
}

void Shards::snapshots(std::function<void(Aggregate)> done) {
    ask<WorkerSnapshot>(
        [](Worker& w) { return w.snapshot(); },
        [done = std::move(done)](auto answers) { done(aggregate(std::move(answers))); });
}

void Shards::publish(std::shared_ptr<const Registry> registry, const Config* config,
                     std::function<void()> done) {
    std::shared_ptr<std::vector<Limits>> limits;
    if (config) {
        const auto n = static_cast<unsigned>(workers_.size());
        limits = std::make_shared<std::vector<Limits>>();
        for (unsigned i = 0; i < n; ++i) {
            limits->push_back(shard_limits(*config, i, n));
        }
    }
    ask<bool>(
        [registry, limits](Worker& w) {
            w.set_registry(registry);
            if (limits) {
                w.set_limits((*limits)[w.index()]);
            }
            return true;
        },
        [done = std::move(done)](auto) { done(); });
}

void Shards::reset_counters(std::function<void()> done) {
    ask<bool>(
        [](Worker& w) {
            w.reset_counters();
            return true;
        },
        [done = std::move(done)](auto) { done(); });
}

std::vector<unsigned> Shards::ping() {
    std::vector<unsigned> stuck;
    for (const auto& w : workers_) {
        if (w->last_pong() != ping_seq_) {
            stuck.push_back(w->index());
        }
    }
    const std::uint64_t seq = ++ping_seq_;
    for (auto& w : workers_) {
        Worker* worker = w.get();
        w->post([worker, seq] { worker->pong(seq); });
    }
    return stuck;
}

}  // namespace pmd::io
