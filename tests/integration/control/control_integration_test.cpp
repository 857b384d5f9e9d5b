// SPDX-License-Identifier: Apache-2.0
// The control plane with real processes: sdp-pmd with its control socket,
// state file and metrics endpoint in a temporary directory, driven by the
// real sdp-pmctl. No assertion is about speed; every wait is bounded.
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "integration/daemon/harness.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using pmtest::Process;
namespace fs = std::filesystem;

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

std::optional<std::uint16_t> free_tcp_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    std::optional<std::uint16_t> port;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        ::close(fd);
    }
    return port;
}

// A raw stream connection (Unix or TCP) with bounded reads.
class RawStream {
  public:
    explicit RawStream(const fs::path& unix_path) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, unix_path.c_str(), sizeof a.sun_path - 1);
        if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    explicit RawStream(std::uint16_t tcp_port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(tcp_port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    ~RawStream() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    bool ok() const { return fd_ >= 0; }
    bool send(const std::string& s) {
        std::size_t off = 0;
        while (off < s.size()) {
            ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) {
                return false;
            }
            off += static_cast<std::size_t>(n);
        }
        return true;
    }
    void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
    // Reads until a newline (or EOF/timeout); returns what came.
    std::string line(std::chrono::milliseconds timeout = 5000ms) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (buffer_.find('\n') == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                end - std::chrono::steady_clock::now());
            if (left.count() <= 0 || !read_some(left)) {
                break;
            }
        }
        auto nl = buffer_.find('\n');
        std::string out = buffer_.substr(0, nl == std::string::npos ? buffer_.size() : nl);
        buffer_.erase(0, nl == std::string::npos ? buffer_.size() : nl + 1);
        return out;
    }
    // Everything until the peer closes (bounded).
    std::string all(std::chrono::milliseconds timeout = 5000ms) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                end - std::chrono::steady_clock::now());
            if (left.count() <= 0 || !read_some(left)) {
                break;
            }
        }
        return std::exchange(buffer_, {});
    }
    // True when the peer closed the connection within the timeout.
    bool closed_by_peer(std::chrono::milliseconds timeout = 5000ms) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < end) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 100) > 0) {
                char c[4096];
                ssize_t n = ::recv(fd_, c, sizeof c, 0);
                if (n <= 0) {
                    return true;
                }
            }
        }
        return false;
    }

  private:
    bool read_some(std::chrono::milliseconds timeout) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
            return false;
        }
        char buf[65536];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) {
            return false;
        }
        buffer_.append(buf, static_cast<std::size_t>(n));
        return true;
    }
    int fd_ = -1;
    std::string buffer_;
};

const std::string kConfig = R"(listen: ["127.0.0.1:{PORT}"]
log_level: debug
control:
  socket: "{DIR}/control.sock"
  {GROUPS}
state_file: "{DIR}/state/registrations.json"
{METRICS}
{HEALTH}
services:
  - name: web
    conventional: "127.0.0.1:80"
    sdp: ["127.0.0.1:8080"]
)";

