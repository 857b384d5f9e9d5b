// SPDX-License-Identifier: Apache-2.0
// The I/O shells around pmclient::Machine: sockets, the timer, the clock and
// the random AssocHandle values. All protocol decisions live in machine.cpp.
//
// Two shells share one Resolver::Impl (configuration, PmTime cache,
// counters):
//  - Resolver: Asio. One machine and one UDP socket per address family for
//    every asynchronous resolution, guarded by one mutex.
//  - BlockingResolver: the caller's thread. A blocking call takes a Lane (a
//    machine with its own non-blocking UDP sockets) from a pool, sends, waits
//    in ppoll(2) for a reply or the machine's next timer, and gives the lane
//    back. No I/O thread, no future, no lock held while waiting.
#include "pmclient/resolver.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <unordered_map>

#include "asio_endpoint.hpp"
#include "machine.hpp"
#include "net_util.hpp"
#include "pmclient/sockaddr.hpp"
#include "pmsp_config.hpp"
#include "resolver_access.hpp"
#include "udp_socket.hpp"

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
    mc.pmsp_fail_threshold = o.pmsp_fail_threshold;
    mc.pmsp_skip_period = o.pmsp_skip_period;
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

// Bumped in the child after fork(): a RandomPool refills, so parent and
// child never draw the same AssocHandle values.
std::atomic<unsigned> g_fork_generation{0};
std::once_flag g_atfork_once;

// The generation now, counting forks from the first call on.
unsigned fork_generation() {
    std::call_once(g_atfork_once, [] {
        ::pthread_atfork(nullptr, nullptr,
                         [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });
    });
    return g_fork_generation.load(std::memory_order_relaxed);
}

// 64-bit values from getrandom(), fetched kPool at a time (one system call
// per kPool blocking resolutions instead of one each). Each value is handed
// out once and wiped. Not thread-safe: one per lane.
class RandomPool {
  public:
    std::uint64_t next() {
        const unsigned gen = g_fork_generation.load(std::memory_order_relaxed);
        if (pos_ == kPool || gen != gen_) {
            refill(gen);
        }
        const std::uint64_t v = values_[pos_];
        values_[pos_++] = 0;
        return v;
    }

  private:
    static constexpr std::size_t kPool = 32;

    void refill(unsigned gen) {
        (void)fork_generation();  // the atfork handler in place
        auto* p = reinterpret_cast<unsigned char*>(values_.data());
        const std::size_t want = sizeof values_;
        std::size_t got = 0;
        while (got < want) {
            ssize_t n = getrandom(p + got, want - got, 0);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) {
                    continue;
                }
                break;
            }
            got += static_cast<std::size_t>(n);
        }
        if (got < want) {
            for (auto& v : values_) {
                v = random64();
            }
        }
        pos_ = 0;
        gen_ = gen;
    }

    std::array<std::uint64_t, kPool> values_{};
    std::size_t pos_ = kPool;
    unsigned gen_ = 0;
};

Result make_error(Errc e, std::string reason) {
    Result r;
    r.kind = ResultKind::error;
    r.error = e;
    r.reason = std::move(reason);
    return r;
}

