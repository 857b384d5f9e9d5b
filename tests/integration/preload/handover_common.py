# SPDX-License-Identifier: Apache-2.0
# What the process that got a connection from another one does in the
# hand-over tests (handoff_client.py, fd_handover.py).
import socket
import threading
import time


def wait_until(gone, seconds=20):
    """Polls gone() until it holds (the other process has exited), bounded."""
    deadline = time.monotonic() + seconds
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.01)


def finish_echo(s, rest, wait=None):
    """Sends `rest`, shuts down writing and returns everything the echo
    server sends back until end of stream (read meanwhile, so that neither
    side blocks for good). With wait: reading, and the shutdown after the
    writes, begin only once wait() returned."""
    got = bytearray()

    def reader():
        if wait is not None:
            wait()
        while True:
            b = s.recv(65536)
            if not b:
                return
            got.extend(b)

    t = threading.Thread(target=reader)
    t.start()
    s.sendall(rest)
    if wait is not None:
        wait()
    s.shutdown(socket.SHUT_WR)
    t.join(30)
    return bytes(got)
