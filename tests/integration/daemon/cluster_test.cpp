// SPDX-License-Identifier: Apache-2.0
// The etcd registry backend with real processes (docs/cluster.md): three
// etcd members and three sdp-pmd replicas on loopback, registrations made
// with the real sdp-pmctl, resolutions with libpmclient. Every wait is
// bounded; timings are printed, never asserted beyond the documented bounds.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "integration/daemon/harness.hpp"
#include "integration/etcd_fixture.hpp"
#include "pmclient/resolver.hpp"

namespace {

using namespace std::chrono_literals;
using pmtest::Process;
namespace fs = std::filesystem;

constexpr auto kLeaseTtl = 2s;
constexpr auto kMaxStaleness = 2s;

std::string yaml_list(const std::vector<std::string>& items) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) {
        out += (i ? ", \"" : "\"") + items[i] + "\"";
    }
    return out + "]";
}

// One sdp-pmd replica with the etcd backend.
class Replica {
  public:
    Replica(const std::string& member, const std::vector<std::string>& endpoints,
            const fs::path& dir)
        : member_(member), dir_(dir / member) {
        fs::create_directories(dir_);
        daemon_ = pmtest::start_pmd(
            SDPPM_PMD_BIN, dir_,
            [&](std::uint16_t port) {
                return "listen: [\"127.0.0.1:" + std::to_string(port) +
                       "\"]\n"
                       "log_level: debug\n"
                       "health: off\n"
                       "control: {socket: \"" +
                       (dir_ / "control.sock").string() + "\"}\nstate_file: \"" +
                       (dir_ / "state.json").string() +
                       "\"\n"
                       "registry:\n"
                       "  backend: etcd\n"
                       "  endpoints: " +
                       yaml_list(endpoints) + "\n  prefix: /test/\n  member: " + member +
                       "\n  lease_ttl: 2s\n  max_staleness: 2s\n  request_timeout: 500ms\n";
            },
            port_);
    }
    bool ok() const { return daemon_ && daemon_->running(); }
    std::uint16_t port() const { return port_; }
    pm::Endpoint endpoint() const {
        return pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), port_};
    }
    std::string log() const { return pmtest::read_file(dir_ / "pmd.err"); }
    void kill() { daemon_.reset(); }  // SIGKILL and reap

    pmtest::RunResult ctl(std::vector<std::string> args) const {
        std::vector<std::string> argv{SDPPM_PMCTL_BIN, "--socket",
                                      (dir_ / "control.sock").string()};
        argv.insert(argv.end(), args.begin(), args.end());
        return pmtest::run(argv, dir_, 10'000ms);
    }

  private:
    std::string member_;
    fs::path dir_;
    std::uint16_t port_ = 0;
    std::unique_ptr<Process> daemon_;
};

class Cluster : public ::testing::Test {
  protected:
    void SetUp() override {
        SDPPM_REQUIRE_ETCD();
        ASSERT_TRUE(dir_.ok());
        etcd_ = std::make_unique<pmtest::EtcdCluster>(3);
        ASSERT_TRUE(etcd_->ok()) << etcd_->error();
    }

    // Resolves `conventional` at `pmsp` once (no cache).
    pmclient::Result resolve(const pm::Endpoint& pmsp, const std::string& conventional) {
        pmclient::ResolverOptions o;
        o.read_environment = false;
        o.cache_capacity = 0;
        o.defaults.pmsp = pmsp;
        o.defaults.initial_timeout = 50ms;
        o.defaults.deadline = 600ms;
        o.defaults.use_cache = false;
        pmclient::BlockingResolver r(o);
        const auto cp = static_cast<std::uint16_t>(20000 + (next_cp_++ % 30000));
        return r.resolve(
            pmclient::ResolveRequest{*pm::Endpoint::parse(conventional),
                                     pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), cp},
                                     {}});
    }

    // Polls until `pmsp` answers `conventional` with `want` (accepted or
    // denied); returns how long that took, or nullopt after `bound`.
    std::optional<std::chrono::milliseconds> until(const pm::Endpoint& pmsp,
                                                   const std::string& conventional,
                                                   pmclient::ResultKind want,
                                                   std::chrono::milliseconds bound = 10'000ms) {
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < bound) {
            if (resolve(pmsp, conventional).kind == want) {
                return std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0);
            }
            std::this_thread::sleep_for(20ms);
        }
        return std::nullopt;
    }

    pmtest::TempDir dir_;
    std::unique_ptr<pmtest::EtcdCluster> etcd_;
    unsigned next_cp_ = 0;
};

