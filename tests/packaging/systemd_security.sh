#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# systemd_security.sh UNIT MAX
# Scores UNIT with `systemd-analyze security --offline=true` (systemd >= 252
# reads the unit file itself; no running manager needed) and fails when the
# overall exposure is above MAX (0.0 best .. 10.0 worst).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

unit=$1
max=$2
command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
version=$(systemd-analyze --version | awk 'NR == 1 { print $2 }')
[[ ${version%%.*} -ge 252 ]] || skip "systemd $version has no 'security --offline' (needs 252)"

make_tmp
cp "$unit" "$TMP/"
name=$(basename "$unit")
# Exit status: non-zero when the unit cannot be parsed; the threshold is
# checked below so that the number is always printed.
(cd "$TMP" && SYSTEMD_COLORS=0 systemd-analyze security --offline=true --no-pager "./$name") \
    > "$TMP/report" 2>&1 || { cat "$TMP/report" >&2; fail "systemd-analyze security failed"; }
# Keep the failed checks in the test log: they are what is left to harden.
echo "checks that add to the exposure:"
awk '$NF ~ /^[0-9]+\.[0-9]+$/ && $NF + 0 > 0 { sub(/^[^ ]+ +/, ""); print "  " $0 }' "$TMP/report"
exposure=$(sed -n 's/^.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*$/\1/p' "$TMP/report")
[[ -n $exposure ]] || { cat "$TMP/report" >&2; fail "no exposure level in the report"; }
echo "exposure of $name: $exposure (maximum $max)"
awk -v e="$exposure" -v m="$max" 'BEGIN { exit !(e <= m) }' \
    || fail "exposure $exposure of $name is above $max"
echo "PASSED"
