#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Sends a file to an echo server (then shuts down writing), reads the echo
# to end of stream into another file; exits 1 unless as many bytes came
# back as went out.
#   echo_client.py HOST PORT IN OUT
import socket
import sys
import threading

host, port, src, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
data = open(src, "rb").read()
s = socket.create_connection((host, port), timeout=30)
errors = []


def send():
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError as e:
        errors.append(e)


t = threading.Thread(target=send)
t.start()
got = bytearray()
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got.extend(chunk)
except OSError as e:
    errors.append(e)
t.join()
s.close()
open(dst, "wb").write(got)
if errors or len(got) != len(data):
    print("echo_client: sent", len(data), "got", len(got), errors, file=sys.stderr)
    sys.exit(1)
