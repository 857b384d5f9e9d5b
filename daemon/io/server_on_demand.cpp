// SPDX-License-Identifier: Apache-2.0
// The on-demand side of Server (see server.hpp and core/on_demand.hpp): a
// `register` with "on_demand" keeps its control connection as a channel to
// the acceptor; a worker's PMReq for such a service becomes a PoolNote
// posted here; the pool's commands go to the channel ({"open": P, "id": N},
// {"close": P}) and its answers back to the worker that waits, which sends
// the PMAccept or PMDeny. Everything here runs on the main thread.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "daemon/io/log.hpp"
#include "daemon/io/server.hpp"
#include "pmclient/pm_time.hpp"

namespace pmd::io {

using nlohmann::json;

namespace {

// A worker's token with the worker's index in its top 16 bits.
constexpr unsigned kTokenShift = 48;
constexpr std::uint64_t kTokenMask = (std::uint64_t{1} << kTokenShift) - 1;

// How long a port stays open after its PMAck or first connection: the
// client may use its cached answer that long (PmTime, 7.3.1.4).
std::chrono::milliseconds hold_of(std::uint8_t pm_time) {
    const auto life = pm::pm_time_lifetime(pm_time);
    return life.kind == pm::CacheLifetime::Kind::timed ? life.duration
                                                       : std::chrono::milliseconds(0);
}

OnDemand pool_settings(const Service& s) {
    OnDemand od = *s.on_demand;
    od.single_use = od.single_use || s.pm_time == pm::kPmTimeSingleUse;
    return od;
}

}  // namespace

PoolTimers Server::pool_timers() const {
    // The acceptor answers at once or not at all: on_demand_open_timeout,
    // and half the PMAck timeout at most, so that the answer (a PMDeny)
    // comes before the pending transaction itself expires in its worker.
    return PoolTimers{std::min(config_.on_demand_open_timeout, config_.ack_timeout / 2),
                      config_.ack_timeout};
}

void Server::register_on_demand(Registration r, std::weak_ptr<Channel> channel, Done<Reply> done) {
    const std::string name = r.service.name;
    const OnDemand od = pool_settings(r.service);
    const auto hold = hold_of(r.service.pm_time);
    register_service(std::move(r), [this, name, od, hold, channel = std::move(channel),
                                    done = std::move(done)](Reply reply) mutable {
        if (reply.result != kResultOk || stopping_) {
            return done(std::move(reply));
        }
        auto ch = channel.lock();
        const auto it = store_.registrations().end() !=
                        std::find_if(store_.registrations().begin(), store_.registrations().end(),
                                     [&](const Registration& x) { return x.service.name == name; });
        if (!ch || !it) {
            // The connection closed (or the registration went) meanwhile.
            return done(Reply{kResultError, "on_demand: the control connection closed", nullptr});
        }
        auto old = channels_.count(name) ? channels_[name].lock() : nullptr;
        channels_[name] = ch;
        if (old && old != ch) {
            // The old acceptor's listeners are not this one's to close.
            run_pool_step(pool_.remove_service(name));
        }
        pool_.add_service(name, od, hold);
        ch->attach(name);
        if (old && old != ch) {
            old->close();  // a renewal from another connection replaces it
        }
        log::notice("on-demand \"" + name + "\": ports " + pm::port_list_text(od.ports) +
                    (od.single_use ? ", single use" : "") +
                    ", for as long as its control connection stays open");
        if (reply.arguments.is_object() && reply.arguments.contains("on_demand")) {
            reply.arguments["on_demand"]["listeners"] = pool_.in_use(name);
        }
        done(std::move(reply));
    });
}

void Server::channel_closed(const std::string& service, const Channel* channel) {
    if (stopping_) {
        return;
    }
    auto it = channels_.find(service);
    if (it == channels_.end() || it->second.lock().get() != channel) {
        return;  // replaced by a renewal, or dropped already
    }
    channels_.erase(it);
    // Its listeners went with the acceptor's end of the connection.
    run_pool_step(pool_.remove_service(service));
    auto outcome = store_.remove(service, config_.services);
    if (!outcome.ok()) {
        return;
    }
    log::notice("on-demand registration \"" + service +
                "\" removed: its control connection closed");
    watch_owners();
    publish(make_registry(config_.services));
    if (auto error = persist()) {
        log::err("state file: " + *error);
    }
    arm_lease_timer(outcome.change.next_deadline);
}

void Server::channel_line(const std::string& service, std::string_view line,
                          const Channel* channel) {
    auto it = channels_.find(service);
    if (stopping_ || it == channels_.end() || it->second.lock().get() != channel) {
        return;
    }
    auto msg = parse_channel_line(line);
    if (!msg) {
        pool_.note_bad_answer();
        log::logger().limited(LogLevel::warning, "ondemand_bad_line", [&] {
            return "on-demand \"" + service + "\": unreadable line from the acceptor: \"" +
                   shown(line, 80) + "\"";
        });
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    switch (msg->kind) {
        case ChannelMessage::Kind::opened:
            run_pool_step(pool_.opened(service, msg->id, msg->port, true, now));
            break;
        case ChannelMessage::Kind::failed:
            log::logger().limited(LogLevel::warning, "ondemand_open_failed", [&] {
                return "on-demand \"" + service + "\": the acceptor could not open port " +
                       std::to_string(msg->port) + ": " + msg->error;
            });
            run_pool_step(pool_.opened(service, msg->id, msg->port, false, now));
            break;
        case ChannelMessage::Kind::connected:
            run_pool_step(pool_.connected(service, msg->port, now));
            break;
        case ChannelMessage::Kind::closed:
            break;
    }
}

void Server::on_pool_note(unsigned worker, PoolNote note, std::uint64_t token) {
    if (stopping_) {
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    switch (note.kind) {
        case PoolNote::Kind::open:
            run_pool_step(
                pool_.open(note.service, (std::uint64_t{worker} << kTokenShift) | token, now));
            break;
        case PoolNote::Kind::touch:
            pool_.touch(note.service, note.port, now);
            break;
        case PoolNote::Kind::acked:
            pool_.acked(note.service, note.port, now);
            arm_pool_timer();
            break;
        case PoolNote::Kind::cancel:
            run_pool_step(pool_.cancel(note.service, note.port));
            break;
    }
}

void Server::run_pool_step(OnDemandPool::Step step) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<Channel>> stuck;
    for (const auto& c : step.commands) {
        auto it = channels_.find(c.service);
        auto ch = it == channels_.end() ? nullptr : it->second.lock();
        const bool open = c.kind == OnDemandPool::Command::Kind::open;
        const json line = open ? json{{"open", c.port}, {"id", c.id}} : json{{"close", c.port}};
        if (ch && ch->send(line.dump())) {
            continue;
        }
        if (ch) {
            stuck.push_back(ch);  // its peer stopped reading
        }
        if (open) {
            auto failed = pool_.opened(c.service, c.id, c.port, false, now);
            step.answers.insert(step.answers.end(), failed.answers.begin(), failed.answers.end());
        }
    }
    for (const auto& a : step.answers) {
        const auto index = static_cast<std::size_t>(a.token >> kTokenShift);
        if (index >= shards_.size()) {
            continue;
        }
        Worker* w = shards_.workers()[index].get();
        const std::uint64_t token = a.token & kTokenMask;
        const Outcome deny =
            a.exhausted ? Outcome::denied_pool_exhausted : Outcome::denied_open_failed;
        const auto port = a.port;
        if (shards_.running()) {
            w->post([w, token, port, deny] { w->port_answer(token, port, deny); });
        } else {
            w->port_answer(token, port, deny);
        }
    }
    for (auto& ch : stuck) {
        log::logger().limited(LogLevel::warning, "ondemand_channel_stuck", [] {
            return std::string(
                "on-demand: an acceptor stopped reading its control connection; closing it");
        });
        ch->close();
    }
    arm_pool_timer();
}

void Server::arm_pool_timer() {
    auto next = pool_.next_deadline();
    if (!next || stopping_) {
        return;
    }
    if (pool_deadline_ && *pool_deadline_ <= *next) {
        return;
    }
    pool_deadline_ = *next;
    pool_timer_.expires_at(*next);
    pool_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec == boost::asio::error::operation_aborted || stopping_) {
            return;
        }
        pool_deadline_.reset();
        run_pool_step(pool_.on_timer(std::chrono::steady_clock::now()));
    });
}

void Server::sync_on_demand() {
    std::vector<std::string> gone;
    for (const auto& entry : channels_) {
        // Not a structured binding: clang 14 cannot capture one in a lambda.
        const std::string& name = entry.first;
        const auto& regs = store_.registrations();
        const bool kept = std::any_of(regs.begin(), regs.end(), [&](const Registration& r) {
            return r.service.name == name && r.service.on_demand;
        });
        if (!kept) {
            gone.push_back(name);
        }
    }
    for (const Registration& r : store_.registrations()) {
        if (r.service.on_demand && channels_.count(r.service.name)) {
            pool_.add_service(r.service.name, pool_settings(r.service), hold_of(r.service.pm_time));
        }
    }
    for (const auto& name : gone) {
        auto ch = channels_[name].lock();
        channels_.erase(name);
        run_pool_step(pool_.remove_service(name));
        if (ch) {
            ch->close();  // the registration went (unregister, owner exit, reload)
        }
    }
}

}  // namespace pmd::io
