// SPDX-License-Identifier: Apache-2.0
#include "sdp/stream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "internal.hpp"
#include "libpmclient/src/connect_core/blocking_connect.hpp"
#include "sdp/bytes/byte_order.hpp"
#include "sdp/io/channel.hpp"
#include "sdp/iwarp/mpa.hpp"
#include "sdp/wire/message.hpp"

#if SDPPM_HAVE_RDMA
#include "rdma_channel.hpp"
#include "sdp/rdma/device.hpp"
#endif

namespace sdp {

namespace {

// An enum's names: to_string gives the first entry for a value (`other` for
// a value not listed), parse accepts every entry.
template <typename E>
struct Named {
    E value;
    const char* name;
};

template <typename E, std::size_t N>
const char* name_of(const Named<E> (&names)[N], E v, const char* other) {
    for (const auto& n : names) {
        if (n.value == v) {
            return n.name;
        }
    }
    return other;
}

template <typename E, std::size_t N>
std::optional<E> parse_name(const Named<E> (&names)[N], std::string_view name) {
    for (const auto& n : names) {
        if (name == n.name) {
            return n.value;
        }
    }
    return std::nullopt;
}

constexpr Named<Transport> kTransportNames[] = {
    {Transport::sdp, "sdp"}, {Transport::tcp, "tcp"}, {Transport::none, "none"}};

constexpr Named<Provider> kProviderNames[] = {{Provider::soft, "soft"},
                                              {Provider::rdma, "rdma"},
                                              {Provider::automatic, "auto"},
                                              {Provider::automatic, "automatic"}};

constexpr Named<Mechanism> kMechanismNames[] = {{Mechanism::bcopy, "bcopy"},
                                                {Mechanism::zcopy, "zcopy"},
                                                {Mechanism::automatic, "auto"},
                                                {Mechanism::automatic, "automatic"}};

}  // namespace

const char* to_string(Transport t) {
    return name_of(kTransportNames, t, "none");
}

const char* to_string(Provider p) {
    return name_of(kProviderNames, p, "auto");
}

std::optional<Provider> parse_provider(std::string_view name) {
    return parse_name(kProviderNames, name);
}

const char* to_string(Mechanism m) {
    return name_of(kMechanismNames, m, "auto");
}

std::optional<Mechanism> parse_mechanism(std::string_view name) {
    return parse_name(kMechanismNames, name);
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

std::optional<Provider> choose_provider(Provider asked, std::string& why) {
    why.clear();
    if (asked == Provider::soft) {
        return Provider::soft;
    }
    if (rdma_available(&why)) {
        return Provider::rdma;
    }
    if (asked == Provider::automatic) {
        return Provider::soft;  // `why` says why not rdma
    }
    return std::nullopt;
}

std::string rdma_unusable_reason(const std::string& why) {
    return "provider rdma: no usable iWARP RDMA device (" + why + ")";
}

engine::Config engine_config(const StreamOptions& o) {
    engine::Config c;
    c.recv_buf_size = o.recv_buf_size;
    c.recv_buf_count = o.recv_buf_count;
    c.send_buf_size = o.recv_buf_size;
    c.send_queue_limit = o.send_queue_limit;
    c.max_recv_buf_size = o.max_recv_buf_size;
    c.grow_peer_buffers = o.grow_peer_buffers;
    // automatic: zero copy possible, chosen per write by the driver
    // (ChannelOptions::adaptive, engine::MechanismChooser).
    c.bcopy_threshold = o.mechanism == Mechanism::bcopy ? 0 : o.zcopy_threshold;
    c.oob_inline = o.oob_inline;
    return c;
}

io::ChannelOptions channel_options(const StreamOptions& o) {
    io::ChannelOptions c;
    c.handshake_timeout = o.handshake_timeout;
    c.io_timeout = o.io_timeout;
    c.session.crc = o.crc;
    c.session.engine = engine_config(o);
    c.adaptive = o.mechanism == Mechanism::automatic;
    return c;
}

const char* const kRdmaKeepaliveReason =
    "keepalive (14.3) is not available on the rdma provider: its LLP (TCP) lives in the RNIC or "
    "the kernel's siw and rdma_cm offers no keepalive option; use the soft provider";

std::error_code apply_keepalive(int fd, const Keepalive& k) {
    const auto idle = k.idle.count();
    const auto intvl = k.interval.count();
    if (k.enabled &&
        (idle < 1 || idle > 32767 || intvl < 1 || intvl > 32767 || k.count < 1 || k.count > 127)) {
        return std::make_error_code(std::errc::invalid_argument);
    }
    const int on = k.enabled ? 1 : 0;
    if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0) {
        return {errno, std::generic_category()};
    }
    if (!k.enabled) {
        return {};
    }
    const int vals[3] = {static_cast<int>(idle), static_cast<int>(intvl), k.count};
    const int names[3] = {TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT};
    for (int i = 0; i < 3; ++i) {
        if (::setsockopt(fd, IPPROTO_TCP, names[i], &vals[i], sizeof vals[i]) != 0) {
            return {errno, std::generic_category()};
        }
    }
    return {};
}

pmclient::RequestOptions request_options(const StreamOptions& o) {
    pmclient::RequestOptions ro;
    ro.pmsp = o.pmsp;
    ro.deadline = o.resolve_deadline;
    ro.initial_timeout = o.resolve_initial_timeout;
    ro.use_cache = o.use_pm_cache;
    return ro;
}

pmclient::ConnectProcedure::Options procedure_options(const StreamOptions& o) {
    pmclient::ConnectProcedure::Options p;
    p.connect_timeout = o.connect_timeout;
    p.fallback = o.fallback;
    p.handshake = true;
    return p;
}

ConnectInfo procedure_info(const pmclient::ConnectProcedure& proc, const char* provider_tried) {
    ConnectInfo info;
    if (proc.asked()) {
        info.resolution = std::string(pmclient::to_string(proc.resolution().kind));
        info.from_cache = proc.resolution().from_cache;
    }
    info.reason = proc.reason();
    const bool tcp = proc.action().step == pmclient::ConnectProcedure::Step::failed
                         ? proc.failed_at() == pmclient::ConnectProcedure::Step::fallback
                         : !proc.action().sdp;
    info.provider = tcp ? "tcp" : provider_tried;
    return info;
}

pmclient::BlockingResolver& shared_resolver() {
    // Never destroyed: a connect() may still be resolving on another thread
    // when the process exits (the preload library's non-blocking connect()
    // threads run until the process ends), and exit() runs the destructors
    // of function-local statics while such threads are still inside
    // resolve(). A constructor that throws (bad SDP_PMSP) leaves none, and
    // the next call tries again. A child after fork() makes its own and
    // leaves the parent's copy alone: a mutex in it may have been held by
    // a thread of the parent at the time of the fork.
    static std::atomic<pmclient::BlockingResolver*> current{nullptr};
    // (Registered before any resolver is made: no fork can come between.)
    [[maybe_unused]] static const int registered =
        ::pthread_atfork(nullptr, nullptr, [] { current.store(nullptr); });
    pmclient::BlockingResolver* r = current.load(std::memory_order_acquire);
    if (r != nullptr) {
        return *r;
    }
    auto fresh = std::make_unique<pmclient::BlockingResolver>();
    if (current.compare_exchange_strong(r, fresh.get(), std::memory_order_acq_rel)) {
        return *fresh.release();
    }
    return *r;  // another thread's came first
}

}  // namespace detail

