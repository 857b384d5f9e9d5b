// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/pmsp.hpp"

#include <cstring>
#include <limits>
#include "daemon/core/slab_list.hpp"

namespace pmd {
namespace {

constexpr std::uint32_t kNil = std::numeric_limits<std::uint32_t>::max();

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

std::uint64_t mix_addr(std::uint64_t h, const pm::IpAddress& a) {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    std::memcpy(&lo, a.bytes().data(), 8);
    std::memcpy(&hi, a.bytes().data() + 8, 8);
    return mix(mix(mix(h, lo), hi), static_cast<std::uint64_t>(a.family()));
}

// The 4-tuple of 7.5.2 (ApPort, CpPort, ApIPAddr, CpIPAddr); with the
// AssocHandle stored in the entry it forms the duplicate-detection 5-tuple.
struct Key4 {
    pm::IpAddress ap;
    pm::IpAddress cp;
    std::uint16_t ap_port;
    std::uint16_t cp_port;
    bool operator==(const Key4&) const = default;
};

// The 3-tuple a PMAck is matched on (AssocHandle, CpPort, CpIPAddr): a PMAck
// carries the mapped ApPort/ApIPAddr, not the requested ones.
struct Key3 {
    std::uint64_t assoc;
    pm::IpAddress cp;
    std::uint16_t cp_port;
    bool operator==(const Key3&) const = default;
};

Key4 key4_of(const pm::Message& m) {
    return {m.ap_addr, m.cp_addr, m.ap_port, m.cp_port};
}
Key3 key3_of(const pm::Message& m) {
    return {m.assoc_handle, m.cp_addr, m.cp_port};
}

// Seeded hashes so that remote peers cannot aim collisions at one bucket.
struct Hash4 {
    std::uint64_t seed;
    std::size_t operator()(const Key4& k) const noexcept {
        auto h = mix_addr(mix_addr(seed, k.ap), k.cp);
        return static_cast<std::size_t>(mix(h, std::uint64_t{k.ap_port} << 16 | k.cp_port));
    }
};
struct Hash3 {
    std::uint64_t seed;
    std::size_t operator()(const Key3& k) const noexcept {
        auto h = mix_addr(mix(seed, k.assoc), k.cp);
        return static_cast<std::size_t>(mix(h, k.cp_port));
    }
};

// Stable across restarts and shards (unseeded), so the `hash` policy keeps a
// client on the same SDP address.
std::uint64_t policy_hash(const pm::IpAddress& a) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (auto b : a.bytes()) {
        h = (h ^ b) * 1099511628211ull;
    }
    return h;
}

// An open-addressing index from a key's hash to a slab slot, with linear
// probing and backward-shift deletion (no tombstones). It stores only the
// slot number and the low 32 bits of the hash; the key itself lives in the
// slab and is compared through the caller's `match`. It never allocates once
// grown to the table's working size, so the packet path allocates nothing in
// the steady state.
class IndexTable {
  public:
    template <typename Match>
    std::uint32_t find(std::uint64_t hash, Match&& match) const {
        if (slots_.empty()) {
            return kNil;
        }
        auto h = static_cast<std::uint32_t>(hash);
        for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.index == kNil) {
                return kNil;
            }
            if (s.hash == h && match(s.index)) {
                return s.index;
            }
        }
    }

    void insert(std::uint64_t hash, std::uint32_t index) {
        if ((size_ + 1) * 2 > slots_.size()) {
            grow();
        }
        place(Slot{index, static_cast<std::uint32_t>(hash)});
        ++size_;
    }

    // Removes the entry that holds `index`.
    void erase(std::uint64_t hash, std::uint32_t index) {
        auto h = static_cast<std::uint32_t>(hash);
        std::size_t i = h & mask_;
        while (slots_[i].index != index) {
            i = (i + 1) & mask_;
        }
        // Backward shift: pull later members of the probe run into the hole
        // when their home position allows it.
        for (std::size_t j = (i + 1) & mask_; slots_[j].index != kNil; j = (j + 1) & mask_) {
            std::size_t home = slots_[j].hash & mask_;
            bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
            if (movable) {
                slots_[i] = slots_[j];
                i = j;
            }
        }
        slots_[i] = Slot{};
        --size_;
    }

    std::size_t size() const { return size_; }

  private:
    struct Slot {
        std::uint32_t index = kNil;
        std::uint32_t hash = 0;
    };

    void place(Slot slot) {
        std::size_t i = slot.hash & mask_;
        while (slots_[i].index != kNil) {
            i = (i + 1) & mask_;
        }
        slots_[i] = slot;
    }

    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (s.index != kNil) {
                place(s);
            }
        }
    }

    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t size_ = 0;
};

}  // namespace

