// SPDX-License-Identifier: Apache-2.0
// Tests for the sdp-pmd YAML configuration loader.
#include "daemon/config/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "pmclient/pm_time.hpp"

namespace pmd {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

pm::Endpoint ep(const char* text) {
    auto e = pm::Endpoint::parse(text);
    EXPECT_TRUE(e) << text;
    return e.value_or(pm::Endpoint{});
}

pm::IpAddress ip(const char* text) {
    auto a = pm::IpAddress::parse(text);
    EXPECT_TRUE(a) << text;
    return a.value_or(pm::IpAddress{});
}

pm::Prefix prefix(const char* text) {
    auto p = pm::Prefix::parse(text);
    EXPECT_TRUE(p) << text;
    return p.value_or(pm::Prefix{});
}

// Loads text that must be valid.
Config load_ok(const std::string& yaml) {
    auto result = load_config_string(yaml, "test.yaml");
    if (const auto* error = std::get_if<ConfigError>(&result)) {
        ADD_FAILURE() << "unexpected error: " << error->to_string() << "\n--- input ---\n" << yaml;
        return Config::defaults();
    }
    return std::get<Config>(std::move(result));
}

// Loads text that must be rejected.
ConfigError load_error(const std::string& yaml) {
    auto result = load_config_string(yaml, "test.yaml");
    if (!std::holds_alternative<ConfigError>(result)) {
        ADD_FAILURE() << "expected an error\n--- input ---\n" << yaml;
        return {};
    }
    return std::get<ConfigError>(std::move(result));
}

void expect_defaults(const Config& c) {
    const Config d = Config::defaults();
    EXPECT_EQ(c.listen, d.listen);
    EXPECT_EQ(c.ack_timeout, d.ack_timeout);
    EXPECT_EQ(c.max_transactions, d.max_transactions);
    EXPECT_EQ(c.deny_ap_port, d.deny_ap_port);
    EXPECT_EQ(c.accept_iwpm_request, d.accept_iwpm_request);
    EXPECT_EQ(c.log_level, d.log_level);
    EXPECT_EQ(c.log_rate_limit, d.log_rate_limit);
    EXPECT_EQ(c.services, d.services);
}

// The schema from the design brief, verbatim.
constexpr const char* kSchemaExample = R"(listen: ["0.0.0.0:3935", "[::]:3935"]
ack_timeout: 5s              # how long a PMAccept waits for its PMAck
max_transactions: 1000000
services:
  - name: web
    conventional: "192.0.2.10:80"            # ApIPAddr:ApPort clients ask for; "*:80" = any address
    sdp: ["192.0.2.10:8080", "198.51.100.10:8080"]   # SDP Addresses handed out
    policy: round-robin                      # first | round-robin | hash (by CpIPAddr)
    pm_time: 30s                             # single-use | permanent | a duration | a raw byte
    allow: ["10.0.0.0/8", "2001:db8::/32"]   # client prefixes; default any
)";

// ---------------------------------------------------------------------------
// Valid files

TEST(ConfigLoad, SchemaExample) {
    const Config c = load_ok(kSchemaExample);
    EXPECT_EQ(c.listen, (std::vector{ep("0.0.0.0:3935"), ep("[::]:3935")}));
    EXPECT_EQ(c.ack_timeout, milliseconds{5000});
    EXPECT_EQ(c.max_transactions, 1'000'000u);
    ASSERT_EQ(c.services.size(), 1u);
    const Service& s = c.services[0];
    EXPECT_EQ(s.name, "web");
    EXPECT_EQ(s.conventional_address, ip("192.0.2.10"));
    EXPECT_EQ(s.conventional_port, 80);
    EXPECT_EQ(s.sdp, (std::vector{ep("192.0.2.10:8080"), ep("198.51.100.10:8080")}));
    EXPECT_EQ(s.policy, Policy::round_robin);
    EXPECT_EQ(s.pm_time, pm::pm_time_from_duration(std::chrono::seconds{30}));
    EXPECT_EQ(s.allow, (std::vector{prefix("10.0.0.0/8"), prefix("2001:db8::/32")}));
    EXPECT_FALSE(s.dynamic);
    // Keys not given keep their defaults.
    EXPECT_EQ(c.deny_ap_port, pm::DenyApPort::echo);
    EXPECT_TRUE(c.accept_iwpm_request);
    EXPECT_EQ(c.log_level, LogLevel::info);
    EXPECT_EQ(c.log_rate_limit, 10u);
}

