// SPDX-License-Identifier: Apache-2.0
// Starts the real sdp-pmd with a config written here, on loopback ports
// picked free, and checks its real replies. No assertion is about speed; every
// wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <regex>
#include <string>
#include <variant>

#include "harness.hpp"
#include "pmclient/message.hpp"
#include "pmclient/pm_time.hpp"

namespace {

using namespace std::chrono_literals;
using pmtest::Process;
using pmtest::UdpClient;

pm::IpAddress ip(const char* text) {
    return *pm::IpAddress::parse(text);
}
pm::Endpoint ep(const char* text) {
    return *pm::Endpoint::parse(text);
}

pm::Message request(std::uint64_t handle, const pm::Endpoint& ap, const pm::IpAddress& cp,
                    std::uint16_t cp_port) {
    pm::Message m;
    m.type = pm::MessageType::request;
    m.ipv = ap.address.family();
    m.ap_addr = ap.address;
    m.ap_port = ap.port;
    m.cp_addr = cp;
    m.cp_port = cp_port;
    m.assoc_handle = handle;
    return m;
}

std::vector<std::uint8_t> bytes_of(const pm::Message& m) {
    auto w = pm::encode(m);
    return {w.begin(), w.end()};
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

// The configs of these tests say `health: off`: nothing listens on their SDP
// addresses, which the default listener check would find down (the health
// tests at the end turn it on).
const std::string kWebConfig = R"(listen: ["127.0.0.1:{PORT}"]
health: off
log_level: debug
services:
  - name: web
    conventional: "127.0.0.1:80"
    sdp: ["127.0.0.1:8080"]
    pm_time: 30s
)";

class SdpPmd : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(dir_.ok());
        config_ = dir_.path() / "sdp-pmd.yaml";
        log_ = dir_.path() / "stderr.log";
    }

    // Every daemon a test started must still stop cleanly (which also lets
    // the sanitizers report on exit in the asan build).
    void TearDown() override {
        if (daemon_ && daemon_->running()) {
            EXPECT_TRUE(daemon_->signal(SIGTERM));
            EXPECT_EQ(daemon_->wait_exit(5000ms), std::optional<int>(0)) << log();
        }
    }

    std::string log() const { return pmtest::read_file(log_); }
    std::string expand(const std::string& yaml) const {
        return replace_all(yaml, "{PORT}", std::to_string(port_));
    }

    // Starts sdp-pmd on `yaml` ({PORT} replaced by a free port) and waits for
    // its "ready" line. Retries with another port if one was taken meanwhile.
    void start(const std::string& yaml, bool with_v6 = false) {
        for (int attempt = 0; attempt < 5; ++attempt) {
            auto port = pmtest::free_udp_port(with_v6);
            ASSERT_TRUE(port.has_value());
            port_ = *port;
            pmtest::write_file(config_, expand(yaml));
            daemon_ = std::make_unique<Process>(
                std::vector<std::string>{SDPPM_PMD_BIN, "--config", config_.string()},
                dir_.path() / "stdout.log", log_, env_);
            ASSERT_TRUE(daemon_->started());
            bool settled = pmtest::wait_until(
                [&] { return !daemon_->running() || log().find("ready") != std::string::npos; });
            ASSERT_TRUE(settled) << log();
            if (daemon_->running()) {
                return;
            }
            ASSERT_NE(log().find("cannot bind"), std::string::npos) << log();
        }
        FAIL() << "no free port after 5 attempts";
    }

    pm::Endpoint server(const char* addr = "127.0.0.1") const {
        return pm::Endpoint{ip(addr), port_};
    }

    // Sends and waits for one reply (bounded).
    std::optional<UdpClient::Datagram> exchange(const UdpClient& c,
                                                const std::vector<std::uint8_t>& bytes,
                                                const pm::Endpoint& to) {
        EXPECT_TRUE(c.send(bytes, to));
        return c.receive(2000ms);
    }

    pm::Message decoded(const UdpClient::Datagram& d) {
        auto r = pm::decode(d.bytes);
        EXPECT_TRUE(std::holds_alternative<pm::Message>(r));
        return std::holds_alternative<pm::Message>(r) ? std::get<pm::Message>(r) : pm::Message{};
    }

    // SIGUSR1, then the counters line it logged.
    std::string counters() {
        const std::size_t before = pmtest::count_occurrences(log(), "counters:");
        EXPECT_TRUE(daemon_->signal(SIGUSR1));
        std::string text;
        bool ok = pmtest::wait_until([&] {
            text = log();
            return pmtest::count_occurrences(text, "counters:") > before;
        });
        EXPECT_TRUE(ok) << text;
        auto pos = text.rfind("counters:");
        return text.substr(pos, text.find('\n', pos) - pos) + " ";
    }

    void reload_and_wait(const std::string& needle) {
        const std::size_t before = pmtest::count_occurrences(log(), needle);
        ASSERT_TRUE(daemon_->signal(SIGHUP));
        ASSERT_TRUE(pmtest::wait_until([&] {
            return pmtest::count_occurrences(log(), needle) > before;
        })) << log();
    }

    pmtest::TempDir dir_;
    std::filesystem::path config_;
    std::filesystem::path log_;
    std::uint16_t port_ = 0;
    std::unique_ptr<Process> daemon_;
    std::vector<std::string> env_;  // added to the daemon's environment
};

