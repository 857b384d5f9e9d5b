// SPDX-License-Identifier: Apache-2.0
// The service manager notification protocol through libsystemd: state lines
// such as "READY=1" go to the socket named by $NOTIFY_SOCKET. Without
// $NOTIFY_SOCKET (not started by systemd with Type=notify) nothing is sent.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace pmd::io {

// Sends `state` ("READY=1\nSTATUS=..."). Returns false with `error` set when
// $NOTIFY_SOCKET is set but the message could not be delivered.
bool sd_notify(std::string_view state, std::string* error = nullptr);

// True when $NOTIFY_SOCKET is set: only then are periodic STATUS= lines
// worth building.
bool notify_socket_set();

// The watchdog timeout the service manager asked for ($WATCHDOG_USEC, with
// $WATCHDOG_PID, if set, naming this process), or nullopt when it is off.
std::optional<std::chrono::microseconds> watchdog_timeout();

// "RELOADING=1\nMONOTONIC_USEC=..." as systemd expects before a reload.
std::string reloading_state();

}  // namespace pmd::io
