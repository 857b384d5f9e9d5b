// SPDX-License-Identifier: Apache-2.0
// Out-of-band data (9.5.3) crosses intact on SDP exactly as it does on TCP:
// one scenario, run over connect_tcp() (the reader's sdp::Stream over a
// kernel TCP socket, the writer a plain socket with send(MSG_OOB)) and over
// SDP (connect_sdp() to an sdp::Acceptor, the writer the accepted
// sdp::Stream with send_oob()). Each run checks the expected values and
// records what the reader observed; the two records must be identical.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

using namespace std::chrono_literals;

namespace {

sdp::StreamOptions opts() {
    sdp::StreamOptions o;
    o.io_timeout = 10s;  // every blocking read bounded
    o.handshake_timeout = 5s;
    o.linger = 2s;
    return o;
}

// The sending end: a raw TCP socket or an sdp::Stream.
class Writer {
  public:
    virtual ~Writer() = default;
    virtual void write(const std::string& s) = 0;
    virtual void send_oob(std::uint8_t b) = 0;
};

class RawWriter final : public Writer {
  public:
    explicit RawWriter(int fd) : fd_(fd) {}
    ~RawWriter() override { ::close(fd_); }
    RawWriter(const RawWriter&) = delete;
    RawWriter& operator=(const RawWriter&) = delete;
    void write(const std::string& s) override {
        ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
    }
    void send_oob(std::uint8_t b) override {
        ASSERT_EQ(::send(fd_, &b, 1, MSG_OOB | MSG_NOSIGNAL), 1);
    }

  private:
    int fd_;
};

class StreamWriter final : public Writer {
  public:
    explicit StreamWriter(sdp::Stream s) : s_(std::move(s)) {}
    void write(const std::string& s) override {
        std::error_code ec;
        const auto* p = reinterpret_cast<const std::uint8_t*>(s.data());
        ASSERT_EQ(s_.write({p, s.size()}, ec), s.size());
        ASSERT_FALSE(ec) << ec.message();
    }
    void send_oob(std::uint8_t b) override { ASSERT_FALSE(s_.send_oob(b)); }

  private:
    sdp::Stream s_;
};

// A connected reader (client sdp::Stream) and its writer.
struct Conn {
    sdp::Stream reader;
    std::unique_ptr<Writer> writer;
    sdp::Acceptor acc;  // SDP only
};

void connect_tcp(Conn& c) {
    sdptest::TcpListener l;
    ASSERT_TRUE(l.ok());
    ASSERT_FALSE(c.reader.connect_tcp(l.endpoint(), opts()));
    const int fd = l.accept();
    ASSERT_GE(fd, 0);
    c.writer = std::make_unique<RawWriter>(fd);
    ASSERT_EQ(c.reader.used(), sdp::Transport::tcp);
}

void connect_sdp(Conn& c) {
    sdp::AcceptorOptions ao;
    ao.stream = opts();
    ASSERT_FALSE(c.acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao));
    sdp::Stream server;
    std::error_code aec;
    std::thread t([&] { aec = c.acc.accept(server, 10s); });
    const auto cec = c.reader.connect_sdp(c.acc.local_endpoint(), opts());
    t.join();
    ASSERT_FALSE(cec) << cec.message() << " " << c.reader.info().reason;
    ASSERT_FALSE(aec) << aec.message() << " " << c.acc.last_error();
    ASSERT_EQ(c.reader.used(), sdp::Transport::sdp);
    c.writer = std::make_unique<StreamWriter>(std::move(server));
}

std::string errname(const std::error_code& ec) {
    if (!ec) {
        return "ok";
    }
    if (ec == std::errc::invalid_argument) {
        return "EINVAL";
    }
    if (ec == std::errc::resource_unavailable_try_again) {
        return "EAGAIN";
    }
    if (ec == std::errc::interrupted) {
        return "EINTR";
    }
    return ec.message();
}

