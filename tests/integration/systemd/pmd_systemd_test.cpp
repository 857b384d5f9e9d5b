// SPDX-License-Identifier: Apache-2.0
// sdp-pmd under a stand-in service manager. The test owns the notification
// socket ($NOTIFY_SOCKET) and the sockets handed over by socket activation
// ($LISTEN_FDS / $LISTEN_PID), then checks what the real daemon does with
// them. No assertion is about speed; every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "integration/daemon/harness.hpp"
#include "pmclient/message.hpp"

namespace {

using namespace std::chrono_literals;
using pmtest::Process;
using pmtest::UdpClient;
namespace fs = std::filesystem;

pm::IpAddress ip(const char* text) {
    return *pm::IpAddress::parse(text);
}

std::vector<std::uint8_t> pm_request(std::uint64_t handle) {
    pm::Message m;
    m.type = pm::MessageType::request;
    m.ap_addr = ip("127.0.0.1");
    m.ipv = m.ap_addr.family();
    m.ap_port = 80;
    m.cp_addr = ip("127.0.0.1");
    m.cp_port = 4000;
    m.assoc_handle = handle;
    auto w = pm::encode(m);
    return {w.begin(), w.end()};
}

bool is_accept(const UdpClient::Datagram& d) {
    auto r = pm::decode(d.bytes);
    const auto* m = std::get_if<pm::Message>(&r);
    return m != nullptr && m->type == pm::MessageType::accept;
}

std::string config_text(std::uint16_t listen_port, const fs::path& dir) {
    return "listen: [\"127.0.0.1:" + std::to_string(listen_port) +
           "\"]\n"
           "log_level: debug\n"
           "state_file: " +
           (dir / "registrations.json").string() +
           "\n"
           "control:\n"
           "  socket: " +
           (dir / "config-control.sock").string() +
           "\n"
           "health: off\n"  // nothing listens on 127.0.0.1:8080
           "services:\n"
           "  - name: web\n"
           "    conventional: \"127.0.0.1:80\"\n"
           "    sdp: [\"127.0.0.1:8080\"]\n"
           "    pm_time: 30s\n";
}

// A UDP socket bound to 127.0.0.1 on a port the kernel picks (so unique).
int bound_udp_socket(std::uint16_t& port) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        ::close(fd);
        return -1;
    }
    port = ntohs(a.sin_port);
    return fd;
}

// A listening Unix stream socket at `path`, as sdp-pmd.socket creates.
int listening_unix_socket(const fs::path& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string p = path.string();
    if (fd < 0 || p.size() >= sizeof a.sun_path) {
        return -1;
    }
    std::memcpy(a.sun_path, p.c_str(), p.size() + 1);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// True when something can bind 127.0.0.1:port right now (nobody holds it).
bool udp_port_free(std::uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) {
        ::close(fd);
    }
    return ok;
}

// One request line on a Unix stream socket; the reply line (bounded wait).
std::optional<std::string> control_request(const fs::path& path, const std::string& line) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string p = path.string();
    if (fd < 0 || p.size() >= sizeof a.sun_path) {
        return std::nullopt;
    }
    std::memcpy(a.sun_path, p.c_str(), p.size() + 1);
    std::optional<std::string> out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size())) {
        std::string got;
        const auto end = std::chrono::steady_clock::now() + 5s;
        while (got.find('\n') == std::string::npos && std::chrono::steady_clock::now() < end) {
            pollfd pf{fd, POLLIN, 0};
            if (::poll(&pf, 1, 100) <= 0) {
                continue;
            }
            char buf[4096];
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) {
                break;
            }
            got.append(buf, static_cast<std::size_t>(n));
        }
        if (got.find('\n') != std::string::npos) {
            out = got;
        }
    }
    ::close(fd);
    return out;
}

