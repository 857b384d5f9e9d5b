#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# No PMSP answers: resolutions end (timeout) within their deadline, and
# sdp-cat falls back to TCP to the Conventional Address, which answers.
set -euo pipefail
source /topo/topo.sh
srv=172.30.61.11

for _ in $(seq 50); do (exec 3<>"/dev/tcp/$srv/7000") 2>/dev/null && break; sleep 0.2; done

# 1. Per-host PMSP (the server itself, port 3935): nothing listens there.
t0=$(now_ms)
r=$(resolve "$srv" 7000)
log "per-host PMSP down: pm-resolve says \"$r\" after $(( $(now_ms) - t0 )) ms"
case "$r" in accept*) fail "a PMAccept from a PMSP that is down" ;; esac
fetch "$srv" 7000
[ "$FETCH_MODE" = tcp ] || fail "no fallback to TCP with the per-host PMSP down"

# 2. Central PMSP (pmclient.yaml) on an address where there is no host.
printf 'pmsp: "172.30.61.2:3935"\n' >/tmp/pmclient.yaml
export SDP_PMCLIENT_CONFIG=/tmp/pmclient.yaml
t0=$(now_ms)
r=$(resolve "$srv" 7000)
log "central PMSP absent: pm-resolve says \"$r\" after $(( $(now_ms) - t0 )) ms"
[ "$r" = timeout ] || fail "expected a timeout from an absent PMSP, got: $r"
fetch "$srv" 7000
[ "$FETCH_MODE" = tcp ] || fail "no fallback to TCP with the central PMSP absent"
log "PASS: with no PMSP the client fell back to TCP and the service answered"
