// SPDX-License-Identifier: Apache-2.0
// The etcd v3 client over the gRPC JSON gateway (see etcd_client.hpp). Every
// request is one `Op`: a fresh connection (TLS for https endpoints) to the
// current endpoint, one POST, one bounded answer; on a connect failure, a
// timeout, a transport error or a 5xx the op moves on to the next endpoint
// until each was tried once. The watch is an `Op` whose answer is a stream of
// newline-delimited JSON objects read chunk by chunk. Every op holds the
// shared `Impl`; the client's destructor marks it closed and aborts every op
// still running, so no callback runs afterwards.
#include "daemon/io/etcd_client.hpp"

#include "daemon/core/cluster.hpp"

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace pmd::io::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

namespace {

constexpr std::size_t kMaxBody = 64U * 1024U * 1024U;  // a whole range answer
constexpr std::size_t kMaxSmallBody = 1024U * 1024U;   // every other answer
// One watch result: a replica's lease expiring deletes all its keys (up to
// kMaxRegistrations) in one revision, sent as one result.
constexpr std::size_t kMaxWatchLine = 16U * 1024U * 1024U;
constexpr std::uint32_t kMaxHeader = 64U * 1024U;

struct Endpoint {
    std::string url;
    bool tls = false;
    std::string host;  // without brackets
    std::string port;
    std::string host_header;  // host:port as in the URL
};

// Parses "http://host:port" / "https://[v6]:port" with the parser the
// configuration uses (cluster::parse_endpoint_url); nullopt when malformed.
std::optional<Endpoint> parse_endpoint(const std::string& url) {
    const auto parsed = pmd::cluster::parse_endpoint_url(url);
    if (!parsed) {
        return std::nullopt;
    }
    Endpoint e;
    e.url = url;
    e.tls = parsed->tls;
    e.host = parsed->host;
    e.port = std::to_string(parsed->port);
    const bool v6 = parsed->host.find(':') != std::string::npos;
    e.host_header = (v6 ? "[" + parsed->host + "]" : parsed->host) + ":" + e.port;
    return e;
}

std::string b64(const std::string& s) {
    std::string out(beast::detail::base64::encoded_size(s.size()), '\0');
    out.resize(beast::detail::base64::encode(out.data(), s.data(), s.size()));
    return out;
}

struct BadJson : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string unb64(const std::string& s) {
    std::string out(beast::detail::base64::decoded_size(s.size()), '\0');
    const auto [written, read] = beast::detail::base64::decode(out.data(), s.data(), s.size());
    if (s.size() % 4 != 0 || s.size() - read > 2 ||
        s.find_first_not_of('=', read) != std::string::npos) {
        throw BadJson("bad base64");
    }
    out.resize(written);
    return out;
}

// The gateway writes int64 as strings and omits zero values.
template <class Int>
Int number(const json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return 0;
    }
    if (it->is_number_integer()) {
        return it->get<Int>();
    }
    if (it->is_string()) {
        const auto& s = it->get_ref<const std::string&>();
        Int v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec == std::errc{} && r.ptr == s.data() + s.size()) {
            return v;
        }
    }
    throw BadJson(std::string("bad number in \"") + key + "\"");
}

std::string bytes_field(const json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return {};
    }
    if (!it->is_string()) {
        throw BadJson(std::string("bad bytes in \"") + key + "\"");
    }
    return unb64(it->get_ref<const std::string&>());
}

const json& object_field(const json& j, const char* key) {
    static const json empty = json::object();
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return empty;
    }
    if (!it->is_object()) {
        throw BadJson(std::string("\"") + key + "\" is not an object");
    }
    return *it;
}

const json& array_field(const json& j, const char* key) {
    static const json empty = json::array();
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return empty;
    }
    if (!it->is_array()) {
        throw BadJson(std::string("\"") + key + "\" is not an array");
    }
    return *it;
}

