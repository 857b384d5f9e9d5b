// SPDX-License-Identifier: Apache-2.0
// The sans-I/O Port Mapper Service Provider (sections 7.4 and 7.5.2).
//
// Fed with (datagram bytes, source endpoint, local address it arrived on,
// now); answers with the outcome and, when one is due, the reply datagram to
// send from that local address to that source. It never touches a socket, a
// clock or a thread: the I/O shell owns those and tests use a fake clock.
//
// One Pmsp is one shard: it is not thread-safe and is owned by one worker.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/core/limiter.hpp"
#include "daemon/core/service.hpp"
#include "pmclient/message.hpp"

namespace pmd {

using TimePoint = std::chrono::steady_clock::time_point;

struct Limits {
    std::chrono::milliseconds ack_timeout{5000};
    std::size_t max_transactions = 1'000'000;
    pm::DenyApPort deny_ap_port = pm::DenyApPort::echo;
    bool accept_iwpm_request = true;
    // Section 15.2 defences; both are off by default (rate 0, max_unacked 0).
    LimiterConfig per_source;  // token bucket of PMReqs per source address
    QuenchConfig quench;       // sources that leave PMAccepts un-acked are cut off
    // On-demand services: new transactions of this shard waiting for their
    // listener at once; beyond it a PMReq is denied (denied_pool_exhausted).
    std::size_t max_pending_opens = 256;
};

// What became of one datagram. Every value has a counter of the same name.
enum class Outcome : std::uint8_t {
    accepted,               // new transaction, PMAccept sent
    accepted_duplicate,     // duplicate PMReq, PMAccept re-sent, timer reset
    pending,                // on-demand: new transaction waits for its listener, no reply yet
    pending_duplicate,      // on-demand: duplicate PMReq while waiting, absorbed
    denied_no_service,      // PMDeny: no mapping for ApIPAddr:ApPort
    denied_not_allowed,     // PMDeny: client outside the service's allow list
    denied_no_address,      // PMDeny: service has no SDP address for this family
    denied_unavailable,     // PMDeny: no SDP address of the family is available (health)
    denied_pool_exhausted,  // PMDeny: on-demand pool has no free port (15.2.1)
    denied_open_failed,     // PMDeny: the acceptor could not open the port, or did not answer
    acked,                  // PMAck matched: timer stopped, state released
    ack_unknown,            // PMAck with no matching state: discarded (7.5.2)
    drop_too_short,         // datagram shorter than 48 bytes
    drop_too_long,          // longer than 48 bytes (and not iwpmd's 64-byte PMReq)
    drop_bad_version,       // Ver != 0
    drop_reserved_ipv,      // IPV not 4 or 6
    drop_not_for_server,    // PMAccept or PMDeny sent to the server
    drop_iwpm_disabled,     // 64-byte PMReq while accept_iwpm_request is off
    drop_bad_request,       // PMReq with CpPort 0 or an unspecified CpIPAddr
    drop_rate_limited,      // PMReq over its source's token bucket (15.2.1)
    drop_quenched,          // PMReq from a quenched source (15.2.1, 15.2.2.1)
    count_
};
inline constexpr std::size_t kOutcomeCount = static_cast<std::size_t>(Outcome::count_);
std::string_view to_string(Outcome o);
bool is_drop(Outcome o);

struct Counters {
    std::array<std::uint64_t, kOutcomeCount> outcome{};
    std::uint64_t datagrams = 0;         // every datagram handed in
    std::uint64_t requests = 0;          // PMReq decoded, including rate-limited ones
    std::uint64_t iwpm_requests = 0;     // of which iwpmd 64-byte format
    std::uint64_t superseded = 0;        // same 4-tuple, new AssocHandle: old state dropped
    std::uint64_t timeouts = 0;          // PMAck timer expired, state released
    std::uint64_t shed = 0;              // oldest un-acked transaction dropped at max_transactions
    std::uint64_t released_on_deny = 0;  // duplicate PMReq turned into PMDeny: state released
    std::uint64_t quench_events = 0;     // sources that became quenched

