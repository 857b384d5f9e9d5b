// SPDX-License-Identifier: Apache-2.0
#include "sdp/async_stream.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "internal.hpp"
#include "pmclient/resolver.hpp"
#include "pmclient/sockaddr.hpp"
#include "sdp/io/asio_channel.hpp"

namespace sdp {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace detail {

boost::system::error_code to_boost(const std::error_code& ec) {
    if (!ec) {
        return {};
    }
    // errno values: the system category, so asio::error::connection_reset,
    // operation_aborted (ECANCELED), ... compare equal.
    return {ec.value(), boost::system::system_category()};
}

asio::ip::address to_asio(const pm::IpAddress& a) {
    const auto& b = a.bytes();
    if (a.is_v4()) {
        return asio::ip::address_v4(asio::ip::address_v4::bytes_type{b[0], b[1], b[2], b[3]});
    }
    asio::ip::address_v6::bytes_type v6{};
    for (std::size_t i = 0; i < 16; ++i) {
        v6[i] = b[i];
    }
    return asio::ip::address_v6(v6);
}

tcp::endpoint to_asio(const pm::Endpoint& e) {
    return {to_asio(e.address), e.port};
}

pm::Endpoint to_pm(const tcp::endpoint& e) {
    sockaddr_storage ss{};
    std::memcpy(&ss, e.data(), std::min<std::size_t>(e.size(), sizeof ss));
    return from_sockaddr(ss);
}

}  // namespace detail

namespace {

using detail::to_boost;

// One pmclient::Resolver per io_context, shared by its AsyncStreams (and
// its PmTime cache). Created with the service, dropped at shutdown so its
// pending resolutions complete (cancelled) while the scheduler still runs.
class ResolverService final : public asio::execution_context::service {
  public:
    static inline asio::execution_context::id id;
    explicit ResolverService(asio::io_context& io)
        : asio::execution_context::service(io),
          resolver(std::make_unique<pmclient::Resolver>(io)) {}
    pmclient::Resolver* get() { return resolver.get(); }

  private:
    void shutdown() override { resolver.reset(); }
    std::unique_ptr<pmclient::Resolver> resolver;
};

}  // namespace

struct ConnectOp;

struct AsyncStream::Impl {
    explicit Impl(asio::io_context& ctx) : io(ctx) {}
    asio::io_context& io;
    StreamOptions opts;
    ConnectInfo info;
    std::shared_ptr<io::AsioChannel> sdp;  // SDP path
    std::unique_ptr<tcp::socket> plain;    // TCP fallback path
    std::shared_ptr<ConnectOp> connecting;

    bool open() const { return (sdp && sdp->is_open()) || (plain && plain->is_open()); }
    int fd() const {
        if (sdp) {
            return sdp->native_handle();
        }
        return plain && plain->is_open() ? plain->native_handle() : -1;
    }
    // StreamOptions applied to a connected stream's socket.
    std::error_code configure() {
        if (opts.keepalive.enabled) {
            if (auto ec = detail::apply_keepalive(fd(), opts.keepalive)) {
                return ec;
            }
        }
        if (plain && opts.oob_inline) {
            return detail::tcp_set_oob_inline(fd(), true);
        }
        return {};
    }
    void abort() {
        if (sdp) {
            sdp->abort();
        }
        if (plain && plain->is_open()) {
            boost::system::error_code e;
            plain->set_option(asio::socket_base::linger(true, 0), e);
            plain->close(e);
        }
    }
};

// The connect operation. pm_path is an Asio driver of the 7.5.1 procedure
// (pmclient/src/connect_core, the same decisions as Stream::connect); the
// SDP Address alone (sdp_only) and plain TCP (tcp_only) are direct.
struct ConnectOp : std::enable_shared_from_this<ConnectOp> {
    enum Kind { pm_path = 0, sdp_only = 1, tcp_only = 2 };
    using Proc = pmclient::ConnectProcedure;
    using Step = Proc::Step;

