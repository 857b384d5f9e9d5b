// The Asio shell around pmclient::Machine: sockets, the timer, the clock and
// the random AssocHandle values. All protocol decisions live in machine.cpp.
#include "pmclient/resolver.hpp"

#include <sys/random.h>

#include <array>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "asio_endpoint.hpp"
#include "pmclient/machine.hpp"
#include "pmclient/pmsp_config.hpp"

namespace pmclient {

namespace asio = boost::asio;
using asio::ip::udp;

std::string validate(const ResolverOptions& o) {
    if (auto why = validate(o.defaults); !why.empty()) {
        return why;
    }
    if (o.pmsp_port == 0) {
        return "pmsp_port must not be 0";
    }
    MachineConfig mc;
    mc.cache_capacity = o.cache_capacity;
    mc.completed_capacity = o.completed_capacity;
    mc.max_in_flight = o.max_in_flight;
    mc.completed_linger = o.completed_linger;
    return validate(mc);
}

namespace {

std::uint64_t random64() {
    std::uint64_t v = 0;
    auto* p = reinterpret_cast<unsigned char*>(&v);
    std::size_t got = 0;
    while (got < sizeof v) {
        ssize_t n = getrandom(p + got, sizeof v - got, 0);
        if (n <= 0) {
            break;
        }
        got += static_cast<std::size_t>(n);
    }
    if (got < sizeof v) {  // getrandom() unavailable: fall back, still unpredictable
        std::random_device rd;
        v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }
    return v;
}

}  // namespace

struct Resolver::Impl : std::enable_shared_from_this<Resolver::Impl> {
    struct Sock {
        explicit Sock(asio::io_context& io) : socket(io) {}
        udp::socket socket;
        std::array<std::uint8_t, 2048> buffer{};
        udp::endpoint sender;
        bool open = false;
        bool receiving = false;  // an async receive is pending
    };

    Impl(asio::io_context& io_ctx, ResolverOptions o, MachineConfig mc)
        : io(io_ctx), options(std::move(o)), machine(mc), v4(io_ctx), v6(io_ctx), timer(io_ctx) {}

    asio::io_context& io;
    ResolverOptions options;
    std::optional<pm::Endpoint> pmsp;  // configured PMSP (options/env/file)
    std::string pmsp_source = "default";

    mutable std::mutex mu;
    Machine machine;
    Counters io_counters;  // receive/send errors and I/O-level errors
    Sock v4;
    Sock v6;
    asio::steady_timer timer;
    std::optional<TimePoint> timer_at;
    std::uint64_t timer_gen = 0;
    std::unordered_map<TxnId, std::unique_ptr<Handler>> handlers;
    bool closed = false;

    Sock& sock_for(pm::Family f) { return f == pm::Family::v4 ? v4 : v6; }

    // Opens the socket of family f if needed. Called with mu held.
    std::string ensure_socket(pm::Family f) {
        Sock& s = sock_for(f);
        if (s.open) {
            return {};
        }
        boost::system::error_code ec;
        udp proto = f == pm::Family::v4 ? udp::v4() : udp::v6();
        s.socket.open(proto, ec);
        if (!ec && f == pm::Family::v6) {
            s.socket.set_option(asio::ip::v6_only(true), ec);
        }
        if (!ec) {
            s.socket.bind(udp::endpoint(proto, 0), ec);
        }
        if (!ec) {
            s.socket.non_blocking(true, ec);
        }
        if (ec) {
            boost::system::error_code ignored;
            s.socket.close(ignored);
            return "cannot open UDP socket: " + ec.message();
        }
        s.open = true;
        return {};
    }

    // A receive is pending only while resolutions are in flight, so that an
    // idle resolver never keeps the caller's io_context::run() from
    // returning. Datagrams arriving in between wait in the socket buffer.
    // Called with mu held.
    void receive(pm::Family f) {
        Sock& s = sock_for(f);
        if (s.receiving || !s.open || machine.in_flight() == 0) {
            return;
        }
        s.receiving = true;
        s.socket.async_receive_from(
            asio::buffer(s.buffer), s.sender,
            [self = shared_from_this(), f](const boost::system::error_code& ec, std::size_t n) {
                self->on_receive(f, ec, n);
            });
    }

    void on_receive(pm::Family f, const boost::system::error_code& ec, std::size_t n) {
        std::vector<std::pair<std::unique_ptr<Handler>, Result>> done;
        {
            std::lock_guard lock(mu);
            Sock& s = sock_for(f);
            s.receiving = false;
            if (closed || !s.open || ec == asio::error::operation_aborted) {
                return;
            }
            if (ec) {
                ++io_counters.receive_errors;
            } else {
                deliver(s, n, done);
                // Late replies to what just completed (duplicates to re-ack,
                // 7.5.2) usually arrive together: take what is already
                // queued, without waiting, before the receive is dropped.
                for (int i = 0; i < 64 && machine.in_flight() == 0; ++i) {
                    boost::system::error_code rec;
                    std::size_t m = s.socket.receive_from(asio::buffer(s.buffer), s.sender, 0, rec);
                    if (rec) {
                        break;
                    }
                    deliver(s, m, done);
                }
            }
            receive(f);
        }
        finish(done);
    }

