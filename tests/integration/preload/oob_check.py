#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Out-of-band data as a program sees it: a server and a client in one
# process exchange urgent bytes and print a transcript of what the receiver
# observes (reads, SIOCATMARK, recv(MSG_OOB), SO_OOBINLINE, POLLPRI). Run
# over plain TCP and through libsdp-preload.so, the transcripts must match.
#   oob_check.py both HOST PORT
import fcntl
import select
import socket
import struct
import sys
import threading
import time

SIOCATMARK = 0x8905


def atmark(s):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), SIOCATMARK, b"\0\0\0\0"))[0]


def wait_urgent(s):
    p = select.poll()
    p.register(s, select.POLLPRI)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if p.poll(100):
            time.sleep(0.3)  # let the rest of the client's bytes arrive
            return "POLLPRI"
    return "no POLLPRI"


def drain(s, out):
    while True:
        mark = atmark(s)
        data = s.recv(100)
        out.append(f"  atmark={mark} read {data!r}")
        if not data:
            return


def scenario(listener, host, port, inline):
    out = [f"inline={inline}"]
    c = socket.create_connection((host, port), timeout=10)
    srv, _ = listener.accept()
    srv.settimeout(10)
    if inline:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
    c.sendall(b"abc")
    c.send(b"X", socket.MSG_OOB)
    c.sendall(b"def")
    c.shutdown(socket.SHUT_WR)
    out.append("  " + wait_urgent(srv))
    first = srv.recv(100)
    out.append(f"  read {first!r} atmark={atmark(srv)}")
    try:
        b = srv.recv(1, socket.MSG_OOB)
        out.append(f"  oob {b!r}")
    except OSError as e:
        out.append(f"  oob error {e.errno}")
    try:
        b = srv.recv(1, socket.MSG_OOB)
        out.append(f"  oob again {b!r}")
    except OSError as e:
        out.append(f"  oob again error {e.errno}")
    drain(srv, out)
    srv.close()
    c.close()
    return out


def main():
    host, port = sys.argv[2], int(sys.argv[3])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(4)
    lines = []
    for inline in (False, True):
        lines += scenario(listener, host, port, inline)
    listener.close()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
