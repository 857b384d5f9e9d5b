// SPDX-License-Identifier: Apache-2.0
// LoopDriver: resolutions driven by the caller's event loop, behind the C
// API's pmc_resolve_start / pmc_fds / pmc_timeout_ms / pmc_process (the
// model is c-ares: the library owns its sockets, the caller's loop waits and
// calls back in) (internal).
//
// It only moves bytes and time: one Machine (with the PmTime cache, the
// configuration and the PMSP setting of its Resolver), one non-blocking UDP
// socket per address family (opened on first use, kept until destruction),
// a queue of outcomes not yet delivered, and the callbacks. Every member may
// be called from any thread: the state is guarded by one mutex, which is
// never held while a callback runs, so a callback may call back in (start,
// cancel, process). A callback is never invoked from start().
#pragma once

#include <poll.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "machine.hpp"
#include "pmclient/resolver.hpp"

namespace pmclient::detail {

class LoopDriver {
  public:
    using Callback = std::function<void(std::uint64_t id, Result result)>;

    // Shares the cache, configuration and PMSP setting of `resolver`, which
    // must outlive the driver.
    explicit LoopDriver(const Resolver& resolver);
    // Closes the sockets. Undelivered callbacks are dropped: call shutdown()
    // first.
    ~LoopDriver();
    LoopDriver(const LoopDriver&) = delete;
    LoopDriver& operator=(const LoopDriver&) = delete;

    // Starts a resolution whose outcome, whatever it is (early errors and
    // cache hits included), goes to `cb` from a later process(), cancel() or
    // shutdown(). Returns its id (never 0), or 0 after shutdown() (cb is
    // dropped).
    std::uint64_t start(const ResolveRequest& req, Callback cb);
    // As start(), for a request already known to fail (an argument the
    // caller could not even parse): `r` goes to `cb` the same way.
    std::uint64_t start_failed(Result r, Callback cb);

    // Fills out[0 .. min(n, count)) with {fd, POLLIN, 0}; returns count.
    std::size_t fds(pollfd* out, std::size_t n) const;
    // Milliseconds until the machine's next timer (rounded up); 0 when due
    // or when an outcome waits for delivery; -1 when there is nothing.
    int timeout_ms() const;

    // Reads what is queued on the given descriptors that are ours and have
    // revents set, runs the timers that are due, delivers the outcomes.
    void process(const pollfd* fds, std::size_t n);

    // Delivers the outcome of `id` now: the known one, else Errc::cancelled.
    // False when `id` awaits no callback.
    bool cancel(std::uint64_t id);
    // Cancels everything, delivers every outcome; start() refuses afterwards.
    void shutdown();

    // Started and not yet delivered.
    std::size_t pending() const;
    // The machine's counters plus the driver's own (socket errors, early
    // errors).
    Counters counters() const;

  private:
    struct Outcome {
        std::uint64_t id = 0;
        Result result;
    };

    int& fd_of(pm::Family f) { return fds_[f == pm::Family::v4 ? 0 : 1]; }
    // The following are called with mu_ held.
    void apply();
    // Queues an outcome known before the machine is involved; returns its id.
    std::uint64_t fail(Result r, Callback cb);
    void drain(int fd);
    // Takes one outcome (of `id`, or the first when id is 0) and its callback
    // out of the queue; false when there is none.
    bool take(std::uint64_t id, Outcome& o, Callback& cb);
    // Invokes the queued outcomes one at a time, without the lock.
    void deliver();

    const Resolver& resolver_;
    mutable std::mutex mu_;
    Machine machine_;
    std::array<int, 2> fds_{-1, -1};                         // v4, v6
    std::unordered_map<std::uint64_t, Callback> callbacks_;  // started, not delivered
    std::deque<Outcome> ready_;                              // known, not delivered
    Counters own_;                  // socket errors and early errors (no machine involved)
    std::uint64_t next_early_ = 0;  // ids of early errors: high bit set, no clash with TxnId
    bool closed_ = false;
    Actions out_;
    std::array<std::uint8_t, 2048> buf_{};
};

}  // namespace pmclient::detail
