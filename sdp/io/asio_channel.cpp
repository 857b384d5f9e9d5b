#include "sdp/io/asio_channel.hpp"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <cerrno>
#include <utility>

namespace sdp::io {

namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr std::size_t kOutHigh = 512 * 1024;  // bytes of FPDUs per socket write
constexpr std::chrono::milliseconds kRejectGrace{200};

std::error_code errc(std::errc e) {
    return std::make_error_code(e);
}

}  // namespace

AsioChannel::AsioChannel(Socket sock, iwarp::MpaRole role, const ChannelOptions& opts)
    : ex_(sock.get_executor()),
      sock_(std::move(sock)),
      session_(role, opts.session),
      role_(role),
      opts_(opts),
      timer_(ex_) {
    boost::system::error_code e;
    sock_.set_option(boost::asio::ip::tcp::no_delay(true), e);
    sock_.non_blocking(true, e);
    mss_ = tcp_mss(sock_.native_handle());
    session_.set_mss(mss_);
    in_.resize(kReadChunk);
}

AsioChannel::~AsioChannel() {
    if (!finished_ && sock_.is_open()) {
        boost::system::error_code e;
        if (!rd_eof_ && !rst_done_ && !wr_shut_) {
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
    if (role_ == iwarp::MpaRole::initiator && !session_.start()) {
        finish_handshake(errc(std::errc::protocol_error), session_.describe_error());
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
    auto& c = session_.sdp();
    if (c.state() != engine::State::established) {
        return c.state() == engine::State::closed ? std::error_code{} : state_error(true);
    }
    c.shutdown_write();
    pump();
    return {};
}

void AsioChannel::async_close(std::chrono::milliseconds linger, Callback cb) {
    if (finished_ || close_cb_) {
        post(std::move(cb), finished_ ? std::error_code{} : errc(std::errc::operation_in_progress));
        return;
    }
    close_cb_ = std::move(cb);
    if (rd_op_) {
        post_io(std::move(rd_op_->cb), errc(std::errc::operation_canceled), 0);
        rd_op_.reset();
    }
    if (wr_op_) {
        post_io(std::move(wr_op_->cb), errc(std::errc::operation_canceled), 0);
        wr_op_.reset();
    }
    auto& c = session_.sdp();
    if (c.state() == engine::State::established) {
        c.shutdown_write();
    }
    timer_.cancel();
    timer_.expires_after(linger);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || !self->close_cb_) {
            return;
        }
        // 8.2.1 did not finish in time: abortive.
        auto& conn = self->session_.sdp();
        if (conn.state() == engine::State::established ||
            conn.state() == engine::State::connecting) {
            conn.abort();
        }
        self->finish_close(errc(std::errc::timed_out));
    });
    pump();
}

void AsioChannel::abort() {
    if (rd_op_) {
        post_io(std::move(rd_op_->cb), errc(std::errc::operation_canceled), 0);
        rd_op_.reset();
    }
    if (wr_op_) {
        post_io(std::move(wr_op_->cb), errc(std::errc::operation_canceled), 0);
        wr_op_.reset();
    }
    if (finished_) {
        return;
    }
    auto& c = session_.sdp();
    if (c.state() == engine::State::established || c.state() == engine::State::connecting) {
        c.abort();
    }
    if (!session_.eof_seen()) {
        // Best effort: the AbortConn, unless a write is in flight.
        if (!writing_ && !rst_done_ && !wr_shut_) {
            out_.clear();
            session_.take_output(out_, kOutHigh);
            if (!out_.empty()) {
                (void)!::send(sock_.native_handle(), out_.data(), out_.size(),
                              MSG_DONTWAIT | MSG_NOSIGNAL);
            }
            out_.clear();
        }
        session_.on_eof();
    }
    boost::system::error_code e;
    if (!rst_done_ && !wr_shut_) {
        sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
    }
    rst_done_ = true;
    rd_eof_ = true;
    finish_socket();
    if (hs_cb_) {
        hs_failing_ = false;
        timer_.cancel();
        auto cb = std::move(hs_cb_);
        hs_cb_ = nullptr;
        boost::asio::post(
            ex_, [cb = std::move(cb)] { cb(errc(std::errc::operation_canceled), "cancelled"); });
    }
    if (close_cb_) {
        finish_close(errc(std::errc::operation_canceled));
    }
}