// sdp-pmd started the way systemd starts a socket-activated service: the
// given sockets become fds 3, 4, ... and LISTEN_FDS / LISTEN_PID (the
// child's own pid, set after fork) name them.
class ActivatedDaemon {
  public:
    ActivatedDaemon(const std::vector<std::string>& args, const std::vector<int>& fds,
                    const fs::path& out, const fs::path& err) {
        std::vector<char*> argv;
        for (const auto& a : args) {
            argv.push_back(const_cast<char*>(a.c_str()));
        }
        argv.push_back(nullptr);
        const std::string count = std::to_string(fds.size());
        pid_ = ::fork();
        if (pid_ != 0) {
            return;
        }
        // The child: this test runs no other threads, so the environment
        // functions are safe here.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int n = ::open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || n < 0) {
            ::_exit(120);
        }
        ::dup2(n, STDIN_FILENO);
        ::dup2(o, STDOUT_FILENO);
        ::dup2(e, STDERR_FILENO);
        // Out of the way first, so that no source is overwritten by an
        // earlier dup2; dup2 then clears FD_CLOEXEC on the targets.
        std::vector<int> high;
        for (int fd : fds) {
            high.push_back(::fcntl(fd, F_DUPFD_CLOEXEC, 100));
        }
        for (std::size_t i = 0; i < high.size(); ++i) {
            if (high[i] < 0 || ::dup2(high[i], 3 + static_cast<int>(i)) < 0) {
                ::_exit(121);
            }
        }
        ::setenv("LISTEN_FDS", count.c_str(), 1);
        ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
        ::unsetenv("LISTEN_FDNAMES");
        ::unsetenv("NOTIFY_SOCKET");
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ~ActivatedDaemon() {
        if (running()) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }
    ActivatedDaemon(const ActivatedDaemon&) = delete;
    ActivatedDaemon& operator=(const ActivatedDaemon&) = delete;

    bool started() const { return pid_ > 0; }
    bool signal(int sig) const { return running() && ::kill(pid_, sig) == 0; }
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
    std::optional<int> wait_exit(std::chrono::milliseconds timeout = 5000ms) const {
        pmtest::wait_until([this] { return !running(); }, timeout);
        return exit_code_;
    }

  private:
    pid_t pid_ = -1;
    mutable std::optional<int> exit_code_;
};

class SystemdTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(dir_.ok());
        config_ = dir_.path() / "sdp-pmd.yaml";
        log_ = dir_.path() / "stderr.log";
    }
    std::string log() const { return pmtest::read_file(log_); }
    bool wait_log(const std::string& needle, std::size_t count = 1,
                  std::chrono::milliseconds timeout = 5000ms) const {
        return pmtest::wait_until([&] { return pmtest::count_occurrences(log(), needle) >= count; },
                                  timeout);
    }

    pmtest::TempDir dir_;
    fs::path config_;
    fs::path log_;
};

// --- sd_notify ------------------------------------------------------------------

// The next notification containing `needle` (others skipped), bounded.
std::optional<std::string> next_containing(const pmtest::UnixDatagramReceiver& manager,
                                           const std::string& needle,
                                           std::chrono::milliseconds timeout = 5000ms) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            end - std::chrono::steady_clock::now());
        auto msg = manager.receive(std::max(left, 1ms));
        if (msg && msg->find(needle) != std::string::npos) {
            return msg;
        }
    }
    return std::nullopt;
}

TEST_F(SystemdTest, NotifyReadyStatusWatchdogStopping) {
    pmtest::UnixDatagramReceiver manager(dir_.path() / "notify.sock");
    ASSERT_TRUE(manager.ok());
    auto port = pmtest::free_udp_port(false);
    ASSERT_TRUE(port);
    pmtest::write_file(config_, config_text(*port, dir_.path()));
    // WATCHDOG_PID is left out (libsystemd then accepts WATCHDOG_USEC for
    // any pid): posix_spawn cannot set it to the child's pid.
    Process daemon(
        {SDPPM_PMD_BIN, "--config", config_.string()}, dir_.path() / "stdout.log", log_,
        {"NOTIFY_SOCKET=" + (dir_.path() / "notify.sock").string(), "WATCHDOG_USEC=400000"});
    ASSERT_TRUE(daemon.started());

    auto ready = next_containing(manager, "READY=1");
    ASSERT_TRUE(ready) << log();
    EXPECT_NE(ready->find("STATUS=1 services, 0 transactions, 0 requests"), std::string::npos)
        << *ready;
    auto ping = next_containing(manager, "WATCHDOG=1");
    ASSERT_TRUE(ping) << log();
    EXPECT_NE(log().find("watchdog: WATCHDOG=1 every 200 ms"), std::string::npos) << log();

    // Live counts: one request, then STATUS= on reload and periodically.
    UdpClient c(pm::Endpoint{ip("127.0.0.1"), 0});
    ASSERT_TRUE(c.send(pm_request(0x51), pm::Endpoint{ip("127.0.0.1"), *port}));
    auto reply = c.receive(2000ms);
    ASSERT_TRUE(reply) << log();
    EXPECT_TRUE(is_accept(*reply));

    ASSERT_TRUE(daemon.signal(SIGHUP));
    auto reloaded = next_containing(manager, "STATUS=reloaded:");
    ASSERT_TRUE(reloaded) << log();
    EXPECT_NE(reloaded->find("READY=1"), std::string::npos) << *reloaded;
    EXPECT_NE(reloaded->find("1 requests"), std::string::npos) << *reloaded;

    // The periodic refresh (every 10 s when the text changed) drops the
    // "reloaded:" prefix; watchdog pings keep coming meanwhile.
    auto periodic = next_containing(manager, "STATUS=1 services,", 25000ms);
    ASSERT_TRUE(periodic) << log();
    EXPECT_NE(periodic->find("1 requests"), std::string::npos) << *periodic;
    EXPECT_TRUE(next_containing(manager, "WATCHDOG=1")) << log();

    ASSERT_TRUE(daemon.signal(SIGTERM));
    auto stopping = next_containing(manager, "STOPPING=1");
    ASSERT_TRUE(stopping) << log();
    EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
}

