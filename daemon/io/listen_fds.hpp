// SPDX-License-Identifier: Apache-2.0
// Sockets inherited from the service manager (socket activation,
// sd_listen_fds): the UDP sockets of sdp-pmd.socket become the Port
// Mapper's listen sockets and a listening Unix stream socket becomes the
// control socket. Anything else passed is logged and closed.
#pragma once

#include <optional>
#include <vector>

namespace pmd::io {

struct InheritedSockets {
    std::vector<int> udp;        // AF_INET / AF_INET6 SOCK_DGRAM
    std::optional<int> control;  // AF_UNIX SOCK_STREAM, listening
    bool any() const { return !udp.empty() || control.has_value(); }
};

// Takes the descriptors named by $LISTEN_FDS / $LISTEN_PID (and clears those
// variables, so no child inherits them). Empty when none were passed.
InheritedSockets take_inherited_sockets();

}  // namespace pmd::io
