// SPDX-License-Identifier: Apache-2.0
// The `health:` settings, top level and per service (issue #15).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <variant>

#include "daemon/config/config.hpp"

namespace {

using namespace std::chrono_literals;
using pmd::Config;
using pmd::ConfigError;
using pmd::HealthCheck;
using ::testing::HasSubstr;

Config ok(const std::string& yaml) {
    auto r = pmd::load_config_string(yaml, "health.yaml");
    if (auto* e = std::get_if<ConfigError>(&r)) {
        ADD_FAILURE() << e->to_string();
        return Config::defaults();
    }
    return std::get<Config>(r);
}

ConfigError bad(const std::string& yaml) {
    auto r = pmd::load_config_string(yaml, "health.yaml");
    EXPECT_TRUE(std::holds_alternative<ConfigError>(r)) << yaml;
    return std::holds_alternative<ConfigError>(r) ? std::get<ConfigError>(r) : ConfigError{};
}

const std::string kService =
    "services:\n"
    "  - name: web\n"
    "    conventional: \"*:80\"\n"
    "    sdp: [\"127.0.0.1:8080\"]\n";

TEST(HealthConfig, NothingSetMeansBuiltInDefaults) {
    Config c = ok(kService);
    EXPECT_EQ(c.health, pmd::HealthOverrides{});
    EXPECT_EQ(c.services[0].health, pmd::HealthOverrides{});
    auto s = pmd::resolve_health(c.services[0].health, c.health);
    EXPECT_FALSE(s.check);  // by locality
    EXPECT_EQ(s.interval, 1s);
    EXPECT_EQ(s.timeout, 1s);
    EXPECT_EQ(s.rise, 2u);
    EXPECT_EQ(s.fall, 2u);
}

TEST(HealthConfig, TopLevelAndPerServiceKeys) {
    Config c =
        ok("health:\n"
           "  interval: 500ms\n"
           "  fall: 3\n" +
           kService +
           "    health:\n"
           "      check: connect\n"
           "      timeout: 250ms\n"
           "      rise: 4\n");
    EXPECT_EQ(c.health.interval, 500ms);
    EXPECT_EQ(c.health.fall, 3u);
    EXPECT_FALSE(c.health.check);
    const auto& h = c.services[0].health;
    EXPECT_EQ(h.check, HealthCheck::connect);
    EXPECT_EQ(h.timeout, 250ms);
    EXPECT_EQ(h.rise, 4u);
    auto s = pmd::resolve_health(h, c.health);
    EXPECT_EQ(s.check, HealthCheck::connect);
    EXPECT_EQ(s.interval, 500ms);
    EXPECT_EQ(s.timeout, 250ms);
    EXPECT_EQ(s.rise, 4u);
    EXPECT_EQ(s.fall, 3u);
}

TEST(HealthConfig, OffIsShorthandForCheckOff) {
    Config c = ok("health: off\n" + kService);
    EXPECT_EQ(c.health.check, HealthCheck::off);
    c = ok(kService + "    health: off\n");
    EXPECT_EQ(c.services[0].health.check, HealthCheck::off);
    c = ok("health: {check: off}\n");
    EXPECT_EQ(c.health.check, HealthCheck::off);
    c = ok("health: {check: listener}\n");
    EXPECT_EQ(c.health.check, HealthCheck::listener);
}

TEST(HealthConfig, ErrorsNameLineAndKey) {
    auto e = bad("health:\n  check: ping\n");
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.key, "health.check");
    EXPECT_THAT(e.message, HasSubstr("listener, connect or off"));
    e = bad("health:\n  interval: 10ms\n");
    EXPECT_EQ(e.key, "health.interval");
    EXPECT_THAT(e.message, HasSubstr("out of range"));
    e = bad("health:\n  timeout: soon\n");
    EXPECT_EQ(e.key, "health.timeout");
    e = bad("health:\n  rise: 0\n");
    EXPECT_EQ(e.key, "health.rise");
    e = bad("health:\n  fall: 101\n");
    EXPECT_EQ(e.key, "health.fall");
    e = bad("health:\n  intervall: 1s\n");
    EXPECT_EQ(e.key, "health.intervall");
    EXPECT_THAT(e.message, HasSubstr("did you mean \"interval\""));
    e = bad("health: on\n");
    EXPECT_EQ(e.key, "health");
    EXPECT_EQ(e.line, 1);
    e = bad(kService + "    health:\n      fall: many\n");
    EXPECT_EQ(e.line, 6);
    EXPECT_EQ(e.key, "services[0].health.fall");
    EXPECT_EQ(e.to_string(), "health.yaml:6: services[0].health.fall: bad number \"many\"");
}

}  // namespace
