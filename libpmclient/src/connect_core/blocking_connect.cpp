// SPDX-License-Identifier: Apache-2.0
#include "blocking_connect.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "pmclient/sockaddr.hpp"

namespace pmclient {

namespace {

std::error_code errno_code(int e) {
    return {e, std::generic_category()};
}

int tcp_socket(const pm::IpAddress& a) {
    int fd = ::socket(a.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd >= 0 ? fd : -errno;
}

// A TCP socket bound to addr:0. Returns fd or -errno.
int bound_socket(const pm::IpAddress& addr, pm::Endpoint& local) {
    int fd = tcp_socket(addr);
    if (fd < 0) {
        return fd;
    }
    sockaddr_storage ss;
    socklen_t len = pm::to_sockaddr(pm::Endpoint{addr, 0}, ss);
    sockaddr_storage got;
    socklen_t glen = sizeof got;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &glen) != 0) {
        int err = errno;
        ::close(fd);
        return -err;
    }
    local = pm::from_sockaddr(got);
    return fd;
}

// Connects with a timeout and gives the socket back in blocking mode.
// Returns 0 or an errno value (ETIMEDOUT on timeout).
int connect_timeout(int fd, const pm::Endpoint& to, std::chrono::milliseconds timeout) {
    int flags = ::fcntl(fd, F_GETFL, 0);
    if (flags < 0) {
        return errno;
    }
    int err = pm::connect_nonblocking(fd, to, timeout);
    if (err == 0 && ::fcntl(fd, F_SETFL, flags) != 0) {
        err = errno;
    }
    return err;
}

}  // namespace

BlockingConnect::~BlockingConnect() {
    close_fd();
}

void BlockingConnect::close_fd() {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

int BlockingConnect::release_fd() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
}

BlockingConnect::BindOutcome BlockingConnect::bind(const pm::IpAddress& cp) {
    close_fd();
    const int fd = bound_socket(cp, local_);
    if (fd < 0) {
        return {errno_code(-fd), {}, false};
    }
    fd_ = fd;
    return {};
}

std::error_code BlockingConnect::connect_fd(const pm::Endpoint& to) {
    ShutdownOnStop guard(stop_, fd_);
    if (stop_.stop_requested()) {  // came before the guard: no SYN at all
        return std::make_error_code(std::errc::operation_canceled);
    }
    return errno_code(connect_timeout(fd_, to, timeout_));
}

std::error_code BlockingConnect::connect(const pm::Endpoint& sdp_address, std::string&) {
    return connect_fd(sdp_address);
}

std::error_code BlockingConnect::handshake(std::string&) {
    return {};
}

std::error_code BlockingConnect::fallback(const ConnectProcedure::Action& a, std::string& why) {
    close_fd();
    const int fd = a.bind_cp ? bound_socket(a.address, local_) : tcp_socket(a.endpoint.address);
    if (fd < 0) {
        const auto ec = errno_code(-fd);
        why = "cannot bind TCP socket: " + ec.message();
        return ec;
    }
    fd_ = fd;
    return connect_fd(a.endpoint);
}

template <typename Step, typename Cancelled>
auto BlockingConnect::stopped_or(Step&& step, Cancelled&& cancelled) -> decltype(step()) {
    decltype(step()) r{};
    if (!stop_.stop_requested()) {
        r = step();
    }
    if (stop_.stop_requested()) {  // before, or while it ran (it may have succeeded)
        return cancelled();
    }
    return r;
}

ShutdownOnStop::ShutdownOnStop(std::stop_token stop, int fd)
    : dup_(stop.stop_possible() && fd >= 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1) {
    if (dup_ >= 0) {
        cb_.emplace(std::move(stop), Shut{dup_});
    }
}

ShutdownOnStop::~ShutdownOnStop() {
    cb_.reset();  // waits for a callback running on another thread
    if (dup_ >= 0) {
        ::close(dup_);
    }
}

const ConnectProcedure::Action& BlockingConnect::run(ConnectProcedure& proc) {
    using Step = ConnectProcedure::Step;
    for (const auto* a = &proc.start();;) {
        if (a->flush_cache) {
            flush_cache(proc.conventional());
        }
        std::string why;
        const auto cancelled = [&why] {
            why = kCancelled;
            return std::make_error_code(std::errc::operation_canceled);
        };
        switch (a->step) {
            case Step::route: {
                pm::IpAddress cp;
                const int err = pm::route_source(a->address, cp);
                a = &proc.on_route(err, cp);
                break;
            }
            case Step::bind: {
                const auto b = bind(a->address);
                a = b.ec ? &proc.on_bind_failed(b.ec, b.why, b.provider_unusable)
                         : &proc.on_bound(local_);
                break;
            }
            case Step::resolve: {
                const Result r = stopped_or([&] { return resolve(a->endpoint, a->local); },
                                            [] {
                                                Result c;
                                                c.kind = ResultKind::error;
                                                c.error = Errc::cancelled;
                                                c.reason = kCancelled;
                                                return c;
                                            });
                a = &proc.on_resolved(r);
                break;
            }
            case Step::connect: {
                const auto ec = stopped_or([&] { return connect(a->endpoint, why); }, cancelled);
                a = &proc.on_connected(ec, why);
                break;
            }
            case Step::handshake: {
                const auto ec = stopped_or([&] { return handshake(why); }, cancelled);
                a = &proc.on_handshake(ec, why);
                break;
            }
            case Step::fallback: {
                const auto ec = stopped_or([&] { return fallback(*a, why); }, cancelled);
                a = &proc.on_fallback(ec, why);
                break;
            }
            case Step::done:
                return *a;
            case Step::failed:
                close_fd();
                return *a;
        }
    }
}

}  // namespace pmclient
