#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Connects, turns on TCP keepalive (SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT),
# checks the connection with one echo, prints "connected", then waits in
# recv() for the peer, who will vanish silently. Prints how the wait ended
# and after how long; exits 0 when it ended (end of stream or an error)
# within LIMIT seconds, 2 when recv() was still waiting then.
#   keepalive_client.py HOST PORT IDLE INTVL CNT LIMIT
import socket
import sys
import time

host, port = sys.argv[1], int(sys.argv[2])
idle, intvl, cnt, limit = (int(x) for x in sys.argv[3:7])
s = socket.create_connection((host, port), timeout=10)
s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, intvl)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, cnt)
got = (s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
       s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
       s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
       s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT))
s.sendall(b"hello")
echo = b""
while len(echo) < 5:
    chunk = s.recv(5 - len(echo))
    if not chunk:
        break
    echo += chunk
if echo != b"hello":
    print("no echo:", echo, flush=True)
    sys.exit(1)
print("connected", got, flush=True)
s.settimeout(limit)
start = time.monotonic()
try:
    data = s.recv(100)
    how = "end of stream" if not data else f"data {data!r}"
except socket.timeout:
    print(f"still waiting after {limit} s", flush=True)
    sys.exit(2)
except OSError as e:
    how = f"error {e.errno}"
print(f"ended after {time.monotonic() - start:.1f} s: {how}", flush=True)
sys.exit(0)
