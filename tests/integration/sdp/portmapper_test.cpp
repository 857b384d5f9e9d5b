// SPDX-License-Identifier: Apache-2.0
// sdp::Stream through the real sdp-pmd: PMAccept -> SDP to the acceptor;
// PMDeny, PM timeout and a refused SDP Address -> plain TCP fallback; and
// the acceptor's registration over the daemon's control socket.
#include <gtest/gtest.h>

#include <thread>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stop_token>
#include <vector>

#include "integration/daemon/harness.hpp"
#include "pmctl/client.hpp"
#include "pmd_fixture.hpp"
#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

namespace {

using namespace std::chrono_literals;

class SdpPortMapper : public sdptest::PmdFixture {
  protected:
    sdp::StreamOptions opts() const {
        sdp::StreamOptions o;
        o.pmsp = pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), port_};
        o.io_timeout = 20s;
        o.resolve_deadline = 2s;
        o.use_pm_cache = false;
        return o;
    }
    std::filesystem::path control_socket() const { return dir_.path() / "control.sock"; }
    // Starts sdp-pmd with a control socket and a state file in dir_;
    // control_ready_ tells whether the socket appeared.
    void start_with_control() {
        ASSERT_NO_FATAL_FAILURE(start("listen: [\"127.0.0.1:{PORT}\"]\ncontrol:\n  socket: \"" +
                                      control_socket().string() + "\"\nstate_file: \"" +
                                      (dir_.path() / "state.json").string() + "\"\n"));
        control_ready_ =
            pmtest::wait_until([&] { return std::filesystem::exists(control_socket()); }, 2000ms);
    }
    bool control_ready_ = false;
};

// Sends "ping" and expects "pong" back from a peer running `serve`.
void ping_pong(sdp::Stream& s) {
    std::error_code ec;
    const std::string ping = "ping";
    s.write(std::span(reinterpret_cast<const std::uint8_t*>(ping.data()), ping.size()), ec);
    ASSERT_FALSE(ec) << ec.message();
    std::vector<std::uint8_t> b(4);
    ASSERT_EQ(s.read(b, ec), 4u) << ec.message();
    EXPECT_EQ(std::string(b.begin(), b.end()), "pong");
}

template <typename Read, typename Write>
void serve_one(Read rd, Write wr) {
    std::vector<std::uint8_t> b(4);
    if (rd(b)) {
        const std::string pong = "pong";
        wr(std::span(reinterpret_cast<const std::uint8_t*>(pong.data()), pong.size()));
    }
}

TEST_F(SdpPortMapper, AcceptedMappingCarriesDataOverSdp) {
    sdptest::TcpListener conv;  // reserves the Conventional port (unused)
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream.io_timeout = 20s;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) +
              "\"\n    sdp: [\"127.0.0.1:" + std::to_string(acc.local_endpoint().port) + "\"]\n"));
    std::thread srv([&] {
        sdp::Stream s;
        if (acc.accept(s, 10s)) {
            return;
        }
        std::error_code ec;
        serve_one([&](std::span<std::uint8_t> b) { return s.read(b, ec) == b.size(); },
                  [&](std::span<const std::uint8_t> b) { s.write(b, ec); });
        s.close();
    });
    sdp::Stream s;
    auto ec = s.connect(conv.endpoint(), opts());
    ASSERT_FALSE(ec) << ec.message() << " " << s.info().reason;
    EXPECT_EQ(s.used(), sdp::Transport::sdp) << s.info().reason;
    EXPECT_EQ(s.info().resolution, "accept");  // pmclient::to_string(ResultKind)
    EXPECT_EQ(s.info().peer, acc.local_endpoint());
    ping_pong(s);
    s.close();
    srv.join();
}

