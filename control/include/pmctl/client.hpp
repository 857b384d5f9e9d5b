// SPDX-License-Identifier: Apache-2.0
// A small blocking client for the sdp-pmd control socket
// (docs/control-protocol.md): connect to the Unix stream socket, send one
// request line {"command": ..., "arguments": {...}}, read the one reply line.
// Every wait is bounded by the timeout; every failure comes back as an Error
// with a message that names the socket. Used by sdp-pmctl; meant for any
// program that registers services with the daemon.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pmctl {

inline constexpr const char* kDefaultSocket = "/run/sdp-pmd/control.sock";
inline constexpr std::size_t kMaxRequest = 64 * 1024;  // the daemon's limit
inline constexpr std::size_t kMaxReply = 64 * 1024 * 1024;

enum class Errc : std::uint8_t {
    invalid_request,    // path or request too long: nothing was sent
    permission_denied,  // connect() refused by the socket file's mode
    unreachable,        // no daemon, timeout, closed connection, unreadable reply
};

struct Error {
    Errc code;
    std::string message;
};

// The daemon's answer; `result` 0 is success (docs/control-protocol.md,
// "Results").
struct Reply {
    int result = 0;
    std::string text;
    nlohmann::json arguments;  // null when the reply carries none
    nlohmann::json document;   // the whole reply object
};

// A Reply or an Error.
class Answer {
  public:
    Answer(Reply r) : v_(std::move(r)) {}  // NOLINT(google-explicit-constructor)
    Answer(Error e) : v_(std::move(e)) {}  // NOLINT(google-explicit-constructor)
    bool ok() const { return std::holds_alternative<Reply>(v_); }
    const Reply& reply() const { return std::get<Reply>(v_); }
    const Error& error() const { return std::get<Error>(v_); }

  private:
    std::variant<Reply, Error> v_;
};

// The connection of a request that keeps it (an on-demand `register`,
// whose connection becomes a channel: docs/control-protocol.md): the socket
// (the caller closes it) and what the daemon sent after the reply.
struct KeptConnection {
    int fd = -1;
    std::string pending;
};

// Sends `request` (a JSON object) and waits at most `timeout` for each step.
// With `keep`, a connection that got a reply is handed over instead of
// closed.
Answer request(const std::string& socket_path, const nlohmann::json& request,
               std::chrono::milliseconds timeout, KeptConnection* keep = nullptr);
// request() of {"command": command, "arguments": arguments}; null
// arguments are left out.
Answer call(const std::string& socket_path, std::string_view command,
            const nlohmann::json& arguments, std::chrono::milliseconds timeout);

}  // namespace pmctl