// --- Section 7.4: PMAccept and PMDeny fields ------------------------------

TEST_F(SdpPmd, AcceptIpv4CarriesFieldsOfSection74) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    UdpClient c(ep("127.0.0.1:0"));
    ASSERT_TRUE(c.ok());
    auto req = request(0x0123456789abcdefULL, ep("127.0.0.1:80"), ip("127.0.0.1"), 40000);
    auto reply = exchange(c, bytes_of(req), server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(reply->bytes.size(), pm::kMessageSize);
    EXPECT_EQ(reply->source, server());
    pm::Message m = decoded(*reply);
    EXPECT_EQ(m.type, pm::MessageType::accept);
    EXPECT_EQ(m.ipv, pm::Family::v4);
    EXPECT_EQ(m.pm_time, pm::pm_time_from_duration(30s));
    EXPECT_EQ(m.ap_port, 8080);
    EXPECT_EQ(m.cp_port, 40000);
    EXPECT_EQ(m.assoc_handle, 0x0123456789abcdefULL);
    EXPECT_EQ(m.cp_addr, ip("127.0.0.1"));
    EXPECT_EQ(m.ap_addr, ip("127.0.0.1"));
    // Reserved is sent as zero; IPv4 address fields are zero-padded.
    EXPECT_EQ(reply->bytes[2], 0);
    EXPECT_EQ(reply->bytes[3], 0);
    for (std::size_t i = 20; i < 32; ++i) {
        EXPECT_EQ(reply->bytes[i], 0) << i;
    }
}

TEST_F(SdpPmd, AcceptIpv6CarriesFieldsOfSection74) {
    if (!pmtest::ipv6_loopback_available()) {
        GTEST_SKIP() << "no IPv6 loopback";
    }
    ASSERT_NO_FATAL_FAILURE(start(R"(listen: ["127.0.0.1:{PORT}", "[::1]:{PORT}"]
health: off
log_level: debug
services:
  - name: web6
    conventional: "[::1]:443"
    sdp: ["[::1]:8443"]
    pm_time: permanent
)",
                                  true));
    UdpClient c(ep("[::1]:0"));
    ASSERT_TRUE(c.ok());
    auto req = request(7, ep("[::1]:443"), ip("::1"), 50000);
    auto reply = exchange(c, bytes_of(req), server("::1"));
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(reply->bytes.size(), pm::kMessageSize);
    EXPECT_EQ(reply->source, server("::1"));
    pm::Message m = decoded(*reply);
    EXPECT_EQ(m.type, pm::MessageType::accept);
    EXPECT_EQ(m.ipv, pm::Family::v6);
    EXPECT_EQ(m.pm_time, pm::kPmTimePermanent);
    EXPECT_EQ(m.ap_port, 8443);
    EXPECT_EQ(m.cp_port, 50000);
    EXPECT_EQ(m.assoc_handle, 7u);
    EXPECT_EQ(m.cp_addr, ip("::1"));
    EXPECT_EQ(m.ap_addr, ip("::1"));
}

TEST_F(SdpPmd, DenyForUnknownServiceReflectsRequest) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    UdpClient c(ep("127.0.0.1:0"));
    auto req = request(99, ep("127.0.0.1:81"), ip("127.0.0.1"), 40001);
    auto reply = exchange(c, bytes_of(req), server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(reply->bytes.size(), pm::kMessageSize);
    EXPECT_EQ(reply->source, server());
    pm::Message m = decoded(*reply);
    EXPECT_EQ(m.type, pm::MessageType::deny);
    EXPECT_EQ(m.ipv, pm::Family::v4);
    EXPECT_EQ(m.pm_time, 0);
    EXPECT_EQ(m.cp_port, 40001);
    EXPECT_EQ(m.assoc_handle, 99u);
    EXPECT_EQ(m.cp_addr, ip("127.0.0.1"));
    EXPECT_EQ(m.ap_addr, ip("127.0.0.1"));
    // The deny cause is logged (rate limited).
    EXPECT_TRUE(pmtest::wait_until([&] {
        return log().find("denied_no_service") != std::string::npos;
    })) << log();
}

