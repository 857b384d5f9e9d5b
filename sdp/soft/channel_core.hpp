// SPDX-License-Identifier: Apache-2.0
// The sans-I/O core of a soft-provider channel: one SoftSession plus the
// decisions every socket driver makes the same way — the startup outcome,
// the errors a read or write reports, the LLP (TCP) requests, the gathered
// output, and when the TCP stream is gone. The drivers (sdp/io/channel.hpp:
// blocking, poll(2); sdp/io/asio_channel.hpp: Asio completions) only move
// bytes between this core and a socket and wait.
//
//   input:   on_bytes(bytes), on_llp_lost(errno)
//   output:  next_output(segs) -> write them (writev/sendmsg or an Asio
//            gathered write) -> written(n); write_failed(errno)
//   LLP:     llp() after each change: shutdown_write or reset the socket
//   app:     read(), write(), shutdown_write(), abort() decide; nullopt
//            means "wait for the socket"
//
// While the driver writes the spans of next_output() the core keeps them
// alive: a lost LLP is applied to the session only after written() or
// write_failed() (SoftSession::on_eof() drops the queued output).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "sdp/soft/soft_session.hpp"

namespace sdp::io {

class ChannelCore {
  public:
    // FPDU bytes framed ahead of the socket (one write's worth).
    static constexpr std::size_t kOutHigh = 512 * 1024;

    ChannelCore(iwarp::MpaRole role, const SessionConfig& cfg) : s_(role, cfg), role_(role) {}

    // The TCP MSS (FPDU size); then start() (the initiator's MPA Request;
    // false: the startup failed at once, see startup_error()).
    void set_mss(std::size_t mss) { s_.set_mss(mss); }
    bool start();

    // --- socket duplication (13.1.1 Remote Peer, steps 4 and 8)
    // The SuspCommAck is written and the FIN after it (or the peer closed
    // the old connection): the driver connects to sdp().resume_port() at
    // the old peer address (from the old local address and port), then
    // restart() and start(), and drives startup() as for a first
    // connection; end_resume() when it is over. resume_failed(): the new
    // connection could not be made (the engine resets, `why` for describe()).
    [[nodiscard]] bool resume_due() const;
    bool restart();
    void end_resume() { resuming_ = false; }
    void resume_failed(std::string why);
    // Between the SuspCommAck and the end of the new startup: reads and
    // writes wait (nothing is lost), an EOF of the old LLP is no error.
    [[nodiscard]] bool suspended() const;

    // Socket duplication initiated here (13.1.1 Local Peer, steps 2 and 5):
    // suspending, SuspComm sent or SuspCommAck received, state not handed
    // over yet. Reads wait (an EOF of the old LLP is no error) until the
    // driver takes the state out (engine::Connection::hand_over()); after it
    // every read and write fails with operation_canceled.
    [[nodiscard]] bool handing_off() const;

    // --- input from TCP
    void on_bytes(std::span<const std::uint8_t> in) { s_.on_bytes(in); }
    // TCP delivered EOF (err 0) or failed: nothing more will come.
    void on_llp_lost(int err = 0);

    // --- output to TCP (gathered: headers, payload from the send buffers,
    // trailers). Fills `segs` with what to write next; 0: nothing to write
    // (or the write side is closed). The spans stay valid until written()
    // or write_failed().
    std::size_t next_output(std::span<std::span<const std::uint8_t>> segs);
    void written(std::size_t n);
    // The socket write failed (EPIPE, ECONNRESET, ...): the stream is gone.
    void write_failed(int err);
    [[nodiscard]] bool output_pending() const { return s_.output_queued() > 0; }
    // Nothing framed, nothing left to frame (the LLP FIN may go).
    [[nodiscard]] bool drained() const {
        return !writing_ && s_.output_queued() == 0 && !s_.has_output();
    }
    // Sends the engine still holds (no credit, socket full, DisConn to go):
    // a driver keeps the socket moving while this holds.
    [[nodiscard]] bool tx_pending() const;

    // --- LLP requests: what the driver must do to the socket now (each
    // returned once).
    enum class Llp : std::uint8_t { none, shutdown_write, reset };
    Llp llp();

    // --- startup (MPA + Hello/HelloAck)
    enum class Startup : std::uint8_t { running, established, failed };
    // established: the Accepting Peer's HelloAck is on the wire too (it may
    // only send after the initiator's RTR), so the peer never waits for a
    // stream that nobody drives yet.
    [[nodiscard]] Startup startup() const;
    // failed: connection_refused (MPA reject, SDP version), connection_reset
    // (the LLP went away), protocol_error (not an MPA/SDP peer); `why`.
    [[nodiscard]] std::error_code startup_error(std::string* why) const;

    // The driver resets the socket itself (abort, a failed startup, a
    // close out of time): true when the RST is still to be sent.
    bool take_reset();
    // The driver ends a close: true when the FIN is still to be sent.
    bool take_fin();
    // The driver stops reading the socket (closed).
    void stop_input() { rd_eof_ = true; }

