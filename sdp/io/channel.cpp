#include "sdp/io/channel.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sdp::io {

namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr std::size_t kReadPerRound = 1024 * 1024;
constexpr std::size_t kOutHigh = 512 * 1024;  // stop building FPDUs above this
constexpr std::size_t kMaxIov = 128;          // pieces per sendmsg()

int poll_timeout(std::optional<Clock::time_point> deadline) {
    if (!deadline) {
        return -1;
    }
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
    return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
}

}  // namespace

bool set_nodelay(int fd) {
    int on = 1;
    return ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0;
}

bool set_nonblocking(int fd, bool on) {
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0) {
        return false;
    }
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return ::fcntl(fd, F_SETFL, fl) == 0;
}

std::size_t tcp_mss(int fd) {
    int mss = 0;
    socklen_t len = sizeof mss;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss < 64) {
        return 1460;
    }
    return static_cast<std::size_t>(mss);
}

void reset_connection(int fd) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    // connect(AF_UNSPEC) disconnects a TCP socket; from an established state
    // Linux sends RST (tcp_disconnect), and the descriptor stays valid so a
    // concurrent poll() never sees a reused number.
    sockaddr sa{};
    sa.sa_family = AF_UNSPEC;
    ::connect(fd, &sa, sizeof sa);
}

SoftChannel::SoftChannel(int fd, iwarp::MpaRole role, const ChannelOptions& opts)
    : fd_(fd), io_timeout_(opts.io_timeout), session_(role, opts.session) {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    in_.resize(kReadChunk);
}

SoftChannel::~SoftChannel() {
    {
        std::unique_lock lk(mu_);
        stop_ = true;
        wake_poller();
        cv_.notify_all();
        helper_cv_.notify_all();
    }
    if (helper_.joinable()) {
        helper_.join();
    }
    {
        std::unique_lock lk(mu_);
        if (!rd_eof_ && !rst_done_) {
            auto s = session_.sdp().state();
            if (s == engine::State::established || s == engine::State::connecting) {
                session_.sdp().abort();
                service_locked();
            }
            if (!rst_done_ && !wr_shut_) {
                reset_connection(fd_);
            }
        }
    }
    if (fd_ >= 0) {
        ::close(fd_);
    }
    if (wake_fd_ >= 0) {
        ::close(wake_fd_);
    }
}

std::unique_ptr<SoftChannel> SoftChannel::handshake(int fd, iwarp::MpaRole role,
                                                    const ChannelOptions& opts, std::error_code& ec,
                                                    std::string* why) {
    ec.clear();
    set_nodelay(fd);
    set_nonblocking(fd, true);
    std::unique_ptr<SoftChannel> ch(new SoftChannel(fd, role, opts));
    if (ch->wake_fd_ < 0) {
        ec = std::error_code(errno, std::generic_category());
        return nullptr;
    }
    ch->mss_ = tcp_mss(fd);
    ch->session_.set_mss(ch->mss_);
    const auto deadline = Clock::now() + opts.handshake_timeout;
    std::unique_lock lk(ch->mu_);
    if (role == iwarp::MpaRole::initiator && !ch->session_.start()) {
        ec = std::make_error_code(std::errc::protocol_error);
        if (why) {
            *why = ch->session_.describe_error();
        }
        return nullptr;
    }
    auto& s = ch->session_;
    const bool done = ch->drive(
        lk,
        [&] {
            auto p = s.phase();
            if (p == SessionPhase::failed) {
                return true;
            }
            // The Accepting Peer returns once its HelloAck is on the wire
            // (it may only send after the initiator's RTR), so the Connecting
            // Peer never waits for a stream nobody drives yet.
            return p == SessionPhase::established && s.sends_flushed() && s.output_queued() == 0;
        },
        deadline);
    if (done && s.phase() == SessionPhase::established &&
        s.sdp().state() == engine::State::established) {
        lk.unlock();
        ch->helper_ = std::thread([c = ch.get()] { c->helper_loop(); });
        return ch;
    }
    if (!done) {
        ec = std::make_error_code(std::errc::timed_out);
        if (why) {
            *why = "SDP/MPA startup timed out";
        }
    } else {
        const auto& mpa = s.mpa();
        if (mpa.error() == iwarp::MpaError::rejected_by_peer ||
            s.sdp().error() == engine::Error::version_mismatch) {
            ec = std::make_error_code(std::errc::connection_refused);
        } else if (s.eof_seen()) {
            ec = std::make_error_code(std::errc::connection_reset);
        } else {
            ec = std::make_error_code(std::errc::protocol_error);
        }
        if (why) {
            *why = s.describe_error();
        }
        // Let an MPA reject frame go out before the socket closes.
        ch->drive(
            lk, [&] { return s.output_queued() == 0 && !s.has_output(); },
            Clock::now() + std::chrono::milliseconds(200));
    }
    lk.unlock();
    return nullptr;
}

