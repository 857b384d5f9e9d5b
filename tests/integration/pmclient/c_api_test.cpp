// SPDX-License-Identifier: Apache-2.0
// The C API (pmclient.h) against the fake PMSP.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "fake_pmsp.hpp"
#include "pmclient/pmclient.h"

namespace {

using namespace pmtest;

struct Resolver {
    pmc_resolver* r = nullptr;
    std::string pmsp;
    explicit Resolver(const pm::Endpoint& e, unsigned retries = 10) : pmsp(e.to_string()) {
        pmc_options o;
        pmc_options_init(&o);
        o.pmsp = pmsp.c_str();
        o.initial_timeout_ms = 30;
        o.max_retries = retries;
        o.deadline_ms = 20000;
        o.read_environment = 0;
        EXPECT_EQ(pmc_resolver_new(&o, &r), PMC_OK);
    }
    ~Resolver() { pmc_resolver_free(r); }
};

pmc_result result() {
    pmc_result res;
    std::memset(&res, 0, sizeof res);
    res.size = sizeof res;
    return res;
}

TEST(CApiTest, AcceptDenyTimeout) {
    FakePmsp acc(accept_with(ep("127.0.0.1:7001"), 120));
    Resolver a(acc.endpoint());
    auto res = result();
    ASSERT_EQ(pmc_resolve(a.r, "127.0.0.1", 7000, "127.0.0.1", 40000, &res), PMC_OK) << res.reason;
    EXPECT_EQ(res.kind, PMC_KIND_ACCEPTED);
    EXPECT_STREQ(res.sdp_ip, "127.0.0.1");
    EXPECT_EQ(res.sdp_port, 7001);
    EXPECT_EQ(res.pm_time, 120);
    EXPECT_EQ(res.cache_ms, 30000);
    EXPECT_EQ(res.from_cache, 0);
    EXPECT_EQ(res.attempts, 1u);
    EXPECT_EQ(std::string(res.pmsp), acc.endpoint().to_string());
    ASSERT_EQ(pmc_resolve(a.r, "127.0.0.1", 7000, nullptr, 40001, &res), PMC_OK);
    EXPECT_EQ(res.from_cache, 1);
    pmc_cache_flush(a.r);
    ASSERT_EQ(pmc_resolve(a.r, "127.0.0.1", 7000, nullptr, 40002, nullptr), PMC_OK);
    EXPECT_EQ(acc.count(pm::MessageType::request), 2);

    FakePmsp den(deny_all());
    Resolver d(den.endpoint());
    EXPECT_EQ(pmc_resolve(d.r, "127.0.0.1", 7000, "", 40000, &res), PMC_DENIED);
    EXPECT_EQ(res.kind, PMC_KIND_DENIED);

    FakePmsp sil(silent());
    Resolver s(sil.endpoint(), 1);
    EXPECT_EQ(pmc_resolve(s.r, "127.0.0.1", 7000, nullptr, 40000, &res), PMC_TIMEOUT);
    EXPECT_EQ(res.kind, PMC_KIND_TIMEOUT);
    EXPECT_EQ(res.attempts, 2u);

    pmc_counters c;
    std::memset(&c, 0, sizeof c);
    c.size = sizeof c;
    ASSERT_EQ(pmc_get_counters(a.r, &c), PMC_OK);
    EXPECT_EQ(c.accepted, 3u);
    EXPECT_EQ(c.cache_hits, 1u);
    EXPECT_EQ(c.pmreq_sent, 2u);
}

TEST(CApiTest, InvalidArguments) {
    FakePmsp acc(accept_with(ep("127.0.0.1:7001"), 0));
    Resolver a(acc.endpoint());
    auto res = result();
    EXPECT_EQ(pmc_resolve(nullptr, "127.0.0.1", 7000, nullptr, 1, &res), PMC_E_INVAL);
    EXPECT_EQ(pmc_resolve(a.r, nullptr, 7000, nullptr, 1, &res), PMC_E_INVAL);
    EXPECT_EQ(pmc_resolve(a.r, "300.1.1.1", 7000, nullptr, 1, &res), PMC_E_INVAL);
    EXPECT_NE(std::string(res.reason).find("ApIPAddr"), std::string::npos);
    EXPECT_EQ(pmc_resolve(a.r, "127.0.0.1", 0, nullptr, 1, &res), PMC_E_INVAL);
    EXPECT_EQ(pmc_resolve(a.r, "127.0.0.1", 7000, nullptr, 0, &res), PMC_E_INVAL);
    EXPECT_NE(std::string(res.reason).find("CpPort"), std::string::npos);
    EXPECT_EQ(pmc_resolve(a.r, "127.0.0.1", 7000, "::1", 1, &res), PMC_E_INVAL);
    EXPECT_EQ(pmc_resolve(a.r, "127.0.0.1", 7000, "garbage", 1, &res), PMC_E_INVAL);

    pmc_options o;
    pmc_options_init(&o);
    pmc_resolver* r = nullptr;
    o.pmsp = "not an endpoint";
    EXPECT_EQ(pmc_resolver_new(&o, &r), PMC_E_INVAL);
    EXPECT_EQ(r, nullptr);
    pmc_options_init(&o);
    o.backoff_percent = 50;
    EXPECT_EQ(pmc_resolver_new(&o, &r), PMC_E_INVAL);
    pmc_options_init(&o);
    o.deadline_ms = 0;
    EXPECT_EQ(pmc_resolver_new(&o, &r), PMC_E_INVAL);
    pmc_options_init(&o);
    o.size = 4;
    EXPECT_EQ(pmc_resolver_new(&o, &r), PMC_E_ABI);
    EXPECT_EQ(pmc_resolver_new(&o, nullptr), PMC_E_INVAL);
}

TEST(CApiTest, OlderSmallerStructsStillWork) {
    FakePmsp acc(accept_with(ep("127.0.0.1:7001"), 0));
    // An "old" caller that only knows size, pmsp and pmsp_port: the rest default.
    pmc_options o;
    std::memset(&o, 0xAB, sizeof o);
    std::string pmsp = acc.endpoint().to_string();
    o.pmsp = pmsp.c_str();
    o.pmsp_port = 3935;
    o.size = offsetof(pmc_options, initial_timeout_ms);
    pmc_resolver* r = nullptr;
    ASSERT_EQ(pmc_resolver_new(&o, &r), PMC_OK);
    // A result struct cut after sdp_port: the library writes no further.
    struct {
        pmc_result head;
        char canary[8];
    } small;
    std::memset(&small, 0x5A, sizeof small);
    small.head.size = offsetof(pmc_result, pm_time);
    EXPECT_EQ(pmc_resolve(r, "127.0.0.1", 7000, nullptr, 40000, &small.head), PMC_OK);
    EXPECT_EQ(small.head.sdp_port, 7001);
    EXPECT_EQ(small.head.size, offsetof(pmc_result, pm_time));
    EXPECT_EQ(static_cast<unsigned char>(small.head.pm_time), 0x5A);
    EXPECT_EQ(static_cast<unsigned char>(small.canary[0]), 0x5A);
    pmc_resolver_free(r);
}

TEST(CApiTest, BadEnvironmentIsConfigError) {
    setenv("SDP_PMSP", "nope", 1);
    pmc_resolver* r = nullptr;
    EXPECT_EQ(pmc_resolver_new(nullptr, &r), PMC_E_CONFIG);
    unsetenv("SDP_PMSP");
}

TEST(CApiTest, StrerrorNamesEveryCode) {
    for (int code = -8; code <= 2; ++code) {
        ASSERT_NE(pmc_strerror(code), nullptr);
        EXPECT_STRNE(pmc_strerror(code), "unknown error code") << code;
    }
    EXPECT_STREQ(pmc_strerror(12345), "unknown error code");
    EXPECT_EQ(pmc_abi_version(), PMC_ABI_VERSION);
    EXPECT_NE(std::strlen(pmc_version()), 0u);
}

TEST(CApiTest, ConnectFallsBackOnDeny) {
    FakePmsp den(deny_all());
    Resolver d(den.endpoint());
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), len), 0);
    ASSERT_EQ(::listen(l, 4), 0);
    ASSERT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
    pmc_connect_result c;
    std::memset(&c, 0, sizeof c);
    c.size = sizeof c;
    ASSERT_EQ(pmc_connect(d.r, "127.0.0.1", ntohs(a.sin_port), nullptr, &c), PMC_OK)
        << c.resolution.reason;
    EXPECT_GE(c.fd, 0);
    EXPECT_EQ(c.used_sdp, 0);
    EXPECT_EQ(c.resolution.kind, PMC_KIND_DENIED);
    EXPECT_EQ(std::string(c.peer), "127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
    ::close(c.fd);
    ::close(l);
    EXPECT_EQ(pmc_connect(d.r, "bogus", 1, nullptr, &c), PMC_E_INVAL);
    EXPECT_EQ(c.fd, -1);
}

