// SPDX-License-Identifier: Apache-2.0
// libsdp-preload.so: SDP for unmodified programs (docs/preload.md).
//
// The socket calls a program makes are interposed only where the choice of
// transport is made, where the descriptor must look like a TCP socket, or
// where the descriptor table follows the program's closes: socket, listen,
// connect, accept/accept4, close, close_range, closefrom, dup/dup2/dup3,
// fcntl(F_DUPFD*), getsockname/getpeername, getsockopt/setsockopt, and
// epoll_ctl for the descriptors in the table (their registrations follow
// the number when its file is replaced). Data
// calls (read, write, send*, recv*, sendfile, poll, select, epoll_wait, ioctl
// FIONREAD/SIOCATMARK/FIONBIO, fcntl O_NONBLOCK, MSG_OOB, shutdown) reach
// the kernel unchanged: an SDP connection's descriptor is one end of an
// AF_UNIX socketpair whose other end a Bridge carries over SDP, so the
// kernel itself makes them right.
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstring>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "sdp/preload/bridge.hpp"
#include "sdp/preload/connecting.hpp"
#include "sdp/preload/handoff.hpp"
#include "sdp/preload/listener.hpp"
#include "sdp/preload/state.hpp"

using namespace sdp::preload;

namespace {

std::shared_ptr<Entry> entry_of(int fd, Entry::Kind kind) {
    if (!fds().tracked(fd)) {
        return nullptr;
    }
    auto e = fds().get(fd);
    return e && e->kind == kind ? e : nullptr;
}

// The descriptor leaves the table (close, or the target of dup2): a
// listener whose last descriptor in this process goes stops taking SDP
// connections and unregisters.
void forget(int fd) {
    const bool current = fds().get(fd) != nullptr;  // drops an entry of another file
    auto e = fds().take(fd);
    if (current && e && e->kind == Entry::Kind::listener && e->listener && e.use_count() == 1) {
        e->listener->close();
    }
    // A connect() in progress whose last descriptor goes: its result is
    // discarded.
    if (current && e && e->kind == Entry::Kind::connecting && e->connecting && !fds().holds(e)) {
        e->connecting->closed();
    }
}

// The program's own socket behind a descriptor whose connect() is in
// progress (kept aside) or just handed back, for the calls it answers.
template <typename F>
int on_own_socket(int fd, const Entry& e, F&& f) {
    return e.connecting ? e.connecting->on_socket(fd, f) : f(fd);
}

// The program may not close or replace the library's own descriptors (it
// never got them): such a call fails as for a descriptor that is not open.
bool library_owned(int fd) {
    if (internal_call() || !fds().tracked(fd)) {
        return false;
    }
    auto e = fds().get(fd);
    return e && e->kind == Entry::Kind::internal;
}

void copy_entry(int from, int to) {
    if (to < 0 || from == to || !fds().tracked(from)) {
        return;
    }
    if (auto e = fds().get(from)) {
        if (e->kind == Entry::Kind::internal) {
            track_internal(to);
        } else {
            fds().put(to, e);  // dups share the open file, so they share the entry
        }
    }
}

// The descriptors an SCM_RIGHTS message carries (a malformed control
// buffer of the program's is read only within its bounds).
std::vector<int> rights_of(const msghdr* m) {
    std::vector<int> out;
    if (m->msg_control == nullptr) {
        return out;
    }
    const auto* end = static_cast<const unsigned char*>(m->msg_control) + m->msg_controllen;
    for (const cmsghdr* c = CMSG_FIRSTHDR(m); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(m), const_cast<cmsghdr*>(c))) {
        const auto room = static_cast<std::size_t>(end - reinterpret_cast<const unsigned char*>(c));
        if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_len > room) {
            break;
        }
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t k = 0; k < n; ++k) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
            out.push_back(fd);
        }
    }
    return out;
}

// Keepalive the program set on a socket reaches its SDP connection's TCP
// socket (14.3, Stream::set_keepalive); also for accepted connections,
// which inherit the listening socket's options as on TCP.
void apply_keepalive(const Entry& e) {
    if (auto b = bridge_of(e); b && e.keepalive) {
        b->set_keepalive(keepalive_of(e));
    }
}

}  // namespace

