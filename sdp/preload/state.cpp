// SPDX-License-Identifier: Apache-2.0
#include "sdp/preload/state.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pmclient/sockaddr.hpp"
#include "sdp/preload/bridge.hpp"
#include "sdp/preload/connecting.hpp"
#include "sdp/preload/listener.hpp"

namespace sdp::preload {
namespace {

thread_local int tl_internal __attribute__((tls_model("initial-exec"))) = 0;

template <typename F>
F resolve(const char* name) {
    void* p = ::dlsym(RTLD_NEXT, name);
    return reinterpret_cast<F>(p);
}

std::string env_or(const char* name, const std::string& dflt) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : dflt;
}

int log_level_of(const std::string& v) {
    if (v.empty() || v == "0" || v == "off") {
        return 0;
    }
    if (v == "1" || v == "error") {
        return 1;
    }
    if (v == "2" || v == "info") {
        return 2;
    }
    return 3;  // "3", "debug", anything else asked for detail
}

int log_fd() {
    static int fd = [] {
        const char* f = std::getenv("SDP_PRELOAD_LOG_FILE");
        if (f == nullptr || *f == '\0') {
            return 2;
        }
        InternalScope in;
        int d = ::open(f, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        return d < 0 ? 2 : d;
    }();
    return fd;
}

Settings load_settings() {
    InternalScope in;
    Settings s;
    s.log_level = log_level_of(env_or("SDP_PRELOAD_LOG", ""));
    s.stats_file = env_or("SDP_PRELOAD_STATS", "");
    s.control_socket =
        env_or("SDP_PRELOAD_CONTROL", env_or("SDP_PMD_SOCKET", "/run/sdp-pmd/control.sock"));
    s.config_file = env_or("SDP_PRELOAD_CONFIG", "/etc/sdp/libsdp.conf");
    s.program = program_invocation_short_name != nullptr ? program_invocation_short_name : "";
    if (auto p = parse_provider(env_or("SDP_PRELOAD_PROVIDER", "soft"))) {
        s.provider = *p;
    }
    if (const char* v = std::getenv("SDP_PRELOAD_EXIT_LINGER_MS"); v != nullptr) {
        s.exit_linger = std::chrono::milliseconds(std::clamp(std::atol(v), 0L, 60000L));
    }
    if (const char* v = std::getenv("SDP_PRELOAD_RESOLVE_MS"); v != nullptr) {
        s.resolve_deadline = std::chrono::milliseconds(std::clamp(std::atol(v), 1L, 60000L));
    }
    if (const char* v = std::getenv("SDP_PRELOAD_NEGATIVE_S"); v != nullptr) {
        s.negative_ttl = std::chrono::seconds(std::clamp(std::atol(v), 0L, 86400L));
    }
    if (const char* v = std::getenv("SDP_PRELOAD_DIRECT"); v != nullptr) {
        s.direct = std::string_view(v) != "0";
    }
    int fd = ::open(s.config_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT) {
            s.rules_broken = true;
            std::fprintf(stderr, "libsdp-preload: %s: %s; using plain TCP\n", s.config_file.c_str(),
                         std::strerror(errno));
        }
        return s;  // no file: `both` for everything
    }
    std::string text;
    char chunk[4096];
    for (;;) {
        ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            s.rules_broken = true;
            std::fprintf(stderr, "libsdp-preload: %s: %s; using plain TCP\n", s.config_file.c_str(),
                         std::strerror(err));
            return s;
        }
        if (n == 0 || text.size() > kMaxFileSize) {
            break;  // parse_rules() reports a file that is too large
        }
        text.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fd);
    auto r = parse_rules(text);
    if (r.error) {
        s.rules_broken = true;
        std::fprintf(stderr, "libsdp-preload: %s:%d: %s; using plain TCP\n", s.config_file.c_str(),
                     r.error->line, r.error->message.c_str());
    } else {
        s.rules = std::move(r.rules);
    }
    return s;
}

}  // namespace

