// SPDX-License-Identifier: Apache-2.0
// The blocking socket driver for the soft provider: drives a ChannelCore
// (sdp/soft: the SoftSession and every decision) over one connected TCP
// socket from the caller's threads (blocking calls, poll(2)), with
// TCP_NODELAY and FPDUs sized to TCP_MAXSEG.
//
// Data path: FPDUs are written with sendmsg() as gathered pieces (header,
// payload straight from the SDP message buffer, pad + CRC trailer; see
// SoftSession::prepare_output); reads take 256 KiB at a time and whole
// FPDUs are checked and placed from that buffer without another copy. A
// read_some() that finds nothing queued lends its buffer to the session
// (SoftSession::begin_landing): Data payloads are placed straight into it
// instead of into private buffers, so each byte is copied once in user
// space on the way in.
//
// Threads: any number of threads may call read/write/shutdown concurrently
// (typically one reader and one writer). One of them at a time polls the
// socket (leader); the others wait on a condition variable and are woken
// when the leader has fed new bytes to the session. Calls drive the I/O
// themselves, so a 64-byte round trip costs no thread hand-off. A write()
// wakes the leader only when the leader must add POLLOUT: data held back
// for credit goes out when the leader reads the peer's credit update, in
// large messages with everything written meanwhile (waking it per write()
// would send each write as its own small message). A helper
// thread per channel takes over only while sends are queued (waiting for
// credit or socket space, or a DisConn to go out) and no caller drives, the
// way a kernel socket keeps sending after write() returned. It sleeps on a
// condition variable until a caller leaves with sends queued (no periodic
// wake-ups).
//
// Socket duplication (13.1.1 Remote Peer): when the engine has answered a
// SuspComm and the FIN followed its SuspCommAck, the thread driving the
// socket closes it, connects from the same local address and port to the
// SuspComm's port at the old peer address (SO_REUSEADDR on both sockets,
// so the old connection's TIME_WAIT does not block the bind) and runs the
// MPA startup and Hello again, bounded by handshake_timeout, holding the
// lock but while it polls. The descriptor number stays (dup2). Reads and
// writes wait meanwhile; a failure resets the stream with the reason. (It cannot go: without it,
// data queued by write() beyond the peer's credit would stall until the application's next call.)
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include "sdp/engine/chooser.hpp"
#include "sdp/soft/channel_core.hpp"

namespace sdp::io {

using Clock = std::chrono::steady_clock;

// The drivers' clock for sans-I/O cores that take time as a number
// (engine::MechanismChooser): steady nanoseconds.
inline std::uint64_t steady_ns() {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count());
}

struct ChannelOptions {
    SessionConfig session;
    // Bound on the MPA startup plus Hello/HelloAck.
    std::chrono::milliseconds handshake_timeout{5000};
    // read_some()/write() give up with timed_out after this long without
    // progress (0: wait for ever), like SO_RCVTIMEO / SO_SNDTIMEO.
    std::chrono::milliseconds io_timeout{0};
    // Mechanism::automatic: each write above the engine's bcopy_threshold
    // goes by Bcopy or Read Zcopy as measured cheaper on this connection
    // (engine::MechanismChooser); reads never lend their buffers (Write
    // Zcopy is the writer's to pick).
    bool adaptive = false;
};

// TCP socket helpers (errno-style: false on failure).
bool set_nodelay(int fd);
bool set_nonblocking(int fd, bool on);
// TCP_MAXSEG of a connected socket, or 1460 when unknown.
std::size_t tcp_mss(int fd);
// Abortive close without releasing the descriptor: RST to the peer.
void reset_connection(int fd);
// Bytes in the socket's send queue the peer has not acknowledged (SIOCOUTQ);
// 0 on error.
std::size_t unacked_bytes(int fd);
// `cfg` with what a sans-I/O session cannot draw itself: randomness from the
// OS for its STags.
SessionConfig with_os_randomness(SessionConfig cfg);
// `cfg` without zero copy (drivers whose read path does not do it yet: a
// SrcAvail from the peer is then answered with SendSm at once).
inline SessionConfig bcopy_only(SessionConfig cfg) {
    cfg.engine.bcopy_threshold = 0;
    return cfg;
}
// How long an abort waits for its AbortConn to be written and acknowledged
// (8.2.2) before it resets the connection.
inline constexpr std::chrono::milliseconds kAbortLinger{1000};
// One non-blocking sendmsg() of gathered pieces (MSG_NOSIGNAL): the
// bytes sent, or -1 with errno.
long send_gathered(int fd, std::span<const std::span<const std::uint8_t>> segs);

// Socket duplication initiated here (13.1.1 step 5): what
// SoftChannel::hand_off() takes out of a suspended channel.
struct HandOver {
    engine::Carry carry;
    sockaddr_storage local{};  // the old connection's addresses
    sockaddr_storage peer{};
    socklen_t addr_len = 0;      // 0: unknown
    bool peer_accepted = false;  // the Remote Peer was the Accepting Peer
};

class SoftChannel {
  public:
    static constexpr std::size_t kMaxIov = 128;  // pieces per sendmsg()

