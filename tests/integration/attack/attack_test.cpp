// SPDX-License-Identifier: Apache-2.0
// Section 15.2 (denial of service) against the real sdp-pmd on loopback.
//
//  1. One source floods valid PMReqs (a new AssocHandle and CpPort each, never
//     acked) at full speed while ten legitimate clients, each on its own
//     source address, resolve through libpmclient's client machine: with the
//     per-source token bucket and source quench configured, the clients keep
//     >= 99% success, the flood is dropped and counted, the transaction table
//     and the daemon's memory stay bounded.
//  2. Floods of random bytes and of messages with random fields: the daemon
//     survives, answers, stays within its bounds, and every datagram it
//     counted has exactly one outcome.
//  3. No amplification: every reply the attackers capture answers a PMReq
//     they sent and is no larger than it; PMAck, PMAccept, PMDeny and
//     malformed datagrams get no reply at all.
//
// Nothing here asserts a rate or a duration: how fast the flood goes and how
// much of it the kernel drops depends on the machine. Assertions are on
// counts and ratios; every loop is bounded in count and in time.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "integration/daemon/harness.hpp"
#include "libpmclient/src/machine.hpp"
#include "pmclient/message.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using pmtest::Process;

constexpr std::size_t kMaxTransactions = 10'000;
// Memory bound for the daemon's resident anonymous memory (RssAnon, see
// rss_kib). The state it may hold is
// bounded by configuration: at most kMaxTransactions transactions (a few
// hundred bytes each, about 3 MiB with their indexes), two per-source tables
// of at most 65536 entries allocated up front (a few MiB), and fixed receive
// and send batches. The bound is on the growth above the daemon's RSS when
// the flood starts (its baseline depends on the libraries it links, OpenSSL
// for the etcd backend among them, and triples under ASan): 24 MiB leaves
// room for the transactions and allocator slack (about 5 MiB measured under
// ASan) while still catching state kept per datagram (a transaction of a
// few hundred bytes for each of the ~100k flood PMReqs that reach the
// daemon). The table bound itself is asserted directly.
constexpr std::uint64_t kRssGrowthBoundKiB = 24 * 1024;

std::map<std::string, std::uint64_t> parse_counters(const std::string& line) {
    std::map<std::string, std::uint64_t> m;
    static const std::regex re(R"(([a-z_]+)=([0-9]+))");
    for (auto it = std::sregex_iterator(line.begin(), line.end(), re); it != std::sregex_iterator();
         ++it) {
        m[(*it)[1].str()] = std::stoull((*it)[2].str());
    }
    return m;
}

// Every Outcome of daemon/core/pmsp.hpp: each counted datagram has exactly one.
const std::vector<std::string> kOutcomes = {
    "accepted",           "accepted_duplicate", "denied_no_service",
    "denied_not_allowed", "denied_no_address",  "acked",
    "ack_unknown",        "drop_too_short",     "drop_too_long",
    "drop_bad_version",   "drop_reserved_ipv",  "drop_not_for_server",
    "drop_iwpm_disabled", "drop_bad_request",   "drop_rate_limited",
    "drop_quenched"};

std::uint64_t sum_outcomes(std::map<std::string, std::uint64_t>& c) {
    std::uint64_t s = 0;
    for (const auto& name : kOutcomes) {
        s += c[name];
    }
    return s;
}

pm::IpAddress v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return pm::IpAddress::v4({a, b, c, d});
}

// RssAnon of `pid` in KiB (resident heap, stacks and other anonymous
// memory: what the daemon allocates), 0 if unreadable. Not VmRSS: that also
// counts the pages of the program file itself, which under ASan (-O0, debug
// info, instrumentation) is tens of MiB and grows with the code, not with
// what an attacker sends.
std::uint64_t rss_kib(pid_t pid) {
    const std::string s = pmtest::read_file("/proc/" + std::to_string(pid) + "/status");
    const auto pos = s.find("RssAnon:");
    if (pos == std::string::npos) {
        return 0;
    }
    return std::strtoull(s.c_str() + pos + 8, nullptr, 10);
}

