// SPDX-License-Identifier: Apache-2.0
// The preload library's process state: the real libc functions, the table of
// descriptors it knows, logging and counters (docs/preload.md, "How it
// works"). Only the library's own sources (sdp/preload/*.cpp) include this.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pmclient/address.hpp"
#include "sdp/preload/rules.hpp"
#include "sdp/stream.hpp"

namespace sdp::preload {

// The libc functions behind ours (dlsym(RTLD_NEXT)), resolved once.
struct Real {
    int (*socket)(int, int, int);
    int (*socketpair)(int, int, int, int*);
    int (*connect)(int, const sockaddr*, socklen_t);
    int (*listen)(int, int);
    int (*accept4)(int, sockaddr*, socklen_t*, int);
    int (*close)(int);
    int (*close_range)(unsigned, unsigned, int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*fcntl)(int, int, ...);
    int (*fcntl64)(int, int, ...);
    int (*getsockname)(int, sockaddr*, socklen_t*);
    int (*getpeername)(int, sockaddr*, socklen_t*);
    int (*getsockopt)(int, int, int, void*, socklen_t*);
    int (*setsockopt)(int, int, int, const void*, socklen_t);
    ssize_t (*sendmsg)(int, const msghdr*, int);
    ssize_t (*recvmsg)(int, msghdr*, int);
    int (*pthread_create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
    int (*epoll_ctl)(int, int, int, epoll_event*);
    ssize_t (*write)(int, const void*, std::size_t);
    ssize_t (*writev)(int, const iovec*, int);
    ssize_t (*send)(int, const void*, std::size_t, int);
    ssize_t (*sendto)(int, const void*, std::size_t, int, const sockaddr*, socklen_t);
    int (*eventfd)(unsigned, int);
};
const Real& real();

// Calls made by the library itself (its threads, and the SDP/Port Mapper
// code it runs inside an interposed call) reach libc unchanged; only what
// they create is remembered, to be closed in a forked child.
struct InternalScope {
    InternalScope();
    ~InternalScope();
    InternalScope(const InternalScope&) = delete;
    InternalScope& operator=(const InternalScope&) = delete;
};
bool internal_call();
// Marks the calling thread as the library's for its whole life.
void mark_internal_thread();
// Blocks every signal in the calling thread while it lives, so that threads
// started meanwhile (the library's, and those the SDP code starts) never
// take a signal meant for the program's own threads. The signals of a
// fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP) stay as they were.
class SignalsBlocked {
  public:
    SignalsBlocked();
    ~SignalsBlocked();
    SignalsBlocked(const SignalsBlocked&) = delete;
    SignalsBlocked& operator=(const SignalsBlocked&) = delete;