class Control : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(dir_.ok());
        // Other users (the "nobody" tests) must reach the socket.
        ::chmod(dir_.path().c_str(), 0755);
        config_ = dir_.path() / "sdp-pmd.yaml";
        log_ = dir_.path() / "stderr.log";
        socket_ = dir_.path() / "control.sock";
        state_ = dir_.path() / "state" / "registrations.json";
    }
    void TearDown() override {
        if (daemon_ && daemon_->running()) {
            EXPECT_TRUE(daemon_->signal(SIGTERM));
            EXPECT_EQ(daemon_->wait_exit(5000ms), std::optional<int>(0)) << log();
        }
    }

    std::string log() const { return pmtest::read_file(log_); }

    // Starts (or restarts, same port) sdp-pmd and waits for "ready".
    void start() {
        for (int attempt = 0; attempt < 5; ++attempt) {
            if (port_ == 0 || attempt > 0) {
                auto port = pmtest::free_udp_port(false);
                ASSERT_TRUE(port.has_value());
                port_ = *port;
                if (with_metrics_) {
                    auto m = free_tcp_port();
                    ASSERT_TRUE(m.has_value());
                    metrics_port_ = *m;
                }
            }
            std::string yaml = replace_all(kConfig, "{PORT}", std::to_string(port_));
            yaml = replace_all(yaml, "{DIR}", dir_.path().string());
            yaml = replace_all(yaml, "{GROUPS}", groups_);
            yaml = replace_all(yaml, "{METRICS}",
                               with_metrics_
                                   ? "metrics: \"127.0.0.1:" + std::to_string(metrics_port_) + "\""
                                   : "");
            yaml = replace_all(yaml, "{HEALTH}", "health: " + health_);
            pmtest::write_file(config_, yaml);
            const auto before = pmtest::count_occurrences(log(), "ready");
            daemon_.reset();
            // Appends: the log of an earlier run stays readable.
            const fs::path run_log = dir_.path() / ("run" + std::to_string(runs_++) + ".log");
            daemon_ = std::make_unique<Process>(
                std::vector<std::string>{SDPPM_PMD_BIN, "--config", config_.string()},
                dir_.path() / "stdout.log", run_log);
            ASSERT_TRUE(daemon_->started());
            current_log_ = run_log;
            bool settled = pmtest::wait_until([&] {
                return !daemon_->running() ||
                       pmtest::read_file(run_log).find("ready") != std::string::npos;
            });
            (void)before;
            append_log(run_log);
            ASSERT_TRUE(settled) << log();
            if (daemon_->running()) {
                return;
            }
            ASSERT_TRUE(log().find("cannot bind") != std::string::npos ||
                        log().find("cannot listen on TCP") != std::string::npos)
                << log();
        }
        FAIL() << "no free port after 5 attempts";
    }

    void append_log(const fs::path& run_log) {
        // log() reads log_; keep it the concatenation of every run so far.
        std::string all;
        for (int i = 0; i < runs_; ++i) {
            all += pmtest::read_file(dir_.path() / ("run" + std::to_string(i) + ".log"));
        }
        (void)run_log;
        std::ofstream(log_, std::ios::trunc) << all;
    }
    std::string full_log() {
        append_log(current_log_);
        return log();
    }

    void stop(int sig) {
        ASSERT_TRUE(daemon_->signal(sig));
        auto code = daemon_->wait_exit(5000ms);
        ASSERT_TRUE(code.has_value());
        if (sig == SIGTERM) {
            EXPECT_EQ(*code, 0) << full_log();
        }
    }

    pmtest::RunResult ctl(std::vector<std::string> args,
                          const std::vector<std::string>& prefix = {}) {
        std::vector<std::string> argv = prefix;
        argv.push_back(SDPPM_PMCTL_BIN);
        argv.push_back("--socket");
        argv.push_back(socket_.string());
        argv.insert(argv.end(), args.begin(), args.end());
        return pmtest::run(argv, dir_.path(), 15000ms);
    }

    json ctl_json(std::vector<std::string> args) {
        args.insert(args.begin(), "--json");
        auto r = ctl(args);
        EXPECT_EQ(r.exit_code, std::optional<int>(0)) << r.err;
        json j = json::parse(r.out, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << r.out;
        return j;
    }

    std::vector<std::string> service_names() {
        json j = ctl_json({"services"});
        std::vector<std::string> out;
        if (j.contains("arguments")) {
            for (const auto& s : j["arguments"]["services"]) {
                out.push_back(s["name"].get<std::string>());
            }
        }
        return out;
    }
    bool has_service(const std::string& name) {
        auto names = service_names();
        return std::find(names.begin(), names.end(), name) != names.end();
    }

    pmtest::RunResult query(const std::string& conventional) {
        return pmtest::run({SDPPM_PMCTL_BIN, "query", "127.0.0.1:" + std::to_string(port_),
                            "--service", conventional, "--timeout", "3s"},
                           dir_.path(), 15000ms);
    }

    // The daemon still answers PM requests.
    void expect_udp_served() {
        auto r = query("127.0.0.1:80");
        EXPECT_EQ(r.exit_code, std::optional<int>(0)) << r.out << r.err << full_log();
        EXPECT_NE(r.out.find("SDP address:  127.0.0.1:8080"), std::string::npos) << r.out;
    }

    pmtest::TempDir dir_;
    fs::path config_, log_, socket_, state_, current_log_;
    std::uint16_t port_ = 0;
    std::uint16_t metrics_port_ = 0;
    bool with_metrics_ = false;
    std::string groups_;
    // Nothing listens on the SDP addresses of these tests: checks off unless
    // a test is about them.
    std::string health_ = "off";
    int runs_ = 0;
    std::unique_ptr<Process> daemon_;
};

