// SPDX-License-Identifier: Apache-2.0
// The probe and the failure paths of the rdma-core provider. These run on
// any host: without an RDMA device (this CI) the probe explains why and
// every connection attempt fails quickly with a documented error; with an
// iWARP device the negative cases are skipped and the end-to-end test runs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "sdp/rdma/cm.hpp"
#include "sdp/rdma/device.hpp"
#include "sdp/rdma/session.hpp"

namespace {

namespace r = sdp::rdma;
using Clock = std::chrono::steady_clock;

sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    const char* env = std::getenv("SDPPM_RDMA_TEST_ADDR");  // e.g. the siw netdev's address
    inet_pton(AF_INET, env != nullptr ? env : "127.0.0.1", &a.sin_addr);
    return a;
}

bool addr_from_env() {
    return std::getenv("SDPPM_RDMA_TEST_ADDR") != nullptr;
}

// Loopback needs an iWARP link on lo (rdma link add siw_lo type siw netdev
// lo); otherwise the test must be pointed at the device's address.
bool loopback_unusable(const std::error_code& ec) {
    return !addr_from_env() &&
           (ec == r::Errc::address_error || ec == r::Errc::route_error ||
            ec == r::Errc::unreachable || ec == r::Errc::no_device || ec == r::Errc::not_iwarp);
}

r::RdmaSessionConfig small_config() {
    r::RdmaSessionConfig c;
    c.engine.recv_buf_size = 4096;
    c.engine.send_buf_size = 4096;
    c.engine.recv_buf_count = 8;
    c.cm.resolve_timeout = std::chrono::milliseconds(1000);
    c.cm.establish_timeout = std::chrono::milliseconds(3000);
    return c;
}

TEST(RdmaProbe, ExplainsItself) {
    std::string why;
    const bool ok = r::available(&why);
    std::string list_why;
    const auto iw = r::list_iwarp_devices(&list_why);
    if (ok) {
        EXPECT_FALSE(iw.empty());
        EXPECT_TRUE(why.empty()) << why;
        for (const auto& d : iw) {
            EXPECT_TRUE(d.iwarp);
            EXPECT_FALSE(d.name.empty());
        }
    } else {
        EXPECT_FALSE(why.empty());
        if (iw.empty()) {
            EXPECT_FALSE(list_why.empty());
        }
        std::string all_why;
        if (r::list_devices(&all_why).empty()) {
            EXPECT_NE(all_why.find("no RDMA device"), std::string::npos) << all_why;
            EXPECT_NE(why.find("no RDMA device"), std::string::npos) << why;
        }
    }
    // Null pointers are allowed.
    EXPECT_EQ(r::available(nullptr), ok);
    (void)r::list_devices(nullptr);
}

TEST(RdmaConnect, BadAddressesNeedNoDevice) {
    std::error_code ec;
    std::string why;
    EXPECT_EQ(r::Connection::create_active(nullptr, nullptr, r::CmOptions{}, ec, &why), nullptr);
    EXPECT_EQ(ec, r::Errc::bad_argument);
    EXPECT_EQ(ec, std::errc::invalid_argument);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    ec.clear();
    EXPECT_EQ(r::Connection::create_active(reinterpret_cast<sockaddr*>(&un), nullptr,
                                           r::CmOptions{}, ec, &why),
              nullptr);
    EXPECT_EQ(ec, r::Errc::bad_argument);
    ec.clear();
    EXPECT_EQ(r::Listener::listen(reinterpret_cast<sockaddr*>(&un), 4, ec, &why), nullptr);
    EXPECT_EQ(ec, r::Errc::bad_argument);
}

// available() == false: connecting fails, quickly, with the documented
// error: no_device (std::errc::no_such_device) when there is no RDMA device
// at all; some other error (not_iwarp, address_error, ...) when there are
// only non-iWARP devices.
TEST(RdmaConnect, WithoutIwarpDeviceFailsFastWithAClearError) {
    std::string why;
    if (r::available(&why)) {
        GTEST_SKIP() << "an iWARP device is present: the negative case does not apply";
    }
    const bool no_device_at_all = r::list_devices().empty();
    auto cfg = small_config();
    sockaddr_in dst = loopback(7471);
    const auto t0 = Clock::now();
    std::error_code ec;
    std::string cwhy;
    auto s = r::RdmaSession::connect(reinterpret_cast<sockaddr*>(&dst), cfg, ec, &cwhy);
    const auto took = Clock::now() - t0;
    EXPECT_EQ(s, nullptr);
    ASSERT_TRUE(ec);
    EXPECT_FALSE(cwhy.empty());
    // Bounded: resolve + establish timeouts and a margin, never a hang.
    EXPECT_LT(took,
              cfg.cm.resolve_timeout * 2 + cfg.cm.establish_timeout + std::chrono::seconds(2));
    if (no_device_at_all) {
        EXPECT_EQ(ec, r::Errc::no_device) << ec.message() << ": " << cwhy;
        EXPECT_EQ(ec, std::errc::no_such_device);
    }
    std::cout << "connect without device: " << ec.message() << " (" << cwhy << ")\n";
}

