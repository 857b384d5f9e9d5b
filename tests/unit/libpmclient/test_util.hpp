// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gtest/gtest.h>

#include "libpmclient/src/machine.hpp"

namespace pmclient::test {

using namespace std::chrono_literals;

inline TimePoint T(std::chrono::milliseconds ms) {
    return TimePoint{} + 1h + ms;
}

inline pm::Endpoint ep(const char* text) {
    auto e = pm::Endpoint::parse(text);
    EXPECT_TRUE(e.has_value()) << text;
    return e.value_or(pm::Endpoint{});
}

inline Query query(const char* conventional = "10.0.0.1:7000", const char* cp = "10.0.0.2:40000",
                   const char* pmsp = "10.0.0.1:3935") {
    Query q;
    q.conventional = ep(conventional);
    q.cp = ep(cp);
    q.pmsp = ep(pmsp);
    return q;
}

inline pm::Message decode_ok(const pm::Wire& w) {
    auto r = pm::decode(w);
    EXPECT_TRUE(std::holds_alternative<pm::Message>(r));
    return std::holds_alternative<pm::Message>(r) ? std::get<pm::Message>(r) : pm::Message{};
}

}  // namespace pmclient::test