TEST_F(SdpPmd, DenyForClientOutsideAllowList) {
    ASSERT_NO_FATAL_FAILURE(start(R"(listen: ["127.0.0.1:{PORT}"]
health: off
services:
  - name: private
    conventional: "127.0.0.1:80"
    sdp: ["127.0.0.1:8080"]
    allow: ["10.0.0.0/8"]
)"));
    UdpClient c(ep("127.0.0.1:0"));
    auto reply =
        exchange(c, bytes_of(request(5, ep("127.0.0.1:80"), ip("127.0.0.1"), 40002)), server());
    ASSERT_TRUE(reply) << log();
    pm::Message m = decoded(*reply);
    EXPECT_EQ(m.type, pm::MessageType::deny);
    EXPECT_EQ(m.assoc_handle, 5u);
    EXPECT_NE(counters().find(" denied_not_allowed=1 "), std::string::npos);
}

// --- Section 7.5.2: duplicates and PMAck ----------------------------------

TEST_F(SdpPmd, DuplicateRequestGetsSameAccept) {
    ASSERT_NO_FATAL_FAILURE(start(R"(listen: ["127.0.0.1:{PORT}"]
health: off
services:
  - name: web
    conventional: "*:80"
    sdp: ["127.0.0.1:8080", "127.0.0.1:8081"]
    policy: round-robin
)"));
    UdpClient c(ep("127.0.0.1:0"));
    auto req = bytes_of(request(11, ep("127.0.0.1:80"), ip("127.0.0.1"), 40003));
    auto first = exchange(c, req, server());
    ASSERT_TRUE(first) << log();
    auto second = exchange(c, req, server());
    ASSERT_TRUE(second) << log();
    EXPECT_EQ(decoded(*first).type, pm::MessageType::accept);
    EXPECT_EQ(first->bytes, second->bytes);
    const std::string ctr = counters();
    EXPECT_NE(ctr.find(" accepted=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" accepted_duplicate=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" transactions=1 "), std::string::npos) << ctr;
}

TEST_F(SdpPmd, AckReleasesStateAndDuplicateAckIsIgnored) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    UdpClient c(ep("127.0.0.1:0"));
    auto reply =
        exchange(c, bytes_of(request(21, ep("127.0.0.1:80"), ip("127.0.0.1"), 40004)), server());
    ASSERT_TRUE(reply) << log();
    pm::Message accept = decoded(*reply);
    ASSERT_EQ(accept.type, pm::MessageType::accept);
    auto ack = bytes_of(pm::make_ack(accept));
    ASSERT_TRUE(c.send(ack, server()));
    ASSERT_TRUE(c.send(ack, server()));
    // Neither PMAck is answered: the next reply is the one to this PMReq.
    auto probe =
        exchange(c, bytes_of(request(22, ep("127.0.0.1:81"), ip("127.0.0.1"), 40005)), server());
    ASSERT_TRUE(probe) << log();
    EXPECT_EQ(decoded(*probe).assoc_handle, 22u);
    EXPECT_FALSE(c.receive(100ms));
    const std::string ctr = counters();
    EXPECT_NE(ctr.find(" acked=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" ack_unknown=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" transactions=0 "), std::string::npos) << ctr;
}

TEST_F(SdpPmd, UnackedAcceptIsReleasedByTimer) {
    ASSERT_NO_FATAL_FAILURE(
        start(replace_all(kWebConfig, "log_level: debug", "log_level: debug\nack_timeout: 200ms")));
    UdpClient c(ep("127.0.0.1:0"));
    auto reply =
        exchange(c, bytes_of(request(31, ep("127.0.0.1:80"), ip("127.0.0.1"), 40006)), server());
    ASSERT_TRUE(reply) << log();
    std::string ctr;
    EXPECT_TRUE(pmtest::wait_until(
        [&] {
            ctr = counters();
            return ctr.find(" timeouts=1 ") != std::string::npos;
        },
        5000ms))
        << ctr;
    EXPECT_NE(ctr.find(" transactions=0 "), std::string::npos) << ctr;
}

// --- What gets no reply -----------------------------------------------------

TEST_F(SdpPmd, InvalidDatagramsGetNoReplyAndDaemonKeepsAnswering) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    UdpClient c(ep("127.0.0.1:0"));
    auto req = request(41, ep("127.0.0.1:80"), ip("127.0.0.1"), 40007);

    auto as_type = [&](pm::MessageType t) {
        pm::Message m = req;
        m.type = t;
        return bytes_of(m);
    };
    std::vector<std::vector<std::uint8_t>> junk;
    junk.push_back(as_type(pm::MessageType::accept));
    junk.push_back(as_type(pm::MessageType::deny));
    auto bad_version = bytes_of(req);
    bad_version[0] |= 0x40;
    junk.push_back(bad_version);
    auto reserved_ipv = bytes_of(req);
    reserved_ipv[0] = static_cast<std::uint8_t>((reserved_ipv[0] & 0xf0) | 0x5);
    junk.push_back(reserved_ipv);
    auto short47 = bytes_of(req);
    short47.pop_back();
    junk.push_back(short47);
    auto long49 = bytes_of(req);
    long49.push_back(0);
    junk.push_back(long49);
    junk.emplace_back();                       // empty datagram
    junk.emplace_back(3000, std::uint8_t{0});  // larger than the receive buffer

    for (const auto& j : junk) {
        ASSERT_TRUE(c.send(j, server()));
    }
    // Datagrams from one socket are handled in order: had any of the above
    // been answered, that answer would arrive before this one.
    auto probe = request(42, ep("127.0.0.1:80"), ip("127.0.0.1"), 40008);
    auto reply = exchange(c, bytes_of(probe), server());
    ASSERT_TRUE(reply) << log();
    pm::Message m = decoded(*reply);
    EXPECT_EQ(m.type, pm::MessageType::accept);
    EXPECT_EQ(m.assoc_handle, 42u);
    EXPECT_FALSE(c.receive(100ms));

    const std::string ctr = counters();
    EXPECT_NE(ctr.find(" drop_not_for_server=2 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" drop_bad_version=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" drop_reserved_ipv=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" drop_too_short=2 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" drop_too_long=2 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" truncated=1 "), std::string::npos) << ctr;
    EXPECT_NE(ctr.find(" accepted=1 "), std::string::npos) << ctr;
}

TEST_F(SdpPmd, IwpmdRequestOf64BytesGets48ByteAccept) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    UdpClient c(ep("127.0.0.1:0"));
    auto bytes = bytes_of(request(51, ep("127.0.0.1:80"), ip("127.0.0.1"), 40009));
    // iwpmd appends the mapped CpIPAddr (16 bytes).
    bytes.insert(bytes.end(), {127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    ASSERT_EQ(bytes.size(), pm::kIwpmRequestSize);
    auto reply = exchange(c, bytes, server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(reply->bytes.size(), pm::kMessageSize);
    pm::Message m = decoded(*reply);
    EXPECT_EQ(m.type, pm::MessageType::accept);
    EXPECT_EQ(m.assoc_handle, 51u);
    EXPECT_EQ(m.ap_port, 8080);
}

// --- Reply source address (7.4) ---------------------------------------------

TEST_F(SdpPmd, ReplyLeavesFromAddressRequestWasSentTo) {
    ASSERT_NO_FATAL_FAILURE(start(R"(listen: ["0.0.0.0:{PORT}"]
health: off
services:
  - name: any
    conventional: "*:80"
    sdp: ["*:8080"]
)"));
    UdpClient c(ep("127.0.0.1:0"));
    for (const char* dst : {"127.0.0.2", "127.0.0.1", "127.0.0.2"}) {
        SCOPED_TRACE(dst);
        auto req = request(61, pm::Endpoint{ip(dst), 80}, ip("127.0.0.1"), 40010);
        auto reply = exchange(c, bytes_of(req), server(dst));
        ASSERT_TRUE(reply) << log();
        EXPECT_EQ(reply->source, server(dst));
        pm::Message m = decoded(*reply);
        EXPECT_EQ(m.type, pm::MessageType::accept);
        // "*:8080": the ApIPAddr the client asked for.
        EXPECT_EQ(m.ap_addr, ip(dst));
        EXPECT_EQ(m.ap_port, 8080);
    }
}

// --- Signals ---------------------------------------------------------------

TEST_F(SdpPmd, SighupLoadsNewConfig) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    UdpClient c(ep("127.0.0.1:0"));
    auto mail = bytes_of(request(71, ep("127.0.0.1:25"), ip("127.0.0.1"), 40011));
    auto before = exchange(c, mail, server());
    ASSERT_TRUE(before) << log();
    EXPECT_EQ(decoded(*before).type, pm::MessageType::deny);

    pmtest::write_file(config_, expand(kWebConfig + R"(  - name: mail
    conventional: "127.0.0.1:25"
    sdp: ["127.0.0.1:2525"]
)"));
    ASSERT_NO_FATAL_FAILURE(reload_and_wait("reloaded configuration"));
    auto after =
        exchange(c, bytes_of(request(72, ep("127.0.0.1:25"), ip("127.0.0.1"), 40012)), server());
    ASSERT_TRUE(after) << log();
    pm::Message m = decoded(*after);
    EXPECT_EQ(m.type, pm::MessageType::accept);
    EXPECT_EQ(m.ap_port, 2525);
    // The old service is still there.
    auto web =
        exchange(c, bytes_of(request(73, ep("127.0.0.1:80"), ip("127.0.0.1"), 40013)), server());
    ASSERT_TRUE(web);
    EXPECT_EQ(decoded(*web).ap_port, 8080);
}

TEST_F(SdpPmd, SighupWithBrokenConfigKeepsRunningOne) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    pmtest::write_file(config_, expand(kWebConfig) + "ack_timeout: banana\n");
    ASSERT_NO_FATAL_FAILURE(reload_and_wait("reload failed"));
    const std::string text = log();
    EXPECT_NE(text.find("<3>"), std::string::npos) << text;
    EXPECT_NE(text.find(config_.string() + ":"), std::string::npos) << text;
    EXPECT_NE(text.find("ack_timeout"), std::string::npos) << text;
    EXPECT_TRUE(daemon_->running());
    UdpClient c(ep("127.0.0.1:0"));
    auto reply =
        exchange(c, bytes_of(request(81, ep("127.0.0.1:80"), ip("127.0.0.1"), 40014)), server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::accept);
    EXPECT_EQ(decoded(*reply).ap_port, 8080);
}

TEST_F(SdpPmd, SighupMovesListenSocket) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    const std::uint16_t old_port = port_;
    std::optional<std::uint16_t> new_port;
    for (int attempt = 0; attempt < 5 && !new_port; ++attempt) {
        auto p = pmtest::free_udp_port(false);
        ASSERT_TRUE(p);
        if (*p == old_port) {
            continue;
        }
        port_ = *p;
        pmtest::write_file(config_, expand(kWebConfig));
        ASSERT_TRUE(daemon_->signal(SIGHUP));
        ASSERT_TRUE(pmtest::wait_until([&] {
            const std::string t = log();
            return t.find("reloaded configuration") != std::string::npos ||
                   pmtest::count_occurrences(t, "reload failed") >
                       static_cast<std::size_t>(attempt);
        })) << log();
        if (log().find("reloaded configuration") != std::string::npos) {
            new_port = port_;
        }
    }
    ASSERT_TRUE(new_port) << log();
    UdpClient c(ep("127.0.0.1:0"));
    auto reply =
        exchange(c, bytes_of(request(91, ep("127.0.0.1:80"), ip("127.0.0.1"), 40015)), server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::accept);
    EXPECT_NE(log().find("no longer listening on UDP 127.0.0.1:" + std::to_string(old_port)),
              std::string::npos)
        << log();
}

TEST_F(SdpPmd, SigtermStopsWithExitZeroAndFinalCounters) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    ASSERT_TRUE(daemon_->signal(SIGTERM));
    EXPECT_EQ(daemon_->wait_exit(5000ms), std::optional<int>(0)) << log();
    EXPECT_NE(log().find("counters:"), std::string::npos) << log();
}

TEST_F(SdpPmd, SigintStopsWithExitZero) {
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    ASSERT_TRUE(daemon_->signal(SIGINT));
    EXPECT_EQ(daemon_->wait_exit(5000ms), std::optional<int>(0)) << log();
}

TEST_F(SdpPmd, NotifiesServiceManagerOfReadyReloadAndStop) {
    pmtest::UnixDatagramReceiver manager(dir_.path() / "notify.sock");
    ASSERT_TRUE(manager.ok());
    env_.push_back("NOTIFY_SOCKET=" + (dir_.path() / "notify.sock").string());
    ASSERT_NO_FATAL_FAILURE(start(kWebConfig));
    auto ready = manager.receive();
    ASSERT_TRUE(ready) << log();
    EXPECT_NE(ready->find("READY=1"), std::string::npos) << *ready;

    ASSERT_TRUE(daemon_->signal(SIGHUP));
    auto reloading = manager.receive();
    ASSERT_TRUE(reloading) << log();
    EXPECT_NE(reloading->find("RELOADING=1"), std::string::npos) << *reloading;
    EXPECT_NE(reloading->find("MONOTONIC_USEC="), std::string::npos) << *reloading;
    auto reloaded = manager.receive();
    ASSERT_TRUE(reloaded) << log();
    EXPECT_NE(reloaded->find("READY=1"), std::string::npos) << *reloaded;

    ASSERT_TRUE(daemon_->signal(SIGTERM));
    auto stopping = manager.receive();
    ASSERT_TRUE(stopping) << log();
    EXPECT_NE(stopping->find("STOPPING=1"), std::string::npos) << *stopping;
    EXPECT_EQ(daemon_->wait_exit(5000ms), std::optional<int>(0)) << log();
}

// --- Flood --------------------------------------------------------------------

TEST_F(SdpPmd, GarbageBurstThenValidRequestStillAnswered) {
    ASSERT_NO_FATAL_FAILURE(
        start(replace_all(kWebConfig, "log_level: debug", "log_level: debug\nlog_rate_limit: 5")));
    UdpClient c(ep("127.0.0.1:0"));
    std::vector<std::uint8_t> garbage(48, 0xff);
    for (int i = 0; i < 10000; ++i) {
        garbage[1] = static_cast<std::uint8_t>(i);
        garbage.resize(static_cast<std::size_t>(1 + i % 100));
        c.send(garbage, server());  // the kernel may drop some: fine
    }
    // The kernel may also drop the request if the socket buffer is still
    // full: retransmit as a PM client does (7.5.1), within a bounded wait.
    auto req = bytes_of(request(101, ep("127.0.0.1:80"), ip("127.0.0.1"), 40016));
    std::optional<UdpClient::Datagram> reply;
    for (int attempt = 0; attempt < 25 && !reply; ++attempt) {
        ASSERT_TRUE(c.send(req, server()));
        reply = c.receive(200ms);
    }
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::accept);
    EXPECT_TRUE(daemon_->running());
    // Bounded logging: the flood is summarised, not logged line by line.
    EXPECT_TRUE(
        pmtest::wait_until([&] { return log().find("suppressed ") != std::string::npos; }, 5000ms))
        << log();
    EXPECT_LT(pmtest::count_occurrences(log(), "drop_"), 200u);
}

// --- Command line and startup failures --------------------------------------

TEST_F(SdpPmd, VersionPrintsVersion) {
    auto r = pmtest::run({SDPPM_PMD_BIN, "--version"}, dir_.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(0));
    EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(^sdp-pmd \d+\.\d+\.\d+\n$)"))) << r.out;
}

TEST_F(SdpPmd, HelpListsOptions) {
    auto r = pmtest::run({SDPPM_PMD_BIN, "--help"}, dir_.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(0));
    for (const char* opt : {"--config", "--foreground", "--check-config", "--version", "--help"}) {
        EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
    }
}

TEST_F(SdpPmd, UnknownOptionExitsTwoWithOneLine) {
    auto r = pmtest::run({SDPPM_PMD_BIN, "--frobnicate"}, dir_.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(2));
    EXPECT_NE(r.err.find("frobnicate"), std::string::npos) << r.err;
    EXPECT_EQ(pmtest::count_occurrences(r.err, "\n"), 1u) << r.err;
    auto operand = pmtest::run({SDPPM_PMD_BIN, "stray"}, dir_.path());
    EXPECT_EQ(operand.exit_code, std::optional<int>(2));
    auto missing = pmtest::run({SDPPM_PMD_BIN, "--config"}, dir_.path());
    EXPECT_EQ(missing.exit_code, std::optional<int>(2));
}

TEST_F(SdpPmd, BadConfigAtStartupExitsOneNamingFileLineKey) {
    const auto bad = dir_.path() / "bad.yaml";
    pmtest::write_file(bad, "listen: [\"127.0.0.1:1\"]\nack_timeout: banana\n");
    auto r = pmtest::run({SDPPM_PMD_BIN, "--config", bad.string()}, dir_.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(1));
    EXPECT_NE(r.err.find(bad.string() + ":2: ack_timeout:"), std::string::npos) << r.err;
}

TEST_F(SdpPmd, MissingExplicitConfigExitsOne) {
    const auto missing = dir_.path() / "missing.yaml";
    auto r = pmtest::run({SDPPM_PMD_BIN, "--config", missing.string()}, dir_.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(1));
    EXPECT_NE(r.err.find(missing.string()), std::string::npos) << r.err;
}

TEST_F(SdpPmd, CheckConfigValidatesWithoutBinding) {
    const auto good = dir_.path() / "good.yaml";
    pmtest::write_file(good, replace_all(kWebConfig, "{PORT}", "1"));
    auto ok =
        pmtest::run({SDPPM_PMD_BIN, "--check-config", "--config", good.string()}, dir_.path());
    EXPECT_EQ(ok.exit_code, std::optional<int>(0)) << ok.err;
    const auto bad = dir_.path() / "bad.yaml";
    pmtest::write_file(bad,
                       "services:\n  - name: x\n    conventional: \"127.0.0.1:80\"\n"
                       "    sdp: [\"not-an-address\"]\n");
    auto ko = pmtest::run({SDPPM_PMD_BIN, "--check-config", "--config", bad.string()}, dir_.path());
    EXPECT_EQ(ko.exit_code, std::optional<int>(1));
    EXPECT_NE(ko.err.find(bad.string() + ":4: services[0].sdp[0]:"), std::string::npos) << ko.err;
}

TEST_F(SdpPmd, BindFailureExitsOneNamingAddress) {
    UdpClient holder(ep("127.0.0.1:0"));
    ASSERT_TRUE(holder.ok());
    const std::string addr = "127.0.0.1:" + std::to_string(holder.local().port);
    const auto cfg = dir_.path() / "taken.yaml";
    pmtest::write_file(cfg, "listen: [\"" + addr + "\"]\n");
    auto r = pmtest::run({SDPPM_PMD_BIN, "--config", cfg.string()}, dir_.path());
    EXPECT_EQ(r.exit_code, std::optional<int>(1));
    EXPECT_NE(r.err.find(addr), std::string::npos) << r.err;
}

// --- Health of SDP addresses (issue #15) ------------------------------------
//
// Plain TCP listeners stand in for SDP listeners. Every wait is "within the
// configured bound, polled": nothing asserts how fast a state changes.

class SdpPmdHealth : public SdpPmd {
  protected:
    // Sends fresh PMReqs (new CpPort each) until one gets `type`, at most
    // for `timeout`; returns that reply.
    std::optional<pm::Message> poll_until(pm::MessageType type, const char* conventional,
                                          std::chrono::milliseconds timeout = 10000ms) {
        UdpClient c(ep("127.0.0.1:0"));
        std::optional<pm::Message> got;
        pmtest::wait_until(
            [&] {
                auto reply = exchange(
                    c,
                    bytes_of(request(next_handle_, ep(conventional), ip("127.0.0.1"),
                                     static_cast<std::uint16_t>(20000 + next_handle_ % 20000))),
                    server());
                ++next_handle_;
                if (reply && decoded(*reply).type == type) {
                    got = decoded(*reply);
                    return true;
                }
                std::this_thread::sleep_for(20ms);
                return false;
            },
            timeout);
        return got;
    }

    std::uint64_t next_handle_ = 1000;
};

std::string health_config(const std::string& sdp, const std::string& health) {
    return R"(listen: ["127.0.0.1:{PORT}"]
log_level: debug
health: )" +
           health + R"(
services:
  - name: web
    conventional: "127.0.0.1:80"
    sdp: )" +
           sdp + R"(
    policy: round-robin
)";
}

