// SPDX-License-Identifier: Apache-2.0
// A client that keeps one epoll registration across connect(), the way
// Boost.Asio, Netty and nginx (registered before connect(), EPOLL_CTL_MOD
// later) and tokio/mio or Java NIO (one edge-triggered registration made
// while the connect is in progress) do, run through libsdp-preload.so
// against an echo server: the library puts other open files behind the
// descriptor number (at connect(), when SDP comes up, at a TCP fallback)
// and the registration must follow the number.
//
//   preload_epoll_connect MODE HOST PORT BYTES
//     before    ADD (EPOLLIN|EPOLLPRI|EPOLLERR|EPOLLHUP|EPOLLET) on the fresh
//               non-blocking socket, connect() (EINPROGRESS), MOD adding
//               EPOLLOUT, the end seen through that registration
//     blocking  the same ADD on a blocking socket, a blocking connect(), then
//               O_NONBLOCK and MOD
//     during    connect() (EINPROGRESS), then one ADD of EPOLLIN|EPOLLOUT|
//               EPOLLRDHUP|EPOLLET that is never changed
//     dup       connect() (EINPROGRESS), dup() it and close the original
//               number; one edge-triggered ADD of the copy, as in `during`
//     gone      ADD on the fresh non-blocking socket, then a DEL of it through
//               a dup() of the epoll descriptor (which the library does not
//               see as a DEL of its record), connect() (EINPROGRESS): the
//               deleted registration must not come back when the library
//               replaces the file (no event for 0.3 s, and a new ADD is not
//               EEXIST); then as `during`
// Then BYTES go to the echo server and come back, each wait through the
// same registration (edge-triggered: read and write until EAGAIN). Every
// wait is bounded. Prints "ok ..." or "FAIL ..." lines; exit 0 when all
// were ok.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failed = 0;

static void check(const char* what, int ok, const char* detail) {
    printf("%s %s%s%s\n", ok ? "ok" : "FAIL", what, ok || detail == NULL ? "" : ": ",
           ok || detail == NULL ? "" : detail);
    fflush(stdout);
    failed |= !ok;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const uint64_t kCookie = 0x5d9c0ffee0ddf00dULL;

// Waits (at most `secs`) for one of `want` on the registration: the events
// seen, 0 on timeout. Any event must carry our data.
static uint32_t wait_for(int ep, uint32_t want, double secs) {
    const double until = now() + secs;
    for (;;) {
        const double left = until - now();
        if (left <= 0) {
            return 0;
        }
        struct epoll_event ev[4];
        const int n = epoll_wait(ep, ev, 4, (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR) {
            check("epoll_wait", 0, strerror(errno));
            return 0;
        }
        for (int i = 0; i < n; ++i) {
            if (ev[i].data.u64 != kCookie) {
                check("epoll data is the program's", 0, "another value");
                return 0;
            }
            if (ev[i].events & want) {
                return ev[i].events;
            }
        }
    }
}

static int so_error(int fd) {
    int e = -1;
    socklen_t l = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) != 0) {
        return errno;
    }
    return e;
}

// epoll_ctl with our data, checked as `what`.
static void ctl(const char* what, int ep, int op, int fd, uint32_t events) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = kCookie;
    const int rc = epoll_ctl(ep, op, fd, &ev);
    check(what, rc == 0, strerror(errno));
}

// BYTES through the echo server and back; waits only through `ep`,
// reading and writing until EAGAIN after each event (edge-triggered).
static void echo(int ep, int fd, size_t n) {
    unsigned char* out = malloc(n);
    unsigned char* in = malloc(n);
    if (out == NULL || in == NULL) {
        check("malloc", 0, NULL);
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        out[i] = (unsigned char)(i * 2654435761u >> 13);
    }
    size_t sent = 0, got = 0;
    const double until = now() + 20;
    while (got < n && now() < until) {
        while (sent < n) {
            const ssize_t w = send(fd, out + sent, n - sent, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno != EAGAIN) {
                    check("send", 0, strerror(errno));
                    goto done;
                }
                break;
            }
            sent += (size_t)w;
        }
        for (;;) {
            const ssize_t r = recv(fd, in + got, n - got, 0);
            if (r > 0) {
                got += (size_t)r;
                continue;
            }
            if (r == 0) {
                goto done;  // end of stream before everything came back
            }
            if (errno != EAGAIN) {
                check("recv", 0, strerror(errno));
                goto done;
            }
            break;
        }
        if (got < n && wait_for(ep, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP, 5) == 0) {
            break;  // no event for 5 s: the registration went deaf
        }
    }
