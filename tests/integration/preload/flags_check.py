#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Descriptor details a program sees through libsdp-preload.so, in one
# process (listener and client): a non-blocking connect() returns
# EINPROGRESS (the Port Mapper exchange runs on a library thread) and keeps
# O_NONBLOCK,
# accept4(SOCK_NONBLOCK | SOCK_CLOEXEC) gives those flags on the SDP
# descriptor, bytes cross both ways on non-blocking descriptors, and a
# descriptor closed behind the library's back (close_range) leaves no entry
# that would answer for the next file with that number. Prints one line per
# check: "ok NAME" or "FAIL NAME: detail".
#   flags_check.py HOST PORT
import ctypes
import errno
import fcntl
import os
import select
import socket
import sys

host, port = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
failed = False


def check(name, ok, detail=""):
    global failed
    print(("ok " if ok else "FAIL ") + name + ("" if ok else ": " + detail), flush=True)
    failed |= not ok


def wait(fd, out=False):
    r, w, _ = select.select([] if out else [fd], [fd] if out else [], [], 10)
    return bool(r or w)


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind((host, port))
listener.listen(4)

c = socket.socket()
c.setblocking(False)
rc = c.connect_ex((host, port))
check("nonblocking connect EINPROGRESS", rc == errno.EINPROGRESS, f"connect_ex {rc}")
check("O_NONBLOCK kept", fcntl.fcntl(c.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK != 0)
wait(c.fileno(), out=True)
check("connected", c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)

check("listener readable", wait(listener.fileno()))
nfd = libc.accept4(listener.fileno(), None, None, socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
check("accept4", nfd >= 0, os.strerror(ctypes.get_errno()))
check("SOCK_NONBLOCK", fcntl.fcntl(nfd, fcntl.F_GETFL) & os.O_NONBLOCK != 0)
check("SOCK_CLOEXEC", fcntl.fcntl(nfd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC != 0)
s = socket.socket(fileno=nfd)
check("accepted family", s.family == socket.AF_INET, str(s.family))
try:
    s.recv(10)
    check("EAGAIN before data", False, "recv returned")
except BlockingIOError:
    check("EAGAIN before data", True)
c.send(b"ping")
check("server readable", wait(nfd))
check("ping", s.recv(10) == b"ping")
s.send(b"pong")
check("client readable", wait(c.fileno()))
check("pong", c.recv(10) == b"pong")

# Closed behind the library's back: the number's next file is not SDP.
fd = c.detach()
os.closerange(fd, fd + 1)
a, b = socket.socketpair()
if a.fileno() == fd:
    domain = a.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
    check("no stale entry", domain == socket.AF_UNIX, f"SO_DOMAIN {domain} for a socketpair")
else:
    print("note: the number was not reused", flush=True)
sys.exit(1 if failed else 0)
