// SPDX-License-Identifier: Apache-2.0
// The `limits:` section: section 15.2 defences of sdp-pmd.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <variant>

#include "daemon/config/config.hpp"

namespace {

using namespace std::chrono_literals;
using pmd::Config;
using pmd::ConfigError;
using ::testing::HasSubstr;

Config ok(const std::string& yaml) {
    auto r = pmd::load_config_string(yaml, "limits.yaml");
    if (auto* e = std::get_if<ConfigError>(&r)) {
        ADD_FAILURE() << e->to_string();
        return Config::defaults();
    }
    return std::get<Config>(r);
}

ConfigError bad(const std::string& yaml) {
    auto r = pmd::load_config_string(yaml, "limits.yaml");
    EXPECT_TRUE(std::holds_alternative<ConfigError>(r)) << yaml;
    return std::holds_alternative<ConfigError>(r) ? std::get<ConfigError>(r) : ConfigError{};
}

TEST(LimitsConfig, OffByDefault) {
    Config c = ok("log_level: info\n");
    EXPECT_EQ(c.per_source.rate, 0);
    EXPECT_EQ(c.quench.max_unacked, 0u);
}

TEST(LimitsConfig, AllKeys) {
    Config c =
        ok("limits:\n"
           "  per_source:\n"
           "    rate: 1000\n"
           "    burst: 2000\n"
           "    max_sources: 4096\n"
           "  source_quench:\n"
           "    max_unacked: 256\n"
           "    window: 2s\n"
           "    period: 30s\n"
           "    max_sources: 1024\n");
    EXPECT_EQ(c.per_source.rate, 1000);
    EXPECT_EQ(c.per_source.burst, 2000);
    EXPECT_EQ(c.per_source.max_sources, 4096u);
    EXPECT_EQ(c.quench.max_unacked, 256u);
    EXPECT_EQ(c.quench.window, 2s);
    EXPECT_EQ(c.quench.period, 30s);
    EXPECT_EQ(c.quench.max_sources, 1024u);
}

TEST(LimitsConfig, BurstDefaultsToOneSecondOfRate) {
    Config c = ok("limits:\n  per_source:\n    rate: 500\n");
    EXPECT_EQ(c.per_source.burst, 500);
}

TEST(LimitsConfig, ErrorsNameLineAndKey) {
    auto e = bad("limits:\n  per_source:\n    rate: fast\n");
    EXPECT_EQ(e.line, 3);
    EXPECT_EQ(e.key, "limits.per_source.rate");
    e = bad("limits:\n  source_quench:\n    window: 5 parsecs\n");
    EXPECT_EQ(e.line, 3);
    EXPECT_EQ(e.key, "limits.source_quench.window");
    EXPECT_THAT(e.message, HasSubstr("bad duration"));
    e = bad("limits:\n  per_sorce:\n    rate: 1\n");
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.key, "limits.per_sorce");
    EXPECT_THAT(e.message, HasSubstr("unknown key"));
    e = bad("limits:\n  per_source:\n    burst: 0\n");
    EXPECT_EQ(e.key, "limits.per_source.burst");
    e = bad("limits: [1, 2]\n");
    EXPECT_EQ(e.key, "limits");
}

}  // namespace
