#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "internal.hpp"
#include "sdp/stream.hpp"

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

acceptor::acceptor() = default;

acceptor::~acceptor() {
    close();
}

std::error_code acceptor::open(const pm::Endpoint& local, const acceptor_options& opts) {
    close();
    opts_ = opts;
    reg_error_.clear();
    int fd = detail::tcp_socket(local.address.is_v4());
    if (fd < 0) {
        return {-fd, std::generic_category()};
    }
    int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_storage ss;
    socklen_t len = detail::to_sockaddr(local, ss);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, opts.backlog) != 0) {
        int e = errno;
        ::close(fd);
        return {e, std::generic_category()};
    }
    sockaddr_storage got;
    socklen_t glen = sizeof got;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &glen);
    local_ = detail::from_sockaddr(got);
    fd_ = fd;
    if (opts.control_socket) {
        const bool wildcard = local_.address == pm::IpAddress::any(local_.address.family());
        const std::string sdp_addr = opts.sdp_address.value_or(
            wildcard ? "*:" + std::to_string(local_.port) : local_.to_string());
        reg_name_ =
            opts.service_name.empty() ? "sdp-" + std::to_string(local_.port) : opts.service_name;
        if (!opts.conventional) {
            reg_error_ = "registration needs a conventional address";
            close();
            return std::make_error_code(std::errc::invalid_argument);
        }
        std::string json = R"({"command":"register","arguments":{"name":")" +
                           json_escape(reg_name_) + R"(","conventional":")" +
                           json_escape(*opts.conventional) + R"(","sdp":[")" +
                           json_escape(sdp_addr) + R"("])";
        if (opts.pm_time) {
            json += R"(,"pm_time":")" + json_escape(*opts.pm_time) + "\"";
        }
        json += R"(,"owner":"sdp::acceptor pid )" + std::to_string(::getpid()) + "\"}}";
        std::string text;
        int r = control_request(*opts.control_socket, json, text, opts.control_timeout);
        if (r != 0) {
            reg_error_ = r < 0 ? text
                               : "sdp-pmd refused the registration (result " + std::to_string(r) +
                                     "): " + text;
            close();
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
        registered_ = true;
    }
    return {};
}

std::error_code acceptor::accept(stream& out, std::optional<std::chrono::milliseconds> timeout) {
    if (fd_ < 0) {
        return std::make_error_code(std::errc::bad_file_descriptor);
    }
    const auto deadline = timeout ? std::optional(io::Clock::now() + *timeout) : std::nullopt;
    while (true) {
        int wait_ms = -1;
        if (deadline) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - io::Clock::now());
            if (left.count() <= 0) {
                return std::make_error_code(std::errc::timed_out);
            }
            wait_ms = static_cast<int>(left.count());
        }
        pollfd p{fd_, POLLIN, 0};
        int n = ::poll(&p, 1, wait_ms);
        if (n < 0 && errno != EINTR) {
            return {errno, std::generic_category()};
        }
        if (n <= 0) {
            continue;
        }
        sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        int cfd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) {
                continue;
            }
            return {errno, std::generic_category()};
        }
        auto im = std::make_unique<stream::impl>();
        im->opts = opts_.stream;
        std::error_code ec;
        std::string why;
        im->sdp = io::SoftChannel::handshake(cfd, iwarp::MpaRole::responder,
                                             detail::channel_options(opts_.stream), ec, &why);
        if (!im->sdp) {
            last_error_ =
                detail::from_sockaddr(peer).to_string() + ": " + ec.message() + ": " + why;
            continue;
        }
        im->info.used = transport::sdp;
        im->info.peer = detail::from_sockaddr(peer);
        out.impl_ = std::move(im);
        return {};
    }
}

std::error_code acceptor::close() {
    std::error_code ec;
    if (registered_ && opts_.control_socket) {
        std::string text;
        int r = control_request(
            *opts_.control_socket,
            R"({"command":"unregister","arguments":{"name":")" + json_escape(reg_name_) + "\"}}",
            text, opts_.control_timeout);
        if (r != 0) {
            reg_error_ = "unregister: " + text;
            ec = std::make_error_code(std::errc::io_error);
        }
    }
    registered_ = false;
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    return ec;
}

}  // namespace sdp