void AsioChannel::cancel() {
    if (rd_op_) {
        post_io(std::move(rd_op_->cb), errc(std::errc::operation_canceled), 0);
        rd_op_.reset();
    }
    if (wr_op_) {
        post_io(std::move(wr_op_->cb), errc(std::errc::operation_canceled), 0);
        wr_op_.reset();
    }
    if (hs_cb_) {
        finish_handshake(errc(std::errc::operation_canceled), "cancelled");
    }
}

std::error_code AsioChannel::state_error(bool for_write) const {
    const auto& c = session_.sdp();
    switch (c.state()) {
        case engine::State::closed:
            return errc(for_write ? std::errc::broken_pipe : std::errc::connection_reset);
        case engine::State::reset:
            if (c.error() == engine::Error::local_abort) {
                return errc(std::errc::not_connected);
            }
            return errc(std::errc::connection_reset);
        case engine::State::failed:
            return errc(std::errc::not_connected);
        default:
            break;
    }
    if (for_write && (c.disconn_sent() || c.write_space() == 0)) {
        return errc(std::errc::broken_pipe);
    }
    return errc(std::errc::connection_reset);
}

void AsioChannel::lost_llp(const boost::system::error_code&) {
    rd_eof_ = true;
    if (!session_.eof_seen()) {
        session_.on_eof();
    }
}

void AsioChannel::pump() {
    serve_read();
    serve_write();
    start_write();
    do_llp();
    serve_read();
    serve_write();
    start_read();
    check_handshake();
    check_close();
}

