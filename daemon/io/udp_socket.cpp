// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/udp_socket.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/v6_only.hpp>
#include <cerrno>
#include <cstring>

namespace pmd::io {

namespace asio = boost::asio;

boost::asio::ip::udp::endpoint to_asio(const pm::Endpoint& ep) {
    const auto& b = ep.address.bytes();
    if (ep.address.is_v4()) {
        asio::ip::address_v4::bytes_type v4{b[0], b[1], b[2], b[3]};
        return {asio::ip::address_v4(v4), ep.port};
    }
    asio::ip::address_v6::bytes_type v6{};
    std::memcpy(v6.data(), b.data(), v6.size());
    return {asio::ip::address_v6(v6), ep.port};
}

namespace {

bool is_link_local(const pm::IpAddress& a) {
    return a.is_v6() && a.bytes()[0] == 0xfe && (a.bytes()[1] & 0xc0) == 0x80;
}

// The local address a datagram arrived on, from its IP_PKTINFO / IPV6_PKTINFO.
bool parse_pktinfo(msghdr& mh, pm::IpAddress& local, unsigned& ifindex) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO &&
            c->cmsg_len >= CMSG_LEN(sizeof(in_pktinfo))) {
            in_pktinfo pi{};
            std::memcpy(&pi, CMSG_DATA(c), sizeof pi);
            // ipi_spec_dst is the header's destination for unicast and the
            // interface's address for broadcast, which is the address a
            // reply can actually be sent from.
            in_addr a = pi.ipi_spec_dst.s_addr != 0 ? pi.ipi_spec_dst : pi.ipi_addr;
            std::array<std::uint8_t, 4> b{};
            std::memcpy(b.data(), &a, 4);
            local = pm::IpAddress::v4(b);
            ifindex = static_cast<unsigned>(pi.ipi_ifindex);
            return true;
        }
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO &&
            c->cmsg_len >= CMSG_LEN(sizeof(in6_pktinfo))) {
            in6_pktinfo pi{};
            std::memcpy(&pi, CMSG_DATA(c), sizeof pi);
            std::array<std::uint8_t, 16> b{};
            std::memcpy(b.data(), &pi.ipi6_addr, 16);
            local = pm::IpAddress::v6(b).unmapped();
            ifindex = pi.ipi6_ifindex;
            return true;
        }
    }
    return false;
}

// Writes the control message that makes the kernel send from `local`.
std::size_t build_pktinfo(ControlBuffer& buf, const pm::IpAddress& local, unsigned ifindex,
                          bool v6_socket) {
    std::memset(buf.bytes, 0, sizeof buf.bytes);
    msghdr mh{};
    mh.msg_control = buf.bytes;
    if (!v6_socket) {
        mh.msg_controllen = CMSG_SPACE(sizeof(in_pktinfo));
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
        in_pktinfo pi{};
        std::memcpy(&pi.ipi_spec_dst, local.bytes().data(), 4);
        pi.ipi_ifindex = 0;  // route normally, only the source address is fixed
        std::memcpy(CMSG_DATA(c), &pi, sizeof pi);
        return mh.msg_controllen;
    }
    mh.msg_controllen = CMSG_SPACE(sizeof(in6_pktinfo));
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in6_pktinfo));
    in6_pktinfo pi{};
    if (local.is_v4()) {
        // IPv4 peer on a dual-stack socket: the kernel takes the mapped form.
        std::uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        std::memcpy(mapped + 12, local.bytes().data(), 4);
        std::memcpy(&pi.ipi6_addr, mapped, 16);
    } else {
        std::memcpy(&pi.ipi6_addr, local.bytes().data(), 16);
    }
    // A link-local source is only meaningful on the interface it came in on.
    pi.ipi6_ifindex = is_link_local(local) ? ifindex : 0;
    std::memcpy(CMSG_DATA(c), &pi, sizeof pi);
    return mh.msg_controllen;
}

}  // namespace

RxBatch::RxBatch() {
    for (std::size_t i = 0; i < kBatchSize; ++i) {
        iov_[i].iov_base = buffers_[i].data();
        iov_[i].iov_len = buffers_[i].size();
    }
}

