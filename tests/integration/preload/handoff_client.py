#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A program whose connection outlives the process that made it: it
# connects, sends the first FIRST bytes of IN, forks and exits (normally)
# once the echo has stopped coming in. The child sends the rest of IN at
# once; only once its parent is gone does it read and, after its writes,
# shut down writing; it stores everything the echo server returns in OUT,
# then creates OUT.done. With the preload library the connection moves to
# the child when the parent exits (socket duplication, 13.1.1).
#   handoff_client.py HOST PORT IN OUT FIRST
import fcntl
import os
import socket
import struct
import sys
import termios
import time

import handover_common

host, port, src, dst, first = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
data = open(src, "rb").read()
s = socket.create_connection((host, port), timeout=30)
s.sendall(data[:first])
parent = os.getpid()
if os.fork() != 0:
    # The child writes meanwhile and nobody reads: the echo fills the
    # socketpair and the stream, the child's writes stall in the parent's
    # bridge, so the hand-over carries unread and unsent bytes. Waits
    # until what the descriptor holds (FIONREAD) has stopped growing, so
    # that a slow (loaded) machine has stalled too; at most 20 s.
    last, steady, end = -1, 0, time.monotonic() + 20
    while steady < 5 and time.monotonic() < end:
        held = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        steady = steady + 1 if held > 0 and held == last else 0
        last = held
        time.sleep(0.05)
    time.sleep(0.3)
    sys.exit(0)  # exit(3): the library's exit handler runs

got = handover_common.finish_echo(
    s, data[first:], lambda: handover_common.wait_until(lambda: os.getppid() != parent))
with open(dst, "wb") as f:
    f.write(got)
s.close()
open(dst + ".done", "w").close()
