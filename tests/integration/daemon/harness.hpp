// SPDX-License-Identifier: Apache-2.0
// Helpers for tests that start real programs and talk to them over real
// loopback sockets: temporary directories, child processes with captured
// output, free ports and a raw UDP client. Every wait is bounded.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"

extern char** environ;

namespace pmtest {

using pm::from_sockaddr;
using pm::to_sockaddr;

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Polls pred every few milliseconds until it holds or `timeout` passes.
inline bool wait_until(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = 5000ms) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (true) {
        if (pred()) {
            return true;
        }
        if (std::chrono::steady_clock::now() >= end) {
            return false;
        }
        std::this_thread::sleep_for(5ms);
    }
}

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
  public:
    TempDir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sdppm-test-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) != nullptr) {
            path_ = buf.data();
        }
    }
    ~TempDir() {
        std::error_code ec;
        if (!path_.empty()) {
            fs::remove_all(path_, ec);
        }
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const fs::path& path() const { return path_; }
    bool ok() const { return !path_.empty(); }

  private:
    fs::path path_;
};

// Writes through a temporary file and a rename, so a reader (the daemon on
// SIGHUP) never sees a half-written file.
inline void write_file(const fs::path& p, const std::string& text) {
    fs::path tmp = p;
    tmp += ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
    }
    fs::rename(tmp, p);
}

inline std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::size_t count_occurrences(const std::string& hay, const std::string& needle) {
    std::size_t n = 0;
    for (auto pos = hay.find(needle); pos != std::string::npos;
         pos = hay.find(needle, pos + needle.size())) {
        ++n;
    }
    return n;
}

// A child process with stdout and stderr redirected to files. The destructor
// kills and reaps a child that is still running.
class Process {
  public:
    // `env` entries ("NAME=value") are added to this process's environment.
    Process(const std::vector<std::string>& args, const fs::path& out, const fs::path& err,
            const std::vector<std::string>& env = {}) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
        // The child starts with default dispositions and nothing blocked.
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t none;
        sigemptyset(&none);
        sigset_t all;
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        std::vector<char*> argv;
        for (const auto& a : args) {
            argv.push_back(const_cast<char*>(a.c_str()));
        }
        argv.push_back(nullptr);
        std::vector<char*> envp;
        for (char** e = environ; *e != nullptr; ++e) {
            envp.push_back(*e);
        }
        for (const auto& e : env) {
            envp.push_back(const_cast<char*>(e.c_str()));
        }
        envp.push_back(nullptr);
        if (posix_spawn(&pid_, argv[0], &fa, &attr, argv.data(), envp.data()) != 0) {
            pid_ = -1;
        }
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
    }
    ~Process() {
        if (running()) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }
    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;

    bool started() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    bool signal(int sig) const { return running() && ::kill(pid_, sig) == 0; }

    // True until the child has been reaped.
    bool running() const {
        if (pid_ <= 0 || exit_code_) {
            return false;
        }
        int status = 0;
        pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
            exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            return false;
        }
        return r == 0;
    }
    // The exit status (128 + signal when killed), or nullopt if still running
    // after `timeout`.
    std::optional<int> wait_exit(std::chrono::milliseconds timeout = 5000ms) const {
        wait_until([this] { return !running(); }, timeout);
        return exit_code_;
    }
    std::optional<int> exit_code() const {
        running();
        return exit_code_;
    }

  private:
    pid_t pid_ = -1;
    mutable std::optional<int> exit_code_;
};

struct RunResult {
    std::optional<int> exit_code;  // nullopt: did not finish in time (killed)
    std::string out;
    std::string err;
};

// Runs a program to completion (bounded), capturing stdout and stderr.
inline RunResult run(const std::vector<std::string>& args, const fs::path& dir,
                     std::chrono::milliseconds timeout = 5000ms) {
    static int seq = 0;
    const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(seq++);
    const fs::path out = dir / ("run-" + tag + ".out");
    const fs::path err = dir / ("run-" + tag + ".err");
    RunResult r;
    {
        Process p(args, out, err);
        r.exit_code = p.wait_exit(timeout);
    }
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
}

