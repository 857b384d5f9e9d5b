// SPDX-License-Identifier: Apache-2.0
// Conversions between the protocol's endpoint type and BSD socket addresses,
// and a bounded connect, for the programs and libraries that talk to sockets
// directly.
#pragma once

#include <sys/socket.h>

#include <chrono>

#include "pmclient/address.hpp"

namespace pm {

// Fills `ss` (zeroed first) and returns the length to pass to bind/sendto.
socklen_t to_sockaddr(const Endpoint& e, sockaddr_storage& ss);
// An AF_INET or AF_INET6 address; IPv4-mapped IPv6 comes back as IPv4 (a
// dual-stack socket reports IPv4 peers that way). Other families give an
// IPv4 0.0.0.0:0.
Endpoint from_sockaddr(const sockaddr_storage& ss);

// Connects the stream socket `fd` to `to`, waiting at most `timeout`.
// Returns 0 or an errno value (ETIMEDOUT when the wait ran out). The socket
// is left non-blocking.
int connect_nonblocking(int fd, const Endpoint& to, std::chrono::milliseconds timeout);

// The source address the kernel would pick towards `to` (a UDP socket
// connected to `to`, nothing sent): a client's CpIPAddr. Returns 0 or an
// errno value.
int route_source(const IpAddress& to, IpAddress& out);

}  // namespace pm
