// SPDX-License-Identifier: Apache-2.0
#include "sdp/io/asio_channel.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>

#include <cerrno>
#include <utility>

namespace sdp::io {

namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr std::size_t kMaxIov = 128;  // pieces per gathered write
constexpr std::chrono::milliseconds kRejectGrace{200};

std::error_code errc(std::errc e) {
    return std::make_error_code(e);
}

}  // namespace

AsioChannel::AsioChannel(Socket sock, iwarp::MpaRole role, const ChannelOptions& opts)
    : ex_(sock.get_executor()),
      sock_(std::move(sock)),
      core_(role, with_os_randomness(opts.session)),
      opts_(opts),
      timer_(ex_),
      resume_timer_(ex_),
      revoke_timer_(ex_) {
    choice_ = engine::WriteChoice(opts.adaptive, opts.session.engine.bcopy_threshold);
    boost::system::error_code e;
    local_ep_ = sock_.local_endpoint(e);
    peer_ep_ = sock_.remote_endpoint(e);
    // A duplication binds the new socket to this address (13.1.1): the old
    // connection's TIME_WAIT inherits the flag only if it is set now.
    sock_.set_option(boost::asio::socket_base::reuse_address(true), e);
    sock_.set_option(boost::asio::ip::tcp::no_delay(true), e);
    sock_.non_blocking(true, e);
    mss_ = tcp_mss(sock_.native_handle());
    core_.set_mss(mss_);
    in_.resize(kReadChunk);
}

AsioChannel::~AsioChannel() {
    if (!finished_ && sock_.is_open()) {
        boost::system::error_code e;
        if (!core_.rd_eof() && !core_.rst_done() && !core_.wr_shut()) {
            sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
        }
        sock_.close(e);
    }
}

void AsioChannel::post_io(IoCallback cb, std::error_code ec, std::size_t n) {
    boost::asio::post(ex_, [cb = std::move(cb), ec, n] { cb(ec, n); });
}

void AsioChannel::post(Callback cb, std::error_code ec) {
    boost::asio::post(ex_, [cb = std::move(cb), ec] { cb(ec); });
}

void AsioChannel::handshake(HandshakeCallback cb) {
    hs_cb_ = std::move(cb);
    if (!core_.start()) {
        std::string why;
        const auto ec = core_.startup_error(&why);
        finish_handshake(ec, std::move(why));
        return;
    }
    timer_.expires_after(opts_.handshake_timeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || !self->hs_cb_) {
            return;
        }
        if (self->hs_failing_) {
            self->finish_handshake(self->hs_ec_, self->hs_why_);
        } else {
            self->finish_handshake(errc(std::errc::timed_out), "SDP/MPA startup timed out");
        }
    });
    pump();
}

void AsioChannel::async_read_some(std::span<std::uint8_t> buf, IoCallback cb) {
    if (rd_op_) {
        post_io(std::move(cb), errc(std::errc::operation_in_progress), 0);
        return;
    }
    if (buf.empty()) {
        post_io(std::move(cb), {}, 0);
        return;
    }
    rd_op_ = IoOp{buf, {}, std::move(cb)};
    pump();
}

void AsioChannel::async_write_some(std::span<const std::uint8_t> buf, IoCallback cb) {
    if (wr_op_) {
        post_io(std::move(cb), errc(std::errc::operation_in_progress), 0);
        return;
    }
    if (buf.empty()) {
        post_io(std::move(cb), {}, 0);
        return;
    }
    wr_op_ = IoOp{{}, buf, std::move(cb)};
    pump();
}

std::error_code AsioChannel::shutdown_write() {
    const auto ec = core_.shutdown_write();
    if (!ec) {
        pump();
    }
    return ec;
}

