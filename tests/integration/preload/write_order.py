#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Every way a program writes to a connected stream socket, mixed: write(),
# send(), sendto() with the peer's address (ignored on a connected socket),
# sendmsg() and writev() with several buffers, small writes that a stream
# with room takes at once and large ones that fill it, blocking and then
# non-blocking (EAGAIN and select() for room). A server thread in the same
# process reads everything and compares it with what the writer's calls
# reported written, in order. Run over plain TCP and through
# libsdp-preload.so (where the first kind goes straight to the SDP stream and
# the rest through the socketpair): the same program, the same checks.
#   write_order.py HOST PORT
import hashlib
import os
import select
import socket
import sys
import threading


def record(i, size):
    """Distinct bytes per record, so that a reordering shows."""
    head = f"<{i}:{size}>".encode()
    body = bytes((i * 7 + k) % 251 for k in range(min(size, 251)))
    body = (body * (size // max(len(body), 1) + 1))[:size]
    return head + body


def connected(srv, host, port, take, reply=b""):
    """A client connection to srv, whose accepted end a thread reads to the
    end (each chunk to take), then answers `reply` and closes."""

    def serve():
        c, _ = srv.accept()
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            take(b)
        if reply:
            c.sendall(reply)
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    return t, socket.create_connection((host, port))


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    srv = socket.create_server((host, port), backlog=2)
    got = hashlib.sha256()
    got_len = [0]

    def take(b):
        got.update(b)
        got_len[0] += len(b)

    t, s = connected(srv, host, port, take, reply=b"done")
    sent = hashlib.sha256()
    total = 0

    def account(data, n):
        nonlocal total
        sent.update(data[:n])
        total += n

    sizes = [1, 64, 1500, 4 << 20, 7, 65536, 3 << 20, 100, 2, 1 << 20, 33]
    for i, size in enumerate(sizes * 3):
        data = record(i, size)
        how = i % 5
        if how == 0:
            view = memoryview(data)
            while view:  # write() may be partial only when interrupted
                n = os.write(s.fileno(), view)
                account(bytes(view), n)
                view = view[n:]
        elif how == 1:
            s.sendall(data)
            account(data, len(data))
        elif how == 2:
            view = memoryview(data)
            while view:
                n = s.sendto(view, (host, port))  # the address is ignored (connected)
                account(bytes(view), n)
                view = view[n:]
        elif how == 3:
            parts = [data[: len(data) // 3], data[len(data) // 3 :]]
            n = s.sendmsg(parts)
            account(data, n)
            if n < len(data):
                s.sendall(data[n:])
                account(data[n:], len(data) - n)
        else:
            # (empty buffers among them, as writev allows)
            parts = [b"", data[:1], b"", data[1 : len(data) // 2], data[len(data) // 2 :], b""]
            n = os.writev(s.fileno(), parts)
            account(data, n)
            if n < len(data):
                s.sendall(data[n:])
                account(data[n:], len(data) - n)
    # Non-blocking: write until EAGAIN, wait for room, go on.
    s.setblocking(False)
    eagain = 0
    for i, size in enumerate([5, 2 << 20, 9, 3 << 20, 11] * 2):
        data = memoryview(record(100 + i, size))
        while data:
            try:
                n = s.send(data)
            except BlockingIOError:
                eagain += 1
                select.select([], [s], [], 10)
                continue
            account(bytes(data), n)
            data = data[n:]
    s.setblocking(True)
    s.shutdown(socket.SHUT_WR)
    reply = s.recv(16)
    t.join(30)
    s.close()
    ok = reply == b"done" and got_len[0] == total and got.hexdigest() == sent.hexdigest()
    print(f"wrote {total} bytes, read {got_len[0]}, in order: {ok}, EAGAIN seen: {eagain > 0}")
    whole = concurrent_records(srv, host, port)
    srv.close()
    return 0 if ok and whole else 1


def concurrent_records(srv, host, port, threads=4, count=2000):
    """Threads writing small framed records (writev: header, body) on one
    connection: each record arrives whole (a write of a few hundred bytes
    into a socket with room is not split, on TCP or over SDP), and each
    thread's records in its order."""
    data = bytearray()
    t, s = connected(srv, host, port, data.extend)

    def writer(k):
        for i in range(count):
            body = bytes([65 + k]) * (50 + (i * 37 + k) % 400)
            head = f"[{k}:{i}:{len(body)}]".encode()
            parts = [head, body]
            n = os.writev(s.fileno(), parts)
            if n < len(head) + len(body):
                s.sendall((head + body)[n:])

    ws = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    s.shutdown(socket.SHUT_WR)
    t.join(30)
    s.close()
    nxt = [0] * threads
    pos = 0
    bad = None
    while pos < len(data) and bad is None:
        end = data.find(b"]", pos)
        try:
            k, i, n = (int(x) for x in data[pos + 1 : end].decode().split(":"))
        except ValueError:
            bad = f"no record header at byte {pos}"
            break
        body = data[end + 1 : end + 1 + n]
        if data[pos : pos + 1] != b"[" or i != nxt[k] or body != bytes([65 + k]) * n:
            bad = f"record {k}:{i} broken or out of order at byte {pos}"
        nxt[k] = i + 1
        pos = end + 1 + n
    whole = bad is None and nxt == [count] * threads
    print(f"{threads} threads x {count} records: whole and in order: {whole}" + (f" ({bad})" if bad else ""))
    return whole


if __name__ == "__main__":
    sys.exit(main())
