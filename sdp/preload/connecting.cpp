// SPDX-License-Identifier: Apache-2.0
#include "sdp/preload/connecting.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_set>
#include <utility>

#include "sdp/preload/bridge.hpp"

namespace sdp::preload {
namespace {

int errno_of(std::error_code ec) {
    if (ec.category() == std::generic_category() || ec.category() == std::system_category()) {
        return ec.value() != 0 ? ec.value() : ECONNREFUSED;
    }
    return ECONNREFUSED;
}

// The entry of an SDP connection made from the candidate's (its socket
// options): getpeername() reports the address the program asked for,
// getsockname() the local address of the SDP connection's TCP socket.
std::shared_ptr<Entry> sdp_entry(const Entry& base, std::shared_ptr<Bridge> bridge,
                                 const sockaddr* addr, socklen_t len) {
    auto e = std::make_shared<Entry>(base);
    e->kind = Entry::Kind::sdp;
    e->connecting.reset();
    std::memcpy(&e->peer, addr, std::min<std::size_t>(len, sizeof e->peer));
    e->peer_len = std::min<socklen_t>(len, sizeof e->peer);
    e->local_len = sockaddr_of(local_of(bridge->stream().native_handle()).value_or(pm::Endpoint{}),
                               e->family, e->local);
    e->bridge = std::move(bridge);
    return e;
}

void count_sdp(const pm::Endpoint& dest, const std::string& provider) {
    ++counters().connect_sdp;
    log(2, "connect %s: SDP (%s)", dest.to_string().c_str(), provider.c_str());
    write_stats();
}

void count_unusable(const pm::Endpoint& dest, int err) {
    log(1, "connect %s: cannot set up the SDP descriptor: %s", dest.to_string().c_str(),
        std::strerror(err));
    ++counters().connect_failed;
    write_stats();
}

// An SDP attempt that gave no SDP connection, counted and logged: the
// errno for an `sdp` rule, 0 for a fallback to TCP (`both`).
int not_sdp(const Stream& st, std::error_code ec, const pm::Endpoint& dest, const Decision& d) {
    const std::string why =
        ec ? ec.message() + (st.info().reason.empty() ? "" : ": ") + st.info().reason : "not SDP";
    if (d.use == Use::sdp) {
        ++counters().connect_failed;
        log(1, "connect %s: SDP failed (rule line %d: sdp only): %s", dest.to_string().c_str(),
            d.line, why.c_str());
        write_stats();
        return errno_of(ec);
    }
    ++counters().connect_fallback;
    if (st.info().resolution == "timeout") {
        remember_pm_silent(dest.address);
    }
    log(2, "connect %s: TCP (%s)", dest.to_string().c_str(), why.c_str());
    write_stats();
    return 0;
}

// A blocking socket: the whole procedure inside connect().
std::optional<int> connect_blocking(int fd, const std::shared_ptr<Entry>& cand,
                                    const pm::Endpoint& dest, const sockaddr* addr, socklen_t len,
                                    const Decision& d) {
    // Threads the connect and the bridge start block every signal.
    SignalsBlocked quiet;
    Stream st;
    std::error_code ec;
    {
        InternalScope in;
        ec = st.connect(dest, stream_options(cand.get()));
    }
    if (!ec && st.used() == Transport::sdp) {
        InternalScope in;
        const int fdfl = real().fcntl(fd, F_GETFD);
        const int fl = real().fcntl(fd, F_GETFL);
        const std::string provider = st.info().provider;
        int app = -1;
        auto bridge = Bridge::create(std::move(st), &app);
        // keepalive came with the options
        if (bridge && install(fd, app, (fdfl & FD_CLOEXEC) != 0, (fl & O_NONBLOCK) != 0, cand,
                              sdp_entry(*cand, bridge, addr, len))) {
            bridge->start();
            count_sdp(dest, provider);
            return 0;
        }
        const int err = errno;
        close_internal(app);  // the bridge, never started, goes with it
        count_unusable(dest, err);
        errno = err;
        return -1;
    }
    if (const int err = not_sdp(st, ec, dest, d)) {
        errno = err;
        return -1;
    }
    fds().take(fd);
    return std::nullopt;
}

// Every Connecting whose thread runs in this process.
LiveSet<Connecting>& registry() {
    return LiveSet<Connecting>::instance();
}

// Waits for fd to poll `events` (or cancel_fd readable) at most `limit`:
// the revents of fd, 0 on timeout, -1 when cancelled.
int wait_for(int fd, short events, int cancel_fd, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return 0;
        }
        pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
        const int n = ::poll(p, 2, static_cast<int>(std::min<std::int64_t>(left.count(), 60000)));
        if (n < 0 && errno != EINTR) {
            return POLLERR;
        }
        if (n > 0 && p[1].revents != 0) {
            return -1;
        }
        if (n > 0 && p[0].revents != 0) {
            return p[0].revents;
        }
    }
}

}  // namespace

