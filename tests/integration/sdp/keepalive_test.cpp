// SPDX-License-Identifier: Apache-2.0
// TCP keepalive (14.3) of sdp::Stream: the socket options as set at
// connect/accept and by set_keepalive(), and a peer that vanishes silently
// (its network namespace starts dropping everything) detected within
// idle + interval * count + slack, over SDP and over the TCP fallback.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>

#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

using namespace std::chrono_literals;

namespace {

sdp::StreamOptions opts() {
    sdp::StreamOptions o;
    o.io_timeout = 30s;  // bounds every blocking call
    o.handshake_timeout = 5s;
    o.linger = 1s;
    return o;
}

int sockopt(int fd, int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0) << std::strerror(errno);
    return v;
}

void expect_keepalive(int fd, int idle, int intvl, int cnt) {
    ASSERT_GE(fd, 0);
    EXPECT_EQ(sockopt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(sockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE), idle);
    EXPECT_EQ(sockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL), intvl);
    EXPECT_EQ(sockopt(fd, IPPROTO_TCP, TCP_KEEPCNT), cnt);
}

sdp::Keepalive ka(int idle, int intvl, int cnt) {
    sdp::Keepalive k;
    k.enabled = true;
    k.idle = std::chrono::seconds(idle);
    k.interval = std::chrono::seconds(intvl);
    k.count = cnt;
    return k;
}

}  // namespace

TEST(SdpKeepalive, OptionsOnTheSdpSocketsAtConnectAcceptAndLater) {
    sdp::StreamOptions o = opts();
    o.keepalive = ka(11, 3, 4);
    sdp::AcceptorOptions ao;
    ao.stream = o;
    ao.stream.keepalive = ka(21, 5, 6);
    sdp::Acceptor acc;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    sdp::Stream client, server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    const auto cec = client.connect_sdp(acc.local_endpoint(), o);
    t.join();
    ASSERT_FALSE(cec) << cec.message();
    ASSERT_FALSE(aec) << aec.message();
    expect_keepalive(client.native_handle(), 11, 3, 4);
    expect_keepalive(server.native_handle(), 21, 5, 6);

    ASSERT_FALSE(client.set_keepalive(ka(100, 10, 2)));
    expect_keepalive(client.native_handle(), 100, 10, 2);
    EXPECT_EQ(client.set_keepalive(ka(0, 1, 1)), std::errc::invalid_argument);
    EXPECT_EQ(client.set_keepalive(ka(1, 1, 128)), std::errc::invalid_argument);
    ASSERT_FALSE(client.set_keepalive(sdp::Keepalive{}));  // off
    EXPECT_EQ(sockopt(client.native_handle(), SOL_SOCKET, SO_KEEPALIVE), 0);
    sdp::Stream closed;
    EXPECT_EQ(closed.set_keepalive(ka(1, 1, 1)), std::errc::not_connected);
}

TEST(SdpKeepalive, OptionsOnTheTcpFallbackSocket) {
    sdptest::TcpListener l;
    ASSERT_TRUE(l.ok());
    sdp::StreamOptions o = opts();
    o.keepalive = ka(7, 2, 3);
    sdp::Stream s;
    ASSERT_FALSE(s.connect_tcp(l.endpoint(), o));
    const int fd = l.accept();
    ASSERT_GE(fd, 0);
    expect_keepalive(s.native_handle(), 7, 2, 3);
    ASSERT_FALSE(s.set_keepalive(ka(9, 4, 5)));
    expect_keepalive(s.native_handle(), 9, 4, 5);
    ::close(fd);
}

TEST(SdpKeepalive, DisabledByDefault) {
    sdptest::TcpListener l;
    ASSERT_TRUE(l.ok());
    sdp::Stream s;
    ASSERT_FALSE(s.connect_tcp(l.endpoint(), opts()));
    EXPECT_EQ(sockopt(s.native_handle(), SOL_SOCKET, SO_KEEPALIVE), 0);
}

namespace {

// Two network namespaces joined by a veth pair: the client's and the
// server's (10.213.<n>.1 and .2). Skips (never passes) without root or ip.
class Netns {
  public:
    Netns() : cli_ns_("sdpka-c"), srv_ns_("sdpka-s") {
        const std::string id = std::to_string(::getpid() % 100000);
        const std::string vc = "kac" + id, vs = "kas" + id;
        net_ = "10.213." + std::to_string(::getpid() % 250) + ".";
        if (!cli_ns_.ok() || !srv_ns_.ok()) {
            why_ = cli_ns_.ok() ? srv_ns_.why() : cli_ns_.why();
            return;
        }
        const std::string cmds[] = {
            "ip link add " + vc + " netns " + cli() + " type veth peer name " + vs + " netns " +
                srv(),
            "ip -n " + cli() + " addr add " + net_ + "1/24 dev " + vc,
            "ip -n " + srv() + " addr add " + net_ + "2/24 dev " + vs,
            "ip -n " + cli() + " link set " + vc + " up",
            "ip -n " + srv() + " link set " + vs + " up",
        };
        for (const auto& c : cmds) {
            if (std::system((c + " 2>/dev/null").c_str()) != 0) {
                why_ = "cannot set up network namespaces (" + c + ")";
                return;
            }
        }
        ok_ = true;
    }