void tcp_fallback_case(sdp::Stream& s, sdptest::TcpListener& conv, const pm::Endpoint& target,
                       const sdp::StreamOptions& o) {
    std::thread srv([&] {
        int fd = conv.accept();
        if (fd < 0) {
            return;
        }
        serve_one(
            [&](std::span<std::uint8_t> b) {
                return ::recv(fd, b.data(), b.size(), MSG_WAITALL) ==
                       static_cast<ssize_t>(b.size());
            },
            [&](std::span<const std::uint8_t> b) { (void)!::send(fd, b.data(), b.size(), 0); });
        ::close(fd);
    });
    auto ec = s.connect(target, o);
    if (!ec) {
        EXPECT_EQ(s.used(), sdp::Transport::tcp);
        EXPECT_FALSE(s.info().reason.empty());
        EXPECT_EQ(s.info().peer, conv.endpoint());
        ping_pong(s);
    }
    s.close();
    if (ec) {
        // Unblock the listener thread.
        int fd = sdptest::tcp_connect(conv.endpoint());
        if (fd >= 0) {
            ::close(fd);
        }
    }
    srv.join();
    ASSERT_FALSE(ec) << ec.message();
}

TEST_F(SdpPortMapper, DenyFallsBackToPlainTcp) {
    sdptest::TcpListener conv;
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) +
              "\"\n    sdp: [\"127.0.0.1:9\"]\n    allow: [\"10.0.0.0/8\"]\n"));
    sdp::Stream s;
    ASSERT_NO_FATAL_FAILURE(tcp_fallback_case(s, conv, conv.endpoint(), opts()));
}

TEST_F(SdpPortMapper, RefusedSdpAddressFallsBackToPlainTcp) {
    sdptest::TcpListener conv;
    sdptest::TcpListener gone;
    const auto dead = gone.port();
    gone.close();
    // health: off, so that the PMAccept names the dead address (the health
    // check would deny it): this test is about the refused connect.
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nhealth: off\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) + "\"\n    sdp: [\"127.0.0.1:" + std::to_string(dead) +
              "\"]\n"));
    sdp::Stream s;
    ASSERT_NO_FATAL_FAILURE(tcp_fallback_case(s, conv, conv.endpoint(), opts()));
}

TEST_F(SdpPortMapper, NoPortMapperTimesOutAndFallsBack) {
    sdptest::TcpListener conv;
    auto silent = pmtest::free_udp_port(false);  // nobody answers there
    ASSERT_TRUE(silent.has_value());
    port_ = *silent;
    auto o = opts();
    o.resolve_deadline = 300ms;
    o.resolve_initial_timeout = 100ms;
    sdp::Stream s;
    ASSERT_NO_FATAL_FAILURE(tcp_fallback_case(s, conv, conv.endpoint(), o));
    EXPECT_EQ(s.info().resolution, "");  // closed: info reset
}

// Sockets of this network namespace in SYN_SENT towards port `port`
// (/proc/net/tcp: remote address:port in hex, state 02), leaving out those
// from the local ports `except`.
int syn_sent_to(std::uint16_t port, const std::vector<std::uint16_t>& except = {}) {
    std::FILE* f = std::fopen("/proc/net/tcp", "r");
    if (f == nullptr) {
        return -1;
    }
    char line[512];
    int n = 0;
    char want[8];
    std::snprintf(want, sizeof want, ":%04X", port);
    while (std::fgets(line, sizeof line, f) != nullptr) {
        char local[64], remote[64], st[8];
        if (std::sscanf(line, "%*d: %63s %63s %7s", local, remote, st) != 3 ||
            std::strstr(remote, want) == nullptr || std::strcmp(st, "02") != 0) {
            continue;
        }
        const char* colon = std::strchr(local, ':');
        const auto from =
            static_cast<std::uint16_t>(colon != nullptr ? std::strtoul(colon + 1, nullptr, 16) : 0);
        if (std::find(except.begin(), except.end(), from) == except.end()) {
            ++n;
        }
    }
    std::fclose(f);
    return n;
}

