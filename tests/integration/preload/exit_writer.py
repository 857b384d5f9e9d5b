#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes N bytes on a connection with os.write() and exits without closing
# it: what the program wrote must still reach the peer, followed by end of
# stream (the library's exit handler), not a reset.
#   exit_writer.py HOST PORT N
import os
import socket
import sys

s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
fd = s.detach()
os.set_blocking(fd, True)  # the timeout made it non-blocking
v = memoryview(bytes(range(256)) * (int(sys.argv[3]) // 256))
while v:
    v = v[os.write(fd, v):]
