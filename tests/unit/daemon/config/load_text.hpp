// SPDX-License-Identifier: Apache-2.0
// Loading configuration text in the config tests: load_ok() for text that
// must be valid (a failure is reported, the defaults returned),
// load_error() for text that must be rejected (its "FILE:LINE: KEY:
// MESSAGE" text).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "daemon/config/config.hpp"

namespace pmd::testing_config {

inline Config load_ok(const std::string& yaml) {
    auto r = load_config_string(yaml, "t.yaml");
    if (auto* e = std::get_if<ConfigError>(&r)) {
        ADD_FAILURE() << e->to_string();
        return Config::defaults();
    }
    return std::get<Config>(r);
}

inline std::string load_error(const std::string& yaml) {
    auto r = load_config_string(yaml, "t.yaml");
    if (auto* e = std::get_if<ConfigError>(&r)) {
        return e->to_string();
    }
    ADD_FAILURE() << "expected an error for:\n" << yaml;
    return "";
}

}  // namespace pmd::testing_config
