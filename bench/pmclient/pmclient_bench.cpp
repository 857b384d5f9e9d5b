// SPDX-License-Identifier: Apache-2.0
// pmclient-bench
//
// 1. Round trips, all measured in the same run and interleaved in rounds (so
//    a change of machine load hits every kind alike), each a median of N
//    sequential round trips of 48-byte datagrams on loopback:
//      echo/thread    raw UDP echo (send, poll, recv) to a server thread
//      echo/process   the same to an echo server in a child process
//      raw-pm/thread  PMReq -> PMAccept -> PMAck by hand (no library)
//                     against an in-process PMSP thread
//      raw-noack/thread  the same without the PMAck (what the PMAck costs)
//      resolve/thread BlockingResolver::resolve (cache off) against that
//                     PMSP thread
//      raw-pm/pmd     PMReq -> PMAccept -> PMAck by hand against a real
//                     sdp-pmd (the floor for a client of that daemon)
//      resolve/pmd    BlockingResolver::resolve (cache off) against sdp-pmd
//      async/pmd      Resolver::async_resolve + std::future on an I/O thread
//                     against sdp-pmd (the path BlockingResolver used to take)
//    and their ratios; plus the load average before and after.
// 2. Google Benchmark: a cache hit in the sans-I/O machine and through the
//    BlockingResolver.
//
//   pmclient-bench [--round-trips N] [--rounds R] [--pin CPU]
//                  [--pmd PATH | --no-pmd] [google benchmark flags]
//
// --rounds R: each kind runs N/R round trips, then the next kind, R times
// over (default R = N: one of each kind in turn). --pin CPU: this process,
// its threads and its children (sdp-pmd, the echo process) run on CPU only,
// so every wake-up is a same-CPU context switch.
//
// PATH defaults to the sdp-pmd built with this tree (SDP_PMD_PATH); without
// it the sdp-pmd rows are skipped.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "libpmclient/src/machine.hpp"
#include "pmclient/resolver.hpp"
#include "pmclient/sockaddr.hpp"

#ifndef SDP_PMD_PATH
#define SDP_PMD_PATH ""
#endif

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const pm::IpAddress& loopback() {
    static const pm::IpAddress a = pm::IpAddress::parse("127.0.0.1").value();
    return a;
}

int bound_udp(std::uint16_t& port) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    return fd;
}

// Serves one UDP socket until `stop` (polled every 20 ms): echoes datagrams,
// or answers PMReqs with PMAccept (pm).
void serve(int fd, bool pm, std::uint8_t pm_time, const std::atomic<bool>* stop) {
    std::uint8_t buf[2048];
    while (stop == nullptr || !*stop) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) {
            continue;
        }
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        ssize_t n = ::recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n <= 0) {
            continue;
        }
        if (!pm) {
            ::sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
            continue;
        }
        auto d = pm::decode(std::span<const std::uint8_t>(buf, static_cast<size_t>(n)));
        if (auto* m = std::get_if<pm::Message>(&d); m && m->type == pm::MessageType::request) {
            auto w = pm::encode(pm::make_accept(*m, pm::Endpoint{m->ap_addr, 7001}, pm_time));
            ::sendto(fd, w.data(), w.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
    }
}

// A loopback UDP server thread: echo, or PMSP answering every PMReq.
class Server {
  public:
    explicit Server(bool pm, std::uint8_t pm_time = 0) {
        fd_ = bound_udp(port_);
        thread_ = std::thread([this, pm, pm_time] { serve(fd_, pm, pm_time, &stop_); });
    }
    ~Server() {
        stop_ = true;
        thread_.join();
        ::close(fd_);
    }
    std::uint16_t port() const { return port_; }

  private:
    int fd_ = -1;
    std::uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// An echo server in a child process, forked before any thread exists.
struct EchoProcess {
    pid_t pid = -1;
    std::uint16_t port = 0;
    void start() {
        int fd = bound_udp(port);
        pid = ::fork();
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            serve(fd, false, 0, nullptr);
            ::_exit(0);
        }
        ::close(fd);
    }
    ~EchoProcess() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    }
};