// Records every datagram an attacker sends, keyed by AssocHandle, and checks
// every reply it captures against them (no amplification, section 15.2).
class AmplificationCheck {
  public:
    void sent(std::span<const std::uint8_t> bytes) {
        ++sent_;
        sent_bytes_ += bytes.size();
        auto d = pm::decode(bytes);
        const auto* m = std::get_if<pm::Message>(&d);
        if (m != nullptr && m->type == pm::MessageType::request) {
            ++requests_sent_;
            auto [it, fresh] = requests_.emplace(m->assoc_handle, bytes.size());
            if (!fresh) {
                it->second = std::min(it->second, bytes.size());
            }
        }
    }
    void replied(std::span<const std::uint8_t> bytes) {
        ++replies_;
        reply_bytes_ += bytes.size();
        auto d = pm::decode(bytes);
        const auto* m = std::get_if<pm::Message>(&d);
        if (m == nullptr ||
            (m->type != pm::MessageType::accept && m->type != pm::MessageType::deny)) {
            ++not_a_reply_;
            return;
        }
        ++(m->type == pm::MessageType::accept ? accepts_ : denies_);
        auto it = requests_.find(m->assoc_handle);
        if (it == requests_.end()) {
            ++unsolicited_;  // answers nothing we sent as a PMReq
        } else if (bytes.size() > it->second) {
            ++larger_;
        }
    }
    void expect_no_amplification() const {
        EXPECT_EQ(not_a_reply_, 0u) << "the daemon sent something that is not PMAccept/PMDeny";
        EXPECT_EQ(unsolicited_, 0u) << "replies to datagrams that were not PMReqs";
        EXPECT_EQ(larger_, 0u) << "replies larger than their request";
        EXPECT_LE(replies_, requests_sent_);  // one reply per PMReq at most
        EXPECT_LE(reply_bytes_, sent_bytes_);
    }
    std::uint64_t sent() const { return sent_; }
    std::uint64_t replies() const { return replies_; }
    std::uint64_t accepts() const { return accepts_; }
    std::uint64_t denies() const { return denies_; }
    std::size_t requests() const { return requests_.size(); }

  private:
    std::unordered_map<std::uint64_t, std::size_t> requests_;  // AssocHandle -> smallest size
    std::uint64_t requests_sent_ = 0, sent_ = 0, sent_bytes_ = 0, replies_ = 0, reply_bytes_ = 0;
    std::uint64_t not_a_reply_ = 0, unsolicited_ = 0, larger_ = 0, accepts_ = 0, denies_ = 0;
};

// Reads every datagram already queued on `c` (never waits).
template <typename Fn>
void drain(const pmtest::UdpClient& c, Fn&& fn, std::size_t max = 100'000) {
    for (std::size_t i = 0; i < max; ++i) {
        auto d = c.receive(0ms);
        if (!d) {
            return;
        }
        fn(*d);
    }
}

// A legitimate client: libpmclient's client machine (the protocol core of
// pmclient::Resolver: retransmission, matching, PMAck) on a UDP socket bound
// to its own source address. The Resolver itself binds the wildcard address,
// so on loopback every Resolver would share 127.0.0.1 with the attacker.
struct LegitResult {
    std::uint64_t started = 0, completed = 0, accepted = 0, denied = 0, timeout = 0, error = 0;
    std::uint64_t during_flood = 0;  // resolutions completed while the flood ran
    std::string first_error;
    pmclient::Counters counters;
};

