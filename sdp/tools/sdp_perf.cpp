// SPDX-License-Identifier: Apache-2.0
// sdp-perf: throughput and latency of SDP (soft iWARP provider, or
// rdma-core with --provider) against kernel TCP on loopback, in the same
// run, for several message sizes.
//
//   sdp-perf [--sizes 64,4096,65536,1048576] [--time SECONDS] [--bytes N]
//            [--no-crc] [--json] [--only sdp|tcp] [--no-latency]
//            [--no-throughput] [--provider soft|rdma|auto] [--addr IP]
//            [--mechanism bcopy|zcopy|auto] [--zcopy-threshold BYTES]
//
// --provider rdma needs an iWARP device; Linux siw does not work on lo with
// rdma_cm, so pass --addr with the siw netdev's address (docs/rdma.md).
//
// Throughput: one stream, the client writes messages of the size for
// --time seconds (or --bytes), the server reads until EOF; rate measured at
// the receiver. Latency: ping-pong of one message each way, for --time/2
// seconds (at most 100000 round trips); median and p99 round trip.
// --only / --no-latency / --no-throughput restrict the run (for profiling);
// ratios are then not printed. CPU: the process's user+system CPU seconds
// per GB moved in the throughput test (both ends are in this process).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sdp/stream.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A connected byte stream: SDP (sdp::Stream) or a kernel TCP socket.
struct Conn {
    virtual ~Conn() = default;
    virtual std::size_t read_some(std::span<std::uint8_t> b, std::error_code& ec) = 0;
    virtual void write(std::span<const std::uint8_t> b, std::error_code& ec) = 0;
    virtual void shutdown_write() = 0;
    virtual void close() = 0;
    bool read_exact(std::span<std::uint8_t> b, std::error_code& ec) {
        std::size_t got = 0;
        while (got < b.size()) {
            std::size_t n = read_some(b.subspan(got), ec);
            if (ec || n == 0) {
                return false;
            }
            got += n;
        }
        return true;
    }
};

struct SdpConn final : Conn {
    sdp::Stream s;
    std::size_t read_some(std::span<std::uint8_t> b, std::error_code& ec) override {
        return s.read_some(b, ec);
    }
    void write(std::span<const std::uint8_t> b, std::error_code& ec) override { s.write(b, ec); }
    void shutdown_write() override { s.shutdown_write(); }
    void close() override { s.close(); }
};

struct TcpConn final : Conn {
    int fd = -1;
    explicit TcpConn(int f) : fd(f) {
        int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    }
    ~TcpConn() override { close(); }
    std::size_t read_some(std::span<std::uint8_t> b, std::error_code& ec) override {
        ssize_t n = ::recv(fd, b.data(), b.size(), 0);
        if (n < 0) {
            ec = {errno, std::generic_category()};
            return 0;
        }
        return static_cast<std::size_t>(n);
    }
    void write(std::span<const std::uint8_t> b, std::error_code& ec) override {
        std::size_t off = 0;
        while (off < b.size()) {
            ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
            if (n <= 0) {
                ec = {errno, std::generic_category()};
                return;
            }
            off += static_cast<std::size_t>(n);
        }
    }
    void shutdown_write() override { ::shutdown(fd, SHUT_WR); }
    void close() override {
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
    }
};

// Closes both ends at once: an SDP close() waits for the peer's DisConn
// (8.2.1), so closing one end after the other would wait out the linger.
void close_both(Conn& a, Conn& b) {
    std::thread t([&] { b.close(); });
    a.close();
    t.join();
}

// Makes a connected pair (client, server) of one kind.
struct PairMaker {
    virtual ~PairMaker() = default;
    virtual bool make(std::unique_ptr<Conn>& client, std::unique_ptr<Conn>& server) = 0;
};