// The reader's side, recording every observation.
class Reader {
  public:
    explicit Reader(sdp::Stream& s) : s_(s) {}
    std::vector<std::string> log;

    // read_some(stop_at_urgent) until interrupted at an unread urgent byte
    // or `max` bytes; returns the bytes.
    std::string read_until_urgent(std::size_t max) {
        std::string got;
        for (int i = 0; i < 1000 && got.size() < max; ++i) {
            std::uint8_t buf[64];
            std::error_code ec;
            const std::size_t n = s_.read_some({buf, std::min(sizeof buf, max - got.size())}, ec,
                                               /*stop_at_urgent=*/true);
            got.append(reinterpret_cast<const char*>(buf), n);
            if (ec == std::errc::interrupted) {
                break;
            }
            EXPECT_FALSE(ec) << ec.message();
            if (ec || n == 0) {
                break;
            }
        }
        note("read " + got);
        return got;
    }
    // Plain read_some() until `want` bytes; each call's bytes logged apart
    // (a read never crosses the mark).
    std::string read_plain(std::size_t want) {
        std::string got;
        for (int i = 0; i < 1000 && got.size() < want; ++i) {
            std::uint8_t buf[64];
            std::error_code ec;
            const std::size_t n = s_.read_some({buf, std::min(sizeof buf, want - got.size())}, ec);
            EXPECT_FALSE(ec) << ec.message();
            if (ec || n == 0) {
                break;
            }
            got.append(reinterpret_cast<const char*>(buf), n);
        }
        note("plain " + got);
        return got;
    }
    // One read_some() with room for 100 bytes.
    std::string read_once() {
        std::uint8_t buf[100];
        std::error_code ec;
        const std::size_t n = s_.read_some(buf, ec);
        EXPECT_FALSE(ec) << ec.message();
        std::string got(reinterpret_cast<const char*>(buf), n);
        note("once " + got);
        return got;
    }
    std::string read_oob() {
        std::error_code ec;
        const std::uint8_t b = s_.read_oob(ec);
        const std::string r = ec ? errname(ec) : std::string(1, static_cast<char>(b));
        note("oob " + r);
        return r;
    }
    bool at_mark() {
        const bool m = s_.at_mark();
        note(std::string("at_mark ") + (m ? "1" : "0"));
        return m;
    }
    // Bounded wait for the urgent byte (POLLPRI / OOB_PEND) to be there.
    bool wait_urgent() {
        const bool ok = sdptest::wait_for([&] { return s_.urgent_pending(); }, 10s);
        note(std::string("urgent ") + (ok ? "1" : "0"));
        return ok;
    }

  private:
    void note(const std::string& s) { log.push_back(s); }
    sdp::Stream& s_;
};

