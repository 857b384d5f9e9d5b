// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the health checker's sock_diag reply parser (what the kernel
// answers a dump of TCP listeners) and the listener matching that follows.
// The input is one netlink datagram. Invariants: no crash, no read past the
// input (the sanitizers), at most one listener per inet_diag message.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "daemon/io/sock_diag.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<pmd::Listener> listeners;
    const auto r =
        pmd::io::parse_sock_diag(std::span<const std::uint8_t>(data, size), 1, listeners);
    // Each listener came from a message of at least a header and an inet_diag_msg.
    if (listeners.size() * 16 > size) {
        std::abort();
    }
    // A dump never both ends and fails.
    if (r.status == pmd::io::DumpStatus::done && r.error != 0) {
        std::abort();
    }
    for (const char* a : {"127.0.0.1:8080", "0.0.0.0:8080", "[::1]:8080"}) {
        (void)pmd::has_listener(*pm::Endpoint::parse(a), listeners);
    }
    return 0;
}
