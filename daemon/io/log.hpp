// SPDX-License-Identifier: Apache-2.0
// sdp-pmd logging: one line per message on stderr, prefixed with the syslog
// priority in sd-daemon style ("<6>listening on 0.0.0.0:3935"), which journald
// turns into the record's priority.
//
// Lines below the configured level are skipped before they are formatted.
// Lines that a datagram can trigger (drops, denies) go through limited(): at
// most `rate_limit` lines per cause per second; the rest are counted and
// summarised once per window as "suppressed N messages of cause X", so a flood
// can never turn into unbounded log output.
//
// Thread-safe (a mutex around the per-cause table and the write); the level
// check is a relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "daemon/config/config.hpp"

namespace pmd::log {

using Clock = std::chrono::steady_clock;

class Logger {
  public:
    // Receives one complete line, "<N>message\n".
    using Sink = std::function<void(std::string_view line)>;

    Logger();  // writes to stderr, level info, 10 lines per cause per second

    void set_level(LogLevel level) { level_.store(level, std::memory_order_relaxed); }
    LogLevel level() const { return level_.load(std::memory_order_relaxed); }
    bool enabled(LogLevel level) const {
        return static_cast<int>(level) <= static_cast<int>(this->level());
    }
    // Lines per cause per second; 0 means no limit.
    void set_rate_limit(unsigned per_second);
    void set_sink(Sink sink);

    // Unlimited: lifecycle and administrative lines (start, reload, stop).
    void write(LogLevel level, std::string_view message);

    // Rate limited per cause. make() is called only when the line is written.
    template <class MakeMessage>
    void limited(LogLevel level, std::string_view cause, MakeMessage&& make,
                 Clock::time_point now = Clock::now()) {
        if (admit(level, cause, now)) {
            write(level, make());
        }
    }
    // True when a line of this cause may be written now; otherwise counts it.
    bool admit(LogLevel level, std::string_view cause, Clock::time_point now);

    // Writes the summary of every cause whose window has ended by `now` (all
    // of them with force). Returns true while some suppressed lines are still
    // waiting for their window to end.
    bool flush_suppressed(Clock::time_point now, bool force = false);
    bool has_suppressed() const;

  private:
    struct Cause {
        Clock::time_point window_start{};
        unsigned written = 0;
        std::uint64_t suppressed = 0;
        LogLevel level = LogLevel::debug;
    };
    void write_locked(LogLevel level, std::string_view message);
    void summarise_locked(const std::string& name, Cause& c);

    std::atomic<LogLevel> level_{LogLevel::info};
    mutable std::mutex mutex_;
    unsigned rate_limit_ = 10;
    std::map<std::string, Cause, std::less<>> causes_;
    Sink sink_;
};

// The process-wide logger.
Logger& logger();

inline void err(std::string_view m) {
    logger().write(LogLevel::error, m);
}
inline void warning(std::string_view m) {
    logger().write(LogLevel::warning, m);
}
inline void notice(std::string_view m) {
    logger().write(LogLevel::notice, m);
}
inline void info(std::string_view m) {
    logger().write(LogLevel::info, m);
}
inline void debug(std::string_view m) {
    if (logger().enabled(LogLevel::debug)) {
        logger().write(LogLevel::debug, m);
    }
}

}  // namespace pmd::log
