// SPDX-License-Identifier: Apache-2.0
// Provider selection of sdp::Stream / sdp::Acceptor (docs/rdma.md): soft,
// rdma (rdma-core on an iWARP device) and automatic. On a host without an
// iWARP device (this CI) the rdma cases check the documented error and the
// TCP fallback and `automatic` must pick the soft provider; with a device
// (an RNIC or Linux siw) those cases are skipped and the end-to-end rdma
// streams run instead, directly and through the real sdp-pmd.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "pmd_fixture.hpp"
#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool has_device(std::string* why = nullptr) {
    return sdp::rdma_available(why);
}

// Where the rdma end-to-end tests listen: SDPPM_RDMA_TEST_ADDR (the address
// of the netdev siw is linked to), else 127.0.0.1 (needs
// `rdma link add siw_lo type siw netdev lo`).
std::string rdma_test_addr() {
    const char* env = std::getenv("SDPPM_RDMA_TEST_ADDR");
    return env != nullptr ? env : "127.0.0.1";
}

std::span<const std::uint8_t> bytes_of(const std::string& s) {
    return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Reads "ping" and answers "pong" on a plain TCP connection.
void tcp_pong(sdptest::TcpListener& conv) {
    int fd = conv.accept();
    if (fd < 0) {
        return;
    }
    char b[4];
    if (::recv(fd, b, sizeof b, MSG_WAITALL) == 4 && std::string(b, 4) == "ping") {
        (void)!::send(fd, "pong", 4, MSG_NOSIGNAL);
    }
    ::close(fd);
}

void expect_ping_pong(sdp::Stream& s) {
    std::error_code ec;
    s.write(bytes_of("ping"), ec);
    ASSERT_FALSE(ec) << ec.message();
    std::vector<std::uint8_t> b(4);
    ASSERT_EQ(s.read(b, ec), 4u) << ec.message();
    EXPECT_EQ(std::string(b.begin(), b.end()), "pong");
}

// `total` pattern bytes client -> server; the server checks them, then
// half-closes after sending its byte count back as text; both see EOF.
void transfer_and_check(sdp::Stream& client, sdp::Stream& server, std::size_t total) {
    std::string server_error;
    std::size_t server_got = 0;
    std::thread srv([&] {
        std::vector<std::uint8_t> buf(64 * 1024);
        std::error_code ec;
        while (true) {
            const std::size_t n = server.read_some(buf, ec);
            if (ec) {
                server_error = "read: " + ec.message();
                return;
            }
            if (n == 0) {
                break;
            }
            if (!sdptest::check_pattern(std::span(buf.data(), n), server_got, 7)) {
                server_error = "data mismatch at offset " + std::to_string(server_got);
                return;
            }
            server_got += n;
        }
        const std::string reply = std::to_string(server_got);
        server.write(bytes_of(reply), ec);
        if (ec) {
            server_error = "write: " + ec.message();
            return;
        }
        if (auto e = server.shutdown_write()) {
            server_error = "shutdown: " + e.message();
        }
    });
    std::vector<std::uint8_t> chunk(48 * 1024 + 13);  // not a multiple of the buffer size
    std::size_t sent = 0;
    std::error_code ec;
    while (sent < total && !ec) {
        const std::size_t n = std::min(chunk.size(), total - sent);
        sdptest::pattern(std::span(chunk.data(), n), sent, 7);
        sent += client.write(std::span(chunk.data(), n), ec);
    }
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_FALSE(client.shutdown_write());
    std::string reply;
    std::vector<std::uint8_t> b(64);
    while (true) {
        const std::size_t n = client.read_some(b, ec);
        if (ec || n == 0) {
            break;
        }
        reply.append(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    }
    srv.join();
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(server_error.empty()) << server_error;
    EXPECT_EQ(server_got, total);
    EXPECT_EQ(reply, std::to_string(total));
}

sdp::StreamOptions base_opts() {
    sdp::StreamOptions o;
    o.io_timeout = 20s;
    o.connect_timeout = 3s;
    o.handshake_timeout = 5s;
    return o;
}

TEST(SdpProvider, NamesRoundTripAndBadNamesAreRejected) {
    for (auto p : {sdp::Provider::soft, sdp::Provider::rdma, sdp::Provider::automatic}) {
        auto back = sdp::parse_provider(sdp::to_string(p));
        ASSERT_TRUE(back.has_value()) << sdp::to_string(p);
        EXPECT_EQ(*back, p);
    }
    EXPECT_EQ(sdp::parse_provider("automatic"), sdp::Provider::automatic);
    for (const char* bad : {"", "RDMA", "Soft", "tcp", "iwarp", "soft ", "autom"}) {
        EXPECT_FALSE(sdp::parse_provider(bad).has_value()) << "'" << bad << "'";
    }
    EXPECT_EQ(sdp::StreamOptions{}.iwarp_provider, sdp::Provider::soft);
}

TEST(SdpProvider, ProbeExplainsItself) {
    std::string why;
    if (has_device(&why)) {
        EXPECT_TRUE(why.empty()) << why;
    } else {
        EXPECT_FALSE(why.empty());
    }
    EXPECT_EQ(sdp::rdma_available(nullptr), has_device());
}

TEST(SdpProvider, SoftIsTheDefaultAndIsReported) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    EXPECT_EQ(acc.listener_provider(), sdp::Provider::soft);
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    sdp::Stream client;
    auto ec = client.connect_sdp(acc.local_endpoint(), base_opts());
    t.join();
    ASSERT_FALSE(ec) << ec.message() << ": " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message();
    EXPECT_EQ(client.info().provider, "soft");
    EXPECT_EQ(server.info().provider, "soft");
    EXPECT_EQ(client.used(), sdp::Transport::sdp);
    transfer_and_check(client, server, 300 * 1024);
    EXPECT_FALSE(client.close());
    server.close();
}

TEST(SdpProvider, RdmaWithoutDeviceFailsConnectSdpClearly) {
    std::string why;
    if (has_device(&why)) {
        GTEST_SKIP() << "an iWARP device is present: the end-to-end rdma tests run instead";
    }
    sdptest::TcpListener l;  // a listener that must not be contacted
    auto o = base_opts();
    o.iwarp_provider = sdp::Provider::rdma;
    sdp::Stream s;
    const auto t0 = Clock::now();
    auto ec = s.connect_sdp(l.endpoint(), o);
    EXPECT_LT(Clock::now() - t0, 2s);
    EXPECT_EQ(ec, std::errc::no_such_device) << ec.message();
    EXPECT_FALSE(s.is_open());
    EXPECT_EQ(s.used(), sdp::Transport::none);
    EXPECT_EQ(s.info().provider, "rdma");
    EXPECT_NE(s.info().reason.find("no usable iWARP RDMA device"), std::string::npos)
        << s.info().reason;
    // The probe's own words are in the reason.
    EXPECT_NE(s.info().reason.find(why), std::string::npos) << s.info().reason << " / " << why;
    EXPECT_EQ(l.accept(100), -1) << "the rdma provider must not fall back to the soft one";
}

TEST(SdpProvider, AutomaticWithoutDeviceUsesSoft) {
    if (has_device()) {
        GTEST_SKIP() << "an iWARP device is present: automatic picks rdma (see RdmaEndToEnd)";
    }
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ao.stream.iwarp_provider = sdp::Provider::automatic;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao)) << acc.open_error();
    EXPECT_EQ(acc.listener_provider(), sdp::Provider::soft);
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    auto o = base_opts();
    o.iwarp_provider = sdp::Provider::automatic;
    sdp::Stream client;
    auto ec = client.connect_sdp(acc.local_endpoint(), o);
    t.join();
    ASSERT_FALSE(ec) << ec.message() << ": " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message();
    EXPECT_EQ(client.used(), sdp::Transport::sdp);
    EXPECT_EQ(client.info().provider, "soft");
    EXPECT_EQ(server.info().provider, "soft");
    transfer_and_check(client, server, 1024 * 1024);
    EXPECT_FALSE(client.close());
    server.close();
}

