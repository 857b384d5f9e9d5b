#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check.sh SERVER...: each server's own PMSP accepts its service, and the
# data arrives over SDP from every server. Also used by per-host-v6.
set -euo pipefail
source /topo/topo.sh
[ "${V6_ONLY:-0}" = 1 ] && v6_only

for s in "$@"; do
  wait_accept "$s" 7000
  r=$(resolve "$s" 7000)
  log "PMAccept from the PMSP of $s: $r"
  fetch "$s" 7000
  [ "$FETCH_MODE" = sdp ] || fail "$s: data did not move over SDP"
done
log "PASS: $# servers resolved through their own PMSP, data over SDP from each"
