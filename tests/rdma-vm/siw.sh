#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds Linux siw out of tree for the pinned ABI from Debian's
# linux-source-6.1 (Debian's kernel does not build it: CONFIG_RDMA_SIW unset).
# Usage: siw.sh KABI OUTDIR. Writes two modules:
#   OUTDIR/stock.ko  siw as upstream ships it: peer_to_peer off (its MPA
#                    initiator never sends a ready-to-receive).
#   OUTDIR/p2p.ko    peer_to_peer on, plus one fix: as MPA responder siw 6.1
#                    installs its RTR receive handler only after sending the
#                    MPA Reply, so an initiator's RTR that arrives in between
#                    is lost (the connection never completes; seen ending in
#                    a kernel BUG in iw_cm's close handler). The fix installs
#                    the handler before the Reply is sent, and not again
#                    after it: a second assignment would undo the switch to
#                    the QP's receive handler an early RTR made, and the
#                    next FPDU would raise a second ESTABLISHED (kernel BUG
#                    at iwcm.c:867).
# siw 6.1 has no module parameters: both are compile-time constants.
set -euo pipefail
kabi=${1:?KABI}
out=${2:?OUTDIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf /usr/src/linux-source-6.1.tar.xz --wildcards 'linux-source-6.1/drivers/infiniband/sw/siw/*'
src=$work/linux-source-6.1/drivers/infiniband/sw/siw
mkdir -p "$out"
build() { # name
  local d=$work/$1
  cp -r "$src" "$d"
  printf 'obj-m := siw.o\nsiw-y := siw_cm.o siw_cq.o siw_main.o siw_mem.o siw_qp.o siw_qp_rx.o siw_qp_tx.o siw_verbs.o\n' >"$d/Kbuild"
  rm -f "$d/Makefile"
  case $1 in
    p2p)
      grep -q '^const bool peer_to_peer;$' "$d/siw_main.c" || { echo "siw.sh: peer_to_peer constant not found" >&2; exit 1; }
      sed -i 's/^const bool peer_to_peer;$/const bool peer_to_peer = true;/' "$d/siw_main.c"
      # RTR race: assign the RTR upcalls before the MPA Reply leaves.
      python3 - "$d/siw_cm.c" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
anchor = "\trv = siw_send_mpareqrep(cep, params->private_data,\n\t\t\t\tparams->private_data_len);\n"
if s.count(anchor) != 1:
    sys.exit("siw.sh: siw_accept's MPA Reply call not found")
s = s.replace(anchor, "\tif (wait_for_peer_rts)\n\t\tsiw_sk_assign_rtr_upcalls(cep);\n" + anchor)
# ...and only there: the original assignment after the Reply would undo the
# switch to the QP's receive handler that an early RTR already made, so the
# next FPDU went through the RTR handler again and raised a second
# ESTABLISHED (kernel BUG at iwcm.c:867, cm_conn_est_handler).
late = "\tif (wait_for_peer_rts) {\n\t\tsiw_sk_assign_rtr_upcalls(cep);\n\t} else {\n"
if s.count(late) != 1:
    sys.exit("siw.sh: siw_accept's late RTR upcall assignment not found")
s = s.replace(late, "\tif (!wait_for_peer_rts) {\n")
open(p, "w").write(s)
PY
      ;;
  esac
  make -s -C "/usr/src/linux-headers-$kabi" M="$d" CONFIG_RDMA_SIW=m modules >"$work/$1.log" 2>&1 ||
    { cat "$work/$1.log" >&2; exit 1; }
  cp "$d/siw.ko" "$out/$1.ko"
}
build stock
build p2p
echo "siw.sh: built $(ls "$out")"