    // Feeds one received datagram to the machine. Called with mu held.
    void deliver(Sock& s, std::size_t n,
                 std::vector<std::pair<std::unique_ptr<Handler>, Result>>& done) {
        Actions out;
        machine.on_datagram(std::span<const std::uint8_t>(s.buffer.data(), n),
                            detail::to_pm(s.sender), Clock::now(), out);
        apply(out, done);
    }

    void arm_timer() {
        auto next = machine.next_wakeup();
        if (!next || (timer_at && *timer_at == *next)) {
            return;
        }
        timer_at = next;
        std::uint64_t gen = ++timer_gen;
        timer.expires_at(*next);
        timer.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
            self->on_timer(gen, ec);
        });
    }

    void on_timer(std::uint64_t gen, const boost::system::error_code& ec) {
        std::vector<std::pair<std::unique_ptr<Handler>, Result>> done;
        {
            std::lock_guard lock(mu);
            if (closed || ec == asio::error::operation_aborted || gen != timer_gen) {
                return;
            }
            timer_at.reset();
            Actions out;
            machine.on_timer(Clock::now(), out);
            apply(out, done);
        }
        finish(done);
    }

    // Sends, collects completions, re-arms the timer. Called with mu held.
    void apply(Actions& out, std::vector<std::pair<std::unique_ptr<Handler>, Result>>& done) {
        for (const auto& s : out.sends) {
            Sock& sock = sock_for(s.to.address.family());
            boost::system::error_code ec;
            if (!sock.open) {
                ++io_counters.send_errors;
                continue;
            }
            sock.socket.send_to(asio::buffer(s.bytes), detail::to_asio(s.to), 0, ec);
            if (ec) {
                ++io_counters.send_errors;  // the retransmission timer recovers
            }
        }
        for (auto& c : out.completions) {
            auto it = handlers.find(c.id);
            if (it != handlers.end()) {
                done.emplace_back(std::move(it->second), std::move(c.result));
                handlers.erase(it);
            }
        }
        if (!closed) {
            arm_timer();
        }
    }

    static void finish(std::vector<std::pair<std::unique_ptr<Handler>, Result>>& done) {
        for (auto& [h, r] : done) {
            h->complete(std::move(r));
        }
    }

    Result error(Errc e, std::string reason) {
        Result r;
        r.kind = ResultKind::error;
        r.error = e;
        r.reason = std::move(reason);
        ++io_counters.errors;
        return r;
    }

    Result prepare(ResolveRequest& req, Query& q) {
        q.conventional = pm::Endpoint{req.conventional.address.unmapped(), req.conventional.port};
        q.cp = pm::Endpoint{req.cp.address.unmapped(), req.cp.port};
        q.options = req.options ? *req.options : options.defaults;
        if (q.options.pmsp) {
            q.pmsp = *q.options.pmsp;
        } else if (options.defaults.pmsp) {
            q.pmsp = *options.defaults.pmsp;
        } else if (pmsp) {
            q.pmsp = *pmsp;
        } else {
            q.pmsp = pm::Endpoint{q.conventional.address, options.pmsp_port};
        }
        q.pmsp.address = q.pmsp.address.unmapped();
        // CpIPAddr unspecified: the address the kernel would use towards ApIPAddr.
        if (q.cp.address.is_unspecified() && !q.conventional.address.is_unspecified() &&
            q.cp.address.family() == q.conventional.address.family()) {
            udp::socket probe(io);
            boost::system::error_code ec;
            auto target = detail::to_asio(pm::Endpoint{q.conventional.address, 9});
            probe.open(target.protocol(), ec);
            if (!ec) {
                probe.connect(target, ec);
            }
            udp::endpoint local;
            if (!ec) {
                local = probe.local_endpoint(ec);
            }
            if (ec) {
                return error(Errc::socket, "cannot choose CpIPAddr towards " +
                                               q.conventional.address.to_string() + ": " +
                                               ec.message());
            }
            q.cp.address = detail::to_pm(local).address.unmapped();
        }
        Result ok;
        ok.kind = ResultKind::accepted;
        return ok;
    }
};

Resolver::Resolver(asio::io_context& io, ResolverOptions options) : io_(io) {
    if (auto why = validate(options); !why.empty()) {
        throw std::invalid_argument("pmclient: " + why);
    }
    MachineConfig mc;
    mc.cache_capacity = options.cache_capacity;
    mc.strict_source = options.strict_source;
    mc.completed_linger = options.completed_linger;
    mc.completed_capacity = options.completed_capacity;
    mc.max_in_flight = options.max_in_flight;
    std::optional<pm::Endpoint> pmsp;
    std::string source = "default";
    if (options.defaults.pmsp) {
        pmsp = options.defaults.pmsp;
        source = "options";
    } else if (options.read_environment) {
        auto setting = load_pmsp_setting();
        if (auto* err = std::get_if<std::string>(&setting)) {
            throw std::invalid_argument("pmclient: " + *err);
        }
        auto& s = std::get<PmspSetting>(setting);
        pmsp = s.endpoint;
        source = s.source;
    }
    impl_ = std::make_shared<Impl>(io, std::move(options), mc);
    impl_->pmsp = pmsp;
    impl_->pmsp_source = source;
}