TEST_F(Control, RegisterThenQueryAcceptsAndUnregisterDenies) {
    ASSERT_NO_FATAL_FAILURE(start());
    auto reg = ctl({"register", "demo", "127.0.0.1:7000", "127.0.0.1:7001", "--pm-time", "30s",
                    "--owner", "test"});
    ASSERT_EQ(reg.exit_code, std::optional<int>(0)) << reg.err << full_log();

    auto q = query("127.0.0.1:7000");
    EXPECT_EQ(q.exit_code, std::optional<int>(0)) << q.out << q.err;
    EXPECT_NE(q.out.find("PMAccept"), std::string::npos) << q.out;
    EXPECT_NE(q.out.find("SDP address:  127.0.0.1:7001"), std::string::npos) << q.out;
    EXPECT_NE(q.out.find("PmTime:       120"), std::string::npos) << q.out;
    EXPECT_NE(q.out.find("Query time:"), std::string::npos) << q.out;

    json services = ctl_json({"services"});
    bool found = false;
    for (const auto& s : services["arguments"]["services"]) {
        if (s["name"] == "demo") {
            found = true;
            EXPECT_EQ(s["dynamic"], true);
            EXPECT_EQ(s["owner"], "test");
            EXPECT_EQ(s["sdp"], json::array({"127.0.0.1:7001"}));
            // The query above was answered by this service.
            EXPECT_EQ(s["counters"]["accepted"], 1) << s.dump();
            EXPECT_EQ(s["counters"]["denied"], 0) << s.dump();
        }
    }
    EXPECT_TRUE(found) << services.dump();

    auto un = ctl({"unregister", "demo"});
    ASSERT_EQ(un.exit_code, std::optional<int>(0)) << un.err;
    q = query("127.0.0.1:7000");
    EXPECT_EQ(q.exit_code, std::optional<int>(1)) << q.out << q.err;
    EXPECT_NE(q.out.find("PMDeny"), std::string::npos) << q.out;

    // Not found, conflict, bad arguments: result codes map to exit 1.
    auto missing = ctl({"unregister", "demo"});
    EXPECT_EQ(missing.exit_code, std::optional<int>(1));
    EXPECT_NE(missing.err.find("no dynamic service"), std::string::npos) << missing.err;
    auto clash = ctl({"register", "other", "127.0.0.1:80", "127.0.0.1:9"});
    EXPECT_EQ(clash.exit_code, std::optional<int>(1));
    EXPECT_NE(clash.err.find("conflict"), std::string::npos) << clash.err;
    auto bad = ctl({"register", "x", "127.0.0.1:81", "not-an-address"});
    EXPECT_EQ(bad.exit_code, std::optional<int>(1));
    EXPECT_NE(bad.err.find("sdp[0]: bad address"), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

TEST_F(Control, RegistrationsSurviveSigtermAndSigkill) {
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_EQ(ctl({"register", "a", "127.0.0.1:7000", "127.0.0.1:7001"}).exit_code,
              std::optional<int>(0));
    ASSERT_EQ(
        ctl({"register", "b", "*:7100", "*:7101", "--lease", "1h", "--policy", "hash"}).exit_code,
        std::optional<int>(0));
    ASSERT_NO_FATAL_FAILURE(stop(SIGTERM));
    ASSERT_NO_FATAL_FAILURE(start());
    EXPECT_TRUE(has_service("a")) << full_log();
    EXPECT_TRUE(has_service("b"));
    ASSERT_NO_FATAL_FAILURE(stop(SIGKILL));
    ASSERT_NO_FATAL_FAILURE(start());
    EXPECT_TRUE(has_service("a")) << full_log();
    EXPECT_TRUE(has_service("b"));
    auto q = query("127.0.0.1:7100");
    EXPECT_EQ(q.exit_code, std::optional<int>(0)) << q.out << q.err;
    EXPECT_NE(q.out.find("127.0.0.1:7101"), std::string::npos) << q.out;
    // The lease survived too.
    json services = ctl_json({"services"});
    for (const auto& s : services["arguments"]["services"]) {
        if (s["name"] == "b") {
            EXPECT_TRUE(s["lease_expires_in"].is_number()) << s.dump();
        }
    }
}

TEST_F(Control, CorruptStateFileIsMovedAsideAndReported) {
    fs::create_directories(state_.parent_path());
    const std::string torn = R"({"version": 1, "registrations": [{"name": "a", "conven)";
    pmtest::write_file(state_, torn);
    ASSERT_NO_FATAL_FAILURE(start());
    const std::string text = full_log();
    EXPECT_NE(text.find("is corrupt"), std::string::npos) << text;
    EXPECT_NE(text.find("<3>"), std::string::npos) << text;
    bool kept = false;
    for (const auto& e : fs::directory_iterator(state_.parent_path())) {
        if (e.path().filename().string().rfind("registrations.json.corrupt-", 0) == 0) {
            kept = pmtest::read_file(e.path()) == torn;
        }
    }
    EXPECT_TRUE(kept) << "the corrupt copy must be kept byte for byte";
    EXPECT_EQ(service_names(), std::vector<std::string>{"web"});
    expect_udp_served();
    // The next change writes a good file.
    ASSERT_EQ(ctl({"register", "a", "127.0.0.1:7000", "127.0.0.1:7001"}).exit_code,
              std::optional<int>(0));
    json state = json::parse(pmtest::read_file(state_), nullptr, false);
    ASSERT_FALSE(state.is_discarded());
    EXPECT_EQ(state["registrations"].size(), 1u);
}

TEST_F(Control, LeaseExpiresUnlessRenewed) {
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_EQ(
        ctl({"register", "short", "127.0.0.1:7200", "127.0.0.1:7201", "--lease", "1s"}).exit_code,
        std::optional<int>(0));
    ASSERT_EQ(ctl({"register", "forever", "127.0.0.1:7300", "127.0.0.1:7301"}).exit_code,
              std::optional<int>(0));
    EXPECT_TRUE(pmtest::wait_until([&] { return !has_service("short"); }, 15000ms)) << full_log();
    EXPECT_TRUE(has_service("forever"));
    EXPECT_NE(full_log().find("lease expired"), std::string::npos);
    auto q = query("127.0.0.1:7200");
    EXPECT_EQ(q.exit_code, std::optional<int>(1)) << q.out;
    json state = json::parse(pmtest::read_file(state_), nullptr, false);
    ASSERT_FALSE(state.is_discarded());
    EXPECT_EQ(state["registrations"].size(), 1u);
}

TEST_F(Control, ReloadKeepsDynamicRegistrations) {
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_EQ(ctl({"register", "dyn", "127.0.0.1:7400", "127.0.0.1:7401"}).exit_code,
              std::optional<int>(0));
    auto r = ctl({"reload"});
    EXPECT_EQ(r.exit_code, std::optional<int>(0)) << r.err;
    EXPECT_TRUE(has_service("dyn"));
    EXPECT_TRUE(has_service("web"));
    auto q = query("127.0.0.1:7400");
    EXPECT_EQ(q.exit_code, std::optional<int>(0)) << q.out;
}

TEST_F(Control, UnauthorizedCallerIsRefused) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root to run the CLI as nobody";
    }
    ASSERT_NO_FATAL_FAILURE(start());
    const std::vector<std::string> nobody = {"/usr/bin/setpriv", "--reuid=nobody",
                                             "--regid=nogroup", "--clear-groups"};
    for (const auto& cmd :
         {std::vector<std::string>{"services"},
          std::vector<std::string>{"register", "x", "127.0.0.1:7500", "127.0.0.1:7501"}}) {
        auto r = ctl(cmd, nobody);
        EXPECT_EQ(r.exit_code, std::optional<int>(4)) << r.out << r.err;
        EXPECT_NE(r.err.find("permission denied"), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    EXPECT_FALSE(has_service("x"));
    EXPECT_NE(full_log().find("control: refused"), std::string::npos) << full_log();
}

// A group created for the test and removed after it.
class TempGroup {
  public:
    TempGroup() {
        name_ = "sdppm" + std::to_string(::getpid() % 100000) + "r" + std::to_string(seq_++);
        auto r = pmtest::run({"/usr/sbin/groupadd", name_}, "/tmp");
        if (r.exit_code == std::optional<int>(0)) {
            if (group* g = ::getgrnam(name_.c_str())) {
                gid_ = g->gr_gid;
            }
        }
    }
    ~TempGroup() {
        if (gid_) {
            pmtest::run({"/usr/sbin/groupdel", name_}, "/tmp");
        }
    }
    bool ok() const { return gid_.has_value(); }
    const std::string& name() const { return name_; }
    gid_t gid() const { return *gid_; }

  private:
    static inline int seq_ = 0;
    std::string name_;
    std::optional<gid_t> gid_;
};

TEST_F(Control, ReadGroupReadsButCannotWriteAdminGroupWrites) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "needs root for groupadd and setpriv";
    }
    TempGroup readers;
    TempGroup admins;
    if (!readers.ok() || !admins.ok()) {
        GTEST_SKIP() << "groupadd failed";
    }
    groups_ = "read_group: " + readers.name() + "\n  admin_group: " + admins.name();
    ASSERT_NO_FATAL_FAILURE(start());
    auto as = [](gid_t g) {
        return std::vector<std::string>{"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup",
                                        "--groups=" + std::to_string(g)};
    };
    auto read = ctl({"services"}, as(readers.gid()));
    EXPECT_EQ(read.exit_code, std::optional<int>(0)) << read.err << full_log();
    EXPECT_NE(read.out.find("web"), std::string::npos) << read.out;
    auto stats = ctl({"stats"}, as(readers.gid()));
    EXPECT_EQ(stats.exit_code, std::optional<int>(0)) << stats.err;
    auto write = ctl({"register", "x", "127.0.0.1:7600", "127.0.0.1:7601"}, as(readers.gid()));
    EXPECT_EQ(write.exit_code, std::optional<int>(4)) << write.err;
    auto reset = ctl({"stats", "--reset"}, as(readers.gid()));
    EXPECT_EQ(reset.exit_code, std::optional<int>(4)) << reset.err;
    EXPECT_FALSE(has_service("x"));

    auto admin = ctl({"register", "y", "127.0.0.1:7700", "127.0.0.1:7701"}, as(admins.gid()));
    EXPECT_EQ(admin.exit_code, std::optional<int>(0)) << admin.err << full_log();
    EXPECT_TRUE(has_service("y"));
}

