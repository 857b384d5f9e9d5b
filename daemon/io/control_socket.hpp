// SPDX-License-Identifier: Apache-2.0
// The control socket: a Unix stream socket carrying the line protocol of
// docs/control-protocol.md. Bounded: at most kMaxControlConnections at once,
// kMaxControlLine bytes per request, kControlIdleTimeout without progress.
// Authorization by peer credentials: root and admin_group may do everything,
// read_group may read, everyone else is refused (and the refusal logged,
// rate limited).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "daemon/config/config.hpp"
#include "daemon/io/control_handler.hpp"

namespace pmd::io {

inline constexpr std::size_t kMaxControlConnections = 64;
inline constexpr std::chrono::seconds kControlIdleTimeout{30};
// Lines queued to an on-demand channel whose peer does not read; beyond it
// the channel is closed (and its registration removed).
inline constexpr std::size_t kMaxChannelQueue = 4096;

struct ControlCounters {
    std::uint64_t connections = 0;
    std::uint64_t rejected_connections = 0;  // over kMaxControlConnections
    std::uint64_t requests = 0;
    std::uint64_t errors = 0;  // result 1 and 2
    std::uint64_t denied = 0;  // result 5
    std::uint64_t timeouts = 0;
    std::uint64_t oversized = 0;
};

class ControlServer {
  public:
    ControlServer(boost::asio::io_context& io, ControlBackend& backend);
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    // Binds `path` (mode 0666: peer credentials decide), creating its
    // directory if needed and replacing a stale socket. Returns the error.
    std::optional<std::string> bind(const std::string& path);
    // Takes over a listening Unix stream socket inherited from the service
    // manager. Its file belongs to the socket unit: stop() leaves it.
    std::optional<std::string> adopt(int fd);
    void start();
    // Closes the listener and every connection; removes the socket file if
    // it is still ours.
    void stop();
    void set_groups(const ControlConfig& c);

    const ControlCounters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }
    std::size_t connections() const;
    const std::string& path() const { return path_; }

    // Used by sessions.
    struct Session;
    void finished(Session* s);
    Access access_of(const Peer& p) const;
    ControlBackend& backend() { return backend_; }
    ControlCounters& mutable_counters() { return counters_; }

  private:
    void accept();

    boost::asio::io_context& io_;
    ControlBackend& backend_;
    boost::asio::local::stream_protocol::acceptor acceptor_;
    std::string path_;
    ino_t inode_ = 0;
    std::string admin_group_;
    std::string read_group_;
    std::vector<std::shared_ptr<Session>> sessions_;
    ControlCounters counters_;
    bool stopped_ = false;
};

}  // namespace pmd::io
