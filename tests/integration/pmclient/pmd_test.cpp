// SPDX-License-Identifier: Apache-2.0
// libpmclient against the real sdp-pmd (started as a subprocess).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>

#include "pmclient/resolver.hpp"

#ifndef SDP_PMD_PATH
#error SDP_PMD_PATH must name the sdp-pmd executable
#endif

namespace {

using namespace std::chrono_literals;

std::uint16_t free_udp_port() {
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

// One sdp-pmd subprocess on 127.0.0.1:<free port> with the static service
// demo (127.0.0.1:7000 -> 127.0.0.1:7001, PmTime 30 s).
class Pmd {
  public:
    explicit Pmd(const std::string& name) {
        port = free_udp_port();
        dir = std::filesystem::temp_directory_path() /
              ("pmclient-pmd-" + std::to_string(getpid()) + "-" + name);
        std::filesystem::create_directories(dir);
        const std::string config = (dir / "sdp-pmd.yaml").string();
        // health: off: nothing listens on 127.0.0.1:7001.
        std::ofstream(config) << "listen: [\"127.0.0.1:" << port << "\"]\n"
                              << "health: off\n"
                              << "services:\n"
                              << "  - name: demo\n"
                              << "    conventional: \"127.0.0.1:7000\"\n"
                              << "    sdp: [\"127.0.0.1:7001\"]\n"
                              << "    pm_time: 30s\n";
        pid = ::fork();
        if (pid == 0) {
            ::execl(SDP_PMD_PATH, SDP_PMD_PATH, "--config", config.c_str(), "--foreground",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    ~Pmd() {
        stop(SIGTERM);
        std::filesystem::remove_all(dir);
    }
    Pmd(const Pmd&) = delete;
    Pmd& operator=(const Pmd&) = delete;

    // Sends `sig`; waits (bounded) for the exit, then SIGKILL.
    void stop(int sig) {
        if (pid <= 0) {
            return;
        }
        ::kill(pid, sig);
        int st = 0;
        for (int i = 0; i < 500 && ::waitpid(pid, &st, WNOHANG) == 0; ++i) {
            std::this_thread::sleep_for(10ms);
        }
        if (::waitpid(pid, &st, WNOHANG) == 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
        }
        pid = -1;
    }
    pm::Endpoint endpoint() const {
        return pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), port};
    }

    std::uint16_t port = 0;
    std::filesystem::path dir;
    pid_t pid = -1;
};

pmclient::ResolveRequest demo_request(const char* conv, std::uint16_t cp) {
    return pmclient::ResolveRequest{pm::Endpoint::parse(conv).value(),
                                    pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), cp},
                                    {}};
}

// Resolves the demo service through `r` until the daemons have started
// (bounded); returns the last result.
pmclient::Result wait_until_up(pmclient::BlockingResolver& r, std::uint16_t cp) {
    pmclient::Result res;
    for (int i = 0; i < 8; ++i) {
        res = r.resolve(demo_request("127.0.0.1:7000", static_cast<std::uint16_t>(cp + i)));
        if (res.kind != pmclient::ResultKind::timeout) {
            break;
        }
    }
    return res;
}

#ifdef PM_RESOLVE_PATH
// Runs `pm-resolve --pmsp <pmsp> 127.0.0.1 7000`: its exit status (-1 when
// it did not exit) and the first line it printed.
std::pair<int, std::string> pm_resolve(const std::string& pmsp) {
    const std::string cmd =
        std::string("'") + PM_RESOLVE_PATH + "' --pmsp " + pmsp + " 127.0.0.1 7000 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) {
        return {-1, "popen failed"};
    }
    char line[256] = {};
    std::string out = std::fgets(line, sizeof line, p) != nullptr ? line : "";
    const int st = ::pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
#endif

class PmdTest : public ::testing::Test {
  protected:
    void SetUp() override {
        pmd = std::make_unique<Pmd>("single");
        port = pmd->port;
        ASSERT_GT(pmd->pid, 0);
    }
    void TearDown() override { pmd.reset(); }
    pmclient::ResolverOptions options() const {
        pmclient::ResolverOptions o;
        o.defaults.pmsp = pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), port};
        o.defaults.initial_timeout = 50ms;
        o.defaults.deadline = 2s;
        o.read_environment = false;
        o.cache_capacity = 0;
        return o;
    }
    std::unique_ptr<Pmd> pmd;
    std::uint16_t port = 0;
};

