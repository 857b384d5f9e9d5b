#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Unmodified Debian programs run through libsdp-preload.so (sdp-run) against
# each other and against sdp-cat, with a real sdp-pmd on loopback; the bytes
# are compared end to end, the library's counters say which transport each
# connection took, and (where asked) a tshark capture shows MPA/DDP/RDMAP on
# the wire.
#
# usage: preload_test.sh BIN_DIR SCENARIO
#   nc          nc -l  <- nc, both preloaded, 3 MB, MPA on the wire
#   socat       socat client -> sdp-cat -l, and sdp-cat -> socat TCP-LISTEN
#   http        curl -> python3 -m http.server, both preloaded
#   asyncio     a Python asyncio echo server and client, both preloaded
#   forking     a forking server (socketserver.ForkingTCPServer), 6 clients
#   oob         MSG_OOB/SIOCATMARK/SO_OOBINLINE: the same program over TCP
#               and over SDP gives the same transcript
#   direct      every write call (write, send, sendto with an address,
#               sendmsg, writev; blocking and non-blocking, small and large):
#               the bytes arrive in order as over TCP, part of them taken
#               straight by the stream (write_order.py)
#   reads       every read call (read, recv, recv_into, recvfrom, recvmsg
#               with and without ancillary room, readv, MSG_PEEK then the
#               read, MSG_WAITALL, blocking and non-blocking, small and large
#               buffers) of records of many sizes: the same bytes in the same
#               order as over TCP (read_ways.py)
#   rules_tcp   a rule file that says tcp: plain TCP on the wire, no PMReq
#   fallback    `both` against a host with no sdp-pmd: TCP, data intact
#   garbage     a broken rule file: reported once with its line, plain TCP
#   sdp_only    `use sdp server`: SDP clients served, a plain TCP client refused
#   fd_passing  the descriptor of an SDP connection passed to another process
#               (SCM_RIGHTS) and closed by its maker; sendfile(2) on it
#   flags       non-blocking connect, accept4 flags, non-blocking I/O, and no
#               stale entry after close_range() (flags_check.py)
#   nbconnect   non-blocking connect() (nb_connect.py sdp): EINPROGRESS at
#               once, POLLOUT and SO_ERROR 0 over SDP, connect() again, fork()
#               while in progress, asyncio's sock_connect; with a Port Mapper
#               that takes the PMReq and never answers: close() while in
#               progress, and an exit while in progress that does not wait
#   epoll_sdp   one epoll registration kept across connect() over SDP
#               (epoll_connect.c): made before a non-blocking or a blocking
#               connect() and changed with EPOLL_CTL_MOD (Boost.Asio, Netty,
#               nginx), or made edge-triggered while in progress (tokio, NIO)
#   epoll_fallback  the same with no Port Mapper and a plain TCP server: the
#               registration follows the program's socket back at the TCP
#               fallback, also on a dup() made while in progress; and (both)
#               a registration deleted through a dup() of the epoll
#               descriptor is not made again by the library (gone)
#   nbconnect_fallback  non-blocking connect() with a Port Mapper that does
#               not answer: the in-progress state (EALREADY, EAGAIN, not
#               writable, also for an epoll registration), TCP on the
#               program's own socket under `both` (refused: SO_ERROR
#               ECONNREFUSED), and SO_ERROR ECONNREFUSED under `sdp`; both
#               also with a Node.js (libuv) client when node is installed
#   nbconnect_exit  a program that starts 4 non-blocking connect()s
#               (epoll-registered) and returns from main() within 0-4 ms
#               (exit_race.c), 40 times each against an SDP server with a
#               Port Mapper that answers and against a plain TCP server:
#               every run exits 0 (no signal at exit while a connect thread
#               is still asking the Port Mapper or connecting)
#   exit        a program that writes and exits without close(): every byte
#               arrives, then end of stream (not a reset)
#   fd_handover an SDP descriptor passed to an unrelated process whose maker
#               then exits: the connection moves to the receiver (13.1.1)
#   prefork     a pre-fork server (workers accept on the parent's listening
#               socket): every SDP connection reaches a worker
#   handoff     a client that forks and exits: its connection moves to the
#               child (socket duplication initiated by the library, 13.1.1),
#               and every byte still arrives, both ways
#   keepalive   SO_KEEPALIVE/TCP_KEEPIDLE/INTVL/CNT set by a program reach the
#               SDP connection's TCP socket (14.3): a peer whose link is cut
#               (two network namespaces) is detected within the keepalive time
# Exits 77 (skipped) when a program the scenario needs is missing.
set -u
bin=$(cd "${1:?usage: preload_test.sh BIN_DIR SCENARIO}" && pwd)
scenario=${2:?usage: preload_test.sh BIN_DIR SCENARIO}
here=$(cd "$(dirname "$0")" && pwd)

