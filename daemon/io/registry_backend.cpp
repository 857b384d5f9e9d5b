// SPDX-License-Identifier: Apache-2.0
// The `local` and `etcd` registry backends (registry_backend.hpp). The etcd
// one is a thin loop around one cluster::Replica: it runs the Requests the
// replica returns through the etcd client and hands the answers back.
#include "daemon/io/registry_backend.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "daemon/core/cluster.hpp"
#include "daemon/io/etcd_client.hpp"
#include "daemon/io/log.hpp"
#include "daemon/io/state_file.hpp"

namespace pmd::io {

using nlohmann::json;

namespace {

std::vector<Service> own_services(std::span<const Registration> own, bool local_only) {
    std::vector<Service> out;
    for (const Registration& r : own) {
        if (!local_only || !cluster::shareable(r)) {
            out.push_back(r.service);
        }
    }
    return out;
}

class LocalBackend final : public RegistryBackend {
  public:
    std::string_view name() const override { return "local"; }
    void start() override {}
    void stop() override {}
    void own_changed(std::span<const Registration>) override {}
    std::vector<Service> services(std::span<const Service>,
                                  std::span<const Registration> own) const override {
        return own_services(own, false);
    }
    std::optional<std::string> conflict(const Registration&) const override { return std::nullopt; }
    void status(std::span<const Service>, std::function<void(json)> done) override {
        done(json{{"backend", "local"}});
    }
    cluster::Counters counters() const override { return {}; }
    void reset_counters() override {}
    bool serving() const override { return true; }
};

std::optional<Registration> decode_value(const std::string& value) {
    json j = json::parse(value, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        return std::nullopt;
    }
    auto parsed = parse_registration(j, true, WallClock::now());
    if (auto* r = std::get_if<Registration>(&parsed)) {
        return std::move(*r);
    }
    return std::nullopt;
}

cluster::KeyValue to_core(const etcd::KeyValue& kv) {
    return cluster::KeyValue{kv.key, decode_value(kv.value), kv.create_revision, kv.mod_revision};
}

class EtcdBackend final : public RegistryBackend {
  public:
    EtcdBackend(boost::asio::io_context& io, const RegistryConfig& config, std::string member,
                std::function<void()> changed)
        : config_(config),
          client_(io.get_executor(), client_config(config)),
          replica_(settings(config, std::move(member))),
          timer_(io),
          changed_(std::move(changed)),
          alive_(std::make_shared<bool>(true)) {}

    ~EtcdBackend() override { stop(); }

    std::string_view name() const override { return "etcd"; }

    void start() override {
        log::notice("registry: etcd at " + join_endpoints() + ", prefix " +
                    replica_.settings().prefix + ", member " + replica_.settings().member);
        cluster::Actions out;
        replica_.start(now(), out);
        run(std::move(out));
    }

    void stop() override {
        if (stopped_) {
            return;
        }
        stopped_ = true;
        *alive_ = false;
        if (watch_) {
            watch_->cancel();
            watch_.reset();
        }
        timer_.cancel();
    }

    void own_changed(std::span<const Registration> own) override {
        if (stopped_) {
            return;
        }
        cluster::Actions out;
        replica_.set_own(own, now(), out);
        run(std::move(out));
    }

    std::vector<Service> services(std::span<const Service> statics,
                                  std::span<const Registration> own) const override {
        // On-demand registrations (their acceptor talks to this daemon only)
        // and "*" addresses (they mean this host) stay local; a cluster
        // entry may not take their name or address.
        std::vector<Service> out = own_services(own, true);
        std::vector<Service> taken(statics.begin(), statics.end());
        taken.insert(taken.end(), out.begin(), out.end());
        for (Service& s : replica_.services(taken, now())) {
            out.push_back(std::move(s));
        }
        return out;
    }

    std::optional<std::string> conflict(const Registration& r) const override {
        return replica_.conflict(r);
    }

