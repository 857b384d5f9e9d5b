// SPDX-License-Identifier: Apache-2.0
// The Boost.Asio driver for the soft provider: drives a ChannelCore (sdp/soft:
// the SoftSession and every decision) over one connected
// boost::asio::ip::tcp::socket from Asio completions. No threads: one read
// is always outstanding (bytes -> on_bytes), one gathered write of the
// core's FPDUs at a time (as the blocking driver's sendmsg), the core's LLP
// requests honoured (FIN once the output is written, RST at once), timers
// for the startup and the close linger.
//
// Like an Asio socket, an AsioChannel is not thread-safe: call it from its
// executor (a single-threaded io_context or a strand). Callbacks are never
// invoked from inside the initiating call: they are posted to the executor.
// Errors are std::errc values (generic category); end of stream is a read
// that completes with no error and 0 bytes; operation_canceled after
// cancel()/abort().
//
// Socket duplication (13.1.1 Remote Peer): after the SuspCommAck and a FIN
// are written, the socket is closed and a new one connects from the same
// local address and port to the SuspComm's port at the peer's address; the
// MPA startup and Hello run again, bounded by handshake_timeout. Pending
// reads and writes wait; a failure resets the stream with the reason.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "sdp/io/channel.hpp"
#include "sdp/soft/channel_core.hpp"

namespace sdp::io {

class AsioChannel : public std::enable_shared_from_this<AsioChannel> {
  public:
    using Socket = boost::asio::ip::tcp::socket;
    using IoCallback = std::function<void(std::error_code, std::size_t)>;
    using Callback = std::function<void(std::error_code)>;
    using HandshakeCallback = std::function<void(std::error_code, std::string why)>;

    // `sock` is connected. Use std::make_shared; then handshake().
    AsioChannel(Socket sock, iwarp::MpaRole role, const ChannelOptions& opts);
    ~AsioChannel();
    AsioChannel(const AsioChannel&) = delete;
    AsioChannel& operator=(const AsioChannel&) = delete;

    // MPA startup + SDP Hello/HelloAck, bounded by handshake_timeout. Errors
    // as SoftChannel::handshake (timed_out, connection_reset,
    // connection_refused, protocol_error; operation_canceled by cancel()).
    // On failure the socket is closed (after an MPA reject went out).
    void handshake(HandshakeCallback cb);
    // One read at a time; completes with >0 bytes, 0 at end of stream, or an
    // error (connection_reset, not_connected, operation_canceled).
    void async_read_some(std::span<std::uint8_t> buf, IoCallback cb);
    // One write at a time; completes once some bytes are queued in the SDP
    // engine (broken_pipe after shutdown_write or close, connection_reset).
    void async_write_some(std::span<const std::uint8_t> buf, IoCallback cb);
    // Half-close: DisConn after the queued data.
    std::error_code shutdown_write();
    // Graceful close: DisConn, the peer's DisConn and the LLP teardown within
    // `linger` (else abortive, timed_out). Pending read/write complete with
    // operation_canceled.
    void async_close(std::chrono::milliseconds linger, Callback cb);
    // Abortive close: AbortConn if possible, then RST. Pending operations
    // complete with operation_canceled.
    void abort();
    // Completes the pending read/write (and a running handshake) with
    // operation_canceled; the connection stays usable after read/write
    // cancellation.
    void cancel();

    // Out-of-band data (9.5.3), synchronous (sdp::AsyncStream's calls of
    // the same names). A pending read stops at the mark.
    std::error_code send_oob(std::uint8_t byte);
    std::uint8_t read_oob(std::error_code& ec) { return core_.read_oob(ec); }
    [[nodiscard]] bool at_mark() { return core_.sdp().at_mark(); }
    [[nodiscard]] bool urgent_pending() { return core_.sdp().urgent_pending(); }
    void set_oob_inline(bool on);
    // The TCP socket (keepalive, 14.3).
    [[nodiscard]] int native_handle() { return sock_.is_open() ? sock_.native_handle() : -1; }

