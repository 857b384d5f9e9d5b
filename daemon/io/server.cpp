#include "io/server.hpp"

#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <system_error>
#include <variant>

#include "io/listen_fds.hpp"
#include "io/log.hpp"
#include "io/sd_notify.hpp"

namespace pmd::io {

namespace asio = boost::asio;

namespace {

// Batches drained per readiness wakeup before yielding to the other sockets,
// the timers and the signals.
constexpr int kMaxBatchesPerWakeup = 8;
constexpr auto kLogFlushInterval = std::chrono::seconds(1);

std::uint64_t random_seed() {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::string join(const std::vector<pm::Endpoint>& eps) {
    std::string out;
    for (const auto& e : eps) {
        if (!out.empty()) {
            out += ' ';
        }
        out += e.to_string();
    }
    return out;
}

const char* signal_name(int signo) {
    switch (signo) {
        case SIGHUP:
            return "SIGHUP";
        case SIGTERM:
            return "SIGTERM";
        case SIGINT:
            return "SIGINT";
        case SIGUSR1:
            return "SIGUSR1";
        default:
            return "signal";
    }
}

LogLevel level_of(Outcome o) {
    switch (o) {
        case Outcome::denied_no_service:
        case Outcome::denied_not_allowed:
        case Outcome::denied_no_address:
            return LogLevel::info;
        case Outcome::drop_rate_limited:
        case Outcome::drop_quenched:
            // The flood alarm of section 15.2.1: a source beyond its bounds.
            // Rate-limited per cause like every other line, with the rest
            // summarised as "suppressed N messages".
            return LogLevel::warning;
        default:
            return LogLevel::debug;
    }
}

// "PMReq 127.0.0.1:80 CpIPAddr 127.0.0.1 CpPort 4000 AssocHandle 0x2a"
std::string describe(std::span<const std::uint8_t> bytes, std::size_t length) {
    if (bytes.size() != length) {
        return std::to_string(length) + " bytes";  // truncated: not a message anyway
    }
    auto d = pm::decode(bytes);
    if (const auto* m = std::get_if<pm::Message>(&d)) {
        std::ostringstream os;
        os << pm::to_string(m->type) << ' ' << pm::Endpoint{m->ap_addr, m->ap_port}.to_string()
           << " CpIPAddr " << m->cp_addr.to_string() << " CpPort " << m->cp_port
           << " AssocHandle 0x" << std::hex << m->assoc_handle;
        return os.str();
    }
    return std::to_string(length) + " bytes";
}

}  // namespace

Limits limits_from(const Config& c) {
    Limits l;
    l.ack_timeout = c.ack_timeout;
    l.max_transactions = c.max_transactions;
    l.deny_ap_port = c.deny_ap_port;
    l.accept_iwpm_request = c.accept_iwpm_request;
    l.per_source = c.per_source;
    l.quench = c.quench;
    return l;
}

Server::Server(asio::io_context& io, Config config, std::string config_path, bool config_optional)
    : io_(io),
      config_(std::move(config)),
      config_path_(std::move(config_path)),
      config_optional_(config_optional),
      pmsp_(std::make_unique<Pmsp>(
          limits_from(config_), std::make_shared<const Registry>(config_.services), random_seed())),
      rx_(std::make_unique<RxBatch>()),
      tx_(std::make_unique<TxBatch>()),
      timer_(io),
      log_timer_(io),
      signals_(io),
      lease_timer_(io),
      status_timer_(io),
      watchdog_timer_(io) {
    apply_logging(config_);
    // Registered now so that a signal arriving during startup is queued for
    // the loop instead of taking its default action.
    signals_.add(SIGHUP);
    signals_.add(SIGTERM);
    signals_.add(SIGINT);
    signals_.add(SIGUSR1);
}

Server::~Server() {
    if (control_) {
        control_->stop();
    }
    if (metrics_) {
        metrics_->stop();
    }
    for (auto& s : sockets_) {
        s->close();
    }
}

void Server::apply_logging(const Config& c) {
    log::logger().set_level(c.log_level);
    log::logger().set_rate_limit(c.log_rate_limit);
}

std::vector<pm::Endpoint> Server::bound() const {
    std::vector<pm::Endpoint> out;
    for (const auto& s : sockets_) {
        out.push_back(s->endpoint());
    }
    return out;
}

std::optional<Server::SocketList> Server::open_sockets(const std::vector<pm::Endpoint>& listen,
                                                       const SocketList& reuse) {
    SocketList out;
    bool skipped_v6 = false;
    for (const auto& ep : listen) {
        std::shared_ptr<UdpSocket> s;
        for (const auto& old : reuse) {
            if (ep.port != 0 && old->endpoint() == ep) {
                s = old;
            }
        }
        if (!s) {
            boost::system::error_code ec;
            s = UdpSocket::open(io_, ep, ec);
            if (!s) {
                if (ec == boost::system::errc::address_family_not_supported && ep.address.is_v6()) {
                    log::warning("IPv6 is not available, not listening on UDP " + ep.to_string());
                    skipped_v6 = true;
                    continue;
                }
                log::err("cannot bind UDP " + ep.to_string() + ": " + ec.message());
                for (auto& n : out) {
                    if (std::find(reuse.begin(), reuse.end(), n) == reuse.end()) {
                        n->close();
                    }
                }
                return std::nullopt;
            }
        }
        out.push_back(std::move(s));
    }
    if (out.empty()) {
        log::err(skipped_v6 ? "no listen address could be bound" : "no listen address configured");
        return std::nullopt;
    }
    return out;
}

bool Server::bind() {
    // Socket activation: what the service manager passed replaces the
    // configured addresses, kind by kind.
    InheritedSockets inherited = take_inherited_sockets();
    if (!inherited.udp.empty()) {
        for (int fd : inherited.udp) {
            boost::system::error_code ec;
            auto s = UdpSocket::adopt(io_, fd, ec);
            if (!s) {
                log::err("inherited UDP socket (fd " + std::to_string(fd) + "): " + ec.message());
                return false;
            }
            sockets_.push_back(std::move(s));
        }
        inherited_udp_ = true;
        log::notice(std::to_string(sockets_.size()) +
                    (sockets_.size() == 1 ? " UDP socket" : " UDP sockets") +
                    " inherited from the service manager; listen: from the "
                    "configuration (" +
                    join(config_.listen) + ") is ignored");
        for (const auto& s : sockets_) {
            log::notice("listening on UDP " + s->endpoint().to_string() + " (inherited)");
        }
    } else {
        auto sockets = open_sockets(config_.listen, {});
        if (!sockets) {
            return false;
        }
        sockets_ = std::move(*sockets);
        for (const auto& s : sockets_) {
            log::notice("listening on UDP " + s->endpoint().to_string());
        }
    }
    load_state();
    control_ = std::make_unique<ControlServer>(io_, *this);
    control_->set_groups(config_.control);
    if (inherited.control) {
        if (auto error = control_->adopt(*inherited.control)) {
            log::err("control socket: " + *error);
            return false;
        }
        inherited_control_ = true;
        log::notice("control socket " + control_->path() +
                    " inherited from the service manager; control.socket from the "
                    "configuration (" +
                    config_.control.socket + ") is ignored");
    } else if (auto error = control_->bind(config_.control.socket)) {
        if (config_.control.socket_configured) {
            log::err("control socket: " + *error);
            return false;
        }
        // The default path is best effort: the Port Mapper itself still runs.
        log::err("control socket: " + *error + "; running without a control socket");
        control_.reset();
    } else {
        log::notice("control socket " + config_.control.socket);
    }
    if (config_.metrics) {
        metrics_ = std::make_unique<MetricsServer>(
            io_, [this] { return prometheus_text(metric_values()); });
        if (auto error = metrics_->bind(*config_.metrics)) {
            log::err("metrics: " + *error);
            return false;
        }
        log::notice("metrics on http://" + metrics_->endpoint().to_string() + "/metrics");
    }
    return true;
}

std::shared_ptr<const Registry> Server::make_registry(const std::vector<Service>& statics) const {
    std::vector<Service> all = statics;
    for (const Registration& r : registrations_) {
        all.push_back(r.service);
    }
    // Services keep their counts across reloads and registrations.
    return std::make_shared<const Registry>(std::move(all), pmsp_ ? &pmsp_->registry() : nullptr);
}

void Server::load_state() {
    const std::string& path = config_.state_file;
    StateLoad loaded = read_state_file(path, WallClock::now());
    if (loaded.error) {
        std::string error;
        auto moved = move_aside(path, error);
        log::err("state file " + path + " is corrupt (" + *loaded.error + "); " +
                 (moved ? "moved aside to " + *moved
                        : "could not move it aside: " + error +
                              "; it will be overwritten on the "
                              "next change") +
                 "; starting without dynamic registrations");
        return;
    }
    const auto now = WallClock::now();
    std::vector<Registration> kept;
    for (Registration& r : loaded.registrations) {
        if (r.expired(now)) {
            log::notice("registration \"" + r.service.name + "\" expired while stopped, dropped");
            ++leases_expired_;
            continue;
        }
        if (auto conflict = find_conflict(r, config_.services, kept)) {
            log::warning("registration \"" + r.service.name +
                         "\" from the state file dropped: " + *conflict);
            continue;
        }
        auto same = std::find_if(kept.begin(), kept.end(), [&](const Registration& k) {
            return k.service.name == r.service.name;
        });
        if (same != kept.end()) {
            *same = std::move(r);
        } else {
            kept.push_back(std::move(r));
        }
    }
    std::sort(kept.begin(), kept.end(),
              [](const auto& a, const auto& b) { return a.service.name < b.service.name; });
    const bool changed = kept.size() != loaded.registrations.size();
    registrations_ = std::move(kept);
    if (!loaded.missing) {
        log::notice("state file " + path + ": " + std::to_string(registrations_.size()) +
                    " dynamic registrations");
    }
    pmsp_->set_registry(make_registry(config_.services));
    if (changed) {
        if (auto error = persist()) {
            log::err("state file: " + *error);
        }
    }
}

std::optional<std::string> Server::persist() {
    auto error = write_state_file(config_.state_file, registrations_);
    if (error) {
        ++state_write_errors_;
    }
    return error;
}

void Server::arm_lease_timer() {
    if (stopping_) {
        return;
    }
    std::optional<WallClock::time_point> next;
    for (const Registration& r : registrations_) {
        if (r.expires && (!next || *r.expires < *next)) {
            next = r.expires;
        }
    }
    if (!next) {
        lease_timer_.cancel();
        return;
    }
    // Re-checked at least once a minute in case the wall clock jumps.
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(*next - WallClock::now());
    wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(60'000));
    lease_timer_.expires_after(wait + std::chrono::milliseconds(1));
    lease_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec || stopping_) {
            return;
        }
        expire_leases();
    });
}