skip() { echo "SKIP: $*" >&2; exit 77; }
die() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.err "$work"/*.log; do
    [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || skip "$1 not installed"; }

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || skip "python3 not installed"
run=$bin/sdp-run
[ -x "$run" ] || die "sdp-run not found in $bin"

work=$(mktemp -d "${TMPDIR:-/tmp}/sdp_preload.XXXXXX") || die "mktemp"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${KEEP_WORK:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

pick_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
pick_udp_port() {
  "$py" -c 'import socket; s=socket.socket(type=socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# stat_of FILE KEY: a counter from a stats file written by the library.
stat_of() {
  "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2" 2>/dev/null
}
expect_stat() {  # FILE KEY VALUE
  local got
  got=$(stat_of "$1" "$2")
  [ "$got" = "$3" ] || die "$(basename "$1"): $2 = '${got}', expected $3 ($(cat "$1" 2>/dev/null))"
}
same() {  # A B WHAT
  cmp -s "$1" "$2" || die "$3: bytes differ ($(stat -c %s "$1") vs $(stat -c %s "$2" 2>/dev/null || echo missing))"
}

# A real sdp-pmd on loopback: clients ask it (SDP_PMSP), preloaded servers
# register with it (SDP_PRELOAD_CONTROL).
start_pmd() {
  local port
  port=$(pick_udp_port)
  cat > "$work/pmd.yaml" <<EOF
listen: ["127.0.0.1:$port"]
control:
  socket: "$work/control.sock"
state_file: "$work/state.json"
EOF
  "$bin/sdp-pmd" --config "$work/pmd.yaml" > "$work/pmd.log" 2>&1 &
  pids+=($!)
  local i
  for ((i = 0; i < 100; i++)); do
    [ -S "$work/control.sock" ] && break
    sleep 0.1
  done
  [ -S "$work/control.sock" ] || die "sdp-pmd did not start"
  export SDP_PMSP=127.0.0.1:$port
  export SDP_PRELOAD_CONTROL=$work/control.sock
}

# capture_start PORT_FILTER: tshark on lo (the caller checks wire_sdp after).
capture_start() {
  capture=""
  if [ "${EUID:-$(id -u)}" -ne 0 ] || ! command -v tshark >/dev/null 2>&1; then
    echo "note: not root or no tshark: the wire is not checked" >&2
    return
  fi
  capture=$work/cap.pcapng
  tshark -n -i lo -B 16 -f "$1" -w "$capture" -q 2> "$work/tshark.log" &
  tshark_pid=$!
  pids+=("$tshark_pid")
  local i
  for ((i = 0; i < 100; i++)); do
    # "Capture started" comes once dumpcap writes the file (filter active);
    # "Capturing on" comes earlier, when a fast client could still be missed.
    grep -q "Capture started" "$work/tshark.log" 2>/dev/null && return
    kill -0 "$tshark_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "note: tshark could not capture; the wire is not checked" >&2
  capture=""
}
capture_stop() {
  [ -n "$capture" ] || return 0
  sleep 0.3
  kill -INT "$tshark_pid" 2>/dev/null
  wait "$tshark_pid" 2>/dev/null
}
# wait_listen PORT: until a TCP socket listens on PORT (10 s).
wait_listen() {
  local i
  for ((i = 0; i < 100; i++)); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  die "nothing listens on port $1"
}
# wait_sdp_listener LOG: until the preloaded server logged "SDP at" (10 s).
wait_sdp_listener() {
  local i
  for ((i = 0; i < 100; i++)); do grep -q "SDP at" "$1" && return 0; sleep 0.1; done
  die "the server did not get an SDP listener"
}
# capture_sdp_port LOG: waits for the preloaded server's "SDP at IP:PORT"
# line and captures that port only (other tests' SDP traffic stays out).
capture_sdp_port() {
  wait_sdp_listener "$1"
  capture_start "tcp port $(sed -n 's/.*SDP at [^ ]*:\([0-9]*\) .*/\1/p' "$1" | head -1)"
}
# wire_counts: MPA Requests and iWARP DDP/RDMAP frames in the capture, and
# the FPDU CRCs tshark checked (good bad).
wire_counts() {
  local opts=(-n -o tcp.try_heuristic_first:TRUE -o tcp.desegment_tcp_streams:TRUE
              -o tcp.reassemble_out_of_order:TRUE
              --disable-heuristic rpcrdma_iwarp --disable-heuristic smb_direct_iwarp)
  tshark -r "$capture" "${opts[@]}" -V > "$work/v.txt" 2> /dev/null || true
  mpa_req=$(tshark -r "$capture" "${opts[@]}" -Y iwarp_mpa.key.req -T fields -e frame.number 2>/dev/null | grep -c .)
  rdmap=$(tshark -r "$capture" "${opts[@]}" -Y iwarp_ddp_rdmap -T fields -e frame.number 2>/dev/null | grep -c .)
  good_crc=$(grep -c "Good CRC32" "$work/v.txt")
  bad_crc=$(grep -c "Bad CRC32" "$work/v.txt")
}
expect_sdp_on_wire() {
  [ -n "$capture" ] || return 0
  wire_counts
  echo "wire: $mpa_req MPA Request(s), $rdmap DDP/RDMAP frames, $good_crc good CRC32c, $bad_crc bad"
  [ "$mpa_req" -ge "$1" ] || die "expected at least $1 MPA Request(s) on the wire, saw $mpa_req"
  [ "$rdmap" -ge 2 ] || die "no DDP/RDMAP traffic on the wire"
  [ "$bad_crc" -eq 0 ] || die "$bad_crc FPDUs with a bad CRC"
  [ "$good_crc" -gt 0 ] || die "no FPDU CRC checked by tshark"
}
expect_no_sdp_on_wire() {
  [ -n "$capture" ] || return 0
  wire_counts
  echo "wire: $mpa_req MPA Request(s), $rdmap DDP/RDMAP frames"
  [ "$mpa_req" -eq 0 ] && [ "$rdmap" -eq 0 ] || die "SDP on the wire where plain TCP was asked for"
}

