// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/cluster.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <tuple>

namespace pmd::cluster {

namespace {

constexpr std::size_t kMaxMember = 64;
constexpr std::string_view kRegistrations = "registrations/";

bool member_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

// What the registration is as a key's value: another host's pid or lease
// clock means nothing there; the owner's replica removes the key when
// either ends.
Registration shared_value(const Registration& r) {
    Registration value = r;
    value.process.reset();
    value.lease.reset();
    value.expires.reset();
    return value;
}

}  // namespace

bool is_valid_member(std::string_view member) {
    return !member.empty() && member.size() <= kMaxMember &&
           std::all_of(member.begin(), member.end(), member_char);
}

std::string validate(const Settings& s) {
    if (s.prefix.empty() || s.prefix.front() != '/' || s.prefix.back() != '/') {
        return "prefix must start and end with '/' (e.g. \"/sdp-pm/\")";
    }
    if (s.prefix.size() > 256) {
        return "prefix is longer than 256 bytes";
    }
    if (!is_valid_member(s.member)) {
        return "member must be 1 to 64 letters, digits, '.', '_' or '-'";
    }
    if (s.lease_ttl < std::chrono::seconds(2) || s.lease_ttl > std::chrono::seconds(3600)) {
        return "lease_ttl must be between 2 s and 1 h";
    }
    if (s.max_staleness < std::chrono::milliseconds(100)) {
        return "max_staleness must be at least 100 ms";
    }
    if (s.retry_interval < std::chrono::milliseconds(10)) {
        return "retry_interval must be at least 10 ms";
    }
    return {};
}

std::optional<EndpointUrl> parse_endpoint_url(std::string_view url) {
    EndpointUrl out;
    if (url.starts_with("http://")) {
        url.remove_prefix(7);
    } else if (url.starts_with("https://")) {
        out.tls = true;
        url.remove_prefix(8);
    } else {
        return std::nullopt;
    }
    if (url.ends_with("/")) {
        url.remove_suffix(1);
    }
    std::string_view port;
    if (url.starts_with("[")) {
        const auto close = url.find(']');
        if (close == std::string_view::npos || close + 1 >= url.size() || url[close + 1] != ':') {
            return std::nullopt;
        }
        out.host = std::string(url.substr(1, close - 1));
        port = url.substr(close + 2);
        if (!pm::IpAddress::parse(out.host)) {
            return std::nullopt;
        }
    } else {
        const auto colon = url.rfind(':');
        if (colon == std::string_view::npos) {
            return std::nullopt;
        }
        out.host = std::string(url.substr(0, colon));
        port = url.substr(colon + 1);
        const auto host_char = [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-';
        };
        if (out.host.empty() || out.host.size() > 253 ||
            !std::all_of(out.host.begin(), out.host.end(), host_char)) {
            return std::nullopt;
        }
    }
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || port.empty() || value == 0 ||
        value > 65535) {
        return std::nullopt;
    }
    out.port = static_cast<std::uint16_t>(value);
    return out;
}

bool shareable(const Registration& r) {
    if (r.service.on_demand || !r.service.conventional_address) {
        return false;
    }
    return std::none_of(r.service.sdp.begin(), r.service.sdp.end(),
                        [](const pm::Endpoint& ep) { return ep.address.is_unspecified(); });
}

std::string registrations_prefix(std::string_view prefix) {
    return std::string(prefix) + std::string(kRegistrations);
}

std::string key_of(std::string_view prefix, std::string_view name, std::string_view member) {
    return registrations_prefix(prefix) + std::string(name) + "/" + std::string(member);
}

