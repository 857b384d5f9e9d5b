// SPDX-License-Identifier: Apache-2.0
// The control protocol (docs/control-protocol.md) without sockets: one
// request line in, one response line out. The I/O layer (control_socket.hpp)
// frames lines, checks peer credentials and logs refusals; the Backend (the
// Server) carries the commands out. The commands, and who may run them, are
// those of pmctl::kCommands (control/include/pmctl/commands.hpp). Never
// throws, whatever the bytes.
#pragma once

#include <sys/types.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/io/state_file.hpp"
#include "pmctl/commands.hpp"

namespace pmd::io {

inline constexpr std::size_t kMaxControlLine = 64 * 1024;
inline constexpr int kMaxControlDepth = 16;

using pmctl::Access;

// Who is asking (SO_PEERCRED / SO_PEERGROUPS).
struct Peer {
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // supplementary
    Access access = Access::none;
};

enum ControlResult : int {
    kResultOk = 0,
    kResultError = 1,
    kResultUnsupported = 2,
    kResultNotFound = 3,
    kResultConflict = 4,
    kResultDenied = 5,
};

struct Reply {
    int result = kResultOk;
    std::string text;
    nlohmann::json arguments;  // null: left out
};

// Carries the commands out. A command may finish later (the Server asks its
// workers without blocking its loop): each takes a completion that it calls
// exactly once, on the main thread, possibly before returning.
template <class T>
using Done = std::function<void(T)>;

class ControlBackend {
  public:
    virtual ~ControlBackend() = default;
    virtual void status(Done<nlohmann::json> done) = 0;
    virtual void services(Done<nlohmann::json> done) = 0;
    virtual void register_service(Registration r, Done<Reply> done) = 0;
    virtual void unregister_service(const std::string& name, Done<Reply> done) = 0;
    virtual void transactions(std::size_t limit, Done<nlohmann::json> done) = 0;
    virtual void stats(Done<nlohmann::json> done) = 0;
    virtual void reset_stats(std::function<void()> done) = 0;
    virtual void reload_config(Done<Reply> done) = 0;
    virtual WallClock::time_point wall_now() { return WallClock::now(); }
};

struct Handled {
    std::string response;  // one JSON object and '\n'
    std::string command;   // as sent, for logs ("" when unreadable)
    int result = kResultOk;
};

// A short, printable rendering of a client-supplied string for a reply or
// a log line: at most `max` bytes, anything outside ASCII 0x20-0x7e as '?'.
std::string shown(std::string_view s, std::size_t max = 64);

// Max nesting of arrays/objects in `text`, counted without parsing (strings
// skipped); stops counting past `limit`.
int json_depth(std::string_view text, int limit);

// Answers one request line: done(Handled) is called exactly once, when the
// backend has finished (at once for a refusal or a malformed request).
void handle_control_line(std::string_view line, const Peer& peer, ControlBackend& backend,
                         Done<Handled> done);

// True when `peer` could open `path` for reading by its mode bits (root: always).
bool peer_may_read(const std::string& path, const Peer& peer);

}  // namespace pmd::io
