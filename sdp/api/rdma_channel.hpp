// SPDX-License-Identifier: Apache-2.0
// The rdma-core provider behind sdp::Stream / sdp::Acceptor (built only with
// SDPPM_HAVE_RDMA; not installed).
//
// RdmaChannel makes an rdma::RdmaSession (single-threaded) usable the way
// the stream uses io::SoftChannel: a reader and a writer thread may call it
// at once. Every use of the session happens under one mutex; a progress
// thread per channel waits (outside the mutex) on the completion channel,
// the rdma_cm event channel and an eventfd, then runs the session's
// progress(), so queued data, credit updates and the DisConn keep moving
// while no caller is inside a call, as a kernel socket does. Callers read
// and write the engine directly under the mutex (no hand-off when data is
// ready) and wait on a condition variable otherwise.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "internal.hpp"
#include "sdp/engine/chooser.hpp"
#include "sdp/rdma/cm.hpp"
#include "sdp/rdma/session.hpp"
#include "sdp/stream.hpp"

namespace sdp::detail {

// The session configuration for stream options: the engine's buffers as
// for the soft provider, connect_timeout for address and route
// resolution, handshake_timeout for ESTABLISHED and for the HelloAck.
rdma::RdmaSessionConfig rdma_config(const StreamOptions& o);

class RdmaChannel final : public ProviderChannel {
  public:
    // Takes an established session and starts its progress thread. nullptr
    // with ec (and why) when the thread or the eventfd cannot be had.
    // Options used: io_timeout, and mechanism (zcopy: writes larger than
    // the threshold go by Read Zcopy, and reads without io_timeout lend
    // buffers larger than it for Write Zcopy; automatic: each write larger
    // than the threshold by the mechanism engine::MechanismChooser picks).
    // Reads take the peer's advertised buffers by RDMA Read whenever the
    // mechanism is not bcopy.
    static std::unique_ptr<RdmaChannel> start(std::unique_ptr<rdma::RdmaSession> s,
                                              const StreamOptions& o, std::error_code& ec,
                                              std::string* why = nullptr);
    ~RdmaChannel() override;  // abortive if not closed
    RdmaChannel(const RdmaChannel&) = delete;
    RdmaChannel& operator=(const RdmaChannel&) = delete;

    std::size_t read_some(std::span<std::uint8_t> out, std::error_code& ec, bool stop_at_urgent,
                          bool may_lend) override;
    // Out-of-band data (9.5.3): the same engine as the soft provider.
    std::error_code send_oob(std::uint8_t byte) override;
    std::uint8_t read_oob(std::error_code& ec) override;
    bool at_mark() override;
    bool urgent_pending() override;
    bool send_idle() override;
    void set_oob_inline(bool on) override;
    std::size_t write(std::span<const std::uint8_t> in, std::error_code& ec, bool wait) override;
    void shutdown_write(std::error_code& ec) override;
    void close(std::chrono::milliseconds linger, std::error_code& ec) override;
    void abort() override;
    // Non-blocking progress; POLLIN (the progress thread does the rest).
    short pump() override;
    // No single descriptor tells readiness here: -1 (use the blocking calls).
    [[nodiscard]] int native_handle() const override { return -1; }
    [[nodiscard]] std::string describe() const override;
    [[nodiscard]] engine::Stats stats() const override;

  private:
    RdmaChannel(std::unique_ptr<rdma::RdmaSession> s, const StreamOptions& o);
    void run();
    // Read Zcopy (9.2) on this provider. read_zcopy_locked(): a started
    // RDMA Read into the reader's buffer, waited for; write_zcopy_locked():
    // nullopt: not taken, write by Bcopy. wait_lent_locked(): waits until
    // done() while a buffer is lent; at the deadline the stream is aborted
    // (a lent buffer cannot be taken back otherwise) and false returned.
    std::size_t read_zcopy_locked(std::unique_lock<std::mutex>& lk,
                                  std::optional<std::chrono::steady_clock::time_point> deadline,
                                  std::error_code& ec);
    // Write Zcopy (9.3) as Data Sink: `out` lent with SinkAvail and waited
    // for; nullopt: not lent (lent false), or given back unfilled (lent
    // true: stale, 9.5.1, withdrawn, 11.3 rule 2a, DisConn or an error).
    std::optional<std::size_t> lend_locked(std::unique_lock<std::mutex>& lk,
                                           std::span<std::uint8_t> out, std::error_code& ec,
                                           bool& lent);
    // started(): the advertisement begins (the queue before it drained).
    std::optional<std::size_t> write_zcopy_locked(std::unique_lock<std::mutex>& lk,
                                                  std::span<const std::uint8_t> in,
                                                  std::error_code& ec,
                                                  const std::function<void()>& started);
    bool wait_lent_locked(std::unique_lock<std::mutex>& lk,
                          std::optional<std::chrono::steady_clock::time_point> deadline,
                          const std::function<bool()>& done);
    void progress_locked();
    // Waits for the progress generation to move (or the deadline); false
    // on timeout. lk holds mu_.
    bool wait_locked(std::unique_lock<std::mutex>& lk,
                     std::optional<std::chrono::steady_clock::time_point> deadline);
    std::optional<std::chrono::steady_clock::time_point> io_deadline() const;
    void stop_thread();

    std::unique_ptr<rdma::RdmaSession> s_;
    std::chrono::milliseconds io_timeout_;
    bool zcopy_ = false;  // StreamOptions::mechanism zcopy
    // StreamOptions::mechanism automatic: the chooser (with its sample).
    engine::WriteChoice choice_;
    std::string device_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::uint64_t gen_ = 0;
    bool stop_ = false;
    bool finished_ = false;  // closed or aborted: the session is torn down
    int wake_fd_ = -1;
    std::thread th_;
};

// SDP straight to an SDP Address over rdma (Stream::connect_sdp).
std::unique_ptr<ProviderChannel> rdma_connect_direct(const pm::Endpoint& sdp_address,
                                                     const StreamOptions& o, std::error_code& ec,
                                                     std::string& why);

// The rdma side of an acceptor: an rdma_cm listener; requests are taken
// without blocking on the accept() thread and finished (rdma_accept, the
// HelloAck) by rdma_accept on a startup thread.
class RdmaListener {
  public:
    static std::unique_ptr<RdmaListener> listen(const pm::Endpoint& local, int backlog,
                                                std::error_code& ec, std::string& why);
    [[nodiscard]] int fd() const { return l_->fd(); }
    [[nodiscard]] std::uint16_t port() const { return l_->port(); }
    // The next pending connection request, or nullptr (ec timed_out when
    // there is none, another error when a request failed).
    std::unique_ptr<rdma::Connection> take(const StreamOptions& o, std::error_code& ec,
                                           std::string& why);

  private:
    std::unique_ptr<rdma::Listener> l_;
};

// The peer of a request, for messages and ConnectInfo.
pm::Endpoint rdma_peer(const rdma::Connection& c);
// Finishes the Accepting Peer's startup on `request` (Hello check,
// rdma_accept, HelloAck) and wraps the session.
std::unique_ptr<ProviderChannel> rdma_accept(std::unique_ptr<rdma::Connection> request,
                                             const StreamOptions& o, std::error_code& ec,
                                             std::string& why);

}  // namespace sdp::detail