#define SDP_EXPORT extern "C" __attribute__((visibility("default")))

// An eventfd the library's code makes (the Port Mapper client's wake-up of
// a stopped question) is remembered as the library's, as its sockets are:
// closed in a forked child, kept from the program's close()/dup2().
SDP_EXPORT int eventfd(unsigned count, int flags) {
    const int fd = real().eventfd(count, flags);
    if (fd >= 0 && internal_call()) {
        track_internal(fd);
    }
    return fd;
}

SDP_EXPORT int socket(int domain, int type, int protocol) {
    const int fd = real().socket(domain, type, protocol);
    if (fd < 0) {
        return fd;
    }
    if (internal_call()) {
        track_internal(fd);
        return fd;
    }
    if ((domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
        (protocol == 0 || protocol == IPPROTO_TCP) && !settings().rules_broken) {
        auto e = std::make_shared<Entry>();
        e->family = domain;
        fds().put(fd, std::move(e));
    }
    return fd;
}

SDP_EXPORT int connect(int fd, const sockaddr* addr, socklen_t len) {
    if (!internal_call()) {
        if (auto c = entry_of(fd, Entry::Kind::connecting)) {
            // In progress: EALREADY. Handed back: the kept error once, as
            // the kernel's connect() after a failed one; then on as usual.
            if (c->connecting->running()) {
                errno = EALREADY;
                return -1;
            }
            if (const auto err = c->connecting->take_error(c); err && *err != 0) {
                errno = *err;
                return -1;
            }
        } else if (auto s = endpoint_of(addr, len) ? entry_of(fd, Entry::Kind::sdp) : nullptr) {
            // Connected: 0 once after a non-blocking connect() (the kernel
            // says so to the first connect() after the handshake), then
            // EISCONN.
            std::lock_guard lk(fds().mutex());
            if (std::exchange(s->connect_unreported, false)) {
                return 0;
            }
            errno = EISCONN;
            return -1;
        }
    }
    auto e = internal_call() ? nullptr : entry_of(fd, Entry::Kind::candidate);
    auto dest = e ? endpoint_of(addr, len) : std::nullopt;
    if (!dest || dest->port == 0) {
        return real().connect(fd, addr, len);
    }
    const Settings& s = settings();
    const Decision d = decide(s.rules, Side::client, s.program, dest->address, dest->port);
    if (d.use == Use::both && pm_known_silent(dest->address)) {
        fds().take(fd);
        ++counters().connect_fallback;
        log(3, "connect %s: TCP (its Port Mapper did not answer recently)",
            dest->to_string().c_str());
        write_stats();
        return real().connect(fd, addr, len);
    }
    if (d.use == Use::tcp) {
        fds().take(fd);
        ++counters().connect_tcp_rule;
        log(3, "connect %s: TCP (rule line %d)", dest->to_string().c_str(), d.line);
        write_stats();
        return real().connect(fd, addr, len);
    }
    if (auto r = connect_sdp(fd, e, *dest, addr, len, d)) {
        return *r;
    }
    return real().connect(fd, addr, len);
}

SDP_EXPORT int listen(int fd, int backlog) {
    const int r = real().listen(fd, backlog);
    auto e = r != 0 || internal_call() ? nullptr : entry_of(fd, Entry::Kind::candidate);
    if (!e) {
        return r;
    }
    const int saved = errno;
    const std::optional<pm::Endpoint> bound = local_of(fd);
    if (!bound) {
        fds().take(fd);
        return r;
    }
    const Settings& s = settings();
    const Decision d = decide(s.rules, Side::server, s.program, bound->address, bound->port);
    std::shared_ptr<Listener> l;
    if (d.use == Use::tcp) {
        ++counters().listen_tcp_rule;
        log(3, "listen %s: TCP (rule line %d)", bound->to_string().c_str(), d.line);
    } else {
        SignalsBlocked quiet;  // the listener's thread takes no signal of the program
        l = Listener::open(*bound);
    }
    if (!l) {
        fds().take(fd);
    } else {
        {
            // In place: descriptors dup()ed before listen() share the entry.
            std::lock_guard lk(fds().mutex());
            e->kind = Entry::Kind::listener;
            e->bound = bound;
            e->sdp_only = d.use == Use::sdp;
            e->listener = std::move(l);
        }
        fds().refresh(e);  // a listener keeps its file: its registrations need no record
    }
    write_stats();
    errno = saved;
    return r;
}

SDP_EXPORT int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
    auto e = internal_call() ? nullptr : entry_of(fd, Entry::Kind::listener);
    if (!e || (!e->listener && e->owner == 0)) {
        const int r = real().accept4(fd, addr, len, flags);
        if (r >= 0 && internal_call()) {
            track_internal(r);
        }
        return r;
    }
    for (;;) {
        sockaddr_storage ss{};
        socklen_t sl = sizeof ss;
        const int nfd = real().accept4(fd, reinterpret_cast<sockaddr*>(&ss), &sl, flags);
        if (nfd < 0) {
            return nfd;
        }
        auto from = endpoint_of(reinterpret_cast<sockaddr*>(&ss), sl);
        // A doorbell: the connection behind it is this process's Listener's,
        // or (a pre-fork server's worker) its owner's.
        std::optional<Listener::Claimed> c;
        if (from && e->listener) {
            c = e->listener->claim(*from);
        } else if (from && e->bound) {
            c = claim_from_owner(e->owner, *e->bound, *from);
        }
        if (c) {
            InternalScope in;
            // Socket options of the listening socket are the accepted one's
            // (as TCP inherits them); the local address is the listening
            // port on the address the SDP connection came to.
            auto ne = std::make_shared<Entry>(*e);
            ne->kind = Entry::Kind::sdp;
            ne->listener.reset();
            ne->bridge = c->bridge;
            ne->peer_len = sockaddr_of(c->peer, e->family, ne->peer);
            ne->local_len = sockaddr_of(
                pm::Endpoint{c->local.address, e->bound ? e->bound->port : c->local.port},
                e->family, ne->local);
            if (!install(nfd, c->app_fd, (flags & SOCK_CLOEXEC) != 0, (flags & SOCK_NONBLOCK) != 0,
                         nullptr, ne)) {
                const int err = errno;
                close_internal(c->app_fd);
                real().close(nfd);
                errno = err;
                return -1;
            }
            apply_keepalive(*ne);
            ++counters().accept_sdp;
            log(2, "accept: SDP from %s", c->peer.to_string().c_str());
            copy_out(ne->peer, ne->peer_len, addr, len);
            write_stats();
            return nfd;
        }
        if (e->sdp_only) {
            // `use sdp server`: TCP connections are refused (closed).
            ++counters().accept_tcp_refused;
            write_stats();
            real().close(nfd);
            continue;  // a non-blocking listener returns EAGAIN from accept4
        }
        ++counters().accept_tcp;
        write_stats();
        copy_out(ss, sl, addr, len);
        return nfd;
    }
}