TEST_F(Control, HostileInputIsRefusedAndUdpKeepsWorking) {
    ASSERT_NO_FATAL_FAILURE(start());
    // A half-open connection: a partial request, never finished, left open
    // for the whole test.
    RawStream half(socket_);
    ASSERT_TRUE(half.ok());
    ASSERT_TRUE(half.send(R"({"command": "sta)"));

    {  // Oversized: 70 KiB without a newline -> an error, then closed.
        RawStream s(socket_);
        ASSERT_TRUE(s.ok());
        s.send("{\"command\": \"" + std::string(70 * 1024, 'a'));
        json reply = json::parse(s.line(), nullptr, false);
        ASSERT_FALSE(reply.is_discarded());
        EXPECT_EQ(reply["result"], 1);
        EXPECT_TRUE(s.closed_by_peer());
    }
    {  // Deeply nested: refused before parsing; the connection still works.
        RawStream s(socket_);
        ASSERT_TRUE(s.ok());
        s.send(std::string(100000 / 2, '[') + "\n");
        json reply = json::parse(s.line(), nullptr, false);
        ASSERT_FALSE(reply.is_discarded());
        EXPECT_EQ(reply["result"], 1);
        std::string nested = R"({"command":"status","arguments":)";
        for (int i = 0; i < 20; ++i) {
            nested += "{\"a\":";
        }
        nested += "1" + std::string(21, '}') + "\n";
        s.send(nested);
        reply = json::parse(s.line(), nullptr, false);
        EXPECT_EQ(reply["result"], 1) << reply.dump();
        EXPECT_NE(reply["text"].get<std::string>().find("nested"), std::string::npos);
        s.send(R"({"command":"version"})"
               "\n");
        reply = json::parse(s.line(), nullptr, false);
        EXPECT_EQ(reply["result"], 0) << reply.dump();
    }
    {  // Garbage bytes, lines of them, binary included.
        RawStream s(socket_);
        ASSERT_TRUE(s.ok());
        std::string garbage;
        for (int i = 0; i < 4096; ++i) {
            garbage += static_cast<char>((i * 131 + 7) & 0xff);
        }
        s.send(garbage + "\n\x01\x02\xff\xfe{]}\n[1,2,3]\n\"x\"\n{\"command\":5}\n");
        int answered = 0;
        for (int i = 0; i < 8; ++i) {
            std::string l = s.line(2000ms);
            if (l.empty()) {
                break;
            }
            json reply = json::parse(l, nullptr, false);
            ASSERT_FALSE(reply.is_discarded()) << l;
            EXPECT_EQ(reply["result"], 1) << l;
            ++answered;
        }
        EXPECT_GE(answered, 4);
    }
    {  // One request per connection: no newline, then EOF.
        RawStream s(socket_);
        ASSERT_TRUE(s.ok());
        s.send(R"({"command":"unknown-thing"})");
        s.shutdown_write();
        json reply = json::parse(s.line(), nullptr, false);
        ASSERT_FALSE(reply.is_discarded());
        EXPECT_EQ(reply["result"], 2);
    }
    {  // Many connections at once: bounded, and the daemon survives them.
        std::vector<std::unique_ptr<RawStream>> many;
        for (int i = 0; i < 80; ++i) {
            many.push_back(std::make_unique<RawStream>(socket_));
        }
    }
    expect_udp_served();
    auto st = ctl({"status"});
    EXPECT_EQ(st.exit_code, std::optional<int>(0)) << st.err << full_log();
    EXPECT_TRUE(daemon_->running());
}

// Every line of a Prometheus text exposition is a comment or "name{labels} value".
std::map<std::string, double> parse_prometheus(const std::string& text) {
    static const std::regex sample(
        R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*\})? (-?[0-9.eE+-]+|NaN|\+Inf|-Inf)$)");
    static const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
    std::map<std::string, double> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_match(line, m, sample)) {
            out[m[1].str() + m[2].str()] = std::stod(m[4].str());
        } else {
            EXPECT_TRUE(std::regex_match(line, comment)) << "bad line: " << line;
        }
    }
    return out;
}

