// SPDX-License-Identifier: Apache-2.0
#include "pmclient/pm_time.hpp"

namespace pm {

CacheLifetime pm_time_lifetime(std::uint8_t pm_time) {
    using std::chrono::milliseconds;
    if (pm_time == kPmTimeSingleUse) {
        return {CacheLifetime::Kind::single_use, milliseconds{0}};
    }
    if (pm_time == kPmTimePermanent) {
        return {CacheLifetime::Kind::permanent, milliseconds{0}};
    }
    if (pm_time <= 127) {
        return {CacheLifetime::Kind::timed, milliseconds{pm_time * 250}};
    }
    return {CacheLifetime::Kind::timed, milliseconds{pm_time * 1000}};
}

std::uint8_t pm_time_from_duration(std::chrono::milliseconds d) {
    auto ms = d.count();
    if (ms <= 0) {
        return kPmTimeSingleUse;
    }
    if (ms < 128'000) {
        auto quarters = ms / 250;
        if (quarters < 1) {
            return 1;
        }
        return static_cast<std::uint8_t>(quarters > 127 ? 127 : quarters);
    }
    auto seconds = ms / 1000;
    return static_cast<std::uint8_t>(seconds > 254 ? 254 : seconds);
}

std::string pm_time_to_string(std::uint8_t pm_time) {
    auto life = pm_time_lifetime(pm_time);
    switch (life.kind) {
        case CacheLifetime::Kind::single_use:
            return "single-use";
        case CacheLifetime::Kind::permanent:
            return "permanent";
        case CacheLifetime::Kind::timed:
            break;
    }
    auto ms = life.duration.count();
    std::string s = std::to_string(ms / 1000);
    if (ms % 1000 != 0) {
        std::string frac = std::to_string(ms % 1000 + 1000).substr(1);
        while (!frac.empty() && frac.back() == '0') {
            frac.pop_back();
        }
        s += "." + frac;
    }
    return s + "s";
}

}  // namespace pm
