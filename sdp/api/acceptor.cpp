// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "internal.hpp"
#include "pmctl/client.hpp"
#include "sdp/stream.hpp"

#if SDPPM_HAVE_RDMA
#include "rdma_channel.hpp"
#endif

namespace sdp {

namespace detail {

void set_io_timeout(int fd, std::chrono::milliseconds t) {
    if (t.count() <= 0) {
        return;
    }
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int tcp_socket(bool v4) {
    int fd = ::socket(v4 ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd >= 0 ? fd : -errno;
}

int connect_with_timeout(int fd, const pm::Endpoint& to, std::chrono::milliseconds timeout) {
    return pm::connect_nonblocking(fd, to, timeout);
}

}  // namespace detail

namespace detail {

namespace {

// The error of a registration call: the daemon's result codes
// (docs/control-protocol.md, "Results"), or connection_refused when the
// control socket could not be used.
std::error_code control_error(const pmctl::Answer& a, const std::string& what,
                              std::string& reg_error) {
    if (!a.ok()) {
        reg_error = "sdp-pmd control socket: " + a.error().message;
        return std::make_error_code(std::errc::connection_refused);
    }
    const auto& r = a.reply();
    reg_error =
        "sdp-pmd refused the " + what + " (result " + std::to_string(r.result) + "): " + r.text;
    switch (r.result) {
        case 2:
            return std::make_error_code(std::errc::operation_not_supported);
        case 4:
            return std::make_error_code(std::errc::address_in_use);
        case 5:
            return std::make_error_code(std::errc::permission_denied);
        default:
            return std::make_error_code(std::errc::invalid_argument);
    }
}

}  // namespace

std::error_code register_service(const AcceptorOptions& opts, const pm::Endpoint& local,
                                 std::string& reg_name, std::string& reg_error) {
    const bool wildcard = local.address == pm::IpAddress::any(local.address.family());
    const std::string sdp_addr =
        opts.sdp_address.value_or(wildcard ? "*:" + std::to_string(local.port) : local.to_string());
    reg_name = opts.service_name.empty() ? "sdp-" + std::to_string(local.port) : opts.service_name;
    if (!opts.conventional) {
        reg_error = "registration needs a conventional address";
        return std::make_error_code(std::errc::invalid_argument);
    }
    nlohmann::json args = {{"name", reg_name},
                           {"conventional", *opts.conventional},
                           {"sdp", nlohmann::json::array({sdp_addr})},
                           {"owner", "sdp::acceptor pid " + std::to_string(::getpid())}};
    if (opts.pm_time) {
        args["pm_time"] = *opts.pm_time;
    }
    if (opts.registration_follows_process) {
        args["pid"] = "peer";
    }
    if (opts.health_check) {
        args["health"] = {{"check", *opts.health_check}};
    }
    auto answer = pmctl::call(*opts.control_socket, "register", args, opts.control_timeout);
    if (answer.ok() && answer.reply().result == 1 && args.contains("pid")) {
        // A daemon that cannot tie it to this process (an older one without
        // "pid", no pidfd support, another PID namespace): register without
        // the tie, as before, and say so; close() still unregisters.
        const std::string why = answer.reply().text;
        if (why.rfind("pid", 0) == 0 || why.find("\"pid\"") != std::string::npos) {
            args.erase("pid");
            answer = pmctl::call(*opts.control_socket, "register", args, opts.control_timeout);
            if (answer.ok() && answer.reply().result == 0) {
                reg_error = "registered without following this process: " + why;
                return {};
            }
        }
    }
    if (answer.ok() && answer.reply().result == 0) {
        return {};
    }
    return control_error(answer, "registration", reg_error);
}

std::error_code unregister_service(const AcceptorOptions& opts, const std::string& reg_name,
                                   std::string& reg_error) {
    auto answer =
        pmctl::call(*opts.control_socket, "unregister", {{"name", reg_name}}, opts.control_timeout);
    if (answer.ok() && answer.reply().result == 0) {
        return {};
    }
    control_error(answer, "unregistration", reg_error);
    reg_error = "unregister: " + reg_error;
    return std::make_error_code(std::errc::io_error);
}

}  // namespace detail

// The state of an acceptor (pimpl): the listener, the options, the
// registration and the startups in progress.
struct Acceptor::Impl {
    struct Startups;
    struct RdmaHolder;

    void reap();
    std::error_code open_rdma(const pm::Endpoint& local);

    int fd_ = -1;
    Provider listener_provider_ = Provider::soft;
    std::unique_ptr<RdmaHolder> rdma_;
    pm::Endpoint local_;
    AcceptorOptions opts_;
    bool registered_ = false;
    std::string reg_name_;
    std::string reg_error_;
    std::string open_error_;
    std::unique_ptr<Startups> st_;
};

// Concurrent MPA/SDP startups of the blocking acceptor: one thread per
// accepted TCP connection runs SoftChannel::handshake (bounded by
// handshake_timeout); finished streams queue in `ready`. Each job keeps a
// dup() of its socket so close() can shut the socket down (the startup then
// ends at once) without racing the job's own close of its descriptor.
struct Acceptor::Impl::Startups {
    struct Job {
        std::thread th;
        int ctl = -1;
        bool done = false;
    };
    mutable std::mutex mu;
    int wake_fd = -1;  // eventfd: a job finished
    std::list<Job> jobs;
    std::deque<std::unique_ptr<Stream::Impl>> ready;
    std::deque<std::string> failures;  // not yet reported (bounded)
    std::string last_error;
    AcceptorStats st;
    bool stopping = false;

    Startups() { wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
    ~Startups() { stop(); }
    Startups(const Startups&) = delete;
    Startups& operator=(const Startups&) = delete;

    // Ends every running startup and drops the queued streams.
    void stop() {
        std::list<Job> all;
        std::deque<std::unique_ptr<Stream::Impl>> drop;
        {
            std::lock_guard lk(mu);
            stopping = true;
            for (auto& j : jobs) {
                if (!j.done && j.ctl >= 0) {
                    ::shutdown(j.ctl, SHUT_RDWR);
                }
            }
            all.splice(all.end(), jobs);
            drop.swap(ready);
            st.ready = 0;
        }
        for (auto& j : all) {
            if (j.th.joinable()) {
                j.th.join();
            }
            if (j.ctl >= 0) {
                ::close(j.ctl);
            }
        }
        drop.clear();  // aborts them
        if (wake_fd >= 0) {
            ::close(wake_fd);
            wake_fd = -1;
        }
    }

    void note_failure(std::string msg) {  // mu held
        ++st.handshake_failures;
        last_error = msg;
        if (failures.size() < 256) {
            failures.push_back(std::move(msg));
        }
    }

    void start(int cfd, const pm::Endpoint& peer, const AcceptorOptions& opts) {
        std::lock_guard lk(mu);
        ++st.tcp_accepted;
        if (stopping ||
            st.pending + ready.size() >= std::max<std::size_t>(opts.max_pending_handshakes, 1)) {
            ++st.over_limit;
            ::close(cfd);
            return;
        }
        const int ctl = ::fcntl(cfd, F_DUPFD_CLOEXEC, 0);
        auto it = jobs.insert(jobs.end(), Job{});
        it->ctl = ctl;
        ++st.pending;
        const StreamOptions so = opts.stream;
        try {
            it->th = std::thread([this, it, cfd, peer, so] { run(it, cfd, peer, so); });
        } catch (const std::system_error& e) {
            --st.pending;
            it->done = true;
            note_failure(peer.to_string() + ": cannot start a handshake thread: " + e.what());
            ::close(cfd);
        }
    }

    void run(std::list<Job>::iterator it, int cfd, pm::Endpoint peer, StreamOptions so) {
        // Nothing may escape this thread (std::terminate): a failure to
        // allocate or to start the channel's helper thread is a failed
        // startup like any other.
        std::unique_ptr<Stream::Impl> im;
        std::error_code ec;
        std::string why;
        try {
            im = std::make_unique<Stream::Impl>();
            im->opts = so;
        } catch (const std::exception& e) {
            ::close(cfd);  // not handed to handshake() yet
            ec = std::make_error_code(std::errc::not_enough_memory);
            why = e.what();
        }
        if (im) {
            try {
                // Owns cfd from here on, also when it throws.
                im->sdp = io::SoftChannel::handshake(cfd, iwarp::MpaRole::responder,
                                                     detail::channel_options(so), ec, &why);
            } catch (const std::exception& e) {
                im.reset();
                ec = std::make_error_code(std::errc::resource_unavailable_try_again);
                why = e.what();
            }
        }
        if (im && im->sdp) {
            im->info.provider = "soft";
        }
        finish(it, peer, std::move(im), ec, why);
    }

#if SDPPM_HAVE_RDMA
    // The rdma provider: `req` was taken from the rdma_cm listener; the
    // startup (Hello check, rdma_accept, HelloAck) runs on its own thread,
    // bounded by the handshake timeout.
    void start_rdma(std::unique_ptr<rdma::Connection> req, const pm::Endpoint& peer,
                    const AcceptorOptions& opts) {
        std::lock_guard lk(mu);
        ++st.tcp_accepted;
        if (stopping ||
            st.pending + ready.size() >= std::max<std::size_t>(opts.max_pending_handshakes, 1)) {
            ++st.over_limit;
            (void)req->reject();
            return;
        }
        auto it = jobs.insert(jobs.end(), Job{});
        ++st.pending;
        const StreamOptions so = opts.stream;
        auto shared = std::make_shared<std::unique_ptr<rdma::Connection>>(std::move(req));
        try {
            it->th = std::thread([this, it, shared, peer, so] {
                std::unique_ptr<Stream::Impl> im;
                std::error_code ec;
                std::string why;
                try {
                    im = std::make_unique<Stream::Impl>();
                    im->opts = so;
                    im->other = detail::rdma_accept(std::move(*shared), so, ec, why);
                    if (!im->other) {
                        im.reset();
                    } else {
                        im->info.provider = "rdma";
                    }
                } catch (const std::exception& e) {
                    im.reset();
                    ec = std::make_error_code(std::errc::resource_unavailable_try_again);
                    why = e.what();
                }
                finish(it, peer, std::move(im), ec, why);
            });
        } catch (const std::system_error& e) {
            --st.pending;
            it->done = true;
            note_failure(peer.to_string() + ": cannot start a handshake thread: " + e.what());
            if (*shared) {
                (void)(*shared)->reject();
            }
        }
    }
#endif

    // A startup ended: `im` holds the stream, or null with ec / why.
    void finish(std::list<Job>::iterator it, const pm::Endpoint& peer,
                std::unique_ptr<Stream::Impl> im, const std::error_code& ec,
                const std::string& why) {
        std::unique_ptr<Stream::Impl> drop;
        {
            std::lock_guard lk(mu);
            --st.pending;
            it->done = true;
            // The duplicate was only there to interrupt the startup; keeping
            // it would hold the connection open after the stream closes it.
            if (it->ctl >= 0) {
                ::close(it->ctl);
                it->ctl = -1;
            }
            if (!im || (!im->sdp && !im->other)) {
                note_failure(peer.to_string() + ": " + ec.message() + ": " + why);
            } else if (stopping) {
                drop = std::move(im);
            } else {
                ++st.established;
                im->info.used = Transport::sdp;
                im->info.peer = peer;
                ready.push_back(std::move(im));
                st.ready = ready.size();
            }
            std::uint64_t one = 1;
            (void)!::write(wake_fd, &one, sizeof one);
        }
    }
};

// Holds the rdma listener (detail::RdmaListener) when the provider is rdma;
// empty without SDPPM_HAVE_RDMA.
struct Acceptor::Impl::RdmaHolder {
#if SDPPM_HAVE_RDMA
    std::unique_ptr<detail::RdmaListener> l;
#endif
};

Acceptor::Acceptor() : impl_(std::make_unique<Impl>()) {}
Acceptor::Acceptor(Acceptor&&) noexcept = default;
Acceptor& Acceptor::operator=(Acceptor&& other) noexcept {
    if (this != &other) {
        close();
        impl_ = std::move(other.impl_);
    }
    return *this;
}

Acceptor::~Acceptor() {
    if (impl_) {
        close();
    }
}

// The state, or that of a closed acceptor when moved from.
const Acceptor::Impl& Acceptor::state() const {
    static const Impl closed;
    return impl_ ? *impl_ : closed;
}

Provider Acceptor::listener_provider() const {
    return state().listener_provider_;
}

pm::Endpoint Acceptor::local_endpoint() const {
    return state().local_;
}

bool Acceptor::registered() const {
    return state().registered_;
}

const std::string& Acceptor::registration_error() const {
    return state().reg_error_;
}

const std::string& Acceptor::open_error() const {
    return state().open_error_;
}

bool Acceptor::is_open() const {
    return impl_ && (impl_->fd_ >= 0 || impl_->rdma_ != nullptr);
}

int Acceptor::native_handle() const {
#if SDPPM_HAVE_RDMA
    if (state().rdma_) {
        return state().rdma_->l->fd();
    }
#endif
    return state().fd_;
}

std::error_code Acceptor::open(const pm::Endpoint& local, const AcceptorOptions& opts) {
    if (!impl_) {
        impl_ = std::make_unique<Impl>();  // moved from: open afresh
    }
    close();
    impl_->opts_ = opts;
    impl_->reg_error_.clear();
    impl_->open_error_.clear();
    std::string pwhy;
    const auto prov = detail::choose_provider(opts.stream.iwarp_provider, pwhy);
    if (!prov) {
        impl_->open_error_ = detail::rdma_unusable_reason(pwhy);
        return std::make_error_code(std::errc::no_such_device);
    }
    if (*prov == Provider::rdma) {
        if (auto ec = impl_->open_rdma(local)) {
            return ec;
        }
    } else {
        int fd = detail::tcp_socket(local.address.is_v4());
        if (fd < 0) {
            return {-fd, std::generic_category()};
        }
        int on = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        sockaddr_storage ss;
        socklen_t len = detail::to_sockaddr(local, ss);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
            ::listen(fd, opts.backlog) != 0 || !io::set_nonblocking(fd, true)) {
            int e = errno;
            ::close(fd);
            return {e, std::generic_category()};
        }
        sockaddr_storage got;
        socklen_t glen = sizeof got;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &glen);
        impl_->local_ = detail::from_sockaddr(got);
        impl_->fd_ = fd;
        impl_->listener_provider_ = Provider::soft;
    }
    impl_->st_ = std::make_unique<Impl::Startups>();
    if (impl_->st_->wake_fd < 0) {
        int e = errno;
        close();
        return {e, std::generic_category()};
    }
    if (opts.control_socket) {
        if (auto ec = detail::register_service(opts, impl_->local_, impl_->reg_name_,
                                               impl_->reg_error_)) {
            close();
            return ec;
        }
        impl_->registered_ = true;
    }
    return {};
}

std::error_code Acceptor::Impl::open_rdma(const pm::Endpoint& local) {
#if SDPPM_HAVE_RDMA
    std::error_code ec;
    std::string why;
    auto l = detail::RdmaListener::listen(local, opts_.backlog, ec, why);
    if (!l) {
        open_error_ = why;
        return ec ? ec : std::make_error_code(std::errc::io_error);
    }
    local_ = pm::Endpoint{local.address, l->port()};
    rdma_ = std::make_unique<RdmaHolder>();
    rdma_->l = std::move(l);
    listener_provider_ = Provider::rdma;
    return {};
#else
    (void)local;
    open_error_ = detail::rdma_unusable_reason("not built");
    return std::make_error_code(std::errc::no_such_device);
#endif
}

void Acceptor::Impl::reap() {
    std::list<Startups::Job> done;
    std::deque<std::string> failures;
    {
        std::lock_guard lk(st_->mu);
        for (auto it = st_->jobs.begin(); it != st_->jobs.end();) {
            auto next = std::next(it);
            if (it->done) {
                done.splice(done.end(), st_->jobs, it);
            }
            it = next;
        }
        failures.swap(st_->failures);
    }
    for (auto& j : done) {
        if (j.th.joinable()) {
            j.th.join();
        }
        if (j.ctl >= 0) {
            ::close(j.ctl);
        }
    }
    if (opts_.on_handshake_error) {
        for (const auto& f : failures) {
            opts_.on_handshake_error(f);
        }
    }
}

std::error_code Acceptor::accept(Stream& out, std::optional<std::chrono::milliseconds> timeout) {
    if (!is_open() || !impl_->st_) {
        return std::make_error_code(std::errc::bad_file_descriptor);
    }
    const int lfd = native_handle();
    const auto deadline = timeout ? std::optional(io::Clock::now() + *timeout) : std::nullopt;
    while (true) {
        impl_->reap();
        {
            std::lock_guard lk(impl_->st_->mu);
            if (!impl_->st_->ready.empty()) {
                out.impl_ = std::move(impl_->st_->ready.front());
                impl_->st_->ready.pop_front();
                impl_->st_->st.ready = impl_->st_->ready.size();
                return {};
            }
        }
        int wait_ms = -1;
        if (deadline) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - io::Clock::now());
            if (left.count() <= 0) {
                return std::make_error_code(std::errc::timed_out);
            }
            wait_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 60'000));
        }
        pollfd p[2] = {{lfd, POLLIN, 0}, {impl_->st_->wake_fd, POLLIN, 0}};
        int n = ::poll(p, 2, wait_ms);
        if (n < 0 && errno != EINTR) {
            return {errno, std::generic_category()};
        }
        if (n <= 0) {
            continue;
        }
        if (p[1].revents & POLLIN) {
            std::uint64_t v;
            (void)!::read(impl_->st_->wake_fd, &v, sizeof v);
        }
        if (!(p[0].revents & POLLIN)) {
            continue;
        }
#if SDPPM_HAVE_RDMA
        if (impl_->rdma_) {
            // Take every pending connection request; startups run on their own.
            while (true) {
                std::error_code ec;
                std::string why;
                auto req = impl_->rdma_->l->take(impl_->opts_.stream, ec, why);
                if (req) {
                    const pm::Endpoint peer = detail::rdma_peer(*req);
                    impl_->st_->start_rdma(std::move(req), peer, impl_->opts_);
                    continue;
                }
                if (ec == std::errc::timed_out) {
                    break;  // none left
                }
                if (ec == std::errc::no_such_device) {
                    return ec;  // the device went away: the listener is gone
                }
                std::lock_guard lk(impl_->st_->mu);  // one request failed (e.g. not iWARP)
                ++impl_->st_->st.tcp_accepted;
                impl_->st_->note_failure("rdma connection request: " + why);
            }
            continue;
        }
#endif
        // Take everything in the listen queue; startups run on their own.
        while (true) {
            sockaddr_storage peer;
            socklen_t plen = sizeof peer;
            int cfd =
                ::accept4(impl_->fd_, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
            if (cfd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) {
                    continue;
                }
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    break;
                }
                return {errno, std::generic_category()};
            }
            impl_->st_->start(cfd, detail::from_sockaddr(peer), impl_->opts_);
        }
    }
}

std::string Acceptor::last_error() const {
    if (!state().st_) {
        return {};
    }
    std::lock_guard lk(state().st_->mu);
    return state().st_->last_error;
}

AcceptorStats Acceptor::stats() const {
    if (!state().st_) {
        return {};
    }
    std::lock_guard lk(state().st_->mu);
    return state().st_->st;
}

std::error_code Acceptor::close() {
    if (!impl_) {
        return {};  // moved from
    }
    std::error_code ec;
    if (impl_->registered_ && impl_->opts_.control_socket) {
        ec = detail::unregister_service(impl_->opts_, impl_->reg_name_, impl_->reg_error_);
    }
    impl_->registered_ = false;
    if (impl_->fd_ >= 0) {
        ::close(impl_->fd_);
        impl_->fd_ = -1;
    }
    impl_->st_.reset();  // ends running startups, drops unreturned streams
    impl_->rdma_.reset();
    return ec;
}

}  // namespace sdp