const Real& real() {
    static const Real r = [] {
        Real x{};
#define SDP_PRELOAD_RESOLVE(name) x.name = resolve<decltype(x.name)>(#name)
        SDP_PRELOAD_RESOLVE(socket);
        SDP_PRELOAD_RESOLVE(socketpair);
        SDP_PRELOAD_RESOLVE(connect);
        SDP_PRELOAD_RESOLVE(listen);
        SDP_PRELOAD_RESOLVE(accept4);
        SDP_PRELOAD_RESOLVE(close);
        SDP_PRELOAD_RESOLVE(close_range);
        SDP_PRELOAD_RESOLVE(dup);
        SDP_PRELOAD_RESOLVE(dup2);
        SDP_PRELOAD_RESOLVE(dup3);
        SDP_PRELOAD_RESOLVE(fcntl);
        SDP_PRELOAD_RESOLVE(fcntl64);
        SDP_PRELOAD_RESOLVE(getsockname);
        SDP_PRELOAD_RESOLVE(getpeername);
        SDP_PRELOAD_RESOLVE(getsockopt);
        SDP_PRELOAD_RESOLVE(setsockopt);
        SDP_PRELOAD_RESOLVE(sendmsg);
        SDP_PRELOAD_RESOLVE(recvmsg);
        SDP_PRELOAD_RESOLVE(pthread_create);
        SDP_PRELOAD_RESOLVE(epoll_ctl);
        SDP_PRELOAD_RESOLVE(write);
        SDP_PRELOAD_RESOLVE(writev);
        SDP_PRELOAD_RESOLVE(send);
        SDP_PRELOAD_RESOLVE(sendto);
        SDP_PRELOAD_RESOLVE(eventfd);
#undef SDP_PRELOAD_RESOLVE
        if (x.fcntl64 == nullptr) {
            x.fcntl64 = x.fcntl;
        }
        return x;
    }();
    return r;
}

InternalScope::InternalScope() {
    ++tl_internal;
}
InternalScope::~InternalScope() {
    --tl_internal;
}
bool internal_call() {
    return tl_internal > 0;
}
void mark_internal_thread() {
    tl_internal = 1;
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

SignalsBlocked::SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    // A fault's signal is the faulting thread's whatever the mask says
    // (blocked, the kernel kills the process without the program's
    // handler): left as they are.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP}) {
        sigdelset(&all, sig);
    }
    ::pthread_sigmask(SIG_BLOCK, &all, &old_);
}
SignalsBlocked::~SignalsBlocked() {
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

// --- descriptor table ---------------------------------------------------------

bool FdTable::tracked(int fd) const {
    if (fd < 0 || fd >= kMaxFd) {
        return false;
    }
    return (bits_[fd / 64].load(std::memory_order_acquire) >> (fd % 64)) & 1u;
}

bool FdTable::current(int fd, const Entry& e) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && st.st_dev == e.dev && st.st_ino == e.ino;
}

bool FdTable::swappable(int fd) const {
    if (fd < 0 || fd >= kMaxFd) {
        return false;
    }
    return (swap_bits_[fd / 64].load(std::memory_order_acquire) >> (fd % 64)) & 1u;
}

bool FdTable::sdp_hint(int fd) const {
    if (fd < 0 || fd >= kMaxFd) {
        return false;
    }
    return (sdp_bits_[fd / 64].load(std::memory_order_acquire) >> (fd % 64)) & 1u;
}

bool FdTable::may_swap(const Entry& e) {
    return e.kind == Entry::Kind::candidate || e.kind == Entry::Kind::connecting;
}

void FdTable::mark_locked(int fd, const Entry& e) {
    const std::uint64_t bit = std::uint64_t{1} << (fd % 64);
    bits_[fd / 64].fetch_or(bit, std::memory_order_release);
    if (e.kind == Entry::Kind::sdp) {
        sdp_bits_[fd / 64].fetch_or(bit, std::memory_order_release);
    } else {
        sdp_bits_[fd / 64].fetch_and(~bit, std::memory_order_release);
    }
    if (may_swap(e)) {
        swap_bits_[fd / 64].fetch_or(bit, std::memory_order_release);
    } else {
        // An SDP connection or a listener keeps its file: the program's
        // epoll_ctl() of it goes straight to the kernel from now on.
        swap_bits_[fd / 64].fetch_and(~bit, std::memory_order_release);
        regs_.erase(fd);
    }
}

void FdTable::refresh(const std::shared_ptr<Entry>& e) {
    std::lock_guard lk(mu_);
    for (const auto& [fd, held] : map_) {
        if (held == e) {
            mark_locked(fd, *e);
        }
    }
}

