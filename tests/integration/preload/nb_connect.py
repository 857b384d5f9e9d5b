#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Non-blocking connect() through libsdp-preload.so, as an event loop does
# it: connect() on an O_NONBLOCK socket returns EINPROGRESS at once, the
# descriptor polls not writable while the Port Mapper exchange and the SDP
# startup run, then writable with SO_ERROR the result (once, then 0). Every
# wait is bounded. Prints one line per check: "ok NAME" or "FAIL NAME: detail".
#   nb_connect.py sdp HOST PORT       an echo server reached over SDP: the
#       connection, connect() again (0 once, then EISCONN), bytes both ways,
#       fork() while in progress, asyncio's sock_connect
#   nb_connect.py close HOST PORT PMREQS  a Port Mapper that never answers
#       (each PMReq it got is a line in PMREQS): close() once the PMReq
#       arrived, certainly in progress; the question is dropped (no more
#       PMReqs), the thread ends, nothing leaks
#   nb_connect.py exit HOST PORT ACCEPTS EXIT_AT  PORT is mapped to an SDP
#       Address that accepts TCP and never answers the MPA Request (each
#       connection it took is a line in ACCEPTS): once the SDP startup
#       stalls there, the program exits while in progress (its last
#       time.monotonic() in EXIT_AT)
#   nb_connect.py fallback HOST PORT  a Port Mapper that does not answer
#       (`both`, SDP_PRELOAD_RESOLVE_MS about 1 s, SDP_PRELOAD_NEGATIVE_S=0)
#       and a plain TCP echo server at PORT: the in-progress state (EALREADY,
#       EAGAIN, not writable) seen by poll and by an epoll registration made
#       while in progress, then TCP on the program's own socket; a port
#       nobody listens on ends in SO_ERROR ECONNREFUSED; asyncio falls back
#   nb_connect.py refused HOST PORT   `use sdp client`, no Port Mapper: the
#       descriptor becomes writable with SO_ERROR ECONNREFUSED, once
import asyncio
import errno
import os
import select
import signal
import socket
import sys
import time

mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
failed = False


def check(name, ok, detail=""):
    global failed
    print(("ok " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)), flush=True)
    failed |= not ok


def start(where):
    """A non-blocking socket whose connect() was called: (socket, errno, seconds)."""
    s = socket.socket()
    s.setblocking(False)
    t = time.monotonic()
    rc = s.connect_ex(where)
    return s, rc, time.monotonic() - t


def started(where, name):
    """start() and the checks every caller makes: EINPROGRESS, at once."""
    s, rc, took = start(where)
    check(name + "EINPROGRESS", rc == errno.EINPROGRESS, errno.errorcode.get(rc, rc))
    check(name + "returned at once", took < 0.5, f"{took:.3f} s")
    return s


def ended(s, name, error, timeout=15):
    """The end of a connect(): POLLOUT, SO_ERROR `error` once, then 0."""
    ev = writable(s, timeout)
    check(name + "POLLOUT", ev & select.POLLOUT != 0, ev)
    e = so_error(s)
    check(name + "SO_ERROR " + errno.errorcode.get(error, "0"), e == error,
          errno.errorcode.get(e, e))
    check(name + "then SO_ERROR 0", so_error(s) == 0)


def writable(s, timeout):
    p = select.poll()
    p.register(s, select.POLLOUT)
    ev = p.poll(timeout * 1000)
    return ev[0][1] if ev else 0


def so_error(s):
    return s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)


