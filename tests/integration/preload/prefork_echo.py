#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A pre-fork echo server (the nginx/Apache prefork model): the parent
# listens and forks WORKERS workers that all accept() on the inherited
# socket; each echoes a connection until end of stream and prints
# "served N by PID". SIGTERM to the parent ends the workers too.
#   prefork_echo.py HOST PORT WORKERS
import os
import signal
import socket
import sys

srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
workers = []
for _ in range(int(sys.argv[3])):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while True:
            conn, _ = srv.accept()
            n = 0
            while True:
                b = conn.recv(65536)
                if not b:
                    break
                conn.sendall(b)
                n += len(b)
            conn.close()
            # One write(2) per line: the workers share the log's file offset.
            os.write(1, ("served %d by %d\n" % (n, os.getpid())).encode())
    workers.append(pid)
print("workers", len(workers), flush=True)


def stop(*_):
    for w in workers:
        os.kill(w, signal.SIGTERM)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
while True:
    signal.pause()
