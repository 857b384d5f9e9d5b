#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What CTest runs (test rdma_vm_lab): the lab (run.sh), and once more when
# the first VM went silent without any kernel oops, BUG or warning (run.sh
# exit 3). That stall was seen in 2 early runs out of about 10, with no
# cause found (docs/rdma.md, "The VM lab"); a second stall, or any other
# failure, fails the test. The first run's results are kept next to the
# second's (rdma-vm.stalled).
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
  echo "rdma-vm: STALL: the VM went silent without a kernel oops (console kept in $out.stalled);" \
    "running the lab once more"
  bash "$here/run.sh" "$build"
  rc=$?
  ((rc == 3)) && rc=1
fi
exit "$rc"
