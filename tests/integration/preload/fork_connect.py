#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A forked child connects out again (run under sdp-run against an SDP echo
# server): the parent's first connect made the library's Port Mapper
# client, whose descriptors the child does not keep (libsdp-preload.so
# closes the library's descriptors in a child). The child first takes the
# low descriptor numbers with pipes of its own, then connects over SDP:
# the Port Mapper client must make new descriptors, never use the old
# numbers (now the pipes), and the pipes must carry their bytes intact.
# Prints "ok ..." lines; exit status 0 when all held.
#   fork_connect.py HOST PORT
import os
import socket
import sys

host, port = sys.argv[1], int(sys.argv[2])


def echo(tag):
    s = socket.create_connection((host, port), timeout=20)
    msg = (tag * 4096).encode()
    s.sendall(msg)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    return got == msg


if not echo("p"):
    print("FAIL parent echo")
    sys.exit(1)
pid = os.fork()
if pid == 0:
    pipes = [os.pipe() for _ in range(12)]  # the lowest free numbers
    ok = echo("c")
    intact = True
    for i, (r, w) in enumerate(pipes):
        os.write(w, bytes([i]) * 3)
        intact &= os.read(r, 16) == bytes([i]) * 3
    print(f"{'ok' if ok else 'FAIL'} child echo", flush=True)
    print(f"{'ok' if intact else 'FAIL'} child pipes intact", flush=True)
    sys.exit(0 if ok and intact else 1)
_, status = os.waitpid(pid, 0)
ok = os.waitstatus_to_exitcode(status) == 0 and echo("q")
print(f"{'ok' if ok else 'FAIL'} parent after the child")
sys.exit(0 if ok else 1)
