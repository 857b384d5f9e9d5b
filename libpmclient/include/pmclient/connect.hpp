// SPDX-License-Identifier: Apache-2.0
// Connect helper: resolve a Conventional Address through the Port Mapper and
// open a TCP connection to the SDP Address, or to the Conventional Address
// when SDP is not available (section 7.5.1).
//
//   1. Choose CpIPAddr (given, or the source address routed towards ApIPAddr).
//   2. Create a TCP socket bound to CpIPAddr:0 to learn CpPort.
//   3. Resolve (cache first). On PMAccept connect that socket to the SDP
//      Address.
//   4. Fall back to the Conventional Address on a fresh socket (bound to
//      CpIPAddr:0) when the PMSP denied or did not answer, or the SDP Address
//      did not take the connection (refused, reset, aborted, unreachable,
//      timed out; 7.5.1: a reset is treated like a PMDeny). The cache entry
//      that led there is flushed.
// Errors (bad arguments, configuration, local socket errors) are returned,
// not fallen back from. The returned descriptor is a blocking TCP socket
// owned by the caller. The decisions are those of the library's one 7.5.1
// procedure, shared with sdp::Stream (docs/protocol-notes.md).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "pmclient/export.h"
#include "pmclient/resolver.hpp"

namespace pmclient {

struct ConnectOptions {
    std::chrono::milliseconds connect_timeout{5000};  // per TCP connect attempt
    std::optional<RequestOptions> request;            // unset: resolver defaults
};

struct ConnectResult {
    int fd = -1;            // connected socket, or -1
    bool used_sdp = false;  // connected to the SDP Address (else Conventional)
    pm::Endpoint peer;      // where fd is connected
    pm::Endpoint local;     // CpIPAddr:CpPort of fd
    Result resolution;      // the Port Mapper outcome
    int sys_errno = 0;      // errno of the failing call when fd == -1
    std::string reason;     // why it fell back or failed

    bool ok() const { return fd >= 0; }
};

PMCLIENT_API ConnectResult connect(BlockingResolver& resolver, const pm::Endpoint& conventional,
                                   std::optional<pm::IpAddress> cp_addr = std::nullopt,
                                   const ConnectOptions& options = {});

}  // namespace pmclient