SDP_EXPORT int accept(int fd, sockaddr* addr, socklen_t* len) {
    return accept4(fd, addr, len, 0);
}

SDP_EXPORT int close(int fd) {
    if (fds().tracked(fd)) {
        if (library_owned(fd)) {
            errno = EBADF;
            return -1;
        }
        forget(fd);
    }
    fds().forget_epoll(fd);  // one atomic load unless fd is an epoll set we recorded in
    return real().close(fd);
}

SDP_EXPORT int close_range(unsigned first, unsigned last, int flags) {
    if (real().close_range == nullptr) {
        errno = ENOSYS;  // a glibc without it (before 2.34)
        return -1;
    }
    if (internal_call() || (flags & CLOSE_RANGE_CLOEXEC) != 0) {
        return real().close_range(first, last, flags);  // CLOEXEC: nothing closes now
    }
    // Around the library's own descriptors, forgetting the program's.
    const unsigned top = std::min<unsigned>(last, FdTable::kMaxFd - 1);
    for (unsigned fd = first; fd <= top && fd >= first; ++fd) {
        if (fds().tracked(static_cast<int>(fd)) && !library_owned(static_cast<int>(fd))) {
            forget(static_cast<int>(fd));
        }
        fds().forget_epoll(static_cast<int>(fd));
    }
    unsigned from = first;
    for (int own : fds().internal_in(first, last)) {
        const auto o = static_cast<unsigned>(own);
        if (o > from && real().close_range(from, o - 1, flags) != 0) {
            return -1;
        }
        from = o + 1;
    }
    return from > last || from < first ? 0 : real().close_range(from, last, flags);
}

