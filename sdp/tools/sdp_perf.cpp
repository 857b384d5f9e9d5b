// SPDX-License-Identifier: Apache-2.0
// sdp-perf: throughput and latency of SDP (soft iWARP provider, or
// rdma-core with --provider) against kernel TCP on loopback, in the same
// run, for several message sizes.
//
//   sdp-perf [--sizes 64,4096,65536,1048576] [--time SECONDS] [--bytes N]
//            [--no-crc] [--json] [--only sdp|tcp] [--no-latency]
//            [--no-throughput] [--provider soft|rdma|auto] [--addr IP]
//            [--mechanism bcopy|zcopy|auto[,...]|all] [--runs N]
//            [--zcopy-threshold BYTES]
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
//
// --mechanism takes a list (all = bcopy,zcopy,auto): for each size kernel
// TCP is measured once and every listed mechanism against that baseline.
// --runs N (1..20) repeats the whole measurement, the mechanisms alternating
// inside each run; every run's rows are printed, then min-max per size and
// mechanism.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
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

constexpr sdp::Mechanism kAllMechanisms[] = {sdp::Mechanism::bcopy, sdp::Mechanism::zcopy,
                                             sdp::Mechanism::automatic};
constexpr unsigned kMaxRuns = 20;

// --mechanism: a comma-separated list of bcopy, zcopy and auto, or all (=
// bcopy,zcopy,auto). An empty list or item, an unknown name or a mechanism
// given twice gives nullopt and the reason in `why`.
std::optional<std::vector<sdp::Mechanism>> parse_mechanisms(const std::string& v,
                                                            std::string& why) {
    std::vector<sdp::Mechanism> out;
    std::size_t pos = 0;
    while (true) {
        const std::size_t comma = v.find(',', pos);
        const std::string item =
            v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        std::vector<sdp::Mechanism> add;
        if (item == "all") {
            add.assign(std::begin(kAllMechanisms), std::end(kAllMechanisms));
        } else if (const auto m = sdp::parse_mechanism(item)) {
            add.push_back(*m);
        } else {
            why = v.empty()      ? "empty list"
                  : item.empty() ? "empty item"
                                 : "unknown mechanism '" + item + "'";
            return std::nullopt;
        }
        for (const auto m : add) {
            if (std::find(out.begin(), out.end(), m) != out.end()) {
                why = std::string(sdp::to_string(m)) + " given twice";
                return std::nullopt;
            }
            out.push_back(m);
        }
        if (comma == std::string::npos) {
            return out;
        }
        pos = comma + 1;
    }
}

// A number in the whole of `v` (an integer type: a whole number), else nullopt.
template <typename T>
std::optional<T> parse_number(const std::string& v) {
    T n{};
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc{} || end != v.data() + v.size()) {
        return std::nullopt;
    }
    return n;
}

// The value of a number option; anything else is a usage error (exit 2).
template <typename T>
T number_arg(const std::string& opt, const std::string& v) {
    const auto n = parse_number<T>(v);
    if (!n) {
        std::fprintf(stderr, "sdp-perf: bad %s '%s' (expected a number)\n", opt.c_str(), v.c_str());
        std::exit(2);
    }
    return *n;
}

// One SDP mechanism at one size in one run, with the kernel TCP baseline
// measured for that size in that run (shared by every mechanism).
struct Sample {
    unsigned run = 0;  // from 1
    std::size_t size = 0;
    sdp::Mechanism mech = sdp::Mechanism::bcopy;
    Throughput st, tt;
    Latency sl, tl;
    bool ok = false;
    double tput_ratio() const { return tt.mbps > 0 ? st.mbps / tt.mbps : 0; }
    double rtt_ratio() const { return tl.median_us > 0 ? sl.median_us / tl.median_us : 0; }
};

