// SPDX-License-Identifier: Apache-2.0
// Every counter and gauge of sdp-pmd, declared once (metric_defs(): name,
// help, kind, label, where it shows) and rendered from that one table for
// the `stats` control command, the SIGUSR1 / stop log line, the Prometheus
// text of the metrics endpoint and the service manager's STATUS=.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/cluster.hpp"
#include "daemon/core/on_demand.hpp"
#include "daemon/core/registrations.hpp"
#include "daemon/io/control_socket.hpp"
#include "daemon/io/health_checker.hpp"
#include "daemon/io/worker.hpp"

namespace pmd::io {

// Every worker's counters, aggregated, and each worker's own.
struct Aggregate {
    WorkerSnapshot total;
    std::vector<std::optional<WorkerSnapshot>> per_worker;  // nullopt: no answer
    std::size_t unresponsive = 0;
};
Aggregate aggregate(std::vector<std::optional<WorkerSnapshot>> per_worker);

// What the values are read from, at one moment.
struct MetricSources {
    Aggregate workers;
    ShellCounters shell;  // reloads, reload_failures
    ControlCounters control;
    RegistrationStore::Counts registrations;
    std::uint64_t state_write_errors = 0;
    std::uint64_t watchdog_withheld = 0;
    std::size_t static_services = 0;
    std::size_t dynamic_services = 0;
    double uptime_seconds = 0;
    HealthCounters health;
    std::vector<AddressHealth> addresses;  // one sample set each, Prometheus only
    PoolCounters pool;                     // on-demand ports
    std::size_t pool_listeners = 0;        // open or being opened now
    // The registry backend (io/registry_backend.hpp).
    bool cluster = false;  // the etcd backend
    bool cluster_serving = true;
    cluster::Counters cluster_counters;
};

enum class MetricKind : std::uint8_t { counter, gauge };

// Whether a metric is on the "counters:" log line.
enum class InLine : std::uint8_t {
    no,
    yes,
    several_workers,  // only with more than one worker (per worker: that answered)
    nonzero,          // only when not zero
};

struct MetricDef {
    std::string stat;  // `stats` key; per worker "worker<N>_" + stat
    std::string prom;  // Prometheus family
    std::string help;
    MetricKind kind = MetricKind::counter;
    InLine line = InLine::no;
    std::string label;  // e.g. outcome="accepted"; per worker: worker="N"
    // Exactly one of the two: a daemon-wide value, or one value per worker.
    std::function<double(const MetricSources&)> value;
    std::function<double(const WorkerSnapshot&)> worker_value;
};

// The table, in Prometheus order (each family's samples together).
const std::vector<MetricDef>& metric_defs();

// One sample of the table.
struct MetricValue {
    std::string stat;  // empty: Prometheus only (per-address samples)
    std::string prom;
    std::string label;
    std::string help;
    bool gauge = false;
    bool in_line = false;
    double value = 0;
};
std::vector<MetricValue> metric_values(const MetricSources& sources);

// Prometheus text exposition 0.0.4 (HELP/TYPE once per family).
std::string prometheus_text(const std::vector<MetricValue>& values);
// The `stats` arguments: {stat: value}, counters as integers.
nlohmann::json stats_json(const std::vector<MetricValue>& values);
// "counters: datagrams=1 requests=1 ..." (SIGUSR1, stop).
std::string counters_line(const std::vector<MetricValue>& values);
// STATUS=: "3 services, 0 transactions, 5 requests[, 4 workers]".
std::string status_line(const std::vector<MetricValue>& values);

}  // namespace pmd::io
