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

#if SDPPM_HAVE_RDMA
#include "rdma/device.hpp"
#include "rdma_channel.hpp"
#endif

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

const char* to_string(provider p) {
    switch (p) {
        case provider::soft:
            return "soft";
        case provider::rdma:
            return "rdma";
        case provider::automatic:
            break;
    }
    return "auto";
}

std::optional<provider> parse_provider(std::string_view name) {
    if (name == "soft") {
        return provider::soft;
    }
    if (name == "rdma") {
        return provider::rdma;
    }
    if (name == "auto" || name == "automatic") {
        return provider::automatic;
    }
    return std::nullopt;
}

bool rdma_available(std::string* why) {
#if SDPPM_HAVE_RDMA
    return rdma::available(why);
#else
    if (why != nullptr) {
        *why =
            "the rdma-core provider is not built in (built with SDPPM_WITH_RDMA=OFF, or without "
            "libibverbs-dev/librdmacm-dev)";
    }
    return false;
#endif
}

namespace detail {

std::optional<provider> choose_provider(provider asked, std::string& why) {
    why.clear();
    if (asked == provider::soft) {
        return provider::soft;
    }
    if (rdma_available(&why)) {
        return provider::rdma;
    }
    if (asked == provider::automatic) {
        return provider::soft;  // `why` says why not rdma
    }
    return std::nullopt;
}

std::string rdma_unusable_reason(const std::string& why) {
    return "provider rdma: no usable iWARP RDMA device (" + why + ")";
}

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

pmclient::BlockingResolver& shared_resolver() {
    static std::mutex mu;
    static std::unique_ptr<pmclient::BlockingResolver> r;
    std::lock_guard lk(mu);
    if (!r) {
        r = std::make_unique<pmclient::BlockingResolver>();  // may throw (bad SDP_PMSP)
    }
    return *r;
}

}  // namespace detail

namespace {

using detail::channel_options;
using detail::shared_resolver;

std::error_code errno_code(int e) {
    return {e, std::generic_category()};
}

}  // namespace

stream::stream() = default;
stream::~stream() = default;
stream::stream(stream&&) noexcept = default;
stream& stream::operator=(stream&&) noexcept = default;

std::error_code stream::fail(std::error_code ec, connect_info info) {
    impl_.reset();
    info.used = transport::none;
    failed_ = std::move(info);
    return ec;
}

std::error_code stream::connect_tcp(const pm::Endpoint& address, const stream_options& opts) {
    impl_.reset();
    failed_ = {};
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
    im->info.provider = "tcp";
    impl_ = std::move(im);
    return {};
}

std::error_code stream::connect_sdp(const pm::Endpoint& sdp_address, const stream_options& opts) {
    impl_.reset();
    failed_ = {};
    std::string pwhy;
    const auto prov = detail::choose_provider(opts.iwarp_provider, pwhy);
    if (!prov) {
        connect_info fi;
        fi.provider = "rdma";
        fi.reason = detail::rdma_unusable_reason(pwhy);
        return fail(std::make_error_code(std::errc::no_such_device), std::move(fi));
    }
    auto im = std::make_unique<impl>();
    im->opts = opts;
#if SDPPM_HAVE_RDMA
    if (*prov == provider::rdma) {
        std::error_code ec;
        std::string why;
        im->other = detail::rdma_connect_direct(sdp_address, opts, ec, why);
        if (!im->other) {
            connect_info fi;
            fi.provider = "rdma";
            fi.reason = why;
            return fail(ec, std::move(fi));
        }
        im->info.used = transport::sdp;
        im->info.peer = sdp_address;
        im->info.provider = "rdma";
        impl_ = std::move(im);
        return {};
    }
#endif
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
        connect_info fi;
        fi.provider = "soft";
        fi.reason = why;
        return fail(ec, std::move(fi));
    }
    im->info.used = transport::sdp;
    im->info.peer = sdp_address;
    im->info.provider = "soft";
    impl_ = std::move(im);
    return {};
}

