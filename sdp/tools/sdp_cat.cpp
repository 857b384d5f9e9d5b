// SPDX-License-Identifier: Apache-2.0
// sdp-cat: netcat over SDP (soft iWARP provider, or rdma-core with
// --provider rdma|auto).
//
//   sdp-cat [-v] HOST PORT          connect to the Conventional Address HOST:PORT
//                                   (Port Mapper, SDP, else plain TCP)
//   sdp-cat [-v] --sdp HOST PORT    SDP straight to HOST:PORT (no Port Mapper)
//   sdp-cat [-v] -l [--register CONV] [--control PATH] PORT
//                                   accept one SDP connection on PORT
//   sdp-cat [-v] -l --register CONV --on-demand PORTS [--single-use]
//                                   on-demand: sdp-pmd has a listener opened
//                                   on a port of PORTS ("7001-7004") for each
//                                   client's PMReq; accept one connection
//
// stdin goes to the peer (EOF: half-close), the peer's bytes go to stdout;
// the program ends when the peer's stream ends. -v reports on stderr which
// transport was used (sdp / tcp fallback and why). --provider soft|rdma|auto
// selects the iWARP provider (default soft; see docs/rdma.md).
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sdp/stream.hpp"

namespace {

void usage() {
    std::fprintf(stderr,
                 "usage: sdp-cat [-v] [OPTIONS] [--pmsp IP:PORT] [--no-fallback] HOST PORT\n"
                 "       sdp-cat [-v] [OPTIONS] --sdp HOST PORT\n"
                 "       sdp-cat [-v] [OPTIONS] -l [--register CONV_IP:PORT] "
                 "[--control SOCKET] [--bind IP] PORT\n"
                 "       sdp-cat [-v] [OPTIONS] -l --register CONV_IP:PORT --on-demand PORTS "
                 "[--single-use] [--control SOCKET] [--bind IP]\n"
                 "OPTIONS: [--provider soft|rdma|auto] [--mechanism bcopy|zcopy|auto] "
                 "[--io-timeout MS]\n");
}

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return false;
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

int run(sdp::Stream& s, bool verbose) {
    // stdin -> stream in a thread, stream -> stdout here.
    std::error_code wec;
    std::atomic<bool> stop{false};
    std::thread in([&] {
        std::vector<std::uint8_t> buf(64 * 1024);
        while (!stop) {
            pollfd p{STDIN_FILENO, POLLIN, 0};
            if (::poll(&p, 1, 100) == 0) {
                continue;
            }
            ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                break;
            }
            s.write(std::span(buf.data(), static_cast<std::size_t>(n)), wec);
            if (wec) {
                return;
            }
        }
        s.shutdown_write();
    });
    std::vector<std::uint8_t> buf(256 * 1024);
    std::error_code ec;
    int rc = 0;
    while (true) {
        std::size_t n = s.read_some(buf, ec);
        if (ec) {
            std::fprintf(stderr, "sdp-cat: read: %s%s%s\n", ec.message().c_str(),
                         verbose ? " — " : "", verbose ? s.describe().c_str() : "");
            rc = 1;
            break;
        }
        if (n == 0) {
            break;
        }
        if (!write_all(STDOUT_FILENO, buf.data(), n)) {
            rc = 1;
            break;
        }
    }
    // The peer finished sending: keep sending stdin until its EOF (then
    // half-close), unless the stream failed. close() then waits for the
    // DisConn exchange.
    if (rc != 0) {
        stop = true;
    }
    in.join();
    if (rc != 0) {
        s.abort();
        return rc;
    }
    const auto st = s.stats();
    // A close that failed (linger ran out: abortive) may have lost queued
    // bytes: a failure too.
    const auto cec = s.close();
    if (cec) {
        std::fprintf(stderr, "sdp-cat: close: %s\n", cec.message().c_str());
        rc = 1;
    }
    if (verbose) {
        // Which mechanisms carried the bytes (9.2, 9.3): for the VM lab
        // and for operators checking that zero copy happens.
        std::fprintf(stderr,
                     "sdp-cat: bytes sent %llu received %llu; zero copy sent %llu received %llu "
                     "(RDMA Write sent %llu received %llu); SendSm sent %llu received %llu; "
                     "SrcAvailCancel sent %llu\n",
                     static_cast<unsigned long long>(st.bytes_sent),
                     static_cast<unsigned long long>(st.bytes_received),
                     static_cast<unsigned long long>(st.zcopy_bytes_sent),
                     static_cast<unsigned long long>(st.zcopy_bytes_received),
                     static_cast<unsigned long long>(st.write_zcopy_bytes_sent),
                     static_cast<unsigned long long>(st.write_zcopy_bytes_received),
                     static_cast<unsigned long long>(st.send_sm_sent),
                     static_cast<unsigned long long>(st.send_sm_received),
                     static_cast<unsigned long long>(st.src_avail_cancel_sent));
    }
    // Any write error means stdin did not all reach the peer: a failure,
    // a broken pipe too (the bytes after it are lost).
    if (wec) {
        std::fprintf(stderr, "sdp-cat: write: %s\n", wec.message().c_str());
        return 1;
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    bool verbose = false, listen = false, direct = false, fallback = true, single_use = false;
    std::string reg, on_demand, control = "/run/sdp-pmd/control.sock", bind_ip = "0.0.0.0", pmsp;
    sdp::Provider prov = sdp::Provider::soft;
    sdp::Mechanism mech = sdp::Mechanism::bcopy;
    long io_timeout_ms = 0;
    std::vector<std::string> pos;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage();
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "-v") {
            verbose = true;
        } else if (a == "-l") {
            listen = true;
        } else if (a == "--sdp") {
            direct = true;
        } else if (a == "--no-fallback") {
            fallback = false;
        } else if (a == "--register") {
            reg = next();
        } else if (a == "--on-demand") {
            on_demand = next();
        } else if (a == "--single-use") {
            single_use = true;
        } else if (a == "--control") {
            control = next();
        } else if (a == "--bind") {
            bind_ip = next();
        } else if (a == "--pmsp") {
            pmsp = next();
        } else if (a == "--mechanism") {
            const std::string v = next();
            const auto m = sdp::parse_mechanism(v);
            if (!m) {
                std::fprintf(stderr,
                             "sdp-cat: bad --mechanism '%s' (expected bcopy, zcopy or auto)\n",
                             v.c_str());
                return 2;
            }
            mech = *m;
        } else if (a == "--io-timeout") {
            const std::string v = next();
            char* end = nullptr;
            errno = 0;
            io_timeout_ms = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || errno != 0 || io_timeout_ms < 0 ||
                io_timeout_ms > 3600L * 1000) {
                std::fprintf(stderr,
                             "sdp-cat: bad --io-timeout '%s' (milliseconds, 0 .. 3600000)\n",
                             v.c_str());
                return 2;
            }
        } else if (a == "--provider") {
            const std::string v = next();
            const auto p = sdp::parse_provider(v);
            if (!p) {
                std::fprintf(stderr, "sdp-cat: bad --provider '%s' (expected soft, rdma or auto)\n",
                             v.c_str());
                return 2;
            }
            prov = *p;
        } else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else if (a.size() > 1 && a[0] == '-') {
            std::fprintf(stderr, "sdp-cat: unknown option %s\n", a.c_str());
            usage();
            return 2;
        } else {
            pos.push_back(a);
        }
    }
    sdp::StreamOptions so;
    so.fallback = fallback;
    so.iwarp_provider = prov;
    so.mechanism = mech;
    so.io_timeout = std::chrono::milliseconds(io_timeout_ms);
    if (!pmsp.empty()) {
        auto ep = pm::Endpoint::parse(pmsp);
        if (!ep) {
            std::fprintf(stderr, "sdp-cat: bad --pmsp %s\n", pmsp.c_str());
            return 2;
        }
        so.pmsp = *ep;
    }
    sdp::Stream s;
    if (listen) {
        // On-demand: no fixed port (the pool's come and go).
        if (pos.size() != (on_demand.empty() ? 1u : 0u) || (!on_demand.empty() && reg.empty()) ||
            (single_use && on_demand.empty())) {
            usage();
            return 2;
        }
        const std::string port_text = on_demand.empty() ? pos[0] : "0";
        auto local = pm::Endpoint::parse(bind_ip + ":" + port_text);
        if (!local) {
            std::fprintf(stderr, "sdp-cat: bad address %s:%s\n", bind_ip.c_str(),
                         port_text.c_str());
            return 2;
        }
        sdp::Acceptor acc;
        sdp::AcceptorOptions ao;
        ao.stream = so;
        if (!reg.empty()) {
            ao.control_socket = control;
            ao.conventional = reg;
        }
        if (!on_demand.empty()) {
            auto ports = pm::parse_port_list(on_demand, 1024);
            if (!ports) {
                std::fprintf(stderr,
                             "sdp-cat: bad --on-demand %s (expected ports such as 7001-7004,7010; "
                             "at most 1024)\n",
                             on_demand.c_str());
                return 2;
            }
            ao.on_demand = sdp::AcceptorOptions::OnDemandPorts{*ports, single_use};
        }
        if (auto ec = acc.open(*local, ao)) {
            const std::string& detail =
                !acc.open_error().empty() ? acc.open_error() : acc.registration_error();
            std::fprintf(stderr, "sdp-cat: listen %s: %s%s%s\n", local->to_string().c_str(),
                         ec.message().c_str(), detail.empty() ? "" : ": ", detail.c_str());
            return 1;
        }
        if (verbose && !on_demand.empty()) {
            std::fprintf(stderr, "sdp-cat: on-demand ports %s on %s, registered %s\n",
                         on_demand.c_str(), bind_ip.c_str(), reg.c_str());
        } else if (verbose) {
            std::fprintf(
                stderr, "sdp-cat: listening on %s (sdp, %s provider)%s%s\n",
                acc.local_endpoint().to_string().c_str(), sdp::to_string(acc.listener_provider()),
                acc.registered() ? ", registered " : "", acc.registered() ? reg.c_str() : "");
        }
        if (auto ec = acc.accept(s)) {
            std::fprintf(stderr, "sdp-cat: accept: %s\n", ec.message().c_str());
            return 1;
        }
        if (verbose) {
            std::fprintf(stderr, "sdp-cat: accepted %s\n", s.describe().c_str());
        }
        int rc = run(s, verbose);
        acc.close();
        return rc;
    }
    if (pos.size() != 2) {
        usage();
        return 2;
    }
    auto ep = pm::Endpoint::parse(pos[0] + ":" + pos[1]);
    if (!ep) {
        ep = pm::Endpoint::parse("[" + pos[0] + "]:" + pos[1]);
    }
    if (!ep) {
        std::fprintf(stderr, "sdp-cat: bad address %s %s (numeric IP expected)\n", pos[0].c_str(),
                     pos[1].c_str());
        return 2;
    }
    std::error_code ec = direct ? s.connect_sdp(*ep, so) : s.connect(*ep, so);
    if (ec) {
        std::fprintf(stderr, "sdp-cat: connect %s: %s%s%s\n", ep->to_string().c_str(),
                     ec.message().c_str(), s.info().reason.empty() ? "" : ": ",
                     s.info().reason.c_str());
        return 1;
    }
    if (verbose) {
        const auto& i = s.info();
        if (s.used() == sdp::Transport::sdp) {
            std::fprintf(stderr, "sdp-cat: connected over SDP (%s provider) to %s (%s)%s%s\n",
                         i.provider.c_str(), i.peer.to_string().c_str(), s.describe().c_str(),
                         i.reason.empty() ? "" : ": ", i.reason.c_str());
        } else {
            std::fprintf(stderr, "sdp-cat: connected over TCP (fallback) to %s: %s\n",
                         i.peer.to_string().c_str(), i.reason.c_str());
        }
    }
    return run(s, verbose);
}