// Which optional columns the text table has: the run number with --runs
// above 1, the mechanism with several. One mechanism and one run print
// the table as before these options existed.
struct Columns {
    bool run = false;
    bool mech = false;
    std::string prefix(const std::string& run_col, const std::string& size_col,
                       const std::string& mech_col) const {
        char buf[64];
        std::string out;
        if (run) {
            std::snprintf(buf, sizeof buf, "%-3s | ", run_col.c_str());
            out += buf;
        }
        std::snprintf(buf, sizeof buf, "%-8s | ", size_col.c_str());
        out += buf;
        if (mech) {
            std::snprintf(buf, sizeof buf, "%-5s | ", mech_col.c_str());
            out += buf;
        }
        return out;
    }
};

void print_row(const Columns& cols, const Sample& s) {
    // cpu: CPU seconds (both ends) per GB moved.
    std::printf("%s%9.1f %9.1f %5.2fx | %8.2f %8.2f | %9.1f %9.1f %5.2fx | %9.1f %9.1f%s\n",
                cols.prefix(std::to_string(s.run), human(s.size), sdp::to_string(s.mech)).c_str(),
                s.st.mbps, s.tt.mbps, s.tput_ratio(), s.st.cpu_s_per_gb, s.tt.cpu_s_per_gb,
                s.sl.median_us, s.tl.median_us, s.rtt_ratio(), s.sl.p99_us, s.tl.p99_us,
                s.ok ? "" : "  (error)");
}

void print_json_row(const Sample& s, bool first) {
    std::printf(
        "%s{\"run\": %u, \"size\": %zu, \"mechanism\": \"%s\", \"sdp_mbps\": %.1f, "
        "\"tcp_mbps\": %.1f, \"throughput_ratio\": %.3f, \"sdp_cpu_s_per_gb\": %.3f, "
        "\"tcp_cpu_s_per_gb\": %.3f, \"sdp_rtt_us\": %.2f, \"tcp_rtt_us\": %.2f, "
        "\"latency_ratio\": %.3f, \"sdp_p99_us\": %.2f, \"tcp_p99_us\": %.2f, \"ok\": %s}",
        first ? "" : ", ", s.run, s.size, sdp::to_string(s.mech), s.st.mbps, s.tt.mbps,
        s.tput_ratio(), s.st.cpu_s_per_gb, s.tt.cpu_s_per_gb, s.sl.median_us, s.tl.median_us,
        s.rtt_ratio(), s.sl.p99_us, s.tl.p99_us, s.ok ? "true" : "false");
}

// Smallest and largest value of one quantity over the runs.
struct Range {
    double lo = 0, hi = 0;
    bool any = false;
    void add(double v) {
        lo = any ? std::min(lo, v) : v;
        hi = any ? std::max(hi, v) : v;
        any = true;
    }
};

// The runs of one (size, mechanism).
struct Summary {
    std::size_t size = 0;
    sdp::Mechanism mech = sdp::Mechanism::bcopy;
    unsigned errors = 0;
    Range tput_ratio, rtt_ratio, sdp_mbps, tcp_mbps, sdp_cpu, tcp_cpu, sdp_rtt, tcp_rtt;
};

std::vector<Summary> summarize(const std::vector<Sample>& samples) {
    std::vector<Summary> out;
    for (const Sample& s : samples) {
        auto it = std::find_if(out.begin(), out.end(), [&](const Summary& x) {
            return x.size == s.size && x.mech == s.mech;
        });
        if (it == out.end()) {
            it = out.insert(out.end(), Summary{});
            it->size = s.size;
            it->mech = s.mech;
        }
        it->errors += s.ok ? 0 : 1;
        it->tput_ratio.add(s.tput_ratio());
        it->rtt_ratio.add(s.rtt_ratio());
        it->sdp_mbps.add(s.st.mbps);
        it->tcp_mbps.add(s.tt.mbps);
        it->sdp_cpu.add(s.st.cpu_s_per_gb);
        it->tcp_cpu.add(s.tt.cpu_s_per_gb);
        it->sdp_rtt.add(s.sl.median_us);
        it->tcp_rtt.add(s.tl.median_us);
    }
    return out;
}

std::string span_text(const Range& r, const char* fmt) {
    char lo[32], hi[32];
    std::snprintf(lo, sizeof lo, fmt, r.lo);
    std::snprintf(hi, sizeof hi, fmt, r.hi);
    return std::string(lo) + "-" + hi;
}