def err_of(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno


def echo(s, n, name):
    """n bytes through a non-blocking connected socket and back (bounded)."""
    data = os.urandom(n)
    got = bytearray()
    sent = 0
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        r, w, _ = select.select([s], [s] if sent < n else [], [], 1)
        if w:
            try:
                sent += s.send(data[sent:sent + 65536])
            except BlockingIOError:
                pass
        if r:
            chunk = s.recv(65536)
            if not chunk:
                break
            got.extend(chunk)
    check(name, bytes(got) == data, f"{len(got)} of {n} bytes back")


def threads():
    return len(os.listdir("/proc/self/task"))


def fds():
    return len(os.listdir("/proc/self/fd"))


def settle(what, baseline, limit=20):
    """Waits (bounded) until what() is back at baseline; the last value."""
    deadline = time.monotonic() + limit
    v = what()
    while v > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
        v = what()
    return v


def in_progress(s, name):
    """The state of a connect() still in progress, as Linux shows it."""
    check(name + ": not writable", writable(s, 0) == 0)
    check(name + ": connect() again EALREADY", s.connect_ex((host, port)) == errno.EALREADY)
    check(name + ": recv EAGAIN", err_of(lambda: s.recv(1)) == errno.EAGAIN)
    check(name + ": send EAGAIN", err_of(lambda: s.send(b"x")) == errno.EAGAIN)
    check(name + ": SO_ERROR 0", so_error(s) == 0)
    check(name + ": getpeername ENOTCONN", err_of(s.getpeername) == errno.ENOTCONN)


async def asyncio_echo(n):
    loop = asyncio.get_running_loop()
    s = socket.socket()
    s.setblocking(False)
    await asyncio.wait_for(loop.sock_connect(s, (host, port)), 15)
    data = os.urandom(n)
    await loop.sock_sendall(s, data)
    got = bytearray()
    while len(got) < n:
        chunk = await asyncio.wait_for(loop.sock_recv(s, 65536), 15)
        if not chunk:
            break
        got.extend(chunk)
    s.close()
    return bytes(got) == data


def mode_sdp():
    s = started((host, port), "")
    ended(s, "", 0)
    check("connect() again: 0 once", s.connect_ex((host, port)) == 0)
    check("then EISCONN", s.connect_ex((host, port)) == errno.EISCONN)
    check("getpeername", s.getpeername() == (host, port), s.getpeername())
    echo(s, 300000, "echo")
    s.close()

    # fork() while in progress: the child runs and exits, the parent's
    # connection completes.
    s = started((host, port), "fork: ")
    pid = os.fork()
    if pid == 0:
        signal.alarm(10)
        so_error(s)
        s.close()
        os._exit(0)
    deadline = time.monotonic() + 15
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    check("fork: child exited", status == 0, status)
    ended(s, "fork: ", 0)
    echo(s, 100000, "fork: echo")
    s.close()

    check("asyncio sock_connect", asyncio.run(asyncio_echo(200000)))


def arrived(lines, before, name):
    """Waits (bounded) until the file `lines` has more than `before` lines."""
    deadline = time.monotonic() + 5
    while line_count(lines) <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    check(name, line_count(lines) > before)


def line_count(path):
    try:
        with open(path) as f:
            return len(f.readlines())
    except FileNotFoundError:
        return 0


def closed_in_progress(pmreqs, name):
    """A connect() closed once its PMReq reached the silent Port Mapper."""
    n0 = line_count(pmreqs)
    s = started((host, port), name)
    arrived(pmreqs, n0, name + "the PMReq reached the Port Mapper")
    in_progress(s, name + "pending")
    s.close()
    # close() drops the Port Mapper question at once: no retransmission
    # follows (without the stop there were two more within the 1.5 s
    # deadline, at 0.25 and 0.75 s). A PMReq sent before close() is given
    # 0.5 s to be written down.
    time.sleep(0.5)
    n1 = line_count(pmreqs)
    time.sleep(1.5)
    check(name + "no PMReq after close()", line_count(pmreqs) == n1,
          f"{line_count(pmreqs) - n1} more")


def mode_close():
    # close() while in progress: the thread ends, nothing leaks. The first
    # one also makes the process's Port Mapper client, whose sockets stay:
    # the descriptors are counted around the second.
    pmreqs = sys.argv[4]
    t0 = settle(threads, 1, 5)
    closed_in_progress(pmreqs, "close (first): ")
    check("close (first): threads back", settle(threads, t0) <= t0, f"{threads()} > {t0}")
    f0 = fds()
    closed_in_progress(pmreqs, "close: ")
    check("close: threads back", settle(threads, t0) <= t0, f"{threads()} > {t0}")
    check("close: descriptors back", settle(fds, f0) <= f0, f"{fds()} > {f0}")


def mode_exit():
    accepts, exit_at = sys.argv[4], sys.argv[5]
    n0 = line_count(accepts)
    s = started((host, port), "exit: ")
    arrived(accepts, n0, "exit: the SDP startup stalls")
    in_progress(s, "exit: pending")
    with open(exit_at, "w") as f:
        f.write(repr(time.monotonic()))


def mode_fallback():
    s = started((host, port), "")
    # An epoll registration made while in progress (as event loops do).
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLOUT)
    in_progress(s, "pending")
    t = time.monotonic()
    ev = ep.poll(15)
    waited = time.monotonic() - t
    check("epoll: POLLOUT at the end", any(e & select.EPOLLOUT for _, e in ev), ev)
    check("epoll: after the Port Mapper deadline", waited > 0.3, f"{waited:.3f} s")
    check("SO_ERROR 0 (TCP)", so_error(s) == 0)
    check("the program's own socket", s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
          == socket.AF_INET)
    check("getpeername", s.getpeername() == (host, port), err_of(s.getpeername))
    # The registration was the in-progress descriptor's: the loop
    # registers again (an unregister may find nothing, as asyncio allows).
    try:
        ep.unregister(s.fileno())
    except OSError:
        pass
    ep.register(s.fileno(), select.EPOLLIN)
    s.send(b"ping")
    ev = ep.poll(10)
    check("epoll again: readable", any(e & select.EPOLLIN for _, e in ev), ev)
    check("ping", s.recv(10) == b"ping")
    ep.close()
    echo(s, 200000, "echo over TCP")
    s.close()

    # Nobody listens: the fallback's own TCP connect is refused.
    q = socket.socket()
    q.bind((host, 0))
    dead = q.getsockname()
    q.close()
    s = started(dead, "refused: ")
    ended(s, "refused: ", errno.ECONNREFUSED)
    s.close()

    check("asyncio falls back", asyncio.run(asyncio_echo(100000)))


def mode_refused():
    s = started((host, port), "")
    in_progress(s, "pending")
    ended(s, "", errno.ECONNREFUSED)
    # The socket is unchanged and may connect again.
    rc = s.connect_ex((host, port))
    check("connect() again: EINPROGRESS", rc == errno.EINPROGRESS, errno.errorcode.get(rc, rc))
    s.close()


{"sdp": mode_sdp, "fallback": mode_fallback, "refused": mode_refused, "close": mode_close,
 "exit": mode_exit}[mode]()
sys.exit(1 if failed else 0)