TEST(RdmaListen, WithoutIwarpDeviceFailsWithAClearError) {
    if (r::available()) {
        GTEST_SKIP() << "an iWARP device is present";
    }
    sockaddr_in a = loopback(0);
    std::error_code ec;
    std::string why;
    auto l = r::Listener::listen(reinterpret_cast<sockaddr*>(&a), 4, ec, &why);
    if (r::list_devices().empty()) {
        EXPECT_EQ(l, nullptr);
        EXPECT_EQ(ec, r::Errc::no_device) << why;
        EXPECT_FALSE(why.empty());
    } else if (l) {
        // A non-iWARP stack may listen on the wildcard; a request on it
        // would be refused as not_iwarp. Waiting is bounded.
        const auto t0 = Clock::now();
        auto c = l->get_request(std::chrono::milliseconds(100), r::CmOptions{}, ec, &why);
        EXPECT_EQ(c, nullptr);
        EXPECT_EQ(ec, r::Errc::timed_out);
        EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    }
}

// The two-step active side (bind to CpIPAddr:0, then connect_to the SDP
// Address) used for the Port Mapper: argument checks need no device;
// without one the bind fails at once with no_device.
TEST(RdmaBind, TwoStepConnectChecksArgumentsAndNeedsADevice) {
    std::error_code ec;
    std::string why;
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    EXPECT_EQ(r::Connection::bind_active(nullptr, r::CmOptions{}, ec, &why), nullptr);
    EXPECT_EQ(ec, r::Errc::bad_argument);
    ec.clear();
    EXPECT_EQ(r::RdmaSession::bind(reinterpret_cast<sockaddr*>(&un), small_config(), ec, &why),
              nullptr);
    EXPECT_EQ(ec, r::Errc::bad_argument);
    EXPECT_FALSE(why.empty());
    if (r::available()) {
        sockaddr_in src = loopback(0);
        ec.clear();
        auto s = r::RdmaSession::bind(reinterpret_cast<sockaddr*>(&src), small_config(), ec, &why);
        if (!s) {
            GTEST_SKIP() << "cannot bind on the test address: " << ec.message() << ": " << why;
        }
        const sockaddr_storage local = s->local_address();
        ASSERT_EQ(local.ss_family, AF_INET);
        EXPECT_NE(reinterpret_cast<const sockaddr_in*>(&local)->sin_port, 0)
            << "rdma_cm picks the CpPort at bind time";
        // Nobody listens on port 9 there: refused (or unreachable), bounded.
        sockaddr_in dst = loopback(9);
        const auto t0 = Clock::now();
        EXPECT_TRUE(s->connect_to(reinterpret_cast<sockaddr*>(&dst), &why));
        EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
        return;
    }
    if (!r::list_devices().empty()) {
        return;  // only non-iWARP devices: the error depends on the stack
    }
    sockaddr_in src = loopback(0);
    ec.clear();
    const auto t0 = Clock::now();
    auto s = r::RdmaSession::bind(reinterpret_cast<sockaddr*>(&src), small_config(), ec, &why);
    EXPECT_EQ(s, nullptr);
    EXPECT_EQ(ec, r::Errc::no_device) << ec.message() << ": " << why;
    EXPECT_EQ(ec, std::errc::no_such_device);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
}

// --- with a device ----------------------------------------------------------------

// The cases that need a device: a listener on the test address, or the
// test is skipped with the reason.
struct RdmaEndToEnd : testing::Test {
    std::unique_ptr<r::Listener> l;
    r::RdmaSessionConfig cfg = small_config();

    void SetUp() override {
        std::string why;
        if (!r::available(&why)) {
            GTEST_SKIP() << "no iWARP device: " << why;
        }
        sockaddr_in la = loopback(0);
        std::error_code ec;
        l = r::Listener::listen(reinterpret_cast<sockaddr*>(&la), 4, ec, &why);
        if (!l && loopback_unusable(ec)) {
            GTEST_SKIP() << "no iWARP device on loopback (" << why
                         << "); set SDPPM_RDMA_TEST_ADDR to the device's address";
        }
        ASSERT_TRUE(l) << ec.message() << ": " << why;
    }
};

