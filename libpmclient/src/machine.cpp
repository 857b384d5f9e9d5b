// SPDX-License-Identifier: Apache-2.0
#include "machine.hpp"

#include <algorithm>

namespace pmclient {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

pm::Endpoint normalise(const pm::Endpoint& e) {
    return pm::Endpoint{e.address.unmapped(), e.port};
}

bool same_endpoint(const pm::Endpoint& a, const pm::Endpoint& b) {
    return a.port == b.port && a.address.unmapped() == b.address.unmapped();
}

std::chrono::microseconds micros(Duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d);
}

std::string list_text(const std::vector<pm::Endpoint>& list) {
    std::string s;
    for (const auto& e : list) {
        s += (s.empty() ? "" : ", ") + e.to_string();
    }
    return s;
}

}  // namespace

// add() names every field: a new counter must be added there too.
static_assert(sizeof(Counters) == 23 * sizeof(std::uint64_t), "update add() for the new counter");

void add(Counters& a, const Counters& b) {
    a.requests_started += b.requests_started;
    a.cache_hits += b.cache_hits;
    a.cache_misses += b.cache_misses;
    a.pmreq_sent += b.pmreq_sent;
    a.retransmissions += b.retransmissions;
    a.pmack_sent += b.pmack_sent;
    a.reacks += b.reacks;
    a.accepted += b.accepted;
    a.denied += b.denied;
    a.timeouts += b.timeouts;
    a.errors += b.errors;
    a.datagrams += b.datagrams;
    a.drop_malformed += b.drop_malformed;
    a.drop_not_reply += b.drop_not_reply;
    a.drop_unknown += b.drop_unknown;
    a.drop_tuple_mismatch += b.drop_tuple_mismatch;
    a.drop_wrong_source += b.drop_wrong_source;
    a.drop_duplicate += b.drop_duplicate;
    a.drop_invalid_accept += b.drop_invalid_accept;
    a.receive_errors += b.receive_errors;
    a.send_errors += b.send_errors;
    a.pmsp_failovers += b.pmsp_failovers;
    a.pmsp_skipped += b.pmsp_skipped;
}

std::string validate(const MachineConfig& c) {
    if (c.cache_capacity > 10'000'000) {
        return "cache_capacity must be at most 10000000";
    }
    if (c.completed_capacity > 10'000'000) {
        return "completed_capacity must be at most 10000000";
    }
    if (c.max_in_flight == 0 || c.max_in_flight > 10'000'000) {
        return "max_in_flight must be between 1 and 10000000";
    }
    if (c.completed_linger < Duration::zero() || c.completed_linger > std::chrono::minutes(10)) {
        return "completed_linger must be between 0 and 10 min";
    }
    if (c.pmsp_skip_period < Duration::zero() || c.pmsp_skip_period > std::chrono::hours(1)) {
        return "pmsp_skip_period must be between 0 and 1 h";
    }
    if (c.pmsp_health_capacity == 0 || c.pmsp_health_capacity > 1'000'000) {
        return "pmsp_health_capacity must be between 1 and 1000000";
    }
    return {};
}

std::vector<pm::Endpoint> pmsps_of(const Query& q) {
    return q.pmsps.empty() ? std::vector<pm::Endpoint>{q.pmsp} : q.pmsps;
}

std::vector<pm::Family> pmsp_families(const Query& q) {
    std::vector<pm::Family> fams;
    for (const auto& e : pmsps_of(q)) {
        const pm::Family f = e.address.unmapped().family();
        if (!e.address.is_unspecified() && std::find(fams.begin(), fams.end(), f) == fams.end()) {
            fams.push_back(f);
        }
    }
    return fams;
}

Machine::Machine(MachineConfig config, std::shared_ptr<SharedCache> cache)
    : config_(config),
      cache_(cache ? std::move(cache) : std::make_shared<SharedCache>(config.cache_capacity)) {}