void AsioChannel::async_close(std::chrono::milliseconds linger, Callback cb) {
    if (finished_ || close_cb_) {
        post(std::move(cb), finished_ ? std::error_code{} : errc(std::errc::operation_in_progress));
        return;
    }
    close_cb_ = std::move(cb);
    cancel_io();
    core_.begin_close();
    timer_.cancel();
    timer_.expires_after(linger);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || !self->close_cb_) {
            return;
        }
        // 8.2.1 did not finish in time: abortive (8.2.2).
        self->core_.abort();
        auto done = std::move(self->close_cb_);
        self->close_cb_ = nullptr;
        self->post(std::move(done), errc(std::errc::timed_out));
        self->linger_abort();
    });
    pump();
}

void AsioChannel::abort() {
    cancel_io();
    if (finished_ || aborting_) {
        return;
    }
    core_.abort();
    if (hs_cb_) {
        hs_failing_ = false;
        auto cb = std::move(hs_cb_);
        hs_cb_ = nullptr;
        boost::asio::post(
            ex_, [cb = std::move(cb)] { cb(errc(std::errc::operation_canceled), "cancelled"); });
    }
    if (close_cb_) {
        auto cb = std::move(close_cb_);
        close_cb_ = nullptr;
        post(std::move(cb), errc(std::errc::operation_canceled));
    }
    linger_abort();
}

void AsioChannel::linger_abort() {
    timer_.cancel();
    if (!core_.abort_unsent() && !core_.abort_written()) {
        finish_abort();  // no AbortConn: the engine asked for a reset
        return;
    }
    aborting_ = true;
    abort_deadline_ = std::chrono::steady_clock::now() + kAbortLinger;
    pump();
}

void AsioChannel::check_abort() {
    if (!aborting_ || finished_) {
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> wake;
    if (now < abort_deadline_) {
        if (core_.abort_unsent()) {
            wake = abort_deadline_;  // the socket's completions move it on
        } else if (core_.abort_written() && !core_.rd_eof() &&
                   unacked_bytes(sock_.native_handle()) > 0) {
            // Written, FIN after it: until TCP has it acknowledged.
            wake = std::min(abort_deadline_, now + std::chrono::milliseconds(1));
        }
    }
    if (!wake) {
        finish_abort();
        return;
    }
    timer_.expires_at(*wake);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec) {
            self->check_abort();
        }
    });
}

void AsioChannel::finish_abort() {
    aborting_ = false;
    timer_.cancel();
    // 8.2.2: after an AbortConn went out, the normal LLP teardown (the FIN
    // is sent); otherwise, or out of time, RST.
    const bool sent =
        core_.abort_written() && (core_.rd_eof() || unacked_bytes(sock_.native_handle()) == 0);
    if (core_.take_reset() && !sent) {
        boost::system::error_code e;
        sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
    }
    finish_socket();
}

void AsioChannel::cancel() {
    cancel_io();
    if (hs_cb_) {
        finish_handshake(errc(std::errc::operation_canceled), "cancelled");
    }
}

void AsioChannel::lost_llp(const boost::system::error_code& ec) {
    core_.on_llp_lost(ec == boost::asio::error::eof ? 0 : ec.value());
}

std::error_code AsioChannel::send_oob(std::uint8_t byte) {
    if (finished_ || aborting_) {
        return std::make_error_code(std::errc::not_connected);
    }
    auto r = core_.send_oob(byte);
    if (!r) {
        // Behind our Read Zcopy advertisement (mechanism zcopy): after the
        // zero-copy write completes.
        return std::make_error_code(std::errc::resource_unavailable_try_again);
    }
    if (!*r) {
        pump();
    }
    return *r;
}

void AsioChannel::set_oob_inline(bool on) {
    core_.sdp().set_oob_inline(on);
    if (!finished_) {
        pump();  // a pending read may take the urgent byte now
    }
}

void AsioChannel::pump() {
    serve_read();
    serve_write();
    start_write();
    do_llp();
    start_resume();
    check_resume();
    serve_read();
    serve_write();
    start_read();
    check_handshake();
    check_close();
    check_abort();
}