KeyValue key_value(const json& j) {
    if (!j.is_object()) {
        throw BadJson("kv is not an object");
    }
    KeyValue kv;
    kv.key = bytes_field(j, "key");
    kv.value = bytes_field(j, "value");
    kv.create_revision = number<std::int64_t>(j, "create_revision");
    kv.mod_revision = number<std::int64_t>(j, "mod_revision");
    kv.lease = number<std::int64_t>(j, "lease");
    return kv;
}

std::int64_t header_revision(const json& j) {
    return number<std::int64_t>(object_field(j, "header"), "revision");
}

// The gRPC error carried by an answer ({"error":..,"message":..} from a unary
// call, {"error":{"message":..}} from a stream), or nullopt.
std::optional<Error> grpc_error(const json& j, const std::string& where) {
    if (!j.is_object() || !j.contains("error")) {
        return std::nullopt;
    }
    std::string message;
    const auto& e = j["error"];
    if (j.contains("message") && j["message"].is_string()) {
        message = j["message"].get<std::string>();
    } else if (e.is_object() && e.contains("message") && e["message"].is_string()) {
        message = e["message"].get<std::string>();
    } else if (e.is_string()) {
        message = e.get<std::string>();
    } else {
        message = "unknown error";
    }
    Error err;
    err.kind = message.find("requested lease not found") != std::string::npos
                   ? Error::Kind::lease_not_found
                   : Error::Kind::rejected;
    err.text = where + ": " + message;
    return err;
}

// An HTTP parse error (not a closed or truncated connection): the peer is not
// a sane HTTP server.
bool malformed_http(const beast::error_code& ec) {
    return ec && ec.category() == beast::error_code(http::error::bad_version).category() &&
           ec != http::error::end_of_stream && ec != http::error::partial_message;
}

Error make_error(Error::Kind kind, std::string text) {
    Error e;
    e.kind = kind;
    e.text = std::move(text);
    return e;
}

// The first key after every key that starts with `prefix`.
std::string prefix_end(const std::string& prefix) {
    std::string end = prefix;
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) {
        end.pop_back();
    }
    if (end.empty()) {
        return std::string(1, '\0');  // every key
    }
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    return end;
}

json range_request(const std::string& prefix) {
    return json{{"key", b64(prefix.empty() ? std::string(1, '\0') : prefix)},
                {"range_end", b64(prefix_end(prefix))}};
}

}  // namespace

class Op;

struct Client::Impl {
    Impl(asio::any_io_executor e, ClientConfig c) : ex(std::move(e)), config(std::move(c)) {
        for (const auto& url : config.endpoints) {
            if (auto ep = parse_endpoint(url)) {
                endpoints.push_back(std::move(*ep));
            }
        }
        const bool any_tls = std::any_of(endpoints.begin(), endpoints.end(),
                                         [](const Endpoint& ep) { return ep.tls; });
        if (any_tls) {
            setup_tls();
        }
    }

    void setup_tls() {
        std::string step = "context";
        try {
            tls.emplace(ssl::context::tls_client);
            tls->set_verify_mode(ssl::verify_peer);
            if (config.tls && !config.tls->ca_file.empty()) {
                step = "CA file " + config.tls->ca_file;
                tls->load_verify_file(config.tls->ca_file);
            } else {
                step = "system trust store";
                tls->set_default_verify_paths();
            }
            if (config.tls && !config.tls->cert_file.empty()) {
                step = "certificate " + config.tls->cert_file;
                tls->use_certificate_chain_file(config.tls->cert_file);
                step = "key " + config.tls->key_file;
                tls->use_private_key_file(config.tls->key_file, ssl::context::pem);
            }
        } catch (const std::exception& e) {
            tls.reset();
            tls_error = "TLS setup failed (" + step + "): " + e.what();
        }
    }

    void track(const std::shared_ptr<Op>& op) {
        std::erase_if(ops, [](const std::weak_ptr<Op>& w) { return w.expired(); });
        ops.push_back(op);
    }
    void close();

