#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# An SDP descriptor passed (SCM_RIGHTS) to an unrelated process whose
# maker then exits: the connection must move to the receiver (socket
# duplication, 13.1.1), which goes on using it.
#   fd_handover.py recv UNIX_PATH FILE RESULT   (start first)
#   fd_handover.py send UNIX_PATH HOST PORT FIRST FILE
# The sender connects, sends the first FIRST bytes of FILE, passes the
# descriptor and exits. The receiver sends the rest, shuts down writing,
# reads the echo to end of stream and writes "same N" or "different N" to
# RESULT.
import os
import socket
import sys

import handover_common

role = sys.argv[1]
if role == "send":
    path, host, port, first, src = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    data = open(src, "rb").read()
    c = socket.create_connection((host, port), timeout=30)
    c.sendall(data[:first])
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    socket.send_fds(u, [first.to_bytes(8, "big") + os.getpid().to_bytes(8, "big")], [c.fileno()])
    u.settimeout(20)
    u.recv(1)  # the receiver has it (not in flight when we exit)
    u.close()
    c.close()
    sys.exit(0)  # exit(3): the library hands the connection over

path, src, result = sys.argv[2], sys.argv[3], sys.argv[4]
data = open(src, "rb").read()
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(1)
u, _ = srv.accept()
msg, fds, _, _ = socket.recv_fds(u, 16, 1)
first, maker = int.from_bytes(msg[:8], "big"), int.from_bytes(msg[8:], "big")
u.send(b"k")
# Until the maker is gone the connection is its; a half-close before would
# begin the SDP teardown, and a connection being closed does not move.
handover_common.wait_until(lambda: not os.path.exists("/proc/%d" % maker))
s = socket.socket(fileno=fds[0])
s.settimeout(30)
got = handover_common.finish_echo(s, data[first:])
s.close()
with open(result, "w") as f:
    f.write(("same %d\n" if bytes(got) == data else "different %d\n") % len(got))
