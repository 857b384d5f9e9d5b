// Small socket helpers shared by the resolver and the connect helper
// (internal).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"

namespace pmclient::detail {

inline int family_of(const pm::IpAddress& a) {
    return a.is_v4() ? AF_INET : AF_INET6;
}

// The source address the kernel picks towards `to` (a UDP socket connected
// to `to`, nothing sent). Returns 0 or an errno value.
inline int route_source(const pm::IpAddress& to, pm::IpAddress& out) {
    int fd = ::socket(family_of(to), SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    sockaddr_storage ss;
    socklen_t len = pm::to_sockaddr(pm::Endpoint{to, 9}, ss);
    int err = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        err = errno;
    } else {
        sockaddr_storage local;
        socklen_t llen = sizeof local;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
            err = errno;
        } else {
            out = pm::from_sockaddr(local).address;
        }
    }
    ::close(fd);
    return err;
}

}  // namespace pmclient::detail
