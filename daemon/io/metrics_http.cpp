// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/metrics_http.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "daemon/io/log.hpp"

namespace pmd::io {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct MetricsServer::Session : std::enable_shared_from_this<Session> {
    Session(tcp::socket s, Render r, std::shared_ptr<std::size_t> a)
        : stream(std::move(s)), render(std::move(r)), active(std::move(a)) {
        ++*active;
    }
    ~Session() { --*active; }

    void start() {
        parser.emplace();
        parser->header_limit(8 * 1024);
        parser->body_limit(1024);
        stream.expires_after(kMetricsTimeout);
        http::async_read(
            stream, buffer, *parser,
            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
    }

    void on_read(beast::error_code ec) {
        if (ec) {
            beast::error_code ignored;
            stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
            return;
        }
        const auto& req = parser->get();
        response.version(req.version());
        response.keep_alive(false);
        response.set(http::field::server, "sdp-pmd");
        std::string target(req.target());
        if (auto q = target.find('?'); q != std::string::npos) {
            target.resize(q);
        }
        if (target != "/metrics") {
            response.result(http::status::not_found);
            response.set(http::field::content_type, "text/plain; charset=utf-8");
            response.body() = "not found; try /metrics\n";
        } else if (req.method() != http::verb::get && req.method() != http::verb::head) {
            response.result(http::status::method_not_allowed);
            response.set(http::field::allow, "GET, HEAD");
            response.set(http::field::content_type, "text/plain; charset=utf-8");
            response.body() = "method not allowed\n";
        } else {
            response.result(http::status::ok);
            response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
            if (req.method() == http::verb::get) {
                render([self = shared_from_this()](std::string text) {
                    self->response.body() = std::move(text);
                    self->send();
                });
                return;
            }
        }
        send();
    }

    void send() {
        response.prepare_payload();
        http::async_write(stream, response,
                          [self = shared_from_this()](beast::error_code, std::size_t) {
                              beast::error_code ignored;
                              self->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                          });
    }

    beast::tcp_stream stream;
    Render render;
    std::shared_ptr<std::size_t> active;
    beast::flat_buffer buffer{16 * 1024};
    std::optional<http::request_parser<http::string_body>> parser;
    http::response<http::string_body> response;
};

MetricsServer::MetricsServer(asio::io_context& io, Render render)
    : io_(io),
      render_(std::move(render)),
      acceptor_(io),
      active_(std::make_shared<std::size_t>(0)) {}

MetricsServer::~MetricsServer() {
    stop();
}

std::optional<std::string> MetricsServer::bind(const pm::Endpoint& ep) {
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(ep.address.to_string(), ec);
    if (ec) {
        return "bad address " + ep.to_string();
    }
    const tcp::endpoint endpoint(addr, ep.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) {
        acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
        if (endpoint.protocol() == tcp::v6()) {
            acceptor_.set_option(asio::ip::v6_only(true), ec);
        }
        acceptor_.bind(endpoint, ec);
    }
    if (!ec) {
        acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        return "cannot listen on TCP " + ep.to_string() + ": " + ec.message();
    }
    return std::nullopt;
}

pm::Endpoint MetricsServer::endpoint() const {
    boost::system::error_code ec;
    auto ep = acceptor_.local_endpoint(ec);
    if (ec) {
        return {};
    }
    auto parsed = pm::IpAddress::parse(ep.address().to_string());
    return pm::Endpoint{parsed ? *parsed : pm::IpAddress{}, ep.port()};
}

void MetricsServer::start() {
    accept();
}

void MetricsServer::accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket s) {
        if (stopped_ || ec == asio::error::operation_aborted) {
            return;
        }
        if (!ec) {
            if (*active_ >= kMaxMetricsConnections) {
                boost::system::error_code ignored;
                s.close(ignored);
                log::logger().limited(LogLevel::warning, "metrics_busy", [] {
                    return "metrics: too many connections, refusing another";
                });
            } else {
                std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
                auto session = std::make_shared<Session>(std::move(s), render_, active_);
                sessions_.push_back(session);
                session->start();
            }
        }
        accept();
    });
}

void MetricsServer::stop() {
    if (stopped_) {
        return;
    }
    stopped_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    for (auto& w : sessions_) {
        if (auto s = w.lock()) {
            s->stream.close();
        }
    }
    sessions_.clear();
}

}  // namespace pmd::io