# preload NAME CMD...: runs CMD under sdp-run with its counters in NAME.json.
preload() {
  local name=$1
  shift
  SDP_PRELOAD_STATS=$work/$name.json SDP_PRELOAD_LOG=${SDP_PRELOAD_LOG:-info} \
    timeout 60 "$run" "$@"
}
# tcp_then_sdp NAME SCRIPT: SCRIPT HOST PORT over plain TCP (output in
# $work/tcp.txt), then preloaded as NAME ($work/sdp.txt, counters in
# $work/NAME.json), each on a fresh port; fails the test if either fails.
tcp_then_sdp() {
  port=$(pick_port)
  timeout 60 "$py" "$2" 127.0.0.1 "$port" > "$work/tcp.txt" 2> "$work/tcp.err" \
    || die "over TCP: $(cat "$work/tcp.txt" "$work/tcp.err")"
  port=$(pick_port)
  preload "$1" "$py" "$2" 127.0.0.1 "$port" > "$work/sdp.txt" 2> "$work/sdp.err" \
    || die "over SDP: $(cat "$work/sdp.txt" "$work/sdp.err")"
  expect_stat "$work/$1.json" connect_sdp 2
  expect_stat "$work/$1.json" accept_sdp 2
  expect_stat "$work/$1.json" bridges_reset 0
}
# nc_listen plain|preload: nc -l on 127.0.0.1:$port into $work/out, as srv.
nc_listen() {
  if [ "$1" = preload ]; then
    preload srv nc -l 127.0.0.1 "$port" > "$work/out" 2> "$work/srv.err" &
  else
    nc -l 127.0.0.1 "$port" > "$work/out" 2> "$work/srv.err" &
  fi
  srv=$!
  pids+=("$srv")
}
# nc_send WHAT: the preloaded nc client sends $work/in to it; both end and
# the bytes are compared.
nc_send() {
  preload cli nc -N 127.0.0.1 "$port" < "$work/in" 2> "$work/cli.err" || die "nc client failed"
  wait "$srv" || die "nc -l failed"
  same "$work/in" "$work/out" "$1"
}
# serve CMD...: CMD preloaded in the background as "srv" (srv.log, srv.err,
# srv.json; its pid in $srv), once its SDP listener is up.
# echo_clients WHAT: six preloaded clients at once against the echo server
# on $port, each over SDP, each echo compared.
echo_clients() {
  local n cpids=()
  for n in 1 2 3 4 5 6; do
    head -c $((150000 + n * 1000)) /dev/urandom > "$work/in$n"
    preload "cli$n" "$py" "$here/echo_client.py" 127.0.0.1 "$port" "$work/in$n" "$work/out$n" \
      2> "$work/cli$n.err" &
    cpids+=($!)
  done
  for n in 1 2 3 4 5 6; do
    wait "${cpids[$((n - 1))]}" || die "client $n failed"
    same "$work/in$n" "$work/out$n" "$1, client $n"
    expect_stat "$work/cli$n.json" connect_sdp 1
  done
}
# sum_stat KEY FILE...: a counter summed over several processes' files.
sum_stat() {
  local key=$1
  shift
  "$py" -c 'import json,sys; print(sum(json.load(open(f))[sys.argv[1]] for f in sys.argv[2:]))' \
    "$key" "$@" 2>/dev/null
}
# checks NAME WHAT CMD...: a checking program preloaded (NAME.json, NAME.log),
# its lines shown; dies with WHAT when it fails.
checks() {
  local name=$1 what=$2
  shift 2
  preload "$name" "$@" > "$work/$name.log" 2> "$work/$name.err"
  local rc=$?
  cat "$work/$name.log"
  [ "$rc" -eq 0 ] || die "$what"
}
# node_client NAME: a Node.js (libuv, epoll) client preloaded as NAME
# connects to the echo server on $port and gets its bytes back (libuv
# connects non-blocking and reads SO_ERROR); nothing when node is missing.
node_client() {
  command -v node >/dev/null 2>&1 || { echo "note: node not installed"; return 0; }
  preload "$1" node -e '
    const s = require("net").connect(+process.argv[1], "127.0.0.1", () => s.write("hello"));
    s.on("data", (d) => { console.log("got " + d); s.end(); });
    s.on("error", (e) => { console.log("error " + e.code); process.exitCode = 1; });
    setTimeout(() => { console.log("timeout"); process.exit(2); }, 15000).unref();' "$port" \
    > "$work/$1.log" 2> "$work/$1.err"
  grep -qx "got hello" "$work/$1.log" || die "node client: $(cat "$work/$1.log")"
  expect_stat "$work/$1.json" connect_async 1
}
# silent_pm: a Port Mapper that takes PMReqs and never answers; each one
# is a line in $work/pmreq; its address in $silent_pmsp.
silent_pm() {
  "$py" -c '
import socket, sys
s = socket.socket(type=socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
__import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    s.recv(2048)
    with open(sys.argv[2], "a") as f:
        f.write("PMReq\n")' "$work/silent.port" "$work/pmreq" &
  pids+=($!)
  local i
  for ((i = 0; i < 100; i++)); do [ -s "$work/silent.port" ] && break; sleep 0.1; done
  [ -s "$work/silent.port" ] || die "the silent Port Mapper did not start"
  silent_pmsp=127.0.0.1:$(cat "$work/silent.port")
}
# epoll_clients WHERE MODE...: preload_epoll_connect in each MODE against the
# echo server on $port (as ep_MODE: ep_MODE.json, ep_MODE.log).
epoll_clients() {
  local where=$1 mode
  shift
  for mode in "$@"; do
    checks "ep_$mode" "epoll registration across connect() ($mode, $where)" \
      "$bin/preload_epoll_connect" "$mode" 127.0.0.1 "$port" 1000000
  done
}
serve() {
  preload srv "$@" > "$work/srv.log" 2> "$work/srv.err" &
  srv=$!
  pids+=("$srv")
  wait_sdp_listener "$work/srv.err"
}
# tcp_echo NAME: a plain (not preloaded) forking TCP echo server on a new
# port, set in $port; logs in $work/NAME.log and .err.
tcp_echo() {
  port=$(pick_port)
  "$py" "$here/forking_echo.py" 127.0.0.1 "$port" > "$work/$1.log" 2> "$work/$1.err" &
  pids+=($!)
  wait_listen "$port"
}
# no_pmsp: no sdp-pmd; the PMSP is a UDP port nobody answers on, asked
# by every connect() (no negative cache) for 1 s.
no_pmsp() {
  export SDP_PMSP=127.0.0.1:$(pick_udp_port) SDP_PRELOAD_RESOLVE_MS=1000 SDP_PRELOAD_NEGATIVE_S=0
}

case "$scenario" in
nc)
  need nc
  start_pmd
  port=$(pick_port)
  head -c 3000000 /dev/urandom > "$work/in"
  nc_listen preload
  capture_sdp_port "$work/srv.err"
  nc_send "nc -> nc -l"
  capture_stop
  expect_stat "$work/cli.json" connect_sdp 1
  expect_stat "$work/srv.json" accept_sdp 1
  expect_stat "$work/cli.json" bytes_to_peer 3000000
  expect_sdp_on_wire 1
  ;;