void AsioChannel::start_read() {
    if (reading_ || core_.rd_eof() || finished_ || !sock_.is_open() ||
        (resuming_ && !resume_connected_)) {
        return;
    }
    reading_ = true;
    sock_.async_read_some(boost::asio::buffer(in_),
                          [self = shared_from_this(), gen = gen_](
                              const boost::system::error_code& ec, std::size_t n) {
                              if (gen != self->gen_) {
                                  return;  // the socket before a duplication's reconnect
                              }
                              self->reading_ = false;
                              if (self->finished_) {
                                  return;
                              }
                              if (!ec) {
                                  self->feed(std::span<const std::uint8_t>(self->in_.data(), n));
                              } else {
                                  self->lost_llp(ec);
                              }
                              self->pump();
                          });
}

void AsioChannel::feed(std::span<const std::uint8_t> bytes) {
    // A pending read with nothing queued lends its buffer: Data payloads
    // that complete in these bytes land in it directly (SoftSession::
    // begin_landing), one copy less than through the private buffers.
    const bool landing =
        rd_op_ && !rd_op_->zcopy && !rd_op_->lent && core_.begin_landing(rd_op_->rbuf);
    core_.on_bytes(bytes);
    if (!landing) {
        return;
    }
    // A message placed in part goes back to its private buffer.
    if (const std::size_t n = core_.session().end_landing(); n > 0) {
        complete(rd_op_, {}, n);
    }
}

void AsioChannel::start_write() {
    if (finished_ || !sock_.is_open()) {
        return;
    }
    // The session's gathered FPDUs (headers, payload straight from its send
    // buffers, CRC trailers), valid until written() / write_failed().
    std::span<const std::uint8_t> segs[kMaxIov];
    const std::size_t nseg = core_.next_output(segs);
    if (nseg == 0) {
        return;
    }
    wbufs_.clear();
    for (std::size_t i = 0; i < nseg; ++i) {
        wbufs_.emplace_back(segs[i].data(), segs[i].size());
    }
    boost::asio::async_write(
        sock_, wbufs_,
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
            if (ec) {
                self->core_.write_failed(ec.value());
            } else {
                self->core_.written(n);
            }
            if (self->finished_) {
                return;
            }
            self->pump();
        });
}

void AsioChannel::do_llp() {
    if (finished_) {
        return;
    }
    boost::system::error_code e;
    switch (core_.llp()) {
        case ChannelCore::Llp::shutdown_write:
            sock_.shutdown(Socket::shutdown_send, e);
            break;
        case ChannelCore::Llp::reset:
            sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
            // Pending operations see the reset, not a cancellation.
            serve_read();
            serve_write();
            finish_socket();
            break;
        case ChannelCore::Llp::none:
            break;
    }
}