    asio::any_io_executor ex;
    ClientConfig config;
    std::vector<Endpoint> endpoints;
    std::size_t current = 0;
    std::optional<ssl::context> tls;
    std::string tls_error;
    bool closed = false;
    std::vector<std::weak_ptr<Op>> ops;
};

// One request with failover over the endpoints: connect (with TLS), write the
// POST, then `read_answer()` (subclass) reads. A transport failure in any step
// goes to `retry()`; the final outcome goes through `finish()` exactly once
// unless the op was aborted.
class Op : public std::enable_shared_from_this<Op> {
  public:
    Op(std::shared_ptr<Client::Impl> impl, std::string target, std::string body,
       std::optional<std::size_t> only_endpoint)
        : impl_(std::move(impl)),
          target_(target),
          resolver_(impl_->ex),
          sock_(impl_->ex),
          timer_(impl_->ex),
          only_(only_endpoint) {
        req_.method(http::verb::post);
        req_.target(target);
        req_.version(11);
        req_.set(http::field::content_type, "application/json");
        req_.keep_alive(false);  // one connection per attempt
        req_.body() = std::move(body);
    }
    virtual ~Op() = default;
    Op(const Op&) = delete;
    Op& operator=(const Op&) = delete;

    // The first attempt runs from the executor: no callback runs inside the call.
    void start() {
        impl_->track(shared_from_this());
        asio::post(impl_->ex, [self = shared_from_this()] {
            if (self->finished()) {
                return;
            }
            if (self->impl_->endpoints.empty()) {
                self->failed(make_error(Error::Kind::unavailable, "no valid etcd endpoint"));
                return;
            }
            self->ep_ = self->only_ ? *self->only_ : self->impl_->current;
            self->attempt();
        });
    }

    // No callback after this; everything in flight is cancelled.
    void abort() {
        finished_ = true;
        stop_io();
    }

  protected:
    virtual void read_answer() = 0;
    virtual void failed(Error e) = 0;

    const Endpoint& endpoint() const { return impl_->endpoints[ep_]; }
    bool finished() const { return finished_ || impl_->closed; }

    // Marks the op done; true when the caller may run the user's callback.
    bool finish() {
        if (finished()) {
            return false;
        }
        finished_ = true;
        stop_io();
        return true;
    }

    template <class F>
    void with_stream(F&& f) {
        if (tls_) {
            f(*tls_);
        } else {
            f(sock_);
        }
    }

    // Runs `fn(ec)` for the current attempt only; a timeout turns into an error.
    template <class F>
    auto step(F fn) {
        return [self = shared_from_this(), gen = gen_, fn = std::move(fn)](beast::error_code ec,
                                                                           auto&&...) mutable {
            if (self->finished() || gen != self->gen_) {
                return;
            }
            if (self->timed_out_) {
                ec = asio::error::timed_out;
            }
            fn(ec);
        };
    }

    void arm(std::chrono::milliseconds d) {
        timed_out_ = false;
        timer_.expires_after(d);
        timer_.async_wait([self = shared_from_this(), seq = ++arm_seq_](beast::error_code ec) {
            if (ec || self->finished() || seq != self->arm_seq_) {
                return;
            }
            self->timed_out_ = true;
            self->close_socket();
        });
    }
    void disarm() {
        ++arm_seq_;
        timer_.cancel();
    }

    // A transport failure at the current endpoint: the next one, or give up.
    void retry(const std::string& what) {
        if (finished()) {
            return;
        }
        last_error_ = endpoint().url + ": " + what;
        ++tried_;
        if (!only_ && impl_->current == ep_) {
            impl_->current = (ep_ + 1) % impl_->endpoints.size();
        }
        if (only_ || tried_ >= impl_->endpoints.size()) {
            failed(make_error(Error::Kind::unavailable, last_error_));
            return;
        }
        ep_ = (ep_ + 1) % impl_->endpoints.size();
        attempt();
    }

    // The answer came from the current endpoint: requests go there from now on.
    void answered() {
        if (!only_) {
            impl_->current = ep_;
        }
    }

