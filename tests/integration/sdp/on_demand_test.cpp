// SPDX-License-Identifier: Apache-2.0
// On-demand SDP listen ports (issue #15; sections 7.4 and 15.2.1) with the
// real sdp-pmd and a real `sdp-cat -l --register ... --on-demand PORTS`:
// a port is opened for a PMReq, carries the connection and is released; a
// PMAccept without PMAck has its listener closed after the PMAck timeout;
// a flood of PMReqs without PMAcks never holds more listeners than the
// pool, and the rest are PMDenies counted as denied_pool_exhausted.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "integration/daemon/harness.hpp"
#include "pmclient/message.hpp"
#include "pmctl/client.hpp"
#include "pmd_fixture.hpp"
#include "sdp/async_stream.hpp"
#include "sdp/stream.hpp"
#include "sdp_test_util.hpp"

namespace {

using namespace std::chrono_literals;

// Ports in the LISTEN state on 127.0.0.1 (the kernel's table, as ss reads it).
// The TCP ports in LISTEN of the sockets process `pid` holds (its
// /proc/PID/fd links "socket:[INODE]" matched against /proc/net/tcp's inode
// column): listeners of other tests running meanwhile, which may take a
// pool port once the fixture let it go, do not count.
std::set<std::uint16_t> listening_ports(pid_t pid) {
    std::set<std::string> inodes;
    std::error_code ec;
    const std::filesystem::path fds = "/proc/" + std::to_string(pid) + "/fd";
    for (const auto& e : std::filesystem::directory_iterator(fds, ec)) {
        std::error_code lec;
        const std::string t = std::filesystem::read_symlink(e.path(), lec).string();
        if (!lec && t.rfind("socket:[", 0) == 0 && t.back() == ']') {
            inodes.insert(t.substr(8, t.size() - 9));
        }
    }
    std::set<std::uint16_t> out;
    std::ifstream in("/proc/net/tcp");
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
        ss >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
        if (state == "0A" && local.size() > 9 && inodes.count(inode) != 0) {
            out.insert(static_cast<std::uint16_t>(std::stoul(local.substr(9), nullptr, 16)));
        }
    }
    return out;
}

class OnDemand : public sdptest::PmdFixture {
  protected:
    void SetUp() override {
        sdptest::PmdFixture::SetUp();
        // Two workers: the pool is one per daemon, whichever shard a PMReq
        // lands on.
        ASSERT_NO_FATAL_FAILURE(
            start("listen: [\"127.0.0.1:{PORT}\"]\nack_timeout: " + ack_timeout_ +
                  "\nworkers: 2\n"
                  "control:\n  socket: \"" +
                  sock().string() + "\"\nstate_file: \"" + (dir_.path() / "state.json").string() +
                  "\"\n"));
        ASSERT_TRUE(pmtest::wait_until([&] { return std::filesystem::exists(sock()); }, 2000ms))
            << log();
        // A pool of free ports (reserved, then let go for sdp-cat).
        std::vector<std::unique_ptr<sdptest::TcpListener>> reserve;
        for (int i = 0; i < 3; ++i) {
            reserve.push_back(std::make_unique<sdptest::TcpListener>());
            pool_.insert(reserve.back()->port());
        }
        pool_text_ = pm::port_list_text({pool_.begin(), pool_.end()});
    }

    std::filesystem::path sock() const { return dir_.path() / "control.sock"; }

    // Starts the on-demand sdp-cat and waits until the daemon lists it.
    void start_cat(bool single_use) {
        std::vector<std::string> args{SDPPM_SDP_CAT_BIN,
                                      "-v",
                                      "-l",
                                      "--register",
                                      conv_.endpoint().to_string(),
                                      "--control",
                                      sock().string(),
                                      "--bind",
                                      "127.0.0.1",
                                      "--on-demand",
                                      pool_text_};
        if (single_use) {
            args.push_back("--single-use");
        }
        cat_ = std::make_unique<pmtest::Process>(args, dir_.path() / "cat.out",
                                                 dir_.path() / "cat.err");
        ASSERT_TRUE(cat_->started());
        ASSERT_TRUE(pmtest::wait_until([&] { return service().is_object(); }, 10000ms))
            << pmtest::read_file(dir_.path() / "cat.err") << log();
    }

