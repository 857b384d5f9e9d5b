// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace pmd::io {

namespace {

double n(std::uint64_t x) {
    return static_cast<double>(x);
}

MetricDef counter(std::string stat, std::string prom, std::string help, InLine line,
                  std::function<double(const MetricSources&)> value, std::string label = {}) {
    return MetricDef{std::move(stat),  std::move(prom),  std::move(help), MetricKind::counter, line,
                     std::move(label), std::move(value), nullptr};
}

MetricDef gauge(std::string stat, std::string prom, std::string help, InLine line,
                std::function<double(const MetricSources&)> value, std::string label = {}) {
    return MetricDef{std::move(stat),  std::move(prom),  std::move(help), MetricKind::gauge, line,
                     std::move(label), std::move(value), nullptr};
}

// One sample per worker, labelled worker="N".
MetricDef per_worker(std::string stat, std::string prom, std::string help, MetricKind kind,
                     InLine line, std::function<double(const WorkerSnapshot&)> value) {
    return MetricDef{std::move(stat), std::move(prom), std::move(help), kind, line, {},
                     nullptr,         std::move(value)};
}

std::vector<MetricDef> make_defs() {
    using S = const MetricSources&;
    using W = const WorkerSnapshot&;
    std::vector<MetricDef> d;
    d.push_back(counter("datagrams", "sdp_pmd_datagrams_total", "UDP datagrams received.",
                        InLine::yes, [](S s) { return n(s.workers.total.counters.datagrams); }));
    d.push_back(counter("requests", "sdp_pmd_requests_total", "PMReq decoded, new and duplicate.",
                        InLine::yes, [](S s) { return n(s.workers.total.counters.requests); }));
    d.push_back(counter("iwpm_requests", "sdp_pmd_iwpm_requests_total",
                        "PMReq in rdma-core iwpmd's 64-byte format.", InLine::yes,
                        [](S s) { return n(s.workers.total.counters.iwpm_requests); }));
    for (std::size_t i = 0; i < kOutcomeCount; ++i) {
        const std::string name(to_string(static_cast<Outcome>(i)));
        d.push_back(counter(
            name, "sdp_pmd_outcomes_total", "Datagrams by outcome.", InLine::yes,
            [i](S s) { return n(s.workers.total.counters.outcome[i]); },
            "outcome=\"" + name + "\""));
    }
    d.push_back(counter("superseded", "sdp_pmd_superseded_total",
                        "Transactions replaced by a PMReq with a new AssocHandle.", InLine::yes,
                        [](S s) { return n(s.workers.total.counters.superseded); }));
    d.push_back(counter("timeouts", "sdp_pmd_timeouts_total",
                        "Transactions released without PMAck.", InLine::yes,
                        [](S s) { return n(s.workers.total.counters.timeouts); }));
    d.push_back(counter("shed", "sdp_pmd_shed_total", "Transactions dropped at max_transactions.",
                        InLine::yes, [](S s) { return n(s.workers.total.counters.shed); }));
    d.push_back(counter("released_on_deny", "sdp_pmd_released_on_deny_total",
                        "Transactions released when a duplicate PMReq was denied.", InLine::yes,
                        [](S s) { return n(s.workers.total.counters.released_on_deny); }));
    d.push_back(counter("quench_events", "sdp_pmd_quench_events_total",
                        "Sources quenched for leaving PMAccepts un-acknowledged.", InLine::yes,
                        [](S s) { return n(s.workers.total.counters.quench_events); }));
    // Before truncated: the log line keeps the order scripts grep for.
    d.push_back(gauge("transactions", "sdp_pmd_transactions",
                      "Live transactions waiting for PMAck.", InLine::yes,
                      [](S s) { return n(s.workers.total.transactions); }));
    d.push_back(counter("truncated", "sdp_pmd_truncated_total",
                        "Datagrams longer than the receive buffer.", InLine::yes,
                        [](S s) { return n(s.workers.total.shell.truncated); }));
    d.push_back(counter("receive_errors", "sdp_pmd_receive_errors_total", "UDP receive errors.",
                        InLine::yes, [](S s) { return n(s.workers.total.shell.receive_errors); }));
    d.push_back(counter("send_errors", "sdp_pmd_send_errors_total", "UDP send errors.", InLine::yes,
                        [](S s) { return n(s.workers.total.shell.send_errors); }));
    d.push_back(counter("reloads", "sdp_pmd_reloads_total", "Configuration reloads applied.",
                        InLine::yes, [](S s) { return n(s.shell.reloads); }));
    d.push_back(counter("reload_failures", "sdp_pmd_reload_failures_total",
                        "Configuration reloads refused.", InLine::yes,
                        [](S s) { return n(s.shell.reload_failures); }));
    d.push_back(counter("registration_changes", "sdp_pmd_registration_changes_total",
                        "Dynamic registrations added, renewed, removed or expired.", InLine::no,
                        [](S s) { return n(s.registrations.changes); }));
    d.push_back(counter("leases_expired", "sdp_pmd_leases_expired_total",
                        "Dynamic registrations expired.", InLine::no,
                        [](S s) { return n(s.registrations.expired); }));
    d.push_back(counter("owner_exits", "sdp_pmd_owner_exits_total",
                        "Dynamic registrations removed because their owner process exited.",
                        InLine::no, [](S s) { return n(s.registrations.owner_exits); }));
    d.push_back(counter("state_write_errors", "sdp_pmd_state_write_errors_total",
                        "Failed writes of the state file.", InLine::no,
                        [](S s) { return n(s.state_write_errors); }));
    d.push_back(counter("control_connections", "sdp_pmd_control_connections_total",
                        "Control socket connections accepted.", InLine::no,
                        [](S s) { return n(s.control.connections); }));
    d.push_back(counter("control_rejected_connections",
                        "sdp_pmd_control_rejected_connections_total",
                        "Control socket connections refused (too many open).", InLine::no,
                        [](S s) { return n(s.control.rejected_connections); }));
    d.push_back(counter("control_requests", "sdp_pmd_control_requests_total",
                        "Control requests answered.", InLine::no,
                        [](S s) { return n(s.control.requests); }));
    d.push_back(counter("control_errors", "sdp_pmd_control_errors_total",
                        "Control requests answered with result 1 or 2.", InLine::no,
                        [](S s) { return n(s.control.errors); }));
    d.push_back(counter("control_denied", "sdp_pmd_control_denied_total",
                        "Control requests refused by peer credentials.", InLine::no,
                        [](S s) { return n(s.control.denied); }));
    d.push_back(counter("control_timeouts", "sdp_pmd_control_timeouts_total",
                        "Control connections closed when idle.", InLine::no,
                        [](S s) { return n(s.control.timeouts); }));
    d.push_back(counter("control_oversized", "sdp_pmd_control_oversized_total",
                        "Control requests over the size limit.", InLine::no,
                        [](S s) { return n(s.control.oversized); }));
    d.push_back(counter(
        "health_transitions_up", "sdp_pmd_health_transitions_total",
        "SDP addresses that changed health state, by new state.", InLine::nonzero,
        [](S s) { return n(s.health.transitions_up); }, "to=\"up\""));
    d.push_back(counter(
        "health_transitions_down", "sdp_pmd_health_transitions_total",
        "SDP addresses that changed health state, by new state.", InLine::nonzero,
        [](S s) { return n(s.health.transitions_down); }, "to=\"down\""));
    d.push_back(counter(
        "health_listener_rounds", "sdp_pmd_health_checks_total",
        "Health check rounds: sock_diag dumps of listeners, connect probes.", InLine::no,
        [](S s) { return n(s.health.listener_rounds); }, "check=\"listener\""));
    d.push_back(counter(
        "health_connect_probes", "sdp_pmd_health_checks_total",
        "Health check rounds: sock_diag dumps of listeners, connect probes.", InLine::no,
        [](S s) { return n(s.health.connect_probes); }, "check=\"connect\""));
    d.push_back(counter("health_connect_failures", "sdp_pmd_health_connect_failures_total",
                        "Connect probes refused, failed or timed out.", InLine::no,
                        [](S s) { return n(s.health.connect_failures); }));
    d.push_back(counter("health_listener_errors", "sdp_pmd_health_listener_errors_total",
                        "sock_diag dumps that failed or timed out (no verdict).", InLine::nonzero,
                        [](S s) { return n(s.health.listener_errors); }));
    d.push_back(counter("health_netlink_malformed", "sdp_pmd_health_netlink_malformed_total",
                        "sock_diag reply messages skipped as malformed.", InLine::nonzero,
                        [](S s) { return n(s.health.netlink_malformed); }));
    d.push_back(counter("ondemand_opens", "sdp_pmd_ondemand_opens_total",
                        "On-demand listeners the daemon asked an acceptor to open.",
                        InLine::nonzero, [](S s) { return n(s.pool.opens); }));
    d.push_back(counter("ondemand_open_failures", "sdp_pmd_ondemand_open_failures_total",
                        "On-demand opens the acceptor refused, or that went unanswered.",
                        InLine::nonzero,
                        [](S s) { return n(s.pool.open_failures + s.pool.open_timeouts); }));
    d.push_back(counter("ondemand_connections", "sdp_pmd_ondemand_connections_total",
                        "Connections acceptors reported on on-demand listeners.", InLine::no,
                        [](S s) { return n(s.pool.connections); }));
    d.push_back(counter(
        "ondemand_released_unused", "sdp_pmd_ondemand_released_total",
        "On-demand listeners closed, by whether a PMAck or connection came.", InLine::nonzero,
        [](S s) { return n(s.pool.released_unused); }, "reason=\"unused\""));
    d.push_back(counter(
        "ondemand_released_used", "sdp_pmd_ondemand_released_total",
        "On-demand listeners closed, by whether a PMAck or connection came.", InLine::nonzero,
        [](S s) { return n(s.pool.released_used); }, "reason=\"used\""));
    d.push_back(counter("ondemand_bad_answers", "sdp_pmd_ondemand_bad_answers_total",
                        "Acceptor channel lines dropped: unreadable, or for no known open.",
                        InLine::nonzero, [](S s) { return n(s.pool.bad_answers); }));
    d.push_back(gauge("ondemand_listeners", "sdp_pmd_ondemand_listeners",
                      "On-demand listeners open or being opened.", InLine::nonzero,
                      [](S s) { return n(s.pool_listeners); }));
    // The etcd registry backend (docs/cluster.md); zero with `local`.
    const auto cluster_counter = [&d](std::string stat, std::string help,
                                      std::uint64_t cluster::Counters::*field) {
        d.push_back(counter(stat, "sdp_pmd_" + stat + "_total", std::move(help), InLine::nonzero,
                            [field](S s) { return n(s.cluster_counters.*field); }));
    };
    cluster_counter("cluster_etcd_errors", "Failed etcd calls (each retried).",
                    &cluster::Counters::etcd_errors);
    cluster_counter("cluster_leases_granted", "etcd leases granted to this replica.",
                    &cluster::Counters::leases_granted);
    cluster_counter("cluster_leases_lost", "etcd leases found expired (keys written again).",
                    &cluster::Counters::leases_lost);
    cluster_counter("cluster_snapshots", "Snapshots of the cluster's registrations read.",
                    &cluster::Counters::snapshots);
    cluster_counter("cluster_compactions", "Watches ended by an etcd compaction.",
                    &cluster::Counters::compactions);
    cluster_counter("cluster_watch_restarts", "Watches resumed after a broken stream.",
                    &cluster::Counters::watch_restarts);
    cluster_counter("cluster_watch_refreshes", "Quiet watches opened anew (lossless).",
                    &cluster::Counters::watch_refreshes);
    cluster_counter("cluster_events", "Watch events applied.", &cluster::Counters::events);
    cluster_counter("cluster_puts", "Registrations written to etcd.", &cluster::Counters::puts);
    cluster_counter("cluster_deletes", "Registrations deleted from etcd.",
                    &cluster::Counters::deletes);
    cluster_counter("cluster_bad_values", "etcd keys under the prefix that did not decode.",
                    &cluster::Counters::bad_values);
    d.push_back(gauge("cluster_stale", "sdp_pmd_cluster_stale",
                      "1 while the etcd backend denies dynamic services (etcd silent for longer "
                      "than max_staleness).",
                      InLine::nonzero,
                      [](S s) { return s.cluster && !s.cluster_serving ? 1.0 : 0.0; }));
    d.push_back(gauge("sdp_addresses_down", "sdp_pmd_sdp_addresses_down",
                      "Checked SDP addresses whose state is down.", InLine::nonzero, [](S s) {
                          return static_cast<double>(std::count_if(
                              s.addresses.begin(), s.addresses.end(),
                              [](const AddressHealth& a) { return a.state == HealthState::down; }));
                      }));
    d.push_back(gauge("workers", "sdp_pmd_workers", "UDP worker shards.", InLine::several_workers,
                      [](S s) { return n(s.workers.per_worker.size()); }));
    d.push_back(gauge("workers_unresponsive", "sdp_pmd_workers_unresponsive",
                      "Workers that did not answer this query in time.", InLine::nonzero,
                      [](S s) { return n(s.workers.unresponsive); }));
    d.push_back(counter("watchdog_withheld", "sdp_pmd_watchdog_withheld_total",
                        "WATCHDOG=1 pings withheld because a worker did not answer.", InLine::no,
                        [](S s) { return n(s.watchdog_withheld); }));
    // Per worker, so an operator sees how the sources spread over the shards.
    d.push_back(per_worker("datagrams", "sdp_pmd_worker_datagrams_total",
                           "UDP datagrams received, per worker.", MetricKind::counter,
                           InLine::several_workers, [](W w) { return n(w.counters.datagrams); }));
    d.push_back(per_worker("requests", "sdp_pmd_worker_requests_total",
                           "PMReq decoded, per worker.", MetricKind::counter, InLine::no,
                           [](W w) { return n(w.counters.requests); }));
    d.push_back(per_worker("accepted", "sdp_pmd_worker_accepted_total",
                           "New transactions accepted, per worker.", MetricKind::counter,
                           InLine::no, [](W w) { return n(w.counters[Outcome::accepted]); }));
    d.push_back(per_worker("acked", "sdp_pmd_worker_acked_total", "PMAcks matched, per worker.",
                           MetricKind::counter, InLine::no,
                           [](W w) { return n(w.counters[Outcome::acked]); }));
    d.push_back(per_worker("drop_rate_limited", "sdp_pmd_worker_rate_limited_total",
                           "PMReqs over their source's token bucket, per worker.",
                           MetricKind::counter, InLine::no,
                           [](W w) { return n(w.counters[Outcome::drop_rate_limited]); }));
    d.push_back(per_worker("transactions", "sdp_pmd_worker_transactions",
                           "Live transactions waiting for PMAck, per worker.", MetricKind::gauge,
                           InLine::several_workers, [](W w) { return n(w.transactions); }));
    d.push_back(gauge(
        "static_services", "sdp_pmd_services", "Services by kind.", InLine::no,
        [](S s) { return n(s.static_services); }, "kind=\"static\""));
    d.push_back(gauge(
        "dynamic_services", "sdp_pmd_services", "Services by kind.", InLine::no,
        [](S s) { return n(s.dynamic_services); }, "kind=\"dynamic\""));
    d.push_back(gauge("uptime_seconds", "sdp_pmd_uptime_seconds",
                      "Seconds since the daemon started.", InLine::no,
                      [](S s) { return s.uptime_seconds; }));
    return d;
}

const MetricValue* find(const std::vector<MetricValue>& values, std::string_view stat) {
    auto it = std::find_if(values.begin(), values.end(),
                           [&](const MetricValue& v) { return v.stat == stat; });
    return it == values.end() ? nullptr : &*it;
}

std::uint64_t count(const std::vector<MetricValue>& values, std::string_view stat) {
    const MetricValue* v = find(values, stat);
    return v ? static_cast<std::uint64_t>(v->value) : 0;
}

}  // namespace

