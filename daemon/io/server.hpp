// SPDX-License-Identifier: Apache-2.0
// The sdp-pmd controller: the main thread's loop around the UDP worker
// shards. It owns the configuration and starts, reloads and stops
// everything; the jobs themselves live in their own units (the split of
// ISC Kea's d2 on its process library):
//
//   io/shards.hpp          the worker shards (io/worker.hpp), each with its
//                          own sans-I/O pmd::Pmsp; asked without blocking
//                          (io/gather.hpp)
//   io/listen_set.hpp      the UDP listen sockets and their reload diff
//                          (core/listen_plan.hpp)
//   io/health_checker.hpp  the health of every SDP address (listener and
//                          connect checks) into the registry's flags
//   io/registry_backend.hpp where registrations live beyond this daemon:
//                          `local`, or `etcd` for a cluster of replicas
//   core/registrations.hpp the dynamic registrations, their leases and
//                          owner processes, wired to the state file, the
//                          lease timer and the owners' pidfds
//                          (io/owner_watch.hpp) in server_registrations.cpp
//   io/metrics.hpp         every counter, declared once, rendered for
//                          stats, logs, Prometheus and STATUS=
//   server_control.cpp     the control commands (ControlBackend); their
//                          table is pmctl::kCommands (control/)
//   server.cpp             this controller: bind, start, signals, reload,
//                          timers, service manager notifications, stop
//
// The main thread never touches a shard's state and never waits for one:
// it posts work (a new registry snapshot, new limits, sockets, a counter
// snapshot) and continues when the answers come back, or after
// kWorkerReplyTimeout with the silent worker reported. Signals are
// delivered through asio::signal_set, so no work ever happens in a real
// signal handler. The service manager is told READY=1 once every socket is
// bound, RELOADING=1 / READY=1 around a reload, STATUS= with live counts (at
// most every kStatusInterval, when they changed), WATCHDOG=1 at half of
// $WATCHDOG_USEC from the main loop, only while every worker answered the
// previous round's ping (so a stuck worker stops the pings), and STOPPING=1.
//
// Sockets inherited from the service manager (socket activation) replace
// `listen:` (UDP) and `control.socket` (a listening Unix stream socket).
//
//   SIGHUP           re-read the config file; apply it completely or not at all
//   SIGTERM, SIGINT  stop: close the sockets, log the final counters
//   SIGUSR1          log every counter on one line
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/on_demand.hpp"
#include "daemon/core/pmsp.hpp"
#include "daemon/core/registrations.hpp"
#include "daemon/io/control_handler.hpp"
#include "daemon/io/control_socket.hpp"
#include "daemon/io/health_checker.hpp"
#include "daemon/io/listen_set.hpp"
#include "daemon/io/metrics.hpp"
#include "daemon/io/metrics_http.hpp"
#include "daemon/io/owner_watch.hpp"
#include "daemon/io/registry_backend.hpp"
#include "daemon/io/shards.hpp"
#include "daemon/io/state_file.hpp"
#include "daemon/io/udp_socket.hpp"
#include "daemon/io/worker.hpp"

namespace pmd::io {

// How often STATUS= is refreshed (only sent when the text changed).
inline constexpr std::chrono::seconds kStatusInterval{10};

class Server final : public ControlBackend {
  public:
    // `config_path` is re-read on SIGHUP. With `config_optional` (the default
    // path was used and did not exist at start) a still-missing file on
    // reload keeps the running configuration without an error.
    Server(boost::asio::io_context& io, Config config, std::string config_path,
           bool config_optional);
    ~Server() override;
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Loads the state file, binds every listen endpoint, the control socket
    // and the metrics address. On failure logs an error naming the address
    // and returns false.
    bool bind();
    // Starts receiving, the timers and the signal handlers; logs "ready".
    void start();
    // Closes the sockets and cancels every wait so that io_context::run()
    // returns; logs the final counters.
    void stop(std::string_view why);
    // What SIGHUP does. done(true) when a new configuration was applied,
    // once every worker has it (or kWorkerReplyTimeout passed).
    void reload(std::function<void(bool)> done);

    // The endpoints actually bound (a configured port 0 replaced by the real one).
    std::vector<pm::Endpoint> bound() const;
    // Every counter and gauge (io/metrics.hpp), once the workers answered.
    void metric_values(std::function<void(std::vector<MetricValue>)> done);
    unsigned workers() const { return static_cast<unsigned>(shards_.size()); }

