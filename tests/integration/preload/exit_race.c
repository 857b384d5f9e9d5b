// SPDX-License-Identifier: Apache-2.0
// A program that starts a few non-blocking connect()s, registers each in an
// epoll set and returns from main() within a few milliseconds, while the
// library's connect threads may still be asking the Port Mapper or opening
// the connection: exit() must not crash (the library's process-wide objects
// those threads use are never destroyed by exit()).
//
//   preload_exit_race HOST PORT N DELAY_US
//     N non-blocking connect()s to HOST:PORT, DELAY_US spread between them,
//     then return 0.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s HOST PORT N DELAY_US\n", argv[0]);
        return 2;
    }
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", argv[1]);
        return 2;
    }
    const int n = atoi(argv[3]);
    const long us = atol(argv[4]);
    const int ep = epoll_create1(0);
    if (ep < 0) {
        perror("epoll_create1");
        return 2;
    }
    for (int i = 0; i < n; ++i) {
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            perror("socket");
            return 2;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = (uint64_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            perror("epoll_ctl");
            return 2;
        }
        if (connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
            perror("connect");
            return 2;
        }
        if (us > 0) {
            usleep((useconds_t)(us / n));
        }
    }
    return 0;  // the connects may still be in progress
}