    std::shared_ptr<Client::Impl> impl_;
    std::string target_;
    beast::flat_buffer buf_;

  private:
    void attempt() {
        stop_io();
        ++gen_;
        tls_.reset();
        buf_.clear();
        if (endpoint().tls && !impl_->tls) {
            failed(make_error(Error::Kind::unavailable, endpoint().url + ": " + impl_->tls_error));
            return;
        }
        arm(impl_->config.connect_timeout);
        resolver_.async_resolve(endpoint().host, endpoint().port,
                                [self = shared_from_this(), gen = gen_](
                                    beast::error_code ec, tcp::resolver::results_type r) {
                                    if (self->finished() || gen != self->gen_) {
                                        return;
                                    }
                                    if (self->timed_out_) {
                                        ec = asio::error::timed_out;
                                    }
                                    if (ec) {
                                        self->retry("resolve: " + ec.message());
                                        return;
                                    }
                                    asio::async_connect(
                                        self->sock_, r, self->step([self](beast::error_code ec2) {
                                            if (ec2) {
                                                self->retry("connect: " + ec2.message());
                                                return;
                                            }
                                            self->connected();
                                        }));
                                });
    }

    void connected() {
        beast::error_code ignored;
        sock_.set_option(tcp::no_delay(true), ignored);
        if (!endpoint().tls) {
            send();
            return;
        }
        tls_.emplace(sock_, *impl_->tls);
        boost::system::error_code bad_ip;
        asio::ip::make_address(endpoint().host, bad_ip);
        if (bad_ip) {  // a name: SNI
            SSL_set_tlsext_host_name(tls_->native_handle(), endpoint().host.c_str());
        }
        tls_->set_verify_callback(ssl::host_name_verification(endpoint().host));
        tls_->async_handshake(ssl::stream_base::client, step([this](beast::error_code ec) {
                                  if (ec) {
                                      retry("TLS handshake: " + ec.message());
                                      return;
                                  }
                                  send();
                              }));
    }

    void send() {
        arm(impl_->config.request_timeout);
        req_.set(http::field::host, endpoint().host_header);
        req_.prepare_payload();
        with_stream([this](auto& s) {
            http::async_write(s, req_, step([this](beast::error_code ec) {
                                  if (ec) {
                                      retry("write: " + ec.message());
                                      return;
                                  }
                                  read_answer();
                              }));
        });
    }

    void close_socket() {
        beast::error_code ignored;
        resolver_.cancel();
        sock_.shutdown(tcp::socket::shutdown_both, ignored);
        sock_.close(ignored);
    }
    void stop_io() {
        ++arm_seq_;
        timer_.cancel();
        close_socket();
    }

    tcp::resolver resolver_;
    tcp::socket sock_;
    std::optional<ssl::stream<tcp::socket&>> tls_;
    asio::steady_timer timer_;
    http::request<http::string_body> req_;
    std::optional<std::size_t> only_;
    std::size_t ep_ = 0;
    std::size_t tried_ = 0;
    unsigned gen_ = 0;
    unsigned arm_seq_ = 0;
    bool timed_out_ = false;
    bool finished_ = false;
    std::string last_error_;
};

void Client::Impl::close() {
    closed = true;
    for (auto& w : ops) {
        if (auto op = w.lock()) {
            op->abort();
        }
    }
    ops.clear();
}

namespace {

// A unary call: the whole answer, parsed as one JSON object (or, for the
// streaming keepalive, the first newline-delimited one).
class Call final : public Op {
  public:
    using Done = std::function<void(Error, const json&)>;
    Call(std::shared_ptr<Client::Impl> impl, std::string target, const json& body,
         std::size_t limit, Done done, std::optional<std::size_t> only = std::nullopt)
        : Op(std::move(impl), std::move(target), body.dump(), only),
          limit_(limit),
          done_(std::move(done)) {}