LegitResult run_legit_client(const pm::IpAddress& self, const pm::Endpoint& pmsp,
                             std::uint32_t count, std::uint32_t concurrency,
                             const std::atomic<bool>& flooding, Clock::duration bound) {
    LegitResult res;
    pmtest::UdpClient sock(pm::Endpoint{self, 0});
    if (!sock.ok()) {
        res.first_error = "cannot bind " + self.to_string();
        return res;
    }
    pmclient::MachineConfig mc;
    mc.cache_capacity = 0;
    pmclient::Machine m(mc);
    std::mt19937_64 rng(std::random_device{}());
    pmclient::Actions out;
    auto flush = [&] {
        for (const auto& s : out.sends) {
            sock.send(s.bytes, s.to);
        }
        for (const auto& c : out.completions) {
            ++res.completed;
            res.during_flood += flooding.load() ? 1 : 0;
            switch (c.result.kind) {
                case pmclient::ResultKind::accepted:
                    ++res.accepted;
                    break;
                case pmclient::ResultKind::denied:
                    ++res.denied;
                    break;
                case pmclient::ResultKind::timeout:
                    ++res.timeout;
                    break;
                case pmclient::ResultKind::error:
                    ++res.error;
                    if (res.first_error.empty()) {
                        res.first_error = c.result.reason;
                    }
                    break;
            }
        }
        out.clear();
    };
    pmclient::RequestOptions ro;  // library defaults: PMReq at 0, 250, 750, 1750 ms, 3 s
    ro.use_cache = false;
    const auto end = Clock::now() + bound;
    while (res.completed < count && Clock::now() < end) {
        while (res.started < count && res.started - res.completed < concurrency) {
            pmclient::Query q;
            q.conventional = pm::Endpoint{v4(127, 0, 0, 1), 80};
            q.cp = pm::Endpoint{self, static_cast<std::uint16_t>(20000 + res.started)};
            q.pmsp = pmsp;
            q.options = ro;
            ++res.started;
            m.start(q, Clock::now(), rng(), out);
            flush();
        }
        auto wake = m.next_wakeup();
        auto wait = 50ms;
        if (wake) {
            wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*wake - Clock::now()),
                              0ms, 50ms);
        }
        if (auto d = sock.receive(wait)) {
            m.on_datagram(d->bytes, d->source, Clock::now(), out);
            flush();
        }
        m.on_timer(Clock::now(), out);
        flush();
    }
    res.counters = m.counters();
    return res;
}

