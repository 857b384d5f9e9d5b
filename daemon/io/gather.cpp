// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/gather.hpp"

namespace pmd::io::detail {

void log_worker_timeout(std::size_t index) {
    log::logger().limited(LogLevel::warning, "worker_timeout", [&] {
        return "worker " + std::to_string(index) + " did not answer within " +
               std::to_string(kWorkerReplyTimeout.count()) + " ms";
    });
}

void log_worker_error(std::size_t index, const char* what) {
    log::logger().limited(LogLevel::warning, "worker_error",
                          [&] { return "worker " + std::to_string(index) + ": " + what; });
}

void log_completion_error(const char* what) {
    log::logger().limited(LogLevel::error, "completion_error", [&] {
        return std::string("answering from the workers' replies: ") + what;
    });
}

}  // namespace pmd::io::detail
