// SPDX-License-Identifier: Apache-2.0
// Non-blocking UDP sockets of the PM client's poll-driven shells (the
// blocking lanes and the loop driver of the C API) (internal).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"

namespace pmclient::detail {

// A non-blocking, close-on-exec UDP socket of family f bound to the wildcard
// address and an ephemeral port (IPv6: v6-only). Returns the descriptor, or
// -1 with the reason in `error`.
inline int open_udp_socket(pm::Family f, std::string& error) {
    const int af = f == pm::Family::v4 ? AF_INET : AF_INET6;
    int s = ::socket(af, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
        error = std::string("cannot open UDP socket: ") + std::strerror(errno);
        return -1;
    }
    int on = 1;
    if (af == AF_INET6 && ::setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0) {
        int err = errno;
        ::close(s);
        error = std::string("cannot open UDP socket: ") + std::strerror(err);
        return -1;
    }
    sockaddr_storage ss;
    socklen_t len = pm::to_sockaddr(pm::Endpoint{pm::IpAddress::any(f), 0}, ss);
    if (::bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        int err = errno;
        ::close(s);
        error = std::string("cannot open UDP socket: ") + std::strerror(err);
        return -1;
    }
    return s;
}

// One sendto(), retried on EINTR. False on failure (the caller counts it;
// the retransmission timer recovers).
inline bool send_datagram(int fd, const pm::Endpoint& to, std::span<const std::uint8_t> bytes) {
    sockaddr_storage ss;
    socklen_t len = pm::to_sockaddr(to, ss);
    ssize_t n = 0;
    do {
        n = ::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&ss), len);
    } while (n < 0 && errno == EINTR);
    return n >= 0;
}

// Reads one queued datagram into `buf` without waiting (retried on EINTR)
// and its source into `from`. Returns its bytes; nullopt when nothing is
// queued, or on an error, which is counted in `errors`.
inline std::optional<std::span<const std::uint8_t>> receive_datagram(int fd,
                                                                     std::span<std::uint8_t> buf,
                                                                     pm::Endpoint& from,
                                                                     std::uint64_t& errors) {
    sockaddr_storage ss;
    ssize_t n = 0;
    do {
        socklen_t len = sizeof ss;
        n = ::recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&ss),
                       &len);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ++errors;
        }
        return std::nullopt;
    }
    from = pm::from_sockaddr(ss);
    return buf.first(static_cast<std::size_t>(n));
}

}  // namespace pmclient::detail