class Attack : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_TRUE(dir_.ok()); }
    void TearDown() override {
        if (daemon_ && daemon_->running()) {
            EXPECT_TRUE(daemon_->signal(SIGTERM));
            EXPECT_EQ(daemon_->wait_exit(10000ms), std::optional<int>(0)) << tail_log();
        } else if (daemon_) {
            ADD_FAILURE() << "sdp-pmd is not running: " << tail_log();
        }
    }
    std::string log() const { return pmtest::read_file(dir_.path() / "pmd.err"); }
    std::string tail_log() const {
        const std::string l = log();
        return l.size() > 4000 ? l.substr(l.size() - 4000) : l;
    }

    void start_daemon(const std::string& limits) {
        std::uint16_t port = 0;
        daemon_ = pmtest::start_pmd(
            SDPPM_PMD_BIN, dir_.path(),
            [&](std::uint16_t p) {
                return "listen: [\"127.0.0.1:" + std::to_string(p) +
                       "\"]\n"
                       "log_level: notice\n"
                       "ack_timeout: 2s\n"
                       "max_transactions: " +
                       std::to_string(kMaxTransactions) + "\n" + limits +
                       "health: off\n"  // nothing listens on 127.0.0.1:8080
                       "services:\n"
                       "  - name: web\n"
                       "    conventional: \"127.0.0.1:80\"\n"
                       "    sdp: [\"127.0.0.1:8080\"]\n"
                       "    pm_time: 30s\n";
            },
            port);
        ASSERT_TRUE(daemon_) << "sdp-pmd did not start: " << log();
        pmsp_ = pm::Endpoint{v4(127, 0, 0, 1), port};
    }

    // SIGUSR1, then the counters of the line it logged (empty on failure).
    std::map<std::string, std::uint64_t> counters() {
        const std::size_t before = pmtest::count_occurrences(log(), "counters:");
        if (!daemon_->signal(SIGUSR1)) {
            ADD_FAILURE() << "sdp-pmd is gone: " << tail_log();
            return {};
        }
        std::string text;
        if (!pmtest::wait_until(
                [&] {
                    text = log();
                    return pmtest::count_occurrences(text, "counters:") > before;
                },
                10000ms)) {
            ADD_FAILURE() << "no counters line after SIGUSR1";
            return {};
        }
        const auto pos = text.rfind("counters:");
        return parse_counters(text.substr(pos, text.find('\n', pos) - pos));
    }

    // Counters once the daemon has handled everything queued for it: two
    // samples in a row with the same number of datagrams (bounded).
    std::map<std::string, std::uint64_t> settled_counters() {
        auto c = counters();
        for (int i = 0; i < 50; ++i) {
            std::this_thread::sleep_for(100ms);
            auto next = counters();
            if (next["datagrams"] == c["datagrams"]) {
                return next;
            }
            c = std::move(next);
        }
        ADD_FAILURE() << "the daemon kept receiving datagrams";
        return c;
    }

    // Every counted datagram has exactly one outcome.
    static void expect_accounting_closes(std::map<std::string, std::uint64_t>& c) {
        EXPECT_GT(c["datagrams"], 0u);
        EXPECT_EQ(c["datagrams"], sum_outcomes(c));
        EXPECT_LE(c["transactions"], kMaxTransactions);
        EXPECT_EQ(c["receive_errors"], 0u);
    }

    // One valid PMReq from a fresh socket gets its PMAccept.
    void expect_answers(const pm::IpAddress& from) {
        pmtest::UdpClient c(pm::Endpoint{from, 0});
        ASSERT_TRUE(c.ok());
        pm::Message req;
        req.ap_addr = v4(127, 0, 0, 1);
        req.ap_port = 80;
        req.cp_addr = from;
        req.cp_port = 4242;
        req.assoc_handle = 0x5e47'1ee1'0000'0001ull;
        std::optional<pmtest::UdpClient::Datagram> d;
        for (int attempt = 0; attempt < 5 && !d; ++attempt) {
            ASSERT_TRUE(c.send(pm::encode(req), pmsp_));
            d = c.receive(2000ms);
        }
        ASSERT_TRUE(d) << "no answer to a valid PMReq";
        auto m = pm::decode(d->bytes);
        ASSERT_TRUE(std::holds_alternative<pm::Message>(m));
        EXPECT_EQ(std::get<pm::Message>(m).type, pm::MessageType::accept);
        EXPECT_EQ(std::get<pm::Message>(m).assoc_handle, req.assoc_handle);
        c.send(pm::encode(pm::make_ack(std::get<pm::Message>(m))), pmsp_);
    }

    pmtest::TempDir dir_;
    std::unique_ptr<Process> daemon_;
    pm::Endpoint pmsp_;
};

// ---------------------------------------------------------------------------
// 1. PMReq flood from one source beside ten legitimate clients.

