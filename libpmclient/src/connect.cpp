#include "pmclient/connect.hpp"

#include "net_util.hpp"
#include "pmclient/sockaddr.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pmclient {

namespace {

using pm::from_sockaddr;
using pm::to_sockaddr;

using detail::family_of;
using detail::route_source;

// A TCP socket bound to addr:0. Returns fd or -errno.
int bound_socket(const pm::IpAddress& addr, pm::Endpoint& local) {
    int fd = ::socket(family_of(addr), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    sockaddr_storage ss;
    socklen_t len = to_sockaddr(pm::Endpoint{addr, 0}, ss);
    sockaddr_storage got;
    socklen_t glen = sizeof got;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &glen) != 0) {
        int err = errno;
        ::close(fd);
        return -err;
    }
    local = from_sockaddr(got);
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

ConnectResult connect(BlockingResolver& resolver, const pm::Endpoint& conventional_in,
                      std::optional<pm::IpAddress> cp_addr, const ConnectOptions& options) {
    ConnectResult res;
    const pm::Endpoint conventional{conventional_in.address.unmapped(), conventional_in.port};
    auto fail = [&](Errc e, int err, std::string why) {
        res.resolution.kind = ResultKind::error;
        res.resolution.error = e;
        res.resolution.reason = why;
        res.sys_errno = err;
        res.reason = std::move(why);
        return res;
    };
    if (conventional.port == 0 || conventional.address.is_unspecified()) {
        return fail(Errc::invalid_argument, EINVAL,
                    "Conventional Address needs a specified IP address and a non-zero port");
    }
    if (options.connect_timeout.count() <= 0 || options.connect_timeout.count() > 600'000) {
        return fail(Errc::invalid_argument, EINVAL, "connect_timeout must be 1 ms .. 10 min");
    }
    pm::IpAddress cp;
    if (cp_addr && !cp_addr->is_unspecified()) {
        cp = cp_addr->unmapped();
        if (cp.family() != conventional.address.family()) {
            return fail(Errc::invalid_argument, EINVAL,
                        "CpIPAddr and ApIPAddr must be the same IP version");
        }
    } else if (int err = route_source(conventional.address, cp); err != 0) {
        return fail(Errc::socket, err,
                    "no route to " + conventional.address.to_string() + ": " + std::strerror(err));
    }

    pm::Endpoint local;
    int fd = bound_socket(cp, local);
    if (fd < 0) {
        return fail(Errc::socket, -fd,
                    std::string("cannot bind TCP socket: ") + std::strerror(-fd));
    }
    ResolveRequest req{conventional, local, options.request};
    res.resolution = resolver.resolve(req);
    const Result& r = res.resolution;
    if (r.kind == ResultKind::error) {
        ::close(fd);
        res.sys_errno = 0;
        res.reason = r.reason;
        return res;
    }
    if (r.kind == ResultKind::accepted) {
        int err = connect_timeout(fd, r.sdp, options.connect_timeout);
        if (err == 0) {
            res.fd = fd;
            res.used_sdp = true;
            res.peer = r.sdp;
            res.local = local;
            res.reason = "connected to SDP Address";
            return res;
        }
        ::close(fd);
        fd = -1;
        if (err != ECONNREFUSED && err != ECONNRESET && err != ETIMEDOUT) {
            res.sys_errno = err;
            res.reason = "connect to SDP Address " + r.sdp.to_string() + ": " + std::strerror(err);
            return res;
        }
        // 7.5.1: a reset from the SDP Address counts as a PMDeny. Forget a
        // cached answer that no longer works.
        resolver.resolver().flush_cache(conventional);
        res.reason = "SDP Address " + r.sdp.to_string() + ": " + std::strerror(err) +
                     "; fell back to the Conventional Address";
    } else {
        ::close(fd);
        fd = -1;
        res.reason = std::string(r.kind == ResultKind::denied ? "PMDeny" : "PM timeout") +
                     "; fell back to the Conventional Address";
    }

    fd = bound_socket(cp, local);
    if (fd < 0) {
        res.sys_errno = -fd;
        res.reason = std::string("cannot bind TCP socket: ") + std::strerror(-fd);
        return res;
    }
    if (int err = connect_timeout(fd, conventional, options.connect_timeout); err != 0) {
        ::close(fd);
        res.sys_errno = err;
        res.reason += std::string("; connect to Conventional Address ") + conventional.to_string() +
                      ": " + std::strerror(err);
        return res;
    }
    res.fd = fd;
    res.used_sdp = false;
    res.peer = conventional;
    res.local = local;
    return res;
}

}  // namespace pmclient