Result Machine::error_result(Errc e, std::string reason) const {
    Result r;
    r.kind = ResultKind::error;
    r.error = e;
    r.reason = std::move(reason);
    return r;
}

std::uint64_t Machine::unique_handle(std::uint64_t random) const {
    std::uint64_t h = random;
    while (h == 0 || handles_.contains(h) || completed_.contains(h)) {
        h = splitmix64(h);
    }
    return h;
}

bool Machine::pmsp_skipped(const pm::Endpoint& pmsp, TimePoint now) const {
    auto it = health_.find(normalise(pmsp));
    return config_.pmsp_fail_threshold != 0 && it != health_.end() &&
           it->second.failures >= config_.pmsp_fail_threshold &&
           now < it->second.last_failure + config_.pmsp_skip_period;
}

unsigned Machine::pmsp_failures(const pm::Endpoint& pmsp) const {
    auto it = health_.find(normalise(pmsp));
    return it == health_.end() ? 0 : it->second.failures;
}

void Machine::pmsp_failed(const pm::Endpoint& pmsp, TimePoint now) {
    auto it = health_.find(pmsp);
    if (it == health_.end()) {
        if (health_.size() >= config_.pmsp_health_capacity) {
            auto oldest = std::min_element(health_.begin(), health_.end(), [](auto& a, auto& b) {
                return a.second.last_failure < b.second.last_failure;
            });
            health_.erase(oldest);
        }
        it = health_.emplace(pmsp, Health{}).first;
    }
    ++it->second.failures;
    it->second.last_failure = now;
}

TxnId Machine::start(const Query& query, TimePoint now, std::uint64_t random, Actions& out) {
    ++counters_.requests_started;
    expire_completed(now);
    const TxnId id = next_id_++;
    auto fail = [&](Errc e, std::string reason) {
        ++counters_.errors;
        out.completions.push_back({id, error_result(e, std::move(reason))});
        finish_timer(out);
        return id;
    };

    Query q = query;
    q.conventional = normalise(q.conventional);
    q.cp = normalise(q.cp);
    q.pmsps = pmsps_of(q);
    for (auto& e : q.pmsps) {
        e = normalise(e);
    }
    q.pmsp = q.pmsps.front();
    if (auto why = validate(q.options); !why.empty()) {
        return fail(Errc::invalid_argument, why);
    }
    if (q.conventional.port == 0) {
        return fail(Errc::invalid_argument, "ApPort must not be 0");
    }
    if (q.conventional.address.is_unspecified()) {
        return fail(Errc::invalid_argument, "ApIPAddr must not be the unspecified address");
    }
    if (q.cp.port == 0) {
        return fail(Errc::invalid_argument, "CpPort must not be 0");
    }
    if (q.cp.address.is_unspecified()) {
        return fail(Errc::invalid_argument, "CpIPAddr must not be the unspecified address");
    }
    if (q.cp.address.family() != q.conventional.address.family()) {
        return fail(Errc::invalid_argument,
                    "CpIPAddr and ApIPAddr must be the same IP version (IPV, 7.3.1.3)");
    }
    if (q.pmsps.size() == 1 && (q.pmsp.port == 0 || q.pmsp.address.is_unspecified())) {
        return fail(Errc::invalid_argument,
                    "PMSP must have a non-zero port and a specified address");
    }
    if (auto why = validate_pmsp_list(q.pmsps); !why.empty()) {
        return fail(Errc::invalid_argument, why);
    }

    const CacheKey key = make_cache_key(q.conventional, q.cp.address, q.pmsps);
    if (q.options.use_cache) {
        if (auto hit = cache_->lookup(key, now)) {
            ++counters_.cache_hits;
            ++counters_.accepted;
            Result r;
            r.kind = ResultKind::accepted;
            r.sdp = hit->sdp;
            r.pm_time = hit->pm_time;
            r.lifetime = pm::pm_time_lifetime(hit->pm_time);
            r.from_cache = true;
            r.pmsp = q.pmsp;
            r.reason = "cached PMAccept";
            out.completions.push_back({id, std::move(r)});
            finish_timer(out);
            return id;
        }
        ++counters_.cache_misses;
    }
    if (active_.size() >= config_.max_in_flight) {
        return fail(Errc::busy, "too many resolutions in flight");
    }

    Txn t;
    t.id = id;
    t.req.type = pm::MessageType::request;
    t.req.ipv = q.cp.address.family();
    t.req.pm_time = 0;
    t.req.ap_port = q.conventional.port;
    t.req.cp_port = q.cp.port;
    t.req.cp_addr = q.cp.address;
    t.req.ap_addr = q.conventional.address;
    // Asking order: the list order, PMSPs being skipped moved to the end.
    for (const auto& e : q.pmsps) {
        if (!pmsp_skipped(e, now)) {
            t.order.push_back(e);
        }
    }
    const std::size_t healthy = t.order.size();
    for (const auto& e : q.pmsps) {
        if (pmsp_skipped(e, now)) {
            t.order.push_back(e);
            if (healthy > 0) {
                ++counters_.pmsp_skipped;
            }
        }
    }
    t.query = std::move(q);
    t.key = key;
    t.started = now;
    t.deadline_at = now + t.query.options.deadline;
    Txn& placed = active_.emplace(id, std::move(t)).first->second;
    start_leg(placed, now, random, out);
    finish_timer(out);
    return id;
}

