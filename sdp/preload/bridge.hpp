// SPDX-License-Identifier: Apache-2.0
// One SDP connection of an unmodified program: the program holds one end of
// an AF_UNIX socketpair (a real kernel descriptor: poll, epoll, select,
// FIONREAD, SIOCATMARK, MSG_OOB, dup and fork all behave as the kernel
// makes them), and two threads of the library carry bytes between the other
// end and the sdp::Stream (docs/preload.md, "How it works").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include <sys/socket.h>

#include "sdp/stream.hpp"

namespace sdp::preload {

class Bridge : public std::enable_shared_from_this<Bridge> {
  public:
    // Makes the socketpair around a connected stream. Returns the bridge and
    // the program's end in *app_fd (close-on-exec, blocking), or nullptr
    // with errno set. start() begins carrying bytes.
    static std::shared_ptr<Bridge> create(Stream stream, int* app_fd);
    ~Bridge();
    Bridge(const Bridge&) = delete;
    Bridge& operator=(const Bridge&) = delete;

    void start();
    // The program's calls while the bridge runs (serialized with its end):
    // keepalive (14.3) and options of the LLP's TCP socket (soft provider).
    // After the connection ended: not_connected / ENOTCONN.
    std::error_code set_keepalive(const Keepalive& k);
    int llp_getsockopt(int level, int name, void* val, socklen_t* len);
    int llp_setsockopt(int level, int name, const void* val, socklen_t len);
    // Before start() only: the stream (its TCP socket's addresses).
    const Stream& stream() const { return stream_; }

    // Process exit: every bridge sends what the program wrote and closes
    // (DisConn), waiting at most `budget` in total for the peers.
    static void finish_all(std::chrono::milliseconds budget);
    // fork(): the registry is locked across it; in the child every bridge
    // of the parent is forgotten without being touched (they run on in the
    // parent).
    static void fork_prepare();
    static void fork_parent();
    static void fork_child();

  private:
    enum class End : std::uint8_t { running, eof, app_gone, reset };
    Bridge() = default;
    void rx_loop();
    void tx_loop();
    // Waits while the program still holds its end after our DisConn went
    // out, until the receive side ends (bounded).
    void linger_after_tx_eof();
    bool send_to_app(const std::uint8_t* p, std::size_t n, int flags);
    // The program's urgent byte is next in our end of the socketpair.
    bool at_urgent_mark() const;
    void ended(bool rx, End how);
    void wake();

    Stream stream_;
    int pump_fd_ = -1;  // our end of the socketpair
    int wake_fd_ = -1;  // eventfd: the receive side ended, or the process exits
    std::mutex mu_;
    std::condition_variable cv_;
    End rx_ = End::running;
    End tx_ = End::running;
    bool exiting_ = false;
    bool closing_ = false;  // ended(): the stream is being closed
};

}  // namespace sdp::preload
