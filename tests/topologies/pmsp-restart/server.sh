#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sdp-pmd plus a registered SDP listener; on "go" (shared volume) kill -9 and
# restart sdp-pmd (down for 0.5 s) three times, one second apart, then say "restarted".
set -euo pipefail
source /topo/topo.sh
mkdir -p /run/sdp-pmd /var/lib/sdp-pmd
start_pmd /topo/pmd-local.yaml
serve_sdp 7001 172.30.41.11:7000
for _ in $(seq 300); do [ -e "$SHARED/go" ] && break; sleep 0.2; done
[ -e "$SHARED/go" ] || fail "no go from the client"
for n in 1 2 3; do
  sleep 1
  t0=$(now_ms)
  kill -9 "$PMD_PID"
  wait "$PMD_PID" 2>/dev/null || true
  sleep 0.5                # down for a while, as a restart by a supervisor is
  start_pmd /topo/pmd-local.yaml
  log "restart $n: sdp-pmd killed and ready again in $(( $(now_ms) - t0 )) ms; services:" \
      "$(sdp-pmctl services 2>&1 | grep -c 172.30.41.11:7000 || true) for 172.30.41.11:7000"
done
sleep 1
touch "$SHARED/restarted"
idle
