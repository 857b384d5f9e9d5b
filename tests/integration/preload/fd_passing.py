#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# An SDP connection's descriptor moves to another process: the parent forks
# a worker first (so the worker knows nothing of the connection), connects
# to an echo server, passes the descriptor over a unix socket
# (SCM_RIGHTS) and closes its own copy. The worker sends FILE with
# sendfile(2), shuts down writing and reads the echo to end of stream;
# exits 0 when every byte came back.
#   fd_passing.py HOST PORT FILE
import os
import socket
import sys

host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctl_parent, ctl_worker = socket.socketpair()
pid = os.fork()
if pid == 0:
    ctl_parent.close()
    _, fds, _, _ = socket.recv_fds(ctl_worker, 16, 1)
    s = socket.socket(fileno=fds[0])
    s.settimeout(30)
    with open(path, "rb") as f:
        sent = s.sendfile(f)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got.extend(chunk)
    s.close()
    ok = bytes(got) == open(path, "rb").read()
    print(f"worker: sent {sent} with sendfile, got {len(got)} back, {'same' if ok else 'DIFFERENT'}",
          flush=True)
    os._exit(0 if ok else 1)
ctl_worker.close()
c = socket.create_connection((host, port), timeout=10)
socket.send_fds(ctl_parent, [b"x"], [c.fileno()])
c.close()  # only the worker holds the descriptor now
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
