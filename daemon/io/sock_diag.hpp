// SPDX-License-Identifier: Apache-2.0
// The bytes of a NETLINK_SOCK_DIAG dump of TCP listeners (what `ss -lnt`
// asks the kernel): the request, and a parser of the reply that checks every
// length against the bytes it has. Pure functions, no socket: the health
// checker (io/health_checker.*) moves the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "daemon/core/health.hpp"

namespace pmd::io {

// An inet_diag_req_v2 dump request for TCP sockets in state LISTEN of
// `family` (AF_INET or AF_INET6), with sequence number `seq`.
std::vector<std::uint8_t> sock_diag_request(int family, std::uint32_t seq);

enum class DumpStatus : std::uint8_t {
    more,   // the dump goes on: read the next datagram
    done,   // NLMSG_DONE seen
    error,  // NLMSG_ERROR from the kernel: the dump failed
};

struct DumpParse {
    DumpStatus status = DumpStatus::more;
    std::size_t malformed = 0;  // messages cut short or inconsistent: skipped
    std::size_t stale = 0;      // messages of another sequence number: skipped
    int error = 0;              // errno of an NLMSG_ERROR
};

// Parses one datagram of the dump answering `seq`, appending the listeners
// it names to `out`. Never reads past `bytes`.
DumpParse parse_sock_diag(std::span<const std::uint8_t> bytes, std::uint32_t seq,
                          std::vector<Listener>& out);

}  // namespace pmd::io