    // The on-demand service as `services` lists it (null when not listed).
    nlohmann::json service() const {
        auto a = pmctl::call(sock().string(), "services", nullptr, 2000ms);
        if (a.ok() && a.reply().result == 0) {
            for (const auto& s : a.reply().arguments["services"]) {
                if (s.contains("on_demand")) {
                    return s;
                }
            }
        }
        return nullptr;
    }
    std::int64_t listeners() const {
        auto s = service();
        return s.is_object() ? s["on_demand"]["listeners"].get<std::int64_t>() : -1;
    }
    std::uint64_t stat(const std::string& name) const {
        auto a = pmctl::call(sock().string(), "stats", nullptr, 2000ms);
        if (!a.ok() || !a.reply().arguments.contains(name)) {
            return 0;
        }
        return a.reply().arguments[name].get<std::uint64_t>();
    }
    // The pool ports sdp-cat listens on (none once it has exited).
    std::set<std::uint16_t> cat_listening() const {
        return cat_ && cat_->running() ? listening_ports(cat_->pid()) : std::set<std::uint16_t>{};
    }
    std::size_t pool_listening() const {
        std::size_t n = 0;
        for (std::uint16_t p : cat_listening()) {
            n += pool_.count(p);
        }
        return n;
    }

    pm::Message request(std::uint16_t cp_port, std::uint64_t handle) const {
        pm::Message m;
        m.type = pm::MessageType::request;
        m.ipv = pm::Family::v4;
        m.ap_addr = conv_.endpoint().address;
        m.ap_port = conv_.port();
        m.cp_addr = *pm::IpAddress::parse("127.0.0.1");
        m.cp_port = cp_port;
        m.assoc_handle = handle;
        return m;
    }
    pm::Endpoint pmsp() const { return pm::Endpoint{*pm::IpAddress::parse("127.0.0.1"), port_}; }

    // Long enough for the checks made between a PMAccept and its release
    // on a loaded machine; the flood uses a short one to turn the pool over.
    std::string ack_timeout_ = "3s";
    sdptest::TcpListener conv_;  // the Conventional port (reserved, unused)
    std::set<std::uint16_t> pool_;
    std::string pool_text_;
    std::unique_ptr<pmtest::Process> cat_;
};

TEST_F(OnDemand, PortIsOpenedUsedAndReleased) {
    ASSERT_NO_FATAL_FAILURE(start_cat(true));
    EXPECT_EQ(listeners(), 0);
    EXPECT_EQ(pool_listening(), 0u);  // nothing listens before a PMReq

    sdp::StreamOptions o;
    o.pmsp = pmsp();
    o.io_timeout = 20s;
    o.resolve_deadline = 3s;
    o.use_pm_cache = false;
    o.fallback = false;
    sdp::Stream s;
    auto ec = s.connect(conv_.endpoint(), o);
    ASSERT_FALSE(ec) << ec.message() << ": " << s.info().reason << log();
    EXPECT_EQ(s.used(), sdp::Transport::sdp) << s.info().reason;
    EXPECT_TRUE(pool_.count(s.info().peer.port)) << s.info().peer.to_string();
    const std::string hello = "hello over an on-demand port\n";
    s.write(std::span(reinterpret_cast<const std::uint8_t*>(hello.data()), hello.size()), ec);
    ASSERT_FALSE(ec) << ec.message();
    s.shutdown_write();
    std::vector<std::uint8_t> buf(64);
    while (s.read_some(buf, ec) > 0 && !ec) {
    }
    s.close();
    ASSERT_TRUE(pmtest::wait_until(
        [&] { return pmtest::read_file(dir_.path() / "cat.out") == hello; }, 10000ms))
        << pmtest::read_file(dir_.path() / "cat.err");
    // Single use: the listener went at the connection; the connection was
    // the acceptor's to finish.
    ASSERT_TRUE(pmtest::wait_until([&] { return stat("ondemand_released_used") >= 1; }, 5000ms))
        << log();
    EXPECT_GE(stat("ondemand_connections"), 1u);
    EXPECT_EQ(stat("ondemand_opens"), 1u);
    EXPECT_TRUE(pmtest::wait_until([&] { return pool_listening() == 0; }, 5000ms));
    // sdp-cat ends with its one connection: its channel closes and the
    // registration goes with it.
    ASSERT_TRUE(cat_->wait_exit(10000ms).has_value());
    EXPECT_TRUE(pmtest::wait_until([&] { return service().is_null(); }, 5000ms)) << log();
    EXPECT_NE(log().find("its control connection closed"), std::string::npos) << log();
}

