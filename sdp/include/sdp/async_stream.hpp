// SPDX-License-Identifier: Apache-2.0
// The asynchronous SDP stream API on Boost.Asio.
//
//   boost::asio::io_context io;
//   sdp::AsyncStream s(io);
//   s.async_connect(conventional, opts, [&](boost::system::error_code ec) {
//       // s.used(): Transport::sdp or Transport::tcp; s.info().reason says why
//       boost::asio::async_write(s, boost::asio::buffer(data), ...);
//   });
//
//   sdp::AsyncAcceptor a(io);
//   a.open(*pm::Endpoint::parse("0.0.0.0:5001"), acceptor_opts);  // (+ registration)
//   a.async_accept([](boost::system::error_code ec, sdp::AsyncStream peer) { ... });
//
// async_connect() resolves the Conventional Address with libpmclient's async
// Resolver (section 7.5.1), TCP-connects to the SDP Address, runs the MPA
// startup and SDP Hello/HelloAck from Asio completions, and falls back to
// plain TCP exactly like sdp::Stream::connect() (the same 7.5.1 procedure,
// same ConnectInfo). SDP goes over the soft provider only: iwarp_provider
// rdma counts as an unusable provider (TCP fallback, or no_such_device).
//
// async_read_some / async_write_some meet Asio's AsyncReadStream and
// AsyncWriteStream requirements, so boost::asio::async_read / async_write /
// async_read_until work on an AsyncStream. End of stream is
// boost::asio::error::eof; a peer's abort connection_reset; cancel() and
// close() complete pending operations with operation_aborted.
//
// Completion tokens go through boost::asio::async_initiate: callbacks,
// boost::asio::use_future, use_awaitable, yield_context, ...
//
// Threads: like boost::asio::ip::tcp::socket, an AsyncStream is not
// thread-safe: use it from one thread running the io_context, or from a
// strand. Completion handlers run on their associated executor (default:
// the io_context's), never inside the initiating call. No extra threads.
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "pmclient/completion.hpp"
#include "sdp/stream.hpp"

namespace pmclient {
class Resolver;
}

namespace sdp {

namespace detail {

// The project's one type-erased completion handler (pmclient/completion.hpp):
// invoking it posts the handler to its associated executor.
template <typename Signature>
using ErasedHandler = pmclient::ErasedHandler<Signature>;

using IoHandler = ErasedHandler<void(boost::system::error_code, std::size_t)>;
using OpHandler = ErasedHandler<void(boost::system::error_code)>;

// The first non-empty buffer of a sequence (as Asio's own sockets do for a
// single read or write).
template <typename Buffer, typename Sequence>
Buffer first_buffer(const Sequence& seq) {
    auto it = boost::asio::buffer_sequence_begin(seq);
    const auto end = boost::asio::buffer_sequence_end(seq);
    for (; it != end; ++it) {
        Buffer b(*it);
        if (b.size() > 0) {
            return b;
        }
    }
    return Buffer();
}

}  // namespace detail

class AsyncAcceptor;

class AsyncStream {
  public:
    using executor_type = boost::asio::io_context::executor_type;

    // Port Mapper resolutions share one pmclient::Resolver per io_context
    // (created on first use from libpmclient's configuration), unless one is
    // given here (it must outlive the stream).
    explicit AsyncStream(boost::asio::io_context& io);
    AsyncStream(boost::asio::io_context& io, pmclient::Resolver& resolver);
    ~AsyncStream();  // abortive if still open
    AsyncStream(AsyncStream&&) noexcept;
    AsyncStream& operator=(AsyncStream&&) noexcept;
    AsyncStream(const AsyncStream&) = delete;
    AsyncStream& operator=(const AsyncStream&) = delete;

    executor_type get_executor() noexcept { return io_->get_executor(); }