std::string_view to_string(Outcome o) {
    switch (o) {
        case Outcome::accepted:
            return "accepted";
        case Outcome::accepted_duplicate:
            return "accepted_duplicate";
        case Outcome::pending:
            return "pending";
        case Outcome::pending_duplicate:
            return "pending_duplicate";
        case Outcome::denied_no_service:
            return "denied_no_service";
        case Outcome::denied_not_allowed:
            return "denied_not_allowed";
        case Outcome::denied_no_address:
            return "denied_no_address";
        case Outcome::denied_unavailable:
            return "denied_unavailable";
        case Outcome::denied_pool_exhausted:
            return "denied_pool_exhausted";
        case Outcome::denied_open_failed:
            return "denied_open_failed";
        case Outcome::acked:
            return "acked";
        case Outcome::ack_unknown:
            return "ack_unknown";
        case Outcome::drop_too_short:
            return "drop_too_short";
        case Outcome::drop_too_long:
            return "drop_too_long";
        case Outcome::drop_bad_version:
            return "drop_bad_version";
        case Outcome::drop_reserved_ipv:
            return "drop_reserved_ipv";
        case Outcome::drop_not_for_server:
            return "drop_not_for_server";
        case Outcome::drop_iwpm_disabled:
            return "drop_iwpm_disabled";
        case Outcome::drop_bad_request:
            return "drop_bad_request";
        case Outcome::drop_rate_limited:
            return "drop_rate_limited";
        case Outcome::drop_quenched:
            return "drop_quenched";
        case Outcome::count_:
            break;
    }
    return "?";
}

bool is_drop(Outcome o) {
    return o >= Outcome::drop_too_short && o < Outcome::count_;
}

Counters& Counters::operator+=(const Counters& o) {
    for (std::size_t i = 0; i < kOutcomeCount; ++i) {
        outcome[i] += o.outcome[i];
    }
    datagrams += o.datagrams;
    requests += o.requests;
    iwpm_requests += o.iwpm_requests;
    superseded += o.superseded;
    timeouts += o.timeouts;
    shed += o.shed;
    released_on_deny += o.released_on_deny;
    quench_events += o.quench_events;
    return *this;
}

// Transaction table: a slab of entries threaded on one FIFO ordered by PMAck
// deadline (every transaction of a shard has the same timeout, so appending
// at the tail keeps it sorted and the oldest un-acked entry is the head),
// and two indexes into the slab.
struct Pmsp::Table {
    struct Entry {
        pm::Message request;
        pm::Endpoint sdp;
        TimePoint expires;
        bool pending = false;  // on-demand: waiting for its listener (sdp.port is 0)
        std::uint32_t prev = kNil;
        std::uint32_t next = kNil;
    };

    explicit Table(std::uint64_t seed) : hash4{seed}, hash3{seed ^ 0x5bd1e995} {}

    std::vector<Entry> slab;
    std::vector<std::uint32_t> free_slots;
    SlabList order;  // by PMAck deadline, the oldest first
    Hash4 hash4;
    Hash3 hash3;
    IndexTable by_tuple;      // Key4 -> slot: duplicate detection (7.5.2)
    IndexTable by_handle;     // Key3 -> slot: PMAck matching
    std::size_t pending = 0;  // entries with pending set

    std::size_t size() const { return by_tuple.size(); }

    std::uint32_t find_tuple(const Key4& k) const {
        return by_tuple.find(hash4(k),
                             [&](std::uint32_t i) { return key4_of(slab[i].request) == k; });
    }
    std::uint32_t find_handle(const Key3& k) const {
        return by_handle.find(hash3(k),
                              [&](std::uint32_t i) { return key3_of(slab[i].request) == k; });
    }

