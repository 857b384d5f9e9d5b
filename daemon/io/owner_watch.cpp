// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/owner_watch.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "daemon/io/log.hpp"

namespace pmd::io {

namespace {

// pidfd_open(2), through syscall(2) so that an older libc does not matter.
int open_pidfd(std::int64_t pid) {
    return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
}

}  // namespace

std::string boot_id() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    if (!std::getline(in, id) || id.size() > 64) {
        return "";
    }
    return id;
}

std::optional<std::uint64_t> process_start_time(std::int64_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) {
        return std::nullopt;
    }
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so
    // count fields after the last ')'. Field 22 is the 20th after it.
    const auto close = line.rfind(')');
    if (close == std::string::npos) {
        return std::nullopt;
    }
    std::istringstream fields(line.substr(close + 1));
    std::string field;
    for (int i = 0; i < 20; ++i) {
        if (!(fields >> field)) {
            return std::nullopt;
        }
    }
    try {
        std::size_t used = 0;
        const auto value = std::stoull(field, &used);
        return used == field.size() ? std::optional(static_cast<std::uint64_t>(value))
                                    : std::nullopt;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::optional<std::string> OwnerWatch::identify(OwnerProcess& p) {
    const int fd = open_pidfd(p.pid);
    if (fd < 0) {
        const int err = errno;
        if (err == ESRCH) {
            return "pid " + std::to_string(p.pid) + ": no such process";
        }
        return "pid " + std::to_string(p.pid) +
               ": cannot watch it (pidfd_open: " + std::strerror(err) +
               (err == ENOSYS ? "; Linux 5.3 or later is needed" : "") + ")";
    }
    p.start_time = process_start_time(p.pid);
    p.boot_id = boot_id();
    identified_[p.pid] = std::make_unique<Watch>(io_, fd);
    return std::nullopt;
}

std::optional<std::string> OwnerWatch::gone(const OwnerProcess& p) {
    const std::string now_boot = boot_id();
    if (!p.boot_id.empty() && !now_boot.empty() && p.boot_id != now_boot) {
        return "the system rebooted since";
    }
    const int fd = open_pidfd(p.pid);
    if (fd < 0) {
        if (errno == ESRCH) {
            return "no process " + std::to_string(p.pid);
        }
        return "cannot watch process " + std::to_string(p.pid) + ": " + std::strerror(errno);
    }
    ::close(fd);
    if (p.start_time) {
        const auto start = process_start_time(p.pid);
        if (start && *start != *p.start_time) {
            return "process " + std::to_string(p.pid) + " is another program now";
        }
    }
    return std::nullopt;
}

struct OwnerWatch::Watch {
    explicit Watch(boost::asio::io_context& io, int fd) : pidfd(io, fd) {}
    boost::asio::posix::stream_descriptor pidfd;
};

OwnerWatch::OwnerWatch(boost::asio::io_context& io, OnExit on_exit)
    : io_(io), on_exit_(std::move(on_exit)) {}

OwnerWatch::~OwnerWatch() {
    stop();
}

void OwnerWatch::watch(std::span<const OwnerProcess> owners) {
    std::map<std::int64_t, std::unique_ptr<Watch>> kept;
    for (const OwnerProcess& p : owners) {
        if (auto it = watches_.find(p.pid); it != watches_.end()) {
            kept.emplace(p.pid, std::move(it->second));
            continue;
        }
        std::unique_ptr<Watch> w;
        if (auto it = identified_.find(p.pid); it != identified_.end()) {
            w = std::move(it->second);
        } else {
            const int fd = open_pidfd(p.pid);
            if (fd < 0) {
                if (errno == ESRCH) {
                    // Exited already: nobody will tell us later, so report
                    // it now, from the loop.
                    boost::asio::post(io_, [this, pid = p.pid] { on_exit_(pid); });
                } else {
                    log::warning("cannot watch owner process " + std::to_string(p.pid) +
                                 " (pidfd_open: " + std::strerror(errno) +
                                 "); its registrations stay, tried again at the next change");
                }
                continue;
            }
            w = std::make_unique<Watch>(io_, fd);
        }
        arm(p.pid, *w);
        kept.emplace(p.pid, std::move(w));
    }
    identified_.clear();
    // What is left in watches_ is no longer wanted: closing cancels its wait.
    watches_ = std::move(kept);
}

void OwnerWatch::arm(std::int64_t pid, Watch& watch) {
    Watch* w = &watch;
    w->pidfd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                        [this, pid, w](const boost::system::error_code& ec) {
                            if (ec == boost::asio::error::operation_aborted) {
                                return;  // unwatched or stopped; w may be gone
                            }
                            auto found = watches_.find(pid);
                            if (found == watches_.end() || found->second.get() != w) {
                                return;
                            }
                            watches_.erase(found);
                            on_exit_(pid);
                        });
}

void OwnerWatch::stop() {
    watches_.clear();
}

}  // namespace pmd::io
