// SPDX-License-Identifier: Apache-2.0
// pmd::io::etcd::Client against real etcd members (tests/integration/
// etcd_fixture.hpp) and against a fake HTTP server on loopback that answers
// garbage, oversized bodies, 5xx or nothing. Every wait drives the
// io_context with a bound; nothing sleeps to make a point.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/io/etcd_client.hpp"
#include "integration/etcd_fixture.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using pmd::io::etcd::Client;
using pmd::io::etcd::ClientConfig;
using pmd::io::etcd::Error;
using pmd::io::etcd::Event;
using pmd::io::etcd::KeyValue;
using Kind = Error::Kind;

class etcd_client : public ::testing::Test {
  protected:
    // Runs the io_context until `pred` holds or `bound` passes.
    bool run_until(const std::function<bool()>& pred, std::chrono::milliseconds bound = 5000ms) {
        const auto end = std::chrono::steady_clock::now() + bound;
        while (!pred()) {
            if (std::chrono::steady_clock::now() >= end) {
                return false;
            }
            ioc_.run_for(5ms);
        }
        return true;
    }
    // Runs the io_context for `d` (to show that nothing happens).
    void run_for(std::chrono::milliseconds d) {
        const auto end = std::chrono::steady_clock::now() + d;
        while (std::chrono::steady_clock::now() < end) {
            ioc_.run_for(5ms);
        }
    }

    std::unique_ptr<Client> client(std::vector<std::string> urls,
                                   std::chrono::milliseconds request_timeout = 2000ms) {
        ClientConfig c;
        c.endpoints = std::move(urls);
        c.request_timeout = request_timeout;
        c.connect_timeout = 500ms;
        EXPECT_EQ(pmd::io::etcd::validate(c), "");
        return std::make_unique<Client>(ioc_.get_executor(), c);
    }

    // Calls `start` with a callback that keeps its arguments, then runs the
    // io_context (bounded) until the callback ran.
    template <class... Args, class Start>
    std::tuple<Args...> await(Start start, std::chrono::milliseconds bound = 10000ms) {
        std::optional<std::tuple<Args...>> got;
        start([&got](Args... a) { got.emplace(std::move(a)...); });
        EXPECT_TRUE(run_until([&] { return got.has_value(); }, bound)) << "no answer in time";
        return got ? std::move(*got) : std::tuple<Args...>{};
    }

    // Synchronous wrappers around the client calls.
    struct Rev {
        Error e;
        std::int64_t rev = -1;
    };
    Rev put(Client& c, const std::string& k, const std::string& v, std::int64_t lease = 0) {
        auto [e, rev] = await<Error, std::int64_t>([&](auto cb) { c.put(k, v, lease, cb); });
        return {e, rev};
    }
    Rev del(Client& c, const std::string& k) {
        auto [e, rev] = await<Error, std::int64_t>([&](auto cb) { c.del(k, cb); });
        return {e, rev};
    }
    struct Range {
        Error e;
        std::vector<KeyValue> kvs;
        std::int64_t rev = -1;
    };
    Range range(Client& c, const std::string& prefix) {
        auto [e, kvs, rev] = await<Error, std::vector<KeyValue>, std::int64_t>(
            [&](auto cb) { c.range_prefix(prefix, cb); });
        return {e, kvs, rev};
    }
    struct Ttl {
        Error e;
        std::int64_t lease = 0;
        std::chrono::seconds ttl{-1};
    };
    Ttl grant(Client& c, std::chrono::seconds ttl) {
        auto [e, lease, t] =
            await<Error, std::int64_t, std::chrono::seconds>([&](auto cb) { c.grant(ttl, cb); });
        return {e, lease, t};
    }
    Ttl keepalive(Client& c, std::int64_t lease) {
        auto [e, t] = await<Error, std::chrono::seconds>([&](auto cb) { c.keepalive(lease, cb); });
        return {e, lease, t};
    }
    Error revoke(Client& c, std::int64_t lease) {
        return std::get<0>(await<Error>([&](auto cb) { c.revoke(lease, cb); }));
    }
    std::vector<pmd::io::etcd::EndpointStatus> status(Client& c) {
        return std::get<0>(
            await<std::vector<pmd::io::etcd::EndpointStatus>>([&](auto cb) { c.status(cb); }));
    }