    ConnectOp(std::shared_ptr<AsyncStream::Impl> s, pmclient::Resolver* r)
        : im(std::move(s)), resolver(r), sock(im->io), timer(im->io) {}

    std::shared_ptr<AsyncStream::Impl> im;
    pmclient::Resolver* resolver;
    detail::OpHandler handler;
    Kind kind = pm_path;
    pm::Endpoint target;  // conventional (pm_path) or the address to connect to
    std::optional<Proc> proc;
    tcp::socket sock;
    asio::steady_timer timer;
    std::shared_ptr<io::AsioChannel> channel;
    unsigned connect_gen = 0;
    bool done = false;

    void finish(std::error_code ec) {
        if (done) {
            return;
        }
        auto keep = shared_from_this();
        done = true;
        timer.cancel();
        if (ec) {
            boost::system::error_code e;
            sock.close(e);
            if (channel) {
                channel->abort();
            }
        }
        if (im->connecting.get() == this) {
            im->connecting.reset();
        }
        handler(to_boost(ec));
    }

    void cancel() {
        if (done) {
            return;
        }
        if (channel) {
            channel->cancel();  // its handshake callback finishes us
        }
        finish(std::make_error_code(std::errc::operation_canceled));
    }

    // A socket of the family of `addr`, bound to addr:0 when `bind`.
    std::error_code fresh_socket(const pm::IpAddress& addr, bool bind) {
        boost::system::error_code e;
        sock.close(e);
        sock = tcp::socket(im->io);
        sock.open(addr.is_v4() ? tcp::v4() : tcp::v6(), e);
        if (!e && bind) {
            sock.bind(tcp::endpoint(detail::to_asio(addr), 0), e);
        }
        return e ? std::error_code(e.value(), std::generic_category()) : std::error_code{};
    }

    // TCP connect bounded by connect_timeout; cb(error).
    template <typename F>
    void tcp_connect(const pm::Endpoint& to, F cb) {
        auto self = shared_from_this();
        auto timed_out = std::make_shared<bool>(false);
        const unsigned gen = ++connect_gen;
        timer.expires_after(im->opts.connect_timeout);
        timer.async_wait([this, self, timed_out, gen](const boost::system::error_code& ec) {
            // (gen: a late expiry must not cancel the next attempt's connect)
            if (!ec && !done && gen == connect_gen) {
                *timed_out = true;
                boost::system::error_code e;
                sock.cancel(e);
            }
        });
        sock.async_connect(detail::to_asio(to), [this, self, timed_out, cb = std::move(cb)](
                                                    const boost::system::error_code& ec) mutable {
            timer.cancel();
            if (done) {
                return;
            }
            int err = 0;
            if (ec && *timed_out) {
                err = ETIMEDOUT;
            } else if (ec) {
                err = ec == asio::error::operation_aborted ? ECANCELED : ec.value();
            }
            cb(std::error_code(err, std::generic_category()));
        });
    }

    // The MPA/SDP startup on `sock`; cb(error, why).
    template <typename F>
    void handshake(F cb) {
        channel = std::make_shared<io::AsioChannel>(std::move(sock), iwarp::MpaRole::initiator,
                                                    detail::channel_options(im->opts));
        sock = tcp::socket(im->io);
        channel->handshake([this, self = shared_from_this(), cb = std::move(cb)](
                               std::error_code ec, const std::string& why) mutable {
            if (done) {
                return;
            }
            if (ec) {
                channel.reset();
            }
            cb(ec, why);
        });
    }

    void connected_sdp(const pm::Endpoint& peer) {
        im->sdp = std::move(channel);
        im->info.used = Transport::sdp;
        im->info.peer = peer;
        configured();
    }

    void configured() {
        if (auto ec = im->configure()) {
            im->info.reason = "socket options: " + ec.message();
            im->abort();
            finish(ec);
            return;
        }
        finish({});
    }

