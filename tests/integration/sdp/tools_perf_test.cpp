// SPDX-License-Identifier: Apache-2.0
// sdp-perf with several mechanisms and runs: --mechanism takes a list (or
// all), kernel TCP is measured once per size and run and shared by every
// mechanism's row, --runs N prints every run and a min-max summary, and bad
// lists or run counts are usage errors (exit 2). Runs the real program
// (SDPPM_SDP_PERF_BIN) with tiny sizes and short times; asserts the
// structure of the output, never a speed.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tool_run.hpp"

namespace {

using sdptest::run;

const std::string kPerf = SDPPM_SDP_PERF_BIN;

// The JSON output (stdout only); yaml-cpp reads JSON.
YAML::Node run_json(const std::string& args) {
    auto r = run(kPerf + " " + args + " --json", false);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
    try {
        return YAML::Load(r.output);
    } catch (const YAML::Exception& e) {
        ADD_FAILURE() << "not JSON: " << e.what() << ": " << r.output;
        return {};
    }
}

// The rows of the text output's table, split at '|': the lines starting with
// a digit before the min-max summary.
std::vector<std::vector<std::string>> table_rows(const std::string& out) {
    std::vector<std::vector<std::string>> rows;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line) && line.rfind("min-max", 0) != 0;) {
        if (line.empty() || line[0] < '0' || line[0] > '9') {
            continue;
        }
        std::vector<std::string> cols;
        std::istringstream cs(line);
        for (std::string c; std::getline(cs, c, '|');) {
            const auto b = c.find_first_not_of(' ');
            const auto e = c.find_last_not_of(' ');
            cols.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
        }
        rows.push_back(cols);
    }
    return rows;
}

TEST(SdpPerfMechanisms, AllMechanismsShareTheTcpBaselineOfTheirSizeAndRun) {
    const auto j = run_json("--sizes 64,4096 --time 0.1 --mechanism all --runs 2");
    ASSERT_TRUE(j.IsMap());
    EXPECT_EQ(j["mechanism"].as<std::string>(), "bcopy,zcopy,auto");
    ASSERT_EQ(j["mechanisms"].size(), 3u);
    EXPECT_EQ(j["mechanisms"][0].as<std::string>(), "bcopy");
    EXPECT_EQ(j["mechanisms"][1].as<std::string>(), "zcopy");
    EXPECT_EQ(j["mechanisms"][2].as<std::string>(), "auto");
    EXPECT_EQ(j["runs"].as<int>(), 2);
    const auto& results = j["results"];
    ASSERT_EQ(results.size(), 2u * 2u * 3u);  // runs x sizes x mechanisms

    const char* tcp_fields[] = {"tcp_mbps", "tcp_cpu_s_per_gb", "tcp_rtt_us", "tcp_p99_us"};
    std::map<std::pair<int, std::size_t>, std::set<std::string>> mechs;
    std::map<std::pair<int, std::size_t>, YAML::Node> baseline;
    for (const auto& r : results) {
        const int run_no = r["run"].as<int>();
        const auto size = r["size"].as<std::size_t>();
        const auto mech = r["mechanism"].as<std::string>();
        SCOPED_TRACE("run " + std::to_string(run_no) + " size " + std::to_string(size) + " " +
                     mech);
        EXPECT_TRUE(run_no == 1 || run_no == 2);
        EXPECT_TRUE(size == 64 || size == 4096);
        EXPECT_TRUE(r["ok"].as<bool>());
        const auto key = std::make_pair(run_no, size);
        EXPECT_TRUE(mechs[key].insert(mech).second) << "twice";
        for (const char* f : {"throughput_ratio", "latency_ratio", "sdp_mbps", "tcp_mbps",
                              "sdp_rtt_us", "tcp_rtt_us"}) {
            const double v = r[f].as<double>();
            EXPECT_TRUE(std::isfinite(v) && v > 0) << f << " = " << v;
        }
        // The ratio is this row's SDP number over this row's TCP number,
        // within the rounding of the printed values (MB/s to 0.1, us to
        // 0.01, ratios to 0.001): at 64 B under ASan a few MB/s rounded to
        // 0.1 move the ratio by more than 1%.
        const auto near = [](double printed, double a, double b, double half_step) {
            const double q = a / b;
            return std::abs(printed - q) <= q * (half_step / a + half_step / b) * 1.01 + 0.0006;
        };
        const double sm = r["sdp_mbps"].as<double>(), tm = r["tcp_mbps"].as<double>();
        EXPECT_TRUE(near(r["throughput_ratio"].as<double>(), sm, tm, 0.05))
            << r["throughput_ratio"].as<double>() << " vs " << sm << " / " << tm;
        const double sl = r["sdp_rtt_us"].as<double>(), tl = r["tcp_rtt_us"].as<double>();
        EXPECT_TRUE(near(r["latency_ratio"].as<double>(), sl, tl, 0.005))
            << r["latency_ratio"].as<double>() << " vs " << sl << " / " << tl;
        // One TCP baseline per size and run, the same in every mechanism's row.
        auto [it, first] = baseline.try_emplace(key, r);
        if (!first) {
            for (const char* f : tcp_fields) {
                EXPECT_EQ(r[f].as<std::string>(), it->second[f].as<std::string>()) << f;
            }
        }
    }
    EXPECT_EQ(mechs.size(), 4u);  // (run, size) pairs
    for (const auto& [key, names] : mechs) {
        EXPECT_EQ(names, (std::set<std::string>{"bcopy", "zcopy", "auto"}))
            << "run " << key.first << " size " << key.second;
    }

    const auto& summary = j["summary"];
    ASSERT_EQ(summary.size(), 2u * 3u);  // sizes x mechanisms
    for (const auto& s : summary) {
        SCOPED_TRACE(s["size"].as<std::string>() + " " + s["mechanism"].as<std::string>());
        EXPECT_EQ(s["errors"].as<int>(), 0);
        for (const char* f : {"throughput_ratio", "latency_ratio", "sdp_mbps", "tcp_mbps"}) {
            const double lo = s[f]["min"].as<double>(), hi = s[f]["max"].as<double>();
            EXPECT_GT(lo, 0) << f;
            EXPECT_LE(lo, hi) << f;
        }
    }
}

