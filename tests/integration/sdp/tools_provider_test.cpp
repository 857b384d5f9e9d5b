// SPDX-License-Identifier: Apache-2.0
// sdp-cat and sdp-perf: the --provider option (soft|rdma|auto) is checked
// and a bad value is a usage error (exit 2) naming the option; an rdma
// provider without a device is a clear runtime error (exit 1). Runs the
// real programs (SDPPM_SDP_CAT_BIN, SDPPM_SDP_PERF_BIN).
#include <gtest/gtest.h>

#include <string>

#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"
#include "tool_run.hpp"

namespace {

using sdptest::run;

const std::string kCat = SDPPM_SDP_CAT_BIN;
const std::string kPerf = SDPPM_SDP_PERF_BIN;

TEST(SdpToolsProvider, CatRejectsBadProviderValues) {
    for (const char* bad : {"bogus", "RDMA", "tcp", "''"}) {
        auto r = run(kCat + " --provider " + bad + " --sdp 127.0.0.1 9");
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
        EXPECT_NE(r.output.find("bad --provider"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("expected soft, rdma or auto"), std::string::npos) << r.output;
    }
    auto missing = run(kCat + " --sdp 127.0.0.1 9 --provider");
    EXPECT_EQ(missing.exit_code, 2) << missing.output;
    EXPECT_NE(missing.output.find("usage:"), std::string::npos) << missing.output;
    auto unknown = run(kCat + " --providr rdma 127.0.0.1 9");
    EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
    EXPECT_NE(unknown.output.find("unknown option --providr"), std::string::npos) << unknown.output;
}

// --io-timeout takes milliseconds 0 .. 3600000; anything else is a usage
// error naming the option.
TEST(SdpToolsProvider, CatRejectsBadIoTimeouts) {
    for (const char* bad : {"x", "-5", "3600001", "10ms", "''", "99999999999999999999"}) {
        auto r = run(kCat + " --io-timeout " + bad + " --sdp 127.0.0.1 9");
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
        EXPECT_NE(r.output.find("bad --io-timeout"), std::string::npos) << r.output;
    }
    auto help = run(kCat + " --help");
    EXPECT_NE(help.output.find("[--io-timeout MS]"), std::string::npos) << help.output;
}

TEST(SdpToolsProvider, PerfRejectsBadProviderValues) {
    auto r = run(kPerf + " --provider fast --time 0.1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("bad --provider 'fast'"), std::string::npos) << r.output;
    auto missing = run(kPerf + " --provider");
    EXPECT_EQ(missing.exit_code, 2) << missing.output;
    EXPECT_NE(missing.output.find("--provider needs a value"), std::string::npos) << missing.output;
}

TEST(SdpToolsProvider, UsageMentionsTheOption) {
    auto cat = run(kCat + " --help");
    EXPECT_EQ(cat.exit_code, 0);
    EXPECT_NE(cat.output.find("--provider soft|rdma|auto"), std::string::npos) << cat.output;
    auto perf = run(kPerf + " --help");
    EXPECT_EQ(perf.exit_code, 0);
    EXPECT_NE(perf.output.find("--provider soft|rdma|auto"), std::string::npos) << perf.output;
}

TEST(SdpToolsProvider, RdmaWithoutDeviceIsAClearRuntimeError) {
    if (sdp::rdma_available()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    sdptest::TcpListener l;
    auto cat = run(kCat + " --provider rdma --sdp 127.0.0.1 " + std::to_string(l.port()));
    EXPECT_EQ(cat.exit_code, 1) << cat.output;
    EXPECT_NE(cat.output.find("no usable iWARP RDMA device"), std::string::npos) << cat.output;
    auto listen = run(kCat + " --provider rdma -l --bind 127.0.0.1 0");
    EXPECT_EQ(listen.exit_code, 1) << listen.output;
    EXPECT_NE(listen.output.find("no usable iWARP RDMA device"), std::string::npos)
        << listen.output;
    auto perf = run(kPerf + " --provider rdma --time 0.1 --sizes 64");
    EXPECT_EQ(perf.exit_code, 1) << perf.output;
    EXPECT_NE(perf.output.find("no usable iWARP RDMA device"), std::string::npos) << perf.output;
}

TEST(SdpToolsProvider, PerfAutoRunsOnTheSoftProviderWithoutDevice) {
    if (sdp::rdma_available()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    auto perf = run(kPerf + " --provider auto --time 0.2 --sizes 4096 --only sdp --json");
    EXPECT_EQ(perf.exit_code, 0) << perf.output;
    EXPECT_NE(perf.output.find("\"provider\": \"soft\""), std::string::npos) << perf.output;
    EXPECT_NE(perf.output.find("\"ok\": true"), std::string::npos) << perf.output;
}

}  // namespace