SDP_EXPORT void closefrom(int lowfd) {
    close_range(static_cast<unsigned>(std::max(lowfd, 0)), ~0u, 0);
}

SDP_EXPORT int dup(int fd) {
    const int r = real().dup(fd);
    copy_entry(fd, r);
    return r;
}

namespace {

// dup2() and dup3(): `call` makes fd2 a copy of fd. The library's own
// descriptors cannot be replaced; a number the library knows is forgotten
// first when the call will replace it (its fcntl() is made only then: it
// would cost a system call at every dup2/dup3 of the program otherwise).
template <typename Call>
int dup_onto(int fd, int fd2, Call&& call) {
    if (fd != fd2 && library_owned(fd2)) {
        errno = EBADF;
        return -1;
    }
    if (fd != fd2 && (fds().tracked(fd2) || fds().epoll_known(fd2)) &&
        real().fcntl(fd, F_GETFD) >= 0) {
        if (fds().tracked(fd2)) {
            forget(fd2);
        }
        fds().forget_epoll(fd2);
    }
    const int r = call();
    copy_entry(fd, r);
    return r;
}

}  // namespace

SDP_EXPORT int dup2(int fd, int fd2) {
    return dup_onto(fd, fd2, [&] { return real().dup2(fd, fd2); });
}

SDP_EXPORT int dup3(int fd, int fd2, int flags) {
    return dup_onto(fd, fd2, [&] { return real().dup3(fd, fd2, flags); });
}

namespace {
int fcntl_common(int (*fn)(int, int, ...), int fd, int cmd, va_list ap) {
    void* arg = va_arg(ap, void*);
    const int r = fn(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
        copy_entry(fd, r);
    }
    return r;
}
}  // namespace

SDP_EXPORT int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    const int r = fcntl_common(real().fcntl, fd, cmd, ap);
    va_end(ap);
    return r;
}

SDP_EXPORT int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    const int r = fcntl_common(real().fcntl64, fd, cmd, ap);
    va_end(ap);
    return r;
}

namespace {

// getsockname()/getpeername(): an SDP descriptor reports the address
// recorded when it became SDP; a connecting one asks the program's own
// socket; anything else is the kernel's.
using NameCall = int (*)(int, sockaddr*, socklen_t*);
int name_of_descriptor(int fd, sockaddr* addr, socklen_t* len, NameCall kernel,
                       sockaddr_storage Entry::*saved, socklen_t Entry::*saved_len) {
    if (auto e = entry_of(fd, Entry::Kind::sdp)) {
        if (addr == nullptr || len == nullptr) {
            errno = EFAULT;
            return -1;
        }
        copy_out((*e).*saved, (*e).*saved_len, addr, len);
        return 0;
    }
    if (auto c = entry_of(fd, Entry::Kind::connecting)) {
        return on_own_socket(fd, *c, [&](int s) { return kernel(s, addr, len); });
    }
    return kernel(fd, addr, len);
}

}  // namespace

SDP_EXPORT int getsockname(int fd, sockaddr* addr, socklen_t* len) {
    return name_of_descriptor(fd, addr, len, real().getsockname, &Entry::local, &Entry::local_len);
}

SDP_EXPORT int getpeername(int fd, sockaddr* addr, socklen_t* len) {
    return name_of_descriptor(fd, addr, len, real().getpeername, &Entry::peer, &Entry::peer_len);
}

