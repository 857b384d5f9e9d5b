// SPDX-License-Identifier: Apache-2.0
// Per-service counts across registry snapshots: with several worker shards a
// new snapshot (reload, registration) reaches the shards one after the
// other, so counts made through the old snapshot after the new one was
// built must still show in the new one.
#include <gtest/gtest.h>

#include "daemon/core/service.hpp"

namespace pmd {
namespace {

Service make(const char* name, std::uint16_t port) {
    Service s;
    s.name = name;
    s.conventional_port = port;
    s.sdp.push_back(*pm::Endpoint::parse("127.0.0.1:9000"));
    return s;
}

TEST(RegistryCounts, SharedWithTheNextSnapshotByName) {
    Registry r1({make("a", 80), make("b", 81)});
    r1.note_accept(r1.services()[0], false);
    Registry r2({make("b", 81), make("a", 80), make("c", 82)}, &r1);
    // A shard still on r1 keeps counting: r2 sees it.
    r1.note_accept(r1.services()[0], true);
    r1.note_deny(r1.services()[1]);
    const Service* a = r2.find(pm::IpAddress::v4({127, 0, 0, 1}), 80);
    const Service* b = r2.find(pm::IpAddress::v4({127, 0, 0, 1}), 81);
    const Service* c = r2.find(pm::IpAddress::v4({127, 0, 0, 1}), 82);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(r2.counts(*a).accepted, 1u);
    EXPECT_EQ(r2.counts(*a).accepted_duplicate, 1u);
    EXPECT_EQ(r2.counts(*b).denied, 1u);
    EXPECT_EQ(r2.counts(*c).accepted, 0u);
    // A service that disappears and comes back starts from zero.
    Registry r3({make("b", 81)}, &r2);
    Registry r4({make("a", 80)}, &r3);
    EXPECT_EQ(r4.counts(r4.services()[0]).accepted, 0u);
}

}  // namespace
}  // namespace pmd

namespace pmd {
namespace {

Service with_sdp(const char* name, std::vector<const char*> sdp) {
    Service s;
    s.name = name;
    s.conventional_port = 80;
    for (auto* a : sdp) {
        s.sdp.push_back(*pm::Endpoint::parse(a));
    }
    return s;
}

TEST(RegistryHealth, AddressesKeepTheirStateAcrossSnapshotsByAddress) {
    Registry r1({with_sdp("a", {"127.0.0.1:1", "127.0.0.1:2"})});
    EXPECT_EQ(r1.health(r1.services()[0], 0), HealthState::unknown);
    r1.set_health(r1.services()[0], 0, HealthState::down);
    r1.set_health(r1.services()[0], 1, HealthState::up);
    EXPECT_FALSE(r1.available(r1.services()[0], 0));
    EXPECT_TRUE(r1.available(r1.services()[0], 1));
    // Reordered, one address added: states follow the addresses.
    Registry r2({with_sdp("a", {"127.0.0.1:3", "127.0.0.1:2", "127.0.0.1:1"})}, &r1);
    const Service& a = r2.services()[0];
    EXPECT_EQ(r2.health(a, 0), HealthState::unknown);
    EXPECT_EQ(r2.health(a, 1), HealthState::up);
    EXPECT_EQ(r2.health(a, 2), HealthState::down);
    // Out of range: unknown, and writes are ignored.
    r2.set_health(a, 7, HealthState::down);
    EXPECT_EQ(r2.health(a, 7), HealthState::unknown);
    EXPECT_EQ(r2.find_by_name("a"), &a);
    EXPECT_EQ(r2.find_by_name("b"), nullptr);
}

}  // namespace
}  // namespace pmd