void AsioChannel::start_resume() {
    // Not before the first handshake has completed (its callback reports
    // that connection; the resume follows at once, see check_handshake()).
    if (resuming_ || finished_ || hs_cb_ || core_.writing() || !core_.resume_due()) {
        return;
    }
    const std::uint16_t port = core_.sdp().resume_port();  // restart() clears it
    resuming_ = true;
    resume_connected_ = false;
    ++gen_;  // the old socket's read completes with operation_aborted: ignored
    reading_ = false;
    boost::system::error_code e;
    // An Accepting Peer's old port is its listener's: see below.
    const bool was_acceptor = core_.sdp().role() == engine::Role::accepting;
    sock_.shutdown(Socket::shutdown_both, e);
    sock_.close(e);
    if (!core_.restart()) {
        fail_resume("the engine could not restart");
        return;
    }
    Socket ns(ex_);
    ns.open(peer_ep_.protocol(), e);
    if (!e) {
        ns.set_option(boost::asio::socket_base::reuse_address(true), e);
    }
    if (!e) {
        // Step 1 / 5: the same source address and port; an Accepting Peer
        // whose port still has its listener uses another port of the same
        // address (docs/protocol-notes.md, 13.1.1).
        ns.bind(local_ep_, e);
        if (e == boost::asio::error::address_in_use && was_acceptor) {
            ns.bind(boost::asio::ip::tcp::endpoint(local_ep_.address(), 0), e);
        }
    }
    if (e) {
        fail_resume("bind to the old source port: " + e.message());
        return;
    }
    sock_ = std::move(ns);
    resume_timer_.expires_after(opts_.handshake_timeout);
    resume_timer_.async_wait(
        [self = shared_from_this(), gen = gen_](const boost::system::error_code& ec) {
            if (!ec && gen == self->gen_ && self->resuming_) {
                self->fail_resume("new connection's startup timed out");
                self->pump();
            }
        });
    const boost::asio::ip::tcp::endpoint to(peer_ep_.address(), port);
    sock_.async_connect(
        to, [self = shared_from_this(), gen = gen_, port](const boost::system::error_code& ec) {
            if (gen != self->gen_ || !self->resuming_ || self->finished_) {
                return;
            }
            if (ec) {
                self->fail_resume("connect to port " + std::to_string(port) + ": " + ec.message());
                self->pump();
                return;
            }
            boost::system::error_code e2;
            self->sock_.set_option(boost::asio::ip::tcp::no_delay(true), e2);
            self->sock_.non_blocking(true, e2);
            self->mss_ = tcp_mss(self->sock_.native_handle());
            self->core_.set_mss(self->mss_);
            self->resume_connected_ = true;
            if (!self->core_.start()) {
                std::string why;
                (void)self->core_.startup_error(&why);
                self->fail_resume("MPA startup: " + why);
            }
            self->pump();  // Section 8 again: MPA startup, Hello, HelloAck
        });
}

void AsioChannel::check_resume() {
    if (!resuming_ || !resume_connected_) {
        return;
    }
    switch (core_.startup()) {
        case ChannelCore::Startup::established:
            resuming_ = false;
            resume_timer_.cancel();
            core_.end_resume();
            return;
        case ChannelCore::Startup::failed: {
            std::string why;
            (void)core_.startup_error(&why);
            fail_resume(why);
            return;
        }
        case ChannelCore::Startup::running:
            return;
    }
}

void AsioChannel::fail_resume(std::string why) {
    resuming_ = false;
    resume_timer_.cancel();
    core_.resume_failed(std::move(why));
    boost::system::error_code e;
    sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
    // Pending operations see the reset, not a cancellation.
    serve_read();
    serve_write();
    finish_socket();
}

void AsioChannel::complete(std::optional<IoOp>& op, std::error_code ec, std::size_t n) {
    auto cb = std::move(op->cb);
    op.reset();
    post_io(std::move(cb), ec, n);
}

void AsioChannel::cancel_io() {
    // A buffer lent to a zero-copy write cannot be called back (the peer
    // reads it when it likes): the stream is reset first (its regions
    // invalidated, so the peer's RDMA Read meets a stale STag), then the
    // operation completes and the caller may reuse the buffer. A zero-copy
    // read is ours and ends in bounded time: it is left to complete with
    // the bytes it placed (they are the stream's; cancelling would lose
    // them), as an Asio operation that finished before the cancel.
    // A buffer lent to the peer's RDMA Write (9.3) is revoked
    // (SinkAvailCancel, 9.5.5) and stays lent until the peer answered: the
    // operation then completes with the bytes the peer wrote, if any, or
    // operation_canceled. An idle blocking peer on the soft provider answers
    // only when its application calls in: after handshake_timeout without
    // an answer the stream is reset (the buffer's STag invalidated), as for
    // a lent write. Once the socket is closed nothing can land in it.
    if (wr_op_ && wr_op_->zcopy) {
        core_.abort();
    }
    if (rd_op_ && rd_op_->lent && !finished_) {
        if (!rd_op_->revoked) {
            rd_op_->revoked = true;
            core_.sdp().cancel_sink();
            boost::asio::post(ex_, [self = shared_from_this()] { self->pump(); });
            // The bound belongs to this revocation only: a handler already
            // queued when a later one starts sees another generation.
            const std::uint64_t gen = ++revoke_gen_;
            revoke_timer_.expires_after(opts_.handshake_timeout);
            revoke_timer_.async_wait(
                [self = shared_from_this(), gen](const boost::system::error_code& e) {
                    if (!e && gen == self->revoke_gen_ && self->rd_op_ && self->rd_op_->lent &&
                        !self->finished_) {
                        self->core_.abort();
                        self->pump();
                    }
                });
        }
    } else if (rd_op_ && !rd_op_->zcopy) {
        complete(rd_op_, errc(std::errc::operation_canceled), 0);
    }
    if (wr_op_) {
        complete(wr_op_, errc(std::errc::operation_canceled), 0);
    }
}