TEST(ConfigLoad, Extensions) {
    const Config c = load_ok(R"(
deny_ap_port: zero
accept_iwpm_request: false
log_level: debug
log_rate_limit: 3
)");
    EXPECT_EQ(c.deny_ap_port, pm::DenyApPort::zero);
    EXPECT_FALSE(c.accept_iwpm_request);
    EXPECT_EQ(c.log_level, LogLevel::debug);
    EXPECT_EQ(c.log_rate_limit, 3u);

    EXPECT_EQ(load_ok("deny_ap_port: echo").deny_ap_port, pm::DenyApPort::echo);
    EXPECT_TRUE(load_ok("accept_iwpm_request: true").accept_iwpm_request);
    EXPECT_TRUE(load_ok("accept_iwpm_request: True").accept_iwpm_request);
    EXPECT_FALSE(load_ok("accept_iwpm_request: FALSE").accept_iwpm_request);
    EXPECT_EQ(load_ok("log_level: error").log_level, LogLevel::error);
    EXPECT_EQ(load_ok("log_level: warning").log_level, LogLevel::warning);
    EXPECT_EQ(load_ok("log_level: notice").log_level, LogLevel::notice);
    EXPECT_EQ(load_ok("log_level: info").log_level, LogLevel::info);
}

TEST(ConfigLoad, Defaults) {
    const Config d = Config::defaults();
    EXPECT_EQ(d.listen, (std::vector{ep("0.0.0.0:3935"), ep("[::]:3935")}));
    EXPECT_EQ(d.ack_timeout, milliseconds{5000});
    EXPECT_EQ(d.max_transactions, 1'000'000u);
    EXPECT_EQ(d.deny_ap_port, pm::DenyApPort::echo);
    EXPECT_TRUE(d.accept_iwpm_request);
    EXPECT_EQ(d.log_level, LogLevel::info);
    EXPECT_EQ(d.log_rate_limit, 10u);
    EXPECT_TRUE(d.services.empty());

    for (const char* text : {"", "\n", "# only a comment\n", "# one\n\n# two\n", "---\n", "~\n",
                             "---\n...\n", "services:\n", "services: []\n"}) {
        SCOPED_TRACE(text);
        expect_defaults(load_ok(text));
    }
}

TEST(ConfigLoad, ServiceDefaults) {
    const Config c = load_ok(R"(services:
  - name: a
    conventional: "192.0.2.1:80"
    sdp: ["192.0.2.1:8080"]
)");
    ASSERT_EQ(c.services.size(), 1u);
    EXPECT_EQ(c.services[0].policy, Policy::first);
    EXPECT_EQ(c.services[0].pm_time, pm::kPmTimeSingleUse);
    EXPECT_TRUE(c.services[0].allow.empty());
}

TEST(ConfigLoad, Policies) {
    for (auto [text, policy] :
         {std::pair{"first", Policy::first}, std::pair{"round-robin", Policy::round_robin},
          std::pair{"hash", Policy::hash}}) {
        SCOPED_TRACE(text);
        const Config c = load_ok(std::string("services:\n  - name: a\n    conventional: \"*:1\"\n"
                                             "    sdp: [\"*:2\"]\n    policy: ") +
                                 text + "\n");
        ASSERT_EQ(c.services.size(), 1u);
        EXPECT_EQ(c.services[0].policy, policy);
    }
}

TEST(ConfigLoad, PmTimeForms) {
    // Expected bytes follow section 7.3.1.4: 1..127 x 250 ms, 128..254 x 1 s.
    const std::vector<std::pair<std::string, int>> cases = {
        {"single-use", pm::kPmTimeSingleUse},
        {"permanent", pm::kPmTimePermanent},
        {"0", 0},
        {"1", 1},
        {"127", 127},
        {"128", 128},
        {"255", 255},
        {"\"42\"", 42},
        {"0s", 0},
        {"250ms", 1},
        {"1.5s", 6},
        {"30s", 120},
        {"\"30s\"", 120},
        {"2m", 127},  // 120 s is not representable: rounds down to 31.75 s
        {"200s", 200},
        {"1h", 254},
    };
    for (const auto& [text, expected] : cases) {
        SCOPED_TRACE(text);
        const Config c = load_ok(
            "services:\n  - name: a\n    conventional: \"*:1\"\n"
            "    sdp: [\"*:2\"]\n    pm_time: " +
            text + "\n");
        ASSERT_EQ(c.services.size(), 1u);
        EXPECT_EQ(c.services[0].pm_time, expected);
    }
}

TEST(ConfigLoad, Wildcards) {
    const Config c = load_ok(R"(services:
  - name: any
    conventional: "*:80"
    sdp: ["*:8080", "192.0.2.7:8080", "[2001:db8::7]:8080"]
  - name: literal-unspecified
    conventional: "192.0.2.1:80"
    sdp: ["0.0.0.0:81"]
  - name: literal-unspecified6
    conventional: "[2001:db8::1]:80"
    sdp: ["[::]:81"]
)");
    ASSERT_EQ(c.services.size(), 3u);
    EXPECT_EQ(c.services[0].conventional_address, std::nullopt);
    EXPECT_EQ(c.services[0].conventional_port, 80);
    // "*" is stored as 0.0.0.0; a "*" conventional service may list both families.
    EXPECT_EQ(c.services[0].sdp,
              (std::vector{ep("0.0.0.0:8080"), ep("192.0.2.7:8080"), ep("[2001:db8::7]:8080")}));
    EXPECT_EQ(c.services[1].sdp, std::vector{ep("0.0.0.0:81")});
    // [::] means the same as "*" and is stored the same way.
    EXPECT_EQ(c.services[2].sdp, std::vector{ep("0.0.0.0:81")});
}