std::optional<KeyParts> parse_key(std::string_view prefix, std::string_view key) {
    const std::string head = registrations_prefix(prefix);
    if (!key.starts_with(head)) {
        return std::nullopt;
    }
    key.remove_prefix(head.size());
    const auto slash = key.find('/');
    if (slash == std::string_view::npos) {
        return std::nullopt;
    }
    KeyParts parts{std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
    if (parts.name.empty() || !is_valid_member(parts.member)) {
        return std::nullopt;
    }
    return parts;
}

Replica::Replica(Settings s) : settings_(std::move(s)) {}

void Replica::start(TimePoint now, Actions& out) {
    if (started_) {
        return;
    }
    started_ = true;
    lease_state_ = LeaseState::granting;
    out.requests.push_back(Request{Request::Kind::grant, {}, {}, 0, 0});
    ask_snapshot(out);
    note_freshness(now, out);
}

void Replica::set_own(std::span<const Registration> own, TimePoint now, Actions& out) {
    std::map<std::string, Registration> next;
    for (const Registration& r : own) {
        if (!shareable(r)) {
            continue;  // stays local: see shareable()
        }
        next.emplace(key_of(settings_.prefix, r.service.name, settings_.member), shared_value(r));
    }
    if (next == own_) {
        return;
    }
    own_ = std::move(next);
    out.view_changed = true;
    sync(out);
    note_freshness(now, out);
}

void Replica::contact(TimePoint now) {
    last_contact_ = now;
}

void Replica::failed(TimePoint now) {
    ++counters_.etcd_errors;
    if (!retry_at_) {
        retry_at_ = now + settings_.retry_interval;
    }
}

void Replica::granted(bool ok, std::int64_t lease, std::chrono::seconds ttl, TimePoint now,
                      Actions& out) {
    if (!ok || lease == 0 || ttl.count() <= 0) {
        lease_state_ = LeaseState::none;
        failed(now);
        note_freshness(now, out);
        return;
    }
    contact(now);
    ++counters_.leases_granted;
    lease_state_ = LeaseState::held;
    lease_ = lease;
    lease_ttl_ = ttl;
    next_keepalive_ = now + std::max<std::chrono::milliseconds>(
                                std::chrono::milliseconds(100),
                                std::chrono::duration_cast<std::chrono::milliseconds>(ttl) / 3);
    written_.clear();  // everything goes again, with this lease
    sync(out);
    note_freshness(now, out);
}

void Replica::kept_alive(bool ok, std::chrono::seconds ttl, TimePoint now, Actions& out) {
    keepalive_in_flight_ = false;
    if (lease_state_ != LeaseState::held) {
        return;
    }
    const auto third = std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(100),
        std::chrono::duration_cast<std::chrono::milliseconds>(lease_ttl_) / 3);
    if (!ok) {
        ++counters_.etcd_errors;
        next_keepalive_ =
            now + std::min<std::chrono::milliseconds>(third, settings_.retry_interval);
        note_freshness(now, out);
        return;
    }
    contact(now);
    if (ttl.count() <= 0) {
        // The lease expired (we were cut off for longer than its TTL): its
        // keys are gone; take a new lease and write them again.
        ++counters_.leases_lost;
        lease_state_ = LeaseState::granting;
        lease_ = 0;
        next_keepalive_.reset();
        written_.clear();
        out.requests.push_back(Request{Request::Kind::grant, {}, {}, 0, 0});
    } else {
        next_keepalive_ = now + third;
    }
    note_freshness(now, out);
}

void Replica::put_done(const std::string& key, bool ok, TimePoint now, Actions& out) {
    auto flight = in_flight_.extract(key);
    if (!ok) {
        failed(now);
        note_freshness(now, out);
        return;
    }
    contact(now);
    ++counters_.puts;
    if (!flight.empty() && flight.mapped().value && flight.mapped().lease == lease_ &&
        lease_state_ == LeaseState::held) {
        // What was put; a later change is put again by sync(). A put under
        // a lease lost meanwhile does not count.
        written_[key] = std::move(*flight.mapped().value);
    }
    sync(out);
    note_freshness(now, out);
}