TEST_F(Cluster, ARegistrationOnOneReplicaIsAnsweredByAllAndHostsMerge) {
    const auto urls = etcd_->client_urls();
    Replica a("a", urls, dir_.path()), b("b", urls, dir_.path()), c("c", urls, dir_.path());
    ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.log() << b.log() << c.log();

    auto reg =
        a.ctl({"register", "web", "127.0.0.1:7000", "127.0.0.1:5001", "--policy", "round-robin"});
    ASSERT_EQ(reg.exit_code, std::optional<int>(0)) << reg.out << reg.err;
    for (const Replica* r : {&a, &b, &c}) {
        auto t = until(r->endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted);
        ASSERT_TRUE(t) << "replica on port " << r->port() << " never answered\n" << r->log();
        std::printf("registered on a -> first PMAccept from replica %u after %lld ms\n", r->port(),
                    static_cast<long long>(t->count()));
    }
    // The same service from host "b": one service, both hosts' addresses.
    reg = b.ctl({"register", "web", "127.0.0.1:7000", "127.0.0.1:5002", "--policy", "round-robin"});
    ASSERT_EQ(reg.exit_code, std::optional<int>(0)) << reg.out << reg.err;
    std::set<std::string> seen;
    ASSERT_TRUE(pmtest::wait_until(
        [&] {
            auto res = resolve(c.endpoint(), "127.0.0.1:7000");
            if (res.accepted()) {
                seen.insert(res.sdp.to_string());
            }
            return seen.size() == 2;
        },
        10'000ms))
        << "round robin on c never gave both hosts";
    EXPECT_TRUE(seen.contains("127.0.0.1:5001") && seen.contains("127.0.0.1:5002"));
    // A clash with another replica's service is refused.
    reg = c.ctl({"register", "www", "127.0.0.1:7000", "127.0.0.1:5003"});
    EXPECT_NE(reg.exit_code, std::optional<int>(0)) << reg.out;
    EXPECT_NE(reg.err.find("conflict"), std::string::npos) << reg.err;
    // sdp-pmctl cluster on any replica shows the three replicas' view.
    auto status = c.ctl({"--json", "cluster"});
    ASSERT_EQ(status.exit_code, std::optional<int>(0)) << status.err;
    EXPECT_NE(status.out.find("\"backend\": \"etcd\""), std::string::npos) << status.out;
    EXPECT_NE(status.out.find("\"fresh\": true"), std::string::npos) << status.out;
    auto human = c.ctl({"cluster"});
    EXPECT_NE(human.out.find("healthy"), std::string::npos)
        << human.out << human.err << " exit " << human.exit_code.value_or(-1);
}

TEST_F(Cluster, OneEtcdMemberDownChangesNothingVisible) {
    const auto urls = etcd_->client_urls();
    Replica a("a", urls, dir_.path()), b("b", urls, dir_.path());
    ASSERT_TRUE(a.ok() && b.ok()) << a.log() << b.log();
    ASSERT_EQ(a.ctl({"register", "web", "127.0.0.1:7000", "127.0.0.1:5001"}).exit_code,
              std::optional<int>(0));
    ASSERT_TRUE(until(b.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted));
    // The first endpoint of every replica goes away.
    etcd_->kill(0);
    unsigned failures = 0;
    unsigned total = 0;
    const auto t0 = std::chrono::steady_clock::now();
    bool registered = false;
    while (std::chrono::steady_clock::now() - t0 < 3 * kMaxStaleness) {
        ++total;
        if (!resolve(b.endpoint(), "127.0.0.1:7000").accepted()) {
            ++failures;
        }
        if (!registered && std::chrono::steady_clock::now() - t0 > 1s) {
            // New registrations still go through the remaining members.
            registered = a.ctl({"register", "db", "127.0.0.1:7001", "127.0.0.1:5009"}).exit_code ==
                         std::optional<int>(0);
        }
        std::this_thread::sleep_for(20ms);
    }
    std::printf("etcd member 0 down: %u/%u resolutions failed\n", failures, total);
    EXPECT_EQ(failures, 0u) << b.log();
    EXPECT_TRUE(registered);
    EXPECT_TRUE(until(b.endpoint(), "127.0.0.1:7001", pmclient::ResultKind::accepted));
}

TEST_F(Cluster, AReplicasRegistrationsExpireWithItAndWithTheirOwner) {
    const auto urls = etcd_->client_urls();
    Replica a("a", urls, dir_.path()), b("b", urls, dir_.path());
    ASSERT_TRUE(a.ok() && b.ok()) << a.log() << b.log();
    // An owner process on a's host: its registration goes when it exits.
    Process owner({"/bin/sleep", "60"}, dir_.path() / "owner.out", dir_.path() / "owner.err");
    ASSERT_TRUE(owner.started());
    ASSERT_EQ(a.ctl({"register", "tied", "127.0.0.1:7002", "127.0.0.1:5002", "--pid",
                     std::to_string(owner.pid())})
                  .exit_code,
              std::optional<int>(0));
    ASSERT_EQ(a.ctl({"register", "web", "127.0.0.1:7000", "127.0.0.1:5001"}).exit_code,
              std::optional<int>(0));
    ASSERT_TRUE(until(b.endpoint(), "127.0.0.1:7002", pmclient::ResultKind::accepted));
    ASSERT_TRUE(until(b.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted));
    owner.signal(SIGKILL);
    auto gone = until(b.endpoint(), "127.0.0.1:7002", pmclient::ResultKind::denied, 5'000ms);
    ASSERT_TRUE(gone) << "the owner's exit on a never reached b\n" << a.log();
    std::printf("owner exited on a -> denied by b after %lld ms\n",
                static_cast<long long>(gone->count()));
    // The replica itself dies: its lease, and so its keys, expire.
    a.kill();
    gone = until(b.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::denied,
                 std::chrono::duration_cast<std::chrono::milliseconds>(kLeaseTtl) + 3'000ms);
    ASSERT_TRUE(gone) << "a's registration outlived its lease\n" << b.log();
    std::printf("replica a killed -> its registration denied by b after %lld ms (lease %lld s)\n",
                static_cast<long long>(gone->count()), static_cast<long long>(kLeaseTtl.count()));
}

TEST_F(Cluster, AReplicaCutOffFromEtcdDeniesAfterTheStalenessBound) {
    const auto urls = etcd_->client_urls();
    Replica a("a", {urls[0], urls[1]}, dir_.path());
    Replica c("c", {urls[2]}, dir_.path());  // reaches etcd through member 2 only
    ASSERT_TRUE(a.ok() && c.ok()) << a.log() << c.log();
    ASSERT_EQ(a.ctl({"register", "web", "127.0.0.1:7000", "127.0.0.1:5001"}).exit_code,
              std::optional<int>(0));
    ASSERT_TRUE(until(c.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted));
    const auto t0 = std::chrono::steady_clock::now();
    etcd_->kill(2);
    auto denied =
        until(c.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::denied,
              std::chrono::duration_cast<std::chrono::milliseconds>(kMaxStaleness) + 5'000ms);
    ASSERT_TRUE(denied) << c.log();
    const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    std::printf("c cut off from etcd -> denies after %lld ms (max_staleness %lld ms)\n",
                static_cast<long long>(after.count()),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(kMaxStaleness).count()));
    // Not before the bound: the view is served for max_staleness after it
    // was last known current, which the idle watch refresh renews at least
    // every max_staleness / 2. (Load can only make this later.)
    EXPECT_GE(after, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxStaleness / 2));
    // a, still connected, keeps answering.
    EXPECT_TRUE(resolve(a.endpoint(), "127.0.0.1:7000").accepted());
    auto status = c.ctl({"--json", "status"});
    EXPECT_NE(status.out.find("\"registry_serving\": false"), std::string::npos) << status.out;
    // etcd back: served again.
    ASSERT_TRUE(etcd_->restart(2)) << etcd_->error();
    auto back = until(c.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted, 15'000ms);
    ASSERT_TRUE(back) << c.log();
    std::printf("etcd member back -> c answers again after %lld ms\n",
                static_cast<long long>(back->count()));
}

TEST_F(Cluster, ClientsWithAPmspListKeepResolvingWhenAReplicaDies) {
    const auto urls = etcd_->client_urls();
    auto a = std::make_unique<Replica>("a", urls, dir_.path());
    Replica b("b", urls, dir_.path()), c("c", urls, dir_.path());
    ASSERT_TRUE(a->ok() && b.ok() && c.ok()) << a->log() << b.log() << c.log();
    ASSERT_EQ(b.ctl({"register", "web", "127.0.0.1:7000", "127.0.0.1:5001"}).exit_code,
              std::optional<int>(0));
    ASSERT_TRUE(until(a->endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted));
    ASSERT_TRUE(until(c.endpoint(), "127.0.0.1:7000", pmclient::ResultKind::accepted));

    // The documented defaults: a 3 s deadline shared out over the list.
    pmclient::ResolverOptions o;
    o.read_environment = false;
    o.cache_capacity = 0;
    o.defaults.pmsps = {a->endpoint(), b.endpoint(), c.endpoint()};
    o.defaults.use_cache = false;
    pmclient::BlockingResolver r(o);
    unsigned failures = 0;
    unsigned total = 0;
    std::chrono::milliseconds slowest{0};
    std::map<std::uint16_t, unsigned> answered_by;
    for (int i = 0; i < 60; ++i) {
        if (i == 20) {
            a->kill();  // the first PMSP of every client goes away mid-run
        }
        const auto t0 = std::chrono::steady_clock::now();
        const auto res = r.resolve(pmclient::ResolveRequest{
            *pm::Endpoint::parse("127.0.0.1:7000"),
            pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), static_cast<std::uint16_t>(41000 + i)},
            {}});
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - t0);
        slowest = std::max(slowest, took);
        ++total;
        if (res.accepted()) {
            ++answered_by[res.pmsp.port];
        } else {
            ++failures;
        }
    }
    std::printf(
        "PMSP list [a, b, c], a killed after 20: %u/%u failed, slowest %lld ms, "
        "failovers %llu, answered by a=%u b=%u c=%u\n",
        failures, total, static_cast<long long>(slowest.count()),
        static_cast<unsigned long long>(r.resolver().counters().pmsp_failovers),
        answered_by[a->port()], answered_by[b.port()], answered_by[c.port()]);
    EXPECT_EQ(failures, 0u);
    EXPECT_LE(slowest, o.defaults.deadline + 500ms) << "never beyond the documented deadline";
    EXPECT_EQ(answered_by[a->port()], 20u);
    EXPECT_EQ(answered_by[b.port()] + answered_by[c.port()], 40u);
}

}  // namespace
