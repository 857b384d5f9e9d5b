// SPDX-License-Identifier: Apache-2.0
// Prometheus text exposition (format 0.0.4) over HTTP/1.1 with Boost.Beast:
// GET /metrics answers the text produced by the (asynchronous) callback; any other path is
// 404, any other method 405. Bounded: kMaxMetricsConnections at once,
// requests of at most 8 KiB, kMetricsTimeout per connection; one request per
// connection (the answer says Connection: close).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pmclient/address.hpp"

namespace pmd::io {

inline constexpr std::size_t kMaxMetricsConnections = 16;
inline constexpr std::chrono::seconds kMetricsTimeout{10};

class MetricsServer {
  public:
    // Produces the text and hands it to the callback, now or later (on the
    // io_context's thread); the connection waits meanwhile.
    using Render = std::function<void(std::function<void(std::string)>)>;
    MetricsServer(boost::asio::io_context& io, Render render);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    std::optional<std::string> bind(const pm::Endpoint& ep);
    void start();
    void stop();
    pm::Endpoint endpoint() const;

    struct Session;

  private:
    void accept();

    boost::asio::io_context& io_;
    Render render_;
    boost::asio::ip::tcp::acceptor acceptor_;
    std::shared_ptr<std::size_t> active_;  // live sessions
    std::vector<std::weak_ptr<Session>> sessions_;
    bool stopped_ = false;
};

}  // namespace pmd::io