  private:
    void read_answer() override {
        parser_.emplace();
        parser_->header_limit(kMaxHeader);
        parser_->body_limit(limit_);
        // The header first: string_body reserves the announced length, so an
        // oversized Content-Length is refused before any body is read.
        with_stream([this](auto& s) {
            http::async_read_header(s, buf_, *parser_, step([this](beast::error_code ec) {
                                        if (!ec && parser_->content_length().value_or(0) > limit_) {
                                            ec = http::error::body_limit;
                                        }
                                        if (ec) {
                                            on_read(ec);
                                            return;
                                        }
                                        read_body();
                                    }));
        });
    }

    void read_body() {
        with_stream([this](auto& s) {
            http::async_read(s, buf_, *parser_,
                             step([this](beast::error_code ec) { on_read(ec); }));
        });
    }

    void on_read(beast::error_code ec) {
        const std::string where = endpoint().url + target_;
        if (malformed_http(ec)) {
            deliver(
                make_error(Error::Kind::bad_reply, where + ": bad HTTP answer: " + ec.message()),
                nullptr);
            return;
        }
        if (ec) {
            retry("read: " + ec.message());
            return;
        }
        const auto& res = parser_->get();
        const unsigned status = res.result_int();
        if (status >= 500) {
            retry("HTTP " + std::to_string(status));
            return;
        }
        answered();
        std::string_view body = res.body();
        if (const auto nl = body.find('\n');
            nl != std::string_view::npos &&
            body.find_first_not_of(" \r\n\t", nl) != std::string_view::npos) {
            body = body.substr(0, nl);  // a stream: the first result
        }
        json j = json::parse(body, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            if (status >= 300) {
                deliver(
                    make_error(Error::Kind::rejected, where + ": HTTP " + std::to_string(status)),
                    nullptr);
            } else {
                deliver(make_error(Error::Kind::bad_reply, where + ": answer is not JSON"),
                        nullptr);
            }
            return;
        }
        if (auto e = grpc_error(j, where)) {
            deliver(std::move(*e), nullptr);
            return;
        }
        if (status >= 300) {
            deliver(make_error(Error::Kind::rejected, where + ": HTTP " + std::to_string(status)),
                    nullptr);
            return;
        }
        if (j.contains("result")) {
            j = j["result"];
        }
        deliver(Error{}, j);
    }

    void failed(Error e) override { deliver(std::move(e), nullptr); }

    void deliver(Error e, const json& j) {
        if (finish()) {
            auto done = std::move(done_);
            done(std::move(e), j);
        }
    }

    std::size_t limit_;
    Done done_;
    std::optional<http::response_parser<http::string_body>> parser_;
};

// The watch: the header within request_timeout, then results as they come,
// without a deadline (the stream is quiet while nothing changes).
class WatchOp final : public Op {
  public:
    using OnEvents = std::function<void(std::vector<Event>, std::int64_t)>;
    using OnEnd = std::function<void(Error)>;
    WatchOp(std::shared_ptr<Client::Impl> impl, const json& body, OnEvents on_events, OnEnd on_end)
        : Op(std::move(impl), "/v3/watch", body.dump(), std::nullopt),
          on_events_(std::move(on_events)),
          on_end_(std::move(on_end)) {}

  private:
    void read_answer() override {
        parser_.emplace();
        parser_->header_limit(kMaxHeader);
        parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
        with_stream([this](auto& s) {
            http::async_read_header(s, buf_, *parser_,
                                    step([this](beast::error_code ec) { on_header(ec); }));
        });
    }

    void on_header(beast::error_code ec) {
        if (malformed_http(ec)) {
            end(Error::Kind::bad_reply, "bad HTTP answer: " + ec.message());
            return;
        }
        if (ec) {
            retry("read: " + ec.message());
            return;
        }
        const unsigned status = parser_->get().result_int();
        if (status >= 500) {
            retry("HTTP " + std::to_string(status));
            return;
        }
        answered();
        if (status != 200) {
            end(Error::Kind::rejected, "HTTP " + std::to_string(status));
            return;
        }
        disarm();
        read_more();
    }