// One pending read or write against the core: `attempt` is core_.read or
// core_.write, nullopt while it must wait (bytes, credits, socket space).
void AsioChannel::serve(
    std::optional<IoOp>& op,
    const std::function<std::optional<std::size_t>(IoOp&, std::error_code&)>& attempt) {
    if (!op) {
        return;
    }
    std::error_code ec;
    const auto n = attempt(*op, ec);
    if (!n && !finished_) {
        return;
    }
    if (!n) {
        ec = errc(std::errc::connection_reset);
    }
    complete(op, ec, n.value_or(0));
}

void AsioChannel::serve_read() {
    serve(rd_op_, [this](IoOp& op, std::error_code& ec) -> std::optional<std::size_t> {
        auto& c = core_.sdp();
        if (op.lent) {
            // Lent for Write Zcopy: done when the engine gives it back, with
            // the bytes the peer wrote (RdmaWrCompl), or with none (a
            // message with payload or the peer's SrcAvail came first, 9.5.1
            // and 11.3 rule 2a; cancelled; DisConn): then read as usual.
            if (c.sink_pending()) {
                return std::nullopt;
            }
            op.lent = false;
            if (op.revoked) {
                ++revoke_gen_;  // answered: the bound is over
                revoke_timer_.cancel();
            }
            if (const auto n = c.take_zcopy_read(); n && *n > 0) {
                return *n;  // written before the cancel took effect: kept
            }
            if (op.revoked) {
                ec = errc(std::errc::operation_canceled);
                return 0;
            }
        }
        // The peer's advertised buffer is next: RDMA Read straight into
        // op.rbuf (9.2); the op completes when the read is over.
        if (op.zcopy) {
            return core_.zcopy_read_result(ec);
        }
        if (!finished_ && c.read_zcopy(op.rbuf)) {
            op.zcopy = true;
            return std::nullopt;
        }
        auto n = core_.read(op.rbuf, ec);
        // Nothing to read and a large buffer: lend it to the peer's writer
        // (9.3), as the blocking read does; the SinkAvail leaves with this
        // pump's start_write(). Not with Mechanism::automatic (the writer
        // picks). The engine refuses when zero copy is off or the buffer is
        // not larger than the threshold and the private buffers.
        if (!n && !finished_ && !choice_.automatic() && c.post_sink(op.rbuf)) {
            op.lent = true;
        }
        return n;
    });
}

