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
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/io/state_file.hpp"
#include "pmctl/commands.hpp"

namespace pmd::io {

inline constexpr std::size_t kMaxControlLine = 64 * 1024;
inline constexpr int kMaxControlDepth = 16;

using pmctl::Access;

// A control connection that an on-demand registration turns into a
// two-way channel (docs/control-protocol.md, "On-demand services"): the
// daemon sends {"open": P, "id": N} and {"close": P}, the acceptor answers
// with the lines parse_channel_line() reads. The registration lives as long
// as the connection.
class Channel {
  public:
    virtual ~Channel() = default;
    // From now on every line the peer sends is for `service`'s channel.
    virtual void attach(std::string service) = 0;
    // Queues one line (without '\n'); false when closed or its queue is
    // full (a peer that stopped reading).
    virtual bool send(std::string line) = 0;
    virtual void close() = 0;
};

// A line an acceptor sends on its channel.
struct ChannelMessage {
    enum class Kind : std::uint8_t { opened, failed, connected, closed };
    Kind kind = Kind::opened;
    std::uint16_t port = 0;
    std::uint64_t id = 0;  // opened, failed: the id of the open
    std::string error;     // failed: why (shown() when logged)
};
// {"opened": P, "id": N}, {"failed": P, "id": N, "error": "..."},
// {"connected": P}, {"closed": P}; nullopt for anything else (the caller
// counts it). Never throws.
std::optional<ChannelMessage> parse_channel_line(std::string_view line);

// Who is asking (SO_PEERCRED / SO_PEERGROUPS).
struct Peer {
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // supplementary
    Access access = Access::none;
    std::weak_ptr<Channel> channel;  // the connection, for an on-demand `register`
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
    // The registry backend and, for etcd, its endpoints and replicas.
    virtual void cluster(Done<nlohmann::json> done) = 0;
    virtual void services(Done<nlohmann::json> done) = 0;
    virtual void register_service(Registration r, Done<Reply> done) = 0;
    // `register` with "on_demand": on success the backend attaches `channel`
    // to the service before answering.
    virtual void register_on_demand(Registration r, std::weak_ptr<Channel> channel,
                                    Done<Reply> done) {
        (void)r;
        (void)channel;
        done(Reply{2, "on_demand: not supported", nullptr});
    }
    // A line from an attached channel, and its end.
    virtual void channel_line(const std::string& service, std::string_view line,
                              const Channel* channel) {
        (void)service;
        (void)line;
        (void)channel;
    }
    virtual void channel_closed(const std::string& service, const Channel* channel) {
        (void)service;
        (void)channel;
    }
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
