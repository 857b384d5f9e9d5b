// SPDX-License-Identifier: Apache-2.0
// The SDP side of a program's listening socket (docs/preload.md, "Servers"):
// an sdp::Acceptor on an ephemeral port of the same address, registered with
// the local sdp-pmd as the SDP Address of the program's port. Each SDP
// connection becomes a Bridge; a loopback TCP connection to the program's
// own listening socket (the doorbell) makes that socket readable, and the
// program's accept() swaps the doorbell for the bridge's descriptor. So the
// listening socket polls readable exactly when a connection, SDP or TCP,
// waits, and SDP and TCP clients share it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "pmclient/address.hpp"
#include "sdp/stream.hpp"

namespace sdp::preload {

class Bridge;

class Listener {
  public:
    struct Claimed {
        int app_fd = -1;  // the program's end of the bridge
        std::shared_ptr<Bridge> bridge;
        pm::Endpoint peer;   // the SDP peer
        pm::Endpoint local;  // our end of the SDP connection
    };

    // Where the doorbells of a socket listening on `bound` connect to (and
    // come from: the same address, another port).
    static pm::Endpoint doorbell_target(const pm::Endpoint& bound);
    // Opens and registers the SDP acceptor for a program socket listening
    // on `bound`; nullptr when it cannot (the program keeps plain TCP).
    static std::shared_ptr<Listener> open(const pm::Endpoint& bound);
    ~Listener();
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;

    // The connection behind the doorbell that came from `from`, if it is one.
    std::optional<Claimed> claim(const pm::Endpoint& from);
    // Stops taking connections, unregisters, drops unclaimed connections.
    void close();
    const pm::Endpoint& bound() const { return bound_; }

  private:
    Listener() = default;
    void run();
    void ring(Stream s);

    Acceptor acceptor_;
    pm::Endpoint bound_;
    pm::Endpoint doorbell_target_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
    std::mutex mu_;
    struct Pending {
        int app_fd = -1;
        int doorbell_fd = -1;
        bool rung = false;  // the doorbell's connect() returned
        std::shared_ptr<Bridge> bridge;
        pm::Endpoint peer;
        pm::Endpoint local;
    };
    std::map<pm::Endpoint, Pending> pending_;  // by the doorbell's address
};

}  // namespace sdp::preload