// The real sdp-pmd on 127.0.0.1:<free port> with one service
// 127.0.0.1:7000 -> 127.0.0.1:7001.
struct Pmd {
    pid_t pid = -1;
    std::uint16_t port = 0;
    std::filesystem::path dir;

    bool start(const std::string& path) {
        int probe = bound_udp(port);
        ::close(probe);
        dir = std::filesystem::temp_directory_path() /
              ("pmclient-bench-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        auto config = (dir / "sdp-pmd.yaml").string();
        // health: off: nothing listens on 127.0.0.1:7001.
        std::ofstream(config) << "listen: [\"127.0.0.1:" << port << "\"]\n"
                              << "health: off\n"
                              << "services:\n"
                              << "  - name: bench\n"
                              << "    conventional: \"127.0.0.1:7000\"\n"
                              << "    sdp: [\"127.0.0.1:7001\"]\n"
                              << "    pm_time: 30s\n";
        pid = ::fork();
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            int null = ::open("/dev/null", O_WRONLY);
            if (null >= 0) {
                ::dup2(null, 1);
                ::dup2(null, 2);
            }
            ::execl(path.c_str(), path.c_str(), "--config", config.c_str(), "--foreground",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
        return pid > 0;
    }
    ~Pmd() {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            int st = 0;
            for (int i = 0; i < 300 && ::waitpid(pid, &st, WNOHANG) == 0; ++i) {
                std::this_thread::sleep_for(10ms);
            }
            if (::waitpid(pid, &st, WNOHANG) == 0) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &st, 0);
            }
        }
        if (!dir.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
        }
    }
};

// Raw UDP round trips to `port`: send, poll, recv.
class EchoClient {
  public:
    explicit EchoClient(std::uint16_t port) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        to.sin_port = htons(port);
        ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to);
    }
    ~EchoClient() { ::close(fd_); }
    bool once() {
        std::uint8_t buf[48] = {};
        ::send(fd_, buf, sizeof buf, 0);
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 1000) > 0 && ::recv(fd_, buf, sizeof buf, 0) > 0;
    }

  private:
    int fd_ = -1;
};

// PMReq -> PMAccept -> PMAck by hand, no library: what any client of the
// PMSP must at least do.
class RawPmClient {
  public:
    explicit RawPmClient(std::uint16_t pmsp_port) : pmsp_{loopback(), pmsp_port} {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        len_ = pm::to_sockaddr(pmsp_, to_);
    }
    ~RawPmClient() { ::close(fd_); }
    // ack=false leaves the PMAck out (only to show what it costs).
    bool once(std::uint16_t cp_port, bool ack = true) {
        pm::Message req;
        req.type = pm::MessageType::request;
        req.ipv = pm::Family::v4;
        req.ap_port = 7000;
        req.ap_addr = loopback();
        req.cp_port = cp_port;
        req.cp_addr = loopback();
        req.assoc_handle = ++handle_ * 0x9E3779B97F4A7C15ull;
        auto w = pm::encode(req);
        ::sendto(fd_, w.data(), w.size(), 0, reinterpret_cast<sockaddr*>(&to_), len_);
        for (int i = 0; i < 8; ++i) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 1000) <= 0) {
                return false;
            }
            std::uint8_t buf[256];
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                return false;
            }
            auto d = pm::decode(std::span<const std::uint8_t>(buf, static_cast<size_t>(n)));
            auto* m = std::get_if<pm::Message>(&d);
            if (m == nullptr || m->assoc_handle != req.assoc_handle) {
                continue;  // a late reply of an earlier exchange
            }
            if (m->type != pm::MessageType::accept) {
                return false;
            }
            if (ack) {
                auto w2 = pm::encode(pm::make_ack(*m));
                ::sendto(fd_, w2.data(), w2.size(), 0, reinterpret_cast<sockaddr*>(&to_), len_);
            }
            return true;
        }
        return false;
    }

  private:
    pm::Endpoint pmsp_;
    int fd_ = -1;
    sockaddr_storage to_{};
    socklen_t len_ = 0;
    std::uint64_t handle_ = 0;
};

pmclient::ResolverOptions no_cache(std::uint16_t pmsp_port) {
    pmclient::ResolverOptions o;
    o.defaults.pmsp = pm::Endpoint{loopback(), pmsp_port};
    o.read_environment = false;
    o.cache_capacity = 0;
    return o;
}