FdTable::Map::iterator FdTable::erase_locked(Map::iterator it) {
    const int fd = it->first;
    bits_[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_release);
    swap_bits_[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_release);
    sdp_bits_[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_release);
    regs_.erase(fd);  // the epfds' bits stay until they close (a stale bit costs a lock)
    return map_.erase(it);
}

std::shared_ptr<Entry> FdTable::peek(int fd) {
    if (!tracked(fd)) {
        return nullptr;
    }
    std::lock_guard lk(mu_);
    auto it = map_.find(fd);
    return it == map_.end() ? nullptr : it->second;
}

std::shared_ptr<Entry> FdTable::get(int fd) {
    if (!tracked(fd)) {
        return nullptr;
    }
    struct stat st {};
    const bool open = ::fstat(fd, &st) == 0;
    std::lock_guard lk(mu_);
    auto it = map_.find(fd);
    if (it == map_.end()) {
        return nullptr;
    }
    if (!open || st.st_dev != it->second->dev || st.st_ino != it->second->ino) {
        // Closed behind the library's back, the number now another file's.
        erase_locked(it);
        return nullptr;
    }
    return it->second;
}

void FdTable::put(int fd, std::shared_ptr<Entry> e) {
    if (fd < 0 || fd >= kMaxFd) {
        return;  // beyond the table: plain TCP (docs/preload.md, "Limits")
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return;
    }
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    std::lock_guard lk(mu_);
    auto [it, fresh] = map_.insert_or_assign(fd, std::move(e));
    if (fresh) {
        regs_.erase(fd);  // none should be there: only numbers in the table have some
    }
    mark_locked(fd, *it->second);
}

