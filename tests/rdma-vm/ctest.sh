#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What CTest runs (test rdma_vm_lab): the lab (run.sh), and once more when
# the first VM went silent without any kernel oops, BUG or warning, or died
# of a BUG inside iw_cm or siw (run.sh exit 3). The stall was seen in 2
# early runs out of about 10, cause not found; the iw_cm BUG_ON
# (iwcm.c:867) once, caused by the lab's own siw patch and fixed in siw.sh,
# the retry kept as a guard (docs/rdma.md, "The VM lab"). A second one, or
# any other failure, fails the test. The first run's results are kept next
# to the second's (rdma-vm.stalled).
# Usage: tests/rdma-vm/ctest.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1
bash "$here/run.sh" "$build"
rc=$?
if ((rc == 3)); then
  out=${SDPPM_VM_OUT:-$build/rdma-vm}
  rm -rf "$out.stalled"
  mv "$out" "$out.stalled"
  echo "rdma-vm: STALL: the VM went silent or died in iw_cm/siw (console kept in" \
    "$out.stalled); running the lab once more"
  bash "$here/run.sh" "$build"
  rc=$?
  ((rc == 3)) && rc=1
fi
exit "$rc"
