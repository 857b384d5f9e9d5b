// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/listen_set.hpp"

#include <algorithm>
#include <random>
#include <string>

#include "daemon/core/listen_plan.hpp"
#include "daemon/io/log.hpp"
#include "daemon/io/reuseport.hpp"

namespace pmd::io {

ListenSet::ListenSet(std::vector<std::unique_ptr<Worker>>& workers)
    : workers_(workers), steering_seed_(std::random_device{}()) {}

ListenSet::~ListenSet() = default;

std::vector<pm::Endpoint> ListenSet::bound() const {
    std::vector<pm::Endpoint> out;
    for (const auto& l : listeners_) {
        out.push_back(l.endpoint);
    }
    return out;
}

std::size_t ListenSet::steered() const {
    return static_cast<std::size_t>(std::count_if(listeners_.begin(), listeners_.end(),
                                                  [](const Listener& l) { return l.steered; }));
}

bool ListenSet::open(const std::vector<pm::Endpoint>& listen) {
    auto p = open_list(listen);
    if (!p) {
        return false;
    }
    listeners_ = std::move(p->next);
    for (const auto& l : listeners_) {
        log::notice("listening on UDP " + l.endpoint.to_string());
        attach(l);
    }
    return true;
}

void ListenSet::adopt(std::vector<std::shared_ptr<UdpSocket>> inherited) {
    for (auto& s : inherited) {
        listeners_.push_back(adopt_one(std::move(s)));
        log::notice("listening on UDP " + listeners_.back().endpoint.to_string() + " (inherited)");
    }
    for (const auto& l : listeners_) {
        attach(l);
    }
}

std::optional<ListenSet::Prepared> ListenSet::prepare(const std::vector<pm::Endpoint>& listen) {
    return open_list(listen);
}

void ListenSet::commit(Prepared p) {
    for (std::size_t i : p.close) {
        log::notice("no longer listening on UDP " + listeners_[i].endpoint.to_string());
        detach(listeners_[i]);
    }
    for (std::size_t i = 0; i < p.next.size(); ++i) {
        if (p.opened[i]) {
            log::notice("listening on UDP " + p.next[i].endpoint.to_string());
            attach(p.next[i]);
        }
    }
    listeners_ = std::move(p.next);
}

std::optional<ListenSet::Prepared> ListenSet::open_list(const std::vector<pm::Endpoint>& listen) {
    const ListenPlan plan = plan_listen(listen, bound());
    Prepared out;
    out.close = plan.close;
    bool skipped_v6 = false;
    auto close_new = [&] {
        for (std::size_t i = 0; i < out.next.size(); ++i) {
            if (out.opened[i]) {
                for (auto& s : out.next[i].sockets) {
                    s->close();
                }
            }
        }
    };
    for (const ListenPlan::Item& item : plan.items) {
        if (item.keep) {
            out.next.push_back(listeners_[*item.keep]);
            out.opened.push_back(false);
            continue;
        }
        const pm::Endpoint& ep = item.endpoint;
        boost::system::error_code ec;
        auto l = open_one(ep, ec);
        if (!l) {
            if (ec == boost::system::errc::address_family_not_supported && ep.address.is_v6()) {
                log::warning("IPv6 is not available, not listening on UDP " + ep.to_string());
                skipped_v6 = true;
                continue;
            }
            log::err("cannot bind UDP " + ep.to_string() + ": " + ec.message());
            close_new();
            return std::nullopt;
        }
        out.next.push_back(std::move(*l));
        out.opened.push_back(true);
    }
    if (out.next.empty()) {
        log::err(skipped_v6 ? "no listen address could be bound" : "no listen address configured");
        return std::nullopt;
    }
    return out;
}

std::optional<ListenSet::Listener> ListenSet::open_one(const pm::Endpoint& ep,
                                                       boost::system::error_code& ec) {
    const auto n = static_cast<unsigned>(workers_.size());
    Listener l;
    l.endpoint = ep;
    if (n > 1) {
        // SO_REUSEPORT would let this group join sockets another process of
        // this user already has on the address: bind once without it first,
        // so that an address in use fails as it does with one worker (and a
        // port 0 gets a port nobody has).
        auto probe = UdpSocket::open(workers_[0]->io(), ep, ec);
        if (!probe) {
            return std::nullopt;
        }
        l.endpoint = probe->endpoint();
        probe->close();
    }
    for (unsigned i = 0; i < n; ++i) {
        auto s = UdpSocket::open(workers_[i]->io(), l.endpoint, ec, n > 1);
        if (!s) {
            for (auto& o : l.sockets) {
                o->close();
            }
            return std::nullopt;
        }
        l.endpoint = s->endpoint();
        l.sockets.push_back(std::move(s));
    }
    steer(l);
    return l;
}

void ListenSet::steer(Listener& l) {
    if (l.sockets.size() < 2) {
        return;
    }
    auto error = attach_source_steering(l.sockets.front()->socket().native_handle(),
                                        static_cast<unsigned>(l.sockets.size()), steering_seed_);
    if (!error) {
        l.steered = true;
        return;
    }
    if (!steering_warned_) {
        steering_warned_ = true;
        log::warning("UDP " + l.endpoint.to_string() + ": cannot steer by source address (" +
                     *error +
                     "); the kernel spreads datagrams by address and port, so limits.per_source "
                     "and limits.source_quench apply per worker, up to " +
                     std::to_string(l.sockets.size()) + " times the configured rate");
    }
}

ListenSet::Listener ListenSet::adopt_one(std::shared_ptr<UdpSocket> s) {
    Listener l;
    l.endpoint = s->endpoint();
    l.sockets.push_back(s);
    const auto n = static_cast<unsigned>(workers_.size());
    if (n < 2) {
        return l;
    }
    if (!has_reuseport(s->socket().native_handle())) {
        log::notice("inherited UDP socket " + l.endpoint.to_string() +
                    " has no SO_REUSEPORT (ReusePort=yes): served by worker 0 only");
        return l;
    }
    for (unsigned i = 1; i < n; ++i) {
        boost::system::error_code ec;
        auto sib = UdpSocket::sibling(workers_[i]->io(), *s, ec);
        if (!sib) {
            log::notice("inherited UDP socket " + l.endpoint.to_string() +
                        ": cannot open a socket for worker " + std::to_string(i) + " (" +
                        ec.message() + "); served by worker 0 only");
            for (std::size_t k = 1; k < l.sockets.size(); ++k) {
                l.sockets[k]->close();
            }
            l.sockets.resize(1);
            return l;
        }
        l.sockets.push_back(std::move(sib));
    }
    steer(l);
    return l;
}

void ListenSet::attach(const Listener& l) {
    for (std::size_t i = 0; i < l.sockets.size(); ++i) {
        Worker& w = *workers_[i];
        auto s = l.sockets[i];
        if (running_) {
            w.post([&w, s] { w.add_socket(s); });
        } else {
            w.add_socket(s);
        }
    }
}

void ListenSet::detach(const Listener& l) {
    for (std::size_t i = 0; i < l.sockets.size(); ++i) {
        auto s = l.sockets[i];
        Worker& w = *workers_[i];
        if (running_) {
            w.post([&w, s] { w.remove_socket(s); });
        } else {
            w.remove_socket(s);
        }
    }
}

}  // namespace pmd::io
