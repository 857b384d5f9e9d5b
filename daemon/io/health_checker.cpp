// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/health_checker.hpp"

#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstring>

#include "daemon/io/log.hpp"
#include "daemon/io/sock_diag.hpp"
#include "pmclient/sockaddr.hpp"

namespace pmd::io {

namespace asio = boost::asio;

struct HealthChecker::Probe {
    asio::ip::tcp::socket socket;
    asio::steady_timer timer;
    bool done = false;
    explicit Probe(asio::io_context& io) : socket(io), timer(io) {}
};

namespace {

// Failures that say nothing about the address: this process or host ran
// out of descriptors, buffers or local ports. No verdict, not "down".
bool local_shortage(const boost::system::error_code& ec) {
    return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
           ec == boost::system::errc::too_many_files_open_in_system ||
           ec == boost::system::errc::address_not_available;
}

}  // namespace

namespace {

constexpr std::size_t kDumpBufferSize = 64 * 1024;

HealthTime steady_now() {
    return std::chrono::steady_clock::now();
}

std::string address_text(const pm::Endpoint& e) {
    return e.address.is_unspecified() ? "*:" + std::to_string(e.port) : e.to_string();
}

}  // namespace

std::vector<pm::IpAddress> local_addresses() {
    std::vector<pm::IpAddress> out;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        return out;
    }
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr) {
            continue;
        }
        const int family = i->ifa_addr->sa_family;
        if (family != AF_INET && family != AF_INET6) {
            continue;
        }
        sockaddr_storage ss{};
        std::memcpy(&ss, i->ifa_addr,
                    family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
        out.push_back(pm::from_sockaddr(ss).address.unmapped());
    }
    ::freeifaddrs(list);
    return out;
}

bool is_local_address(const pm::IpAddress& a, const std::vector<pm::IpAddress>& locals) {
    if (a.is_unspecified()) {
        return true;
    }
    const pm::IpAddress u = a.unmapped();
    if (u.is_v4() && u.bytes()[0] == 127) {
        return true;  // the whole of 127.0.0.0/8 answers locally
    }
    if (u == pm::IpAddress::parse("::1")) {
        return true;
    }
    return std::find(locals.begin(), locals.end(), u) != locals.end();
}

HealthChecker::HealthChecker(asio::io_context& io) : io_(io), timer_(io), dump_timer_(io) {}

HealthChecker::~HealthChecker() {
    stop();
}

void HealthChecker::update(std::shared_ptr<const Registry> registry,
                           const HealthOverrides& defaults) {
    registry_ = std::move(registry);
    const auto locals = local_addresses();
    std::vector<HealthTarget> targets;
    for (const Service& s : registry_->services()) {
        const HealthSettings settings = resolve_health(s.health, defaults);
        for (std::size_t i = 0; i < s.sdp.size(); ++i) {
            const bool local = is_local_address(s.sdp[i].address, locals);
            HealthCheck check = effective_check(settings, local);
            if (check == HealthCheck::listener && !local) {
                // The kernel can only tell about this host's listeners.
                log::logger().limited(LogLevel::warning, "health_not_local", [&] {
                    return "health: service \"" + s.name + "\" SDP address " +
                           address_text(s.sdp[i]) +
                           " is not an address of this host; a listener check cannot see it, "
                           "left unchecked (use check: connect)";
                });
                check = HealthCheck::off;
            }
            targets.push_back(HealthTarget{s.name, i, s.sdp[i], check, settings});
        }
    }
    monitor_.set_targets(std::move(targets), steady_now());
    // Every address's state into the new snapshot: unchecked ones unknown.
    for (const HealthEntry& e : monitor_.entries()) {
        if (const Service* s = registry_->find_by_name(e.target.service)) {
            registry_->set_health(
                *s, e.target.address_index,
                e.target.check == HealthCheck::off ? HealthState::unknown : e.tracker.state());
        }
    }
    if (running_) {
        schedule();
    }
}

void HealthChecker::start() {
    running_ = true;
    schedule();
}

void HealthChecker::stop() {
    running_ = false;
    // Probes in flight end now (their handlers see operation_aborted or
    // running_ false), so the loop does not wait for their timeouts.
    for (const auto& weak : probes_) {
        if (auto p = weak.lock()) {
            p->done = true;
            boost::system::error_code ignored;
            p->timer.cancel();
            p->socket.close(ignored);
        }
    }
    probes_.clear();
    connects_in_flight_ = 0;
    timer_.cancel();
    dump_timer_.cancel();
    if (netlink_) {
        boost::system::error_code ignored;
        netlink_->close(ignored);
        netlink_.reset();
    }
    dump_in_flight_ = false;
}

void HealthChecker::schedule() {
    if (!running_) {
        return;
    }
    // Blocked checks are picked up again when what blocks them ends.
    const std::optional<HealthTime> next =
        monitor_.next_deadline(dump_in_flight_, connects_in_flight_ >= kMaxConnectProbes);
    if (!next) {
        timer_.cancel();
        timer_at_.reset();
        return;
    }
    if (timer_at_ && *timer_at_ == *next) {
        return;  // already armed for it
    }
    timer_at_ = next;
    timer_.expires_at(*next);
    std::weak_ptr<int> alive = alive_;
    timer_.async_wait([this, alive](const boost::system::error_code& ec) {
        if (ec || alive.expired() || !running_) {
            return;
        }
        timer_at_.reset();
        on_timer();
    });
}

