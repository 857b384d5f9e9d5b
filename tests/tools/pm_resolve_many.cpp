// SPDX-License-Identifier: Apache-2.0
// pm-resolve-many: N resolutions through libpmclient, C at a time; prints a
// JSON line of how they ended. Exit 0 when every resolution ended as
// accepted, denied or timeout (the documented fallback), 1 otherwise.
//
//   pm-resolve-many --pmsp ADDR:PORT [--conventional ADDR:PORT] [--cp ADDR]
//                   [--count N] [--concurrency C] [--cp-port-base P]
//                   [--deadline-ms MS]
#include <cinttypes>
#include <cstdio>
#include <string_view>

#include "../../bench/common/bench_util.hpp"
#include "resolve_many.hpp"

int main(int argc, char** argv) {
    pmtools::ResolveManyOptions o;
    o.conventional = *pm::Endpoint::parse("127.0.0.1:80");
    o.cp_address = *pm::IpAddress::parse("127.0.0.1");
    bool have_pmsp = false;
    bool have_cp = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string_view a = argv[i];
        std::string_view v = argv[i + 1];
        bool ok = true;
        if (a == "--pmsp") {
            auto e = pm::Endpoint::parse(v);
            ok = have_pmsp = e.has_value();
            if (ok) {
                o.pmsp = *e;
            }
        } else if (a == "--conventional") {
            auto e = pm::Endpoint::parse(v);
            ok = e.has_value();
            if (ok) {
                o.conventional = *e;
            }
        } else if (a == "--cp") {
            auto e = pm::IpAddress::parse(v);
            ok = have_cp = e.has_value();
            if (ok) {
                o.cp_address = *e;
            }
        } else if (a == "--count") {
            auto n = bench::parse_number<std::uint32_t>(v);
            ok = n && *n >= 1 && *n <= 60000;
            o.count = ok ? *n : 0;
        } else if (a == "--concurrency") {
            auto n = bench::parse_number<std::uint32_t>(v);
            ok = n && *n >= 1 && *n <= 8192;
            o.concurrency = ok ? *n : 0;
        } else if (a == "--cp-port-base") {
            auto n = bench::parse_number<std::uint16_t>(v);
            ok = n && *n >= 1024;
            o.cp_port_base = ok ? *n : 0;
        } else if (a == "--deadline-ms") {
            auto n = bench::parse_number<unsigned>(v);
            ok = n && *n >= 1 && *n <= 600000;
            if (ok) {
                o.request.deadline = std::chrono::milliseconds(*n);
            }
        } else {
            ok = false;
        }
        if (!ok) {
            std::fprintf(stderr, "pm-resolve-many: bad option %s %s\n", argv[i], argv[i + 1]);
            return 2;
        }
    }
    if (!have_pmsp || argc % 2 == 0) {
        std::fprintf(stderr,
                     "usage: pm-resolve-many --pmsp ADDR:PORT [--conventional ADDR:PORT] "
                     "[--cp ADDR] [--count N] [--concurrency C] [--cp-port-base P] "
                     "[--deadline-ms MS]\n");
        return 2;
    }
    if (!have_cp && o.conventional.address.is_v6()) {
        o.cp_address = *pm::IpAddress::parse("::1");
    }
    const auto r = pmtools::resolve_many(o);
    std::printf("{\"count\":%u,\"started\":%" PRIu64 ",\"completed\":%" PRIu64
                ",\"accepted\":%" PRIu64 ",\"denied\":%" PRIu64 ",\"timeout\":%" PRIu64
                ",\"error\":%" PRIu64 ",\"attempts\":%" PRIu64
                ",\"max_elapsed_ms\":%lld"
                ",\"first_error\":\"%s\"}\n",
                o.count, r.started, r.completed, r.accepted, r.denied, r.timeout, r.error,
                r.attempts, static_cast<long long>(r.max_elapsed.count()), r.first_error.c_str());
    const bool ok = r.completed == r.started && r.started == o.count && r.error == 0;
    return ok ? 0 : 1;
}
