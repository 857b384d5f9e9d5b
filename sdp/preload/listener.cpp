// SPDX-License-Identifier: Apache-2.0
#include "sdp/preload/listener.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pmclient/sockaddr.hpp"
#include "sdp/preload/bridge.hpp"
#include "sdp/preload/state.hpp"

namespace sdp::preload {
namespace {

// Unclaimed connections per listener (the program is not calling accept()):
// beyond it new SDP connections are aborted, as a full backlog drops SYNs.
constexpr std::size_t kMaxPending = 128;
constexpr auto kAcceptPoll = std::chrono::milliseconds(100);
constexpr auto kDoorbellTimeout = std::chrono::milliseconds(2000);

// "preload-PROGRAM-PORT", with the address for a socket bound to one
// (two sockets of a program on the same port and different addresses are
// two mappings); within the daemon's 64 characters of [A-Za-z0-9._-].
std::string service_name(const std::string& program, const pm::Endpoint& bound) {
    auto clean = [](std::string_view in, std::size_t max) {
        std::string n;
        for (char c : in) {
            const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
            n += ok ? c : '_';
            if (n.size() >= max) {
                break;
            }
        }
        return n;
    };
    std::string name = "preload-" + (program.empty() ? std::string("prog") : clean(program, 16));
    if (!bound.address.is_unspecified()) {
        name += "-" + clean(bound.address.to_string(), 39);
    }
    return name + "-" + std::to_string(bound.port);
}

}  // namespace

pm::Endpoint Listener::doorbell_target(const pm::Endpoint& bound) {
    if (!bound.address.is_unspecified()) {
        return bound;
    }
    return pm::Endpoint{bound.address.is_v4()
                            ? pm::IpAddress::v4({127, 0, 0, 1})
                            : pm::IpAddress::v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}),
                        bound.port};
}

std::shared_ptr<Listener> Listener::open(const pm::Endpoint& bound) {
    InternalScope in;
    std::shared_ptr<Listener> l(new Listener);
    l->bound_ = bound;
    l->doorbell_target_ = doorbell_target(bound);
    const Settings& s = settings();
    AcceptorOptions ao;
    ao.stream = stream_options(nullptr);
    ao.control_socket = s.control_socket;
    ao.service_name = service_name(s.program, bound);
    ao.conventional =
        bound.address.is_unspecified() ? "*:" + std::to_string(bound.port) : bound.to_string();
    const pm::Endpoint sdp_local{bound.address, 0};
    if (auto ec = l->acceptor_.open(sdp_local, ao)) {
        const std::string& why = !l->acceptor_.open_error().empty()
                                     ? l->acceptor_.open_error()
                                     : l->acceptor_.registration_error();
        ++counters().register_failed;
        log(1, "%s: no SDP for port %u: %s%s%s", s.program.c_str(), bound.port,
            ec.message().c_str(), why.empty() ? "" : ": ", why.c_str());
        // Registration refused or no sdp-pmd: without a mapping no client
        // finds the SDP port, so the program keeps plain TCP.
        return nullptr;
    }
    track_internal(l->acceptor_.native_handle());
    log(2, "port %s: SDP at %s (service %s)", bound.to_string().c_str(),
        l->acceptor_.local_endpoint().to_string().c_str(), ao.service_name.c_str());
    ++counters().listen_sdp;
    l->thread_ = std::thread([raw = l.get()] { raw->run(); });
    return l;
}

Listener::~Listener() {
    close();
}

void Listener::run() {
    mark_internal_thread();
    while (!stop_.load()) {
        Stream s;
        auto ec = acceptor_.accept(s, kAcceptPoll);
        if (ec == std::errc::timed_out) {
            continue;
        }
        if (ec) {
            log(1, "SDP accept on %s failed: %s", bound_.to_string().c_str(), ec.message().c_str());
            std::this_thread::sleep_for(kAcceptPoll);  // a broken listener: do not spin
            continue;
        }
        ring(std::move(s));
    }
}

void Listener::ring(Stream s) {
    Pending p;
    p.peer = peer_of(s.native_handle()).value_or(pm::Endpoint{});
    p.local = local_of(s.native_handle()).value_or(pm::Endpoint{});
    {
        std::lock_guard lk(mu_);
        if (pending_.size() >= kMaxPending) {
            log(1, "port %u: %zu SDP connections not accepted by the program; refusing",
                bound_.port, pending_.size());
            s.abort();
            return;
        }
    }
    p.bridge = Bridge::create(std::move(s), &p.app_fd);
    if (!p.bridge) {
        log(1, "socketpair: %s", std::strerror(errno));
        return;
    }
    const int family = doorbell_target_.address.is_v4() ? AF_INET : AF_INET6;
    int d = real().socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (d < 0) {
        close_internal(p.app_fd);
        p.bridge->start();  // sees the program's end closed and aborts
        return;
    }
    track_internal(d);
    sockaddr_storage from{};
    socklen_t flen = sockaddr_of(pm::Endpoint{doorbell_target_.address, 0}, family, from);
    std::optional<pm::Endpoint> me;
    if (::bind(d, reinterpret_cast<sockaddr*>(&from), flen) == 0) {
        me = local_of(d);
    }
    p.doorbell_fd = d;
    auto bridge = p.bridge;
    const int app_fd = p.app_fd;
    if (me) {
        std::lock_guard lk(mu_);
        pending_[*me] = p;
    }
    bridge->start();
    const int err = me ? pm::connect_nonblocking(d, doorbell_target_, kDoorbellTimeout) : errno;
    // The program's accept() may have claimed the connection before our
    // connect() returned (the kernel completes the handshake first): the
    // doorbell is then closed here, never under a thread still using it.
    bool claimed = false;
    bool mine = !me;
    if (me) {
        std::lock_guard lk(mu_);
        auto it = pending_.find(*me);
        claimed = it == pending_.end();
        if (!claimed && err == 0) {
            it->second.rung = true;  // claim() closes the doorbell from now on
        } else if (!claimed) {
            pending_.erase(it);
            mine = true;
        }
    }
    if (err != 0 && mine) {
        log(1, "doorbell to %s failed: %s; SDP connection dropped",
            doorbell_target_.to_string().c_str(), std::strerror(err));
        close_internal(app_fd);
    }
    if (claimed || mine) {
        close_internal(d);
    }
}

std::optional<Listener::Claimed> Listener::claim(const pm::Endpoint& from) {
    Pending p;
    {
        std::lock_guard lk(mu_);
        auto it = pending_.find(from);
        if (it == pending_.end()) {
            return std::nullopt;
        }
        p = std::move(it->second);
        pending_.erase(it);
    }
    if (p.rung) {
        close_internal(p.doorbell_fd);  // else ring() does, once its connect() is back
    }
    return Claimed{p.app_fd, std::move(p.bridge), p.peer, p.local};
}

void Listener::close() {
    if (stop_.exchange(true)) {
        return;
    }
    if (thread_.joinable()) {
        thread_.join();
    }
    InternalScope in;
    acceptor_.close();  // unregisters; its socket leaves the table in close()
    std::map<pm::Endpoint, Pending> left;
    {
        std::lock_guard lk(mu_);
        left.swap(pending_);
    }
    for (auto& [ep, p] : left) {
        close_internal(p.doorbell_fd);  // the thread is joined: no ring() is running
        close_internal(p.app_fd);       // the bridge sees its program end closed and ends
    }
}

}  // namespace sdp::preload
