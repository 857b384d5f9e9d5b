// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/control_socket.hpp"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "daemon/io/log.hpp"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace pmd::io {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

namespace {

std::optional<gid_t> group_id(const std::string& name) {
    if (name.empty()) {
        return std::nullopt;
    }
    group g{};
    group* result = nullptr;
    std::vector<char> buf(16384);
    while (::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &result) == ERANGE &&
           buf.size() < (1u << 22)) {
        buf.resize(buf.size() * 2);
    }
    if (result == nullptr) {
        return std::nullopt;
    }
    return result->gr_gid;
}

// Supplementary groups of the peer as they were at connect() (SO_PEERGROUPS,
// Linux 4.13), else from /proc/PID/status.
std::vector<gid_t> peer_groups(int fd, pid_t pid) {
    std::vector<gid_t> groups(64);
    for (int attempt = 0; attempt < 4; ++attempt) {
        socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
            groups.resize(len / sizeof(gid_t));
            return groups;
        }
        if (errno != ERANGE) {
            break;
        }
        groups.resize(std::max<std::size_t>(len / sizeof(gid_t), groups.size() * 2));
    }
    groups.clear();
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("Groups:", 0) == 0) {
            std::istringstream ss(line.substr(7));
            unsigned long g = 0;
            while (ss >> g && groups.size() < 65536) {
                groups.push_back(static_cast<gid_t>(g));
            }
        }
    }
    return groups;
}

std::string who(const Peer& p) {
    return "uid " + std::to_string(p.uid) + " gid " + std::to_string(p.gid) + " pid " +
           std::to_string(p.pid);
}

}  // namespace

struct ControlServer::Session : Channel, std::enable_shared_from_this<Session> {
    Session(ControlServer& owner, stream::socket s)
        : server(owner), socket(std::move(s)), timer(socket.get_executor()) {}

