// SPDX-License-Identifier: Apache-2.0
// The pm-resolve example program, run as a subprocess against the fake PMSP.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "fake_pmsp.hpp"

#ifndef PM_RESOLVE_PATH
#error PM_RESOLVE_PATH must name the pm-resolve executable
#endif

namespace {

using namespace pmtest;

struct Run {
    int status = -1;
    std::string out;
};

Run run(const std::string& args, const char* program = PM_RESOLVE_PATH) {
    Run r;
    std::string cmd = std::string("env -u SDP_PMSP SDP_PMCLIENT_CONFIG=/nonexistent '") + program +
                      "' " + args + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) {
        return r;
    }
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
        r.out += buf;
    }
    int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(PmResolveTest, Accept) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 120));
    auto r = run("--pmsp " + pmsp.endpoint().to_string() + " 127.0.0.1 7000");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out.rfind("accept 127.0.0.1:7001 pm_time=120 (30s) rtt=", 0), 0u) << r.out;
    ASSERT_TRUE(pmsp.wait_count(pm::MessageType::ack, 1));
    EXPECT_NE(pmsp.received().at(0).msg.cp_port, 0) << "ephemeral TCP port used as CpPort";
}

TEST(PmResolveTest, AcceptWithExplicitCp) {
    FakePmsp pmsp(accept_with(ep("127.0.0.1:7001"), 255));
    auto r = run("--pmsp " + pmsp.endpoint().to_string() + " 127.0.0.1 7000 127.0.0.1 45678");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("(permanent)"), std::string::npos) << r.out;
    EXPECT_EQ(pmsp.received().at(0).msg.cp_port, 45678);
}

TEST(PmResolveTest, Deny) {
    FakePmsp pmsp(deny_all());
    auto r = run("--pmsp " + pmsp.endpoint().to_string() + " 127.0.0.1 7000");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "deny\n");
}

TEST(PmResolveTest, Timeout) {
    FakePmsp pmsp(silent());
    auto r = run("--pmsp " + pmsp.endpoint().to_string() +
                 " --initial-timeout 20 --retries 1 127.0.0.1 7000");
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.out, "timeout\n");
}

TEST(PmResolveTest, UsageErrors) {
    EXPECT_EQ(run("").status, 64);
    EXPECT_EQ(run("127.0.0.1").status, 64);
    EXPECT_EQ(run("127.0.0.1 0").status, 64);
    EXPECT_EQ(run("127.0.0.1 70000").status, 64);
    EXPECT_EQ(run("127.0.0.1 7000 127.0.0.1").status, 64);
    EXPECT_EQ(run("--pmsp nonsense 127.0.0.1 7000").status, 64);
    EXPECT_EQ(run("--bogus 1 127.0.0.1 7000").status, 64);
    EXPECT_EQ(run("--pmsp 127.0.0.1:9 not-an-ip 7000").status, 64);
}

#ifdef PM_RESOLVE_POLL_PATH
// examples/resolve_poll.c: several resolutions from one poll(2) loop through
// the loop-driven C API, the first PMReq of each lost.
TEST(PmResolvePollTest, ResolvesSeveralFromOnePollLoop) {
    FakePmsp pmsp([](const pm::Message& m, int n) -> std::vector<Reply> {
        if (m.type != pm::MessageType::request || n < 2) {
            return {};
        }
        if (m.ap_port == 7002) {
            return {Reply::of(pm::make_deny(m))};
        }
        return {Reply::of(pm::make_accept(m, ep("127.0.0.1:7101"), 0))};
    });
    auto r = run("--pmsp " + pmsp.endpoint().to_string() +
                     " 127.0.0.1 127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002",
                 PM_RESOLVE_POLL_PATH);
    EXPECT_EQ(r.status, 1) << r.out;  // one was denied
    EXPECT_NE(r.out.find("127.0.0.1:7000 accept 127.0.0.1:7101\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("127.0.0.1:7001 accept 127.0.0.1:7101\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("127.0.0.1:7002 deny\n"), std::string::npos) << r.out;
    EXPECT_GE(pmsp.count(pm::MessageType::request), 6);  // the first of each was lost

    auto ok = run("--pmsp " + pmsp.endpoint().to_string() + " 127.0.0.1 127.0.0.1:7000",
                  PM_RESOLVE_POLL_PATH);
    EXPECT_EQ(ok.status, 0) << ok.out;
    EXPECT_EQ(run("127.0.0.1", PM_RESOLVE_POLL_PATH).status, 64);
    EXPECT_EQ(run("127.0.0.1 127.0.0.1", PM_RESOLVE_POLL_PATH).status, 64);
}
#endif

}  // namespace
