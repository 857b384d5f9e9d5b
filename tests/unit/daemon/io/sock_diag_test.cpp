// SPDX-License-Identifier: Apache-2.0
// The sock_diag request and reply parser of the health checker: replies
// written byte by byte as the kernel lays them out, cut and corrupted ones
// counted and never read past their end.
#include <gtest/gtest.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <random>

#include "daemon/io/sock_diag.hpp"

namespace pmd::io {
namespace {

using Bytes = std::vector<std::uint8_t>;

void append(Bytes& out, const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), b, b + n);
}

void pad4(Bytes& out) {
    while (out.size() % 4) {
        out.push_back(0);
    }
}

// One netlink message: header + payload, padded.
void message(Bytes& out, std::uint16_t type, std::uint32_t seq, const Bytes& payload) {
    nlmsghdr h{};
    h.nlmsg_len = static_cast<std::uint32_t>(sizeof h + payload.size());
    h.nlmsg_type = type;
    h.nlmsg_flags = NLM_F_MULTI;
    h.nlmsg_seq = seq;
    append(out, &h, sizeof h);
    append(out, payload.data(), payload.size());
    pad4(out);
}

Bytes listener(int family, const char* addr, std::uint16_t port, std::optional<bool> v6only) {
    inet_diag_msg m{};
    m.idiag_family = static_cast<std::uint8_t>(family);
    m.idiag_state = 10;
    m.id.idiag_sport = htons(port);
    auto ip = *pm::IpAddress::parse(addr);
    std::memcpy(m.id.idiag_src, ip.bytes().data(), family == AF_INET ? 4 : 16);
    Bytes out;
    append(out, &m, sizeof m);
    pad4(out);
    // An attribute before SKV6ONLY, to walk past.
    std::uint16_t len = 4 + 1;
    std::uint16_t type = INET_DIAG_SHUTDOWN;
    append(out, &len, 2);
    append(out, &type, 2);
    out.push_back(0);
    pad4(out);
    if (v6only) {
        type = INET_DIAG_SKV6ONLY;
        append(out, &len, 2);
        append(out, &type, 2);
        out.push_back(*v6only ? 1 : 0);
        pad4(out);
    }
    return out;
}

TEST(SockDiag, RequestAsksForTcpListenersOfTheFamily) {
    auto req = sock_diag_request(AF_INET6, 77);
    ASSERT_EQ(req.size(), sizeof(nlmsghdr) + sizeof(inet_diag_req_v2));
    nlmsghdr h;
    std::memcpy(&h, req.data(), sizeof h);
    EXPECT_EQ(h.nlmsg_len, req.size());
    EXPECT_EQ(h.nlmsg_type, SOCK_DIAG_BY_FAMILY);
    EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
    EXPECT_EQ(h.nlmsg_seq, 77u);
    inet_diag_req_v2 r;
    std::memcpy(&r, req.data() + sizeof h, sizeof r);
    EXPECT_EQ(r.sdiag_family, AF_INET6);
    EXPECT_EQ(r.sdiag_protocol, IPPROTO_TCP);
    EXPECT_EQ(r.idiag_states, 1u << 10);
}

TEST(SockDiag, ParsesListenersWithV6OnlyAndTheEnd) {
    Bytes reply;
    message(reply, SOCK_DIAG_BY_FAMILY, 5, listener(AF_INET, "127.0.0.1", 8080, std::nullopt));
    message(reply, SOCK_DIAG_BY_FAMILY, 5, listener(AF_INET6, "::", 8081, true));
    message(reply, SOCK_DIAG_BY_FAMILY, 5, listener(AF_INET6, "::1", 8082, false));
    std::vector<Listener> out;
    auto r = parse_sock_diag(reply, 5, out);
    EXPECT_EQ(r.status, DumpStatus::more);
    EXPECT_EQ(r.malformed, 0u);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].local.to_string(), "127.0.0.1:8080");
    EXPECT_FALSE(out[0].v6only);
    EXPECT_EQ(out[1].local.to_string(), "[::]:8081");
    EXPECT_TRUE(out[1].v6only);
    EXPECT_FALSE(out[2].v6only);

    Bytes done;
    message(done, NLMSG_DONE, 5, Bytes(4, 0));
    EXPECT_EQ(parse_sock_diag(done, 5, out).status, DumpStatus::done);
}

TEST(SockDiag, ErrorsStaleAndUnknownMessages) {
    Bytes reply;
    message(reply, SOCK_DIAG_BY_FAMILY, 4, listener(AF_INET, "127.0.0.1", 1, std::nullopt));
    message(reply, 0x77, 5, Bytes(8, 0));
    int err = -EACCES;
    Bytes e(sizeof err + sizeof(nlmsghdr), 0);
    std::memcpy(e.data(), &err, sizeof err);
    message(reply, NLMSG_ERROR, 5, e);
    std::vector<Listener> out;
    auto r = parse_sock_diag(reply, 5, out);
    EXPECT_EQ(r.status, DumpStatus::error);
    EXPECT_EQ(r.error, EACCES);
    EXPECT_EQ(r.stale, 1u);
    EXPECT_EQ(r.malformed, 1u);
    EXPECT_TRUE(out.empty());
}

TEST(SockDiag, CutAndCorruptRepliesAreCountedNeverOverread) {
    Bytes good;
    message(good, SOCK_DIAG_BY_FAMILY, 1, listener(AF_INET6, "::1", 9, true));
    // Every prefix of a valid message, on its own heap buffer so that a
    // read past the end shows under the sanitizers.
    for (std::size_t n = 0; n < good.size(); ++n) {
        Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
        std::vector<Listener> out;
        auto r = parse_sock_diag(cut, 1, out);
        EXPECT_EQ(r.status, DumpStatus::more);
        EXPECT_LE(out.size(), 1u);
    }
    // A header claiming more than there is.
    Bytes liar = good;
    std::uint32_t big = 1u << 30;
    std::memcpy(liar.data(), &big, 4);
    std::vector<Listener> out;
    EXPECT_EQ(parse_sock_diag(liar, 1, out).malformed, 1u);
    // An attribute claiming more than its message.
    Bytes bad_attr = good;
    const std::size_t attr = sizeof(nlmsghdr) + NLMSG_ALIGN(sizeof(inet_diag_msg));
    std::uint16_t huge = 0xfff0;
    std::memcpy(bad_attr.data() + attr, &huge, 2);
    out.clear();
    auto r = parse_sock_diag(bad_attr, 1, out);
    EXPECT_EQ(r.malformed, 1u);
    EXPECT_TRUE(out.empty());
    // Random bytes: never a crash.
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
        Bytes noise(rng() % 200);
        for (auto& b : noise) {
            b = static_cast<std::uint8_t>(rng());
        }
        if (noise.size() >= 8 && (i % 2)) {
            std::uint32_t len = static_cast<std::uint32_t>(rng() % (noise.size() + 1));
            std::memcpy(noise.data(), &len, 4);
        }
        std::vector<Listener> o;
        parse_sock_diag(noise, 1, o);
    }
}

}  // namespace
}  // namespace pmd::io
