// SPDX-License-Identifier: Apache-2.0
// 8.2.2 through both socket drivers: an abort after our DisConn sends
// AbortConn and only then tears the LLP down. The AbortConn waits for credit
// here (the peer reads late), so a driver that reset the socket at once lost
// it and the peer saw a clean end of stream instead of a reset.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sdp/io/asio_channel.hpp"
#include "sdp/io/channel.hpp"

#include "loopback.hpp"

namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;

using sdp::test::tcp_pair;

sdp::io::ChannelOptions options(std::uint16_t recv_bufs) {
    sdp::io::ChannelOptions o;
    o.session.engine.recv_buf_size = 4096;
    o.session.engine.send_buf_size = 4096;
    o.session.engine.recv_buf_count = recv_bufs;
    return o;
}

// Two Data Messages of a whole buffer each: with the server's 4 buffers the
// client keeps 2 credits, the DisConn leaves it 1, and its AbortConn (no
// credit to give) waits for the server to read.
const Bytes kData(2 * (4096 - 16), 0x5a);

// The server: starts reading after `delay`, until end of stream or error.
struct LateReader {
    std::unique_ptr<sdp::io::SoftChannel> ch;
    std::size_t got = 0;
    std::error_code ec;
    void run(std::chrono::milliseconds delay) {
        std::this_thread::sleep_for(delay);
        Bytes buf(64 * 1024);
        for (int i = 0; i < 1000; ++i) {
            const std::size_t n = ch->read_some(buf, ec);
            if (ec || n == 0)
                break;
            got += n;
        }
    }
    // After the reader stopped (end of stream or error): lets the channel
    // take in what is still on the socket, then describes the SDP state.
    std::string settle() {
        for (int i = 0; i < 100; ++i) {
            ch->pump();
            const std::string d = ch->describe();
            if (d.find("established") == std::string::npos)
                return d;
            std::this_thread::sleep_for(10ms);
        }
        return ch->describe();
    }
};

TEST(SoftChannelAbort, AbortConnWaitingForCreditIsNotLostToAReset) {
    auto [fc, fs] = tcp_pair();
    LateReader server;
    std::unique_ptr<sdp::io::SoftChannel> client;
    std::error_code ec1, ec2;
    std::thread t([&, fs = fs] {
        server.ch =
            sdp::io::SoftChannel::handshake(fs, sdp::iwarp::MpaRole::responder, options(4), ec2);
    });
    client = sdp::io::SoftChannel::handshake(fc, sdp::iwarp::MpaRole::initiator, options(16), ec1);
    t.join();
    ASSERT_TRUE(client && server.ch) << ec1.message() << " / " << ec2.message();

    std::error_code ec;
    ASSERT_EQ(client->write(kData, ec), kData.size());
    ASSERT_TRUE(client->flush(2s));
    client->shutdown_write(ec);
    ASSERT_FALSE(ec);
    ASSERT_TRUE(client->flush(2s));

    std::thread reader([&] { server.run(200ms); });
    const auto t0 = std::chrono::steady_clock::now();
    client->abort();
    const auto took = std::chrono::steady_clock::now() - t0;
    reader.join();
    client.reset();
    EXPECT_LT(took, 5s) << "abort is bounded (kAbortLinger)";
    // The AbortConn arrived: the peer's stream was reset, not closed cleanly
    // (a reset right after the DisConn would look like a graceful close).
    const std::string state = server.settle();
    EXPECT_NE(state.find("reset: peer_abort"), std::string::npos)
        << state << ", read " << server.got;
}

TEST(AsioChannelAbort, AbortConnWaitingForCreditIsNotLostToAReset) {
    auto [fc, fs] = tcp_pair();
    LateReader server;
    std::error_code ec2;
    std::thread t([&, fs = fs] {
        server.ch =
            sdp::io::SoftChannel::handshake(fs, sdp::iwarp::MpaRole::responder, options(4), ec2);
    });
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket sock(io, boost::asio::ip::tcp::v4(), fc);
    auto client = std::make_shared<sdp::io::AsioChannel>(
        std::move(sock), sdp::iwarp::MpaRole::initiator, options(16));
    std::error_code hs = std::make_error_code(std::errc::timed_out);  // until it completes
    client->handshake([&](std::error_code ec, const std::string&) {
        hs = ec == std::errc::timed_out ? std::make_error_code(std::errc::io_error) : ec;
    });
    for (int i = 0; i < 500 && hs == std::errc::timed_out; ++i) {
        io.run_for(10ms);
        io.restart();
    }
    t.join();
    ASSERT_FALSE(hs) << hs.message();
    ASSERT_TRUE(server.ch) << ec2.message();

    std::size_t written = 0;
    std::error_code wec;
    std::function<void()> write_more = [&] {
        client->async_write_some(std::span(kData).subspan(written),
                                 [&](std::error_code ec, std::size_t n) {
                                     wec = ec;
                                     written += n;
                                     if (!ec && written < kData.size())
                                         write_more();
                                 });
    };
    write_more();
    for (int i = 0; i < 500 && written < kData.size() && !wec; ++i) {
        io.run_for(10ms);
        io.restart();
    }
    ASSERT_EQ(written, kData.size()) << wec.message();
    ASSERT_FALSE(client->shutdown_write());
    io.run_for(100ms);  // data and DisConn out
    io.restart();

    std::thread reader([&] { server.run(200ms); });
    const auto t0 = std::chrono::steady_clock::now();
    client->abort();
    EXPECT_FALSE(client->is_open());
    io.run_for(5s);  // until the socket is closed and nothing is left
    const auto took = std::chrono::steady_clock::now() - t0;
    reader.join();
    EXPECT_LT(took, 5s) << "abort is bounded (kAbortLinger)";
    const std::string state = server.settle();
    EXPECT_NE(state.find("reset: peer_abort"), std::string::npos)
        << state << ", read " << server.got;
}

}  // namespace