std::optional<Clock::time_point> SoftChannel::io_deadline() const {
    if (io_timeout_.count() <= 0) {
        return std::nullopt;
    }
    return Clock::now() + io_timeout_;
}

bool SoftChannel::tx_pending_locked() const {
    if (rd_eof_ || rst_done_) {
        return false;
    }
    const auto& c = session_.sdp();
    return session_.output_queued() > 0 || session_.has_output() || c.send_queued() > 0 ||
           (session_.llp_request() == LlpRequest::fin && !wr_shut_) ||
           (c.state() == engine::State::established && c.send_credits() == 0 &&
            c.send_queued() > 0);
}

void SoftChannel::helper_loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        if (polling_ || !tx_pending_locked()) {
            // Woken by kick_helper() when a caller leaves with sends queued.
            helper_cv_.wait_for(lk, std::chrono::milliseconds(100));
            continue;
        }
        drive(
            lk, [&] { return stop_ || !tx_pending_locked(); }, std::nullopt);
        cv_.notify_all();
        if (rd_eof_) {
            // Nothing more will happen on the socket.
            helper_cv_.wait(lk, [&] { return stop_; });
        }
    }
}

void SoftChannel::kick_helper() {
    if (!polling_ && tx_pending_locked()) {
        helper_cv_.notify_one();
    }
}

void SoftChannel::wake_poller() {
    if (polling_ && wake_fd_ >= 0) {
        std::uint64_t one = 1;
        (void)!::write(wake_fd_, &one, sizeof one);
    }
}

