# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Helpers for the Docker Compose scenarios, sourced by the scripts that run
# inside the containers (mounted read-only at /topo). Every wait is bounded;
# checks look at outcomes and the timings are only printed.
set -euo pipefail

PAYLOAD=/tmp/payload
SHARED=${SHARED:-/shared}
SDP_BIND=${SDP_BIND:-0.0.0.0}

log() { printf '%s %s\n' "$(date -u +%T.%3N)" "$*"; }
fail() { log "FAIL: $*"; exit 1; }
now_ms() { date +%s%3N; }

# The bytes every SDP service sends: the same on every host, checked by sum.
make_payload() { [ -s "$PAYLOAD" ] || seq 1 200000 >"$PAYLOAD"; }
payload_sum() { make_payload; sha256sum <"$PAYLOAD" | cut -d' ' -f1; }

# An IPv6-only host: drop the IPv4 address Docker 20.10 gives every bridge
# network (needs NET_ADMIN).
v6_only() {
  local dev
  for dev in /sys/class/net/*; do
    dev=${dev##*/}
    [ "$dev" = lo ] || ip -4 addr flush dev "$dev"
  done
  [ -z "$(ip -4 addr show scope global)" ] || fail "IPv4 addresses left"
}

# start_pmd CONFIG: sdp-pmd in the background, its log appended to
# /tmp/pmd.err (and shown on the container's output); waits for a new
# "ready" line (at most 10 s). PMD_PID is its pid.
start_pmd() {
  local before
  if [ ! -e /tmp/pmd.err ]; then
    : >/tmp/pmd.err
    tail -n +1 -F /tmp/pmd.err 2>/dev/null | sed -u 's/^/sdp-pmd: /' >&2 &
  fi
  before=$(grep -c ready /tmp/pmd.err || true)
  sdp-pmd --config "$1" 2>>/tmp/pmd.err &
  PMD_PID=$!
  for _ in $(seq 100); do
    [ "$(grep -c ready /tmp/pmd.err || true)" -gt "$before" ] && return 0
    kill -0 "$PMD_PID" 2>/dev/null || break
    sleep 0.1
  done
  cat /tmp/pmd.err
  fail "sdp-pmd did not start"
}

# serve_sdp PORT [CONV]: an SDP service on PORT that sends the payload to
# each client, one connection after the other, in the background. With CONV
# each listener registers CONV -> itself with the local sdp-pmd (for as long
# as that sdp-cat lives). At most 1000 connections. SDP_BIND: the address
# to listen on (0.0.0.0; "[::]" on IPv6).
serve_sdp() {
  local port=$1 conv=${2:-}
  make_payload
  (
    for _ in $(seq 1000); do
      if [ -n "$conv" ]; then
        sdp-cat -l --bind "$SDP_BIND" --register "$conv" "$port" <"$PAYLOAD" >/dev/null \
          2>>/tmp/serve.err || sleep 0.2
      else
        sdp-cat -l --bind "$SDP_BIND" "$port" <"$PAYLOAD" >/dev/null 2>>/tmp/serve.err || sleep 0.2
      fi
    done
  ) &
}

# serve_tcp PORT: the same payload over plain TCP (the Conventional Address).
serve_tcp() {
  make_payload
  socat "TCP6-LISTEN:$1,ipv6only=0,fork,reuseaddr" "SYSTEM:cat $PAYLOAD" 2>/dev/null &
}

# resolve [pm-resolve options] AP_IP AP_PORT: one line, "accept IP:PORT ...",
# "deny" or "timeout"; never fails.
resolve() { pm-resolve "$@" 2>&1 || true; }

# wait_accept [pm-resolve options] AP_IP AP_PORT: until the PMSP accepts (a
# registration is in place), at most 15 s.
wait_accept() {
  local r=""
  for _ in $(seq 75); do
    r=$(resolve --deadline 1000 "$@")
    case "$r" in accept*) return 0 ;; esac
    sleep 0.2
  done
  fail "no PMAccept for $* (last: $r)"
}