// The next PMSP's turn: a fresh AssocHandle, a fresh 7.5.1 schedule, and a
// slice of what is left of the deadline (see RequestOptions).
void Machine::start_leg(Txn& t, TimePoint now, std::uint64_t random, Actions& out) {
    const auto& o = t.query.options;
    const std::size_t k = t.legs.size();
    const pm::Endpoint to = t.order[k];
    const std::uint64_t handle = unique_handle(random);
    t.req.assoc_handle = handle;
    t.wire = pm::encode(t.req);
    t.legs.push_back({handle, to, now});
    handles_.emplace(handle, t.id);

    // Every PMSP still to ask gets an equal share of what is left, skipped
    // ones included: they come last, but they are still asked.
    const Duration slice =
        o.per_pmsp_timeout > Duration::zero()
            ? Duration(o.per_pmsp_timeout)
            : (t.deadline_at - now) / static_cast<Duration::rep>(t.order.size() - k);
    t.leg_end = std::min(now + slice, t.deadline_at);
    t.timeout = std::min<Duration>(o.initial_timeout, o.deadline);
    t.next_at = std::min(now + t.timeout, t.leg_end);
    t.leg_attempts = 1;
    ++t.attempts;
    out.sends.push_back({to, t.wire});
    ++counters_.pmreq_sent;
    schedule_.emplace(t.next_at, t.id);
}

void Machine::complete(Txn& t, Result r, std::uint64_t winner, const pm::Message* accept,
                       TimePoint now, Actions& out) {
    const Leg* answered = nullptr;
    for (const auto& leg : t.legs) {
        if (leg.handle == winner) {
            answered = &leg;
        }
    }
    if (answered == nullptr) {
        answered = &t.legs.back();
    }
    r.attempts = t.attempts;
    r.pmsp = answered->pmsp;
    r.pmsps_tried = static_cast<unsigned>(t.legs.size());
    r.assoc_handle = answered->handle;
    const TxnId id = t.id;
    for (std::size_t i = 0; i < t.legs.size(); ++i) {
        const Leg& leg = t.legs[i];
        Done d{t.req.cp_port, t.req.cp_addr, leg.pmsp, false, {}, 0, false};
        if (leg.handle == winner && accept != nullptr) {
            d.accepted = true;
            d.accept = *accept;
        }
        d.superseded = i + 1 < t.legs.size() && leg.handle != winner;
        handles_.erase(leg.handle);
        remember(leg.handle, std::move(d), now);
    }
    schedule_.erase({t.next_at, id});
    active_.erase(id);  // t is dangling from here on
    out.completions.push_back({id, std::move(r)});
}