struct SdpPairs final : PairMaker {
    sdp::Acceptor acc;
    sdp::StreamOptions so;
    SdpPairs(bool crc, sdp::Provider prov, const std::string& addr, sdp::Mechanism mech,
             std::size_t zthreshold) {
        so.crc = crc;
        so.mechanism = mech;
        so.zcopy_threshold = zthreshold;
        // A hang guard; not for zcopy: a read lends its buffer for Write
        // Zcopy (9.3) only without io_timeout (docs/sdp.md, "Zero copy").
        so.io_timeout = mech == sdp::Mechanism::zcopy ? 0s : 30s;
        sdp::AcceptorOptions ao;
        ao.stream = so;
        // The acceptor resolves `automatic`; the client uses what it chose.
        ao.stream.iwarp_provider = prov;
        const auto ep = pm::Endpoint::parse(addr + ":0");
        if (!ep) {
            std::fprintf(stderr, "sdp-perf: bad --addr '%s' (expected an IPv4 address)\n",
                         addr.c_str());
            std::exit(2);
        }
        if (auto ec = acc.open(*ep, ao)) {
            std::fprintf(stderr, "sdp-perf: listen (provider %s): %s%s%s\n", sdp::to_string(prov),
                         ec.message().c_str(), acc.open_error().empty() ? "" : ": ",
                         acc.open_error().c_str());
            std::exit(1);
        }
        so.iwarp_provider = acc.listener_provider();
    }
    bool make(std::unique_ptr<Conn>& client, std::unique_ptr<Conn>& server) override {
        auto c = std::make_unique<SdpConn>();
        auto s = std::make_unique<SdpConn>();
        std::error_code aec;
        std::thread t([&] { aec = acc.accept(s->s, 10s); });
        auto cec = c->s.connect_sdp(acc.local_endpoint(), so);
        t.join();
        if (cec || aec) {
            std::fprintf(stderr, "sdp-perf: sdp connect: %s / %s\n", cec.message().c_str(),
                         aec.message().c_str());
            return false;
        }
        client = std::move(c);
        server = std::move(s);
        return true;
    }
};

struct TcpPairs final : PairMaker {
    int lfd = -1;
    sockaddr_in addr{};
    TcpPairs() {
        lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
            ::listen(lfd, 16) != 0 ||
            ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
            std::perror("sdp-perf: tcp listen");
            std::exit(1);
        }
    }
    ~TcpPairs() override { ::close(lfd); }
    bool make(std::unique_ptr<Conn>& client, std::unique_ptr<Conn>& server) override {
        int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            ::close(c);
            return false;
        }
        int s = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (s < 0) {
            ::close(c);
            return false;
        }
        client = std::make_unique<TcpConn>(c);
        server = std::make_unique<TcpConn>(s);
        return true;
    }
};

double cpu_seconds() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct Throughput {
    double mbps = 0;  // MB/s (10^6)
    double cpu_s_per_gb = 0;
    std::uint64_t bytes = 0;
    bool ok = false;
};

Throughput throughput(PairMaker& pm, std::size_t size, std::chrono::duration<double> time,
                      std::uint64_t max_bytes) {
    Throughput r;
    std::unique_ptr<Conn> c, s;
    if (!pm.make(c, s)) {
        return r;
    }
    const double cpu0 = cpu_seconds();
    std::uint64_t got = 0;
    Clock::time_point first{}, last{};
    std::error_code rec;
    std::thread rx([&] {
        std::vector<std::uint8_t> buf(std::max<std::size_t>(size, 256 * 1024));
        while (true) {
            std::size_t n = s->read_some(buf, rec);
            if (rec || n == 0) {
                break;
            }
            if (got == 0) {
                first = Clock::now();
            }
            got += n;
        }
        last = Clock::now();
    });
    std::vector<std::uint8_t> msg(size, 0xA5);
    std::error_code wec;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(time);
    std::uint64_t sent = 0;
    while (Clock::now() < end && sent < max_bytes) {
        // Check the clock every few messages only for tiny sizes.
        for (int i = 0; i < (size < 4096 ? 64 : 1) && sent < max_bytes; ++i) {
            c->write(msg, wec);
            sent += size;
        }
        if (wec) {
            break;
        }
    }
    c->shutdown_write();
    rx.join();
    close_both(*c, *s);
    const double secs = std::chrono::duration<double>(last - first).count();
    r.bytes = got;
    r.ok = !wec && !rec && got == sent && secs > 0;
    r.mbps = secs > 0 ? static_cast<double>(got) / secs / 1e6 : 0;
    r.cpu_s_per_gb = got > 0 ? (cpu_seconds() - cpu0) / (static_cast<double>(got) / 1e9) : 0;
    return r;
}

