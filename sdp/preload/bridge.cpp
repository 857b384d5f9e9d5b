// SPDX-License-Identifier: Apache-2.0
#include "sdp/preload/bridge.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_set>
#include <vector>

#include "sdp/preload/state.hpp"

namespace sdp::preload {
namespace {

// Each side's buffer starts small (an idle or pending connection costs
// little) and doubles up to kChunk while reads fill it.
constexpr std::size_t kFirstChunk = 64 * 1024;
constexpr std::size_t kChunk = 1024 * 1024;
void grow(std::vector<std::uint8_t>& buf, std::size_t filled) {
    if (filled == buf.size() && buf.size() < kChunk) {
        buf.resize(buf.size() * 2);
    }
}
constexpr int kPairBuffer = 1024 * 1024;
// A direct write of up to this much is one message, taken whole or not at
// all (Stream::try_write's bound for one buffer).
constexpr std::size_t kWholeWrite = Stream::kTryWriteWhole;

// Every bridge that runs in this process.
LiveSet<Bridge>& registry() {
    return LiveSet<Bridge>::instance();
}

}  // namespace

bool Bridge::make_pair(int* app_fd, int* pump_fd) {
    int sp[2];
    if (real().socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        return false;
    }
    // Deeper socketpair buffers: fewer wake-ups of the bridge threads and of
    // the program per byte (the kernel caps them at net.core.wmem_max).
    for (int fd : sp) {
        real().setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kPairBuffer, sizeof kPairBuffer);
        real().setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kPairBuffer, sizeof kPairBuffer);
    }
    track_internal(sp[0]);  // until the program's descriptor takes it (install)
    track_internal(sp[1]);
    *app_fd = sp[0];
    *pump_fd = sp[1];
    return true;
}

void Bridge::restore_app_buffer(int app_fd) {
    real().setsockopt(app_fd, SOL_SOCKET, SO_SNDBUF, &kPairBuffer, sizeof kPairBuffer);
}

std::shared_ptr<Bridge> Bridge::create(Stream stream, int* app_fd) {
    int pump = -1;
    if (!make_pair(app_fd, &pump)) {
        return nullptr;
    }
    struct stat st {};
    ::fstat(*app_fd, &st);
    auto b = adopt(std::move(stream), pump, st.st_dev, st.st_ino);
    if (!b) {
        const int e = errno;
        close_internal(*app_fd);
        close_internal(pump);
        *app_fd = -1;
        errno = e;
    }
    return b;
}

std::shared_ptr<Bridge> Bridge::adopt(Stream stream, int pump_fd, dev_t app_dev, ino_t app_ino) {
    std::shared_ptr<Bridge> b(new Bridge);
    if (!b->init(pump_fd, app_dev, app_ino)) {
        b->pump_fd_ = -1;  // still the caller's
        return nullptr;
    }
    b->local_ = local_of(stream.native_handle()).value_or(pm::Endpoint{});
    b->stream_ = std::move(stream);
    return b;
}

bool Bridge::init(int pump_fd, dev_t app_dev, ino_t app_ino) {
    pump_fd_ = pump_fd;
    app_dev_ = app_dev;
    app_ino_ = app_ino;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    rx_wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    for (int fd : {wake_fd_, rx_wake_fd_}) {
        if (fd >= 0) {
            track_internal(fd);
        }
    }
    return wake_fd_ >= 0 && rx_wake_fd_ >= 0;
}

std::vector<std::shared_ptr<Bridge>> Bridge::live() {
    auto& r = registry();
    std::lock_guard lk(r.mu);
    return {r.live.begin(), r.live.end()};
}

Bridge::~Bridge() {
    // A bridge that never started (its descriptor could not be installed)
    // still holds its ends; one that ended has closed them.
    close_internal(pump_fd_);
    close_internal(wake_fd_);
    close_internal(rx_wake_fd_);
}

std::error_code Bridge::set_keepalive(const Keepalive& k) {
    std::lock_guard lk(mu_);
    if (closing_) {
        return std::make_error_code(std::errc::not_connected);
    }
    return stream_.set_keepalive(k);
}