TEST(ConfigLoad, WildcardAndExactForSamePortAreDistinct) {
    const Config c = load_ok(R"(services:
  - {name: a, conventional: "*:80", sdp: ["*:8080"]}
  - {name: b, conventional: "192.0.2.1:80", sdp: ["192.0.2.1:8080"]}
  - {name: c, conventional: "[2001:db8::1]:80", sdp: ["[2001:db8::1]:8080"]}
)");
    EXPECT_EQ(c.services.size(), 3u);
}

TEST(ConfigLoad, MappedConventionalIsCanonical) {
    const Config c = load_ok(R"(services:
  - {name: a, conventional: "[::ffff:192.0.2.1]:80", sdp: ["192.0.2.1:8080"]}
)");
    ASSERT_EQ(c.services.size(), 1u);
    EXPECT_EQ(c.services[0].conventional_address, ip("192.0.2.1"));
}

TEST(ConfigLoad, ListenPortZeroAndFlowStyle) {
    const Config c = load_ok("{listen: [\"127.0.0.1:0\", \"[::1]:0\"], ack_timeout: 100ms}");
    EXPECT_EQ(c.listen, (std::vector{ep("127.0.0.1:0"), ep("[::1]:0")}));
    EXPECT_EQ(c.ack_timeout, milliseconds{100});
}

TEST(ConfigLoad, BoundsAreInclusive) {
    EXPECT_EQ(load_ok("ack_timeout: 1h").ack_timeout, std::chrono::hours{1});
    EXPECT_EQ(load_ok("ack_timeout: 100ms").ack_timeout, milliseconds{100});
    EXPECT_EQ(load_ok("max_transactions: 1").max_transactions, 1u);
    EXPECT_EQ(load_ok("max_transactions: 100000000").max_transactions, 100'000'000u);
    EXPECT_EQ(load_ok("log_rate_limit: 1").log_rate_limit, 1u);
    EXPECT_EQ(load_ok("on_demand_open_timeout: 10ms").on_demand_open_timeout, milliseconds{10});
    EXPECT_EQ(load_ok("on_demand_open_timeout: 1h").on_demand_open_timeout, std::chrono::hours{1});
    EXPECT_EQ(load_ok("").on_demand_open_timeout, milliseconds{1000});
    EXPECT_EQ(load_error("on_demand_open_timeout: 5ms").key, "on_demand_open_timeout");
}

TEST(ConfigLoad, AnchorsAndAliases) {
    const Config c = load_ok(R"(services:
  - name: a
    conventional: "192.0.2.1:80"
    sdp: &backends ["192.0.2.1:8080", "192.0.2.2:8080"]
  - name: b
    conventional: "192.0.2.1:81"
    sdp: *backends
)");
    ASSERT_EQ(c.services.size(), 2u);
    EXPECT_EQ(c.services[0].sdp, c.services[1].sdp);
}

TEST(ConfigLoad, ExampleFile) {
    auto result = load_config_file(SDPPM_SOURCE_DIR "/examples/sdp-pmd.yaml");
    if (const auto* error = std::get_if<ConfigError>(&result)) {
        FAIL() << error->to_string();
    }
    const Config& c = std::get<Config>(result);
    EXPECT_EQ(c.listen, (std::vector{ep("127.0.0.1:3935"), ep("[::1]:3935")}));
    ASSERT_EQ(c.services.size(), 2u);
    EXPECT_EQ(c.services[0].name, "demo");
    EXPECT_EQ(c.services[0].conventional_address, ip("127.0.0.1"));
    EXPECT_EQ(c.services[0].conventional_port, 7000);
    EXPECT_EQ(c.services[0].sdp, std::vector{ep("127.0.0.1:7001")});
    EXPECT_EQ(c.services[0].pm_time, pm::pm_time_from_duration(std::chrono::seconds{30}));
    EXPECT_EQ(c.services[1].name, "demo6");
    EXPECT_EQ(c.services[1].conventional_address, ip("::1"));
    EXPECT_EQ(c.services[1].conventional_port, 7000);
    EXPECT_EQ(c.services[1].sdp, std::vector{ep("[::1]:7001")});
}

// The commented-out example in examples/sdp-pmd.yaml must be valid too.
TEST(ConfigLoad, ExampleFileCommentedBlock) {
    std::ifstream in(SDPPM_SOURCE_DIR "/examples/sdp-pmd.yaml");
    ASSERT_TRUE(in);
    std::string line;
    std::string block;
    bool inside = false;
    while (std::getline(in, line)) {
        if (line.starts_with("# A larger deployment")) {
            inside = true;
            continue;
        }
        if (inside && line.starts_with("#")) {
            block += line.substr(line.size() > 1 ? 2 : 1) + "\n";
        }
    }
    ASSERT_THAT(block, HasSubstr("services:"));
    const Config c = load_ok(block);
    EXPECT_EQ(c.services.size(), 3u);
}