bool FdTable::put_if_file(int fd, std::shared_ptr<Entry> e, dev_t dev, ino_t ino) {
    if (fd < 0 || fd >= kMaxFd) {
        return false;
    }
    std::lock_guard lk(mu_);
    struct stat st {};
    if (map_.count(fd) != 0 || ::fstat(fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino) {
        return false;
    }
    e->dev = dev;
    e->ino = ino;
    mark_locked(fd, *e);
    map_[fd] = std::move(e);
    return true;
}

std::shared_ptr<Entry> FdTable::take(int fd) {
    if (!tracked(fd)) {
        return nullptr;
    }
    std::lock_guard lk(mu_);
    auto it = map_.find(fd);
    if (it == map_.end()) {
        bits_[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_release);
        swap_bits_[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_release);
        sdp_bits_[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_release);
        return nullptr;
    }
    auto e = std::move(it->second);
    erase_locked(it);
    return e;
}

int FdTable::replace(const std::shared_ptr<Entry>& from, const std::shared_ptr<Entry>& to) {
    int n = 0;
    std::lock_guard lk(mu_);
    for (auto it = map_.begin(); it != map_.end();) {
        if (it->second != from) {
            ++it;
            continue;
        }
        ++n;
        if (to) {
            to->dev = from->dev;
            to->ino = from->ino;
            it->second = to;
            mark_locked(it->first, *to);
            ++it;
        } else {
            it = erase_locked(it);
        }
    }
    return n;
}

bool FdTable::holds(const std::shared_ptr<Entry>& e) {
    std::lock_guard lk(mu_);
    return std::any_of(map_.begin(), map_.end(), [&](const auto& kv) { return kv.second == e; });
}

bool FdTable::swap_locked(int fd, int with, int flags) {
    // The registrations of fd are on the file now at fd: taken off it first
    // (after the dup3, a DEL would reach the new file; the old one may live
    // on elsewhere, a copy the library keeps, a dup of the program's, and
    // would go on reporting its events under the program's data).
    // Only those the kernel still had are made again: a record whose DEL
    // fails (ENOENT, or EBADF/EINVAL when the epoll descriptor is gone) was
    // removed by a way the library does not see (a forked child's DEL on
    // the shared epoll set, a DEL through a dup of the epoll descriptor, an
    // epoll descriptor closed by a raw system call and its number reused),
    // and making it again would hand the program its old data (often a
    // pointer it has freed). Such records are dropped.
    auto rit = regs_.find(fd);
    std::vector<EpollReg> moving;
    if (rit != regs_.end()) {
        std::vector<EpollReg> kept;
        for (auto& r : rit->second) {
            if (real().epoll_ctl(r.epfd, EPOLL_CTL_DEL, fd, nullptr) == 0) {
                kept.push_back(r);
            } else {
                log(3, "descriptor %d: its epoll registration in %d is gone (%s): forgotten", fd,
                    r.epfd, std::strerror(errno));
            }
        }
        moving = kept;
        if (kept.empty()) {
            regs_.erase(rit);
        } else {
            rit->second = std::move(kept);
        }
    }
    const bool ok = real().dup3(with, fd, flags) >= 0;
    const int err = errno;
    // Made again on the file now at fd (the new one, or the old one when
    // dup3 failed): same events, same data. An ADD of a file that is
    // ready already reports it, edge-triggered too.
    std::size_t failed = 0;
    for (auto& r : moving) {
        epoll_event ev = r.ev;
        if (real().epoll_ctl(r.epfd, EPOLL_CTL_ADD, fd, &ev) != 0 &&
            (errno != EEXIST || real().epoll_ctl(r.epfd, EPOLL_CTL_MOD, fd, &ev) != 0)) {
            ++failed;
            log(1, "descriptor %d: its epoll registration in %d could not move: %s", fd, r.epfd,
                std::strerror(errno));
        }
    }
    if (!moving.empty()) {
        counters().epoll_moved += moving.size() - failed;
        counters().epoll_move_failed += failed;
    }
    errno = err;
    return ok;
}

bool FdTable::swap_file(int fd, const std::shared_ptr<Entry>& expect, int with, int flags,
                        std::shared_ptr<Entry> next) {
    std::lock_guard lk(mu_);
    if (fd < 0 || fd >= kMaxFd) {
        return expect == nullptr && swap_locked(fd, with, flags);  // beyond the table: no entry
    }
    auto it = map_.find(fd);
    // Under the lock: the program's close()/dup2()/epoll_ctl() of fd wait
    // here, so fd cannot become another file of the program's meanwhile and
    // no registration of it is made on the old file after the move.
    if (expect && (it == map_.end() || it->second != expect || !current(fd, *expect))) {
        errno = EBADF;  // the program closed or replaced it meanwhile
        return false;
    }
    if (!swap_locked(fd, with, flags)) {
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return false;
    }
    next->dev = st.st_dev;
    next->ino = st.st_ino;
    mark_locked(fd, *next);
    map_.insert_or_assign(fd, std::move(next));
    return true;
}

int FdTable::swap_file_all(const std::shared_ptr<Entry>& expect, int with,
                           std::shared_ptr<Entry> next) {
    struct stat st {};
    if (::fstat(with, &st) != 0) {
        return 0;
    }
    next->dev = st.st_dev;
    next->ino = st.st_ino;
    int n = 0;
    std::lock_guard lk(mu_);
    for (auto it = map_.begin(); it != map_.end();) {
        if (it->second != expect) {
            ++it;
            continue;
        }
        const int fd = it->first;
        const int fdfl = real().fcntl(fd, F_GETFD);
        if (!current(fd, *expect) || fdfl < 0 ||
            !swap_locked(fd, with, (fdfl & FD_CLOEXEC) != 0 ? O_CLOEXEC : 0)) {
            it = erase_locked(it);  // no longer the program's socket
            continue;
        }
        it->second = next;
        mark_locked(fd, *next);
        ++n;
        ++it;
    }
    return n;
}

int FdTable::epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
    std::lock_guard lk(mu_);
    auto it = map_.find(fd);
    if (it != map_.end() && !current(fd, *it->second)) {
        erase_locked(it);  // another file than the entry's: not recorded
        it = map_.end();
    }
    const bool record = it != map_.end() && may_swap(*it->second);
    const int r = real().epoll_ctl(epfd, op, fd, ev);
    if (r != 0 || !record) {
        return r;
    }
    const int saved = errno;
    if (epfd < 0 || epfd >= kMaxFd) {
        // Beyond ep_bits_: not recorded, so this registration stays on the
        // old file at a swap (docs/preload.md, "Limits").
        if (op == EPOLL_CTL_ADD) {
            ++counters().epoll_move_failed;
            static std::atomic<bool> logged{false};
            if (!logged.exchange(true)) {
                log(1,
                    "epoll descriptor %d is beyond %d: registrations in it do not follow "
                    "descriptors the library replaces",
                    epfd, kMaxFd - 1);
            }
        }
        errno = saved;
        return r;
    }
    auto& regs = regs_[fd];
    auto same =
        std::find_if(regs.begin(), regs.end(), [&](const EpollReg& g) { return g.epfd == epfd; });
    if (op == EPOLL_CTL_DEL) {
        if (same != regs.end()) {
            regs.erase(same);
        }
    } else if (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) {
        if (same != regs.end()) {
            same->ev = *ev;
        } else {
            try {
                regs.push_back(EpollReg{epfd, *ev});
            } catch (const std::bad_alloc&) {
                // not recorded: this registration stays on the old file at a swap
            }
            ep_bits_[epfd / 64].fetch_or(std::uint64_t{1} << (epfd % 64),
                                         std::memory_order_release);
        }
    }
    if (regs.empty()) {
        regs_.erase(fd);
    }
    errno = saved;
    return r;
}

