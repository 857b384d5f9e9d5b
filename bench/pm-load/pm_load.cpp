// SPDX-License-Identifier: Apache-2.0
// pm-load: a dnsperf-like load generator for the SDP Port Mapper (UDP 3935).
//
// N client sockets (each connect()ed to the server), a window of outstanding
// requests, a unique AssocHandle per transaction, a PMAck for every PMAccept,
// a time limit, a request-count limit, an optional qps cap and one JSON
// object on stdout. One thread, batched recvmmsg/sendmmsg.
//
// Modes (the same loop, window and accounting for all three):
//   pm       PMReq -> PMAccept/PMDeny, PMAck sent for every PMAccept
//   echo     PMReq, the identical datagram back (bench/udp-echo)
//   rpcbind  ONC RPC CALL PMAPPROC_GETPORT(100000, 2, UDP) -> REPLY (rpcbind)
//
// Every transaction has its own (CpIPAddr, CpPort) so that the server keeps
// one live transaction per request, like many distinct clients would cause.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bench/common/bench_util.hpp"
#include "bench/common/pm_request.hpp"
#include "pmclient/message.hpp"

namespace {

using Clock = std::chrono::steady_clock;

enum class Mode { pm, echo, rpcbind };

struct Options {
    Mode mode = Mode::pm;
    pm::Endpoint server = *pm::Endpoint::parse("127.0.0.1:3935");
    std::optional<pm::Endpoint> conventional;  // ApIPAddr:ApPort asked for
    unsigned clients = 4;
    unsigned window = 64;
    double duration_s = 5.0;
    std::uint64_t max_requests = 0;  // 0: only the time limit
    double qps = 0;                  // 0: no cap
    unsigned timeout_ms = 1000;
    std::uint32_t rpc_prog = 100000;
    std::uint32_t rpc_vers = 2;
    // Client socket i binds 127.0.0.(1 + i % sources) (IPv4 loopback
    // servers only): distinct source addresses, so that sdp-pmd's workers,
    // steered by source address, all get some of the load. 0: no bind.
    unsigned sources = 0;
};

constexpr unsigned kMaxClients = 1024;
constexpr unsigned kMaxWindow = 65536;
constexpr double kMaxDuration = 3600;
constexpr unsigned kBatch = 64;
constexpr std::size_t kBufSize = 256;
constexpr std::uint64_t kSlotBits = 16;
constexpr std::uint64_t kSlotMask = (1u << kSlotBits) - 1;

void usage(FILE* f) {
    std::fputs(
        "usage: pm-load [options]\n"
        "  --server ADDR:PORT     target (default 127.0.0.1:3935; [::1]:3935 for IPv6)\n"
        "  --mode pm|echo|rpcbind what to send (default pm)\n"
        "  --conventional A:P     ApIPAddr:ApPort asked for (default 127.0.0.1:80 or [::1]:80,\n"
        "                         the server's family)\n"
        "  --clients N            client sockets, 1-1024 (default 4)\n"
        "  --window N             outstanding requests, 1-65536 (default 64)\n"
        "  --duration S           time limit in seconds, <= 3600 (default 5)\n"
        "  --requests N           request-count limit (default 0: time limit only)\n"
        "  --qps Q                cap on requests per second (default 0: none)\n"
        "  --timeout MS           a request unanswered this long is a timeout (default 1000)\n"
        "  --rpc-prog N --rpc-vers N  program asked for in rpcbind mode (default 100000 2)\n"
        "  --sources N            client i binds 127.0.0.(1 + i % N), 1-250 (IPv4 loopback\n"
        "                         server only; default: no bind, every client 127.0.0.1)\n"
        "Prints one JSON object on stdout.\n",
        f);
}

bool parse_args(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "pm-load: %s needs a value (or is unknown)\n", argv[i]);
            return false;
        }
        std::string_view v = argv[++i];
        bool ok = true;
        if (a == "--server") {
            auto e = pm::Endpoint::parse(v);
            ok = e && e->port != 0;
            if (ok) {
                o.server = *e;
            }
        } else if (a == "--conventional") {
            auto e = pm::Endpoint::parse(v);
            ok = e && e->port != 0;
            if (ok) {
                o.conventional = *e;
            }
        } else if (a == "--mode") {
            if (v == "pm") {
                o.mode = Mode::pm;
            } else if (v == "echo") {
                o.mode = Mode::echo;
            } else if (v == "rpcbind") {
                o.mode = Mode::rpcbind;
            } else {
                ok = false;
            }
        } else if (a == "--clients") {
            auto n = bench::parse_number<unsigned>(v);
            ok = n && *n >= 1 && *n <= kMaxClients;
            o.clients = ok ? *n : 0;
        } else if (a == "--window") {
            auto n = bench::parse_number<unsigned>(v);
            ok = n && *n >= 1 && *n <= kMaxWindow;
            o.window = ok ? *n : 0;
        } else if (a == "--duration") {
            auto n = bench::parse_number<double>(v);
            ok = n && *n > 0 && *n <= kMaxDuration;
            o.duration_s = ok ? *n : 0;
        } else if (a == "--requests") {
            auto n = bench::parse_number<std::uint64_t>(v);
            ok = n.has_value();
            o.max_requests = ok ? *n : 0;
        } else if (a == "--qps") {
            auto n = bench::parse_number<double>(v);
            ok = n && *n >= 0;
            o.qps = ok ? *n : 0;
        } else if (a == "--timeout") {
            auto n = bench::parse_number<unsigned>(v);
            ok = n && *n >= 1 && *n <= 60000;
            o.timeout_ms = ok ? *n : 0;
        } else if (a == "--rpc-prog") {
            auto n = bench::parse_number<std::uint32_t>(v);
            ok = n.has_value();
            o.rpc_prog = ok ? *n : 0;
        } else if (a == "--sources") {
            auto n = bench::parse_number<unsigned>(v);
            ok = n && *n >= 1 && *n <= 250;
            o.sources = ok ? *n : 0;
        } else if (a == "--rpc-vers") {
            auto n = bench::parse_number<std::uint32_t>(v);
            ok = n.has_value();
            o.rpc_vers = ok ? *n : 0;
        } else {
            std::fprintf(stderr, "pm-load: unknown option %s\n", argv[i - 1]);
            return false;
        }
        if (!ok) {
            std::fprintf(stderr, "pm-load: bad value for %s: %s\n", argv[i - 1], argv[i]);
            return false;
        }
    }
    if (!o.conventional) {
        o.conventional = o.server.address.is_v4() ? *pm::Endpoint::parse("127.0.0.1:80")
                                                  : *pm::Endpoint::parse("[::1]:80");
    }
    return true;
}