// ---------------------------------------------------------------------------
// File access and formatting

class TempFile {
  public:
    explicit TempFile(const std::string& content) {
        path_ = std::filesystem::temp_directory_path() /
                ("pmd_config_test_" + std::to_string(::getpid()) + "_" +
                 std::to_string(counter_++) + ".yaml");
        std::ofstream(path_) << content;
    }
    ~TempFile() { std::filesystem::remove(path_); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    std::string path() const { return path_.string(); }

  private:
    static inline int counter_ = 0;
    std::filesystem::path path_;
};

TEST(ConfigFile, LoadsFromDisk) {
    TempFile file(kSchemaExample);
    auto result = load_config_file(file.path());
    ASSERT_TRUE(std::holds_alternative<Config>(result));
    EXPECT_EQ(std::get<Config>(result).services.size(), 1u);
}

TEST(ConfigFile, ErrorsNameTheFile) {
    TempFile file("listen: [\"127.0.0.1:3935\"]\nack_timeout: soon\n");
    auto result = load_config_file(file.path());
    ASSERT_TRUE(std::holds_alternative<ConfigError>(result));
    const auto& e = std::get<ConfigError>(result);
    EXPECT_EQ(e.file, file.path());
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.key, "ack_timeout");
    EXPECT_EQ(e.to_string(), file.path() + ":2: ack_timeout: " + e.message);
}

TEST(ConfigFile, MissingFile) {
    const std::string path = "/nonexistent/dir/sdp-pmd.yaml";
    auto result = load_config_file(path);
    ASSERT_TRUE(std::holds_alternative<ConfigError>(result));
    const auto& e = std::get<ConfigError>(result);
    EXPECT_EQ(e.file, path);
    EXPECT_EQ(e.line, 0);
    EXPECT_EQ(e.key, "");
    EXPECT_THAT(e.message, HasSubstr("No such file or directory"));
    EXPECT_EQ(e.to_string(), path + ": " + e.message);
}

TEST(ConfigFile, DirectoryIsAnError) {
    auto result = load_config_file(std::filesystem::temp_directory_path().string());
    ASSERT_TRUE(std::holds_alternative<ConfigError>(result));
    EXPECT_THAT(std::get<ConfigError>(result).message, HasSubstr("Is a directory"));
}

TEST(ConfigFile, ToStringFormat) {
    EXPECT_EQ((ConfigError{"a.yaml", 7, "services[1].sdp[0]", "bad address \"x\""}.to_string()),
              "a.yaml:7: services[1].sdp[0]: bad address \"x\"");
    EXPECT_EQ((ConfigError{"a.yaml", 3, "", "YAML syntax error: oops"}.to_string()),
              "a.yaml:3: YAML syntax error: oops");
    EXPECT_EQ((ConfigError{"a.yaml", 0, "", "cannot open: x"}.to_string()),
              "a.yaml: cannot open: x");
}

TEST(ConfigFile, StringNameIsUsed) {
    auto result = load_config_string("bogus: 1\n", "from-control-socket");
    ASSERT_TRUE(std::holds_alternative<ConfigError>(result));
    EXPECT_EQ(std::get<ConfigError>(result).file, "from-control-socket");
}

TEST(ConfigServiceName, Validity) {
    EXPECT_TRUE(is_valid_service_name("web"));
    EXPECT_TRUE(is_valid_service_name("db-2.prod_x"));
    EXPECT_TRUE(is_valid_service_name(std::string(64, 'a')));
    EXPECT_FALSE(is_valid_service_name(std::string(65, 'a')));
    EXPECT_FALSE(is_valid_service_name(""));
    EXPECT_FALSE(is_valid_service_name("my web"));
    EXPECT_FALSE(is_valid_service_name("a/b"));
    EXPECT_FALSE(is_valid_service_name("caf\xc3\xa9"));
}

// ---------------------------------------------------------------------------
// Errors: every class names the right line and key.

struct ErrorCase {
    const char* name;
    const char* yaml;
    int line;
    const char* key;
    const char* message;  // a substring of the message
};

std::ostream& operator<<(std::ostream& os, const ErrorCase& c) {
    return os << c.name;
}

class ConfigErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrors, NamesLineAndKey) {
    const ErrorCase& c = GetParam();
    const ConfigError e = load_error(c.yaml);
    EXPECT_EQ(e.file, "test.yaml");
    EXPECT_EQ(e.line, c.line) << e.to_string();
    EXPECT_EQ(e.key, c.key) << e.to_string();
    EXPECT_THAT(e.message, HasSubstr(c.message)) << e.to_string();
}

