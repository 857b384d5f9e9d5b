// SPDX-License-Identifier: Apache-2.0
// The owner-process side of registrations: pidfd watches on a real
// io_context with real child processes, and the state file's process
// fields. Every wait is bounded.
#include "daemon/io/owner_watch.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "daemon/io/state_file.hpp"

namespace pmd::io {
namespace {

using namespace std::chrono_literals;

// A child that waits to be killed (at most 60 s).
pid_t spawn_child() {
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::alarm(60);
        for (;;) {
            ::pause();
        }
    }
    return pid;
}

void reap(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
}

TEST(OwnerWatch, IdentifiesALiveProcessAndRefusesAMissingOne) {
    boost::asio::io_context io;
    OwnerWatch watch(io, [](std::int64_t) {});
    OwnerProcess self{::getpid(), std::nullopt, ""};
    ASSERT_FALSE(watch.identify(self));
    EXPECT_TRUE(self.start_time.has_value());  // our own /proc entry is readable
    EXPECT_EQ(self.start_time, process_start_time(::getpid()));
    EXPECT_EQ(self.boot_id, boot_id());
    EXPECT_FALSE(OwnerWatch::gone(self));

    const pid_t child = spawn_child();
    ASSERT_GT(child, 0);
    reap(child);
    OwnerProcess dead{child, std::nullopt, ""};
    auto why = watch.identify(dead);
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("no such process"), std::string::npos) << *why;
    EXPECT_TRUE(OwnerWatch::gone(dead));
}

TEST(OwnerWatch, AnotherBootOrStartTimeIsAnotherProcess) {
    boost::asio::io_context io;
    OwnerWatch watch(io, [](std::int64_t) {});
    OwnerProcess self{::getpid(), std::nullopt, ""};
    ASSERT_FALSE(watch.identify(self));
    if (self.boot_id.empty()) {
        GTEST_SKIP() << "no /proc/sys/kernel/random/boot_id here";
    }
    OwnerProcess rebooted = self;
    rebooted.boot_id = "00000000-0000-0000-0000-000000000000";
    auto why = OwnerWatch::gone(rebooted);
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("rebooted"), std::string::npos) << *why;
    OwnerProcess reused = self;
    reused.start_time = *self.start_time + 1;
    EXPECT_TRUE(OwnerWatch::gone(reused));
    OwnerProcess unknown = self;  // start time unreadable when registered
    unknown.start_time.reset();
    EXPECT_FALSE(OwnerWatch::gone(unknown));
}

TEST(OwnerWatch, ReportsEachWatchedProcessThatExitsOnce) {
    boost::asio::io_context io;
    std::vector<std::int64_t> exited;
    OwnerWatch watch(io, [&](std::int64_t pid) { exited.push_back(pid); });
    const pid_t a = spawn_child();
    const pid_t b = spawn_child();
    const pid_t c = spawn_child();
    ASSERT_TRUE(a > 0 && b > 0 && c > 0);
    std::vector<OwnerProcess> owners{
        {a, std::nullopt, ""}, {b, std::nullopt, ""}, {c, std::nullopt, ""}};
    watch.watch(owners);
    EXPECT_EQ(watch.size(), 3u);
    // c is no longer wanted: its exit is not reported.
    owners.pop_back();
    watch.watch(owners);
    EXPECT_EQ(watch.size(), 2u);
    reap(c);
    reap(a);
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (exited.empty() && std::chrono::steady_clock::now() < end) {
        io.run_for(50ms);
        io.restart();
    }
    io.run_for(100ms);
    EXPECT_EQ(exited, std::vector<std::int64_t>{a});
    EXPECT_EQ(watch.size(), 1u);

    // A process that is already gone when it is to be watched is reported
    // from the loop.
    exited.clear();
    owners = {{a, std::nullopt, ""}, {b, std::nullopt, ""}};
    watch.watch(owners);
    io.restart();
    io.run_for(100ms);
    EXPECT_EQ(exited, std::vector<std::int64_t>{a});
    reap(b);
    watch.stop();
    EXPECT_EQ(watch.size(), 0u);
}

// identify() pins the process: when it exits before watch() runs, the
// pidfd opened at identify() still reports it (no pid-reuse window).
TEST(OwnerWatch, IdentifiedProcessThatExitsBeforeTheWatchIsReported) {
    boost::asio::io_context io;
    std::vector<std::int64_t> exited;
    OwnerWatch watch(io, [&](std::int64_t pid) { exited.push_back(pid); });
    const pid_t child = spawn_child();
    ASSERT_GT(child, 0);
    OwnerProcess p{child, std::nullopt, ""};
    ASSERT_FALSE(watch.identify(p));
    reap(child);
    std::vector<OwnerProcess> owners{p};
    watch.watch(owners);
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (exited.empty() && std::chrono::steady_clock::now() < end) {
        io.run_for(50ms);
        io.restart();
    }
    EXPECT_EQ(exited, std::vector<std::int64_t>{child});
}