TEST_F(SystemdTest, NoWatchdogForAnotherPid) {
    pmtest::UnixDatagramReceiver manager(dir_.path() / "notify.sock");
    ASSERT_TRUE(manager.ok());
    auto port = pmtest::free_udp_port(false);
    ASSERT_TRUE(port);
    pmtest::write_file(config_, config_text(*port, dir_.path()));
    // WATCHDOG_PID names this (test) process: the watchdog is not the daemon's.
    Process daemon({SDPPM_PMD_BIN, "--config", config_.string()}, dir_.path() / "stdout.log", log_,
                   {"NOTIFY_SOCKET=" + (dir_.path() / "notify.sock").string(),
                    "WATCHDOG_USEC=400000", "WATCHDOG_PID=" + std::to_string(::getpid())});
    ASSERT_TRUE(daemon.started());
    ASSERT_TRUE(next_containing(manager, "READY=1")) << log();
    ASSERT_TRUE(daemon.signal(SIGTERM));
    // Everything up to STOPPING=1 arrives in order: no WATCHDOG=1 among it.
    bool stopped = false;
    for (int i = 0; i < 100 && !stopped; ++i) {
        auto msg = manager.receive(5000ms);
        ASSERT_TRUE(msg) << log();
        EXPECT_EQ(msg->find("WATCHDOG=1"), std::string::npos) << *msg;
        stopped = msg->find("STOPPING=1") != std::string::npos;
    }
    EXPECT_TRUE(stopped);
    EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
    EXPECT_EQ(log().find("watchdog:"), std::string::npos) << log();
}

// --- Watchdog with a stuck worker ----------------------------------------------

// The tids of `pid`'s threads named `name` (/proc/<pid>/task/<tid>/comm).
std::vector<pid_t> threads_named(pid_t pid, const std::string& name) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (fs::directory_iterator it(fs::path("/proc") / std::to_string(pid) / "task", ec), end;
         !ec && it != end; it.increment(ec)) {
        std::string comm = pmtest::read_file(it->path() / "comm");
        if (!comm.empty() && comm.back() == '\n') {
            comm.pop_back();
        }
        if (comm == name) {
            out.push_back(static_cast<pid_t>(std::stol(it->path().filename().string())));
        }
    }
    return out;
}