    bool ok() const { return ok_; }
    const std::string& why() const { return why_; }
    pm::Endpoint server_at(std::uint16_t port) const {
        return pm::Endpoint{*pm::IpAddress::parse(net_ + "2"), port};
    }
    std::string server_addr() const { return net_ + "2"; }
    const std::string& cli() const { return cli_ns_.name(); }
    const std::string& srv() const { return srv_ns_.name(); }

    // The server vanishes silently: its namespace drops every packet (nft;
    // else its end of the veth goes down).
    bool cut_server() const {
        const std::string nft = "ip netns exec " + srv() +
                                " nft -f - 2>/dev/null <<'EOF'\n"
                                "table inet sdpka {\n"
                                " chain i { type filter hook input priority 0; policy drop; }\n"
                                " chain o { type filter hook output priority 0; policy drop; }\n"
                                "}\nEOF";
        if (std::system(nft.c_str()) == 0) {
            return true;
        }
        return std::system(("ip -n " + srv() + " link set kas" +
                            std::to_string(::getpid() % 100000) + " down 2>/dev/null")
                               .c_str()) == 0;
    }

  private:
    sdptest::NetNamespace cli_ns_, srv_ns_;
    std::string net_, why_;
    bool ok_ = false;
};

constexpr int kIdle = 1, kIntvl = 1, kCnt = 2;
// idle + interval * count, plus slack for scheduling and the first probe.
constexpr auto kBound = std::chrono::seconds(kIdle + kIntvl * kCnt) + 7s;

// The client waits in read_some() until keepalive gives the peer up.
// stop: the read_some() overload with stop_at_urgent (its own wait loop
// over TCP).
void expect_detected(sdp::Stream& client, const Netns& ns, std::errc write_after, bool stop) {
    ASSERT_TRUE(ns.cut_server()) << "cannot cut the server off";
    const auto t0 = std::chrono::steady_clock::now();
    std::uint8_t buf[16];
    std::error_code ec;
    const std::size_t n = stop ? client.read_some(buf, ec, true) : client.read_some(buf, ec);
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(n, 0u);
    EXPECT_EQ(ec, std::errc::timed_out) << ec.message();
    // Well before io_timeout (30 s), which would report timed_out too.
    EXPECT_LT(took, kBound) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                            << " ms";
    // The stream is dead: a write fails as well (over TCP the kernel reports
    // ETIMEDOUT once, then EPIPE; SDP keeps saying timed_out).
    const std::uint8_t x = 1;
    client.write({&x, 1}, ec);
    EXPECT_EQ(ec, write_after) << ec.message();
}

}  // namespace

TEST(SdpKeepaliveNetns, VanishedPeerDetectedOverSdp) {
    Netns ns;
    if (!ns.ok()) {
        GTEST_SKIP() << ns.why();
    }
    sdp::Acceptor acc;
    {
        sdptest::InNetns in(ns.srv());
        ASSERT_TRUE(in.ok());
        sdp::AcceptorOptions ao;
        ao.stream = opts();
        ASSERT_FALSE(acc.open(*pm::Endpoint::parse(ns.server_addr() + ":0"), ao));
    }
    sdp::Stream client, server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    std::error_code cec;
    {
        sdptest::InNetns in(ns.cli());
        ASSERT_TRUE(in.ok());
        sdp::StreamOptions o = opts();
        o.keepalive = ka(kIdle, kIntvl, kCnt);
        cec = client.connect_sdp(ns.server_at(acc.local_endpoint().port), o);
    }
    t.join();
    ASSERT_FALSE(cec) << cec.message() << " " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message() << " " << acc.last_error();
    ASSERT_EQ(client.used(), sdp::Transport::sdp);
    expect_detected(client, ns, std::errc::timed_out, false);
    server.abort();
}

TEST(SdpKeepaliveNetns, VanishedPeerDetectedOverTcp) {
    Netns ns;
    if (!ns.ok()) {
        GTEST_SKIP() << ns.why();
    }
    int lfd = -1;
    {
        sdptest::InNetns in(ns.srv());
        ASSERT_TRUE(in.ok());
        lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = 0;
        ASSERT_EQ(::inet_pton(AF_INET, ns.server_addr().c_str(), &a.sin_addr), 1);
        ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        ASSERT_EQ(::listen(lfd, 4), 0);
    }
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &len);
    sdp::Stream client;
    {
        sdptest::InNetns in(ns.cli());
        ASSERT_TRUE(in.ok());
        sdp::StreamOptions o = opts();
        o.keepalive = ka(kIdle, kIntvl, kCnt);
        ASSERT_FALSE(client.connect_tcp(ns.server_at(ntohs(bound.sin_port)), o));
    }
    pollfd p{lfd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1);
    const int sfd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(sfd, 0);
    expect_detected(client, ns, std::errc::broken_pipe, true);
    ::close(sfd);
    ::close(lfd);
}