void print_summary(const std::vector<Summary>& sums, unsigned runs) {
    std::printf("min-max over %u runs:\n", runs);
    std::printf("%-8s | %-5s | %-13s | %-15s | %-11s | %-11s | %s\n", "size", "mech", "tput ratio",
                "sdp MB/s", "sdp cpu", "tcp cpu", "rtt ratio");
    for (const Summary& s : sums) {
        std::printf("%-8s | %-5s | %-13s | %-15s | %-11s | %-11s | %s%s\n", human(s.size).c_str(),
                    sdp::to_string(s.mech), span_text(s.tput_ratio, "%.2fx").c_str(),
                    span_text(s.sdp_mbps, "%.1f").c_str(), span_text(s.sdp_cpu, "%.2f").c_str(),
                    span_text(s.tcp_cpu, "%.2f").c_str(), span_text(s.rtt_ratio, "%.2fx").c_str(),
                    s.errors == 0 ? "" : ("  (" + std::to_string(s.errors) + " errors)").c_str());
    }
}

void print_json_summary(const std::vector<Summary>& sums) {
    std::printf(", \"summary\": [");
    bool first = true;
    for (const Summary& s : sums) {
        std::printf("%s{\"size\": %zu, \"mechanism\": \"%s\", \"errors\": %u", first ? "" : ", ",
                    s.size, sdp::to_string(s.mech), s.errors);
        const std::pair<const char*, const Range*> fields[] = {
            {"throughput_ratio", &s.tput_ratio}, {"latency_ratio", &s.rtt_ratio},
            {"sdp_mbps", &s.sdp_mbps},           {"tcp_mbps", &s.tcp_mbps},
            {"sdp_cpu_s_per_gb", &s.sdp_cpu},    {"tcp_cpu_s_per_gb", &s.tcp_cpu},
            {"sdp_rtt_us", &s.sdp_rtt},          {"tcp_rtt_us", &s.tcp_rtt}};
        for (const auto& [name, r] : fields) {
            std::printf(", \"%s\": {\"min\": %.3f, \"max\": %.3f}", name, r->lo, r->hi);
        }
        std::printf("}");
        first = false;
    }
    std::printf("]");
}

