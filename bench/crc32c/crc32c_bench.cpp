// SPDX-License-Identifier: Apache-2.0
// crc32c-bench: throughput of the CRC32c implementations of sdp/iwarp (the
// MPA FPDU digest) at several input sizes, measured in one run: slicing-by-8
// tables, the three-stream crc32-instruction path (the baseline) and the
// VPCLMULQDQ folding path, with the ratio folding / baseline.
//
//   crc32c-bench [--time S] [--trials N] [--sizes N,N,...] [--offset B] [--json]
//
// Each measurement calls the function on the same buffer (64-byte aligned,
// plus --offset bytes, default 0) for about S seconds (default 0.1); every
// call starts from the previous call's result, so small sizes measure
// latency plus call overhead rather than overlapped independent calls. The
// implementations are measured in turn, N times (default 7); the median is
// reported. Sizes up to a few MiB are cache-resident after the first pass;
// the default 64 MiB row is out of cache (memory bandwidth).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/common/bench_util.hpp"
#include "sdp/iwarp/crc32c.hpp"

namespace {

using UpdateFn = std::uint32_t (*)(std::uint32_t, const std::uint8_t*, std::size_t);

struct Impl {
    const char* name;
    UpdateFn fn;
};

std::optional<std::vector<std::size_t>> parse_sizes(std::string_view s) {
    std::vector<std::size_t> out;
    while (!s.empty()) {
        const std::size_t comma = s.find(',');
        const auto n = bench::parse_number<std::size_t>(s.substr(0, comma));
        if (!n || *n == 0 || *n > (std::size_t{1} << 30)) {
            return std::nullopt;
        }
        out.push_back(*n);
        s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    }
    if (out.empty()) {
        return std::nullopt;
    }
    return out;
}

std::string size_label(std::size_t n) {
    if (n >= (1u << 20) && n % (1u << 20) == 0) {
        return std::to_string(n >> 20) + " MiB";
    }
    if (n >= 1024 && n % 1024 == 0) {
        return std::to_string(n >> 10) + " KiB";
    }
    return std::to_string(n) + " B";
}

// Bytes per second of fn over [p, p + n), calls chained, for about `seconds`.
double measure(UpdateFn fn, const std::uint8_t* p, std::size_t n, double seconds,
               std::uint32_t& sink) {
    using Clock = std::chrono::steady_clock;
    std::uint32_t state = sink;
    // Calibrate a batch of about 1/20 of the budget so the clock is read
    // rarely.
    std::size_t batch = 1;
    for (;;) {
        const auto t0 = Clock::now();
        for (std::size_t i = 0; i < batch; ++i) {
            state = fn(state, p, n);
        }
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        if (dt >= seconds / 20 || batch >= (std::size_t{1} << 40)) {
            break;
        }
        batch *= 2;
    }
    std::size_t calls = 0;
    const auto t0 = Clock::now();
    double dt = 0;
    do {
        for (std::size_t i = 0; i < batch; ++i) {
            state = fn(state, p, n);
        }
        calls += batch;
        dt = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (dt < seconds);
    sink = state;
    return static_cast<double>(calls) * static_cast<double>(n) / dt;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

int usage(int rc) {
    std::fprintf(rc ? stderr : stdout,
                 "usage: crc32c-bench [--time S] [--trials N] [--sizes N,N,...] [--offset B] "
                 "[--json]\n");
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    namespace d = sdp::iwarp::detail;
    double seconds = 0.1;
    int trials = 7;
    bool json = false;
    std::size_t offset = 0;
    std::vector<std::size_t> sizes = {64, 1024, 4096, std::size_t{64} << 10, 1u << 20, 64u << 20};
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--time" && i + 1 < argc) {
            const auto v = bench::parse_number<double>(argv[++i]);
            if (!v || *v <= 0 || *v > 60) {
                std::fprintf(stderr, "crc32c-bench: bad --time %s\n", argv[i]);
                return 2;
            }
            seconds = *v;
        } else if (a == "--trials" && i + 1 < argc) {
            const auto v = bench::parse_number<int>(argv[++i]);
            if (!v || *v <= 0 || *v > 1000) {
                std::fprintf(stderr, "crc32c-bench: bad --trials %s\n", argv[i]);
                return 2;
            }
            trials = *v;
        } else if (a == "--sizes" && i + 1 < argc) {
            const auto v = parse_sizes(argv[++i]);
            if (!v) {
                std::fprintf(stderr, "crc32c-bench: bad --sizes %s\n", argv[i]);
                return 2;
            }
            sizes = *v;
        } else if (a == "--offset" && i + 1 < argc) {
            const auto v = bench::parse_number<std::size_t>(argv[++i]);
            if (!v || *v > 4096) {
                std::fprintf(stderr, "crc32c-bench: bad --offset %s\n", argv[i]);
                return 2;
            }
            offset = *v;
        } else if (a == "--json") {
            json = true;
        } else {
            return usage(a == "-h" || a == "--help" ? 0 : 2);
        }
    }

    std::vector<Impl> impls = {{"table", &d::crc32c_update_sw}};
    if (d::crc32c_hw_available()) {
        impls.push_back({"crc32x3", &d::crc32c_update_hw});
    }
    const bool have_new = d::crc32c_vpclmul_available();
    if (have_new) {
        impls.push_back({"vpclmul", &d::crc32c_update_vpclmul});
    }

    const std::size_t max_size = *std::max_element(sizes.begin(), sizes.end());
    constexpr std::size_t kAlign = 64;
    std::unique_ptr<std::uint8_t[]> storage(new std::uint8_t[max_size + kAlign + offset]);
    auto* buf =
        reinterpret_cast<std::uint8_t*>(
            (reinterpret_cast<std::uintptr_t>(storage.get()) + kAlign - 1) & ~(kAlign - 1)) +
        offset;
    std::uint64_t x = 0x9E3779B97F4A7C15u;
    for (std::size_t i = 0; i < max_size; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = static_cast<std::uint8_t>(x);
    }

    std::uint32_t sink = 0xFFFFFFFFu;
    // gbps[size][impl] = median GB/s
    std::vector<std::vector<double>> gbps(sizes.size(), std::vector<double>(impls.size()));
    for (std::size_t s = 0; s < sizes.size(); ++s) {
        std::vector<std::vector<double>> runs(impls.size());
        for (int t = 0; t < trials; ++t) {
            for (std::size_t k = 0; k < impls.size(); ++k) {
                runs[k].push_back(measure(impls[k].fn, buf, sizes[s], seconds, sink) / 1e9);
            }
        }
        for (std::size_t k = 0; k < impls.size(); ++k) {
            gbps[s][k] = median(runs[k]);
        }
    }

    // The baseline is the crc32-instruction path; the ratio needs both.
    const bool ratio = have_new && impls.size() == 3;
    if (json) {
        std::printf(
            "{\"vpclmul_available\": %s, \"trials\": %d, \"seconds\": %g, \"offset\": %zu, "
            "\"rows\": [",
            have_new ? "true" : "false", trials, seconds, offset);
        for (std::size_t s = 0; s < sizes.size(); ++s) {
            std::printf("%s{\"bytes\": %zu", s ? ", " : "", sizes[s]);
            for (std::size_t k = 0; k < impls.size(); ++k) {
                std::printf(", \"%s_gbps\": %.3f", impls[k].name, gbps[s][k]);
            }
            if (ratio) {
                std::printf(", \"vpclmul_over_crc32x3\": %.3f", gbps[s][2] / gbps[s][1]);
            }
            std::printf("}");
        }
        std::printf("]}\n");
        return sink == 0x12345678u ? 1 : 0;  // keeps the results observable
    }

    std::printf(
        "CRC32c GB/s (median of %d x %g s; calls chained on one buffer, 64-byte aligned + %zu)\n",
        trials, seconds, offset);
    if (!have_new) {
        std::printf("(no VPCLMULQDQ/AVX-512 on this CPU: folding path not measured)\n");
    }
    std::printf("%10s", "size");
    for (const Impl& impl : impls) {
        std::printf(" %10s", impl.name);
    }
    if (ratio) {
        std::printf(" %17s", "vpclmul/crc32x3");
    }
    std::printf("\n");
    for (std::size_t s = 0; s < sizes.size(); ++s) {
        std::printf("%10s", size_label(sizes[s]).c_str());
        for (std::size_t k = 0; k < impls.size(); ++k) {
            std::printf(" %10.2f", gbps[s][k]);
        }
        if (ratio) {
            std::printf(" %16.2fx", gbps[s][2] / gbps[s][1]);
        }
        std::printf("\n");
    }
    return sink == 0x12345678u ? 1 : 0;
}