    // What a watch delivered.
    struct Watched {
        std::vector<Event> events;
        std::vector<std::int64_t> batch_revisions;
        unsigned live = 0;  // empty batches: created, or progress
        std::optional<Error> end;
    };
    std::unique_ptr<pmd::io::etcd::Watch> watch(Client& c, const std::string& prefix,
                                                std::int64_t from, Watched& w) {
        return c.watch_prefix(
            prefix, from,
            [&w](std::vector<Event> evs, std::int64_t rev) {
                if (evs.empty()) {
                    ++w.live;
                    return;
                }
                w.batch_revisions.push_back(rev);
                for (auto& e : evs) {
                    w.events.push_back(std::move(e));
                }
            },
            [&w](Error e) { w.end = std::move(e); });
    }

    asio::io_context ioc_;
    asio::executor_work_guard<asio::io_context::executor_type> work_{ioc_.get_executor()};
};

std::string all_bytes() {
    std::string s;
    for (int i = 0; i < 256; ++i) {
        s.push_back(static_cast<char>(i));
    }
    return s;
}

TEST_F(etcd_client, PutRangeDeleteBinaryKeysAndValues) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    auto c = client(cluster.client_urls());

    const std::string bytes = all_bytes();
    const std::string key = "bin/" + bytes;
    const std::string value(bytes.rbegin(), bytes.rend());
    const auto p = put(*c, key, value);
    ASSERT_FALSE(p.e) << p.e.text;
    EXPECT_GT(p.rev, 1);

    // Prefix ends in 0xff: the range end carries into the byte before.
    ASSERT_FALSE(put(*c, std::string("ff\xff"), "1").e);
    ASSERT_FALSE(put(*c, std::string("ff\xff\xff"), "2").e);
    ASSERT_FALSE(put(*c, std::string("fg"), "3").e);
    ASSERT_FALSE(put(*c, std::string("ff"), "4").e);

    auto r = range(*c, "bin/");
    ASSERT_FALSE(r.e) << r.e.text;
    ASSERT_EQ(r.kvs.size(), 1U);
    EXPECT_EQ(r.kvs[0].key, key);
    EXPECT_EQ(r.kvs[0].value, value);
    EXPECT_EQ(r.kvs[0].mod_revision, p.rev);
    EXPECT_EQ(r.kvs[0].create_revision, p.rev);
    EXPECT_EQ(r.kvs[0].lease, 0);
    EXPECT_GE(r.rev, p.rev + 4);

    r = range(*c, std::string("ff\xff"));
    ASSERT_FALSE(r.e) << r.e.text;
    ASSERT_EQ(r.kvs.size(), 2U);
    EXPECT_EQ(r.kvs[0].key, std::string("ff\xff"));
    EXPECT_EQ(r.kvs[1].key, std::string("ff\xff\xff"));
    EXPECT_EQ(r.kvs[1].value, "2");

    // The empty prefix is every key, sorted.
    r = range(*c, "");
    ASSERT_FALSE(r.e) << r.e.text;
    ASSERT_EQ(r.kvs.size(), 5U);
    EXPECT_EQ(r.kvs[0].key, key);
    EXPECT_EQ(r.kvs[4].key, "fg");

    const auto d = del(*c, key);
    ASSERT_FALSE(d.e) << d.e.text;
    EXPECT_GT(d.rev, p.rev);
    r = range(*c, "bin/");
    ASSERT_FALSE(r.e) << r.e.text;
    EXPECT_TRUE(r.kvs.empty());
    EXPECT_EQ(r.rev, d.rev);
}