// Nobody connects to `l` within 300 ms.
bool nothing_arrives(const sdptest::TcpListener& l) {
    pollfd p{l.fd(), POLLIN, 0};
    return ::poll(&p, 1, 300) == 0;
}

TEST_F(SdpPortMapper, AStopEndsThePortMapperQuestionAndNothingConnects) {
    // A PMSP that hears the PMReq and never answers, a question allowed
    // 60 s: the stop ends it, and the fallback to the Conventional Address
    // is not taken either.
    sdptest::TcpListener conv;
    const int pmsp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(pmsp, reinterpret_cast<sockaddr*>(&a), len), 0);
    ASSERT_EQ(::getsockname(pmsp, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    auto o = opts();
    o.resolve_deadline = 60s;
    o.resolve_initial_timeout = 10s;
    std::stop_source stop;
    o.stop = stop.get_token();
    sdp::Stream s;
    std::error_code ec;
    std::atomic<bool> returned{false};
    std::thread caller([&] {
        ec = s.connect(conv.endpoint(), o);
        returned = true;
    });
    pollfd p{pmsp, POLLIN, 0};
    const bool asked = ::poll(&p, 1, 10'000) == 1;
    stop.request_stop();
    // At once, not at the next retransmission (10 s) or the deadline (60 s).
    const bool woke = pmtest::wait_until([&] { return returned.load(); }, 5000ms);
    caller.join();
    ::close(pmsp);
    ASSERT_TRUE(asked) << "no PMReq arrived";
    EXPECT_TRUE(woke) << "connect() did not return on the stop";
    EXPECT_EQ(ec, std::errc::operation_canceled) << ec.message() << ": " << s.info().reason;
    EXPECT_NE(s.info().reason.find("cancelled"), std::string::npos) << s.info().reason;
    EXPECT_TRUE(nothing_arrives(conv)) << "the conventional listener got a connection";
}

TEST_F(SdpPortMapper, AStopEndsAConnectToAnSdpAddressThatDoesNotAnswer) {
    // The SDP Address is a listener whose accept queue is full: Linux drops
    // the SYN and the connect waits (connect_timeout 60 s) in SYN_SENT. The
    // stop aborts it (the socket is shut down), no fallback is taken.
    sdptest::TcpListener conv;
    sdptest::TcpListener full;
    ASSERT_EQ(::listen(full.fd(), 0), 0);
    std::vector<int> fillers;
    std::vector<std::uint16_t> filler_ports;
    for (int i = 0; i < 3; ++i) {
        const int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        to.sin_port = htons(full.port());
        (void)::connect(f, reinterpret_cast<sockaddr*>(&to), sizeof to);
        fillers.push_back(f);
        sockaddr_in me{};
        socklen_t me_len = sizeof me;
        ::getsockname(f, reinterpret_cast<sockaddr*>(&me), &me_len);
        filler_ports.push_back(ntohs(me.sin_port));
    }
    const auto closer = [&] {
        for (int f : fillers) {
            ::close(f);
        }
    };
    if (!pmtest::wait_until([&] { return syn_sent_to(full.port()) > 0; }, 3000ms)) {
        closer();
        GTEST_SKIP() << "this kernel does not leave a SYN to a full accept queue unanswered";
    }
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nhealth: off\nservices:\n"
              "  - name: app\n    conventional: \"127.0.0.1:" +
              std::to_string(conv.port()) +
              "\"\n    sdp: [\"127.0.0.1:" + std::to_string(full.port()) + "\"]\n"));
    auto o = opts();
    o.connect_timeout = 60s;
    std::stop_source stop;
    o.stop = stop.get_token();
    sdp::Stream s;
    std::error_code ec;
    std::thread caller([&] { ec = s.connect(conv.endpoint(), o); });
    const bool connecting =
        pmtest::wait_until([&] { return syn_sent_to(full.port(), filler_ports) > 0; }, 10'000ms);
    stop.request_stop();
    // The SYN_SENT socket is aborted at once, not after connect_timeout.
    const bool aborted =
        pmtest::wait_until([&] { return syn_sent_to(full.port(), filler_ports) == 0; }, 5000ms);
    caller.join();
    closer();
    ASSERT_TRUE(connecting) << "the stream never tried the SDP Address";
    EXPECT_TRUE(aborted) << "the connect in progress was not aborted";
    EXPECT_EQ(ec, std::errc::operation_canceled) << ec.message() << ": " << s.info().reason;
    EXPECT_TRUE(nothing_arrives(conv)) << "the conventional listener got a connection";
}

TEST_F(SdpPortMapper, NoFallbackWhenDisabled) {
    sdptest::TcpListener conv;
    auto silent = pmtest::free_udp_port(false);
    ASSERT_TRUE(silent.has_value());
    port_ = *silent;
    auto o = opts();
    o.resolve_deadline = 200ms;
    o.resolve_initial_timeout = 100ms;
    o.fallback = false;
    sdp::Stream s;
    EXPECT_TRUE(s.connect(conv.endpoint(), o));
    EXPECT_FALSE(s.is_open());
}

// The acceptor registers its mapping through the control socket; a client
// then resolves it and lands on SDP; close() unregisters it.
TEST_F(SdpPortMapper, AcceptorRegistersThroughTheControlSocket) {
    const auto sock = control_socket();
    ASSERT_NO_FATAL_FAILURE(start_with_control());
    if (!control_ready_) {
        GTEST_SKIP() << "sdp-pmd has no control socket yet: " << log();
    }
    sdptest::TcpListener conv;
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream.io_timeout = 20s;
    ao.control_socket = sock.string();
    ao.conventional = conv.endpoint().to_string();
    ao.service_name = "sdp-cat-test";
    auto ec = acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao);
    ASSERT_FALSE(ec) << ec.message() << ": " << acc.registration_error();
    EXPECT_TRUE(acc.registered());
    std::thread srv([&] {
        sdp::Stream s;
        if (acc.accept(s, 10s)) {
            return;
        }
        std::error_code e;
        serve_one([&](std::span<std::uint8_t> b) { return s.read(b, e) == b.size(); },
                  [&](std::span<const std::uint8_t> b) { s.write(b, e); });
        s.close();
    });
    sdp::Stream s;
    ec = s.connect(conv.endpoint(), opts());
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(s.used(), sdp::Transport::sdp) << s.info().reason;
    ping_pong(s);
    s.close();
    srv.join();
    EXPECT_FALSE(acc.close()) << acc.registration_error();
    // Unregistered: the same Conventional Address is now denied -> TCP.
    sdp::Stream t;
    ASSERT_NO_FATAL_FAILURE(tcp_fallback_case(t, conv, conv.endpoint(), opts()));
}