    void start() {
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
            peer.pid = cred.pid;
            peer.uid = cred.uid;
            peer.gid = cred.gid;
            peer.groups = peer_groups(socket.native_handle(), cred.pid);
            peer.access = server.access_of(peer);
        }
        peer.channel = std::static_pointer_cast<Channel>(shared_from_this());
        arm_timer();
        read();
    }

    void arm_timer() {
        if (!service.empty()) {
            return;  // a channel stays open as long as its peer keeps it
        }
        timer.expires_after(kControlIdleTimeout);
        timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (ec || self->closed || !self->service.empty()) {
                return;
            }
            ++self->server.mutable_counters().timeouts;
            self->close();
        });
    }

    void read() {
        if (closed) {
            return;
        }
        socket.async_read_some(
            asio::buffer(chunk),
            [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                if (self->closed) {
                    return;
                }
                if (ec) {
                    // EOF: a request without a final newline still counts
                    // ("one request per connection").
                    if (ec == asio::error::eof && !self->buffer.empty() && self->service.empty()) {
                        self->eof = true;
                        self->process();
                    } else {
                        self->close();
                    }
                    return;
                }
                self->buffer.append(self->chunk.data(), n);
                self->arm_timer();
                self->process();
            });
    }

    // An attached channel: every complete line goes to the backend, no
    // answer; then reads more.
    void process_channel() {
        while (!closed) {
            auto nl = buffer.find('\n');
            if (nl == std::string::npos) {
                if (buffer.size() > kMaxControlLine) {
                    ++server.mutable_counters().oversized;
                    close();
                    return;
                }
                read();
                return;
            }
            std::string line = buffer.substr(0, nl);
            buffer.erase(0, nl + 1);
            server.backend().channel_line(service, line, this);
        }
    }

    // Answers the next complete line, or reads more.
    void process() {
        if (!service.empty()) {
            process_channel();
            return;
        }
        auto nl = buffer.find('\n');
        std::string line;
        bool last = false;
        if (nl == std::string::npos) {
            if (buffer.size() > kMaxControlLine) {
                ++server.mutable_counters().oversized;
                log::logger().limited(LogLevel::warning, "control_oversized", [&] {
                    return "control: request longer than " + std::to_string(kMaxControlLine) +
                           " bytes from " + who(peer) + ", closing";
                });
                buffer.clear();
                write("{\"result\":1,\"text\":\"request longer than " +
                          std::to_string(kMaxControlLine) + " bytes\"}\n",
                      true);
                return;
            }
            if (!eof) {
                read();
                return;
            }
            line = std::move(buffer);
            buffer.clear();
            last = true;
        } else {
            line = buffer.substr(0, nl);
            buffer.erase(0, nl + 1);
            if (eof && buffer.empty()) {
                last = true;
            }
        }
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
            if (last) {
                close();
            } else {
                process();
            }
            return;
        }
        ++server.mutable_counters().requests;
        // The answer may come later (a command that asks the workers): the
        // connection reads nothing more until it is written.
        handle_control_line(line, peer, server.backend(),
                            [self = shared_from_this(), last](Handled h) {
                                if (!self->closed) {
                                    self->answer(std::move(h), last);
                                }
                            });
    }

    void answer(Handled h, bool last) {
        auto& counters = server.mutable_counters();
        if (h.result == kResultDenied) {
            ++counters.denied;
            log::logger().limited(LogLevel::warning, "control_denied", [&] {
                return "control: refused \"" + shown(h.command, 32) + "\" from " + who(peer);
            });
        } else if (h.result == kResultError || h.result == kResultUnsupported) {
            ++counters.errors;
        }
        write(std::move(h.response), last && service.empty());
    }

    // An answer: once written, the next request is read.
    void write(std::string text, bool then_close) {
        enqueue(Out{std::move(text), true, then_close});
    }

    // Channel: a line to the peer, queued behind what is being written.
    void attach(std::string name) override {
        service = std::move(name);
        timer.cancel();
    }

    bool send(std::string line) override {
        if (closed || out.size() >= kMaxChannelQueue) {
            return false;
        }
        line += '\n';
        enqueue(Out{std::move(line), false, false});
        return true;
    }

    struct Out {
        std::string text;
        bool resume = false;  // an answer: read the next request once written
        bool then_close = false;
    };

    void enqueue(Out o) {
        out.push_back(std::move(o));
        if (!writing) {
            write_next();
        }
    }

    void write_next() {
        if (closed || out.empty()) {
            writing = false;
            return;
        }
        writing = true;
        asio::async_write(
            socket, asio::buffer(out.front().text),
            [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                if (self->closed) {
                    return;
                }
                Out done = std::move(self->out.front());
                self->out.pop_front();
                if (ec || done.then_close) {
                    self->close();
                    return;
                }
                if (done.resume) {
                    self->arm_timer();
                    self->process();
                }
                self->write_next();
            });
    }

    void close() override {
        if (closed) {
            return;
        }
        closed = true;
        boost::system::error_code ignored;
        timer.cancel();
        socket.shutdown(stream::socket::shutdown_both, ignored);
        socket.close(ignored);
        // Keeps this alive while the backend and the server let go of it.
        auto self = shared_from_this();
        if (!service.empty()) {
            server.backend().channel_closed(service, this);
        }
        server.finished(this);
    }

    ControlServer& server;
    stream::socket socket;
    asio::steady_timer timer;
    Peer peer;
    std::array<char, 4096> chunk{};
    std::string buffer;
    std::deque<Out> out;
    bool writing = false;
    std::string service;  // attached channel: the on-demand service
    bool eof = false;
    bool closed = false;
};

ControlServer::ControlServer(asio::io_context& io, ControlBackend& backend)
    : io_(io), backend_(backend), acceptor_(io) {}

ControlServer::~ControlServer() {
    stop();
}

void ControlServer::set_groups(const ControlConfig& c) {
    admin_group_ = c.admin_group;
    read_group_ = c.read_group;
}

Access ControlServer::access_of(const Peer& p) const {
    if (p.uid == 0) {
        return Access::admin;
    }
    const auto member = [&p](const std::string& name) {
        auto gid = group_id(name);
        return gid && (p.gid == *gid ||
                       std::find(p.groups.begin(), p.groups.end(), *gid) != p.groups.end());
    };
    if (member(admin_group_)) {
        return Access::admin;
    }
    if (member(read_group_)) {
        return Access::read;
    }
    return Access::none;
}