namespace {

bool int_arg(const void* val, socklen_t len, int& out) {
    if (val == nullptr || len < static_cast<socklen_t>(sizeof(int))) {
        return false;
    }
    std::memcpy(&out, val, sizeof out);
    return true;
}

int put_int(void* val, socklen_t* len, int v) {
    if (val == nullptr || len == nullptr || *len < static_cast<socklen_t>(sizeof(int))) {
        errno = EINVAL;
        return -1;
    }
    std::memcpy(val, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

// The TCP-level options the library keeps for the program (read back by
// getsockopt(); keepalive also reaches the SDP connection's TCP socket).
bool kept_option(int level, int name) {
    return (level == SOL_SOCKET && name == SO_KEEPALIVE) ||
           (level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_KEEPIDLE ||
                                     name == TCP_KEEPINTVL || name == TCP_KEEPCNT));
}

void keep_option(Entry& e, int level, int name, int v) {
    std::lock_guard lk(fds().mutex());
    if (level == SOL_SOCKET) {
        e.keepalive = v != 0;
    } else if (name == TCP_NODELAY) {
        e.nodelay = v != 0;
    } else if (name == TCP_KEEPIDLE) {
        e.keep_idle = v;
    } else if (name == TCP_KEEPINTVL) {
        e.keep_intvl = v;
    } else if (name == TCP_KEEPCNT) {
        e.keep_cnt = v;
    }
}

}  // namespace

SDP_EXPORT int setsockopt(int fd, int level, int name, const void* val, socklen_t len) {
    auto e = internal_call() || !fds().tracked(fd) ? nullptr : fds().get(fd);
    if (!e || e->kind == Entry::Kind::internal) {
        return real().setsockopt(fd, level, name, val, len);
    }
    int v = 0;
    const bool kept = kept_option(level, name);
    if (kept && !int_arg(val, len, v)) {
        errno = EINVAL;
        return -1;
    }
    if (e->kind != Entry::Kind::sdp) {
        // Not an SDP connection (yet): the kernel socket takes it (the
        // program's own, also while its connect() is in progress), and the
        // kept options carry over to an SDP connection made from it.
        const int r = on_own_socket(
            fd, *e, [&](int s) { return real().setsockopt(s, level, name, val, len); });
        if (r == 0 && kept) {
            keep_option(*e, level, name, v);
        }
        return r;
    }
    if (level == IPPROTO_IP || level == IPPROTO_IPV6) {
        return 0;  // TOS, TTL, V6ONLY...: the SDP connection's TCP socket keeps its own
    }
    if (level != IPPROTO_TCP && !kept) {
        return real().setsockopt(fd, level, name, val, len);  // SO_RCVBUF, SO_LINGER...
    }
    InternalScope in;
    if (kept) {
        keep_option(*e, level, name, v);
        if (level == IPPROTO_TCP && name == TCP_NODELAY) {
            return 0;  // SDP frames its own messages
        }
        const auto b = bridge_of(*e);
        if (!b) {
            return 0;  // a forked child: the connection is its parent's
        }
        // 14.3: keepalive is the TCP keepalive timer of the LLP.
        if (auto ec = b->set_keepalive(keepalive_of(*e))) {
            errno = ec.category() == std::generic_category() ? ec.value() : EOPNOTSUPP;
            return -1;  // the rdma provider: rdma_cm has no keepalive
        }
        return 0;
    }
    // Other TCP options (TCP_USER_TIMEOUT...) apply to the LLP socket.
    const auto b = bridge_of(*e);
    return b ? b->llp_setsockopt(level, name, val, len) : 0;
}

// Epoll registrations of the descriptors the library may give another file
// (a connect() in progress, SDP up, the TCP fallback; FdTable::swap_file)
// are recorded and move with the number. Others, and the library's own
// calls, reach the kernel unchanged.
SDP_EXPORT int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
    if (internal_call() || !fds().swappable(fd)) {
        return real().epoll_ctl(epfd, op, fd, ev);
    }
    return fds().epoll_ctl(epfd, op, fd, ev);
}

// Threads the library's code starts (the SDP channel's helper, the
// acceptor's handshakes, the resolver) are the library's: their socket calls
// (a socket duplication's reconnect, say) must not be taken for the
// program's. A thread started from inside the library is marked so.
namespace {
struct ThreadStart {
    void* (*fn)(void*);
    void* arg;
};
void* internal_thread_start(void* p) {
    const ThreadStart ts = *static_cast<ThreadStart*>(p);
    delete static_cast<ThreadStart*>(p);
    mark_internal_thread();
    return ts.fn(ts.arg);
}
}  // namespace