TEST(SdpProvider, AcceptorWithRdmaWithoutDeviceFailsClearly) {
    if (has_device()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream.iwarp_provider = sdp::Provider::rdma;
    ao.control_socket = "/nonexistent/control.sock";  // never reached
    ao.conventional = "127.0.0.1:1";
    auto ec = acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao);
    EXPECT_EQ(ec, std::errc::no_such_device) << ec.message();
    EXPECT_FALSE(acc.is_open());
    EXPECT_FALSE(acc.registered());
    EXPECT_TRUE(acc.registration_error().empty()) << acc.registration_error();
    EXPECT_NE(acc.open_error().find("no usable iWARP RDMA device"), std::string::npos)
        << acc.open_error();
    sdp::Stream s;
    EXPECT_EQ(acc.accept(s, 10ms), std::errc::bad_file_descriptor);
}

// Through the real sdp-pmd.
class SdpProviderPm : public sdptest::PmdFixture {
  protected:
    sdp::StreamOptions opts() const {
        auto o = base_opts();
        o.pmsp = pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), port_};
        o.resolve_deadline = 2s;
        o.use_pm_cache = false;
        return o;
    }
    // A soft acceptor behind a mapping Conventional -> its SDP Address.
    void start_with_mapping(const sdptest::TcpListener& conv, const sdp::Acceptor& acc) {
        start(
            "listen: [\"127.0.0.1:{PORT}\"]\nservices:\n"
            "  - name: app\n    conventional: \"127.0.0.1:" +
            std::to_string(conv.port()) +
            "\"\n    sdp: [\"127.0.0.1:" + std::to_string(acc.local_endpoint().port) + "\"]\n");
    }
};