pmclient::ResolveRequest request(int i) {
    return pmclient::ResolveRequest{
        pm::Endpoint{loopback(), 7000},
        pm::Endpoint{loopback(), static_cast<std::uint16_t>(20000 + i % 30000)},
        {}};
}

struct Series {
    std::string name;
    std::function<bool(int)> once;  // one round trip; false: failed
    std::vector<double> us;
    int failures = 0;
    double cpu_us = 0;  // this thread's CPU time (user + system), all round trips

    double quantile(double q) const {
        if (us.empty()) {
            return 0.0;
        }
        auto v = us;
        std::sort(v.begin(), v.end());
        auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
        return v[i];
    }
};

double thread_cpu_us() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string loadavg() {
    double l[3] = {0, 0, 0};
    if (::getloadavg(l, 3) != 3) {
        return "?";
    }
    char b[64];
    std::snprintf(b, sizeof b, "%.2f %.2f %.2f", l[0], l[1], l[2]);
    return b;
}

// Waits (bounded) until the daemon answers a PMReq.
bool pmd_ready(std::uint16_t port) {
    RawPmClient c(port);
    for (int i = 0; i < 50; ++i) {
        if (c.once(static_cast<std::uint16_t>(19000 + i))) {
            return true;
        }
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

void round_trips(int n, int rounds, EchoProcess& echo_proc, Pmd* pmd) {
    Server echo(false);
    Server pmsp(true);
    EchoClient echo_thread_client(echo.port());
    EchoClient echo_proc_client(echo_proc.port);
    pmclient::BlockingResolver thread_resolver(no_cache(pmsp.port()));
    RawPmClient raw_thread(pmsp.port());

    std::vector<Series> series;
    series.push_back({"echo/thread", [&](int) { return echo_thread_client.once(); }, {}, 0});
    series.push_back({"echo/process", [&](int) { return echo_proc_client.once(); }, {}, 0});
    series.push_back(
        {"raw-pm/thread",
         [&](int i) { return raw_thread.once(static_cast<std::uint16_t>(20000 + i % 30000)); },
         {},
         0});
    series.push_back({"raw-noack/thread",
                      [&](int i) {
                          return raw_thread.once(static_cast<std::uint16_t>(20000 + i % 30000),
                                                 false);
                      },
                      {},
                      0});
    series.push_back({"resolve/thread",
                      [&](int i) { return thread_resolver.resolve(request(i)).accepted(); },
                      {},
                      0});

    std::unique_ptr<RawPmClient> raw_pm;
    std::unique_ptr<pmclient::BlockingResolver> pmd_resolver;
    std::unique_ptr<boost::asio::io_context> io;
    std::unique_ptr<pmclient::Resolver> async_resolver;
    std::thread io_thread;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
    if (pmd != nullptr) {
        raw_pm = std::make_unique<RawPmClient>(pmd->port);
        pmd_resolver = std::make_unique<pmclient::BlockingResolver>(no_cache(pmd->port));
        io = std::make_unique<boost::asio::io_context>();
        guard.emplace(io->get_executor());
        async_resolver = std::make_unique<pmclient::Resolver>(*io, no_cache(pmd->port));
        io_thread = std::thread([&] { io->run(); });
        series.push_back(
            {"raw-pm/pmd",
             [&](int i) { return raw_pm->once(static_cast<std::uint16_t>(20000 + i % 30000)); },
             {},
             0});
        series.push_back({"resolve/pmd",
                          [&](int i) { return pmd_resolver->resolve(request(i)).accepted(); },
                          {},
                          0});
        series.push_back({"async/pmd",
                          [&](int i) {
                              return async_resolver
                                  ->async_resolve(request(i), boost::asio::use_future)
                                  .get()
                                  .accepted();
                          },
                          {},
                          0});
    }

    const std::string load_before = loadavg();
    for (auto& s : series) {  // warm up: sockets, caches, branch predictors
        for (int i = 0; i < 50; ++i) {
            s.once(i);
        }
    }
    // Interleaved: batches of `batch` round trips of each kind in turn (1:
    // one of each kind in turn), so that every kind sees the same load.
    const int batch = std::max(1, n / std::max(1, rounds));
    int k = 0;
    for (int done = 0; done < n; done += batch) {
        for (auto& s : series) {
            for (int i = 0; i < batch && done + i < n; ++i, ++k) {
                const double c0 = thread_cpu_us();
                auto t0 = Clock::now();
                bool ok = s.once(k);
                auto dt = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
                s.cpu_us += thread_cpu_us() - c0;
                if (ok) {
                    s.us.push_back(dt);
                } else {
                    ++s.failures;
                }
            }
        }
    }
    const std::string load_after = loadavg();

    if (io_thread.joinable()) {
        async_resolver.reset();
        guard.reset();
        io_thread.join();
    }

    std::printf(
        "round trips: %d per kind, interleaved in batches of %d; load average before %s, after "
        "%s\n",
        n, batch, load_before.c_str(), load_after.c_str());
    // cpu: the calling thread's CPU time per round trip (mean), i.e. what
    // the client itself spends, without the server's time or the waits.
    std::printf("  %-17s %9s %9s %9s %9s %9s\n", "kind", "median", "p10", "p90", "cpu", "failures");
    for (const auto& s : series) {
        const double cpu =
            s.us.empty() ? 0.0 : s.cpu_us / static_cast<double>(s.us.size() + s.failures);
        std::printf("  %-17s %7.1fus %7.1fus %7.1fus %7.1fus %9d\n", s.name.c_str(),
                    s.quantile(0.5), s.quantile(0.1), s.quantile(0.9), cpu, s.failures);
    }
    auto med = [&](const char* name) {
        for (const auto& s : series) {
            if (s.name == name) {
                return s.quantile(0.5);
            }
        }
        return 0.0;
    };
    auto ratio = [&](const char* a, const char* b) {
        double x = med(a);
        double y = med(b);
        std::printf("  ratio %-17s / %-15s %5.2f\n", a, b, y > 0 ? x / y : 0.0);
    };
    ratio("resolve/thread", "echo/thread");
    ratio("resolve/thread", "raw-pm/thread");
    ratio("raw-pm/thread", "echo/thread");
    ratio("raw-noack/thread", "echo/thread");
    if (pmd != nullptr) {
        ratio("resolve/pmd", "echo/process");
        ratio("resolve/pmd", "raw-pm/pmd");
        ratio("raw-pm/pmd", "echo/process");
        ratio("async/pmd", "echo/process");
    }
    std::printf("\n");
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
    o.defaults.pmsp = pm::Endpoint{loopback(), pmsp.port()};
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
    int rounds = -1;
    int pin = -1;
    std::string pmd_path = SDP_PMD_PATH;
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--round-trips") == 0 && i + 1 < argc) {
            n = std::max(1, std::atoi(argv[++i]));
        } else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = std::max(1, std::atoi(argv[++i]));
        } else if (std::strcmp(argv[i], "--pin") == 0 && i + 1 < argc) {
            pin = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--pmd") == 0 && i + 1 < argc) {
            pmd_path = argv[++i];
        } else if (std::strcmp(argv[i], "--no-pmd") == 0) {
            pmd_path.clear();
        } else {
            rest.push_back(argv[i]);
        }
    }
    if (rounds < 0) {
        rounds = n;
    }
    if (pin >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(pin, &set);
        if (::sched_setaffinity(0, sizeof set, &set) != 0) {
            std::perror("sched_setaffinity");
            return 1;
        }
        std::printf("pinned to CPU %d\n", pin);
    }
    // Children are forked before this process starts any thread.
    EchoProcess echo_proc;
    echo_proc.start();
    Pmd pmd;
    bool have_pmd = !pmd_path.empty() && ::access(pmd_path.c_str(), X_OK) == 0 &&
                    pmd.start(pmd_path) && pmd_ready(pmd.port);
    if (!have_pmd) {
        std::printf("sdp-pmd rows skipped (%s)\n",
                    pmd_path.empty() ? "no --pmd" : ("cannot run " + pmd_path).c_str());
    }
    round_trips(n, rounds, echo_proc, have_pmd ? &pmd : nullptr);
    int rc = static_cast<int>(rest.size());
    benchmark::Initialize(&rc, rest.data());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