TEST(SdpPerfMechanisms, OneMechanismKeepsTheFormerOutput) {
    // Text: the former header and rows, no run or mechanism column, no summary.
    auto text = run(kPerf + " --sizes 4096 --time 0.1");
    ASSERT_EQ(text.exit_code, 0) << text.output;
    EXPECT_NE(text.output.find("soft iWARP (MPA CRC on, bcopy) vs kernel TCP"), std::string::npos)
        << text.output;
    EXPECT_NE(text.output.find("\nsize     |  sdp MB/s  tcp MB/s  ratio |  sdp cpu  tcp cpu |"),
              std::string::npos)
        << text.output;
    EXPECT_NE(text.output.find("\n4 KiB    | "), std::string::npos) << text.output;
    EXPECT_EQ(text.output.find("mech"), std::string::npos) << text.output;
    EXPECT_EQ(text.output.find("min-max"), std::string::npos) << text.output;

    // JSON: what bench/preload-iperf reads (results[0].sdp_mbps) is there;
    // the default mechanism is still bcopy.
    const auto j = run_json("--sizes 4096 --time 0.1 --only sdp --no-latency");
    EXPECT_EQ(j["mechanism"].as<std::string>(), "bcopy");
    ASSERT_EQ(j["results"].size(), 1u);
    EXPECT_EQ(j["results"][0]["mechanism"].as<std::string>(), "bcopy");
    EXPECT_EQ(j["results"][0]["run"].as<int>(), 1);
    EXPECT_GT(j["results"][0]["sdp_mbps"].as<double>(), 0);
    EXPECT_GE(j["results"][0]["sdp_cpu_s_per_gb"].as<double>(), 0);
}