namespace {

using detail::channel_options;
using detail::shared_resolver;

std::error_code errno_code(int e) {
    return {e, std::generic_category()};
}

// What a failed connect reports: the provider it tried and why.
ConnectInfo failed_over(std::string provider, std::string reason) {
    ConnectInfo fi;
    fi.provider = std::move(provider);
    fi.reason = std::move(reason);
    return fi;
}

// A connected TCP socket (the fallback, or connect_tcp) made the stream's
// path: blocking, no Nagle, the I/O timeout applied.
void take_tcp(Stream::Impl& im, int fd, const StreamOptions& opts) {
    io::set_nodelay(fd);
    io::set_nonblocking(fd, false);
    detail::set_io_timeout(fd, opts.io_timeout);
    im.tcp.fd = fd;
    im.tcp.io_timeout = opts.io_timeout;
    im.info.used = Transport::tcp;
}

}  // namespace

Stream::Stream() = default;
Stream::~Stream() = default;
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;

std::error_code Stream::fail(std::error_code ec, ConnectInfo info) {
    impl_.reset();
    info.used = Transport::none;
    failed_ = std::move(info);
    return ec;
}

std::error_code Stream::opened(std::unique_ptr<Impl> im) {
    const StreamOptions& o = im->opts;
    if (o.keepalive.enabled && im->other) {
        ConnectInfo fi = im->info;
        fi.reason = detail::kRdmaKeepaliveReason;
        im->other->abort();
        return fail(std::make_error_code(std::errc::operation_not_supported), std::move(fi));
    }
    const int fd = im->on_path([](auto& p) { return p.native_handle(); });
    if (fd >= 0 && o.keepalive.enabled) {
        if (auto ec = detail::apply_keepalive(fd, o.keepalive)) {
            ConnectInfo fi = im->info;
            fi.reason = "keepalive: " + ec.message();
            if (im->sdp) {
                im->sdp->abort();
            }
            return fail(ec, std::move(fi));
        }
    }
    if (im->tcp.fd >= 0 && o.oob_inline) {
        (void)detail::tcp_set_oob_inline(im->tcp.fd, true);
    }
    impl_ = std::move(im);
    return {};
}

std::error_code Stream::connect_tcp(const pm::Endpoint& address, const StreamOptions& opts) {
    impl_.reset();
    failed_ = {};
    auto im = std::make_unique<Impl>();
    im->opts = opts;
    int fd = detail::tcp_socket(address.address.is_v4());
    if (fd < 0) {
        return errno_code(-fd);
    }
    if (int e = detail::connect_with_timeout(fd, address, opts.connect_timeout); e != 0) {
        ::close(fd);
        return errno_code(e);
    }
    take_tcp(*im, fd, opts);
    im->info.peer = address;
    im->info.provider = "tcp";
    return opened(std::move(im));
}

