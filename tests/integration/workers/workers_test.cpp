// SPDX-License-Identifier: Apache-2.0
// sdp-pmd with several UDP worker shards, end to end: the real daemon (with
// `workers: N`) and the real sdp-pmctl on loopback. Clients bind distinct
// 127.0.0.x addresses to stand for distinct sources.
//
//  - Many sources resolve and acknowledge: every PMReq is accepted, every
//    transaction released, the per-worker counters add up to the totals and
//    every worker served some of the sources.
//  - One source address from many ports lands on ONE worker: the
//    source-address steering program is attached (a kernel 4-tuple hash
//    would spread the ports).
//  - A duplicate PMReq and the PMAck reach the shard that holds the
//    transaction (answered as duplicate, then released as acked).
//  - limits.per_source stays exact: one address sending from many ports
//    gets at most burst + rate x elapsed accepted.
//  - A registration made through the control socket reaches every shard.
//
// No timing is asserted; every wait and loop is bounded.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/daemon/harness.hpp"
#include "pmclient/message.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using pmtest::Process;
using pmtest::UdpClient;
namespace fs = std::filesystem;

pm::Endpoint ep(const std::string& text) {
    return *pm::Endpoint::parse(text);
}

pm::IpAddress source(unsigned i) {
    // 127.0.0.10 .. 127.0.0.250, then 127.0.1.x: all loopback.
    return pm::IpAddress::v4(
        {127, 0, static_cast<std::uint8_t>(i / 240), static_cast<std::uint8_t>(10 + i % 240)});
}

std::vector<std::uint8_t> request(std::uint64_t handle, const pm::Endpoint& ap,
                                  const pm::Endpoint& cp) {
    pm::Message m;
    m.type = pm::MessageType::request;
    m.ipv = ap.address.family();
    m.ap_addr = ap.address;
    m.ap_port = ap.port;
    m.cp_addr = cp.address;
    m.cp_port = cp.port;
    m.assoc_handle = handle;
    auto w = pm::encode(m);
    return {w.begin(), w.end()};
}