TEST_F(SdpProviderPm, RdmaWithoutDeviceFallsBackToTcpWithTheReason) {
    if (has_device()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    sdptest::TcpListener conv;
    sdp::Acceptor acc;  // the mapping is there: the soft provider would use it
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    ASSERT_NO_FATAL_FAILURE(start_with_mapping(conv, acc));
    std::thread srv([&] { tcp_pong(conv); });
    auto o = opts();
    o.iwarp_provider = sdp::Provider::rdma;
    sdp::Stream s;
    auto ec = s.connect(conv.endpoint(), o);
    if (ec) {
        int fd = sdptest::tcp_connect(conv.endpoint());  // unblock the server thread
        if (fd >= 0) {
            ::close(fd);
        }
    }
    ASSERT_FALSE(ec) << ec.message() << ": " << s.info().reason;
    EXPECT_EQ(s.used(), sdp::Transport::tcp);
    EXPECT_EQ(s.info().provider, "tcp");
    EXPECT_EQ(s.info().peer, conv.endpoint());
    EXPECT_NE(s.info().reason.find("no usable iWARP RDMA device"), std::string::npos)
        << s.info().reason;
    EXPECT_NE(s.info().reason.find("fell back to TCP"), std::string::npos) << s.info().reason;
    EXPECT_EQ(s.info().resolution, "") << "no Port Mapper question without a provider";
    expect_ping_pong(s);
    s.close();
    srv.join();
    EXPECT_EQ(acc.stats().tcp_accepted, 0u) << "the soft SDP acceptor must not be used";
}

TEST_F(SdpProviderPm, RdmaWithoutDeviceAndNoFallbackIsNoSuchDevice) {
    if (has_device()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    sdptest::TcpListener conv;
    sdp::Acceptor acc;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), {}));
    ASSERT_NO_FATAL_FAILURE(start_with_mapping(conv, acc));
    auto o = opts();
    o.iwarp_provider = sdp::Provider::rdma;
    o.fallback = false;
    sdp::Stream s;
    auto ec = s.connect(conv.endpoint(), o);
    EXPECT_EQ(ec, std::errc::no_such_device) << ec.message();
    EXPECT_FALSE(s.is_open());
    EXPECT_EQ(s.info().provider, "rdma");
    EXPECT_NE(s.info().reason.find("no usable iWARP RDMA device"), std::string::npos)
        << s.info().reason;
    EXPECT_EQ(conv.accept(100), -1);
}