TEST_F(etcd_client, LeaseGrantKeepaliveRevoke) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    auto c = client(cluster.client_urls());

    const auto g = grant(*c, 30s);
    ASSERT_FALSE(g.e) << g.e.text;
    EXPECT_NE(g.lease, 0);
    EXPECT_EQ(g.ttl, 30s);
    ASSERT_FALSE(put(*c, "lease/a", "x", g.lease).e);
    auto r = range(*c, "lease/");
    ASSERT_EQ(r.kvs.size(), 1U);
    EXPECT_EQ(r.kvs[0].lease, g.lease);

    const auto k = keepalive(*c, g.lease);
    ASSERT_FALSE(k.e) << k.e.text;
    EXPECT_GT(k.ttl, 0s);
    EXPECT_LE(k.ttl, 30s);

    const auto rv = revoke(*c, g.lease);
    ASSERT_FALSE(rv) << rv.text;
    r = range(*c, "lease/");
    ASSERT_FALSE(r.e);
    EXPECT_TRUE(r.kvs.empty());

    const auto gone = keepalive(*c, g.lease);
    EXPECT_TRUE(gone.e.kind == Kind::lease_not_found || (!gone.e && gone.ttl == 0s)) << gone.e.text;
    const auto again = revoke(*c, g.lease);
    EXPECT_EQ(again.kind, Kind::lease_not_found) << again.text;
    // A put with a lease that does not exist is refused.
    EXPECT_EQ(put(*c, "lease/b", "x", g.lease).e.kind, Kind::lease_not_found);
}

TEST_F(etcd_client, LeaseNotKeptAliveExpires) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    auto c = client(cluster.client_urls());

    const auto g = grant(*c, 2s);
    ASSERT_FALSE(g.e) << g.e.text;
    ASSERT_FALSE(put(*c, "exp/a", "x", g.lease).e);

    // Poll the range (bounded): the key goes with the lease.
    bool gone = false;
    bool asking = false;
    asio::steady_timer tick(ioc_);
    std::function<void()> ask = [&] {
        asking = true;
        c->range_prefix("exp/", [&](Error e, std::vector<KeyValue> kvs, std::int64_t) {
            asking = false;
            gone = !e && kvs.empty();
            if (!gone) {
                tick.expires_after(100ms);
                tick.async_wait([&](auto) { ask(); });
            }
        });
    };
    ask();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(run_until([&] { return gone; }, 8000ms));
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 1s);

    const auto k = keepalive(*c, g.lease);
    EXPECT_TRUE(k.e.kind == Kind::lease_not_found || (!k.e && k.ttl == 0s)) << k.e.text;
}

TEST_F(etcd_client, WatchSeesPutsAndDeletesInOrder) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    auto c = client(cluster.client_urls());

    const auto r0 = range(*c, "w/");
    ASSERT_FALSE(r0.e);
    Watched w;
    auto handle = watch(*c, "w/", r0.rev + 1, w);

    const auto p1 = put(*c, "w/a", "1");
    const auto p2 = put(*c, "w/b", "2");
    ASSERT_FALSE(put(*c, "x/other", "3").e);  // outside the prefix
    const auto d1 = del(*c, "w/a");
    ASSERT_FALSE(p1.e || p2.e || d1.e);

    ASSERT_TRUE(run_until([&] { return w.events.size() >= 3 || w.end; }));
    ASSERT_FALSE(w.end) << w.end->text;
    ASSERT_EQ(w.events.size(), 3U);
    EXPECT_EQ(w.events[0].type, Event::Type::put);
    EXPECT_EQ(w.events[0].kv.key, "w/a");
    EXPECT_EQ(w.events[0].kv.value, "1");
    EXPECT_EQ(w.events[0].kv.mod_revision, p1.rev);
    EXPECT_EQ(w.events[1].kv.key, "w/b");
    EXPECT_EQ(w.events[1].kv.mod_revision, p2.rev);
    EXPECT_EQ(w.events[2].type, Event::Type::del);
    EXPECT_EQ(w.events[2].kv.key, "w/a");
    EXPECT_EQ(w.events[2].kv.mod_revision, d1.rev);
    EXPECT_EQ(w.batch_revisions.back(), d1.rev);
    EXPECT_GE(w.live, 1u) << "the watch's creation is reported as an empty batch";

    // After cancel() nothing more arrives and on_end is not called.
    handle->cancel();
    ASSERT_FALSE(put(*c, "w/c", "4").e);
    run_for(200ms);
    EXPECT_EQ(w.events.size(), 3U);
    EXPECT_FALSE(w.end);
}

