// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/log.hpp"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace pmd::log {

namespace {

constexpr auto kWindow = std::chrono::seconds(1);

void write_stderr(std::string_view line) {
    // One write(2) per line so that lines from concurrent writers never mix.
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;  // nowhere left to report it
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

}  // namespace

Logger::Logger() : sink_(write_stderr) {}

void Logger::set_rate_limit(unsigned per_second) {
    std::lock_guard lock(mutex_);
    rate_limit_ = per_second;
}

void Logger::set_sink(Sink sink) {
    std::lock_guard lock(mutex_);
    sink_ = sink ? std::move(sink) : Sink(write_stderr);
}

void Logger::write(LogLevel level, std::string_view message) {
    if (!enabled(level)) {
        return;
    }
    std::lock_guard lock(mutex_);
    write_locked(level, message);
}

void Logger::write_locked(LogLevel level, std::string_view message) {
    std::string line;
    line.reserve(message.size() + 5);
    line += '<';
    line += static_cast<char>('0' + static_cast<int>(level));
    line += '>';
    // A message is one journal record: never let an embedded newline split it.
    for (char c : message) {
        line += (c == '\n' || c == '\r') ? ' ' : c;
    }
    line += '\n';
    sink_(line);
}

void Logger::summarise_locked(const std::string& name, Cause& c) {
    if (c.suppressed == 0) {
        return;
    }
    write_locked(c.level,
                 "suppressed " + std::to_string(c.suppressed) + " messages of cause " + name);
    c.suppressed = 0;
}

bool Logger::admit(LogLevel level, std::string_view cause, Clock::time_point now) {
    if (!enabled(level)) {
        return false;
    }
    std::lock_guard lock(mutex_);
    if (rate_limit_ == 0) {
        return true;
    }
    auto it = causes_.find(cause);
    if (it == causes_.end()) {
        it = causes_.emplace(std::string(cause), Cause{}).first;
        it->second.window_start = now;
    }
    Cause& c = it->second;
    if (now - c.window_start >= kWindow) {
        summarise_locked(it->first, c);
        c.window_start = now;
        c.written = 0;
    }
    if (c.written < rate_limit_) {
        ++c.written;
        return true;
    }
    ++c.suppressed;
    c.level = level;
    return false;
}

bool Logger::flush_suppressed(Clock::time_point now, bool force) {
    std::lock_guard lock(mutex_);
    bool pending = false;
    for (auto& [name, c] : causes_) {
        if (c.suppressed == 0) {
            continue;
        }
        if (force || now - c.window_start >= kWindow) {
            summarise_locked(name, c);
        } else {
            pending = true;
        }
    }
    return pending;
}

bool Logger::has_suppressed() const {
    std::lock_guard lock(mutex_);
    for (const auto& [name, c] : causes_) {
        if (c.suppressed != 0) {
            return true;
        }
    }
    return false;
}

Logger& logger() {
    static Logger instance;
    return instance;
}

}  // namespace pmd::log