TEST_F(Attack, PmReqFloodFromOneSourceLegitimateClientsKeepResolving) {
    // Per source: 1000 PMReqs/s, bursts of 1000; a source with 1500 un-acked
    // PMAccepts within 1 s is quenched for 10 s (longer than the flood).
    constexpr std::uint32_t kRate = 1000, kBurst = 1000, kMaxUnacked = 1500;
    start_daemon("limits:\n  per_source: {rate: " + std::to_string(kRate) +
                 ", burst: " + std::to_string(kBurst) + "}\n  source_quench: {max_unacked: " +
                 std::to_string(kMaxUnacked) + ", window: 1s, period: 10s}\n");
    ASSERT_FALSE(HasFatalFailure());
    const std::uint64_t rss_start = rss_kib(daemon_->pid());

    constexpr std::uint64_t kFloodMax = 200'000;
    constexpr auto kFloodTime = 5s;
    // Each client stays below its bucket (burst) even if every PMReq were
    // sent twice, so the limiter never has a reason to drop it.
    constexpr std::uint32_t kClients = 10, kPerClient = 300, kConcurrency = 4;

    pmtest::UdpClient attacker(pm::Endpoint{v4(127, 0, 0, 1), 0});
    ASSERT_TRUE(attacker.ok());
    AmplificationCheck amp;
    std::atomic<bool> flooding{true};
    std::atomic<std::uint64_t> flood_sent{0};
    Clock::duration flood_elapsed{};
    std::thread flood([&] {
        const auto t0 = Clock::now();
        pm::Message req;
        req.ap_addr = v4(127, 0, 0, 1);
        req.ap_port = 80;
        for (std::uint64_t i = 0; i < kFloodMax && Clock::now() - t0 < kFloodTime; ++i) {
            // A new 4-tuple and AssocHandle every time; never acked.
            req.cp_addr = v4(10, static_cast<std::uint8_t>(i >> 16),
                             static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i));
            req.cp_port = static_cast<std::uint16_t>(1 + i % 65000);
            req.assoc_handle = 0xa77a'c000'0000'0000ull | (i + 1);
            const auto wire = pm::encode(req);
            attacker.send(wire, pmsp_);
            amp.sent(wire);
            flood_sent.store(i + 1, std::memory_order_relaxed);
            if (i % 64 == 63) {
                drain(attacker, [&](const auto& d) { amp.replied(d.bytes); });
            }
        }
        flood_elapsed = Clock::now() - t0;
        flooding = false;
    });
    // The clients start once the flood is under way (bounded wait).
    pmtest::wait_until([&] { return flood_sent.load() >= 5000 || !flooding.load(); }, 5000ms);

    std::vector<LegitResult> results(kClients);
    std::vector<std::thread> clients;
    for (std::uint32_t k = 0; k < kClients; ++k) {
        clients.emplace_back([&, k] {
            results[k] = run_legit_client(v4(127, 0, 0, static_cast<std::uint8_t>(2 + k)), pmsp_,
                                          kPerClient, kConcurrency, flooding, 40s);
        });
    }

    // Sample the daemon while the flood runs: table and memory bounds hold
    // throughout, not only at the end.
    std::uint64_t max_txn = 0, max_rss = rss_start, samples = 0;
    for (int i = 0; i < 40 && flooding.load(); ++i) {
        auto c = counters();
        max_txn = std::max(max_txn, c["transactions"]);
        max_rss = std::max(max_rss, rss_kib(daemon_->pid()));
        ++samples;
        std::this_thread::sleep_for(200ms);
    }
    flood.join();
    for (auto& t : clients) {
        t.join();
    }
    // Replies still queued for the attacker.
    pmtest::wait_until([&] {
        std::uint64_t before = amp.replies();
        drain(attacker, [&](const auto& d) { amp.replied(d.bytes); });
        return amp.replies() == before;
    });
    auto c = settled_counters();
    max_txn = std::max(max_txn, c["transactions"]);
    max_rss = std::max(max_rss, rss_kib(daemon_->pid()));

    LegitResult total;
    for (const auto& r : results) {
        EXPECT_TRUE(r.first_error.empty()) << r.first_error;
        total.started += r.started;
        total.completed += r.completed;
        total.accepted += r.accepted;
        total.denied += r.denied;
        total.timeout += r.timeout;
        total.error += r.error;
        total.during_flood += r.during_flood;
        total.counters.retransmissions += r.counters.retransmissions;
    }
    std::printf("flood: sent=%" PRIu64 " in %.2fs, replies to attacker=%" PRIu64
                " (accepts=%" PRIu64 ")\nclients: completed=%" PRIu64 " accepted=%" PRIu64
                " (%.2f%%) timeout=%" PRIu64 " retransmissions=%" PRIu64 " during_flood=%" PRIu64
                "\n"
                "daemon: datagrams=%" PRIu64 " accepted=%" PRIu64 " drop_rate_limited=%" PRIu64
                " drop_quenched=%" PRIu64 " shed=%" PRIu64 " max_transactions_seen=%" PRIu64
                " (samples=%" PRIu64 ") rss start=%" PRIu64 "KiB max=%" PRIu64 "KiB\n",
                flood_sent.load(), std::chrono::duration<double>(flood_elapsed).count(),
                amp.replies(), amp.accepts(), total.completed, total.accepted,
                total.completed ? 100.0 * static_cast<double>(total.accepted) /
                                      static_cast<double>(total.completed)
                                : 0.0,
                total.timeout, total.counters.retransmissions, total.during_flood, c["datagrams"],
                c["accepted"], c["drop_rate_limited"], c["drop_quenched"], c["shed"], max_txn,
                samples, rss_start, max_rss);

    // The legitimate clients: every resolution ended, >= 99% accepted.
    EXPECT_EQ(total.started, std::uint64_t{kClients} * kPerClient);
    EXPECT_EQ(total.completed, total.started);
    EXPECT_EQ(total.error, 0u);
    EXPECT_EQ(total.denied, 0u);
    EXPECT_GE(total.accepted * 100, total.completed * 99);

    // The flood was cut off by the 15.2 defences and counted as such.
    EXPECT_GT(c["drop_rate_limited"] + c["drop_quenched"], 0u);
    EXPECT_GT(c["drop_rate_limited"], 0u);
    // What the attacker got through is bounded by its bucket: at most the
    // burst plus the refill over the time the flood lasted (plus the time
    // until the daemon drained its queue, at most a few seconds).
    const double flood_s = std::chrono::duration<double>(flood_elapsed).count() + 10.0;
    EXPECT_LE(static_cast<double>(amp.accepts()), kBurst + kRate * flood_s);
    // The daemon accepted each legitimate resolution once or a few times
    // (a retransmitted PMReq after the PMAck opens a new transaction) plus
    // what the attacker got through; never most of the flood.
    EXPECT_LE(c["accepted"], total.accepted + total.counters.retransmissions + amp.accepts() +
                                 kBurst + static_cast<std::uint64_t>(kRate * flood_s));

    // Bounded state and memory, sampled throughout.
    EXPECT_GE(samples, 1u);
    EXPECT_LE(max_txn, kMaxTransactions);
    EXPECT_LT(max_rss - rss_start, kRssGrowthBoundKiB);
    expect_accounting_closes(c);

    // No amplification towards the attacker.
    amp.expect_no_amplification();
    expect_answers(v4(127, 0, 0, 20));
}

