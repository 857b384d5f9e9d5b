// SPDX-License-Identifier: Apache-2.0
// The control command table and the --help lines derived from it.
#include <gtest/gtest.h>

#include <set>

#include "pmctl/commands.hpp"

namespace pmctl {
namespace {

TEST(Commands, NamesAreUniqueAndFound) {
    std::set<std::string_view> names;
    for (const Command& c : kCommands) {
        EXPECT_TRUE(names.insert(c.name).second) << c.name;
        EXPECT_EQ(find_command(c.name), &c);
        EXPECT_NE(c.access, Access::none) << c.name;
        EXPECT_FALSE(c.summary.empty()) << c.name;
    }
    EXPECT_EQ(find_command("nope"), nullptr);
}

TEST(Commands, WritingNeedsAdmin) {
    for (const char* name : {"register", "unregister", "stats-reset", "reload"}) {
        ASSERT_NE(find_command(name), nullptr) << name;
        EXPECT_EQ(find_command(name)->access, Access::admin) << name;
    }
    for (const char* name :
         {"version", "status", "services", "transactions", "stats", "config-test", "cluster"}) {
        ASSERT_NE(find_command(name), nullptr) << name;
        EXPECT_EQ(find_command(name)->access, Access::read) << name;
    }
}

TEST(Commands, CliWordIsTheFirstWordOfTheUsage) {
    EXPECT_EQ(cli_word(find_command("stats-reset")->usage), "stats");
    EXPECT_EQ(cli_word(find_command("register")->usage), "register");
    EXPECT_EQ(cli_word(find_command("config-test")->usage), "");
}

TEST(Commands, HelpLinesPadTheSummaryToOneColumn) {
    EXPECT_EQ(help_line("status", "daemon uptime"),
              "  status                         daemon uptime\n");
    EXPECT_EQ(help_line("transactions [--limit N]", "live transactions"),
              "  transactions [--limit N]       live transactions\n");
    EXPECT_EQ(help_line("register NAME A B C D E F G H I J\n[--lease DURATION]", "add"),
              "  register NAME A B C D E F G H I J\n"
              "           [--lease DURATION]    add\n");
    EXPECT_EQ(help_line("query HOST[:PORT] --service IP:PORT [--from IP:PORT]", "ask"),
              "  query HOST[:PORT] --service IP:PORT [--from IP:PORT]\n"
              "                                 ask\n");
}

}  // namespace
}  // namespace pmctl
