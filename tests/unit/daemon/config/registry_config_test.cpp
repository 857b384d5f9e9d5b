// SPDX-License-Identifier: Apache-2.0
// Tests for `registry:` of the sdp-pmd configuration (docs/cluster.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "daemon/config/config.hpp"
#include "load_text.hpp"

namespace pmd {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

using testing_config::load_error;
using testing_config::load_ok;

TEST(RegistryConfig, DefaultIsLocal) {
    const Config c = load_ok("");
    EXPECT_EQ(c.registry.backend, RegistryConfig::Backend::local);
    EXPECT_TRUE(c.registry.endpoints.empty());
    EXPECT_EQ(c.registry.prefix, "/sdp-pm/");
    EXPECT_EQ(c.registry.lease_ttl, 10s);
    EXPECT_EQ(c.registry.max_staleness, 30s);
}

TEST(RegistryConfig, Etcd) {
    const Config c = load_ok(R"(
registry:
  backend: etcd
  endpoints: ["http://10.0.0.1:2379", "https://[fd00::2]:2379", "https://etcd-3.example:2379"]
  prefix: /site-a/pm/
  member: pmd-1
  lease_ttl: 5s
  max_staleness: 15s
  request_timeout: 500ms
  tls: {ca: /etc/sdp/etcd-ca.pem, cert: /etc/sdp/pmd.pem, key: /etc/sdp/pmd.key}
)");
    EXPECT_EQ(c.registry.backend, RegistryConfig::Backend::etcd);
    ASSERT_EQ(c.registry.endpoints.size(), 3u);
    EXPECT_EQ(c.registry.endpoints[1], "https://[fd00::2]:2379");
    EXPECT_EQ(c.registry.prefix, "/site-a/pm/");
    EXPECT_EQ(c.registry.member, "pmd-1");
    EXPECT_EQ(c.registry.lease_ttl, 5s);
    EXPECT_EQ(c.registry.max_staleness, 15s);
    EXPECT_EQ(c.registry.request_timeout, 500ms);
    EXPECT_EQ(c.registry.tls_ca, "/etc/sdp/etcd-ca.pem");
    EXPECT_EQ(c.registry.tls_key, "/etc/sdp/pmd.key");
}

TEST(RegistryConfig, ErrorsNameTheField) {
    EXPECT_THAT(load_error("registry: {backend: zookeeper}"), HasSubstr("registry.backend"));
    EXPECT_THAT(load_error("registry: {backend: etcd}"), HasSubstr("needs at least one"));
    EXPECT_THAT(load_error("registry: {backend: etcd, endpoints: [\"10.0.0.1:2379\"]}"),
                HasSubstr("bad etcd endpoint"));
    EXPECT_THAT(load_error("registry: {backend: etcd, endpoints: [\"http://h:0\"]}"),
                HasSubstr("registry.endpoints[0]"));
    EXPECT_THAT(load_error("registry: {member: \"a b\"}"), HasSubstr("bad member name"));
    EXPECT_THAT(load_error("registry: {prefix: nope}"), HasSubstr("prefix must start"));
    EXPECT_THAT(load_error("registry: {lease_ttl: 1s}"), HasSubstr("registry.lease_ttl"));
    EXPECT_THAT(load_error("registry: {max_staleness: 10ms}"), HasSubstr("out of range"));
    EXPECT_THAT(load_error("registry: {tls: {cert: /a.pem}}"),
                HasSubstr("cert and key go together"));
    EXPECT_THAT(load_error("registry: {tls: {ca: relative.pem}}"), HasSubstr("absolute path"));
    EXPECT_THAT(load_error("registry: {endpoint: []}"), HasSubstr("unknown key"));
    EXPECT_THAT(load_error("registry: {lease_ttl: 3s, request_timeout: 2s}"),
                HasSubstr("at most a third of lease_ttl"));
    std::string many = "registry: {backend: etcd, endpoints: [";
    for (int i = 0; i < 17; ++i) {
        many += std::string(i ? "," : "") + "\"http://10.0.0.1:" + std::to_string(2379 + i) + "\"";
    }
    EXPECT_THAT(load_error(many + "]}"), HasSubstr("at most 16"));
}

}  // namespace
}  // namespace pmd