TEST(StateFile, KeepsAndChecksTheOwnerProcess) {
    const auto now = WallClock::now();
    nlohmann::json args = {{"name", "web"},
                           {"conventional", "127.0.0.1:80"},
                           {"sdp", {"127.0.0.1:8080"}},
                           {"pid", 4242}};
    auto parsed = parse_registration(args, false, now);
    ASSERT_TRUE(std::holds_alternative<Registration>(parsed));
    Registration r = std::get<Registration>(parsed);
    ASSERT_TRUE(r.process);
    EXPECT_EQ(r.process->pid, 4242);
    r.process->start_time = 77;
    r.process->boot_id = "b00t";

    // Through the state file and back.
    std::vector<Registration> regs{r};
    StateLoad loaded = parse_state(state_text(regs), now);
    ASSERT_FALSE(loaded.error) << *loaded.error;
    ASSERT_EQ(loaded.registrations.size(), 1u);
    EXPECT_EQ(loaded.registrations[0].process, r.process);

    // Bad values are refused with the argument named; the identity fields
    // are the daemon's to fill in, not a client's.
    for (const nlohmann::json& bad :
         {nlohmann::json(0), nlohmann::json(-1), nlohmann::json(kMaxPid + 1),
          nlohmann::json("self"), nlohmann::json(1.5)}) {
        args["pid"] = bad;
        auto e = parse_registration(args, false, now);
        ASSERT_TRUE(std::holds_alternative<std::string>(e)) << bad.dump();
        EXPECT_EQ(std::get<std::string>(e).rfind("pid:", 0), 0u) << std::get<std::string>(e);
    }
    args["pid"] = 4242;
    args["boot_id"] = "x";
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_registration(args, false, now)));
    args.erase("pid");
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_registration(args, true, now)));
}

TEST(StateFile, RegistrationHealthSettingsRoundTrip) {
    const auto now = WallClock::now();
    nlohmann::json args = {{"name", "web"},
                           {"conventional", "127.0.0.1:80"},
                           {"sdp", {"127.0.0.1:8080"}},
                           {"health", {{"check", "connect"}, {"interval", "500ms"}, {"rise", 3}}}};
    auto parsed = parse_registration(args, false, now);
    ASSERT_TRUE(std::holds_alternative<Registration>(parsed)) << std::get<std::string>(parsed);
    const Registration r = std::get<Registration>(parsed);
    EXPECT_EQ(r.service.health.check, std::optional(HealthCheck::connect));
    EXPECT_EQ(r.service.health.interval, std::optional(std::chrono::milliseconds(500)));
    EXPECT_EQ(r.service.health.rise, std::optional<std::uint32_t>(3));
    EXPECT_FALSE(r.service.health.fall);
    std::vector<Registration> regs{r};
    StateLoad loaded = parse_state(state_text(regs), now);
    ASSERT_FALSE(loaded.error) << *loaded.error;
    ASSERT_EQ(loaded.registrations.size(), 1u);
    EXPECT_EQ(loaded.registrations[0].service.health, r.service.health);

    args["health"] = "off";
    parsed = parse_registration(args, false, now);
    ASSERT_TRUE(std::holds_alternative<Registration>(parsed));
    EXPECT_EQ(std::get<Registration>(parsed).service.health.check, std::optional(HealthCheck::off));
    for (const nlohmann::json& bad :
         {nlohmann::json("on"), nlohmann::json(1), nlohmann::json{{"check", "maybe"}},
          nlohmann::json{{"interval", "1ns"}}, nlohmann::json{{"rise", -1}},
          nlohmann::json{{"colour", "red"}}, nlohmann::json{{"rise", {1, 2}}}}) {
        args["health"] = bad;
        auto e = parse_registration(args, false, now);
        ASSERT_TRUE(std::holds_alternative<std::string>(e)) << bad.dump();
        EXPECT_NE(std::get<std::string>(e).find("health"), std::string::npos)
            << std::get<std::string>(e);
    }
}

}  // namespace
// `register` with "on_demand" (docs/control-protocol.md, "On-demand services").
TEST(StateFile, OnDemandRegistration) {
    const auto now = WallClock::time_point{};
    nlohmann::json args{
        {"name", "od"},
        {"conventional", "127.0.0.1:80"},
        {"on_demand",
         {{"ports", nlohmann::json::array({"7001-7003", 7010})}, {"single_use", true}}}};
    auto parsed = parse_registration(args, false, now);
    ASSERT_TRUE(std::holds_alternative<Registration>(parsed)) << std::get<std::string>(parsed);
    const Registration& r = std::get<Registration>(parsed);
    ASSERT_TRUE(r.service.on_demand);
    EXPECT_EQ(r.service.on_demand->ports, (std::vector<std::uint16_t>{7001, 7002, 7003, 7010}));
    EXPECT_TRUE(r.service.on_demand->single_use);
    ASSERT_EQ(r.service.sdp.size(), 1u);  // "*:" and the first port, the address asked for
    EXPECT_TRUE(r.service.sdp[0].address.is_unspecified());
    const auto j = service_json(r.service);
    EXPECT_EQ(j["on_demand"]["ports"], "7001-7003,7010");
    // Never in the state file: it lives as long as its connection.
    std::vector<Registration> regs{r};
    EXPECT_TRUE(parse_state(state_text(regs), now).registrations.empty());

    for (const nlohmann::json& bad :
         {nlohmann::json("7001"), nlohmann::json{{"ports", "0-3"}},
          nlohmann::json{{"ports", nlohmann::json::array()}}, nlohmann::json{{"ports", 70000}},
          nlohmann::json{{"ports", "1-2000"}}, nlohmann::json{{"ports", "7001"}, {"single_use", 1}},
          nlohmann::json{{"ports", "7001"}, {"extra", true}},
          nlohmann::json{{"single_use", true}}}) {
        args["on_demand"] = bad;
        auto e = parse_registration(args, false, now);
        ASSERT_TRUE(std::holds_alternative<std::string>(e)) << bad.dump();
        EXPECT_EQ(std::get<std::string>(e).rfind("on_demand", 0), 0u) << std::get<std::string>(e);
    }
    args["on_demand"] = {{"ports", "7001"}};
    args["pm_time"] = "permanent";
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_registration(args, false, now)));
    args.erase("pm_time");
    args["health"] = "off";
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_registration(args, false, now)));
    args.erase("health");
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_registration(args, true, now)));
}

}  // namespace pmd::io