// The state letter of one thread (/proc/<pid>/task/<tid>/stat), '?' if gone.
char thread_state(pid_t pid, pid_t tid) {
    const std::string stat = pmtest::read_file(fs::path("/proc") / std::to_string(pid) / "task" /
                                               std::to_string(tid) / "stat");
    const auto close = stat.rfind(')');  // after the comm, which may hold anything
    return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

// One thread of another process held in a ptrace stop (PTRACE_SEIZE, then
// PTRACE_INTERRUPT): only that thread stops, the rest of its process runs on.
// resume() or the destructor detaches, and the thread carries on where it
// was; should this process die first, the kernel detaches it. Declare it
// after the Process it stops a thread of: a traced thread that exits would
// otherwise keep the process from being reaped.
class ThreadStop {
  public:
    explicit ThreadStop(pid_t tid) : tid_(tid) {
        if (::ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0) {
            error_ = errno;
            return;
        }
        seized_ = true;
        if (::ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) {
            error_ = errno;
            return;
        }
        stopped_ = wait_stop();
    }
    ~ThreadStop() { resume(); }
    ThreadStop(const ThreadStop&) = delete;
    ThreadStop& operator=(const ThreadStop&) = delete;

    bool stopped() const { return stopped_; }
    int error() const { return error_; }

    // Lets the thread run again (PTRACE_DETACH needs it stopped).
    bool resume() {
        if (!seized_) {
            return true;
        }
        if (!stopped_ && ::ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) == 0) {
            stopped_ = wait_stop();
        }
        const bool ok = seized_ && ::ptrace(PTRACE_DETACH, tid_, nullptr, nullptr) == 0;
        if (seized_ && !ok) {
            // Killed meanwhile: the exited thread waits for us, its tracer,
            // and its process cannot be reaped before it is.
            int status = 0;
            pmtest::wait_until([&] { return ::waitpid(tid_, &status, __WALL | WNOHANG) != 0; });
        }
        seized_ = false;
        stopped_ = false;
        return ok;
    }

  private:
    // The ptrace stop, bounded. A thread that exited instead is no longer
    // traced.
    bool wait_stop() {
        int status = 0;
        pid_t r = 0;
        pmtest::wait_until([&] {
            r = ::waitpid(tid_, &status, __WALL | WNOHANG);
            return r != 0;
        });
        if (r == tid_ && WIFSTOPPED(status)) {
            return true;
        }
        if (r == tid_ || r < 0) {
            seized_ = false;
        }
        if (r == 0) {
            error_ = ETIMEDOUT;
        }
        return false;
    }

    pid_t tid_;
    bool seized_ = false;
    bool stopped_ = false;
    int error_ = 0;
};

// Every notification already queued, dropped.
void drain(const pmtest::UnixDatagramReceiver& manager) {
    while (manager.receive(0ms)) {
    }
}

// The "watchdog_withheld" counter in a compact stats reply.
std::optional<std::uint64_t> withheld_in(const std::string& reply) {
    const std::string key = "\"watchdog_withheld\":";
    const auto at = reply.find(key);
    if (at == std::string::npos) {
        return std::nullopt;
    }
    return std::strtoull(reply.c_str() + at + key.size(), nullptr, 10);
}