TEST(SdpPerfMechanisms, TextPrintsEveryRunThenMinMax) {
    auto r = run(kPerf + " --sizes 4096 --time 0.1 --no-latency --mechanism zcopy,bcopy --runs 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\nrun | size     | mech  |  sdp MB/s"), std::string::npos) << r.output;
    const auto rows = table_rows(r.output);
    // Two runs of two mechanisms: run, size, mech, throughput, ...
    ASSERT_EQ(rows.size(), 4u) << r.output;
    const std::vector<std::tuple<std::string, std::string>> want{
        {"1", "zcopy"}, {"1", "bcopy"}, {"2", "zcopy"}, {"2", "bcopy"}};
    for (std::size_t i = 0; i < rows.size(); ++i) {
        ASSERT_GE(rows[i].size(), 4u) << r.output;
        EXPECT_EQ(rows[i][0], std::get<0>(want[i]));
        EXPECT_EQ(rows[i][1], "4 KiB");
        EXPECT_EQ(rows[i][2], std::get<1>(want[i]));
    }
    // The TCP column (second number after the mechanism) is shared in a run.
    auto tcp_of = [](const std::vector<std::string>& row) {
        std::istringstream in(row[3]);
        std::string sdp, tcp;
        in >> sdp >> tcp;
        return tcp;
    };
    EXPECT_EQ(tcp_of(rows[0]), tcp_of(rows[1]));
    EXPECT_EQ(tcp_of(rows[2]), tcp_of(rows[3]));
    const auto sum = r.output.find("min-max over 2 runs:\n");
    ASSERT_NE(sum, std::string::npos) << r.output;
    const std::string tail = r.output.substr(sum);
    EXPECT_NE(tail.find("\n4 KiB    | zcopy | "), std::string::npos) << tail;
    EXPECT_NE(tail.find("\n4 KiB    | bcopy | "), std::string::npos) << tail;
}

TEST(SdpPerfMechanisms, RejectsBadMechanismLists) {
    const std::pair<const char*, const char*> cases[] = {
        {"''", "empty list"},
        {"bcopy,fast", "unknown mechanism 'fast'"},
        {"BCOPY", "unknown mechanism 'BCOPY'"},
        {"bcopy,,zcopy", "empty item"},
        {"zcopy,", "empty item"},
        {",", "empty item"},
        {"zcopy,zcopy", "zcopy given twice"},
        {"all,bcopy", "bcopy given twice"},
        {"auto,automatic", "auto given twice"},
    };
    for (const auto& [arg, why] : cases) {
        auto r = run(kPerf + " --sizes 64 --time 0.05 --mechanism " + arg);
        EXPECT_EQ(r.exit_code, 2) << arg << ": " << r.output;
        EXPECT_NE(r.output.find("bad --mechanism"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(why), std::string::npos) << arg << ": " << r.output;
        EXPECT_EQ(r.output.find("sdp-perf: loopback"), std::string::npos) << r.output;
    }
    auto missing = run(kPerf + " --mechanism");
    EXPECT_EQ(missing.exit_code, 2) << missing.output;
    EXPECT_NE(missing.output.find("--mechanism needs a value"), std::string::npos)
        << missing.output;
}

TEST(SdpPerfMechanisms, RunsMustBeOneToTwenty) {
    for (const char* bad : {"0", "21", "-1", "x", "2x", "''", "1000000000000"}) {
        auto r = run(kPerf + " --sizes 64 --time 0.05 --runs " + bad);
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
        EXPECT_NE(r.output.find("bad --runs"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("from 1 to 20"), std::string::npos) << r.output;
    }
    // The bound itself is accepted (kernel TCP only, to stay short).
    const auto j = run_json("--sizes 64 --time 0.01 --only tcp --no-latency --runs 20");
    EXPECT_EQ(j["runs"].as<int>(), 20);
    EXPECT_EQ(j["results"].size(), 20u);
}

TEST(SdpPerfMechanisms, BadNumbersAreUsageErrors) {
    for (const char* args :
         {"--sizes 64,abc", "--time fast", "--bytes 1k", "--zcopy-threshold x"}) {
        auto r = run(kPerf + " " + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_NE(r.output.find("expected a number"), std::string::npos) << r.output;
    }
}

TEST(SdpPerfMechanisms, UsageShowsTheListAndRuns) {
    auto r = run(kPerf + " --help");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.output.find("--mechanism bcopy|zcopy|auto[,...]|all"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("--runs 1-20"), std::string::npos) << r.output;
}

}  // namespace
