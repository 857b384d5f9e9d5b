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

}  // namespace

// add() names every field: a new counter must be added there too.
static_assert(sizeof(Counters) == 21 * sizeof(std::uint64_t), "update add() for the new counter");

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
    return {};
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
    while (h == 0 || active_.contains(h) || completed_.contains(h)) {
        h = splitmix64(h);
    }
    return h;
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
    q.pmsp = normalise(q.pmsp);
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
    if (q.pmsp.port == 0 || q.pmsp.address.is_unspecified()) {
        return fail(Errc::invalid_argument,
                    "PMSP must have a non-zero port and a specified address");
    }

    const CacheKey key{q.conventional, q.cp.address, q.pmsp};
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

    const std::uint64_t handle = unique_handle(random);
    Txn t;
    t.id = id;
    t.req.type = pm::MessageType::request;
    t.req.ipv = q.cp.address.family();
    t.req.pm_time = 0;
    t.req.ap_port = q.conventional.port;
    t.req.cp_port = q.cp.port;
    t.req.assoc_handle = handle;
    t.req.cp_addr = q.cp.address;
    t.req.ap_addr = q.conventional.address;
    t.wire = pm::encode(t.req);
    t.query = q;
    t.started = now;
    t.last_sent = now;
    t.deadline_at = now + q.options.deadline;
    t.timeout = std::min<Duration>(q.options.initial_timeout, q.options.deadline);
    t.next_at = std::min(now + t.timeout, t.deadline_at);
    t.attempts = 1;

    out.sends.push_back({q.pmsp, t.wire});
    ++counters_.pmreq_sent;
    schedule_.emplace(t.next_at, handle);
    by_id_.emplace(id, handle);
    active_.emplace(handle, std::move(t));
    finish_timer(out);
    return id;
}

void Machine::complete(Txn& t, Result r, Actions& out) {
    const std::uint64_t handle = t.req.assoc_handle;
    r.attempts = t.attempts;
    r.pmsp = t.query.pmsp;
    r.assoc_handle = handle;
    const TxnId id = t.id;
    schedule_.erase({t.next_at, handle});
    by_id_.erase(id);
    active_.erase(handle);  // t is dangling from here on
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
        const std::uint64_t handle = schedule_.begin()->second;
        auto it = active_.find(handle);
        if (it == active_.end()) {  // cannot happen; keep the schedule consistent
            schedule_.erase(schedule_.begin());
            continue;
        }
        Txn& t = it->second;
        const auto& o = t.query.options;
        if (now >= t.deadline_at || t.attempts > o.max_retries) {
            ++counters_.timeouts;
            Result r;
            r.kind = ResultKind::timeout;
            r.reason = "no reply from PMSP " + t.query.pmsp.to_string() + " after " +
                       std::to_string(t.attempts) + " PMReq" + (t.attempts == 1 ? "" : "s") +
                       (now >= t.deadline_at ? " (deadline)" : "");
            Done d{t.req.cp_port, t.req.cp_addr, t.query.pmsp, false, {}, 0};
            complete(t, std::move(r), out);
            remember(handle, std::move(d), now);
            continue;
        }
        // 7.5.1: retransmit the identical PMReq and re-arm the timeout.
        schedule_.erase(schedule_.begin());
        out.sends.push_back({t.query.pmsp, t.wire});
        ++counters_.pmreq_sent;
        ++counters_.retransmissions;
        ++t.attempts;
        t.last_sent = now;
        auto next = std::chrono::duration_cast<Duration>(t.timeout * o.backoff_factor);
        t.timeout = std::min<Duration>(next, o.deadline);
        t.next_at = std::min(now + t.timeout, t.deadline_at);
        schedule_.emplace(t.next_at, handle);
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

    if (auto it = active_.find(m.assoc_handle); it != active_.end()) {
        Txn& t = it->second;
        if (m.ipv != t.req.ipv || m.cp_port != t.req.cp_port || m.cp_addr != t.req.cp_addr) {
            ++counters_.drop_tuple_mismatch;
        } else if (config_.strict_source && !same_endpoint(from, t.query.pmsp)) {
            ++counters_.drop_wrong_source;
        } else if (m.type == pm::MessageType::accept &&
                   (m.ap_port == 0 || m.ap_addr.is_unspecified())) {
            ++counters_.drop_invalid_accept;
        } else {
            const std::uint64_t handle = t.req.assoc_handle;
            const CacheKey key{t.query.conventional, t.req.cp_addr, t.query.pmsp};
            const bool use_cache = t.query.options.use_cache;
            Done d{t.req.cp_port, t.req.cp_addr, t.query.pmsp, false, {}, 0};
            Result r;
            r.rtt = micros(now - t.last_sent);
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
                d.accepted = true;
                d.accept = m;
            } else {
                // 7.4: PMDeny completes the transaction, no PMAck.
                ++counters_.denied;
                r.kind = ResultKind::denied;
                r.reason = "PMDeny from " + from.to_string();
                if (use_cache) {
                    cache_->erase(key);
                }
            }
            complete(t, std::move(r), out);
            remember(handle, std::move(d), now);
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
            ++counters_.drop_duplicate;
            if (m.type == pm::MessageType::accept && d.accepted && m.ap_port == d.accept.ap_port &&
                m.ap_addr == d.accept.ap_addr && d.reacks < kMaxReacks) {
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
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
        finish_timer(out);
        return false;
    }
    Txn& t = active_.at(it->second);
    const std::uint64_t handle = t.req.assoc_handle;
    Done d{t.req.cp_port, t.req.cp_addr, t.query.pmsp, false, {}, 0};
    ++counters_.errors;
    complete(t, error_result(Errc::cancelled, "cancelled"), out);
    remember(handle, std::move(d), now);
    finish_timer(out);
    return true;
}

void Machine::cancel_all(TimePoint now, Actions& out) {
    std::vector<TxnId> ids;
    ids.reserve(by_id_.size());
    for (const auto& [id, handle] : by_id_) {
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
