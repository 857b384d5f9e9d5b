// SPDX-License-Identifier: Apache-2.0
// The registration store with a fake wall clock: leases, renewals, expiry,
// conflicts, the state file load and the rollback of an unsaved change.
#include <gtest/gtest.h>

#include "daemon/core/registrations.hpp"

namespace pmd {
namespace {

using namespace std::chrono_literals;

const WallClock::time_point kT0 = WallClock::time_point{} + std::chrono::hours(24 * 365 * 50);

Service service(const char* name, std::uint16_t port) {
    Service s;
    s.name = name;
    s.conventional_port = port;
    s.sdp.push_back(*pm::Endpoint::parse("127.0.0.1:9000"));
    s.dynamic = true;
    return s;
}

Registration reg(const char* name, std::uint16_t port,
                 std::optional<std::chrono::milliseconds> lease = std::nullopt,
                 WallClock::time_point now = kT0) {
    Registration r;
    r.service = service(name, port);
    r.lease = lease;
    r.start_lease(now);  // as the state file has it; add() restarts it
    return r;
}

std::vector<std::string> names(const RegistrationStore& s) {
    std::vector<std::string> out;
    for (const auto& r : s.registrations()) {
        out.push_back(r.service.name);
    }
    return out;
}

TEST(RegistrationStore, AddKeepsNamesSortedAndReportsTheNextDeadline) {
    RegistrationStore store;
    auto a = store.add(reg("web", 80, 30s), {}, kT0);
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(a.renewal);
    EXPECT_TRUE(a.change.changed);
    EXPECT_EQ(a.change.next_deadline, kT0 + 30s);
    auto b = store.add(reg("api", 81, 10s), {}, kT0);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b.change.next_deadline, kT0 + 10s);
    auto c = store.add(reg("db", 82), {}, kT0);
    EXPECT_EQ(c.change.next_deadline, kT0 + 10s);
    EXPECT_EQ(names(store), (std::vector<std::string>{"api", "db", "web"}));
    EXPECT_EQ(store.counts().changes, 3u);
}

TEST(RegistrationStore, RenewalReplacesAndMovesTheDeadline) {
    RegistrationStore store;
    ASSERT_TRUE(store.add(reg("web", 80, 10s), {}, kT0).ok());
    auto renewed = store.add(reg("web", 80, 10s), {}, kT0 + 5s);
    ASSERT_TRUE(renewed.ok());
    EXPECT_TRUE(renewed.renewal);
    EXPECT_EQ(renewed.change.next_deadline, kT0 + 15s);
    EXPECT_EQ(store.size(), 1u);
    // At the first deadline nothing runs out any more.
    auto early = store.expire(kT0 + 10s);
    EXPECT_FALSE(early.changed);
    EXPECT_EQ(early.next_deadline, kT0 + 15s);
}

TEST(RegistrationStore, ExpireRemovesRunOutLeasesOnly) {
    RegistrationStore store;
    ASSERT_TRUE(store.add(reg("a", 80, 1s), {}, kT0).ok());
    ASSERT_TRUE(store.add(reg("b", 81, 2s), {}, kT0).ok());
    ASSERT_TRUE(store.add(reg("c", 82), {}, kT0).ok());
    auto none = store.expire(kT0 + 999ms);
    EXPECT_FALSE(none.changed);
    EXPECT_TRUE(none.removed.empty());
    EXPECT_EQ(none.next_deadline, kT0 + 1s);

    auto first = store.expire(kT0 + 1s);
    EXPECT_TRUE(first.changed);
    ASSERT_EQ(first.removed.size(), 1u);
    EXPECT_EQ(first.removed[0].registration.service.name, "a");
    EXPECT_EQ(first.removed[0].cause, RegistrationStore::Cause::lease_expired);
    EXPECT_EQ(first.next_deadline, kT0 + 2s);

    auto rest = store.expire(kT0 + 1h);
    EXPECT_EQ(rest.removed.size(), 1u);
    EXPECT_FALSE(rest.next_deadline);  // "c" has no lease
    EXPECT_EQ(names(store), (std::vector<std::string>{"c"}));
    EXPECT_EQ(store.counts().expired, 2u);
    EXPECT_EQ(store.counts().changes, 5u);  // three adds, two expiries
}

TEST(RegistrationStore, ConflictsAndLimits) {
    RegistrationStore store;
    const std::vector<Service> statics{service("static", 80)};
    auto by_name = store.add(reg("static", 90), statics, kT0);
    EXPECT_EQ(by_name.refusal, RegistrationStore::Refusal::conflict);
    EXPECT_EQ(by_name.reason, "a static service is named \"static\"");
    auto by_address = store.add(reg("web", 80), statics, kT0);
    EXPECT_EQ(by_address.refusal, RegistrationStore::Refusal::conflict);
    EXPECT_EQ(by_address.reason, "conventional address *:80 is used by static service \"static\"");
    ASSERT_TRUE(store.add(reg("web", 81), statics, kT0).ok());
    auto dynamic = store.add(reg("other", 81), statics, kT0);
    EXPECT_EQ(dynamic.reason, "conventional address *:81 is used by service \"web\"");
    EXPECT_FALSE(dynamic.change.changed);
    EXPECT_EQ(store.counts().changes, 1u);
}

TEST(RegistrationStore, RemoveTellsStaticFromUnknown) {
    RegistrationStore store;
    const std::vector<Service> statics{service("static", 80)};
    ASSERT_TRUE(store.add(reg("web", 81, 5s), statics, kT0).ok());
    EXPECT_EQ(store.remove("static", statics).refusal, RegistrationStore::Refusal::is_static);
    EXPECT_EQ(store.remove("nope", statics).refusal, RegistrationStore::Refusal::not_found);
    auto gone = store.remove("web", statics);
    ASSERT_TRUE(gone.ok());
    EXPECT_TRUE(gone.change.changed);
    EXPECT_FALSE(gone.change.next_deadline);
    EXPECT_EQ(store.size(), 0u);
}

TEST(RegistrationStore, RestoreRollsBackAnUnsavedChange) {
    RegistrationStore store;
    ASSERT_TRUE(store.add(reg("web", 80), {}, kT0).ok());
    auto saved = store.save_point();
    ASSERT_TRUE(store.add(reg("api", 81), {}, kT0).ok());
    ASSERT_TRUE(store.remove("web", {}).ok());
    store.restore(std::move(saved));
    EXPECT_EQ(names(store), (std::vector<std::string>{"web"}));
    EXPECT_EQ(store.counts().changes, 1u);
}

TEST(RegistrationStore, LoadDropsExpiredAndConflictingEntries) {
    RegistrationStore store;
    const std::vector<Service> statics{service("static", 80)};
    std::vector<Registration> file{reg("old", 81, 1s, kT0 - 1h), reg("clash", 80),
                                   reg("web", 82, 1h), reg("api", 83), reg("web", 84)};
    auto change = store.load(std::move(file), statics, kT0);
    EXPECT_TRUE(change.changed);
    ASSERT_EQ(change.removed.size(), 2u);
    EXPECT_EQ(change.removed[0].cause, RegistrationStore::Cause::lease_expired);  // while stopped
    EXPECT_EQ(change.removed[1].cause, RegistrationStore::Cause::conflict);
    EXPECT_EQ(names(store), (std::vector<std::string>{"api", "web"}));
    // The later "web" replaced the earlier one (and its lease).
    EXPECT_EQ(store.registrations()[1].service.conventional_port, 84);
    EXPECT_FALSE(change.next_deadline);
    EXPECT_EQ(store.counts().expired, 1u);
    EXPECT_EQ(store.counts().changes, 0u);

    RegistrationStore clean;
    EXPECT_FALSE(clean.load({reg("a", 85)}, statics, kT0).changed);
}

TEST(RegistrationStore, RestrictToANewConfiguration) {
    RegistrationStore store;
    ASSERT_TRUE(store.add(reg("web", 80), {}, kT0).ok());
    ASSERT_TRUE(store.add(reg("api", 81, 10s), {}, kT0).ok());
    auto unchanged = store.restrict_to(std::vector<Service>{service("x", 90)});
    EXPECT_FALSE(unchanged.changed);
    auto change = store.restrict_to(std::vector<Service>{service("static", 80)});
    EXPECT_TRUE(change.changed);
    ASSERT_EQ(change.removed.size(), 1u);
    EXPECT_EQ(change.removed[0].registration.service.name, "web");
    EXPECT_EQ(change.removed[0].cause, RegistrationStore::Cause::conflict);
    EXPECT_EQ(change.removed[0].conflict,
              "conventional address *:80 is used by static service \"static\"");
    EXPECT_EQ(change.next_deadline, kT0 + 10s);
}

Registration owned(const char* name, std::uint16_t port, std::int64_t pid) {
    Registration r = reg(name, port);
    r.process = OwnerProcess{pid, 1000 + static_cast<std::uint64_t>(pid), "boot-a"};
    return r;
}

TEST(RegistrationStore, OwnerExitRemovesEveryRegistrationOfThatProcessOnly) {
    RegistrationStore store;
    ASSERT_TRUE(store.add(owned("a", 80, 42), {}, kT0).ok());
    ASSERT_TRUE(store.add(owned("b", 81, 42), {}, kT0).ok());
    ASSERT_TRUE(store.add(owned("c", 82, 43), {}, kT0).ok());
    ASSERT_TRUE(store.add(reg("d", 83, 10s), {}, kT0).ok());
    const auto owners = store.owners();
    ASSERT_EQ(owners.size(), 2u);  // each process once, by pid
    EXPECT_EQ(owners[0].pid, 42);
    EXPECT_EQ(owners[1].pid, 43);
    EXPECT_EQ(owners[0].start_time, std::optional<std::uint64_t>(1042));

    EXPECT_FALSE(store.owner_exited(7).changed);  // nobody's
    auto change = store.owner_exited(42);
    EXPECT_TRUE(change.changed);
    ASSERT_EQ(change.removed.size(), 2u);
    EXPECT_EQ(change.removed[0].cause, RegistrationStore::Cause::owner_exited);
    EXPECT_EQ(change.removed[1].registration.service.name, "b");
    EXPECT_EQ(change.next_deadline, kT0 + 10s);  // "d"'s lease is still there
    EXPECT_EQ(names(store), (std::vector<std::string>{"c", "d"}));
    EXPECT_EQ(store.counts().owner_exits, 2u);
    EXPECT_EQ(store.counts().changes, 5u);  // four adds, one exit
    EXPECT_EQ(store.owners().size(), 1u);

    // A renewal without a pid unties the registration.
    ASSERT_TRUE(store.add(reg("c", 82), {}, kT0).ok());
    EXPECT_TRUE(store.owners().empty());
    EXPECT_FALSE(store.owner_exited(43).changed);
}

}  // namespace
}  // namespace pmd