TEST_F(SdpPmdHealth, StoppedListenerIsDeniedAfterFallAndAcceptedAgainAfterRise) {
    pmtest::TcpListener sdp(ep("127.0.0.1:0"));
    ASSERT_TRUE(sdp.ok());
    const std::string port = std::to_string(sdp.port());
    ASSERT_NO_FATAL_FAILURE(start(
        health_config("[\"127.0.0.1:" + port + "\"]", "{interval: 100ms, rise: 2, fall: 3}")));
    auto accept = poll_until(pm::MessageType::accept, "127.0.0.1:80");
    ASSERT_TRUE(accept) << log();
    EXPECT_EQ(accept->ap_port, sdp.port());

    sdp.close();
    ASSERT_TRUE(poll_until(pm::MessageType::deny, "127.0.0.1:80")) << log();
    EXPECT_NE(log().find("SDP address 127.0.0.1:" + port + " is down (3 listener checks failed)"),
              std::string::npos)
        << log();
    EXPECT_NE(counters().find(" health_transitions_down=1 "), std::string::npos);
    EXPECT_EQ(counters().find(" denied_unavailable=0 "), std::string::npos);

    ASSERT_TRUE(sdp.open());
    accept = poll_until(pm::MessageType::accept, "127.0.0.1:80");
    ASSERT_TRUE(accept) << log();
    EXPECT_EQ(accept->ap_port, sdp.port());
    EXPECT_NE(log().find("SDP address 127.0.0.1:" + port + " is up (2 listener checks passed)"),
              std::string::npos)
        << log();
}

