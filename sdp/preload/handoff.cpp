// SPDX-License-Identifier: Apache-2.0
#include "sdp/preload/handoff.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sdp/preload/bridge.hpp"
#include "sdp/preload/state.hpp"

namespace sdp::preload {
namespace {

enum class Msg : std::uint32_t { offer = 1, port = 2, state = 3, done = 4, claim = 5, claimed = 6 };
constexpr const char* kHeir = "heir";
constexpr const char* kClaims = "claims";
// A Handoff carries the unread and unsent bytes: at most the stream's
// buffers and the bridge's chunks, far below this.
constexpr std::uint32_t kMaxFrame = 96u << 20;
constexpr std::chrono::milliseconds kIoTimeout{10000};
// A worker's accept() waits at most this for its parent's answer.
constexpr std::chrono::milliseconds kClaimTimeout{2000};

// The abstract AF_UNIX name of a process's service: "sdp-preload-WHAT.PID".
socklen_t service_address(const char* what, pid_t pid, sockaddr_un& sa) {
    std::memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    const std::string name = std::string("sdp-preload-") + what + "." + std::to_string(pid);
    std::memcpy(sa.sun_path + 1, name.data(), name.size());  // abstract: leading NUL
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

void set_timeouts(int fd, std::chrono::milliseconds t = kIoTimeout) {
    t = std::max(t, std::chrono::milliseconds(1));
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
    real().setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    real().setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// The parent of a process (/proc/PID/stat), or 0.
pid_t parent_of(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(f, line);
    const auto close = line.rfind(')');  // the name may hold spaces and ')'
    if (close == std::string::npos) {
        return 0;
    }
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    return static_cast<pid_t>(ppid);
}

// Who may talk to our services: processes of our user, and our parent or
// our children whatever their user (a pre-fork master running as root and
// its workers that dropped privileges; a parent and its setuid child).
bool trusted(const ucred& cred) {
    if (cred.uid == ::geteuid()) {
        return true;
    }
    // Pid 0: a peer (or parent) outside our pid namespace; never kin.
    if (cred.pid <= 0) {
        return false;
    }
    const pid_t parent = ::getppid();
    return (parent > 0 && cred.pid == parent) || parent_of(cred.pid) == ::getpid();
}

// Moves all n bytes through `io` (send or recv, retried on EINTR); false
// on an error, the end of the stream or a timeout.
template <typename Byte, typename Io>
bool all_of(Byte* p, std::size_t n, Io io) {
    while (n > 0) {
        const ssize_t k = io(p, n);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return false;
        }
        p += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

bool send_all(int fd, const std::uint8_t* p, std::size_t n) {
    return all_of(p, n, [fd](const std::uint8_t* b, std::size_t m) {
        return ::send(fd, b, m, MSG_NOSIGNAL);
    });
}

bool recv_all(int fd, std::uint8_t* p, std::size_t n) {
    return all_of(p, n, [fd](std::uint8_t* b, std::size_t m) { return ::recv(fd, b, m, 0); });
}

// A frame: type and length (host order: both ends are this library on one
// host), then the body. `pass` goes along with the header (SCM_RIGHTS).
bool send_frame(int fd, Msg type, std::span<const std::uint8_t> body, int pass = -1) {
    std::uint32_t hdr[2] = {static_cast<std::uint32_t>(type),
                            static_cast<std::uint32_t>(body.size())};
    iovec iov{hdr, sizeof hdr};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    if (pass >= 0) {
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        cmsghdr* c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &pass, sizeof(int));
    }
    ssize_t k;
    do {
        k = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    } while (k < 0 && errno == EINTR);
    if (k != static_cast<ssize_t>(sizeof hdr)) {
        return false;
    }
    return send_all(fd, body.data(), body.size());
}

// Receives a frame of `want`; a descriptor that came along goes to *passed
// (tracked as the library's), else -1.
std::optional<std::vector<std::uint8_t>> recv_frame(int fd, Msg want, int* passed = nullptr) {
    if (passed != nullptr) {
        *passed = -1;
    }
    std::uint32_t hdr[2] = {};
    iovec iov{hdr, sizeof hdr};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t k;
    do {
        k = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    } while (k < 0 && errno == EINTR);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int))) {
            int got = -1;
            std::memcpy(&got, CMSG_DATA(c), sizeof got);
            track_internal(got);
            if (passed != nullptr) {
                *passed = got;
            } else {
                close_internal(got);  // not expected here
            }
        }
    }
    if (k != static_cast<ssize_t>(sizeof hdr) || hdr[0] != static_cast<std::uint32_t>(want) ||
        hdr[1] > kMaxFrame) {
        return std::nullopt;
    }
    std::vector<std::uint8_t> body(hdr[1]);
    if (!recv_all(fd, body.data(), body.size())) {
        return std::nullopt;
    }
    return body;
}

