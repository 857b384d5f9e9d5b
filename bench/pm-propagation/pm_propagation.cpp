// SPDX-License-Identifier: Apache-2.0
// pm-propagation: how fast registrations travel through a cluster registry.
//
// Registers N services, one at a time, on replica A (its control socket)
// and after each one polls replica B (its UDP Port Mapper address) with a
// PMReq for the new Conventional Address every millisecond until B answers
// with a PMAccept (a PMAck is sent back so that B frees the transaction).
// Measures each register call's latency and the propagation time: from the
// start of the register call on A to the PMAccept from B. Then unregisters
// every service it registered. Every wait is bounded: each control call by
// --call-timeout, each service's propagation by --propagation-timeout.
//
// Service I is named svcI with Conventional Address 127.0.0.1:(20000+I) and
// SDP Address 127.0.0.1:(30000+I), health checks off.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bench/common/bench_util.hpp"
#include "bench/common/pm_request.hpp"
#include "pmclient/message.hpp"
#include "pmctl/client.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Options {
    std::string control;
    std::optional<pm::Endpoint> pmsp;
    unsigned count = 200;
    unsigned call_timeout_ms = 5000;
    unsigned propagation_timeout_ms = 10000;
    unsigned poll_interval_us = 1000;
    bool json = false;
};

constexpr unsigned kMaxCount = 10000;
constexpr std::uint16_t kConventionalBase = 20000;
constexpr std::uint16_t kSdpBase = 30000;

void usage(FILE* f) {
    std::fputs(
        "usage: pm-propagation --control SOCKET --pmsp IP:PORT [options]\n"
        "  --control SOCKET            control socket of replica A (registrations go there)\n"
        "  --pmsp IP:PORT              Port Mapper address of replica B (polled with PMReqs)\n"
        "  --count N                   services to register, 1-10000 (default 200)\n"
        "  --call-timeout MS           per control call, 1-60000 (default 5000)\n"
        "  --propagation-timeout MS    per service, 1-60000 (default 10000)\n"
        "  --poll-interval US          between PMReqs to B, 100-1000000 (default 1000)\n"
        "  --json                      one JSON object on stdout instead of text\n",
        f);
}

bool parse_args(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        }
        if (a == "--json") {
            o.json = true;
            continue;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "pm-propagation: %s needs a value (or is unknown)\n", argv[i]);
            return false;
        }
        const std::string_view v = argv[++i];
        bool ok = true;
        auto bounded = [&](unsigned lo, unsigned hi, unsigned& out) {
            auto n = bench::parse_number<unsigned>(v);
            ok = n && *n >= lo && *n <= hi;
            if (ok) {
                out = *n;
            }
        };
        if (a == "--control") {
            o.control = std::string(v);
            ok = !o.control.empty();
        } else if (a == "--pmsp") {
            auto e = pm::Endpoint::parse(v);
            ok = e && e->port != 0;
            if (ok) {
                o.pmsp = *e;
            }
        } else if (a == "--count") {
            bounded(1, kMaxCount, o.count);
        } else if (a == "--call-timeout") {
            bounded(1, 60000, o.call_timeout_ms);
        } else if (a == "--propagation-timeout") {
            bounded(1, 60000, o.propagation_timeout_ms);
        } else if (a == "--poll-interval") {
            bounded(100, 1000000, o.poll_interval_us);
        } else {
            std::fprintf(stderr, "pm-propagation: unknown option %s\n", argv[i - 1]);
            return false;
        }
        if (!ok) {
            std::fprintf(stderr, "pm-propagation: bad value for %s: %.*s\n", argv[i - 1],
                         static_cast<int>(v.size()), v.data());
            return false;
        }
    }
    if (o.control.empty() || !o.pmsp) {
        std::fputs("pm-propagation: --control and --pmsp are required\n", stderr);
        return false;
    }
    return true;
}