  private:
    sigset_t old_;
};

class Bridge;
class Listener;
class Connecting;

// What the library knows of a descriptor.
struct Entry {
    enum class Kind : std::uint8_t {
        candidate,   // an AF_INET/AF_INET6 stream socket the program made, not yet connected
        sdp,         // the program's end of a bridged SDP connection
        listener,    // a listening socket that also takes SDP connections
        connecting,  // a non-blocking connect() in progress, or just handed back (connecting.hpp)
        internal,    // the library's own (closed in a forked child)
    };
    Kind kind = Kind::candidate;
    int family = AF_INET;
    // Socket options the program set that carry over to the SDP stream.
    bool keepalive = false;
    int keep_idle = 7200, keep_intvl = 75, keep_cnt = 9;
    bool nodelay = false;
    // sdp: the addresses getsockname()/getpeername() report.
    sockaddr_storage local{};
    socklen_t local_len = 0;
    sockaddr_storage peer{};
    socklen_t peer_len = 0;
    std::optional<pm::Endpoint> bound;  // listener: the listening address
    bool sdp_only = false;              // listener: `use sdp server` (TCP clients refused)
    // listener inherited by fork() (a pre-fork server's worker): the process
    // whose Listener takes its SDP connections (handoff.hpp, claims).
    pid_t owner = 0;
    // The open file the entry describes (fstat), so that an entry never
    // answers for another file that got the same number after a close the
    // library did not see (close_range, fclose, a raw system call).
    dev_t dev = 0;
    ino_t ino = 0;
    // sdp, in the process that runs it. Read it with bridge_of(): the heir
    // thread sets it when a connection is taken over (handoff.hpp).
    std::shared_ptr<Bridge> bridge;
    std::shared_ptr<Listener> listener;
    // connecting: the connect() in progress (or handed back).
    std::shared_ptr<Connecting> connecting;
    // sdp, made by a non-blocking connect(): the next connect() returns 0
    // once (as the kernel's does after the handshake completed), later ones
    // EISCONN. Read and cleared under the table's lock.
    bool connect_unreported = false;
};

// The descriptor table. Lookups for untracked descriptors cost one atomic
// load (close() and dup() are called for every descriptor of the program).
class FdTable {
  public:
    static constexpr int kMaxFd = 1 << 16;
    bool tracked(int fd) const;
    // The entry of fd if it still describes the file at fd (else dropped).
    std::shared_ptr<Entry> get(int fd);
    // The entry recorded for fd, not checked against the file now at fd (no
    // fstat): for the write interposers' cheap checks; current() decides.
    std::shared_ptr<Entry> peek(int fd);
    // fd still describes the file of entry e (one fstat).
    static bool current(int fd, const Entry& e);
    // Records e for fd, identified by the file now at fd.
    void put(int fd, std::shared_ptr<Entry> e);
    // Records e for fd only if the library does not know fd and it is the
    // open file (dev, ino); false otherwise.
    bool put_if_file(int fd, std::shared_ptr<Entry> e, dev_t dev, ino_t ino);
    // Drops fd; returns what it held.
    std::shared_ptr<Entry> take(int fd);
    // Every descriptor that holds `from` holds `to` instead (dropped when
    // `to` is null; `to` describes the same file); how many did.
    int replace(const std::shared_ptr<Entry>& from, const std::shared_ptr<Entry>& to);
    // Some descriptor holds e.
    bool holds(const std::shared_ptr<Entry>& e);

    // --- the file behind a program's descriptor number -------------------
    // The one place where the library puts another open file at a number
    // the program holds (dup3 of `with` onto fd, with `flags`), `next`
    // becoming fd's entry; the program's epoll registrations of fd move
    // with the number (see epoll_ctl()). With `expect`: only if fd still
    // holds it and its file. False (nothing done) otherwise (EBADF), or
    // with dup3's errno.
    bool swap_file(int fd, const std::shared_ptr<Entry>& expect, int with, int flags,
                   std::shared_ptr<Entry> next);
    // swap_file() at every descriptor that holds `expect` (dups made
    // meanwhile), each keeping its close-on-exec flag; all of them share
    // `next`. How many were swapped.
    int swap_file_all(const std::shared_ptr<Entry>& expect, int with, std::shared_ptr<Entry> next);

    // --- epoll registrations of tracked descriptors -----------------------
    // Epoll keys a registration on (open file, number): when swap_file()
    // changes the file behind a number, the registrations the program made
    // for that number are taken off the old file and made again, with the
    // same events and data, on the new one. They are recorded only for
    // descriptors in the table, and forgotten with them.
    // Only numbers whose entry may still be swapped (candidate, connecting)
    // have their registrations recorded; an entry that becomes sdp or a
    // listener drops them (swap_file() is never called for those).
    // fd's entry may still be swapped (one atomic load).
    bool swappable(int fd) const;
    // The program's epoll_ctl() for a swappable fd (serialized with swaps).
    int epoll_ctl(int epfd, int op, int fd, epoll_event* ev);
    // e was changed in place (a listener now): the numbers holding it are
    // marked again (registrations dropped if it can no longer be swapped).
    void refresh(const std::shared_ptr<Entry>& e);
    // epfd holds recorded registrations (one atomic load).
    bool epoll_known(int epfd) const;
    // epfd is closed (or replaced): its registrations are forgotten.
    void forget_epoll(int epfd);

