// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/reuseport.hpp"

#include <linux/filter.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

namespace pmd::io {

namespace {

// Knuth's multiplicative constants (odd): the high bits of the product mix
// every input bit.
constexpr std::uint32_t kMixWord = 0x85EBCA6Bu;
constexpr std::uint32_t kMixFinal = 0x9E3779B1u;

constexpr std::uint32_t net(std::int32_t off) {
    return static_cast<std::uint32_t>(SKF_NET_OFF + off);
}

std::uint32_t mix(std::uint32_t a, std::uint32_t seed, unsigned groups) {
    a ^= seed;
    a *= kMixFinal;
    a >>= 16;
    return a % groups;
}

}  // namespace

std::optional<std::string> attach_source_steering(int fd, unsigned groups, std::uint32_t seed) {
    if (groups == 0) {
        return "no sockets";
    }
    // Offsets relative to the network header (SKF_NET_OFF): when the program
    // runs, the packet data starts after the UDP header. The version nibble
    // decides, so IPv4 datagrams on a dual-stack IPv6 socket hash like they do
    // on an IPv4 socket.
    const std::array<sock_filter, 24> code = {{
        /*  0 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, net(0)),
        /*  1 */ BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4),
        /*  2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 15),  // not IPv6: to 18
        // IPv6 source address: words at +8, +12, +16, +20.
        /*  3 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net(8)),
        /*  4 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_K, seed),
        /*  5 */ BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, kMixWord),
        /*  6 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
        /*  7 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net(12)),
        /*  8 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
        /*  9 */ BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, kMixWord),
        /* 10 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
        /* 11 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net(16)),
        /* 12 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
        /* 13 */ BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, kMixWord),
        /* 14 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
        /* 15 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net(20)),
        /* 16 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
        /* 17 */ BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),  // to 19
                                                       // IPv4 source address at +12.
        /* 18 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, net(12)),
        // Both: (A ^ seed) * odd constant, high 16 bits, modulo the group size.
        /* 19 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_K, seed),
        /* 20 */ BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, kMixFinal),
        /* 21 */ BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 16),
        /* 22 */ BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, groups),
        /* 23 */ BPF_STMT(BPF_RET | BPF_A, 0),
    }};
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(code.size());
    prog.filter = const_cast<sock_filter*>(code.data());
    if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0) {
        return std::string("SO_ATTACH_REUSEPORT_CBPF: ") + std::strerror(errno);
    }
    return std::nullopt;
}

unsigned steered_index(const pm::IpAddress& source, unsigned groups, std::uint32_t seed) {
    if (groups == 0) {
        return 0;
    }
    const pm::IpAddress a = source.unmapped();
    const auto& b = a.bytes();
    auto word = [&](std::size_t i) {
        return (std::uint32_t{b[i]} << 24) | (std::uint32_t{b[i + 1]} << 16) |
               (std::uint32_t{b[i + 2]} << 8) | std::uint32_t{b[i + 3]};
    };
    std::uint32_t acc = 0;
    if (a.is_v4()) {
        acc = word(0);
    } else {
        std::uint32_t x = (word(0) ^ seed) * kMixWord;
        x = (word(4) ^ x) * kMixWord;
        x = (word(8) ^ x) * kMixWord;
        acc = word(12) ^ x;
    }
    return mix(acc, seed, groups);
}

bool has_reuseport(int fd) {
    int on = 0;
    socklen_t len = sizeof on;
    return ::getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &len) == 0 && on != 0;
}

unsigned available_cpus(unsigned cap) {
    unsigned n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) == 0) {
        n = static_cast<unsigned>(CPU_COUNT(&set));
    }
    if (n == 0) {
        n = std::thread::hardware_concurrency();
    }
    return std::clamp(n, 1u, std::max(1u, cap));
}

}  // namespace pmd::io