// Sorted samples in nanoseconds -> exact order statistics.
struct Summary {
    std::vector<std::uint64_t> v;
    void add(std::uint64_t ns) { v.push_back(ns); }
    void finish() { std::sort(v.begin(), v.end()); }
    // Nearest-rank quantile (0 when empty).
    double quantile_ms(double q) const {
        if (v.empty()) {
            return 0;
        }
        auto rank = static_cast<std::size_t>(q * static_cast<double>(v.size()) + 0.999999);
        rank = std::clamp<std::size_t>(rank, 1, v.size());
        return static_cast<double>(v[rank - 1]) / 1e6;
    }
    double max_ms() const { return v.empty() ? 0 : static_cast<double>(v.back()) / 1e6; }
};

std::uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// A UDP socket connect()ed to B, and the PMReq/PMAccept/PMAck exchange.
class Poller {
  public:
    explicit Poller(const pm::Endpoint& server) {
        sockaddr_storage ss{};
        const socklen_t len = bench::to_sockaddr(server, ss);
        fd_ = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
            std::perror("pm-propagation: UDP socket");
            std::exit(1);
        }
    }
    Poller(const Poller&) = delete;
    Poller& operator=(const Poller&) = delete;
    ~Poller() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }

    // Sends a PMReq for `conventional` every `interval` until B answers one
    // of them (not an earlier call's) with a PMAccept or `deadline` passes.
    // Returns the time the PMAccept arrived.
    std::optional<Clock::time_point> wait_accept(const pm::Endpoint& conventional,
                                                 std::chrono::microseconds interval,
                                                 Clock::time_point deadline) {
        while (Clock::now() < deadline) {
            const std::uint64_t handle = ++next_handle_;
            send_request(conventional, handle);
            const auto until = std::min(Clock::now() + interval, deadline);
            while (true) {
                const auto now = Clock::now();
                if (now >= until) {
                    break;
                }
                const auto left =
                    std::chrono::duration_cast<std::chrono::microseconds>(until - now).count();
                pollfd p{fd_, POLLIN, 0};
                // poll() takes milliseconds; round up, the loop re-checks.
                const int r = ::poll(&p, 1, static_cast<int>((left + 999) / 1000));
                if (r <= 0) {
                    continue;
                }
                std::array<std::uint8_t, 128> buf{};
                const ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
                if (n <= 0) {
                    continue;
                }
                const auto got = Clock::now();
                auto d = pm::decode(
                    std::span<const std::uint8_t>(buf.data(), static_cast<std::size_t>(n)));
                const auto* m = std::get_if<pm::Message>(&d);
                if (m == nullptr) {
                    continue;
                }
                if (m->type == pm::MessageType::accept) {
                    // Free B's transaction whatever request it answers.
                    const pm::Wire ack = pm::encode(pm::make_ack(*m));
                    (void)::send(fd_, ack.data(), ack.size(), 0);
                    if (m->assoc_handle > first_handle_) {
                        first_handle_ = next_handle_;  // later answers are stale
                        return got;
                    }
                } else if (m->type == pm::MessageType::deny) {
                    ++denies_;
                }
            }
        }
        first_handle_ = next_handle_;
        return std::nullopt;
    }
    std::uint64_t requests() const { return next_handle_; }
    std::uint64_t denies() const { return denies_; }

  private:
    void send_request(const pm::Endpoint& conventional, std::uint64_t handle) {
        // A distinct (CpIPAddr, CpPort) per request, like pm-load.
        const pm::Message m = bench::pm_request(conventional, handle, handle);
        const pm::Wire w = pm::encode(m);
        (void)::send(fd_, w.data(), w.size(), 0);
    }

    int fd_ = -1;
    std::uint64_t next_handle_ = 0;
    std::uint64_t first_handle_ = 0;  // answers to handles <= this are stale
    std::uint64_t denies_ = 0;
};

std::string name_of(unsigned i) {
    return "svc" + std::to_string(i);
}