    // Port Mapper resolution, SDP, fallback to TCP, like Stream::connect().
    // Signature void(boost::system::error_code). Errors: invalid_argument
    // (bad address, pmclient configuration), connection_refused (no
    // fallback), the errors of the fallback TCP connect, protocol_error
    // (not an SDP peer), no_such_device (iwarp_provider rdma without
    // fallback), operation_aborted (cancel()/close()).
    template <typename Token>
    auto async_connect(const pm::Endpoint& conventional, const StreamOptions& opts, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            [this](auto handler, const pm::Endpoint& ep, const StreamOptions& o) {
                start_connect(0, ep, o, detail::OpHandler(std::move(handler), get_executor()));
            },
            token, conventional, opts);
    }
    // SDP straight to an SDP Address (no Port Mapper, no fallback).
    template <typename Token>
    auto async_connect_sdp(const pm::Endpoint& sdp_address, const StreamOptions& opts,
                           Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            [this](auto handler, const pm::Endpoint& ep, const StreamOptions& o) {
                start_connect(1, ep, o, detail::OpHandler(std::move(handler), get_executor()));
            },
            token, sdp_address, opts);
    }
    // Plain TCP (no SDP), for comparisons.
    template <typename Token>
    auto async_connect_tcp(const pm::Endpoint& address, const StreamOptions& opts, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            [this](auto handler, const pm::Endpoint& ep, const StreamOptions& o) {
                start_connect(2, ep, o, detail::OpHandler(std::move(handler), get_executor()));
            },
            token, address, opts);
    }

    // AsyncReadStream: void(boost::system::error_code, std::size_t). Reads
    // into the first non-empty buffer; an empty sequence completes with 0.
    template <typename MutableBufferSequence, typename Token>
    auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, boost::asio::mutable_buffer b) {
                start_read(b, detail::IoHandler(std::move(handler), get_executor()));
            },
            token, detail::first_buffer<boost::asio::mutable_buffer>(buffers));
    }
    // AsyncWriteStream: completes once some bytes are queued in the SDP
    // engine (its send queue plays the role of a socket send buffer).
    template <typename ConstBufferSequence, typename Token>
    auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, boost::asio::const_buffer b) {
                start_write(b, detail::IoHandler(std::move(handler), get_executor()));
            },
            token, detail::first_buffer<boost::asio::const_buffer>(buffers));
    }
    // Half-close: the peer reads EOF after the queued data (SDP DisConn, or
    // TCP FIN on the fallback). void(boost::system::error_code).
    template <typename Token>
    auto async_shutdown(Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            [this](auto handler) {
                start_shutdown(detail::OpHandler(std::move(handler), get_executor()));
            },
            token);
    }
    // Graceful close (8.2.1), bounded by StreamOptions::linger (then
    // abortive, timed_out). Pending reads/writes complete with
    // operation_aborted. void(boost::system::error_code).
    template <typename Token>
    auto async_close(Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            [this](auto handler) {
                start_close(detail::OpHandler(std::move(handler), get_executor()));
            },
            token);
    }

    // Pending connect/read/write complete with operation_aborted; the
    // connection stays usable after a cancelled read or write.
    void cancel();
    // Abortive close (AbortConn + RST; the peer reads connection_reset);
    // pending operations complete with operation_aborted.
    void close();

    bool is_open() const;
    Transport used() const;
    const ConnectInfo& info() const;
    std::string describe() const;

    // --- Out-of-band data (9.5.3), synchronous (they never wait for the
    // peer); the same semantics as sdp::Stream's calls of the same names,
    // over SDP as over the TCP fallback. async_read_some() stops at the mark
    // (it never returns bytes from both sides of it) and skips an
    // out-of-line urgent byte. Call them from the stream's executor.
    // send_oob never waits: over SDP the byte is queued in the engine; over
    // the TCP fallback a full socket send buffer gives
    // resource_unavailable_try_again.
    std::error_code send_oob(std::uint8_t byte);
    std::uint8_t read_oob(std::error_code& ec);
    bool at_mark() const;
    bool urgent_pending() const;
    std::error_code set_oob_inline(bool on);
    // TCP keepalive (14.3) on the stream's TCP socket, at any time while
    // open; see sdp::Keepalive. StreamOptions::keepalive applies it at
    // connect/accept.
    std::error_code set_keepalive(const Keepalive& k);
    // The TCP socket that carries the stream (SDP's LLP or the fallback),
    // -1 when not open.
    int native_handle() const;

    struct Impl;

  private:
    friend class AsyncAcceptor;
    void start_connect(int kind, const pm::Endpoint& ep, const StreamOptions& opts,
                       detail::OpHandler h);
    void start_read(boost::asio::mutable_buffer b, detail::IoHandler h);
    void start_write(boost::asio::const_buffer b, detail::IoHandler h);
    void start_shutdown(detail::OpHandler h);
    void start_close(detail::OpHandler h);

    boost::asio::io_context* io_;
    pmclient::Resolver* resolver_ = nullptr;
    std::shared_ptr<Impl> impl_;
};

// Listens on an SDP port and accepts AsyncStreams. MPA/SDP startups run
// concurrently on the io_context (at most max_pending_handshakes, beyond
// which new TCP connections are closed and counted); failed startups are
// counted and reported through on_handshake_error, never to async_accept.
class AsyncAcceptor {
  public:
    using executor_type = boost::asio::io_context::executor_type;

    explicit AsyncAcceptor(boost::asio::io_context& io);
    ~AsyncAcceptor();  // close()
    AsyncAcceptor(const AsyncAcceptor&) = delete;
    AsyncAcceptor& operator=(const AsyncAcceptor&) = delete;

    executor_type get_executor() noexcept { return io_->get_executor(); }

    // Listens and, with a control socket, registers the mapping with the
    // local sdp-pmd (one blocking exchange bounded by control_timeout), as
    // sdp::Acceptor::open.
    std::error_code open(const pm::Endpoint& local, const AcceptorOptions& opts = {});
    // void(boost::system::error_code, sdp::AsyncStream): the next stream
    // whose startup completed. Errors: operation_aborted (cancel/close),
    // bad_descriptor (not open), or a failure of the listener itself.
    template <typename Token>
    auto async_accept(Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, AsyncStream)>(
            [this](auto handler) {
                start_accept(AcceptHandler(std::move(handler), get_executor()));
            },
            token);
    }
    // Pending async_accept complete with operation_aborted.
    void cancel();
    // Unregisters (if registered), stops the startups, closes the listener.
    std::error_code close();

    bool is_open() const;
    pm::Endpoint local_endpoint() const;
    bool registered() const;
    const std::string& registration_error() const;
    std::string last_error() const;
    AcceptorStats stats() const;

    struct Impl;

  private:
    using AcceptHandler = detail::ErasedHandler<void(boost::system::error_code, AsyncStream)>;
    void start_accept(AcceptHandler h);

    boost::asio::io_context* io_;
    std::shared_ptr<Impl> impl_;
};

}  // namespace sdp