std::optional<int> connect_sdp(int fd, const std::shared_ptr<Entry>& cand, const pm::Endpoint& dest,
                               const sockaddr* addr, socklen_t len, const Decision& d) {
    const int fl = real().fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK) != 0) {
        if (auto r = Connecting::start(fd, cand, dest, addr, len, d)) {
            return r;
        }
    }
    return connect_blocking(fd, cand, dest, addr, len, d);
}

std::optional<int> Connecting::start(int fd, const std::shared_ptr<Entry>& cand,
                                     const pm::Endpoint& dest, const sockaddr* addr, socklen_t len,
                                     const Decision& d) {
    InternalScope in;
    SignalsBlocked quiet;  // the thread takes no signal of the program
    std::shared_ptr<Connecting> c(new Connecting);
    c->fd_ = fd;
    c->dest_ = dest;
    c->addr_len_ = std::min<socklen_t>(len, sizeof c->addr_);
    std::memcpy(&c->addr_, addr, c->addr_len_);
    c->decision_ = d;
    c->options_ = stream_options(cand.get());
    c->options_.stop = c->stop_.get_token();
    auto undo = [&] {
        for (int* p : {&c->x_, &c->app_, &c->pump_, &c->cancel_}) {
            close_internal(*p);
            *p = -1;
        }
        return std::nullopt;
    };
    if (!Bridge::make_pair(&c->app_, &c->pump_)) {
        return std::nullopt;
    }
    c->cancel_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->cancel_ >= 0) {
        track_internal(c->cancel_);
    }
    c->x_ = real().fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (c->x_ >= 0) {
        track_internal(c->x_);
    }
    const int fdfl = real().fcntl(fd, F_GETFD);
    if (c->cancel_ < 0 || c->x_ < 0 || fdfl < 0) {
        return undo();
    }
    // Not writable while in progress: the smallest send buffer, full.
    const int tiny = 1;
    real().setsockopt(c->app_, SOL_SOCKET, SO_SNDBUF, &tiny, sizeof tiny);
    static const char filler[4096] = {};
    for (int i = 0; i < 64; ++i) {
        const ssize_t n = ::send(c->app_, filler, sizeof filler, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0) {
            break;
        }
        c->filler_ += static_cast<std::size_t>(n);
    }
    struct stat st {};
    if (c->filler_ == 0 || ::fstat(c->app_, &st) != 0) {
        return undo();
    }
    c->y_dev_ = st.st_dev;
    c->y_ino_ = st.st_ino;
    auto e = std::make_shared<Entry>(*cand);
    e->kind = Entry::Kind::connecting;
    e->connecting = c;
    std::memcpy(&e->peer, addr, c->addr_len_);  // a forked child's getpeername()
    e->peer_len = c->addr_len_;
    c->entry_ = e;
    if (!install(fd, c->app_, (fdfl & FD_CLOEXEC) != 0, true, cand, e, true)) {
        return undo();
    }
    registry().add(c);
    try {
        std::thread([c] { c->run(); }).detach();
    } catch (const std::system_error&) {
        registry().remove(c);
        // The program's own socket goes back (with its O_NONBLOCK, which
        // the shared file status flags kept); nothing happened.
        if (fds().swap_file_all(e, c->x_, std::make_shared<Entry>(*cand)) == 0) {
            fds().take(fd);
        }
        return undo();
    }
    ++counters().connect_async;
    log(3, "connect %s: in progress (non-blocking)", dest.to_string().c_str());
    errno = EINPROGRESS;
    return -1;
}

