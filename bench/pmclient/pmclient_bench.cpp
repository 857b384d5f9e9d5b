// pmclient-bench
//
// 1. Round trip: N sequential resolutions (cache off) against an in-process
//    PMSP on loopback, and N sequential raw UDP echo round trips of the same
//    48-byte size, in the same run; prints both medians and their ratio.
// 2. Google Benchmark: a cache hit in the sans-I/O machine and through the
//    BlockingResolver.
//
//   pmclient-bench [--round-trips N] [google benchmark flags]
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pmclient/machine.hpp"
#include "pmclient/resolver.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// A loopback UDP server thread: echoes datagrams, or answers PMReqs with
// PMAccept (mode pm).
class Server {
  public:
    explicit Server(bool pm, std::uint8_t pm_time = 0) : pm_(pm), pm_time_(pm_time) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len);
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    ~Server() {
        stop_ = true;
        thread_.join();
        ::close(fd_);
    }
    std::uint16_t port() const { return port_; }

  private:
    void run() {
        std::uint8_t buf[2048];
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) {
                continue;
            }
            sockaddr_storage from{};
            socklen_t len = sizeof from;
            ssize_t n =
                ::recvfrom(fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n <= 0) {
                continue;
            }
            if (!pm_) {
                ::sendto(fd_, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
                         len);
                continue;
            }
            auto d = pm::decode(std::span<const std::uint8_t>(buf, static_cast<size_t>(n)));
            if (auto* m = std::get_if<pm::Message>(&d); m && m->type == pm::MessageType::request) {
                auto w = pm::encode(pm::make_accept(*m, pm::Endpoint{m->ap_addr, 7001}, pm_time_));
                ::sendto(fd_, w.data(), w.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
            }
        }
    }
    bool pm_;
    std::uint8_t pm_time_;
    int fd_ = -1;
    std::uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

double median_us(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

void round_trips(int n) {
    Server echo(false);
    Server pmsp(true);
    // Raw UDP echo.
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(echo.port());
    ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
    std::vector<double> raw;
    std::uint8_t buf[48] = {};
    for (int i = 0; i < n; ++i) {
        auto t0 = Clock::now();
        ::send(fd, buf, sizeof buf, 0);
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 1000) <= 0 || ::recv(fd, buf, sizeof buf, 0) <= 0) {
            continue;
        }
        raw.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    ::close(fd);

    // PM resolution (cache off), one BlockingResolver.
    pmclient::ResolverOptions o;
    o.defaults.pmsp = pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), pmsp.port()};
    o.read_environment = false;
    o.cache_capacity = 0;
    pmclient::BlockingResolver r(o);
    std::vector<double> pm;
    int failures = 0;
    for (int i = 0; i < n; ++i) {
        pmclient::ResolveRequest rq{pm::Endpoint::parse("127.0.0.1:7000").value(),
                                    pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(),
                                                 static_cast<std::uint16_t>(20000 + i % 30000)},
                                    {}};
        auto t0 = Clock::now();
        auto res = r.resolve(rq);
        if (!res.accepted()) {
            ++failures;
            continue;
        }
        pm.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    double a = median_us(raw);
    double b = median_us(pm);
    std::printf("round trips: %d each\n", n);
    std::printf("  raw UDP echo       median %8.1f us\n", a);
    std::printf("  PM resolution      median %8.1f us (%d failures)\n", b, failures);
    std::printf("  ratio resolution/echo: %.2f\n\n", a > 0 ? b / a : 0.0);
    std::fflush(stdout);
}

void BM_CacheHitMachine(benchmark::State& state) {
    pmclient::Machine m;
    pmclient::Actions out;
    pmclient::Query q;
    q.conventional = pm::Endpoint::parse("10.0.0.1:7000").value();
    q.cp = pm::Endpoint::parse("10.0.0.2:40000").value();
    q.pmsp = pm::Endpoint::parse("10.0.0.1:3935").value();
    auto now = pmclient::TimePoint{} + std::chrono::hours(1);
    m.start(q, now, 1, out);
    auto req = std::get<pm::Message>(pm::decode(out.sends.at(0).bytes));
    out.clear();
    m.on_datagram(pm::encode(pm::make_accept(req, pm::Endpoint{req.ap_addr, 7001}, 255)), q.pmsp,
                  now, out);
    for (auto _ : state) {
        out.clear();
        m.start(q, now, 2, out);
        benchmark::DoNotOptimize(out.completions.data());
    }
}
BENCHMARK(BM_CacheHitMachine);

void BM_CacheHitBlockingResolver(benchmark::State& state) {
    Server pmsp(true, pm::kPmTimePermanent);  // the first answer stays cached
    pmclient::ResolverOptions o;
    o.defaults.pmsp = pm::Endpoint{pm::IpAddress::parse("127.0.0.1").value(), pmsp.port()};
    o.read_environment = false;
    pmclient::BlockingResolver r(o);
    pmclient::ResolveRequest rq{pm::Endpoint::parse("127.0.0.1:7000").value(),
                                pm::Endpoint::parse("127.0.0.1:40000").value(),
                                {}};
    auto first = r.resolve(rq);
    if (!first.accepted()) {
        state.SkipWithError("PMSP did not answer");
        return;
    }
    for (auto _ : state) {
        auto res = r.resolve(rq);
        benchmark::DoNotOptimize(res.sdp);
    }
    state.counters["cache_hits"] = static_cast<double>(r.resolver().counters().cache_hits);
}
BENCHMARK(BM_CacheHitBlockingResolver)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    int n = 2000;
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--round-trips") == 0 && i + 1 < argc) {
            n = std::max(1, std::atoi(argv[++i]));
        } else {
            rest.push_back(argv[i]);
        }
    }
    round_trips(n);
    int rc = static_cast<int>(rest.size());
    benchmark::Initialize(&rc, rest.data());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