TEST_F(etcd_client, WatchResumedFromLastRevisionMissesAndReplaysNothing) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    auto c = client(cluster.client_urls());

    const auto r0 = range(*c, "r/");
    ASSERT_FALSE(r0.e);
    Watched w1;
    auto h1 = watch(*c, "r/", r0.rev + 1, w1);
    ASSERT_FALSE(put(*c, "r/1", "a").e);
    ASSERT_TRUE(run_until([&] { return !w1.events.empty() || w1.end; }));
    ASSERT_EQ(w1.events.size(), 1U);
    const std::int64_t last = w1.batch_revisions.back();
    h1->cancel();

    // While no watch runs.
    const auto p2 = put(*c, "r/2", "b");
    const auto d1 = del(*c, "r/1");
    ASSERT_FALSE(p2.e || d1.e);

    Watched w2;
    auto h2 = watch(*c, "r/", last + 1, w2);
    ASSERT_TRUE(run_until([&] { return w2.events.size() >= 2 || w2.end; }));
    const auto p3 = put(*c, "r/3", "c");
    ASSERT_TRUE(run_until([&] { return w2.events.size() >= 3 || w2.end; }));
    run_for(100ms);
    ASSERT_FALSE(w2.end);
    ASSERT_EQ(w2.events.size(), 3U);
    EXPECT_EQ(w2.events[0].kv.key, "r/2");
    EXPECT_EQ(w2.events[0].kv.mod_revision, p2.rev);
    EXPECT_EQ(w2.events[1].type, Event::Type::del);
    EXPECT_EQ(w2.events[1].kv.mod_revision, d1.rev);
    EXPECT_EQ(w2.events[2].kv.key, "r/3");
    EXPECT_EQ(w2.events[2].kv.mod_revision, p3.rev);
}

TEST_F(etcd_client, WatchFromCompactedRevision) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    auto c = client(cluster.client_urls());

    const auto p1 = put(*c, "c/1", "a");
    ASSERT_FALSE(put(*c, "c/2", "b").e);
    const auto p3 = put(*c, "c/3", "c");
    ASSERT_FALSE(p1.e || p3.e);
    ASSERT_TRUE(cluster.compact(p3.rev));

    Watched w;
    auto h = watch(*c, "c/", p1.rev, w);
    ASSERT_TRUE(run_until([&] { return w.end.has_value(); }));
    EXPECT_EQ(w.end->kind, Kind::compacted) << w.end->text;
    EXPECT_EQ(w.end->compact_revision, p3.rev);
    EXPECT_TRUE(w.events.empty());

    // From the compact revision itself the watch works.
    Watched ok;
    auto h2 = watch(*c, "c/", p3.rev, ok);
    ASSERT_TRUE(run_until([&] { return !ok.events.empty() || ok.end; }));
    ASSERT_FALSE(ok.end);
    EXPECT_EQ(ok.events[0].kv.key, "c/3");
}

TEST_F(etcd_client, FailoverStatusAndAllDown) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(3);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    const auto urls = cluster.client_urls();
    auto c = client(urls);
    EXPECT_EQ(c->current_endpoint(), urls[0]);
    ASSERT_FALSE(put(*c, "f/0", "x").e);

    auto st = status(*c);
    ASSERT_EQ(st.size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(st[i].endpoint, urls[i]);
        EXPECT_TRUE(st[i].healthy) << st[i].error;
        EXPECT_FALSE(st[i].version.empty());
        EXPECT_NE(st[i].member_id, 0U);
        EXPECT_EQ(st[i].leader, st[0].leader);
    }
    EXPECT_NE(st[0].member_id, st[1].member_id);

    cluster.kill(0);
    const auto p = put(*c, "f/1", "y");
    ASSERT_FALSE(p.e) << p.e.text;
    EXPECT_NE(c->current_endpoint(), urls[0]);
    const auto r = range(*c, "f/");
    ASSERT_FALSE(r.e) << r.e.text;
    EXPECT_EQ(r.kvs.size(), 2U);

    st = status(*c);
    ASSERT_EQ(st.size(), 3U);
    EXPECT_FALSE(st[0].healthy);
    EXPECT_NE(st[0].error.find(urls[0]), std::string::npos) << st[0].error;
    EXPECT_TRUE(st[1].healthy || st[2].healthy);

    ASSERT_TRUE(cluster.restart(0));
    st = status(*c);
    EXPECT_TRUE(st[0].healthy) << st[0].error;

    for (std::size_t i = 0; i < 3; ++i) {
        cluster.kill(i);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto down = put(*c, "f/2", "z");
    EXPECT_EQ(down.e.kind, Kind::unavailable) << down.e.text;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
    st = status(*c);
    for (const auto& s : st) {
        EXPECT_FALSE(s.healthy);
    }
}