    void status(std::span<const Service> statics, std::function<void(json)> done) override {
        const cluster::Status st = replica_.status(statics, now());
        json j;
        j["backend"] = "etcd";
        j["member"] = replica_.settings().member;
        j["prefix"] = replica_.settings().prefix;
        j["fresh"] = st.fresh;
        j["max_staleness_ms"] = replica_.settings().max_staleness.count();
        j["since_contact_ms"] = st.since_contact ? json(st.since_contact->count()) : json(nullptr);
        j["revision"] = st.revision;
        j["lease"] = st.lease;
        j["lease_ttl_s"] = replica_.settings().lease_ttl.count();
        j["keys"] = st.keys;
        j["own"] = st.own;
        j["own_written"] = st.own_written;
        j["conflicts"] = st.conflicts;
        json members = json::object();
        for (const auto& [member, keys] : st.members) {
            members[member] = keys;
        }
        j["members"] = std::move(members);
        j["current_endpoint"] = client_.current_endpoint();
        std::weak_ptr<bool> alive = alive_;
        client_.status([j = std::move(j), done = std::move(done),
                        alive](std::vector<etcd::EndpointStatus> endpoints) mutable {
            if (auto a = alive.lock(); !a || !*a) {
                return;  // stopped: no callback after stop()
            }
            json list = json::array();
            for (const auto& e : endpoints) {
                json one{{"endpoint", e.endpoint}, {"healthy", e.healthy}};
                if (e.healthy) {
                    one["version"] = e.version;
                    one["member_id"] = e.member_id;
                    one["leader"] = e.member_id != 0 && e.member_id == e.leader;
                    one["revision"] = e.revision;
                    one["latency_ms"] = e.latency.count();
                } else {
                    one["error"] = e.error;
                }
                list.push_back(std::move(one));
            }
            j["endpoints"] = std::move(list);
            done(std::move(j));
        });
    }

    cluster::Counters counters() const override { return replica_.counters(); }
    void reset_counters() override { replica_.reset_counters(); }
    bool serving() const override { return replica_.fresh(now()); }

  private:
    static etcd::ClientConfig client_config(const RegistryConfig& c) {
        etcd::ClientConfig out;
        out.endpoints = c.endpoints;
        out.request_timeout = c.request_timeout;
        out.connect_timeout = std::min(c.request_timeout, std::chrono::milliseconds(1000));
        if (!c.tls_ca.empty() || !c.tls_cert.empty()) {
            out.tls = etcd::TlsConfig{c.tls_ca, c.tls_cert, c.tls_key};
        }
        return out;
    }

    static cluster::Settings settings(const RegistryConfig& c, std::string member) {
        cluster::Settings s;
        s.prefix = c.prefix;
        s.member = c.member.empty() ? std::move(member) : c.member;
        s.lease_ttl = std::chrono::duration_cast<std::chrono::seconds>(c.lease_ttl);
        s.max_staleness = c.max_staleness;
        s.retry_interval = std::min<std::chrono::milliseconds>(
            std::chrono::milliseconds(1000),
            std::chrono::duration_cast<std::chrono::milliseconds>(c.lease_ttl) / 4);
        return s;
    }

    static TimePoint now() { return std::chrono::steady_clock::now(); }

    std::string join_endpoints() const {
        std::string out;
        for (const std::string& e : config_.endpoints) {
            out += (out.empty() ? "" : ",") + e;
        }
        return out;
    }

    // Runs `fn(actions)` on the replica if the backend still runs, then the
    // requests it returned.
    template <class Fn>
    auto answer(Fn fn) {
        std::weak_ptr<bool> alive = alive_;
        return [this, alive, fn = std::move(fn)](auto&&... args) mutable {
            auto a = alive.lock();
            if (!a || !*a) {
                return;
            }
            cluster::Actions out;
            fn(out, std::forward<decltype(args)>(args)...);
            run(std::move(out));
        };
    }

    void run(cluster::Actions out) {
        if (stopped_) {
            return;
        }
        const bool was_fresh = fresh_reported_;
        for (cluster::Request& r : out.requests) {
            issue(std::move(r));
        }
        fresh_reported_ = replica_.fresh(now());
        if (fresh_reported_ != was_fresh) {
            if (fresh_reported_) {
                log::notice("registry: etcd reachable, serving the cluster's registrations");
            } else {
                log::warning("registry: no answer from etcd for more than " +
                             std::to_string(replica_.settings().max_staleness.count()) +
                             " ms; dynamic services are denied until it answers");
            }
        }
        if (out.view_changed) {
            changed_();
        }
        arm_timer();
    }