void put32(std::uint8_t* p, std::uint32_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 24);
    p[1] = static_cast<std::uint8_t>(v >> 16);
    p[2] = static_cast<std::uint8_t>(v >> 8);
    p[3] = static_cast<std::uint8_t>(v);
}
std::uint32_t get32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

struct Slot {
    std::uint64_t id = 0;  // AssocHandle / XID of the live transaction; 0: free
    Clock::time_point sent;
};

struct Stats {
    std::uint64_t sent = 0;
    std::uint64_t completed = 0;            // matched replies
    std::uint64_t completed_in_period = 0;  // matched before the time/count limit
    std::uint64_t accepts = 0;              // PMAccept / RPC SUCCESS
    std::uint64_t denies = 0;               // PMDeny / RPC error reply
    std::uint64_t echoes = 0;
    std::uint64_t timeouts = 0;
    std::uint64_t late = 0;        // reply for a transaction already timed out
    std::uint64_t unexpected = 0;  // undecodable or foreign datagram
    std::uint64_t acks_sent = 0;
    std::uint64_t send_blocked = 0;  // requests the socket would not take (retried)
    std::uint64_t send_errors = 0;
    std::uint64_t recv_errors = 0;
};

class Generator {
  public:
    explicit Generator(const Options& o) : o_(o), slots_(o.window) {
        free_.reserve(o.window);
        for (unsigned i = o.window; i-- > 0;) {
            free_.push_back(i);
        }
        for (auto& b : bufs_) {
            b.fill(0);
        }
    }
    ~Generator() {
        for (int fd : fds_) {
            ::close(fd);
        }
        if (ep_ >= 0) {
            ::close(ep_);
        }
    }
    Generator(const Generator&) = delete;
    Generator& operator=(const Generator&) = delete;