TEST_F(OnDemand, ListenerWithoutPMAckIsClosedAfterTheAckTimeout) {
    ASSERT_NO_FATAL_FAILURE(start_cat(false));
    pmtest::UdpClient udp(*pm::Endpoint::parse("127.0.0.1:0"));
    ASSERT_TRUE(udp.ok());
    auto req = request(41000, 0xabc);
    auto wire = pm::encode(req);
    ASSERT_TRUE(udp.send(wire, pmsp()));
    auto got = udp.receive(3000ms);
    ASSERT_TRUE(got) << log();
    auto d = pm::decode(got->bytes);
    ASSERT_TRUE(std::holds_alternative<pm::Message>(d));
    const auto accept = std::get<pm::Message>(d);
    ASSERT_EQ(accept.type, pm::MessageType::accept) << log();
    EXPECT_TRUE(pool_.count(accept.ap_port));
    // The listener exists before the PMAccept is sent.
    EXPECT_TRUE(cat_listening().count(accept.ap_port));
    EXPECT_EQ(listeners(), 1);
    // sdp-pmctl shows the pool and its use.
    auto table =
        pmtest::run({SDPPM_PMCTL_BIN, "--socket", sock().string(), "services"}, dir_.path());
    EXPECT_NE(table.out.find("ports " + pool_text_ + " (1/3 open)"), std::string::npos)
        << table.out << table.err;
    EXPECT_NE(table.out.find("on-demand"), std::string::npos) << table.out;
    // A retransmission gets the same port.
    ASSERT_TRUE(udp.send(wire, pmsp()));
    auto again = udp.receive(3000ms);
    ASSERT_TRUE(again);
    EXPECT_EQ(std::get<pm::Message>(pm::decode(again->bytes)).ap_port, accept.ap_port);
    // No PMAck: closed within the PMAck timeout (3 s), polled.
    ASSERT_TRUE(pmtest::wait_until([&] { return listeners() == 0; }, 10000ms)) << log();
    EXPECT_TRUE(pmtest::wait_until([&] { return pool_listening() == 0; }, 10000ms));
    EXPECT_EQ(stat("ondemand_released_unused"), 1u);
    EXPECT_TRUE(cat_->running());  // the acceptor lives on, its service too
    EXPECT_TRUE(service().is_object());
}

class OnDemandFlood : public OnDemand {
  protected:
    OnDemandFlood() { ack_timeout_ = "1s"; }
};

TEST_F(OnDemandFlood, WithoutPMAcksNeverHoldsMoreThanThePool) {
    ASSERT_NO_FATAL_FAILURE(start_cat(false));
    // Sixteen source addresses, so that the PMReqs spread over the workers
    // (steered by a seeded hash of the source address).
    std::vector<std::unique_ptr<pmtest::UdpClient>> clients;
    for (int i = 1; i <= 16; ++i) {
        clients.push_back(std::make_unique<pmtest::UdpClient>(
            *pm::Endpoint::parse("127.0.0." + std::to_string(i) + ":0")));
        ASSERT_TRUE(clients.back()->ok());
    }
    std::atomic<bool> done{false};
    std::size_t max_listening = 0;
    std::int64_t max_listed = 0;
    std::thread watch([&] {
        while (!done) {
            max_listening = std::max(max_listening, pool_listening());
            max_listed = std::max(max_listed, listeners());
            std::this_thread::sleep_for(20ms);
        }
    });
    std::size_t sent = 0;
    std::size_t accepts = 0;
    std::size_t denies = 0;
    std::set<std::uint16_t> ports;
    // 3 s of PMReqs, each from a new CpPort, never acknowledged: with a 1 s
    // PMAck timeout the pool turns over about three times.
    const auto end = std::chrono::steady_clock::now() + 3s;
    const auto take = [&](const pmtest::UdpClient& udp, std::chrono::milliseconds wait) {
        while (auto got = udp.receive(wait)) {
            auto d = pm::decode(got->bytes);
            if (auto* m = std::get_if<pm::Message>(&d)) {
                if (m->type == pm::MessageType::accept) {
                    ++accepts;
                    ports.insert(m->ap_port);
                } else if (m->type == pm::MessageType::deny) {
                    ++denies;
                }
            }
            wait = 0ms;
        }
    };
    for (std::uint16_t cp = 20000; std::chrono::steady_clock::now() < end; ++cp) {
        const auto& udp = *clients[cp % clients.size()];
        ASSERT_TRUE(udp.send(pm::encode(request(cp, 0x1000 + cp)), pmsp()));
        ++sent;
        take(udp, sent % 20 == 0 ? 20ms : 0ms);
        std::this_thread::sleep_for(2ms);
    }
    for (const auto& c : clients) {
        take(*c, 1500ms);
    }
    done = true;
    watch.join();
    const auto exhausted = stat("denied_pool_exhausted");
    RecordProperty("pmreqs_sent", static_cast<int>(sent));
    RecordProperty("pmaccepts", static_cast<int>(accepts));
    RecordProperty("pmdenies", static_cast<int>(denies));
    RecordProperty("denied_pool_exhausted", static_cast<int>(exhausted));
    RecordProperty("max_listening", static_cast<int>(max_listening));
    RecordProperty("pool", static_cast<int>(pool_.size()));
    std::printf(
        "flood: %zu PMReqs, %zu PMAccepts, %zu PMDenies (denied_pool_exhausted %llu), "
        "max listeners %zu (listed %lld) of a pool of %zu\n",
        sent, accepts, denies, static_cast<unsigned long long>(exhausted), max_listening,
        static_cast<long long>(max_listed), pool_.size());
    std::printf("flood: PMReqs per worker: %llu, %llu\n",
                static_cast<unsigned long long>(stat("worker0_requests")),
                static_cast<unsigned long long>(stat("worker1_requests")));
    EXPECT_LE(max_listening, pool_.size());
    EXPECT_LE(max_listed, static_cast<std::int64_t>(pool_.size()));
    EXPECT_GE(accepts, pool_.size());  // each port was handed out
    EXPECT_GT(denies, 0u);
    EXPECT_GT(exhausted, 0u);
    EXPECT_LE(accepts + denies, sent);
    for (std::uint16_t p : ports) {
        EXPECT_TRUE(pool_.count(p)) << p;
    }
    // Everything is given back once the PMAck timers ran out.
    EXPECT_TRUE(pmtest::wait_until([&] { return listeners() == 0; }, 10000ms)) << log();
    EXPECT_TRUE(pmtest::wait_until([&] { return pool_listening() == 0; }, 10000ms));
    EXPECT_NE(log().find("denied_pool_exhausted"), std::string::npos) << log();
}

