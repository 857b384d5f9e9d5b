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
//
// Pre-fork servers (claims): a worker that accept()s on a listening socket
// its parent listen()ed on may get a doorbell of the parent's Listener. It
// asks the parent over "sdp-preload-claims.<pid>" for the connection behind
// it and gets the program's end of its bridge (SCM_RIGHTS); the bridge runs
// on in the parent, as for a descriptor inherited by fork().
//     -> CLAIM  the listening address and the doorbell's address
//     <- CLAIMED  found or not, the SDP peer and local addresses, the fd
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

#include "pmclient/address.hpp"
#include "sdp/preload/listener.hpp"

namespace sdp::preload {

// fork() child of `parent`: starts the heir service when this process
// inherited SDP connections whose bridges run in its parent (or the
// parent's heir service ran: received descriptors come along too).
void heir_after_fork(pid_t parent);
// Process exit: connections whose descriptor a child still holds are
// handed over (within `budget`); the rest end as before.
void hand_off_at_exit(std::chrono::milliseconds budget);

// A descriptor came by SCM_RIGHTS: starts the heir service (it may be an
// SDP connection whose maker hands it over at exit).
void heir_after_receive();
// fork() parent: starts the claims service when this process has listeners
// (a child may accept their doorbells).
void claims_after_fork();
// A worker accepted a connection from `from` on a socket listening on
// `bound` that `owner` listen()ed on: the SDP connection behind it if it is
// a doorbell of the owner's (bridge empty: it runs in the owner).
std::optional<Listener::Claimed> claim_from_owner(pid_t owner, const pm::Endpoint& bound,
                                                  const pm::Endpoint& from);

}  // namespace sdp::preload