std::error_code Stream::connect_sdp(const pm::Endpoint& sdp_address, const StreamOptions& opts) {
    impl_.reset();
    failed_ = {};
    std::string pwhy;
    const auto prov = detail::choose_provider(opts.iwarp_provider, pwhy);
    if (!prov) {
        return fail(std::make_error_code(std::errc::no_such_device),
                    failed_over("rdma", detail::rdma_unusable_reason(pwhy)));
    }
    if (*prov == Provider::rdma && opts.keepalive.enabled) {
        return fail(std::make_error_code(std::errc::operation_not_supported),
                    failed_over("rdma", detail::kRdmaKeepaliveReason));
    }
    auto im = std::make_unique<Impl>();
    im->opts = opts;
#if SDPPM_HAVE_RDMA
    if (*prov == Provider::rdma) {
        std::error_code ec;
        std::string why;
        im->other = detail::rdma_connect_direct(sdp_address, opts, ec, why);
        if (!im->other) {
            return fail(ec, failed_over("rdma", why));
        }
        im->info.used = Transport::sdp;
        im->info.peer = sdp_address;
        im->info.provider = "rdma";
        return opened(std::move(im));
    }
#endif
    int fd = detail::tcp_socket(sdp_address.address.is_v4());
    if (fd < 0) {
        return errno_code(-fd);
    }
    detail::own_source_port(fd, sdp_address.address.is_v4());
    if (int e = detail::connect_with_timeout(fd, sdp_address, opts.connect_timeout); e != 0) {
        ::close(fd);
        return errno_code(e);
    }
    std::error_code ec;
    std::string why;
    im->sdp =
        io::SoftChannel::handshake(fd, iwarp::MpaRole::initiator, channel_options(opts), ec, &why);
    if (!im->sdp) {
        return fail(ec, failed_over("soft", why));
    }
    im->info.used = Transport::sdp;
    im->info.peer = sdp_address;
    im->info.provider = "soft";
    return opened(std::move(im));
}

namespace {

// Stream::connect's blocking driver of the 7.5.1 procedure: the Port
// Mapper through the shared resolver; SDP over the soft provider (a TCP
// socket, then the MPA/SDP startup) or over rdma (an rdma_cm id; its
// connect includes the startup). `automatic` with an rdma_cm id that cannot
// be bound to CpIPAddr uses the soft provider instead.
class StreamConnect final : public pmclient::BlockingConnect {
  public:
    StreamConnect(pmclient::BlockingResolver& r, const StreamOptions& o,
                  std::unique_ptr<detail::RdmaConnector> rdma_side, bool automatic)
        : BlockingConnect(o.connect_timeout, o.stop),
          rdma(std::move(rdma_side)),
          resolver_(r),
          opts_(o),
          automatic_(automatic) {}

    std::unique_ptr<io::SoftChannel> soft;        // done over soft SDP
    std::unique_ptr<detail::RdmaConnector> rdma;  // null: the soft provider
    std::string note;                             // why automatic did not use rdma

  private:
    BindOutcome bind(const pm::IpAddress& cp) override {
        if (rdma) {
            BindOutcome b;
            if (rdma->bind(cp, local_, b.ec, b.why)) {
                return {};
            }
            if (!automatic_) {
                b.provider_unusable = true;
                return b;
            }
            // The device is not on the route to this peer: soft provider.
            rdma.reset();
            note = b.why + "; used the soft provider";
        }
        return BlockingConnect::bind(cp);
    }
    pmclient::Result resolve(const pm::Endpoint& conventional, const pm::Endpoint& local) override {
        return resolver_.resolve({conventional, local, detail::request_options(opts_)}, stop_);
    }
    void flush_cache(const pm::Endpoint& conventional) override {
        resolver_.resolver().flush_cache(conventional);
    }
    std::error_code connect(const pm::Endpoint& sdp_address, std::string& why) override {
        return rdma ? rdma->connect(sdp_address, why) : BlockingConnect::connect(sdp_address, why);
    }
    std::error_code handshake(std::string& why) override {
        if (rdma) {
            return {};  // part of the rdma connect
        }
        std::error_code ec;
        pmclient::ShutdownOnStop guard(stop_, fd_);  // a stop ends the startup's waits
        soft = io::SoftChannel::handshake(release_fd(), iwarp::MpaRole::initiator,
                                          channel_options(opts_), ec, &why);
        return ec;
    }

    pmclient::BlockingResolver& resolver_;
    StreamOptions opts_;
    bool automatic_;
};

}  // namespace

std::error_code Stream::connect(const pm::Endpoint& conventional, const StreamOptions& opts) {
    impl_.reset();
    failed_ = {};
    pmclient::BlockingResolver* resolver = nullptr;
    try {
        resolver = &shared_resolver();
    } catch (const std::exception&) {
        return std::make_error_code(std::errc::invalid_argument);
    }
    auto po = detail::procedure_options(opts);
    std::unique_ptr<detail::RdmaConnector> rdma;
    std::string pwhy;
    auto prov = detail::choose_provider(opts.iwarp_provider, pwhy);
    if (prov == Provider::rdma && opts.keepalive.enabled) {
        // 14.3: keepalive needs the TCP socket, which rdma keeps to itself.
        if (opts.iwarp_provider != Provider::automatic) {
            return fail(std::make_error_code(std::errc::operation_not_supported),
                        failed_over("rdma", detail::kRdmaKeepaliveReason));
        }
        prov = Provider::soft;
    }
    if (!prov) {
        // rdma asked for and unusable: nothing to ask the Port Mapper for.
        po.unusable = detail::rdma_unusable_reason(pwhy);
    }
#if SDPPM_HAVE_RDMA
    if (prov == Provider::rdma) {
        rdma = detail::make_rdma_connector(opts);
    }
#endif
    pmclient::ConnectProcedure proc(conventional, po);
    StreamConnect io(*resolver, opts, std::move(rdma), opts.iwarp_provider == Provider::automatic);
    const auto& last = io.run(proc);
    ConnectInfo info = detail::procedure_info(proc, io.rdma || !prov ? "rdma" : "soft");
    if (last.step != pmclient::ConnectProcedure::Step::done) {
        return fail(proc.error(), std::move(info));
    }
    auto im = std::make_unique<Impl>();
    im->opts = opts;
    im->info = std::move(info);
    im->info.peer = proc.peer();
    if (!last.sdp) {
        take_tcp(*im, io.release_fd(), opts);
        return opened(std::move(im));
    }
    if (io.rdma) {
        std::error_code ec;
        std::string why;
        im->other = io.rdma->start(ec, why);
        if (!im->other) {
            im->info.reason = why;
            return fail(ec, std::move(im->info));
        }
    } else {
        im->sdp = std::move(io.soft);
        im->info.reason = io.note;
    }
    im->info.used = Transport::sdp;
    return opened(std::move(im));
}

