// Internals shared by stream.cpp and acceptor.cpp (not installed).
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <system_error>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"
#include "pmclient/types.hpp"
#include "sdp/io/channel.hpp"
#include "sdp/stream.hpp"

namespace sdp {

struct stream::impl {
    stream_options opts;
    connect_info info;
    std::unique_ptr<io::SoftChannel> sdp;  // SDP path
    int tcp_fd = -1;                       // TCP fallback path
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

// Connect decisions shared by stream::connect and async_stream::async_connect
// (section 7.5.1), so both fall back to TCP in exactly the same cases.
pmclient::RequestOptions request_options(const stream_options& o);
// The MPA/SDP startup on the SDP Address failed with `ec`: use plain TCP to
// the Conventional Address (refused, reset, timed out, aborted)?
bool startup_fallback_worthy(const std::error_code& ec);
// The TCP connect to the SDP Address failed with errno `err`: treat it like
// a PMDeny (and flush the cached mapping)?
bool sdp_connect_fallback_worthy(int err);
// connect_info::reason texts.
std::string reason_after_resolution(const pmclient::Result& r);
std::string reason_after_startup(const std::error_code& ec, const std::string& why);
std::string reason_after_sdp_connect(const pm::Endpoint& sdp_address, int err);
// A resolution that ended with ResultKind::error, as the connect error.
std::error_code resolution_error(const pmclient::Result& r);

// Registration of an acceptor with the local sdp-pmd (control socket).
std::error_code register_service(const acceptor_options& opts, const pm::Endpoint& local,
                                 std::string& reg_name, std::string& reg_error);
std::error_code unregister_service(const acceptor_options& opts, const std::string& reg_name,
                                   std::string& reg_error);

}  // namespace detail
}  // namespace sdp