std::optional<pm::Message> decode(const std::optional<UdpClient::Datagram>& d) {
    if (!d) {
        return std::nullopt;
    }
    auto r = pm::decode(d->bytes);
    if (const auto* m = std::get_if<pm::Message>(&r)) {
        return *m;
    }
    return std::nullopt;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

class Workers : public ::testing::Test {
  protected:
    void start(unsigned workers, const std::string& extra = "") {
        ASSERT_TRUE(dir_.ok());
        const std::string dir = dir_.path().string();
        daemon_ = pmtest::start_pmd(
            SDPPM_PMD_BIN, dir_.path(),
            [&](std::uint16_t port) {
                std::string y = R"(listen: ["127.0.0.1:{PORT}"]
workers: {N}
log_level: notice
max_transactions: 100000
control:
  socket: "{DIR}/control.sock"
state_file: "{DIR}/registrations.json"
health: off
services:
  - name: web
    conventional: "127.0.0.1:80"
    sdp: ["127.0.0.1:8080"]
    pm_time: 30s
{EXTRA}
)";
                y = replace_all(y, "{PORT}", std::to_string(port));
                y = replace_all(y, "{N}", std::to_string(workers));
                y = replace_all(y, "{DIR}", dir);
                return replace_all(y, "{EXTRA}", extra);
            },
            port_);
        ASSERT_TRUE(daemon_) << log();
        workers_ = workers;
        // Startup logs how many listen addresses are steered by source.
        ASSERT_NE(log().find(std::to_string(workers) + " workers; 1 of 1 listen addresses steered"),
                  std::string::npos)
            << log();
    }
    void TearDown() override {
        if (daemon_ && daemon_->running()) {
            EXPECT_TRUE(daemon_->signal(SIGTERM));
            EXPECT_EQ(daemon_->wait_exit(10000ms), std::optional<int>(0)) << log();
            // The final counters are logged once, aggregated.
            EXPECT_EQ(pmtest::count_occurrences(log(), "stopping (SIGTERM); counters:"), 1u)
                << log();
        }
    }

    std::string log() const { return pmtest::read_file(dir_.path() / "pmd.err"); }
    pm::Endpoint server() const { return pm::Endpoint{pm::IpAddress::v4({127, 0, 0, 1}), port_}; }

    pmtest::RunResult ctl(std::vector<std::string> args) {
        args.insert(args.begin(), {SDPPM_PMCTL_BIN, "--socket",
                                   (dir_.path() / "control.sock").string(), "--json"});
        return pmtest::run(args, dir_.path(), 15000ms);
    }
    json ctl_json(const std::vector<std::string>& args) {
        auto r = ctl(args);
        EXPECT_EQ(r.exit_code, std::optional<int>(0)) << r.err << r.out;
        json j = json::parse(r.out, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << r.out;
        return j.is_discarded() ? json::object() : j.value("arguments", json::object());
    }
    json stats() { return ctl_json({"stats"}); }
    static std::uint64_t num(const json& j, const std::string& key) {
        if (!j.contains(key) || !j[key].is_number()) {
            ADD_FAILURE() << "no counter " << key << " in " << j.dump();
            return 0;
        }
        return static_cast<std::uint64_t>(j[key].get<double>());
    }
    std::vector<std::uint64_t> per_worker(const json& s, const std::string& what) {
        std::vector<std::uint64_t> v;
        for (unsigned i = 0; i < workers_; ++i) {
            v.push_back(num(s, "worker" + std::to_string(i) + "_" + what));
        }
        return v;
    }
    static std::uint64_t sum(const std::vector<std::uint64_t>& v) {
        std::uint64_t s = 0;
        for (auto x : v) {
            s += x;
        }
        return s;
    }

    // Sends `req` until a reply of the expected AssocHandle arrives (bounded:
    // a few retransmissions, as a client would).
    std::optional<pm::Message> exchange(const UdpClient& c, const std::vector<std::uint8_t>& req,
                                        std::uint64_t handle) {
        for (int attempt = 0; attempt < 5; ++attempt) {
            if (!c.send(req, server())) {
                return std::nullopt;
            }
            for (int k = 0; k < 4; ++k) {
                auto m = decode(c.receive(1000ms));
                if (!m) {
                    break;
                }
                if (m->assoc_handle == handle) {
                    return m;
                }
            }
        }
        return std::nullopt;
    }

    pmtest::TempDir dir_;
    std::unique_ptr<Process> daemon_;
    std::uint16_t port_ = 0;
    unsigned workers_ = 1;
};

// Many sources resolve and ack; run for 2 and 4 workers.
class WorkersN : public Workers, public ::testing::WithParamInterface<unsigned> {};

TEST_P(WorkersN, ManySourcesAllAcceptedAndPerWorkerCountersSumToTotals) {
    start(GetParam());
    constexpr unsigned kClients = 64;
    const pm::Endpoint web = ep("127.0.0.1:80");
    std::vector<std::unique_ptr<UdpClient>> clients;
    for (unsigned i = 0; i < kClients; ++i) {
        clients.push_back(std::make_unique<UdpClient>(pm::Endpoint{source(i), 0}));
        ASSERT_TRUE(clients.back()->ok()) << source(i).to_string();
    }
    unsigned accepted = 0;
    for (unsigned i = 0; i < kClients; ++i) {
        const std::uint64_t handle = 0x1000 + i;
        auto m = exchange(*clients[i], request(handle, web, clients[i]->local()), handle);
        ASSERT_TRUE(m.has_value()) << "no reply for client " << i;
        ASSERT_EQ(m->type, pm::MessageType::accept);
        EXPECT_EQ(m->ap_port, 8080);
        ++accepted;
        auto ack = pm::encode(pm::make_ack(*m));
        ASSERT_TRUE(clients[i]->send(std::vector<std::uint8_t>(ack.begin(), ack.end()), server()));
    }
    EXPECT_EQ(accepted, kClients);
    json s;
    const bool settled = pmtest::wait_until(
        [&] {
            s = stats();
            return num(s, "acked") >= kClients && num(s, "transactions") == 0;
        },
        10000ms);
    ASSERT_TRUE(settled) << s.dump();
    EXPECT_EQ(num(s, "workers"), GetParam());
    EXPECT_EQ(num(s, "accepted"), kClients);
    EXPECT_EQ(num(s, "acked"), kClients);
    EXPECT_EQ(num(s, "ack_unknown"), 0u);
    EXPECT_EQ(num(s, "transactions"), 0u);
    EXPECT_EQ(num(s, "workers_unresponsive"), 0u);
    const auto datagrams = per_worker(s, "datagrams");
    EXPECT_EQ(sum(datagrams), num(s, "datagrams"));
    EXPECT_EQ(sum(per_worker(s, "requests")), num(s, "requests"));
    EXPECT_EQ(sum(per_worker(s, "accepted")), num(s, "accepted"));
    EXPECT_EQ(sum(per_worker(s, "acked")), num(s, "acked"));
    EXPECT_EQ(sum(per_worker(s, "transactions")), 0u);
    // 64 distinct sources: a worker left without any is (3/4)^64 unlikely
    // with a working hash.
    for (unsigned i = 0; i < GetParam(); ++i) {
        EXPECT_GT(datagrams[i], 0u) << "worker " << i << " got nothing: " << s.dump();
    }
    // Per-service counts are shared by the shards: the sum.
    json services = ctl_json({"services"});
    ASSERT_TRUE(services.contains("services")) << services.dump();
    bool found = false;
    for (const auto& svc : services["services"]) {
        if (svc["name"] == "web") {
            found = true;
            EXPECT_EQ(svc["counters"]["accepted"], kClients) << svc.dump();
            EXPECT_EQ(svc["counters"]["transactions"], 0) << svc.dump();
        }
    }
    EXPECT_TRUE(found) << services.dump();
    // SIGUSR1: one aggregated line.
    ASSERT_TRUE(daemon_->signal(SIGUSR1));
    ASSERT_TRUE(pmtest::wait_until([&] {
        return log().find("counters: datagrams=" + std::to_string(num(s, "datagrams"))) !=
               std::string::npos;
    })) << log();
}

INSTANTIATE_TEST_SUITE_P(Shards, WorkersN, ::testing::Values(2u, 4u));

TEST_F(Workers, OneSourceFromManyPortsLandsOnOneWorker) {
    start(4);
    constexpr unsigned kPorts = 32;
    const pm::Endpoint web = ep("127.0.0.1:80");
    const pm::IpAddress addr = pm::IpAddress::v4({127, 0, 0, 77});
    std::vector<std::unique_ptr<UdpClient>> clients;
    for (unsigned i = 0; i < kPorts; ++i) {
        clients.push_back(std::make_unique<UdpClient>(pm::Endpoint{addr, 0}));
        ASSERT_TRUE(clients.back()->ok());
        const std::uint64_t handle = 0x2000 + i;
        auto m = exchange(*clients[i], request(handle, web, clients[i]->local()), handle);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->type, pm::MessageType::accept);
    }
    const json s = stats();
    const auto datagrams = per_worker(s, "datagrams");
    EXPECT_EQ(sum(datagrams), kPorts) << s.dump();
    // Exactly one worker saw this source: 32 source ports hashed by the
    // kernel's 4-tuple would land on all four.
    EXPECT_EQ(std::count(datagrams.begin(), datagrams.end(), 0u), 3) << s.dump();
    EXPECT_EQ(num(s, "transactions"), kPorts);
    EXPECT_EQ(*std::max_element(datagrams.begin(), datagrams.end()), kPorts);
}