    // fork(): the child keeps the program's descriptors and closes the
    // library's (sockets, socketpair ends and listeners of the parent's
    // bridges, which live on in the parent only).
    // `parent`: the process that called fork() (its listeners' owner).
    void after_fork_child(pid_t parent);
    // The entries of the program's descriptors of one open file (a
    // connection handed over from the parent, docs/preload.md).
    std::vector<std::shared_ptr<Entry>> entries_of(dev_t dev, ino_t ino);
    // Some descriptor is an SDP connection.
    bool any_sdp();
    // fd's entry was an SDP connection when last set (one atomic load, no
    // fstat: a hint; get() still decides). The write interposers ask it
    // first, so that other descriptors' writes take no lock.
    bool sdp_hint(int fd) const;
    // The library's own descriptors in [first, last], ascending.
    std::vector<int> internal_in(unsigned first, unsigned last);
    // Every listener (process exit).
    std::vector<std::shared_ptr<Listener>> listeners();
    std::mutex& mutex() { return mu_; }

  private:
    struct EpollReg {
        int epfd;
        epoll_event ev;
    };
    using Map = std::unordered_map<int, std::shared_ptr<Entry>>;
    // Drops an entry and the registrations of its number, under mu_.
    Map::iterator erase_locked(Map::iterator it);
    // dup3 of `with` onto fd moving fd's registrations, under mu_.
    bool swap_locked(int fd, int with, int flags);
    // An entry of a kind that swap_file() may replace.
    static bool may_swap(const Entry& e);
    // fd (in the table) holds e now: its bits, and its registrations
    // dropped when e cannot be swapped, under mu_.
    void mark_locked(int fd, const Entry& e);

    std::atomic<std::uint64_t> bits_[kMaxFd / 64]{};
    std::atomic<std::uint64_t> swap_bits_[kMaxFd / 64]{};  // fds whose entry may_swap()
    std::atomic<std::uint64_t> sdp_bits_[kMaxFd / 64]{};   // fds whose entry is Kind::sdp
    std::atomic<std::uint64_t> ep_bits_[kMaxFd / 64]{};    // epfds in regs_
    std::mutex mu_;
    Map map_;
    std::unordered_map<int, std::vector<EpollReg>> regs_;  // by fd, only swappable fds in map_
};
FdTable& fds();
// An entry's bridge, read under the table's lock.
std::shared_ptr<Bridge> bridge_of(const Entry& e);

// The objects of one kind (bridges, connect()s in progress) whose library
// threads run in this process. Never destroyed (threads may outlive
// exit()); locked across fork(), and in the child the parent's are
// forgotten without being touched (leaked: destroying one would act on the
// parent's connection).
template <typename T>
struct LiveSet {
    std::mutex mu;
    std::condition_variable cv;
    std::unordered_set<std::shared_ptr<T>> live;

