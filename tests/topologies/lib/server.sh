#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A server host of a scenario, configured by environment variables:
#   V6_ONLY=1        drop the container's IPv4 addresses first (NET_ADMIN)
#   NFT_RULES=FILE   load these nftables rules first (NET_ADMIN); log their
#                    counters when the checker touches $SHARED/done
#   PMD_CONFIG=FILE  run sdp-pmd with this configuration
#   SDP_PORTS="P[=CONV] ..."  SDP services sending the payload; with =CONV
#                    each registers CONV with the local sdp-pmd
#   SDP_BIND=ADDR    the address the SDP services listen on (0.0.0.0)
#   TCP_PORT=P       the payload over plain TCP as well (Conventional Address)
# then stays up until compose stops it.
set -euo pipefail
source /topo/topo.sh

[ "${V6_ONLY:-0}" = 1 ] && v6_only
mkdir -p /run/sdp-pmd /var/lib/sdp-pmd "$SHARED"
if [ -n "${NFT_RULES:-}" ]; then
  nft -f "$NFT_RULES"
  (   # what was dropped, once the checker says it is done
    for _ in $(seq 900); do [ -e "$SHARED/done" ] && break; sleep 0.2; done
    log "nftables dropped: $(nft list ruleset 2>/dev/null | grep 'counter packets .* drop' |
                              grep -o 'packets [0-9]*' | paste -sd' ' -)"
  ) &
fi
[ -n "${PMD_CONFIG:-}" ] && start_pmd "$PMD_CONFIG"
for p in ${SDP_PORTS:-}; do
  case "$p" in
    *=*) serve_sdp "${p%%=*}" "${p#*=}" ;;
    *) serve_sdp "$p" ;;
  esac
done
[ -n "${TCP_PORT:-}" ] && serve_tcp "$TCP_PORT"
log "up: pmd=${PMD_CONFIG:-none} sdp=[${SDP_PORTS:-}] tcp=${TCP_PORT:-none}"
idle