    void connected_tcp(const pm::Endpoint& peer) {
        boost::system::error_code e;
        sock.set_option(tcp::no_delay(true), e);
        im->plain = std::make_unique<tcp::socket>(std::move(sock));
        sock = tcp::socket(im->io);
        im->info.used = Transport::tcp;
        im->info.peer = peer;
        configured();
    }

    void start() {
        if (kind == pm_path) {
            auto po = detail::procedure_options(im->opts);
            if (im->opts.iwarp_provider == Provider::rdma) {
                // This API drives the soft provider only.
                po.unusable = detail::rdma_unusable_reason(
                    "the async API carries SDP over the soft provider only");
            }
            proc.emplace(target, po);
            step(proc->start());
            return;
        }
        if (im->opts.connect_timeout.count() <= 0 || target.port == 0 ||
            target.address.is_unspecified()) {
            im->info.reason = "the address needs a specified IP address and a non-zero port";
            finish(std::make_error_code(std::errc::invalid_argument));
            return;
        }
        if (auto ec = fresh_socket(target.address, false)) {
            finish(ec);
            return;
        }
        if (kind != tcp_only) {
            detail::own_source_port(sock.native_handle(), target.address.is_v4());
        }
        tcp_connect(target, [this](std::error_code ec) {
            if (ec) {
                im->info.reason = "connect to " + target.to_string() + ": " + ec.message();
                finish(ec);
            } else if (kind == tcp_only) {
                im->info.provider = "tcp";
                connected_tcp(target);
            } else {
                im->info.provider = "soft";
                handshake([this](std::error_code hec, const std::string& why) {
                    if (hec) {
                        im->info.reason = why;
                        finish(hec);
                    } else {
                        connected_sdp(target);
                    }
                });
            }
        });
    }