// The pid sdp-pmd lists for the dynamic service `name`: 0 when the service
// is not listed, -1 when it is listed without a pid.
std::int64_t listed_pid(const std::filesystem::path& sock, const std::string& name) {
    auto answer = pmctl::call(sock.string(), "services", nullptr, 2000ms);
    if (!answer.ok() || answer.reply().result != 0) {
        return 0;
    }
    for (const auto& s : answer.reply().arguments["services"]) {
        if (s["name"] == name) {
            return s["pid"].is_number_integer() ? s["pid"].get<std::int64_t>() : -1;
        }
    }
    return 0;
}

// An sdp-cat -l --register killed with SIGKILL cannot unregister: the
// daemon sees its process exit (pidfd) and drops the mapping, so clients
// are denied and go to TCP instead of trying a dead SDP Address.
TEST_F(SdpPortMapper, KilledRegisteredListenerIsUnmapped) {
    const auto sock = control_socket();
    ASSERT_NO_FATAL_FAILURE(start_with_control());
    if (!control_ready_) {
        GTEST_SKIP() << "sdp-pmd has no control socket yet: " << log();
    }
    sdptest::TcpListener conv;
    sdptest::TcpListener reserve;  // a free port for sdp-cat (reused at once)
    const std::uint16_t port = reserve.port();
    reserve.close();
    const std::string name = "sdp-" + std::to_string(port);
    pmtest::Process cat({SDPPM_SDP_CAT_BIN, "-v", "-l", "--register", conv.endpoint().to_string(),
                         "--control", sock.string(), "--bind", "127.0.0.1", std::to_string(port)},
                        dir_.path() / "cat.out", dir_.path() / "cat.err");
    ASSERT_TRUE(cat.started());
    ASSERT_TRUE(pmtest::wait_until([&] { return listed_pid(sock, name) != 0; }, 10000ms))
        << pmtest::read_file(dir_.path() / "cat.err") << log();
    EXPECT_EQ(listed_pid(sock, name), cat.pid());

    ASSERT_TRUE(cat.signal(SIGKILL));
    const auto killed = std::chrono::steady_clock::now();
    ASSERT_TRUE(pmtest::wait_until([&] { return listed_pid(sock, name) == 0; }, 5000ms)) << log();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - killed);
    RecordProperty("unmapped_after_ms", static_cast<int>(took.count()));
    EXPECT_NE(log().find("owner process " + std::to_string(cat.pid()) + " exited"),
              std::string::npos)
        << log();
    sdp::Stream s;
    ASSERT_NO_FATAL_FAILURE(tcp_fallback_case(s, conv, conv.endpoint(), opts()));
}

