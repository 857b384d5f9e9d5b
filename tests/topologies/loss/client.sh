#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# client.sh CP_IP [PEER...]: 1000 resolutions, 64 at a time, through the lossy
# PMSP; all must end (pm-resolve-many exits 0), at least half accepted. The
# checker (with PEERs) then waits for them and for sdp-pmd to hold no
# transaction.
set -euo pipefail
source /topo/topo.sh
[ $# -gt 1 ] || trap 'report_and_idle $?' EXIT
cp=$1
shift
pmsp=172.30.51.2

rc=0
out=$(pm-resolve-many --pmsp "$pmsp:3935" --conventional "$pmsp:80" --cp "$cp" \
        --count 1000 --concurrency 64 --deadline-ms 3000) || rc=$?
log "$out"
[ "$rc" = 0 ] || fail "a resolution did not end as accept, deny or timeout"
[ "$(json_field "$out" accepted)" -ge 500 ] || fail "fewer than half accepted"
log "PASS: 1000 resolutions ended, slowest $(json_field "$out" max_elapsed_ms) ms"
[ $# -gt 0 ] || report_and_idle 0
await_peers "$@"
wait_no_transactions "$pmsp" 9935
touch "$SHARED/done"
sleep 0.5   # time for the PMSP to log what nftables dropped
log "PASS: 2000 resolutions through 30% loss ended, no transaction left"
