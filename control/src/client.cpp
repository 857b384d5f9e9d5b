// SPDX-License-Identifier: Apache-2.0
#include "pmctl/client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace pmctl {

namespace {

using nlohmann::json;

Error fail(Errc code, std::string message) {
    return Error{code, std::move(message)};
}

// One connection; closed when it goes out of scope.
class Connection {
  public:
    Connection(const std::string& path, std::chrono::milliseconds timeout)
        : path_(path), timeout_(timeout) {}
    ~Connection() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    std::optional<Error> connect() {
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        if (path_.size() >= sizeof a.sun_path) {
            return fail(Errc::invalid_request, "socket path too long: " + path_);
        }
        std::memcpy(a.sun_path, path_.c_str(), path_.size() + 1);
        fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0) {
            return fail(Errc::unreachable,
                        std::string("cannot create a socket: ") + std::strerror(errno));
        }
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            const int err = errno;
            if (err == EACCES || err == EPERM) {
                return fail(Errc::permission_denied,
                            "permission denied: cannot connect to " + path_);
            }
            return fail(Errc::unreachable, "cannot connect to " + path_ + ": " +
                                               std::strerror(err) + " (is sdp-pmd running?)");
        }
        return std::nullopt;
    }

    std::optional<Error> send_all(const std::string& s) {
        std::size_t off = 0;
        while (off < s.size()) {
            if (!wait(POLLOUT)) {
                return fail(Errc::unreachable, "timed out sending to " + path_);
            }
            ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN) {
                    continue;
                }
                return fail(Errc::unreachable,
                            "cannot send to " + path_ + ": " + std::strerror(errno));
            }
            off += static_cast<std::size_t>(n);
        }
        return std::nullopt;
    }

    std::variant<std::string, Error> receive_line() {
        std::string buffer;
        for (;;) {
            if (auto nl = buffer.find('\n'); nl != std::string::npos) {
                rest_ = buffer.substr(nl + 1);
                buffer.resize(nl);
                return buffer;
            }
            if (!wait(POLLIN)) {
                return fail(Errc::unreachable, "no answer from the daemon on " + path_);
            }
            char buf[65536];
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                return fail(Errc::unreachable, "the daemon closed the connection on " + path_);
            }
            buffer.append(buf, static_cast<std::size_t>(n));
            if (buffer.size() > kMaxReply) {
                return fail(Errc::unreachable, "answer too long from the daemon on " + path_);
            }
        }
    }

    // Hands the socket over (and what was read past the reply).
    KeptConnection release() {
        KeptConnection k{fd_, std::move(rest_)};
        fd_ = -1;
        return k;
    }

  private:
    bool wait(short events) {
        pollfd p{fd_, events, 0};
        int n = 0;
        do {
            n = ::poll(&p, 1, static_cast<int>(timeout_.count()));
        } while (n < 0 && errno == EINTR);
        return n > 0;
    }

    std::string path_;
    std::chrono::milliseconds timeout_;
    int fd_ = -1;
    std::string rest_;
};

}  // namespace

Answer request(const std::string& socket_path, const json& request,
               std::chrono::milliseconds timeout, KeptConnection* keep) {
    std::string line = request.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    if (line.size() > kMaxRequest) {
        return fail(Errc::invalid_request, "request too long (the daemon takes at most 64 KiB)");
    }
    Connection c(socket_path, timeout);
    if (auto e = c.connect()) {
        return *e;
    }
    if (auto e = c.send_all(line)) {
        return *e;
    }
    auto received = c.receive_line();
    if (auto* e = std::get_if<Error>(&received)) {
        return *e;
    }
    Reply r;
    r.document = json::parse(std::get<std::string>(received), nullptr, false);
    if (r.document.is_discarded() || !r.document.is_object() || !r.document.contains("result") ||
        !r.document["result"].is_number_integer()) {
        return fail(Errc::unreachable, "bad answer from the daemon on " + socket_path);
    }
    r.result = r.document["result"].get<int>();
    if (auto it = r.document.find("text"); it != r.document.end() && it->is_string()) {
        r.text = it->get<std::string>();
    }
    if (auto it = r.document.find("arguments"); it != r.document.end()) {
        r.arguments = *it;
    }
    if (keep != nullptr) {
        *keep = c.release();
    }
    return r;
}

Answer call(const std::string& socket_path, std::string_view command, const json& arguments,
            std::chrono::milliseconds timeout) {
    json req{{"command", std::string(command)}};
    if (!arguments.is_null()) {
        req["arguments"] = arguments;
    }
    return request(socket_path, req, timeout);
}

}  // namespace pmctl
