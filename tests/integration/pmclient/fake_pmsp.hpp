// SPDX-License-Identifier: Apache-2.0
// A scripted fake PMSP for integration tests: a real UDP socket on loopback
// (ephemeral port) served by a thread. For every datagram it receives it
// records the decoded message and asks the script what to send back.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pmclient/message.hpp"
#include "pmclient/resolver.hpp"

namespace pmtest {

using namespace std::chrono_literals;

inline sockaddr_storage to_sa(const pm::Endpoint& e, socklen_t& len) {
    sockaddr_storage ss{};
    if (e.address.is_v4()) {
        auto* s = reinterpret_cast<sockaddr_in*>(&ss);
        s->sin_family = AF_INET;
        s->sin_port = htons(e.port);
        std::memcpy(&s->sin_addr, e.address.bytes().data(), 4);
        len = sizeof(sockaddr_in);
    } else {
        auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(e.port);
        std::memcpy(&s->sin6_addr, e.address.bytes().data(), 16);
        len = sizeof(sockaddr_in6);
    }
    return ss;
}

inline pm::Endpoint from_sa(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) {
        const auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
        std::array<std::uint8_t, 4> b{};
        std::memcpy(b.data(), &s->sin_addr, 4);
        return {pm::IpAddress::v4(b), ntohs(s->sin_port)};
    }
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&ss);
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), &s->sin6_addr, 16);
    return {pm::IpAddress::v6(b), ntohs(s->sin6_port)};
}

// A bound UDP socket (closed on destruction).
class UdpSocket {
  public:
    explicit UdpSocket(const char* addr = "127.0.0.1:0") {
        auto ep = pm::Endpoint::parse(addr).value();
        fd_ = ::socket(ep.address.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        socklen_t len = 0;
        auto ss = to_sa(ep, len);
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
            throw std::runtime_error("fake PMSP: bind failed");
        }
        sockaddr_storage got{};
        socklen_t glen = sizeof got;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&got), &glen);
        local_ = from_sa(got);
    }
    ~UdpSocket() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    UdpSocket(const UdpSocket&) = delete;
    UdpSocket& operator=(const UdpSocket&) = delete;
    int fd() const { return fd_; }
    pm::Endpoint local() const { return local_; }
    void send_to(std::span<const std::uint8_t> b, const pm::Endpoint& to) const {
        socklen_t len = 0;
        auto ss = to_sa(to, len);
        (void)::sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&ss), len);
    }

  private:
    int fd_ = -1;
    pm::Endpoint local_;
};

struct Reply {
    std::vector<std::uint8_t> bytes;
    bool from_other_socket = false;  // send from a second socket (wrong source)

    static Reply of(const pm::Message& m, bool other = false) {
        auto w = pm::encode(m);
        return Reply{std::vector<std::uint8_t>(w.begin(), w.end()), other};
    }
};

struct Received {
    pm::Message msg;
    pm::Endpoint from;
    std::vector<std::uint8_t> bytes;
};

class FakePmsp {
  public:
    // Called for every decodable datagram; `n` counts PMReqs with this
    // AssocHandle seen so far (1 for the first). Returns what to send back,
    // in order.
    using Script = std::function<std::vector<Reply>(const pm::Message& m, int n)>;

    explicit FakePmsp(Script script, const char* addr = "127.0.0.1:0")
        : sock_(addr), other_(addr), script_(std::move(script)) {
        thread_ = std::thread([this] { run(); });
    }
    ~FakePmsp() {
        stop_ = true;
        thread_.join();
    }

    pm::Endpoint endpoint() const { return sock_.local(); }
    const UdpSocket& socket() const { return sock_; }

    std::vector<Received> received() const {
        std::lock_guard l(mu_);
        return got_;
    }
    int count(pm::MessageType t) const {
        std::lock_guard l(mu_);
        int n = 0;
        for (const auto& r : got_) {
            n += r.msg.type == t ? 1 : 0;
        }
        return n;
    }
    // Waits (at most `limit`) until pred() holds on the received list.
    bool wait_until(const std::function<bool(const std::vector<Received>&)>& pred,
                    std::chrono::milliseconds limit = 5s) const {
        std::unique_lock l(mu_);
        return cv_.wait_for(l, limit, [&] { return pred(got_); });
    }
    bool wait_count(pm::MessageType t, int n, std::chrono::milliseconds limit = 5s) const {
        return wait_until(
            [&](const std::vector<Received>& v) {
                int c = 0;
                for (const auto& r : v) {
                    c += r.msg.type == t ? 1 : 0;
                }
                return c >= n;
            },
            limit);
    }

  private:
    void run() {
        std::vector<std::pair<std::uint64_t, int>> seen;
        while (!stop_) {
            pollfd p{sock_.fd(), POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) {
                continue;
            }
            std::array<std::uint8_t, 2048> buf{};
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            ssize_t n = ::recvfrom(sock_.fd(), buf.data(), buf.size(), 0,
                                   reinterpret_cast<sockaddr*>(&ss), &len);
            if (n < 0) {
                continue;
            }
            auto from = from_sa(ss);
            auto d = pm::decode(std::span<const std::uint8_t>(buf.data(), static_cast<size_t>(n)));
            if (!std::holds_alternative<pm::Message>(d)) {
                continue;
            }
            const auto& m = std::get<pm::Message>(d);
            int count = 0;
            if (m.type == pm::MessageType::request) {
                bool found = false;
                for (auto& [h, c] : seen) {
                    if (h == m.assoc_handle) {
                        count = ++c;
                        found = true;
                    }
                }
                if (!found) {
                    seen.emplace_back(m.assoc_handle, 1);
                    count = 1;
                }
            }
            // Recorded before replying: a test that has seen the reply must
            // also see the request that caused it.
            {
                std::lock_guard l(mu_);
                got_.push_back(Received{m, from, {buf.begin(), buf.begin() + n}});
            }
            cv_.notify_all();
            auto replies = script_(m, count);
            for (const auto& r : replies) {
                (r.from_other_socket ? other_ : sock_).send_to(r.bytes, from);
            }
        }
    }

    UdpSocket sock_;
    UdpSocket other_;
    Script script_;
    std::atomic<bool> stop_{false};
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    std::vector<Received> got_;
    std::thread thread_;
};

// Scripts.
inline FakePmsp::Script accept_with(pm::Endpoint sdp, std::uint8_t pm_time, int drop_first = 0) {
    return [=](const pm::Message& m, int n) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request || n <= drop_first) {
            return {};
        }
        return {Reply::of(pm::make_accept(m, sdp, pm_time))};
    };
}

inline FakePmsp::Script deny_all() {
    return [](const pm::Message& m, int) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request) {
            return {};
        }
        return {Reply::of(pm::make_deny(m))};
    };
}

inline FakePmsp::Script silent() {
    return [](const pm::Message&, int) -> std::vector<Reply> { return {}; };
}

inline pm::Endpoint ep(const char* t) {
    return pm::Endpoint::parse(t).value();
}

// Fast retransmissions so tests that lose packets finish quickly; the
// deadline is generous so a loaded machine does not turn into timeouts.
inline pmclient::ResolverOptions fast(const pm::Endpoint& pmsp) {
    pmclient::ResolverOptions o;
    o.defaults.pmsp = pmsp;
    o.defaults.initial_timeout = std::chrono::milliseconds(30);
    o.defaults.backoff_factor = 1.5;
    o.defaults.max_retries = 10;
    o.defaults.deadline = std::chrono::seconds(20);
    o.read_environment = false;
    return o;
}

}  // namespace pmtest
