// SPDX-License-Identifier: Apache-2.0
// The test peer of the socket duplication tests (13.1.1): one
// io::SoftSession on raw loopback sockets, pumped by hand, that plays the
// Controlling Address Space (SuspComm with a new port, the SuspCommAck, the
// old LLP closed) and then the non-Controlling one (the new connection
// accepted and checked: source address and port, destination address, step
// 1; HelloAck with the old private buffer size, step 7a), exchanging
// kDupBytes each way with the suspension in the middle. Used by the blocking
// (tests/integration/sdp) and the Asio (tests/integration/sdp_async) tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sdp/io/channel.hpp"
#include "sdp/soft/soft_session.hpp"
#include "sdp_test_util.hpp"

namespace sdptest::dup {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace io = sdp::io;
namespace e = sdp::engine;

inline constexpr std::size_t kBytes = 8u << 20;  // each way
inline constexpr std::uint32_t kClientSeed = 11;
inline constexpr std::uint32_t kPeerSeed = 22;

struct Addr {
    std::uint32_t ip = 0;  // network order
    std::uint16_t port = 0;
};

inline Addr local_of(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return {a.sin_addr.s_addr, ntohs(a.sin_port)};
}

inline Addr peer_of(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return {a.sin_addr.s_addr, ntohs(a.sin_port)};
}

// One SoftSession on a raw non-blocking socket, pumped by the test.
class RawPeer {
  public:
    explicit RawPeer(const io::SessionConfig& cfg) : s_(sdp::iwarp::MpaRole::responder, cfg) {}
    ~RawPeer() { close_fd(); }

    void attach(int fd) {
        fd_ = fd;
        io::set_nonblocking(fd_, true);
        io::set_nodelay(fd_);
        s_.set_mss(io::tcp_mss(fd_));
        out_.clear();
        off_ = 0;
        fin_ = false;
        eof_ = false;
    }
    void close_fd() {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    io::SoftSession& session() { return s_; }
    e::Connection& sdp() { return s_.sdp(); }
    [[nodiscard]] bool eof() const { return eof_; }
    [[nodiscard]] int fd() const { return fd_; }

    // One round: output written, input read (waits up to `ms` for some).
    void pump(int ms) {
        flush();
        pollfd p{fd_, POLLIN, 0};
        if (off_ < out_.size()) {
            p.events |= POLLOUT;
        }
        if (eof_ || ::poll(&p, 1, ms) <= 0) {
            return;
        }
        std::uint8_t buf[256 * 1024];
        for (int i = 0; i < 8 && !eof_; ++i) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                s_.on_bytes(std::span<const std::uint8_t>(buf, static_cast<std::size_t>(n)));
                flush();
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                break;
            }
            eof_ = true;
            s_.on_eof();
        }
        flush();
    }

  private:
    void flush() {
        if (eof_) {
            return;
        }
        if (off_ == out_.size()) {
            out_.clear();
            off_ = 0;
            s_.take_output(out_);
        }
        while (off_ < out_.size()) {
            const ssize_t n =
                ::send(fd_, out_.data() + off_, out_.size() - off_, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n <= 0) {
                break;
            }
            off_ += static_cast<std::size_t>(n);
        }
        if (off_ == out_.size() && s_.llp_request() == io::LlpRequest::fin && !fin_ &&
            !s_.has_output()) {
            fin_ = true;
            ::shutdown(fd_, SHUT_WR);
        }
    }

    io::SoftSession s_;
    int fd_ = -1;
    std::vector<std::uint8_t> out_;
    std::size_t off_ = 0;
    bool fin_ = false;
    bool eof_ = false;
};

// What the peer thread saw, checked by the test thread.
struct PeerReport {
    std::string failure;  // empty: every step held
    std::size_t received = 0;
    std::size_t sent = 0;
    bool pattern_ok = true;
    Addr old_client, old_server, new_client, new_server;
    std::uint32_t old_recv_size = 0;
    std::uint32_t new_recv_size = 0;
    std::uint64_t susp_comm_ack_received = 0;
    std::uint16_t new_port = 0;
};