template <typename T>
std::span<const std::uint8_t> bytes_of(const T& v) {
    return {reinterpret_cast<const std::uint8_t*>(&v), sizeof v};
}

// --- the heir: a forked child that may take its parent's connections -------

// OFFER's body: this, then the connection's local address as text.
struct Offer {
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
};

// A listening TCP socket on the connection's local address, any port
// (13.1.1 step 1), or -1.
int listen_near(pm::Endpoint local, std::uint16_t& port) {
    local.port = 0;
    sockaddr_storage ss{};
    const int family = local.address.is_v4() ? AF_INET : AF_INET6;
    const socklen_t len = sockaddr_of(local, family, ss);
    const int fd = real().socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    track_internal(fd);
    sockaddr_storage got{};
    socklen_t got_len = sizeof got;
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0 || real().listen(fd, 8) != 0 ||
        real().getsockname(fd, reinterpret_cast<sockaddr*>(&got), &got_len) != 0) {
        close_internal(fd);
        return -1;
    }
    auto bound = endpoint_of(reinterpret_cast<const sockaddr*>(&got), got_len);
    port = bound ? bound->port : 0;
    return fd;
}

// The names of a /proc directory that are numbers (pids, descriptors).
std::vector<long> numbered_entries(const char* dir) {
    std::vector<long> out;
    DIR* d = ::opendir(dir);
    if (d == nullptr) {
        return out;
    }
    while (const dirent* f = ::readdir(d)) {
        char* end = nullptr;
        const long n = std::strtol(f->d_name, &end, 10);
        if (end != f->d_name && *end == '\0' && n >= 0) {
            out.push_back(n);
        }
    }
    ::closedir(d);
    return out;
}

// This process's descriptors of the open file (dev, ino) that the library
// does not know (received by SCM_RIGHTS).
std::vector<int> untracked_fds_of(dev_t dev, ino_t ino) {
    std::vector<int> out;
    for (long n : numbered_entries("/proc/self/fd")) {
        const int fd = static_cast<int>(n);
        struct stat st {};
        if (!fds().tracked(fd) && ::fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino) {
            out.push_back(fd);
        }
    }
    return out;
}