bool FdTable::epoll_known(int epfd) const {
    if (epfd < 0 || epfd >= kMaxFd) {
        return false;
    }
    return (ep_bits_[epfd / 64].load(std::memory_order_acquire) >> (epfd % 64)) & 1u;
}

void FdTable::forget_epoll(int epfd) {
    if (!epoll_known(epfd)) {
        return;
    }
    std::lock_guard lk(mu_);
    ep_bits_[epfd / 64].fetch_and(~(std::uint64_t{1} << (epfd % 64)), std::memory_order_release);
    for (auto it = regs_.begin(); it != regs_.end();) {
        std::erase_if(it->second, [&](const EpollReg& g) { return g.epfd == epfd; });
        it = it->second.empty() ? regs_.erase(it) : std::next(it);
    }
}

void FdTable::after_fork_child(pid_t parent) {
    // Called with mu_ held by this (the only) thread since the prepare
    // handler. Only plain containers and close(2) here.
    auto* leak = new std::vector<std::shared_ptr<void>>;
    for (auto it = map_.begin(); it != map_.end();) {
        Entry& e = *it->second;
        if (e.kind == Entry::Kind::internal) {
            real().close(it->first);
            leak->push_back(std::move(it->second));
            it = erase_locked(it);
            continue;
        }
        if (e.bridge) {
            leak->push_back(std::move(e.bridge));
        }
        if (e.kind == Entry::Kind::connecting) {
            // The parent's thread completes it: a connection made over SDP
            // is served by the parent's bridge, as any inherited one; a
            // socket handed back is the program's own kernel socket.
            const bool running = e.connecting && e.connecting->running();
            if (e.connecting) {
                leak->push_back(std::move(e.connecting));
            }
            if (!running) {
                leak->push_back(std::move(it->second));
                it = erase_locked(it);
                continue;
            }
            e.kind = Entry::Kind::sdp;
            mark_locked(it->first, e);  // the parent's thread swaps nothing here
        }
        if (e.listener) {
            // The parent takes its SDP connections; a doorbell this process
            // accepts is claimed from there (handoff.hpp).
            leak->push_back(std::move(e.listener));
            e.owner = parent;
        }
        ++it;
    }
}

std::vector<std::shared_ptr<Entry>> FdTable::entries_of(dev_t dev, ino_t ino) {
    std::vector<std::shared_ptr<Entry>> out;
    std::lock_guard lk(mu_);
    for (const auto& [fd, e] : map_) {
        if (e->kind == Entry::Kind::sdp && e->dev == dev && e->ino == ino) {
            out.push_back(e);
        }
    }
    return out;
}

bool FdTable::any_sdp() {
    std::lock_guard lk(mu_);
    for (const auto& [fd, e] : map_) {
        if (e->kind == Entry::Kind::sdp) {
            return true;
        }
    }
    return false;
}