TEST_F(Workers, DuplicateAndAckReachTheShardHoldingTheTransaction) {
    start(4);
    constexpr unsigned kClients = 16;
    const pm::Endpoint web = ep("127.0.0.1:80");
    std::vector<std::unique_ptr<UdpClient>> clients;
    for (unsigned i = 0; i < kClients; ++i) {
        // Eight addresses, two ports each.
        clients.push_back(std::make_unique<UdpClient>(pm::Endpoint{source(100 + i % 8), 0}));
        ASSERT_TRUE(clients.back()->ok());
    }
    std::vector<pm::Message> accepts;
    for (unsigned i = 0; i < kClients; ++i) {
        const std::uint64_t handle = 0xd00d0000 + i;
        const auto req = request(handle, web, clients[i]->local());
        auto first = exchange(*clients[i], req, handle);
        ASSERT_TRUE(first.has_value());
        ASSERT_EQ(first->type, pm::MessageType::accept);
        // A retransmission of the same PMReq: answered again from the state.
        auto again = exchange(*clients[i], req, handle);
        ASSERT_TRUE(again.has_value());
        EXPECT_EQ(again->type, pm::MessageType::accept);
        EXPECT_EQ(again->ap_port, first->ap_port);
        accepts.push_back(*first);
    }
    json s = stats();
    EXPECT_EQ(num(s, "accepted"), kClients) << s.dump();
    EXPECT_GE(num(s, "accepted_duplicate"), kClients) << s.dump();
    EXPECT_EQ(num(s, "transactions"), kClients);
    for (unsigned i = 0; i < kClients; ++i) {
        auto ack = pm::encode(pm::make_ack(accepts[i]));
        ASSERT_TRUE(clients[i]->send(std::vector<std::uint8_t>(ack.begin(), ack.end()), server()));
    }
    ASSERT_TRUE(pmtest::wait_until(
        [&] {
            s = stats();
            return num(s, "acked") + num(s, "ack_unknown") >= kClients;
        },
        10000ms))
        << s.dump();
    EXPECT_EQ(num(s, "acked"), kClients) << s.dump();
    EXPECT_EQ(num(s, "ack_unknown"), 0u) << s.dump();
    EXPECT_EQ(num(s, "transactions"), 0u) << s.dump();
    EXPECT_EQ(num(s, "superseded"), 0u) << s.dump();
}