// A valid service, for cases that break something else.
#define SVC_A "  - name: a\n    conventional: \"192.0.2.1:80\"\n    sdp: [\"192.0.2.1:8080\"]\n"

const ErrorCase kErrorCases[] = {
    // YAML itself
    {"syntax_unclosed_flow", "listen: [\"0.0.0.0:1\"\nack_timeout: 5s\n", 2, "",
     "YAML syntax error"},
    {"syntax_bad_indent", "services:\n  - name: a\n   conventional: x\n", 3, "",
     "YAML syntax error"},
    {"syntax_tab", "listen:\n\t- \"0.0.0.0:1\"\n", 2, "", "YAML syntax error"},
    {"two_documents", "log_level: info\n---\nlog_level: debug\n", 2, "",
     "more than one YAML document"},
    {"content_after_end_marker", "log_level: info\n...\nlog_level: debug\n", 3, "",
     "more than one YAML document"},
    // Found by fuzz_config: yaml-cpp's LoadAll() never returns on this input.
    {"loadall_loop",
     "# comment\n,services:\n  - name: p\n    conventional: \"*:80\"\n    sdp: [2*:81\"]\n", 2, "",
     "YAML syntax error"},
    {"top_level_list", "- listen\n- services\n", 1, "", "expected a map of settings"},
    {"top_level_scalar", "hello\n", 1, "", "expected a map of settings"},
    // keys
    {"unknown_top_key", "listen: [\"0.0.0.0:1\"]\nlisten_on: x\n", 2, "listen_on",
     "unknown key \"listen_on\""},
    {"unknown_key_suggests", "ack_timout: 5s\n", 1, "ack_timout",
     "(did you mean \"ack_timeout\"?)"},
    {"unknown_service_key", "services:\n" SVC_A "    polcy: first\n", 5, "services[0].polcy",
     "unknown key \"polcy\" (did you mean \"policy\"?)"},
    {"duplicate_key", "log_level: info\nack_timeout: 5s\nlog_level: debug\n", 3, "log_level",
     "duplicate key \"log_level\" (first at line 1)"},
    {"non_scalar_key", "? [a, b]\n: 1\n", 1, "", "expected a key name"},
    // listen
    {"listen_bad_address", "listen:\n  - \"0.0.0.0:3935\"\n  - \"1.2.3.999:80\"\n", 3, "listen[1]",
     "bad address \"1.2.3.999:80\""},
    {"listen_no_port", "listen: [\"0.0.0.0\"]\n", 1, "listen[0]", "bad address \"0.0.0.0\""},
    {"listen_v6_no_brackets", "listen: [\"::1:3935\"]\n", 1, "listen[0]", "bad address"},
    {"listen_wildcard", "listen: [\"*:3935\"]\n", 1, "listen[0]", "bad address"},
    {"listen_empty", "log_level: info\nlisten: []\n", 2, "listen", "must not be empty"},
    {"listen_null", "log_level: info\nlisten:\n", 2, "listen", "must not be empty"},
    {"listen_scalar", "listen: \"0.0.0.0:3935\"\n", 1, "listen",
     "expected a list of addresses, got \"0.0.0.0:3935\""},
    {"listen_map", "listen:\n  a: 1\n", 2, "listen", "expected a list of addresses, got a map"},
    {"listen_item_list", "listen:\n  - [\"0.0.0.0:1\"]\n", 2, "listen[0]", "got a list"},
    {"listen_duplicate", "listen:\n  - \"0.0.0.0:1\"\n  - \"[::]:1\"\n  - \"0.0.0.0:1\"\n", 4,
     "listen[2]", "duplicate address \"0.0.0.0:1\" (first at line 2)"},
    // scalars
    {"ack_timeout_bad", "ack_timeout: 5 parsecs\n", 1, "ack_timeout", "bad duration \"5 parsecs\""},
    {"ack_timeout_no_unit", "ack_timeout: 5\n", 1, "ack_timeout", "bad duration \"5\""},
    {"ack_timeout_too_small", "ack_timeout: 99ms\n", 1, "ack_timeout", "out of range"},
    {"ack_timeout_too_big", "ack_timeout: 61m\n", 1, "ack_timeout", "out of range"},
    {"ack_timeout_list", "ack_timeout: [5s]\n", 1, "ack_timeout", "expected a duration"},
    {"ack_timeout_null", "log_level: info\nack_timeout:\n", 2, "ack_timeout", "missing value"},
    {"max_transactions_zero", "max_transactions: 0\n", 1, "max_transactions", "out of range"},
    {"max_transactions_big", "max_transactions: 100000001\n", 1, "max_transactions",
     "out of range"},
    {"max_transactions_huge", "max_transactions: 99999999999999999999999\n", 1, "max_transactions",
     "out of range"},
    {"max_transactions_negative", "max_transactions: -1\n", 1, "max_transactions",
     "bad number \"-1\""},
    {"max_transactions_exponent", "max_transactions: 1e6\n", 1, "max_transactions",
     "bad number \"1e6\""},
    {"max_transactions_word", "max_transactions: lots\n", 1, "max_transactions",
     "bad number \"lots\""},
    {"log_rate_limit_zero", "log_rate_limit: 0\n", 1, "log_rate_limit", "out of range"},
    {"log_level_bad", "log_level: verbose\n", 1, "log_level",
     "unknown value \"verbose\" (expected error, warning, notice, info or debug)"},
    {"deny_ap_port_bad", "deny_ap_port: maybe\n", 1, "deny_ap_port", "expected echo or zero"},
    {"accept_iwpm_yes", "accept_iwpm_request: yes\n", 1, "accept_iwpm_request",
     "expected true or false, got \"yes\""},
    {"accept_iwpm_map", "accept_iwpm_request: {a: 1}\n", 1, "accept_iwpm_request", "got a map"},
    // services
    {"services_map", "services:\n  name: web\n", 2, "services",
     "expected a list of services, got a map"},
    {"service_scalar", "services:\n" SVC_A "  - web\n", 5, "services[1]", "expected a service"},
    {"service_missing_name", "services:\n  - conventional: \"*:80\"\n    sdp: [\"*:81\"]\n", 2,
     "services[0]", "missing required key \"name\""},
    {"service_missing_conventional", "services:\n" SVC_A "  - name: b\n    sdp: [\"*:81\"]\n", 5,
     "services[1]", "missing required key \"conventional\""},
    {"service_missing_sdp", "services:\n  - name: b\n    conventional: \"*:80\"\n", 2,
     "services[0]", "missing required key \"sdp\""},
    {"service_name_null", "services:\n  - name:\n    conventional: \"*:80\"\n    sdp: [\"*:81\"]\n",
     2, "services[0].name", "missing value"},
    {"service_name_bad",
     "services:\n  - name: my web\n    conventional: \"*:80\"\n    sdp: [\"*:81\"]\n", 2,
     "services[0].name", "bad service name \"my web\""},
    {"service_duplicate_name",
     "services:\n" SVC_A "  - name: a\n    conventional: \"*:80\"\n    sdp: [\"*:81\"]\n", 5,
     "services[1].name", "duplicate service \"a\" (first defined at line 2)"},
    {"service_duplicate_conventional",
     "services:\n" SVC_A "  - name: b\n    conventional: \"192.0.2.1:80\"\n    sdp: [\"*:81\"]\n",
     6, "services[1].conventional",
     "duplicate service: conventional address \"192.0.2.1:80\" is already used by \"a\" (line 3)"},
    {"service_duplicate_wildcard",
     "services:\n  - {name: a, conventional: \"*:80\", sdp: [\"*:1\"]}\n  - {name: b, "
     "conventional: \"*:80\", sdp: [\"*:2\"]}\n",
     3, "services[1].conventional", "duplicate service"},
    {"service_duplicate_mapped",
     "services:\n" SVC_A "  - {name: b, conventional: \"[::ffff:192.0.2.1]:80\", sdp: [\"*:1\"]}\n",
     5, "services[1].conventional", "duplicate service"},
    {"conventional_bad",
     "services:\n  - name: a\n    conventional: \"1.2.3.999:80\"\n    sdp: [\"*:81\"]\n", 3,
     "services[0].conventional", "bad address \"1.2.3.999:80\""},
    {"conventional_port_zero",
     "services:\n  - name: a\n    conventional: \"192.0.2.1:0\"\n    sdp: [\"*:81\"]\n", 3,
     "services[0].conventional", "port must not be 0"},
    {"conventional_wildcard_port_zero",
     "services:\n  - name: a\n    conventional: \"*:0\"\n    sdp: [\"*:81\"]\n", 3,
     "services[0].conventional", "port must not be 0"},
    {"conventional_unspecified",
     "services:\n  - name: a\n    conventional: \"0.0.0.0:80\"\n    sdp: [\"*:81\"]\n", 3,
     "services[0].conventional", "write \"*:80\""},
    {"conventional_list",
     "services:\n  - name: a\n    conventional: [\"*:80\"]\n    sdp: [\"*:81\"]\n", 3,
     "services[0].conventional", "got a list"},
    {"sdp_bad",
     "services:\n  - name: a\n    conventional: \"*:80\"\n    sdp:\n      - \"*:81\"\n      - "
     "\"192.0.2.1:http\"\n",
     6, "services[0].sdp[1]", "bad address \"192.0.2.1:http\""},
    {"sdp_port_zero",
     "services:\n  - name: a\n    conventional: \"*:80\"\n    sdp: [\"192.0.2.1:0\"]\n", 4,
     "services[0].sdp[0]", "port must not be 0"},
    {"sdp_empty", "services:\n  - name: a\n    conventional: \"*:80\"\n    sdp: []\n", 4,
     "services[0].sdp", "must not be empty"},
    {"sdp_null", "services:\n  - name: a\n    conventional: \"*:80\"\n    sdp:\n", 4,
     "services[0].sdp", "must not be empty"},
    {"sdp_scalar", "services:\n  - name: a\n    conventional: \"*:80\"\n    sdp: \"*:81\"\n", 4,
     "services[0].sdp", "expected a list of addresses"},
    {"sdp_duplicate",
     "services:\n  - name: a\n    conventional: \"*:80\"\n    sdp: [\"*:81\", \"0.0.0.0:81\"]\n", 4,
     "services[0].sdp[1]", "duplicate SDP address \"0.0.0.0:81\""},
    {"sdp_family_mismatch",
     "services:\n  - name: a\n    sdp: [\"[2001:db8::1]:81\"]\n    conventional: "
     "\"192.0.2.1:80\"\n",
     3, "services[0].sdp[0]", "is IPv6 but the conventional address is IPv4"},
    {"policy_bad", "services:\n" SVC_A "    policy: random\n", 5, "services[0].policy",
     "unknown value \"random\" (expected first, round-robin or hash)"},
    {"pm_time_too_big", "services:\n" SVC_A "    pm_time: 256\n", 5, "services[0].pm_time",
     "not between 0 and 255"},
    {"pm_time_negative", "services:\n" SVC_A "    pm_time: -1\n", 5, "services[0].pm_time",
     "bad pm_time \"-1\""},
    {"pm_time_word", "services:\n" SVC_A "    pm_time: forever\n", 5, "services[0].pm_time",
     "bad pm_time \"forever\""},
    {"pm_time_bad_duration", "services:\n" SVC_A "    pm_time: 30 s\n", 5, "services[0].pm_time",
     "bad pm_time \"30 s\""},
    {"pm_time_map", "services:\n" SVC_A "    pm_time: {s: 30}\n", 5, "services[0].pm_time",
     "got a map"},
    {"allow_empty", "services:\n" SVC_A "    allow: []\n", 5, "services[0].allow",
     "must not be empty"},
    {"allow_bad", "services:\n" SVC_A "    allow: [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n", 5,
     "services[0].allow[1]", "bad prefix \"10.0.0.0/33\""},
    {"allow_duplicate", "services:\n" SVC_A "    allow:\n      - 10.0.0.0/8\n      - 10.1.0.0/8\n",
     7, "services[0].allow[1]", "duplicate prefix \"10.1.0.0/8\" (same as 10.0.0.0/8)"},
    {"allow_scalar", "services:\n" SVC_A "    allow: 10.0.0.0/8\n", 5, "services[0].allow",
     "expected a list of prefixes"},
    {"error_in_later_service",
     "services:\n" SVC_A
     "  - name: b\n    conventional: \"*:80\"\n    sdp: [\"*:81\"]\n    allow: [\"bad\"]\n",
     8, "services[1].allow[0]", "bad prefix \"bad\""},
};

