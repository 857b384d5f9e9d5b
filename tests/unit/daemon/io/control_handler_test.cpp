// SPDX-License-Identifier: Apache-2.0
// The lines an on-demand acceptor sends on its control channel
// (io/control_handler.hpp, parse_channel_line).
#include "daemon/io/control_handler.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using pmd::io::ChannelMessage;
using pmd::io::parse_channel_line;

TEST(ControlChannel, ReadsTheAcceptorsLines) {
    auto o = parse_channel_line(R"({"opened": 7001, "id": 9})");
    ASSERT_TRUE(o);
    EXPECT_EQ(o->kind, ChannelMessage::Kind::opened);
    EXPECT_EQ(o->port, 7001);
    EXPECT_EQ(o->id, 9u);
    auto f = parse_channel_line("{\"failed\": 7002, \"id\": 1, \"error\": \"in use\\n\"}\r");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->kind, ChannelMessage::Kind::failed);
    EXPECT_EQ(f->error, "in use?");  // made printable
    EXPECT_EQ(parse_channel_line(R"({"connected": 7003})")->kind, ChannelMessage::Kind::connected);
    EXPECT_EQ(parse_channel_line(R"({"closed": 7003})")->kind, ChannelMessage::Kind::closed);
    for (const char* bad :
         {"", "x", "[]", "{}", R"({"opened": 7001})", R"({"opened": 0, "id": 1})",
          R"({"opened": 70000, "id": 1})", R"({"opened": "7001", "id": 1})",
          R"({"opened": 7001, "connected": 7001, "id": 1})", R"({"connected": 7001, "id": 1})",
          R"({"opened": 7001, "id": -1})", R"({"opened": 7001, "id": 1, "x": 1})",
          R"({"opened": {"a": 1}, "id": 1})", R"({"connected": 7001, "error": "x"})"}) {
        EXPECT_FALSE(parse_channel_line(bad)) << bad;
    }
    EXPECT_FALSE(parse_channel_line(std::string(5000, ' ') + R"({"closed": 1})"));
}

}  // namespace