void HealthChecker::on_timer() {
    const HealthTime now = steady_now();
    if (!dump_in_flight_) {
        auto ids = monitor_.start_due(HealthCheck::listener, now);
        if (!ids.empty()) {
            start_dump(std::move(ids));
        }
    }
    if (connects_in_flight_ < kMaxConnectProbes) {
        for (std::uint64_t id : monitor_.start_due(HealthCheck::connect, now,
                                                   kMaxConnectProbes - connects_in_flight_)) {
            start_connect(id);
        }
    }
    schedule();
}

void HealthChecker::apply(std::uint64_t id, bool pass, const char* how) {
    const auto applied = monitor_.on_result(id, pass, steady_now());
    if (!applied.entry || !applied.transition) {
        return;
    }
    const HealthEntry& e = *applied.entry;
    const HealthState to = applied.transition->to;
    (to == HealthState::up ? counters_.transitions_up : counters_.transitions_down) += 1;
    if (registry_) {
        if (const Service* s = registry_->find_by_name(e.target.service)) {
            registry_->set_health(*s, e.target.address_index, to);
        }
    }
    std::string why;
    if (applied.transition->from == HealthState::unknown) {
        why = std::string("first ") + how + " check " + (pass ? "passed" : "failed");
    } else {
        const std::uint32_t n = pass ? e.target.settings.rise : e.target.settings.fall;
        why = std::to_string(n) + " " + how + (n == 1 ? " check " : " checks ") +
              (pass ? "passed" : "failed");
    }
    const std::string line = "health: service \"" + e.target.service + "\" SDP address " +
                             address_text(e.target.address) + " is " + std::string(to_string(to)) +
                             " (" + why + ")";
    if (to == HealthState::down) {
        log::warning(line);
    } else {
        log::notice(line);
    }
}

bool HealthChecker::ensure_netlink() {
    if (netlink_) {
        return true;
    }
    const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_SOCK_DIAG);
    if (fd < 0) {
        const int err = errno;
        log::logger().limited(LogLevel::warning, "health_netlink", [err] {
            return std::string("health: cannot open a NETLINK_SOCK_DIAG socket: ") +
                   std::strerror(err) + "; listener checks give no verdict";
        });
        return false;
    }
    netlink_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
    return true;
}

void HealthChecker::start_dump(std::vector<std::uint64_t> ids) {
    if (!ensure_netlink()) {
        ++counters_.listener_errors;
        for (auto id : ids) {
            monitor_.abandon(id);
        }
        return;
    }
    dump_in_flight_ = true;
    ++dump_generation_;
    dump_ids_ = std::move(ids);
    dump_families_ = {AF_INET, AF_INET6};
    dump_listeners_.clear();
    dump_timer_.expires_after(kDumpTimeout);
    std::weak_ptr<int> alive = alive_;
    dump_timer_.async_wait(
        [this, alive, generation = dump_generation_](const boost::system::error_code& ec) {
            if (ec || alive.expired() || !dump_in_flight_ || generation != dump_generation_) {
                return;
            }
            log::logger().limited(LogLevel::warning, "health_netlink", [] {
                return std::string("health: the sock_diag dump did not end in time; no verdict");
            });
            finish_dump(false);
        });
    send_dump_request();
}

void HealthChecker::send_dump_request() {
    ++dump_seq_;
    const auto req = sock_diag_request(dump_families_.front(), dump_seq_);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    const ssize_t n = ::sendto(netlink_->native_handle(), req.data(), req.size(), MSG_DONTWAIT,
                               reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
    if (n != static_cast<ssize_t>(req.size())) {
        const int err = errno;
        log::logger().limited(LogLevel::warning, "health_netlink", [err] {
            return std::string("health: sock_diag request: ") + std::strerror(err);
        });
        finish_dump(false);
        return;
    }
    wait_dump();
}

void HealthChecker::wait_dump() {
    std::weak_ptr<int> alive = alive_;
    netlink_->async_wait(
        asio::posix::stream_descriptor::wait_read,
        [this, alive, generation = dump_generation_](const boost::system::error_code& ec) {
            // A wait of an abandoned dump (its socket closed)
            // must not touch the next one.
            if (alive.expired() || !dump_in_flight_ || !netlink_ ||
                generation != dump_generation_) {
                return;
            }
            if (ec) {
                finish_dump(false);
                return;
            }
            on_dump_readable();
        });
}

void HealthChecker::on_dump_readable() {
    dump_buffer_.resize(kDumpBufferSize);
    for (;;) {
        const ssize_t n = ::recv(netlink_->native_handle(), dump_buffer_.data(),
                                 dump_buffer_.size(), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_dump();
                return;
            }
            if (errno == EINTR) {
                continue;
            }
            const int err = errno;
            log::logger().limited(LogLevel::warning, "health_netlink", [err] {
                return std::string("health: sock_diag receive: ") + std::strerror(err);
            });
            finish_dump(false);
            return;
        }
        if (static_cast<std::size_t>(n) > dump_buffer_.size()) {
            ++counters_.netlink_malformed;  // truncated: the dump cannot be trusted
            finish_dump(false);
            return;
        }
        const auto parsed = parse_sock_diag(
            std::span<const std::uint8_t>(dump_buffer_.data(), static_cast<std::size_t>(n)),
            dump_seq_, dump_listeners_);
        counters_.netlink_malformed += parsed.malformed;
        if (parsed.status == DumpStatus::error) {
            // EAFNOSUPPORT: no IPv6 in this kernel; nothing listens there.
            if (parsed.error != EAFNOSUPPORT && parsed.error != ENOENT) {
                log::logger().limited(LogLevel::warning, "health_netlink", [&] {
                    return std::string("health: sock_diag dump failed: ") +
                           std::strerror(parsed.error);
                });
                finish_dump(false);
                return;
            }
        }
        if (parsed.status != DumpStatus::more) {
            dump_families_.erase(dump_families_.begin());
            if (dump_families_.empty()) {
                finish_dump(true);
            } else {
                send_dump_request();
            }
            return;
        }
    }
}