TEST_F(Control, PrometheusEndpointMatchesStats) {
    with_metrics_ = true;
    ASSERT_NO_FATAL_FAILURE(start());
    expect_udp_served();
    (void)query("127.0.0.1:9");  // a deny

    RawStream http(metrics_port_);
    ASSERT_TRUE(http.ok());
    http.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    const std::string response = http.all();
    ASSERT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response;
    const std::string body = response.substr(response.find("\r\n\r\n") + 4);
    EXPECT_NE(response.find("text/plain; version=0.0.4"), std::string::npos);
    auto metrics = parse_prometheus(body);
    json stats = ctl_json({"stats"})["arguments"];
    ASSERT_TRUE(metrics.count("sdp_pmd_requests_total")) << body;
    EXPECT_EQ(metrics["sdp_pmd_requests_total"], stats["requests"].get<double>());
    EXPECT_EQ(metrics["sdp_pmd_requests_total"], 2);
    EXPECT_EQ(metrics["sdp_pmd_outcomes_total{outcome=\"accepted\"}"],
              stats["accepted"].get<double>());
    EXPECT_EQ(metrics["sdp_pmd_outcomes_total{outcome=\"denied_no_service\"}"], 1);
    EXPECT_EQ(metrics["sdp_pmd_datagrams_total"], stats["datagrams"].get<double>());
    EXPECT_TRUE(metrics.count("sdp_pmd_transactions"));
    EXPECT_EQ(metrics["sdp_pmd_services{kind=\"static\"}"], 1);
    EXPECT_NE(body.find("# TYPE sdp_pmd_requests_total counter"), std::string::npos);
    EXPECT_NE(body.find("# TYPE sdp_pmd_transactions gauge"), std::string::npos);

    RawStream other(metrics_port_);
    other.send("GET /other HTTP/1.1\r\nHost: localhost\r\n\r\n");
    EXPECT_EQ(other.all().rfind("HTTP/1.1 404", 0), 0u);
    RawStream junk(metrics_port_);
    junk.send(std::string(20000, 'x') + "\r\n\r\n");
    (void)junk.all();
    expect_udp_served();

    // stats --reset zeroes the counters everywhere.
    EXPECT_EQ(ctl({"stats", "--reset"}).exit_code, std::optional<int>(0));
    EXPECT_EQ(ctl_json({"stats"})["arguments"]["requests"], 0);
}