    std::uint64_t operator[](Outcome o) const { return outcome[static_cast<std::size_t>(o)]; }
    Counters& operator+=(const Counters& o);
};

// What an on-demand transaction tells the port pool (io/on_demand.hpp,
// core/on_demand.hpp), which the main thread owns: the shell carries it over.
struct PoolNote {
    enum class Kind : std::uint8_t {
        open,    // a new transaction wants a listener: answer with on_port()
        touch,   // duplicate PMReq: PMAccept re-sent, the PMAck timer restarts
        acked,   // PMAck for the port
        cancel,  // (from the shell) the transaction went before its port came
    };
    Kind kind = Kind::open;
    std::string service;
    pm::Message request;     // the PMReq (open: pass it back to on_port())
    std::uint16_t port = 0;  // touch, acked
};

struct Result {
    Outcome outcome;
    std::optional<pm::Wire> reply;  // send to the source, from the local address
    std::optional<PoolNote> pool;   // on-demand: for the port pool
};

// The answer to an on-demand transaction, once its listener is open or not.
struct PortResult {
    // The transaction was gone (superseded, timed out): no reply; a port
    // that was opened for it must be released.
    bool orphan = true;
    Outcome outcome = Outcome::denied_open_failed;
    std::optional<pm::Wire> reply;
};

// A live transaction, for listings.
struct TransactionView {
    pm::Message request;  // the PMReq as last received
    pm::Endpoint sdp;     // SDP Address handed out
    std::string_view service;
    TimePoint expires;
    bool pending = false;  // on-demand: waiting for its listener (sdp port 0)
};

class Pmsp {
  public:
    Pmsp(Limits limits, std::shared_ptr<const Registry> registry, std::uint64_t hash_seed = 0);
    ~Pmsp();
    Pmsp(const Pmsp&) = delete;
    Pmsp& operator=(const Pmsp&) = delete;

    Result on_datagram(std::span<const std::uint8_t> bytes, const pm::Endpoint& source,
                       const pm::IpAddress& local, TimePoint now);
    // The pool's answer to PoolNote::open for `request`: the port opened
    // (PMAccept with it, the PMAck timer starts) or nullopt with the deny
    // reason (denied_pool_exhausted or denied_open_failed: PMDeny).
    PortResult on_port(const pm::Message& request, std::optional<std::uint16_t> port,
                       Outcome deny_reason, TimePoint now);
    // Transactions waiting for their listener.
    std::size_t pending() const;

    // Releases every transaction whose PMAck timer expired by `now`.
    // Returns the number released.
    std::size_t on_timer(TimePoint now);
    // Earliest pending PMAck deadline, if any.
    std::optional<TimePoint> next_deadline() const;

    // New services (reload, registration). Live transactions keep their state;
    // a duplicate PMReq is answered from the new snapshot (7.5.2: most recent
    // state of the service).
    void set_registry(std::shared_ptr<const Registry> registry);
    const Registry& registry() const { return *registry_; }
    // New limits (reload). A lower max_transactions sheds at once.
    void set_limits(const Limits& limits);

    std::size_t transactions() const;
    const Counters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }
    void for_each_transaction(const std::function<void(const TransactionView&)>& fn) const;

  private:
    struct Table;
    Result admit_request(const pm::Message& req, const pm::Endpoint& source, TimePoint now);
    Result handle_request(const pm::Message& req, const pm::Endpoint& source, TimePoint now);
    Result handle_on_demand(const pm::Message& req, const Service& service,
                            const pm::Endpoint& chosen, std::uint32_t existing, TimePoint now);
    Result handle_ack(const pm::Message& ack);
    std::optional<pm::Endpoint> choose(const Service& service, const pm::Message& req,
                                       std::uint32_t existing, Outcome& deny_reason);
    Result count(Outcome o, std::optional<pm::Wire> reply = std::nullopt);

    Limits limits_;
    std::uint64_t seed_;
    SourceLimiter limiter_;
    SourceQuench quench_;
    std::shared_ptr<const Registry> registry_;
    std::unique_ptr<Table> table_;
    Counters counters_;
};

}  // namespace pmd
