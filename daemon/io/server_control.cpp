// SPDX-License-Identifier: Apache-2.0
// The control socket's commands (the ControlBackend side of Server, see
// server.hpp): each answers on the main thread once the workers it asks
// have answered (io/gather.hpp), never blocking the loop.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "daemon/io/log.hpp"
#include "daemon/io/server.hpp"

namespace pmd::io {

using nlohmann::json;

namespace {

using nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void Server::status(Done<json> done) {
    shards_.snapshots(
        [this, done = std::move(done)](Aggregate a) { done(status_json(a.total.transactions)); });
}

json Server::status_json(std::size_t transactions) const {
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
    j["services"] = config_.services.size() + store_.size();
    j["static_services"] = config_.services.size();
    j["dynamic_services"] = store_.size();
    j["registry"] = std::string(backend_->name());
    if (!backend_->serving()) {
        j["registry_serving"] = false;
    }
    j["transactions"] = transactions;
    j["workers"] = shards_.size();
    j["control_connections"] = control_ ? control_->connections() : 0;
    return j;
}

void Server::services(Done<json> done) {
    shards_.ask<LiveMap>(
        [](Worker& w) {
            LiveMap m;
            w.pmsp().for_each_transaction(
                [&](const TransactionView& t) { ++m[std::string(t.service)]; });
            return m;
        },
        [this, done = std::move(done)](std::vector<std::optional<LiveMap>> parts) {
            LiveMap live;
            for (const auto& part : parts) {
                if (part) {
                    for (const auto& [name, n] : *part) {
                        live[name] += n;
                    }
                }
            }
            done(services_json(live));
        });
}

json Server::services_json(const LiveMap& live) const {
    // Live transactions per service, and what each service answered.
    const auto now = WallClock::now();
    json list = json::array();
    // The per-service counts live in the registry snapshot every worker
    // shares (relaxed atomics): already the sum over all shards.
    std::map<std::string, ServiceCounts, std::less<>> counts;
    for (const Service& s : registry_->services()) {
        counts[s.name] = registry_->counts(s);
    }
    // Each SDP address's health, in the order of `sdp`.
    std::map<std::string, json, std::less<>> health;
    for (const AddressHealth& a : health_.addresses()) {
        auto& h = health[a.service];
        if (h.is_null()) {
            h = json::array();
        }
        h.push_back(json{{"address", a.address},
                         {"check", std::string(to_string(a.check))},
                         {"state", std::string(to_string(a.state))},
                         {"since_seconds", std::floor(a.since_seconds * 1000.0) / 1000.0},
                         {"transitions", a.transitions}});
    }
    auto add = [&](json j) {
        const auto name = j["name"].get<std::string>();
        auto it = live.find(name);
        const ServiceCounts c = counts.count(name) ? counts[name] : ServiceCounts{};
        j["counters"] = json{{"transactions", it == live.end() ? 0 : it->second},
                             {"accepted", c.accepted},
                             {"accepted_duplicate", c.accepted_duplicate},
                             {"denied", c.denied}};
        auto h = health.find(name);
        j["health"] = h == health.end() ? json::array() : h->second;
        if (j.contains("on_demand")) {
            // Listeners open now (or being opened), out of the pool's ports.
            j["on_demand"]["listeners"] = pool_.in_use(name);
        }
        list.push_back(std::move(j));
    };
    for (const Service& s : config_.services) {
        json j = service_json(s);
        j["owner"] = nullptr;
        j["pid"] = nullptr;
        j["lease_expires_in"] = nullptr;
        add(std::move(j));
    }
    for (const Registration& r : store_.registrations()) {
        add(registration_json(r, now));
    }
    // Other replicas' registrations (the etcd backend), merged per name.
    for (const Service& s : registry_->services()) {
        if (!s.dynamic ||
            std::any_of(store_.registrations().begin(), store_.registrations().end(),
                        [&](const Registration& r) { return r.service.name == s.name; })) {
            continue;
        }
        json j = service_json(s);
        j["owner"] = "cluster";
        j["pid"] = nullptr;
        j["lease_expires_in"] = nullptr;
        add(std::move(j));
    }
    return list;
}

void Server::register_service(Registration r, Done<Reply> done) {
    if (r.process) {
        if (auto why = owners_.identify(*r.process)) {
            return done(Reply{kResultError, *why, nullptr});
        }
        // Refused below: the pidfd identify() opened is let go.
        done = [this, done = std::move(done)](Reply reply) {
            if (reply.result != kResultOk) {
                watch_owners();
            }
            done(std::move(reply));
        };
    }
    if (auto why = backend_->conflict(r)) {
        return done(Reply{kResultConflict, "conflict: " + *why, nullptr});
    }
    auto before = store_.save_point();
    const std::string name = r.service.name;
    const std::string text =
        conventional_text(r.service) + (r.owner.empty() ? "" : " owner " + r.owner) +
        (r.process ? ", until process " + std::to_string(r.process->pid) + " exits" : "");
    const auto now = WallClock::now();
    r.start_lease(now);
    json j = registration_json(r, now);
    auto outcome = store_.add(std::move(r), config_.services, now);
    switch (outcome.refusal) {
        case RegistrationStore::Refusal::none:
            break;
        case RegistrationStore::Refusal::conflict:
            return done(Reply{kResultConflict, "conflict: " + outcome.reason, nullptr});
        default:
            return done(Reply{kResultError,
                              "too many registrations (" + std::to_string(kMaxRegistrations) + ")",
                              nullptr});
    }
    if (auto error = persist()) {
        store_.restore(std::move(before));
        log::err("register \"" + name + "\" failed: state file: " + *error);
        return done(Reply{kResultError, "cannot save the registration: " + *error, nullptr});
    }
    arm_lease_timer(outcome.change.next_deadline);
    watch_owners();
    backend_->own_changed(store_.registrations());
    log::notice(std::string(outcome.renewal ? "renewed" : "registered") + " \"" + name + "\" " +
                text);
    j["counters"] = json{{"transactions", 0}};
    Reply reply{kResultOk, std::string(outcome.renewal ? "renewed " : "registered ") + name,
                std::move(j)};
    publish(make_registry(config_.services),
            [done = std::move(done), reply = std::move(reply)] { done(reply); });
}

void Server::unregister_service(const std::string& name, Done<Reply> done) {
    auto before = store_.save_point();
    auto outcome = store_.remove(name, config_.services);
    switch (outcome.refusal) {
        case RegistrationStore::Refusal::none:
            break;
        case RegistrationStore::Refusal::is_static:
            return done(Reply{
                kResultConflict,
                "\"" + name + "\" is a static service; edit the config file and reload", nullptr});
        default:
            return done(
                Reply{kResultNotFound, "no dynamic service \"" + shown(name) + "\"", nullptr});
    }
    if (auto error = persist()) {
        store_.restore(std::move(before));
        return done(Reply{kResultError, "cannot save the change: " + *error, nullptr});
    }
    arm_lease_timer(outcome.change.next_deadline);
    watch_owners();
    backend_->own_changed(store_.registrations());
    log::notice("unregistered \"" + name + "\"");
    publish(make_registry(config_.services), [done = std::move(done), name] {
        done(Reply{kResultOk, "unregistered " + name, nullptr});
    });
}

namespace {

// One worker's transactions, for `transactions`.
struct TransactionsPart {
    json list = json::array();
    std::size_t total = 0;
};

}  // namespace

void Server::transactions(std::size_t limit, Done<json> done) {
    using Part = TransactionsPart;
    auto merge = [limit, done = std::move(done)](std::vector<std::optional<Part>> parts) {
        json list = json::array();
        std::size_t total = 0;
        for (const auto& p : parts) {
            if (!p) {
                continue;
            }
            total += p->total;
            for (const auto& t : p->list) {
                if (list.size() < limit) {
                    list.push_back(t);
                }
            }
        }
        done(json{{"transactions", std::move(list)}, {"total", total}});
    };
    shards_.ask<Part>(
        [limit](Worker& w) {
            Part p;
            const auto now = std::chrono::steady_clock::now();
            w.pmsp().for_each_transaction([&](const TransactionView& t) {
                ++p.total;
                if (p.list.size() >= limit) {
                    return;
                }
                char handle[19];
                std::snprintf(handle, sizeof handle, "0x%016llx",
                              static_cast<unsigned long long>(t.request.assoc_handle));
                const auto left =
                    std::chrono::duration_cast<std::chrono::milliseconds>(t.expires - now);
                p.list.push_back(json{
                    {"service", std::string(t.service)},
                    {"client", pm::Endpoint{t.request.cp_addr, t.request.cp_port}.to_string()},
                    {"conventional",
                     pm::Endpoint{t.request.ap_addr, t.request.ap_port}.to_string()},
                    {"sdp", t.sdp.to_string()},
                    {"assoc_handle", handle},
                    {"expires_in_ms", std::max<std::int64_t>(0, left.count())},
                    {"pending", t.pending},
                });
            });
            return p;
        },
        std::move(merge));
}

MetricSources Server::metric_sources(Aggregate workers) const {
    MetricSources s;
    s.workers = std::move(workers);
    s.shell = shell_;
    s.control = control_ ? control_->counters() : ControlCounters{};
    s.registrations = store_.counts();
    s.state_write_errors = state_write_errors_;
    s.watchdog_withheld = watchdog_withheld_;
    s.static_services = config_.services.size();
    s.dynamic_services = store_.size();
    s.uptime_seconds = std::floor(seconds_since(started_));
    s.health = health_.counters();
    s.addresses = health_.addresses();
    s.pool = pool_.counters();
    s.pool_listeners = pool_.in_use();
    s.cluster = backend_->name() == "etcd";
    s.cluster_serving = backend_->serving();
    s.cluster_counters = backend_->counters();
    return s;
}

void Server::stats(Done<json> done) {
    metric_values([done = std::move(done)](std::vector<MetricValue> v) { done(stats_json(v)); });
}

void Server::reset_stats(std::function<void()> done) {
    shards_.reset_counters(std::move(done));
    shell_ = {};
    watchdog_withheld_ = 0;
    store_.reset_counts();
    health_.reset_counters();
    pool_.reset_counters();
    backend_->reset_counters();
    state_write_errors_ = 0;
    if (control_) {
        control_->reset_counters();
    }
    log::notice("counters reset through the control socket");
}

void Server::cluster(Done<json> done) {
    backend_->status(config_.services, std::move(done));
}

void Server::reload_config(Done<Reply> done) {
    const auto failures = shell_.reload_failures;
    last_reload_error_.clear();
    reload([this, failures, done = std::move(done)](bool applied) {
        if (applied) {
            return done(Reply{kResultOk, "reloaded " + config_path_, nullptr});
        }
        if (shell_.reload_failures == failures) {
            return done(Reply{kResultOk,
                              "no config file " + config_path_ + ", configuration unchanged",
                              nullptr});
        }
        done(Reply{kResultError, "reload failed: " + last_reload_error_, nullptr});
    });
}

}  // namespace pmd::io