void Server::expire_leases() {
    const auto now = WallClock::now();
    const auto before = registrations_.size();
    std::erase_if(registrations_, [&](const Registration& r) {
        if (r.expired(now)) {
            log::notice("registration \"" + r.service.name + "\" lease expired, removed");
            return true;
        }
        return false;
    });
    if (registrations_.size() != before) {
        leases_expired_ += before - registrations_.size();
        ++registrations_changed_;
        pmsp_->set_registry(make_registry(config_.services));
        if (auto error = persist()) {
            log::err("state file: " + *error);
        }
    }
    arm_lease_timer();
}

void Server::start() {
    for (const auto& s : sockets_) {
        wait_readable(s);
    }
    wait_signal();
    if (control_) {
        control_->start();
    }
    if (metrics_) {
        metrics_->start();
    }
    arm_lease_timer();
    last_status_ = status_line();
    notify("READY=1\nSTATUS=" + last_status_);
    arm_status_timer();
    if (auto timeout = watchdog_timeout()) {
        // Half the timeout, as sd_watchdog_enabled(3) recommends; from this
        // thread, so a stuck loop stops the pings and systemd restarts it.
        watchdog_interval_ = std::max(std::chrono::microseconds(1000), *timeout / 2);
        log::notice("watchdog: WATCHDOG=1 every " +
                    std::to_string(watchdog_interval_.count() / 1000) + " ms");
        arm_watchdog();
    }
    log::notice("ready: " + std::to_string(config_.services.size()) + " services, config " +
                (config_optional_ && !std::filesystem::exists(config_path_)
                     ? std::string("built-in defaults")
                     : config_path_));
}