TEST_F(Control, CliUsageAndErrorsHaveDocumentedExitCodes) {
    const fs::path good = dir_.path() / "good.yaml";
    pmtest::write_file(good, "services: []\n");
    const fs::path bad = dir_.path() / "bad.yaml";
    pmtest::write_file(bad, "control:\n  socket: relative.sock\n");
    auto run = [&](std::vector<std::string> args) {
        args.insert(args.begin(), SDPPM_PMCTL_BIN);
        return pmtest::run(args, dir_.path(), 15000ms);
    };
    auto ok = run({"check-config", good.string()});
    EXPECT_EQ(ok.exit_code, std::optional<int>(0)) << ok.err;
    auto invalid = run({"check-config", bad.string()});
    EXPECT_EQ(invalid.exit_code, std::optional<int>(1));
    EXPECT_NE(invalid.err.find(":2: control.socket: not an absolute path"), std::string::npos)
        << invalid.err;
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"frobnicate"},
                                               {},
                                               {"query", "127.0.0.1", "--service", "nonsense"},
                                               {"query", "not-a-host", "--service", "127.0.0.1:80"},
                                               {"status", "--lease", "1s"},
                                               {"register", "onlyname"},
                                               {"--no-such-option", "status"}}) {
        auto r = run(args);
        EXPECT_EQ(r.exit_code, std::optional<int>(2)) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    auto unreachable = run({"--socket", (dir_.path() / "nothing.sock").string(), "status"});
    EXPECT_EQ(unreachable.exit_code, std::optional<int>(3));
    EXPECT_EQ(std::count(unreachable.err.begin(), unreachable.err.end(), '\n'), 1)
        << unreachable.err;
}

// A stand-in for a service process: `sleep` (bounded: it ends by itself
// after a minute if a test leaves it behind).
std::unique_ptr<Process> owner_process(const fs::path& dir, const std::string& tag) {
    return std::make_unique<Process>(std::vector<std::string>{"/bin/sleep", "60"},
                                     dir / (tag + ".out"), dir / (tag + ".err"));
}

std::optional<std::int64_t> pid_of(const json& services, const std::string& name) {
    for (const auto& s : services["arguments"]["services"]) {
        if (s["name"] == name && s["pid"].is_number_integer()) {
            return s["pid"].get<std::int64_t>();
        }
    }
    return std::nullopt;
}

// `register --pid`: the mapping lives as long as that process, however it
// ends; a mapping without a pid is not touched.
TEST_F(Control, RegistrationTiedToAProcessGoesWhenItExits) {
    ASSERT_NO_FATAL_FAILURE(start());
    auto owner = owner_process(dir_.path(), "owner");
    ASSERT_TRUE(owner->started());
    const std::string pid = std::to_string(owner->pid());
    auto reg = ctl({"register", "tied", "127.0.0.1:7400", "127.0.0.1:7401", "--pid", pid});
    ASSERT_EQ(reg.exit_code, std::optional<int>(0)) << reg.err << full_log();
    ASSERT_EQ(ctl({"register", "free", "127.0.0.1:7500", "127.0.0.1:7501"}).exit_code,
              std::optional<int>(0));
    EXPECT_EQ(pid_of(ctl_json({"services"}), "tied"), std::optional<std::int64_t>(owner->pid()));
    auto human = ctl({"services"});
    EXPECT_NE(human.out.find(" PID "), std::string::npos) << human.out;
    // Kept in the state file with the process's identity.
    json state = json::parse(pmtest::read_file(state_), nullptr, false);
    ASSERT_FALSE(state.is_discarded());
    ASSERT_EQ(state["registrations"].size(), 2u);
    EXPECT_EQ(state["registrations"][1]["pid"], owner->pid()) << state.dump();
    EXPECT_TRUE(state["registrations"][1]["boot_id"].is_string()) << state.dump();
    EXPECT_EQ(query("127.0.0.1:7400").exit_code, std::optional<int>(0));

    ASSERT_TRUE(owner->signal(SIGKILL));
    ASSERT_TRUE(pmtest::wait_until([&] { return !has_service("tied"); }, 5000ms)) << full_log();
    EXPECT_TRUE(has_service("free"));
    EXPECT_NE(full_log().find("its owner process " + pid + " exited"), std::string::npos)
        << full_log();
    EXPECT_EQ(query("127.0.0.1:7400").exit_code, std::optional<int>(1));  // PMDeny
    json stats = ctl_json({"stats"});
    EXPECT_EQ(stats["arguments"]["owner_exits"], 1) << stats.dump();
    state = json::parse(pmtest::read_file(state_), nullptr, false);
    EXPECT_EQ(state["registrations"].size(), 1u) << state.dump();
}

