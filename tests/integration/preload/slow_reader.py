#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Accepts one connection and reads it slowly (a pause per 64 KiB) to its
# end; prints "got N EOF" or "got N error E".
#   slow_reader.py HOST PORT PAUSE
import socket
import sys
import time

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(4)
c, _ = l.accept()
c.settimeout(30)
n = 0
try:
    while True:
        d = c.recv(65536)
        if not d:
            how = "EOF"
            break
        n += len(d)
        time.sleep(float(sys.argv[3]))
except OSError as e:
    how = f"error {e}"
print("got", n, how, flush=True)
