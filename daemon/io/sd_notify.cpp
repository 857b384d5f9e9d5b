// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/sd_notify.hpp"

#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace pmd::io {

bool sd_notify(std::string_view state, std::string* error) {
    // libsystemd does the work: finds $NOTIFY_SOCKET (path or abstract
    // namespace) and sends one datagram; it returns 0 when not under systemd.
    const std::string text(state);
    int r = ::sd_notify(0, text.c_str());
    if (r < 0) {
        if (error) {
            *error = std::string("sd_notify: ") + std::strerror(-r);
        }
        return false;
    }
    return true;
}

bool notify_socket_set() {
    const char* e = std::getenv("NOTIFY_SOCKET");
    return e != nullptr && *e != '\0';
}

std::optional<std::chrono::microseconds> watchdog_timeout() {
    std::uint64_t usec = 0;
    // unset_environment=0: $WATCHDOG_* stay for anyone who checks later.
    if (::sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) {
        return std::nullopt;
    }
    return std::chrono::microseconds(usec);
}

std::string reloading_state() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const auto usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
                      static_cast<unsigned long long>(ts.tv_nsec) / 1000ULL;
    return "RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec);
}

}  // namespace pmd::io
