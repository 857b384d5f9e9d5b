// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <set>
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

std::unique_ptr<Stream::Impl> accept_soft(int cfd, const StreamOptions& so,
                                          const io::ChannelOptions& co, std::error_code& ec,
                                          std::string& why, const engine::Carry* carry) {
    // Nothing may escape (the acceptor runs this on its own thread, where
    // it would be std::terminate): a failure to allocate or to start the
    // channel's helper thread is a failed startup like any other.
    std::unique_ptr<Stream::Impl> im;
    ec.clear();
    try {
        im = std::make_unique<Stream::Impl>();
        im->opts = so;
    } catch (const std::exception& e) {
        ::close(cfd);  // not handed to handshake() yet
        ec = std::make_error_code(std::errc::not_enough_memory);
        why = e.what();
        return nullptr;
    }
    try {
        // Owns cfd from here on, also when it throws.
        im->sdp = io::SoftChannel::handshake(cfd, iwarp::MpaRole::responder, co, ec, &why, carry);
    } catch (const std::exception& e) {
        ec = std::make_error_code(std::errc::resource_unavailable_try_again);
        why = e.what();
        return nullptr;
    }
    if (!im->sdp) {
        return nullptr;
    }
    im->info.provider = "soft";
    if (so.keepalive.enabled) {
        ec = apply_keepalive(im->sdp->native_handle(), so.keepalive);
        if (ec) {
            why = "keepalive: " + ec.message();
            im->sdp->abort();
            return nullptr;
        }
    }
    return im;
}

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

void own_source_port(int fd, bool v4) {
    int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_storage ss;
    const socklen_t len = pm::to_sockaddr(
        pm::Endpoint{pm::IpAddress::any(v4 ? pm::Family::v4 : pm::Family::v6), 0}, ss);
    (void)::bind(fd, reinterpret_cast<sockaddr*>(&ss), len);  // see internal.hpp
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
                                 std::string& reg_name, std::string& reg_error,
                                 pmctl::KeptConnection* keep) {
    const bool wildcard = local.address == pm::IpAddress::any(local.address.family());
    const std::string sdp_addr =
        opts.sdp_address.value_or(wildcard ? "*:" + std::to_string(local.port) : local.to_string());
    auto send = [&](const nlohmann::json& a) {
        return pmctl::request(*opts.control_socket,
                              nlohmann::json{{"command", "register"}, {"arguments", a}},
                              opts.control_timeout, keep);
    };
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
    if (opts.health_check && !opts.on_demand) {
        args["health"] = {{"check", *opts.health_check}};
    }
    if (opts.on_demand) {
        args["on_demand"] = {{"ports", pm::port_list_text(opts.on_demand->ports)},
                             {"single_use", opts.on_demand->single_use}};
    }
    auto answer = send(args);
    if (answer.ok() && answer.reply().result == 1 && args.contains("pid")) {
        // A daemon that cannot tie it to this process (an older one without
        // "pid", no pidfd support, another PID namespace): register without
        // the tie, as before, and say so; close() still unregisters.
        const std::string why = answer.reply().text;
        if (why.rfind("pid", 0) == 0 || why.find("\"pid\"") != std::string::npos) {
            args.erase("pid");
            if (keep != nullptr && keep->fd >= 0) {
                ::close(keep->fd);
                keep->fd = -1;
            }
            answer = send(args);
            if (answer.ok() && answer.reply().result == 0) {
                reg_error = "registered without following this process: " + why;
                return {};
            }
        }
    }
    if (answer.ok() && answer.reply().result == 0) {
        return {};
    }
    if (keep != nullptr && keep->fd >= 0) {
        ::close(keep->fd);
        keep->fd = -1;
    }
    return control_error(answer, "registration", reg_error);
}