std::string join_names(const std::vector<sdp::Mechanism>& mechs, const char* sep) {
    std::string out;
    for (const auto m : mechs) {
        out += (out.empty() ? "" : sep);
        out += sdp::to_string(m);
    }
    return out;
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
    std::vector<sdp::Mechanism> mechs{sdp::Mechanism::bcopy};
    unsigned runs = 1;
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
                sizes.push_back(number_arg<std::size_t>(a, item));
            }
        } else if (a == "--time") {
            secs = number_arg<double>(a, next());
        } else if (a == "--bytes") {
            max_bytes = number_arg<std::uint64_t>(a, next());
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
            std::string why;
            const auto m = parse_mechanisms(v, why);
            if (!m) {
                std::fprintf(stderr,
                             "sdp-perf: bad --mechanism '%s' (%s; expected bcopy, zcopy, auto "
                             "or all, comma-separated, each once)\n",
                             v.c_str(), why.c_str());
                return 2;
            }
            mechs = *m;
        } else if (a == "--runs") {
            const std::string v = next();
            const auto n = parse_number<unsigned>(v);
            if (!n || *n < 1 || *n > kMaxRuns) {
                std::fprintf(stderr,
                             "sdp-perf: bad --runs '%s' (expected a whole number from 1 to "
                             "%u)\n",
                             v.c_str(), kMaxRuns);
                return 2;
            }
            runs = *n;
        } else if (a == "--zcopy-threshold") {
            zthreshold = number_arg<std::size_t>(a, next());
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
                         "[--mechanism bcopy|zcopy|auto[,...]|all] [--runs 1-20] "
                         "[--zcopy-threshold BYTES]\n");
            return a == "-h" || a == "--help" ? 0 : 2;
        }
    }
    // One acceptor per mechanism (the mechanism is a stream option of both
    // ends); kernel TCP once, the baseline of every mechanism.
    std::vector<std::unique_ptr<SdpPairs>> sdp_pairs;
    for (const auto m : mechs) {
        sdp_pairs.push_back(std::make_unique<SdpPairs>(crc, prov, sdp_addr, m, zthreshold));
    }
    TcpPairs tcp_pairs;
    const std::chrono::duration<double> t(secs), lt(secs / 2);
    const sdp::Provider used = sdp_pairs.front()->acc.listener_provider();
    const Columns cols{.run = runs > 1, .mech = mechs.size() > 1};
    if (!json) {
        if (used == sdp::Provider::rdma) {
            std::printf(
                "sdp-perf: loopback, rdma-core iWARP provider vs kernel TCP, %.1f s per test\n",
                secs);
        } else {
            std::printf(
                "sdp-perf: loopback, soft iWARP (MPA CRC %s, %s) vs kernel TCP, %.1f s per test\n",
                crc ? "on" : "off", join_names(mechs, ", ").c_str(), secs);
        }
        if (runs > 1) {
            std::printf("runs: %u (every run's rows, then min-max per size and mechanism)\n", runs);
        }
        std::printf("%s%9s %9s %6s | %8s %8s | %9s %9s %6s | %9s %9s\n",
                    cols.prefix("run", "size", "mech").c_str(), "sdp MB/s", "tcp MB/s", "ratio",
                    "sdp cpu", "tcp cpu", "sdp rtt", "tcp rtt", "ratio", "sdp p99", "tcp p99");
    } else {
        std::printf(
            "{\"crc\": %s, \"provider\": \"%s\", \"mechanism\": \"%s\", \"mechanisms\": [\"%s\"], "
            "\"runs\": %u, \"seconds\": %.3f, \"results\": [",
            crc ? "true" : "false", sdp::to_string(used), join_names(mechs, ",").c_str(),
            join_names(mechs, "\", \"").c_str(), runs, secs);
    }
    bool all_ok = true;
    std::vector<Sample> samples;
    const std::size_t nm = mechs.size();
    for (unsigned run = 1; run <= runs; ++run) {
        for (std::size_t size : sizes) {
            std::vector<Sample> row(nm);
            // Measurement order: the mechanisms one after the other, the
            // first one moving on by one each run, then kernel TCP (with one
            // mechanism: SDP then TCP, as before --runs existed).
            std::vector<std::size_t> order(nm);
            for (std::size_t k = 0; k < nm; ++k) {
                order[k] = (k + run - 1) % nm;
            }
            Throughput tt;
            Latency tl;
            if (run_tput) {
                for (std::size_t k : order) {
                    if (run_sdp) {
                        row[k].st = throughput(*sdp_pairs[k], size, t, max_bytes);
                    }
                }
                if (run_tcp) {
                    tt = throughput(tcp_pairs, size, t, max_bytes);
                }
            }
            if (run_lat) {
                for (std::size_t k : order) {
                    if (run_sdp) {
                        row[k].sl = latency(*sdp_pairs[k], size, lt);
                    }
                }
                if (run_tcp) {
                    tl = latency(tcp_pairs, size, lt);
                }
            }
            for (std::size_t k = 0; k < nm; ++k) {
                Sample& s = row[k];
                s.run = run;
                s.size = size;
                s.mech = mechs[k];
                s.tt = tt;
                s.tl = tl;
                s.ok = (!run_tput || ((!run_sdp || s.st.ok) && (!run_tcp || tt.ok))) &&
                       (!run_lat || ((!run_sdp || s.sl.ok) && (!run_tcp || tl.ok)));
                all_ok = all_ok && s.ok;
                if (json) {
                    print_json_row(s, samples.empty());
                } else {
                    print_row(cols, s);
                }
                samples.push_back(s);
            }
            std::fflush(stdout);
        }
    }
    if (json) {
        std::printf("]");
        print_json_summary(summarize(samples));
        std::printf("}\n");
    } else if (runs > 1) {
        print_summary(summarize(samples), runs);
    }
    return all_ok ? 0 : 1;
}