socat)
  need socat
  start_pmd
  head -c 2000000 /dev/urandom > "$work/in"
  # (a) a preloaded socat client against sdp-cat, an SDP server registered
  #     with sdp-pmd (no preload on that side).
  port=$(pick_port)
  timeout 60 "$bin/sdp-cat" -l --register "127.0.0.1:$port" --control "$work/control.sock" \
    "$(pick_port)" > "$work/out_a" 2> "$work/sdpcat.err" &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do
    "$bin/sdp-pmctl" --socket "$work/control.sock" services 2>/dev/null | grep -q ":$port " && break
    sleep 0.1
  done
  preload cli_a socat -u "OPEN:$work/in" "TCP:127.0.0.1:$port" 2> "$work/cli_a.err" \
    || die "socat client failed"
  wait "${pids[-1]}" || die "sdp-cat -l failed"
  same "$work/in" "$work/out_a" "socat -> sdp-cat -l"
  expect_stat "$work/cli_a.json" connect_sdp 1
  # (b) sdp-cat (SDP through the Port Mapper) against a preloaded socat server.
  port=$(pick_port)
  preload srv_b socat -u "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" "CREATE:$work/out_b" \
    2> "$work/srv_b.err" &
  pids+=($!)
  wait_sdp_listener "$work/srv_b.err"
  timeout 60 "$bin/sdp-cat" --pmsp "$SDP_PMSP" 127.0.0.1 "$port" < "$work/in" \
    2> "$work/sdpcat_b.err" || die "sdp-cat client failed"
  wait "${pids[-1]}" || die "socat server failed"
  same "$work/in" "$work/out_b" "sdp-cat -> socat TCP-LISTEN"
  expect_stat "$work/srv_b.json" accept_sdp 1
  ;;
http)
  need curl
  start_pmd
  port=$(pick_port)
  mkdir -p "$work/www"
  head -c 2500000 /dev/urandom > "$work/www/blob.bin"
  (cd "$work/www" && preload srv "$py" -m http.server --bind 127.0.0.1 "$port") \
    > "$work/srv.log" 2> "$work/srv.err" &
  pids+=($!)
  capture_sdp_port "$work/srv.err"
  for n in 1 2 3; do
    preload "cli$n" curl -sS --fail -o "$work/got$n" "http://127.0.0.1:$port/blob.bin" \
      2> "$work/cli$n.err" || die "curl $n failed"
    same "$work/www/blob.bin" "$work/got$n" "curl $n"
    expect_stat "$work/cli$n.json" connect_sdp 1
    expect_stat "$work/cli$n.json" connect_async 1  # curl connects non-blocking
  done
  capture_stop
  expect_sdp_on_wire 3
  ;;
asyncio)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/asyncio_echo.py" server 127.0.0.1 "$port"
  preload cli "$py" "$here/asyncio_echo.py" client 127.0.0.1 "$port" 4 1048576 \
    > "$work/cli.log" 2> "$work/cli.err" || die "asyncio client failed: $(cat "$work/cli.log")"
  grep -q "^OK 4 " "$work/cli.log" || die "asyncio client: $(cat "$work/cli.log")"
  expect_stat "$work/cli.json" connect_sdp 4
  # asyncio's sock_connect got EINPROGRESS each time (a library thread
  # connected while the event loop ran).
  expect_stat "$work/cli.json" connect_async 4
  ;;
forking)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/forking_echo.py" 127.0.0.1 "$port"
  echo_clients "forking server"
  # The forking server's parent took all six over SDP; each child served one.
  for ((i = 0; i < 50; i++)); do [ "$(stat_of "$work/srv.json" accept_sdp)" = 6 ] && break; sleep 0.1; done
  expect_stat "$work/srv.json" accept_sdp 6
  grep -c "^served [0-9]* local $port\$" "$work/srv.log" | grep -qx 6 \
    || die "server log (getsockname of accepted sockets = the listening port): $(cat "$work/srv.log")"
  # A forked client connects out again: the Port Mapper client's
  # descriptors are new in the child (the library closed its old ones
  # there), the child's own pipes on those numbers stay intact.
  SDP_PRELOAD_STATS="$work/fc.%p.json" SDP_PRELOAD_LOG=info timeout 60 "$run" \
    "$py" "$here/fork_connect.py" 127.0.0.1 "$port" > "$work/fc.log" 2> "$work/fc.err" \
    || die "fork_connect: $(cat "$work/fc.log" "$work/fc.err")"
  [ "$(grep -c '^ok' "$work/fc.log")" = 3 ] || die "fork_connect: $(cat "$work/fc.log")"
  [ "$(sum_stat connect_sdp "$work"/fc.*.json)" = 3 ] \
    || die "fork_connect: not every connect went over SDP: $(cat "$work"/fc.*.json)"
  ;;
fd_handover)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/echo_once.py" 127.0.0.1 "$port"
  head -c 1200000 /dev/urandom > "$work/in"
  # Two unrelated processes (not parent and child): the maker passes the
  # descriptor over a unix socket and exits.
  SDP_PRELOAD_STATS="$work/rcv.json" SDP_PRELOAD_LOG=info timeout 60 "$run" \
    "$py" "$here/fd_handover.py" recv "$work/pass.sock" "$work/in" "$work/result" \
    2> "$work/rcv.err" &
  rcv=$!
  pids+=("$rcv")
  for ((i = 0; i < 100; i++)); do [ -S "$work/pass.sock" ] && break; sleep 0.1; done
  preload snd "$py" "$here/fd_handover.py" send "$work/pass.sock" 127.0.0.1 "$port" 150000 \
    "$work/in" 2> "$work/snd.err" || die "sender failed"
  wait "$rcv" || die "receiver failed"
  [ "$(cat "$work/result")" = "same 1200000" ] || die "receiver: $(cat "$work/result")"
  wait "$srv" || die "echo server failed"
  expect_stat "$work/snd.json" handoffs_out 1
  expect_stat "$work/rcv.json" handoffs_in 1
  expect_stat "$work/srv.json" sdp_resumes 1
  ;;