    // Takes ownership of `fd` (a connected TCP socket) and runs the MPA
    // startup and SDP setup in `role`, bounded by handshake_timeout. On
    // failure returns nullptr with ec (timed_out, connection_reset,
    // connection_refused: MPA/SDP rejected, protocol_error) and `why`; the
    // socket is closed. `carry` (responder, socket duplication 13.1.1 steps
    // 6-7): the engine starts with its unread bytes readable and its unsent
    // bytes queued first (engine::Connection::carry_in()).
    static std::unique_ptr<SoftChannel> handshake(int fd, iwarp::MpaRole role,
                                                  const ChannelOptions& opts, std::error_code& ec,
                                                  std::string* why = nullptr,
                                                  const engine::Carry* carry = nullptr);
    ~SoftChannel();  // aborts (RST) if not closed
    SoftChannel(const SoftChannel&) = delete;
    SoftChannel& operator=(const SoftChannel&) = delete;

    // Blocks until bytes are available; 0 with no error at end of stream.
    // A read stops at the out-of-band mark; stop_at_urgent: 0 bytes with
    // interrupted when the reader stands on an urgent byte not yet read
    // with read_oob() (sdp::Stream::read_some).
    // may_lend: with zero copy (mechanism zcopy), a large `out` may be lent
    // to the peer for Write Zcopy (SinkAvail, 9.3); a caller that needs
    // `out` filled (read exactly, MSG_WAITALL) passes false: 9.3 forbids
    // advertising such buffers.
    std::size_t read_some(std::span<std::uint8_t> out, std::error_code& ec,
                          bool stop_at_urgent = false, bool may_lend = true);
    // Non-blocking read (sdp::Stream::try_read): the Bcopy data received
    // now (when none is queued, after taking what the socket holds, unless
    // another thread polls it), up to the out-of-band mark. Nothing there
    // (no data, end of stream, an error, a zero-copy advertisement, the
    // urgent byte at the read position with stop_at_urgent, the channel
    // busy for long): 0 with resource_unavailable_try_again; read_some()
    // reports the rest. An empty `out`: 0, no error.
    std::size_t try_read(std::span<std::uint8_t> out, std::error_code& ec,
                         bool stop_at_urgent = false);
    // Blocks (bounded by io_timeout: false with timed_out) until data can be
    // read (true: try_read() takes it) or read_some() has something else
    // to do (false: end of stream, an error, the urgent byte with
    // stop_at_urgent, or a zero-copy advertisement, which read_some() then
    // serves by RDMA Read or answers with SendSm).
    bool wait_readable(std::error_code& ec, bool stop_at_urgent = false);
    // Out-of-band data (9.5.3), as sdp::Stream's calls of the same names.
    // The queries first take what the socket holds (unless another thread
    // polls it), as the kernel processes segments on arrival.
    std::error_code send_oob(std::uint8_t byte);
    std::uint8_t read_oob(std::error_code& ec);
    bool at_mark();
    bool urgent_pending();
    // engine::Connection::send_idle() (Stream::send_idle); false while
    // another thread holds the channel.
    bool send_idle();
    void set_oob_inline(bool on);
    // Blocks until every byte is queued in the SDP engine (as a kernel
    // socket's send buffer); returns the count queued. wait = false
    // (Stream::try_write): queues by Bcopy what fits now and returns (a
    // write of up to kTryWriteWhole whole or not at all); 0 with
    // resource_unavailable_try_again when nothing fits, operation_not_supported
    // for a write the mechanism sends by zero copy or measures (automatic).
    std::size_t write(std::span<const std::uint8_t> in, std::error_code& ec, bool wait = true);
    static constexpr std::size_t kTryWriteWhole = 64 * 1024;
    // Transaction (9.4), with zero copy and no io_timeout: `request` goes
    // in the SinkAvail that lends `reply`, and the call returns what the
    // peer wrote into it (RDMA Write). nullopt, nothing sent: not possible
    // now (Bcopy, the receive half not Pipelined yet, data queued or
    // readable, a reply buffer not larger than the threshold, ...): the
    // caller writes and reads as usual. Once sent, a reply that comes as
    // data (a stale or unused SinkAvail) is read as by read_some().
    std::optional<std::size_t> transact(std::span<const std::uint8_t> request,
                                        std::span<std::uint8_t> reply, std::error_code& ec);
    // Half-close (DisConn after the queued data).
    void shutdown_write(std::error_code& ec);
    // Graceful close: DisConn, wait up to `linger` for the peer's DisConn
    // and the LLP teardown; abortive when the time runs out.
    void close(std::chrono::milliseconds linger, std::error_code& ec);
    // Abortive close: AbortConn (if possible) and RST.
    void abort();
    // Waits until all queued data has been handed to TCP (bounded).
    bool flush(std::chrono::milliseconds timeout);
    // Socket duplication initiated here (13.1.1, Local Peer, steps 2 and
    // 5): SuspComm with `new_port` once In-Process operations are over, the
    // SuspCommAck awaited (handshake_timeout; then the stream is reset:
    // timed_out), the old LLP's EOF awaited in the same bound and the
    // socket shut down (the descriptor stays open until destruction, so a
    // concurrent poll() never sees a reused number). The state comes back;
    // reads and writes blocked in other threads return operation_canceled
    // (a write() with the count it queued: those bytes are in `unsent` or
    // sent), and so does every later call. Errors: invalid_argument (port
    // 0, a close has begun, already suspending), not_connected (not
    // established, handed off already), timed_out, connection_reset.
    std::optional<HandOver> hand_off(std::uint16_t new_port, std::error_code& ec);
    // Non-blocking service for event loops: reads what is there and writes
    // what it can. Returns POLLIN|POLLOUT events to wait for next.
    short pump();

