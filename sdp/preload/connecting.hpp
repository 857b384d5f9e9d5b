// SPDX-License-Identifier: Apache-2.0
// connect() of a socket the rules send to SDP (docs/preload.md, "Clients",
// "Non-blocking connect()").
// On a blocking socket the Port Mapper exchange and the SDP startup run
// inside connect(). On an O_NONBLOCK socket connect() returns EINPROGRESS at
// once and a thread of the library runs them (a Connecting):
//
//   connect()   the program's descriptor becomes the program's end (Y) of
//               a bridge's socketpair whose send buffer is shrunk and full
//               of filler bytes: it polls neither readable nor writable,
//               read() and write() fail with EAGAIN (as on a TCP socket in
//               SYN_SENT); the program's own socket (X) is kept aside.
//   SDP         the descriptor is the SDP connection's: the filler is taken
//               out (POLLOUT) and the bridge starts; SO_ERROR 0.
//   not SDP     X goes back to the descriptor number and to every dup of
//               it (FdTable::swap_file_all, dup3): under `both` once its
//               own non-blocking TCP connect ended (SO_ERROR is the
//               kernel's), under `sdp` unconnected, the error kept for
//               SO_ERROR. The program's epoll registrations of those numbers
//               move to X. Y (a forked child's copy) signals the end
//               (POLLOUT; POLLERR/POLLHUP for a failure) and goes when the
//               program asks SO_ERROR or calls connect(), at the latest
//               after kGhostLinger.
//
// The descriptor stays the same open file from EINPROGRESS to an SDP
// connection, so poll, select and epoll registrations made while in
// progress see the end; epoll registrations made before connect() move to
// Y at connect() (FdTable::swap_file).
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>

#include "pmclient/address.hpp"
#include "sdp/preload/rules.hpp"
#include "sdp/preload/state.hpp"
#include "sdp/stream.hpp"

namespace sdp::preload {

// connect() of a candidate socket whose rule says sdp or both: connect()'s
// result, or nullopt when the program's own socket is to connect over TCP
// (`both`; the caller does it, outside any signal mask, so that the
// program's signals interrupt it).
std::optional<int> connect_sdp(int fd, const std::shared_ptr<Entry>& cand, const pm::Endpoint& dest,
                               const sockaddr* addr, socklen_t len, const Decision& d);

class Connecting : public std::enable_shared_from_this<Connecting> {
  public:
    // How long Y outlives the hand-back of X when the program neither asks
    // SO_ERROR nor calls connect() or close().
    static constexpr std::chrono::seconds kGhostLinger{10};
    // The longest wait for the fallback's TCP connect (the kernel ends it
    // earlier with its SYN retries): then ETIMEDOUT.
    static constexpr std::chrono::seconds kTcpLimit{180};

    // Starts the non-blocking connect() of fd: -1 with EINPROGRESS, or
    // nullopt when it could not be started (nothing changed).
    static std::optional<int> start(int fd, const std::shared_ptr<Entry>& cand,
                                    const pm::Endpoint& dest, const sockaddr* addr, socklen_t len,
                                    const Decision& d);
    Connecting(const Connecting&) = delete;
    Connecting& operator=(const Connecting&) = delete;

    // The thread has not decided yet.
    bool running() const { return state_.load() == State::running; }
    // After the hand-back of X (e: the entry of the descriptor asked):
    // ends Y, and returns the error kept for SO_ERROR (reported once; 0:
    // the kernel's own SO_ERROR of X applies); the descriptor then is a
    // plain TCP socket (`both`) or a candidate again (`sdp`). nullopt
    // while running or once the connection went over SDP.
    std::optional<int> take_error(const std::shared_ptr<Entry>& e);
    // Calls f with the program's own socket: X kept aside while in
    // progress, else the descriptor itself.
    template <typename F>
    auto on_socket(int fd, F&& f) {
        std::lock_guard lk(mu_);
        return f(x_ >= 0 ? x_ : fd);
    }
    // The program closed its last descriptor of it: the connect stops
    // (StreamOptions::stop: no more PMReqs, a TCP connect or SDP startup
    // in progress aborted, no fallback) and its result is discarded.
    void closed();

    // Process exit: every pending connect() is abandoned (counted), without
    // waiting for the threads.
    static void finish_all();
    // (fork(): LiveSet<Connecting>, locked across it; the child forgets
    // the threads, which run on in the parent.)

  private:
    enum class State : std::uint8_t { running, sdp, handed_back, done };
    Connecting() = default;
    void run();
    // The SDP connection becomes the descriptor's; false with errno when
    // its bridge cannot be set up.
    bool become_sdp(Stream st);
    // `both`: the program's socket connects over TCP (bounded wait).
    void tcp_fallback();
    // X goes back to the descriptor number; `error` kept for SO_ERROR.
    void hand_back(int error, bool failed);
    // The program is gone (or the process exits): everything is closed.
    void abandon(Stream* st);
    bool cancelled();
    void release_ghost_locked();
    // Takes the filler out of Y's send buffer through `pump` (POLLOUT).
    void drain(int pump) const;
    void ended();

    int fd_ = -1;      // the descriptor number connect() was called on
    int x_ = -1;       // the program's own socket, kept aside while in progress
    int app_ = -1;     // our copy of Y (its send buffer)
    int pump_ = -1;    // the bridge's end of the socketpair
    int cancel_ = -1;  // eventfd: the program closed it, the process exits
    std::size_t filler_ = 0;
    dev_t y_dev_ = 0;
    ino_t y_ino_ = 0;
    pm::Endpoint dest_;
    sockaddr_storage addr_{};
    socklen_t addr_len_ = 0;
    Decision decision_;
    StreamOptions options_;       // options_.stop: stop_'s token
    std::stop_source stop_;       // closed(): the connect procedure ends at once
    std::weak_ptr<Entry> entry_;  // the descriptor's entry while in progress
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<State> state_{State::running};
    bool cancelled_ = false;
    bool released_ = false;         // Y ended after the hand-back
    bool abandon_counted_ = false;  // in connect_abandoned already
    int error_ = 0;                 // kept for SO_ERROR after the hand-back
};

}  // namespace sdp::preload