void Replica::del_done(const std::string& key, bool ok, TimePoint now, Actions& out) {
    in_flight_.erase(key);
    if (!ok) {
        failed(now);
        note_freshness(now, out);
        return;
    }
    contact(now);
    ++counters_.deletes;
    written_.erase(key);
    // The watch will say so too; until then the stale entry must not be
    // deleted twice.
    if (!own_.contains(key)) {
        view_.erase(key);
    }
    sync(out);
    note_freshness(now, out);
}

void Replica::apply(const KeyValue& kv) {
    auto parts = parse_key(settings_.prefix, kv.key);
    if (!parts || !kv.registration || kv.registration->service.name != parts->name) {
        ++counters_.bad_values;
        view_.erase(kv.key);
        return;
    }
    Entry e;
    e.member = parts->member;
    e.registration = *kv.registration;
    e.registration.service.dynamic = true;
    e.create_revision = kv.create_revision;
    e.mod_revision = kv.mod_revision;
    view_[kv.key] = std::move(e);
}

void Replica::snapshot_done(bool ok, std::vector<KeyValue> kvs, std::int64_t revision,
                            TimePoint now, Actions& out) {
    snapshot_in_flight_ = false;
    if (!ok) {
        want_snapshot_ = true;
        failed(now);
        note_freshness(now, out);
        return;
    }
    contact(now);
    ++counters_.snapshots;
    view_.clear();
    for (const KeyValue& kv : kvs) {
        apply(kv);
    }
    revision_ = revision;
    have_snapshot_ = true;
    view_current_ = now;
    watch_failures_ = 0;
    out.view_changed = true;
    // An own key etcd no longer holds (deleted while the watch was away)
    // is written again.
    std::erase_if(written_, [this](const auto& kv) { return !view_.contains(kv.first); });
    // What etcd holds of ours is now known: sync() puts what it lacks and
    // deletes what a previous run left.
    ask_watch(out, now);
    sync(out);
    note_freshness(now, out);
}

void Replica::events(std::vector<WatchEvent> events, std::int64_t revision, TimePoint now,
                     Actions& out) {
    contact(now);
    watch_active_ = now;
    view_current_ = now;
    watch_failures_ = 0;
    if (events.empty()) {
        note_freshness(now, out);  // the stream is live; nothing changed
        return;
    }
    for (const WatchEvent& ev : events) {
        ++counters_.events;
        if (ev.deleted) {
            view_.erase(ev.kv.key);
            // One of ours went (its lease expired while we were away, or
            // someone deleted it): write it again.
            written_.erase(ev.kv.key);
        } else {
            apply(ev.kv);
        }
    }
    if (!events.empty()) {
        out.view_changed = true;
    }
    revision_ = std::max(revision_, revision);
    sync(out);
    note_freshness(now, out);
}

void Replica::watch_ended(bool compacted, TimePoint now, Actions& out) {
    watching_ = false;
    if (compacted) {
        // Events were compacted away: the view can only be rebuilt whole.
        ++counters_.compactions;
        contact(now);
        ask_snapshot(out);
    } else {
        ++counters_.watch_restarts;
        // The same failure again and again (a batch too large, a rejected
        // watch): read the prefix whole instead.
        if (++watch_failures_ >= 3) {
            watch_failures_ = 0;
            want_snapshot_ = true;
        } else {
            want_watch_ = true;
        }
        failed(now);
    }
    note_freshness(now, out);
}

void Replica::ask_snapshot(Actions& out) {
    if (snapshot_in_flight_) {
        return;
    }
    want_snapshot_ = false;
    snapshot_in_flight_ = true;
    Request r;
    r.kind = Request::Kind::snapshot;
    out.requests.push_back(std::move(r));
}

std::chrono::milliseconds Replica::watch_refresh() const {
    return std::max<std::chrono::milliseconds>(std::chrono::milliseconds(500),
                                               settings_.max_staleness / 2);
}

void Replica::ask_watch(Actions& out, std::optional<TimePoint> now) {
    if (watching_) {
        return;
    }
    want_watch_ = false;
    watching_ = true;
    watch_active_ = now ? now : last_contact_;
    Request r;
    r.kind = Request::Kind::watch;
    r.revision = revision_ + 1;
    out.requests.push_back(std::move(r));
}