void SoftChannel::read_locked() {
    std::size_t total = 0;
    while (!rd_eof_ && total < kReadPerRound) {
        ssize_t n = ::recv(fd_, in_.data(), in_.size(), MSG_DONTWAIT);
        if (n > 0) {
            total += static_cast<std::size_t>(n);
            session_.on_bytes(
                std::span<const std::uint8_t>(in_.data(), static_cast<std::size_t>(n)));
            // Answer as we go (credit updates, Read Responses).
            service_locked();
            if (session_.landing_full()) {
                // The waiting reader's buffer is full: leave the rest in the
                // socket for its next call to land.
                break;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            sock_error_ = errno;
        }
        rd_eof_ = true;
        session_.on_eof();
    }
}

void SoftChannel::service_locked() {
    if (rd_eof_ && session_.eof_seen() && rst_done_) {
        return;
    }
    // Write what we can: the session's gathered FPDUs (headers, payload
    // straight from its send buffers, CRC trailers) with one sendmsg().
    while (true) {
        if (!rst_done_ && !wr_shut_ && session_.output_queued() < kOutHigh) {
            // Also picks up MPA frames (not reported by has_output()).
            session_.prepare_output(kOutHigh);
        }
        if (session_.output_queued() == 0 || rst_done_ || wr_shut_) {
            break;
        }
        std::span<const std::uint8_t> segs[kMaxIov];
        const std::size_t nseg = session_.peek_output(segs);
        iovec iov[kMaxIov];
        for (std::size_t i = 0; i < nseg; ++i) {
            iov[i].iov_base = const_cast<std::uint8_t*>(segs[i].data());
            iov[i].iov_len = segs[i].size();
        }
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = nseg;
        ssize_t n = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            session_.consume_output(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }
        // EPIPE / ECONNRESET: the stream is gone.
        sock_error_ = n < 0 ? errno : EPIPE;
        rd_eof_ = true;
        session_.on_eof();  // drops the queued output
        break;
    }
    switch (session_.llp_request()) {
        case LlpRequest::fin:
            if (!wr_shut_ && !rst_done_ && session_.output_queued() == 0 &&
                !session_.has_output()) {
                ::shutdown(fd_, SHUT_WR);
                wr_shut_ = true;
            }
            break;
        case LlpRequest::rst:
            if (!rst_done_) {
                rst_done_ = true;
                reset_connection(fd_);
                rd_eof_ = true;
                session_.on_eof();
            }
            break;
        case LlpRequest::none:
            break;
    }
}

bool SoftChannel::drive(std::unique_lock<std::mutex>& lk, const std::function<bool()>& pred,
                        std::optional<Clock::time_point> deadline) {
    while (true) {
        service_locked();
        if (pred()) {
            return true;
        }
        if (rd_eof_) {
            // Nothing more can arrive. (Output still queued after EOF is
            // pointless: the session is closed.)
            return pred();
        }
        if (deadline && Clock::now() >= *deadline) {
            return false;
        }
        if (polling_) {
            if (deadline) {
                cv_.wait_until(lk, *deadline);
            } else {
                cv_.wait(lk);
            }
            continue;
        }
        polling_ = true;
        pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        if (session_.output_queued() > 0 && !wr_shut_) {
            p[0].events |= POLLOUT;
        }
        const int timeout = poll_timeout(deadline);
        lk.unlock();
        int r = ::poll(p, 2, timeout);
        lk.lock();
        polling_ = false;
        if (r > 0) {
            if (p[1].revents & POLLIN) {
                std::uint64_t v;
                (void)!::read(wake_fd_, &v, sizeof v);
            }
            if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                read_locked();
            }
        }
        cv_.notify_all();
    }
}

std::error_code SoftChannel::state_error(bool for_write) const {
    const auto& c = session_.sdp();
    switch (c.state()) {
        case engine::State::closed:
            return std::make_error_code(for_write ? std::errc::broken_pipe
                                                  : std::errc::connection_reset);
        case engine::State::reset:
            if (c.error() == engine::Error::local_abort) {
                return std::make_error_code(std::errc::not_connected);
            }
            return std::make_error_code(std::errc::connection_reset);
        case engine::State::failed:
            return std::make_error_code(std::errc::not_connected);
        default:
            break;
    }
    if (for_write && (c.disconn_sent() || c.write_space() == 0)) {
        return std::make_error_code(std::errc::broken_pipe);
    }
    return std::make_error_code(std::errc::connection_reset);
}

std::size_t SoftChannel::read_some(std::span<std::uint8_t> out, std::error_code& ec) {
    ec.clear();
    if (out.empty()) {
        return 0;
    }
    std::unique_lock lk(mu_);
    auto& c = session_.sdp();
    // Nothing to read yet: let the next Data Messages land straight in
    // `out` (one copy less). Only this call ends the landing it began.
    const bool landing =
        c.readable() == 0 && c.state() == engine::State::established && session_.begin_landing(out);
    const bool ready = drive(
        lk,
        [&] {
            return c.readable() > 0 || c.eof() || (landing && session_.landed() > 0) ||
                   (c.state() != engine::State::established &&
                    c.state() != engine::State::connecting);
        },
        io_deadline());
    if (landing) {
        // Anything placed in part goes back to its private buffer.
        if (const std::size_t n = session_.end_landing(); n > 0) {
            service_locked();  // credit updates go out now
            wake_poller();
            kick_helper();
            return n;
        }
    }
    if (!ready) {
        ec = std::make_error_code(std::errc::timed_out);
        return 0;
    }
    if (c.readable() > 0) {
        std::size_t n = c.read(out);
        // Queued data all read and room for whole messages left: take what
        // the socket holds now, landing it behind (as recv(2) would return
        // everything that has arrived), unless another thread polls.
        if (c.readable() == 0 && !polling_ && !rd_eof_ && c.state() == engine::State::established &&
            out.size() - n >= c.local_recv_size() - wire::kBsdhSize &&
            session_.begin_landing(out.subspan(n))) {
            read_locked();
            n += session_.end_landing();
        }
        service_locked();  // credit updates go out now
        wake_poller();
        kick_helper();
        return n;
    }
    if (c.eof()) {
        return 0;
    }
    ec = state_error(false);
    return 0;
}

