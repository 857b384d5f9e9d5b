// SPDX-License-Identifier: Apache-2.0
// chaos-proxy: a UDP proxy for fault tests, with seeded loss, duplication,
// reordering and delay in each direction.
//
//   chaos-proxy --upstream ADDR:PORT [--listen ADDR:PORT] [--seed N]
//               [--loss-up P] [--loss-down P] [--dup-up P] [--dup-down P]
//               [--reorder-up P] [--reorder-down P] [--reorder-ms MS]
//               [--delay-ms MS] [--jitter-ms MS] [--queue N] [--max-clients N]
//               [--max-seconds S]
//
// "up" is client -> upstream, "down" is upstream -> client. Every client
// source address gets its own upstream socket (so the upstream sees distinct
// clients and replies find their way back); at most --max-clients, the least
// recently active one is closed first. Each datagram is, in order: dropped
// with probability loss; otherwise queued with delay + uniform jitter, plus
// --reorder-ms with probability reorder (so later datagrams overtake it);
// and with probability dup a second copy is queued with its own delay. The
// queue holds at most --queue datagrams (the rest are dropped, counted).
//
// Prints "listening on ADDR:PORT" on stdout once bound, and a JSON line of
// counters on stdout when it stops (SIGTERM, SIGINT or --max-seconds).
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <queue>
#include <random>
#include <string_view>
#include <vector>

#include "../../bench/common/bench_util.hpp"

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
    g_stop = 1;
}

struct Faults {
    double loss = 0;
    double dup = 0;
    double reorder = 0;
};

struct Options {
    pm::Endpoint listen = *pm::Endpoint::parse("127.0.0.1:0");
    std::optional<pm::Endpoint> upstream;
    std::uint64_t seed = 1;
    Faults up, down;
    double delay_ms = 0;
    double jitter_ms = 0;
    double reorder_ms = 10;
    std::size_t queue = 65536;
    std::size_t max_clients = 1024;
    double max_seconds = 3600;
};

struct Pending {
    Clock::time_point due;
    std::uint64_t seq;
    bool up;
    std::uint32_t client;
    std::uint32_t generation;
    std::vector<std::uint8_t> bytes;
    bool operator>(const Pending& o) const { return due != o.due ? due > o.due : seq > o.seq; }
};

struct Client {
    pm::Endpoint source;
    int fd = -1;
    std::uint32_t generation = 0;
    Clock::time_point last;
};

struct Stats {
    std::uint64_t received[2]{};  // [down, up]
    std::uint64_t lost[2]{};
    std::uint64_t duplicated[2]{};
    std::uint64_t reordered[2]{};
    std::uint64_t forwarded[2]{};
    std::uint64_t queue_full = 0;
    std::uint64_t send_errors = 0;
    std::uint64_t clients = 0;
    std::uint64_t clients_evicted = 0;
};

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (i + 1 >= argc) {
            return false;
        }
        std::string_view v = argv[++i];
        auto prob = [&](double& out) {
            auto n = bench::parse_number<double>(v);
            if (!n || *n < 0 || *n > 1) {
                return false;
            }
            out = *n;
            return true;
        };
        auto num = [&](double& out, double max) {
            auto n = bench::parse_number<double>(v);
            if (!n || *n < 0 || *n > max) {
                return false;
            }
            out = *n;
            return true;
        };
        bool ok = true;
        double d = 0;
        if (a == "--listen" || a == "--upstream") {
            auto e = pm::Endpoint::parse(v);
            ok = e.has_value() && (a == "--listen" || e->port != 0);
            if (ok) {
                (a == "--listen" ? o.listen : o.upstream.emplace()) = *e;
            }
        } else if (a == "--seed") {
            auto n = bench::parse_number<std::uint64_t>(v);
            ok = n.has_value();
            o.seed = ok ? *n : 0;
        } else if (a == "--loss-up") {
            ok = prob(o.up.loss);
        } else if (a == "--loss-down") {
            ok = prob(o.down.loss);
        } else if (a == "--dup-up") {
            ok = prob(o.up.dup);
        } else if (a == "--dup-down") {
            ok = prob(o.down.dup);
        } else if (a == "--reorder-up") {
            ok = prob(o.up.reorder);
        } else if (a == "--reorder-down") {
            ok = prob(o.down.reorder);
        } else if (a == "--delay-ms") {
            ok = num(o.delay_ms, 60000);
        } else if (a == "--jitter-ms") {
            ok = num(o.jitter_ms, 60000);
        } else if (a == "--reorder-ms") {
            ok = num(o.reorder_ms, 60000);
        } else if (a == "--queue") {
            ok = num(d, 1 << 22) && d >= 1;
            o.queue = static_cast<std::size_t>(d);
        } else if (a == "--max-clients") {
            ok = num(d, 65536) && d >= 1;
            o.max_clients = static_cast<std::size_t>(d);
        } else if (a == "--max-seconds") {
            ok = num(o.max_seconds, 86400) && o.max_seconds > 0;
        } else {
            ok = false;
        }
        if (!ok) {
            std::fprintf(stderr, "chaos-proxy: bad option %s %s\n", argv[i - 1], argv[i]);
            return false;
        }
    }
    return o.upstream.has_value();
}