void Machine::remember(std::uint64_t handle, Done d, TimePoint now) {
    if (config_.completed_capacity == 0) {
        return;
    }
    while (completed_.size() >= config_.completed_capacity && !completed_order_.empty()) {
        completed_.erase(completed_order_.front().second);
        completed_order_.pop_front();
    }
    completed_.emplace(handle, std::move(d));
    completed_order_.emplace_back(now + config_.completed_linger, handle);
}

void Machine::expire_completed(TimePoint now) {
    while (!completed_order_.empty() && completed_order_.front().first <= now) {
        completed_.erase(completed_order_.front().second);
        completed_order_.pop_front();
    }
}

void Machine::on_timer(TimePoint now, Actions& out) {
    expire_completed(now);
    while (!schedule_.empty() && schedule_.begin()->first <= now) {
        const TxnId id = schedule_.begin()->second;
        auto it = active_.find(id);
        if (it == active_.end()) {  // cannot happen; keep the schedule consistent
            schedule_.erase(schedule_.begin());
            continue;
        }
        Txn& t = it->second;
        const auto& o = t.query.options;
        if (now >= t.leg_end || t.leg_attempts > o.max_retries) {
            // This PMSP's turn is over without a reply.
            pmsp_failed(t.legs.back().pmsp, now);
            if (now < t.deadline_at && t.legs.size() < t.order.size()) {
                ++counters_.pmsp_failovers;
                schedule_.erase(schedule_.begin());
                const std::uint64_t prev = t.legs.back().handle;
                start_leg(t, now, random_ ? random_() : splitmix64(prev), out);
                continue;
            }
            ++counters_.timeouts;
            Result r;
            r.kind = ResultKind::timeout;
            const std::string who = t.legs.size() == 1 ? "PMSP " + t.legs.front().pmsp.to_string()
                                                       : "PMSPs " + list_text(t.order);
            r.reason = "no reply from " + who + " after " + std::to_string(t.attempts) + " PMReq" +
                       (t.attempts == 1 ? "" : "s") + (now >= t.deadline_at ? " (deadline)" : "");
            complete(t, std::move(r), 0, nullptr, now, out);
            continue;
        }
        // 7.5.1: retransmit the identical PMReq and re-arm the timeout.
        schedule_.erase(schedule_.begin());
        out.sends.push_back({t.legs.back().pmsp, t.wire});
        ++counters_.pmreq_sent;
        ++counters_.retransmissions;
        ++t.attempts;
        ++t.leg_attempts;
        t.legs.back().last_sent = now;
        auto next = std::chrono::duration_cast<Duration>(t.timeout * o.backoff_factor);
        t.timeout = std::min<Duration>(next, o.deadline);
        t.next_at = std::min(now + t.timeout, t.leg_end);
        schedule_.emplace(t.next_at, id);
    }
    finish_timer(out);
}

