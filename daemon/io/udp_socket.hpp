// SPDX-License-Identifier: Apache-2.0
// A UDP listen socket that answers from the address each request was sent to.
//
// Section 7.4: the PMAccept / PMDeny must be sent "using the address
// information contained in the UDP/IP headers used to deliver" the PMReq. On a
// socket bound to the wildcard address of a multi-homed host the kernel would
// pick the source address by route, so the socket enables IP_PKTINFO /
// IPV6_RECVPKTINFO, learns each datagram's destination address with recvmmsg
// and sets it as the source of the reply with sendmmsg.
//
// The socket is non-blocking; the owner waits for readability with
// socket().async_wait(wait_read) and then drains it in bounded batches.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "pmclient/address.hpp"
#include "pmclient/message.hpp"
#include "pmclient/sockaddr.hpp"

namespace pmd::io {

// Datagrams per recvmmsg / sendmmsg call.
inline constexpr std::size_t kBatchSize = 32;
// Large enough to see (and count) oversize datagrams; longer ones are
// truncated to this and flagged, which still classifies them as too long.
inline constexpr std::size_t kReceiveBufferSize = 2048;

struct alignas(cmsghdr) ControlBuffer {
    unsigned char bytes[CMSG_SPACE(sizeof(in6_pktinfo)) + CMSG_SPACE(sizeof(in_pktinfo))];
};

// One received datagram; valid until the next receive into the same batch.
struct Received {
    std::span<const std::uint8_t> bytes;  // at most kReceiveBufferSize
    std::size_t length = 0;               // the datagram's real length
    pm::Endpoint source;                  // IPv4-mapped sources unmapped
    pm::IpAddress local;                  // where it was sent to (pktinfo)
    unsigned ifindex = 0;                 // interface it arrived on
    sockaddr_storage peer{};              // the source as received (scope id kept)
    socklen_t peer_len = 0;
    // The socket is bound to one address: a reply leaves from it without a
    // packet info control message.
    bool bound_local = false;

    bool truncated() const { return length > bytes.size(); }
};

class RxBatch {
  public:
    RxBatch();
    std::span<const Received> received() const { return {received_.data(), count_}; }

  private:
    friend class UdpSocket;
    std::array<std::array<std::uint8_t, kReceiveBufferSize>, kBatchSize> buffers_{};
    std::array<sockaddr_storage, kBatchSize> names_{};
    std::array<ControlBuffer, kBatchSize> control_{};
    std::array<iovec, kBatchSize> iov_{};
    std::array<mmsghdr, kBatchSize> msgs_{};
    std::array<Received, kBatchSize> received_{};
    std::size_t count_ = 0;
};

class TxBatch {
  public:
    TxBatch();
    // Queues `bytes` to the source of `to`, from the address `to` arrived on.
    // Returns false when the batch is full.
    bool add(const pm::Wire& bytes, const Received& to, bool v6_socket);
    std::size_t size() const { return count_; }
    bool full() const { return count_ == kBatchSize; }
    void clear() { count_ = 0; }

  private:
    friend class UdpSocket;
    std::array<pm::Wire, kBatchSize> data_{};
    std::array<sockaddr_storage, kBatchSize> names_{};
    std::array<ControlBuffer, kBatchSize> control_{};
    std::array<iovec, kBatchSize> iov_{};
    std::array<mmsghdr, kBatchSize> msgs_{};
    std::size_t count_ = 0;
};

class UdpSocket {
  public:
    // Opens, configures (IPV6_V6ONLY for IPv6, packet info, non-blocking) and
    // binds a socket. With `reuseport`, SO_REUSEPORT is set before the bind
    // (one socket per worker on the same address). On failure returns
    // nullptr with ec set.
    static std::shared_ptr<UdpSocket> open(boost::asio::io_context& io, const pm::Endpoint& ep,
                                           boost::system::error_code& ec, bool reuseport = false);
    // A new socket with SO_REUSEPORT bound to the same address as `of` (an
    // inherited socket that has SO_REUSEPORT), with the same IPV6_V6ONLY
    // setting, so that it joins its reuseport group. nullptr with ec set on
    // failure (EADDRINUSE when `of` belongs to another user).
    static std::shared_ptr<UdpSocket> sibling(boost::asio::io_context& io, UdpSocket& of,
                                              boost::system::error_code& ec);
    // Takes over an already bound UDP socket (inherited from the service
    // manager): enables packet info, makes it non-blocking and reads its
    // address. On failure returns nullptr with ec set; `fd` is then closed.
    static std::shared_ptr<UdpSocket> adopt(boost::asio::io_context& io, int fd,
                                            boost::system::error_code& ec);

    const pm::Endpoint& endpoint() const { return endpoint_; }
    // The socket's family (an inherited dual-stack IPv6 socket bound to an
    // IPv4-mapped address still is one).
    bool is_v6() const { return v6_; }
    // Whether datagrams carry IP_PKTINFO / IPV6_PKTINFO: only sockets bound to
    // a wildcard address (or inherited) need it to learn and reuse the
    // destination address; a socket bound to one address always receives on
    // and replies from that address, and skips the per-datagram control
    // message both ways.
    bool uses_pktinfo() const { return pktinfo_; }
    boost::asio::ip::udp::socket& socket() { return socket_; }
    bool is_open() const { return socket_.is_open(); }
    void close();

    // Receives what is waiting, up to kBatchSize datagrams, without blocking.
    // Returns the number received (0 when none), or -errno on error.
    int receive(RxBatch& rx);

    struct SendResult {
        std::size_t sent = 0;
        std::size_t failed = 0;
        int last_errno = 0;
    };
    // Sends every queued datagram; failures (EAGAIN, unreachable...) are
    // counted and skipped, never retried or fatal.
    SendResult send(TxBatch& tx);

    UdpSocket(boost::asio::io_context& io, const pm::Endpoint& ep);

  private:
    pm::Endpoint endpoint_;
    bool v6_ = false;
    bool pktinfo_ = true;
    boost::asio::ip::udp::socket socket_;
};

// Conversions between the protocol's address types and socket addresses.
boost::asio::ip::udp::endpoint to_asio(const pm::Endpoint& ep);
using pm::from_sockaddr;

}  // namespace pmd::io