    void read_more() {
        auto& body = parser_->get().body();
        body.data = chunk_.data();
        body.size = chunk_.size();
        body.more = true;
        with_stream([this](auto& s) {
            http::async_read_some(s, buf_, *parser_,
                                  step([this](beast::error_code ec) { on_data(ec); }));
        });
    }

    void on_data(beast::error_code ec) {
        if (ec == http::error::need_buffer) {
            ec = {};
        }
        const std::size_t n = chunk_.size() - parser_->get().body().size;
        line_.append(chunk_.data(), n);
        std::size_t pos = 0;
        for (auto nl = line_.find('\n'); nl != std::string::npos; nl = line_.find('\n', pos)) {
            const std::string_view line(line_.data() + pos, nl - pos);
            pos = nl + 1;
            if (line.find_first_not_of(" \r\t") != std::string_view::npos && !on_line(line)) {
                return;
            }
            if (finished()) {
                return;
            }
        }
        line_.erase(0, pos);
        if (line_.size() > kMaxWatchLine) {
            end(Error::Kind::bad_reply, "watch result larger than 16 MiB");
        } else if (malformed_http(ec)) {
            end(Error::Kind::bad_reply, "bad HTTP answer: " + ec.message());
        } else if (ec) {
            end(Error::Kind::broken, "watch stream: " + ec.message());
        } else if (parser_->is_done()) {
            end(Error::Kind::broken, "watch stream ended");
        } else {
            read_more();
        }
    }

    // One result; false when the watch ended.
    bool on_line(std::string_view line) {
        const json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            end(Error::Kind::bad_reply, "watch result is not JSON");
            return false;
        }
        if (auto e = grpc_error(j, endpoint().url + target_)) {
            e->kind = Error::Kind::rejected;
            end(std::move(*e));
            return false;
        }
        std::vector<Event> events;
        std::int64_t revision = 0;
        std::int64_t compact = 0;
        bool canceled = false;
        std::string reason;
        try {
            const json& r = object_field(j, "result");
            canceled = r.value("canceled", false);
            compact = number<std::int64_t>(r, "compact_revision");
            reason = r.value("cancel_reason", std::string());
            revision = header_revision(r);
            for (const auto& ev : array_field(r, "events")) {
                Event e;
                const auto t = ev.value("type", json("PUT"));
                e.type = (t == "DELETE" || t == 1) ? Event::Type::del : Event::Type::put;
                e.kv = key_value(object_field(ev, "kv"));
                events.push_back(std::move(e));
            }
        } catch (const std::exception& e) {
            end(Error::Kind::bad_reply, std::string("bad watch result: ") + e.what());
            return false;
        }
        if (canceled) {
            Error err =
                make_error(compact > 0 ? Error::Kind::compacted : Error::Kind::broken,
                           endpoint().url + target_ + ": watch canceled" +
                               (compact > 0 ? ", compacted at revision " + std::to_string(compact)
                                            : ": " + reason));
            err.compact_revision = compact;
            end(std::move(err));
            return false;
        }
        if (!events.empty()) {
            // The last event's revision: resuming after it misses nothing even
            // when the server sent a catch-up batch with a later header revision.
            revision = events.back().kv.mod_revision;
        }
        // Empty: the watch was created, or a progress report; the stream is live.
        on_events_(std::move(events), revision);
        return !finished();
    }

    void end(Error::Kind kind, const std::string& text) {
        end(make_error(kind, endpoint().url + target_ + ": " + text));
    }
    void end(Error e) {
        if (finish()) {
            auto on_end = std::move(on_end_);
            on_events_ = nullptr;
            on_end(std::move(e));
        }
    }
    void failed(Error e) override { end(std::move(e)); }

    OnEvents on_events_;
    OnEnd on_end_;
    std::optional<http::response_parser<http::buffer_body>> parser_;
    std::array<char, 16 * 1024> chunk_{};
    std::string line_;
};