int Bridge::llp_getsockopt(int level, int name, void* val, socklen_t* len) {
    std::lock_guard lk(mu_);
    const int fd = closing_ ? -1 : stream_.native_handle();
    if (fd < 0) {
        errno = ENOTCONN;
        return -1;
    }
    return real().getsockopt(fd, level, name, val, len);
}

int Bridge::llp_setsockopt(int level, int name, const void* val, socklen_t len) {
    std::lock_guard lk(mu_);
    const int fd = closing_ ? -1 : stream_.native_handle();
    return fd < 0 ? 0 : real().setsockopt(fd, level, name, val, len);
}

void Bridge::start() {
    registry().add(shared_from_this());
    ++counters().bridges_active;
    auto self = shared_from_this();
    std::thread([self] { self->rx_loop(); }).detach();
    std::thread([self] { self->tx_loop(); }).detach();
}

bool Bridge::at_urgent_mark() const {
    int mark = 0;
    return ::ioctl(pump_fd_, SIOCATMARK, &mark) == 0 && mark != 0;
}

Bridge::Sent Bridge::send_to_app(const std::uint8_t* p, std::size_t n, int flags) {
    while (n > 0) {
        ssize_t k = ::send(pump_fd_, p, n, flags | MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k >= 0) {
            p += k;
            n -= static_cast<std::size_t>(k);
            continue;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return Sent::app_gone;  // EPIPE: the program closed its end
        }
        // The program does not read: wait for room, or for a hand-off that
        // takes the rest along.
        pollfd w[2] = {{pump_fd_, POLLOUT, 0}, {rx_wake_fd_, POLLIN, 0}};
        if (::poll(w, 2, -1) < 0 && errno != EINTR) {
            return Sent::app_gone;
        }
        if (w[1].revents != 0) {
            std::lock_guard lk(mu_);
            if (handing_ == Handing::done) {
                rx_rest_.insert(rx_rest_.end(), p, p + n);
                return Sent::handed;
            }
        }
    }
    return Sent::all;
}

bool Bridge::handed_over() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return handing_ != Handing::running; });
    return handing_ == Handing::done;
}

std::optional<Handoff> Bridge::hand_off(std::uint16_t port, int* pump_fd, std::error_code& ec) {
    {
        std::lock_guard lk(mu_);
        if (closing_ || exiting_ || handing_ != Handing::none || rx_ != End::running) {
            ec = std::make_error_code(std::errc::not_connected);
            return std::nullopt;
        }
        handing_ = Handing::running;
    }
    { std::lock_guard dl(direct_mu_); }  // a direct write in progress ends first
    // An urgent byte not read yet goes along as data (the Handoff keeps no
    // mark; out of line it would be dropped).
    stream_.set_oob_inline(true);
    auto h = stream_.hand_off(port, ec);
    std::unique_lock lk(mu_);
    const bool unchanged =
        !h && (ec == std::errc::invalid_argument || ec == std::errc::operation_not_supported ||
               ec == std::errc::not_connected);
    handing_ = h ? Handing::done : unchanged ? Handing::none : Handing::failed;
    cv_.notify_all();
    if (!h) {
        return std::nullopt;
    }
    // Both threads stop where they are: the receive side's stream calls
    // fail now, a wait for the program ends at its eventfd, the send side
    // ends at its eventfd or at its failing write.
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(rx_wake_fd_, &one, sizeof one);
    wake();
    if (!cv_.wait_for(lk, std::chrono::seconds(10),
                      [&] { return rx_ != End::running && tx_ != End::running; })) {
        ec = std::make_error_code(std::errc::timed_out);
        return std::nullopt;  // a thread is stuck: the connection is lost
    }
    h->unread.insert(h->unread.begin(), rx_rest_.begin(), rx_rest_.end());
    h->unsent.insert(h->unsent.end(), tx_rest_.begin(), tx_rest_.end());
    rx_rest_.clear();
    tx_rest_.clear();
    *pump_fd = pump_fd_;
    pump_fd_ = -1;
    return h;
}

