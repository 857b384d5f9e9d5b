#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The central PMSP named in pmclient.yaml answers for every server, and the
# data moves over SDP; the servers run no PMSP of their own.
set -euo pipefail
source /topo/topo.sh
pmsp=172.30.21.2

for s in 172.30.22.11 172.30.22.12 172.30.22.13; do
  wait_accept "$s" 7000            # no --pmsp: pmclient.yaml decides
  log "PMAccept for $s:7000 from the central PMSP: $(resolve "$s" 7000)"
  r=$(resolve --pmsp "$s:3935" --deadline 500 "$s" 7000)
  [ "$r" = timeout ] || fail "$s answered as a PMSP itself: $r"
  fetch "$s" 7000
  [ "$FETCH_MODE" = sdp ] || fail "$s: data did not move over SDP"
done
wait_no_transactions "$pmsp" 9935
log "PASS: one central PMSP answered for 3 servers on another network, data over SDP"
