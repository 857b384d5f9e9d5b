// SPDX-License-Identifier: Apache-2.0
// sdp-pmd configuration: the YAML file turned into validated core types.
//
// load_config() never throws and never half-succeeds: it returns either a
// complete Config or one ConfigError naming the file, line and key.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "daemon/core/limiter.hpp"
#include "daemon/core/service.hpp"
#include "pmclient/address.hpp"
#include "pmclient/message.hpp"

namespace pmd {

enum class LogLevel : std::uint8_t { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };

// The control socket (docs/control-protocol.md).
struct ControlConfig {
    std::string socket = "/run/sdp-pmd/control.sock";
    // True when the file names `control.socket`: failing to bind it is then
    // fatal; the default path is best effort (logged, the daemon runs).
    bool socket_configured = false;
    std::string admin_group;  // may change state; empty: root only
    std::string read_group;   // may read; empty: root and admin_group only
    bool operator==(const ControlConfig&) const = default;
};

// Upper bound of `workers:` (and of what "auto" resolves to).
inline constexpr unsigned kMaxWorkers = 64;
// `workers:` when the file does not say: 0 is "auto".
inline constexpr unsigned kDefaultWorkers = 1;

// `registry:` (docs/cluster.md): where dynamic registrations live. `local`
// keeps them in this daemon (and its state file); `etcd` shares them with
// every replica through an etcd cluster.
struct RegistryConfig {
    enum class Backend : std::uint8_t { local, etcd };
    Backend backend = Backend::local;
    std::vector<std::string> endpoints;  // etcd client URLs, "http(s)://host:port"
    std::string prefix = "/sdp-pm/";
    std::string member;  // this replica's name in the cluster; "" : the host name
    std::chrono::milliseconds lease_ttl{10'000};
    std::chrono::milliseconds max_staleness{30'000};
    std::chrono::milliseconds request_timeout{2'000};
    // `tls:` (https:// endpoints): CA bundle, client certificate and key;
    // "" : the system trust store, no client certificate.
    std::string tls_ca;
    std::string tls_cert;
    std::string tls_key;
    bool operator==(const RegistryConfig&) const = default;
};

struct Config {
    // Listen endpoints. Default: 0.0.0.0:3935 and [::]:3935 (the IPv6 socket
    // is IPV6_V6ONLY so both can be bound).
    std::vector<pm::Endpoint> listen;
    std::chrono::milliseconds ack_timeout{5000};  // PMAccept waits this long for PMAck
    // An on-demand acceptor's answer to "open" (at most half of ack_timeout
    // is used, so the PMDeny beats the pending transaction's expiry).
    std::chrono::milliseconds on_demand_open_timeout{1000};
    std::size_t max_transactions = 1'000'000;  // live un-acked transactions
    pm::DenyApPort deny_ap_port = pm::DenyApPort::echo;
    bool accept_iwpm_request = true;  // accept iwpmd's 64-byte PMReq
    LogLevel log_level = LogLevel::info;
    // At most this many log lines per cause per second; the rest are counted
    // and summarised.
    unsigned log_rate_limit = 10;
    std::vector<Service> services;
    ControlConfig control;
    // Dynamic registrations are kept here (JSON, rewritten atomically).
    std::string state_file = "/var/lib/sdp-pmd/registrations.json";
    // Prometheus text exposition over HTTP (GET /metrics); nullopt: off.
    std::optional<pm::Endpoint> metrics;
    // Section 15.2 defences (`limits:`); both off by default.
    LimiterConfig per_source;  // token bucket of PMReqs per source address
    QuenchConfig quench;       // cut off sources that leave PMAccepts un-acked
    // UDP worker shards (`workers:`); 0 is "auto": the CPUs this process may
    // run on (sched_getaffinity), at most kMaxWorkers. Resolved by the shell.
    unsigned workers = kDefaultWorkers;
    // Set by `sdp-pmd --workers`: the file's `workers:` is then ignored, on
    // reload too. Not a file key.
    bool workers_from_command_line = false;
    // Top-level `health:`: the defaults of every service's `health:`,
    // static and dynamic (daemon/core/health.hpp).
    HealthOverrides health;
    RegistryConfig registry;

    static Config defaults();
};

struct ConfigError {
    std::string file;
    int line = 0;     // 1-based; 0 when not tied to a line
    std::string key;  // dotted path, e.g. "services[1].sdp[0]"
    std::string message;

    // "FILE:LINE: KEY: MESSAGE"
    std::string to_string() const;
};

using ConfigResult = std::variant<Config, ConfigError>;

// Parses and validates a YAML file.
ConfigResult load_config_file(const std::string& path);
// Same, from text; `name` is used in error messages in place of a file name.
ConfigResult load_config_string(const std::string& yaml, const std::string& name);

// A service described by text fields, as the control socket's `register`
// receives it; validated by the same rules as a `services` entry of the file.
struct ServiceFields {
    std::string name;
    std::string conventional;
    std::vector<std::string> sdp;
    std::optional<std::string> policy;
    std::optional<std::string> pm_time;
    std::optional<std::vector<std::string>> allow;
    // `health:` as key/value text pairs of its map (check, interval,
    // timeout, rise, fall); "off" is {"check", "off"}.
    std::optional<std::vector<std::pair<std::string, std::string>>> health;
};
// On error the ConfigError has `context` as its file, line 0 and the key
// ("sdp[1]", "pm_time"...).
std::variant<Service, ConfigError> make_service(const ServiceFields& fields,
                                                const std::string& context);
// The text of a service's fields as make_service() reads them back
// (conventional "*:80", sdp "*:8080", policy name, pm_time as the raw byte).
ServiceFields service_fields(const Service& s);

// Parses "5s", "250ms", "2m", "1h", "1.5s". Returns nullopt on bad syntax,
// negative values or overflow.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// Parses a `workers:` value: "auto" (0) or 1 to kMaxWorkers. nullopt when
// invalid.
std::optional<unsigned> parse_workers(std::string_view text);

// Service names: 1 to 64 characters from [A-Za-z0-9._-]. They appear in logs,
// metrics and control-socket commands, so they need no quoting anywhere.
bool is_valid_service_name(std::string_view name);

}  // namespace pmd