std::size_t Bridge::direct_write(const iovec* iov, int iovcnt, std::size_t total) {
    std::unique_lock dl(direct_mu_, std::try_to_lock);
    if (!dl || total == 0) {
        return 0;  // another thread's direct write: this one goes the kernel's way
    }
    {
        // (try: this thread may hold it already, a signal handler's write
        // interrupting the program's setsockopt() say)
        std::unique_lock lk(mu_, std::try_to_lock);
        if (!lk || closing_ || exiting_ || handing_ != Handing::none || tx_ != End::running ||
            pump_fd_ < 0) {
            return 0;
        }
        // A stream in progress: this write joins the socketpair, where it
        // gathers with those that follow (one small message per write
        // would cost the peer a message each; docs/preload.md, "The
        // direct path").
        if (!stream_.send_idle()) {
            ++counters().direct_not_idle;
            return 0;
        }
        // Nothing of the program's in the socketpair (data, its urgent byte,
        // or its shutdown(SHUT_WR)/close) ...
        pollfd p{pump_fd_, POLLIN | POLLPRI | POLLRDHUP, 0};
        if (::poll(&p, 1, 0) != 0) {
            return 0;
        }
    }
    // ... and nothing taken from it that is not in the stream yet: the send
    // side sets tx_holding_ before its recv(), and a poll() that found the
    // socketpair empty because that recv() took the bytes must be followed
    // by a load that sees the flag (the kernel's poll with timeout 0 is no
    // full barrier on every CPU).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (tx_holding_.load() || kernel_writes_.load() != 0) {
        return 0;  // (or a write of another thread entering the socketpair)
    }
    std::size_t taken = 0;
    std::error_code ec;
    if (iovcnt > 1 && total <= kWholeWrite) {
        // Several small buffers: one message, whole or not at all.
        static thread_local std::unique_ptr<std::uint8_t[]> flat;
        if (!flat) {
            flat = std::make_unique<std::uint8_t[]>(kWholeWrite);
        }
        std::size_t off = 0;
        for (int i = 0; i < iovcnt; ++i) {
            std::memcpy(flat.get() + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
        taken = stream_.try_write(std::span<const std::uint8_t>(flat.get(), total), ec);
    } else {
        for (int i = 0; i < iovcnt; ++i) {
            const std::span<const std::uint8_t> part(
                static_cast<const std::uint8_t*>(iov[i].iov_base), iov[i].iov_len);
            const std::size_t n = part.empty() ? 0 : stream_.try_write(part, ec);
            taken += n;
            if (n < part.size()) {
                break;
            }
        }
    }
    if (taken > 0) {
        counters().bytes_to_peer += taken;
        counters().bytes_direct += taken;
    }
    return taken;
}

void Bridge::wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(wake_fd_, &one, sizeof one);
}

// Peer -> program. read_some() stops at the urgent byte (9.5.3), which goes
// to the program as MSG_OOB at the same place in the stream.
void Bridge::rx_loop() {
    mark_internal_thread();
    std::vector<std::uint8_t> buf(kFirstChunk);
    End how = End::eof;
    bool stop_at_urgent = true;
    for (;;) {
        std::error_code ec;
        const std::size_t n = stream_.read_some(buf, ec, stop_at_urgent);
        stop_at_urgent = true;
        if (ec == std::errc::interrupted) {
            // At the mark: the urgent byte goes to the program as MSG_OOB
            // after the bytes before it, so SIOCATMARK, recv(MSG_OOB),
            // POLLPRI/SIGURG and SO_OOBINLINE are the kernel's.
            std::error_code oec;
            const std::uint8_t b = stream_.read_oob(oec);
            if (oec) {
                stop_at_urgent = false;  // nothing to take after all: read on
                continue;
            }
            // (A hand-off meanwhile hands the urgent byte on as data.)
            if (const Sent s = send_to_app(&b, 1, MSG_OOB); s != Sent::all) {
                how = s == Sent::handed ? End::handed : End::app_gone;
                break;
            }
            ++counters().oob_from_peer;
            continue;
        }
        if (n > 0) {
            if (const Sent s = send_to_app(buf.data(), n, 0); s != Sent::all) {
                how = s == Sent::handed ? End::handed : End::app_gone;
                break;
            }
            counters().bytes_from_peer += n;
            grow(buf, n);
            continue;
        }
        if (ec && handed_over()) {
            how = End::handed;  // the rest is in the hand-off's state
        } else if (!ec) {
            ::shutdown(pump_fd_, SHUT_WR);  // the program reads end of stream
            how = End::eof;
        } else {
            log(3, "connection ended: %s", ec.message().c_str());
            how = End::reset;
        }
        break;
    }
    ended(true, how);
}