void Replica::sync(Actions& out) {
    if (lease_state_ != LeaseState::held || retry_at_ || !have_snapshot_) {
        return;  // after the lease, the snapshot and any retry wait
    }
    for (const auto& [key, reg] : own_) {
        if (in_flight_.contains(key)) {
            continue;
        }
        auto w = written_.find(key);
        if (w != written_.end() && w->second == reg) {
            continue;
        }
        in_flight_.emplace(key, Flight{reg, lease_});
        Request r;
        r.kind = Request::Kind::put;
        r.key = key;
        r.registration = reg;
        r.lease = lease_;
        out.requests.push_back(std::move(r));
    }
    std::set<std::string> stale;
    for (const auto& [key, reg] : written_) {
        if (!own_.contains(key)) {
            stale.insert(key);
        }
    }
    for (const auto& [key, entry] : view_) {
        if (entry.member == settings_.member && !own_.contains(key)) {
            stale.insert(key);
        }
    }
    for (const std::string& key : stale) {
        if (in_flight_.contains(key)) {
            continue;
        }
        in_flight_.emplace(key, Flight{std::nullopt, 0});
        Request r;
        r.kind = Request::Kind::del;
        r.key = key;
        out.requests.push_back(std::move(r));
    }
}

void Replica::on_timer(TimePoint now, Actions& out) {
    if (retry_at_ && *retry_at_ <= now) {
        retry_at_.reset();
        if (lease_state_ == LeaseState::none) {
            lease_state_ = LeaseState::granting;
            out.requests.push_back(Request{Request::Kind::grant, {}, {}, 0, 0});
        }
        if (want_snapshot_) {
            ask_snapshot(out);
        }
        if (want_watch_ && have_snapshot_) {
            ask_watch(out, now);
        }
        sync(out);
    }
    if (watching_ && watch_active_ && now - *watch_active_ >= watch_refresh()) {
        // Quiet for long: maybe a dead stream. Opening it anew from
        // revision + 1 loses and repeats nothing.
        ++counters_.watch_refreshes;
        watching_ = false;
        ask_watch(out, now);
    }
    if (lease_state_ == LeaseState::held && !keepalive_in_flight_ && next_keepalive_ &&
        *next_keepalive_ <= now) {
        keepalive_in_flight_ = true;
        next_keepalive_.reset();
        Request r;
        r.kind = Request::Kind::keepalive;
        r.lease = lease_;
        out.requests.push_back(std::move(r));
    }
    note_freshness(now, out);
}

std::optional<TimePoint> Replica::next_wakeup() const {
    std::optional<TimePoint> next;
    const auto consider = [&next](std::optional<TimePoint> t) {
        if (t && (!next || *t < *next)) {
            next = t;
        }
    };
    consider(retry_at_);
    if (!keepalive_in_flight_) {
        consider(next_keepalive_);
    }
    if (watching_ && watch_active_) {
        consider(*watch_active_ + watch_refresh());
    }
    if (reported_fresh_ && view_current_) {
        consider(*view_current_ + settings_.max_staleness + std::chrono::milliseconds(1));
    }
    return next;
}

bool Replica::fresh(TimePoint now) const {
    return have_snapshot_ && view_current_ && now - *view_current_ <= settings_.max_staleness;
}

void Replica::note_freshness(TimePoint now, Actions& out) {
    const bool f = fresh(now);
    if (f != reported_fresh_) {
        reported_fresh_ = f;
        out.view_changed = true;
    }
}