TEST_F(Control, RegistrationForAMissingProcessIsRefused) {
    ASSERT_NO_FATAL_FAILURE(start());
    auto gone = owner_process(dir_.path(), "gone");
    ASSERT_TRUE(gone->started());
    const std::string pid = std::to_string(gone->pid());
    ASSERT_TRUE(gone->signal(SIGKILL));
    ASSERT_TRUE(gone->wait_exit(5000ms).has_value());
    auto r = ctl({"register", "x", "127.0.0.1:7600", "127.0.0.1:7601", "--pid", pid});
    EXPECT_EQ(r.exit_code, std::optional<int>(1)) << r.out << r.err;
    EXPECT_NE(r.err.find("no such process"), std::string::npos) << r.err;
    for (const std::string bad : {"0", "-5", "99999999999"}) {
        auto b = ctl({"register", "x", "127.0.0.1:7600", "127.0.0.1:7601", "--pid", bad});
        EXPECT_NE(b.exit_code, std::optional<int>(0)) << bad;
    }
    EXPECT_FALSE(has_service("x"));
    // "peer" through the raw protocol: the asking process is the owner;
    // this connection's process (the test) outlives the check.
    RawStream raw(socket_);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw.send(R"({"command": "register", "arguments": {"name": "me", )"
                         R"("conventional": "127.0.0.1:7700", "sdp": ["127.0.0.1:7701"], )"
                         R"("pid": "peer"}})"
                         "\n"));
    json reply = json::parse(raw.line(), nullptr, false);
    ASSERT_FALSE(reply.is_discarded());
    EXPECT_EQ(reply["result"], 0) << reply.dump();
    EXPECT_EQ(pid_of(ctl_json({"services"}), "me"), std::optional<std::int64_t>(::getpid()));
}

// After a restart, a stored registration whose owner exited while the
// daemon was down is dropped (and said so); one whose owner runs is kept
// and watched again.
TEST_F(Control, RestartDropsRegistrationsOfOwnersThatExited) {
    ASSERT_NO_FATAL_FAILURE(start());
    auto stays = owner_process(dir_.path(), "stays");
    auto leaves = owner_process(dir_.path(), "leaves");
    ASSERT_TRUE(stays->started() && leaves->started());
    ASSERT_EQ(ctl({"register", "stays", "127.0.0.1:7800", "127.0.0.1:7801", "--pid",
                   std::to_string(stays->pid())})
                  .exit_code,
              std::optional<int>(0));
    ASSERT_EQ(ctl({"register", "leaves", "127.0.0.1:7900", "127.0.0.1:7901", "--pid",
                   std::to_string(leaves->pid())})
                  .exit_code,
              std::optional<int>(0));
    ASSERT_NO_FATAL_FAILURE(stop(SIGTERM));
    ASSERT_TRUE(leaves->signal(SIGKILL));
    ASSERT_TRUE(leaves->wait_exit(5000ms).has_value());
    ASSERT_NO_FATAL_FAILURE(start());
    EXPECT_TRUE(has_service("stays")) << full_log();
    EXPECT_FALSE(has_service("leaves")) << full_log();
    EXPECT_NE(full_log().find("\"leaves\" from the state file dropped: its owner process " +
                              std::to_string(leaves->pid()) + " is gone"),
              std::string::npos)
        << full_log();
    // The kept one is watched again by the new daemon.
    ASSERT_TRUE(stays->signal(SIGKILL));
    EXPECT_TRUE(pmtest::wait_until([&] { return !has_service("stays"); }, 5000ms)) << full_log();
}

