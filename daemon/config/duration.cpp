// SPDX-License-Identifier: Apache-2.0
// parse_duration(): "5s", "250ms", "2m", "1h", "1.5s".
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "daemon/config/config.hpp"

namespace pmd {

namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

std::optional<std::int64_t> unit_milliseconds(std::string_view unit) {
    if (unit == "ms") {
        return 1;
    }
    if (unit == "s") {
        return 1000;
    }
    if (unit == "m") {
        return 60 * 1000;
    }
    if (unit == "h") {
        return 60 * 60 * 1000;
    }
    return std::nullopt;
}

}  // namespace

// Grammar: DIGITS [ "." DIGITS ] UNIT, UNIT one of ms s m h, nothing else (no
// sign, no spaces). A fraction is truncated to whole milliseconds, so "1.0005s"
// is 1000 ms.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
    using Rep = std::chrono::milliseconds::rep;
    static_assert(std::numeric_limits<Rep>::max() >= std::numeric_limits<std::int64_t>::max());

    std::size_t i = 0;
    while (i < text.size() && is_digit(text[i])) {
        ++i;
    }
    const std::string_view whole = text.substr(0, i);
    std::string_view fraction;
    if (i < text.size() && text[i] == '.') {
        const std::size_t start = ++i;
        while (i < text.size() && is_digit(text[i])) {
            ++i;
        }
        fraction = text.substr(start, i - start);
        if (fraction.empty()) {
            return std::nullopt;  // "1.s"
        }
    }
    if (whole.empty()) {
        return std::nullopt;  // "", ".5s", "-1s", "s"
    }
    const auto unit = unit_milliseconds(text.substr(i));
    if (!unit) {
        return std::nullopt;
    }

    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    std::int64_t count = 0;
    auto [end, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), count);
    if (ec != std::errc{} || end != whole.data() + whole.size() || count > kMax / *unit) {
        return std::nullopt;
    }
    std::int64_t ms = count * *unit;

    // Only the first 12 fraction digits can matter: the largest unit is
    // 3.6e6 ms, so later digits are worth less than a millisecond. With at most
    // 12 digits, numerator * unit stays below 1e12 * 3.6e6 < 2^63.
    std::int64_t numerator = 0;
    std::int64_t denominator = 1;
    for (char c : fraction.substr(0, 12)) {
        numerator = numerator * 10 + (c - '0');
        denominator *= 10;
    }
    const std::int64_t extra = numerator * *unit / denominator;
    if (ms > kMax - extra) {
        return std::nullopt;
    }
    ms += extra;
    return std::chrono::milliseconds{ms};
}

}  // namespace pmd
