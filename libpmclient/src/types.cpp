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
