// SPDX-License-Identifier: Apache-2.0
// Which PMSP to ask (section 7.4 says "by default" the IANA port 3935 of the
// PMSP; we default to the Accepting Peer itself, ApIPAddr:3935).
//
// Internal to libpmclient (src/): not installed; tests reach it through the
// pmclient_core target.
//
// Precedence, first match wins:
//   1. RequestOptions::pmsp of the request, then of the ResolverOptions
//   1. RequestOptions::pmsps / pmsp of the request, then of the
//      ResolverOptions
//   2. the environment variable SDP_PMSP: one PMSP or a comma-separated list
//      in order of preference ("1.2.3.4:3935", "[::1]:3935", a bare address
//      meaning port 3935; "10.0.0.1:3935,10.0.0.2,[fd00::1]:3935")
//   3. `pmsp:` in the YAML file named by SDP_PMCLIENT_CONFIG, else
//      /etc/sdp/pmclient.yaml (a missing file is not an error): a scalar
//      (one PMSP, or the same comma-separated list) or a sequence of them
//   4. ApIPAddr:3935 (port from ResolverOptions::pmsp_port)
// A set-but-invalid SDP_PMSP, or an unreadable/invalid file, is an error
// naming the bad entry: the client does not silently ask someone else. A
// list holds at most kMaxPmsps (16) PMSPs, none twice.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pmclient/address.hpp"
#include "pmclient/types.hpp"

namespace pmclient {

inline constexpr const char* kDefaultConfigPath = "/etc/sdp/pmclient.yaml";

// "a.b.c.d:port", "[v6]:port", or a bare address (port 3935). Port 0 and the
// unspecified address are rejected.
std::optional<pm::Endpoint> parse_pmsp(std::string_view text);

struct PmspSetting {
    std::optional<pm::Endpoint> endpoint;  // the first of `endpoints`; nullopt: ask ApIPAddr
    std::vector<pm::Endpoint> endpoints;   // every PMSP, in order of preference
    std::string source;                    // "SDP_PMSP", the file path, or "default"
};

// Reads SDP_PMSP, then the YAML file. Returns the setting or an error message.
std::variant<PmspSetting, std::string> load_pmsp_setting();

// The YAML part alone (exposed for tests).
std::variant<PmspSetting, std::string> load_pmsp_file(const std::string& path);

}  // namespace pmclient
