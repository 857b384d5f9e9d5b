// SPDX-License-Identifier: Apache-2.0
// The reload diff of the listen addresses, without sockets.
#include <gtest/gtest.h>

#include "daemon/core/listen_plan.hpp"

namespace pmd {
namespace {

pm::Endpoint ep(const char* text) {
    return *pm::Endpoint::parse(text);
}

TEST(ListenPlan, KeepsEqualAddressesOpensNewOnesClosesTheRest) {
    const std::vector<pm::Endpoint> running{ep("127.0.0.1:5000"), ep("127.0.0.2:5000")};
    const std::vector<pm::Endpoint> wanted{ep("127.0.0.2:5000"), ep("127.0.0.3:5000")};
    const ListenPlan plan = plan_listen(wanted, running);
    ASSERT_EQ(plan.items.size(), 2u);
    EXPECT_EQ(plan.items[0].endpoint, ep("127.0.0.2:5000"));
    EXPECT_EQ(plan.items[0].keep, std::optional<std::size_t>(1));
    EXPECT_EQ(plan.items[1].endpoint, ep("127.0.0.3:5000"));
    EXPECT_FALSE(plan.items[1].keep);
    EXPECT_EQ(plan.close, (std::vector<std::size_t>{0}));
}

TEST(ListenPlan, PortZeroIsAlwaysNew) {
    const std::vector<pm::Endpoint> running{ep("127.0.0.1:0")};
    const std::vector<pm::Endpoint> wanted{ep("127.0.0.1:0")};
    const ListenPlan plan = plan_listen(wanted, running);
    ASSERT_EQ(plan.items.size(), 1u);
    EXPECT_FALSE(plan.items[0].keep);
    EXPECT_EQ(plan.close, (std::vector<std::size_t>{0}));
}

TEST(ListenPlan, StartIsAllNew) {
    const std::vector<pm::Endpoint> wanted{ep("127.0.0.1:5000"), ep("[::1]:5000")};
    const ListenPlan plan = plan_listen(wanted, {});
    ASSERT_EQ(plan.items.size(), 2u);
    EXPECT_FALSE(plan.items[0].keep);
    EXPECT_FALSE(plan.items[1].keep);
    EXPECT_TRUE(plan.close.empty());
}

TEST(ListenPlan, SameListKeepsEverything) {
    const std::vector<pm::Endpoint> list{ep("127.0.0.1:5000"), ep("[::1]:5000")};
    const ListenPlan plan = plan_listen(list, list);
    EXPECT_EQ(plan.items[0].keep, std::optional<std::size_t>(0));
    EXPECT_EQ(plan.items[1].keep, std::optional<std::size_t>(1));
    EXPECT_TRUE(plan.close.empty());
}

}  // namespace
}  // namespace pmd
