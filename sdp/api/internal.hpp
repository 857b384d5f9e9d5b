// Internals shared by stream.cpp and acceptor.cpp (not installed).
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"
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

}  // namespace detail
}  // namespace sdp