    std::uint32_t insert(const pm::Message& req, const pm::Endpoint& sdp, TimePoint expires) {
        std::uint32_t i;
        if (!free_slots.empty()) {
            i = free_slots.back();
            free_slots.pop_back();
        } else {
            i = static_cast<std::uint32_t>(slab.size());
            slab.emplace_back();
        }
        slab[i].request = req;
        slab[i].sdp = sdp;
        slab[i].expires = expires;
        slab[i].pending = false;
        order.push_back(slab, i);
        by_tuple.insert(hash4(key4_of(req)), i);
        by_handle.insert(hash3(key3_of(req)), i);
        return i;
    }

    void release(std::uint32_t i) {
        if (slab[i].pending) {
            slab[i].pending = false;
            --pending;
        }
        order.unlink(slab, i);
        by_tuple.erase(hash4(key4_of(slab[i].request)), i);
        by_handle.erase(hash3(key3_of(slab[i].request)), i);
        free_slots.push_back(i);
    }

    void touch(std::uint32_t i, TimePoint expires) {
        slab[i].expires = expires;
        order.unlink(slab, i);
        order.push_back(slab, i);
    }
};

Pmsp::Pmsp(Limits limits, std::shared_ptr<const Registry> registry, std::uint64_t hash_seed)
    : limits_(limits),
      seed_(hash_seed),
      limiter_(limits.per_source, hash_seed ^ 0x6a09e667f3bcc908ull),
      quench_(limits.quench, hash_seed ^ 0xbb67ae8584caa73bull),
      registry_(registry ? std::move(registry) : std::make_shared<const Registry>()),
      table_(std::make_unique<Table>(hash_seed)) {}

Pmsp::~Pmsp() = default;

Result Pmsp::count(Outcome o, std::optional<pm::Wire> reply) {
    ++counters_.outcome[static_cast<std::size_t>(o)];
    return Result{o, reply, std::nullopt};
}

Result Pmsp::on_datagram(std::span<const std::uint8_t> bytes, const pm::Endpoint& source,
                         const pm::IpAddress& /*local*/, TimePoint now) {
    ++counters_.datagrams;
    auto decoded = pm::decode(bytes);
    if (auto* err = std::get_if<pm::DecodeError>(&decoded)) {
        switch (*err) {
            case pm::DecodeError::too_short:
                return count(Outcome::drop_too_short);
            case pm::DecodeError::too_long:
                return count(Outcome::drop_too_long);
            case pm::DecodeError::bad_version:
                return count(Outcome::drop_bad_version);
            case pm::DecodeError::reserved_ipv:
                return count(Outcome::drop_reserved_ipv);
        }
    }
    const auto& msg = std::get<pm::Message>(decoded);
    switch (msg.type) {
        case pm::MessageType::request:
            if (msg.iwpm_trailer && !limits_.accept_iwpm_request) {
                return count(Outcome::drop_iwpm_disabled);
            }
            return admit_request(msg, source, now);
        case pm::MessageType::ack: {
            Result r = handle_ack(msg);
            if (r.outcome == Outcome::acked && quench_.enabled()) {
                quench_.on_ack(source.address, now);
            }
            return r;
        }
        case pm::MessageType::accept:
        case pm::MessageType::deny:
            break;
    }
    return count(Outcome::drop_not_for_server);
}

namespace {

// The SDP Addresses of `s` usable for `req`: same IP version as the request,
// with a wildcard address standing for the ApIPAddr asked for. `fn` gets the
// endpoint to hand out and the index of the configured address (its health).
template <typename Fn>
void for_each_candidate(const Service& s, const pm::Message& req, Fn&& fn) {
    for (std::size_t i = 0; i < s.sdp.size(); ++i) {
        const auto& e = s.sdp[i];
        if (e.address.is_unspecified()) {
            fn(pm::Endpoint{req.ap_addr, e.port}, i);
        } else if (e.address.family() == req.ipv) {
            fn(e, i);
        }
    }
}

bool allowed(const Service& s, const pm::Message& req, const pm::Endpoint& source) {
    if (s.allow.empty()) {
        return true;
    }
    bool src_ok = false;
    bool cp_ok = false;
    for (const auto& p : s.allow) {
        src_ok = src_ok || p.contains(source.address);
        cp_ok = cp_ok || p.contains(req.cp_addr);
    }
    return src_ok && cp_ok;
}

}  // namespace

