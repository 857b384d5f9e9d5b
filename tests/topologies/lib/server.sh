#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A server host of a scenario, configured by environment variables:
#   V6_ONLY=1        drop the container's IPv4 addresses first (NET_ADMIN)
#   NFT_RULES=FILE   load these nftables rules first (NET_ADMIN)
#   PMD_CONFIG=FILE  run sdp-pmd with this configuration
#   SDP_PORTS="P[=CONV] ..."  SDP services sending the payload; with =CONV
#                    each registers CONV with the local sdp-pmd
#   TCP_PORT=P       the payload over plain TCP as well (Conventional Address)
# then stays up until compose stops it.
set -euo pipefail
source /topo/topo.sh

[ "${V6_ONLY:-0}" = 1 ] && v6_only
[ -n "${NFT_RULES:-}" ] && nft -f "$NFT_RULES"
mkdir -p /run/sdp-pmd /var/lib/sdp-pmd "$SHARED"
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