void Connecting::run() {
    mark_internal_thread();
    Stream st;
    const std::error_code ec = st.connect(dest_, options_);
    if (cancelled()) {
        abandon(&st);
    } else if (!ec && st.used() == Transport::sdp) {
        if (!become_sdp(std::move(st))) {
            const int err = errno;
            count_unusable(dest_, err);
            hand_back(err, true);
        }
    } else if (const int err = not_sdp(st, ec, dest_, decision_)) {
        hand_back(err, true);
    } else {
        tcp_fallback();
    }
    ended();
}

bool Connecting::cancelled() {
    std::lock_guard lk(mu_);
    return cancelled_ || stop_.stop_requested();
}

bool Connecting::become_sdp(Stream st) {
    const auto e = entry_.lock();
    if (!e || !fds().holds(e)) {
        abandon(&st);
        return true;
    }
    const std::string provider = st.info().provider;
    auto bridge = Bridge::adopt(std::move(st), pump_, y_dev_, y_ino_);
    if (!bridge) {
        return false;
    }
    const int pump = std::exchange(pump_, -1);  // the bridge's now
    Entry base;  // with the options the program set while in progress
    {
        std::lock_guard lk(fds().mutex());
        base = *e;
    }
    auto ne = sdp_entry(base, bridge, reinterpret_cast<const sockaddr*>(&addr_), addr_len_);
    ne->connect_unreported = true;
    if (fds().replace(e, ne) == 0) {
        abandon(nullptr);  // closed meanwhile; the bridge, never started, goes
        return true;
    }
    {
        std::lock_guard lk(mu_);
        state_ = State::sdp;
        close_internal(x_);  // the program's unused socket (a bind() is released)
        x_ = -1;
    }
    // Y becomes writable (POLLOUT) with its deep buffer; the bridge takes
    // what the program writes from here on.
    Bridge::restore_app_buffer(app_);
    drain(pump);
    bridge->start();
    if (ne->keepalive) {
        bridge->set_keepalive(keepalive_of(*ne));  // also what was set while in progress
    }
    {
        std::lock_guard lk(mu_);
        close_internal(app_);
        app_ = -1;
    }
    count_sdp(dest_, provider);
    return true;
}

void Connecting::drain(int pump) const {
    std::vector<std::uint8_t> buf(4096);
    std::size_t left = filler_;
    while (left > 0) {
        const ssize_t n = ::recv(pump, buf.data(), std::min(left, buf.size()), MSG_DONTWAIT);
        if (n > 0) {
            left -= static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR) &&
            wait_for(pump, POLLIN, -1, std::chrono::milliseconds(1000)) > 0) {
            continue;
        }
        return;  // cannot happen: the filler is queued already
    }
}

void Connecting::tcp_fallback() {
    const int fl = real().fcntl(x_, F_GETFL);
    real().fcntl(x_, F_SETFL, fl | O_NONBLOCK);
    if (real().connect(x_, reinterpret_cast<const sockaddr*>(&addr_), addr_len_) == 0) {
        hand_back(0, false);
        return;
    }
    if (errno != EINPROGRESS) {
        hand_back(errno, true);  // ENETUNREACH, EADDRNOTAVAIL...: SO_ERROR says it
        return;
    }
    const int r = wait_for(x_, POLLOUT, cancel_, kTcpLimit);
    if (r < 0) {
        abandon(nullptr);
        return;
    }
    if (r == 0) {
        // Still in SYN_SENT: the attempt ends here (the socket is reusable).
        sockaddr unspec{};
        unspec.sa_family = AF_UNSPEC;
        real().connect(x_, &unspec, sizeof unspec);
        hand_back(ETIMEDOUT, true);
        return;
    }
    // The kernel's result stays in X's SO_ERROR for the program.
    hand_back(0, (r & (POLLERR | POLLHUP)) != 0);
}