// Program -> peer.
void Bridge::tx_loop() {
    mark_internal_thread();
    std::vector<std::uint8_t> buf(kFirstChunk);
    End how = End::eof;
    bool exiting = false;
    for (;;) {
        pollfd p[2] = {{pump_fd_, POLLIN | POLLPRI, 0}, {wake_fd_, POLLIN, 0}};
        // Exiting: take what is there without waiting (nobody closes the
        // program's end before the process is gone), then DisConn.
        if (::poll(p, 2, exiting ? 0 : -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            how = End::reset;
            break;
        }
        if (p[1].revents != 0) {
            std::uint64_t v;
            [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
            std::lock_guard lk(mu_);
            if (handing_ == Handing::done) {
                how = End::handed;
                break;
            }
            if (rx_ == End::reset) {
                how = End::reset;
                break;
            }
            exiting = exiting_;
        }
        if (p[0].revents == 0 && !exiting) {
            continue;
        }
        // Until what the recv()s below take is in the stream, no direct
        // write may pass it (direct_write checks after the socketpair).
        // Set under direct_mu_: a direct write that found the socketpair
        // empty and nothing held has its bytes in the stream before ours
        // go in. Without the lock, bytes written to the socketpair after
        // its check could be taken and queued in part (the stream full)
        // and its write land between two parts, inside a record.
        {
            std::lock_guard dl(direct_mu_);
            tx_holding_ = true;
        }
        if ((p[0].revents & POLLPRI) != 0 && at_urgent_mark()) {
            // The program's send(MSG_OOB): the bytes before it went out,
            // the urgent byte goes as SDP out-of-band data (9.5.3).
            std::uint8_t b = 0;
            if (::recv(pump_fd_, &b, 1, MSG_OOB | MSG_DONTWAIT) == 1) {
                if (auto ec = stream_.send_oob(b)) {
                    if (handed_over()) {
                        tx_rest_.push_back(b);  // goes on as data
                        how = End::handed;
                        break;
                    }
                    log(3, "urgent byte to the peer failed: %s", ec.message().c_str());
                    how = End::reset;
                    break;
                }
                ++counters().oob_to_peer;
            }
            tx_holding_ = false;
            continue;
        }
        ssize_t n = ::recv(pump_fd_, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n > 0) {
            // Less than asked for: the socketpair was empty at that instant
            // (or at the urgent mark). With no counted write in progress
            // the count starts again from zero, so that a count a stale
            // entry raised cannot close the direct path for good (a write
            // counted meanwhile is lost to it: too low is safe, poll()
            // decides).
            if (static_cast<std::size_t>(n) < buf.size() && kernel_writes_.load() == 0) {
                pair_bytes_.store(0, std::memory_order_relaxed);
            } else {
                pair_bytes_.fetch_sub(n, std::memory_order_relaxed);
            }
            std::error_code ec;
            const std::size_t put = stream_.write(
                std::span<const std::uint8_t>(buf.data(), static_cast<std::size_t>(n)), ec);
            if (ec && handed_over()) {
                // Queued before the hand-off: in its unsent bytes; the rest
                // follows them.
                tx_rest_.assign(buf.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                                  put, static_cast<std::size_t>(n))),
                                buf.begin() + n);
                how = End::handed;
                break;
            }
            if (ec) {
                log(3, "write to the peer failed: %s", ec.message().c_str());
                how = End::reset;
                break;
            }
            counters().bytes_to_peer += static_cast<std::uint64_t>(n);
            grow(buf, static_cast<std::size_t>(n));
            tx_holding_ = false;
            continue;
        }
        if (n == 0 || exiting) {
            // The program shut down writing or closed (or the process exits
            // with everything written so far sent): DisConn after the data.
            // (After a hand-off the process that took over sees the same
            // end of stream on the socketpair.)
            if (stream_.shutdown_write() && handed_over()) {
                how = End::handed;
                break;
            }
            how = End::eof;
            break;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            tx_holding_ = false;
            continue;
        }
        how = End::reset;
        break;
    }
    if (how == End::eof && !exiting) {
        linger_after_tx_eof();
    }
    ended(false, how);
}