std::size_t Stream::read_some(std::span<std::uint8_t> buf, std::error_code& ec) {
    return read_some(buf, ec, false);
}

namespace {

// recv(2) on the TCP fallback; EAGAIN (SO_RCVTIMEO) is timed_out.
std::size_t tcp_recv(int fd, std::span<std::uint8_t> buf, int flags, std::error_code& ec) {
    while (true) {
        ssize_t n = ::recv(fd, buf.data(), buf.size(), flags);
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

}  // namespace

namespace detail {

bool tcp_at_mark(int fd) {
    int at = 0;
    return ::ioctl(fd, SIOCATMARK, &at) == 0 && at != 0;
}

bool tcp_at_urgent(int fd) {
    std::uint8_t b = 0;
    return tcp_at_mark(fd) && ::recv(fd, &b, 1, MSG_OOB | MSG_PEEK | MSG_DONTWAIT) == 1;
}

bool tcp_urgent_pending(int fd) {
    pollfd p{fd, POLLPRI, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLPRI) != 0;
}

std::error_code tcp_send_oob(int fd, std::uint8_t byte) {
    while (true) {
        if (::send(fd, &byte, 1, MSG_OOB | MSG_NOSIGNAL) == 1) {
            return {};
        }
        if (errno != EINTR) {
            // EAGAIN: SO_SNDTIMEO ran out, or a non-blocking (Asio) socket
            // with a full send buffer: try again later.
            return errno_code(errno == EWOULDBLOCK ? EAGAIN : errno);
        }
    }
}

std::uint8_t tcp_read_oob(int fd, std::error_code& ec) {
    ec.clear();
    std::uint8_t b = 0;
    // recv(MSG_OOB) never blocks: EAGAIN is "not arrived yet", not a timeout.
    while (true) {
        if (::recv(fd, &b, 1, MSG_OOB) == 1) {
            return b;
        }
        if (errno != EINTR) {
            ec = errno_code(errno == EWOULDBLOCK ? EAGAIN : errno);
            return 0;
        }
    }
}

std::error_code tcp_set_oob_inline(int fd, bool on) {
    const int v = on ? 1 : 0;
    if (::setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, sizeof v) != 0) {
        return errno_code(errno);
    }
    return {};
}

}  // namespace detail

using detail::tcp_at_mark;
using detail::tcp_at_urgent;

std::size_t Stream::read_some(std::span<std::uint8_t> buf, std::error_code& ec,
                              bool stop_at_urgent) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    return impl_->on_path([&](auto& p) { return p.read_some(buf, ec, stop_at_urgent, true); });
}

namespace detail {

std::size_t TcpPath::read_some(std::span<std::uint8_t> buf, std::error_code& ec,
                               bool stop_at_urgent, bool /*may_lend*/) {
    if (!stop_at_urgent || buf.empty()) {
        return tcp_recv(fd, buf, 0, ec);
    }
    // The kernel skips an out-of-line urgent byte at the read position
    // unless a signal is pending: wait with poll() and look before reading.
    const auto t = io_timeout;
    const auto deadline = std::chrono::steady_clock::now() + t;
    while (true) {
        if (tcp_at_urgent(fd)) {
            ec = std::make_error_code(std::errc::interrupted);
            return 0;
        }
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n >= 0) {
            return static_cast<std::size_t>(n);  // data, or end of stream
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            ec = errno_code(errno);  // ETIMEDOUT (keepalive): timed_out
            return 0;
        }
        int wait_ms = -1;
        if (t.count() > 0) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                ec = std::make_error_code(std::errc::timed_out);
                return 0;
            }
            wait_ms = static_cast<int>(left.count());
        }
        pollfd p{fd, POLLIN | POLLPRI, 0};
        (void)::poll(&p, 1, wait_ms);
    }
}

}  // namespace detail

std::error_code Stream::send_oob(std::uint8_t byte) {
    if (!impl_) {
        return std::make_error_code(std::errc::not_connected);
    }
    return impl_->on_path([&](auto& p) { return p.send_oob(byte); });
}