// One lane of the blocking fast path: a machine and its own non-blocking UDP
// sockets (one per address family, opened on first use), used by one
// blocking call at a time on the caller's thread. A lane outlives the call:
// late replies to its earlier transactions land in its sockets and are read
// (as duplicates, re-acked where due) by its next call.
class Lane {
  public:
    Lane(const MachineConfig& mc, std::shared_ptr<SharedCache> cache)
        : machine_(mc, std::move(cache)), wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        machine_.set_random([this] { return random_.next(); });
    }
    ~Lane() {
        for (auto& fd : fds_) {
            if (int f = fd.load(); f >= 0) {
                ::close(f);
            }
        }
        if (wake_fd_ >= 0) {
            ::close(wake_fd_);
        }
    }
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    std::uint64_t random() { return random_.next(); }

    // The process forked since this lane was made (fork_generation()):
    // this is a child, the lane's descriptors are copies it may no longer
    // hold (libsdp-preload.so closes the library's descriptors in a
    // child, and the program may have closed or reused the numbers), and
    // a shutdown() would break the parent's lane. The lane lets go of them
    // without touching them: the caller drops it.
    void forget() noexcept {
        for (auto& fd : fds_) {
            fd.store(-1);
        }
        wake_fd_ = -1;
    }

    // Everything the lane counted, for Resolver::counters().
    Counters counters() const {
        Counters c = machine_.counters();
        c.send_errors += send_errors_;
        c.receive_errors += receive_errors_;
        return c;
    }

    // Opens the socket of family f if needed. Returns an error text or "".
    std::string ensure_socket(pm::Family f) {
        auto& fd = fd_ref(f);
        if (fd.load(std::memory_order_relaxed) >= 0) {
            return {};
        }
        std::string error;
        const int s = detail::open_udp_socket(f, error);
        if (s < 0) {
            return error;
        }
        fd.store(s);  // seq_cst: pairs with `closing` (see Impl::close_lanes)
        return {};
    }

    // Wakes a call waiting on this lane's sockets (the resolver is being
    // destroyed): shutdown(SHUT_RD) makes poll report the socket readable and
    // receives return 0, even on an unconnected UDP socket.
    void wake() noexcept {
        for (auto& fd : fds_) {
            if (int f = fd.load(); f >= 0) {
                ::shutdown(f, SHUT_RD);
            }
        }
    }

    // One resolution, start to finish, on the calling thread. Every wait is
    // bounded by the machine's next timer, and the machine's deadline ends
    // the transaction, so the loop ends by the deadline at the latest.
    // `closing` set (the resolver is being destroyed) or a stop requested
    // on `stop` (the caller gave up): the transaction ends at once with
    // Errc::cancelled; a stop wakes the wait through the lane's eventfd.
    Result resolve(const Query& q, std::uint64_t random, const std::atomic<bool>& closing,
                   std::stop_token stop) {
        out_.clear();
        drain_wake();
        std::optional<std::stop_callback<WakeFd>> on_stop;
        if (stop.stop_possible() && wake_fd_ >= 0) {
            on_stop.emplace(stop, WakeFd{wake_fd_});
        }
        const TxnId id = machine_.start(q, Clock::now(), random, out_);
        // The sockets of the PMSPs' families (a list may mix v4 and v6).
        std::array<int, 2> fds{-1, -1};
        std::size_t nfds = 0;
        for (pm::Family f : pmsp_families(q)) {
            if (const int fd = fd_ref(f).load(std::memory_order_relaxed); fd >= 0) {
                fds[nfds++] = fd;
            }
        }
        std::optional<Result> done;
        for (;;) {
            apply(id, done);
            if (done) {
                return std::move(*done);
            }
            if (closing.load(std::memory_order_relaxed) || stop.stop_requested()) {
                machine_.cancel(id, Clock::now(), out_);
                apply(id, done);
                if (done) {
                    return std::move(*done);
                }
                return make_error(Errc::cancelled,
                                  closing.load() ? "resolver destroyed" : "cancelled");
            }
            auto next = machine_.next_wakeup();
            if (!next || nfds == 0) {  // cannot happen: an open transaction has a timer
                machine_.cancel(id, Clock::now(), out_);
                out_.clear();
                return make_error(Errc::internal, "blocking resolution lost its timer");
            }
            auto now = Clock::now();
            if (now >= *next) {
                machine_.on_timer(now, out_);
                continue;
            }
            const unsigned ready = wait_readable(fds, nfds, *next - now);
            if (closing.load(std::memory_order_relaxed) || stop.stop_requested()) {
                continue;  // ended above, before a retransmission falls due
            }
            if (ready == 0) {
                machine_.on_timer(Clock::now(), out_);
                continue;
            }
            // Take what is queued without waiting (at most a batch, so that a
            // flood cannot hold off the timer), stopping once ours completed.
            for (std::size_t k = 0; k < nfds; ++k) {
                if ((ready & (1u << k)) == 0) {
                    continue;
                }
                for (int i = 0; i < 64 && !done && !closing.load(std::memory_order_relaxed); ++i) {
                    pm::Endpoint from;
                    auto bytes = detail::receive_datagram(fds[k], buf_, from, receive_errors_);
                    if (!bytes) {
                        break;
                    }
                    machine_.on_datagram(*bytes, from, Clock::now(), out_);
                    apply(id, done);
                }
            }
        }
    }

  private:
    std::atomic<int>& fd_ref(pm::Family f) { return fds_[f == pm::Family::v4 ? 0 : 1]; }

    // Sends what the machine asked for and picks up our completion; clears
    // the actions.
    void apply(TxnId id, std::optional<Result>& done) {
        for (const auto& s : out_.sends) {
            const int fd = fd_ref(s.to.address.family()).load(std::memory_order_relaxed);
            if (fd < 0) {
                ++send_errors_;
                continue;
            }
            if (!detail::send_datagram(fd, s.to, s.bytes)) {
                ++send_errors_;  // the retransmission timer recovers
            }
        }
        for (auto& c : out_.completions) {
            if (c.id == id) {
                done = std::move(c.result);
            }
        }
        out_.clear();
    }

    // A stop request's wake-up of the lane's wait.
    struct WakeFd {
        int fd;
        void operator()() const noexcept {
            const std::uint64_t one = 1;
            [[maybe_unused]] auto w = ::write(fd, &one, sizeof one);
        }
    };
    void drain_wake() {
        std::uint64_t n;
        if (wake_fd_ >= 0) {
            [[maybe_unused]] auto r = ::read(wake_fd_, &n, sizeof n);
        }
    }

    // Waits until one of fds[0 .. n) is readable, the lane's eventfd is
    // signalled or `d` has passed. Returns a bit mask of the readable ones
    // (bit k: fds[k]); 0 on timeout or wake-up (the caller's loop looks at
    // the stop request first).
    unsigned wait_readable(const std::array<int, 2>& fds, std::size_t n, Duration d) {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
        timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
        std::array<pollfd, 3> p{pollfd{fds[0], POLLIN, 0}, pollfd{fds[1], POLLIN, 0},
                                pollfd{-1, POLLIN, 0}};
        p[n].fd = wake_fd_;  // -1 (ignored by poll) without one
        int r = ::ppoll(p.data(), static_cast<nfds_t>(n + 1), &ts, nullptr);
        if (r < 0 && errno != EINTR) {
            // Not expected (EFAULT/EINVAL/ENOMEM): count it and sleep the
            // wait away so the timers still end the transaction.
            ++receive_errors_;
            ::nanosleep(&ts, nullptr);
            return 0;
        }
        if (r > 0 && p[n].revents != 0) {
            drain_wake();  // a stop (or a late one of an earlier call): never spins
        }
        unsigned mask = 0;
        for (std::size_t k = 0; r > 0 && k < n; ++k) {
            if (p[k].revents != 0) {
                mask |= 1u << k;
            }
        }
        return mask;
    }

    Machine machine_;
    RandomPool random_;
    // v4, v6. Atomic only for wake() from the destroying thread; the lane's
    // own caller is the only writer.
    std::array<std::atomic<int>, 2> fds_{-1, -1};
    int wake_fd_;  // eventfd for stop requests; -1: none (stops seen at the next timer)
    Actions out_;
    std::array<std::uint8_t, 2048> buf_{};
    std::uint64_t send_errors_ = 0;
    std::uint64_t receive_errors_ = 0;
};

}  // namespace

