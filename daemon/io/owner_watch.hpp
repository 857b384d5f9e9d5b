// SPDX-License-Identifier: Apache-2.0
// The processes registrations are tied to (`register` with "pid"), watched
// through pidfds on the main thread's io_context: a pidfd becomes readable
// when its process exits, however it exits (even SIGKILL), so the
// registration goes within one loop turn. Linux 5.3 or later.
//
// Identity across a daemon restart: a stored owner is the same process when
// the kernel's boot ID is unchanged, the pid exists and, when /proc lets us
// read it, its start time is unchanged. Under the packaged unit
// (ProtectProc=invisible) another user's start time is unreadable; the pid
// alone is then trusted within one boot, which is safe in practice: a pid is
// reused only after the kernel has handed out every other one (pid_max is
// 4194304 on Debian 12), far more than a restart's few seconds see.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "daemon/core/registrations.hpp"

namespace pmd::io {

class OwnerWatch {
  public:
    // Called on the io_context's thread with the pid of a watched process
    // that exited (or could not be watched because it already had).
    using OnExit = std::function<void(std::int64_t pid)>;

    OwnerWatch(boost::asio::io_context& io, OnExit on_exit);
    ~OwnerWatch();
    OwnerWatch(const OwnerWatch&) = delete;
    OwnerWatch& operator=(const OwnerWatch&) = delete;

    // For a new registration: checks that process p.pid runs, fills in
    // its start time (when readable) and the boot ID, and keeps a pidfd for
    // it, so that the process is pinned from this moment (watch() uses it).
    // Returns why not.
    std::optional<std::string> identify(OwnerProcess& p);
    // For a registration read back from the state file: why `p` is no
    // longer running (another boot, no such pid, another start time), or
    // nullopt when it still is.
    static std::optional<std::string> gone(const OwnerProcess& p);

    // Watches exactly the processes `owners` (sorted by pid, each once):
    // new pids get a pidfd (the one identify() opened, if any), pids no
    // longer listed lose theirs. A pid that no longer exists is reported
    // through OnExit; one that cannot be watched for another reason (out of
    // descriptors) is logged and tried again at the next call, never taken
    // for an exit.
    void watch(std::span<const OwnerProcess> owners);
    // Closes every pidfd.
    void stop();
    std::size_t size() const { return watches_.size(); }

  private:
    struct Watch;
    // Waits for `watch`'s process to exit; a completion for a watch no
    // longer in watches_ is ignored.
    void arm(std::int64_t pid, Watch& watch);

    boost::asio::io_context& io_;
    OnExit on_exit_;
    std::map<std::int64_t, std::unique_ptr<Watch>> watches_;
    // pidfds opened by identify() and not yet taken by watch().
    std::map<std::int64_t, std::unique_ptr<Watch>> identified_;
};

// The kernel's boot ID (/proc/sys/kernel/random/boot_id), "" when unreadable.
std::string boot_id();
// Start time of process `pid` in clock ticks after boot (/proc/PID/stat
// field 22); nullopt when unreadable.
std::optional<std::uint64_t> process_start_time(std::int64_t pid);

}  // namespace pmd::io
