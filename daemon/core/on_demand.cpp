// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/on_demand.hpp"

#include <algorithm>

namespace pmd {

OnDemandPool::Pool* OnDemandPool::find(std::string_view name) {
    auto it = pools_.find(name);
    return it == pools_.end() ? nullptr : &it->second;
}

const OnDemandPool::Pool* OnDemandPool::find(std::string_view name) const {
    auto it = pools_.find(name);
    return it == pools_.end() ? nullptr : &it->second;
}

bool OnDemandPool::has_service(std::string_view name) const {
    return find(name) != nullptr;
}

void OnDemandPool::add_service(const std::string& name, const OnDemand& od,
                               std::chrono::milliseconds hold) {
    Pool& p = pools_[name];
    p.od = od;
    p.hold = hold;
    // Ports still in use stay (until released); a port no longer in the
    // list is dropped once it is free.
    for (auto it = p.slots.begin(); it != p.slots.end();) {
        const bool listed = std::binary_search(od.ports.begin(), od.ports.end(), it->first);
        if (!listed && it->second.state == State::free) {
            std::erase(p.free, it->first);
            it = p.slots.erase(it);
        } else {
            ++it;
        }
    }
    for (std::uint16_t port : od.ports) {
        if (p.slots.emplace(port, Slot{}).second) {
            p.free.push_back(port);
        }
    }
}

OnDemandPool::Step OnDemandPool::remove_service(std::string_view name) {
    Step step;
    auto it = pools_.find(name);
    if (it == pools_.end()) {
        return step;
    }
    for (const auto& [port, slot] : it->second.slots) {
        if (slot.state == State::opening) {
            step.answers.push_back(Answer{slot.token, std::nullopt, false});
        }
    }
    pools_.erase(it);
    return step;
}

OnDemandPool::Step OnDemandPool::open(std::string_view service, Token token, TimePoint now) {
    Step step;
    Pool* p = find(service);
    if (p == nullptr) {
        step.answers.push_back(Answer{token, std::nullopt, false});
        return step;
    }
    // A port dropped from the list by a renewal is not handed out again.
    while (!p->free.empty() &&
           !std::binary_search(p->od.ports.begin(), p->od.ports.end(), p->free.front())) {
        p->slots.erase(p->free.front());
        p->free.pop_front();
    }
    if (p->free.empty()) {
        ++counters_.exhausted;
        step.answers.push_back(Answer{token, std::nullopt, true});
        return step;
    }
    const std::uint16_t port = p->free.front();
    p->free.pop_front();
    Slot& s = p->slots[port];
    s = Slot{State::opening, next_id_++, token, now + timers_.open_timeout};
    ++p->used;
    ++counters_.opens;
    step.commands.push_back(Command{Command::Kind::open, std::string(service), port, s.id});
    return step;
}

OnDemandPool::Step OnDemandPool::opened(std::string_view service, std::uint64_t id,
                                        std::uint16_t port, bool ok, TimePoint now) {
    Step step;
    Pool* p = find(service);
    auto it = p ? p->slots.find(port) : decltype(p->slots.end()){};
    if (p == nullptr || it == p->slots.end() || it->second.state != State::opening ||
        it->second.id != id) {
        // Late (after open_timeout, which sent a close already) or made up.
        ++counters_.bad_answers;
        return step;
    }
    Slot& s = it->second;
    if (!ok) {
        ++counters_.open_failures;
        step.answers.push_back(Answer{s.token, std::nullopt, false});
        release(std::string(service), *p, port, false, step);
        return step;
    }
    ++counters_.opened;
    step.answers.push_back(Answer{s.token, port, false});
    s.state = State::offered;
    s.deadline = now + timers_.ack_timeout;
    return step;
}

OnDemandPool::Slot* OnDemandPool::slot_in(std::string_view service, std::uint16_t port,
                                          State state) {
    Pool* p = find(service);
    if (p == nullptr) {
        return nullptr;
    }
    auto it = p->slots.find(port);
    return it != p->slots.end() && it->second.state == state ? &it->second : nullptr;
}

void OnDemandPool::touch(std::string_view service, std::uint16_t port, TimePoint now) {
    if (Slot* s = slot_in(service, port, State::offered)) {
        s->deadline = now + timers_.ack_timeout;
    }
}

void OnDemandPool::acked(std::string_view service, std::uint16_t port, TimePoint now) {
    if (Slot* s = slot_in(service, port, State::offered)) {
        // The client has its answer; it connects within its cache lifetime
        // (single use: within the PMAck timeout).
        s->state = State::held;
        s->deadline = now + std::max(find(service)->hold, timers_.ack_timeout);
    }
}

OnDemandPool::Step OnDemandPool::connected(std::string_view service, std::uint16_t port,
                                           TimePoint now) {
    Step step;
    Pool* p = find(service);
    auto it = p ? p->slots.find(port) : decltype(p->slots.end()){};
    if (p == nullptr || it == p->slots.end() ||
        (it->second.state != State::offered && it->second.state != State::held)) {
        ++counters_.bad_answers;
        return step;
    }
    ++counters_.connections;
    if (p->od.single_use) {
        ++counters_.released_used;
        release(std::string(service), *p, port, true, step);
        return step;
    }
    if (it->second.state == State::offered) {
        it->second.state = State::held;
        it->second.deadline = now + std::max(p->hold, timers_.ack_timeout);
    }
    return step;
}

OnDemandPool::Step OnDemandPool::cancel(std::string_view service, std::uint16_t port) {
    Step step;
    if (slot_in(service, port, State::offered) != nullptr) {
        ++counters_.released_unused;
        release(std::string(service), *find(service), port, true, step);
    }
    return step;
}

void OnDemandPool::release(const std::string& name, Pool& p, std::uint16_t port, bool close,
                           Step& step) {
    p.slots[port] = Slot{};
    p.free.push_back(port);
    --p.used;
    if (close) {
        step.commands.push_back(Command{Command::Kind::close, name, port, 0});
    }
}

OnDemandPool::Step OnDemandPool::on_timer(TimePoint now) {
    Step step;
    for (auto& [name, p] : pools_) {
        for (auto& [port, s] : p.slots) {
            if (s.state == State::free || s.deadline > now) {
                continue;
            }
            switch (s.state) {
                case State::opening:
                    // The acceptor may still open it: the close that follows
                    // on the same ordered channel undoes that.
                    ++counters_.open_timeouts;
                    step.answers.push_back(Answer{s.token, std::nullopt, false});
                    break;
                case State::offered:
                    ++counters_.released_unused;
                    break;
                case State::held:
                    ++counters_.released_used;
                    break;
                case State::free:
                    break;
            }
            release(name, p, port, true, step);
        }
    }
    return step;
}

std::optional<TimePoint> OnDemandPool::next_deadline() const {
    std::optional<TimePoint> next;
    for (const auto& [name, p] : pools_) {
        for (const auto& [port, s] : p.slots) {
            if (s.state != State::free && (!next || s.deadline < *next)) {
                next = s.deadline;
            }
        }
    }
    return next;
}

std::size_t OnDemandPool::in_use(std::string_view service) const {
    const Pool* p = find(service);
    return p ? p->used : 0;
}

std::size_t OnDemandPool::in_use() const {
    std::size_t n = 0;
    for (const auto& [name, p] : pools_) {
        n += p.used;
    }
    return n;
}

}  // namespace pmd