#undef SVC_A

INSTANTIATE_TEST_SUITE_P(Config, ConfigErrors, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& p) {
                             return std::string(p.param.name);
                         });

TEST(ConfigErrorMessages, ValuesAreEscaped) {
    const ConfigError e = load_error("log_level: \"a\\u0001\\\"b\"\n");
    EXPECT_THAT(e.message, HasSubstr(R"("a\x01\"b")"));
}

TEST(ConfigErrorMessages, LongValuesAreShortened) {
    const ConfigError e = load_error("log_level: " + std::string(1000, 'x') + "\n");
    EXPECT_LT(e.message.size(), 200u);
    EXPECT_THAT(e.message, HasSubstr("...\""));
}

// ---------------------------------------------------------------------------
// parse_duration

TEST(ConfigDuration, Valid) {
    const std::vector<std::pair<std::string, std::int64_t>> cases = {
        {"0ms", 0},
        {"0s", 0},
        {"1ms", 1},
        {"250ms", 250},
        {"5s", 5000},
        {"1.5s", 1500},
        {"0.25s", 250},
        {"2m", 120'000},
        {"1.5m", 90'000},
        {"1h", 3'600'000},
        {"0.5h", 1'800'000},
        {"007s", 7000},
        {"1.0005s", 1000},  // truncated to whole milliseconds
        {"1.9999ms", 1},
        {"0.123456789123456789s", 123},
        {"9223372036854775807ms", 9223372036854775807},
    };
    for (const auto& [text, ms] : cases) {
        SCOPED_TRACE(text);
        auto d = parse_duration(text);
        ASSERT_TRUE(d.has_value());
        EXPECT_EQ(d->count(), ms);
    }
}

TEST(ConfigDuration, Invalid) {
    for (const char* text : {
             "",
             "5",
             "s",
             "ms",
             "-5s",
             "+5s",
             ".5s",
             "5.s",
             "5 s",
             " 5s",
             "5s ",
             "5sec",
             "5S",
             "5us",
             "5d",
             "1h30m",
             "1..5s",
             "1.5.5s",
             "0x10s",
             "1e3ms",
             "5 parsecs",
             "9223372036854775808ms",  // overflows int64
             "2562047788015216h",      // overflows when scaled
             "99999999999999999999999999s",
             "9223372036854775807.9s",
         }) {
        SCOPED_TRACE(text);
        EXPECT_FALSE(parse_duration(text).has_value());
    }
}

// ---------------------------------------------------------------------------
// Robustness: mutated and truncated input never throws or crashes, and
// whatever is accepted satisfies the schema's invariants.

constexpr const char* kFuzzSeed = R"(listen: ["0.0.0.0:3935", "[::]:3935"]
ack_timeout: 5s
max_transactions: 1000000
deny_ap_port: zero
accept_iwpm_request: false
log_level: notice
log_rate_limit: 5
services:
  - name: web
    conventional: "192.0.2.10:80"
    sdp: ["192.0.2.10:8080", "198.51.100.10:8080"]
    policy: round-robin
    pm_time: 30s
    allow: ["10.0.0.0/8", "2001:db8::/32"]
  - name: any
    conventional: "*:443"
    sdp: &x ["*:8443"]
    pm_time: permanent
  - {name: v6, conventional: "[2001:db8::1]:80", sdp: *x, policy: hash, pm_time: 7}
)";

void check_result(const std::string& input) {
    ConfigResult result;
    ASSERT_NO_THROW(result = load_config_string(input, "fuzz.yaml")) << input;
    if (const auto* e = std::get_if<ConfigError>(&result)) {
        EXPECT_EQ(e->file, "fuzz.yaml");
        EXPECT_FALSE(e->message.empty());
        EXPECT_GE(e->line, 0);
        const auto lines = std::count(input.begin(), input.end(), '\n');
        EXPECT_LE(e->line, lines + 2) << e->to_string() << "\n" << input;
        return;
    }
    const Config& c = std::get<Config>(result);
    EXPECT_FALSE(c.listen.empty());
    EXPECT_GE(c.ack_timeout, milliseconds{100});
    EXPECT_LE(c.ack_timeout, std::chrono::hours{1});
    EXPECT_GE(c.max_transactions, 1u);
    EXPECT_GE(c.log_rate_limit, 1u);
    for (const Service& s : c.services) {
        EXPECT_TRUE(is_valid_service_name(s.name));
        EXPECT_NE(s.conventional_port, 0);
        EXPECT_FALSE(s.sdp.empty());
        for (const auto& sdp : s.sdp) {
            EXPECT_NE(sdp.port, 0);
        }
    }
}

TEST(ConfigFuzz, EveryTruncationIsHandled) {
    const std::string seed = kFuzzSeed;
    for (std::size_t n = 0; n <= seed.size(); ++n) {
        check_result(seed.substr(0, n));
        if (HasFatalFailure()) {
            return;
        }
    }
}

TEST(ConfigFuzz, RandomMutationsAreHandled) {
    const std::string seed = kFuzzSeed;
    std::string alphabet = ":-[]{}#&*!|>'\"%@`,?~\n\t 0123456789.sm/abc\\";
    alphabet += '\0';
    alphabet += '\xff';
    std::mt19937 rng(20240611);
    auto pick = [&rng](std::size_t n) {
        return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
    };
    for (int round = 0; round < 4000; ++round) {
        std::string s = seed;
        const std::size_t edits = 1 + pick(4);
        for (std::size_t k = 0; k < edits && !s.empty(); ++k) {
            const std::size_t at = pick(s.size());
            switch (pick(5)) {
                case 0:  // delete a run
                    s.erase(at, 1 + pick(8));
                    break;
                case 1:  // insert a byte
                    s.insert(s.begin() + static_cast<std::ptrdiff_t>(at),
                             alphabet[pick(alphabet.size())]);
                    break;
                case 2:  // overwrite a byte
                    s[at] = alphabet[pick(alphabet.size())];
                    break;
                case 3: {  // duplicate a chunk elsewhere
                    const std::string chunk = s.substr(at, 1 + pick(40));
                    s.insert(pick(s.size()), chunk);
                    break;
                }
                default:  // flip a bit
                    s[at] = static_cast<char>(s[at] ^ (1 << pick(8)));
                    break;
            }
        }
        check_result(s);
        if (HasFatalFailure()) {
            return;
        }
    }
}

TEST(ConfigFuzz, HostileShapes) {
    check_result(std::string(10000, '[') + std::string(10000, ']'));
    check_result(std::string(10000, '{'));
    check_result("a: &a [" + std::string(5000, '[') + "]\nb: *a\n");
    check_result("services: [" + std::string(100, '-') + "]\n");
    check_result(std::string("\0\0\0", 3));
    check_result("\xef\xbb\xbflog_level: info\n");  // UTF-8 byte order mark
    check_result("services: *undefined\n");
    check_result("listen: !!binary aGVsbG8=\n");
    check_result("<<: {log_level: info}\n");
    check_result(std::string(17 * 1024 * 1024, '#'));
}

}  // namespace
}  // namespace pmd
