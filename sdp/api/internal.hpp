// SPDX-License-Identifier: Apache-2.0
// Internals shared by stream.cpp and acceptor.cpp (not installed).
#pragma once

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "libpmclient/src/connect_core/connect_procedure.hpp"
#include "pmclient/address.hpp"
#include "pmclient/resolver.hpp"
#include "pmclient/sockaddr.hpp"
#include "pmclient/types.hpp"
#include "pmctl/client.hpp"
#include "sdp/io/channel.hpp"
#include "sdp/stream.hpp"

namespace sdp {

namespace detail {

// SDP over a provider other than the soft one (the rdma-core provider,
// rdma_channel.hpp). The soft channel stays a concrete member of
// Stream::Impl, so its path takes no virtual call.
class ProviderChannel {
  public:
    virtual ~ProviderChannel() = default;
    // may_lend: `out` may be lent to the peer for Write Zcopy (9.3); false
    // for a read that must fill its buffer (MSG_WAITALL, Stream::read).
    virtual std::size_t read_some(std::span<std::uint8_t> out, std::error_code& ec,
                                  bool stop_at_urgent, bool may_lend) = 0;
    // Out-of-band data (9.5.3), as Stream's calls of the same names.
    virtual std::error_code send_oob(std::uint8_t byte) = 0;
    virtual std::uint8_t read_oob(std::error_code& ec) = 0;
    virtual bool at_mark() = 0;
    virtual bool urgent_pending() = 0;
    virtual bool send_idle() = 0;  // as io::SoftChannel::send_idle's
    virtual void set_oob_inline(bool on) = 0;
    // wait = false: as io::SoftChannel::write's (Stream::try_write).
    virtual std::size_t write(std::span<const std::uint8_t> in, std::error_code& ec, bool wait) = 0;
    virtual void shutdown_write(std::error_code& ec) = 0;
    virtual void close(std::chrono::milliseconds linger, std::error_code& ec) = 0;
    virtual void abort() = 0;
    virtual short pump() = 0;
    [[nodiscard]] virtual int native_handle() const = 0;
    [[nodiscard]] virtual std::string describe() const = 0;
    [[nodiscard]] virtual engine::Stats stats() const = 0;
};

// A stream's plain TCP path (the fallback, connect_tcp): the socket calls
// themselves behind the calls the SDP channels have, so that Stream picks
// the path in one place (Stream::Impl::on_path).
class TcpPath {
  public:
    int fd = -1;
    bool wr_shut = false;
    std::chrono::milliseconds io_timeout{};  // bounds read_some(stop_at_urgent)

    TcpPath() = default;
    TcpPath(const TcpPath&) = delete;
    TcpPath& operator=(const TcpPath&) = delete;
    ~TcpPath() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
    std::size_t read_some(std::span<std::uint8_t> out, std::error_code& ec, bool stop_at_urgent,
                          bool may_lend = false);  // never lends
    std::error_code send_oob(std::uint8_t byte);
    std::uint8_t read_oob(std::error_code& ec);
    bool at_mark();
    bool urgent_pending();
    bool send_idle() { return true; }  // the kernel's Nagle decides over TCP
    // wait = false: MSG_DONTWAIT (resource_unavailable_try_again when full).
    std::size_t write(std::span<const std::uint8_t> in, std::error_code& ec, bool wait);
    void shutdown_write(std::error_code& ec);
    void close(std::chrono::milliseconds linger, std::error_code& ec);  // the Impl closes fd
    void abort();
    short pump() { return POLLIN; }
    [[nodiscard]] int native_handle() const { return fd; }
};

}  // namespace detail

struct Stream::Impl {
    StreamOptions opts;
    ConnectInfo info;
    std::unique_ptr<io::SoftChannel> sdp;            // SDP over the soft provider
    std::unique_ptr<detail::ProviderChannel> other;  // SDP over rdma-core
    detail::TcpPath tcp;                             // else: plain TCP
    // Why the last hand_off() could not be done (describe()); guarded:
    // other threads may be in calls on the stream meanwhile.
    mutable std::mutex note_mu;
    std::string note;

    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;