TEST_F(etcd_client, HttpsWithClientCertificate) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1, true);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    const auto urls = cluster.client_urls();
    ASSERT_TRUE(urls[0].starts_with("https://"));
    const auto tls_client = [&](std::optional<pmd::io::etcd::TlsConfig> tls) {
        ClientConfig cfg;
        cfg.endpoints = urls;
        cfg.tls = std::move(tls);
        EXPECT_EQ(pmd::io::etcd::validate(cfg), "");
        return std::make_unique<Client>(ioc_.get_executor(), cfg);
    };

    auto c = tls_client(pmd::io::etcd::TlsConfig{cluster.ca_file(), cluster.client_cert_file(),
                                                 cluster.client_key_file()});
    const auto p = put(*c, "tls/a", "1");
    ASSERT_FALSE(p.e) << p.e.text;
    Watched w;
    auto h = watch(*c, "tls/", p.rev, w);
    ASSERT_TRUE(run_until([&] { return !w.events.empty() || w.end; }));
    ASSERT_FALSE(w.end) << w.end->text;
    EXPECT_EQ(w.events[0].kv.key, "tls/a");

    // The server's certificate is not trusted by the system store.
    auto untrusted = tls_client(std::nullopt);
    const auto u = put(*untrusted, "tls/b", "2");
    EXPECT_EQ(u.e.kind, Kind::unavailable) << u.e.text;
    EXPECT_NE(u.e.text.find("TLS"), std::string::npos) << u.e.text;

    // Without a client certificate the member refuses the handshake.
    auto anonymous = tls_client(pmd::io::etcd::TlsConfig{cluster.ca_file(), "", ""});
    EXPECT_TRUE(put(*anonymous, "tls/c", "3").e);

    // A CA file that does not exist: every https request fails, naming it.
    auto broken = tls_client(pmd::io::etcd::TlsConfig{"/nonexistent/ca.pem", "", ""});
    const auto b = put(*broken, "tls/d", "4");
    EXPECT_EQ(b.e.kind, Kind::unavailable);
    EXPECT_NE(b.e.text.find("TLS setup"), std::string::npos) << b.e.text;
}

// A loopback HTTP server that answers every connection the same way.
class FakeServer {
  public:
    enum class Mode {
        garbage,
        huge,
        huge_chunked,
        http500,
        silent,
        not_json,
        bad_base64,
        watch_garbage,
        watch_long_line,
        watch_ends
    };
    FakeServer(asio::io_context& ioc, Mode mode)
        : acceptor_(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), mode_(mode) {
        accept();
    }
    std::string url() const {
        return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    }
    int connections() const { return connections_; }

  private:
    struct Conn {
        explicit Conn(tcp::socket s) : sock(std::move(s)) {}
        tcp::socket sock;
        asio::streambuf in;
        std::string out;
    };