TEST_F(Workers, PerSourceLimitIsExactAcrossWorkers) {
    // One token per second, ten in the bucket.
    start(4, "limits:\n  per_source:\n    rate: 1\n    burst: 10\n");
    constexpr unsigned kPorts = 40;
    constexpr unsigned kPerPort = 4;
    const pm::Endpoint web = ep("127.0.0.1:80");
    const pm::IpAddress addr = pm::IpAddress::v4({127, 0, 0, 99});
    std::vector<std::unique_ptr<UdpClient>> clients;
    for (unsigned i = 0; i < kPorts; ++i) {
        clients.push_back(std::make_unique<UdpClient>(pm::Endpoint{addr, 0}));
        ASSERT_TRUE(clients.back()->ok());
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned r = 0; r < kPerPort; ++r) {
        for (unsigned i = 0; i < kPorts; ++i) {
            ASSERT_TRUE(clients[i]->send(request(0x5000 + r * kPorts + i, web, clients[i]->local()),
                                         server()));
        }
    }
    json s;
    // Every PMReq counted one way or the other (a loopback drop would show
    // as a shortfall, tolerated by the bound below).
    pmtest::wait_until(
        [&] {
            s = stats();
            return num(s, "requests") >= kPorts * kPerPort;
        },
        10000ms);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::uint64_t accepted = num(s, "accepted");
    const std::uint64_t limited = num(s, "drop_rate_limited");
    EXPECT_EQ(accepted + limited, num(s, "requests")) << s.dump();
    // burst + rate x elapsed; a 4-tuple hash would give each of the four
    // shards its own bucket (about 40 accepted).
    const double bound = 10.0 + 1.0 * elapsed;
    EXPECT_LE(static_cast<double>(accepted), bound) << "elapsed " << elapsed << "s " << s.dump();
    EXPECT_GE(accepted, 10u) << s.dump();
    EXPECT_GT(limited, 0u);
    const auto limited_per_worker = per_worker(s, "drop_rate_limited");
    EXPECT_EQ(std::count(limited_per_worker.begin(), limited_per_worker.end(), 0u), 3) << s.dump();
}