void Server::stop(std::string_view why) {
    if (stopping_) {
        return;
    }
    stopping_ = true;
    for (auto& s : sockets_) {
        s->close();
    }
    boost::system::error_code ignored;
    timer_.cancel();
    log_timer_.cancel();
    signals_.cancel(ignored);
    signals_.clear(ignored);
    lease_timer_.cancel();
    status_timer_.cancel();
    watchdog_timer_.cancel();
    if (control_) {
        control_->stop();
    }
    if (metrics_) {
        metrics_->stop();
    }
    notify("STOPPING=1\nSTATUS=stopping");
    log::logger().flush_suppressed(log::Clock::now(), true);
    log::notice("stopping (" + std::string(why) + "); " + counters_line());
}

void Server::wait_readable(const std::shared_ptr<UdpSocket>& s) {
    // The handler holds the socket: a socket closed by a reload or stop stays
    // valid until its handler has run and seen it closed.
    s->socket().async_wait(
        asio::ip::udp::socket::wait_read, [this, s](const boost::system::error_code& ec) {
            if (stopping_ || !s->is_open() || ec == asio::error::operation_aborted) {
                return;
            }
            if (ec) {
                ++shell_.receive_errors;
                log::logger().limited(LogLevel::warning, "wait_error", [&] {
                    return "waiting on UDP " + s->endpoint().to_string() + ": " + ec.message();
                });
            } else {
                on_readable(*s);
            }
            if (!stopping_ && s->is_open()) {
                wait_readable(s);
            }
        });
}