Resolver::~Resolver() {
    std::vector<std::pair<std::unique_ptr<Handler>, Result>> done;
    {
        std::lock_guard lock(impl_->mu);
        Actions out;
        impl_->machine.cancel_all(Clock::now(), out);
        impl_->apply(out, done);
        impl_->closed = true;
        boost::system::error_code ignored;
        impl_->timer.cancel();
        impl_->v4.socket.close(ignored);
        impl_->v6.socket.close(ignored);
        impl_->v4.open = false;
        impl_->v6.open = false;
        for (auto& [id, h] : impl_->handlers) {  // none expected; be safe
            done.emplace_back(std::move(h), impl_->error(Errc::cancelled, "resolver destroyed"));
        }
        impl_->handlers.clear();
    }
    Impl::finish(done);
}

void Resolver::start(ResolveRequest req, std::unique_ptr<Handler> handler) {
    std::vector<std::pair<std::unique_ptr<Handler>, Result>> done;
    try {
        Query q;
        std::lock_guard lock(impl_->mu);
        Result early = impl_->prepare(req, q);
        if (early.kind == ResultKind::error) {
            done.emplace_back(std::move(handler), std::move(early));
        } else if (impl_->closed) {
            done.emplace_back(std::move(handler),
                              impl_->error(Errc::cancelled, "resolver destroyed"));
        } else {
            std::string sock_err;
            if (!q.pmsp.address.is_unspecified()) {
                sock_err = impl_->ensure_socket(q.pmsp.address.family());
            }
            if (!sock_err.empty()) {
                Result r = impl_->error(Errc::socket, sock_err);
                r.pmsp = q.pmsp;
                done.emplace_back(std::move(handler), std::move(r));
            } else {
                Actions out;
                TxnId id = impl_->machine.start(q, Clock::now(), random64(), out);
                impl_->handlers.emplace(id, std::move(handler));
                impl_->apply(out, done);
                impl_->receive(q.pmsp.address.family());
            }
        }
    } catch (const std::exception& e) {
        if (handler) {
            Result r;
            r.kind = ResultKind::error;
            r.error = Errc::internal;
            r.reason = e.what();
            done.emplace_back(std::move(handler), std::move(r));
        }
    }
    Impl::finish(done);
}

void Resolver::flush_cache() {
    std::lock_guard lock(impl_->mu);
    impl_->machine.flush_cache();
}

std::size_t Resolver::flush_cache(const pm::Endpoint& conventional) {
    std::lock_guard lock(impl_->mu);
    return impl_->machine.flush_cache(
        pm::Endpoint{conventional.address.unmapped(), conventional.port});
}

std::size_t Resolver::cache_size() const {
    std::lock_guard lock(impl_->mu);
    return impl_->machine.cache().size();
}

std::size_t Resolver::in_flight() const {
    std::lock_guard lock(impl_->mu);
    return impl_->machine.in_flight();
}

Counters Resolver::counters() const {
    std::lock_guard lock(impl_->mu);
    Counters c = impl_->machine.counters();
    c.receive_errors += impl_->io_counters.receive_errors;
    c.send_errors += impl_->io_counters.send_errors;
    c.errors += impl_->io_counters.errors;
    return c;
}

std::optional<pm::Endpoint> Resolver::configured_pmsp(std::string* source) const {
    if (source != nullptr) {
        *source = impl_->pmsp_source;
    }
    return impl_->pmsp;
}

// ---------------------------------------------------------------------------

struct BlockingResolver::Impl {
    explicit Impl(ResolverOptions o) : guard(io.get_executor()) {
        resolver.emplace(io, std::move(o));
        thread = std::thread([this] { io.run(); });
    }
    ~Impl() {
        // Closing the resolver cancels its socket and timer operations, so
        // run() returns once the posted completions have run.
        resolver.reset();
        guard.reset();
        thread.join();
    }
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> guard;
    std::optional<Resolver> resolver;
    std::thread thread;
};

BlockingResolver::BlockingResolver(ResolverOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

BlockingResolver::~BlockingResolver() = default;

Result BlockingResolver::resolve(const ResolveRequest& request) {
    auto fut = impl_->resolver->async_resolve(request, asio::use_future);
    return fut.get();
}

Resolver& BlockingResolver::resolver() {
    return *impl_->resolver;
}

Result resolve(const ResolveRequest& request, const ResolverOptions& options) {
    BlockingResolver r(options);
    return r.resolve(request);
}

}  // namespace pmclient