SDP_EXPORT int pthread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*),
                              void* arg) {
    if (!internal_call()) {
        return real().pthread_create(t, attr, fn, arg);
    }
    auto* ts = new (std::nothrow) ThreadStart{fn, arg};
    if (ts == nullptr) {
        return EAGAIN;
    }
    const int r = real().pthread_create(t, attr, internal_thread_start, ts);
    if (r != 0) {
        delete ts;
    }
    return r;
}

// --- the direct path (docs/preload.md, "The direct path") ---------------------

namespace {

// The entry of an SDP descriptor of the program, with the bridge this
// process runs for it, or nulls: the call is the kernel's. For any other
// descriptor this costs a thread-local and an atomic load (no lock, no
// fstat). Not checked against the file now at fd: a direct write checks
// that (FdTable::current) once the cheap checks let it try.
struct DirectTarget {
    std::shared_ptr<Entry> entry;
    std::shared_ptr<Bridge> bridge;
};
DirectTarget direct_target(int fd) {
    if (internal_call() || !fds().sdp_hint(fd) || !settings().direct) {
        return {};
    }
    auto e = fds().peek(fd);
    if (!e || e->kind != Entry::Kind::sdp) {
        return {};
    }
    auto b = bridge_of(*e);
    return {std::move(e), std::move(b)};
}

// A gathered write of the program on an SDP descriptor (flags: send()'s):
// the stream takes what it can now, straight from the program's buffers.
// Nothing taken: `own` makes the program's call as it is (the kernel's
// errors, signals and blocking exactly). Some taken: the rest goes to the
// descriptor with sendmsg(MSG_NOSIGNAL), where the kernel blocks, times out,
// is interrupted or says EAGAIN as without the direct path, and the bridge
// carries it after the bytes taken here; the count is both parts', and an
// error of the rest leaves the part taken as the result (a partial write,
// without SIGPIPE, as on TCP).
template <typename Own>
ssize_t gathered_write(int fd, int flags, const iovec* iov_in, int iovcnt, Own&& own) {
    const auto target =
        (flags & MSG_OOB) == 0 && iovcnt > 0 && iovcnt <= IOV_MAX && iov_in != nullptr
            ? direct_target(fd)
            : DirectTarget{};
    const auto& b = target.bridge;
    if (!b) {
        return own();
    }
    // The program's call as it is, counted as a write into the socketpair
    // (should fd be another file by now, closed behind the library's back,
    // the count goes to the old bridge, whose send side sets it right the
    // next time it empties the socketpair).
    const auto kernel_way = [&] { return b->kernel_write(own); };
    if (!b->direct_may_take()) {
        return kernel_way();
    }
    if (!FdTable::current(fd, *target.entry)) {
        (void)fds().get(fd);  // closed behind the library's back: the entry goes
        return own();
    }
    // The program's array is read once (another of its threads may change
    // it meanwhile, as the kernel copies it once).
    std::array<iovec, 16> small;
    std::vector<iovec> large;
    iovec* iov = small.data();
    if (iovcnt > static_cast<int>(small.size())) {
        large.resize(static_cast<std::size_t>(iovcnt));
        iov = large.data();
    }
    std::copy(iov_in, iov_in + iovcnt, iov);
    std::size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) {
        total += iov[i].iov_len;
        if (total > static_cast<std::size_t>(SSIZE_MAX) || total < iov[i].iov_len) {
            return kernel_way();  // the kernel's EINVAL
        }
    }
    if (total == 0) {
        return kernel_way();
    }
    std::size_t taken = 0;
    {
        // No signal handler runs inside: one writing to this connection
        // through the kernel (a full socketpair) would wait for the send
        // side, which waits for the direct write this thread holds; and
        // what a handler creates would be taken for the library's. Only a
        // fault's handler can (a buffer the program cannot read: where the
        // kernel says EFAULT, its SIGSEGV handler runs in our memcpy).
        SignalsBlocked quiet;
        InternalScope in;  // the stream's own socket calls are the library's
        taken = b->direct_write(iov, iovcnt, total);
    }
    if (taken == 0) {
        return kernel_way();
    }
    if (taken == total) {
        return static_cast<ssize_t>(taken);
    }
    // The buffers left, from the first one not wholly taken.
    int i = 0;
    std::size_t skip = taken;
    while (skip >= iov[i].iov_len) {
        skip -= iov[i].iov_len;
        ++i;
    }
    iov[i].iov_base = static_cast<std::uint8_t*>(iov[i].iov_base) + skip;
    iov[i].iov_len -= skip;
    msghdr m{};
    m.msg_iov = iov + i;
    m.msg_iovlen = static_cast<std::size_t>(iovcnt - i);
    const int saved = errno;
    const ssize_t r = b->kernel_write([&] { return real().sendmsg(fd, &m, flags | MSG_NOSIGNAL); });
    if (r < 0) {
        errno = saved;
        return static_cast<ssize_t>(taken);
    }
    return static_cast<ssize_t>(taken + static_cast<std::size_t>(r));
}