// One offer from the parent, answered.
void serve_offer(int c) {
    auto offer_bytes = recv_frame(c, Msg::offer);
    if (!offer_bytes || offer_bytes->size() <= sizeof(Offer) || offer_bytes->size() > 256) {
        return;
    }
    Offer o;
    std::memcpy(&o, offer_bytes->data(), sizeof o);
    const auto local =
        pm::Endpoint::parse(std::string(offer_bytes->begin() + sizeof o, offer_bytes->end()));
    const auto dev = static_cast<dev_t>(o.dev);
    const auto ino = static_cast<ino_t>(o.ino);
    // Inherited by fork() (the library knows it), or received by
    // SCM_RIGHTS (it does not: an entry is made once the connection is ours).
    auto entries = fds().entries_of(dev, ino);
    const std::vector<int> received =
        entries.empty() ? untracked_fds_of(dev, ino) : std::vector<int>{};
    std::uint16_t port = 0;
    int lfd = -1;
    if (local && ((!entries.empty() && !entries.front()->bridge) || !received.empty())) {
        lfd = listen_near(*local, port);
    }
    if (!send_frame(c, Msg::port, bytes_of(port)) || lfd < 0) {
        close_internal(lfd);
        return;
    }
    int pump = -1;
    auto state = recv_frame(c, Msg::state, &pump);
    if (!state && pump < 0) {
        // The other process could not suspend the connection (a close had
        // begun, say): it keeps it, nothing is lost.
        log(2, "hand-over: the other process kept the connection");
        close_internal(lfd);
        return;
    }
    std::optional<Handoff> h = state ? Handoff::decode(*state) : std::nullopt;
    std::uint8_t ok = 0;
    if (h && pump >= 0) {
        Stream s;
        if (auto ec = s.take_over(
                lfd, *h, stream_options(entries.empty() ? nullptr : entries.front().get()))) {
            log(1, "hand-over: taking the connection with %s over failed: %s",
                h->peer.to_string().c_str(), ec.message().c_str());
        } else if (auto b = Bridge::adopt(std::move(s), pump, static_cast<dev_t>(o.dev),
                                          static_cast<ino_t>(o.ino))) {
            pump = -1;  // the bridge's now
            if (!received.empty()) {
                b->mark_passed();  // the maker may have passed it elsewhere too
            }
            for (const auto& e : fds().entries_of(dev, ino)) {
                std::lock_guard lk(fds().mutex());
                e->bridge = b;
            }
            for (int fd : received) {
                // getsockname()/getpeername() answer as for any SDP socket;
                // only if the number still is that file (the program may
                // have closed it and got another meanwhile).
                auto e = std::make_shared<Entry>();
                e->kind = Entry::Kind::sdp;
                e->family = h->local.address.is_v4() ? AF_INET : AF_INET6;
                e->local_len = sockaddr_of(h->local, e->family, e->local);
                e->peer_len = sockaddr_of(h->peer, e->family, e->peer);
                e->bridge = b;
                fds().put_if_file(fd, e, dev, ino);
            }
            b->start();
            ok = 1;
            ++counters().handoffs_in;
            log(2, "hand-over: took the connection with %s over", h->peer.to_string().c_str());
        }
    } else {
        log(1, "hand-over: the other process's state was malformed");
    }
    if (ok == 0) {
        ++counters().handoffs_failed;
    }
    close_internal(pump);  // on failure: the program reads end of stream
    close_internal(lfd);
    write_stats();
    send_frame(c, Msg::done, bytes_of(ok));
}

// A service's thread: one request at a time, from processes of our uid.
void service_loop(int lfd, void (*serve)(int)) {
    mark_internal_thread();
    for (;;) {
        const int c = real().accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                continue;
            }
            return;  // EBADF/EINVAL: closed (never, short of a bug)
        }
        track_internal(c);
        ucred cred{};
        socklen_t cl = sizeof cred;
        if (real().getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && trusted(cred)) {
            set_timeouts(c);
            serve(c);
        } else {
            log(1, "refused process %d (uid %u) on the library's socket",
                static_cast<int>(cred.pid), static_cast<unsigned>(cred.uid));
        }
        close_internal(c);
    }
}

// Starts `what`'s service for this process unless it runs already (a
// forked child starts its own: the parent's thread is not there).
void start_service(const char* what, std::atomic<pid_t>& running_for, void (*serve)(int)) {
    const pid_t me = ::getpid();
    if (running_for.exchange(me) == me) {
        return;
    }
    const int lfd = real().socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd >= 0) {
        track_internal(lfd);
    }
    sockaddr_un sa;
    const socklen_t len = service_address(what, me, sa);
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<const sockaddr*>(&sa), len) != 0 ||
        real().listen(lfd, 64) != 0) {
        // (Its name taken: not tried again, nor logged again, in this process.)
        log(1, "no %s service: %s", what, std::strerror(errno));
        close_internal(lfd);
        return;
    }
    SignalsBlocked quiet;
    try {
        std::thread([lfd, serve] { service_loop(lfd, serve); }).detach();
    } catch (const std::system_error& e) {
        // Called from fork() handlers and recvmsg(): never throw into them.
        log(1, "no %s service: %s", what, e.what());
        close_internal(lfd);
        running_for = 0;
    }
}

std::atomic<pid_t> g_heir_for{0};
std::atomic<pid_t> g_claims_for{0};

void start_heir() {
    start_service(kHeir, g_heir_for, serve_offer);
}

// --- claims: a pre-fork server's worker asks for a doorbell's connection ----

