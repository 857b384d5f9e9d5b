// SPDX-License-Identifier: Apache-2.0
// Socket duplication initiated by the library (13.1.1, Local Peer): when the
// process that runs a connection's bridge exits while a forked child still
// holds the program's descriptor, the connection moves to that child, which
// then runs the bridge itself. (While the process lives, its bridge serves
// every process that holds the descriptor; docs/preload.md says why the
// connection does not move when it merely closes its copy.)
//
//   child (heir):  after fork(), when it inherited SDP descriptors, one
//                  library thread serves the abstract AF_UNIX socket
//                  "sdp-preload-heir.<pid>" (peers of another uid refused).
//   parent:        finds a child holding the descriptor's open file
//                  (/proc/<child>/fd), and over that socket:
//     -> OFFER  dev, inode of the program's end
//     <- PORT   a TCP port listening on the connection's local address
//               (step 1), or 0: not taken
//        Stream::hand_off(port): SuspComm, SuspCommAck (steps 2, 3, 5)
//     -> STATE  Handoff::encode() and our end of the socketpair (SCM_RIGHTS)
//               (step 5)
//        child: Stream::take_over() (steps 6, 7), a bridge over it
//     <- DONE   1 taken over, 0 failed
// See docs/preload.md, "Descriptors that move to another process".
#pragma once

#include <chrono>

namespace sdp::preload {

// fork() child: starts the heir service when this process inherited SDP
// connections whose bridges run in its parent.
void heir_after_fork();
// Process exit: connections whose descriptor a child still holds are
// handed over (within `budget`); the rest end as before.
void hand_off_at_exit(std::chrono::milliseconds budget);

}  // namespace sdp::preload
