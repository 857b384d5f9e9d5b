// SPDX-License-Identifier: Apache-2.0
// A connected pair of loopback TCP sockets for the socket-driver tests.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

namespace sdp::test {

// {connecting end, accepted end}; gtest failures if a call fails.
inline std::pair<int, int> tcp_pair() {
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(l, 1), 0);
    EXPECT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &al), 0);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    int s = ::accept(l, nullptr, nullptr);
    ::close(l);
    return {c, s};
}

}  // namespace sdp::test