prefork)
  start_pmd
  port=$(pick_port)
  # The parent listens (its Listener takes the SDP connections), three
  # workers accept: each doorbell a worker accepts is claimed from the
  # parent, the worker gets the connection's descriptor.
  preload "srv.%p" "$py" "$here/prefork_echo.py" 127.0.0.1 "$port" 3 \
    > "$work/srv.log" 2> "$work/srv.err" &
  pids+=($!)
  wait_sdp_listener "$work/srv.err"
  echo_clients "pre-fork server"
  # A plain TCP client from the doorbells' own address: a worker asks the
  # parent, which has no such doorbell, and gets it as TCP.
  head -c 100000 /dev/urandom > "$work/in_tcp"
  "$py" "$here/echo_client.py" 127.0.0.1 "$port" "$work/in_tcp" "$work/out_tcp" \
    2> "$work/tcp.err" || die "plain TCP client failed"
  same "$work/in_tcp" "$work/out_tcp" "pre-fork server, plain TCP client"
  for ((i = 0; i < 50; i++)); do
    [ "$(sum_stat accept_sdp "$work"/srv.*.json)" = 6 ] \
      && [ "$(sum_stat accept_tcp "$work"/srv.*.json)" = 1 ] && break
    sleep 0.1
  done
  [ "$(sum_stat accept_sdp "$work"/srv.*.json)" = 6 ] \
    || die "workers' accept_sdp: $(cat "$work"/srv.*.json)"
  [ "$(sum_stat accept_tcp "$work"/srv.*.json)" = 1 ] \
    || die "workers' accept_tcp (one plain client, no doorbell): $(cat "$work"/srv.*.json)"
  [ "$(grep -c '^served' "$work/srv.log")" = 7 ] || die "server log: $(cat "$work/srv.log")"
  ;;
handoff)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/echo_once.py" 127.0.0.1 "$port"
  # More than the socketpairs and streams hold: the hand-over finds both
  # directions stalled.
  head -c 32000000 /dev/urandom > "$work/in"
  # The parent sends 200 kB (echoed back into its unread buffers), forks
  # and exits; the child sends the rest and reads everything.
  SDP_PRELOAD_STATS="$work/cli.%p.json" SDP_PRELOAD_LOG=info timeout 60 "$run" \
    "$py" "$here/handoff_client.py" 127.0.0.1 "$port" "$work/in" "$work/out" 200000 \
    2> "$work/cli.err" || die "client parent failed"
  for ((i = 0; i < 300; i++)); do [ -e "$work/out.done" ] && break; sleep 0.1; done
  [ -e "$work/out.done" ] || die "the child did not finish"
  same "$work/in" "$work/out" "echo across the hand-over"
  wait "$srv" || die "echo server failed"
  # The parent handed its connection over, the child took it, and the
  # server's side (the Remote Peer) reconnected once (13.1.1 step 4).
  out_files=$(grep -l '"handoffs_out":1' "$work"/cli.*.json | wc -l)
  in_files=$(grep -l '"handoffs_in":1' "$work"/cli.*.json | wc -l)
  [ "$out_files" = 1 ] && [ "$in_files" = 1 ] \
    || die "hand-over counters: $(cat "$work"/cli.*.json)"
  expect_stat "$work/srv.json" sdp_resumes 1
  expect_stat "$work/srv.json" accept_sdp 1
  grep -q "hand-over: took the connection" "$work/cli.err" || die "no hand-over in the log"
  # The stalled streams carried bytes over (13.1.1 step 5).
  carried=$(sed -n 's/.*SuspComm acknowledged; \([0-9]*\) unread and \([0-9]*\) unsent.*/\1 \2/p' \
    "$work/cli.err")
  read -r unread unsent <<< "$carried"
  [ "${unread:-0}" -gt 0 ] && [ "${unsent:-0}" -gt 0 ] \
    || die "the hand-over carried no unread or no unsent bytes: '$carried'"
  for f in "$work"/cli.*.json "$work/srv.json"; do
    expect_stat "$f" handoffs_failed 0
    expect_stat "$f" bridges_reset 0
  done
  ;;
oob)
  start_pmd
  # The same program, first over plain TCP (no preload), then with both
  # ends preloaded over SDP: the transcripts must be identical.
  port=$(pick_port)
  "$py" "$here/oob_check.py" both 127.0.0.1 "$port" > "$work/tcp.txt" 2> "$work/tcp.err" \
    || die "OOB over TCP failed: $(cat "$work/tcp.err")"
  port=$(pick_port)
  preload oob "$py" "$here/oob_check.py" both 127.0.0.1 "$port" > "$work/sdp.txt" \
    2> "$work/sdp.err" || die "OOB over SDP failed: $(cat "$work/sdp.txt")"
  expect_stat "$work/oob.json" connect_sdp 2
  expect_stat "$work/oob.json" accept_sdp 2
  # One urgent byte per connection went each way through a bridge: the
  # client's bridge sent it as SDP OOB data, the server's gave it to the
  # program as MSG_OOB.
  expect_stat "$work/oob.json" oob_to_peer 2
  expect_stat "$work/oob.json" oob_from_peer 2
  diff -u "$work/tcp.txt" "$work/sdp.txt" >&2 || die "OOB transcript over SDP differs from TCP"
  echo "OOB transcript ($(wc -l < "$work/tcp.txt") lines) identical over TCP and SDP"
  ;;
direct)
  start_pmd
  # Every write call, blocking and not, small and large, over TCP and then
  # over SDP: the reader sees exactly what the calls reported written, in
  # order, while part went straight to the stream and part through the
  # socketpair; then (a second connection) threads' small writev records
  # each arrive whole.
  tcp_then_sdp direct "$here/write_order.py"
  cat "$work/tcp.txt" "$work/sdp.txt"
  direct=$(stat_of "$work/direct.json" bytes_direct)
  to_peer=$(stat_of "$work/direct.json" bytes_to_peer)
  [ "${direct:-0}" -gt 0 ] && [ "${direct:-0}" -lt "${to_peer:-0}" ] \
    || die "expected part of the bytes to go straight to the stream: bytes_direct=$direct of $to_peer"
  echo "$direct of $to_peer bytes went straight to the stream"
  # SDP_PRELOAD_DIRECT=0: every byte through the socketpair, the same result.
  port=$(pick_port)
  SDP_PRELOAD_DIRECT=0 preload socketpair "$py" "$here/write_order.py" 127.0.0.1 "$port" \
    > "$work/sp.txt" 2> "$work/sp.err" || die "over SDP, direct off: $(cat "$work/sp.txt" "$work/sp.err")"
  expect_stat "$work/socketpair.json" connect_sdp 2
  expect_stat "$work/socketpair.json" bytes_direct 0
  ;;
