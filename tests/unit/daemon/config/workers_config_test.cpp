// SPDX-License-Identifier: Apache-2.0
// `workers:` (UDP worker shards): numbers, "auto", and errors naming the
// file, line and key like every other setting.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "daemon/config/config.hpp"

namespace pmd {
namespace {

Config ok(const std::string& yaml) {
    auto r = load_config_string(yaml, "w.yaml");
    if (const auto* e = std::get_if<ConfigError>(&r)) {
        ADD_FAILURE() << e->to_string() << "\n" << yaml;
        return Config::defaults();
    }
    return std::get<Config>(std::move(r));
}

std::string bad(const std::string& yaml) {
    auto r = load_config_string(yaml, "w.yaml");
    if (!std::holds_alternative<ConfigError>(r)) {
        ADD_FAILURE() << "accepted: " << yaml;
        return {};
    }
    return std::get<ConfigError>(r).to_string();
}

TEST(WorkersConfig, DefaultIsOneWorker) {
    EXPECT_EQ(Config::defaults().workers, kDefaultWorkers);
    EXPECT_EQ(ok("log_level: info\n").workers, kDefaultWorkers);
}

TEST(WorkersConfig, Numbers) {
    EXPECT_EQ(ok("workers: 1\n").workers, 1u);
    EXPECT_EQ(ok("workers: 2\n").workers, 2u);
    EXPECT_EQ(ok("workers: 64\n").workers, 64u);
    EXPECT_EQ(ok("workers: \"4\"\n").workers, 4u);
}

TEST(WorkersConfig, AutoIsZero) {
    EXPECT_EQ(ok("workers: auto\n").workers, 0u);
    EXPECT_EQ(ok("workers: \"auto\"\n").workers, 0u);
}

TEST(WorkersConfig, OutOfRangeNamesLineAndKey) {
    EXPECT_EQ(bad("log_level: info\nworkers: 0\n"),
              "w.yaml:2: workers: out of range: \"0\" is not between 1 and 64 (or \"auto\")");
    EXPECT_NE(bad("workers: 65\n").find("w.yaml:1: workers: out of range"), std::string::npos);
    EXPECT_NE(bad("workers: 99999999999999999999999\n").find("w.yaml:1: workers: out of range"),
              std::string::npos);
}

TEST(WorkersConfig, BadValues) {
    for (const char* v :
         {"-1", "two", "Auto", "AUTO", "1.5", "0x4", "\"\"", "\"4 \"", "+4", "1e2"}) {
        const std::string e = bad(std::string("workers: ") + v + "\n");
        EXPECT_NE(e.find("w.yaml:1: workers: "), std::string::npos) << v << ": " << e;
    }
    EXPECT_NE(bad("workers: [1, 2]\n").find("w.yaml:1: workers: expected"), std::string::npos);
    EXPECT_NE(bad("workers: {n: 1}\n").find("w.yaml:1: workers: expected"), std::string::npos);
    EXPECT_NE(bad("workers:\n").find("w.yaml:1: workers: missing value"), std::string::npos);
}

TEST(WorkersConfig, UnknownKeySuggestsWorkers) {
    EXPECT_NE(bad("worker: 2\n").find("workers"), std::string::npos);
}

TEST(WorkersConfig, ParseWorkers) {
    EXPECT_EQ(parse_workers("auto"), std::optional<unsigned>(0));
    EXPECT_EQ(parse_workers("1"), std::optional<unsigned>(1));
    EXPECT_EQ(parse_workers("64"), std::optional<unsigned>(64));
    EXPECT_FALSE(parse_workers("0"));
    EXPECT_FALSE(parse_workers("65"));
    EXPECT_FALSE(parse_workers("-2"));
    EXPECT_FALSE(parse_workers(""));
    EXPECT_FALSE(parse_workers("18446744073709551617"));
    EXPECT_FALSE(parse_workers("four"));
}

}  // namespace
}  // namespace pmd
