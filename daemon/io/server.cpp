// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/server.hpp"

#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <system_error>
#include <variant>

#include "daemon/io/listen_fds.hpp"
#include "daemon/io/log.hpp"
#include "daemon/io/reuseport.hpp"
#include "daemon/io/sd_notify.hpp"

namespace pmd::io {

namespace asio = boost::asio;

namespace {

constexpr auto kLogFlushInterval = std::chrono::seconds(1);

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

}  // namespace

Server::Server(asio::io_context& io, Config config, std::string config_path, bool config_optional)
    : io_(io),
      config_(std::move(config)),
      config_path_(std::move(config_path)),
      config_optional_(config_optional),
      registry_(std::make_shared<const Registry>(config_.services)),
      shards_(io, config_, registry_),
      listeners_(shards_.workers()),
      log_timer_(io),
      signals_(io),
      lease_timer_(io),
      owners_(io, [this](std::int64_t pid) { owner_exited(pid); }),
      status_timer_(io),
      watchdog_timer_(io),
      health_(io),
      pool_(pool_timers()),
      pool_timer_(io) {
    apply_logging(config_);
    backend_ = make_registry_backend(io_, config_.registry, default_member_name(), [this] {
        if (!stopping_) {
            publish(make_registry(config_.services));
        }
    });
    for (auto& w : shards_.workers()) {
        // Runs on the worker's thread: the note goes to the main thread.
        w->set_pool_sink([this](unsigned index, PoolNote note, std::uint64_t token) {
            asio::post(io_, [this, index, note = std::move(note), token]() mutable {
                on_pool_note(index, std::move(note), token);
            });
        });
    }
    health_.update(registry_, config_.health);
    // Registered now so that a signal arriving during startup is queued for
    // the loop instead of taking its default action.
    signals_.add(SIGHUP);
    signals_.add(SIGTERM);
    signals_.add(SIGINT);
    signals_.add(SIGUSR1);
}

Server::~Server() {
    stopping_ = true;  // channels closed below must not touch the store
    if (control_) {
        control_->stop();
    }
    if (metrics_) {
        metrics_->stop();
    }
    shards_.stop();
    // The sockets belong to the workers' io_contexts: gone before them.
    listeners_.clear();
}

void Server::metric_values(std::function<void(std::vector<MetricValue>)> done) {
    shards_.snapshots([this, done = std::move(done)](Aggregate a) {
        done(io::metric_values(metric_sources(std::move(a))));
    });
}

void Server::publish(std::shared_ptr<const Registry> registry, std::function<void()> done) {
    registry_ = registry;
    health_.update(registry_, config_.health);
    sync_on_demand();
    // Done once every shard answers from the new snapshot, so a `register`
    // reply means every worker knows the service.
    shards_.publish(std::move(registry), nullptr, std::move(done));
}

void Server::apply_logging(const Config& c) {
    log::logger().set_level(c.log_level);
    log::logger().set_rate_limit(c.log_rate_limit);
}

std::vector<pm::Endpoint> Server::bound() const {
    return listeners_.bound();
}

bool Server::bind() {
    // Socket activation: what the service manager passed replaces the
    // configured addresses, kind by kind.
    InheritedSockets inherited = take_inherited_sockets();
    if (!inherited.udp.empty()) {
        std::vector<std::shared_ptr<UdpSocket>> adopted;
        for (int fd : inherited.udp) {
            boost::system::error_code ec;
            auto s = UdpSocket::adopt(shards_.workers()[0]->io(), fd, ec);
            if (!s) {
                log::err("inherited UDP socket (fd " + std::to_string(fd) + "): " + ec.message());
                return false;
            }
            adopted.push_back(std::move(s));
        }
        inherited_udp_ = true;
        log::notice(std::to_string(adopted.size()) +
                    (adopted.size() == 1 ? " UDP socket" : " UDP sockets") +
                    " inherited from the service manager; listen: from the "
                    "configuration (" +
                    join(config_.listen) + ") is ignored");
        listeners_.adopt(std::move(adopted));
    } else if (!listeners_.open(config_.listen)) {
        return false;
    }
    if (shards_.size() > 1) {
        log::notice(std::to_string(shards_.size()) + " workers; " +
                    std::to_string(listeners_.steered()) + " of " +
                    std::to_string(listeners_.size()) +
                    " listen addresses steered by source address");
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
        metrics_ =
            std::make_unique<MetricsServer>(io_, [this](std::function<void(std::string)> done) {
                metric_values([done = std::move(done)](std::vector<MetricValue> v) {
                    done(prometheus_text(v));
                });
            });
        if (auto error = metrics_->bind(*config_.metrics)) {
            log::err("metrics: " + *error);
            return false;
        }
        log::notice("metrics on http://" + metrics_->endpoint().to_string() + "/metrics");
    }
    return true;
}

void Server::start() {
    // Before the workers run: their counters are read directly.
    metric_values([this](std::vector<MetricValue> v) { last_status_ = status_line(v); });
    shards_.start();
    listeners_.set_running(true);
    wait_signal();
    arm_log_flush();
    if (control_) {
        control_->start();
    }
    if (metrics_) {
        metrics_->start();
    }
    arm_lease_timer(store_.next_deadline());
    health_.start();
    backend_->start();
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
    boost::system::error_code ignored;
    log_timer_.cancel();
    signals_.cancel(ignored);
    signals_.clear(ignored);
    lease_timer_.cancel();
    owners_.stop();
    status_timer_.cancel();
    watchdog_timer_.cancel();
    health_.stop();
    pool_timer_.cancel();
    backend_->stop();
    if (control_) {
        control_->stop();
    }
    if (metrics_) {
        metrics_->stop();
    }
    notify("STOPPING=1\nSTATUS=stopping");
    // Every worker closes its sockets and is joined; their counters are
    // then read directly, once, for the final line.
    shards_.stop();
    listeners_.set_running(false);
    log::logger().flush_suppressed(log::Clock::now(), true);
    metric_values([why = std::string(why)](std::vector<MetricValue> v) {
        log::notice("stopping (" + why + "); " + counters_line(v));
    });
}

void Server::arm_log_flush() {
    // Summaries of rate-limited lines ("suppressed N messages") are written
    // from here, once a second, so the workers' packet path never has to.
    if (stopping_) {
        return;
    }
    log_timer_.expires_after(kLogFlushInterval);
    log_timer_.async_wait([this](const boost::system::error_code& ec) {
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
            reload([](bool) {});
            break;
        case SIGUSR1:
            metric_values([](std::vector<MetricValue> v) { log::notice(counters_line(v)); });
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

void Server::arm_status_timer() {
    if (stopping_ || !notify_socket_set()) {
        return;
    }
    status_timer_.expires_after(kStatusInterval);
    status_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec == asio::error::operation_aborted || stopping_) {
            return;
        }
        metric_values([this](std::vector<MetricValue> v) {
            if (stopping_) {
                return;
            }
            std::string line = status_line(v);
            if (line != last_status_) {
                notify("STATUS=" + line);
                last_status_ = std::move(line);
            }
            arm_status_timer();
        });
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
        // Every worker must have run the ping posted one interval ago: a
        // worker stuck in a loop withholds WATCHDOG=1 and systemd restarts us.
        const std::vector<unsigned> stuck = shards_.ping();
        if (stuck.empty()) {
            notify("WATCHDOG=1");
        } else {
            ++watchdog_withheld_;
            log::logger().limited(LogLevel::warning, "watchdog", [&] {
                std::string list;
                for (unsigned i : stuck) {
                    list += (list.empty() ? "" : ",") + std::to_string(i);
                }
                return "worker " + list + " did not answer the watchdog ping; WATCHDOG=1 withheld";
            });
        }
        arm_watchdog();
    });
}

void Server::reload(std::function<void(bool)> done) {
    notify(reloading_state());
    auto finish = [this, done = std::move(done)](bool applied) {
        metric_values([this, applied, done](std::vector<MetricValue> v) {
            if (stopping_) {
                return done(applied);  // STOPPING=1 was the last word
            }
            // READY=1 in every case: the service manager leaves the reloading state.
            last_status_ = std::string(applied ? "reloaded: " : "reload failed: ") + status_line(v);
            notify("READY=1\nSTATUS=" + last_status_);
            done(applied);
        });
    };
    if (!apply_reload([finish] { finish(true); })) {
        finish(false);
    }
}

bool Server::apply_reload(std::function<void()> then) {
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
    if (!config_.workers_from_command_line && resolve_workers(next.workers) != shards_.size()) {
        log::notice("reload: workers: takes effect at the next start (running " +
                    std::to_string(shards_.size()) + ")");
    }
    next.workers = config_.workers;
    next.workers_from_command_line = config_.workers_from_command_line;
    std::optional<ListenSet::Prepared> listeners;
    if (next.listen != config_.listen) {
        listeners = listeners_.prepare(next.listen);
        if (!listeners) {
            ++shell_.reload_failures;
            last_reload_error_ = "cannot listen on " + join(next.listen);
            log::err("reload failed, keeping the running configuration: cannot listen on " +
                     join(next.listen));
            return false;
        }
    }
    // Dynamic registrations persist across a reload, unless a static service
    // of the new file now claims their name or Conventional Address.
    const auto change = store_.restrict_to(next.services);
    log_removed(change, "reload: ");
    if (change.changed) {
        watch_owners();
        backend_->own_changed(store_.registrations());
        if (auto error = persist()) {
            log::err("state file: " + *error);
        }
    }
    if (next.control.socket != config_.control.socket || next.state_file != config_.state_file ||
        next.metrics != config_.metrics || next.registry != config_.registry) {
        log::notice(
            "reload: control.socket, state_file, metrics and registry take effect at the next "
            "start");
        next.control.socket = config_.control.socket;
        next.control.socket_configured = config_.control.socket_configured;
        next.state_file = config_.state_file;
        next.metrics = config_.metrics;
        next.registry = config_.registry;
    }
    if (control_) {
        control_->set_groups(next.control);
    }

    // Every shard gets the new snapshot and its limits in one posted step
    // (below); `then` runs once all of them have it. Everything else applies
    // now, so that what comes next (a registration) builds on the new
    // configuration.
    auto registry = make_registry(next.services);
    registry_ = registry;
    apply_logging(next);
    if (listeners) {
        listeners_.commit(std::move(*listeners));
    }
    config_ = std::move(next);
    health_.update(registry, config_.health);
    pool_.set_timers(pool_timers());
    sync_on_demand();
    config_optional_ = false;
    ++shell_.reloads;
    log::notice("reloaded configuration from " + config_path_ + ": " +
                std::to_string(config_.services.size()) + " services");
    shards_.publish(registry, &config_, std::move(then));
    return true;
}

}  // namespace pmd::io