TxBatch::TxBatch() = default;

bool TxBatch::add(const pm::Wire& bytes, const Received& to, bool v6_socket) {
    if (full()) {
        return false;
    }
    std::size_t i = count_++;
    data_[i] = bytes;
    names_[i] = to.peer;
    iov_[i].iov_base = data_[i].data();
    iov_[i].iov_len = data_[i].size();
    msghdr& mh = msgs_[i].msg_hdr;
    mh = msghdr{};
    mh.msg_name = &names_[i];
    mh.msg_namelen = to.peer_len;
    mh.msg_iov = &iov_[i];
    mh.msg_iovlen = 1;
    if (!to.bound_local && !to.local.is_unspecified()) {
        mh.msg_control = control_[i].bytes;
        mh.msg_controllen = build_pktinfo(control_[i], to.local, to.ifindex, v6_socket);
    }
    msgs_[i].msg_len = 0;
    return true;
}

UdpSocket::UdpSocket(boost::asio::io_context& io, const pm::Endpoint& ep)
    : endpoint_(ep), v6_(ep.address.is_v6()), socket_(io) {}

std::shared_ptr<UdpSocket> UdpSocket::open(boost::asio::io_context& io, const pm::Endpoint& ep,
                                           boost::system::error_code& ec, bool reuseport) {
    auto s = std::make_shared<UdpSocket>(io, ep);
    auto aep = to_asio(ep);
    auto& sock = s->socket_;
    if (sock.open(aep.protocol(), ec)) {
        return nullptr;
    }
    int fd = sock.native_handle();
    int on = 1;
    s->pktinfo_ = ep.address.is_unspecified();
    if (ep.address.is_v6()) {
        // Lets 0.0.0.0:P and [::]:P both be bound; IPv4 is served by the IPv4
        // socket only.
        if (sock.set_option(asio::ip::v6_only(true), ec)) {
            return nullptr;
        }
        if (s->pktinfo_ && ::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on) != 0) {
            ec.assign(errno, boost::system::system_category());
            return nullptr;
        }
    } else if (s->pktinfo_ && ::setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on) != 0) {
        ec.assign(errno, boost::system::system_category());
        return nullptr;
    }
    if (reuseport && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
        ec.assign(errno, boost::system::system_category());
        return nullptr;
    }
    if (sock.bind(aep, ec)) {
        return nullptr;
    }
    if (sock.non_blocking(true, ec)) {
        return nullptr;
    }
    // Port 0 asks the kernel for one: record the port actually bound.
    if (ep.port == 0) {
        auto bound = sock.local_endpoint(ec);
        if (ec) {
            return nullptr;
        }
        s->endpoint_.port = bound.port();
    }
    return s;
}

std::shared_ptr<UdpSocket> UdpSocket::adopt(boost::asio::io_context& io, int fd,
                                            boost::system::error_code& ec) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
        ec.assign(errno, boost::system::system_category());
        ::close(fd);
        return nullptr;
    }
    const bool v6 = ss.ss_family == AF_INET6;
    int on = 1;
    // The same packet info as a socket bound here (section 7.4: the reply
    // leaves from the address the request was sent to); harmless when the
    // socket unit already set it (PassPacketInfo=yes).
    const int rc = v6 ? ::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on)
                      : ::setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on);
    if (rc != 0) {
        ec.assign(errno, boost::system::system_category());
        ::close(fd);
        return nullptr;
    }
    auto s = std::make_shared<UdpSocket>(io, from_sockaddr(ss));
    s->v6_ = v6;
    if (s->socket_.assign(v6 ? asio::ip::udp::v6() : asio::ip::udp::v4(), fd, ec)) {
        ::close(fd);
        return nullptr;
    }
    if (s->socket_.non_blocking(true, ec)) {
        return nullptr;  // the asio socket owns and closes fd
    }
    return s;
}

