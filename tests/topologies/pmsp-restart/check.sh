#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Resolve in batches (pm-resolve-many) while srv restarts its sdp-pmd; every
# resolution must end accepted within its 3 s deadline (none denied: the
# registration is kept; none timed out: the retransmissions ride it out).
set -euo pipefail
source /topo/topo.sh
srv=172.30.41.11

wait_accept "$srv" 7000
touch "$SHARED/go"
batches=0 acc=0 den=0 tmo=0 max=0
t0=$(now_ms)
while [ ! -e "$SHARED/restarted" ] && [ "$batches" -lt 500 ]; do
  rc=0
  out=$(pm-resolve-many --pmsp "$srv:3935" --conventional "$srv:7000" --cp 172.30.41.20 \
          --count 400 --concurrency 4 --deadline-ms 3000) || rc=$?
  [ "$rc" = 0 ] || fail "a resolution did not end as accept, deny or timeout: $out"
  batches=$((batches + 1))
  acc=$((acc + $(json_field "$out" accepted)))
  den=$((den + $(json_field "$out" denied)))
  tmo=$((tmo + $(json_field "$out" timeout)))
  m=$(json_field "$out" max_elapsed_ms)
  [ "$m" -gt "$max" ] && max=$m
done
[ -e "$SHARED/restarted" ] || fail "the server never finished its restarts"
log "during 3 restarts in $(( $(now_ms) - t0 )) ms: $batches batches, accepted=$acc denied=$den" \
    "timeout=$tmo, slowest resolution ${max} ms"
[ "$den" = 0 ] || fail "$den resolutions denied: the registration was lost"
[ "$tmo" = 0 ] || fail "$tmo resolutions ran past their deadline"
fetch "$srv" 7000
[ "$FETCH_MODE" = sdp ] || fail "data did not move over SDP after the restarts"
wait_no_transactions "$srv" 9935
log "PASS: the registration outlived 3 restarts of sdp-pmd, clients rode them out"