// A UDP port that was free on every given address a moment ago (bind port 0,
// read it, close). Another process may still take it before the caller binds
// it; callers retry with a new port when their bind fails.
inline std::optional<std::uint16_t> free_udp_port(bool with_v6) {
    for (int attempt = 0; attempt < 20; ++attempt) {
        int fd4 = ::socket(AF_INET, SOCK_DGRAM, 0);
        if (fd4 < 0) {
            return std::nullopt;
        }
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        socklen_t len = sizeof a;
        if (::bind(fd4, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::getsockname(fd4, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
            ::close(fd4);
            return std::nullopt;
        }
        const std::uint16_t port = ntohs(a.sin_port);
        bool ok = true;
        if (with_v6) {
            int fd6 = ::socket(AF_INET6, SOCK_DGRAM, 0);
            int on = 1;
            ::setsockopt(fd6, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
            sockaddr_in6 a6{};
            a6.sin6_family = AF_INET6;
            a6.sin6_addr = in6addr_any;
            a6.sin6_port = htons(port);
            ok = fd6 >= 0 && ::bind(fd6, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0;
            if (fd6 >= 0) {
                ::close(fd6);
            }
        }
        ::close(fd4);
        if (ok) {
            return port;
        }
    }
    return std::nullopt;
}

inline bool ipv6_loopback_available() {
    int fd = ::socket(AF_INET6, SOCK_DGRAM, 0);
    if (fd < 0) {
        return false;
    }
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

// A plain TCP listener on `local` (port 0: an ephemeral one), standing in
// for an SDP listener whose health sdp-pmd checks. close() stops listening;
// open() listens again on the same port (SO_REUSEADDR). It never accepts:
// connect checks' connections wait in its backlog (SOMAXCONN of them).
class TcpListener {
  public:
    explicit TcpListener(const pm::Endpoint& local) : local_(local) { open(); }
    ~TcpListener() { close(); }
    TcpListener(const TcpListener&) = delete;
    TcpListener& operator=(const TcpListener&) = delete;

    bool open() {
        close();
        sockaddr_storage ss{};
        socklen_t len = to_sockaddr(local_, ss);
        fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0) {
            return false;
        }
        int on = 1;
        ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
            ::listen(fd_, SOMAXCONN) != 0 ||
            ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
            close();
            return false;
        }
        local_ = from_sockaddr(ss);
        return true;
    }
    void close() {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    bool ok() const { return fd_ >= 0; }
    std::uint16_t port() const { return local_.port; }

  private:
    pm::Endpoint local_;
    int fd_ = -1;
};

// A UDP socket bound to `local` (port 0: any) that sends raw bytes and
// receives with a bounded wait, reporting where each reply came from.
// Starts `bin --config DIR/pmd.yaml` on a loopback port that was free, with
// the config `config_for(port)` returns, and waits (bounded) for its "ready"
// line; another port is tried when the bind raced with someone else. Returns
// the running process and sets `port`, or nullptr after five attempts. The
// daemon's stderr is DIR/pmd.err.
inline std::unique_ptr<Process> start_pmd(
    const std::string& bin, const fs::path& dir,
    const std::function<std::string(std::uint16_t)>& config_for, std::uint16_t& port) {
    for (int attempt = 0; attempt < 5; ++attempt) {
        auto free = free_udp_port(false);
        if (!free) {
            return nullptr;
        }
        write_file(dir / "pmd.yaml", config_for(*free));
        auto daemon = std::make_unique<Process>(
            std::vector<std::string>{bin, "--config", (dir / "pmd.yaml").string()}, dir / "pmd.out",
            dir / "pmd.err");
        if (!daemon->started()) {
            return nullptr;
        }
        if (wait_until([&] {
                return read_file(dir / "pmd.err").find("ready") != std::string::npos ||
                       !daemon->running();
            }) &&
            daemon->running()) {
            port = *free;
            return daemon;
        }
    }
    return nullptr;
}

class UdpClient {
  public:
    struct Datagram {
        std::vector<std::uint8_t> bytes;
        pm::Endpoint source;
    };

    explicit UdpClient(const pm::Endpoint& local) {
        fd_ = ::socket(local.address.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0) {
            return;
        }
        sockaddr_storage ss;
        socklen_t len = to_sockaddr(local, ss);
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
            ::close(fd_);
            fd_ = -1;
            return;
        }
        len = sizeof ss;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
        local_ = from_sockaddr(ss);
    }
    ~UdpClient() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    UdpClient(const UdpClient&) = delete;
    UdpClient& operator=(const UdpClient&) = delete;

    bool ok() const { return fd_ >= 0; }
    const pm::Endpoint& local() const { return local_; }

    bool send(std::span<const std::uint8_t> bytes, const pm::Endpoint& to) const {
        sockaddr_storage ss;
        socklen_t len = to_sockaddr(to, ss);
        return ::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&ss),
                        len) == static_cast<ssize_t>(bytes.size());
    }

    std::optional<Datagram> receive(std::chrono::milliseconds timeout = 2000ms) const {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
            return std::nullopt;
        }
        Datagram d;
        d.bytes.resize(4096);
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        ssize_t n = ::recvfrom(fd_, d.bytes.data(), d.bytes.size(), MSG_DONTWAIT,
                               reinterpret_cast<sockaddr*>(&ss), &len);
        if (n < 0) {
            return std::nullopt;
        }
        d.bytes.resize(static_cast<std::size_t>(n));
        d.source = from_sockaddr(ss);
        return d;
    }

  private:
    int fd_ = -1;
    pm::Endpoint local_;
};

// An AF_UNIX datagram socket at `path`, standing in for the service
// manager's $NOTIFY_SOCKET.
class UnixDatagramReceiver {
  public:
    explicit UnixDatagramReceiver(const fs::path& path) : path_(path) {
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        const std::string p = path.string();
        if (fd_ < 0 || p.size() >= sizeof a.sun_path) {
            return;
        }
        std::memcpy(a.sun_path, p.c_str(), p.size() + 1);
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    ~UnixDatagramReceiver() {
        if (fd_ >= 0) {
            ::close(fd_);
            std::error_code ec;
            fs::remove(path_, ec);
        }
    }
    UnixDatagramReceiver(const UnixDatagramReceiver&) = delete;
    UnixDatagramReceiver& operator=(const UnixDatagramReceiver&) = delete;

    bool ok() const { return fd_ >= 0; }
    std::optional<std::string> receive(std::chrono::milliseconds timeout = 5000ms) const {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
            return std::nullopt;
        }
        char buf[4096];
        ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
            return std::nullopt;
        }
        return std::string(buf, static_cast<std::size_t>(n));
    }

  private:
    fs::path path_;
    int fd_ = -1;
};

}  // namespace pmtest

// Readable gtest failure messages for the address types.
namespace pm {
inline void PrintTo(const IpAddress& a, std::ostream* os) {
    *os << a.to_string();
}
inline void PrintTo(const Endpoint& e, std::ostream* os) {
    *os << e.to_string();
}
}  // namespace pm