Aggregate aggregate(std::vector<std::optional<WorkerSnapshot>> per_worker) {
    Aggregate a;
    a.per_worker = std::move(per_worker);
    for (const auto& s : a.per_worker) {
        if (!s) {
            ++a.unresponsive;
            continue;
        }
        a.total.counters += s->counters;
        a.total.shell.receive_errors += s->shell.receive_errors;
        a.total.shell.send_errors += s->shell.send_errors;
        a.total.shell.truncated += s->shell.truncated;
        a.total.transactions += s->transactions;
        a.total.sockets += s->sockets;
    }
    return a;
}

const std::vector<MetricDef>& metric_defs() {
    static const std::vector<MetricDef> defs = make_defs();
    return defs;
}

std::vector<MetricValue> metric_values(const MetricSources& s) {
    const std::size_t workers = s.workers.per_worker.size();
    std::vector<MetricValue> out;
    for (const MetricDef& d : metric_defs()) {
        const bool gauge = d.kind == MetricKind::gauge;
        if (d.worker_value) {
            for (std::size_t i = 0; i < workers; ++i) {
                const auto& w = s.workers.per_worker[i];
                const bool in_line = d.line == InLine::several_workers && workers > 1 && w;
                out.push_back(MetricValue{"worker" + std::to_string(i) + "_" + d.stat, d.prom,
                                          "worker=\"" + std::to_string(i) + "\"", d.help, gauge,
                                          in_line, d.worker_value(w.value_or(WorkerSnapshot{}))});
            }
            continue;
        }
        const double value = d.value(s);
        bool in_line = false;
        switch (d.line) {
            case InLine::no:
                break;
            case InLine::yes:
                in_line = true;
                break;
            case InLine::several_workers:
                in_line = workers > 1;
                break;
            case InLine::nonzero:
                in_line = value != 0;
                break;
        }
        out.push_back(MetricValue{d.stat, d.prom, d.label, d.help, gauge, in_line, value});
    }
    // Per SDP address (Prometheus only): its state as a one-hot enum, and
    // the wall time of its last change.
    const auto labels_of = [](const AddressHealth& a) {
        return "service=\"" + a.service + "\",address=\"" + a.address + "\",check=\"" +
               std::string(to_string(a.check)) + "\"";
    };
    for (const AddressHealth& a : s.addresses) {
        for (HealthState st : {HealthState::unknown, HealthState::up, HealthState::down}) {
            out.push_back(MetricValue{
                "", "sdp_pmd_sdp_address_state",
                labels_of(a) + ",state=\"" + std::string(to_string(st)) + "\"",
                "Health of each SDP address: 1 for its current state (unknown, up, down).", true,
                false, a.state == st ? 1.0 : 0.0});
        }
    }
    for (const AddressHealth& a : s.addresses) {
        out.push_back(MetricValue{"", "sdp_pmd_sdp_address_last_change_seconds", labels_of(a),
                                  "Unix time of the SDP address's last health state change "
                                  "(or of when checking began).",
                                  true, false, a.changed_unix_seconds});
    }
    return out;
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

nlohmann::json stats_json(const std::vector<MetricValue>& values) {
    nlohmann::json j = nlohmann::json::object();
    for (const MetricValue& m : values) {
        if (m.stat.empty()) {
            continue;
        }
        if (m.gauge) {
            j[m.stat] = m.value;
        } else {
            j[m.stat] = static_cast<std::uint64_t>(m.value);
        }
    }
    return j;
}

std::string counters_line(const std::vector<MetricValue>& values) {
    std::string out = "counters:";
    for (const MetricValue& m : values) {
        if (m.in_line) {
            out += ' ' + m.stat + '=' + std::to_string(static_cast<std::uint64_t>(m.value));
        }
    }
    return out;
}

std::string status_line(const std::vector<MetricValue>& values) {
    const std::uint64_t workers = count(values, "workers");
    return std::to_string(count(values, "static_services") + count(values, "dynamic_services")) +
           " services, " + std::to_string(count(values, "transactions")) + " transactions, " +
           std::to_string(count(values, "requests")) + " requests" +
           (workers > 1 ? ", " + std::to_string(workers) + " workers" : "");
}

}  // namespace pmd::io
