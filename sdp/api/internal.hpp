// Internals shared by stream.cpp and acceptor.cpp (not installed).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "libpmclient/src/connect_core/connect_procedure.hpp"
#include "pmclient/address.hpp"
#include "pmclient/resolver.hpp"
#include "pmclient/sockaddr.hpp"
#include "pmclient/types.hpp"
#include "sdp/io/channel.hpp"
#include "sdp/stream.hpp"

namespace sdp {

namespace detail {

// SDP over a provider other than the soft one (the rdma-core provider,
// rdma_channel.hpp). The soft channel stays a concrete member of
// stream::impl, so its path takes no virtual call.
class provider_channel {
  public:
    virtual ~provider_channel() = default;
    virtual std::size_t read_some(std::span<std::uint8_t> out, std::error_code& ec) = 0;
    virtual std::size_t write(std::span<const std::uint8_t> in, std::error_code& ec) = 0;
    virtual void shutdown_write(std::error_code& ec) = 0;
    virtual void close(std::chrono::milliseconds linger, std::error_code& ec) = 0;
    virtual void abort() = 0;
    virtual short pump() = 0;
    [[nodiscard]] virtual int native_handle() const = 0;
    [[nodiscard]] virtual std::string describe() const = 0;
};

}  // namespace detail

struct stream::impl {
    stream_options opts;
    connect_info info;
    std::unique_ptr<io::SoftChannel> sdp;             // SDP over the soft provider
    std::unique_ptr<detail::provider_channel> other;  // SDP over rdma-core
    int tcp_fd = -1;                                  // TCP fallback path
    bool tcp_wr_shut = false;

    impl() = default;
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;
    ~impl() {
        if (tcp_fd >= 0) {
            ::close(tcp_fd);
        }
    }
};

namespace detail {

io::ChannelOptions channel_options(const stream_options& o);
// A TCP socket (CLOEXEC), or -errno.
int tcp_socket(bool v4);
// Connects with a bounded wait; 0 or an errno value (ETIMEDOUT).
int connect_with_timeout(int fd, const pm::Endpoint& to, std::chrono::milliseconds timeout);
void set_io_timeout(int fd, std::chrono::milliseconds t);
using pm::from_sockaddr;
using pm::to_sockaddr;

pmclient::RequestOptions request_options(const stream_options& o);
// The 7.5.1 procedure's options for stream::connect / async_connect: the
// MPA/SDP startup runs as its handshake step (pmclient/src/connect_core).
pmclient::ConnectProcedure::Options procedure_options(const stream_options& o);

// The process-wide blocking resolver of the stream API (may throw on a bad
// SDP_PMSP).
pmclient::BlockingResolver& shared_resolver();
// The provider a connect or listen uses: soft or rdma. `automatic` becomes
// rdma when rdma_available(), else soft. nullopt when rdma was asked for
// but cannot be used; `why` then says why (no device, not built).
std::optional<provider> choose_provider(provider asked, std::string& why);
// connect_info::reason / error text for an unusable rdma provider.
std::string rdma_unusable_reason(const std::string& why);
// What a finished procedure tells connect_info (resolution, from_cache,
// reason), and the provider to name after a failure.
connect_info procedure_info(const pmclient::ConnectProcedure& proc, const char* provider_tried);

// The rdma-core side of stream::connect's procedure (rdma_channel.cpp,
// built with SDPPM_HAVE_RDMA): the bind, connect (which includes the
// MPA/SDP startup) and the channel once connected.
class rdma_connector {
  public:
    virtual ~rdma_connector() = default;
    // An rdma_cm id bound to cp:0; false (ec, why) when the device cannot
    // be used from there.
    virtual bool bind(const pm::IpAddress& cp, pm::Endpoint& local, std::error_code& ec,
                      std::string& why) = 0;
    virtual std::error_code connect(const pm::Endpoint& sdp_address, std::string& why) = 0;
    virtual std::unique_ptr<provider_channel> start(std::error_code& ec, std::string& why) = 0;
};
std::unique_ptr<rdma_connector> make_rdma_connector(const stream_options& o);

// Registration of an acceptor with the local sdp-pmd (control socket).
std::error_code register_service(const acceptor_options& opts, const pm::Endpoint& local,
                                 std::string& reg_name, std::string& reg_error);
std::error_code unregister_service(const acceptor_options& opts, const std::string& reg_name,
                                   std::string& reg_error);

}  // namespace detail
}  // namespace sdp