    void accept() {
        acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
            if (ec) {
                return;
            }
            ++connections_;
            auto c = std::make_shared<Conn>(std::move(s));
            conns_.push_back(c);
            asio::async_read_until(c->sock, c->in, "\r\n\r\n",
                                   [this, c](boost::system::error_code e, std::size_t) {
                                       if (!e) {
                                           answer(c);
                                       }
                                   });
            accept();
        });
    }

    static std::string ok(const std::string& body) {
        return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body;
    }
    static std::string chunk(const std::string& data) {
        char len[32];
        std::snprintf(len, sizeof len, "%zx\r\n", data.size());
        return len + data + "\r\n";
    }
    static std::string stream_head() {
        return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n";
    }

    void answer(const std::shared_ptr<Conn>& c) {
        const std::string created = R"({"result":{"header":{"revision":"5"},"created":true}})";
        switch (mode_) {
            case Mode::garbage:
                c->out = "\x01\x02 this is not HTTP at all\r\n\r\n";
                break;
            case Mode::huge:
                c->out = "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n{";
                break;
            case Mode::huge_chunked:  // no length announced: the limit applies while reading
                c->out = stream_head();
                for (int i = 0; i < 24; ++i) {
                    c->out += chunk(std::string(100 * 1024, ' '));
                }
                break;
            case Mode::http500:
                c->out = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}";
                break;
            case Mode::silent:
                return;  // holds the connection, never answers
            case Mode::not_json:
                c->out = ok("<html>hello</html>");
                break;
            case Mode::bad_base64:
                c->out = ok(R"({"header":{"revision":"7"},"kvs":[{"key":"!!!notbase64"}]})");
                break;
            case Mode::watch_garbage:
                c->out = stream_head() + chunk(created + "\n") + chunk("{{{ nope\n");
                break;
            case Mode::watch_long_line:
                c->out = stream_head() + chunk(created + "\n");
                for (int i = 0; i < 17; ++i) {  // beyond the 16 MiB bound
                    c->out += chunk(std::string(1024 * 1024, 'x'));
                }
                break;
            case Mode::watch_ends:
                c->out = stream_head() + chunk(created + "\n") + "0\r\n\r\n";
                break;
        }
        asio::async_write(c->sock, asio::buffer(c->out),
                          [c](boost::system::error_code, std::size_t) {
                              boost::system::error_code ignored;
                              c->sock.shutdown(tcp::socket::shutdown_send, ignored);
                          });
    }

    tcp::acceptor acceptor_;
    Mode mode_;
    int connections_ = 0;
    std::vector<std::shared_ptr<Conn>> conns_;
};

