// SPDX-License-Identifier: Apache-2.0
#include "pmclient/types.hpp"

#include <cmath>

namespace pmclient {

std::string validate(const RequestOptions& o) {
    using std::chrono::milliseconds;
    if (o.initial_timeout < milliseconds(1) || o.initial_timeout > milliseconds(60'000)) {
        return "initial_timeout must be between 1 ms and 60 s";
    }
    if (!std::isfinite(o.backoff_factor) || o.backoff_factor < 1.0 || o.backoff_factor > 16.0) {
        return "backoff_factor must be between 1.0 and 16.0";
    }
    if (o.max_retries > 32) {
        return "max_retries must be at most 32";
    }
    if (o.deadline < milliseconds(1) || o.deadline > milliseconds(600'000)) {
        return "deadline must be between 1 ms and 10 min";
    }
    if (o.pmsp && (o.pmsp->port == 0 || o.pmsp->address.is_unspecified())) {
        return "pmsp must have a non-zero port and a specified address";
    }
    if (o.pmsp && !o.pmsps.empty()) {
        return "set pmsp or pmsps, not both";
    }
    if (auto why = validate_pmsp_list(o.pmsps); !why.empty()) {
        return why;
    }
    if (o.per_pmsp_timeout < milliseconds(0) || o.per_pmsp_timeout > milliseconds(600'000)) {
        return "per_pmsp_timeout must be between 0 and 10 min";
    }
    return {};
}

std::string validate_pmsp_list(const std::vector<pm::Endpoint>& list) {
    if (list.size() > kMaxPmsps) {
        return "at most " + std::to_string(kMaxPmsps) + " PMSPs, not " +
               std::to_string(list.size());
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& e = list[i];
        if (e.port == 0 || e.address.is_unspecified()) {
            return "PMSP '" + e.to_string() + "' must have a non-zero port and a specified address";
        }
        for (std::size_t j = 0; j < i; ++j) {
            if (list[j].port == e.port && list[j].address.unmapped() == e.address.unmapped()) {
                return "PMSP '" + e.to_string() + "' is listed twice";
            }
        }
    }
    return {};
}

std::vector<pm::Endpoint> pmsp_list(const RequestOptions& o) {
    if (!o.pmsps.empty()) {
        return o.pmsps;
    }
    if (o.pmsp) {
        return {*o.pmsp};
    }
    return {};
}

std::string_view to_string(ResultKind k) {
    switch (k) {
        case ResultKind::accepted:
            return "accept";
        case ResultKind::denied:
            return "deny";
        case ResultKind::timeout:
            return "timeout";
        case ResultKind::error:
            return "error";
    }
    return "?";
}

std::string_view to_string(Errc e) {
    switch (e) {
        case Errc::none:
            return "none";
        case Errc::invalid_argument:
            return "invalid argument";
        case Errc::config:
            return "configuration error";
        case Errc::socket:
            return "socket error";
        case Errc::busy:
            return "too many resolutions in flight";
        case Errc::cancelled:
            return "cancelled";
        case Errc::internal:
            return "internal error";
    }
    return "?";
}

}  // namespace pmclient