// Section 15.2 defences in front of the protocol: a quenched source and a
// source over its token bucket are dropped before they can create state.
Result Pmsp::admit_request(const pm::Message& req, const pm::Endpoint& source, TimePoint now) {
    ++counters_.requests;
    if (req.iwpm_trailer) {
        ++counters_.iwpm_requests;
    }
    if (quench_.enabled()) {
        auto before = quench_.counters().quench_events;
        bool quenched = quench_.quenched(source.address, now);
        counters_.quench_events += quench_.counters().quench_events - before;
        if (quenched) {
            return count(Outcome::drop_quenched);
        }
    }
    if (limiter_.enabled() && !limiter_.allow(source.address, now)) {
        return count(Outcome::drop_rate_limited);
    }
    Result r = handle_request(req, source, now);
    // An on-demand offer counts as a PMAccept for the quench (it becomes one
    // or a PMDeny once the listener is open or not).
    if ((r.outcome == Outcome::accepted || r.outcome == Outcome::pending) && quench_.enabled()) {
        auto before = quench_.counters().quench_events;
        quench_.on_accept(source.address, now);
        counters_.quench_events += quench_.counters().quench_events - before;
    }
    return r;
}

Result Pmsp::handle_request(const pm::Message& req, const pm::Endpoint& source, TimePoint now) {
    if (req.cp_port == 0 || req.cp_addr.is_unspecified() || req.ap_addr.is_unspecified()) {
        return count(Outcome::drop_bad_request);
    }

    // 7.5.2: a PMReq whose 5-tuple matches live state is a duplicate; the same
    // 4-tuple with a new AssocHandle discards the prior state.
    std::uint32_t existing = kNil;
    if (std::uint32_t found = table_->find_tuple(key4_of(req)); found != kNil) {
        if (table_->slab[found].request.assoc_handle == req.assoc_handle) {
            if (table_->slab[found].pending) {
                // Its listener is being opened: the answer to this
                // duplicate is the one that comes then (7.4: the state of
                // the service at that time).
                return count(Outcome::pending_duplicate);
            }
            existing = found;
        } else {
            table_->release(found);
            ++counters_.superseded;
        }
    }

    // Decide from the most recent state of the service (7.5.2).
    Outcome deny_reason = Outcome::denied_no_service;
    std::optional<pm::Endpoint> chosen;
    const Service* service = registry_->find(req.ap_addr, req.ap_port);
    if (service && !allowed(*service, req, source)) {
        deny_reason = Outcome::denied_not_allowed;
    } else if (service) {
        chosen = choose(*service, req, existing, deny_reason);
    }

    if (!chosen) {
        if (service) {
            registry_->note_deny(*service);
        }
        if (existing != kNil) {
            table_->release(existing);
            ++counters_.released_on_deny;
        }
        return count(deny_reason, pm::encode(pm::make_deny(req, limits_.deny_ap_port)));
    }

    if (service->on_demand) {
        return handle_on_demand(req, *service, *chosen, existing, now);
    }
    auto reply = pm::encode(pm::make_accept(req, *chosen, service->pm_time));
    registry_->note_accept(*service, existing != kNil);
    TimePoint expires = now + limits_.ack_timeout;
    if (existing != kNil) {
        table_->slab[existing].sdp = *chosen;
        table_->touch(existing, expires);
        return count(Outcome::accepted_duplicate, reply);
    }
    while (table_->size() >= limits_.max_transactions && table_->order.head != kNil) {
        table_->release(table_->order.head);
        ++counters_.shed;
    }
    table_->insert(req, *chosen, expires);
    return count(Outcome::accepted, reply);
}