void Server::on_readable(UdpSocket& s) {
    for (int round = 0; round < kMaxBatchesPerWakeup; ++round) {
        int n = s.receive(*rx_);
        if (n < 0) {
            ++shell_.receive_errors;
            log::logger().limited(LogLevel::warning, "receive_error", [&] {
                return "receiving on UDP " + s.endpoint().to_string() + ": " +
                       std::generic_category().message(-n);
            });
            break;
        }
        if (n == 0) {
            break;
        }
        const TimePoint now = std::chrono::steady_clock::now();
        for (const Received& r : rx_->received()) {
            if (r.truncated()) {
                ++shell_.truncated;
            }
            Result res = pmsp_->on_datagram(r.bytes, r.source, r.local, now);
            if (res.reply) {
                tx_->add(*res.reply, r, s.is_v6());
            }
            log_outcome(r, res.outcome, now);
        }
        if (tx_->size() > 0) {
            auto sent = s.send(*tx_);
            if (sent.failed > 0) {
                shell_.send_errors += sent.failed;
                log::logger().limited(LogLevel::warning, "send_error", [&] {
                    return "sending on UDP " + s.endpoint().to_string() + ": " +
                           std::generic_category().message(sent.last_errno);
                });
            }
        }
        if (static_cast<std::size_t>(n) < kBatchSize) {
            break;
        }
    }
    arm_timer();
    arm_log_flush();
}

void Server::log_outcome(const Received& r, Outcome outcome, TimePoint now) {
    const LogLevel level = level_of(outcome);
    log::logger().limited(
        level, to_string(outcome),
        [&] {
            return std::string(to_string(outcome)) + ": " + describe(r.bytes, r.length) + " from " +
                   r.source.to_string() + " to " + r.local.to_string();
        },
        now);
}

void Server::arm_timer() {
    auto next = pmsp_->next_deadline();
    if (!next || stopping_) {
        return;  // an armed timer that is no longer needed fires harmlessly
    }
    if (timer_deadline_ && *timer_deadline_ <= *next) {
        return;
    }
    timer_deadline_ = *next;
    timer_.expires_at(*next);  // cancels the previous wait
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec == asio::error::operation_aborted || stopping_) {
            return;
        }
        on_timer();
    });
}

void Server::on_timer() {
    timer_deadline_.reset();
    std::size_t released = pmsp_->on_timer(std::chrono::steady_clock::now());
    if (released > 0) {
        log::logger().limited(LogLevel::debug, "ack_timeout", [&] {
            return "released " + std::to_string(released) + " transactions without PMAck";
        });
    }
    arm_timer();
    arm_log_flush();
}

void Server::arm_log_flush() {
    if (log_timer_armed_ || stopping_ || !log::logger().has_suppressed()) {
        return;
    }
    log_timer_armed_ = true;
    log_timer_.expires_after(kLogFlushInterval);
    log_timer_.async_wait([this](const boost::system::error_code& ec) {
        log_timer_armed_ = false;
        if (ec == asio::error::operation_aborted || stopping_) {
            return;
        }
        log::logger().flush_suppressed(log::Clock::now());
        arm_log_flush();
    });
}

void Server::wait_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
        if (ec || stopping_) {
            return;
        }
        on_signal(signo);
        if (!stopping_) {
            wait_signal();
        }
    });
}

void Server::on_signal(int signo) {
    switch (signo) {
        case SIGHUP:
            reload();
            break;
        case SIGUSR1:
            log::notice(counters_line());
            break;
        default:
            stop(std::string(signal_name(signo)));
            break;
    }
}

void Server::notify(const std::string& state) {
    std::string error;
    if (!sd_notify(state, &error)) {
        log::logger().limited(LogLevel::warning, "sd_notify", [&] { return error; });
    }
}

std::string Server::status_line() const {
    return std::to_string(config_.services.size() + registrations_.size()) + " services, " +
           std::to_string(pmsp_->transactions()) + " transactions, " +
           std::to_string(pmsp_->counters().requests) + " requests";
}