    // ControlBackend (docs/control-protocol.md), in server_control.cpp.
    void status(Done<nlohmann::json> done) override;
    void services(Done<nlohmann::json> done) override;
    void register_service(Registration r, Done<Reply> done) override;
    void unregister_service(const std::string& name, Done<Reply> done) override;
    void transactions(std::size_t limit, Done<nlohmann::json> done) override;
    void stats(Done<nlohmann::json> done) override;
    void reset_stats(std::function<void()> done) override;
    void reload_config(Done<Reply> done) override;
    void cluster(Done<nlohmann::json> done) override;
    // On-demand services (server_on_demand.cpp).
    void register_on_demand(Registration r, std::weak_ptr<Channel> channel,
                            Done<Reply> done) override;
    void channel_line(const std::string& service, std::string_view line,
                      const Channel* channel) override;
    void channel_closed(const std::string& service, const Channel* channel) override;

  private:
    MetricSources metric_sources(Aggregate workers) const;
    // Live transactions per service name.
    using LiveMap = std::map<std::string, std::uint64_t, std::less<>>;
    nlohmann::json status_json(std::size_t transactions) const;
    nlohmann::json services_json(const LiveMap& live) const;
    // Hands `registry` to every worker; done once all have it.
    void publish(
        std::shared_ptr<const Registry> registry, std::function<void()> done = [] {});
    void arm_log_flush();
    void wait_signal();
    void on_signal(int signo);
    void apply_logging(const Config& c);
    // Applies the config file, or returns false and changes nothing; `then`
    // runs once every worker has the new registry and limits.
    bool apply_reload(std::function<void()> then);
    void notify(const std::string& state);
    void load_state();
    std::shared_ptr<const Registry> make_registry(const std::vector<Service>& statics) const;
    std::optional<std::string> persist();
    void log_removed(const RegistrationStore::Change& change, std::string_view context);
    // After the store changed: logs what it removed, publishes and saves.
    void apply_change(const RegistrationStore::Change& change, std::string_view context);
    void expire_leases();
    // A watched owner process exited: its registrations go.
    void owner_exited(std::int64_t pid);
    // Watches the owner processes of the registrations in the store now.
    void watch_owners() { owners_.watch(store_.owners()); }
    void arm_lease_timer(std::optional<WallClock::time_point> deadline);
    void arm_status_timer();
    void arm_watchdog();
    // On-demand ports (server_on_demand.cpp): a worker's PoolNote, carried
    // to the main thread; the pool's commands to the acceptors' channels
    // and its answers to the workers; the pool's timer.
    void on_pool_note(unsigned worker, PoolNote note, std::uint64_t token);
    void run_pool_step(OnDemandPool::Step step);
    void arm_pool_timer();
    // The pools follow the on-demand registrations in the store: those of
    // registrations gone are dropped and their channels closed.
    void sync_on_demand();
    PoolTimers pool_timers() const;

    boost::asio::io_context& io_;
    Config config_;
    std::string config_path_;
    bool config_optional_;
    std::shared_ptr<const Registry> registry_;  // the snapshot every worker has
    Shards shards_;
    ListenSet listeners_;
    boost::asio::steady_timer log_timer_;
    boost::asio::signal_set signals_;
    bool stopping_ = false;
    ShellCounters shell_;
    std::string last_reload_error_;

    RegistrationStore store_;  // the dynamic registrations made here
    // Which dynamic services the workers answer for: the store's (`local`)
    // or every replica's (`etcd`); io/registry_backend.hpp.
    std::unique_ptr<RegistryBackend> backend_;
    boost::asio::steady_timer lease_timer_;
    OwnerWatch owners_;
    std::unique_ptr<ControlServer> control_;
    std::unique_ptr<MetricsServer> metrics_;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
    std::uint64_t state_write_errors_ = 0;

    // Socket activation: which sockets came from the service manager.
    bool inherited_udp_ = false;
    bool inherited_control_ = false;
    // sd_notify beyond READY / RELOADING / STOPPING.
    boost::asio::steady_timer status_timer_;
    std::string last_status_;  // the last STATUS= text sent
    boost::asio::steady_timer watchdog_timer_;
    std::chrono::microseconds watchdog_interval_{0};  // 0: no watchdog
    std::uint64_t watchdog_withheld_ = 0;             // WATCHDOG=1 not sent: a worker stuck
    // Health of the SDP addresses (io/health_checker.hpp); told of every
    // new registry snapshot before the workers get it.
    HealthChecker health_;
    // On-demand ports: the pools, their timer and each service's channel.
    OnDemandPool pool_;
    boost::asio::steady_timer pool_timer_;
    std::optional<TimePoint> pool_deadline_;
    std::map<std::string, std::weak_ptr<Channel>, std::less<>> channels_;
};

}  // namespace pmd::io