TEST_F(SdpPmdHealth, WildcardListenerCoversTheLoopbackAddress) {
    pmtest::TcpListener sdp(ep("0.0.0.0:0"));
    ASSERT_TRUE(sdp.ok());
    const std::string port = std::to_string(sdp.port());
    ASSERT_NO_FATAL_FAILURE(
        start(health_config("[\"127.0.0.1:" + port + "\"]", "{interval: 100ms}")));
    // The first check decides: up at once, and it stays up.
    ASSERT_TRUE(pmtest::wait_until([&] {
        return log().find("127.0.0.1:" + port + " is up (first listener check passed)") !=
               std::string::npos;
    })) << log();
    EXPECT_TRUE(poll_until(pm::MessageType::accept, "127.0.0.1:80"));
}

TEST_F(SdpPmdHealth, EveryAcceptNamesTheLiveAddress) {
    pmtest::TcpListener live(ep("127.0.0.1:0"));
    pmtest::TcpListener dead(ep("127.0.0.1:0"));
    ASSERT_TRUE(live.ok() && dead.ok());
    const std::uint16_t dead_port = dead.port();
    dead.close();
    ASSERT_NO_FATAL_FAILURE(
        start(health_config("[\"127.0.0.1:" + std::to_string(dead_port) +
                                "\", \"127.0.0.1:" + std::to_string(live.port()) + "\"]",
                            "{interval: 100ms}")));
    ASSERT_TRUE(pmtest::wait_until([&] {
        return log().find("127.0.0.1:" + std::to_string(dead_port) + " is down") !=
               std::string::npos;
    })) << log();
    UdpClient c(ep("127.0.0.1:0"));
    for (std::uint16_t i = 0; i < 10; ++i) {
        auto reply =
            exchange(c, bytes_of(request(500 + i, ep("127.0.0.1:80"), ip("127.0.0.1"), 41000 + i)),
                     server());
        ASSERT_TRUE(reply) << log();
        pm::Message m = decoded(*reply);
        EXPECT_EQ(m.type, pm::MessageType::accept);
        EXPECT_EQ(m.ap_port, live.port()) << i;  // round-robin skips the dead one
    }
}