# fetch [sdp-cat options] HOST PORT: connect as a client, check the bytes
# received against the payload, and print how (SDP or TCP fallback) and how
# long. FETCH_MODE is "sdp" or "tcp".
# The services (serve_sdp) take one connection at a time: a client that
# comes while the listener is between two clients (or while another client
# holds it) is refused or reset before any byte arrives. Such an attempt,
# and only such (failed, nothing received), is tried again, at most 5
# times; the retries are printed.
fetch() {
  local t0 t1 rc want got n
  want=$(payload_sum)
  for n in 1 2 3 4 5; do
    rc=0
    t0=$(now_ms)
    timeout 30 sdp-cat -v "$@" </dev/null >/tmp/fetch.out 2>/tmp/fetch.err || rc=$?
    t1=$(now_ms)
    cat /tmp/fetch.err >&2
    [ "$rc" != 0 ] && [ ! -s /tmp/fetch.out ] && [ "$n" -lt 5 ] || break
    log "attempt $n: sdp-cat $* exited $rc before any byte; the listener is busy, again"
    sleep 0.5
  done
  got=$(sha256sum </tmp/fetch.out | cut -d' ' -f1)
  [ "$rc" = 0 ] || fail "sdp-cat $* exited $rc"
  [ "$got" = "$want" ] || fail "sdp-cat $*: wrong bytes ($(wc -c </tmp/fetch.out) received)"
  if grep -q 'connected over SDP' /tmp/fetch.err; then FETCH_MODE=sdp
  elif grep -q 'connected over TCP' /tmp/fetch.err; then FETCH_MODE=tcp
  else fail "sdp-cat $*: neither SDP nor TCP reported"; fi
  log "fetched $(wc -c </tmp/fetch.out) bytes from $* over $FETCH_MODE in $((t1 - t0)) ms" \
      "(attempt $n)"
}

# metric HOST PORT NAME: a value from sdp-pmd's Prometheus endpoint.
metric() {
  local host=$1 port=$2 name=$3
  timeout 5 bash -c '
    exec 3<>"/dev/tcp/$0/$1"
    printf "GET /metrics HTTP/1.0\r\nHost: pmd\r\n\r\n" >&3
    cat <&3' "$host" "$port" 2>/dev/null | tr -d '\r' | awk -v m="$name" '$1 == m { print $2; exit }'
}

# wait_no_transactions HOST PORT: until sdp-pmd holds no transaction (every
# PMAccept acked or timed out), at most 15 s; prints the counters.
wait_no_transactions() {
  local n=""
  for _ in $(seq 30); do
    n=$(metric "$1" "$2" sdp_pmd_transactions || true)
    [ "$n" = 0 ] && break
    sleep 0.5
  done
  log "sdp-pmd: transactions=$n accepted=$(metric "$1" "$2" 'sdp_pmd_outcomes_total{outcome="accepted"}' || true)" \
      "timeouts=$(metric "$1" "$2" sdp_pmd_timeouts_total || true)"
  [ "$n" = 0 ] || fail "sdp-pmd still holds $n transactions"
}

# json_field JSON NAME: a number from pm-resolve-many's output line.
json_field() { sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" <<<"$1"; }

# Servers: stay up until the checker is done (compose stops us anyway).
idle() { exec sleep infinity; }

# A client that is not the checker: write its exit status for the checker
# into the shared volume, then stay up (any container that exits ends
# `docker-compose up --abort-on-container-exit`).
report_and_idle() {
  trap - EXIT
  echo "$1" >"$SHARED/${CLIENT_NAME:?}.rc"
  idle
}

# await_peers NAME...: the checker waits (at most 60 s) for the other
# clients' exit status.
await_peers() {
  local p
  for p in "$@"; do
    for _ in $(seq 300); do [ -s "$SHARED/$p.rc" ] && break; sleep 0.2; done
    [ "$(cat "$SHARED/$p.rc" 2>/dev/null)" = 0 ] || fail "client $p did not pass"
  done
}