void serve_claim(int c) {
    auto req = recv_frame(c, Msg::claim);
    std::optional<pm::Endpoint> bound, from;
    if (req) {
        const std::string text(req->begin(), req->end());
        const auto sp = text.find(' ');
        if (sp != std::string::npos) {
            bound = pm::Endpoint::parse(text.substr(0, sp));
            from = pm::Endpoint::parse(text.substr(sp + 1));
        }
    }
    std::optional<Listener::Claimed> got;
    if (bound && from) {
        for (const auto& l : fds().listeners()) {
            if (l->bound() == *bound && (got = l->claim(*from))) {
                break;
            }
        }
    }
    if (!got) {
        send_frame(c, Msg::claimed, {});
        return;
    }
    const std::string text = got->peer.to_string() + " " + got->local.to_string();
    send_frame(c, Msg::claimed,
               std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()),
               got->app_fd);
    close_internal(got->app_fd);  // the worker's copy is the program's now
}

// --- the parent -------------------------------------------------------------

// This process's children (every thread's), from /proc.
std::vector<pid_t> children() {
    std::vector<pid_t> out;
    for (long tid : numbered_entries("/proc/self/task")) {
        std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/children");
        pid_t pid = 0;
        while (f >> pid) {
            out.push_back(pid);
        }
    }
    return out;
}

// Every process (/proc), for a descriptor passed with SCM_RIGHTS.
std::vector<pid_t> processes() {
    std::vector<pid_t> out;
    for (long pid : numbered_entries("/proc")) {
        out.push_back(static_cast<pid_t>(pid));
    }
    return out;
}

// `pid` has the open file (a socket) of inode `ino` among its descriptors.
bool holds(pid_t pid, ino_t ino) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    const std::string want = "socket:[" + std::to_string(ino) + "]";
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
        return false;
    }
    bool found = false;
    char target[64];
    while (const dirent* f = ::readdir(d)) {
        if (f->d_name[0] == '.') {
            continue;
        }
        const ssize_t n = ::readlinkat(::dirfd(d), f->d_name, target, sizeof target);
        if (n > 0 && want.compare(0, std::string::npos, target, static_cast<std::size_t>(n)) == 0) {
            found = true;
            break;
        }
    }
    ::closedir(d);
    return found;
}

// Connects to `pid`'s service. Abstract names have no permissions: the
// socket must be served by that very process (SO_PEERCRED), or anyone in
// the network namespace who bound the name first could pose as it.
int connect_service(const char* what, pid_t pid, std::chrono::milliseconds timeout) {
    const int fd = real().socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    track_internal(fd);
    sockaddr_un sa;
    const socklen_t len = service_address(what, pid, sa);
    ucred cred{};
    socklen_t cl = sizeof cred;
    set_timeouts(fd, timeout);  // connect() too (a full backlog)
    if (real().connect(fd, reinterpret_cast<const sockaddr*>(&sa), len) != 0 ||
        real().getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.pid != pid) {
        if (cred.pid != 0 && cred.pid != pid) {
            log(1, "the %s socket of process %d is served by process %d: not used", what,
                static_cast<int>(pid), static_cast<int>(cred.pid));
        }
        close_internal(fd);
        return -1;
    }
    return fd;
}

// Offers b's connection to the heir on c; true when it took it over.
bool offer(int c, Bridge& b) {
    const Offer o{static_cast<std::uint64_t>(b.app_dev()), static_cast<std::uint64_t>(b.app_ino())};
    std::vector<std::uint8_t> body(sizeof o);
    std::memcpy(body.data(), &o, sizeof o);
    const std::string local = b.local().to_string();
    body.insert(body.end(), local.begin(), local.end());
    std::uint16_t port = 0;
    auto reply = send_frame(c, Msg::offer, body) ? recv_frame(c, Msg::port) : std::nullopt;
    if (!reply || reply->size() != sizeof port) {
        return false;
    }
    std::memcpy(&port, reply->data(), sizeof port);
    if (port == 0) {
        return false;  // that child does not hold it after all
    }
    int pump = -1;
    std::error_code ec;
    auto h = b.hand_off(port, &pump, ec);
    if (!h) {
        log(2, "hand-over: not possible: %s", ec.message().c_str());
        return false;  // the heir's listener goes when this connection closes
    }
    log(2, "hand-over: SuspComm acknowledged; %zu unread and %zu unsent bytes go along",
        h->unread.size(), h->unsent.size());
    // Past the point of no return (the stream is suspended): the state must
    // get there, whatever is left of the exit budget.
    set_timeouts(c, kIoTimeout);
    const bool sent = send_frame(c, Msg::state, h->encode(), pump);
    close_internal(pump);
    auto done = sent ? recv_frame(c, Msg::done) : std::nullopt;
    const bool ok = done && done->size() == 1 && (*done)[0] == 1;
    if (!ok) {
        ++counters().handoffs_failed;
        log(1, "hand-over: the other process did not take the connection with %s over",
            h->peer.to_string().c_str());
    }
    return ok;
}

}  // namespace