void AsioChannel::serve_write() {
    serve(wr_op_, [this](IoOp& op, std::error_code& ec) -> std::optional<std::size_t> {
        // A large buffer may be advertised (SrcAvail, 9.2) once what was
        // queued before it has gone; the op then completes when the peer
        // has read it. mechanism zcopy: every buffer above the threshold;
        // automatic: as the chooser says, per op.
        const auto sampled = [&](std::optional<std::size_t> n) {
            if (n) {
                choice_.finished(*n, bool(ec));
            }
            return n;
        };
        if (op.zcopy) {
            return sampled(core_.zcopy_write_result(op.wbuf.size(), ec));
        }
        if (!op.chosen) {
            op.chosen = true;
            // bcopy: the threshold 0 refuses
            op.try_zcopy = choice_.try_zcopy(steady_ns(), op.wbuf.size(), !opts_.adaptive);
        }
        if (op.try_zcopy && !finished_) {
            const auto started = core_.sdp().start_zcopy_write(op.wbuf);
            if (!started) {
                return std::nullopt;  // queued data first
            }
            if (*started) {
                op.zcopy = true;
                choice_.zcopy_started(steady_ns(), op.wbuf.size());
                return std::nullopt;
            }
            op.try_zcopy = false;
            choice_.zcopy_refused(steady_ns(), op.wbuf.size());  // refused: a Bcopy run
        }
        return sampled(core_.write(op.wbuf, ec));
    });
}

void AsioChannel::check_handshake() {
    if (!hs_cb_) {
        return;
    }
    if (hs_failing_) {
        if (core_.drained() || finished_) {
            finish_handshake(hs_ec_, hs_why_);
        }
        return;
    }
    switch (core_.startup()) {
        case ChannelCore::Startup::established:
            finish_handshake({}, {});
            if (core_.resume_due()) {
                // A SuspComm came with the HelloAck's flight (13.1.1).
                boost::asio::post(ex_, [self = shared_from_this()] { self->pump(); });
            }
            return;
        case ChannelCore::Startup::failed:
            hs_ec_ = core_.startup_error(&hs_why_);
            hs_failing_ = true;
            if (core_.drained() || finished_) {
                finish_handshake(hs_ec_, hs_why_);
                return;
            }
            // Let an MPA reject frame go out before the socket closes.
            timer_.cancel();
            timer_.expires_after(kRejectGrace);
            timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
                if (!ec && self->hs_cb_ && self->hs_failing_) {
                    self->finish_handshake(self->hs_ec_, self->hs_why_);
                }
            });
            return;
        case ChannelCore::Startup::running:
            if (finished_) {
                finish_handshake(errc(std::errc::connection_reset), core_.describe());
            }
            return;
    }
}

void AsioChannel::finish_handshake(std::error_code ec, std::string why) {
    timer_.cancel();
    hs_failing_ = false;
    auto cb = std::move(hs_cb_);
    hs_cb_ = nullptr;
    if (ec && !finished_) {
        boost::system::error_code e;
        sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
        core_.take_reset();
        finish_socket();
    }
    if (cb) {
        boost::asio::post(ex_, [cb = std::move(cb), ec, why = std::move(why)] { cb(ec, why); });
    }
}

void AsioChannel::check_close() {
    if (!close_cb_) {
        return;
    }
    const bool done = core_.closed();  // discards unread input
    start_write();                     // credit updates, a declined advertisement's SendSm
    if (done && (!core_.writing() || finished_)) {
        finish_close(core_.close_error());
    } else if (finished_) {
        finish_close(errc(std::errc::connection_reset));
    }
}

void AsioChannel::finish_close(std::error_code ec) {
    timer_.cancel();
    auto cb = std::move(close_cb_);
    close_cb_ = nullptr;
    if (!finished_) {
        boost::system::error_code e;
        if (ec == std::errc::timed_out) {
            sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
        } else if (core_.take_fin()) {
            sock_.shutdown(Socket::shutdown_send, e);
        }
        finish_socket();
    }
    if (cb) {
        post(std::move(cb), ec);
    }
}

void AsioChannel::finish_socket() {
    if (finished_) {
        return;
    }
    finished_ = true;
    core_.stop_input();
    ++revoke_gen_;
    revoke_timer_.cancel();
    boost::system::error_code e;
    sock_.close(e);  // outstanding socket operations end with operation_aborted
    cancel_io();
}

}  // namespace sdp::io