namespace detail {

std::error_code TcpPath::send_oob(std::uint8_t byte) {
    auto ec = tcp_send_oob(fd, byte);
    if (ec == std::errc::resource_unavailable_try_again) {
        return std::make_error_code(std::errc::timed_out);  // SO_SNDTIMEO, as write()
    }
    return ec;
}

std::uint8_t TcpPath::read_oob(std::error_code& ec) {
    return tcp_read_oob(fd, ec);
}

bool TcpPath::at_mark() {
    return tcp_at_mark(fd);
}

bool TcpPath::urgent_pending() {
    return tcp_urgent_pending(fd);
}

std::size_t TcpPath::write(std::span<const std::uint8_t> buf, std::error_code& ec, bool wait) {
    std::size_t done = 0;
    while (done < buf.size()) {
        ssize_t n = ::send(fd, buf.data() + done, buf.size() - done,
                           MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
        if (n > 0) {
            done += static_cast<std::size_t>(n);
        } else if (n < 0 && errno != EINTR) {
            if (!wait && done > 0) {
                break;  // an error after some bytes is the next call's
            }
            // Blocking: only SO_SNDTIMEO (io_timeout) ends a write early.
            ec = (errno == EAGAIN || errno == EWOULDBLOCK)
                     ? std::make_error_code(wait ? std::errc::timed_out
                                                 : std::errc::resource_unavailable_try_again)
                     : errno_code(errno);
            break;
        }
    }
    return done;
}

void TcpPath::shutdown_write(std::error_code& ec) {
    if (!wr_shut && ::shutdown(fd, SHUT_WR) != 0) {
        ec = errno_code(errno);
        return;
    }
    wr_shut = true;
}

void TcpPath::close(std::chrono::milliseconds, std::error_code&) {}

void TcpPath::abort() {
    io::reset_connection(fd);
}

}  // namespace detail

std::uint8_t Stream::read_oob(std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    return impl_->on_path([&](auto& p) { return p.read_oob(ec); });
}

bool Stream::at_mark() const {
    return impl_ && impl_->on_path([](auto& p) { return p.at_mark(); });
}

namespace {

// The soft provider's channel of a stream, or nullptr with why not: the
// calls only it offers (try_read, wait_readable).
io::SoftChannel* soft_only(Stream::Impl* im, std::error_code& ec) {
    if (im && im->sdp) {
        return im->sdp.get();
    }
    ec = std::make_error_code(im ? std::errc::operation_not_supported : std::errc::not_connected);
    return nullptr;
}

}  // namespace

std::size_t Stream::try_read(std::span<std::uint8_t> buf, std::error_code& ec,
                             bool stop_at_urgent) {
    auto* ch = soft_only(impl_.get(), ec);
    return ch ? ch->try_read(buf, ec, stop_at_urgent) : 0;
}

bool Stream::wait_readable(std::error_code& ec, bool stop_at_urgent) {
    auto* ch = soft_only(impl_.get(), ec);
    return ch && ch->wait_readable(ec, stop_at_urgent);
}

bool Stream::send_idle() const {
    return impl_ && impl_->on_path([](auto& p) { return p.send_idle(); });
}

bool Stream::urgent_pending() const {
    return impl_ && impl_->on_path([](auto& p) { return p.urgent_pending(); });
}

std::error_code Stream::set_oob_inline(bool on) {
    if (!impl_) {
        return std::make_error_code(std::errc::not_connected);
    }
    impl_->opts.oob_inline = on;
    if (!impl_->sdp && !impl_->other) {
        return detail::tcp_set_oob_inline(impl_->tcp.fd, on);  // SO_OOBINLINE can fail
    }
    impl_->on_path([&](auto& p) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(p)>, detail::TcpPath>) {
            p.set_oob_inline(on);
        }
    });
    return {};
}

std::error_code Stream::set_keepalive(const Keepalive& k) {
    if (!impl_) {
        return std::make_error_code(std::errc::not_connected);
    }
    if (impl_->other) {
        return std::make_error_code(std::errc::operation_not_supported);
    }
    auto ec = detail::apply_keepalive(native_handle(), k);
    if (!ec) {
        impl_->opts.keepalive = k;
    }
    return ec;
}

std::size_t Stream::read(std::span<std::uint8_t> buf, std::error_code& ec) {
    std::size_t got = 0;
    while (got < buf.size()) {
        // Reads exactly: never lent for Write Zcopy (9.3, MSG_WAITALL).
        std::size_t n = 0;
        if (!impl_) {
            ec = std::make_error_code(std::errc::not_connected);
        } else {
            ec.clear();
            n = impl_->on_path(
                [&](auto& p) { return p.read_some(buf.subspan(got), ec, false, false); });
        }
        if (ec || n == 0) {
            break;
        }
        got += n;
    }
    return got;
}

std::size_t Stream::write(std::span<const std::uint8_t> buf, std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    return impl_->on_path([&](auto& p) { return p.write(buf, ec, true); });
}

static_assert(Stream::kTryWriteWhole == io::SoftChannel::kTryWriteWhole);

std::size_t Stream::try_write(std::span<const std::uint8_t> buf, std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    return impl_->on_path([&](auto& p) { return p.write(buf, ec, false); });
}

std::size_t Stream::transact(std::span<const std::uint8_t> request, std::span<std::uint8_t> reply,
                             std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    if (impl_->sdp && !request.empty()) {
        if (auto n = impl_->sdp->transact(request, reply, ec)) {
            return *n;
        }
    }
    write(request, ec);
    return ec ? 0 : read_some(reply, ec);
}