int tcp_listen(const pm::Endpoint& local, int backlog, pm::Endpoint& bound) {
    int fd = tcp_socket(local.address.is_v4());
    if (fd < 0) {
        return fd;
    }
    int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_storage ss;
    socklen_t len = to_sockaddr(local, ss);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, backlog) != 0 ||
        !io::set_nonblocking(fd, true)) {
        int e = errno;
        ::close(fd);
        return -e;
    }
    sockaddr_storage got;
    socklen_t glen = sizeof got;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &glen);
    bound = from_sockaddr(got);
    return fd;
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
    struct OnDemand;

    void reap();
    std::error_code open_rdma(const pm::Endpoint& local);
    std::error_code open_on_demand();

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
    std::unique_ptr<OnDemand> od_;  // after st_: its thread uses st_
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

    // Takes every connection in the listen queue of `lfd` (non-blocking)
    // and starts each, calling on_each() after it. 0 when the queue is
    // empty, else the listener's errno.
    int take_all(int lfd, const AcceptorOptions& opts,
                 const std::function<void()>& on_each = nullptr) {
        while (true) {
            sockaddr_storage peer;
            socklen_t plen = sizeof peer;
            int cfd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
            if (cfd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) {
                    continue;
                }
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : errno;
            }
            start(cfd, detail::from_sockaddr(peer), opts);
            if (on_each) {
                on_each();
            }
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
        std::error_code ec;
        std::string why;
        auto im = detail::accept_soft(cfd, so, detail::channel_options(so), ec, why);
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

// On-demand ports: the control connection kept from the registration
// (docs/control-protocol.md, "On-demand services") and the listeners the
// daemon asked for, both owned by one service thread, so the application
// need not call accept() for the daemon to be answered. Accepted TCP
// connections start like those of a fixed listener (Startups) and come out
// of accept(); each is reported to the daemon as {"connected": P}.
struct Acceptor::Impl::OnDemand {
    OnDemand(pmctl::KeptConnection kept, pm::IpAddress addr, AcceptorOptions o, Startups& s)
        : ctl(kept.fd), in(std::move(kept.pending)), address(addr), opts(std::move(o)), st(s) {
        stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        // A daemon that stops reading must not hold this thread (and so
        // close()) for ever: a send that times out ends the channel.
        detail::set_io_timeout(ctl, opts.control_timeout);
        allowed.insert(opts.on_demand->ports.begin(), opts.on_demand->ports.end());
    }
    ~OnDemand() { stop(); }
    OnDemand(const OnDemand&) = delete;
    OnDemand& operator=(const OnDemand&) = delete;

    void start() {
        th = std::thread([this] { run(); });
    }

    void stop() {
        if (stop_fd >= 0) {
            std::uint64_t one = 1;
            (void)!::write(stop_fd, &one, sizeof one);
        }
        if (th.joinable()) {
            th.join();
        }
        for (auto& [port, fd] : listeners) {
            ::close(fd);
        }
        listeners.clear();
        count = 0;
        if (ctl >= 0) {
            ::close(ctl);  // the daemon drops the registration
            ctl = -1;
        }
        if (stop_fd >= 0) {
            ::close(stop_fd);
            stop_fd = -1;
        }
    }

    void run() {
        std::vector<pollfd> p;
        std::vector<std::uint16_t> ports;
        while (!lost && handle_lines()) {
            p.assign({{ctl, POLLIN, 0}, {stop_fd, POLLIN, 0}});
            ports.clear();
            for (const auto& [port, fd] : listeners) {
                p.push_back({fd, POLLIN, 0});
                ports.push_back(port);
            }
            int n = ::poll(p.data(), p.size(), -1);
            if (n < 0 && errno != EINTR) {
                break;
            }
            if (n <= 0) {
                continue;
            }
            if (p[1].revents != 0) {
                return;  // close()
            }
            for (std::size_t i = 2; i < p.size(); ++i) {
                if (p[i].revents != 0) {
                    take(ports[i - 2]);
                }
            }
            if (p[0].revents != 0) {
                char buf[4096];
                ssize_t r = ::recv(ctl, buf, sizeof buf, 0);
                if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
                    continue;
                }
                if (r <= 0 || in.size() + static_cast<std::size_t>(r) > 65536) {
                    break;
                }
                in.append(buf, static_cast<std::size_t>(r));
            }
        }
        // The daemon is gone (or spoke nonsense at length): no more ports.
        for (auto& [port, fd] : listeners) {
            ::close(fd);
        }
        listeners.clear();
        count = 0;
        lost = true;
        std::uint64_t one = 1;
        (void)!::write(st.wake_fd, &one, sizeof one);
    }

    // Carries out the complete lines received; false to give up.
    bool handle_lines() {
        for (auto nl = in.find('\n'); nl != std::string::npos; nl = in.find('\n')) {
            const std::string line = in.substr(0, nl);
            in.erase(0, nl + 1);
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded() || !j.is_object()) {
                continue;  // not for us; the daemon only sends objects
            }
            const auto port_of = [&](const char* key) -> int {
                auto it = j.find(key);
                if (it == j.end() || !it->is_number_unsigned() ||
                    it->get<std::uint64_t>() > 65535) {
                    return -1;
                }
                return static_cast<int>(it->get<std::uint64_t>());
            };
            if (int port = port_of("open"); port > 0) {
                const auto id = j.value("id", std::uint64_t{0});
                std::string error = open_port(static_cast<std::uint16_t>(port));
                nlohmann::json answer =
                    error.empty() ? nlohmann::json{{"opened", port}, {"id", id}}
                                  : nlohmann::json{{"failed", port}, {"id", id}, {"error", error}};
                if (!say(answer)) {
                    return false;
                }
            } else if (int cport = port_of("close"); cport > 0) {
                if (auto it = listeners.find(static_cast<std::uint16_t>(cport));
                    it != listeners.end()) {
                    ::close(it->second);
                    listeners.erase(it);
                    count = listeners.size();
                }
                if (!say(nlohmann::json{{"closed", cport}})) {
                    return false;
                }
            }
        }
        return true;
    }

    // "" when listening on `port` (already or now), else why not.
    std::string open_port(std::uint16_t port) {
        if (!allowed.count(port)) {
            return "port " + std::to_string(port) + " is not in this acceptor's pool";
        }
        if (listeners.count(port)) {
            return {};
        }
        pm::Endpoint bound;
        int fd = detail::tcp_listen(pm::Endpoint{address, port}, opts.backlog, bound);
        if (fd < 0) {
            return std::error_code(-fd, std::generic_category()).message();
        }
        listeners.emplace(port, fd);
        count = listeners.size();
        return {};
    }

    // Takes the listen queue of `port`; each connection is reported.
    void take(std::uint16_t port) {
        auto it = listeners.find(port);
        if (it == listeners.end()) {
            return;
        }
        // A listener that fails is closed by the daemon in time (PMAck timer).
        (void)st.take_all(it->second, opts, [&] {
            (void)say(nlohmann::json{{"connected", port}});
        });
    }

    bool say(const nlohmann::json& j) {
        const std::string line = j.dump() + "\n";
        std::size_t off = 0;
        while (off < line.size()) {
            ssize_t n = ::send(ctl, line.data() + off, line.size() - off, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                return false;
            }
            off += static_cast<std::size_t>(n);
        }
        return true;
    }

    int ctl = -1;
    std::string in;
    pm::IpAddress address;
    AcceptorOptions opts;
    Startups& st;
    int stop_fd = -1;
    std::thread th;
    std::set<std::uint16_t> allowed;
    std::map<std::uint16_t, int> listeners;  // the service thread's
    std::atomic<std::size_t> count{0};
    std::atomic<bool> lost{false};
};

