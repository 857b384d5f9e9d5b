#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Serves one connection: echoes it until end of stream, closes, exits
# normally (so that the library writes its final counters).
#   echo_once.py HOST PORT
import socket
import sys

srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
conn, _ = srv.accept()
srv.close()
while True:
    b = conn.recv(65536)
    if not b:
        break
    conn.sendall(b)
conn.close()
