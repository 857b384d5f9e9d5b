// SPDX-License-Identifier: Apache-2.0
// pmsp-sim: drives the sans-I/O PMSP core (pmd::Pmsp) with up to 10M
// simulated clients. No sockets, a fake clock: what is measured is the
// core's own cost (decode, lookup, table, encode of the reply) and memory.
//
// Phases, all bounded by --clients and --max-seconds:
//   fill   N clients each send a PMReq and never ack (the table grows to N);
//          every --step transactions: ns per PMReq for the step, bytes of
//          heap (mallinfo2) and of RSS (/proc/self/statm) per live
//          transaction, and ns per full 3-way transaction (PMReq, PMAccept,
//          PMAck) measured with --cycles transactions at that table size.
//   ack    every live transaction is acked: ns per PMAck, table back to 0.
// Prints one JSON object on stdout (steps as an array).
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bench/common/bench_util.hpp"
#include "daemon/core/pmsp.hpp"
#include "daemon/core/service.hpp"
#include "pmclient/message.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t rss_bytes() {
    std::ifstream in("/proc/self/statm");
    std::uint64_t size = 0;
    std::uint64_t resident = 0;
    in >> size >> resident;
    return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::uint64_t heap_bytes() {
    const struct mallinfo2 mi = ::mallinfo2();
    return mi.uordblks + mi.hblkhd;  // in use, including mmap()ed blocks
}

// Client i: CpIPAddr 10.x.y.z, CpPort from the high bits: a distinct 4-tuple
// for every i below 2^24 * 60000.
pm::Message request_for(std::uint64_t i, const pm::Endpoint& conv) {
    pm::Message m;
    m.type = pm::MessageType::request;
    m.ipv = pm::Family::v4;
    m.ap_addr = conv.address;
    m.ap_port = conv.port;
    m.cp_addr =
        pm::IpAddress::v4({10, static_cast<std::uint8_t>(i >> 16),
                           static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)});
    m.cp_port = static_cast<std::uint16_t>(1024 + (i >> 24) % 60000);
    m.assoc_handle = 0x5d9f000000000000ull ^ (i * 0x9E3779B97F4A7C15ull);
    return m;
}