std::error_code Acceptor::Impl::open_on_demand() {
    if (!opts_.control_socket || !opts_.conventional) {
        open_error_ = "on-demand ports need a control socket and a conventional address";
        return std::make_error_code(std::errc::invalid_argument);
    }
    if (opts_.on_demand->ports.empty()) {
        open_error_ = "on-demand ports: the pool is empty";
        return std::make_error_code(std::errc::invalid_argument);
    }
    std::sort(opts_.on_demand->ports.begin(), opts_.on_demand->ports.end());
    pmctl::KeptConnection kept;
    // The mapping's SDP address: this IP, the pool's first port (the daemon
    // hands out the port it opened).
    const pm::Endpoint first{local_.address, opts_.on_demand->ports.front()};
    if (auto ec = detail::register_service(opts_, first, reg_name_, reg_error_, &kept)) {
        st_.reset();
        return ec;
    }
    try {
        od_ = std::make_unique<OnDemand>(std::move(kept), local_.address, opts_, *st_);
        od_->start();
    } catch (const std::exception& e) {
        od_.reset();
        st_.reset();
        open_error_ = std::string("on-demand service thread: ") + e.what();
        return std::make_error_code(std::errc::resource_unavailable_try_again);
    }
    registered_ = true;
    return {};
}

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
    return impl_ && (impl_->fd_ >= 0 || impl_->rdma_ != nullptr || impl_->od_ != nullptr);
}

std::size_t Acceptor::on_demand_listeners() const {
    return state().od_ ? state().od_->count.load() : 0;
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
    if (*prov == Provider::rdma && opts.on_demand) {
        impl_->open_error_ = "on-demand ports need the soft provider";
        return std::make_error_code(std::errc::operation_not_supported);
    }
    if (*prov == Provider::rdma && opts.stream.keepalive.enabled) {
        impl_->open_error_ = detail::kRdmaKeepaliveReason;
        return std::make_error_code(std::errc::operation_not_supported);
    }
    if (*prov == Provider::rdma) {
        if (auto ec = impl_->open_rdma(local)) {
            return ec;
        }
    } else if (opts.on_demand) {
        // Listeners come later, one per port the daemon asks for.
        impl_->local_ = pm::Endpoint{local.address, 0};
        impl_->listener_provider_ = Provider::soft;
    } else {
        int fd = detail::tcp_listen(local, opts.backlog, impl_->local_);
        if (fd < 0) {
            return {-fd, std::generic_category()};
        }
        impl_->fd_ = fd;
        impl_->listener_provider_ = Provider::soft;
    }
    impl_->st_ = std::make_unique<Impl::Startups>();
    if (impl_->st_->wake_fd < 0) {
        int e = errno;
        close();
        return {e, std::generic_category()};
    }
    if (opts.on_demand) {
        return impl_->open_on_demand();
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
        if (impl_->od_ && impl_->od_->lost) {
            // sdp-pmd closed the channel: no listener will open again.
            impl_->reg_error_ = "sdp-pmd closed the on-demand control connection";
            return std::make_error_code(std::errc::connection_aborted);
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
        if (int e = impl_->st_->take_all(impl_->fd_, impl_->opts_)) {
            return {e, std::generic_category()};
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
    if (impl_->od_) {
        impl_->od_.reset();  // closing its control connection unregisters
    } else if (impl_->registered_ && impl_->opts_.control_socket) {
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
