// SPDX-License-Identifier: Apache-2.0
// The one table of counters and its four renderings: stats, the
// "counters:" log line, the Prometheus text and STATUS=.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "daemon/io/metrics.hpp"

namespace pmd::io {
namespace {

MetricSources sources(unsigned workers, bool one_silent = false) {
    std::vector<std::optional<WorkerSnapshot>> per_worker;
    for (unsigned i = 0; i < workers; ++i) {
        WorkerSnapshot w;
        w.counters.datagrams = 10 + i;
        w.counters.requests = 5;
        w.counters.outcome[static_cast<std::size_t>(Outcome::accepted)] = 2;
        w.transactions = i;
        per_worker.push_back(w);
    }
    if (one_silent) {
        per_worker.back().reset();
    }
    MetricSources s;
    s.workers = aggregate(std::move(per_worker));
    s.shell.reloads = 3;
    s.control.requests = 7;
    s.static_services = 2;
    s.dynamic_services = 1;
    s.uptime_seconds = 42;
    return s;
}

TEST(Metrics, StatsNamesAreUniqueAndCountersAreIntegers) {
    const auto values = metric_values(sources(2));
    std::set<std::string> names;
    for (const auto& v : values) {
        EXPECT_TRUE(names.insert(v.stat).second) << v.stat;
    }
    const nlohmann::json j = stats_json(values);
    EXPECT_EQ(j["datagrams"], 21);
    EXPECT_TRUE(j["datagrams"].is_number_unsigned());
    EXPECT_EQ(j["requests"], 10);
    EXPECT_EQ(j["accepted"], 4);
    EXPECT_EQ(j["reloads"], 3);
    EXPECT_EQ(j["control_requests"], 7);
    EXPECT_TRUE(j["transactions"].is_number_float());
    EXPECT_EQ(j["transactions"], 1.0);
    EXPECT_EQ(j["workers"], 2.0);
    EXPECT_EQ(j["worker1_datagrams"], 11);
    EXPECT_EQ(j["uptime_seconds"], 42.0);
}

TEST(Metrics, PrometheusFamiliesAreTogetherWithHelpAndTypeOnce) {
    const std::string text = prometheus_text(metric_values(sources(2)));
    EXPECT_EQ(text.rfind("# HELP sdp_pmd_datagrams_total UDP datagrams received.\n"
                         "# TYPE sdp_pmd_datagrams_total counter\n"
                         "sdp_pmd_datagrams_total 21\n",
                         0),
              0u)
        << text;
    EXPECT_NE(text.find("sdp_pmd_outcomes_total{outcome=\"accepted\"} 4\n"), std::string::npos);
    EXPECT_NE(text.find("# TYPE sdp_pmd_transactions gauge\nsdp_pmd_transactions 1\n"),
              std::string::npos);
    EXPECT_NE(text.find("sdp_pmd_worker_datagrams_total{worker=\"0\"} 10\n"
                        "sdp_pmd_worker_datagrams_total{worker=\"1\"} 11\n"),
              std::string::npos);
    EXPECT_NE(text.find("sdp_pmd_services{kind=\"static\"} 2\n"
                        "sdp_pmd_services{kind=\"dynamic\"} 1\n"),
              std::string::npos);
    std::size_t pos = 0;
    std::size_t helps = 0;
    while ((pos = text.find("# HELP sdp_pmd_services ", pos)) != std::string::npos) {
        ++helps;
        ++pos;
    }
    EXPECT_EQ(helps, 1u);
}

TEST(Metrics, CountersLine) {
    const std::string one = counters_line(metric_values(sources(1)));
    EXPECT_EQ(one.rfind("counters: datagrams=10 requests=5 iwpm_requests=0 ", 0), 0u) << one;
    // The order of 00eec7b, which scripts match (tests/topologies/nft_loss.sh).
    EXPECT_NE(one.find(" quench_events=0 transactions=0 truncated=0 "), std::string::npos) << one;
    EXPECT_TRUE(one.ends_with(" reloads=3 reload_failures=0")) << one;
    EXPECT_EQ(one.find("workers"), std::string::npos) << one;
    EXPECT_EQ(one.find("control_"), std::string::npos) << one;

    const std::string two = counters_line(metric_values(sources(2, true)));
    EXPECT_NE(two.find(" workers=2 workers_unresponsive=1"), std::string::npos) << two;
    EXPECT_NE(two.find(" worker0_datagrams=10"), std::string::npos) << two;
    EXPECT_EQ(two.find("worker1_"), std::string::npos) << two;  // it did not answer
}

TEST(Metrics, StatusLine) {
    EXPECT_EQ(status_line(metric_values(sources(1))), "3 services, 0 transactions, 5 requests");
    EXPECT_EQ(status_line(metric_values(sources(3))),
              "3 services, 3 transactions, 15 requests, 3 workers");
}

}  // namespace
}  // namespace pmd::io
