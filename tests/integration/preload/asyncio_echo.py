#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# An asyncio echo server and a client that runs N connections at once, each
# writing SIZE random bytes while it reads the echo; prints "OK N SIZE" when
# every echo matched. Plain asyncio on the default (epoll) event loop: run
# under libsdp-preload.so it exercises non-blocking connect/accept and epoll
# readiness on the bridged descriptors.
#   asyncio_echo.py server HOST PORT
#   asyncio_echo.py client HOST PORT N SIZE
import asyncio
import hashlib
import os
import sys


async def serve(host, port):
    async def handle(reader, writer):
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port)
    async with server:
        await server.serve_forever()


async def one(host, port, size):
    payload = os.urandom(size)
    reader, writer = await asyncio.open_connection(host, port)

    async def send():
        for off in range(0, size, 50000):
            writer.write(payload[off:off + 50000])
            await writer.drain()
        writer.write_eof()

    got = bytearray()

    async def receive():
        while True:
            data = await reader.read(65536)
            if not data:
                return
            got.extend(data)

    await asyncio.wait_for(asyncio.gather(send(), receive()), timeout=30)
    writer.close()
    return hashlib.sha256(payload).digest() == hashlib.sha256(got).digest(), len(got)


async def clients(host, port, n, size):
    results = await asyncio.gather(*(one(host, port, size) for _ in range(n)))
    bad = [r for r in results if not r[0]]
    if bad:
        print("MISMATCH", [r[1] for r in results])
        return 1
    print("OK", n, size)
    return 0


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "server":
        asyncio.run(serve(host, port))
        return 0
    return asyncio.run(clients(host, port, int(sys.argv[4]), int(sys.argv[5])))


if __name__ == "__main__":
    sys.exit(main())