    // Performs one action of the procedure; its result gives the next.
    void step(const Proc::Action& a) {
        if (done) {
            return;
        }
        if (a.flush_cache && resolver) {
            resolver->flush_cache(proc->conventional());
        }
        switch (a.step) {
            case Step::route: {
                pm::IpAddress cp;
                const int err = pm::route_source(a.address, cp);
                step(proc->on_route(err, cp));
                return;
            }
            case Step::bind: {
                // Section 7.5.1: a socket bound to CpIPAddr:0 gives CpPort.
                if (auto ec = fresh_socket(a.address, true)) {
                    step(proc->on_bind_failed(ec, {}));
                    return;
                }
                boost::system::error_code e;
                const auto local = sock.local_endpoint(e);
                if (e) {
                    step(proc->on_bind_failed({e.value(), std::generic_category()}, {}));
                    return;
                }
                step(proc->on_bound(detail::to_pm(local)));
                return;
            }
            case Step::resolve:
                if (!resolver) {
                    try {
                        resolver = asio::use_service<ResolverService>(im->io).get();
                    } catch (const std::exception& ex) {
                        im->info.reason = ex.what();
                    }
                    if (!resolver) {
                        finish(std::make_error_code(std::errc::invalid_argument));
                        return;
                    }
                }
                resolver->async_resolve(pmclient::ResolveRequest{a.endpoint, a.local,
                                                                 detail::request_options(im->opts)},
                                        [self = shared_from_this()](pmclient::Result r) {
                                            if (!self->done) {
                                                self->step(self->proc->on_resolved(r));
                                            }
                                        });
                return;
            case Step::connect:
                tcp_connect(a.endpoint,
                            [this](std::error_code ec) { step(proc->on_connected(ec)); });
                return;
            case Step::handshake:
                handshake([this](std::error_code ec, const std::string& why) {
                    step(proc->on_handshake(ec, why));
                });
                return;
            case Step::fallback:
                if (auto ec = fresh_socket(a.bind_cp ? a.address : a.endpoint.address, a.bind_cp)) {
                    step(proc->on_fallback(ec, "cannot bind TCP socket: " + ec.message()));
                    return;
                }
                tcp_connect(a.endpoint,
                            [this](std::error_code ec) { step(proc->on_fallback(ec)); });
                return;
            case Step::done:
            case Step::failed: {
                const pm::Endpoint peer = proc->peer();
                im->info = detail::procedure_info(
                    *proc, im->opts.iwarp_provider == Provider::rdma ? "rdma" : "soft");
                if (a.step == Step::failed) {
                    finish(proc->error());
                } else if (a.sdp) {
                    connected_sdp(peer);
                } else {
                    connected_tcp(peer);
                }
                return;
            }
        }
    }
};

AsyncStream::AsyncStream(asio::io_context& io) : io_(&io), impl_(std::make_shared<Impl>(io)) {}

AsyncStream::AsyncStream(asio::io_context& io, pmclient::Resolver& resolver)
    : io_(&io), resolver_(&resolver), impl_(std::make_shared<Impl>(io)) {}

AsyncStream::~AsyncStream() {
    if (impl_) {
        if (impl_->connecting) {
            impl_->connecting->cancel();
        }
        impl_->abort();
    }
}

AsyncStream::AsyncStream(AsyncStream&& o) noexcept
    : io_(o.io_), resolver_(o.resolver_), impl_(std::move(o.impl_)) {}

AsyncStream& AsyncStream::operator=(AsyncStream&& o) noexcept {
    if (this != &o) {
        if (impl_) {
            if (impl_->connecting) {
                impl_->connecting->cancel();
            }
            impl_->abort();
        }
        io_ = o.io_;
        resolver_ = o.resolver_;
        impl_ = std::move(o.impl_);
    }
    return *this;
}

void AsyncStream::start_connect(int kind, const pm::Endpoint& ep, const StreamOptions& opts,
                                detail::OpHandler h) {
    if (impl_) {
        if (impl_->connecting) {
            impl_->connecting->cancel();
        }
        impl_->abort();
    }
    impl_ = std::make_shared<Impl>(*io_);  // a fresh connection (and info)
    impl_->opts = opts;
    auto op = std::make_shared<ConnectOp>(impl_, resolver_);
    op->handler = std::move(h);
    op->kind = static_cast<ConnectOp::Kind>(kind);
    op->target = pm::Endpoint{ep.address.unmapped(), ep.port};
    impl_->connecting = op;
    op->start();
}

void AsyncStream::start_read(asio::mutable_buffer b, detail::IoHandler h) {
    auto hp = std::make_shared<detail::IoHandler>(std::move(h));
    if (!impl_ || !impl_->open()) {
        (*hp)(asio::error::bad_descriptor, 0);
        return;
    }
    if (impl_->plain) {
        impl_->plain->async_read_some(
            b, [hp](const boost::system::error_code& ec, std::size_t n) { (*hp)(ec, n); });
        return;
    }
    impl_->sdp->async_read_some(
        std::span<std::uint8_t>(static_cast<std::uint8_t*>(b.data()), b.size()),
        [hp, empty = b.size() == 0](std::error_code ec, std::size_t n) {
            if (!ec && n == 0 && !empty) {
                (*hp)(asio::error::eof, 0);  // the peer's DisConn
            } else {
                (*hp)(to_boost(ec), n);
            }
        });
}

void AsyncStream::start_write(asio::const_buffer b, detail::IoHandler h) {
    auto hp = std::make_shared<detail::IoHandler>(std::move(h));
    if (!impl_ || !impl_->open()) {
        (*hp)(asio::error::bad_descriptor, 0);
        return;
    }
    if (impl_->plain) {
        impl_->plain->async_write_some(
            b, [hp](const boost::system::error_code& ec, std::size_t n) { (*hp)(ec, n); });
        return;
    }
    impl_->sdp->async_write_some(
        std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(b.data()), b.size()),
        [hp](std::error_code ec, std::size_t n) { (*hp)(to_boost(ec), n); });
}