// A daemon that refuses "pid" (older, or unable to watch processes): the
// acceptor registers without the tie and says so, instead of failing.
TEST_F(SdpPortMapper, AcceptorRegistersWithoutTheTieWhenTheDaemonRefusesPid) {
    const auto sock = dir_.path() / "old.sock";
    int srv = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(srv, 4), 0);
    std::vector<std::string> requests;
    std::thread daemon([&] {
        for (int i = 0; i < 2; ++i) {  // two requests, one per connection
            pollfd p{srv, POLLIN, 0};
            if (::poll(&p, 1, 10000) <= 0) {
                return;
            }
            int c = ::accept(srv, nullptr, nullptr);
            std::string line;
            char ch = 0;
            while (line.size() < 65536 && ::recv(c, &ch, 1, 0) == 1 && ch != '\n') {
                line += ch;
            }
            requests.push_back(line);
            const std::string reply =
                line.find("\"pid\"") != std::string::npos
                    ? "{\"result\": 1, \"text\": \"unknown argument \\\"pid\\\"\"}\n"
                    : "{\"result\": 0, \"text\": \"registered\"}\n";
            ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
            ::close(c);
        }
    });
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.control_socket = sock.string();
    ao.conventional = "127.0.0.1:1";
    auto ec = acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao);
    daemon.join();
    ::close(srv);
    ASSERT_FALSE(ec) << ec.message() << ": " << acc.registration_error();
    EXPECT_TRUE(acc.registered());
    ASSERT_EQ(requests.size(), 2u);
    EXPECT_NE(requests[0].find("\"pid\":\"peer\""), std::string::npos) << requests[0];
    EXPECT_EQ(requests[1].find("\"pid\""), std::string::npos) << requests[1];
    EXPECT_NE(acc.registration_error().find("without following this process"), std::string::npos)
        << acc.registration_error();
}

TEST_F(SdpPortMapper, RegistrationWithoutDaemonIsAClearError) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.control_socket = (dir_.path() / "nobody.sock").string();
    ao.conventional = "127.0.0.1:1";
    auto ec = acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao);
    EXPECT_TRUE(ec);
    EXPECT_FALSE(acc.is_open());
    EXPECT_NE(acc.registration_error().find("control socket"), std::string::npos)
        << acc.registration_error();
}

}  // namespace