// The Controlling Address Space, then the non-Controlling one (13.1.1).
inline void run_peer(sdptest::TcpListener& first, PeerReport& r) {
    io::SessionConfig cfg;
    RawPeer peer(cfg);
    auto fail = [&](const std::string& why) {
        if (r.failure.empty()) {
            r.failure = why + " (" + peer.sdp().describe() + ")";
        }
    };
    const int fd = first.accept(10000);
    if (fd < 0) {
        return fail("no client");
    }
    peer.attach(fd);
    auto deadline = Clock::now() + 10s;
    while (peer.sdp().state() != e::State::established && Clock::now() < deadline && !peer.eof()) {
        peer.pump(20);
    }
    if (peer.sdp().state() != e::State::established) {
        return fail("first startup");
    }
    r.old_client = peer_of(fd);
    r.old_server = local_of(fd);

    sdptest::TcpListener second;  // step 1: the non-Controlling side's port
    r.new_port = second.port();
    std::vector<std::uint8_t> wbuf(64 * 1024);
    std::vector<std::uint8_t> rbuf(256 * 1024);
    bool suspended = false;
    bool resumed = false;
    deadline = Clock::now() + 120s;
    auto exchange = [&] {
        while (r.sent < kBytes) {
            const std::size_t k = std::min(wbuf.size(), kBytes - r.sent);
            sdptest::pattern(std::span(wbuf).first(k), r.sent, kPeerSeed);
            const std::size_t n = peer.sdp().write(std::span(wbuf).first(k));
            r.sent += n;
            if (n < k) {
                break;
            }
        }
        while (std::size_t n = peer.sdp().read(rbuf)) {
            if (!sdptest::check_pattern(std::span(rbuf).first(n), r.received, kClientSeed)) {
                r.pattern_ok = false;
            }
            r.received += n;
        }
    };
    while (Clock::now() < deadline) {
        exchange();
        peer.pump(5);
        if (peer.sdp().state() != e::State::established) {
            return fail("connection lost");
        }
        if (!suspended && r.received >= kBytes / 2 && r.sent >= kBytes / 2) {
            // Step 2: SuspComm with the new port; nothing after it. The
            // size of our buffers now (a ChRcvBuf may have changed the one
            // of the setup, 10.6) is what step 7a's HelloAck carries.
            r.old_recv_size = peer.sdp().local_recv_size();
            if (!peer.sdp().suspend(r.new_port)) {
                return fail("suspend refused");
            }
            suspended = true;
            // Step 5: wait for the SuspCommAck, then for the Remote Peer to
            // close the old LLP (its FIN after the SuspCommAck).
            const auto until = Clock::now() + 10s;
            while (!peer.eof() && Clock::now() < until) {
                exchange();  // data sent before our SuspComm still arrives
                peer.pump(20);
            }
            if (peer.sdp().duplication() != e::Dup::local_done || !peer.eof()) {
                return fail("no SuspCommAck and close");
            }
            r.susp_comm_ack_received = peer.sdp().stats().susp_comm_ack_received;
            peer.close_fd();
            // Steps 1 and 6: the new connection, from the old source address
            // and port to the old destination address.
            const int nfd = second.accept(10000);
            if (nfd < 0) {
                return fail("no new connection on the SuspComm's port");
            }
            r.new_client = peer_of(nfd);
            r.new_server = local_of(nfd);
            if (r.new_client.ip != r.old_client.ip || r.new_client.port != r.old_client.port ||
                r.new_server.ip != r.old_server.ip) {
                ::close(nfd);
                return fail("step 1: source/destination of the new connection differ");
            }
            if (!peer.session().restart(sdp::iwarp::MpaRole::responder)) {
                ::close(nfd);
                return fail("restart refused");
            }
            peer.attach(nfd);
            const auto until2 = Clock::now() + 10s;
            while (peer.sdp().state() != e::State::established && Clock::now() < until2 &&
                   !peer.eof()) {
                peer.pump(20);
            }
            if (peer.sdp().state() != e::State::established) {
                return fail("new startup");
            }
            // Step 7a: the HelloAck carried the old private buffer size.
            r.new_recv_size = peer.sdp().local_recv_size();
            resumed = true;
        }
        if (resumed && r.sent == kBytes && r.received == kBytes && peer.sdp().send_queued() == 0) {
            break;
        }
    }
    if (r.received != kBytes || r.sent != kBytes) {
        return fail("transfer incomplete");
    }
    // Close: DisConn after everything, then wait for the client's.
    peer.sdp().shutdown_write();
    const auto until = Clock::now() + 10s;
    while (!peer.eof() && Clock::now() < until) {
        peer.pump(20);
        exchange();
    }
}

// A Controlling side whose SuspComm names a port nobody listens on: true
// when the SuspCommAck came and the Remote Peer closed the old connection.
inline bool suspend_to_dead_port(sdptest::TcpListener& first) {
    std::uint16_t dead_port = 0;
    {
        sdptest::TcpListener l;  // a port nobody listens on
        dead_port = l.port();
    }
    io::SessionConfig cfg;
    RawPeer p(cfg);
    const int fd = first.accept(10000);
    if (fd < 0) {
        return false;
    }
    p.attach(fd);
    const auto until = Clock::now() + 10s;
    while (p.sdp().state() != e::State::established && Clock::now() < until) {
        p.pump(20);
    }
    if (!p.sdp().suspend(dead_port)) {
        return false;
    }
    while (!p.eof() && Clock::now() < until) {
        p.pump(20);
    }
    return p.sdp().duplication() == e::Dup::local_done;
}

}  // namespace sdptest::dup