void AsyncStream::start_shutdown(detail::OpHandler h) {
    boost::system::error_code ec;
    if (!impl_ || !impl_->open()) {
        ec = asio::error::not_connected;
    } else if (impl_->plain) {
        impl_->plain->shutdown(tcp::socket::shutdown_send, ec);
    } else {
        ec = to_boost(impl_->sdp->shutdown_write());
    }
    h(ec);
}

void AsyncStream::start_close(detail::OpHandler h) {
    if (!impl_ || !impl_->open()) {
        h(boost::system::error_code{});
        return;
    }
    if (impl_->plain) {
        boost::system::error_code ec;
        impl_->plain->shutdown(tcp::socket::shutdown_send, ec);
        impl_->plain->close(ec);
        h(ec);
        return;
    }
    auto hp = std::make_shared<detail::OpHandler>(std::move(h));
    impl_->sdp->async_close(impl_->opts.linger, [hp](std::error_code ec) { (*hp)(to_boost(ec)); });
}

void AsyncStream::cancel() {
    if (!impl_) {
        return;
    }
    if (impl_->connecting) {
        impl_->connecting->cancel();
    }
    if (impl_->sdp) {
        impl_->sdp->cancel();
    }
    if (impl_->plain && impl_->plain->is_open()) {
        boost::system::error_code e;
        impl_->plain->cancel(e);
    }
}

void AsyncStream::close() {
    if (!impl_) {
        return;
    }
    if (impl_->connecting) {
        impl_->connecting->cancel();
    }
    impl_->abort();
}

std::error_code AsyncStream::send_oob(std::uint8_t byte) {
    if (!impl_ || !impl_->open()) {
        return std::make_error_code(std::errc::not_connected);
    }
    return impl_->sdp ? impl_->sdp->send_oob(byte) : detail::tcp_send_oob(impl_->fd(), byte);
}

std::uint8_t AsyncStream::read_oob(std::error_code& ec) {
    if (!impl_ || !impl_->open()) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    return impl_->sdp ? impl_->sdp->read_oob(ec) : detail::tcp_read_oob(impl_->fd(), ec);
}

bool AsyncStream::at_mark() const {
    if (!impl_ || !impl_->open()) {
        return false;
    }
    return impl_->sdp ? impl_->sdp->at_mark() : detail::tcp_at_mark(impl_->fd());
}

bool AsyncStream::urgent_pending() const {
    if (!impl_ || !impl_->open()) {
        return false;
    }
    return impl_->sdp ? impl_->sdp->urgent_pending() : detail::tcp_urgent_pending(impl_->fd());
}

std::error_code AsyncStream::set_oob_inline(bool on) {
    if (!impl_ || !impl_->open()) {
        return std::make_error_code(std::errc::not_connected);
    }
    impl_->opts.oob_inline = on;
    if (impl_->sdp) {
        impl_->sdp->set_oob_inline(on);
        return {};
    }
    return detail::tcp_set_oob_inline(impl_->fd(), on);
}

std::error_code AsyncStream::set_keepalive(const Keepalive& k) {
    if (!impl_ || !impl_->open()) {
        return std::make_error_code(std::errc::not_connected);
    }
    auto ec = detail::apply_keepalive(impl_->fd(), k);
    if (!ec) {
        impl_->opts.keepalive = k;
    }
    return ec;
}

int AsyncStream::native_handle() const {
    return impl_ && impl_->open() ? impl_->fd() : -1;
}

bool AsyncStream::is_open() const {
    return impl_ && impl_->open();
}

Transport AsyncStream::used() const {
    return impl_ ? impl_->info.used : Transport::none;
}

const ConnectInfo& AsyncStream::info() const {
    static const ConnectInfo none;
    return impl_ ? impl_->info : none;
}

std::string AsyncStream::describe() const {
    if (!impl_ || !impl_->open()) {
        return "not connected";
    }
    if (impl_->plain) {
        return "tcp to " + impl_->info.peer.to_string();
    }
    return "sdp to " + impl_->info.peer.to_string() + " (mss " + std::to_string(impl_->sdp->mss()) +
           ", crc " + (impl_->sdp->crc() ? "on" : "off") + "; " + impl_->sdp->describe() + ")";
}