Replica::Merged Replica::merge(std::span<const Service> statics,
                               const std::map<std::string, Registration>& own,
                               bool with_view) const {
    struct Candidate {
        std::int64_t create_revision;
        const std::string* member;
        const Registration* registration;
    };
    std::vector<Candidate> candidates;
    for (const auto& [key, entry] : view_) {
        if (with_view && entry.member != settings_.member) {
            candidates.push_back({entry.create_revision, &entry.member, &entry.registration});
        }
    }
    for (const auto& [key, reg] : own) {
        auto it = view_.find(key);
        const std::int64_t rev = it != view_.end() ? it->second.create_revision
                                                   : std::numeric_limits<std::int64_t>::max();
        candidates.push_back({rev, &settings_.member, &reg});
    }
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        return std::tie(a.create_revision, *a.member, a.registration->service.name) <
               std::tie(b.create_revision, *b.member, b.registration->service.name);
    });
    Merged m;
    std::vector<Registration> first;  // the entry that made each service, in order
    std::map<std::string, std::size_t> index;
    for (const Candidate& c : candidates) {
        const Service& s = c.registration->service;
        if (auto it = index.find(s.name); it != index.end()) {
            Service& merged = m.services[it->second];
            if (!same_conventional(merged, s)) {
                ++m.conflicts;
                m.left_out.push_back(c.registration);
                continue;
            }
            for (const pm::Endpoint& ep : s.sdp) {
                if (std::find(merged.sdp.begin(), merged.sdp.end(), ep) == merged.sdp.end() &&
                    merged.sdp.size() < kMaxSdpAddresses) {
                    merged.sdp.push_back(ep);
                }
            }
            continue;
        }
        if (find_conflict(*c.registration, statics, first)) {
            ++m.conflicts;
            m.left_out.push_back(c.registration);
            continue;
        }
        index.emplace(s.name, m.services.size());
        first.push_back(*c.registration);
        m.services.push_back(s);
        m.services.back().dynamic = true;
    }
    std::sort(m.services.begin(), m.services.end(),
              [](const Service& a, const Service& b) { return a.name < b.name; });
    return m;
}

std::vector<Service> Replica::services(std::span<const Service> statics, TimePoint now) const {
    // Not current: only what this replica itself knows to hold.
    return merge(statics, own_, fresh(now)).services;
}

std::optional<std::string> Replica::conflict(const Registration& r) const {
    if (!shareable(r)) {
        return std::nullopt;  // stays local
    }
    // Where the candidate lands in the merge every replica makes: refused
    // only when it would be left out (a renewal keeps its create revision,
    // so it is not refused because of a later clashing entry).
    std::map<std::string, Registration> own = own_;
    const std::string key = key_of(settings_.prefix, r.service.name, settings_.member);
    const Registration* mine = &(own[key] = shared_value(r));
    const Merged with = merge({}, own, true);
    if (std::find(with.left_out.begin(), with.left_out.end(), mine) == with.left_out.end()) {
        return std::nullopt;
    }
    for (const Service& o : with.services) {
        if (o.name == r.service.name && !same_conventional(o, r.service)) {
            return "service \"" + r.service.name +
                   "\" is registered by another replica with conventional address " +
                   conventional_text(o);
        }
        if (o.name != r.service.name && same_conventional(o, r.service)) {
            return "conventional address " + conventional_text(r.service) +
                   " is used by service \"" + o.name + "\" of another replica";
        }
    }
    return "it clashes with another replica's registration";
}

Status Replica::status(std::span<const Service> statics, TimePoint now) const {
    Status st;
    st.fresh = fresh(now);
    st.have_snapshot = have_snapshot_;
    st.lease = lease_state_ == LeaseState::held ? lease_ : 0;
    st.revision = revision_;
    if (last_contact_) {
        st.since_contact =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - *last_contact_);
    }
    if (view_current_) {
        st.view_age = std::chrono::duration_cast<std::chrono::milliseconds>(now - *view_current_);
    }
    st.keys = view_.size();
    st.own = own_.size();
    for (const auto& [key, reg] : own_) {
        if (auto w = written_.find(key); w != written_.end() && w->second == reg) {
            ++st.own_written;
        }
    }
    for (const auto& [key, entry] : view_) {
        ++st.members[entry.member];
    }
    st.conflicts = merge(statics, own_, true).conflicts;
    return st;
}

}  // namespace pmd::cluster