void Server::arm_status_timer() {
    if (stopping_ || !notify_socket_set()) {
        return;
    }
    status_timer_.expires_after(kStatusInterval);
    status_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec == asio::error::operation_aborted || stopping_) {
            return;
        }
        std::string line = status_line();
        if (line != last_status_) {
            notify("STATUS=" + line);
            last_status_ = std::move(line);
        }
        arm_status_timer();
    });
}

void Server::arm_watchdog() {
    if (stopping_ || watchdog_interval_.count() == 0) {
        return;
    }
    watchdog_timer_.expires_after(watchdog_interval_);
    watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec == asio::error::operation_aborted || stopping_) {
            return;
        }
        notify("WATCHDOG=1");
        arm_watchdog();
    });
}

bool Server::reload() {
    notify(reloading_state());
    const bool applied = apply_reload();
    // READY=1 in every case: the service manager leaves the reloading state.
    last_status_ = std::string(applied ? "reloaded: " : "reload failed: ") + status_line();
    notify("READY=1\nSTATUS=" + last_status_);
    return applied;
}

bool Server::apply_reload() {
    namespace fs = std::filesystem;
    std::error_code fec;
    if (config_optional_ && !fs::exists(config_path_, fec)) {
        log::notice("reload: no config file " + config_path_ +
                    ", keeping the running configuration");
        return false;
    }
    ConfigResult loaded = load_config_file(config_path_);
    if (const auto* e = std::get_if<ConfigError>(&loaded)) {
        ++shell_.reload_failures;
        last_reload_error_ = e->to_string();
        log::err("reload failed, keeping the running configuration: " + e->to_string());
        return false;
    }
    Config next = std::move(std::get<Config>(loaded));

    // Everything that can fail happens before anything is applied: the new
    // sockets are bound while the old ones still serve.
    if (inherited_udp_ && next.listen != config_.listen) {
        log::notice(
            "reload: listen: ignored, the UDP sockets are inherited from the service "
            "manager");
        next.listen = config_.listen;
    }
    std::optional<SocketList> sockets;
    if (next.listen != config_.listen) {
        sockets = open_sockets(next.listen, sockets_);
        if (!sockets) {
            ++shell_.reload_failures;
            last_reload_error_ = "cannot listen on " + join(next.listen);
            log::err("reload failed, keeping the running configuration: cannot listen on " +
                     join(next.listen));
            return false;
        }
    }
    // Dynamic registrations persist across a reload, unless a static service
    // of the new file now claims their name or Conventional Address.
    const auto before = registrations_.size();
    std::vector<Registration> kept;
    for (Registration& r : registrations_) {
        if (auto conflict = find_conflict(r, next.services, {})) {
            log::warning("reload: registration \"" + r.service.name + "\" removed: " + *conflict);
        } else {
            kept.push_back(std::move(r));
        }
    }
    registrations_ = std::move(kept);
    if (registrations_.size() != before) {
        ++registrations_changed_;
        if (auto error = persist()) {
            log::err("state file: " + *error);
        }
    }
    if (next.control.socket != config_.control.socket || next.state_file != config_.state_file ||
        next.metrics != config_.metrics) {
        log::notice("reload: control.socket, state_file and metrics take effect at the next start");
        next.control.socket = config_.control.socket;
        next.control.socket_configured = config_.control.socket_configured;
        next.state_file = config_.state_file;
        next.metrics = config_.metrics;
    }
    if (control_) {
        control_->set_groups(next.control);
    }

    pmsp_->set_registry(make_registry(next.services));
    pmsp_->set_limits(limits_from(next));
    apply_logging(next);
    if (sockets) {
        for (auto& old : sockets_) {
            if (std::find(sockets->begin(), sockets->end(), old) == sockets->end()) {
                log::notice("no longer listening on UDP " + old->endpoint().to_string());
                old->close();
            }
        }
        for (auto& s : *sockets) {
            if (std::find(sockets_.begin(), sockets_.end(), s) == sockets_.end()) {
                log::notice("listening on UDP " + s->endpoint().to_string());
                wait_readable(s);
            }
        }
        sockets_ = std::move(*sockets);
    }
    config_ = std::move(next);
    config_optional_ = false;
    ++shell_.reloads;
    log::notice("reloaded configuration from " + config_path_ + ": " +
                std::to_string(config_.services.size()) + " services");
    arm_timer();  // a lower max_transactions may have shed; deadlines may differ
    return true;
}

