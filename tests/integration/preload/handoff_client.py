#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A program whose connection outlives the process that made it: it
# connects, sends the first FIRST bytes of IN, forks and exits at once
# (normally). The child waits until its parent is gone, sends the rest of
# IN, shuts down writing and stores everything the echo server returns in
# OUT, then creates OUT.done. With the preload library the connection moves
# to the child when the parent exits (socket duplication, 13.1.1).
#   handoff_client.py HOST PORT IN OUT FIRST
import os
import socket
import sys

import handover_common

host, port, src, dst, first = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
data = open(src, "rb").read()
s = socket.create_connection((host, port), timeout=30)
s.sendall(data[:first])
parent = os.getpid()
if os.fork() != 0:
    sys.exit(0)  # exit(3): the library's exit handler runs

handover_common.wait_until(lambda: os.getppid() != parent)
got = handover_common.finish_echo(s, data[first:])
with open(dst, "wb") as f:
    f.write(got)
s.close()
open(dst + ".done", "w").close()