void Connecting::hand_back(int error, bool failed) {
    const auto e = entry_.lock();
    if (!e) {
        abandon(nullptr);
        return;
    }
    auto next = std::make_shared<Entry>(*e);  // kind connecting: SO_ERROR, connect() end Y
    const int yfl = real().fcntl(app_, F_GETFL);
    const int xfl = real().fcntl(x_, F_GETFL);
    real().fcntl(x_, F_SETFL, (xfl & ~O_NONBLOCK) | (yfl & O_NONBLOCK));
    std::unique_lock lk(mu_);
    // X goes back at every number that holds the descriptor (dups made
    // while in progress too), with the epoll registrations made there.
    if (cancelled_ || fds().swap_file_all(e, x_, std::move(next)) == 0) {
        lk.unlock();
        abandon(nullptr);
        return;
    }
    state_ = State::handed_back;
    error_ = error;
    close_internal(x_);
    x_ = -1;
    // Y tells an epoll set that registered it under this number: POLLOUT
    // (filler out), or POLLIN|POLLOUT|POLLERR|POLLHUP as a failed TCP
    // connect (its peer end closed).
    if (failed) {
        close_internal(pump_);
        pump_ = -1;
    } else {
        drain(pump_);
    }
    cv_.wait_for(lk, kGhostLinger, [&] { return released_ || cancelled_; });
    release_ghost_locked();
}

void Connecting::release_ghost_locked() {
    released_ = true;
    close_internal(app_);
    close_internal(pump_);
    app_ = pump_ = -1;
    cv_.notify_all();
}

void Connecting::abandon(Stream* st) {
    if (st != nullptr && st->is_open()) {
        st->abort();
    }
    std::lock_guard lk(mu_);
    state_ = State::done;
    for (int* p : {&x_, &app_, &pump_}) {
        close_internal(*p);
        *p = -1;
    }
    if (!std::exchange(abandon_counted_, true)) {
        ++counters().connect_abandoned;
    }
    log(3, "connect %s: closed by the program while in progress", dest_.to_string().c_str());
    write_stats();
}

void Connecting::ended() {
    {
        std::lock_guard lk(mu_);
        if (state_ == State::handed_back) {
            released_ = true;
        } else if (state_ == State::running) {
            state_ = State::done;
        }
        for (int* p : {&x_, &app_, &pump_, &cancel_}) {
            close_internal(*p);
            *p = -1;
        }
    }
    registry().remove(shared_from_this());
}

std::optional<int> Connecting::take_error(const std::shared_ptr<Entry>& e) {
    std::unique_lock lk(mu_);
    if (state_ != State::handed_back) {
        return std::nullopt;
    }
    release_ghost_locked();
    const int err = std::exchange(error_, 0);
    const bool reusable = decision_.use == Use::sdp;
    lk.unlock();
    // `sdp`: the unconnected socket may connect again (over SDP); `both`:
    // the program's TCP socket, the library's no longer.
    std::shared_ptr<Entry> after;
    if (reusable) {
        after = std::make_shared<Entry>(*e);
        after->kind = Entry::Kind::candidate;
        after->connecting.reset();
    }
    fds().replace(e, after);
    return err;
}

void Connecting::closed() {
    {
        std::lock_guard lk(mu_);
        cancelled_ = true;  // before the stop: its operation_canceled must read as cancelled
        if (cancel_ >= 0) {
            const std::uint64_t one = 1;
            [[maybe_unused]] auto w = ::write(cancel_, &one, sizeof one);
        }
        cv_.notify_all();
    }
    // The Port Mapper question, TCP connect or SDP startup in progress ends
    // now: nothing connects to the peer for a descriptor already closed.
    stop_.request_stop();
}

void Connecting::finish_all() {
    // Nothing waits for the threads: their results are discarded; one
    // still asking the Port Mapper or connecting stops at once (closed();
    // an rdma connect runs out its bound), and the process ends them.
    // Those still running count as abandoned now, for the counters written
    // at exit.
    auto& r = registry();
    std::lock_guard lk(r.mu);
    for (const auto& c : r.live) {
        c->closed();
        std::lock_guard clk(c->mu_);
        if (c->state_ == State::running && !std::exchange(c->abandon_counted_, true)) {
            ++counters().connect_abandoned;
        }
    }
}

}  // namespace sdp::preload