std::vector<int> FdTable::internal_in(unsigned first, unsigned last) {
    std::vector<int> out;
    std::lock_guard lk(mu_);
    for (const auto& [fd, e] : map_) {
        if (e->kind == Entry::Kind::internal && static_cast<unsigned>(fd) >= first &&
            static_cast<unsigned>(fd) <= last) {
            out.push_back(fd);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::shared_ptr<Listener>> FdTable::listeners() {
    std::vector<std::shared_ptr<Listener>> out;
    std::lock_guard lk(mu_);
    for (const auto& [fd, e] : map_) {
        if (e->kind == Entry::Kind::listener && e->listener) {
            out.push_back(e->listener);
        }
    }
    return out;
}

std::shared_ptr<Bridge> bridge_of(const Entry& e) {
    std::lock_guard lk(fds().mutex());
    return e.bridge;
}

FdTable& fds() {
    static auto* t = new FdTable;  // never destroyed: used until the last close()
    return *t;
}

void track_internal(int fd) {
    auto e = std::make_shared<Entry>();
    e->kind = Entry::Kind::internal;
    fds().put(fd, std::move(e));
}

bool install(int fd, int app_fd, bool cloexec, bool nonblock, const std::shared_ptr<Entry>& expect,
             std::shared_ptr<Entry> next, bool keep_app) {
    if (nonblock) {
        // On the file before it reaches the number: never blocking there.
        const int fl = real().fcntl(app_fd, F_GETFL);
        real().fcntl(app_fd, F_SETFL, fl | O_NONBLOCK);
    }
    if (!fds().swap_file(fd, expect, app_fd, cloexec ? O_CLOEXEC : 0, std::move(next))) {
        return false;
    }
    if (!keep_app) {
        close_internal(app_fd);
    }
    return true;
}

void close_internal(int fd) {
    if (fd >= 0) {
        fds().take(fd);
        real().close(fd);
    }
}

// --- settings, logging, counters ---------------------------------------------

const Settings& settings() {
    static const Settings* s = new Settings(load_settings());
    return *s;
}

void log(int level, const char* fmt, ...) {
    if (settings().log_level < level) {
        return;
    }
    const int saved_errno = errno;  // callers report their own errno after
    char buf[1024];
    int n = std::snprintf(buf, sizeof buf, "libsdp-preload[%d] %s: ", static_cast<int>(::getpid()),
                          settings().program.c_str());
    va_list ap;
    va_start(ap, fmt);
    int m = std::vsnprintf(buf + n, sizeof buf - static_cast<std::size_t>(n) - 1, fmt, ap);
    va_end(ap);
    std::size_t len = std::min(sizeof buf - 2, static_cast<std::size_t>(n + std::max(m, 0)));
    buf[len++] = '\n';
    [[maybe_unused]] auto w = ::write(log_fd(), buf, len);
    errno = saved_errno;
}

Counters& counters() {
    static auto* c = new Counters;
    return *c;
}

namespace {
struct SilentHosts {
    std::mutex mu;
    std::unordered_map<pm::IpAddress, std::chrono::steady_clock::time_point> until;
};
SilentHosts& silent_hosts() {
    static auto* h = new SilentHosts;
    return *h;
}
constexpr std::size_t kMaxSilentHosts = 4096;
std::mutex& stats_mutex() {
    static auto* m = new std::mutex;
    return *m;
}
bool g_forked_child = false;
}  // namespace

void state_fork_prepare() {
    stats_mutex().lock();
    silent_hosts().mu.lock();
}
void state_fork_parent() {
    silent_hosts().mu.unlock();
    stats_mutex().unlock();
}
void state_fork_child() {
    silent_hosts().mu.unlock();
    stats_mutex().unlock();
    g_forked_child = true;
#define SDP_PRELOAD_COUNTER_RESET(name) counters().name.store(0);
    SDP_PRELOAD_COUNTERS(SDP_PRELOAD_COUNTER_RESET)
#undef SDP_PRELOAD_COUNTER_RESET
}

void write_stats() {
    const std::string& path = settings().stats_file;
    if (path.empty() || (g_forked_child && path.find("%p") == std::string::npos)) {
        return;  // a forked child does not overwrite its parent's file
    }
    InternalScope in;
    const int saved_errno = errno;
    struct Restore {
        int e;
        ~Restore() { errno = e; }
    } restore{saved_errno};
    std::lock_guard lk(stats_mutex());
    const Counters& c = counters();
    nlohmann::json j = {
        {"pid", ::getpid()},
        {"program", settings().program},
        {"rules", settings().rules_broken ? "broken" : "ok"},
    };
#define SDP_PRELOAD_COUNTER_JSON(name) j[#name] = c.name.load();
    SDP_PRELOAD_COUNTERS(SDP_PRELOAD_COUNTER_JSON)
#undef SDP_PRELOAD_COUNTER_JSON
    // "%p" in the path becomes the process id (several processes may share
    // the variable); the file is replaced atomically.
    std::string final_path = path;
    if (auto at = final_path.find("%p"); at != std::string::npos) {
        final_path.replace(at, 2, std::to_string(::getpid()));
    }
    const std::string tmp = final_path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return;
    }
    // Program names need not be UTF-8: replace what is not.
    const std::string text =
        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    [[maybe_unused]] auto w = ::write(fd, text.data(), text.size());
    ::close(fd);
    ::rename(tmp.c_str(), final_path.c_str());
}

Keepalive keepalive_of(const Entry& e) {
    Keepalive k;
    k.enabled = e.keepalive;
    k.idle = std::chrono::seconds(e.keep_idle);
    k.interval = std::chrono::seconds(e.keep_intvl);
    k.count = e.keep_cnt;
    return k;
}

StreamOptions stream_options(const Entry* e) {
    StreamOptions o;
    o.iwarp_provider = settings().provider;
    o.fallback = false;  // the library falls back itself, on the program's own socket
    o.resolve_deadline = settings().resolve_deadline;
    if (e != nullptr) {
        o.keepalive = keepalive_of(*e);
    }
    return o;
}

bool pm_known_silent(const pm::IpAddress& host) {
    auto& h = silent_hosts();
    std::lock_guard lk(h.mu);
    auto it = h.until.find(host);
    if (it == h.until.end()) {
        return false;
    }
    if (std::chrono::steady_clock::now() >= it->second) {
        h.until.erase(it);
        return false;
    }
    return true;
}

void remember_pm_silent(const pm::IpAddress& host) {
    if (settings().negative_ttl.count() == 0) {
        return;
    }
    auto& h = silent_hosts();
    std::lock_guard lk(h.mu);
    const auto now = std::chrono::steady_clock::now();
    if (h.until.size() >= kMaxSilentHosts) {
        std::erase_if(h.until, [&](const auto& kv) { return kv.second <= now; });
        if (h.until.size() >= kMaxSilentHosts) {
            h.until.clear();  // bounded: forget them all rather than grow
        }
    }
    h.until[host] = now + settings().negative_ttl;
}

// --- addresses ----------------------------------------------------------------

std::optional<pm::Endpoint> endpoint_of(const sockaddr* sa, socklen_t len) {
    if (sa == nullptr || len < static_cast<socklen_t>(sizeof(sa_family_t)) ||
        (sa->sa_family == AF_INET && len < static_cast<socklen_t>(sizeof(sockaddr_in))) ||
        (sa->sa_family == AF_INET6 && len < static_cast<socklen_t>(sizeof(sockaddr_in6))) ||
        (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
        return std::nullopt;
    }
    sockaddr_storage ss{};
    std::memcpy(&ss, sa, std::min<std::size_t>(len, sizeof ss));
    return pm::from_sockaddr(ss);
}

namespace {
std::optional<pm::Endpoint> name_of(int (*fn)(int, sockaddr*, socklen_t*), int fd) {
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    if (fd < 0 || fn(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) {
        return std::nullopt;
    }
    return endpoint_of(reinterpret_cast<sockaddr*>(&ss), sl);
}
}  // namespace

std::optional<pm::Endpoint> local_of(int fd) {
    return name_of(real().getsockname, fd);
}
std::optional<pm::Endpoint> peer_of(int fd) {
    return name_of(real().getpeername, fd);
}

socklen_t sockaddr_of(const pm::Endpoint& ep, int family, sockaddr_storage& out) {
    if (family == AF_INET6 && ep.address.is_v4()) {
        std::array<std::uint8_t, 16> b{};
        b[10] = b[11] = 0xff;
        std::memcpy(b.data() + 12, ep.address.bytes().data(), 4);
        return pm::to_sockaddr(pm::Endpoint{pm::IpAddress::v6(b), ep.port}, out);
    }
    return pm::to_sockaddr(ep, out);
}

void copy_out(const sockaddr_storage& ss, socklen_t ss_len, sockaddr* addr, socklen_t* len) {
    if (addr == nullptr || len == nullptr) {
        return;
    }
    const auto n = std::min(*len, ss_len);
    std::memcpy(addr, &ss, static_cast<std::size_t>(n));
    *len = ss_len;
}

}  // namespace sdp::preload
