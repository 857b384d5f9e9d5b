// SPDX-License-Identifier: Apache-2.0
// Small helpers for the SDP integration tests: a position-dependent byte
// pattern, a plain TCP listener on loopback and network namespaces.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>

#include "pmclient/address.hpp"

namespace sdptest {

// Byte at stream offset `pos` for a seed: differs between neighbouring
// bytes and between runs, so reordering, loss and duplication show.
inline std::uint8_t pattern_byte(std::uint64_t pos, std::uint32_t seed) {
    std::uint64_t x = pos * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return static_cast<std::uint8_t>(x ^ (x >> 17));
}

inline void pattern(std::span<std::uint8_t> out, std::uint64_t pos, std::uint32_t seed) {
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = pattern_byte(pos + i, seed);
    }
}

inline bool check_pattern(std::span<const std::uint8_t> in, std::uint64_t pos, std::uint32_t seed) {
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] != pattern_byte(pos + i, seed)) {
            return false;
        }
    }
    return true;
}

// Polls pred until it holds or `timeout` passes (bounded wait).
inline bool wait_for(const std::function<bool()>& pred,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= end) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

inline int tcp_connect(const pm::Endpoint& ep) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(ep.port);
    std::memcpy(&a.sin_addr, ep.address.bytes().data(), 4);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// A plain TCP listener on 127.0.0.1 (port 0 = any, or a given port).
class TcpListener {
  public:
    explicit TcpListener(std::uint16_t port = 0) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int on = 1;
        ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0) {
            close();
            return;
        }
        socklen_t len = sizeof a;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
    }
    ~TcpListener() { close(); }
    TcpListener(const TcpListener&) = delete;
    TcpListener& operator=(const TcpListener&) = delete;

    bool ok() const { return fd_ >= 0; }
    int fd() const { return fd_; }
    std::uint16_t port() const { return port_; }
    pm::Endpoint endpoint() const {
        return pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), port_};
    }
    void close() {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    // Accepts one connection (bounded wait), or -1.
    int accept(int timeout_ms = 10000) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) <= 0) {
            return -1;
        }
        return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    }
    // Accepts one connection, sends `text`, closes.
    void accept_and_send(const std::string& text) {
        int c = accept();
        if (c >= 0) {
            (void)!::send(c, text.data(), text.size(), MSG_NOSIGNAL);
            ::close(c);
        }
    }

  private:
    int fd_ = -1;
    std::uint16_t port_ = 0;
};

// Runs the calling thread in a network namespace while in scope (sockets
// keep the namespace they were created in).
class InNetns {
  public:
    explicit InNetns(const std::string& name) {
        self_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        const int fd = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
        ok_ = self_ >= 0 && fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
        if (fd >= 0) {
            ::close(fd);
        }
    }
    ~InNetns() {
        if (self_ >= 0) {
            (void)::setns(self_, CLONE_NEWNET);
            ::close(self_);
        }
    }
    InNetns(const InNetns&) = delete;
    InNetns& operator=(const InNetns&) = delete;
    bool ok() const { return ok_; }

  private:
    int self_ = -1;
    bool ok_ = false;
};

// One network namespace of its own with its loopback up, deleted at the
// end. Skips (never passes) without root or ip(8).
class NetNamespace {
  public:
    explicit NetNamespace(const std::string& prefix)
        : name_(prefix + "-" + std::to_string(::getpid())) {
        if (::geteuid() != 0) {
            why_ = "not root: cannot create a network namespace";
            return;
        }
        if (std::system("ip -V >/dev/null 2>&1") != 0) {
            why_ = "no ip(8)";
            return;
        }
        remove();
        if (std::system(("ip netns add " + name_ + " 2>/dev/null").c_str()) != 0 ||
            !run("ip link set lo up")) {
            why_ = "cannot set up the network namespace " + name_;
            remove();
            return;
        }
        ok_ = true;
    }
    ~NetNamespace() { remove(); }
    NetNamespace(const NetNamespace&) = delete;
    NetNamespace& operator=(const NetNamespace&) = delete;

    bool ok() const { return ok_; }
    const std::string& why() const { return why_; }
    const std::string& name() const { return name_; }
    // A shell command inside the namespace; true when it exits 0.
    bool run(const std::string& cmd) const {
        return std::system(
                   ("ip netns exec " + name_ + " sh -c '" + cmd + "' >/dev/null 2>&1").c_str()) ==
               0;
    }

  private:
    void remove() { (void)!std::system(("ip netns del " + name_ + " 2>/dev/null").c_str()); }
    std::string name_, why_;
    bool ok_ = false;
};

}  // namespace sdptest