// A worker that stops turning its loop makes the main thread withhold
// WATCHDOG=1 (so that systemd restarts the daemon), while the main thread
// itself runs on; once the worker runs again, the pings come back. The
// worker is stopped from outside with ptrace, so the daemon has no hook for
// this test.
TEST_F(SystemdTest, WatchdogWithheldWhileAWorkerIsStuck) {
    constexpr auto interval = 200ms;  // half of WATCHDOG_USEC
    pmtest::UnixDatagramReceiver manager(dir_.path() / "notify.sock");
    ASSERT_TRUE(manager.ok());
    auto port = pmtest::free_udp_port(false);
    ASSERT_TRUE(port);
    pmtest::write_file(config_, "workers: 2\n" + config_text(*port, dir_.path()));
    // WATCHDOG_PID is left out, as above.
    Process daemon(
        {SDPPM_PMD_BIN, "--config", config_.string()}, dir_.path() / "stdout.log", log_,
        {"NOTIFY_SOCKET=" + (dir_.path() / "notify.sock").string(), "WATCHDOG_USEC=400000"});
    ASSERT_TRUE(daemon.started());
    ASSERT_TRUE(next_containing(manager, "READY=1")) << log();

    // Both workers answer: the pings keep coming.
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(next_containing(manager, "WATCHDOG=1")) << log();
    }

    // The workers are named threads; worker 1 gets stopped.
    std::vector<pid_t> w0;
    std::vector<pid_t> w1;
    ASSERT_TRUE(pmtest::wait_until([&] {
        w0 = threads_named(daemon.pid(), "sdp-pmd-w0");
        w1 = threads_named(daemon.pid(), "sdp-pmd-w1");
        return w0.size() == 1 && w1.size() == 1;
    })) << "worker threads sdp-pmd-w0 and sdp-pmd-w1 not found in /proc/"
        << daemon.pid() << "/task";
    ASSERT_NE(w1[0], daemon.pid());

    // Declared after `daemon`: resumed before the daemon is killed.
    auto stuck = std::make_unique<ThreadStop>(w1[0]);
    if (stuck->error() == EPERM || stuck->error() == EACCES || stuck->error() == ENOSYS) {
        GTEST_SKIP() << "ptrace is not permitted here: " << std::strerror(stuck->error());
    }
    ASSERT_TRUE(stuck->stopped()) << std::strerror(stuck->error());
    EXPECT_EQ(thread_state(daemon.pid(), w1[0]), 't');
    EXPECT_NE(thread_state(daemon.pid(), daemon.pid()), 't');
    const std::string withheld = "did not answer the watchdog ping; WATCHDOG=1 withheld";
    const std::size_t before = pmtest::count_occurrences(log(), withheld);

    // The ping posted before the stop may still have been answered: grace
    // of two intervals, then the first withheld ping. From that one on,
    // every ping was posted after the stop, so none can be answered: once
    // what was queued before is dropped, no WATCHDOG=1 may arrive at all.
    std::this_thread::sleep_for(2 * interval);
    ASSERT_TRUE(wait_log(withheld, before + 1, 10000ms)) << log();
    EXPECT_NE(log().find("worker 1 " + withheld), std::string::npos) << log();
    drain(manager);
    const auto window_end = std::chrono::steady_clock::now() + 10 * interval;
    int pings = 0;
    for (auto now = std::chrono::steady_clock::now(); now < window_end;
         now = std::chrono::steady_clock::now()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(window_end - now);
        auto msg = manager.receive(std::max(left, 1ms));
        if (msg && msg->find("WATCHDOG=1") != std::string::npos) {
            ++pings;
        }
    }
    EXPECT_EQ(pings, 0) << "WATCHDOG=1 sent while worker 1 was stopped\n" << log();
    ASSERT_TRUE(daemon.running()) << log();
    EXPECT_GE(pmtest::count_occurrences(log(), withheld), before + 2) << log();

    // The worker runs again (its queued pings answered): WATCHDOG=1 is back.
    ASSERT_TRUE(stuck->resume());
    stuck.reset();
    ASSERT_TRUE(next_containing(manager, "WATCHDOG=1", 10000ms)) << log();
    ASSERT_TRUE(next_containing(manager, "WATCHDOG=1", 10000ms)) << log();

    // The withheld pings are counted.
    auto stats = control_request(dir_.path() / "config-control.sock", "{\"command\": \"stats\"}\n");
    ASSERT_TRUE(stats) << log();
    auto count = withheld_in(*stats);
    ASSERT_TRUE(count) << *stats;
    EXPECT_GT(*count, 0u) << *stats;

    ASSERT_TRUE(daemon.signal(SIGTERM));
    EXPECT_TRUE(next_containing(manager, "STOPPING=1")) << log();
    EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
}

// A stuck worker delays only the answers that need it: `stats` waits for it
// (bounded, then reports it unresponsive) while the main loop keeps serving
// other control requests at once.
TEST_F(SystemdTest, StuckWorkerDoesNotBlockOtherControlRequests) {
    auto port = pmtest::free_udp_port(false);
    ASSERT_TRUE(port);
    pmtest::write_file(config_, "workers: 2\n" + config_text(*port, dir_.path()));
    Process daemon({SDPPM_PMD_BIN, "--config", config_.string()}, dir_.path() / "stdout.log", log_);
    ASSERT_TRUE(daemon.started());
    const fs::path control = dir_.path() / "config-control.sock";
    ASSERT_TRUE(pmtest::wait_until([&] { return fs::exists(control); })) << log();
    ASSERT_TRUE(wait_log("ready:")) << log();

    std::vector<pid_t> w1;
    ASSERT_TRUE(pmtest::wait_until([&] {
        w1 = threads_named(daemon.pid(), "sdp-pmd-w1");
        return w1.size() == 1;
    })) << log();
    auto stuck = std::make_unique<ThreadStop>(w1[0]);
    if (stuck->error() == EPERM || stuck->error() == EACCES || stuck->error() == ENOSYS) {
        GTEST_SKIP() << "ptrace is not permitted here: " << std::strerror(stuck->error());
    }
    ASSERT_TRUE(stuck->stopped()) << std::strerror(stuck->error());

    // `stats` asks both workers: it waits for worker 1 up to the reply timeout.
    const auto asked = std::chrono::steady_clock::now();
    auto stats = std::async(std::launch::async,
                            [&] { return control_request(control, "{\"command\": \"stats\"}\n"); });
    std::this_thread::sleep_for(100ms);  // let the daemon take `stats` first
    const auto before = std::chrono::steady_clock::now();
    auto version = control_request(control, "{\"command\": \"version\"}\n");
    const auto version_took = std::chrono::steady_clock::now() - before;
    ASSERT_TRUE(version) << log();
    EXPECT_NE(version->find("\"result\":0"), std::string::npos) << *version;
    EXPECT_LT(version_took, 500ms) << "version waited for the stuck worker\n" << log();

    auto stats_reply = stats.get();
    const auto stats_took = std::chrono::steady_clock::now() - asked;
    ASSERT_TRUE(stats_reply) << log();
    EXPECT_NE(stats_reply->find("\"workers_unresponsive\":1.0"), std::string::npos) << *stats_reply;
    EXPECT_GE(stats_took, 900ms);
    EXPECT_NE(log().find("worker 1 did not answer within"), std::string::npos) << log();

    ASSERT_TRUE(stuck->resume());
    stuck.reset();
    ASSERT_TRUE(daemon.signal(SIGTERM));
    EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
}