// An on-demand service: a duplicate keeps the port it was given (PMAccept
// re-sent, the pool restarts its PMAck timer); a new transaction waits for
// a listener from the pool, within the shard's bound of waiting ones.
Result Pmsp::handle_on_demand(const pm::Message& req, const Service& service,
                              const pm::Endpoint& chosen, std::uint32_t existing, TimePoint now) {
    if (existing != kNil) {
        auto& e = table_->slab[existing];
        registry_->note_accept(service, true);
        table_->touch(existing, now + limits_.ack_timeout);
        Result r = count(Outcome::accepted_duplicate,
                         pm::encode(pm::make_accept(req, e.sdp, service.pm_time)));
        r.pool = PoolNote{PoolNote::Kind::touch, service.name, req, e.sdp.port};
        return r;
    }
    if (table_->pending >= limits_.max_pending_opens) {
        registry_->note_deny(service);
        return count(Outcome::denied_pool_exhausted,
                     pm::encode(pm::make_deny(req, limits_.deny_ap_port)));
    }
    while (table_->size() >= limits_.max_transactions && table_->order.head != kNil) {
        table_->release(table_->order.head);
        ++counters_.shed;
    }
    // The PMAck timer bounds the wait too: a pool that never answers leaves
    // no state behind.
    std::uint32_t i =
        table_->insert(req, pm::Endpoint{chosen.address, 0}, now + limits_.ack_timeout);
    table_->slab[i].pending = true;
    ++table_->pending;
    Result r = count(Outcome::pending);
    r.pool = PoolNote{PoolNote::Kind::open, service.name, req, 0};
    return r;
}

PortResult Pmsp::on_port(const pm::Message& request, std::optional<std::uint16_t> port,
                         Outcome deny_reason, TimePoint now) {
    PortResult out;
    std::uint32_t found = table_->find_tuple(key4_of(request));
    if (found == kNil || table_->slab[found].request.assoc_handle != request.assoc_handle ||
        !table_->slab[found].pending) {
        return out;  // orphan
    }
    out.orphan = false;
    auto& e = table_->slab[found];
    const Service* service = registry_->find(request.ap_addr, request.ap_port);
    if (!port || !service || !service->on_demand) {
        if (service) {
            registry_->note_deny(*service);
        }
        out.orphan = port.has_value();  // opened for a service now gone: release it
        out.outcome = port ? Outcome::denied_no_service : deny_reason;
        ++counters_.outcome[static_cast<std::size_t>(out.outcome)];
        out.reply = pm::encode(pm::make_deny(e.request, limits_.deny_ap_port));
        table_->release(found);
        return out;
    }
    e.pending = false;
    --table_->pending;
    e.sdp.port = *port;
    table_->touch(found, now + limits_.ack_timeout);
    registry_->note_accept(*service, false);
    out.outcome = Outcome::accepted;
    ++counters_.outcome[static_cast<std::size_t>(out.outcome)];
    out.reply = pm::encode(pm::make_accept(e.request, e.sdp, service->pm_time));
    return out;
}

std::size_t Pmsp::pending() const {
    return table_->pending;
}

// Picks the SDP Address for `req` among the candidates whose address is
// available (health: not down), by the service's policy. A retransmitted
// PMReq keeps the address it was given while that address is available.
std::optional<pm::Endpoint> Pmsp::choose(const Service& service, const pm::Message& req,
                                         std::uint32_t existing, Outcome& deny_reason) {
    std::size_t n = 0;
    std::size_t up = 0;
    bool keep = false;
    for_each_candidate(service, req, [&](const pm::Endpoint& e, std::size_t i) {
        ++n;
        if (registry_->available(service, i)) {
            ++up;
            keep = keep || (existing != kNil && table_->slab[existing].sdp == e);
        }
    });
    if (n == 0) {
        deny_reason = Outcome::denied_no_address;
        return std::nullopt;
    }
    if (up == 0) {
        deny_reason = Outcome::denied_unavailable;
        return std::nullopt;
    }
    if (keep) {
        return table_->slab[existing].sdp;
    }
    // The position among all candidates (hash) or among the available ones.
    std::optional<std::size_t> among_all;
    std::uint64_t pick = 0;
    switch (service.policy) {
        case Policy::first:
            break;
        case Policy::round_robin:
            pick = registry_->next_round_robin(service);
            break;
        case Policy::hash: {
            const std::uint64_t h = policy_hash(req.cp_addr);
            among_all = static_cast<std::size_t>(h % n);
            // The client's own address when it is up; else a stable choice
            // among the rest, spread by a second hash so that the clients of
            // a dead address do not all land on its neighbour.
            pick = mix(h, 0x68656c7468ull);
            break;
        }
    }
    std::optional<pm::Endpoint> chosen;
    if (among_all) {
        std::size_t index = 0;
        for_each_candidate(service, req, [&](const pm::Endpoint& e, std::size_t i) {
            if (index++ == *among_all && registry_->available(service, i)) {
                chosen = e;
            }
        });
        if (chosen) {
            return chosen;
        }
    }
    const std::size_t target = static_cast<std::size_t>(pick % up);
    std::size_t index = 0;
    for_each_candidate(service, req, [&](const pm::Endpoint& e, std::size_t i) {
        if (registry_->available(service, i) && index++ == target) {
            chosen = e;
        }
    });
    if (!chosen) {
        // The health checker changed a flag between the passes (they are
        // read without a lock): take any available address, or deny.
        for_each_candidate(service, req, [&](const pm::Endpoint& e, std::size_t i) {
            if (!chosen && registry_->available(service, i)) {
                chosen = e;
            }
        });
        if (!chosen) {
            deny_reason = Outcome::denied_unavailable;
        }
    }
    return chosen;
}