struct Resolver::Impl : std::enable_shared_from_this<Resolver::Impl> {
    // Completions collected under `mu`, invoked (posted) after it is released.
    using Done = std::vector<std::pair<Handler, Result>>;

    struct Sock {
        explicit Sock(asio::io_context& io) : socket(io) {}
        udp::socket socket;
        std::array<std::uint8_t, 2048> buffer{};
        udp::endpoint sender;
        bool open = false;
        bool receiving = false;  // an async receive is pending
    };

    Impl(asio::io_context& io_ctx, ResolverOptions o, MachineConfig mc)
        : io(io_ctx),
          options(std::move(o)),
          lane_config(mc),
          cache(std::make_shared<SharedCache>(mc.cache_capacity)),
          machine(mc, cache),
          v4(io_ctx),
          v6(io_ctx),
          timer(io_ctx) {}

    asio::io_context& io;
    ResolverOptions options;
    std::vector<pm::Endpoint> pmsps;  // configured PMSPs (options/env/file); empty: ApIPAddr
    std::string pmsp_source = "default";
    MachineConfig lane_config;
    std::shared_ptr<SharedCache> cache;  // shared by `machine` and every lane
    // Set by BlockingResolver: starts its I/O thread before the first
    // asynchronous resolution. Written once, before any resolution.
    std::function<void()> before_async;