reads)
  start_pmd
  tcp_then_sdp reads "$here/read_ways.py"
  diff -u "$work/tcp.txt" "$work/sdp.txt" >&2 || die "reads over SDP differ from TCP"
  cat "$work/sdp.txt"
  ;;
rules_tcp)
  need nc
  start_pmd
  port=$(pick_port)
  printf '# everything stays TCP\nuse tcp * * *\n' > "$work/rules.conf"
  export SDP_PRELOAD_CONFIG=$work/rules.conf
  head -c 500000 /dev/urandom > "$work/in"
  capture_start "tcp port $port"
  nc_listen preload
  wait_listen "$port"
  nc_send "nc over TCP by rule"
  capture_stop
  expect_stat "$work/cli.json" connect_tcp_rule 1
  expect_stat "$work/cli.json" connect_sdp 0
  expect_stat "$work/srv.json" listen_tcp_rule 1
  expect_no_sdp_on_wire
  # No PMReq reached sdp-pmd.
  "$bin/sdp-pmctl" --socket "$work/control.sock" --json stats > "$work/pmstats.json" 2>&1 \
    || die "sdp-pmctl stats: $(cat "$work/pmstats.json")"
  reqs=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["arguments"]["datagrams"])' \
    "$work/pmstats.json" 2>/dev/null) || die "no datagrams counter in: $(head -c 300 "$work/pmstats.json")"
  [ "$reqs" = 0 ] || die "$reqs PMReq(s) reached sdp-pmd although the rule says tcp"
  ;;
fallback)
  need nc
  # No sdp-pmd anywhere: the PMSP is a UDP port nobody listens on.
  export SDP_PMSP=127.0.0.1:$(pick_udp_port)
  port=$(pick_port)
  head -c 700000 /dev/urandom > "$work/in"
  nc_listen plain
  wait_listen "$port"
  nc_send "fallback to TCP"
  expect_stat "$work/cli.json" connect_fallback 1
  expect_stat "$work/cli.json" connect_sdp 0
  grep -q "TCP (" "$work/cli.err" || die "the fallback was not logged"
  ;;
garbage)
  need nc
  start_pmd
  port=$(pick_port)
  printf 'use both * * *\nuse maybe client * *\n\x01\x02 garbage\n' > "$work/rules.conf"
  export SDP_PRELOAD_CONFIG=$work/rules.conf
  head -c 300000 /dev/urandom > "$work/in"
  nc_listen preload
  wait_listen "$port"
  nc_send "plain TCP with a broken rule file"
  n=$(grep -c "rules.conf:2: bad use 'maybe'" "$work/cli.err")
  [ "$n" = 1 ] || die "the bad rule file was reported $n times: $(cat "$work/cli.err")"
  expect_stat "$work/cli.json" rules broken
  expect_stat "$work/cli.json" connect_sdp 0
  expect_stat "$work/srv.json" listen_sdp 0
  "$run" --check "$work/rules.conf" 2> "$work/check.err" && die "sdp-run --check passed a broken file"
  grep -q ":2: " "$work/check.err" || die "sdp-run --check: $(cat "$work/check.err")"
  ;;
sdp_only)
  start_pmd
  port=$(pick_port)
  printf 'use sdp server * *:%s\n' "$port" > "$work/rules.conf"
  export SDP_PRELOAD_CONFIG=$work/rules.conf
  serve "$py" "$here/forking_echo.py" 127.0.0.1 "$port"
  head -c 100000 /dev/urandom > "$work/in"
  # A plain TCP client (no preload) is refused: closed without an answer.
  "$py" "$here/echo_client.py" 127.0.0.1 "$port" "$work/in" "$work/out_tcp" 2> "$work/tcp.err" \
    && die "a plain TCP client was served by an sdp-only server"
  preload cli "$py" "$here/echo_client.py" 127.0.0.1 "$port" "$work/in" "$work/out" \
    2> "$work/cli.err" || die "SDP client failed"
  same "$work/in" "$work/out" "sdp-only server"
  for ((i = 0; i < 50; i++)); do [ "$(stat_of "$work/srv.json" accept_tcp_refused)" = 1 ] && break; sleep 0.1; done
  expect_stat "$work/srv.json" accept_tcp_refused 1
  expect_stat "$work/srv.json" accept_sdp 1
  ;;
fd_passing)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/forking_echo.py" 127.0.0.1 "$port"
  head -c 1500000 /dev/urandom > "$work/in"
  preload cli "$py" "$here/fd_passing.py" 127.0.0.1 "$port" "$work/in" > "$work/cli.log" \
    2> "$work/cli.err" || die "fd passing failed: $(cat "$work/cli.log")"
  cat "$work/cli.log"
  expect_stat "$work/cli.json" connect_sdp 1
  expect_stat "$work/cli.json" bytes_to_peer 1500000
  ;;
flags)
  start_pmd
  port=$(pick_port)
  checks fl "descriptor checks failed" "$py" "$here/flags_check.py" 127.0.0.1 "$port"
  expect_stat "$work/fl.json" connect_sdp 1
  expect_stat "$work/fl.json" connect_async 1
  expect_stat "$work/fl.json" accept_sdp 1
  ;;