TEST_F(Workers, RegistrationReachesEveryShard) {
    start(4);
    auto reg = ctl({"register", "demo", "127.0.0.1:7000", "127.0.0.1:7001"});
    ASSERT_EQ(reg.exit_code, std::optional<int>(0)) << reg.err << reg.out;
    constexpr unsigned kClients = 48;
    const pm::Endpoint demo = ep("127.0.0.1:7000");
    std::vector<std::unique_ptr<UdpClient>> clients;
    for (unsigned i = 0; i < kClients; ++i) {
        clients.push_back(std::make_unique<UdpClient>(pm::Endpoint{source(200 + i), 0}));
        ASSERT_TRUE(clients.back()->ok());
        const std::uint64_t handle = 0x7000 + i;
        auto m = exchange(*clients[i], request(handle, demo, clients[i]->local()), handle);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->type, pm::MessageType::accept) << "client " << i;
        EXPECT_EQ(m->ap_port, 7001);
    }
    json s = stats();
    EXPECT_EQ(num(s, "accepted"), kClients) << s.dump();
    EXPECT_EQ(num(s, "denied_no_service"), 0u) << s.dump();
    const auto datagrams = per_worker(s, "datagrams");
    EXPECT_GE(4 - std::count(datagrams.begin(), datagrams.end(), 0u), 2) << s.dump();
    // Unregistered: every shard denies.
    auto un = ctl({"unregister", "demo"});
    ASSERT_EQ(un.exit_code, std::optional<int>(0)) << un.err;
    for (unsigned i = 0; i < kClients; ++i) {
        const std::uint64_t handle = 0x8000 + i;
        auto m = exchange(*clients[i], request(handle, demo, clients[i]->local()), handle);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->type, pm::MessageType::deny) << "client " << i;
    }
}

TEST_F(Workers, ReloadAppliesToEveryShardAndKeepsTheWorkerCount) {
    start(2);
    // New service on reload, and a different worker count (needs a restart).
    std::string y = pmtest::read_file(dir_.path() / "pmd.yaml");
    y = replace_all(y, "workers: 2", "workers: 3");
    y += "  - name: extra\n    conventional: \"127.0.0.1:81\"\n    sdp: [\"127.0.0.1:8181\"]\n";
    pmtest::write_file(dir_.path() / "pmd.yaml", y);
    ASSERT_TRUE(daemon_->signal(SIGHUP));
    ASSERT_TRUE(pmtest::wait_until([&] { return log().find("reloaded") != std::string::npos; }))
        << log();
    EXPECT_NE(log().find("workers: takes effect at the next start"), std::string::npos) << log();
    const json s = stats();
    EXPECT_EQ(num(s, "workers"), 2u);
    const pm::Endpoint extra = ep("127.0.0.1:81");
    for (unsigned i = 0; i < 24; ++i) {
        UdpClient c(pm::Endpoint{source(300 + i), 0});
        ASSERT_TRUE(c.ok());
        auto m = exchange(c, request(0x9000 + i, extra, c.local()), 0x9000 + i);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->type, pm::MessageType::accept) << "client " << i;
    }
}

}  // namespace