    mutable std::mutex mu;
    Machine machine;
    Counters io_counters;  // receive/send errors and I/O-level errors
    Sock v4;
    Sock v6;
    asio::steady_timer timer;
    std::optional<TimePoint> timer_at;
    std::uint64_t timer_gen = 0;
    std::unordered_map<TxnId, Handler> handlers;
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
        Done done;
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
    void deliver(Sock& s, std::size_t n, Done& done) {
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
        Done done;
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
    void apply(Actions& out, Done& done) {
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

    static void finish(Done& done) {
        for (auto& [h, r] : done) {
            h(std::move(r));
        }
    }

    // Called with mu held.
    Result error(Errc e, std::string reason) {
        ++io_counters.errors;
        return make_error(e, std::move(reason));
    }

    // Fills q from the request and the configuration. Touches no shared
    // mutable state; an error Result is not counted (the caller counts).
    Result prepare(const ResolveRequest& req, Query& q) const {
        q.conventional = pm::Endpoint{req.conventional.address.unmapped(), req.conventional.port};
        q.cp = pm::Endpoint{req.cp.address.unmapped(), req.cp.port};
        q.options = req.options ? *req.options : options.defaults;
        q.pmsps = pmsp_list(q.options);
        if (q.pmsps.empty()) {
            q.pmsps = pmsp_list(options.defaults);
        }
        if (q.pmsps.empty()) {
            q.pmsps = pmsps;
        }
        if (q.pmsps.empty()) {
            q.pmsps = {pm::Endpoint{q.conventional.address, options.pmsp_port}};
        }
        for (auto& e : q.pmsps) {
            e.address = e.address.unmapped();
        }
        q.pmsp = q.pmsps.front();
        // CpIPAddr unspecified: the address the kernel would use towards ApIPAddr.
        if (q.cp.address.is_unspecified() && !q.conventional.address.is_unspecified() &&
            q.cp.address.family() == q.conventional.address.family()) {
            pm::IpAddress local;
            if (int err = detail::route_source(q.conventional.address, local); err != 0) {
                return make_error(Errc::socket, "cannot choose CpIPAddr towards " +
                                                    q.conventional.address.to_string() + ": " +
                                                    std::strerror(err));
            }
            q.cp.address = local.unmapped();
        }
        Result ok;
        ok.kind = ResultKind::accepted;
        return ok;
    }

    // --- the blocking fast path (BlockingResolver) -------------------------

    std::mutex lanes_mu;  // guards the members below; never held while waiting
    std::vector<std::unique_ptr<Lane>> lanes;
    std::vector<Lane*> free_lanes;        // LIFO: a thread calling again gets its lane back
    std::vector<Counters> lane_counters;  // parallel to `lanes`, published at check-in
    Counters retired;                     // lanes dropped after an exception
    std::size_t lanes_busy = 0;
    unsigned lanes_generation = fork_generation();  // that of every lane in `lanes`
    std::condition_variable lanes_idle;             // lanes_busy dropped to 0 while closing
    std::atomic<bool> closing{false};               // the Resolver is being destroyed
    std::atomic<std::uint64_t> blocking_errors{0};  // early errors of blocking calls

    // Null when busy or closing (say which in *why).
    Lane* checkout(Errc* why) {
        std::lock_guard lock(lanes_mu);
        if (closing.load()) {
            *why = Errc::cancelled;
            return nullptr;
        }
        drop_forked();  // (first: a child does not count its parent's busy lanes)
        if (lanes_busy >= options.max_in_flight) {
            *why = Errc::busy;
            return nullptr;
        }
        Lane* lane = nullptr;
        if (!free_lanes.empty()) {
            lane = free_lanes.back();
            free_lanes.pop_back();
        } else {
            lanes.reserve(lanes.size() + 1);  // no throw between the two pushes
            lane_counters.reserve(lanes.size() + 1);
            lanes.push_back(std::make_unique<Lane>(lane_config, cache));
            lane_counters.emplace_back();
            lane = lanes.back().get();
        }
        ++lanes_busy;
        return lane;
    }

    // In a child after fork() (lanes_mu held): every lane is a copy of the
    // parent's, the busy ones too (their threads are not in the child).
    // All are let go of, their descriptors untouched and their counts
    // kept; the child makes its own.
    void drop_forked() noexcept {
        const unsigned gen = fork_generation();
        if (gen == lanes_generation) {
            return;
        }
        lanes_generation = gen;
        for (auto& lane : lanes) {
            add(retired, lane->counters());
            lane->forget();
        }
        lanes.clear();
        lane_counters.clear();
        free_lanes.clear();
        lanes_busy = 0;
    }

    // Gives the lane back and publishes its counters. A lane whose call threw
    // (`broken`) may hold a half-made transaction: it is closed instead.
    void checkin(Lane* lane, bool broken) noexcept {
        const Counters c = lane->counters();
        std::lock_guard lock(lanes_mu);
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            if (lanes[i].get() != lane) {
                continue;  // (not found: dropped as a fork's copy, not counted busy)
            }
            // Notified under the lock: once close_lanes() sees 0 it destroys us.
            if (--lanes_busy == 0) {
                lanes_idle.notify_all();
            }
            if (broken) {
                add(retired, c);
                lanes.erase(lanes.begin() + static_cast<std::ptrdiff_t>(i));
                lane_counters.erase(lane_counters.begin() + static_cast<std::ptrdiff_t>(i));
            } else {
                lane_counters[i] = c;
                free_lanes.push_back(lane);
            }
            return;
        }
    }

    // Cancels the blocking calls in progress and waits until they have given
    // their lanes back (each wakes at once: its socket is shut down).
    void close_lanes() {
        std::unique_lock lock(lanes_mu);
        closing.store(true);  // seq_cst: pairs with Lane::ensure_socket
        drop_forked();        // a child shuts down none of its parent's lanes
        for (auto& lane : lanes) {
            lane->wake();
        }
        lanes_idle.wait(lock, [this] { return lanes_busy == 0; });
    }

    // A blocking resolution on the calling thread. Nothing of *this is
    // touched after checkin(): the destructor may be waiting for it.
    Result resolve_here(const ResolveRequest& req, std::stop_token stop) {
        Query q;
        Result early = prepare(req, q);
        if (early.kind == ResultKind::error) {
            ++blocking_errors;
            return early;
        }
        Errc why = Errc::none;
        Lane* lane = checkout(&why);
        if (lane == nullptr) {
            ++blocking_errors;
            Result r = make_error(
                why, why == Errc::busy ? "too many resolutions in flight" : "resolver destroyed");
            r.pmsp = q.pmsp;
            return r;
        }
        Result r;
        bool broken = false;
        try {
            std::string sock_err;
            for (pm::Family f : pmsp_families(q)) {
                if (sock_err.empty()) {
                    sock_err = lane->ensure_socket(f);
                }
            }
            if (!sock_err.empty()) {
                ++blocking_errors;
                r = make_error(Errc::socket, sock_err);
                r.pmsp = q.pmsp;
            } else if (closing.load()) {  // seq_cst: see close_lanes()
                ++blocking_errors;
                r = make_error(Errc::cancelled, "resolver destroyed");
                r.pmsp = q.pmsp;
            } else if (stop.stop_requested()) {  // nothing is asked
                ++blocking_errors;
                r = make_error(Errc::cancelled, "cancelled");
                r.pmsp = q.pmsp;
            } else {
                r = lane->resolve(q, lane->random(), closing, std::move(stop));
            }
        } catch (const std::exception& e) {
            broken = true;
            ++blocking_errors;
            r = make_error(Errc::internal, e.what());
        }
        checkin(lane, broken);
        return r;
    }

    // The counters of the blocking calls. Called without mu.
    Counters blocking_counters() {
        Counters c;
        std::lock_guard lock(lanes_mu);
        add(c, retired);
        for (const auto& lc : lane_counters) {
            add(c, lc);
        }
        c.errors += blocking_errors.load(std::memory_order_relaxed);
        return c;
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
    mc.pmsp_fail_threshold = options.pmsp_fail_threshold;
    mc.pmsp_skip_period = options.pmsp_skip_period;
    std::vector<pm::Endpoint> pmsps = pmsp_list(options.defaults);
    std::string source = "default";
    if (!pmsps.empty()) {
        source = "options";
    } else if (options.read_environment) {
        auto setting = load_pmsp_setting();
        if (auto* err = std::get_if<std::string>(&setting)) {
            throw std::invalid_argument("pmclient: " + *err);
        }
        auto& s = std::get<PmspSetting>(setting);
        pmsps = s.endpoints;
        source = s.source;
    }
    impl_ = std::make_shared<Impl>(io, std::move(options), mc);
    impl_->machine.set_random(random64);
    impl_->pmsps = std::move(pmsps);
    impl_->pmsp_source = source;
}

Resolver::~Resolver() {
    // Blocking calls in progress (BlockingResolver) end with Errc::cancelled.
    impl_->close_lanes();
    Impl::Done done;
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

void Resolver::start(ResolveRequest req, Handler handler) {
    Impl::Done done;
    try {
        if (impl_->before_async) {
            impl_->before_async();
        }
        Query q;
        std::lock_guard lock(impl_->mu);
        Result early = impl_->prepare(req, q);
        if (early.kind == ResultKind::error) {
            ++impl_->io_counters.errors;
            done.emplace_back(std::move(handler), std::move(early));
        } else if (impl_->closed) {
            done.emplace_back(std::move(handler),
                              impl_->error(Errc::cancelled, "resolver destroyed"));
        } else {
            std::string sock_err;
            const auto families = pmsp_families(q);
            for (pm::Family f : families) {
                if (sock_err.empty()) {
                    sock_err = impl_->ensure_socket(f);
                }
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
                for (pm::Family f : families) {
                    impl_->receive(f);
                }
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
    return impl_->cache->size();  // locks the cache itself
}

std::size_t Resolver::in_flight() const {
    std::size_t n = 0;
    {
        std::lock_guard lock(impl_->mu);
        n = impl_->machine.in_flight();
    }
    std::lock_guard lock(impl_->lanes_mu);
    return n + impl_->lanes_busy;
}

Counters Resolver::counters() const {
    Counters c;
    {
        std::lock_guard lock(impl_->mu);
        c = impl_->machine.counters();
        c.receive_errors += impl_->io_counters.receive_errors;
        c.send_errors += impl_->io_counters.send_errors;
        c.errors += impl_->io_counters.errors;
    }
    add(c, impl_->blocking_counters());
    return c;
}

std::optional<pm::Endpoint> Resolver::configured_pmsp(std::string* source) const {
    auto list = configured_pmsps(source);
    return list.empty() ? std::nullopt : std::optional<pm::Endpoint>(list.front());
}

std::vector<pm::Endpoint> Resolver::configured_pmsps(std::string* source) const {
    if (source != nullptr) {
        *source = impl_->pmsp_source;
    }
    return impl_->pmsps;
}

namespace detail {

std::shared_ptr<SharedCache> ResolverAccess::cache(const Resolver& r) {
    return r.impl_->cache;
}

MachineConfig ResolverAccess::machine_config(const Resolver& r) {
    return r.impl_->lane_config;
}

Result ResolverAccess::prepare(const Resolver& r, const ResolveRequest& req, Query& q) {
    return r.impl_->prepare(req, q);
}

std::uint64_t ResolverAccess::random() {
    return random64();
}

}  // namespace detail

// ---------------------------------------------------------------------------

// resolve() runs on the caller's thread (Resolver::Impl::resolve_here). The
// io_context and its thread only serve asynchronous resolutions made through
// resolver(); the thread starts with the first of them.
struct BlockingResolver::Impl {
    explicit Impl(ResolverOptions o) : guard(io.get_executor()) {
        resolver.emplace(io, std::move(o));
        resolver->impl_->before_async = [this] {
            std::call_once(started, [this] { thread = std::thread([this] { io.run(); }); });
        };
    }
    ~Impl() {
        // Closing the resolver cancels its socket and timer operations, so
        // run() returns once the posted completions have run. (In a child
        // after fork() the thread is the parent's: glibc marks it ended in
        // the child, so the join returns at once; Asio does not take a
        // socket it closes out of the shared epoll set.)
        resolver.reset();
        guard.reset();
        if (thread.joinable()) {
            thread.join();
        }
    }
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> guard;
    std::optional<Resolver> resolver;
    std::once_flag started;
    std::thread thread;
};

BlockingResolver::BlockingResolver(ResolverOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

BlockingResolver::~BlockingResolver() = default;

Result BlockingResolver::resolve(const ResolveRequest& request) {
    return resolve(request, {});
}

Result BlockingResolver::resolve(const ResolveRequest& request, std::stop_token stop) {
    try {
        return impl_->resolver->impl_->resolve_here(request, std::move(stop));
    } catch (const std::exception& e) {  // from prepare(): nothing was started
        return make_error(Errc::internal, e.what());
    }
}

Resolver& BlockingResolver::resolver() {
    return *impl_->resolver;
}

Result resolve(const ResolveRequest& request, const ResolverOptions& options) {
    BlockingResolver r(options);
    return r.resolve(request);
}

}  // namespace pmclient