std::error_code Stream::shutdown_write() {
    if (!impl_) {
        return std::make_error_code(std::errc::not_connected);
    }
    std::error_code ec;
    impl_->on_path([&](auto& p) { p.shutdown_write(ec); });
    return ec;
}

std::error_code Stream::close() {
    if (!impl_) {
        return {};
    }
    std::error_code ec;
    impl_->on_path([&](auto& p) { p.close(impl_->opts.linger, ec); });
    impl_.reset();
    return ec;
}

void Stream::abort() {
    if (!impl_) {
        return;
    }
    impl_->on_path([](auto& p) { p.abort(); });
    impl_.reset();
}

bool Stream::is_open() const {
    return impl_ != nullptr;
}

Transport Stream::used() const {
    return impl_ ? impl_->info.used : Transport::none;
}

const ConnectInfo& Stream::info() const {
    return impl_ ? impl_->info : failed_;
}

int Stream::native_handle() const {
    return impl_ ? impl_->on_path([](auto& p) { return p.native_handle(); }) : -1;
}

short Stream::pump() {
    return impl_ ? impl_->on_path([](auto& p) { return p.pump(); }) : short{0};
}

StreamStats Stream::stats() const {
    StreamStats st;
    if (!impl_ || (!impl_->sdp && !impl_->other)) {
        return st;
    }
    const engine::Stats e = impl_->sdp ? impl_->sdp->stats() : impl_->other->stats();
    st.bytes_sent = e.bytes_sent + e.zcopy_bytes_sent;
    st.bytes_received = e.bytes_received;
    st.zcopy_bytes_sent = e.zcopy_bytes_sent;
    st.zcopy_bytes_received = e.zcopy_bytes_received;
    st.send_sm_sent = e.send_sm_sent;
    st.send_sm_received = e.send_sm_received;
    st.write_zcopy_bytes_sent = e.rdma_write_bytes;
    st.write_zcopy_bytes_received = e.sink_bytes_received;
    st.sink_avail_sent = e.sink_avail_sent;
    st.src_avail_cancel_sent = e.src_avail_cancel_sent;
    st.sink_avail_received = e.sink_avail_received;
    st.sink_avail_cancel_sent = e.sink_avail_cancel_sent;
    st.sink_cancel_ack_sent = e.sink_cancel_ack_sent;
    st.transactions_sent = e.transactions_sent;
    st.mode_changes_sent = e.mode_changes_sent;
    st.mode_changes_received = e.mode_changes_received;
    st.susp_comm_received = e.susp_comm_received;
    st.susp_comm_ack_sent = e.susp_comm_ack_sent;
    st.resumes = e.resumes;
    return st;
}

namespace {

std::string describe_impl(const Stream::Impl& im) {
    if (im.other) {
        return "sdp to " + im.info.peer.to_string() + " (" + im.other->describe() + ")";
    }
    if (!im.sdp) {
        return "tcp to " + im.info.peer.to_string();
    }
    return "sdp to " + im.info.peer.to_string() + " (mss " + std::to_string(im.sdp->mss()) +
           ", crc " + (im.sdp->crc() ? "on" : "off") + "; " + im.sdp->describe() + ")";
}

}  // namespace

std::string Stream::describe() const {
    if (!impl_) {
        return "not connected";
    }
    std::string note;
    {
        std::lock_guard lk(impl_->note_mu);
        note = impl_->note;
    }
    return note.empty() ? describe_impl(*impl_) : describe_impl(*impl_) + "; " + note;
}

// --- Socket duplication initiated here (13.1.1, Local Peer) -----------------

namespace {

// Handoff's byte format (version 1), big-endian:
//   "SDPH" version:u8 flags:u8 (bit 0 write_shut, bit 1 peer_accepted) ird:u16 ord:u16
//   recv_buf_size:u32 peer local unread_len:u32 unsent_len:u32 unread unsent
// where an endpoint is family:u8 (4 or 6), 4 or 16 address bytes, port:u16.
// Nothing may follow; the two lengths together are at most kHandoffMaxData.
constexpr std::uint8_t kHandoffMagic[4] = {'S', 'D', 'P', 'H'};
constexpr std::uint8_t kHandoffVersion = 1;
constexpr std::size_t kHandoffMaxData = 64u * 1024 * 1024;
// The largest receive Private Buffer take_over() accepts from a Handoff.
constexpr std::uint32_t kHandoffMaxBuffer = 16u * 1024 * 1024;

void put_endpoint(std::vector<std::uint8_t>& b, const pm::Endpoint& e) {
    const bool v4 = e.address.is_v4();
    b.push_back(v4 ? 4 : 6);
    const auto& a = e.address.bytes();
    b.insert(b.end(), a.begin(), a.begin() + (v4 ? 4 : 16));
    bytes::put16(b, e.port);
}

// put_endpoint's inverse; false past the end of `r` or on a bad family.
bool read_endpoint(bytes::Reader& r, pm::Endpoint& e) {
    std::uint8_t fam = 0;
    std::span<const std::uint8_t> a;
    if (!r.u8(fam) || (fam != 4 && fam != 6) || !r.take(fam == 4 ? 4 : 16, a)) {
        return false;
    }
    if (fam == 4) {
        e.address = pm::IpAddress::v4({a[0], a[1], a[2], a[3]});
    } else {
        std::array<std::uint8_t, 16> b{};
        std::copy(a.begin(), a.end(), b.begin());
        e.address = pm::IpAddress::v6(b);
    }
    return r.u16(e.port);
}

std::error_code errc(std::errc e) {
    return std::make_error_code(e);
}

}  // namespace