// --- Socket activation ------------------------------------------------------------

TEST_F(SystemdTest, InheritedSocketsReplaceConfiguredOnes) {
    std::uint16_t inherited_port = 0;
    int udp = bound_udp_socket(inherited_port);
    ASSERT_GE(udp, 0);
    const fs::path control = dir_.path() / "activated-control.sock";
    int unix_fd = listening_unix_socket(control);
    ASSERT_GE(unix_fd, 0);
    auto config_port = pmtest::free_udp_port(false);
    ASSERT_TRUE(config_port);
    ASSERT_NE(*config_port, inherited_port);
    pmtest::write_file(config_, config_text(*config_port, dir_.path()));

    ActivatedDaemon daemon({SDPPM_PMD_BIN, "--config", config_.string()}, {udp, unix_fd},
                           dir_.path() / "stdout.log", log_);
    ::close(udp);  // the daemon holds its copies
    ::close(unix_fd);
    ASSERT_TRUE(daemon.started());
    ASSERT_TRUE(pmtest::wait_until([&] {
        return !daemon.running() || log().find("ready") != std::string::npos;
    })) << log();
    ASSERT_TRUE(daemon.running()) << log();

    const std::string where = "127.0.0.1:" + std::to_string(inherited_port);
    EXPECT_NE(log().find("listening on UDP " + where + " (inherited)"), std::string::npos) << log();
    EXPECT_NE(log().find("is ignored"), std::string::npos) << log();

    // Answered through the inherited socket, from its address (7.4).
    UdpClient c(pm::Endpoint{ip("127.0.0.1"), 0});
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send(pm_request(0x61), pm::Endpoint{ip("127.0.0.1"), inherited_port}));
    auto reply = c.receive(2000ms);
    ASSERT_TRUE(reply) << log();
    EXPECT_TRUE(is_accept(*reply));
    EXPECT_EQ(reply->source, (pm::Endpoint{ip("127.0.0.1"), inherited_port}));

    // The configured port was never bound, nor the configured control socket.
    EXPECT_TRUE(udp_port_free(*config_port));
    EXPECT_FALSE(fs::exists(dir_.path() / "config-control.sock"));

    // The inherited control socket answers.
    auto status = control_request(control, "{\"command\": \"status\"}\n");
    ASSERT_TRUE(status) << log();
    EXPECT_NE(status->find("\"result\":0"), std::string::npos) << *status;
    EXPECT_NE(status->find(where), std::string::npos) << *status;

    // A reload naming yet another port does not rebind the inherited socket.
    auto other = pmtest::free_udp_port(false);
    ASSERT_TRUE(other);
    pmtest::write_file(config_, config_text(*other, dir_.path()));
    ASSERT_TRUE(daemon.signal(SIGHUP));
    ASSERT_TRUE(wait_log("reloaded configuration")) << log();
    EXPECT_NE(log().find("reload: listen: ignored"), std::string::npos) << log();
    ASSERT_TRUE(c.send(pm_request(0x62), pm::Endpoint{ip("127.0.0.1"), inherited_port}));
    auto again = c.receive(2000ms);
    ASSERT_TRUE(again) << log();
    EXPECT_TRUE(is_accept(*again));
    EXPECT_TRUE(udp_port_free(*other));

    ASSERT_TRUE(daemon.signal(SIGTERM));
    EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
    // The socket file belongs to the socket unit: left in place.
    EXPECT_TRUE(fs::exists(control));
}