std::string Server::counters_line() const {
    const Counters& c = pmsp_->counters();
    std::string out = "counters:";
    auto add = [&out](std::string_view name, std::uint64_t v) {
        out += ' ';
        out += name;
        out += '=';
        out += std::to_string(v);
    };
    add("datagrams", c.datagrams);
    add("requests", c.requests);
    add("iwpm_requests", c.iwpm_requests);
    for (std::size_t i = 0; i < kOutcomeCount; ++i) {
        add(to_string(static_cast<Outcome>(i)), c.outcome[i]);
    }
    add("superseded", c.superseded);
    add("timeouts", c.timeouts);
    add("shed", c.shed);
    add("released_on_deny", c.released_on_deny);
    add("quench_events", c.quench_events);
    add("transactions", pmsp_->transactions());
    add("truncated", shell_.truncated);
    add("receive_errors", shell_.receive_errors);
    add("send_errors", shell_.send_errors);
    add("reloads", shell_.reloads);
    add("reload_failures", shell_.reload_failures);
    return out;
}

// --- the control socket's commands --------------------------------------------

namespace {

using nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

json Server::status() {
    json listen = json::array();
    for (const auto& e : bound()) {
        listen.push_back(e.to_string());
    }
    json j;
    j["version"] = SDPPM_VERSION;
    j["pid"] = ::getpid();
    j["uptime_seconds"] = std::floor(seconds_since(started_) * 1000.0) / 1000.0;
    j["listen"] = std::move(listen);
    j["config"] = config_optional_ && !std::filesystem::exists(config_path_)
                      ? std::string("built-in defaults")
                      : config_path_;
    j["control_socket"] = control_ ? json(control_->path()) : json(nullptr);
    j["state_file"] = config_.state_file;
    j["metrics"] = metrics_ ? json(metrics_->endpoint().to_string()) : json(nullptr);
    j["services"] = config_.services.size() + registrations_.size();
    j["static_services"] = config_.services.size();
    j["dynamic_services"] = registrations_.size();
    j["transactions"] = pmsp_->transactions();
    j["control_connections"] = control_ ? control_->connections() : 0;
    return j;
}

json Server::services() {
    // Live transactions per service, and what each service answered.
    std::map<std::string, std::uint64_t, std::less<>> live;
    pmsp_->for_each_transaction([&](const TransactionView& t) { ++live[std::string(t.service)]; });
    const auto now = WallClock::now();
    json list = json::array();
    std::map<std::string, ServiceCounts, std::less<>> counts;
    for (const Service& s : pmsp_->registry().services()) {
        counts[s.name] = pmsp_->registry().counts(s);
    }
    auto add = [&](json j) {
        const auto name = j["name"].get<std::string>();
        auto it = live.find(name);
        const ServiceCounts c = counts.count(name) ? counts[name] : ServiceCounts{};
        j["counters"] = json{{"transactions", it == live.end() ? 0 : it->second},
                             {"accepted", c.accepted},
                             {"accepted_duplicate", c.accepted_duplicate},
                             {"denied", c.denied}};
        list.push_back(std::move(j));
    };
    for (const Service& s : config_.services) {
        json j = service_json(s);
        j["owner"] = nullptr;
        j["lease_expires_in"] = nullptr;
        add(std::move(j));
    }
    for (const Registration& r : registrations_) {
        add(registration_json(r, now));
    }
    return list;
}

Reply Server::register_service(Registration r) {
    if (auto conflict = find_conflict(r, config_.services, registrations_)) {
        return Reply{kResultConflict, "conflict: " + *conflict, nullptr};
    }
    auto it = std::find_if(registrations_.begin(), registrations_.end(),
                           [&](const Registration& o) { return o.service.name == r.service.name; });
    const bool renewal = it != registrations_.end();
    if (!renewal && registrations_.size() >= kMaxRegistrations) {
        return Reply{kResultError,
                     "too many registrations (" + std::to_string(kMaxRegistrations) + ")", nullptr};
    }
    std::vector<Registration> previous = registrations_;
    if (renewal) {
        *it = r;
    } else {
        registrations_.insert(std::upper_bound(registrations_.begin(), registrations_.end(), r,
                                               [](const auto& a, const auto& b) {
                                                   return a.service.name < b.service.name;
                                               }),
                              r);
    }
    if (auto error = persist()) {
        registrations_ = std::move(previous);
        log::err("register \"" + r.service.name + "\" failed: state file: " + *error);
        return Reply{kResultError, "cannot save the registration: " + *error, nullptr};
    }
    ++registrations_changed_;
    pmsp_->set_registry(make_registry(config_.services));
    arm_lease_timer();
    log::notice(std::string(renewal ? "renewed" : "registered") + " \"" + r.service.name + "\" " +
                conventional_text(r.service) + (r.owner.empty() ? "" : " owner " + r.owner));
    json j = registration_json(r, WallClock::now());
    j["counters"] = json{{"transactions", 0}};
    return Reply{kResultOk, std::string(renewal ? "renewed " : "registered ") + r.service.name,
                 std::move(j)};
}

Reply Server::unregister_service(const std::string& name) {
    auto it = std::find_if(registrations_.begin(), registrations_.end(),
                           [&](const Registration& o) { return o.service.name == name; });
    if (it == registrations_.end()) {
        const bool is_static = std::any_of(config_.services.begin(), config_.services.end(),
                                           [&](const Service& s) { return s.name == name; });
        if (is_static) {
            return Reply{kResultConflict,
                         "\"" + name + "\" is a static service; edit the config file and reload",
                         nullptr};
        }
        std::string shown;
        for (unsigned char c : name.substr(0, 64)) {
            shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
        }
        return Reply{kResultNotFound, "no dynamic service \"" + shown + "\"", nullptr};
    }
    Registration removed = *it;
    registrations_.erase(it);
    if (auto error = persist()) {
        registrations_.insert(
            std::upper_bound(
                registrations_.begin(), registrations_.end(), removed,
                [](const auto& a, const auto& b) { return a.service.name < b.service.name; }),
            removed);
        return Reply{kResultError, "cannot save the change: " + *error, nullptr};
    }
    ++registrations_changed_;
    pmsp_->set_registry(make_registry(config_.services));
    arm_lease_timer();
    log::notice("unregistered \"" + name + "\"");
    return Reply{kResultOk, "unregistered " + name, nullptr};
}

json Server::transactions(std::size_t limit) {
    json list = json::array();
    std::size_t total = 0;
    const auto now = std::chrono::steady_clock::now();
    pmsp_->for_each_transaction([&](const TransactionView& t) {
        ++total;
        if (list.size() >= limit) {
            return;
        }
        char handle[19];
        std::snprintf(handle, sizeof handle, "0x%016llx",
                      static_cast<unsigned long long>(t.request.assoc_handle));
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t.expires - now);
        list.push_back(json{
            {"service", std::string(t.service)},
            {"client", pm::Endpoint{t.request.cp_addr, t.request.cp_port}.to_string()},
            {"conventional", pm::Endpoint{t.request.ap_addr, t.request.ap_port}.to_string()},
            {"sdp", t.sdp.to_string()},
            {"assoc_handle", handle},
            {"expires_in_ms", std::max<std::int64_t>(0, left.count())},
        });
    });
    return json{{"transactions", std::move(list)}, {"total", total}};
}