    static LiveSet& instance() {
        static auto* s = new LiveSet;
        return *s;
    }
    void add(std::shared_ptr<T> t) {
        std::lock_guard lk(mu);
        live.insert(std::move(t));
    }
    void remove(std::shared_ptr<T> t) {  // by value: released after the lock
        std::lock_guard lk(mu);
        live.erase(t);
        cv.notify_all();
    }
    void fork_prepare() { mu.lock(); }
    void fork_parent() { mu.unlock(); }
    void fork_child() {
        auto* leak = new std::unordered_set<std::shared_ptr<T>>;
        leak->swap(live);
        mu.unlock();
    }
};

// Remembers a descriptor the library made (closed in a forked child).
void track_internal(int fd);
// Puts the program's end of a bridge at `fd` (FdTable::swap_file, `next`
// its entry, only while fd holds `expect` when given), keeping the
// descriptor number, its close-on-exec flag and O_NONBLOCK; closes app_fd
// unless keep_app. False (app_fd still open), with errno when dup3 failed.
bool install(int fd, int app_fd, bool cloexec, bool nonblock, const std::shared_ptr<Entry>& expect,
             std::shared_ptr<Entry> next, bool keep_app = false);
// Forgets and closes one.
void close_internal(int fd);

// --- configuration (environment, read once) --------------------------------
struct Settings {
    int log_level = 0;                   // SDP_PRELOAD_LOG: 0 off, 1 error, 2 info, 3 debug
    std::string stats_file;              // SDP_PRELOAD_STATS
    std::string control_socket;          // SDP_PRELOAD_CONTROL / SDP_PMD_SOCKET / default
    std::string config_file;             // SDP_PRELOAD_CONFIG / /etc/sdp/libsdp.conf
    std::string program;                 // the program's short name
    Provider provider = Provider::soft;  // SDP_PRELOAD_PROVIDER
    std::chrono::milliseconds exit_linger{2000};
    // SDP_PRELOAD_RESOLVE_MS: the Port Mapper deadline of a connect() (7.5.1).
    std::chrono::milliseconds resolve_deadline{3000};
    // SDP_PRELOAD_NEGATIVE_S: after a Port Mapper timeout, connect()s to that
    // host go straight to TCP for this long (0: ask every time).
    std::chrono::seconds negative_ttl{60};
    // SDP_PRELOAD_DIRECT: writes may go straight to the stream (bridge.hpp,
    // direct_write); "0" turns that off (every byte through the socketpair).
    bool direct = true;
    Rules rules;
    bool rules_broken = false;  // a bad rule file: plain TCP for everything
};
const Settings& settings();

// Logging to stderr (or SDP_PRELOAD_LOG_FILE): level 1 error, 2 info, 3 debug.
void log(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Counters (docs/preload.md, "Counters"), written to SDP_PRELOAD_STATS; one
// list for the struct, the reset in a forked child and the JSON.
// clang-format off
#define SDP_PRELOAD_COUNTERS(X) \
    X(connect_sdp) \
    X(connect_tcp_rule) \
    X(connect_fallback) \
    X(connect_failed) \
    X(connect_async) \
    X(connect_abandoned) \
    X(epoll_moved) \
    X(epoll_move_failed) \
    X(listen_sdp) \
    X(listen_tcp_rule) \
    X(register_failed) \
    X(accept_sdp) \
    X(accept_tcp) \
    X(accept_tcp_refused) \
    X(bridges_active) \
    X(bridges_reset) \
    X(bytes_to_peer) \
    X(bytes_direct) \
    X(direct_not_idle) \
    X(bytes_from_peer) \
    X(oob_to_peer) \
    X(oob_from_peer) \
    X(handoffs_out) \
    X(handoffs_in) \
    X(handoffs_failed) \
    X(sdp_resumes)
// clang-format on
struct Counters {
#define SDP_PRELOAD_COUNTER_FIELD(name) std::atomic<std::uint64_t> name{0};
    SDP_PRELOAD_COUNTERS(SDP_PRELOAD_COUNTER_FIELD)
#undef SDP_PRELOAD_COUNTER_FIELD
};
Counters& counters();
void write_stats();
// fork(): the counters' file lock and the silent-host memory's are held
// across it; a child starts its own counters from zero and writes them only
// to a per-process file ("%p").
void state_fork_prepare();
void state_fork_parent();
void state_fork_child();

// StreamOptions for a connection of this process, with the program's socket
// options applied (keepalive, 14.3).
StreamOptions stream_options(const Entry* e);
Keepalive keepalive_of(const Entry& e);

// Hosts whose Port Mapper did not answer (per process): `both` goes straight
// to TCP until the entry expires (Settings::negative_ttl).
bool pm_known_silent(const pm::IpAddress& host);
void remember_pm_silent(const pm::IpAddress& host);

// sockaddr <-> Endpoint.
std::optional<pm::Endpoint> endpoint_of(const sockaddr* sa, socklen_t len);
// The local / peer address of a socket (real getsockname/getpeername).
std::optional<pm::Endpoint> local_of(int fd);
std::optional<pm::Endpoint> peer_of(int fd);
// An Endpoint as a sockaddr of `family` (IPv4 as IPv4-mapped for AF_INET6).
socklen_t sockaddr_of(const pm::Endpoint& ep, int family, sockaddr_storage& out);
// Copies a sockaddr to a caller's buffer the way the kernel does (truncated,
// *len set to the full size).
void copy_out(const sockaddr_storage& ss, socklen_t ss_len, sockaddr* addr, socklen_t* len);

}  // namespace sdp::preload
