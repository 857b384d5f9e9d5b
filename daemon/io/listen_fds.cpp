// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/listen_fds.hpp"

#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "daemon/io/log.hpp"

namespace pmd::io {

InheritedSockets take_inherited_sockets() {
    InheritedSockets out;
    // unset_environment=1: $LISTEN_* would be wrong in any child. libsystemd
    // checks $LISTEN_PID against getpid() and sets FD_CLOEXEC on every fd.
    const int n = ::sd_listen_fds(1);
    if (n < 0) {
        log::warning(std::string("inherited sockets: sd_listen_fds: ") + std::strerror(-n) +
                     "; binding the configured addresses");
        return out;
    }
    for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; ++fd) {
        if (::sd_is_socket(fd, AF_INET, SOCK_DGRAM, -1) > 0 ||
            ::sd_is_socket(fd, AF_INET6, SOCK_DGRAM, -1) > 0) {
            out.udp.push_back(fd);
        } else if (!out.control && ::sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) > 0) {
            out.control = fd;
        } else {
            log::warning("inherited fd " + std::to_string(fd) +
                         " is neither a UDP socket nor a listening Unix stream socket; closed");
            ::close(fd);
        }
    }
    return out;
}

}  // namespace pmd::io