// Issue #15: each SDP address's health in `services` (JSON and table),
// `stats` and the metrics. Polled within a bound, never timed.
TEST_F(Control, ServicesAndMetricsShowTheHealthOfEachAddress) {
    health_ = "{interval: 100ms}";
    with_metrics_ = true;
    pmtest::TcpListener live(*pm::Endpoint::parse("127.0.0.1:0"));
    pmtest::TcpListener dead(*pm::Endpoint::parse("127.0.0.1:0"));
    ASSERT_TRUE(live.ok() && dead.ok());
    const std::string live_addr = "127.0.0.1:" + std::to_string(live.port());
    const std::string dead_addr = "127.0.0.1:" + std::to_string(dead.port());
    dead.close();
    ASSERT_NO_FATAL_FAILURE(start());
    auto reg = ctl({"register", "hc", "127.0.0.1:7700", live_addr, dead_addr});
    ASSERT_EQ(reg.exit_code, std::optional<int>(0)) << reg.err;
    json hc;
    ASSERT_TRUE(pmtest::wait_until(
        [&] {
            const json services = ctl_json({"services"});
            for (const auto& s : services["arguments"]["services"]) {
                if (s["name"] == "hc") {
                    hc = s;
                }
            }
            return hc.contains("health") && hc["health"].size() == 2 &&
                   hc["health"][0]["state"] == "up" && hc["health"][1]["state"] == "down";
        },
        10000ms))
        << hc.dump() << full_log();
    EXPECT_EQ(hc["health"][0]["address"], live_addr);
    EXPECT_EQ(hc["health"][0]["check"], "listener");
    EXPECT_EQ(hc["health"][0]["transitions"], 1);
    EXPECT_GE(hc["health"][0]["since_seconds"].get<double>(), 0.0);
    EXPECT_EQ(hc["health"][1]["address"], dead_addr);
    const auto table = ctl({"services"}).out;
    EXPECT_NE(table.find("HEALTH"), std::string::npos) << table;
    EXPECT_NE(table.find(",down "), std::string::npos) << table;

    json stats = ctl_json({"stats"})["arguments"];
    EXPECT_GE(stats["health_transitions_down"].get<std::uint64_t>(), 1u);
    EXPECT_GE(stats["health_transitions_up"].get<std::uint64_t>(), 1u);
    EXPECT_GE(stats["sdp_addresses_down"].get<double>(), 1.0);

    RawStream http(metrics_port_);
    ASSERT_TRUE(http.ok());
    http.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    const std::string response = http.all();
    const std::string body = response.substr(response.find("\r\n\r\n") + 4);
    auto metrics = parse_prometheus(body);
    const std::string labels = "{service=\"hc\",address=\"" + live_addr + "\",check=\"listener\"";
    EXPECT_EQ(metrics["sdp_pmd_sdp_address_state" + labels + ",state=\"up\"}"], 1) << body;
    EXPECT_EQ(metrics["sdp_pmd_sdp_address_state" + labels + ",state=\"down\"}"], 0) << body;
    EXPECT_GT(metrics["sdp_pmd_sdp_address_last_change_seconds" + labels + "}"], 1e9) << body;
    EXPECT_NE(body.find("# TYPE sdp_pmd_sdp_address_state gauge"), std::string::npos);

    // A PMReq for it names the live address.
    for (int i = 0; i < 3; ++i) {
        auto q = query("127.0.0.1:7700");
        EXPECT_NE(q.out.find("SDP address:  " + live_addr), std::string::npos) << q.out;
    }
}

// `register --health-check`: a registration's own health settings win over
// the daemon's defaults, and are kept in the state file.
TEST_F(Control, RegistrationCarriesItsOwnHealthCheck) {
    health_ = "{interval: 100ms}";
    pmtest::TcpListener gone(*pm::Endpoint::parse("127.0.0.1:0"));
    ASSERT_TRUE(gone.ok());
    const std::string dead = "127.0.0.1:" + std::to_string(gone.port());
    gone.close();
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_EQ(
        ctl({"register", "unchecked", "127.0.0.1:7010", dead, "--health-check", "off"}).exit_code,
        std::optional<int>(0));
    ASSERT_EQ(ctl({"register", "checked", "127.0.0.1:7020", dead}).exit_code,
              std::optional<int>(0));
    // The checked one goes down (PMDeny); the unchecked one keeps PMAccept.
    EXPECT_TRUE(pmtest::wait_until(
        [&] { return query("127.0.0.1:7020").exit_code == std::optional<int>(1); }, 10000ms))
        << full_log();
    auto q = query("127.0.0.1:7010");
    EXPECT_EQ(q.exit_code, std::optional<int>(0)) << q.out;
    EXPECT_NE(q.out.find("SDP address:  " + dead), std::string::npos) << q.out;
    json state = json::parse(pmtest::read_file(state_), nullptr, false);
    ASSERT_FALSE(state.is_discarded());
    bool kept = false;
    for (const auto& r : state["registrations"]) {
        if (r["name"] == "unchecked") {
            kept = r["health"] == json{{"check", "off"}};
        }
    }
    EXPECT_TRUE(kept) << state.dump();
    // And after a restart.
    ASSERT_NO_FATAL_FAILURE(stop(SIGTERM));
    ASSERT_NO_FATAL_FAILURE(start());
    q = query("127.0.0.1:7010");
    EXPECT_EQ(q.exit_code, std::optional<int>(0)) << q.out << full_log();
    auto bad = ctl({"register", "x", "127.0.0.1:7030", dead, "--health-check", "sometimes"});
    EXPECT_EQ(bad.exit_code, std::optional<int>(1)) << bad.out << bad.err;
    EXPECT_NE(bad.err.find("health"), std::string::npos) << bad.err;
}

}  // namespace