namespace {

TEST(WorkersCommandLine, OverridesTheFileAndRejectsBadValues) {
    pmtest::TempDir dir;
    ASSERT_TRUE(dir.ok());
    pmtest::write_file(dir.path() / "c.yaml", "workers: 2\n");
    for (const char* bad : {"0", "65", "-1", "many", ""}) {
        auto r = pmtest::run({SDPPM_PMD_BIN, "--config", (dir.path() / "c.yaml").string(),
                              "--workers", bad, "--check-config"},
                             dir.path());
        EXPECT_EQ(r.exit_code, std::optional<int>(2)) << bad << ": " << r.err;
        EXPECT_NE(r.err.find("--workers"), std::string::npos) << r.err;
    }
    pmtest::write_file(dir.path() / "bad.yaml", "workers: lots\n");
    auto r = pmtest::run(
        {SDPPM_PMD_BIN, "--config", (dir.path() / "bad.yaml").string(), "--check-config"},
        dir.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(1));
    EXPECT_NE(r.err.find("bad.yaml:1: workers: bad value \"lots\""), std::string::npos) << r.err;

    // --workers 3 wins over the file's 2, and a reload does not complain.
    std::uint16_t port = 0;
    const std::string d = dir.path().string();
    auto daemon = [&]() -> std::unique_ptr<Process> {
        for (int attempt = 0; attempt < 5; ++attempt) {
            auto free = pmtest::free_udp_port(false);
            if (!free) {
                return nullptr;
            }
            pmtest::write_file(dir.path() / "pmd.yaml",
                               "listen: [\"127.0.0.1:" + std::to_string(*free) +
                                   "\"]\nworkers: 2\nhealth: off\ncontrol:\n  socket: \"" + d +
                                   "/control.sock\"\nstate_file: \"" + d + "/reg.json\"\n");
            auto p = std::make_unique<Process>(
                std::vector<std::string>{SDPPM_PMD_BIN, "--config", d + "/pmd.yaml", "--workers",
                                         "3"},
                dir.path() / "pmd.out", dir.path() / "pmd.err");
            if (pmtest::wait_until([&] {
                    return pmtest::read_file(dir.path() / "pmd.err").find("ready") !=
                               std::string::npos ||
                           !p->running();
                }) &&
                p->running()) {
                port = *free;
                return p;
            }
        }
        return nullptr;
    }();
    ASSERT_TRUE(daemon) << pmtest::read_file(dir.path() / "pmd.err");
    EXPECT_NE(pmtest::read_file(dir.path() / "pmd.err").find("3 workers;"), std::string::npos);
    ASSERT_TRUE(daemon->signal(SIGHUP));
    ASSERT_TRUE(pmtest::wait_until([&] {
        return pmtest::read_file(dir.path() / "pmd.err").find("reloaded") != std::string::npos;
    }));
    EXPECT_EQ(pmtest::read_file(dir.path() / "pmd.err").find("takes effect at the next start"),
              std::string::npos);
    ASSERT_TRUE(daemon->signal(SIGTERM));
    EXPECT_EQ(daemon->wait_exit(10000ms), std::optional<int>(0));
    EXPECT_NE(pmtest::read_file(dir.path() / "pmd.err").find("workers=3"), std::string::npos);
    (void)port;
}

}  // namespace

