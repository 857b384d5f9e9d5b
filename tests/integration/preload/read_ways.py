#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Every way a program reads a connected stream socket, mixed: read(),
# recv(), recv_into(), recvfrom(), recvmsg() (with and without room for
# ancillary data, several buffers), readv(), MSG_PEEK followed by the read
# of the same bytes, MSG_WAITALL, small and large buffers, blocking and
# non-blocking with select(). A writer thread in the same process sends
# records of many sizes; the reader checks every byte, in order. Run over
# plain TCP and through libsdp-preload.so: the same program, the same
# checks. Then a second connection is read 300 bytes at a time only.
#   read_ways.py HOST PORT
import hashlib
import os
import select
import socket
import sys
import threading


def pattern(total):
    """Bytes whose period (251) no read size is a multiple of, so that a
    lost, doubled or reordered piece shows."""
    return (bytes(range(251)) * (total // 251 + 1))[:total]


def writer(conn, data, sizes):
    view = memoryview(data)
    i = 0
    while view:
        n = sizes[i % len(sizes)]
        conn.sendall(view[:n])
        view = view[n:]
        i += 1
    conn.close()


class Reader:
    def __init__(self, s):
        self.s = s
        self.got = bytearray()

    def one(self, way, size):
        """One read of `way`; returns the bytes (empty at end of stream)."""
        s = self.s
        fd = s.fileno()
        if way == "read":
            return os.read(fd, size)
        if way == "recv":
            return s.recv(size)
        if way == "recv_into":
            buf = bytearray(size)
            n = s.recv_into(buf)
            return bytes(buf[:n])
        if way == "recvfrom":
            return s.recvfrom(size)[0]
        if way == "recvmsg":
            return s.recvmsg(size)[0]
        if way == "recvmsg_anc":
            return s.recvmsg(size, socket.CMSG_SPACE(64))[0]
        if way == "recvmsg_into":
            bufs = [bytearray(7), bytearray(size // 2), bytearray(size - size // 2)]
            n = s.recvmsg_into(bufs)[0]
            return bytes(b"".join(bufs)[:n])
        if way == "readv":
            bufs = [bytearray(100), bytearray(size), bytearray(3)]
            n = os.readv(fd, bufs)
            return bytes(b"".join(bufs)[:n])
        if way == "peek":
            peeked = s.recv(size, socket.MSG_PEEK)
            taken = s.recv(len(peeked)) if peeked else b""
            # A read after a peek returns the peeked bytes first (TCP); it
            # may return fewer, never others.
            if taken != peeked[: len(taken)]:
                raise SystemExit(f"recv after MSG_PEEK returned other bytes at {len(self.got)}")
            return taken
        if way == "waitall":
            return s.recv(size, socket.MSG_WAITALL)
        if way == "nonblocking":
            s.setblocking(False)
            try:
                while True:
                    select.select([s], [], [], 10)
                    try:
                        return s.recv(size)
                    except BlockingIOError:
                        continue
            finally:
                s.setblocking(True)
        raise SystemExit(f"unknown way {way}")

    def run(self, ways):
        reads = 0
        while True:
            way, size = ways[reads % len(ways)]
            b = self.one(way, size)
            reads += 1
            if not b:
                return reads
            self.got += b


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    srv = socket.create_server((host, port), backlog=2)
    total = 8 << 20  # more than one round of the writer's sizes (4.3 MiB)
    data = pattern(total)
    sizes = [1, 70000, 1500, 1 << 20, 7, 65536, 3 << 20, 100, 2048, 4096, 33]

    def serve(n):
        for _ in range(n):
            c, _ = srv.accept()
            writer(c, data, sizes)

    # A daemon: a failed check must end the process, not wait for it.
    t = threading.Thread(target=serve, args=(2,), daemon=True)
    t.start()
    ways = [("read", 65536), ("recv", 1 << 20), ("recv_into", 200000), ("recvfrom", 65536),
            ("recvmsg", 65536), ("recvmsg_anc", 65536), ("recvmsg_into", 100000),
            ("readv", 65536), ("peek", 65536), ("waitall", 300000), ("nonblocking", 65536),
            ("read", 100), ("recv", 2048), ("read", 2049), ("recv", 4096)]
    r = Reader(socket.create_connection((host, port)))
    r.run(ways)
    if bytes(r.got) != data:
        at = next((i for i in range(min(len(r.got), total)) if r.got[i] != data[i]),
                  min(len(r.got), total))
        raise SystemExit(f"mixed reads: {len(r.got)} of {total} bytes, first difference at {at}")
    print(f"mixed reads: {total} bytes intact, sha256 {hashlib.sha256(r.got).hexdigest()[:16]}")
    small = Reader(socket.create_connection((host, port)))
    small.run([("recv", 300)])
    if bytes(small.got) != data:
        raise SystemExit(f"300-byte reads: {len(small.got)} of {total} bytes, not the same")
    print(f"300-byte reads: {total} bytes intact")
    t.join(30)
    if t.is_alive():
        raise SystemExit("the writer did not finish")


if __name__ == "__main__":
    main()
