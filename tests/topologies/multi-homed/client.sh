#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# client.sh SERVER_IP NET24 [PEER...]: from a client on one network of the
# multi-homed server, resolve "web" (round-robin) 20 times and "db" (hash)
# for 16 client addresses, twice; every PMAccept must name SERVER_IP (the
# server's address on this network); both SDP addresses of each service
# must be used; hash answers must not change; data must move over SDP
# (twice). The checker then waits for the PEERs' results (shared volume).
set -euo pipefail
source /topo/topo.sh
[ $# -gt 2 ] || trap 'report_and_idle $?' EXIT
srv=$1 net=$2
shift 2
peers=("$@")

wait_accept "$srv" 7000
declare -A web=() db=() first=()
for i in $(seq 20); do
  r=$(resolve "$srv" 7000)
  case "$r" in "accept $srv:"*) ;; *) fail "web: PMAccept names no address of this network: $r" ;; esac
  p=$(sed 's/^accept [^ ]*:\([0-9]*\) .*/\1/' <<<"$r")
  web[$p]=$(( ${web[$p]:-0} + 1 ))
done
for round in 1 2; do
  for i in $(seq 100 115); do
    r=$(resolve "$srv" 7100 "$net.$i" $((40000 + i)))
    case "$r" in "accept $srv:"*) ;; *) fail "db: PMAccept names no address of this network: $r" ;; esac
    p=$(sed 's/^accept [^ ]*:\([0-9]*\) .*/\1/' <<<"$r")
    if [ "$round" = 1 ]; then
      first[$i]=$p
      db[$p]=$(( ${db[$p]:-0} + 1 ))
    elif [ "${first[$i]}" != "$p" ]; then
      fail "db (hash): CpIPAddr $net.$i got port ${first[$i]}, then $p"
    fi
  done
done
log "web round-robin over $srv: $(for p in "${!web[@]}"; do printf '%s:%s ' "$p" "${web[$p]}"; done)"
log "db hash over 16 clients: $(for p in "${!db[@]}"; do printf '%s:%s ' "$p" "${db[$p]}"; done)"
[ "${#web[@]}" = 2 ] || fail "web: round-robin did not use both SDP addresses"
[ "${#db[@]}" = 2 ] || fail "db: hash put all 16 clients on one SDP address"
for _ in 1 2; do
  fetch "$srv" 7000
  [ "$FETCH_MODE" = sdp ] || fail "data did not move over SDP"
done
log "PASS: every PMAccept named this network's address of the server, load spread"
[ ${#peers[@]} -gt 0 ] || report_and_idle 0
await_peers "${peers[@]}"
log "PASS: clients on both networks of the multi-homed server"