std::vector<std::uint8_t> Handoff::encode() const {
    std::vector<std::uint8_t> b;
    b.reserve(64 + unread.size() + unsent.size());
    b.insert(b.end(), std::begin(kHandoffMagic), std::end(kHandoffMagic));
    b.push_back(kHandoffVersion);
    b.push_back(static_cast<std::uint8_t>((write_shut ? 1 : 0) | (peer_accepted ? 2 : 0)));
    bytes::put16(b, ird);
    bytes::put16(b, ord);
    bytes::put32(b, recv_buf_size);
    put_endpoint(b, peer);
    put_endpoint(b, local);
    bytes::put32(b, static_cast<std::uint32_t>(unread.size()));
    bytes::put32(b, static_cast<std::uint32_t>(unsent.size()));
    b.insert(b.end(), unread.begin(), unread.end());
    b.insert(b.end(), unsent.begin(), unsent.end());
    return b;
}

std::optional<Handoff> Handoff::decode(std::span<const std::uint8_t> in) {
    bytes::Reader r{in};
    std::span<const std::uint8_t> magic;
    std::uint8_t version = 0;
    std::uint8_t flags = 0;
    Handoff h;
    std::uint32_t n_unread = 0;
    std::uint32_t n_unsent = 0;
    if (!r.take(4, magic) || !std::equal(magic.begin(), magic.end(), std::begin(kHandoffMagic)) ||
        !r.u8(version) || version != kHandoffVersion || !r.u8(flags) || (flags & ~3u) != 0 ||
        !r.u16(h.ird) || !r.u16(h.ord) || !r.u32(h.recv_buf_size) || !read_endpoint(r, h.peer) ||
        !read_endpoint(r, h.local) || !r.u32(n_unread) || !r.u32(n_unsent)) {
        return std::nullopt;
    }
    const std::uint64_t total = std::uint64_t{n_unread} + n_unsent;
    if (h.ird == 0 || h.ord == 0 || h.peer.port == 0 || total > kHandoffMaxData ||
        r.in.size() != total) {
        return std::nullopt;
    }
    h.write_shut = (flags & 1u) != 0;
    h.peer_accepted = (flags & 2u) != 0;
    h.unread.assign(r.in.begin(), r.in.begin() + n_unread);
    h.unsent.assign(r.in.begin() + n_unread, r.in.end());
    return h;
}

std::optional<Handoff> Stream::hand_off(std::uint16_t new_port, std::error_code& ec) {
    ec.clear();
    if (!impl_) {
        ec = errc(std::errc::not_connected);
        return std::nullopt;
    }
    auto note = [&](std::string why) {
        std::lock_guard lk(impl_->note_mu);
        impl_->note = std::move(why);
    };
    if (!impl_->sdp) {
        note(impl_->other ? "hand_off: socket duplication initiated here (13.1.1) is not "
                            "implemented on the rdma provider; use the soft provider"
                          : "hand_off: a plain TCP stream (no SDP) cannot be duplicated with "
                            "SuspComm (13.1.1); hand the socket itself over instead");
        ec = errc(std::errc::operation_not_supported);
        return std::nullopt;
    }
    auto h = impl_->sdp->hand_off(new_port, ec);
    if (!h) {
        note("hand_off: " + ec.message());
        return std::nullopt;
    }
    note("handed off (13.1.1): SuspComm to port " + std::to_string(new_port) + " acknowledged");
    Handoff out;
    out.peer = impl_->info.peer;
    if (h->addr_len > 0) {
        out.peer = detail::from_sockaddr(h->peer);
        out.local = detail::from_sockaddr(h->local);
    }
    out.unread = std::move(h->carry.unread);
    out.unsent = std::move(h->carry.unsent);
    out.write_shut = h->carry.write_shut;
    out.recv_buf_size = h->carry.recv_buf_size;
    out.ird = h->carry.ird;
    out.ord = h->carry.ord;
    out.peer_accepted = h->peer_accepted;
    return out;
}