std::shared_ptr<UdpSocket> UdpSocket::sibling(boost::asio::io_context& io, UdpSocket& of,
                                              boost::system::error_code& ec) {
    const int ofd = of.socket_.native_handle();
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(ofd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
        ec.assign(errno, boost::system::system_category());
        return nullptr;
    }
    const bool v6 = ss.ss_family == AF_INET6;
    int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        ec.assign(errno, boost::system::system_category());
        return nullptr;
    }
    auto fail = [&] {
        ec.assign(errno, boost::system::system_category());
        ::close(fd);
        return nullptr;
    };
    int on = 1;
    if (v6) {
        int v6only = 0;
        socklen_t olen = sizeof v6only;
        if (::getsockopt(ofd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen) != 0 ||
            ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) != 0 ||
            ::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on) != 0) {
            return fail();
        }
    } else if (::setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on) != 0) {
        return fail();
    }
    if (::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        return fail();
    }
    auto s = std::make_shared<UdpSocket>(io, of.endpoint_);
    s->v6_ = v6;
    if (s->socket_.assign(v6 ? asio::ip::udp::v6() : asio::ip::udp::v4(), fd, ec)) {
        ::close(fd);
        return nullptr;
    }
    if (s->socket_.non_blocking(true, ec)) {
        return nullptr;
    }
    return s;
}

void UdpSocket::close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
}

int UdpSocket::receive(RxBatch& rx) {
    rx.count_ = 0;
    for (std::size_t i = 0; i < kBatchSize; ++i) {
        msghdr& mh = rx.msgs_[i].msg_hdr;
        mh = msghdr{};
        mh.msg_name = &rx.names_[i];
        mh.msg_namelen = sizeof rx.names_[i];
        mh.msg_iov = &rx.iov_[i];
        mh.msg_iovlen = 1;
        if (pktinfo_) {
            mh.msg_control = rx.control_[i].bytes;
            mh.msg_controllen = sizeof rx.control_[i].bytes;
        }
        rx.msgs_[i].msg_len = 0;
    }
    int n;
    do {
        // MSG_TRUNC: msg_len reports the datagram's real length.
        n = ::recvmmsg(socket_.native_handle(), rx.msgs_.data(), kBatchSize,
                       MSG_DONTWAIT | MSG_TRUNC, nullptr);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    }
    for (int k = 0; k < n; ++k) {
        auto i = static_cast<std::size_t>(k);
        msghdr& mh = rx.msgs_[i].msg_hdr;
        Received& r = rx.received_[i];
        r.length = rx.msgs_[i].msg_len;
        r.bytes = std::span<const std::uint8_t>(rx.buffers_[i].data(),
                                                std::min(r.length, kReceiveBufferSize));
        r.peer = rx.names_[i];
        r.peer_len = mh.msg_namelen;
        r.source = from_sockaddr(r.peer);
        r.ifindex = 0;
        r.bound_local = !pktinfo_;
        if (!pktinfo_) {
            r.local = endpoint_.address;
        } else if (!parse_pktinfo(mh, r.local, r.ifindex)) {
            // No packet info (cannot happen with the options set): the bound
            // address is the best answer; the wildcard lets the kernel choose.
            r.local = endpoint_.address;
        }
    }
    rx.count_ = static_cast<std::size_t>(n);
    return n;
}

UdpSocket::SendResult UdpSocket::send(TxBatch& tx) {
    SendResult res;
    std::size_t off = 0;
    while (off < tx.count_) {
        int n = ::sendmmsg(socket_.native_handle(), tx.msgs_.data() + off,
                           static_cast<unsigned>(tx.count_ - off), MSG_DONTWAIT);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) {
                continue;
            }
            // The datagram at `off` failed (EAGAIN with a full send buffer,
            // EHOSTUNREACH...): count it, skip it, go on with the rest.
            res.last_errno = n < 0 ? errno : EIO;
            ++res.failed;
            ++off;
            continue;
        }
        res.sent += static_cast<std::size_t>(n);
        off += static_cast<std::size_t>(n);
    }
    tx.clear();
    return res;
}

}  // namespace pmd::io