struct Latency {
    double median_us = 0;
    double p99_us = 0;
    std::size_t rounds = 0;
    bool ok = false;
};

Latency latency(PairMaker& pm, std::size_t size, std::chrono::duration<double> time) {
    Latency r;
    std::unique_ptr<Conn> c, s;
    if (!pm.make(c, s)) {
        return r;
    }
    std::error_code sec;
    std::thread echo([&] {
        std::vector<std::uint8_t> buf(size);
        while (s->read_exact(buf, sec)) {
            s->write(buf, sec);
            if (sec) {
                break;
            }
        }
    });
    std::vector<std::uint8_t> msg(size, 0x3C), back(size);
    std::vector<double> rtts;
    std::error_code ec;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(time);
    // Warm-up round trips, not counted.
    for (int i = 0; i < 10 && !ec; ++i) {
        c->write(msg, ec);
        c->read_exact(back, ec);
    }
    while (!ec && Clock::now() < end && rtts.size() < 100000) {
        auto t0 = Clock::now();
        c->write(msg, ec);
        if (ec || !c->read_exact(back, ec)) {
            break;
        }
        rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    c->shutdown_write();
    echo.join();
    close_both(*c, *s);
    if (rtts.empty()) {
        return r;
    }
    std::sort(rtts.begin(), rtts.end());
    r.rounds = rtts.size();
    r.median_us = rtts[rtts.size() / 2];
    r.p99_us = rtts[std::min(rtts.size() - 1, rtts.size() * 99 / 100)];
    r.ok = !ec;
    return r;
}

std::string human(std::size_t n) {
    if (n >= 1024 * 1024 && n % (1024 * 1024) == 0) {
        return std::to_string(n / (1024 * 1024)) + " MiB";
    }
    if (n >= 1024 && n % 1024 == 0) {
        return std::to_string(n / 1024) + " KiB";
    }
    return std::to_string(n) + " B";
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::size_t> sizes{64, 4096, 65536, 1048576};
    double secs = 1.0;
    std::uint64_t max_bytes = 8ull << 30;
    bool crc = true, json = false;
    bool run_sdp = true, run_tcp = true, run_tput = true, run_lat = true;
    sdp::Provider prov = sdp::Provider::soft;
    std::string sdp_addr = "127.0.0.1";
    sdp::Mechanism mech = sdp::Mechanism::bcopy;
    std::size_t zthreshold = sdp::StreamOptions{}.zcopy_threshold;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "sdp-perf: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--sizes") {
            sizes.clear();
            std::stringstream ss(next());
            std::string item;
            while (std::getline(ss, item, ',')) {
                sizes.push_back(std::stoul(item));
            }
        } else if (a == "--time") {
            secs = std::stod(next());
        } else if (a == "--bytes") {
            max_bytes = std::stoull(next());
        } else if (a == "--no-crc") {
            crc = false;
        } else if (a == "--json") {
            json = true;
        } else if (a == "--only") {
            const std::string w = next();
            run_sdp = w == "sdp";
            run_tcp = w == "tcp";
        } else if (a == "--no-latency") {
            run_lat = false;
        } else if (a == "--no-throughput") {
            run_tput = false;
        } else if (a == "--addr") {
            // Both SDP ends on this address (siw does not work on lo: use
            // the siw netdev's address); kernel TCP stays on loopback.
            sdp_addr = next();
        } else if (a == "--mechanism") {
            const std::string v = next();
            const auto m = sdp::parse_mechanism(v);
            if (!m) {
                std::fprintf(stderr,
                             "sdp-perf: bad --mechanism '%s' (expected bcopy, zcopy or auto)\n",
                             v.c_str());
                return 2;
            }
            mech = *m;
        } else if (a == "--zcopy-threshold") {
            zthreshold = std::stoull(next());
        } else if (a == "--provider") {
            const std::string v = next();
            const auto p = sdp::parse_provider(v);
            if (!p) {
                std::fprintf(stderr,
                             "sdp-perf: bad --provider '%s' (expected soft, rdma or auto)\n",
                             v.c_str());
                return 2;
            }
            prov = *p;
        } else {
            std::fprintf(stderr,
                         "usage: sdp-perf [--sizes 64,4096,...] [--time SECONDS] [--bytes N] "
                         "[--no-crc] [--json] [--only sdp|tcp] [--no-latency] "
                         "[--no-throughput] [--provider soft|rdma|auto] [--addr IP] "
                         "[--mechanism bcopy|zcopy|auto] [--zcopy-threshold BYTES]\n");
            return a == "-h" || a == "--help" ? 0 : 2;
        }
    }
    SdpPairs sdp_pairs(crc, prov, sdp_addr, mech, zthreshold);
    TcpPairs tcp_pairs;
    const std::chrono::duration<double> t(secs), lt(secs / 2);
    if (!json) {
        if (sdp_pairs.acc.listener_provider() == sdp::Provider::rdma) {
            std::printf(
                "sdp-perf: loopback, rdma-core iWARP provider vs kernel TCP, %.1f s per test\n",
                secs);
        } else {
            std::printf(
                "sdp-perf: loopback, soft iWARP (MPA CRC %s, %s) vs kernel TCP, %.1f s per test\n",
                crc ? "on" : "off", sdp::to_string(mech), secs);
        }
        std::printf("%-8s | %9s %9s %6s | %8s %8s | %9s %9s %6s | %9s %9s\n", "size", "sdp MB/s",
                    "tcp MB/s", "ratio", "sdp cpu", "tcp cpu", "sdp rtt", "tcp rtt", "ratio",
                    "sdp p99", "tcp p99");
    } else {
        std::printf(
            "{\"crc\": %s, \"provider\": \"%s\", \"mechanism\": \"%s\", \"seconds\": %.3f, "
            "\"results\": [",
            crc ? "true" : "false", sdp::to_string(sdp_pairs.acc.listener_provider()),
            sdp::to_string(mech), secs);
    }
    bool all_ok = true;
    bool first = true;
    for (std::size_t size : sizes) {
        Throughput st, tt;
        Latency sl, tl;
        if (run_tput && run_sdp) {
            st = throughput(sdp_pairs, size, t, max_bytes);
        }
        if (run_tput && run_tcp) {
            tt = throughput(tcp_pairs, size, t, max_bytes);
        }
        if (run_lat && run_sdp) {
            sl = latency(sdp_pairs, size, lt);
        }
        if (run_lat && run_tcp) {
            tl = latency(tcp_pairs, size, lt);
        }
        const bool ok = (!run_tput || ((!run_sdp || st.ok) && (!run_tcp || tt.ok))) &&
                        (!run_lat || ((!run_sdp || sl.ok) && (!run_tcp || tl.ok)));
        all_ok = all_ok && ok;
        const double tr = tt.mbps > 0 ? st.mbps / tt.mbps : 0;
        const double lr = tl.median_us > 0 ? sl.median_us / tl.median_us : 0;
        if (!json) {
            // cpu: CPU seconds (both ends) per GB moved.
            std::printf(
                "%-8s | %9.1f %9.1f %5.2fx | %8.2f %8.2f | %9.1f %9.1f %5.2fx | %9.1f %9.1f%s\n",
                human(size).c_str(), st.mbps, tt.mbps, tr, st.cpu_s_per_gb, tt.cpu_s_per_gb,
                sl.median_us, tl.median_us, lr, sl.p99_us, tl.p99_us, ok ? "" : "  (error)");
        } else {
            std::printf(
                "%s{\"size\": %zu, \"sdp_mbps\": %.1f, \"tcp_mbps\": %.1f, "
                "\"throughput_ratio\": %.3f, \"sdp_cpu_s_per_gb\": %.3f, "
                "\"tcp_cpu_s_per_gb\": %.3f, \"sdp_rtt_us\": %.2f, \"tcp_rtt_us\": %.2f, "
                "\"latency_ratio\": %.3f, \"sdp_p99_us\": %.2f, \"tcp_p99_us\": %.2f, "
                "\"ok\": %s}",
                first ? "" : ", ", size, st.mbps, tt.mbps, tr, st.cpu_s_per_gb, tt.cpu_s_per_gb,
                sl.median_us, tl.median_us, lr, sl.p99_us, tl.p99_us, ok ? "true" : "false");
        }
        first = false;
        std::fflush(stdout);
    }
    if (json) {
        std::printf("]}\n");
    }
    return all_ok ? 0 : 1;
}
