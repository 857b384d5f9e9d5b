// SPDX-License-Identifier: Apache-2.0
// Concurrent MPA/SDP startups of the blocking sdp::Acceptor: silent TCP
// clients do not delay a real one, the number of pending startups is
// bounded, and failed startups are counted, never returned by accept().
// Bounded by accept timeouts and a generous handshake_timeout; the tests
// assert order and counters, not time.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

namespace {

using namespace std::chrono_literals;

sdp::StreamOptions opts() {
    sdp::StreamOptions o;
    o.io_timeout = 20s;
    o.handshake_timeout = 10s;
    o.linger = 5s;
    return o;
}

// True when the peer closed `fd` (EOF or reset) within the bounded wait.
bool closed_by_peer(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) {
        return false;
    }
    char c;
    return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

TEST(SdpAcceptor, SilentClientsDoNotDelayARealOne) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ao.stream.handshake_timeout = 60s;  // the silent ones stay pending throughout
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    std::vector<int> silent;
    for (int i = 0; i < 5; ++i) {
        int fd = sdptest::tcp_connect(acc.local_endpoint());
        ASSERT_GE(fd, 0);
        silent.push_back(fd);
    }
    sdp::Stream client;
    std::error_code cec;
    std::thread t([&] { cec = client.connect_sdp(acc.local_endpoint(), opts()); });
    sdp::Stream server;
    // The silent connections are ahead of the real one in the listen queue.
    auto ec = acc.accept(server, 30s);
    t.join();
    ASSERT_FALSE(ec) << ec.message() << " " << acc.last_error();
    ASSERT_FALSE(cec) << cec.message();
    auto st = acc.stats();
    EXPECT_EQ(st.tcp_accepted, 6u);
    EXPECT_EQ(st.established, 1u);
    EXPECT_EQ(st.pending, 5u);  // still waiting for their MPA Requests
    EXPECT_EQ(st.handshake_failures, 0u);
    std::error_code e;
    std::vector<std::uint8_t> b{7};
    client.write(b, e);
    EXPECT_FALSE(e);
    std::vector<std::uint8_t> r(1);
    EXPECT_EQ(server.read_some(r, e), 1u);
    EXPECT_EQ(r[0], 7);
    // The silent clients hang up: counted as failures, never returned.
    for (int fd : silent) {
        ::close(fd);
    }
    EXPECT_TRUE(sdptest::wait_for([&] { return acc.stats().pending == 0; }));
    EXPECT_EQ(acc.stats().handshake_failures, 5u);
    EXPECT_FALSE(acc.last_error().empty());
    EXPECT_EQ(acc.accept(server, 200ms), std::errc::timed_out);
    // close() with startups still running ends them at once.
    int late = sdptest::tcp_connect(acc.local_endpoint());
    ASSERT_GE(late, 0);
    EXPECT_EQ(acc.accept(server, 200ms), std::errc::timed_out);
    EXPECT_EQ(acc.stats().pending, 1u);
    acc.close();
    EXPECT_TRUE(closed_by_peer(late));
    ::close(late);
}

TEST(SdpAcceptor, PendingHandshakesAreBounded) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ao.stream.handshake_timeout = 60s;
    ao.max_pending_handshakes = 3;
    std::vector<std::string> failures;
    ao.on_handshake_error = [&](const std::string& m) { failures.push_back(m); };
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    std::vector<int> silent;
    for (int i = 0; i < 5; ++i) {
        int fd = sdptest::tcp_connect(acc.local_endpoint());
        ASSERT_GE(fd, 0);
        silent.push_back(fd);
    }
    sdp::Stream server;
    for (int i = 0; i < 100 && acc.stats().tcp_accepted < 5; ++i) {
        EXPECT_EQ(acc.accept(server, 100ms), std::errc::timed_out);
    }
    auto st = acc.stats();
    EXPECT_EQ(st.tcp_accepted, 5u);
    EXPECT_EQ(st.pending, 3u);
    EXPECT_EQ(st.over_limit, 2u);
    // The two over the limit were closed at once.
    EXPECT_TRUE(closed_by_peer(silent[3]));
    EXPECT_TRUE(closed_by_peer(silent[4]));
    for (int fd : silent) {
        ::close(fd);
    }
    EXPECT_TRUE(sdptest::wait_for([&] { return acc.stats().pending == 0; }));
    // Room again: a real client gets through; the failures were reported.
    sdp::Stream client;
    std::error_code cec;
    std::thread t([&] { cec = client.connect_sdp(acc.local_endpoint(), opts()); });
    auto ec = acc.accept(server, 30s);
    t.join();
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_FALSE(cec) << cec.message();
    EXPECT_EQ(acc.stats().handshake_failures, 3u);
    EXPECT_EQ(failures.size(), 3u);
}

}  // namespace

// A moved-from acceptor answers as a closed one and can be opened again;
// the moved-to one keeps the listener.
TEST(SdpAcceptor, MovedFromIsClosedAndReopens) {
    sdp::Acceptor a;
    ASSERT_FALSE(a.open(*pm::Endpoint::parse("127.0.0.1:0")));
    const pm::Endpoint first = a.local_endpoint();
    sdp::Acceptor b(std::move(a));
    EXPECT_TRUE(b.is_open());
    EXPECT_EQ(b.local_endpoint(), first);
    EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move): the point
    EXPECT_EQ(a.native_handle(), -1);
    EXPECT_FALSE(a.registered());
    EXPECT_TRUE(a.registration_error().empty());
    EXPECT_EQ(a.stats().tcp_accepted, 0u);
    EXPECT_FALSE(a.close());
    sdp::Stream s;
    EXPECT_EQ(a.accept(s, 10ms), std::make_error_code(std::errc::bad_file_descriptor));
    ASSERT_FALSE(a.open(*pm::Endpoint::parse("127.0.0.1:0")));
    EXPECT_TRUE(a.is_open());
    EXPECT_NE(a.local_endpoint().port, first.port);
    a = std::move(b);
    EXPECT_TRUE(a.is_open());
    EXPECT_EQ(a.local_endpoint(), first);
    EXPECT_FALSE(b.is_open());  // NOLINT(bugprone-use-after-move)
}
