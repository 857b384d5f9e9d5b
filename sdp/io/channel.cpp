// SPDX-License-Identifier: Apache-2.0
#include "sdp/io/channel.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <algorithm>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

namespace sdp::io {

namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr std::size_t kReadPerRound = 1024 * 1024;
constexpr std::size_t kMaxIov = SoftChannel::kMaxIov;  // pieces per sendmsg()

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

SessionConfig with_os_randomness(SessionConfig cfg) {
    std::random_device rd;
    cfg.stag_seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    return cfg;
}

std::size_t unacked_bytes(int fd) {
    int n = 0;
    if (::ioctl(fd, SIOCOUTQ, &n) != 0 || n < 0) {
        return 0;
    }
    return static_cast<std::size_t>(n);
}

long send_gathered(int fd, std::span<const std::span<const std::uint8_t>> segs) {
    iovec iov[kMaxIov];
    const std::size_t n = std::min(segs.size(), kMaxIov);
    for (std::size_t i = 0; i < n; ++i) {
        iov[i].iov_base = const_cast<std::uint8_t*>(segs[i].data());
        iov[i].iov_len = segs[i].size();
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    return ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

SoftChannel::SoftChannel(int fd, iwarp::MpaRole role, const ChannelOptions& opts)
    : fd_(fd),
      io_timeout_(opts.io_timeout),
      handshake_timeout_(opts.handshake_timeout),
      core_(role, with_os_randomness(opts.session)) {
    choice_ = engine::WriteChoice(opts.adaptive, opts.session.engine.bcopy_threshold);
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
        if (!core_.rd_eof() && !core_.rst_done()) {
            core_.abort();
            service_locked();
            // An AbortConn after our DisConn goes out first (8.2.2).
            if (!finish_abort_locked(lk) && !core_.rst_done() && !core_.wr_shut()) {
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
                                                    std::string* why, const engine::Carry* carry) {
    ec.clear();
    set_nodelay(fd);
    set_nonblocking(fd, true);
    std::unique_ptr<SoftChannel> ch(new SoftChannel(fd, role, opts));
    if (ch->wake_fd_ < 0) {
        ec = std::error_code(errno, std::generic_category());
        return nullptr;
    }
    ch->mss_ = tcp_mss(fd);
    // A duplication binds a new socket to this one's address (13.1.1): its
    // TIME_WAIT inherits the flag only if it is set before the close.
    int reuse = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
    socklen_t llen = sizeof ch->local_addr_;
    socklen_t plen = sizeof ch->peer_addr_;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ch->local_addr_), &llen) == 0 &&
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&ch->peer_addr_), &plen) == 0 &&
        llen == plen) {
        ch->addr_len_ = llen;
    }
    ch->core_.set_mss(ch->mss_);
    if (carry != nullptr &&
        !ch->core_.sdp().carry_in(carry->unread, carry->unsent, carry->write_shut)) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return nullptr;
    }
    const auto deadline = Clock::now() + opts.handshake_timeout;
    std::unique_lock lk(ch->mu_);
    auto& core = ch->core_;
    const bool started = core.start();
    const bool done =
        !started ||
        ch->drive(
            lk, [&] { return core.startup() != ChannelCore::Startup::running; }, deadline);
    if (started && core.startup() == ChannelCore::Startup::established) {
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
        ec = core.startup_error(why);
        // Let an MPA reject frame go out before the socket closes.
        ch->drive(
            lk, [&] { return core.drained(); }, Clock::now() + std::chrono::milliseconds(200));
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

void SoftChannel::helper_loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        // Woken by kick_helper(): a call returned (or drive() timed out)
        // with sends queued and nobody polling (no periodic wake-ups).
        helper_cv_.wait(lk, [&] { return stop_ || (!polling_ && core_.tx_pending()); });
        if (stop_) {
            break;
        }
        drive(
            lk, [&] { return stop_ || !core_.tx_pending(); }, std::nullopt);
        cv_.notify_all();
        if (core_.rd_eof() && !core_.suspended()) {
            // Nothing more will happen on the socket.
            helper_cv_.wait(lk, [&] { return stop_; });
        }
    }
}

void SoftChannel::kick_helper() {
    if (!polling_ && core_.tx_pending()) {
        helper_cv_.notify_one();
    }
}

