// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/worker.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <system_error>
#include <variant>

#include "daemon/io/log.hpp"

namespace pmd::io {

namespace asio = boost::asio;

namespace {

// Batches drained per readiness wakeup before yielding to the other sockets,
// the timer and posted work (registry updates, snapshots, watchdog pings).
constexpr int kMaxBatchesPerWakeup = 8;

LogLevel level_of(Outcome o) {
    switch (o) {
        case Outcome::denied_no_service:
        case Outcome::denied_not_allowed:
        case Outcome::denied_no_address:
        case Outcome::denied_unavailable:
        case Outcome::denied_open_failed:
            return LogLevel::info;
        case Outcome::denied_pool_exhausted:
        case Outcome::drop_rate_limited:
        case Outcome::drop_quenched:
            // The flood alarm of section 15.2.1: a source beyond its bounds.
            // Rate-limited per cause like every other line, with the rest
            // summarised as "suppressed N messages".
            return LogLevel::warning;
        default:
            return LogLevel::debug;
    }
}

// "PMReq 127.0.0.1:80 CpIPAddr 127.0.0.1 CpPort 4000 AssocHandle 0x2a"
std::string describe(std::span<const std::uint8_t> bytes, std::size_t length) {
    if (bytes.size() != length) {
        return std::to_string(length) + " bytes";  // truncated: not a message anyway
    }
    auto d = pm::decode(bytes);
    if (const auto* m = std::get_if<pm::Message>(&d)) {
        std::ostringstream os;
        os << pm::to_string(m->type) << ' ' << pm::Endpoint{m->ap_addr, m->ap_port}.to_string()
           << " CpIPAddr " << m->cp_addr.to_string() << " CpPort " << m->cp_port
           << " AssocHandle 0x" << std::hex << m->assoc_handle;
        return os.str();
    }
    return std::to_string(length) + " bytes";
}

void log_outcome(const Received& r, Outcome outcome, TimePoint now) {
    const LogLevel level = level_of(outcome);
    if (!log::logger().enabled(level)) {
        return;  // the common case: no lock, nothing formatted
    }
    log::logger().limited(
        level, to_string(outcome),
        [&] {
            return std::string(to_string(outcome)) + ": " + describe(r.bytes, r.length) + " from " +
                   r.source.to_string() + " to " + r.local.to_string();
        },
        now);
}

}  // namespace

Worker::Worker(unsigned index, Limits limits, std::shared_ptr<const Registry> registry,
               std::uint64_t seed)
    : index_(index),
      guard_(asio::make_work_guard(io_)),
      pmsp_(std::make_unique<Pmsp>(limits, std::move(registry), seed)),
      rx_(std::make_unique<RxBatch>()),
      tx_(std::make_unique<TxBatch>()),
      timer_(io_) {}

Worker::~Worker() {
    stop();
}

void Worker::start() {
    if (thread_.joinable()) {
        return;
    }
    // Signals belong to the main thread (asio::signal_set there): the worker
    // starts with every signal blocked, so none interrupts its system calls.
    sigset_t all;
    sigset_t old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    thread_ = std::thread([this] {
        // "sdp-pmd-w<N>" in top -H, ps -L and /proc/<pid>/task/<tid>/comm
        // (the kernel keeps at most 15 characters).
        char name[16];
        std::snprintf(name, sizeof name, "sdp-pmd-w%u", index_);
        pthread_setname_np(pthread_self(), name);
        try {
            io_.run();
        } catch (const std::exception& e) {
            log::err("worker " + std::to_string(index_) + ": fatal: " + e.what());
        }
    });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void Worker::stop() {
    if (thread_.joinable()) {
        post([this] {
            shutdown();
            guard_.reset();
        });
        thread_.join();
    } else {
        shutdown();
    }
}

void Worker::shutdown() {
    stopping_ = true;
    for (auto& s : sockets_) {
        s->close();
    }
    timer_.cancel();
}

void Worker::add_socket(std::shared_ptr<UdpSocket> s) {
    if (stopping_) {
        s->close();
        return;
    }
    sockets_.push_back(s);
    wait_readable(s);
}

void Worker::remove_socket(const std::shared_ptr<UdpSocket>& s) {
    s->close();
    std::erase(sockets_, s);
}

void Worker::set_limits(const Limits& l) {
    pmsp_->set_limits(l);
    arm_timer();  // a lower max_transactions may have shed; deadlines may differ
}

WorkerSnapshot Worker::snapshot() const {
    WorkerSnapshot s;
    s.counters = pmsp_->counters();
    s.shell = shell_;
    s.transactions = pmsp_->transactions();
    s.sockets = sockets_.size();
    return s;
}

void Worker::reset_counters() {
    pmsp_->reset_counters();
    shell_ = {};
}

void Worker::wait_readable(const std::shared_ptr<UdpSocket>& s) {
    // The handler holds the socket: a socket closed by a reload or stop stays
    // valid until its handler has run and seen it closed.
    s->socket().async_wait(
        asio::ip::udp::socket::wait_read, [this, s](const boost::system::error_code& ec) {
            if (stopping_ || !s->is_open() || ec == asio::error::operation_aborted) {
                return;
            }
            if (ec) {
                ++shell_.receive_errors;
                log::logger().limited(LogLevel::warning, "wait_error", [&] {
                    return "waiting on UDP " + s->endpoint().to_string() + ": " + ec.message();
                });
            } else {
                on_readable(s);
            }
            if (!stopping_ && s->is_open()) {
                wait_readable(s);
            }
        });
}

void Worker::on_readable(const std::shared_ptr<UdpSocket>& sp) {
    UdpSocket& s = *sp;
    for (int round = 0; round < kMaxBatchesPerWakeup; ++round) {
        int n = s.receive(*rx_);
        if (n < 0) {
            ++shell_.receive_errors;
            log::logger().limited(LogLevel::warning, "receive_error", [&] {
                return "receiving on UDP " + s.endpoint().to_string() + ": " +
                       std::generic_category().message(-n);
            });
            break;
        }
        if (n == 0) {
            break;
        }
        const TimePoint now = std::chrono::steady_clock::now();
        const bool v6 = s.is_v6();
        for (const Received& r : rx_->received()) {
            if (r.truncated()) {
                ++shell_.truncated;
            }
            Result res = pmsp_->on_datagram(r.bytes, r.source, r.local, now);
            if (res.reply) {
                tx_->add(*res.reply, r, v6);
            }
            if (res.pool) {
                to_pool(res, r, sp);
            }
            log_outcome(r, res.outcome, now);
        }
        if (tx_->size() > 0) {
            auto sent = s.send(*tx_);
            if (sent.failed > 0) {
                shell_.send_errors += sent.failed;
                log::logger().limited(LogLevel::warning, "send_error", [&] {
                    return "sending on UDP " + s.endpoint().to_string() + ": " +
                           std::generic_category().message(sent.last_errno);
                });
            }
        }
        if (static_cast<std::size_t>(n) < kBatchSize) {
            break;
        }
    }
    arm_timer();
}

void Worker::to_pool(Result& r, const Received& from, const std::shared_ptr<UdpSocket>& s) {
    std::uint64_t token = 0;
    if (r.pool->kind == PoolNote::Kind::open) {
        token = next_token_++;
        Received to = from;
        to.bytes = {};  // the receive buffer is reused
        waiting_.emplace(token, Waiting{r.pool->service, r.pool->request, to, s});
    }
    if (pool_sink_) {
        pool_sink_(index_, std::move(*r.pool), token);
    } else if (token != 0) {
        // No pool (a test shell): the open fails, after this batch's
        // replies went out (port_answer() uses the same send batch).
        post([this, token] { port_answer(token, std::nullopt, Outcome::denied_open_failed); });
    }
}

void Worker::port_answer(std::uint64_t token, std::optional<std::uint16_t> port, Outcome deny) {
    auto it = waiting_.find(token);
    if (it == waiting_.end() || stopping_) {
        return;
    }
    Waiting w = std::move(it->second);
    waiting_.erase(it);
    const TimePoint now = std::chrono::steady_clock::now();
    PortResult res = pmsp_->on_port(w.request, port, deny, now);
    if (res.orphan && port && pool_sink_) {
        // The transaction went (superseded, timed out) before its port
        // came: the listener is not needed.
        pool_sink_(index_, PoolNote{PoolNote::Kind::cancel, w.service, w.request, *port}, 0);
    }
    auto s = w.socket.lock();
    if (res.reply && s && s->is_open()) {
        tx_->clear();
        tx_->add(*res.reply, w.to, s->is_v6());
        auto sent = s->send(*tx_);
        if (sent.failed > 0) {
            shell_.send_errors += sent.failed;
        }
    }
    if (res.reply) {
        log_outcome(w.to, res.outcome, now);
    }
    arm_timer();
}

void Worker::arm_timer() {
    auto next = pmsp_->next_deadline();
    if (!next || stopping_) {
        return;  // an armed timer that is no longer needed fires harmlessly
    }
    if (timer_deadline_ && *timer_deadline_ <= *next) {
        return;
    }
    timer_deadline_ = *next;
    timer_.expires_at(*next);  // cancels the previous wait
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec == asio::error::operation_aborted || stopping_) {
            return;
        }
        on_timer();
    });
}

void Worker::on_timer() {
    timer_deadline_.reset();
    std::size_t released = pmsp_->on_timer(std::chrono::steady_clock::now());
    if (released > 0) {
        log::logger().limited(LogLevel::debug, "ack_timeout", [&] {
            return "released " + std::to_string(released) + " transactions without PMAck";
        });
    }
    arm_timer();
}

}  // namespace pmd::io