TEST_F(SdpPmdHealth, DuplicateRequestGetsTheStateAfterAChange) {
    pmtest::TcpListener sdp(ep("127.0.0.1:0"));
    ASSERT_TRUE(sdp.ok());
    const std::string port = std::to_string(sdp.port());
    ASSERT_NO_FATAL_FAILURE(start(
        health_config("[\"127.0.0.1:" + port + "\"]", "{interval: 100ms, rise: 1, fall: 1}")));
    ASSERT_TRUE(pmtest::wait_until([&] {
        return log().find("127.0.0.1:" + port + " is up") != std::string::npos;
    })) << log();
    UdpClient c(ep("127.0.0.1:0"));
    const auto req = bytes_of(request(0x77, ep("127.0.0.1:80"), ip("127.0.0.1"), 42000));
    auto reply = exchange(c, req, server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::accept);

    // The listener goes away before the PMAck: the duplicate gets a PMDeny.
    sdp.close();
    ASSERT_TRUE(pmtest::wait_until([&] {
        return log().find("127.0.0.1:" + port + " is down") != std::string::npos;
    })) << log();
    reply = exchange(c, req, server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::deny);
    const std::string after_deny = counters();
    EXPECT_NE(after_deny.find(" released_on_deny=1 "), std::string::npos) << after_deny;
    EXPECT_NE(after_deny.find(" denied_unavailable=1 "), std::string::npos) << after_deny;

    // Back: the same PMReq again gets a PMAccept.
    ASSERT_TRUE(sdp.open());
    ASSERT_TRUE(pmtest::wait_until([&] {
        return pmtest::count_occurrences(log(), "127.0.0.1:" + port + " is up") >= 2;
    })) << log();
    reply = exchange(c, req, server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::accept);
    EXPECT_EQ(decoded(*reply).ap_port, sdp.port());
}