// One buffer.
template <typename Own>
ssize_t direct_or(int fd, int flags, const void* buf, std::size_t n, Own&& own) {
    const iovec one{const_cast<void*>(buf), n};
    return gathered_write(fd, flags, &one, 1, own);
}

}  // namespace

SDP_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
    return direct_or(fd, 0, buf, n, [&] { return real().write(fd, buf, n); });
}

SDP_EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
    return direct_or(fd, flags, buf, n, [&] { return real().send(fd, buf, n, flags); });
}

SDP_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to,
                          socklen_t tolen) {
    if (to != nullptr && !internal_call() && fds().sdp_hint(fd) && entry_of(fd, Entry::Kind::sdp)) {
        // A connected TCP socket ignores the destination (the socketpair
        // would fail with EISCONN).
        to = nullptr;
        tolen = 0;
    }
    if (to != nullptr) {
        return real().sendto(fd, buf, n, flags, to, tolen);
    }
    return direct_or(fd, flags, buf, n,
                     [&] { return real().sendto(fd, buf, n, flags, nullptr, 0); });
}

SDP_EXPORT ssize_t writev(int fd, const iovec* iov, int iovcnt) {
    return gathered_write(fd, 0, iov, iovcnt, [&] { return real().writev(fd, iov, iovcnt); });
}

// Descriptor passing (SCM_RIGHTS): a process that passes an SDP descriptor
// looks for its holders at exit beyond its children; one that receives
// descriptors starts its heir service (handoff.hpp).
SDP_EXPORT ssize_t sendmsg(int fd, const msghdr* m, int flags) {
    if (m != nullptr && m->msg_controllen > 0 && !internal_call()) {
        for (int passed : rights_of(m)) {
            const auto e = entry_of(passed, Entry::Kind::sdp);
            if (const auto b = e ? bridge_of(*e) : nullptr) {
                b->mark_passed();
            }
        }
    }
    msghdr unnamed{};
    if (m != nullptr && m->msg_name != nullptr && !internal_call() && fds().sdp_hint(fd) &&
        entry_of(fd, Entry::Kind::sdp)) {
        unnamed = *m;  // as sendto(): the destination of a connected socket is ignored
        unnamed.msg_name = nullptr;
        unnamed.msg_namelen = 0;
        m = &unnamed;
    }
    if (m != nullptr && m->msg_controllen == 0 && m->msg_name == nullptr &&
        m->msg_iovlen <= IOV_MAX) {
        return gathered_write(fd, flags, m->msg_iov, static_cast<int>(m->msg_iovlen),
                              [&] { return real().sendmsg(fd, m, flags); });
    }
    return real().sendmsg(fd, m, flags);
}