std::optional<std::string> ControlServer::bind(const std::string& path) {
    namespace fs = std::filesystem;
    if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
        return "socket path too long: " + path;
    }
    std::error_code ec;
    const fs::path dir = fs::path(path).parent_path();
    if (!dir.empty() && !fs::exists(dir, ec)) {
        fs::create_directories(dir, ec);
        if (ec) {
            return "cannot create " + dir.string() + ": " + ec.message();
        }
        ::chmod(dir.c_str(), 0755);
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            return path + " exists and is not a socket";
        }
        // A live daemon answers a connect; a stale socket refuses it.
        boost::system::error_code cec;
        stream::socket probe(io_);
        probe.connect(stream::endpoint(path), cec);
        if (!cec) {
            return path + " is in use by another process";
        }
        ::unlink(path.c_str());
    }
    boost::system::error_code bec;
    acceptor_.open(stream(), bec);
    if (!bec) {
        // Owner-only while binding, then opened up: authorization is by peer
        // credentials, so the file mode must not stand in the way.
        const mode_t old = ::umask(0177);
        acceptor_.bind(stream::endpoint(path), bec);
        ::umask(old);
    }
    if (!bec) {
        ::chmod(path.c_str(), 0666);
        acceptor_.listen(asio::socket_base::max_listen_connections, bec);
    }
    if (bec) {
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        return "cannot listen on " + path + ": " + bec.message();
    }
    if (::stat(path.c_str(), &st) == 0) {
        inode_ = st.st_ino;
    }
    path_ = path;
    return std::nullopt;
}

std::optional<std::string> ControlServer::adopt(int fd) {
    sockaddr_un sa{};
    socklen_t len = sizeof sa;
    std::string path;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 &&
        len > offsetof(sockaddr_un, sun_path) && sa.sun_path[0] != '\0') {
        path.assign(sa.sun_path, ::strnlen(sa.sun_path, len - offsetof(sockaddr_un, sun_path)));
    }
    boost::system::error_code ec;
    acceptor_.assign(stream(), fd, ec);
    if (!ec) {
        acceptor_.non_blocking(true, ec);
    }
    if (ec) {
        boost::system::error_code ignored;
        if (acceptor_.is_open()) {
            acceptor_.close(ignored);
        } else {
            ::close(fd);
        }
        return "cannot use the inherited control socket: " + ec.message();
    }
    path_ = path.empty() ? "(inherited fd " + std::to_string(fd) + ")" : path;
    inode_ = 0;  // never unlinked by stop()
    return std::nullopt;
}

void ControlServer::start() {
    accept();
}

void ControlServer::accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, stream::socket s) {
        if (stopped_ || ec == asio::error::operation_aborted) {
            return;
        }
        if (!ec) {
            // On-demand channels do not count: each is a registration,
            // bounded by kMaxRegistrations, and must not starve sdp-pmctl.
            const auto channels = static_cast<std::size_t>(
                std::count_if(sessions_.begin(), sessions_.end(),
                              [](const auto& x) { return !x->service.empty(); }));
            if (sessions_.size() - channels >= kMaxControlConnections) {
                ++counters_.rejected_connections;
                log::logger().limited(LogLevel::warning, "control_busy", [] {
                    return "control: " + std::to_string(kMaxControlConnections) +
                           " connections open, refusing another";
                });
                boost::system::error_code ignored;
                s.close(ignored);
            } else {
                ++counters_.connections;
                auto session = std::make_shared<Session>(*this, std::move(s));
                sessions_.push_back(session);
                session->start();
            }
        } else {
            log::logger().limited(LogLevel::warning, "control_accept",
                                  [&] { return "control: accept: " + ec.message(); });
        }
        accept();
    });
}

void ControlServer::finished(Session* s) {
    auto it = std::find_if(sessions_.begin(), sessions_.end(),
                           [s](const auto& p) { return p.get() == s; });
    if (it != sessions_.end()) {
        sessions_.erase(it);
    }
}

std::size_t ControlServer::connections() const {
    return sessions_.size();
}

void ControlServer::stop() {
    if (stopped_) {
        return;
    }
    stopped_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    auto sessions = sessions_;
    for (auto& s : sessions) {
        s->close();
    }
    sessions_.clear();
    struct stat st {};
    if (inode_ != 0 && ::stat(path_.c_str(), &st) == 0 && st.st_ino == inode_) {
        ::unlink(path_.c_str());
    }
}

}  // namespace pmd::io