TEST_F(SystemdTest, WithoutListenFdsBindsTheConfiguration) {
    // LISTEN_FDS naming another process is not for us (sd_listen_fds checks
    // LISTEN_PID): the daemon binds `listen:` as usual.
    auto port = pmtest::free_udp_port(false);
    ASSERT_TRUE(port);
    pmtest::write_file(config_, config_text(*port, dir_.path()));
    Process daemon({SDPPM_PMD_BIN, "--config", config_.string()}, dir_.path() / "stdout.log", log_,
                   {"LISTEN_FDS=1", "LISTEN_PID=" + std::to_string(::getpid())});
    ASSERT_TRUE(daemon.started());
    ASSERT_TRUE(pmtest::wait_until([&] {
        return !daemon.running() || log().find("ready") != std::string::npos;
    })) << log();
    ASSERT_TRUE(daemon.running()) << log();
    EXPECT_EQ(log().find("inherited"), std::string::npos) << log();
    UdpClient c(pm::Endpoint{ip("127.0.0.1"), 0});
    ASSERT_TRUE(c.send(pm_request(0x71), pm::Endpoint{ip("127.0.0.1"), *port}));
    auto reply = c.receive(2000ms);
    ASSERT_TRUE(reply) << log();
    EXPECT_TRUE(is_accept(*reply));
    ASSERT_TRUE(daemon.signal(SIGTERM));
    EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
}

std::optional<std::string> find_in_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        auto end = dirs.find(':', start);
        if (end == std::string::npos) {
            end = dirs.size();
        }
        fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate.string();
        }
        start = end + 1;
    }
    return std::nullopt;
}

TEST_F(SystemdTest, SystemdSocketActivateDatagram) {
    auto tool = find_in_path("systemd-socket-activate");
    if (!tool) {
        GTEST_SKIP() << "systemd-socket-activate is not installed";
    }
    for (int attempt = 0; attempt < 5; ++attempt) {
        auto port = pmtest::free_udp_port(false);
        ASSERT_TRUE(port);
        auto config_port = pmtest::free_udp_port(false);
        ASSERT_TRUE(config_port);
        if (*config_port == *port) {
            continue;
        }
        pmtest::write_file(config_, config_text(*config_port, dir_.path()));
        const std::string where = "127.0.0.1:" + std::to_string(*port);
        // It binds, waits for the first datagram, then (without --accept)
        // execs the daemon in its own process: the datagram stays queued on
        // the socket for the daemon to answer, as with sdp-pmd.socket.
        Process daemon(
            {*tool, "--datagram", "-l", where, SDPPM_PMD_BIN, "--config", config_.string()},
            dir_.path() / "stdout.log", log_);
        ASSERT_TRUE(daemon.started());
        ASSERT_TRUE(pmtest::wait_until([&] {
            return !daemon.running() || log().find("Listening on") != std::string::npos;
        })) << log();
        if (!daemon.running()) {
            continue;  // the port was taken meanwhile: another one
        }
        UdpClient c(pm::Endpoint{ip("127.0.0.1"), 0});
        ASSERT_TRUE(c.send(pm_request(0x81), pm::Endpoint{ip("127.0.0.1"), *port}));
        auto reply = c.receive(5000ms);
        ASSERT_TRUE(reply) << log();
        EXPECT_TRUE(is_accept(*reply));
        EXPECT_EQ(reply->source, (pm::Endpoint{ip("127.0.0.1"), *port}));
        EXPECT_NE(log().find("listening on UDP " + where + " (inherited)"), std::string::npos)
            << log();
        EXPECT_TRUE(udp_port_free(*config_port));
        ASSERT_TRUE(daemon.signal(SIGTERM));
        EXPECT_EQ(daemon.wait_exit(5000ms), std::optional<int>(0)) << log();
        return;
    }
    FAIL() << "no free port after 5 attempts";
}

}  // namespace
