// SPDX-License-Identifier: Apache-2.0
#include "pmclient/sockaddr.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pm {

socklen_t to_sockaddr(const Endpoint& e, sockaddr_storage& ss) {
    std::memset(&ss, 0, sizeof ss);
    if (e.address.is_v4()) {
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(e.port);
        std::memcpy(&sin.sin_addr, e.address.bytes().data(), 4);
        std::memcpy(&ss, &sin, sizeof sin);
        return sizeof sin;
    }
    sockaddr_in6 sin6{};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(e.port);
    std::memcpy(&sin6.sin6_addr, e.address.bytes().data(), 16);
    std::memcpy(&ss, &sin6, sizeof sin6);
    return sizeof sin6;
}

Endpoint from_sockaddr(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) {
        sockaddr_in sin{};
        std::memcpy(&sin, &ss, sizeof sin);
        std::array<std::uint8_t, 4> b{};
        std::memcpy(b.data(), &sin.sin_addr, 4);
        return Endpoint{IpAddress::v4(b), ntohs(sin.sin_port)};
    }
    if (ss.ss_family == AF_INET6) {
        sockaddr_in6 sin6{};
        std::memcpy(&sin6, &ss, sizeof sin6);
        std::array<std::uint8_t, 16> b{};
        std::memcpy(b.data(), &sin6.sin6_addr, 16);
        return Endpoint{IpAddress::v6(b).unmapped(), ntohs(sin6.sin6_port)};
    }
    return Endpoint{};
}

int connect_nonblocking(int fd, const Endpoint& to, std::chrono::milliseconds timeout) {
    int flags = ::fcntl(fd, F_GETFL, 0);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        return errno;
    }
    sockaddr_storage ss;
    socklen_t len = to_sockaddr(to, ss);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
        return 0;
    }
    int err = errno;
    if (err != EINPROGRESS) {
        return err;
    }
    pollfd p{fd, POLLOUT, 0};
    int n = 0;
    do {
        n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
        return ETIMEDOUT;
    }
    if (n < 0) {
        return errno;
    }
    socklen_t elen = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) {
        return errno;
    }
    return err;
}

int route_source(const IpAddress& to, IpAddress& out) {
    int fd = ::socket(to.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    sockaddr_storage ss;
    socklen_t len = to_sockaddr(Endpoint{to, 9}, ss);
    int err = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        err = errno;
    } else {
        sockaddr_storage local;
        socklen_t llen = sizeof local;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
            err = errno;
        } else {
            out = from_sockaddr(local).address;
        }
    }
    ::close(fd);
    return err;
}

}  // namespace pm