nbconnect)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/forking_echo.py" 127.0.0.1 "$port"
  checks nb "non-blocking connect checks failed" "$py" "$here/nb_connect.py" sdp 127.0.0.1 "$port"
  # echo, fork and asyncio: three connect()s returned EINPROGRESS and went
  # over SDP.
  expect_stat "$work/nb.json" connect_async 3
  expect_stat "$work/nb.json" connect_sdp 3
  expect_stat "$work/nb.json" connect_abandoned 0
  expect_stat "$work/nb.json" connect_fallback 0
  node_client node
  [ ! -e "$work/node.json" ] || expect_stat "$work/node.json" connect_sdp 1
  # A Port Mapper that never answers holds the connect() in progress for
  # the whole resolve deadline: close() certainly comes while in progress.
  silent_pm
  SDP_PMSP=$silent_pmsp SDP_PRELOAD_RESOLVE_MS=1500 checks nbc "close() while in progress" \
    "$py" "$here/nb_connect.py" close 127.0.0.1 "$port" "$work/pmreq"
  expect_stat "$work/nbc.json" connect_async 2
  expect_stat "$work/nbc.json" connect_abandoned 2
  expect_stat "$work/nbc.json" connect_fallback 0
  # The process exits while in progress, its SDP startup stalled at an SDP
  # Address that accepts TCP and never answers the MPA Request: the exit
  # does not wait for the thread (it waited the exit linger, 3 s here).
  "$py" -c '
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
held = []
while True:
    held.append(s.accept()[0])
    with open(sys.argv[2], "a") as f:
        f.write("accepted\n")' "$work/stall.port" "$work/stall.accepts" &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do [ -s "$work/stall.port" ] && break; sleep 0.1; done
  stall=$(pick_port)
  "$bin/sdp-pmctl" --socket "$work/control.sock" register stall "127.0.0.1:$stall" \
    "127.0.0.1:$(cat "$work/stall.port")" > "$work/stall.log" 2>&1 \
    || die "sdp-pmctl register: $(cat "$work/stall.log")"
  SDP_PRELOAD_EXIT_LINGER_MS=3000 checks nbx "exit while in progress" \
    "$py" "$here/nb_connect.py" exit 127.0.0.1 "$stall" "$work/stall.accepts" "$work/exit_at"
  took=$("$py" -c 'import sys, time; print(f"{time.monotonic() - float(open(sys.argv[1]).read()):.3f}")' \
    "$work/exit_at") || die "no exit time"
  echo "exit took $took s after the last line of the program"
  "$py" -c "import sys; sys.exit(0 if $took < 1.5 else 1)" \
    || die "the exit waited $took s for a connect() whose result is discarded"
  expect_stat "$work/nbx.json" connect_abandoned 1
  ;;
epoll_sdp)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/forking_echo.py" 127.0.0.1 "$port"
  epoll_clients SDP before blocking during
  for mode in before blocking during; do
    expect_stat "$work/ep_$mode.json" connect_sdp 1
    expect_stat "$work/ep_$mode.json" epoll_move_failed 0
  done
  # The registration moved to the socketpair end at connect() (before) or
  # when SDP came up (blocking); one made while in progress stays there.
  expect_stat "$work/ep_before.json" epoll_moved 1
  expect_stat "$work/ep_blocking.json" epoll_moved 1
  expect_stat "$work/ep_during.json" epoll_moved 0
  expect_stat "$work/ep_before.json" connect_async 1
  expect_stat "$work/ep_blocking.json" connect_async 0
  # A registration deleted where the library does not see it is not made
  # again at connect() (its DEL on the old file found nothing).
  epoll_clients SDP gone
  expect_stat "$work/ep_gone.json" connect_sdp 1
  expect_stat "$work/ep_gone.json" epoll_moved 0
  expect_stat "$work/ep_gone.json" epoll_move_failed 0
  # Once SDP is up the descriptor is never swapped again: the program's
  # epoll_ctl() of it goes straight to the kernel (no table lookup, no
  # fstat). The last calls of `before` (MOD, MOD, DEL on the SDP
  # connection) seen by strace in the program's thread, with no fstat
  # between them. (With the direct path off: its send()s between them
  # look the descriptor up, which is the write's cost, not epoll_ctl's.)
  if command -v strace >/dev/null 2>&1 && strace -o /dev/null true >/dev/null 2>&1; then
    SDP_PRELOAD_DIRECT=0 SDP_PRELOAD_LOG=error timeout -s KILL 60 strace -o "$work/strace.txt" \
      -e trace=epoll_ctl,fstat,newfstatat "$run" "$bin/preload_epoll_connect" before 127.0.0.1 \
      "$port" 100000 > "$work/st.log" 2>&1 || die "epoll_connect under strace ($(tail -3 "$work/st.log"))"
    grep -E '^(epoll_ctl|fstat|newfstatat)\(' "$work/strace.txt" \
      | awk '{ l[NR] = $0 } /^epoll_ctl/ { e = NR } END { for (i = e - 2; i <= e; i++) print l[i] }' \
      > "$work/strace.last"
    [ "$(cut -d'(' -f1 "$work/strace.last" | sort -u)" = epoll_ctl ] \
      || die "epoll_ctl() of an SDP connection still looks at the table: $(cat "$work/strace.last")"
    echo "ok: epoll_ctl() of an established SDP connection goes straight to the kernel"
  else
    echo "note: strace not installed or not permitted: the epoll_ctl() fast path is not checked"
  fi
  ;;
epoll_fallback)
  no_pmsp
  tcp_echo srv
  epoll_clients "TCP fallback" before during dup blocking
  for mode in before during dup blocking; do
    expect_stat "$work/ep_$mode.json" connect_fallback 1
    expect_stat "$work/ep_$mode.json" connect_sdp 0
    expect_stat "$work/ep_$mode.json" epoll_move_failed 0
  done
  # Moved at connect() and back at the fallback (before); back at the
  # fallback (during, dup); a blocking fallback never replaces the file.
  expect_stat "$work/ep_before.json" epoll_moved 2
  expect_stat "$work/ep_during.json" epoll_moved 1
  expect_stat "$work/ep_dup.json" epoll_moved 1
  expect_stat "$work/ep_blocking.json" epoll_moved 0
  epoll_clients "TCP fallback" gone
  expect_stat "$work/ep_gone.json" connect_fallback 1
  expect_stat "$work/ep_gone.json" epoll_move_failed 0
  ;;
