// SPDX-License-Identifier: Apache-2.0
#include "loop_driver.hpp"

#include <unistd.h>

#include <climits>

#include "resolver_access.hpp"
#include "udp_socket.hpp"

namespace pmclient::detail {

namespace {

// Datagrams read per descriptor and process() call, so that a flood cannot
// hold off the timers; a level-triggered loop reports the rest again.
constexpr int kReadBatch = 64;
constexpr std::uint64_t kEarlyBit = std::uint64_t{1} << 63;

}  // namespace

LoopDriver::LoopDriver(const Resolver& resolver)
    : resolver_(resolver),
      machine_(ResolverAccess::machine_config(resolver), ResolverAccess::cache(resolver)) {
    machine_.set_random(&ResolverAccess::random);
}

LoopDriver::~LoopDriver() {
    for (int fd : fds_) {
        if (fd >= 0) {
            ::close(fd);
        }
    }
}

std::uint64_t LoopDriver::start(const ResolveRequest& req, Callback cb) {
    Query q;
    Result early = ResolverAccess::prepare(resolver_, req, q);  // may route: no lock held
    std::lock_guard lock(mu_);
    if (closed_) {
        return 0;
    }
    if (early.kind == ResultKind::error) {
        return fail(std::move(early), std::move(cb));
    }
    for (pm::Family f : pmsp_families(q)) {
        if (fd_of(f) >= 0) {
            continue;
        }
        std::string error;
        const int fd = open_udp_socket(f, error);
        if (fd < 0) {
            Result r;
            r.kind = ResultKind::error;
            r.error = Errc::socket;
            r.reason = std::move(error);
            r.pmsp = q.pmsp;
            return fail(std::move(r), std::move(cb));
        }
        fd_of(f) = fd;
    }
    out_.clear();
    const TxnId id = machine_.start(q, Clock::now(), ResolverAccess::random(), out_);
    callbacks_.emplace(id, std::move(cb));
    apply();
    return id;
}

std::uint64_t LoopDriver::start_failed(Result r, Callback cb) {
    std::lock_guard lock(mu_);
    return closed_ ? 0 : fail(std::move(r), std::move(cb));
}

std::uint64_t LoopDriver::fail(Result r, Callback cb) {
    const std::uint64_t id = kEarlyBit | ++next_early_;
    callbacks_.emplace(id, std::move(cb));
    ++own_.errors;
    ready_.push_back({id, std::move(r)});
    return id;
}

void LoopDriver::apply() {
    for (const auto& s : out_.sends) {
        const int fd = fd_of(s.to.address.family());
        if (fd < 0 || !send_datagram(fd, s.to, s.bytes)) {
            ++own_.send_errors;  // the retransmission timer recovers
        }
    }
    for (auto& c : out_.completions) {
        ready_.push_back({c.id, std::move(c.result)});
    }
    out_.clear();
}

std::size_t LoopDriver::fds(pollfd* out, std::size_t n) const {
    std::lock_guard lock(mu_);
    std::size_t count = 0;
    for (int fd : fds_) {
        if (fd < 0) {
            continue;
        }
        if (count < n) {
            out[count] = pollfd{fd, POLLIN, 0};
        }
        ++count;
    }
    return count;
}

int LoopDriver::timeout_ms() const {
    std::lock_guard lock(mu_);
    if (!ready_.empty()) {
        return 0;
    }
    const auto next = machine_.next_wakeup();
    if (!next) {
        return -1;
    }
    const auto left = *next - Clock::now();
    if (left <= Duration::zero()) {
        return 0;
    }
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void LoopDriver::drain(int fd) {
    for (int i = 0; i < kReadBatch; ++i) {
        pm::Endpoint from;
        auto bytes = receive_datagram(fd, buf_, from, own_.receive_errors);
        if (!bytes) {
            return;
        }
        machine_.on_datagram(*bytes, from, Clock::now(), out_);
        apply();
    }
}

void LoopDriver::process(const pollfd* fds, std::size_t n) {
    {
        std::lock_guard lock(mu_);
        for (std::size_t i = 0; fds != nullptr && i < n; ++i) {
            if (fds[i].fd >= 0 && fds[i].revents != 0 &&
                (fds[i].fd == fds_[0] || fds[i].fd == fds_[1])) {
                drain(fds[i].fd);
            }
        }
        const auto now = Clock::now();
        if (auto next = machine_.next_wakeup(); next && *next <= now) {
            machine_.on_timer(now, out_);
            apply();
        }
    }
    deliver();
}

bool LoopDriver::take(std::uint64_t id, Outcome& o, Callback& cb) {
    for (auto it = ready_.begin(); it != ready_.end(); ++it) {
        if (id != 0 && it->id != id) {
            continue;
        }
        o = std::move(*it);
        ready_.erase(it);
        if (auto c = callbacks_.find(o.id); c != callbacks_.end()) {
            cb = std::move(c->second);
            callbacks_.erase(c);
        }
        return true;
    }
    return false;
}

void LoopDriver::deliver() {
    for (;;) {
        Outcome o;
        Callback cb;
        {
            std::lock_guard lock(mu_);
            if (!take(0, o, cb)) {
                return;
            }
        }
        if (cb) {
            cb(o.id, std::move(o.result));
        }
    }
}

bool LoopDriver::cancel(std::uint64_t id) {
    Outcome o;
    Callback cb;
    {
        std::lock_guard lock(mu_);
        if (callbacks_.find(id) == callbacks_.end()) {
            return false;
        }
        // In flight: the machine completes it with Errc::cancelled. Already
        // known (queued): that outcome stands.
        machine_.cancel(id, Clock::now(), out_);
        apply();
        if (!take(id, o, cb)) {
            return false;  // not reached: a started id is in flight or queued
        }
    }
    if (cb) {
        cb(o.id, std::move(o.result));
    }
    return true;
}

void LoopDriver::shutdown() {
    {
        std::lock_guard lock(mu_);
        closed_ = true;
        machine_.cancel_all(Clock::now(), out_);
        apply();
    }
    deliver();
}

std::size_t LoopDriver::pending() const {
    std::lock_guard lock(mu_);
    return callbacks_.size();
}

Counters LoopDriver::counters() const {
    std::lock_guard lock(mu_);
    Counters c = machine_.counters();
    add(c, own_);
    return c;
}

}  // namespace pmclient::detail