// ---------------------------------------------------------------------------
// 2. Random bytes and random-field messages.

TEST_F(Attack, RandomBytesAndRandomFieldsStayBoundedAndAccounted) {
    // No per-source limits: only max_transactions bounds the state here.
    start_daemon("");
    ASSERT_FALSE(HasFatalFailure());
    const std::uint64_t rss_start = rss_kib(daemon_->pid());

    constexpr std::uint64_t kDatagrams = 100'000;
    constexpr auto kTime = 10s;
    const std::uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto byte = [&] { return static_cast<std::uint8_t>(rng()); };

    pmtest::UdpClient attacker(pm::Endpoint{v4(127, 0, 0, 1), 0});
    ASSERT_TRUE(attacker.ok());
    AmplificationCheck amp;
    std::uint64_t max_txn = 0, max_rss = rss_start, samples = 0;
    std::vector<std::uint8_t> buf;
    const auto t0 = Clock::now();
    std::uint64_t sent = 0;
    for (; sent < kDatagrams && Clock::now() - t0 < kTime; ++sent) {
        const unsigned kind = static_cast<unsigned>(rng() % 10);
        if (kind < 4) {
            // Random bytes of a random length, often exactly a message's.
            static constexpr std::size_t kLens[] = {0,  1,  47, 48, 48,  49,
                                                    63, 64, 64, 65, 200, 3000};
            const std::size_t len = rng() % 2 ? kLens[rng() % std::size(kLens)] : rng() % 130;
            buf.resize(len);
            for (auto& b : buf) {
                b = byte();
            }
        } else if (kind < 7) {
            // A well-formed header (Ver 0, any type, IPV 4 or 6, sometimes
            // reserved) with every other field random.
            buf.resize(rng() % 4 == 0 ? pm::kIwpmRequestSize : pm::kMessageSize);
            for (auto& b : buf) {
                b = byte();
            }
            const unsigned ipv =
                rng() % 8 == 0 ? static_cast<unsigned>(rng() % 16) : (rng() % 2 ? 4u : 6u);
            buf[0] = static_cast<std::uint8_t>((rng() % 4) << 4 | ipv);
        } else {
            // A PMReq for the configured service from random CpIPAddr and
            // CpPort: each one opens a transaction that is never acked.
            pm::Message req;
            req.ap_addr = v4(127, 0, 0, 1);
            req.ap_port = 80;
            req.cp_addr = v4(10, byte(), byte(), byte());
            req.cp_port = static_cast<std::uint16_t>(1 + rng() % 65535);
            req.assoc_handle = rng();
            req.pm_time = byte();
            const auto w = pm::encode(req);
            buf.assign(w.begin(), w.end());
        }
        attacker.send(buf, pmsp_);
        amp.sent(buf);
        if (sent % 64 == 63) {
            drain(attacker, [&](const auto& d) { amp.replied(d.bytes); });
        }
        if (sent % 256 == 255) {
            // Let the daemon catch up a little so that more of the flood
            // reaches it rather than the kernel's full receive queue.
            std::this_thread::sleep_for(200us);
        }
        if (sent % 20'000 == 19'999) {
            auto c = counters();
            max_txn = std::max(max_txn, c["transactions"]);
            max_rss = std::max(max_rss, rss_kib(daemon_->pid()));
            ++samples;
        }
    }
    auto c = settled_counters();
    drain(attacker, [&](const auto& d) { amp.replied(d.bytes); });
    max_txn = std::max(max_txn, c["transactions"]);
    max_rss = std::max(max_rss, rss_kib(daemon_->pid()));
    std::printf("sent=%" PRIu64 " (requests=%zu) replies=%" PRIu64 " (accepts=%" PRIu64
                " denies=%" PRIu64 ")\ndaemon: datagrams=%" PRIu64 " accepted=%" PRIu64
                " shed=%" PRIu64 " superseded=%" PRIu64 " max_transactions_seen=%" PRIu64
                " rss start=%" PRIu64 "KiB max=%" PRIu64 "KiB\n",
                sent, amp.requests(), amp.replies(), amp.accepts(), amp.denies(), c["datagrams"],
                c["accepted"], c["shed"], c["superseded"], max_txn, rss_start, max_rss);

    ASSERT_TRUE(daemon_->running()) << tail_log();
    EXPECT_LE(c["datagrams"], sent);
    expect_accounting_closes(c);
    EXPECT_LE(max_txn, kMaxTransactions);
    EXPECT_LT(max_rss - rss_start, kRssGrowthBoundKiB);
    // Several kinds of input reached the daemon's checks.
    EXPECT_GT(c["drop_too_short"] + c["drop_too_long"], 0u);
    EXPECT_GT(c["drop_bad_version"], 0u);
    EXPECT_GT(c["accepted"], 0u);
    // More transactions were opened than the table holds: the bound was
    // enforced by shedding, and what is live is what was opened minus what
    // ended (no ack ever came, so nothing was acked).
    if (c["accepted"] > kMaxTransactions) {
        EXPECT_GT(c["shed"], 0u);
    }
    EXPECT_EQ(c["accepted"], c["transactions"] + c["acked"] + c["timeouts"] + c["superseded"] +
                                 c["shed"] + c["released_on_deny"]);
    amp.expect_no_amplification();
    expect_answers(v4(127, 0, 0, 21));
}