std::size_t SoftChannel::write(std::span<const std::uint8_t> in, std::error_code& ec) {
    ec.clear();
    std::unique_lock lk(mu_);
    auto& c = session_.sdp();
    std::size_t done = 0;
    while (done < in.size()) {
        if (c.state() != engine::State::established || c.disconn_sent()) {
            ec = state_error(true);
            return done;
        }
        done += c.write(in.subspan(done));
        service_locked();
        if (done < in.size()) {
            wake_poller();
            const bool ready = drive(
                lk, [&] { return c.write_space() > 0 || c.state() != engine::State::established; },
                io_deadline());
            if (!ready) {
                ec = std::make_error_code(std::errc::timed_out);
                return done;
            }
        }
    }
    wake_poller();
    kick_helper();
    return done;
}

bool SoftChannel::flush(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    auto& c = session_.sdp();
    return drive(
        lk,
        [&] {
            return c.state() != engine::State::established ||
                   (c.send_queued() == 0 && session_.output_queued() == 0 &&
                    !session_.has_output());
        },
        Clock::now() + timeout);
}

void SoftChannel::shutdown_write(std::error_code& ec) {
    ec.clear();
    std::unique_lock lk(mu_);
    auto& c = session_.sdp();
    if (c.state() != engine::State::established) {
        if (c.state() != engine::State::closed) {
            ec = state_error(true);
        }
        return;
    }
    c.shutdown_write();
    service_locked();
    wake_poller();
    kick_helper();
}

void SoftChannel::close(std::chrono::milliseconds linger, std::error_code& ec) {
    ec.clear();
    std::unique_lock lk(mu_);
    auto& c = session_.sdp();
    if (c.state() == engine::State::established) {
        c.shutdown_write();
    }
    const auto deadline = Clock::now() + linger;
    // 8.2.1: both DisConns exchanged, then the LLP teardown (the peer's FIN).
    // Unread incoming data is discarded as it arrives, as close(2) would.
    std::vector<std::uint8_t> sink(64 * 1024);
    bool done = drive(
        lk,
        [&] {
            while (c.readable() > 0) {
                c.read(sink);
            }
            return c.state() != engine::State::established &&
                   c.state() != engine::State::connecting;
        },
        deadline);
    if (!done) {
        ec = std::make_error_code(std::errc::timed_out);
        c.abort();
        service_locked();
    } else if (c.state() == engine::State::reset && c.error() != engine::Error::local_abort) {
        ec = std::make_error_code(std::errc::connection_reset);
    }
    if (!rst_done_ && !wr_shut_) {
        ::shutdown(fd_, SHUT_WR);
        wr_shut_ = true;
    }
    rd_eof_ = true;
}

void SoftChannel::abort() {
    std::unique_lock lk(mu_);
    auto& c = session_.sdp();
    c.abort();
    service_locked();
    if (!rst_done_) {
        rst_done_ = true;
        reset_connection(fd_);
    }
    rd_eof_ = true;
    session_.on_eof();
    wake_poller();
    cv_.notify_all();
}

short SoftChannel::pump() {
    std::unique_lock lk(mu_);
    if (!polling_) {
        read_locked();
    }
    service_locked();
    cv_.notify_all();
    short ev = rd_eof_ ? 0 : POLLIN;
    if (session_.output_queued() > 0 && !wr_shut_) {
        ev |= POLLOUT;
    }
    return ev;
}

std::string SoftChannel::describe() const {
    std::unique_lock lk(mu_);
    return session_.describe_error();
}

bool SoftChannel::crc() const {
    return session_.mpa().outcome().crc;
}

}  // namespace sdp::io
