// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/registrations.hpp"

#include <algorithm>
#include <functional>

namespace pmd {

namespace {

bool by_name(const Registration& a, const Registration& b) {
    return a.service.name < b.service.name;
}

}  // namespace

bool same_conventional(const Service& a, const Service& b) {
    return a.conventional_port == b.conventional_port &&
           a.conventional_address == b.conventional_address;
}

std::string conventional_text(const Service& s) {
    return s.conventional_address
               ? pm::Endpoint{*s.conventional_address, s.conventional_port}.to_string()
               : "*:" + std::to_string(s.conventional_port);
}

std::optional<std::string> find_conflict(const Registration& r, std::span<const Service> statics,
                                         std::span<const Registration> dynamic) {
    const Service& s = r.service;
    for (const Service& o : statics) {
        if (o.name == s.name) {
            return "a static service is named \"" + s.name + "\"";
        }
        if (same_conventional(o, s)) {
            return "conventional address " + conventional_text(s) +
                   " is used by static service \"" + o.name + "\"";
        }
    }
    for (const Registration& d : dynamic) {
        if (d.service.name == s.name) {
            continue;  // a renewal
        }
        if (same_conventional(d.service, s)) {
            return "conventional address " + conventional_text(s) + " is used by service \"" +
                   d.service.name + "\"";
        }
    }
    return std::nullopt;
}

std::optional<WallClock::time_point> RegistrationStore::next_deadline() const {
    std::optional<WallClock::time_point> next;
    for (const Registration& r : regs_) {
        if (r.expires && (!next || *r.expires < *next)) {
            next = r.expires;
        }
    }
    return next;
}

RegistrationStore::Change RegistrationStore::made(bool changed,
                                                  std::vector<Removed> removed) const {
    return Change{changed, std::move(removed), next_deadline()};
}

RegistrationStore::Change RegistrationStore::load(std::vector<Registration> loaded,
                                                  std::span<const Service> statics,
                                                  WallClock::time_point now) {
    const std::size_t count = loaded.size();
    std::vector<Registration> kept;
    std::vector<Removed> removed;
    for (Registration& r : loaded) {
        if (r.expired(now)) {
            ++counts_.expired;
            removed.push_back(Removed{std::move(r), Cause::lease_expired, {}});
            continue;
        }
        if (auto conflict = find_conflict(r, statics, kept)) {
            removed.push_back(Removed{std::move(r), Cause::conflict, std::move(*conflict)});
            continue;
        }
        auto same = std::find_if(kept.begin(), kept.end(), [&](const Registration& k) {
            return k.service.name == r.service.name;
        });
        if (same != kept.end()) {
            *same = std::move(r);
        } else {
            kept.push_back(std::move(r));
        }
    }
    std::sort(kept.begin(), kept.end(), by_name);
    regs_ = std::move(kept);
    return made(regs_.size() != count, std::move(removed));
}

RegistrationStore::Outcome RegistrationStore::add(Registration r, std::span<const Service> statics,
                                                  WallClock::time_point now) {
    Outcome out;
    r.start_lease(now);
    if (auto conflict = find_conflict(r, statics, regs_)) {
        out.refusal = Refusal::conflict;
        out.reason = std::move(*conflict);
        return out;
    }
    auto it = std::lower_bound(regs_.begin(), regs_.end(), r, by_name);
    out.renewal = it != regs_.end() && it->service.name == r.service.name;
    if (out.renewal) {
        *it = std::move(r);
    } else if (regs_.size() >= kMaxRegistrations) {
        out.refusal = Refusal::full;
        return out;
    } else {
        regs_.insert(it, std::move(r));
    }
    ++counts_.changes;
    out.change = made(true);
    return out;
}

RegistrationStore::Outcome RegistrationStore::remove(std::string_view name,
                                                     std::span<const Service> statics) {
    Outcome out;
    auto it = std::find_if(regs_.begin(), regs_.end(),
                           [&](const Registration& o) { return o.service.name == name; });
    if (it == regs_.end()) {
        const bool is_static = std::any_of(statics.begin(), statics.end(),
                                           [&](const Service& s) { return s.name == name; });
        out.refusal = is_static ? Refusal::is_static : Refusal::not_found;
        return out;
    }
    regs_.erase(it);
    ++counts_.changes;
    out.change = made(true);
    return out;
}

RegistrationStore::Change RegistrationStore::erase_where(
    const std::function<std::optional<std::string>(const Registration&)>& why, Cause cause) {
    std::vector<Removed> removed;
    std::erase_if(regs_, [&](Registration& r) {
        auto reason = why(r);
        if (!reason) {
            return false;
        }
        removed.push_back(Removed{r, cause, std::move(*reason)});
        return true;
    });
    if (!removed.empty()) {
        ++counts_.changes;
        if (cause == Cause::lease_expired) {
            counts_.expired += removed.size();
        } else if (cause == Cause::owner_exited) {
            counts_.owner_exits += removed.size();
        }
    }
    const bool changed = !removed.empty();
    return made(changed, std::move(removed));
}

RegistrationStore::Change RegistrationStore::expire(WallClock::time_point now) {
    return erase_where(
        [&](const Registration& r) {
            return r.expired(now) ? std::optional<std::string>("") : std::nullopt;
        },
        Cause::lease_expired);
}

RegistrationStore::Change RegistrationStore::owner_exited(std::int64_t pid) {
    return erase_where(
        [&](const Registration& r) {
            return r.process && r.process->pid == pid ? std::optional<std::string>("")
                                                      : std::nullopt;
        },
        Cause::owner_exited);
}

std::vector<OwnerProcess> RegistrationStore::owners() const {
    std::vector<OwnerProcess> out;
    for (const Registration& r : regs_) {
        if (r.process) {
            out.push_back(*r.process);
        }
    }
    std::sort(out.begin(), out.end(),
              [](const OwnerProcess& a, const OwnerProcess& b) { return a.pid < b.pid; });
    out.erase(
        std::unique(out.begin(), out.end(),
                    [](const OwnerProcess& a, const OwnerProcess& b) { return a.pid == b.pid; }),
        out.end());
    return out;
}

RegistrationStore::Change RegistrationStore::restrict_to(std::span<const Service> statics) {
    return erase_where([&](const Registration& r) { return find_conflict(r, statics, {}); },
                       Cause::conflict);
}

void RegistrationStore::restore(SavePoint p) {
    regs_ = std::move(p.regs);
    counts_ = p.counts;
}

}  // namespace pmd
