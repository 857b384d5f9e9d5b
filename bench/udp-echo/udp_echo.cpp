// SPDX-License-Identifier: Apache-2.0
// udp-echo: the smallest useful UDP server, as a yardstick for sdp-pmd. One
// thread, one socket, no state: recvmmsg a batch, sendmmsg it back to the
// senders. Its throughput is what one thread of this machine can do with
// the kernel's UDP path alone.
//
//   udp-echo [--listen ADDR:PORT] [--max-seconds S]
//
// Prints "listening on ADDR:PORT" (the real port when 0 was asked) and then
// runs until SIGTERM / SIGINT or --max-seconds (default 3600), whichever is
// first; then prints "echoed N" on stdout.
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string_view>

#include "bench/common/bench_util.hpp"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
    g_stop = 1;
}

constexpr unsigned kBatch = 64;
constexpr std::size_t kBufSize = 2048;

}  // namespace

int main(int argc, char** argv) {
    pm::Endpoint listen = *pm::Endpoint::parse("127.0.0.1:0");
    double max_seconds = 3600;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--listen" && i + 1 < argc) {
            auto e = pm::Endpoint::parse(argv[++i]);
            if (!e) {
                std::fprintf(stderr, "udp-echo: bad --listen %s\n", argv[i]);
                return 2;
            }
            listen = *e;
        } else if (a == "--max-seconds" && i + 1 < argc) {
            auto n = bench::parse_number<double>(argv[++i]);
            if (!n || *n <= 0 || *n > 86400) {
                std::fprintf(stderr, "udp-echo: bad --max-seconds %s\n", argv[i]);
                return 2;
            }
            max_seconds = *n;
        } else {
            std::fprintf(stderr, "usage: udp-echo [--listen ADDR:PORT] [--max-seconds S]\n");
            return a == "-h" || a == "--help" ? 0 : 2;
        }
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;  // no SA_RESTART: recvmmsg returns EINTR
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);

    sockaddr_storage ss;
    socklen_t len = bench::to_sockaddr(listen, ss);
    int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        std::perror("udp-echo: bind");
        return 1;
    }
    int sz = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    timeval tv{0, 200'000};  // wake up to check the time limit
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    std::printf("listening on %s\n", bench::from_sockaddr(ss).to_string().c_str());
    std::fflush(stdout);

    static std::array<std::array<std::uint8_t, kBufSize>, kBatch> bufs;
    std::array<sockaddr_storage, kBatch> peers{};
    std::array<iovec, kBatch> iov{};
    std::array<mmsghdr, kBatch> msgs{};
    std::uint64_t echoed = 0;
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(max_seconds));
    while (!g_stop && std::chrono::steady_clock::now() < end) {
        for (unsigned k = 0; k < kBatch; ++k) {
            iov[k] = {bufs[k].data(), kBufSize};
            msgs[k] = mmsghdr{};
            msgs[k].msg_hdr.msg_name = &peers[k];
            msgs[k].msg_hdr.msg_namelen = sizeof peers[k];
            msgs[k].msg_hdr.msg_iov = &iov[k];
            msgs[k].msg_hdr.msg_iovlen = 1;
        }
        int n = ::recvmmsg(fd, msgs.data(), kBatch, MSG_WAITFORONE, nullptr);
        if (n <= 0) {
            continue;  // EINTR, EAGAIN (time limit check)
        }
        for (int k = 0; k < n; ++k) {
            iov[static_cast<std::size_t>(k)].iov_len = msgs[static_cast<std::size_t>(k)].msg_len;
        }
        int off = 0;
        for (int tries = 0; off < n && tries < 8; ++tries) {
            int r = ::sendmmsg(fd, msgs.data() + off, static_cast<unsigned>(n - off), 0);
            if (r <= 0) {
                break;  // a full send buffer drops the rest, like any UDP server
            }
            off += r;
        }
        echoed += static_cast<std::uint64_t>(off);
    }
    std::printf("echoed %" PRIu64 "\n", echoed);
    ::close(fd);
    return 0;
}