nbconnect_exit)
  start_pmd
  port=$(pick_port)
  serve "$py" "$here/forking_echo.py" 127.0.0.1 "$port"
  sdp_port=$port
  tcp_echo tcp
  for target in "$sdp_port" "$port"; do
    for ((i = 0; i < ${EXIT_RUNS:-40}; i++)); do
      d=$(((i % 5) * 1000))
      SDP_PRELOAD_LOG=error timeout -s KILL 20 "$run" "$bin/preload_exit_race" 127.0.0.1 "$target" 4 "$d" \
        > /dev/null 2>> "$work/race.err"
      rc=$?
      [ "$rc" -eq 0 ] || die "exit while connect()s in progress to port $target (run $i, ${d} us): status $rc"
    done
  done
  echo "ok: $((2 * ${EXIT_RUNS:-40})) exits while non-blocking connect()s were in progress"
  ;;
nbconnect_fallback)
  no_pmsp
  tcp_echo srv
  checks nb "non-blocking connect with fallback failed" \
    "$py" "$here/nb_connect.py" fallback 127.0.0.1 "$port"
  expect_stat "$work/nb.json" connect_async 3
  expect_stat "$work/nb.json" connect_fallback 3
  expect_stat "$work/nb.json" connect_sdp 0
  # libuv's epoll registration made while in progress, then TCP.
  node_client node
  [ ! -e "$work/node.json" ] || expect_stat "$work/node.json" connect_fallback 1
  printf 'use sdp client * *\n' > "$work/rules.conf"
  SDP_PRELOAD_CONFIG=$work/rules.conf checks nbr "non-blocking connect under 'use sdp' failed" \
    "$py" "$here/nb_connect.py" refused 127.0.0.1 "$port"
  expect_stat "$work/nbr.json" connect_failed 1
  expect_stat "$work/nbr.json" connect_fallback 0
  ;;
exit)
  start_pmd
  port=$(pick_port)
  preload srv "$py" "$here/slow_reader.py" 127.0.0.1 "$port" 0.01 > "$work/srv.log" \
    2> "$work/srv.err" &
  srv=$!
  pids+=("$srv")
  capture_sdp_port "$work/srv.err"
  SDP_PRELOAD_EXIT_LINGER_MS=20000 preload cli "$py" "$here/exit_writer.py" 127.0.0.1 "$port" \
    3000064 2> "$work/cli.err" || die "writer failed"
  wait "$srv" || die "reader failed"
  capture_stop
  grep -qx "got 3000064 EOF" "$work/srv.log" || die "reader: $(cat "$work/srv.log")"
  expect_stat "$work/cli.json" connect_sdp 1
  expect_stat "$work/cli.json" bridges_reset 0
  ;;
keepalive)
  [ "${EUID:-$(id -u)}" -eq 0 ] || skip "not root: cannot create network namespaces"
  command -v ip >/dev/null 2>&1 || skip "ip (iproute2) not installed"
  ns_a=sdppl$$a
  ns_b=sdppl$$b
  netns_cleanup() { ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null; }
  trap 'cleanup; netns_cleanup' EXIT
  ip netns add "$ns_a" 2>/dev/null || skip "cannot create network namespaces"
  ip netns add "$ns_b" || die "ip netns add"
  ip link add va netns "$ns_a" type veth peer name vb netns "$ns_b" || die "veth"
  ip -n "$ns_a" addr add 10.77.0.1/24 dev va
  ip -n "$ns_b" addr add 10.77.0.2/24 dev vb
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_a" link set va up
  ip -n "$ns_b" link set vb up
  # sdp-pmd and a preloaded echo server in b, a preloaded client in a.
  pm_port=39411
  cat > "$work/pmd.yaml" <<EOF
listen: ["10.77.0.2:$pm_port"]
control:
  socket: "$work/control.sock"
state_file: "$work/state.json"
EOF
  for ((i = 0; i < 50; i++)); do
    ip netns exec "$ns_b" ping -c1 -W1 10.77.0.1 >/dev/null 2>&1 && break
    sleep 0.1
  done
  ip netns exec "$ns_b" "$bin/sdp-pmd" --config "$work/pmd.yaml" > "$work/pmd.log" 2>&1 &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do [ -S "$work/control.sock" ] && break; sleep 0.1; done
  [ -S "$work/control.sock" ] || die "sdp-pmd did not start in the namespace"
  export SDP_PRELOAD_CONTROL=$work/control.sock SDP_PMSP=10.77.0.2:$pm_port
  ip netns exec "$ns_b" env SDP_PRELOAD_STATS="$work/srv.json" SDP_PRELOAD_LOG=info \
    timeout 60 "$run" "$py" "$here/forking_echo.py" 10.77.0.2 7411 > "$work/srv.log" \
    2> "$work/srv.err" &
  pids+=($!)
  wait_sdp_listener "$work/srv.err"
  idle=1 intvl=1 cnt=2 limit=30
  ip netns exec "$ns_a" env SDP_PRELOAD_STATS="$work/cli.json" SDP_PRELOAD_LOG=info \
    timeout 60 "$run" "$py" "$here/keepalive_client.py" 10.77.0.2 7411 $idle $intvl $cnt $limit \
    > "$work/cli.log" 2> "$work/cli.err" &
  cli=$!
  pids+=("$cli")
  for ((i = 0; i < 100; i++)); do grep -q "^connected" "$work/cli.log" && break; sleep 0.1; done
  grep -q "^connected (1, $idle, $intvl, $cnt)" "$work/cli.log" \
    || die "client: $(cat "$work/cli.log")"
  expect_stat "$work/cli.json" connect_sdp 1
  # The peer vanishes: its side of the link goes down, nothing is sent.
  ip -n "$ns_b" link set vb down
  wait "$cli"
  rc=$?
  cat "$work/cli.log"
  [ "$rc" -eq 0 ] || die "the vanished peer was not detected within $limit s (exit $rc)"
  secs=$(sed -n 's/^ended after \([0-9.]*\) s.*/\1/p' "$work/cli.log")
  # idle + intvl * cnt = 3 s of keepalive; the first probe may wait for
  # the last data's retransmission timer too. Without keepalive recv()
  # would wait the whole limit.
  "$py" -c "import sys; sys.exit(0 if float('$secs') <= 15 else 1)" \
    || die "detected only after $secs s (keepalive $idle+$intvl*$cnt s)"
  ;;
*)
  die "unknown scenario $scenario"
  ;;
esac
echo "PASS: $scenario"
