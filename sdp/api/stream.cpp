#include "sdp/stream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "internal.hpp"
#include "pmclient/connect.hpp"
#include "sdp/io/channel.hpp"

namespace sdp {

const char* to_string(transport t) {
    switch (t) {
        case transport::sdp:
            return "sdp";
        case transport::tcp:
            return "tcp";
        case transport::none:
            break;
    }
    return "none";
}

namespace detail {

io::ChannelOptions channel_options(const stream_options& o) {
    io::ChannelOptions c;
    c.handshake_timeout = o.handshake_timeout;
    c.io_timeout = o.io_timeout;
    c.session.crc = o.crc;
    c.session.engine.recv_buf_size = o.recv_buf_size;
    c.session.engine.recv_buf_count = o.recv_buf_count;
    c.session.engine.send_buf_size = o.recv_buf_size;
    c.session.engine.send_queue_limit = o.send_queue_limit;
    return c;
}

pmclient::RequestOptions request_options(const stream_options& o) {
    pmclient::RequestOptions ro;
    ro.pmsp = o.pmsp;
    ro.deadline = o.resolve_deadline;
    ro.initial_timeout = o.resolve_initial_timeout;
    ro.use_cache = o.use_pm_cache;
    return ro;
}

bool startup_fallback_worthy(const std::error_code& ec) {
    return ec == std::errc::connection_refused || ec == std::errc::connection_reset ||
           ec == std::errc::timed_out || ec == std::errc::connection_aborted;
}

bool sdp_connect_fallback_worthy(int err) {
    return err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT;
}

std::string reason_after_resolution(const pmclient::Result& r) {
    return std::string(r.kind == pmclient::ResultKind::denied ? "PMDeny" : "PM timeout") +
           "; fell back to the Conventional Address";
}

std::string reason_after_startup(const std::error_code& ec, const std::string& why) {
    return "SDP startup failed (" + ec.message() + ": " + why + ")";
}

std::string reason_after_sdp_connect(const pm::Endpoint& sdp_address, int err) {
    return "SDP Address " + sdp_address.to_string() + ": " + std::strerror(err) +
           "; fell back to the Conventional Address";
}

std::error_code resolution_error(const pmclient::Result& r) {
    if (r.error == pmclient::Errc::invalid_argument || r.error == pmclient::Errc::config) {
        return std::make_error_code(std::errc::invalid_argument);
    }
    if (r.error == pmclient::Errc::cancelled) {
        return std::make_error_code(std::errc::operation_canceled);
    }
    return std::make_error_code(std::errc::host_unreachable);
}

}  // namespace detail

namespace {

using detail::channel_options;

std::error_code errno_code(int e) {
    return {e, std::generic_category()};
}

pmclient::BlockingResolver& shared_resolver() {
    static std::mutex mu;
    static std::unique_ptr<pmclient::BlockingResolver> r;
    std::lock_guard lk(mu);
    if (!r) {
        r = std::make_unique<pmclient::BlockingResolver>();  // may throw (bad SDP_PMSP)
    }
    return *r;
}

}  // namespace

stream::stream() = default;
stream::~stream() = default;
stream::stream(stream&&) noexcept = default;
stream& stream::operator=(stream&&) noexcept = default;

std::error_code stream::connect_tcp(const pm::Endpoint& address, const stream_options& opts) {
    impl_.reset();
    auto im = std::make_unique<impl>();
    im->opts = opts;
    int fd = detail::tcp_socket(address.address.is_v4());
    if (fd < 0) {
        return errno_code(-fd);
    }
    if (int e = detail::connect_with_timeout(fd, address, opts.connect_timeout); e != 0) {
        ::close(fd);
        return errno_code(e);
    }
    io::set_nodelay(fd);
    io::set_nonblocking(fd, false);
    detail::set_io_timeout(fd, opts.io_timeout);
    im->tcp_fd = fd;
    im->info.used = transport::tcp;
    im->info.peer = address;
    impl_ = std::move(im);
    return {};
}

std::error_code stream::connect_sdp(const pm::Endpoint& sdp_address, const stream_options& opts) {
    impl_.reset();
    auto im = std::make_unique<impl>();
    im->opts = opts;
    int fd = detail::tcp_socket(sdp_address.address.is_v4());
    if (fd < 0) {
        return errno_code(-fd);
    }
    if (int e = detail::connect_with_timeout(fd, sdp_address, opts.connect_timeout); e != 0) {
        ::close(fd);
        return errno_code(e);
    }
    std::error_code ec;
    std::string why;
    im->sdp =
        io::SoftChannel::handshake(fd, iwarp::MpaRole::initiator, channel_options(opts), ec, &why);
    if (!im->sdp) {
        im->info.reason = why;
        return ec;
    }
    im->info.used = transport::sdp;
    im->info.peer = sdp_address;
    impl_ = std::move(im);
    return {};
}

std::error_code stream::connect(const pm::Endpoint& conventional, const stream_options& opts) {
    impl_.reset();
    pmclient::ConnectOptions co;
    co.connect_timeout = opts.connect_timeout;
    co.request = detail::request_options(opts);
    pmclient::ConnectResult cr;
    try {
        cr = pmclient::connect(shared_resolver(), conventional, std::nullopt, co);
    } catch (const std::exception&) {
        return std::make_error_code(std::errc::invalid_argument);
    }
    const std::string resolution(pmclient::to_string(cr.resolution.kind));
    if (!cr.ok()) {
        return errno_code(cr.sys_errno != 0 ? cr.sys_errno : EHOSTUNREACH);
    }
    auto im = std::make_unique<impl>();
    im->opts = opts;
    im->info.resolution = resolution;
    im->info.from_cache = cr.resolution.from_cache;
    im->info.peer = cr.peer;
    if (!cr.used_sdp) {
        if (!opts.fallback) {
            ::close(cr.fd);
            return std::make_error_code(std::errc::connection_refused);
        }
        io::set_nodelay(cr.fd);
        io::set_nonblocking(cr.fd, false);
        detail::set_io_timeout(cr.fd, opts.io_timeout);
        im->tcp_fd = cr.fd;
        im->info.used = transport::tcp;
        im->info.reason = cr.reason.empty() ? "port mapper: " + resolution : cr.reason;
        impl_ = std::move(im);
        return {};
    }
    // Connected to the SDP Address from CpIPAddr:CpPort: MPA + SDP setup.
    std::error_code ec;
    std::string why;
    im->sdp = io::SoftChannel::handshake(cr.fd, iwarp::MpaRole::initiator, channel_options(opts),
                                         ec, &why);
    if (im->sdp) {
        im->info.used = transport::sdp;
        impl_ = std::move(im);
        return {};
    }
    // 7.5.1: a reset (or refusal / timeout) of the SDP connection is
    // treated like a PMDeny: plain TCP to the Conventional Address.
    if (!opts.fallback || !detail::startup_fallback_worthy(ec)) {
        return ec;
    }
    stream t;
    if (auto e2 = t.connect_tcp(conventional, opts)) {
        return e2;
    }
    t.impl_->info.resolution = resolution;
    t.impl_->info.from_cache = cr.resolution.from_cache;
    t.impl_->info.reason = detail::reason_after_startup(ec, why);
    impl_ = std::move(t.impl_);
    return {};
}

std::size_t stream::read_some(std::span<std::uint8_t> buf, std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    if (impl_->sdp) {
        return impl_->sdp->read_some(buf, ec);
    }
    while (true) {
        ssize_t n = ::recv(impl_->tcp_fd, buf.data(), buf.size(), 0);
        if (n >= 0) {
            return static_cast<std::size_t>(n);
        }
        if (errno != EINTR) {
            ec = (errno == EAGAIN || errno == EWOULDBLOCK)
                     ? std::make_error_code(std::errc::timed_out)
                     : errno_code(errno);
            return 0;
        }
    }
}

std::size_t stream::read(std::span<std::uint8_t> buf, std::error_code& ec) {
    std::size_t got = 0;
    while (got < buf.size()) {
        std::size_t n = read_some(buf.subspan(got), ec);
        if (ec || n == 0) {
            break;
        }
        got += n;
    }
    return got;
}

std::size_t stream::write(std::span<const std::uint8_t> buf, std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    if (impl_->sdp) {
        return impl_->sdp->write(buf, ec);
    }
    std::size_t done = 0;
    while (done < buf.size()) {
        ssize_t n = ::send(impl_->tcp_fd, buf.data() + done, buf.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
        } else if (n < 0 && errno != EINTR) {
            ec = (errno == EAGAIN || errno == EWOULDBLOCK)
                     ? std::make_error_code(std::errc::timed_out)
                     : errno_code(errno);
            break;
        }
    }
    return done;
}

std::error_code stream::shutdown_write() {
    if (!impl_) {
        return std::make_error_code(std::errc::not_connected);
    }
    std::error_code ec;
    if (impl_->sdp) {
        impl_->sdp->shutdown_write(ec);
        return ec;
    }
    if (!impl_->tcp_wr_shut && ::shutdown(impl_->tcp_fd, SHUT_WR) != 0) {
        return errno_code(errno);
    }
    impl_->tcp_wr_shut = true;
    return {};
}

std::error_code stream::close() {
    if (!impl_) {
        return {};
    }
    std::error_code ec;
    if (impl_->sdp) {
        impl_->sdp->close(impl_->opts.linger, ec);
    }
    impl_.reset();
    return ec;
}

void stream::abort() {
    if (!impl_) {
        return;
    }
    if (impl_->sdp) {
        impl_->sdp->abort();
    } else {
        io::reset_connection(impl_->tcp_fd);
    }
    impl_.reset();
}

bool stream::is_open() const {
    return impl_ != nullptr;
}

transport stream::used() const {
    return impl_ ? impl_->info.used : transport::none;
}

const connect_info& stream::info() const {
    static const connect_info none;
    return impl_ ? impl_->info : none;
}

int stream::native_handle() const {
    if (!impl_) {
        return -1;
    }
    return impl_->sdp ? impl_->sdp->native_handle() : impl_->tcp_fd;
}

short stream::pump() {
    if (!impl_) {
        return 0;
    }
    return impl_->sdp ? impl_->sdp->pump() : static_cast<short>(POLLIN);
}

std::string stream::describe() const {
    if (!impl_) {
        return "not connected";
    }
    if (!impl_->sdp) {
        return "tcp to " + impl_->info.peer.to_string();
    }
    return "sdp to " + impl_->info.peer.to_string() + " (mss " + std::to_string(impl_->sdp->mss()) +
           ", crc " + (impl_->sdp->crc() ? "on" : "off") + "; " + impl_->sdp->describe() + ")";
}

}  // namespace sdp