TEST_F(etcd_client, HostileServers) {
    using Mode = FakeServer::Mode;
    const auto expect_put = [&](Mode mode, Kind kind, std::chrono::milliseconds timeout = 2000ms) {
        FakeServer s(ioc_, mode);
        auto c = client({s.url()}, timeout);
        const auto r = put(*c, "k", "v");
        EXPECT_EQ(r.e.kind, kind) << static_cast<int>(mode) << ": " << r.e.text;
        EXPECT_NE(r.e.text.find(s.url()), std::string::npos) << r.e.text;
    };
    expect_put(Mode::garbage, Kind::bad_reply);
    expect_put(Mode::huge, Kind::bad_reply);
    expect_put(Mode::huge_chunked, Kind::bad_reply);
    expect_put(Mode::http500, Kind::unavailable);
    expect_put(Mode::not_json, Kind::bad_reply);
    {
        const auto t0 = std::chrono::steady_clock::now();
        expect_put(Mode::silent, Kind::unavailable, 300ms);
        const auto took = std::chrono::steady_clock::now() - t0;
        EXPECT_GE(took, 300ms);
        EXPECT_LT(took, 2s);
    }
    {
        FakeServer s(ioc_, Mode::bad_base64);
        auto c = client({s.url()});
        const auto r = range(*c, "p/");
        EXPECT_EQ(r.e.kind, Kind::bad_reply) << r.e.text;
        EXPECT_TRUE(r.kvs.empty());
    }
    const auto expect_watch_end = [&](Mode mode, Kind kind) {
        FakeServer s(ioc_, mode);
        auto c = client({s.url()});
        Watched w;
        auto h = watch(*c, "p/", 0, w);
        // 17 MiB of a too-long line takes a while under the sanitizers.
        ASSERT_TRUE(run_until([&] { return w.end.has_value(); }, 60'000ms));
        EXPECT_EQ(w.end->kind, kind) << static_cast<int>(mode) << ": " << w.end->text;
        EXPECT_TRUE(w.events.empty());
    };
    expect_watch_end(Mode::watch_garbage, Kind::bad_reply);
    expect_watch_end(Mode::watch_long_line, Kind::bad_reply);
    expect_watch_end(Mode::watch_ends, Kind::broken);
    expect_watch_end(Mode::garbage, Kind::bad_reply);
    expect_watch_end(Mode::http500, Kind::unavailable);
}

TEST_F(etcd_client, FailsOverFrom5xxAndSilentEndpoints) {
    SDPPM_REQUIRE_ETCD();
    pmtest::EtcdCluster cluster(1);
    ASSERT_TRUE(cluster.ok()) << cluster.error();
    FakeServer bad(ioc_, FakeServer::Mode::http500);
    FakeServer silent(ioc_, FakeServer::Mode::silent);
    auto c = client({bad.url(), silent.url(), cluster.client_urls()[0]}, 300ms);
    const auto p = put(*c, "k", "v");
    ASSERT_FALSE(p.e) << p.e.text;
    EXPECT_EQ(c->current_endpoint(), cluster.client_urls()[0]);
    EXPECT_EQ(bad.connections(), 1);
    EXPECT_EQ(silent.connections(), 1);
    // Later requests go straight to the endpoint that answered.
    ASSERT_FALSE(range(*c, "k").e);
    EXPECT_EQ(bad.connections(), 1);
}

TEST_F(etcd_client, DestroyingTheClientRunsNoCallback) {
    FakeServer silent(ioc_, FakeServer::Mode::silent);
    int callbacks = 0;
    const auto issue = [&](Client& c) {
        c.put("k", "v", 0, [&](Error, std::int64_t) { ++callbacks; });
        c.range_prefix("k", [&](Error, std::vector<KeyValue>, std::int64_t) { ++callbacks; });
        c.grant(5s, [&](Error, std::int64_t, std::chrono::seconds) { ++callbacks; });
        c.status([&](std::vector<pmd::io::etcd::EndpointStatus>) { ++callbacks; });
        return c.watch_prefix(
            "k", 0, [&](std::vector<Event>, std::int64_t) { ++callbacks; },
            [&](Error) { ++callbacks; });
    };
    {
        // Destroyed before anything ran.
        auto c = client({silent.url()}, 300ms);
        auto w = issue(*c);
        c.reset();
    }
    {
        // Destroyed with the requests on the wire; the watch handle outlives it.
        auto c = client({silent.url()}, 300ms);
        auto w = issue(*c);
        run_until([&] { return silent.connections() >= 5; }, 2000ms);
        c.reset();
        run_for(600ms);  // past every request timeout
        w->cancel();
    }
    EXPECT_GE(silent.connections(), 5);
    run_for(100ms);
    EXPECT_EQ(callbacks, 0);

    // Destroyed by the first callback that runs: the other one never runs.
    FakeServer quick(ioc_, FakeServer::Mode::not_json);
    auto c = client({quick.url()});
    c->put("k", "v", 0, [&](Error, std::int64_t) {
        ++callbacks;
        c.reset();
    });
    c->del("k", [&](Error, std::int64_t) {
        ++callbacks;
        c.reset();
    });
    ASSERT_TRUE(run_until([&] { return callbacks > 0; }));
    run_for(200ms);
    EXPECT_EQ(callbacks, 1);
}

TEST(etcd_client_validate, Endpoints) {
    using pmd::io::etcd::validate;
    ClientConfig c;
    EXPECT_NE(validate(c), "");
    for (const char* good : {"http://127.0.0.1:2379", "https://etcd.example:2379",
                             "http://[::1]:2379", "https://[fd00::1]:65535"}) {
        c.endpoints = {good};
        EXPECT_EQ(validate(c), "") << good;
    }
    for (const char* bad :
         {"127.0.0.1:2379", "http://127.0.0.1", "http://:2379", "http://h:0", "http://h:65536",
          "http://h:23x", "ftp://h:1", "http://[::1:2379", "http://h:2379/path", "http://[]:1"}) {
        c.endpoints = {"http://127.0.0.1:2379", bad};
        const auto e = validate(c);
        EXPECT_NE(e.find(bad), std::string::npos) << bad << " -> " << e;
    }
}

}  // namespace