std::vector<MetricValue> Server::metric_values() const {
    const Counters& c = pmsp_->counters();
    std::vector<MetricValue> v;
    auto counter = [&v](std::string stat, std::string prom, std::string help, std::uint64_t n,
                        std::string label = {}) {
        v.push_back(MetricValue{std::move(stat), std::move(prom), std::move(label), std::move(help),
                                false, static_cast<double>(n)});
    };
    auto gauge = [&v](std::string stat, std::string prom, std::string help, double n,
                      std::string label = {}) {
        v.push_back(MetricValue{std::move(stat), std::move(prom), std::move(label), std::move(help),
                                true, n});
    };
    counter("datagrams", "sdp_pmd_datagrams_total", "UDP datagrams received.", c.datagrams);
    counter("requests", "sdp_pmd_requests_total", "PMReq decoded, new and duplicate.", c.requests);
    counter("iwpm_requests", "sdp_pmd_iwpm_requests_total",
            "PMReq in rdma-core iwpmd's 64-byte format.", c.iwpm_requests);
    for (std::size_t i = 0; i < kOutcomeCount; ++i) {
        const std::string name(to_string(static_cast<Outcome>(i)));
        counter(name, "sdp_pmd_outcomes_total", "Datagrams by outcome.", c.outcome[i],
                "outcome=\"" + name + "\"");
    }
    counter("superseded", "sdp_pmd_superseded_total",
            "Transactions replaced by a PMReq with a new AssocHandle.", c.superseded);
    counter("timeouts", "sdp_pmd_timeouts_total", "Transactions released without PMAck.",
            c.timeouts);
    counter("shed", "sdp_pmd_shed_total", "Transactions dropped at max_transactions.", c.shed);
    counter("released_on_deny", "sdp_pmd_released_on_deny_total",
            "Transactions released when a duplicate PMReq was denied.", c.released_on_deny);
    counter("quench_events", "sdp_pmd_quench_events_total",
            "Sources quenched for leaving PMAccepts un-acknowledged.", c.quench_events);
    counter("truncated", "sdp_pmd_truncated_total", "Datagrams longer than the receive buffer.",
            shell_.truncated);
    counter("receive_errors", "sdp_pmd_receive_errors_total", "UDP receive errors.",
            shell_.receive_errors);
    counter("send_errors", "sdp_pmd_send_errors_total", "UDP send errors.", shell_.send_errors);
    counter("reloads", "sdp_pmd_reloads_total", "Configuration reloads applied.", shell_.reloads);
    counter("reload_failures", "sdp_pmd_reload_failures_total", "Configuration reloads refused.",
            shell_.reload_failures);
    counter("registration_changes", "sdp_pmd_registration_changes_total",
            "Dynamic registrations added, renewed, removed or expired.", registrations_changed_);
    counter("leases_expired", "sdp_pmd_leases_expired_total", "Dynamic registrations expired.",
            leases_expired_);
    counter("state_write_errors", "sdp_pmd_state_write_errors_total",
            "Failed writes of the state file.", state_write_errors_);
    const ControlCounters cc = control_ ? control_->counters() : ControlCounters{};
    counter("control_connections", "sdp_pmd_control_connections_total",
            "Control socket connections accepted.", cc.connections);
    counter("control_rejected_connections", "sdp_pmd_control_rejected_connections_total",
            "Control socket connections refused (too many open).", cc.rejected_connections);
    counter("control_requests", "sdp_pmd_control_requests_total", "Control requests answered.",
            cc.requests);
    counter("control_errors", "sdp_pmd_control_errors_total",
            "Control requests answered with result 1 or 2.", cc.errors);
    counter("control_denied", "sdp_pmd_control_denied_total",
            "Control requests refused by peer credentials.", cc.denied);
    counter("control_timeouts", "sdp_pmd_control_timeouts_total",
            "Control connections closed when idle.", cc.timeouts);
    counter("control_oversized", "sdp_pmd_control_oversized_total",
            "Control requests over the size limit.", cc.oversized);
    gauge("transactions", "sdp_pmd_transactions", "Live transactions waiting for PMAck.",
          static_cast<double>(pmsp_->transactions()));
    gauge("static_services", "sdp_pmd_services", "Services by kind.",
          static_cast<double>(config_.services.size()), "kind=\"static\"");
    gauge("dynamic_services", "sdp_pmd_services", "Services by kind.",
          static_cast<double>(registrations_.size()), "kind=\"dynamic\"");
    gauge("uptime_seconds", "sdp_pmd_uptime_seconds", "Seconds since the daemon started.",
          std::floor(seconds_since(started_)));
    return v;
}