Result Pmsp::handle_ack(const pm::Message& ack) {
    std::uint32_t found = table_->find_handle(key3_of(ack));
    if (found == kNil) {
        return count(Outcome::ack_unknown);
    }
    const auto& entry = table_->slab[found];
    // The PMAck echoes the PMAccept (7.4): the mapped port and address must
    // be the ones handed out, or this acknowledges some other exchange.
    if (entry.pending || ack.ap_port != entry.sdp.port || ack.ap_addr != entry.sdp.address) {
        return count(Outcome::ack_unknown);
    }
    std::optional<PoolNote> note;
    if (const Service* s = registry_->find(entry.request.ap_addr, entry.request.ap_port);
        s && s->on_demand) {
        note = PoolNote{PoolNote::Kind::acked, s->name, entry.request, entry.sdp.port};
    }
    table_->release(found);
    Result r = count(Outcome::acked);
    r.pool = std::move(note);
    return r;
}

std::size_t Pmsp::on_timer(TimePoint now) {
    std::size_t released = 0;
    while (table_->order.head != kNil && table_->slab[table_->order.head].expires <= now) {
        table_->release(table_->order.head);
        ++counters_.timeouts;
        ++released;
    }
    return released;
}

std::optional<TimePoint> Pmsp::next_deadline() const {
    if (table_->order.head == kNil) {
        return std::nullopt;
    }
    return table_->slab[table_->order.head].expires;
}

void Pmsp::set_registry(std::shared_ptr<const Registry> registry) {
    registry_ = registry ? std::move(registry) : std::make_shared<const Registry>();
}

void Pmsp::set_limits(const Limits& limits) {
    // New defence settings start with fresh per-source state.
    if (limits.per_source.rate != limits_.per_source.rate ||
        limits.per_source.burst != limits_.per_source.burst ||
        limits.per_source.max_sources != limits_.per_source.max_sources) {
        limiter_ = SourceLimiter(limits.per_source, seed_ ^ 0x6a09e667f3bcc908ull);
    }
    if (limits.quench.max_unacked != limits_.quench.max_unacked ||
        limits.quench.window != limits_.quench.window ||
        limits.quench.period != limits_.quench.period ||
        limits.quench.max_sources != limits_.quench.max_sources) {
        quench_ = SourceQuench(limits.quench, seed_ ^ 0xbb67ae8584caa73bull);
    }
    limits_ = limits;
    while (table_->size() > limits_.max_transactions && table_->order.head != kNil) {
        table_->release(table_->order.head);
        ++counters_.shed;
    }
}

std::size_t Pmsp::transactions() const {
    return table_->size();
}

void Pmsp::for_each_transaction(const std::function<void(const TransactionView&)>& fn) const {
    for (std::uint32_t i = table_->order.head; i != kNil; i = table_->slab[i].next) {
        const auto& e = table_->slab[i];
        const Service* s = registry_->find(e.request.ap_addr, e.request.ap_port);
        fn(TransactionView{e.request, e.sdp, s ? std::string_view(s->name) : "", e.expires,
                           e.pending});
    }
}

}  // namespace pmd
