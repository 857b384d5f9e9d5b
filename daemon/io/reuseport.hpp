// SPDX-License-Identifier: Apache-2.0
// SO_REUSEPORT groups for the UDP worker shards, and the classic BPF program
// that steers every datagram to the shard of its source address.
//
// The kernel's default choice inside a reuseport group hashes the 4-tuple:
// retransmissions and PMAcks of one client socket land on one shard, but one
// source address sending from many ports is spread over every shard, which
// would multiply the per-source token bucket and the source quench (section
// 15.2) by the number of workers. The program attached here hashes the
// SOURCE ADDRESS only (IPv4: the 32-bit address; IPv6: the four 32-bit words
// mixed), so a source always lands on the same socket index of every group.
// The socket index is the order the sockets joined the group, which is why a
// group is always bound worker 0 first and never has single members removed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pmclient/address.hpp"

namespace pmd::io {

// Attaches the source-address steering program to the reuseport group of
// `fd` (any member); `groups` sockets, `seed` mixed into the hash so that a
// remote peer cannot predict which addresses share a shard. Returns an error
// text, or nullopt when attached.
std::optional<std::string> attach_source_steering(int fd, unsigned groups, std::uint32_t seed);

// The shard attach_source_steering()'s program picks for `source` (the same
// arithmetic in C++, for logs and tests). IPv4-mapped addresses are hashed
// as IPv4, as the kernel sees them on a dual-stack socket.
unsigned steered_index(const pm::IpAddress& source, unsigned groups, std::uint32_t seed);

// Whether SO_REUSEPORT is set on `fd`.
bool has_reuseport(int fd);

// CPUs in this process's affinity mask (sched_getaffinity), at least 1, at
// most `cap`; falls back to std::thread::hardware_concurrency().
unsigned available_cpus(unsigned cap);

}  // namespace pmd::io
