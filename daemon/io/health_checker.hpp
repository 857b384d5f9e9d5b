// SPDX-License-Identifier: Apache-2.0
// The health checker: the I/O shell around core/health.hpp, on the main
// thread's io_context, never blocking it.
//
// - Which SDP addresses are local (getifaddrs, loopback included; "*:P" is
//   local) is decided here, when the registry changes: local addresses get
//   a `listener` check by default, remote ones none unless `check: connect`.
// - Listener checks: one NETLINK_SOCK_DIAG dump of the TCP listeners
//   (AF_INET, then AF_INET6) per round for every due address, as `ss -lnt`
//   does; never a connect.
// - Connect checks: asio async TCP connect with the configured timeout, at
//   most kMaxConnectProbes at once.
// - Results go into the core's state machines; states are written into the
//   registry's availability flags (Registry::set_health), which the workers'
//   Pmsp read when they pick an address.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/health.hpp"
#include "daemon/core/service.hpp"

namespace pmd::io {

inline constexpr std::size_t kMaxConnectProbes = 64;
// A sock_diag dump that has not ended by then is abandoned (no verdict).
inline constexpr std::chrono::seconds kDumpTimeout{2};

struct HealthCounters {
    std::uint64_t listener_rounds = 0;    // sock_diag dumps completed
    std::uint64_t listener_errors = 0;    // dumps failed or timed out (no verdict)
    std::uint64_t netlink_malformed = 0;  // reply messages skipped as malformed
    std::uint64_t connect_probes = 0;     // connect probes started
    std::uint64_t connect_failures = 0;   // of which refused, failed or timed out
    std::uint64_t transitions_up = 0;     // addresses that became up
    std::uint64_t transitions_down = 0;   // addresses that became down
};

// One SDP address's health, for `services` and the metrics.
struct AddressHealth {
    std::string service;
    std::string address;  // as configured: "127.0.0.1:8080", "*:8080"
    HealthCheck check = HealthCheck::off;
    HealthState state = HealthState::unknown;
    double since_seconds = 0;         // since the last change (or since checked)
    double changed_unix_seconds = 0;  // wall time of that change
    std::uint64_t transitions = 0;
};

class HealthChecker {
  public:
    explicit HealthChecker(boost::asio::io_context& io);
    ~HealthChecker();
    HealthChecker(const HealthChecker&) = delete;
    HealthChecker& operator=(const HealthChecker&) = delete;

    // A new registry snapshot (before the workers get it) and the top-level
    // `health:` defaults: re-decides the targets, keeps the state of the
    // addresses that stay, and writes every address's state into `registry`.
    void update(std::shared_ptr<const Registry> registry, const HealthOverrides& defaults);
    void start();
    void stop();

    const HealthCounters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }
    std::vector<AddressHealth> addresses() const;
    std::size_t addresses_down() const;

  private:
    void schedule();
    void on_timer();
    void start_dump(std::vector<std::uint64_t> ids);
    void send_dump_request();
    void wait_dump();
    void on_dump_readable();
    void finish_dump(bool ok);
    void start_connect(std::uint64_t id);
    void apply(std::uint64_t id, bool pass, const char* how);
    bool ensure_netlink();

    boost::asio::io_context& io_;
    HealthMonitor monitor_;
    std::shared_ptr<const Registry> registry_;
    boost::asio::steady_timer timer_;
    std::optional<HealthTime> timer_at_;
    bool running_ = false;
    HealthCounters counters_;
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);

    // The sock_diag round in progress.
    std::unique_ptr<boost::asio::posix::stream_descriptor> netlink_;
    boost::asio::steady_timer dump_timer_;
    bool dump_in_flight_ = false;
    std::uint64_t dump_generation_ = 0;  // tells a stale wait from the current dump's
    std::vector<std::uint64_t> dump_ids_;
    std::vector<int> dump_families_;  // still to ask, the current one first
    std::uint32_t dump_seq_ = 0;
    std::vector<Listener> dump_listeners_;
    std::vector<std::uint8_t> dump_buffer_;

    std::size_t connects_in_flight_ = 0;
    // Connect probes in flight, so that stop() can cancel them.
    struct Probe;
    std::vector<std::weak_ptr<Probe>> probes_;
};

// The addresses of this host (getifaddrs), for the local/remote decision.
std::vector<pm::IpAddress> local_addresses();
// Local: unspecified ("*:P"), loopback (127/8, ::1) or one of `locals`.
bool is_local_address(const pm::IpAddress& a, const std::vector<pm::IpAddress>& locals);

}  // namespace pmd::io