class WatchHandle final : public Watch {
  public:
    explicit WatchHandle(std::shared_ptr<WatchOp> op) : op_(std::move(op)) {}
    ~WatchHandle() override { op_->abort(); }
    WatchHandle(const WatchHandle&) = delete;
    WatchHandle& operator=(const WatchHandle&) = delete;
    void cancel() override { op_->abort(); }

  private:
    std::shared_ptr<WatchOp> op_;
};

void call(const std::shared_ptr<Client::Impl>& impl, std::string target, const json& body,
          std::size_t limit, Call::Done done, std::optional<std::size_t> only = std::nullopt) {
    std::make_shared<Call>(impl, std::move(target), body, limit, std::move(done), only)->start();
}

// Runs `parse` on an answer; its JSON or base64 errors become bad_reply.
template <class F>
Error parse_answer(const std::string& where, F&& parse) {
    try {
        parse();
        return {};
    } catch (const std::exception& e) {
        return make_error(Error::Kind::bad_reply, where + ": bad answer: " + e.what());
    }
}

}  // namespace

std::string validate(const ClientConfig& c) {
    if (c.endpoints.empty()) {
        return "etcd: no endpoint configured";
    }
    for (const auto& url : c.endpoints) {
        if (!parse_endpoint(url)) {
            return "etcd endpoint \"" + url +
                   "\" is malformed (expected http://host:port or https://host:port)";
        }
    }
    if (c.tls && c.tls->cert_file.empty() != c.tls->key_file.empty()) {
        return "etcd TLS: a client certificate needs both cert_file and key_file";
    }
    if (c.request_timeout.count() <= 0 || c.connect_timeout.count() <= 0) {
        return "etcd: timeouts must be positive";
    }
    return {};
}

Client::Client(asio::any_io_executor ex, ClientConfig config)
    : impl_(std::make_shared<Impl>(std::move(ex), std::move(config))) {}

Client::~Client() {
    impl_->close();
}

const std::string& Client::current_endpoint() const {
    static const std::string none;
    return impl_->endpoints.empty() ? none : impl_->endpoints[impl_->current].url;
}

void Client::grant(std::chrono::seconds ttl,
                   std::function<void(Error, std::int64_t, std::chrono::seconds)> done) {
    call(impl_, "/v3/lease/grant", json{{"TTL", std::to_string(ttl.count())}}, kMaxSmallBody,
         [impl = impl_, done = std::move(done)](Error e, const json& j) {
             std::int64_t id = 0;
             std::int64_t granted = 0;
             if (!e) {
                 e = parse_answer(impl->endpoints[impl->current].url, [&] {
                     id = number<std::int64_t>(j, "ID");
                     granted = number<std::int64_t>(j, "TTL");
                 });
             }
             done(std::move(e), id, std::chrono::seconds(granted));
         });
}

void Client::keepalive(std::int64_t lease, std::function<void(Error, std::chrono::seconds)> done) {
    call(impl_, "/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}, kMaxSmallBody,
         [impl = impl_, done = std::move(done)](Error e, const json& j) {
             std::int64_t ttl = 0;
             if (!e) {
                 e = parse_answer(impl->endpoints[impl->current].url,
                                  [&] { ttl = number<std::int64_t>(j, "TTL"); });
             }
             done(std::move(e), std::chrono::seconds(ttl));
         });
}

void Client::revoke(std::int64_t lease, std::function<void(Error)> done) {
    call(impl_, "/v3/lease/revoke", json{{"ID", std::to_string(lease)}}, kMaxSmallBody,
         [done = std::move(done)](Error e, const json&) { done(std::move(e)); });
}

namespace {
// Callback adapter for the calls that answer with a header revision.
Call::Done with_revision(std::shared_ptr<Client::Impl> impl,
                         std::function<void(Error, std::int64_t)> done) {
    return [impl = std::move(impl), done = std::move(done)](Error e, const json& j) {
        std::int64_t rev = 0;
        if (!e) {
            e = parse_answer(impl->endpoints[impl->current].url, [&] { rev = header_revision(j); });
        }
        done(std::move(e), rev);
    };
}
}  // namespace

