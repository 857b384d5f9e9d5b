// SPDX-License-Identifier: Apache-2.0
// The rule file of the preload library (/etc/sdp/libsdp.conf; docs/preload.md):
// which TCP sockets of an unmodified program go over SDP. Sans-I/O: text in,
// rules out; a socket's side, program name and address in, a decision out.
//
//   # comment
//   use sdp|tcp|both  server|client|*  PROGRAM  ADDRESS[/PREFIX][:PORT[-PORT]]
//
// PROGRAM is a glob (`*`, `?`) on the program's short name. ADDRESS is `*`,
// an IPv4 address, or an IPv6 address in brackets when a port follows
// (`[2001:db8::1]/64:80`); the port is `*`, one port or a range. The first
// rule that matches decides; without a match the default is `both`.
//   sdp   SDP only: the client connects through the Port Mapper and fails
//         when it does not answer with a mapping; the server accepts SDP
//         connections only
//   tcp   plain TCP: the library stays out of the way
//   both  the client tries the Port Mapper and falls back to TCP (7.5.1);
//         the server accepts SDP and TCP on the same listening socket
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pmclient/address.hpp"

namespace sdp::preload {

enum class Use : std::uint8_t { sdp, tcp, both };
enum class Side : std::uint8_t { server, client };

const char* to_string(Use u);

struct Rule {
    Use use = Use::both;
    std::optional<Side> side;          // nullopt: `*`, both sides
    std::string program;               // glob
    std::optional<pm::Prefix> prefix;  // nullopt: any address
    std::uint16_t port_lo = 0;         // 0..65535: any port
    std::uint16_t port_hi = 65535;
    int line = 0;  // in the file, for messages
};

struct Rules {
    std::vector<Rule> rules;
};

struct ParseError {
    int line = 0;  // 1-based; 0 for the whole file (too large)
    std::string message;
};

// Bounds that keep a hostile file from costing unbounded memory or time.
inline constexpr std::size_t kMaxRules = 1024;
inline constexpr std::size_t kMaxFileSize = 1024 * 1024;
inline constexpr std::size_t kMaxLineLength = 4096;

struct ParseResult {
    Rules rules;
    std::optional<ParseError> error;  // set: nothing in `rules` is to be used
};

ParseResult parse_rules(std::string_view text);

struct Decision {
    Use use = Use::both;
    int line = 0;  // the rule that decided; 0: the default
};

// What the first matching rule says for a socket on `side` of program
// `program` (its short name) at `address` (the destination of a connect(),
// the bound address of a listen(); IPv4-mapped IPv6 matches IPv4 rules).
Decision decide(const Rules& r, Side side, std::string_view program, const pm::IpAddress& address,
                std::uint16_t port);

// Glob match with `*` (any run, also empty) and `?` (one character).
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace sdp::preload