    bool open() {
        ep_ = ::epoll_create1(EPOLL_CLOEXEC);
        if (ep_ < 0) {
            std::perror("pm-load: epoll_create1");
            return false;
        }
        sockaddr_storage ss;
        const socklen_t len = bench::to_sockaddr(o_.server, ss);
        for (unsigned i = 0; i < o_.clients; ++i) {
            int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                std::perror("pm-load: socket");
                return false;
            }
            fds_.push_back(fd);
            int sz = 4 << 20;
            ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
            ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
            if (o_.sources > 0 && o_.server.address.is_v4()) {
                const auto last = static_cast<std::uint8_t>(1 + i % o_.sources);
                sockaddr_storage local;
                const socklen_t llen = bench::to_sockaddr(
                    pm::Endpoint{pm::IpAddress::v4({127, 0, 0, last}), 0}, local);
                if (::bind(fd, reinterpret_cast<sockaddr*>(&local), llen) != 0) {
                    std::perror("pm-load: bind");
                    return false;
                }
            }
            if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
                std::perror("pm-load: connect");
                return false;
            }
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u32 = i;
            if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
                std::perror("pm-load: epoll_ctl");
                return false;
            }
        }
        return true;
    }

    void run() {
        const auto timeout = std::chrono::milliseconds(o_.timeout_ms);
        t0_ = Clock::now();
        const auto end = t0_ + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o_.duration_s));
        // The drain after the limits is bounded by one timeout.
        auto last_scan = t0_;
        bool stopping = false;
        Clock::time_point drain_end{};
        while (true) {
            const auto now = Clock::now();
            if (!stopping && (now >= end || (o_.max_requests && stats_.sent >= o_.max_requests))) {
                stopping = true;
                period_end_ = now;
                drain_end = now + timeout;
            }
            const std::size_t outstanding = o_.window - free_.size();
            if (stopping && (outstanding == 0 || now >= drain_end)) {
                expire(Clock::time_point::max());
                break;
            }
            if (!stopping) {
                issue(now);
            }
            const std::size_t got = receive_all();
            if (now - last_scan >= std::chrono::milliseconds(5)) {
                expire(now - timeout);
                last_scan = now;
            }
            if (got == 0) {
                epoll_event evs[16];
                ::epoll_wait(ep_, evs, 16, 1);
            }
        }
        t_end_ = Clock::now();
    }

    void print_json() const {
        const double period = std::chrono::duration<double>(period_end_ - t0_).count();
        const double total = std::chrono::duration<double>(t_end_ - t0_).count();
        rusage ru{};
        ::getrusage(RUSAGE_SELF, &ru);
        const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        const char* mode = o_.mode == Mode::pm ? "pm" : o_.mode == Mode::echo ? "echo" : "rpcbind";
        auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
        std::printf(
            "{\"mode\":\"%s\",\"server\":\"%s\",\"clients\":%u,\"window\":%u,"
            "\"duration_s\":%.3f,\"elapsed_s\":%.3f,\"qps_cap\":%.0f,\"timeout_ms\":%u,"
            "\"sent\":%" PRIu64 ",\"completed\":%" PRIu64
            ",\"qps\":%.1f,"
            "\"accepts\":%" PRIu64 ",\"denies\":%" PRIu64 ",\"echoes\":%" PRIu64
            ",\"timeouts\":%" PRIu64 ",\"late\":%" PRIu64 ",\"unexpected\":%" PRIu64
            ",\"acks_sent\":%" PRIu64 ",\"send_blocked\":%" PRIu64 ",\"send_errors\":%" PRIu64
            ",\"recv_errors\":%" PRIu64
            ",\"latency_us\":{\"min\":%.1f,\"mean\":%.1f,\"p50\":%.1f,\"p90\":%.1f,"
            "\"p99\":%.1f,\"p999\":%.1f,\"max\":%.1f},\"generator_cpu_s\":%.3f}\n",
            mode, o_.server.to_string().c_str(), o_.clients, o_.window, period, total, o_.qps,
            o_.timeout_ms, stats_.sent, stats_.completed,
            period > 0 ? static_cast<double>(stats_.completed_in_period) / period : 0.0,
            stats_.accepts, stats_.denies, stats_.echoes, stats_.timeouts, stats_.late,
            stats_.unexpected, stats_.acks_sent, stats_.send_blocked, stats_.send_errors,
            stats_.recv_errors, us(hist_.min()), hist_.mean() / 1000.0, us(hist_.quantile(0.5)),
            us(hist_.quantile(0.9)), us(hist_.quantile(0.99)), us(hist_.quantile(0.999)),
            us(hist_.max()), cpu);
    }

  private:
    std::size_t encode_request(std::uint64_t seq, std::uint32_t slot, std::uint8_t* out,
                               std::uint64_t& id) {
        if (o_.mode == Mode::rpcbind) {
            // XID: a per-run sequence in the high half, the slot in the low half.
            // Never 0 (0 marks a free slot).
            const auto xid = static_cast<std::uint32_t>(((seq % 0xffff + 1) << kSlotBits) | slot);
            id = xid;
            const std::uint32_t words[] = {
                xid, 0 /*CALL*/,  2 /*RPC v2*/, 100000,     2, 3 /*GETPORT*/, 0, 0, 0,
                0,   o_.rpc_prog, o_.rpc_vers,  17 /*UDP*/, 0};
            for (std::size_t i = 0; i < std::size(words); ++i) {
                put32(out + 4 * i, words[i]);
            }
            return sizeof words;
        }
        const pm::Message m = bench::pm_request(*o_.conventional, seq, (seq << kSlotBits) | slot);
        id = m.assoc_handle;
        pm::encode(m, std::span<std::uint8_t, pm::kMessageSize>(out, pm::kMessageSize));
        return pm::kMessageSize;
    }

    void issue(Clock::time_point now) {
        std::uint64_t budget = free_.size();
        if (o_.max_requests) {
            budget = std::min<std::uint64_t>(budget, o_.max_requests - stats_.sent);
        }
        if (o_.qps > 0) {
            const double due = o_.qps * std::chrono::duration<double>(now - t0_).count() + 1;
            const auto allowed = due > static_cast<double>(stats_.sent)
                                     ? static_cast<std::uint64_t>(due) - stats_.sent
                                     : 0;
            budget = std::min(budget, allowed);
        }
        while (budget > 0) {
            const unsigned s = next_socket_;
            next_socket_ = (next_socket_ + 1) % o_.clients;
            const auto n = static_cast<unsigned>(std::min<std::uint64_t>(budget, kBatch));
            std::uint32_t used[kBatch];
            for (unsigned k = 0; k < n; ++k) {
                const std::uint32_t slot = free_.back();
                free_.pop_back();
                used[k] = slot;
                std::uint64_t id = 0;
                iov_[k].iov_base = bufs_[k].data();
                iov_[k].iov_len = encode_request(++seq_, slot, bufs_[k].data(), id);
                slots_[slot].id = id;
                slots_[slot].sent = now;
                msgs_[k] = mmsghdr{};
                msgs_[k].msg_hdr.msg_iov = &iov_[k];
                msgs_[k].msg_hdr.msg_iovlen = 1;
            }
            int r = ::sendmmsg(fds_[s], msgs_, n, 0);
            const unsigned done = r > 0 ? static_cast<unsigned>(r) : 0;
            if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                ++stats_.send_errors;
            }
            for (unsigned k = done; k < n; ++k) {  // not sent: give the slot back
                slots_[used[k]].id = 0;
                free_.push_back(used[k]);
            }
            stats_.sent += done;
            budget -= n;
            if (done < n) {
                stats_.send_blocked += n - done;
                break;
            }
        }
    }

    std::size_t receive_all() {
        std::size_t total = 0;
        for (unsigned s = 0; s < o_.clients; ++s) {
            for (int round = 0; round < 4; ++round) {
                for (unsigned k = 0; k < kBatch; ++k) {
                    iov_[k].iov_base = bufs_[k].data();
                    iov_[k].iov_len = kBufSize;
                    msgs_[k] = mmsghdr{};
                    msgs_[k].msg_hdr.msg_iov = &iov_[k];
                    msgs_[k].msg_hdr.msg_iovlen = 1;
                }
                int r = ::recvmmsg(fds_[s], msgs_, kBatch, MSG_DONTWAIT, nullptr);
                if (r <= 0) {
                    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                        ++stats_.recv_errors;  // e.g. ECONNREFUSED: nothing listening
                    }
                    break;
                }
                const auto now = Clock::now();
                unsigned acks = 0;
                for (int k = 0; k < r; ++k) {
                    on_reply(bufs_[static_cast<std::size_t>(k)].data(), msgs_[k].msg_len, now,
                             acks);
                }
                if (acks > 0) {
                    send_acks(fds_[s], acks);
                }
                total += static_cast<std::size_t>(r);
                if (static_cast<unsigned>(r) < kBatch) {
                    break;
                }
            }
        }
        return total;
    }

    bool complete(std::uint64_t id, Clock::time_point now) {
        const auto slot = static_cast<std::uint32_t>(id & kSlotMask);
        if (slot >= o_.window || slots_[slot].id != id) {
            ++stats_.late;
            return false;
        }
        hist_.record(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - slots_[slot].sent).count()));
        slots_[slot].id = 0;
        free_.push_back(slot);
        ++stats_.completed;
        if (period_end_ == Clock::time_point{}) {
            ++stats_.completed_in_period;
        }
        return true;
    }

    void on_reply(const std::uint8_t* p, unsigned len, Clock::time_point now, unsigned& acks) {
        if (o_.mode == Mode::rpcbind) {
            // xid, REPLY(1), MSG_ACCEPTED(0), verf flavor, verf len(0), accept_stat
            if (len < 24 || get32(p + 4) != 1) {
                ++stats_.unexpected;
                return;
            }
            if (complete(get32(p), now)) {
                const bool ok = get32(p + 8) == 0 && get32(p + 16) == 0 && get32(p + 20) == 0;
                ++(ok ? stats_.accepts : stats_.denies);
            }
            return;
        }
        auto d = pm::decode(std::span<const std::uint8_t>(p, len));
        const auto* m = std::get_if<pm::Message>(&d);
        if (m == nullptr) {
            ++stats_.unexpected;
            return;
        }
        if (o_.mode == Mode::echo) {
            if (m->type == pm::MessageType::request && complete(m->assoc_handle, now)) {
                ++stats_.echoes;
            } else if (m->type != pm::MessageType::request) {
                ++stats_.unexpected;
            }
            return;
        }
        if (m->type == pm::MessageType::accept) {
            if (complete(m->assoc_handle, now)) {
                ++stats_.accepts;
            }
            // A PMAck for every PMAccept, late ones too: the server must not
            // keep state because of the generator.
            pm::encode(pm::make_ack(*m), std::span<std::uint8_t, pm::kMessageSize>(
                                             acks_[acks].data(), pm::kMessageSize));
            ++acks;
        } else if (m->type == pm::MessageType::deny) {
            if (complete(m->assoc_handle, now)) {
                ++stats_.denies;
            }
        } else {
            ++stats_.unexpected;
        }
    }

    void send_acks(int fd, unsigned n) {
        mmsghdr msgs[kBatch];
        iovec iov[kBatch];
        for (unsigned k = 0; k < n; ++k) {
            iov[k].iov_base = acks_[k].data();
            iov[k].iov_len = pm::kMessageSize;
            msgs[k] = mmsghdr{};
            msgs[k].msg_hdr.msg_iov = &iov[k];
            msgs[k].msg_hdr.msg_iovlen = 1;
        }
        unsigned off = 0;
        for (int tries = 0; off < n && tries < 100; ++tries) {
            int r = ::sendmmsg(fd, msgs + off, n - off, 0);
            if (r > 0) {
                off += static_cast<unsigned>(r);
            } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                ++stats_.send_errors;
                break;
            }
        }
        stats_.acks_sent += off;
    }

    // Transactions sent at or before `cutoff` become timeouts.
    void expire(Clock::time_point cutoff) {
        for (std::uint32_t i = 0; i < o_.window; ++i) {
            if (slots_[i].id != 0 && slots_[i].sent <= cutoff) {
                slots_[i].id = 0;
                free_.push_back(i);
                ++stats_.timeouts;
            }
        }
    }

    Options o_;
    std::vector<Slot> slots_;
    std::vector<std::uint32_t> free_;
    std::vector<int> fds_;
    int ep_ = -1;
    unsigned next_socket_ = 0;
    std::uint64_t seq_ = 0;
    std::array<std::array<std::uint8_t, kBufSize>, kBatch> bufs_;
    std::array<std::array<std::uint8_t, pm::kMessageSize>, kBatch> acks_{};
    iovec iov_[kBatch]{};
    mmsghdr msgs_[kBatch]{};
    bench::Histogram hist_;
    Stats stats_;
    Clock::time_point t0_, period_end_, t_end_;
};

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse_args(argc, argv, o)) {
        usage(stderr);
        return 2;
    }
    if (o.mode == Mode::rpcbind && o.window > kSlotMask + 1) {
        return 2;
    }
    Generator g(o);
    if (!g.open()) {
        return 1;
    }
    g.run();
    g.print_json();
    return 0;
}