void Machine::on_datagram(std::span<const std::uint8_t> bytes, const pm::Endpoint& from,
                          TimePoint now, Actions& out) {
    ++counters_.datagrams;
    expire_completed(now);
    auto decoded = pm::decode(bytes);
    if (!std::holds_alternative<pm::Message>(decoded)) {
        ++counters_.drop_malformed;
        finish_timer(out);
        return;
    }
    const auto& m = std::get<pm::Message>(decoded);
    if (m.type != pm::MessageType::accept && m.type != pm::MessageType::deny) {
        ++counters_.drop_not_reply;
        finish_timer(out);
        return;
    }

    if (auto h = handles_.find(m.assoc_handle); h != handles_.end()) {
        Txn& t = active_.at(h->second);
        const Leg* leg = nullptr;
        for (const auto& l : t.legs) {
            if (l.handle == m.assoc_handle) {
                leg = &l;
            }
        }
        if (m.ipv != t.req.ipv || m.cp_port != t.req.cp_port || m.cp_addr != t.req.cp_addr) {
            ++counters_.drop_tuple_mismatch;
        } else if (config_.strict_source && !same_endpoint(from, leg->pmsp)) {
            ++counters_.drop_wrong_source;
        } else if (m.type == pm::MessageType::accept &&
                   (m.ap_port == 0 || m.ap_addr.is_unspecified())) {
            ++counters_.drop_invalid_accept;
        } else {
            const CacheKey key = t.key;
            const bool use_cache = t.query.options.use_cache;
            pmsp_answered(leg->pmsp);
            Result r;
            r.rtt = micros(now - leg->last_sent);
            if (m.type == pm::MessageType::accept) {
                // 7.4: PMAck to the address the PMAccept came from.
                out.sends.push_back({from, pm::encode(pm::make_ack(m))});
                ++counters_.pmack_sent;
                ++counters_.accepted;
                r.kind = ResultKind::accepted;
                r.sdp = pm::Endpoint{m.ap_addr, m.ap_port};
                r.pm_time = m.pm_time;
                r.lifetime = pm::pm_time_lifetime(m.pm_time);
                r.reason = "PMAccept from " + from.to_string();
                if (use_cache) {
                    cache_->store(key, r.sdp, m.pm_time, now);
                }
                complete(t, std::move(r), m.assoc_handle, &m, now, out);
            } else {
                // 7.4: PMDeny completes the transaction, no PMAck.
                ++counters_.denied;
                r.kind = ResultKind::denied;
                r.reason = "PMDeny from " + from.to_string();
                if (use_cache) {
                    cache_->erase(key);
                }
                complete(t, std::move(r), m.assoc_handle, nullptr, now, out);
            }
        }
        finish_timer(out);
        return;
    }

    if (auto it = completed_.find(m.assoc_handle); it != completed_.end()) {
        Done& d = it->second;
        if (m.ipv != d.cp_addr.family() || m.cp_port != d.cp_port || m.cp_addr != d.cp_addr) {
            ++counters_.drop_tuple_mismatch;
        } else if (config_.strict_source && !same_endpoint(from, d.pmsp)) {
            ++counters_.drop_wrong_source;
        } else {
            // 7.5.1: later replies to the same request are discarded. A
            // repeat of the winning PMAccept means our PMAck was probably
            // lost: acknowledge it again so the PMSP can release its state.
            // A PMAccept to a handle a failover superseded is acknowledged
            // for the same reason (that PMSP holds state for it).
            ++counters_.drop_duplicate;
            const bool same_win =
                d.accepted && m.ap_port == d.accept.ap_port && m.ap_addr == d.accept.ap_addr;
            if (m.type == pm::MessageType::accept && (same_win || d.superseded) &&
                d.reacks < kMaxReacks) {
                ++d.reacks;
                out.sends.push_back({from, pm::encode(pm::make_ack(m))});
                ++counters_.pmack_sent;
                ++counters_.reacks;
            }
        }
        finish_timer(out);
        return;
    }

    ++counters_.drop_unknown;  // 7.5.1: no associated state, discard
    finish_timer(out);
}

bool Machine::cancel(TxnId id, TimePoint now, Actions& out) {
    auto it = active_.find(id);
    if (it == active_.end()) {
        finish_timer(out);
        return false;
    }
    ++counters_.errors;
    complete(it->second, error_result(Errc::cancelled, "cancelled"), 0, nullptr, now, out);
    finish_timer(out);
    return true;
}

void Machine::cancel_all(TimePoint now, Actions& out) {
    std::vector<TxnId> ids;
    ids.reserve(active_.size());
    for (const auto& [id, t] : active_) {
        ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    for (TxnId id : ids) {
        cancel(id, now, out);
    }
    finish_timer(out);
}

std::optional<TimePoint> Machine::next_wakeup() const {
    if (schedule_.empty()) {
        return std::nullopt;
    }
    return schedule_.begin()->first;
}

}  // namespace pmclient