// ---------------------------------------------------------------------------
// 3. No reply to anything but a PMReq.

TEST_F(Attack, NoReplyToAckAcceptDenyOrMalformed) {
    start_daemon("");
    ASSERT_FALSE(HasFatalFailure());
    std::mt19937_64 rng(std::random_device{}());
    pmtest::UdpClient attacker(pm::Endpoint{v4(127, 0, 0, 1), 0});
    ASSERT_TRUE(attacker.ok());

    // Some live transactions, so that some of the PMAcks below match.
    constexpr int kLive = 50;
    std::vector<pm::Message> accepts;
    for (int i = 0; i < kLive; ++i) {
        pm::Message req;
        req.ap_addr = v4(127, 0, 0, 1);
        req.ap_port = 80;
        req.cp_addr = v4(127, 0, 0, 1);
        req.cp_port = static_cast<std::uint16_t>(30000 + i);
        req.assoc_handle = 0x11fe'0000ull + static_cast<std::uint64_t>(i);
        std::optional<pmtest::UdpClient::Datagram> d;
        for (int attempt = 0; attempt < 5 && !d; ++attempt) {
            attacker.send(pm::encode(req), pmsp_);
            d = attacker.receive(2000ms);
        }
        ASSERT_TRUE(d);
        auto m = pm::decode(d->bytes);
        ASSERT_TRUE(std::holds_alternative<pm::Message>(m));
        accepts.push_back(std::get<pm::Message>(m));
    }
    drain(attacker, [](const auto&) {});  // duplicates of retransmitted PMReqs
    auto before = settled_counters();

    constexpr std::uint64_t kDatagrams = 30'000;
    std::uint64_t sent = 0;
    std::vector<std::uint8_t> buf;
    std::uint64_t replies = 0;
    const auto t0 = Clock::now();
    for (; sent < kDatagrams && Clock::now() - t0 < 10s; ++sent) {
        pm::Message m;
        m.ap_addr = v4(127, 0, 0, 1);
        m.ap_port = 80;
        m.cp_addr = v4(127, 0, 0, 1);
        m.cp_port = static_cast<std::uint16_t>(1 + rng() % 65535);
        m.assoc_handle = rng();
        const unsigned kind =
            sent < static_cast<std::uint64_t>(kLive) ? 6u : static_cast<unsigned>(rng() % 6);
        if (kind == 6) {
            m = pm::make_ack(accepts[sent]);  // matches a live transaction
        } else if (kind <= 2) {
            m.type = static_cast<pm::MessageType>(1 + kind);  // PMAccept, PMAck, PMDeny
        }
        const auto w = pm::encode(m);
        buf.assign(w.begin(), w.end());
        // A PMReq made malformed: too short, too long, Ver != 0, reserved IPV.
        switch (kind) {
            case 3:
                buf.resize(rng() % pm::kMessageSize);
                break;
            case 4:
                buf.resize(rng() % 2 ? pm::kMessageSize + 1 + rng() % 100 : 3000, 0xab);
                if (buf.size() == pm::kIwpmRequestSize) {
                    buf.push_back(0);  // 64 bytes would be iwpmd's PMReq
                }
                break;
            case 5:
                if (rng() % 2) {
                    buf[0] = static_cast<std::uint8_t>(buf[0] | (1 + rng() % 3) << 6);
                } else {
                    buf[0] = static_cast<std::uint8_t>((buf[0] & 0xf0) | (rng() % 2 ? 0 : 5));
                }
                break;
            default:
                break;
        }
        attacker.send(buf, pmsp_);
        if (sent % 64 == 63) {
            drain(attacker, [&](const auto&) { ++replies; });
        }
    }
    auto after = settled_counters();
    drain(attacker, [&](const auto&) { ++replies; });
    std::printf(
        "sent=%" PRIu64 " datagrams counted=%" PRIu64 " replies=%" PRIu64 " acked=%" PRIu64 "\n",
        sent, after["datagrams"] - before["datagrams"], replies, after["acked"] - before["acked"]);

    EXPECT_EQ(replies, 0u);
    EXPECT_GT(after["datagrams"], before["datagrams"]);
    EXPECT_LE(after["datagrams"] - before["datagrams"], sent);
    // None of them was taken for a PMReq.
    EXPECT_EQ(after["requests"], before["requests"]);
    EXPECT_EQ(after["accepted"] + after["accepted_duplicate"] + after["denied_no_service"] +
                  after["denied_not_allowed"] + after["denied_no_address"],
              before["accepted"] + before["accepted_duplicate"] + before["denied_no_service"] +
                  before["denied_not_allowed"] + before["denied_no_address"]);
    EXPECT_GT(after["ack_unknown"], before["ack_unknown"]);
    EXPECT_GT(after["drop_not_for_server"], before["drop_not_for_server"]);
    EXPECT_GT(after["drop_too_short"], before["drop_too_short"]);
    EXPECT_GT(after["drop_too_long"], before["drop_too_long"]);
    expect_accounting_closes(after);
    expect_answers(v4(127, 0, 0, 22));
}

}  // namespace