done:;
    char detail[96];
    snprintf(detail, sizeof detail, "%zu of %zu bytes sent, %zu back", sent, n, got);
    check("echo through the same registration", got == n && memcmp(in, out, n) == 0, detail);
    free(out);
    free(in);
}

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s before|blocking|during|dup|gone HOST PORT BYTES\n", argv[0]);
        return 2;
    }
    const char* mode = argv[1];
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(argv[3]));
    if (inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", argv[2]);
        return 2;
    }
    const size_t bytes = (size_t)strtoul(argv[4], NULL, 10);
    const int blocking = strcmp(mode, "blocking") == 0;
    const int before = blocking || strcmp(mode, "before") == 0;
    const int dup_it = strcmp(mode, "dup") == 0;
    const int gone = strcmp(mode, "gone") == 0;
    if (!before && !dup_it && !gone && strcmp(mode, "during") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM | (blocking ? 0 : SOCK_NONBLOCK), 0);
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0 || ep < 0) {
        perror("socket/epoll_create1");
        return 2;
    }
    char detail[96];
    // Boost.Asio's registration at open: everything but EPOLLOUT, ET.
    const uint32_t asio = EPOLLIN | EPOLLPRI | EPOLLERR | EPOLLHUP | EPOLLET;
    if (before) {
        ctl("ADD before connect()", ep, EPOLL_CTL_ADD, fd, asio);
    }
    if (gone) {
        ctl("ADD before connect()", ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT | EPOLLET);
        const int ep2 = dup(ep);
        check("dup of the epoll descriptor", ep2 >= 0, strerror(errno));
        ctl("DEL through the dup", ep2, EPOLL_CTL_DEL, fd, 0);
        close(ep2);
    }
    const int rc = connect(fd, (struct sockaddr*)&sa, sizeof sa);
    const int cerr = rc == 0 ? 0 : errno;
    if (blocking) {
        check("blocking connect()", rc == 0, strerror(cerr));
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        // Asio's MOD for a write that would block, here at once.
        ctl("MOD after connect()", ep, EPOLL_CTL_MOD, fd, asio | EPOLLOUT);
    } else {
        check("connect() EINPROGRESS", rc == -1 && cerr == EINPROGRESS, strerror(cerr));
        if (before) {
            ctl("MOD while in progress", ep, EPOLL_CTL_MOD, fd, asio | EPOLLOUT);
        } else {
            if (gone) {
                struct epoll_event ev[4];
                const int n = epoll_wait(ep, ev, 4, 300);
                snprintf(detail, sizeof detail, "%d events, data 0x%llx", n,
                         n > 0 ? (unsigned long long)ev[0].data.u64 : 0ULL);
                check("the deleted registration did not come back", n == 0, detail);
            }
            if (dup_it) {
                const int copy = dup(fd);
                const int derr = errno;
                check("dup while in progress", copy >= 0, strerror(derr));
                close(fd);
                fd = copy;
            }
            ctl("ADD while in progress", ep, EPOLL_CTL_ADD, fd,
                EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
        }
        const double t = now();
        const uint32_t ev = wait_for(ep, EPOLLOUT, 15);
        snprintf(detail, sizeof detail, "events 0x%x after %.3f s", ev, now() - t);
        check("EPOLLOUT at the end of connect()", (ev & EPOLLOUT) != 0, detail);
        const int e = so_error(fd);
        check("SO_ERROR 0", e == 0, strerror(e));
    }
    if (before) {
        // Asio, having written, asks for reads only again.
        ctl("MOD back to reads", ep, EPOLL_CTL_MOD, fd, asio);
        // And for writes too once a send would block: the MOD must reach
        // the file now at the number.
        ctl("MOD with writes", ep, EPOLL_CTL_MOD, fd, asio | EPOLLOUT);
    }
    echo(ep, fd, bytes);
    ctl("DEL at the end", ep, EPOLL_CTL_DEL, fd, 0);
    close(fd);
    close(ep);
    return failed ? 1 : 0;
}