    [[nodiscard]] int native_handle() const { return fd_; }
    [[nodiscard]] std::string describe() const;
    // The SDP engine's counters.
    [[nodiscard]] engine::Stats stats() const;
    [[nodiscard]] std::size_t mss() const { return mss_; }
    [[nodiscard]] bool crc() const;

  private:
    SoftChannel(int fd, iwarp::MpaRole role, const ChannelOptions& opts);
    // Runs the I/O loop until pred() holds (true), the deadline passes or the
    // socket is finished (pred() again). lk holds mu_.
    // Read Zcopy (9.2) for read_some()/write(); nullopt: not taken, go on
    // with Bcopy. write_zcopy_locked() calls started() once the queue
    // before `in` has drained and `in` is advertised.
    std::optional<std::size_t> read_zcopy_locked(std::unique_lock<std::mutex>& lk,
                                                 std::span<std::uint8_t> out, std::error_code& ec);
    // Takes mu_ unless another thread holds it for long (a new LLP
    // connection being made, a large read): the calls that never wait.
    bool lock_briefly(std::unique_lock<std::mutex>& lk);
    // write(wait = false).
    std::size_t try_write_locked(std::span<const std::uint8_t> in, std::error_code& ec);
    std::optional<std::size_t> write_zcopy_locked(std::unique_lock<std::mutex>& lk,
                                                  std::span<const std::uint8_t> in,
                                                  std::error_code& ec,
                                                  const std::function<void()>& started);
    // Write Zcopy (9.3) for read_some() and transact(): `out` lent with
    // SinkAvail (carrying `request` if not empty: a Transaction, 9.4) until
    // the peer wrote into it, a message made it stale or a cancel went
    // through; the bytes placed. nullopt: not lent (`lent` false) or nothing
    // placed; read on with Bcopy.
    std::optional<std::size_t> lend_locked(std::unique_lock<std::mutex>& lk,
                                           std::span<std::uint8_t> out,
                                           std::span<const std::uint8_t> request,
                                           std::error_code& ec, bool& lent);
    // After an abort: the AbortConn written and acknowledged (bounded by
    // kAbortLinger); false when none went out and the socket must be reset.
    bool finish_abort_locked(std::unique_lock<std::mutex>& lk);
    bool drive(std::unique_lock<std::mutex>& lk, const std::function<bool()>& pred,
               std::optional<Clock::time_point> deadline);
    // drive() for a lent zero-copy buffer (9.2, 9.3): a transfer that
    // outlives io_timeout resets the connection, which invalidates the
    // buffer's region before it goes back to the caller; then false and
    // timed_out.
    bool drive_lent(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done,
                    std::error_code& ec);
    // 13.1.1 step 4: the new connection (see above); called by drive().
    void resume_locked(std::unique_lock<std::mutex>& lk);
    void service_locked();
    void read_locked();
    // What the socket holds now, without waiting (skipped while another
    // thread polls: it reads it).
    void refresh_locked();
    void wake_poller();
    // After queueing data: wakes the poller only if it must add POLLOUT.
    void wake_poller_for_output();
    std::optional<Clock::time_point> io_deadline() const;
    void helper_loop();
    void kick_helper();
    // End of a read or write call: credit updates out, the others woken.
    void after_call();

    int fd_ = -1;
    int wake_fd_ = -1;
    // resume_locked() runs: it holds mu_ while it connects (write(wait =
    // false) does not wait for that).
    std::atomic<bool> resuming_now_{false};
    std::size_t mss_ = 1460;
    std::chrono::milliseconds io_timeout_{0};
    std::chrono::milliseconds handshake_timeout_{5000};
    // ChannelOptions::adaptive: the chooser (with the sample being taken).
    engine::WriteChoice choice_;
    // The connection's addresses, taken at the handshake: a duplication
    // reconnects from the same local one to the peer's address (13.1.1);
    // the old socket may no longer know them when that happens.
    sockaddr_storage local_addr_{};
    sockaddr_storage peer_addr_{};
    socklen_t addr_len_ = 0;
    ChannelCore core_;  // the session and every decision (sdp/soft)
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool polling_ = false;
    bool poll_out_ = false;  // the poller waits for POLLOUT too
    std::vector<std::uint8_t> in_;
    std::array<std::span<const std::uint8_t>, kMaxIov> segs_{};  // service_locked()'s output
    bool stop_ = false;
    std::condition_variable helper_cv_;  // only the helper waits here
    std::thread helper_;
};

}  // namespace sdp::io