TEST_F(RdmaEndToEnd, TwoSdpEndpointsMoveData) {
    std::error_code ec;
    const std::uint16_t port = l->port();
    ASSERT_NE(port, 0);

    std::vector<std::uint8_t> data(1 << 20);
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = static_cast<std::uint8_t>(i * 7 + (i >> 9));
    }
    std::vector<std::uint8_t> got;
    std::error_code server_ec;
    std::string server_why;
    std::thread server([&] {
        auto s = r::RdmaSession::accept(*l, cfg, std::chrono::seconds(10), server_ec, &server_why);
        if (!s) {
            return;
        }
        std::vector<std::uint8_t> buf(65536);
        while (true) {
            std::error_code e;
            const std::size_t n = s->read_some(buf, std::chrono::seconds(10), e);
            if (e) {
                server_ec = e;
                server_why = s->describe_error();
                return;
            }
            if (n == 0) {
                break;
            }
            got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(n));
        }
        // Echo a short reply after the peer's half-close.
        const std::uint8_t reply[] = {'o', 'k'};
        server_ec = s->write_all(reply, std::chrono::seconds(10));
        if (!server_ec) {
            server_ec = s->close(std::chrono::seconds(10));
        }
    });

    sockaddr_in dst = loopback(port);
    std::string cwhy;
    auto c = r::RdmaSession::connect(reinterpret_cast<sockaddr*>(&dst), cfg, ec, &cwhy);
    if (!c) {
        server.join();
        if (loopback_unusable(ec)) {
            GTEST_SKIP() << "no iWARP device on loopback (" << cwhy
                         << "); set SDPPM_RDMA_TEST_ADDR to the device's address";
        }
        FAIL() << "connect: " << ec.message() << ": " << cwhy << " / server: " << server_why;
    }
    EXPECT_EQ(c->sdp().state(), sdp::engine::State::established);
    EXPECT_FALSE(c->write_all(data, std::chrono::seconds(20)));
    c->sdp().shutdown_write();
    std::vector<std::uint8_t> reply;
    std::uint8_t buf[16];
    while (true) {
        std::error_code e;
        const std::size_t n = c->read_some(buf, std::chrono::seconds(10), e);
        ASSERT_FALSE(e) << e.message() << " " << c->describe_error();
        if (n == 0) {
            break;
        }
        reply.insert(reply.end(), buf, buf + n);
    }
    EXPECT_EQ(reply, (std::vector<std::uint8_t>{'o', 'k'}));
    EXPECT_FALSE(c->close(std::chrono::seconds(10)));
    server.join();
    EXPECT_FALSE(server_ec) << server_ec.message() << ": " << server_why;
    EXPECT_EQ(got, data);
}

// Abortive close over the device (8.2.2): the client's abort() (AbortConn,
// QP to error, disconnect) reaches the server as a reset, not as EOF, and
// the server's read ends within its own bound.
TEST_F(RdmaEndToEnd, AbortIsAResetForThePeer) {
    std::error_code ec;
    std::string why;
    std::error_code server_ec;
    std::size_t server_got = 0;
    bool server_eof = false;
    std::thread server([&] {
        std::string w;
        auto s = r::RdmaSession::accept(*l, cfg, std::chrono::seconds(10), server_ec, &w);
        if (!s) {
            return;
        }
        std::vector<std::uint8_t> buf(65536);
        for (int i = 0; i < 100000; ++i) {
            std::error_code e;
            const std::size_t n = s->read_some(buf, std::chrono::seconds(10), e);
            if (e || n == 0) {
                server_ec = e;
                server_eof = !e;
                return;
            }
            server_got += n;
        }
    });
    sockaddr_in dst = loopback(l->port());
    auto c = r::RdmaSession::connect(reinterpret_cast<sockaddr*>(&dst), cfg, ec, &why);
    if (!c) {
        server.join();
        FAIL() << "connect: " << ec.message() << ": " << why;
    }
    const std::vector<std::uint8_t> data(100000, 0x5a);
    EXPECT_FALSE(c->write_all(data, std::chrono::seconds(20)));
    c->abort();
    server.join();
    EXPECT_FALSE(server_eof) << "an abort must not look like a graceful close";
    EXPECT_TRUE(server_ec == std::errc::connection_reset) << server_ec.message();
    EXPECT_LE(server_got, data.size());
}

TEST_F(RdmaEndToEnd, RefusedWhenNobodyListens) {
    sockaddr_in dst = loopback(1);  // assume nothing listens on port 1
    std::error_code ec;
    std::string why;
    const auto t0 = Clock::now();
    auto s = r::RdmaSession::connect(reinterpret_cast<sockaddr*>(&dst), cfg, ec, &why);
    EXPECT_EQ(s, nullptr);
    EXPECT_TRUE(ec == std::errc::connection_refused || ec == std::errc::host_unreachable ||
                ec == std::errc::timed_out || loopback_unusable(ec))
        << ec.message() << ": " << why;
    EXPECT_LT(Clock::now() - t0,
              cfg.cm.resolve_timeout * 2 + cfg.cm.establish_timeout + std::chrono::seconds(2));
}

}  // namespace