// ---------------------------------------------------------------------------
// AsyncAcceptor

struct AsyncAcceptor::Impl : std::enable_shared_from_this<AsyncAcceptor::Impl> {
    explicit Impl(asio::io_context& ctx) : io(ctx), acc(ctx), retry(ctx) {}
    asio::io_context& io;
    tcp::acceptor acc;
    asio::steady_timer retry;  // after EMFILE and the like
    AcceptorOptions opts;
    pm::Endpoint local;
    bool registered = false;
    std::string reg_name;
    std::string reg_error;
    std::string last_error;
    AcceptorStats st;
    bool closed = true;
    boost::system::error_code failed;  // the listener itself failed
    std::vector<std::shared_ptr<io::AsioChannel>> pending;
    std::deque<std::pair<std::shared_ptr<io::AsioChannel>, pm::Endpoint>> ready;
    std::deque<AcceptHandler> waiters;

    void accept_next() {
        if (closed || failed) {
            return;
        }
        acc.async_accept(
            [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket s) {
                self->on_accept(ec, std::move(s));
            });
    }

    void on_accept(const boost::system::error_code& ec, tcp::socket s) {
        if (closed) {
            return;
        }
        if (ec) {
            if (ec == asio::error::connection_aborted || ec == asio::error::interrupted ||
                ec == asio::error::would_block || ec == asio::error::try_again) {
                accept_next();
            } else if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                       ec == asio::error::no_memory || ec.value() == ENFILE) {
                // Out of resources: try again a little later, without spinning.
                retry.expires_after(std::chrono::milliseconds(100));
                retry.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
                    if (!e) {
                        self->accept_next();
                    }
                });
            } else {
                failed = ec;
                dispatch();
            }
            return;
        }
        ++st.tcp_accepted;
        if (pending.size() + ready.size() >=
            std::max<std::size_t>(opts.max_pending_handshakes, 1)) {
            ++st.over_limit;
            boost::system::error_code e;
            s.close(e);
            accept_next();
            return;
        }
        boost::system::error_code e;
        const pm::Endpoint peer = detail::to_pm(s.remote_endpoint(e));
        auto ch = std::make_shared<io::AsioChannel>(std::move(s), iwarp::MpaRole::responder,
                                                    detail::channel_options(opts.stream));
        pending.push_back(ch);
        st.pending = pending.size();
        ch->handshake(
            [self = shared_from_this(), ch, peer](std::error_code hec, const std::string& why) {
                self->on_handshake(ch, peer, hec, why);
            });
        accept_next();
    }

    void on_handshake(const std::shared_ptr<io::AsioChannel>& ch, const pm::Endpoint& peer,
                      std::error_code ec, const std::string& why) {
        std::erase(pending, ch);
        st.pending = pending.size();
        if (closed) {
            ch->abort();
            return;
        }
        if (ec) {
            ++st.handshake_failures;
            last_error = peer.to_string() + ": " + ec.message() + ": " + why;
            if (opts.on_handshake_error) {
                opts.on_handshake_error(last_error);
            }
            return;
        }
        ++st.established;
        ready.emplace_back(ch, peer);
        st.ready = ready.size();
        dispatch();
    }

    void dispatch() {
        while (!waiters.empty() && !ready.empty()) {
            auto h = std::move(waiters.front());
            waiters.pop_front();
            auto [ch, peer] = std::move(ready.front());
            ready.pop_front();
            st.ready = ready.size();
            AsyncStream s(io);
            s.impl_->opts = opts.stream;
            s.impl_->sdp = std::move(ch);
            s.impl_->info.used = Transport::sdp;
            s.impl_->info.peer = peer;
            if (auto ec = s.impl_->configure()) {
                s.impl_->abort();
                h(to_boost(ec), AsyncStream(io));
                continue;
            }
            h(boost::system::error_code{}, std::move(s));
        }
        if (failed) {
            while (!waiters.empty()) {
                auto h = std::move(waiters.front());
                waiters.pop_front();
                h(failed, AsyncStream(io));
            }
        }
    }

    void cancel_waiters() {
        while (!waiters.empty()) {
            auto h = std::move(waiters.front());
            waiters.pop_front();
            h(asio::error::operation_aborted, AsyncStream(io));
        }
    }
};

