#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "internal.hpp"
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

namespace {

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
            o += buf;
        } else {
            o += c;
        }
    }
    return o;
}

// The value of a top-level "key": string or integer in a one-line JSON
// object (enough for the daemon's {"result", "text", ...} answers).
std::optional<std::string> json_field(const std::string& line, const std::string& key) {
    const std::string k = "\"" + key + "\"";
    auto pos = line.find(k);
    if (pos == std::string::npos) {
        return std::nullopt;
    }
    pos = line.find(':', pos + k.size());
    if (pos == std::string::npos) {
        return std::nullopt;
    }
    ++pos;
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) {
        ++pos;
    }
    if (pos >= line.size()) {
        return std::nullopt;
    }
    if (line[pos] == '"') {
        std::string v;
        for (++pos; pos < line.size() && line[pos] != '"'; ++pos) {
            if (line[pos] == '\\' && pos + 1 < line.size()) {
                ++pos;
            }
            v += line[pos];
        }
        return v;
    }
    std::string v;
    while (pos < line.size() && (line[pos] == '-' || (line[pos] >= '0' && line[pos] <= '9'))) {
        v += line[pos++];
    }
    return v.empty() ? std::nullopt : std::optional<std::string>(v);
}

}  // namespace

int control_request(const std::string& socket_path, const std::string& json_line, std::string& text,
                    std::chrono::milliseconds timeout) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof a.sun_path) {
        text = "control socket path too long: " + socket_path;
        return -1;
    }
    std::memcpy(a.sun_path, socket_path.c_str(), socket_path.size() + 1);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        text = std::string("socket: ") + std::strerror(errno);
        return -1;
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        text = "cannot connect to the sdp-pmd control socket " + socket_path + ": " +
               std::strerror(errno) + " (is sdp-pmd running with control socket support?)";
        return -1;
    }
    std::string req = json_line + "\n";
    std::size_t off = 0;
    while (off < req.size()) {
        ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
            text = std::string("control socket send: ") + std::strerror(errno);
            return -1;
        }
        off += static_cast<std::size_t>(n);
    }
    std::string line;
    char buf[4096];
    while (line.find('\n') == std::string::npos && line.size() < 1024 * 1024) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            text = n == 0 ? "sdp-pmd closed the control connection without an answer"
                          : std::string("no answer from the sdp-pmd control socket: ") +
                                std::strerror(errno);
            return -1;
        }
        line.append(buf, static_cast<std::size_t>(n));
    }
    line = line.substr(0, line.find('\n'));
    auto result = json_field(line, "result");
    text = json_field(line, "text").value_or(line);
    if (!result) {
        text = "unexpected control answer: " + line;
        return -1;
    }
    return std::atoi(result->c_str());
}

namespace detail {

std::error_code register_service(const acceptor_options& opts, const pm::Endpoint& local,
                                 std::string& reg_name, std::string& reg_error) {
    const bool wildcard = local.address == pm::IpAddress::any(local.address.family());
    const std::string sdp_addr =
        opts.sdp_address.value_or(wildcard ? "*:" + std::to_string(local.port) : local.to_string());
    reg_name = opts.service_name.empty() ? "sdp-" + std::to_string(local.port) : opts.service_name;
    if (!opts.conventional) {
        reg_error = "registration needs a conventional address";
        return std::make_error_code(std::errc::invalid_argument);
    }
    std::string json = R"({"command":"register","arguments":{"name":")" + json_escape(reg_name) +
                       R"(","conventional":")" + json_escape(*opts.conventional) + R"(","sdp":[")" +
                       json_escape(sdp_addr) + R"("])";
    if (opts.pm_time) {
        json += R"(,"pm_time":")" + json_escape(*opts.pm_time) + "\"";
    }
    json += R"(,"owner":"sdp::acceptor pid )" + std::to_string(::getpid()) + "\"}}";
    std::string text;
    int r = control_request(*opts.control_socket, json, text, opts.control_timeout);
    if (r == 0) {
        return {};
    }
    reg_error =
        r < 0 ? text
              : "sdp-pmd refused the registration (result " + std::to_string(r) + "): " + text;
    switch (r) {
        case 2:
            return std::make_error_code(std::errc::operation_not_supported);
        case 4:
            return std::make_error_code(std::errc::address_in_use);
        case 5:
            return std::make_error_code(std::errc::permission_denied);
        case -1:
            return std::make_error_code(std::errc::connection_refused);
        default:
            return std::make_error_code(std::errc::invalid_argument);
    }
}