int open_socket(const pm::Endpoint& bind_to, const pm::Endpoint* connect_to) {
    sockaddr_storage ss;
    socklen_t len = bench::to_sockaddr(bind_to, ss);
    int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    int sz = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        ::close(fd);
        return -1;
    }
    if (connect_to != nullptr) {
        len = bench::to_sockaddr(*connect_to, ss);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
            ::close(fd);
            return -1;
        }
    }
    return fd;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr,
                     "usage: chaos-proxy --upstream ADDR:PORT [--listen ADDR:PORT] [--seed N]\n"
                     "  [--loss-up P] [--loss-down P] [--dup-up P] [--dup-down P]\n"
                     "  [--reorder-up P] [--reorder-down P] [--reorder-ms MS] [--delay-ms MS]\n"
                     "  [--jitter-ms MS] [--queue N] [--max-clients N] [--max-seconds S]\n");
        return 2;
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);

    const int lfd = open_socket(o.listen, nullptr);
    if (lfd < 0) {
        std::perror("chaos-proxy: listen socket");
        return 1;
    }
    {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&ss), &len);
        std::printf("listening on %s\n", bench::from_sockaddr(ss).to_string().c_str());
        std::fflush(stdout);
    }
    const pm::Endpoint upstream_bind{pm::IpAddress::any(o.upstream->address.family()), 0};

    std::mt19937_64 rng(o.seed);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    std::priority_queue<Pending, std::vector<Pending>, std::greater<>> queue;
    std::vector<Client> clients;
    Stats st;
    std::uint64_t seq = 0;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o.max_seconds));

    auto ms = [](double v) {
        return std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::milli>(v));
    };
    auto enqueue = [&](bool up, std::uint32_t client, const std::uint8_t* p, std::size_t n,
                       Clock::time_point now) {
        const Faults& f = up ? o.up : o.down;
        ++st.received[up];
        if (uni(rng) < f.loss) {
            ++st.lost[up];
            return;
        }
        const int copies = uni(rng) < f.dup ? 2 : 1;
        if (copies == 2) {
            ++st.duplicated[up];
        }
        for (int c = 0; c < copies; ++c) {
            if (queue.size() >= o.queue) {
                ++st.queue_full;
                return;
            }
            double delay = o.delay_ms + o.jitter_ms * uni(rng);
            if (uni(rng) < f.reorder) {
                delay += o.reorder_ms;
                ++st.reordered[up];
            }
            queue.push(Pending{now + ms(delay), seq++, up, client, clients[client].generation,
                               std::vector<std::uint8_t>(p, p + n)});
        }
    };

    std::array<std::uint8_t, 65536> buf{};
    std::vector<pollfd> pfds;
    while (!g_stop) {
        auto now = Clock::now();
        if (now >= end) {
            break;
        }
        // Release what is due.
        while (!queue.empty() && queue.top().due <= now) {
            const Pending& p = queue.top();
            const Client& c = clients[p.client];
            if (c.generation == p.generation && c.fd >= 0) {
                ssize_t r;
                if (p.up) {
                    r = ::send(c.fd, p.bytes.data(), p.bytes.size(), 0);
                } else {
                    sockaddr_storage ss;
                    const socklen_t len = bench::to_sockaddr(c.source, ss);
                    r = ::sendto(lfd, p.bytes.data(), p.bytes.size(), 0,
                                 reinterpret_cast<sockaddr*>(&ss), len);
                }
                ++(r < 0 ? st.send_errors : st.forwarded[p.up]);
            }
            queue.pop();
        }
        int timeout_ms = 100;
        if (!queue.empty()) {
            const auto wait =
                std::chrono::duration_cast<std::chrono::microseconds>(queue.top().due - now)
                    .count();
            timeout_ms = static_cast<int>(std::clamp<long long>((wait + 999) / 1000, 0, 100));
        }
        pfds.clear();
        pfds.push_back({lfd, POLLIN, 0});
        for (const Client& c : clients) {
            pfds.push_back({c.fd, static_cast<short>(c.fd >= 0 ? POLLIN : 0), 0});
        }
        if (::poll(pfds.data(), pfds.size(), timeout_ms) <= 0) {
            continue;
        }
        now = Clock::now();
        // Client side: up to 256 datagrams per wakeup.
        for (int k = 0; k < 256 && (pfds[0].revents & POLLIN); ++k) {
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            ssize_t n = ::recvfrom(lfd, buf.data(), buf.size(), MSG_DONTWAIT,
                                   reinterpret_cast<sockaddr*>(&ss), &len);
            if (n < 0) {
                break;
            }
            const pm::Endpoint src = bench::from_sockaddr(ss);
            std::uint32_t idx = 0;
            bool found = false;
            for (std::uint32_t i = 0; i < clients.size(); ++i) {
                if (clients[i].fd >= 0 && clients[i].source == src) {
                    idx = i;
                    found = true;
                    break;
                }
            }
            if (!found) {
                if (clients.size() < o.max_clients) {
                    idx = static_cast<std::uint32_t>(clients.size());
                    clients.push_back(Client{});
                } else {
                    idx = 0;
                    for (std::uint32_t i = 1; i < clients.size(); ++i) {
                        if (clients[i].last < clients[idx].last) {
                            idx = i;
                        }
                    }
                    ::close(clients[idx].fd);
                    ++st.clients_evicted;
                }
                Client& c = clients[idx];
                c.source = src;
                c.fd = open_socket(upstream_bind, &*o.upstream);
                ++c.generation;
                ++st.clients;
                if (c.fd < 0) {
                    ++st.send_errors;
                    continue;
                }
            }
            clients[idx].last = now;
            enqueue(true, idx, buf.data(), static_cast<std::size_t>(n), now);
        }
        // Upstream side.
        for (std::size_t i = 1; i < pfds.size(); ++i) {
            if (!(pfds[i].revents & POLLIN)) {
                continue;
            }
            const auto idx = static_cast<std::uint32_t>(i - 1);
            for (int k = 0; k < 256; ++k) {
                ssize_t n = ::recv(clients[idx].fd, buf.data(), buf.size(), MSG_DONTWAIT);
                if (n < 0) {
                    break;
                }
                enqueue(false, idx, buf.data(), static_cast<std::size_t>(n), now);
            }
        }
    }
    std::printf("{\"up\":{\"received\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicated\":%" PRIu64
                ",\"reordered\":%" PRIu64 ",\"forwarded\":%" PRIu64
                "},\"down\":{\"received\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicated\":%" PRIu64
                ",\"reordered\":%" PRIu64 ",\"forwarded\":%" PRIu64 "},\"queue_full\":%" PRIu64
                ",\"send_errors\":%" PRIu64 ",\"clients\":%" PRIu64 ",\"clients_evicted\":%" PRIu64
                ",\"unsent_at_exit\":%zu}\n",
                st.received[1], st.lost[1], st.duplicated[1], st.reordered[1], st.forwarded[1],
                st.received[0], st.lost[0], st.duplicated[0], st.reordered[0], st.forwarded[0],
                st.queue_full, st.send_errors, st.clients, st.clients_evicted, queue.size());
    for (const Client& c : clients) {
        if (c.fd >= 0) {
            ::close(c.fd);
        }
    }
    ::close(lfd);
    return 0;
}