void HealthChecker::finish_dump(bool ok) {
    dump_timer_.cancel();
    dump_in_flight_ = false;
    const auto ids = std::move(dump_ids_);
    dump_ids_.clear();
    if (ok) {
        ++counters_.listener_rounds;
        for (std::uint64_t id : ids) {
            const HealthEntry* e = monitor_.find(id);
            if (e) {
                apply(id, has_listener(e->target.address, dump_listeners_), "listener");
            }
        }
    } else {
        ++counters_.listener_errors;
        for (std::uint64_t id : ids) {
            monitor_.abandon(id);
        }
        // A fresh socket next round: no stale replies of this dump.
        if (netlink_) {
            boost::system::error_code ignored;
            netlink_->close(ignored);
            netlink_.reset();
        }
    }
    schedule();
}

void HealthChecker::start_connect(std::uint64_t id) {
    const HealthEntry* e = monitor_.find(id);
    if (!e) {
        return;
    }
    pm::Endpoint target = e->target.address;
    if (target.address.is_unspecified()) {
        target.address = *pm::IpAddress::parse("127.0.0.1");  // "*:P": this host
    }
    const auto timeout = e->target.settings.timeout;
    auto probe = std::make_shared<Probe>(io_);
    std::erase_if(probes_, [](const std::weak_ptr<Probe>& p) { return p.expired(); });
    probes_.push_back(probe);
    ++counters_.connect_probes;
    ++connects_in_flight_;
    std::weak_ptr<int> alive = alive_;
    // pass: nullopt is no verdict.
    auto finish = [this, alive, probe, id](std::optional<bool> pass) {
        if (probe->done) {
            return;
        }
        probe->done = true;
        boost::system::error_code ignored;
        probe->timer.cancel();
        probe->socket.close(ignored);
        if (alive.expired() || !running_) {
            return;
        }
        --connects_in_flight_;
        if (!pass) {
            monitor_.abandon(id);
        } else {
            if (!*pass) {
                ++counters_.connect_failures;
            }
            apply(id, *pass, "connect");
        }
        schedule();
    };
    boost::system::error_code bad;
    const auto address = asio::ip::make_address(target.address.to_string(), bad);
    if (bad) {
        finish(false);
        return;
    }
    probe->timer.expires_after(timeout);
    probe->timer.async_wait([finish](const boost::system::error_code& ec) {
        if (!ec) {
            finish(false);  // timed out
        }
    });
    probe->socket.async_connect(
        asio::ip::tcp::endpoint(address, target.port),
        [finish](const boost::system::error_code& ec) {
            if (ec == asio::error::operation_aborted) {
                return;
            }
            finish(local_shortage(ec) ? std::nullopt : std::optional<bool>(!ec));
        });
}

std::vector<AddressHealth> HealthChecker::addresses() const {
    const HealthTime now = steady_now();
    const auto wall_now = std::chrono::system_clock::now();
    std::vector<AddressHealth> out;
    for (const HealthEntry& e : monitor_.entries()) {
        AddressHealth a;
        a.service = e.target.service;
        a.address = address_text(e.target.address);
        a.check = e.target.check;
        a.state = e.target.check == HealthCheck::off ? HealthState::unknown : e.tracker.state();
        const auto ago = now - e.tracker.since();
        a.since_seconds = std::chrono::duration<double>(ago).count();
        a.changed_unix_seconds =
            std::chrono::duration<double>((wall_now - ago).time_since_epoch()).count();
        a.transitions = e.tracker.transitions();
        out.push_back(std::move(a));
    }
    return out;
}

std::size_t HealthChecker::addresses_down() const {
    return static_cast<std::size_t>(
        std::count_if(monitor_.entries().begin(), monitor_.entries().end(), [](const auto& e) {
            return e.target.check != HealthCheck::off && e.tracker.state() == HealthState::down;
        }));
}

}  // namespace pmd::io