json Server::stats() {
    json j = json::object();
    for (const MetricValue& m : metric_values()) {
        if (m.gauge) {
            j[m.stat] = m.value;
        } else {
            j[m.stat] = static_cast<std::uint64_t>(m.value);
        }
    }
    return j;
}

void Server::reset_stats() {
    pmsp_->reset_counters();
    shell_ = {};
    registrations_changed_ = 0;
    leases_expired_ = 0;
    state_write_errors_ = 0;
    if (control_) {
        control_->reset_counters();
    }
    log::notice("counters reset through the control socket");
}

Reply Server::reload_config() {
    const auto failures = shell_.reload_failures;
    last_reload_error_.clear();
    if (reload()) {
        return Reply{kResultOk, "reloaded " + config_path_, nullptr};
    }
    if (shell_.reload_failures == failures) {
        return Reply{kResultOk, "no config file " + config_path_ + ", configuration unchanged",
                     nullptr};
    }
    return Reply{kResultError, "reload failed: " + last_reload_error_, nullptr};
}

std::string prometheus_text(const std::vector<MetricValue>& values) {
    std::string out;
    std::vector<std::string> seen;
    for (const MetricValue& m : values) {
        if (std::find(seen.begin(), seen.end(), m.prom) == seen.end()) {
            seen.push_back(m.prom);
            out += "# HELP " + m.prom + " " + m.help + "\n";
            out += "# TYPE " + m.prom + (m.gauge ? " gauge\n" : " counter\n");
        }
        out += m.prom;
        if (!m.label.empty()) {
            out += "{" + m.label + "}";
        }
        char num[64];
        std::snprintf(num, sizeof num, " %.17g\n", m.value);
        out += num;
    }
    return out;
}

}  // namespace pmd::io