namespace {

// sdp-pmd started as systemd starts a socket-activated service: `fd`
// becomes fd 3, LISTEN_FDS=1 and LISTEN_PID name it. Returns the pid.
pid_t start_activated(const std::vector<std::string>& args, int fd, const fs::path& err) {
    std::vector<char*> argv;
    for (const auto& a : args) {
        argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid != 0) {
        return pid;
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int n = ::open("/dev/null", O_RDWR);
    if (e < 0 || n < 0) {
        ::_exit(120);
    }
    ::dup2(n, STDIN_FILENO);
    ::dup2(n, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
    if (high < 0 || ::dup2(high, 3) < 0) {
        ::_exit(121);
    }
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    ::unsetenv("LISTEN_FDNAMES");
    ::unsetenv("NOTIFY_SOCKET");
    ::execv(argv[0], argv.data());
    ::_exit(127);
}

class Activated : public ::testing::TestWithParam<bool> {};

// With an inherited socket that has SO_REUSEPORT the daemon adds one sibling
// per worker and steers by source; without it, worker 0 serves it alone.
TEST_P(Activated, InheritedSocketGetsSiblingsOnlyWithReusePort) {
    const bool reuseport = GetParam();
    pmtest::TempDir dir;
    ASSERT_TRUE(dir.ok());
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    int on = 1;
    if (reuseport) {
        ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on), 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    const pm::Endpoint server{pm::IpAddress::v4({127, 0, 0, 1}), ntohs(a.sin_port)};
    const std::string d = dir.path().string();
    pmtest::write_file(
        dir.path() / "pmd.yaml",
        "listen: [\"127.0.0.1:9\"]\nworkers: 2\nhealth: off\ncontrol:\n  socket: \"" + d +
            "/control.sock\"\nstate_file: \"" + d +
            "/reg.json\"\nservices:\n  - name: web\n    conventional: "
            "\"127.0.0.1:80\"\n    sdp: [\"127.0.0.1:8080\"]\n");
    const fs::path err = dir.path() / "pmd.err";
    const pid_t pid = start_activated({SDPPM_PMD_BIN, "--config", d + "/pmd.yaml"}, fd, err);
    ::close(fd);
    ASSERT_GT(pid, 0);
    auto running = [&] {
        int status = 0;
        return ::waitpid(pid, &status, WNOHANG) == 0;
    };
    const bool ready = pmtest::wait_until(
        [&] { return pmtest::read_file(err).find("ready") != std::string::npos || !running(); });
    ASSERT_TRUE(ready && running()) << pmtest::read_file(err);
    const std::string log = pmtest::read_file(err);
    if (reuseport) {
        EXPECT_NE(log.find("2 workers; 1 of 1 listen addresses steered"), std::string::npos) << log;
    } else {
        EXPECT_NE(log.find("has no SO_REUSEPORT"), std::string::npos) << log;
        EXPECT_NE(log.find("2 workers; 0 of 1 listen addresses steered"), std::string::npos) << log;
    }
    unsigned accepted = 0;
    for (unsigned i = 0; i < 32; ++i) {
        UdpClient c(pm::Endpoint{source(400 + i), 0});
        ASSERT_TRUE(c.ok());
        const auto req = request(0xa000 + i, ep("127.0.0.1:80"), c.local());
        for (int attempt = 0; attempt < 5; ++attempt) {
            ASSERT_TRUE(c.send(req, server));
            auto m = decode(c.receive(1000ms));
            if (m) {
                accepted += m->type == pm::MessageType::accept ? 1 : 0;
                break;
            }
        }
    }
    EXPECT_EQ(accepted, 32u);
    auto r = pmtest::run({SDPPM_PMCTL_BIN, "--socket", d + "/control.sock", "--json", "stats"},
                         dir.path(), 15000ms);
    json s = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(s.is_discarded()) << r.out << r.err;
    s = s["arguments"];
    const auto w0 = static_cast<std::uint64_t>(s["worker0_datagrams"].get<double>());
    const auto w1 = static_cast<std::uint64_t>(s["worker1_datagrams"].get<double>());
    EXPECT_EQ(w0 + w1, 32u) << s.dump();
    if (reuseport) {
        EXPECT_GT(w1, 0u) << s.dump();  // 32 sources: both workers serve some
        EXPECT_GT(w0, 0u) << s.dump();
    } else {
        EXPECT_EQ(w1, 0u) << s.dump();
    }
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    int status = 0;
    EXPECT_TRUE(pmtest::wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << pmtest::read_file(err);
}

INSTANTIATE_TEST_SUITE_P(SocketActivation, Activated, ::testing::Bool());

}  // namespace