TEST_F(SdpProviderPm, AutomaticWithoutDeviceResolvesAndUsesSoft) {
    if (has_device()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    sdptest::TcpListener conv;
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ao.stream.iwarp_provider = sdp::Provider::automatic;
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    ASSERT_EQ(acc.listener_provider(), sdp::Provider::soft);
    ASSERT_NO_FATAL_FAILURE(start_with_mapping(conv, acc));
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    auto o = opts();
    o.iwarp_provider = sdp::Provider::automatic;
    sdp::Stream client;
    auto ec = client.connect(conv.endpoint(), o);
    t.join();
    ASSERT_FALSE(ec) << ec.message() << ": " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message();
    EXPECT_EQ(client.used(), sdp::Transport::sdp) << client.info().reason;
    EXPECT_EQ(client.info().provider, "soft");
    EXPECT_EQ(client.info().resolution, "accept");
    EXPECT_EQ(client.info().peer, acc.local_endpoint());
    transfer_and_check(client, server, 512 * 1024);
    EXPECT_FALSE(client.close());
    server.close();
}

// --- with an iWARP device (RNIC or siw) -----------------------------------------

// Opens an rdma acceptor on the test address, or skips with the reason.
#define OPEN_RDMA_ACCEPTOR_OR_SKIP(acc, ao)                                                       \
    do {                                                                                          \
        std::string why_;                                                                         \
        if (!has_device(&why_)) {                                                                 \
            GTEST_SKIP() << "no iWARP RDMA device (" << why_                                      \
                         << "); set up siw as in docs/rdma.md to run this test";                  \
        }                                                                                         \
        auto ec_ = (acc).open(*pm::Endpoint::parse(rdma_test_addr() + ":0"), (ao));               \
        if (ec_ && std::getenv("SDPPM_RDMA_TEST_ADDR") == nullptr) {                              \
            GTEST_SKIP() << "rdma listen on " << rdma_test_addr() << " failed (" << ec_.message() \
                         << ": " << (acc).open_error()                                            \
                         << "); loopback needs 'rdma link add siw_lo type siw netdev lo', or "    \
                            "set SDPPM_RDMA_TEST_ADDR to the siw netdev's address";               \
        }                                                                                         \
        ASSERT_FALSE(ec_) << ec_.message() << ": " << (acc).open_error();                         \
    } while (0)

TEST(SdpProviderRdma, EndToEndStreamOverTheDevice) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ao.stream.iwarp_provider = sdp::Provider::rdma;
    OPEN_RDMA_ACCEPTOR_OR_SKIP(acc, ao);
    EXPECT_EQ(acc.listener_provider(), sdp::Provider::rdma);
    ASSERT_NE(acc.local_endpoint().port, 0);
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    auto o = base_opts();
    o.iwarp_provider = sdp::Provider::rdma;
    sdp::Stream client;
    auto ec = client.connect_sdp(acc.local_endpoint(), o);
    t.join();
    ASSERT_FALSE(ec) << ec.message() << ": " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message() << ": " << acc.last_error();
    EXPECT_EQ(client.used(), sdp::Transport::sdp);
    EXPECT_EQ(client.info().provider, "rdma");
    EXPECT_EQ(server.info().provider, "rdma");
    EXPECT_NE(client.describe().find("rdma-core provider"), std::string::npos) << client.describe();
    transfer_and_check(client, server, 4 * 1024 * 1024);
    EXPECT_FALSE(client.close());
    EXPECT_FALSE(server.close());
}

TEST(SdpProviderRdma, AutomaticPicksRdmaWhenTheProbeFindsADevice) {
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ao.stream.iwarp_provider = sdp::Provider::automatic;
    OPEN_RDMA_ACCEPTOR_OR_SKIP(acc, ao);
    EXPECT_EQ(acc.listener_provider(), sdp::Provider::rdma);
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    auto o = base_opts();
    o.iwarp_provider = sdp::Provider::automatic;
    sdp::Stream client;
    auto ec = client.connect_sdp(acc.local_endpoint(), o);
    t.join();
    ASSERT_FALSE(ec) << ec.message() << ": " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message() << ": " << acc.last_error();
    EXPECT_EQ(client.info().provider, "rdma");
    transfer_and_check(client, server, 256 * 1024);
    EXPECT_FALSE(client.close());
    server.close();
}

TEST_F(SdpProviderPm, RdmaThroughThePortMapper) {
    sdptest::TcpListener conv;
    sdp::Acceptor acc;
    sdp::AcceptorOptions ao;
    ao.stream = base_opts();
    ao.stream.iwarp_provider = sdp::Provider::rdma;
    OPEN_RDMA_ACCEPTOR_OR_SKIP(acc, ao);
    const std::string addr = rdma_test_addr();
    // health: off: a listener held by an RNIC may not be a kernel TCP socket
    // that sock_diag can see (docs/sdp-pmd.md); this test is about the data.
    ASSERT_NO_FATAL_FAILURE(
        start("listen: [\"127.0.0.1:{PORT}\"]\nhealth: off\nservices:\n"
              "  - name: app\n    conventional: \"" +
              addr + ":" + std::to_string(conv.port()) + "\"\n    sdp: [\"" + addr + ":" +
              std::to_string(acc.local_endpoint().port) + "\"]\n"));
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = acc.accept(server, 10s); });
    auto o = opts();
    o.iwarp_provider = sdp::Provider::rdma;
    o.fallback = false;
    sdp::Stream client;
    auto ec = client.connect(*pm::Endpoint::parse(addr + ":" + std::to_string(conv.port())), o);
    t.join();
    ASSERT_FALSE(ec) << ec.message() << ": " << client.info().reason;
    ASSERT_FALSE(aec) << aec.message() << ": " << acc.last_error();
    EXPECT_EQ(client.used(), sdp::Transport::sdp);
    EXPECT_EQ(client.info().provider, "rdma");
    EXPECT_EQ(client.info().resolution, "accept");
    EXPECT_EQ(client.info().peer, acc.local_endpoint());
    // 7.5.1: the connection comes from CpIPAddr:CpPort (an rdma_cm port).
    EXPECT_NE(server.info().peer.port, 0);
    transfer_and_check(client, server, 256 * 1024);
    EXPECT_FALSE(client.close());
    server.close();
}

}  // namespace