    [[nodiscard]] boost::asio::any_io_executor get_executor() { return ex_; }
    [[nodiscard]] bool is_open() const { return !finished_ && !aborting_; }
    [[nodiscard]] std::size_t mss() const { return mss_; }
    [[nodiscard]] bool crc() const { return core_.crc(); }
    [[nodiscard]] std::string describe() const { return core_.describe(); }
    [[nodiscard]] const engine::Stats& stats() const { return core_.session().sdp().stats(); }

  private:
    struct IoOp {
        std::span<std::uint8_t> rbuf;
        std::span<const std::uint8_t> wbuf;
        IoCallback cb;
        // Read Zcopy (9.2) started with this op's buffer: lent to the RDMA
        // Read (reader) or to the peer (writer) until the core says done.
        bool zcopy = false;
        // Reader: rbuf is lent to the peer for Write Zcopy (SinkAvail, 9.3)
        // until the engine's sink_pending() is false; `revoked` once the
        // caller cancelled it (SinkAvailCancel sent, 9.5.5).
        bool lent = false;
        bool revoked = false;
        // Writer: the mechanism was chosen (once per op); zero copy is to
        // be tried (until the engine starts or refuses it).
        bool chosen = false;
        bool try_zcopy = false;
    };

    void pump();
    void start_read();
    void start_write();
    // Bytes from the socket into the session (landing into a pending read).
    void feed(std::span<const std::uint8_t> bytes);
    void do_llp();
    void check_handshake();
    void check_close();
    void serve_read();
    void serve_write();
    void serve(std::optional<IoOp>& op,
               const std::function<std::optional<std::size_t>(IoOp&, std::error_code&)>& attempt);
    // Posts op's callback with (ec, n) and empties op.
    void complete(std::optional<IoOp>& op, std::error_code ec, std::size_t n);
    // Completes a pending read and write with operation_canceled.
    void cancel_io();
    void finish_handshake(std::error_code ec, std::string why);
    void finish_close(std::error_code ec);
    void finish_socket();
    // After an abort (8.2.2): the socket keeps moving until the AbortConn and
    // the FIN after it are written and acknowledged, within kAbortLinger;
    // then finish_abort() closes it (RST if no AbortConn went out).
    void linger_abort();
    void check_abort();
    void finish_abort();
    void lost_llp(const boost::system::error_code& ec);
    // 13.1.1 step 4 (see above): starts the new connection when the core
    // says so; check_resume() follows its startup; fail_resume() ends it.
    void start_resume();
    void check_resume();
    void fail_resume(std::string why);
    void post_io(IoCallback cb, std::error_code ec, std::size_t n);
    void post(Callback cb, std::error_code ec);

    boost::asio::any_io_executor ex_;
    Socket sock_;
    ChannelCore core_;
    ChannelOptions opts_;
    // ChannelOptions::adaptive: the chooser (with the sample being taken).
    engine::WriteChoice choice_;
    std::size_t mss_ = 1460;
    boost::asio::steady_timer timer_;  // handshake, then close linger

    std::vector<std::uint8_t> in_;
    std::vector<boost::asio::const_buffer> wbufs_;  // the gathered write in flight
    bool reading_ = false;
    bool finished_ = false;  // socket closed
    bool aborting_ = false;  // abort(): the AbortConn is still going out
    std::chrono::steady_clock::time_point abort_deadline_;

    HandshakeCallback hs_cb_;
    bool hs_failing_ = false;  // failed; waiting for the MPA reject to go out
    std::error_code hs_ec_;
    std::string hs_why_;

    // Socket duplication: the connection's addresses (taken at the start),
    // the new connection under way, and the socket generation (completions
    // of a closed socket's operations are ignored).
    boost::asio::ip::tcp::endpoint local_ep_;
    boost::asio::ip::tcp::endpoint peer_ep_;
    bool resuming_ = false;
    bool resume_connected_ = false;
    std::uint64_t gen_ = 0;
    boost::asio::steady_timer resume_timer_;
    // A revoked lent read (cancel_io()): the bound on the peer's answer,
    // and the revocation it belongs to.
    boost::asio::steady_timer revoke_timer_;
    std::uint64_t revoke_gen_ = 0;

    std::optional<IoOp> rd_op_;
    std::optional<IoOp> wr_op_;
    Callback close_cb_;
};

}  // namespace sdp::io
