// SPDX-License-Identifier: Apache-2.0
#include "sdp/soft/channel_core.hpp"

#include <algorithm>
#include <cerrno>

namespace sdp::io {

namespace {

std::error_code errc(std::errc e) {
    return std::make_error_code(e);
}

}  // namespace

std::error_code ChannelCore::lost_error() const {
    // ETIMEDOUT from TCP: its keepalive (14.3) or retransmissions gave up.
    return errc(llp_error_ == ETIMEDOUT ? std::errc::timed_out : std::errc::connection_reset);
}

bool ChannelCore::start() {
    return role_ != iwarp::MpaRole::initiator || s_.start();
}

bool ChannelCore::resume_due() const {
    const auto& c = s_.sdp();
    if (c.state() != engine::State::established) {
        return false;
    }
    // Step 4: after the SuspCommAck was written and the FIN after it.
    return c.duplication() == engine::Dup::reconnecting ||
           (c.duplication() == engine::Dup::remote_acked && wr_shut_);
}

bool ChannelCore::suspended() const {
    const auto d = s_.sdp().duplication();
    return resuming_ || d == engine::Dup::remote_acked || d == engine::Dup::reconnecting;
}

bool ChannelCore::handing_off() const {
    const auto d = s_.sdp().duplication();
    return d == engine::Dup::local_waiting || d == engine::Dup::local_sent ||
           d == engine::Dup::local_done;
}

bool ChannelCore::restart() {
    if (!s_.eof_seen()) {
        s_.on_eof();  // the old LLP is gone (the engine: reconnecting)
    }
    if (!s_.restart(iwarp::MpaRole::initiator)) {
        return false;
    }
    role_ = iwarp::MpaRole::initiator;  // the Remote Peer connects (step 4)
    rd_eof_ = false;
    wr_shut_ = false;
    rst_done_ = false;
    writing_ = false;
    eof_pending_ = false;
    llp_error_ = 0;
    resuming_ = true;
    return true;
}

void ChannelCore::resume_failed(std::string why) {
    resuming_ = false;
    resume_error_ = "SDP socket duplication (13.1.1): " + std::move(why);
    s_.sdp().resume_failed();
    rd_eof_ = true;
    rst_done_ = true;
}

void ChannelCore::apply_eof() {
    if (!s_.eof_seen()) {
        s_.on_eof();
    }
}

void ChannelCore::on_llp_lost(int err) {
    rd_eof_ = true;
    if (llp_error_ == 0) {
        llp_error_ = err;
    }
    if (writing_) {
        eof_pending_ = true;  // the driver still writes the session's spans
    } else {
        apply_eof();
    }
}

std::size_t ChannelCore::next_output(std::span<std::span<const std::uint8_t>> segs) {
    if (rst_done_ || wr_shut_ || writing_) {
        return 0;
    }
    if (s_.output_queued() < kOutHigh) {
        // Also picks up MPA frames (not reported by has_output()).
        s_.prepare_output(kOutHigh);
    }
    if (s_.output_queued() == 0) {
        return 0;
    }
    const std::size_t n = s_.peek_output(segs);
    writing_ = n > 0;
    return n;
}

void ChannelCore::written(std::size_t n) {
    writing_ = false;
    if (n > 0 && !s_.eof_seen()) {
        s_.consume_output(n);
    }
    if (eof_pending_) {
        eof_pending_ = false;
        apply_eof();
    }
}

void ChannelCore::write_failed(int err) {
    writing_ = false;
    eof_pending_ = false;
    rd_eof_ = true;
    if (llp_error_ == 0) {
        llp_error_ = err;
    }
    apply_eof();  // drops the queued output
}

bool ChannelCore::tx_pending() const {
    if (resume_due()) {
        return true;
    }
    if ((rd_eof_ && !suspended()) || rst_done_) {
        return false;
    }
    const auto& c = s_.sdp();
    return s_.output_queued() > 0 || s_.has_output() || c.send_queued() > 0 ||
           (s_.llp_request() == LlpRequest::fin && !wr_shut_);
}

ChannelCore::Llp ChannelCore::llp() {
    switch (s_.llp_request()) {
        case LlpRequest::fin:
            if (!wr_shut_ && !rst_done_ && drained()) {
                wr_shut_ = true;
                return Llp::shutdown_write;
            }
            break;
        case LlpRequest::rst:
            if (!rst_done_) {
                rst_done_ = true;
                on_llp_lost();
                return Llp::reset;
            }
            break;
        case LlpRequest::none:
            break;
    }
    return Llp::none;
}

bool ChannelCore::take_reset() {
    const bool need = !rst_done_;
    rst_done_ = true;
    on_llp_lost();
    return need;
}

bool ChannelCore::take_fin() {
    if (rst_done_ || wr_shut_) {
        return false;
    }
    wr_shut_ = true;
    return true;
}

ChannelCore::Startup ChannelCore::startup() const {
    const auto p = s_.phase();
    if (p == SessionPhase::failed) {
        return Startup::failed;
    }
    if (p == SessionPhase::established && s_.sends_flushed() && drained()) {
        return s_.sdp().state() == engine::State::established ? Startup::established
                                                              : Startup::failed;
    }
    return rd_eof_ ? Startup::failed : Startup::running;
}

std::error_code ChannelCore::startup_error(std::string* why) const {
    if (why != nullptr) {
        *why = s_.describe_error();
    }
    if (s_.mpa().error() == iwarp::MpaError::rejected_by_peer ||
        s_.sdp().error() == engine::Error::version_mismatch) {
        return errc(std::errc::connection_refused);
    }
    if (s_.eof_seen() || rd_eof_) {
        return errc(std::errc::connection_reset);
    }
    return errc(std::errc::protocol_error);
}

std::error_code ChannelCore::state_error(bool for_write) const {
    const auto& c = s_.sdp();
    switch (c.state()) {
        case engine::State::closed:
            return errc(for_write ? std::errc::broken_pipe : std::errc::connection_reset);
        case engine::State::reset:
            if (c.error() == engine::Error::local_abort) {
                return errc(std::errc::not_connected);
            }
            if (c.error() == engine::Error::handed_off) {
                return errc(std::errc::operation_canceled);  // 13.1.1 step 5
            }
            if (c.error() == engine::Error::llp_lost && llp_error_ == ETIMEDOUT) {
                return errc(std::errc::timed_out);  // TCP keepalive (14.3) gave up
            }
            return errc(std::errc::connection_reset);
        case engine::State::failed:
            return errc(std::errc::not_connected);
        default:
            break;
    }
    if (for_write && (c.write_shut() || c.write_space() == 0)) {
        return errc(std::errc::broken_pipe);
    }
    return errc(std::errc::connection_reset);
}

bool ChannelCore::begin_landing(std::span<std::uint8_t> zone) {
    return s_.sdp().readable() == 0 && s_.sdp().state() == engine::State::established &&
           s_.begin_landing(zone);
}

bool ChannelCore::read_ready(bool stop_at_urgent) const {
    const auto& c = s_.sdp();
    if (c.readable() > 0 || (stop_at_urgent && c.at_urgent()) || c.zcopy_readable() > 0 ||
        c.eof()) {
        return true;
    }
    return !suspended() && !handing_off() &&
           (rd_eof_ ||
            (c.state() != engine::State::established && c.state() != engine::State::connecting));
}

bool ChannelCore::data_ready(bool stop_at_urgent) const {
    const auto& c = s_.sdp();
    return c.readable() > 0 && !(stop_at_urgent && c.at_urgent());
}

std::optional<std::size_t> ChannelCore::read(std::span<std::uint8_t> out, std::error_code& ec,
                                             bool stop_at_urgent) {
    ec.clear();
    auto& c = s_.sdp();
    if (stop_at_urgent && c.at_urgent()) {
        ec = errc(std::errc::interrupted);
        return 0;
    }
    if (c.readable() > 0) {
        return c.read(out);
    }
    if (c.eof()) {
        return 0;  // end of stream
    }
    if (suspended() || handing_off()) {
        return std::nullopt;  // the stream goes on on the new connection
    }
    if (c.state() != engine::State::established && c.state() != engine::State::connecting) {
        ec = state_error(false);
        return 0;
    }
    if (rd_eof_) {
        ec = lost_error();
        return 0;
    }
    return std::nullopt;
}

std::optional<std::size_t> ChannelCore::zcopy_read_result(std::error_code& ec) {
    ec.clear();
    auto& c = s_.sdp();
    if (c.zcopy_read_pending()) {
        return std::nullopt;
    }
    if (auto n = c.take_zcopy_read()) {
        return n;
    }
    ec = state_error(false);
    return 0;
}

std::optional<std::size_t> ChannelCore::zcopy_write_result(std::size_t size, std::error_code& ec) {
    ec.clear();
    auto& c = s_.sdp();
    if (c.zcopy_write_pending()) {
        return std::nullopt;
    }
    if (c.state() != engine::State::established) {
        ec = state_error(true);
        // Handed off (13.1.1 step 5): the peer read part, the rest is in
        // the handed-over unsent bytes (unless a revocation ended the write
        // first: then what the peer took).
        return c.error() == engine::Error::handed_off ? c.take_zcopy_write_count(size) : 0;
    }
    // A revoked write (io_timeout, 9.5.4) counts what the peer took and
    // timed out, as a Bcopy write does; the stream stays intact.
    const std::size_t n = c.take_zcopy_write_count(size);
    if (n < size) {
        ec = std::make_error_code(std::errc::timed_out);
    }
    return n;
}

std::optional<std::error_code> ChannelCore::send_oob(std::uint8_t byte) {
    auto& c = s_.sdp();
    if (c.state() != engine::State::established || c.write_shut()) {
        return state_error(true);
    }
    if (rd_eof_) {
        return lost_error();
    }
    if (c.zcopy_write_pending()) {
        return std::nullopt;
    }
    return c.write_oob(byte) ? std::error_code{} : state_error(true);
}

std::uint8_t ChannelCore::read_oob(std::error_code& ec) {
    ec.clear();
    auto& c = s_.sdp();
    if (auto b = c.read_oob()) {
        return *b;
    }
    ec = errc(c.oob_not_yet() ? std::errc::resource_unavailable_try_again
                              : std::errc::invalid_argument);
    return 0;
}

std::optional<std::size_t> ChannelCore::write(std::span<const std::uint8_t> in, std::error_code& ec,
                                              bool whole) {
    ec.clear();
    auto& c = s_.sdp();
    if (resuming_) {
        return std::nullopt;  // the new connection's startup runs
    }
    if (c.state() != engine::State::established || c.write_shut()) {
        ec = state_error(true);
        return 0;
    }
    if (rd_eof_ && !suspended()) {
        if (handing_off()) {
            // 13.1.1 step 5: the old LLP closed after the SuspCommAck; the
            // hand-off takes the state next (then operation_canceled).
            return std::nullopt;
        }
        ec = lost_error();
        return 0;
    }
    if (whole && !c.takes_whole(in.size())) {
        return std::nullopt;  // not all of it fits now
    }
    const std::size_t n = c.write(in);
    if (n == 0 && !in.empty()) {
        return std::nullopt;  // no space: credits or the socket must move
    }
    return n;
}

std::error_code ChannelCore::shutdown_write() {
    auto& c = s_.sdp();
    if (c.state() != engine::State::established) {
        return c.state() == engine::State::closed ? std::error_code{} : state_error(true);
    }
    c.shutdown_write();
    return {};
}

void ChannelCore::begin_close() {
    auto& c = s_.sdp();
    if (c.state() == engine::State::established) {
        c.shutdown_write();
    }
}

bool ChannelCore::closed() {
    auto& c = s_.sdp();
    c.discard_input();
    return c.state() != engine::State::established && c.state() != engine::State::connecting;
}

std::error_code ChannelCore::close_error() const {
    const auto& c = s_.sdp();
    if (c.state() == engine::State::reset && c.error() != engine::Error::local_abort &&
        c.error() != engine::Error::handed_off) {
        return errc(std::errc::connection_reset);
    }
    return {};
}

bool ChannelCore::abort_unsent() const {
    // Once the FIN went (wr_shut_) nothing more can be written; an AbortConn
    // is followed by the FIN as soon as it is written (8.2.2).
    if (rd_eof_ || rst_done_ || wr_shut_) {
        return false;
    }
    const auto st = s_.sdp().send_teardown();
    return st == engine::SendTeardown::abort_pending || st == engine::SendTeardown::abort_sent;
}

bool ChannelCore::abort_written() const {
    return !rst_done_ && wr_shut_ && s_.sdp().send_teardown() == engine::SendTeardown::abort_sent;
}

void ChannelCore::abort() {
    auto& c = s_.sdp();
    if (c.state() == engine::State::established || c.state() == engine::State::connecting) {
        c.abort();
    }
}

}  // namespace sdp::io