double ns_per(Clock::duration d, std::uint64_t n) {
    return n ? static_cast<double>(
                   std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()) /
                   static_cast<double>(n)
             : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
    std::uint64_t clients = 1'000'000;
    std::uint64_t step = 0;  // default clients / 10
    std::uint64_t cycles = 100'000;
    double max_seconds = 300;
    for (int i = 1; i + 1 < argc || (i < argc && std::string_view(argv[i]) == "--help"); i += 2) {
        std::string_view a = argv[i];
        if (a == "--help") {
            std::puts(
                "usage: pmsp-sim [--clients N<=10000000] [--step N] [--cycles N] "
                "[--max-seconds S]");
            return 0;
        }
        auto n = bench::parse_number<double>(argv[i + 1]);
        if (!n || *n < 0) {
            std::fprintf(stderr, "pmsp-sim: bad value %s for %s\n", argv[i + 1], argv[i]);
            return 2;
        }
        if (a == "--clients" && *n >= 1 && *n <= 10'000'000) {
            clients = static_cast<std::uint64_t>(*n);
        } else if (a == "--step" && *n >= 1) {
            step = static_cast<std::uint64_t>(*n);
        } else if (a == "--cycles" && *n <= 10'000'000) {
            cycles = static_cast<std::uint64_t>(*n);
        } else if (a == "--max-seconds" && *n > 0 && *n <= 3600) {
            max_seconds = *n;
        } else {
            std::fprintf(stderr, "pmsp-sim: bad option %s %s\n", argv[i], argv[i + 1]);
            return 2;
        }
    }
    if (argc % 2 == 0) {
        std::fprintf(stderr, "pmsp-sim: options come in pairs (see --help)\n");
        return 2;
    }
    if (step == 0) {
        step = clients >= 10 ? clients / 10 : 1;
    }
    const auto wall_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(max_seconds));

    const pm::Endpoint conv = *pm::Endpoint::parse("127.0.0.1:80");
    pmd::Service svc;
    svc.name = "web";
    svc.conventional_address = conv.address;
    svc.conventional_port = conv.port;
    svc.sdp = {*pm::Endpoint::parse("127.0.0.1:8080")};
    auto registry = std::make_shared<const pmd::Registry>(std::vector<pmd::Service>{svc});
    pmd::Limits limits;
    limits.ack_timeout = std::chrono::hours(1);  // nothing expires during the run
    limits.max_transactions = clients + cycles + 1;
    const pm::IpAddress local = conv.address;

    // Fake clock: 1 us per datagram.
    pmd::TimePoint now{};
    const auto tick = std::chrono::microseconds(1);

    const std::uint64_t heap0 = heap_bytes();
    const std::uint64_t rss0 = rss_bytes();
    auto pmsp = std::make_unique<pmd::Pmsp>(limits, registry, 0x1234);
    std::uint64_t bad = 0;

    auto send_request = [&](std::uint64_t i) -> std::optional<pm::Wire> {
        const pm::Wire w = pm::encode(request_for(i, conv));
        const pm::Endpoint src{request_for(i, conv).cp_addr, 40000};
        now += tick;
        auto r = pmsp->on_datagram(w, src, local, now);
        if (r.outcome != pmd::Outcome::accepted || !r.reply) {
            ++bad;
        }
        return r.reply;
    };
    auto send_ack = [&](std::uint64_t i) {
        // The PMAccept the core would have sent: mapped address from config.
        const pm::Message req = request_for(i, conv);
        const pm::Message acc = pm::make_accept(req, svc.sdp[0], 0);
        const pm::Wire w = pm::encode(pm::make_ack(acc));
        now += tick;
        auto r = pmsp->on_datagram(w, pm::Endpoint{req.cp_addr, 40000}, local, now);
        if (r.outcome != pmd::Outcome::acked) {
            ++bad;
        }
    };

    std::string steps_json;
    std::uint64_t filled = 0;
    std::uint64_t cycle_base = 1ull << 40;  // cycle clients never collide with fill clients
    double bytes_at_1m_heap = 0;
    double bytes_at_1m_rss = 0;
    bool truncated = false;
    Clock::duration fill_total{};
    while (filled < clients) {
        if (Clock::now() >= wall_end) {
            truncated = true;
            break;
        }
        const std::uint64_t n = std::min(step, clients - filled);
        const auto t0 = Clock::now();
        for (std::uint64_t k = 0; k < n; ++k) {
            (void)send_request(filled + k);
        }
        const auto dt = Clock::now() - t0;
        fill_total += dt;
        filled += n;
        const std::uint64_t live = pmsp->transactions();
        const double heap_per =
            static_cast<double>(heap_bytes() - heap0) / static_cast<double>(live ? live : 1);
        const double rss_per =
            static_cast<double>(rss_bytes() - rss0) / static_cast<double>(live ? live : 1);
        if (filled >= 1'000'000 && bytes_at_1m_heap == 0) {
            bytes_at_1m_heap = heap_per;
            bytes_at_1m_rss = rss_per;
        }
        // Full 3-way transactions at this table size.
        const auto c0 = Clock::now();
        for (std::uint64_t k = 0; k < cycles; ++k) {
            (void)send_request(cycle_base + k);
            send_ack(cycle_base + k);
        }
        const auto cdt = Clock::now() - c0;
        cycle_base += cycles;
        char line[512];
        std::snprintf(line, sizeof line,
                      "%s{\"live\":%" PRIu64
                      ",\"ns_per_request\":%.1f,\"ns_per_3way\":%.1f,"
                      "\"heap_bytes_per_txn\":%.1f,\"rss_bytes_per_txn\":%.1f}",
                      steps_json.empty() ? "" : ",", live, ns_per(dt, n), ns_per(cdt, cycles),
                      heap_per, rss_per);
        steps_json += line;
        std::fprintf(stderr,
                     "live %10" PRIu64
                     "  PMReq %7.1f ns  3-way %7.1f ns  heap %6.1f B/txn  rss %6.1f B/txn\n",
                     live, ns_per(dt, n), ns_per(cdt, cycles), heap_per, rss_per);
    }
    const std::uint64_t live_max = pmsp->transactions();
    const auto a0 = Clock::now();
    for (std::uint64_t i = 0; i < filled; ++i) {
        send_ack(i);
    }
    const auto adt = Clock::now() - a0;
    const pmd::Counters& c = pmsp->counters();
    std::printf("{\"clients\":%" PRIu64 ",\"filled\":%" PRIu64
                ",\"truncated_by_time\":%s,"
                "\"live_max\":%" PRIu64
                ",\"ns_per_request_fill\":%.1f,\"ns_per_ack\":%.1f,"
                "\"heap_bytes_per_txn_at_1M\":%.1f,\"rss_bytes_per_txn_at_1M\":%.1f,"
                "\"live_after_acks\":%zu,\"accepted\":%" PRIu64 ",\"acked\":%" PRIu64
                ",\"unexpected_outcomes\":%" PRIu64 ",\"steps\":[%s]}\n",
                clients, filled, truncated ? "true" : "false", live_max, ns_per(fill_total, filled),
                ns_per(adt, filled), bytes_at_1m_heap, bytes_at_1m_rss, pmsp->transactions(),
                c[pmd::Outcome::accepted], c[pmd::Outcome::acked], bad, steps_json.c_str());
    return bad == 0 ? 0 : 1;
}