std::error_code unregister_service(const acceptor_options& opts, const std::string& reg_name,
                                   std::string& reg_error) {
    std::string text;
    int r = control_request(
        *opts.control_socket,
        R"({"command":"unregister","arguments":{"name":")" + json_escape(reg_name) + "\"}}", text,
        opts.control_timeout);
    if (r != 0) {
        reg_error = "unregister: " + text;
        return std::make_error_code(std::errc::io_error);
    }
    return {};
}

}  // namespace detail

// Concurrent MPA/SDP startups of the blocking acceptor: one thread per
// accepted TCP connection runs SoftChannel::handshake (bounded by
// handshake_timeout); finished streams queue in `ready`. Each job keeps a
// dup() of its socket so close() can shut the socket down (the startup then
// ends at once) without racing the job's own close of its descriptor.
struct acceptor::startups {
    struct job {
        std::thread th;
        int ctl = -1;
        bool done = false;
    };
    mutable std::mutex mu;
    int wake_fd = -1;  // eventfd: a job finished
    std::list<job> jobs;
    std::deque<std::unique_ptr<stream::impl>> ready;
    std::deque<std::string> failures;  // not yet reported (bounded)
    std::string last_error;
    acceptor_stats st;
    bool stopping = false;

    startups() { wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
    ~startups() { stop(); }
    startups(const startups&) = delete;
    startups& operator=(const startups&) = delete;

    // Ends every running startup and drops the queued streams.
    void stop() {
        std::list<job> all;
        std::deque<std::unique_ptr<stream::impl>> drop;
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

    void start(int cfd, const pm::Endpoint& peer, const acceptor_options& opts) {
        std::lock_guard lk(mu);
        ++st.tcp_accepted;
        if (stopping ||
            st.pending + ready.size() >= std::max<std::size_t>(opts.max_pending_handshakes, 1)) {
            ++st.over_limit;
            ::close(cfd);
            return;
        }
        const int ctl = ::fcntl(cfd, F_DUPFD_CLOEXEC, 0);
        auto it = jobs.insert(jobs.end(), job{});
        it->ctl = ctl;
        ++st.pending;
        const stream_options so = opts.stream;
        try {
            it->th = std::thread([this, it, cfd, peer, so] { run(it, cfd, peer, so); });
        } catch (const std::system_error& e) {
            --st.pending;
            it->done = true;
            note_failure(peer.to_string() + ": cannot start a handshake thread: " + e.what());
            ::close(cfd);
        }
    }

    void run(std::list<job>::iterator it, int cfd, pm::Endpoint peer, stream_options so) {
        // Nothing may escape this thread (std::terminate): a failure to
        // allocate or to start the channel's helper thread is a failed
        // startup like any other.
        std::unique_ptr<stream::impl> im;
        std::error_code ec;
        std::string why;
        try {
            im = std::make_unique<stream::impl>();
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
                    const acceptor_options& opts) {
        std::lock_guard lk(mu);
        ++st.tcp_accepted;
        if (stopping ||
            st.pending + ready.size() >= std::max<std::size_t>(opts.max_pending_handshakes, 1)) {
            ++st.over_limit;
            (void)req->reject();
            return;
        }
        auto it = jobs.insert(jobs.end(), job{});
        ++st.pending;
        const stream_options so = opts.stream;
        auto shared = std::make_shared<std::unique_ptr<rdma::Connection>>(std::move(req));
        try {
            it->th = std::thread([this, it, shared, peer, so] {
                std::unique_ptr<stream::impl> im;
                std::error_code ec;
                std::string why;
                try {
                    im = std::make_unique<stream::impl>();
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
    void finish(std::list<job>::iterator it, const pm::Endpoint& peer,
                std::unique_ptr<stream::impl> im, const std::error_code& ec,
                const std::string& why) {
        std::unique_ptr<stream::impl> drop;
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
                im->info.used = transport::sdp;
                im->info.peer = peer;
                ready.push_back(std::move(im));
                st.ready = ready.size();
            }
            std::uint64_t one = 1;
            (void)!::write(wake_fd, &one, sizeof one);
        }
    }
};

struct acceptor::rdma_listener {
#if SDPPM_HAVE_RDMA
    std::unique_ptr<detail::RdmaListener> l;
#endif
};

acceptor::acceptor() = default;

acceptor::~acceptor() {
    close();
}

bool acceptor::is_open() const {
    return fd_ >= 0 || rdma_ != nullptr;
}

int acceptor::native_handle() const {
#if SDPPM_HAVE_RDMA
    if (rdma_) {
        return rdma_->l->fd();
    }
#endif
    return fd_;
}

std::error_code acceptor::open(const pm::Endpoint& local, const acceptor_options& opts) {
    close();
    opts_ = opts;
    reg_error_.clear();
    open_error_.clear();
    std::string pwhy;
    const auto prov = detail::choose_provider(opts.stream.iwarp_provider, pwhy);
    if (!prov) {
        open_error_ = detail::rdma_unusable_reason(pwhy);
        return std::make_error_code(std::errc::no_such_device);
    }
    if (*prov == provider::rdma) {
        if (auto ec = open_rdma(local)) {
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
        local_ = detail::from_sockaddr(got);
        fd_ = fd;
        listener_provider_ = provider::soft;
    }
    st_ = std::make_unique<startups>();
    if (st_->wake_fd < 0) {
        int e = errno;
        close();
        return {e, std::generic_category()};
    }
    if (opts.control_socket) {
        if (auto ec = detail::register_service(opts, local_, reg_name_, reg_error_)) {
            close();
            return ec;
        }
        registered_ = true;
    }
    return {};
}

std::error_code acceptor::open_rdma(const pm::Endpoint& local) {
#if SDPPM_HAVE_RDMA
    std::error_code ec;
    std::string why;
    auto l = detail::RdmaListener::listen(local, opts_.backlog, ec, why);
    if (!l) {
        open_error_ = why;
        return ec ? ec : std::make_error_code(std::errc::io_error);
    }
    local_ = pm::Endpoint{local.address, l->port()};
    rdma_ = std::make_unique<rdma_listener>();
    rdma_->l = std::move(l);
    listener_provider_ = provider::rdma;
    return {};
#else
    (void)local;
    open_error_ = detail::rdma_unusable_reason("not built");
    return std::make_error_code(std::errc::no_such_device);
#endif
}

void acceptor::reap() {
    std::list<startups::job> done;
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

std::error_code acceptor::accept(stream& out, std::optional<std::chrono::milliseconds> timeout) {
    if (!is_open() || !st_) {
        return std::make_error_code(std::errc::bad_file_descriptor);
    }
    const int lfd = native_handle();
    const auto deadline = timeout ? std::optional(io::Clock::now() + *timeout) : std::nullopt;
    while (true) {
        reap();
        {
            std::lock_guard lk(st_->mu);
            if (!st_->ready.empty()) {
                out.impl_ = std::move(st_->ready.front());
                st_->ready.pop_front();
                st_->st.ready = st_->ready.size();
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
        pollfd p[2] = {{lfd, POLLIN, 0}, {st_->wake_fd, POLLIN, 0}};
        int n = ::poll(p, 2, wait_ms);
        if (n < 0 && errno != EINTR) {
            return {errno, std::generic_category()};
        }
        if (n <= 0) {
            continue;
        }
        if (p[1].revents & POLLIN) {
            std::uint64_t v;
            (void)!::read(st_->wake_fd, &v, sizeof v);
        }
        if (!(p[0].revents & POLLIN)) {
            continue;
        }
#if SDPPM_HAVE_RDMA
        if (rdma_) {
            // Take every pending connection request; startups run on their own.
            while (true) {
                std::error_code ec;
                std::string why;
                auto req = rdma_->l->take(opts_.stream, ec, why);
                if (req) {
                    const pm::Endpoint peer = detail::rdma_peer(*req);
                    st_->start_rdma(std::move(req), peer, opts_);
                    continue;
                }
                if (ec == std::errc::timed_out) {
                    break;  // none left
                }
                if (ec == std::errc::no_such_device) {
                    return ec;  // the device went away: the listener is gone
                }
                std::lock_guard lk(st_->mu);  // one request failed (e.g. not iWARP)
                ++st_->st.tcp_accepted;
                st_->note_failure("rdma connection request: " + why);
            }
            continue;
        }
#endif
        // Take everything in the listen queue; startups run on their own.
        while (true) {
            sockaddr_storage peer;
            socklen_t plen = sizeof peer;
            int cfd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
            if (cfd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) {
                    continue;
                }
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    break;
                }
                return {errno, std::generic_category()};
            }
            st_->start(cfd, detail::from_sockaddr(peer), opts_);
        }
    }
}

std::string acceptor::last_error() const {
    if (!st_) {
        return {};
    }
    std::lock_guard lk(st_->mu);
    return st_->last_error;
}

acceptor_stats acceptor::stats() const {
    if (!st_) {
        return {};
    }
    std::lock_guard lk(st_->mu);
    return st_->st;
}

std::error_code acceptor::close() {
    std::error_code ec;
    if (registered_ && opts_.control_socket) {
        ec = detail::unregister_service(opts_, reg_name_, reg_error_);
    }
    registered_ = false;
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    st_.reset();  // ends running startups, drops unreturned streams
    rdma_.reset();
    return ec;
}

}  // namespace sdp