// pmc_options.pmsp takes a comma-separated list: the silent first PMSP's
// turn ends after its slice, the second answers (blocking and loop-driven).
TEST(CApiTest, PmspListFailsOver) {
    FakePmsp sil(silent());
    FakePmsp acc(accept_with(ep("127.0.0.1:7001"), 0));
    const std::string list = sil.endpoint().to_string() + ", " + acc.endpoint().to_string();
    EXPECT_EQ(pmc_parse_pmsp_list(list.c_str(), nullptr, 0), 2);
    char why[128] = {};
    EXPECT_EQ(pmc_parse_pmsp_list("127.0.0.1:1,nope", why, sizeof why), PMC_E_INVAL);
    EXPECT_NE(std::string(why).find("'nope'"), std::string::npos) << why;

    pmc_options o;
    pmc_options_init(&o);
    EXPECT_EQ(o.per_pmsp_timeout_ms, 0u);
    EXPECT_EQ(o.pmsp_fail_threshold, 3u);
    EXPECT_EQ(o.pmsp_skip_ms, 30000u);
    o.read_environment = 0;
    o.pmsp = "127.0.0.1:3936,127.0.0.1:0";
    pmc_resolver* bad = nullptr;
    EXPECT_EQ(pmc_resolver_new(&o, &bad), PMC_E_INVAL);
    EXPECT_EQ(bad, nullptr);

    o.pmsp = list.c_str();
    o.initial_timeout_ms = 20;
    o.deadline_ms = 400;  // 200 ms each
    o.cache_capacity = 0;
    pmc_resolver* r = nullptr;
    ASSERT_EQ(pmc_resolver_new(&o, &r), PMC_OK);
    auto res = result();
    ASSERT_EQ(pmc_resolve(r, "127.0.0.1", 7000, "127.0.0.1", 40000, &res), PMC_OK) << res.reason;
    EXPECT_EQ(std::string(res.pmsp), acc.endpoint().to_string());
    EXPECT_EQ(res.pmsps_tried, 2u);
    EXPECT_GE(res.attempts, 2u);

    struct Done {
        int status = 1000;
        pmc_result res{};
    } done;
    ASSERT_EQ(pmc_resolve_start(
                  r, "127.0.0.1", 7000, "127.0.0.1", 40001,
                  [](void* arg, uint64_t, int status, const pmc_result* rr) {
                      auto* d = static_cast<Done*>(arg);
                      d->status = status;
                      std::memcpy(&d->res, rr, std::min(sizeof d->res, rr->size));
                  },
                  &done, nullptr),
              PMC_OK);
    for (int i = 0; i < 200 && pmc_pending(r) > 0; ++i) {
        struct pollfd fds[PMC_MAX_FDS];
        int n = pmc_fds(r, fds, PMC_MAX_FDS);
        ::poll(fds, static_cast<nfds_t>(n), pmc_timeout_ms(r));
        pmc_process(r, fds, static_cast<size_t>(n));
    }
    EXPECT_EQ(done.status, PMC_OK) << done.res.reason;
    EXPECT_EQ(std::string(done.res.pmsp), acc.endpoint().to_string());
    EXPECT_EQ(done.res.pmsps_tried, 2u);

    pmc_counters c;
    std::memset(&c, 0, sizeof c);
    c.size = sizeof c;
    ASSERT_EQ(pmc_get_counters(r, &c), PMC_OK);
    EXPECT_EQ(c.pmsp_failovers, 2u);
    EXPECT_EQ(c.accepted, 2u);
    pmc_resolver_free(r);
}

}  // namespace
