#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A forking echo server: the parent accepts, a child per connection echoes
# until end of stream and prints "served N local PORT" (N bytes; PORT from
# getsockname() of the accepted socket, the listening port as on TCP).
#   forking_echo.py HOST PORT
import os
import socketserver
import sys


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        n = 0
        while True:
            data = self.request.recv(65536)
            if not data:
                break
            self.request.sendall(data)
            n += len(data)
        # One write(2) per line: the children share the log's file offset.
        line = "served %d local %d\n" % (n, self.request.getsockname()[1])
        os.write(1, line.encode())


class Server(socketserver.ForkingTCPServer):
    allow_reuse_address = True


if __name__ == "__main__":
    with Server((sys.argv[1], int(sys.argv[2])), Echo) as s:
        s.serve_forever()