    // f(path) on the path that carries the stream: the soft channel, the
    // other provider's, or TCP (their calls have the same names and types).
    template <class F>
    decltype(auto) on_path(F&& f) {
        if (sdp) {
            return f(*sdp);
        }
        if (other) {
            return f(*other);
        }
        return f(tcp);
    }
};

namespace detail {

// The SDP engine settings of a stream (every provider).
engine::Config engine_config(const StreamOptions& o);
io::ChannelOptions channel_options(const StreamOptions& o);
// A TCP socket (CLOEXEC), or -errno.
int tcp_socket(bool v4);
// Before a connect to an SDP Address: SO_REUSEADDR and a bind to the
// wildcard address, port 0, so that the source port is one no other socket
// holds. A port that connect() picks may be shared with unrelated
// connections to other destinations; their sockets (a TIME_WAIT left
// without SO_REUSEADDR) would make the bind of socket duplication to the
// old source port fail (13.1.1; docs/protocol-notes.md). When no such port
// is left the socket stays unbound and connect() picks one as before.
void own_source_port(int fd, bool v4);
// Connects with a bounded wait; 0 or an errno value (ETIMEDOUT).
int connect_with_timeout(int fd, const pm::Endpoint& to, std::chrono::milliseconds timeout);
void set_io_timeout(int fd, std::chrono::milliseconds t);
// TCP keepalive (14.3) on a TCP socket: SO_KEEPALIVE and, when enabled,
// TCP_KEEPIDLE / TCP_KEEPINTVL / TCP_KEEPCNT. invalid_argument for values
// out of the kernel's range.
std::error_code apply_keepalive(int fd, const Keepalive& k);
// Out-of-band data on a plain TCP socket (the fallback path of Stream and
// AsyncStream): the socket calls, errors as errno values.
// send(MSG_OOB): waits for room on a blocking socket; a non-blocking one
// (Asio's) with a full send buffer: resource_unavailable_try_again.
std::error_code tcp_send_oob(int fd, std::uint8_t byte);
std::uint8_t tcp_read_oob(int fd, std::error_code& ec);  // recv(MSG_OOB), never blocks
bool tcp_at_mark(int fd);                                // ioctl(SIOCATMARK)
bool tcp_at_urgent(int fd);       // at the mark, the urgent byte there and unread
bool tcp_urgent_pending(int fd);  // poll(POLLPRI)
std::error_code tcp_set_oob_inline(int fd, bool on);  // SO_OOBINLINE
// Why keepalive cannot be had on the rdma provider (ConnectInfo::reason).
extern const char* const kRdmaKeepaliveReason;
using pm::from_sockaddr;
using pm::to_sockaddr;

pmclient::RequestOptions request_options(const StreamOptions& o);
// The 7.5.1 procedure's options for Stream::connect / async_connect: the
// MPA/SDP startup runs as its handshake step (pmclient/src/connect_core).
pmclient::ConnectProcedure::Options procedure_options(const StreamOptions& o);

// The process-wide blocking resolver of the stream API (may throw on a bad
// SDP_PMSP).
pmclient::BlockingResolver& shared_resolver();
// The provider a connect or listen uses: soft or rdma. `automatic` becomes
// rdma when rdma_available(), else soft. nullopt when rdma was asked for
// but cannot be used; `why` then says why (no device, not built).
std::optional<Provider> choose_provider(Provider asked, std::string& why);
// ConnectInfo::reason / error text for an unusable rdma provider.
std::string rdma_unusable_reason(const std::string& why);
// What a finished procedure tells ConnectInfo (resolution, from_cache,
// reason), and the provider to name after a failure.
ConnectInfo procedure_info(const pmclient::ConnectProcedure& proc, const char* provider_tried);

// The rdma-core side of Stream::connect's procedure (rdma_channel.cpp,
// built with SDPPM_HAVE_RDMA): the bind, connect (which includes the
// MPA/SDP startup) and the channel once connected.
class RdmaConnector {
  public:
    virtual ~RdmaConnector() = default;
    // An rdma_cm id bound to cp:0; false (ec, why) when the device cannot
    // be used from there.
    virtual bool bind(const pm::IpAddress& cp, pm::Endpoint& local, std::error_code& ec,
                      std::string& why) = 0;
    virtual std::error_code connect(const pm::Endpoint& sdp_address, std::string& why) = 0;
    virtual std::unique_ptr<ProviderChannel> start(std::error_code& ec, std::string& why) = 0;
};
std::unique_ptr<RdmaConnector> make_rdma_connector(const StreamOptions& o);

// The Accepting Peer's startup on an accepted TCP socket (soft provider),
// the one path of Acceptor::accept and Stream::take_over: owns `cfd`,
// SoftChannel::handshake with `co`, then so.keepalive. nullptr with ec and
// `why` on failure (never throws). carry: socket duplication (13.1.1 steps
// 6-7), the state handed over by the Local Peer.
std::unique_ptr<Stream::Impl> accept_soft(int cfd, const StreamOptions& so,
                                          const io::ChannelOptions& co, std::error_code& ec,
                                          std::string& why, const engine::Carry* carry = nullptr);

// Registration of an acceptor with the local sdp-pmd (control socket).
// With `keep` (on-demand, opts.on_demand set) the control connection is
// kept as the registration's channel.
std::error_code register_service(const AcceptorOptions& opts, const pm::Endpoint& local,
                                 std::string& reg_name, std::string& reg_error,
                                 pmctl::KeptConnection* keep = nullptr);
// A listening TCP socket (SO_REUSEADDR, non-blocking) on `local`; the fd
// and the address bound in `bound`, or -errno.
int tcp_listen(const pm::Endpoint& local, int backlog, pm::Endpoint& bound);
std::error_code unregister_service(const AcceptorOptions& opts, const std::string& reg_name,
                                   std::string& reg_error);

}  // namespace detail
}  // namespace sdp