void AsioChannel::start_read() {
    if (reading_ || rd_eof_ || finished_ || !sock_.is_open()) {
        return;
    }
    reading_ = true;
    sock_.async_read_some(
        boost::asio::buffer(in_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
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
    auto& c = session_.sdp();
    const bool landing = rd_op_ && c.readable() == 0 && c.state() == engine::State::established &&
                         session_.begin_landing(rd_op_->rbuf);
    session_.on_bytes(bytes);
    if (!landing) {
        return;
    }
    // A message placed in part goes back to its private buffer.
    if (const std::size_t n = session_.end_landing(); n > 0) {
        auto cb = std::move(rd_op_->cb);
        rd_op_.reset();
        post_io(std::move(cb), {}, n);
    }
}

void AsioChannel::start_write() {
    if (writing_ || wr_shut_ || rst_done_ || finished_ || !sock_.is_open()) {
        return;
    }
    out_.clear();
    // Also picks up MPA frames (not reported by has_output()).
    session_.take_output(out_, kOutHigh);
    if (out_.empty()) {
        return;
    }
    writing_ = true;
    boost::asio::async_write(
        sock_, boost::asio::buffer(out_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
            self->writing_ = false;
            self->out_.clear();
            if (self->finished_) {
                return;
            }
            if (ec) {
                self->lost_llp(ec);
            }
            self->pump();
        });
}

void AsioChannel::do_llp() {
    if (finished_) {
        return;
    }
    boost::system::error_code e;
    switch (session_.llp_request()) {
        case LlpRequest::fin:
            if (!wr_shut_ && !rst_done_ && !writing_ && !session_.has_output()) {
                sock_.shutdown(Socket::shutdown_send, e);
                wr_shut_ = true;
            }
            break;
        case LlpRequest::rst:
            if (!rst_done_) {
                rst_done_ = true;
                sock_.set_option(boost::asio::socket_base::linger(true, 0), e);
                rd_eof_ = true;
                if (!session_.eof_seen()) {
                    session_.on_eof();
                }
                // Pending operations see the reset, not a cancellation.
                serve_read();
                serve_write();
                finish_socket();
            }
            break;
        case LlpRequest::none:
            break;
    }
}

void AsioChannel::serve_read() {
    if (!rd_op_) {
        return;
    }
    auto& c = session_.sdp();
    std::error_code ec;
    std::size_t n = 0;
    if (c.readable() > 0) {
        n = c.read(rd_op_->rbuf);
    } else if (c.eof()) {
        // end of stream: no error, 0 bytes
    } else if (c.state() != engine::State::established && c.state() != engine::State::connecting) {
        ec = state_error(false);
    } else if (rd_eof_ || finished_) {
        ec = errc(std::errc::connection_reset);
    } else {
        return;
    }
    auto cb = std::move(rd_op_->cb);
    rd_op_.reset();
    post_io(std::move(cb), ec, n);
}

void AsioChannel::serve_write() {
    if (!wr_op_) {
        return;
    }
    auto& c = session_.sdp();
    std::error_code ec;
    std::size_t n = 0;
    if (c.state() != engine::State::established || c.disconn_sent()) {
        ec = state_error(true);
    } else if (rd_eof_ || finished_) {
        ec = errc(std::errc::connection_reset);
    } else {
        n = c.write(wr_op_->wbuf);
        if (n == 0) {
            return;  // no space: wait for credits / socket progress
        }
    }
    auto cb = std::move(wr_op_->cb);
    wr_op_.reset();
    post_io(std::move(cb), ec, n);
}

void AsioChannel::check_handshake() {
    if (!hs_cb_) {
        return;
    }
    const bool drained = !writing_ && out_.empty() && !session_.has_output();
    if (hs_failing_) {
        if (drained || finished_) {
            finish_handshake(hs_ec_, hs_why_);
        }
        return;
    }
    const auto p = session_.phase();
    if (p == SessionPhase::failed) {
        const auto& mpa = session_.mpa();
        if (mpa.error() == iwarp::MpaError::rejected_by_peer ||
            session_.sdp().error() == engine::Error::version_mismatch) {
            hs_ec_ = errc(std::errc::connection_refused);
        } else if (session_.eof_seen()) {
            hs_ec_ = errc(std::errc::connection_reset);
        } else {
            hs_ec_ = errc(std::errc::protocol_error);
        }
        hs_why_ = session_.describe_error();
        hs_failing_ = true;
        if (drained || finished_) {
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
    }
    // The Accepting Peer completes once its HelloAck is on the wire.
    if (p == SessionPhase::established && session_.sends_flushed() && drained) {
        if (session_.sdp().state() == engine::State::established) {
            finish_handshake({}, {});
        } else {
            finish_handshake(state_error(false), session_.describe_error());
        }
        return;
    }
    if (finished_) {
        finish_handshake(errc(std::errc::connection_reset), session_.describe_error());
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
        rst_done_ = true;
        rd_eof_ = true;
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
    auto& c = session_.sdp();
    if (c.readable() > 0) {
        // Unread incoming data is discarded, as close(2) would.
        std::vector<std::uint8_t> sink(64 * 1024);
        while (c.readable() > 0) {
            c.read(sink);
        }
        start_write();  // credit updates
    }
    const bool done =
        c.state() != engine::State::established && c.state() != engine::State::connecting;
    if (done && ((!writing_ && out_.empty()) || finished_)) {
        std::error_code ec;
        if (c.state() == engine::State::reset && c.error() != engine::Error::local_abort) {
            ec = errc(std::errc::connection_reset);
        }
        finish_close(ec);
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
        } else if (!rst_done_ && !wr_shut_) {
            sock_.shutdown(Socket::shutdown_send, e);
            wr_shut_ = true;
        }
        rd_eof_ = true;
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
    rd_eof_ = true;
    boost::system::error_code e;
    sock_.close(e);  // outstanding socket operations end with operation_aborted
    if (rd_op_) {
        auto cb = std::move(rd_op_->cb);
        rd_op_.reset();
        post_io(std::move(cb), errc(std::errc::operation_canceled), 0);
    }
    if (wr_op_) {
        auto cb = std::move(wr_op_->cb);
        wr_op_.reset();
        post_io(std::move(cb), errc(std::errc::operation_canceled), 0);
    }
}

}  // namespace sdp::io
