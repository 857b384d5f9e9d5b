// SPDX-License-Identifier: Apache-2.0
// An etcd v3 client over etcd's gRPC JSON gateway (HTTP/1.1 + JSON, the
// /v3/... endpoints of etcd >= 3.4) with Boost.Beast, for the `etcd`
// registry backend (docs/cluster.md). Only what the backend needs: leases
// (grant, keep alive, revoke), put/delete of single keys, a prefix range
// (snapshot with its revision), a prefix watch resumed from a revision, and
// each endpoint's status for `sdp-pmctl cluster`.
//
// Threading: every call and every callback runs on the executor given to
// the constructor (the daemon's main thread). Calls never block.
//
// Endpoints: "http://host:port" or "https://host:port" (TLS with the
// configured CA, and a client certificate when given). A request goes to the
// current endpoint; when it fails to connect, times out or gets a 5xx, the
// client moves to the next endpoint in the list and retries there, until
// every endpoint was tried once in that request; then the callback gets the
// error. Keys and values are raw bytes (the gateway's base64 is internal).
//
// Watch: one streaming HTTP request (POST /v3/watch) whose newline-delimited
// JSON results are parsed as they arrive. On a broken stream the watcher
// reports `broken` and stops; the caller re-creates it from the last seen
// revision + 1 (so no event is missed or replayed). A start revision older
// than the compacted one yields `compacted` with the compact revision: the
// caller takes a fresh snapshot.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace pmd::io::etcd {

struct TlsConfig {
    std::string ca_file;    // "" : system default trust store
    std::string cert_file;  // client certificate ("" : none)
    std::string key_file;
};

struct ClientConfig {
    std::vector<std::string> endpoints;  // "http://127.0.0.1:2379", "https://..."
    std::optional<TlsConfig> tls;        // used for https:// endpoints
    std::chrono::milliseconds request_timeout{2000};
    std::chrono::milliseconds connect_timeout{1000};
};

// Returns an error text for a malformed endpoint list, else "".
std::string validate(const ClientConfig& c);

struct KeyValue {
    std::string key;
    std::string value;
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
    std::int64_t lease = 0;
};

struct Event {
    enum class Type : std::uint8_t { put, del };
    Type type = Type::put;
    KeyValue kv;  // del: key and mod_revision only
};

struct Error {
    enum class Kind : std::uint8_t {
        none,
        unavailable,  // no endpoint answered (connect, timeout, 5xx) in this request
        rejected,     // etcd answered with an error (4xx, gRPC error in the body)
        lease_not_found,
        compacted,  // watch: start revision compacted away
        broken,     // watch: the stream ended or failed
        bad_reply,  // unparseable answer
    };
    Kind kind = Kind::none;
    std::string text;                   // human-readable, names the endpoint
    std::int64_t compact_revision = 0;  // compacted
    explicit operator bool() const { return kind != Kind::none; }
};

struct EndpointStatus {
    std::string endpoint;
    bool healthy = false;
    std::string version;  // etcd server version
    std::uint64_t member_id = 0;
    std::uint64_t leader = 0;
    std::int64_t revision = 0;
    std::string error;  // when !healthy
    std::chrono::milliseconds latency{0};
};

class Watch {
  public:
    virtual ~Watch() = default;
    // Stops the stream; no callback runs after cancel() returns.
    virtual void cancel() = 0;
};

class Client {
  public:
    Client(boost::asio::any_io_executor ex, ClientConfig config);
    ~Client();  // cancels everything in flight; no callback runs afterwards
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // Every callback: (error, result...). `revision` is the header revision.
    void grant(std::chrono::seconds ttl,
               std::function<void(Error, std::int64_t lease, std::chrono::seconds ttl)> done);
    // One keep-alive round; ttl 0 (or lease_not_found) means the lease is gone.
    void keepalive(std::int64_t lease, std::function<void(Error, std::chrono::seconds ttl)> done);
    void revoke(std::int64_t lease, std::function<void(Error)> done);
    // lease 0: no lease.
    void put(const std::string& key, const std::string& value, std::int64_t lease,
             std::function<void(Error, std::int64_t revision)> done);
    void del(const std::string& key, std::function<void(Error, std::int64_t revision)> done);
    // Every key under `prefix`, sorted by key, and the revision they are at.
    void range_prefix(
        const std::string& prefix,
        std::function<void(Error, std::vector<KeyValue>, std::int64_t revision)> done);
    // Events on keys under `prefix` from `start_revision` on (0: from now).
    // `on_events` gets each batch with the revision it brings the caller to
    // (the last event's mod_revision), and an empty batch (revision: the
    // header's, not to be resumed from) when the watch is created or etcd
    // reports progress: the stream is live;
    // `on_end` is called once when the watch stops by itself (never after cancel()).
    std::unique_ptr<Watch> watch_prefix(
        const std::string& prefix, std::int64_t start_revision,
        std::function<void(std::vector<Event>, std::int64_t revision)> on_events,
        std::function<void(Error)> on_end);
    // Status of every endpoint (asked in parallel), in configuration order.
    void status(std::function<void(std::vector<EndpointStatus>)> done);

    // The endpoint requests currently go to.
    const std::string& current_endpoint() const;

    struct Impl;

  private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace pmd::io::etcd