// The daemon stops: the acceptor's channel closes, its listeners go and
// accept() ends with an error instead of waiting for ever.
TEST_F(OnDemand, AcceptorEndsWhenTheDaemonGoes) {
    ASSERT_NO_FATAL_FAILURE(start_cat(false));
    ASSERT_TRUE(daemon_->signal(SIGTERM));
    auto status = cat_->wait_exit(10000ms);
    ASSERT_TRUE(status.has_value());
    EXPECT_NE(*status, 0);
    EXPECT_NE(pmtest::read_file(dir_.path() / "cat.err").find("accept"), std::string::npos)
        << pmtest::read_file(dir_.path() / "cat.err");
    EXPECT_EQ(pool_listening(), 0u);
}

// What the on-demand mode needs, said clearly at open().
TEST_F(OnDemand, AcceptorOptionsAreChecked) {
    sdp::AcceptorOptions ao;
    ao.on_demand = sdp::AcceptorOptions::OnDemandPorts{{*pool_.begin()}, false};
    sdp::Acceptor acc;
    EXPECT_EQ(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao), std::errc::invalid_argument);
    EXPECT_NE(acc.open_error().find("control socket"), std::string::npos) << acc.open_error();
    ao.control_socket = sock().string();
    ao.conventional = conv_.endpoint().to_string();
    ao.on_demand->ports.clear();
    EXPECT_EQ(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao), std::errc::invalid_argument);
    boost::asio::io_context io;
    sdp::AsyncAcceptor async(io);
    ao.on_demand->ports = {*pool_.begin()};
    EXPECT_EQ(async.open(*pm::Endpoint::parse("127.0.0.1:0"), ao),
              std::errc::operation_not_supported);
    // And through the API itself: registered, listed, no listener yet.
    ASSERT_FALSE(acc.open(*pm::Endpoint::parse("127.0.0.1:0"), ao)) << acc.registration_error();
    EXPECT_TRUE(acc.registered());
    EXPECT_TRUE(acc.is_open());
    EXPECT_EQ(acc.on_demand_listeners(), 0u);
    EXPECT_TRUE(pmtest::wait_until([&] { return service().is_object(); }, 5000ms));
    sdp::Stream none;
    EXPECT_EQ(acc.accept(none, 50ms), std::errc::timed_out);
    acc.close();
    EXPECT_TRUE(pmtest::wait_until([&] { return service().is_null(); }, 5000ms)) << log();
}