// The scenario; returns what the reader observed.
std::vector<std::string> scenario(Conn& c) {
    Reader r(c.reader);
    Writer& w = *c.writer;

    // 1. Nothing urgent yet: read_oob has nothing (EINVAL).
    EXPECT_EQ(r.read_oob(), "EINVAL");
    EXPECT_FALSE(r.at_mark());

    // 2. Bytes before and after the urgent byte, out of line.
    w.write("hello");
    w.send_oob('!');
    w.write("world");
    EXPECT_TRUE(r.wait_urgent());
    EXPECT_EQ(r.read_until_urgent(100), "hello");  // stops at the mark
    EXPECT_TRUE(r.at_mark());
    EXPECT_EQ(r.read_oob(), "!");
    EXPECT_EQ(r.read_oob(), "EINVAL");  // once
    EXPECT_TRUE(r.at_mark());           // until the reader passes it
    EXPECT_EQ(r.read_plain(5), "world");
    EXPECT_FALSE(r.at_mark());

    // 3. Plain reads skip the urgent byte; once passed it is gone.
    w.write("xy");
    w.send_oob('$');
    w.write("z");
    EXPECT_TRUE(r.wait_urgent());
    EXPECT_EQ(r.read_once(), "xy");  // stops at the mark
    EXPECT_TRUE(r.at_mark());
    EXPECT_EQ(r.read_plain(1), "z");
    EXPECT_EQ(r.read_oob(), "EINVAL");

    // 4. SO_OOBINLINE: the byte in the stream; reads still stop at the mark.
    EXPECT_FALSE(c.reader.set_oob_inline(true));
    w.write("ab");
    w.send_oob('#');
    w.write("cd");
    EXPECT_TRUE(r.wait_urgent());
    EXPECT_EQ(r.read_once(), "ab");  // stops at the mark
    EXPECT_TRUE(r.at_mark());
    EXPECT_EQ(r.read_oob(), "EINVAL");
    EXPECT_EQ(r.read_until_urgent(3), "#cd");  // never interrupted inline
    EXPECT_FALSE(r.at_mark());
    EXPECT_FALSE(c.reader.set_oob_inline(false));

    // 5. A newer urgent byte while the reader stands on the older one's
    // mark, unread: the older is dropped, the newer is the mark.
    w.write("p");
    w.send_oob('A');
    EXPECT_TRUE(r.wait_urgent());
    EXPECT_EQ(r.read_until_urgent(100), "p");
    EXPECT_TRUE(r.at_mark());
    w.write("q");
    w.send_oob('B');
    w.write("r");
    const bool moved = sdptest::wait_for([&] { return !c.reader.at_mark(); }, 10s);
    EXPECT_TRUE(moved);
    r.read_plain(0);  // a marker in the log
    EXPECT_EQ(r.read_until_urgent(100), "q");
    EXPECT_EQ(r.read_oob(), "B");
    EXPECT_EQ(r.read_plain(1), "r");

    // 6. The urgent byte alone.
    w.send_oob('Z');
    EXPECT_TRUE(r.wait_urgent());
    EXPECT_TRUE(r.at_mark());
    EXPECT_EQ(r.read_oob(), "Z");
    w.write("after");
    EXPECT_EQ(r.read_plain(5), "after");
    EXPECT_FALSE(r.at_mark());
    return r.log;
}

}  // namespace

TEST(SdpOob, SameObservationsOverTcpAndSdp) {
    Conn tcp;
    ASSERT_NO_FATAL_FAILURE(connect_tcp(tcp));
    std::vector<std::string> over_tcp;
    {
        SCOPED_TRACE("over TCP");
        over_tcp = scenario(tcp);
    }
    Conn sdp;
    ASSERT_NO_FATAL_FAILURE(connect_sdp(sdp));
    std::vector<std::string> over_sdp;
    {
        SCOPED_TRACE("over SDP");
        over_sdp = scenario(sdp);
    }
    EXPECT_EQ(over_tcp, over_sdp);
}

// send_oob() of the client stream reaches a kernel TCP peer as urgent data
// (the fallback path uses the real MSG_OOB).
TEST(SdpOob, SendOobOverTheTcpFallbackIsRealUrgentData) {
    sdptest::TcpListener l;
    ASSERT_TRUE(l.ok());
    sdp::Stream s;
    ASSERT_FALSE(s.connect_tcp(l.endpoint(), opts()));
    const int fd = l.accept();
    ASSERT_GE(fd, 0);
    std::error_code ec;
    const std::uint8_t hi[] = {'h', 'i'};
    s.write(hi, ec);
    ASSERT_FALSE(ec);
    ASSERT_FALSE(s.send_oob('U'));
    pollfd p{fd, POLLPRI, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1);
    char b = 0;
    EXPECT_EQ(::recv(fd, &b, 1, MSG_OOB), 1);
    EXPECT_EQ(b, 'U');
    char buf[8];
    EXPECT_EQ(::recv(fd, buf, sizeof buf, 0), 2);
    ::close(fd);
}