std::error_code stream::connect(const pm::Endpoint& conventional, const stream_options& opts) {
    impl_.reset();
    failed_ = {};
    std::string pwhy;
    const auto prov = detail::choose_provider(opts.iwarp_provider, pwhy);
    if (!prov) {
        // rdma asked for and unusable: nothing to ask the Port Mapper for.
        const std::string why = detail::rdma_unusable_reason(pwhy);
        if (!opts.fallback) {
            connect_info fi;
            fi.provider = "rdma";
            fi.reason = why;
            return fail(std::make_error_code(std::errc::no_such_device), std::move(fi));
        }
        if (auto e = connect_tcp(conventional, opts)) {
            connect_info fi;
            fi.provider = "tcp";
            fi.reason = why + "; connect to the Conventional Address " + conventional.to_string() +
                        ": " + e.message();
            return fail(e, std::move(fi));
        }
        impl_->info.reason = why + "; fell back to TCP to the Conventional Address";
        return {};
    }
    std::string soft_note;  // automatic chose rdma, which could not be used here
#if SDPPM_HAVE_RDMA
    if (*prov == provider::rdma) {
        detail::rdma_pm_outcome out;
        try {
            out = detail::rdma_connect_pm(shared_resolver(), conventional, opts);
        } catch (const std::exception&) {
            return std::make_error_code(std::errc::invalid_argument);
        }
        if (out.bind_failed && opts.iwarp_provider == provider::automatic) {
            // The device is not on the route to this peer: soft provider.
            soft_note = out.reason + "; used the soft provider";
        } else {
            const std::string resolution =
                out.asked ? std::string(pmclient::to_string(out.resolution.kind)) : "";
            if (out.channel) {
                auto im = std::make_unique<impl>();
                im->opts = opts;
                im->other = std::move(out.channel);
                im->info.used = transport::sdp;
                im->info.peer = out.peer;
                im->info.provider = "rdma";
                im->info.resolution = resolution;
                im->info.from_cache = out.resolution.from_cache;
                impl_ = std::move(im);
                return {};
            }
            connect_info fi;
            fi.provider = "rdma";
            fi.resolution = resolution;
            fi.from_cache = out.resolution.from_cache;
            fi.reason = out.reason;
            if (!out.fall_back && !out.bind_failed) {
                return fail(out.ec ? out.ec : std::make_error_code(std::errc::io_error),
                            std::move(fi));
            }
            if (!opts.fallback) {
                return fail(
                    out.bind_failed ? out.ec : std::make_error_code(std::errc::connection_refused),
                    std::move(fi));
            }
            if (out.bind_failed) {
                // The device is not on the route to the peer: nothing was
                // asked; plain TCP to the Conventional Address.
                out.reason += "; fell back to TCP to the Conventional Address";
                fi.reason = out.reason;
            }
            if (auto e = connect_tcp(conventional, opts)) {
                fi.provider = "tcp";
                fi.reason += "; connect to the Conventional Address " + conventional.to_string() +
                             ": " + e.message();
                return fail(e, std::move(fi));
            }
            impl_->info.resolution = resolution;
            impl_->info.from_cache = out.resolution.from_cache;
            impl_->info.reason = out.reason;
            return {};
        }
    }
#endif
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
        connect_info fi;
        fi.provider = "soft";
        fi.resolution = resolution;
        fi.reason = cr.reason;
        return fail(errno_code(cr.sys_errno != 0 ? cr.sys_errno : EHOSTUNREACH), std::move(fi));
    }
    auto im = std::make_unique<impl>();
    im->opts = opts;
    im->info.resolution = resolution;
    im->info.from_cache = cr.resolution.from_cache;
    im->info.peer = cr.peer;
    if (!cr.used_sdp) {
        if (!opts.fallback) {
            ::close(cr.fd);
            connect_info fi = im->info;
            fi.provider = "soft";
            fi.reason = cr.reason;
            return fail(std::make_error_code(std::errc::connection_refused), std::move(fi));
        }
        io::set_nodelay(cr.fd);
        io::set_nonblocking(cr.fd, false);
        detail::set_io_timeout(cr.fd, opts.io_timeout);
        im->tcp_fd = cr.fd;
        im->info.used = transport::tcp;
        im->info.provider = "tcp";
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
        im->info.provider = "soft";
        im->info.reason = soft_note;
        impl_ = std::move(im);
        return {};
    }
    // 7.5.1: a reset (or refusal / timeout) of the SDP connection is
    // treated like a PMDeny: plain TCP to the Conventional Address.
    if (!opts.fallback || !detail::startup_fallback_worthy(ec)) {
        connect_info fi = im->info;
        fi.provider = "soft";
        fi.reason = why;
        return fail(ec, std::move(fi));
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
    if (impl_->other) {
        return impl_->other->read_some(buf, ec);
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
    if (impl_->other) {
        return impl_->other->write(buf, ec);
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
    if (impl_->other) {
        impl_->other->shutdown_write(ec);
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
    } else if (impl_->other) {
        impl_->other->close(impl_->opts.linger, ec);
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
    } else if (impl_->other) {
        impl_->other->abort();
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
    return impl_ ? impl_->info : failed_;
}

int stream::native_handle() const {
    if (!impl_) {
        return -1;
    }
    if (impl_->other) {
        return impl_->other->native_handle();
    }
    return impl_->sdp ? impl_->sdp->native_handle() : impl_->tcp_fd;
}

short stream::pump() {
    if (!impl_) {
        return 0;
    }
    if (impl_->other) {
        return impl_->other->pump();
    }
    return impl_->sdp ? impl_->sdp->pump() : static_cast<short>(POLLIN);
}

std::string stream::describe() const {
    if (!impl_) {
        return "not connected";
    }
    if (impl_->other) {
        return "sdp to " + impl_->info.peer.to_string() + " (" + impl_->other->describe() + ")";
    }
    if (!impl_->sdp) {
        return "tcp to " + impl_->info.peer.to_string();
    }
    return "sdp to " + impl_->info.peer.to_string() + " (mss " + std::to_string(impl_->sdp->mss()) +
           ", crc " + (impl_->sdp->crc() ? "on" : "off") + "; " + impl_->sdp->describe() + ")";
}

}  // namespace sdp