pm::Endpoint conventional_of(unsigned i) {
    return pm::Endpoint{pm::IpAddress::v4({127, 0, 0, 1}),
                        static_cast<std::uint16_t>(kConventionalBase + i)};
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse_args(argc, argv, o)) {
        usage(stderr);
        return 2;
    }
    const milliseconds call_timeout(o.call_timeout_ms);
    Poller poller(*o.pmsp);

    Summary reg;
    Summary prop;
    unsigned timeouts = 0;
    unsigned failures = 0;
    std::uint64_t register_ns = 0;
    std::vector<unsigned> registered;
    std::string first_error;
    const auto t0 = Clock::now();
    for (unsigned i = 0; i < o.count; ++i) {
        const pm::Endpoint conv = conventional_of(i);
        const nlohmann::json args{{"name", name_of(i)},
                                  {"conventional", conv.to_string()},
                                  {"sdp", {"127.0.0.1:" + std::to_string(kSdpBase + i)}},
                                  {"pm_time", "30s"},
                                  {"health", "off"}};
        const auto start = Clock::now();
        const pmctl::Answer a = pmctl::call(o.control, "register", args, call_timeout);
        const auto done = Clock::now();
        if (!a.ok() || a.reply().result != 0) {
            ++failures;
            if (first_error.empty()) {
                first_error = a.ok() ? a.reply().text : a.error().message;
            }
            continue;
        }
        registered.push_back(i);
        reg.add(ns_between(start, done));
        register_ns += ns_between(start, done);
        const auto accepted =
            poller.wait_accept(conv, std::chrono::microseconds(o.poll_interval_us),
                               start + milliseconds(o.propagation_timeout_ms));
        if (accepted) {
            prop.add(ns_between(start, *accepted));
        } else {
            ++timeouts;
        }
    }
    const double wall_s = static_cast<double>(ns_between(t0, Clock::now())) / 1e9;

    unsigned unregister_failures = 0;
    for (unsigned i : registered) {
        const pmctl::Answer a = pmctl::call(o.control, "unregister",
                                            nlohmann::json{{"name", name_of(i)}}, call_timeout);
        if (!a.ok() || a.reply().result != 0) {
            ++unregister_failures;
        }
    }

    reg.finish();
    prop.finish();
    const double register_s = static_cast<double>(register_ns) / 1e9;
    const double per_s = register_s > 0 ? static_cast<double>(registered.size()) / register_s : 0;
    if (o.json) {
        nlohmann::json j{{"count", o.count},
                         {"registered", registered.size()},
                         {"register_failures", failures},
                         {"unregister_failures", unregister_failures},
                         {"registrations_per_s", per_s},
                         {"register_ms",
                          {{"p50", reg.quantile_ms(0.5)},
                           {"p99", reg.quantile_ms(0.99)},
                           {"max", reg.max_ms()}}},
                         {"propagation_ms",
                          {{"p50", prop.quantile_ms(0.5)},
                           {"p99", prop.quantile_ms(0.99)},
                           {"max", prop.max_ms()}}},
                         {"propagated", prop.v.size()},
                         {"timeouts", timeouts},
                         {"pmreqs_sent", poller.requests()},
                         {"pmdenies", poller.denies()},
                         {"wall_s", wall_s}};
        if (!first_error.empty()) {
            j["first_error"] = first_error;
        }
        std::printf("%s\n",
                    j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::printf("registered %zu of %u (failures %u, unregister failures %u)\n",
                    registered.size(), o.count, failures, unregister_failures);
        std::printf("registrations/s %.1f; register latency ms: p50 %.3f p99 %.3f max %.3f\n",
                    per_s, reg.quantile_ms(0.5), reg.quantile_ms(0.99), reg.max_ms());
        std::printf(
            "propagation ms (register start -> PMAccept from B): p50 %.3f p99 %.3f max "
            "%.3f; timeouts %u\n",
            prop.quantile_ms(0.5), prop.quantile_ms(0.99), prop.max_ms(), timeouts);
        if (!first_error.empty()) {
            std::printf("first error: %s\n", first_error.c_str());
        }
    }
    return (failures == 0 && timeouts == 0) ? 0 : 1;
}
