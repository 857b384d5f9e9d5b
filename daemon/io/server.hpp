// The sdp-pmd I/O shell: UDP listen sockets, the PMAck timer, signals and
// configuration reloads around one sans-I/O pmd::Pmsp.
//
// Everything runs on the thread that runs the io_context (one shard for now);
// signals are delivered through asio::signal_set, so no work ever happens in
// a real signal handler. The service manager is told READY=1 once every
// socket is bound, RELOADING=1 / READY=1 around a reload, STATUS= with live
// counts (at most every kStatusInterval, when they changed), WATCHDOG=1 at
// half of $WATCHDOG_USEC from the loop's own thread, and STOPPING=1.
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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/pmsp.hpp"
#include "io/control_handler.hpp"
#include "io/control_socket.hpp"
#include "io/metrics_http.hpp"
#include "io/state_file.hpp"
#include "io/udp_socket.hpp"

namespace pmd::io {

// How often STATUS= is refreshed (only sent when the text changed).
inline constexpr std::chrono::seconds kStatusInterval{10};

// What the shell itself counts, next to the core's Counters.
struct ShellCounters {
    std::uint64_t receive_errors = 0;
    std::uint64_t send_errors = 0;
    std::uint64_t truncated = 0;  // longer than the receive buffer (counted too_long)
    std::uint64_t reloads = 0;
    std::uint64_t reload_failures = 0;
};

Limits limits_from(const Config& config);

// One counter or gauge, named for both `stats` (stat) and Prometheus (prom,
// with an optional label).
struct MetricValue {
    std::string stat;
    std::string prom;
    std::string label;  // e.g. outcome="accepted"; empty: none
    std::string help;
    bool gauge = false;
    double value = 0;
};

// Prometheus text exposition 0.0.4 of the values (HELP/TYPE once per name).
std::string prometheus_text(const std::vector<MetricValue>& values);

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
    // What SIGHUP does. Returns true when a new configuration was applied.
    bool reload();

    std::string counters_line() const;
    const ShellCounters& shell_counters() const { return shell_; }
    const Pmsp& pmsp() const { return *pmsp_; }
    // The endpoints actually bound (a configured port 0 replaced by the real one).
    std::vector<pm::Endpoint> bound() const;
    std::vector<MetricValue> metric_values() const;

    // ControlBackend (docs/control-protocol.md).
    nlohmann::json status() override;
    nlohmann::json services() override;
    Reply register_service(Registration r) override;
    Reply unregister_service(const std::string& name) override;
    nlohmann::json transactions(std::size_t limit) override;
    nlohmann::json stats() override;
    void reset_stats() override;
    Reply reload_config() override;

  private:
    using SocketList = std::vector<std::shared_ptr<UdpSocket>>;

    std::optional<SocketList> open_sockets(const std::vector<pm::Endpoint>& listen,
                                           const SocketList& reuse);
    void wait_readable(const std::shared_ptr<UdpSocket>& s);
    void on_readable(UdpSocket& s);
    void log_outcome(const Received& r, Outcome outcome, TimePoint now);
    void arm_timer();
    void on_timer();
    void arm_log_flush();
    void wait_signal();
    void on_signal(int signo);
    void apply_logging(const Config& c);
    bool apply_reload();
    void notify(const std::string& state);
    std::string status_line() const;
    void load_state();
    std::shared_ptr<const Registry> make_registry(const std::vector<Service>& statics) const;
    std::optional<std::string> persist();
    void expire_leases();
    void arm_lease_timer();
    void arm_status_timer();
    void arm_watchdog();

    boost::asio::io_context& io_;
    Config config_;
    std::string config_path_;
    bool config_optional_;
    std::unique_ptr<Pmsp> pmsp_;
    SocketList sockets_;
    std::unique_ptr<RxBatch> rx_;
    std::unique_ptr<TxBatch> tx_;
    boost::asio::steady_timer timer_;
    std::optional<TimePoint> timer_deadline_;  // what timer_ is armed for
    boost::asio::steady_timer log_timer_;
    bool log_timer_armed_ = false;
    boost::asio::signal_set signals_;
    bool stopping_ = false;
    ShellCounters shell_;
    std::string last_reload_error_;

    std::vector<Registration> registrations_;  // dynamic, sorted by name
    boost::asio::steady_timer lease_timer_;
    std::unique_ptr<ControlServer> control_;
    std::unique_ptr<MetricsServer> metrics_;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
    std::uint64_t registrations_changed_ = 0;
    std::uint64_t leases_expired_ = 0;
    std::uint64_t state_write_errors_ = 0;

    // Socket activation: which sockets came from the service manager.
    bool inherited_udp_ = false;
    bool inherited_control_ = false;
    // sd_notify beyond READY / RELOADING / STOPPING.
    boost::asio::steady_timer status_timer_;
    std::string last_status_;  // the last STATUS= text sent
    boost::asio::steady_timer watchdog_timer_;
    std::chrono::microseconds watchdog_interval_{0};  // 0: no watchdog
};

}  // namespace pmd::io