TEST_F(PmdTest, AcceptAndDeny) {
    pmclient::BlockingResolver r(options());
    // CpPort must be non-zero; use a fixed one per request.
    const auto rq = demo_request;
    pmclient::Result res = wait_until_up(r, 42000);  // the daemon may still be starting
    ASSERT_EQ(res.kind, pmclient::ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.sdp, pm::Endpoint::parse("127.0.0.1:7001").value());
    EXPECT_EQ(res.pm_time, pm::pm_time_from_duration(30s));
    res = r.resolve(rq("127.0.0.1:7999", 42100));
    EXPECT_EQ(res.kind, pmclient::ResultKind::denied) << res.reason;
    EXPECT_EQ(r.resolver().counters().drop_malformed, 0u);

#ifdef PM_RESOLVE_PATH
    // The README demo: pm-resolve against the daemon.
    auto [status, out] = pm_resolve("127.0.0.1:" + std::to_string(port));
    EXPECT_EQ(status, 0) << out;
    EXPECT_EQ(out.rfind("accept 127.0.0.1:7001 pm_time=120 (30s) rtt=", 0), 0u) << out;
#endif
}

// Several PMSPs: [a dead port, pmd1, pmd2]. Every resolution is accepted via
// failover; pmd1 is killed mid-run and the client keeps resolving via pmd2.
// Each resolution ends within its deadline, and none fails.
TEST(PmdFailoverTest, ListWithDeadPortAndKilledReplica) {
    Pmd pmd1("replica1");
    Pmd pmd2("replica2");
    ASSERT_GT(pmd1.pid, 0);
    ASSERT_GT(pmd2.pid, 0);
    const pm::Endpoint dead{pm::IpAddress::parse("127.0.0.1").value(), free_udp_port()};

    // Both daemons answer before the failover run starts.
    for (const Pmd* d : {&pmd1, &pmd2}) {
        pmclient::ResolverOptions o;
        o.defaults.pmsp = d->endpoint();
        o.defaults.initial_timeout = 50ms;
        o.read_environment = false;
        o.cache_capacity = 0;
        pmclient::BlockingResolver r(o);
        auto res = wait_until_up(r, 43000);
        ASSERT_EQ(res.kind, pmclient::ResultKind::accepted) << res.reason;
    }

    pmclient::ResolverOptions o;
    o.defaults.pmsps = {dead, pmd1.endpoint(), pmd2.endpoint()};
    o.defaults.initial_timeout = 50ms;
    o.defaults.deadline = 2s;
    o.read_environment = false;
    o.cache_capacity = 0;
    pmclient::BlockingResolver r(o);

    constexpr int kTotal = 30;
    constexpr int kKillAt = 12;
    int failures = 0;
    int via_pmd1 = 0;
    int via_pmd2 = 0;
    auto longest = std::chrono::steady_clock::duration::zero();
    for (int i = 0; i < kTotal; ++i) {
        if (i == kKillAt) {
            pmd1.stop(SIGKILL);
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto res = r.resolve(demo_request("127.0.0.1:7000", static_cast<std::uint16_t>(44000 + i)));
        longest = std::max(longest, std::chrono::steady_clock::now() - t0);
        if (res.kind != pmclient::ResultKind::accepted) {
            ++failures;
            ADD_FAILURE() << "resolution " << i << ": " << res.reason;
            continue;
        }
        EXPECT_EQ(res.sdp, pm::Endpoint::parse("127.0.0.1:7001").value());
        EXPECT_NE(res.pmsp, dead);
        if (res.pmsp == pmd1.endpoint()) {
            ++via_pmd1;
            EXPECT_LT(i, kKillAt);
        } else if (res.pmsp == pmd2.endpoint()) {
            ++via_pmd2;
        }
        if (i < 3) {
            EXPECT_EQ(res.pmsps_tried, 2u) << "the dead port is asked first until it is skipped";
        }
    }
    const auto c = r.resolver().counters();
    std::printf(
        "failover run: %d resolutions, %d failed, %d via pmd1, %d via pmd2, "
        "failovers %llu, skipped %llu, PMReqs %llu, longest %lld ms\n",
        kTotal, failures, via_pmd1, via_pmd2, static_cast<unsigned long long>(c.pmsp_failovers),
        static_cast<unsigned long long>(c.pmsp_skipped),
        static_cast<unsigned long long>(c.pmreq_sent),
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(longest).count()));
    EXPECT_EQ(failures, 0);
    EXPECT_EQ(via_pmd1, kKillAt);
    EXPECT_EQ(via_pmd2, kTotal - kKillAt);
    EXPECT_LE(longest, 2s + 200ms) << "each resolution ends within its deadline";
    // 3 failovers off the dead port before it is skipped, 3 off pmd1 after
    // the kill before it is skipped too.
    EXPECT_EQ(c.pmsp_failovers, 6u);
    EXPECT_GT(c.pmsp_skipped, 0u);
    EXPECT_EQ(c.drop_wrong_source, 0u);

#ifdef PM_RESOLVE_PATH
    // pm-resolve takes the list too.
    auto [status, out] = pm_resolve(dead.to_string() + "," + pmd2.endpoint().to_string());
    EXPECT_EQ(status, 0) << out;
    EXPECT_EQ(out.rfind("accept 127.0.0.1:7001", 0), 0u) << out;
#endif
}

}  // namespace
