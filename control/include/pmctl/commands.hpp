// SPDX-License-Identifier: Apache-2.0
// The sdp-pmd control commands (docs/control-protocol.md), declared once:
// the name on the wire, who may run it, and how sdp-pmctl offers it. The
// daemon's dispatch and access check (daemon/io/control_handler.cpp) and
// sdp-pmctl's command list and --help derive from this table; the daemon
// binds one handler to every entry and fails to compile otherwise.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pmctl {

// What a control socket peer may do (docs/control-protocol.md,
// "Authorization"): read-only commands, or everything.
enum class Access : std::uint8_t { none, read, admin };

std::string_view to_string(Access a);

struct Command {
    std::string_view name;  // on the wire: {"command": name}
    Access access;          // needed to run it
    // The sdp-pmctl invocation ("stats --reset"), continuation lines after
    // '\n'; empty when sdp-pmctl has no command for it.
    std::string_view usage;
    std::string_view summary;  // one line
};

inline constexpr std::array<Command, 11> kCommands{{
    {"status", Access::read, "status", "daemon uptime, addresses and counts"},
    {"services", Access::read, "services", "static and dynamic services"},
    {"register", Access::admin,
     "register NAME CONVENTIONAL SDP... [--policy P] [--pm-time T] [--allow PREFIX]...\n"
     "[--lease DURATION] [--owner TEXT] [--pid PID] [--health-check C]",
     "add or renew a dynamic mapping"},
    {"unregister", Access::admin, "unregister NAME", "remove a dynamic mapping"},
    {"transactions", Access::read, "transactions [--limit N]", "live transactions"},
    {"stats", Access::read, "stats", "every counter"},
    {"stats-reset", Access::admin, "stats --reset", "reset the counters"},
    {"reload", Access::admin, "reload", "re-read the configuration file (as SIGHUP)"},
    {"config-test", Access::read, "", "validate a configuration file as the daemon would"},
    {"version", Access::read, "version", "versions of sdp-pmctl and of the daemon"},
    {"cluster", Access::read, "cluster", "registry backend, etcd endpoints and replicas"},
}};

// The entry named `name`, or nullptr.
const Command* find_command(std::string_view name);

// The sdp-pmctl command word of a usage: its first word ("stats" for
// stats-reset's "stats --reset"); empty for an empty usage.
std::string_view cli_word(std::string_view usage);

// One --help line (or more) per entry: the usage padded to a column, then
// the summary, as "  status                         daemon uptime...".
std::string help_line(std::string_view usage, std::string_view summary);

}  // namespace pmctl