// Reads one line from a raw channel fd (at most `timeout`), "" on none.
std::string read_line(int fd, std::string& buffer, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (buffer.find('\n') == std::string::npos) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            end - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
            return {};
        }
        char buf[4096];
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            return {};
        }
        buffer.append(buf, static_cast<std::size_t>(n));
    }
    auto nl = buffer.find('\n');
    std::string line = buffer.substr(0, nl);
    buffer.erase(0, nl + 1);
    return line;
}

// An acceptor that never answers, answers garbage or answers for ports
// and ids it was not asked about: each open ends in a PMDeny within the
// bound, the garbage is counted, nothing crashes, and the daemon's own
// state stays bounded.
TEST_F(OnDemand, SilentOrLyingAcceptorGivesCountedPMDenies) {
    pmctl::KeptConnection ch;
    auto a = pmctl::request(sock().string(),
                            nlohmann::json{{"command", "register"},
                                           {"arguments",
                                            {{"name", "liar"},
                                             {"conventional", conv_.endpoint().to_string()},
                                             {"sdp", "127.0.0.1:" + std::to_string(*pool_.begin())},
                                             {"on_demand", {{"ports", pool_text_}}}}}},
                            2000ms, &ch);
    ASSERT_TRUE(a.ok()) << a.error().message;
    ASSERT_EQ(a.reply().result, 0) << a.reply().text;
    ASSERT_GE(ch.fd, 0);
    std::string in = ch.pending;
    pmtest::UdpClient udp(*pm::Endpoint::parse("127.0.0.1:0"));
    ASSERT_TRUE(udp.ok());

    // 1. Silence: PMDeny once the open times out, and a close follows.
    ASSERT_TRUE(udp.send(pm::encode(request(42000, 1)), pmsp()));
    auto open = nlohmann::json::parse(read_line(ch.fd, in, 3000ms), nullptr, false);
    ASSERT_TRUE(open.is_object() && open.contains("open")) << open.dump();
    auto deny = udp.receive(5000ms);
    ASSERT_TRUE(deny) << log();
    EXPECT_EQ(std::get<pm::Message>(pm::decode(deny->bytes)).type, pm::MessageType::deny);
    auto close = nlohmann::json::parse(read_line(ch.fd, in, 3000ms), nullptr, false);
    EXPECT_EQ(close.value("close", 0), open["open"].get<int>()) << close.dump();
    EXPECT_EQ(stat("denied_open_failed"), 1u);

    // 2. Garbage and answers for what was never asked: dropped, counted.
    ASSERT_TRUE(udp.send(pm::encode(request(42001, 2)), pmsp()));
    open = nlohmann::json::parse(read_line(ch.fd, in, 3000ms), nullptr, false);
    ASSERT_TRUE(open.is_object() && open.contains("open")) << open.dump();
    const std::string lies = "garbage\n{\"opened\": 99999, \"id\": 1}\n[1,[2,[3]]]\n" +
                             nlohmann::json{{"opened", open["open"]}, {"id", 424242}}.dump() +
                             "\n" + std::string(3000, '{') + "\n" +
                             nlohmann::json{{"connected", open["open"]}}.dump() + "\n";
    ASSERT_EQ(::send(ch.fd, lies.data(), lies.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(lies.size()));
    // Then the true answer: the PMAccept comes with that port.
    const std::string truth =
        nlohmann::json{{"opened", open["open"]}, {"id", open["id"]}}.dump() + "\n";
    ASSERT_EQ(::send(ch.fd, truth.data(), truth.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(truth.size()));
    auto accept = udp.receive(3000ms);
    ASSERT_TRUE(accept) << log();
    const auto m = std::get<pm::Message>(pm::decode(accept->bytes));
    EXPECT_EQ(m.type, pm::MessageType::accept);
    EXPECT_EQ(m.ap_port, open["open"].get<int>());
    EXPECT_GE(stat("ondemand_bad_answers"), 4u) << log();
    EXPECT_NE(log().find("unreadable line from the acceptor"), std::string::npos) << log();

    // 3. The channel closes: the registration goes, a PMReq is denied.
    ::close(ch.fd);
    ASSERT_TRUE(pmtest::wait_until([&] { return service().is_null(); }, 5000ms)) << log();
    ASSERT_TRUE(udp.send(pm::encode(request(42002, 3)), pmsp()));
    auto after = udp.receive(3000ms);
    ASSERT_TRUE(after);
    EXPECT_EQ(std::get<pm::Message>(pm::decode(after->bytes)).type, pm::MessageType::deny);
    EXPECT_EQ(stat("ondemand_listeners"), 0u);
}

}  // namespace