TEST_F(SdpPmdHealth, ConnectCheckOnLoopback) {
    pmtest::TcpListener sdp(ep("127.0.0.1:0"));
    ASSERT_TRUE(sdp.ok());
    const std::string port = std::to_string(sdp.port());
    ASSERT_NO_FATAL_FAILURE(
        start(health_config("[\"127.0.0.1:" + port + "\"]",
                            "{check: connect, interval: 100ms, timeout: 500ms, fall: 2}")));
    ASSERT_TRUE(pmtest::wait_until([&] {
        return log().find("127.0.0.1:" + port + " is up (first connect check passed)") !=
               std::string::npos;
    })) << log();
    EXPECT_TRUE(poll_until(pm::MessageType::accept, "127.0.0.1:80"));
    sdp.close();
    ASSERT_TRUE(poll_until(pm::MessageType::deny, "127.0.0.1:80")) << log();
    EXPECT_NE(log().find("127.0.0.1:" + port + " is down (2 connect checks failed)"),
              std::string::npos)
        << log();
}

TEST_F(SdpPmdHealth, HealthOffHandsOutAddressesWithoutAListener) {
    pmtest::TcpListener probe(ep("127.0.0.1:0"));
    const std::uint16_t port = probe.port();
    probe.close();
    ASSERT_NO_FATAL_FAILURE(
        start(health_config("[\"127.0.0.1:" + std::to_string(port) + "\"]", "off")));
    UdpClient c(ep("127.0.0.1:0"));
    auto reply =
        exchange(c, bytes_of(request(9, ep("127.0.0.1:80"), ip("127.0.0.1"), 43000)), server());
    ASSERT_TRUE(reply) << log();
    EXPECT_EQ(decoded(*reply).type, pm::MessageType::accept);
}

}  // namespace