    // --- the application's calls: a value, or nullopt (wait for the
    // socket). read(): n > 0, or 0 (end of stream or with ec).
    // stop_at_urgent: also ready when the reader stands on an out-of-line
    // urgent byte not yet read with read_oob() (read() then fails with
    // interrupted, as a recv(2) interrupted by SIGURG).
    [[nodiscard]] bool read_ready(bool stop_at_urgent = false) const;
    // Bcopy data a read takes now: some is received, and it does not start
    // with the urgent byte when the read stops there (stop_at_urgent).
    [[nodiscard]] bool data_ready(bool stop_at_urgent) const;
    // A reader waits with nothing queued: lend its buffer so Data payloads
    // land straight in it (SoftSession::begin_landing); false: not lent.
    bool begin_landing(std::span<std::uint8_t> zone);
    std::optional<std::size_t> read(std::span<std::uint8_t> out, std::error_code& ec,
                                    bool stop_at_urgent = false);
    // --- zero copy (Read Zcopy, 9.2): the driver starts a transfer with
    // the engine's read_zcopy() / start_zcopy_write() (the buffer is lent
    // until the result below has a value; a driver that must give it back
    // earlier calls abort(): late Read Responses then meet a stale STag).
    // nullopt while the read runs; then the bytes placed, or 0 with ec.
    std::optional<std::size_t> zcopy_read_result(std::error_code& ec);
    // nullopt while the peer may read it; then `size` (all of it went), the
    // part the peer took before a revocation with timed_out (Connection::
    // revoke_zcopy_write()), or 0 with ec (the connection failed).
    std::optional<std::size_t> zcopy_write_result(std::size_t size, std::error_code& ec);

    // Out-of-band data (9.5.3) as the socket calls report it.
    // send(MSG_OOB): queued ({}), an error, or nullopt (wait: a Read Zcopy
    // advertisement is in process).
    std::optional<std::error_code> send_oob(std::uint8_t byte);
    // recv(MSG_OOB): the urgent byte, or ec invalid_argument (none, read,
    // passed, oob_inline) / resource_unavailable_try_again (announced).
    std::uint8_t read_oob(std::error_code& ec);
    // write(): bytes queued in the engine (> 0), or 0 with ec.
    // whole: nothing unless all of `in` fits (up to send_queue_limit).
    std::optional<std::size_t> write(std::span<const std::uint8_t> in, std::error_code& ec,
                                     bool whole = false);
    // Half-close: DisConn after the queued data; closed already: no error.
    std::error_code shutdown_write();
    // Begins the graceful close (DisConn); closed(): the 8.2.1 exchange is
    // over (with close_error()). Unread input is discarded meanwhile.
    void begin_close();
    [[nodiscard]] bool closed();
    [[nodiscard]] std::error_code close_error() const;
    // Abortive close: AbortConn if the engine still can.
    void abort();
    // After abort(): an AbortConn (8.2.2) still waits for credit, or it or
    // the FIN after it is not written yet. A driver keeps the socket moving
    // while this holds (bounded: kAbortLinger), then waits until TCP has the
    // bytes acknowledged, and only resets the socket if time ran out; a
    // reset at once would discard the AbortConn with the socket's queue.
    [[nodiscard]] bool abort_unsent() const;
    // The AbortConn and the FIN after it are written (not reset).
    [[nodiscard]] bool abort_written() const;
    // The error a read (or write) reports in the engine's current state.
    [[nodiscard]] std::error_code state_error(bool for_write) const;

    [[nodiscard]] SoftSession& session() { return s_; }
    [[nodiscard]] const SoftSession& session() const { return s_; }
    [[nodiscard]] engine::Connection& sdp() { return s_.sdp(); }
    [[nodiscard]] bool rd_eof() const { return rd_eof_; }
    [[nodiscard]] bool wr_shut() const { return wr_shut_; }
    [[nodiscard]] bool rst_done() const { return rst_done_; }
    [[nodiscard]] bool writing() const { return writing_; }
    [[nodiscard]] int llp_error() const { return llp_error_; }
    [[nodiscard]] bool crc() const { return s_.mpa().outcome().crc; }
    [[nodiscard]] std::string describe() const {
        return resume_error_.empty() ? s_.describe_error() : resume_error_;
    }

  private:
    void apply_eof();
    // The error of a lost LLP: timed_out for ETIMEDOUT, else connection_reset.
    [[nodiscard]] std::error_code lost_error() const;

    SoftSession s_;
    iwarp::MpaRole role_;
    bool rd_eof_ = false;   // nothing more will come from TCP
    bool wr_shut_ = false;  // FIN sent
    bool rst_done_ = false;
    bool writing_ = false;      // the driver is writing next_output()'s spans
    bool eof_pending_ = false;  // LLP lost while writing: on_eof() after it
    int llp_error_ = 0;
    bool resuming_ = false;  // restart() ran, the new startup is not over
    std::string resume_error_;
};

}  // namespace sdp::io