void heir_after_fork(pid_t parent) {
    // Inherited SDP descriptors, or the parent's heir service ran (it may
    // hold received descriptors the library does not know yet): else no
    // thread.
    if (fds().any_sdp() || g_heir_for.load() == parent) {
        start_heir();
    }
}

void claims_after_fork() {
    if (!fds().listeners().empty()) {
        start_service(kClaims, g_claims_for, serve_claim);
    }
}

std::optional<Listener::Claimed> claim_from_owner(pid_t owner, const pm::Endpoint& bound,
                                                  const pm::Endpoint& from) {
    if (owner <= 0 || from.address != Listener::doorbell_target(bound).address) {
        return std::nullopt;  // not from where the owner's doorbells come
    }
    InternalScope in;
    SignalsBlocked quiet;  // a handler must not run inside the library's scope
    const int c = connect_service(kClaims, owner, kClaimTimeout);
    if (c < 0) {
        return std::nullopt;  // the owner is gone: a plain connection
    }
    const std::string text = bound.to_string() + " " + from.to_string();
    int app_fd = -1;
    auto reply =
        send_frame(c, Msg::claim,
                   std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()))
            ? recv_frame(c, Msg::claimed, &app_fd)
            : std::nullopt;
    close_internal(c);
    std::optional<Listener::Claimed> out;
    if (reply && app_fd >= 0) {
        const std::string r(reply->begin(), reply->end());
        const auto sp = r.find(' ');
        auto peer = sp == std::string::npos ? std::nullopt : pm::Endpoint::parse(r.substr(0, sp));
        auto local = sp == std::string::npos ? std::nullopt : pm::Endpoint::parse(r.substr(sp + 1));
        if (peer && local) {
            out = Listener::Claimed{app_fd, nullptr, *peer, *local};
            app_fd = -1;
            start_heir();  // the owner may hand the connection here at its exit
        }
    }
    close_internal(app_fd);
    return out;
}

void heir_after_receive() {
    start_heir();
}

void hand_off_at_exit(std::chrono::milliseconds budget) {
    InternalScope in;
    SignalsBlocked quiet;
    const auto deadline = std::chrono::steady_clock::now() + budget;
    const auto left = [&] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
    };
    // A hand-over is begun only with time for its exchanges (a suspended
    // connection whose state cannot be delivered would be lost; not
    // beginning it leaves the connection to close as before).
    constexpr std::chrono::milliseconds kMinLeft{500};
    const auto kids = children();
    std::vector<pid_t> everyone;  // listed once, for passed descriptors
    for (const auto& b : Bridge::live()) {
        // The children first; every other process too if the program passed
        // the descriptor (SCM_RIGHTS).
        std::vector<pid_t> cands = kids;
        if (b->passed()) {
            if (everyone.empty()) {
                everyone = processes();
            }
            for (pid_t pid : everyone) {
                if (std::find(kids.begin(), kids.end(), pid) == kids.end()) {
                    cands.push_back(pid);
                }
            }
        }
        for (pid_t pid : cands) {
            if (left() < kMinLeft) {
                break;
            }
            if (pid == ::getpid() || !holds(pid, b->app_ino())) {
                continue;
            }
            // Its heir service may still be starting (a fork or a receive
            // just now): connecting is retried briefly.
            int c = -1;
            const auto give_up = std::min(
                deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(300));
            while ((c = connect_service(kHeir, pid, std::min(kIoTimeout, left()))) < 0 &&
                   std::chrono::steady_clock::now() < give_up) {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            if (c < 0) {
                log(2, "hand-over: process %d holds the connection but takes none (exec'd?)",
                    static_cast<int>(pid));
                continue;
            }
            const bool taken = offer(c, *b);
            close_internal(c);
            if (taken) {
                log(2, "hand-over: connection passed to process %d", static_cast<int>(pid));
                break;
            }
        }
    }
    write_stats();
}

}  // namespace sdp::preload