void SoftChannel::wake_poller_for_output() {
    // Data that service_locked() could not send waits for credits (the
    // poller sees the peer's update: POLLIN) or for socket space (POLLOUT,
    // which the poller must add). Only the latter needs a wake-up: waking
    // the poller for every write() makes it send each few bytes as its own
    // message (no batching while the peer's credits come back).
    if (core_.output_pending() && !core_.wr_shut() && !poll_out_) {
        wake_poller();
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
    while (!core_.rd_eof() && total < kReadPerRound) {
        ssize_t n = ::recv(fd_, in_.data(), in_.size(), MSG_DONTWAIT);
        if (n > 0) {
            total += static_cast<std::size_t>(n);
            core_.on_bytes(std::span<const std::uint8_t>(in_.data(), static_cast<std::size_t>(n)));
            // Answer as we go (credit updates, Read Responses).
            service_locked();
            if (core_.session().landing_full()) {
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
        core_.on_llp_lost(n < 0 ? errno : 0);
    }
}

void SoftChannel::service_locked() {
    // Write what we can: the session's gathered FPDUs (headers, payload
    // straight from its send buffers, CRC trailers) with one sendmsg().
    // segs_ is a member: a local array of spans would be zeroed (2 KiB) on
    // every call, and this runs once per write() even with nothing to send.
    while (const std::size_t nseg = core_.next_output(segs_)) {
        const long n = send_gathered(fd_, std::span(segs_.data(), nseg));
        if (n > 0) {
            core_.written(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) {
            core_.written(0);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            core_.written(0);
            break;
        }
        // EPIPE / ECONNRESET: the stream is gone.
        core_.write_failed(n < 0 ? errno : EPIPE);
        break;
    }
    switch (core_.llp()) {
        case ChannelCore::Llp::shutdown_write:
            ::shutdown(fd_, SHUT_WR);
            break;
        case ChannelCore::Llp::reset:
            reset_connection(fd_);
            break;
        case ChannelCore::Llp::none:
            break;
    }
}

bool SoftChannel::drive(std::unique_lock<std::mutex>& lk, const std::function<bool()>& pred,
                        std::optional<Clock::time_point> deadline) {
    while (true) {
        service_locked();
        if (pred()) {
            // No kick_helper() here: every call kicks as it returns. A kick
            // while the caller goes on (a write() that got room) only wakes
            // the helper to contend for mu_ and poll beside it.
            return true;
        }
        if (core_.resume_due()) {
            // 13.1.1 step 4, by whoever drives; a poller is woken to do it.
            if (!polling_) {
                resume_locked(lk);
                cv_.notify_all();
                continue;
            }
            wake_poller();
        } else if (core_.rd_eof()) {
            if (!core_.handing_off()) {
                // Nothing more can arrive. (Output still queued after EOF is
                // pointless: the session is closed.)
                return pred();
            }
            // 13.1.1 step 5: the old LLP closed after the SuspCommAck; the
            // thread in hand_off() takes the state and wakes us.
            if (deadline && Clock::now() >= *deadline) {
                return false;
            }
            if (deadline) {
                cv_.wait_until(lk, *deadline);
            } else {
                cv_.wait(lk);
            }
            continue;
        }
        if (deadline && Clock::now() >= *deadline) {
            kick_helper();
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
        if (core_.output_pending() && !core_.wr_shut()) {
            p[0].events |= POLLOUT;
        }
        poll_out_ = (p[0].events & POLLOUT) != 0;
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

void SoftChannel::resume_locked(std::unique_lock<std::mutex>& lk) {
    resuming_now_ = true;
    struct Clear {
        std::atomic<bool>& f;
        ~Clear() { f = false; }
    } clear{resuming_now_};
    const auto deadline = Clock::now() + handshake_timeout_;
    const std::uint16_t port = core_.sdp().resume_port();
    sockaddr_storage local = local_addr_;
    sockaddr_storage peer = peer_addr_;
    const socklen_t llen = addr_len_;
    const socklen_t plen = addr_len_;
    const bool named = addr_len_ > 0;
    int on = 1;
    // An Accepting Peer's old port is its listener's: see below.
    const bool was_acceptor = core_.sdp().role() == engine::Role::accepting;
    ::shutdown(fd_, SHUT_RDWR);
    if (!core_.restart()) {
        core_.resume_failed("the engine could not restart");
        return;
    }
    auto fail = [&](const std::string& why) {
        core_.resume_failed(why);
        reset_connection(fd_);
        cv_.notify_all();
    };
    if (!named) {
        fail("the connection's addresses are unknown");
        return;
    }
    if (peer.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&peer)->sin_port = htons(port);
    } else {
        reinterpret_cast<sockaddr_in6*>(&peer)->sin6_port = htons(port);
    }
    const int nfd = ::socket(peer.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (nfd < 0) {
        fail(std::string("socket: ") + std::strerror(errno));
        return;
    }
    ::setsockopt(nfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    // Step 1 / 5: the same source address and port as the prior connection;
    // an Accepting Peer whose port still has its listener (EADDRINUSE) uses
    // another port of the same address (docs/protocol-notes.md, 13.1.1).
    bool bound = ::bind(nfd, reinterpret_cast<sockaddr*>(&local), llen) == 0;
    if (!bound && errno == EADDRINUSE && was_acceptor) {
        if (local.ss_family == AF_INET) {
            reinterpret_cast<sockaddr_in*>(&local)->sin_port = 0;
        } else {
            reinterpret_cast<sockaddr_in6*>(&local)->sin6_port = 0;
        }
        bound = ::bind(nfd, reinterpret_cast<sockaddr*>(&local), llen) == 0;
    }
    if (!bound) {
        const int err = errno;
        ::close(nfd);
        fail(std::string("bind to the old source port: ") + std::strerror(err));
        return;
    }
    int err = 0;
    if (::connect(nfd, reinterpret_cast<sockaddr*>(&peer), plen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
            pollfd p{nfd, POLLOUT, 0};
            err = ETIMEDOUT;
            if (::poll(&p, 1, poll_timeout(deadline)) > 0) {
                socklen_t el = sizeof err;
                ::getsockopt(nfd, SOL_SOCKET, SO_ERROR, &err, &el);
            }
        }
    }
    if (err != 0) {
        ::close(nfd);
        fail("connect to port " + std::to_string(port) + ": " + std::strerror(err));
        return;
    }
    // The descriptor number stays: nobody can poll a closed or reused one.
    ::dup2(nfd, fd_);
    ::close(nfd);
    set_nodelay(fd_);
    mss_ = tcp_mss(fd_);
    core_.set_mss(mss_);
    if (!core_.start()) {
        std::string why;
        (void)core_.startup_error(&why);
        fail("MPA startup: " + why);
        return;
    }
    // Section 8 again: MPA startup, Hello, HelloAck.
    const bool done = drive(
        lk, [&] { return core_.startup() != ChannelCore::Startup::running; }, deadline);
    if (done && core_.startup() == ChannelCore::Startup::established) {
        core_.end_resume();
        return;
    }
    std::string why = "new connection's startup timed out";
    if (done) {
        (void)core_.startup_error(&why);
    }
    fail(why);
}

std::size_t SoftChannel::read_some(std::span<std::uint8_t> out, std::error_code& ec,
                                   bool stop_at_urgent, bool may_lend) {
    ec.clear();
    if (out.empty()) {
        return 0;
    }
    std::unique_lock lk(mu_);
    auto& c = core_.sdp();
    auto& session = core_.session();
    std::optional<std::size_t> got;
    while (!got) {
        // The peer advertised its buffer (Read Zcopy): RDMA-Read into `out`.
        if (auto z = read_zcopy_locked(lk, out, ec)) {
            return *z;
        }
        // Nothing queued and a large buffer: lend it for Write Zcopy.
        if (may_lend && !stop_at_urgent && !choice_.automatic()) {
            bool lent = false;
            if (auto z = lend_locked(lk, out, {}, ec, lent)) {
                return *z;
            }
        }
        // Nothing to read yet: let the next Data Messages land straight in
        // `out` (one copy less). Only this call ends the landing it began.
        const bool landing = core_.begin_landing(out);
        const bool ready = drive(
            lk,
            [&] { return core_.read_ready(stop_at_urgent) || (landing && session.landed() > 0); },
            io_deadline());
        if (landing) {
            // Anything placed in part goes back to its private buffer.
            if (const std::size_t n = session.end_landing(); n > 0) {
                after_call();
                return n;
            }
        }
        if (!ready) {
            ec = std::make_error_code(std::errc::timed_out);
            return 0;
        }
        // nullopt: only an advertisement was ready, taken above or turned
        // into Bcopy (SendSm): wait again.
        got = core_.read(out, ec, stop_at_urgent);
    }
    std::size_t n = *got;
    // Queued data all read and room for whole messages left: take what the
    // socket holds now, landing it behind (as recv(2) would return
    // everything that has arrived), unless another thread polls.
    if (n > 0 && c.readable() == 0 && !polling_ && !core_.rd_eof() &&
        c.state() == engine::State::established &&
        out.size() - n >= c.local_recv_size() - wire::kBsdhSize &&
        session.begin_landing(out.subspan(n))) {
        read_locked();
        n += session.end_landing();
    }
    if (n > 0) {
        after_call();
    } else {
        kick_helper();
    }
    return n;
}

std::optional<std::size_t> SoftChannel::read_zcopy_locked(std::unique_lock<std::mutex>& lk,
                                                          std::span<std::uint8_t> out,
                                                          std::error_code& ec) {
    auto& c = core_.sdp();
    if (!core_.sdp().read_zcopy(out)) {
        service_locked();  // a SendSm, if the buffer was too small
        return std::nullopt;
    }
    service_locked();
    // The RDMA Read cannot be called back (a late Read Response after the
    // reset meets a Terminate).
    if (!drive_lent(
            lk, [&] { return !c.zcopy_read_pending(); }, ec)) {
        return 0;
    }
    const auto n = core_.zcopy_read_result(ec);
    if (n.value_or(0) > 0) {
        after_call();
    }
    return n.value_or(0);
}

std::optional<std::size_t> SoftChannel::lend_locked(std::unique_lock<std::mutex>& lk,
                                                    std::span<std::uint8_t> out,
                                                    std::span<const std::uint8_t> request,
                                                    std::error_code& ec, bool& lent) {
    auto& c = core_.sdp();
    // Not with io_timeout: a read that gives up must revoke the buffer
    // (SinkAvailCancel, 9.5.5) and keep it lent until the peer answers, and
    // an idle peer's driver answers nothing until its application calls in,
    // so the timeout would end in a reset (docs/sdp.md, "Zero copy").
    lent = io_timeout_.count() == 0 && c.bcopy_threshold() > 0 &&
           out.size() > c.bcopy_threshold() &&
           (request.empty() ? c.post_sink(out) : c.transact(request, out));
    if (!lent) {
        return std::nullopt;
    }
    service_locked();  // the SinkAvail (with a Transaction's request) goes out now
    if (!drive_lent(
            lk, [&] { return !c.sink_pending(); }, ec)) {
        return 0;  // not reached without io_timeout
    }
    if (auto n = c.take_zcopy_read()) {
        after_call();
        return n;
    }
    // Stale (9.5.1: a message with payload came first), DisConn or an
    // error: the caller reads or reports it.
    return std::nullopt;
}

std::optional<std::size_t> SoftChannel::transact(std::span<const std::uint8_t> request,
                                                 std::span<std::uint8_t> reply,
                                                 std::error_code& ec) {
    ec.clear();
    std::unique_lock lk(mu_);
    refresh_locked();
    bool lent = false;
    if (auto n = lend_locked(lk, reply, request, ec, lent)) {
        return n;
    }
    if (!lent) {
        return std::nullopt;  // nothing sent: the caller writes and reads
    }
    // The request went; the reply came as data (or DisConn, or an error).
    lk.unlock();
    return read_some(reply, ec);
}

bool SoftChannel::drive_lent(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done,
                             std::error_code& ec) {
    if (drive(lk, done, io_deadline())) {
        return true;
    }
    core_.abort();
    service_locked();
    ec = std::make_error_code(std::errc::timed_out);
    return false;
}

void SoftChannel::refresh_locked() {
    if (!polling_ && !core_.rd_eof()) {
        read_locked();
        service_locked();
    }
}

std::error_code SoftChannel::send_oob(std::uint8_t byte) {
    std::unique_lock lk(mu_);
    auto& c = core_.sdp();
    while (true) {
        if (auto r = core_.send_oob(byte)) {
            if (!*r) {
                after_call();
            }
            return *r;
        }
        // A Read Zcopy advertisement of another writer is in process.
        if (!drive(
                lk, [&] { return !c.zcopy_write_pending(); }, io_deadline())) {
            return std::make_error_code(std::errc::timed_out);
        }
    }
}

std::uint8_t SoftChannel::read_oob(std::error_code& ec) {
    std::unique_lock lk(mu_);
    refresh_locked();
    return core_.read_oob(ec);
}

bool SoftChannel::at_mark() {
    std::unique_lock lk(mu_);
    refresh_locked();
    return core_.sdp().at_mark();
}

bool SoftChannel::lock_briefly(std::unique_lock<std::mutex>& lk) {
    // The mutex is held for long only while a new LLP connection is made
    // (resume_locked); a reader that processes a large read holds it a
    // while too: after a few tries the caller hears EAGAIN (the preload
    // library then uses the socketpair).
    for (int tries = 0; !lk.try_lock(); ++tries) {
        if (resuming_now_.load() || tries == 16) {
            return false;
        }
        std::this_thread::yield();
    }
    return true;
}

std::size_t SoftChannel::try_read(std::span<std::uint8_t> out, std::error_code& ec,
                                  bool stop_at_urgent) {
    ec.clear();
    if (out.empty()) {
        return 0;
    }
    ec = std::make_error_code(std::errc::resource_unavailable_try_again);
    std::unique_lock lk(mu_, std::defer_lock);
    if (!lock_briefly(lk)) {
        return 0;
    }
    if (core_.sdp().readable() == 0) {
        refresh_locked();
    }
    std::optional<std::size_t> n;
    if (core_.data_ready(stop_at_urgent)) {
        std::error_code rec;
        n = core_.read(out, rec, stop_at_urgent);
    }
    if (!n || *n == 0) {
        // What the refresh left queued (an answer, a SuspCommAck and the
        // reconnect after it, 13.1.1) is the helper's, as after read_some.
        kick_helper();
        return 0;
    }
    ec.clear();
    after_call();
    return *n;
}

bool SoftChannel::wait_readable(std::error_code& ec, bool stop_at_urgent) {
    ec.clear();
    std::unique_lock lk(mu_);
    if (!drive(
            lk, [&] { return core_.read_ready(stop_at_urgent); }, io_deadline())) {
        ec = std::make_error_code(std::errc::timed_out);
        return false;
    }
    kick_helper();  // sends queued meanwhile go on while the caller is away
    return core_.data_ready(stop_at_urgent);
}

bool SoftChannel::send_idle() {
    std::unique_lock lk(mu_, std::try_to_lock);
    return lk && !resuming_now_.load() && core_.sdp().send_idle();
}

bool SoftChannel::urgent_pending() {
    std::unique_lock lk(mu_);
    refresh_locked();
    return core_.sdp().urgent_pending();
}

void SoftChannel::set_oob_inline(bool on) {
    std::unique_lock lk(mu_);
    core_.sdp().set_oob_inline(on);
    wake_poller();  // a waiting reader may take the urgent byte now
    cv_.notify_all();
}

void SoftChannel::after_call() {
    service_locked();  // credit updates go out now
    wake_poller();
    kick_helper();
}

std::size_t SoftChannel::write(std::span<const std::uint8_t> in, std::error_code& ec, bool wait) {
    ec.clear();
    if (!wait) {
        // Never waits: as for no room, EAGAIN when the lock is busy.
        std::unique_lock lk(mu_, std::defer_lock);
        if (!lock_briefly(lk)) {
            ec = std::make_error_code(std::errc::resource_unavailable_try_again);
            return 0;
        }
        return try_write_locked(in, ec);
    }
    std::unique_lock lk(mu_);
    auto& c = core_.sdp();
    const bool zcopy = choice_.try_zcopy(
        steady_ns(), in.size(), in.size() > c.bcopy_threshold() && c.bcopy_threshold() > 0);
    if (zcopy) {
        // Zero copy starts with an empty queue (11.2): the bytes queued
        // before belong to the Bcopy run, whose sample ends there.
        const auto started = [&] { choice_.zcopy_started(steady_ns(), in.size()); };
        if (auto z = write_zcopy_locked(lk, in, ec, started)) {
            choice_.finished(*z, bool(ec));
            return *z;
        }
        // Refused: a new Bcopy run (the one before, if its queue did not
        // drain, ends without a sample).
        choice_.zcopy_refused(steady_ns(), in.size());
    }
    std::size_t done = 0;
    while (done < in.size()) {
        const auto n = core_.write(in.subspan(done), ec);
        if (ec) {
            choice_.finished(done, true);
            kick_helper();
            return done;
        }
        if (n) {
            done += *n;
            service_locked();
            continue;
        }
        wake_poller_for_output();
        const bool ready = drive(
            lk,
            [&] {
                // Suspended (13.1.1): the stream waits for its new connection;
                // handing off with the old LLP closed: for the hand-off to end.
                return !core_.suspended() &&
                       (c.state() != engine::State::established ||
                        (c.write_space() > 0 && !(core_.rd_eof() && core_.handing_off())));
            },
            io_deadline());
        if (!ready) {
            ec = std::make_error_code(std::errc::timed_out);
            choice_.finished(done, true);
            return done;
        }
    }
    choice_.finished(done, false);
    wake_poller_for_output();
    kick_helper();
    return done;
}

std::size_t SoftChannel::try_write_locked(std::span<const std::uint8_t> in, std::error_code& ec) {
    if (in.empty()) {
        return 0;
    }
    if (!choice_.bcopy_without_wait(in.size(), core_.sdp().bcopy_threshold())) {
        ec = std::make_error_code(std::errc::operation_not_supported);
        return 0;
    }
    // Up to kTryWriteWhole: taken whole or not at all (as a pipe up to
    // PIPE_BUF).
    const bool whole = in.size() <= kTryWriteWhole;
    std::size_t done = 0;
    while (done < in.size()) {
        const auto n = core_.write(in.subspan(done), ec, whole && done == 0);
        if (ec || !n) {
            break;
        }
        done += *n;
        service_locked();
    }
    if (done > 0) {
        ec.clear();  // an error after some bytes is the next call's
        wake_poller_for_output();
        kick_helper();
    } else if (!ec) {
        ec = std::make_error_code(std::errc::resource_unavailable_try_again);
    }
    return done;
}

std::optional<std::size_t> SoftChannel::write_zcopy_locked(
    std::unique_lock<std::mutex>& lk, std::span<const std::uint8_t> in, std::error_code& ec,
    const std::function<void()>& started_fn) {
    auto& c = core_.sdp();
    // Read Zcopy (9.2): what is queued goes first (11.2), then `in` is
    // advertised and the peer reads it; the call returns after that.
    wake_poller_for_output();
    std::optional<bool> started;
    if (!drive(
            lk, [&] { return (started = core_.sdp().start_zcopy_write(in)).has_value(); },
            io_deadline()) ||
        !*started) {
        return std::nullopt;  // Bcopy (write() reports any error)
    }
    started_fn();
    service_locked();
    wake_poller_for_output();
    // The peer reads `in` when it likes. After io_timeout the write is
    // revoked (SrcAvailCancel, 9.5.4) and ends with what the peer took
    // once it answered; no answer within another io_timeout (an idle
    // peer's driver answers nothing) resets the stream.
    const auto done = [&] { return !c.zcopy_write_pending(); };
    if (!drive(lk, done, io_deadline())) {
        c.revoke_zcopy_write();
        service_locked();
        wake_poller_for_output();
        if (!drive_lent(lk, done, ec)) {
            kick_helper();
            return 0;
        }
    }
    kick_helper();
    return core_.zcopy_write_result(in.size(), ec).value_or(0);
}

bool SoftChannel::flush(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    auto& c = core_.sdp();
    const bool done = drive(
        lk,
        [&] {
            return c.state() != engine::State::established ||
                   (c.send_queued() == 0 && core_.drained());
        },
        Clock::now() + timeout);
    kick_helper();
    return done;
}

void SoftChannel::shutdown_write(std::error_code& ec) {
    std::unique_lock lk(mu_);
    ec = core_.shutdown_write();
    if (!ec) {
        service_locked();
        wake_poller();
        kick_helper();
    }
}

void SoftChannel::close(std::chrono::milliseconds linger, std::error_code& ec) {
    ec.clear();
    std::unique_lock lk(mu_);
    core_.begin_close();
    // 8.2.1: both DisConns exchanged, then the LLP teardown (the peer's FIN).
    // closed() may queue messages (a declined advertisement's SendSm):
    // they go out before the next wait.
    if (!drive(
            lk,
            [&] {
                const bool done = core_.closed();
                service_locked();
                return done;
            },
            Clock::now() + linger)) {
        ec = std::make_error_code(std::errc::timed_out);
        core_.abort();
        service_locked();
        if (!finish_abort_locked(lk) && core_.take_reset()) {
            reset_connection(fd_);
        }
    } else {
        ec = core_.close_error();
    }
    if (core_.take_fin()) {
        ::shutdown(fd_, SHUT_WR);
    }
    core_.stop_input();
}

bool SoftChannel::finish_abort_locked(std::unique_lock<std::mutex>& lk) {
    // 8.2.2: the AbortConn goes out first, then the LLP teardown; resetting
    // the socket at once would drop it with the send queue.
    const auto deadline = Clock::now() + kAbortLinger;
    if (core_.abort_unsent()) {
        drive(
            lk, [&] { return !core_.abort_unsent(); }, deadline);
    }
    if (!core_.abort_written()) {
        return false;  // none to send, or out of time: the caller resets
    }
    // Written, FIN after it: wait (bounded) until TCP has it acknowledged.
    while (!core_.rd_eof() && unacked_bytes(fd_) > 0 && Clock::now() < deadline) {
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lk.lock();
    }
    core_.stop_input();
    return true;
}

void SoftChannel::abort() {
    std::unique_lock lk(mu_);
    core_.abort();
    service_locked();
    if (!finish_abort_locked(lk) && core_.take_reset()) {
        reset_connection(fd_);
    }
    wake_poller();
    cv_.notify_all();
}

std::optional<HandOver> SoftChannel::hand_off(std::uint16_t new_port, std::error_code& ec) {
    ec.clear();
    std::unique_lock lk(mu_);
    auto& c = core_.sdp();
    if (c.state() != engine::State::established || core_.rd_eof() || core_.suspended()) {
        ec = std::make_error_code(std::errc::not_connected);
        return std::nullopt;
    }
    // Step 2: In-Process operations finish, then SuspComm and quiet.
    if (new_port == 0 || !c.suspend(new_port)) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return std::nullopt;
    }
    const auto deadline = Clock::now() + handshake_timeout_;
    service_locked();
    wake_poller();
    const bool acked = drive(
        lk,
        [&] {
            return c.duplication() == engine::Dup::local_done ||
                   c.state() != engine::State::established;
        },
        deadline);
    if (!acked || c.state() != engine::State::established) {
        if (!acked) {
            // No SuspCommAck in time: the stream cannot go on anywhere.
            core_.abort();
            service_locked();
            if (!finish_abort_locked(lk) && core_.take_reset()) {
                reset_connection(fd_);
            }
            ec = std::make_error_code(std::errc::timed_out);
        } else {
            ec = core_.state_error(false);
        }
        wake_poller();
        cv_.notify_all();
        kick_helper();
        return std::nullopt;
    }
    // Step 5: the Remote Peer closes the old LLP after its SuspCommAck (it
    // sends nothing more): its EOF, in the same bound; the state is whole
    // either way.
    drive(
        lk, [&] { return core_.rd_eof(); }, deadline);
    auto carry = c.hand_over();
    if (!carry) {
        // A message after the SuspCommAck (suspended_message) reset it.
        ec = core_.state_error(false);
        wake_poller();
        cv_.notify_all();
        kick_helper();
        return std::nullopt;
    }
    HandOver h;
    h.carry = std::move(*carry);
    h.local = local_addr_;
    h.peer = peer_addr_;
    h.addr_len = addr_len_;
    h.peer_accepted = c.role() == engine::Role::connecting;
    service_locked();  // the FIN the engine asked for, if the LLP was up
    ::shutdown(fd_, SHUT_RDWR);
    core_.stop_input();
    wake_poller();
    cv_.notify_all();
    kick_helper();
    return h;
}

short SoftChannel::pump() {
    std::unique_lock lk(mu_);
    if (!polling_) {
        read_locked();
    }
    service_locked();
    cv_.notify_all();
    kick_helper();
    short ev = core_.rd_eof() ? 0 : POLLIN;
    if (core_.output_pending() && !core_.wr_shut()) {
        ev |= POLLOUT;
    }
    return ev;
}

std::string SoftChannel::describe() const {
    std::unique_lock lk(mu_);
    return core_.describe();
}

engine::Stats SoftChannel::stats() const {
    std::unique_lock lk(mu_);
    return core_.session().sdp().stats();
}

bool SoftChannel::crc() const {
    return core_.crc();
}

}  // namespace sdp::io
