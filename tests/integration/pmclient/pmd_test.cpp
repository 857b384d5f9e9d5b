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
#include <thread>

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

class PmdTest : public ::testing::Test {
  protected:
    void SetUp() override {
        port = free_udp_port();
        dir = std::filesystem::temp_directory_path() / ("pmclient-pmd-" + std::to_string(getpid()));
        std::filesystem::create_directories(dir);
        config = (dir / "sdp-pmd.yaml").string();
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
        ASSERT_GT(pid, 0);
    }
    void TearDown() override {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            int st = 0;
            // Bounded wait for a clean exit, then SIGKILL.
            for (int i = 0; i < 500 && ::waitpid(pid, &st, WNOHANG) == 0; ++i) {
                std::this_thread::sleep_for(10ms);
            }
            if (::waitpid(pid, &st, WNOHANG) == 0) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &st, 0);
            }
        }
        std::filesystem::remove_all(dir);
    }
    pmclient::ResolverOptions options() const {
        pmclient::ResolverOptions o;
        o.defaults.pmsp = pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), port};
        o.defaults.initial_timeout = 50ms;
        o.defaults.deadline = 2s;
        o.read_environment = false;
        o.cache_capacity = 0;
        return o;
    }
    std::uint16_t port = 0;
    std::filesystem::path dir;
    std::string config;
    pid_t pid = -1;
};

TEST_F(PmdTest, AcceptAndDeny) {
    pmclient::BlockingResolver r(options());
    // CpPort must be non-zero; use a fixed one per request.
    auto rq = [](const char* conv, std::uint16_t cp) {
        return pmclient::ResolveRequest{pm::Endpoint::parse(conv).value(),
                                        pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), cp},
                                        {}};
    };
    pmclient::Result res;
    for (int i = 0; i < 8; ++i) {  // the daemon may still be starting
        res = r.resolve(rq("127.0.0.1:7000", static_cast<std::uint16_t>(42000 + i)));
        if (res.kind != pmclient::ResultKind::timeout) {
            break;
        }
    }
    ASSERT_EQ(res.kind, pmclient::ResultKind::accepted) << res.reason;
    EXPECT_EQ(res.sdp, pm::Endpoint::parse("127.0.0.1:7001").value());
    EXPECT_EQ(res.pm_time, pm::pm_time_from_duration(30s));
    res = r.resolve(rq("127.0.0.1:7999", 42100));
    EXPECT_EQ(res.kind, pmclient::ResultKind::denied) << res.reason;
    EXPECT_EQ(r.resolver().counters().drop_malformed, 0u);

#ifdef PM_RESOLVE_PATH
    // The README demo: pm-resolve against the daemon.
    std::string cmd = std::string("'") + PM_RESOLVE_PATH +
                      "' --pmsp 127.0.0.1:" + std::to_string(port) + " 127.0.0.1 7000 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char line[256] = {};
    std::string out = std::fgets(line, sizeof line, p) != nullptr ? line : "";
    int st = ::pclose(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    EXPECT_EQ(out.rfind("accept 127.0.0.1:7001 pm_time=120 (30s) rtt=", 0), 0u) << out;
#endif
}

}  // namespace