SDP_EXPORT ssize_t recvmsg(int fd, msghdr* m, int flags) {
    const ssize_t r = real().recvmsg(fd, m, flags);
    if (r < 0 || m == nullptr || m->msg_controllen == 0 || internal_call()) {
        return r;
    }
    // Only a stream socket of AF_UNIX can be an SDP connection's descriptor
    // (D-Bus, Wayland and the like pass memfds and other files).
    const int saved = errno;
    for (int got : rights_of(m)) {
        int domain = 0;
        int type = 0;
        socklen_t dl = sizeof domain;
        socklen_t tl = sizeof type;
        if (real().getsockopt(got, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && domain == AF_UNIX &&
            real().getsockopt(got, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
            InternalScope in;
            SignalsBlocked quiet;
            heir_after_receive();
            break;
        }
    }
    errno = saved;
    return r;
}

SDP_EXPORT int getsockopt(int fd, int level, int name, void* val, socklen_t* len) {
    if (auto c = internal_call() ? nullptr : entry_of(fd, Entry::Kind::connecting)) {
        // In progress: the program's own socket answers (SO_ERROR 0, as in
        // SYN_SENT). Handed back: SO_ERROR is the kept error once, else the
        // kernel's.
        if (level == SOL_SOCKET && name == SO_ERROR) {
            if (const auto err = c->connecting->take_error(c); err && *err != 0) {
                return put_int(val, len, *err);
            }
        }
        return on_own_socket(fd, *c,
                             [&](int s) { return real().getsockopt(s, level, name, val, len); });
    }
    auto e = internal_call() ? nullptr : entry_of(fd, Entry::Kind::sdp);
    if (!e) {
        return real().getsockopt(fd, level, name, val, len);
    }
    if (level == SOL_SOCKET) {
        switch (name) {
            case SO_DOMAIN:
                return put_int(val, len, e->family);
            case SO_PROTOCOL:
                return put_int(val, len, IPPROTO_TCP);
            case SO_KEEPALIVE:
                return put_int(val, len, e->keepalive ? 1 : 0);
            default:
                return real().getsockopt(fd, level, name, val, len);
        }
    }
    if (level == IPPROTO_TCP) {
        switch (name) {
            case TCP_NODELAY:
                return put_int(val, len, e->nodelay ? 1 : 0);
            case TCP_KEEPIDLE:
                return put_int(val, len, e->keep_idle);
            case TCP_KEEPINTVL:
                return put_int(val, len, e->keep_intvl);
            case TCP_KEEPCNT:
                return put_int(val, len, e->keep_cnt);
            default:
                break;
        }
    }
    const auto b = bridge_of(*e);
    if (b && (level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6)) {
        return b->llp_getsockopt(level, name, val, len);  // TCP_INFO, TCP_MAXSEG, IP_TOS...
    }
    errno = ENOPROTOOPT;
    return -1;
}

// --- process life ---------------------------------------------------------------

namespace {

// The process that calls fork() (getppid() in the child could already be
// a reaper).
pid_t g_forking = 0;

void fork_prepare() {
    g_forking = ::getpid();
    state_fork_prepare();
    LiveSet<Connecting>::instance().fork_prepare();
    Bridge::fork_prepare();
    fds().mutex().lock();
}
void fork_parent() {
    fds().mutex().unlock();
    claims_after_fork();  // the child may accept doorbells of our listeners
    Bridge::fork_parent();
    LiveSet<Connecting>::instance().fork_parent();
    state_fork_parent();
}
void fork_child() {
    fds().after_fork_child(g_forking);
    fds().mutex().unlock();
    Bridge::fork_child();
    LiveSet<Connecting>::instance().fork_child();
    state_fork_child();
    heir_after_fork(g_forking);  // connections of the parent's may come here (13.1.1)
}

__attribute__((constructor)) void preload_init() {
    (void)real();
    (void)settings();  // a bad rule file is reported at the program's start
    ::pthread_atfork(fork_prepare, fork_parent, fork_child);
}

// exit(): what the program wrote goes out and each connection closes with
// DisConn, within SDP_PRELOAD_EXIT_LINGER_MS in total.
__attribute__((destructor)) void preload_fini() {
    // Listeners stop taking connections (their threads end, the mappings go).
    for (const auto& l : fds().listeners()) {
        l->close();
    }
    // connect()s still in progress are abandoned (not waited for).
    Connecting::finish_all();
    // Connections a child still holds move to it (13.1.1); the others close.
    hand_off_at_exit(settings().exit_linger);
    Bridge::finish_all(settings().exit_linger);
    write_stats();
}

}  // namespace