    void issue(cluster::Request r) {
        using Kind = cluster::Request::Kind;
        switch (r.kind) {
            case Kind::grant:
                client_.grant(replica_.settings().lease_ttl,
                              answer([this](cluster::Actions& out, etcd::Error e,
                                            std::int64_t lease, std::chrono::seconds ttl) {
                                  note_error("lease grant", e);
                                  replica_.granted(!e, lease, ttl, now(), out);
                              }));
                break;
            case Kind::keepalive:
                client_.keepalive(
                    r.lease,
                    answer([this](cluster::Actions& out, etcd::Error e, std::chrono::seconds ttl) {
                        if (e.kind == etcd::Error::Kind::lease_not_found) {
                            replica_.kept_alive(true, std::chrono::seconds(0), now(), out);
                            log::warning(
                                "registry: etcd lease lost; writing the registrations "
                                "again under a new one");
                            return;
                        }
                        note_error("lease keep-alive", e);
                        replica_.kept_alive(!e, ttl, now(), out);
                    }));
                break;
            case Kind::put: {
                json value = registration_entry(r.registration);
                client_.put(
                    r.key, value.dump(-1, ' ', false, json::error_handler_t::replace), r.lease,
                    answer([this, key = r.key](cluster::Actions& out, etcd::Error e, std::int64_t) {
                        note_error("put " + key, e);
                        replica_.put_done(key, !e, now(), out);
                    }));
                break;
            }
            case Kind::del:
                client_.del(r.key, answer([this, key = r.key](cluster::Actions& out, etcd::Error e,
                                                              std::int64_t) {
                                note_error("delete " + key, e);
                                replica_.del_done(key, !e, now(), out);
                            }));
                break;
            case Kind::snapshot:
                client_.range_prefix(
                    cluster::registrations_prefix(replica_.settings().prefix),
                    answer([this](cluster::Actions& out, etcd::Error e,
                                  std::vector<etcd::KeyValue> kvs, std::int64_t revision) {
                        note_error("range", e);
                        std::vector<cluster::KeyValue> core;
                        core.reserve(kvs.size());
                        for (const auto& kv : kvs) {
                            core.push_back(to_core(kv));
                        }
                        replica_.snapshot_done(!e, std::move(core), revision, now(), out);
                    }));
                break;
            case Kind::watch:
                if (watch_) {
                    watch_->cancel();
                }
                watch_ = client_.watch_prefix(
                    cluster::registrations_prefix(replica_.settings().prefix), r.revision,
                    answer([this](cluster::Actions& out, std::vector<etcd::Event> events,
                                  std::int64_t revision) {
                        std::vector<cluster::WatchEvent> core;
                        core.reserve(events.size());
                        for (const auto& ev : events) {
                            cluster::WatchEvent w;
                            w.deleted = ev.type == etcd::Event::Type::del;
                            w.kv = w.deleted ? cluster::KeyValue{ev.kv.key, std::nullopt, 0,
                                                                 ev.kv.mod_revision}
                                             : to_core(ev.kv);
                            core.push_back(std::move(w));
                        }
                        replica_.events(std::move(core), revision, now(), out);
                    }),
                    answer([this](cluster::Actions& out, etcd::Error e) {
                        const bool compacted = e.kind == etcd::Error::Kind::compacted;
                        if (compacted) {
                            log::notice(
                                "registry: etcd compacted the watched revisions; "
                                "taking a new snapshot");
                        } else {
                            note_error("watch", e);
                        }
                        replica_.watch_ended(compacted, now(), out);
                    }));
                break;
        }
    }

    void note_error(const std::string& what, const etcd::Error& e) {
        if (!e) {
            if (failing_) {
                failing_ = false;
                log::notice("registry: etcd answers again");
            }
            return;
        }
        // One line per failing streak, not one per retry.
        if (!failing_) {
            failing_ = true;
            log::warning("registry: etcd " + what + " failed: " + e.text);
        }
    }

    void arm_timer() {
        auto next = replica_.next_wakeup();
        if (!next) {
            timer_.cancel();
            return;
        }
        timer_.expires_at(*next);
        timer_.async_wait(
            [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec) {
                auto a = alive.lock();
                if (ec || !a || !*a) {
                    return;
                }
                cluster::Actions out;
                replica_.on_timer(now(), out);
                run(std::move(out));
            });
    }

    RegistryConfig config_;
    mutable etcd::Client client_;
    cluster::Replica replica_;
    boost::asio::steady_timer timer_;
    std::function<void()> changed_;
    std::shared_ptr<bool> alive_;
    std::unique_ptr<etcd::Watch> watch_;
    bool stopped_ = false;
    bool failing_ = false;
    bool fresh_reported_ = false;
};

}  // namespace

std::string default_member_name() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
        return "sdp-pmd";
    }
    std::string out(host);
    if (out.size() > 64) {
        out.resize(64);
    }
    for (char& c : out) {
        if (!cluster::is_valid_member(std::string_view(&c, 1))) {
            c = '-';
        }
    }
    return out;
}

std::unique_ptr<RegistryBackend> make_registry_backend(boost::asio::io_context& io,
                                                       const RegistryConfig& config,
                                                       const std::string& default_member,
                                                       std::function<void()> changed) {
    if (config.backend == RegistryConfig::Backend::etcd) {
        return std::make_unique<EtcdBackend>(io, config, default_member, std::move(changed));
    }
    return std::make_unique<LocalBackend>();
}

}  // namespace pmd::io