void Client::put(const std::string& key, const std::string& value, std::int64_t lease,
                 std::function<void(Error, std::int64_t)> done) {
    json body{{"key", b64(key)}, {"value", b64(value)}};
    if (lease != 0) {
        body["lease"] = std::to_string(lease);
    }
    call(impl_, "/v3/kv/put", body, kMaxSmallBody, with_revision(impl_, std::move(done)));
}

void Client::del(const std::string& key, std::function<void(Error, std::int64_t)> done) {
    call(impl_, "/v3/kv/deleterange", json{{"key", b64(key)}}, kMaxSmallBody,
         with_revision(impl_, std::move(done)));
}

void Client::range_prefix(const std::string& prefix,
                          std::function<void(Error, std::vector<KeyValue>, std::int64_t)> done) {
    call(impl_, "/v3/kv/range", range_request(prefix), kMaxBody,
         [impl = impl_, done = std::move(done)](Error e, const json& j) {
             std::vector<KeyValue> kvs;
             std::int64_t rev = 0;
             if (!e) {
                 e = parse_answer(impl->endpoints[impl->current].url, [&] {
                     rev = header_revision(j);
                     for (const auto& kv : array_field(j, "kvs")) {
                         kvs.push_back(key_value(kv));
                     }
                 });
             }
             if (e) {
                 kvs.clear();
             }
             done(std::move(e), std::move(kvs), rev);
         });
}

std::unique_ptr<Watch> Client::watch_prefix(
    const std::string& prefix, std::int64_t start_revision,
    std::function<void(std::vector<Event>, std::int64_t)> on_events,
    std::function<void(Error)> on_end) {
    json create = range_request(prefix);
    create["progress_notify"] = true;
    if (start_revision > 0) {
        create["start_revision"] = std::to_string(start_revision);
    }
    auto op = std::make_shared<WatchOp>(impl_, json{{"create_request", create}},
                                        std::move(on_events), std::move(on_end));
    op->start();
    return std::make_unique<WatchHandle>(std::move(op));
}

void Client::status(std::function<void(std::vector<EndpointStatus>)> done) {
    struct Gather {
        std::vector<EndpointStatus> out;
        std::size_t left = 0;
        std::function<void(std::vector<EndpointStatus>)> done;
    };
    auto g = std::make_shared<Gather>();
    g->done = std::move(done);
    g->left = impl_->endpoints.size();
    for (const auto& ep : impl_->endpoints) {
        EndpointStatus s;
        s.endpoint = ep.url;
        g->out.push_back(std::move(s));
    }
    if (g->left == 0) {
        asio::post(impl_->ex, [g, impl = impl_] {
            if (!impl->closed) {
                g->done({});
            }
        });
        return;
    }
    for (std::size_t i = 0; i < impl_->endpoints.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        call(
            impl_, "/v3/maintenance/status", json::object(), kMaxSmallBody,
            [g, i, t0](Error e, const json& j) {
                auto& s = g->out[i];
                s.latency = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0);
                if (!e) {
                    e = parse_answer(s.endpoint, [&] {
                        s.version = j.value("version", std::string());
                        s.member_id = number<std::uint64_t>(object_field(j, "header"), "member_id");
                        s.leader = number<std::uint64_t>(j, "leader");
                        s.revision = header_revision(j);
                        const auto& errors = array_field(j, "errors");
                        if (!errors.empty()) {
                            s.error = errors.dump();
                        } else if (s.leader == 0) {
                            s.error = "no leader";
                        }
                    });
                }
                if (e) {
                    s.error = e.text;
                }
                s.healthy = s.error.empty();
                if (--g->left == 0) {
                    g->done(std::move(g->out));
                }
            },
            i);
    }
}

}  // namespace pmd::io::etcd