std::error_code Stream::take_over(int listen_fd, const Handoff& h, const StreamOptions& opts) {
    if (impl_) {
        return errc(std::errc::already_connected);
    }
    ConnectInfo info;
    info.peer = h.peer;
    info.provider = "soft";
    if (opts.iwarp_provider != Provider::soft) {
        info.reason =
            "take_over: socket duplication (13.1.1) is implemented on the soft provider only";
        return fail(errc(std::errc::operation_not_supported), std::move(info));
    }
    if (h.recv_buf_size < wire::kMinPrivateBufferSize || h.recv_buf_size > kHandoffMaxBuffer ||
        h.ird == 0 || h.ord == 0 || h.unread.size() + h.unsent.size() > kHandoffMaxData) {
        info.reason = "take_over: the Handoff's buffer size, IRD/ORD or data size is out of range";
        return fail(errc(std::errc::invalid_argument), std::move(info));
    }
    const auto deadline = io::Clock::now() + opts.handshake_timeout;
    std::uint64_t strangers = 0;
    auto strangers_note = [&] {
        return strangers == 0 ? std::string()
                              : "; " + std::to_string(strangers) +
                                    " other connection(s) closed (13.1.1 step 1)";
    };
    // Step 1: only the Remote Peer's address and old TCP port may connect;
    // its address only, when it was the Accepting Peer (its old port is its
    // listener's: it reconnects from another). The Hello carries no
    // addresses: the TCP connection's are checked. Of the connections that
    // pass, the first whose bytes are an MPA Request's key is taken; one
    // that stays silent cannot hold the take-over up, one that sends
    // anything else is closed.
    constexpr std::size_t kMaxCandidates = 16;
    const auto key = iwarp::kMpaRequestKey;
    std::vector<int> cands;
    auto drop_all = [&] {
        for (int fd : cands) {
            ::close(fd);
        }
        cands.clear();
    };
    bool partial = false;  // a candidate sent part of the key so far
    // A candidate's first bytes: 1 the whole key, 0 a part of it so far
    // (or nothing), -1 something else or closed.
    auto starts_mpa = [&](int fd) {
        char b[32];
        const ssize_t n = ::recv(fd, b, key.size(), MSG_PEEK | MSG_DONTWAIT);
        if (n < 0) {
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        }
        if (n == 0 ||
            key.compare(0, static_cast<std::size_t>(n), b, static_cast<std::size_t>(n)) != 0) {
            return -1;
        }
        if (static_cast<std::size_t>(n) < key.size()) {
            partial = true;  // bytes of the key so far: look again soon
            return 0;
        }
        return 1;
    };
    int cfd = -1;
    while (cfd < 0) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(deadline - io::Clock::now()).count();
        if (left <= 0) {
            drop_all();
            info.reason = "take_over: no connection from " + h.peer.to_string() + " in time" +
                          strangers_note();
            return fail(errc(std::errc::timed_out), std::move(info));
        }
        std::vector<pollfd> p{{listen_fd, POLLIN, 0}};
        for (int fd : cands) {
            p.push_back({fd, static_cast<short>(partial ? 0 : POLLIN), 0});
        }
        const int r = ::poll(p.data(), p.size(),
                             static_cast<int>(std::min<std::int64_t>(left, partial ? 10 : 60'000)));
        if (r < 0 && errno != EINTR) {
            const int err = errno;
            drop_all();
            info.reason = std::string("take_over: poll: ") + std::strerror(err);
            return fail(errno_code(err), std::move(info));
        }
        partial = false;
        for (std::size_t k = cands.size(); k-- > 0 && cfd < 0;) {
            int v = starts_mpa(cands[k]);
            if (v == 0 && (p[k + 1].revents & (POLLERR | POLLHUP)) != 0) {
                v = -1;  // gone with the key incomplete: not the peer (and no spin)
            }
            if (v == 0) {
                continue;
            }
            const int fd = cands[k];
            cands.erase(cands.begin() + static_cast<std::ptrdiff_t>(k));
            if (v == 1) {
                cfd = fd;
            } else {
                ::close(fd);  // closed, or not an MPA peer
                ++strangers;
            }
        }
        if (cfd >= 0 || r <= 0 || (p[0].revents & POLLIN) == 0) {
            continue;
        }
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK ||
                errno == ECONNABORTED) {
                continue;
            }
            const int err = errno;
            drop_all();
            info.reason = std::string("take_over: accept: ") + std::strerror(err);
            return fail(errno_code(err), std::move(info));
        }
        const pm::Endpoint from = detail::from_sockaddr(ss);
        if (from.address.unmapped() != h.peer.address.unmapped() ||
            (from.port != h.peer.port && !h.peer_accepted)) {
            ::close(fd);
            ++strangers;
            continue;
        }
        if (cands.size() == kMaxCandidates) {
            ::close(cands.front());  // the oldest silent one
            cands.erase(cands.begin());
            ++strangers;
        }
        cands.push_back(fd);
    }
    drop_all();  // silent ones from the peer's address: not the peer
    // Steps 6-7: the Accepting Peer's startup with the old private buffer
    // size, the carried bytes first.
    StreamOptions so = opts;
    so.recv_buf_size = h.recv_buf_size;
    so.handshake_timeout =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::ceil<std::chrono::milliseconds>(deadline - io::Clock::now()));
    io::ChannelOptions co = channel_options(so);
    // Our messages' size is the caller's choice, not the carried receive
    // size (which a peer's ChRcvBuf may have shrunk, 10.6).
    co.session.engine.send_buf_size = detail::engine_config(opts).send_buf_size;
    co.session.engine.ird = h.ird;
    co.session.engine.ord = h.ord;
    engine::Carry carry;
    carry.unread = h.unread;
    carry.unsent = h.unsent;
    carry.write_shut = h.write_shut;
    std::error_code ec;
    std::string why;
    auto im = detail::accept_soft(cfd, so, co, ec, why, &carry);
    if (!im) {
        info.reason = "take_over: " + why + strangers_note();
        return fail(ec ? ec : errc(std::errc::protocol_error), std::move(info));
    }
    im->opts = opts;
    im->info.used = Transport::sdp;
    im->info.peer = h.peer;
    im->info.reason = strangers_note().empty() ? std::string() : strangers_note().substr(2);
    return opened(std::move(im));
}

}  // namespace sdp
