// SPDX-License-Identifier: Apache-2.0
// One UDP worker shard of sdp-pmd: a thread running its own io_context, its
// own socket per listen endpoint (members of SO_REUSEPORT groups, steered by
// source address, see io/reuseport.hpp) and its own sans-I/O pmd::Pmsp
// (transactions, duplicate detection, PMAck timers, per-source limiter and
// quench state). The packet path takes no lock and shares no mutable state
// with other threads except the registry's relaxed per-service counters.
//
// Everything that touches the Pmsp or the sockets runs on the worker's
// thread: the main thread hands work over with post() (a new registry, new
// limits, new sockets, a counter snapshot) and waits for answers with a
// bounded wait (Server::on_workers).
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/core/pmsp.hpp"
#include "daemon/io/udp_socket.hpp"

namespace pmd::io {

// What the shell itself counts, next to the core's Counters.
struct ShellCounters {
    std::uint64_t receive_errors = 0;
    std::uint64_t send_errors = 0;
    std::uint64_t truncated = 0;  // longer than the receive buffer (counted too_long)
    std::uint64_t reloads = 0;
    std::uint64_t reload_failures = 0;
};

// A worker's counters at one moment (taken on its thread).
struct WorkerSnapshot {
    Counters counters;
    ShellCounters shell;  // receive_errors, send_errors, truncated
    std::size_t transactions = 0;
    std::size_t sockets = 0;
};

class Worker {
  public:
    Worker(unsigned index, Limits limits, std::shared_ptr<const Registry> registry,
           std::uint64_t seed);
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    unsigned index() const { return index_; }
    boost::asio::io_context& io() { return io_; }

    // Starts the thread.
    void start();
    // Closes the sockets, cancels the timers and joins the thread. After
    // this the owner may read pmsp() and snapshot() directly.
    void stop();
    bool running() const { return thread_.joinable(); }

    // Runs f() on the worker's thread (any thread may call this).
    template <class F>
    void post(F&& f) {
        boost::asio::post(io_, std::forward<F>(f));
    }

    // --- on the worker's thread only (or after stop()) ---
    void add_socket(std::shared_ptr<UdpSocket> s);
    void remove_socket(const std::shared_ptr<UdpSocket>& s);
    // On-demand transactions: every PoolNote goes to `sink` (set before
    // start(); it posts to the main thread, which owns the pool). An open
    // carries a token that the main thread answers through port_answer().
    using PoolSink = std::function<void(unsigned worker, PoolNote note, std::uint64_t token)>;
    void set_pool_sink(PoolSink sink) { pool_sink_ = std::move(sink); }
    // The pool's answer to the open `token`: PMAccept with `port`, or
    // PMDeny for `deny`, sent from the socket the PMReq came in on.
    void port_answer(std::uint64_t token, std::optional<std::uint16_t> port, Outcome deny);
    // Opens waiting for the pool's answer.
    std::size_t waiting_opens() const { return waiting_.size(); }

    Pmsp& pmsp() { return *pmsp_; }
    const Pmsp& pmsp() const { return *pmsp_; }
    void set_registry(std::shared_ptr<const Registry> r) { pmsp_->set_registry(std::move(r)); }
    void set_limits(const Limits& l);
    WorkerSnapshot snapshot() const;
    void reset_counters();

    // Watchdog: the main thread posts pong(seq) and later checks
    // last_pong() == seq, which proves the loop turns.
    void pong(std::uint64_t seq) { pong_.store(seq, std::memory_order_release); }
    std::uint64_t last_pong() const { return pong_.load(std::memory_order_acquire); }

  private:
    void wait_readable(const std::shared_ptr<UdpSocket>& s);
    void on_readable(const std::shared_ptr<UdpSocket>& s);
    // Hands r.pool to the sink; an open remembers where to answer.
    void to_pool(Result& r, const Received& from, const std::shared_ptr<UdpSocket>& s);
    void arm_timer();
    void on_timer();
    void shutdown();

    unsigned index_;
    boost::asio::io_context io_{1};
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
    std::unique_ptr<Pmsp> pmsp_;
    std::vector<std::shared_ptr<UdpSocket>> sockets_;
    std::unique_ptr<RxBatch> rx_;
    std::unique_ptr<TxBatch> tx_;
    boost::asio::steady_timer timer_;
    std::optional<TimePoint> timer_deadline_;
    bool stopping_ = false;
    ShellCounters shell_;
    std::atomic<std::uint64_t> pong_{0};
    PoolSink pool_sink_;
    struct Waiting {
        std::string service;
        pm::Message request;
        Received to;  // bytes cleared
        std::weak_ptr<UdpSocket> socket;
    };
    std::unordered_map<std::uint64_t, Waiting> waiting_;
    std::uint64_t next_token_ = 1;
    std::thread thread_;
};

}  // namespace pmd::io
