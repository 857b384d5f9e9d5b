// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the bench programs: endpoint <-> sockaddr, a
// log-linear latency histogram, strict numeric argument parsing.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"

namespace bench {

using pm::from_sockaddr;
using pm::to_sockaddr;

template <typename T>
std::optional<T> parse_number(std::string_view s) {
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) {
        return std::nullopt;
    }
    return v;
}

// Log-linear histogram of nanosecond values: exact below 64, then 64
// sub-buckets per power of two (relative error < 1.6%). Fixed size.
class Histogram {
  public:
    static constexpr unsigned kSub = 64;
    static constexpr unsigned kMaxExp = 42;  // values up to ~2^47 ns (~39 h)
    Histogram() : buckets_(kSub * (kMaxExp + 2), 0) {}

    void record(std::uint64_t v) {
        ++buckets_[index(v)];
        ++count_;
        sum_ += v;
        if (v < min_) {
            min_ = v;
        }
        if (v > max_) {
            max_ = v;
        }
    }
    std::uint64_t count() const { return count_; }
    std::uint64_t min() const { return count_ ? min_ : 0; }
    std::uint64_t max() const { return max_; }
    double mean() const {
        return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0;
    }
    // Upper bound of the bucket holding the q-quantile.
    std::uint64_t quantile(double q) const {
        if (count_ == 0) {
            return 0;
        }
        auto target = static_cast<std::uint64_t>(q * static_cast<double>(count_));
        if (target >= count_) {
            target = count_ - 1;
        }
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < buckets_.size(); ++i) {
            seen += buckets_[i];
            if (seen > target) {
                const std::uint64_t hi = upper(i);
                return hi < max_ ? hi : max_;
            }
        }
        return max_;
    }

  private:
    static std::size_t index(std::uint64_t v) {
        if (v < kSub) {
            return static_cast<std::size_t>(v);
        }
        const unsigned e = static_cast<unsigned>(std::bit_width(v)) - 7;  // v >> e in [64,128)
        if (e > kMaxExp) {
            return kSub * (kMaxExp + 2) - 1;
        }
        return kSub * (e + 1) + static_cast<std::size_t>((v >> e) - kSub);
    }
    static std::uint64_t upper(std::size_t i) {
        if (i < kSub) {
            return i;
        }
        const std::size_t e = i / kSub - 1;
        const std::uint64_t sub = i % kSub + kSub;
        return ((sub + 1) << e) - 1;
    }

    std::vector<std::uint64_t> buckets_;
    std::uint64_t count_ = 0;
    std::uint64_t sum_ = 0;
    std::uint64_t min_ = ~std::uint64_t{0};
    std::uint64_t max_ = 0;
};

}  // namespace bench
