// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/sock_diag.hpp"

#include <algorithm>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstring>

namespace pmd::io {

namespace {

constexpr std::uint32_t kTcpListen = 10;  // TCP_LISTEN in the kernel's tcp_states.h

constexpr std::size_t align4(std::size_t n) {
    return (n + 3) & ~std::size_t{3};
}

template <class T>
T read_at(std::span<const std::uint8_t> bytes, std::size_t offset) {
    T v;
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    return v;
}

// The listener an inet_diag_msg (and its attributes) describes; false when
// the message is inconsistent.
bool parse_listener(std::span<const std::uint8_t> payload, Listener& out) {
    if (payload.size() < sizeof(inet_diag_msg)) {
        return false;
    }
    const auto msg = read_at<inet_diag_msg>(payload, 0);
    const std::uint16_t port = ntohs(msg.id.idiag_sport);
    if (msg.idiag_family == AF_INET) {
        std::array<std::uint8_t, 4> a{};
        std::memcpy(a.data(), msg.id.idiag_src, 4);
        out.local = pm::Endpoint{pm::IpAddress::v4(a), port};
    } else if (msg.idiag_family == AF_INET6) {
        std::array<std::uint8_t, 16> a{};
        std::memcpy(a.data(), msg.id.idiag_src, 16);
        out.local = pm::Endpoint{pm::IpAddress::v6(a), port};
    } else {
        return false;
    }
    out.v6only = false;
    // Attributes: rtattr {u16 len, u16 type} + value, each 4-aligned.
    std::size_t off = align4(sizeof(inet_diag_msg));
    while (off + 4 <= payload.size()) {
        const auto len = read_at<std::uint16_t>(payload, off);
        const auto type = read_at<std::uint16_t>(payload, off + 2);
        if (len < 4 || len > payload.size() - off) {
            return false;
        }
        if (type == INET_DIAG_SKV6ONLY && len >= 5) {
            out.v6only = payload[off + 4] != 0;
        }
        off += align4(len);
    }
    return true;
}

}  // namespace

std::vector<std::uint8_t> sock_diag_request(int family, std::uint32_t seq) {
    struct {
        nlmsghdr header;
        inet_diag_req_v2 request;
    } req{};
    req.header.nlmsg_len = sizeof req;
    req.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.header.nlmsg_seq = seq;
    req.request.sdiag_family = static_cast<std::uint8_t>(family);
    req.request.sdiag_protocol = IPPROTO_TCP;
    req.request.idiag_states = 1u << kTcpListen;
    std::vector<std::uint8_t> out(sizeof req);
    std::memcpy(out.data(), &req, sizeof req);
    return out;
}

DumpParse parse_sock_diag(std::span<const std::uint8_t> bytes, std::uint32_t seq,
                          std::vector<Listener>& out) {
    DumpParse r;
    std::size_t off = 0;
    while (off + sizeof(nlmsghdr) <= bytes.size()) {
        const auto h = read_at<nlmsghdr>(bytes, off);
        if (h.nlmsg_len < sizeof(nlmsghdr) || h.nlmsg_len > bytes.size() - off) {
            ++r.malformed;  // the rest of the datagram cannot be framed
            return r;
        }
        const auto payload = bytes.subspan(off + sizeof(nlmsghdr), h.nlmsg_len - sizeof(nlmsghdr));
        off += NLMSG_ALIGN(h.nlmsg_len);
        if (h.nlmsg_seq != seq) {
            ++r.stale;
            continue;
        }
        if (h.nlmsg_type == NLMSG_DONE) {
            r.status = DumpStatus::done;
            return r;
        }
        if (h.nlmsg_type == NLMSG_ERROR) {
            // nlmsgerr.error is a negative errno; 0 is an acknowledgement,
            // which a dump does not ask for: skipped. Negated in 64 bits so
            // that INT_MIN cannot overflow.
            if (payload.size() >= sizeof(int)) {
                const std::int64_t code = read_at<int>(payload, 0);
                if (code == 0) {
                    continue;
                }
                r.error = static_cast<int>(std::clamp<std::int64_t>(-code, 1, 4095));
            }
            r.status = DumpStatus::error;
            return r;
        }
        if (h.nlmsg_type != SOCK_DIAG_BY_FAMILY) {
            ++r.malformed;
            continue;
        }
        Listener l;
        if (parse_listener(payload, l)) {
            out.push_back(l);
        } else {
            ++r.malformed;
        }
    }
    if (off < bytes.size()) {
        ++r.malformed;  // trailing bytes shorter than a header
    }
    return r;
}

}  // namespace pmd::io
