#include "io/server.hpp"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <sstream>
#include <system_error>
#include <variant>

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
      signals_(io) {
    apply_logging(config_);
    // Registered now so that a signal arriving during startup is queued for
    // the loop instead of taking its default action.
    signals_.add(SIGHUP);
    signals_.add(SIGTERM);
    signals_.add(SIGINT);
    signals_.add(SIGUSR1);
}

Server::~Server() {
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
    auto sockets = open_sockets(config_.listen, {});
    if (!sockets) {
        return false;
    }
    sockets_ = std::move(*sockets);
    for (const auto& s : sockets_) {
        log::notice("listening on UDP " + s->endpoint().to_string());
    }
    return true;
}

void Server::start() {
    for (const auto& s : sockets_) {
        wait_readable(s);
    }
    wait_signal();
    notify("READY=1\nSTATUS=" + status());
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
    notify("STOPPING=1");
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

std::string Server::status() const {
    return std::to_string(config_.services.size()) + " services, " +
           std::to_string(sockets_.size()) + " sockets";
}

bool Server::reload() {
    notify(reloading_state());
    const bool applied = apply_reload();
    // READY=1 in every case: the service manager leaves the reloading state.
    notify("READY=1\nSTATUS=" + std::string(applied ? "reloaded: " : "reload failed: ") + status());
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
        log::err("reload failed, keeping the running configuration: " + e->to_string());
        return false;
    }
    Config next = std::move(std::get<Config>(loaded));

    // Everything that can fail happens before anything is applied: the new
    // sockets are bound while the old ones still serve.
    std::optional<SocketList> sockets;
    if (next.listen != config_.listen) {
        sockets = open_sockets(next.listen, sockets_);
        if (!sockets) {
            ++shell_.reload_failures;
            log::err("reload failed, keeping the running configuration: cannot listen on " +
                     join(next.listen));
            return false;
        }
    }
    auto registry = std::make_shared<const Registry>(next.services);

    pmsp_->set_registry(std::move(registry));
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
    add("transactions", pmsp_->transactions());
    add("truncated", shell_.truncated);
    add("receive_errors", shell_.receive_errors);
    add("send_errors", shell_.send_errors);
    add("reloads", shell_.reloads);
    add("reload_failures", shell_.reload_failures);
    return out;
}

}  // namespace pmd::io
