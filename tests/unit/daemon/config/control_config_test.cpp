// SPDX-License-Identifier: Apache-2.0
// Tests for the control-plane keys of the sdp-pmd configuration (control,
// state_file, metrics) and for make_service(), which `register` uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "daemon/config/config.hpp"
#include "load_text.hpp"

namespace pmd {
namespace {

using ::testing::HasSubstr;

using testing_config::load_error;
using testing_config::load_ok;

TEST(ControlConfig, Defaults) {
    Config c = load_ok("");
    EXPECT_EQ(c.control.socket, "/run/sdp-pmd/control.sock");
    EXPECT_FALSE(c.control.socket_configured);
    EXPECT_EQ(c.control.admin_group, "");
    EXPECT_EQ(c.control.read_group, "");
    EXPECT_EQ(c.state_file, "/var/lib/sdp-pmd/registrations.json");
    EXPECT_FALSE(c.metrics.has_value());
}

TEST(ControlConfig, AllKeys) {
    Config c = load_ok(R"(control:
  socket: /tmp/x/ctl.sock
  admin_group: sdp-admin
  read_group: sdp_read
state_file: /var/tmp/reg.json
metrics: "[::1]:9935"
)");
    EXPECT_EQ(c.control.socket, "/tmp/x/ctl.sock");
    EXPECT_TRUE(c.control.socket_configured);
    EXPECT_EQ(c.control.admin_group, "sdp-admin");
    EXPECT_EQ(c.control.read_group, "sdp_read");
    EXPECT_EQ(c.state_file, "/var/tmp/reg.json");
    ASSERT_TRUE(c.metrics.has_value());
    EXPECT_EQ(c.metrics->to_string(), "[::1]:9935");
}

TEST(ControlConfig, ErrorsNameFileLineAndKey) {
    EXPECT_EQ(load_error("control:\n  sockett: /a\n"),
              "t.yaml:2: control.sockett: unknown key \"sockett\" (did you mean \"socket\"?)");
    EXPECT_EQ(load_error("control:\n  socket: run/ctl.sock\n"),
              "t.yaml:2: control.socket: not an absolute path: \"run/ctl.sock\"");
    EXPECT_THAT(load_error("control:\n  socket: /" + std::string(200, 'a') + "\n"),
                HasSubstr("t.yaml:2: control.socket: path longer than 107 bytes"));
    EXPECT_EQ(load_error("control:\n  admin_group: \"bad group\"\n"),
              "t.yaml:2: control.admin_group: bad group name \"bad group\"");
    EXPECT_EQ(load_error("control:\n  read_group: [a]\n"),
              "t.yaml:2: control.read_group: expected a group name, got a list");
    EXPECT_EQ(load_error("control: /run/x.sock\n"),
              "t.yaml:1: control: expected a map with socket, admin_group, read_group, got "
              "\"/run/x.sock\"");
    EXPECT_EQ(load_error("state_file: /var/lib/\n"),
              "t.yaml:1: state_file: names a directory, not a file: \"/var/lib/\"");
    EXPECT_EQ(load_error("state_file:\n"),
              "t.yaml:1: state_file: missing value: expected an absolute path");
    EXPECT_EQ(load_error("metrics: localhost:9935\n"),
              "t.yaml:1: metrics: bad address \"localhost:9935\"");
    EXPECT_EQ(load_error("control:\n  socket: /a\n  socket: /b\n"),
              "t.yaml:3: control.socket: duplicate key \"socket\" (first at line 2)");
}

TEST(MakeService, SameRulesAsTheFile) {
    ServiceFields f;
    f.name = "web";
    f.conventional = "*:80";
    f.sdp = {"*:8080"};
    f.pm_time = "30s";
    f.policy = "hash";
    f.allow = std::vector<std::string>{"10.0.0.0/8"};
    auto r = make_service(f, "register");
    ASSERT_TRUE(std::holds_alternative<Service>(r)) << std::get<ConfigError>(r).to_string();
    const Service& s = std::get<Service>(r);
    EXPECT_EQ(s.name, "web");
    EXPECT_FALSE(s.conventional_address.has_value());
    EXPECT_EQ(s.conventional_port, 80);
    EXPECT_EQ(s.policy, Policy::hash);
    EXPECT_EQ(s.pm_time, 120);

    // Round trip through the text fields.
    auto again = make_service(service_fields(s), "state");
    ASSERT_TRUE(std::holds_alternative<Service>(again));
    EXPECT_EQ(std::get<Service>(again), s);

    f.sdp = {"127.0.0.1:1", "[::1]:2"};
    f.conventional = "127.0.0.1:80";
    auto bad = make_service(f, "register");
    ASSERT_TRUE(std::holds_alternative<ConfigError>(bad));
    EXPECT_EQ(std::get<ConfigError>(bad).to_string(),
              "register: sdp[1]: SDP address \"[::1]:2\" is IPv6 but the conventional address is "
              "IPv4");
    f.sdp = {"127.0.0.1:1"};
    f.name = "bad name";
    EXPECT_THAT(std::get<ConfigError>(make_service(f, "register")).to_string(),
                HasSubstr("register: name: bad service name"));
}

}  // namespace
}  // namespace pmd