void Bridge::linger_after_tx_eof() {
    const auto linger = stream_options(nullptr).linger;
    for (;;) {
        {
            std::lock_guard lk(mu_);
            if (rx_ != End::running || exiting_) {
                return;
            }
        }
        pollfd p[2] = {{pump_fd_, 0, 0}, {wake_fd_, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 && errno != EINTR) {
            return;
        }
        if (p[1].revents != 0) {
            std::uint64_t v;
            [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
            continue;
        }
        if ((p[0].revents & (POLLHUP | POLLERR)) == 0) {
            continue;
        }
        // The program closed its end while the peer may still send: as a
        // TCP socket after close(), wait a linger time for the peer's
        // DisConn, then end the receive side.
        std::unique_lock lk(mu_);
        if (cv_.wait_for(lk, linger, [&] { return rx_ != End::running; })) {
            return;
        }
        lk.unlock();
        log(3, "peer did not close within the linger time after the program closed");
        ::shutdown(stream_.native_handle(), SHUT_RD);
        return;
    }
}

void Bridge::ended(bool rx, End how) {
    {
        std::lock_guard lk(mu_);
        (rx ? rx_ : tx_) = how;
        cv_.notify_all();
        if ((rx ? tx_ : rx_) == End::running) {
            if (rx) {
                wake();  // the send side waits in poll()
            }
            return;
        }
    }
    // Both sides ended; the program's calls (keepalive, LLP options) leave
    // the stream alone from here on.
    {
        std::lock_guard lk(mu_);
        closing_ = true;
    }
    { std::lock_guard dl(direct_mu_); }  // a direct write in progress ends first
    const bool handed = rx_ == End::handed || tx_ == End::handed;
    const bool reset = rx_ == End::reset || tx_ == End::reset || rx_ == End::app_gone;
    counters().sdp_resumes += stream_.stats().resumes;
    if (handed) {
        // hand_off() takes our end of the socketpair; the stream is closed.
        ++counters().handoffs_out;
    } else if (reset) {
        ++counters().bridges_reset;
        stream_.abort();
    } else {
        stream_.close();
    }
    {
        std::lock_guard lk(mu_);
        if (!handed) {
            close_internal(pump_fd_);
            pump_fd_ = -1;
        }
        close_internal(wake_fd_);
        close_internal(rx_wake_fd_);
        wake_fd_ = rx_wake_fd_ = -1;
    }
    --counters().bridges_active;
    write_stats();
    registry().remove(shared_from_this());
}

void Bridge::finish_all(std::chrono::milliseconds budget) {
    auto& r = registry();
    std::unique_lock lk(r.mu);
    if (r.live.empty()) {
        return;
    }
    for (const auto& b : r.live) {
        std::lock_guard blk(b->mu_);
        b->exiting_ = true;
        b->cv_.notify_all();
        b->wake();
    }
    r.cv.wait_for(lk, budget, [&] { return r.live.empty(); });
}

void Bridge::fork_prepare() {
    registry().fork_prepare();
}
void Bridge::fork_parent() {
    registry().fork_parent();
}
void Bridge::fork_child() {
    // The parent's bridges: their threads do not exist here and their
    // streams belong to the parent.
    registry().fork_child();
}

}  // namespace sdp::preload