AsyncAcceptor::AsyncAcceptor(asio::io_context& io) : io_(&io), impl_(std::make_shared<Impl>(io)) {}

AsyncAcceptor::~AsyncAcceptor() {
    close();
}

std::error_code AsyncAcceptor::open(const pm::Endpoint& local, const AcceptorOptions& opts) {
    close();
    impl_ = std::make_shared<Impl>(*io_);
    auto& im = *impl_;
    im.opts = opts;
    boost::system::error_code e;
    if (opts.on_demand) {
        // On-demand ports are the blocking sdp::Acceptor's (its service
        // thread owns the listeners and the daemon's channel).
        return std::make_error_code(std::errc::operation_not_supported);
    }
    const auto ep = detail::to_asio(local);
    im.acc.open(ep.protocol(), e);
    if (!e) {
        im.acc.set_option(tcp::acceptor::reuse_address(true), e);
    }
    if (!e) {
        im.acc.bind(ep, e);
    }
    if (!e) {
        im.acc.listen(opts.backlog, e);
    }
    if (e) {
        boost::system::error_code ignored;
        im.acc.close(ignored);
        return {e.value(), std::generic_category()};
    }
    im.local = detail::to_pm(im.acc.local_endpoint(e));
    if (opts.control_socket) {
        if (auto ec = detail::register_service(opts, im.local, im.reg_name, im.reg_error)) {
            boost::system::error_code ignored;
            im.acc.close(ignored);
            return ec;
        }
        im.registered = true;
    }
    im.closed = false;
    im.accept_next();
    return {};
}

void AsyncAcceptor::start_accept(AcceptHandler h) {
    if (!impl_ || impl_->closed) {
        h(asio::error::bad_descriptor, AsyncStream(*io_));
        return;
    }
    impl_->waiters.push_back(std::move(h));
    impl_->dispatch();
}

void AsyncAcceptor::cancel() {
    if (impl_) {
        impl_->cancel_waiters();
    }
}

std::error_code AsyncAcceptor::close() {
    if (!impl_ || impl_->closed) {
        return {};
    }
    auto& im = *impl_;
    std::error_code ec;
    if (im.registered && im.opts.control_socket) {
        ec = detail::unregister_service(im.opts, im.reg_name, im.reg_error);
    }
    im.registered = false;
    im.closed = true;
    boost::system::error_code ignored;
    im.acc.close(ignored);
    im.retry.cancel();
    auto pending = std::move(im.pending);
    im.pending.clear();
    for (auto& ch : pending) {
        ch->abort();
    }
    for (auto& r : im.ready) {
        r.first->abort();
    }
    im.ready.clear();
    im.st.pending = 0;
    im.st.ready = 0;
    im.cancel_waiters();
    return ec;
}

bool AsyncAcceptor::is_open() const {
    return impl_ && !impl_->closed;
}

pm::Endpoint AsyncAcceptor::local_endpoint() const {
    return impl_ ? impl_->local : pm::Endpoint{};
}

bool AsyncAcceptor::registered() const {
    return impl_ && impl_->registered;
}

const std::string& AsyncAcceptor::registration_error() const {
    static const std::string none;
    return impl_ ? impl_->reg_error : none;
}

std::string AsyncAcceptor::last_error() const {
    return impl_ ? impl_->last_error : std::string{};
}

AcceptorStats AsyncAcceptor::stats() const {
    return impl_ ? impl_->st : AcceptorStats{};
}

}  // namespace sdp
