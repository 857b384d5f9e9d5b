#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# systemd_verify.sh SOURCE_DIR UNIT...
# Checks the units with `systemd-analyze verify` in a scratch root holding
# the units, a stand-in /usr/sbin/sdp-pmd and the manual pages, and the
# sysusers.d / tmpfiles.d files with systemd-sysusers / systemd-tmpfiles
# applied to that scratch root. Nothing outside the scratch root is touched.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

src=$1
shift
command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
echo "systemd: $(systemd-analyze --version | head -n1)"

make_tmp
root=$TMP/root
populate_root "$root"
names=()
for unit in "$@"; do
    cp "$unit" "$root/lib/systemd/system/"
    names+=("$(basename "$unit")")
done
# verify checks that ExecStart= names an executable; the real program is
# checked by the deb test, here any executable stands in for it.
printf '#!/bin/sh\nexit 0\n' > "$root/usr/sbin/sdp-pmd"
chmod 755 "$root/usr/sbin/sdp-pmd"
# Documentation= must name pages that exist.
for page in "$src"/man/*.[1-8]; do
    section=${page##*.}
    mkdir -p "$TMP/man/man$section"
    cp "$page" "$TMP/man/man$section/"
done
verify_units "$root" "$TMP/man" "${names[@]}"

# sysusers.d: creates the sdp-pmd user and group in the scratch root.
if command -v systemd-sysusers >/dev/null; then
    mkdir -p "$root/etc"
    : > "$root/etc/passwd"
    : > "$root/etc/group"
    systemd-sysusers --root="$root" "$src/systemd/sysusers.d/sdp-pmd.conf"
    line=$(grep '^sdp-pmd:' "$root/etc/passwd") || fail "sysusers.d created no sdp-pmd user"
    echo "sysusers.d: $line"
    IFS=: read -r _ _ uid gid _ home shell <<<"$line"
    [[ $uid -lt 1000 && $uid -gt 0 ]] || fail "sdp-pmd is not a system user (uid $uid)"
    [[ $home == /var/lib/sdp-pmd && $shell == /usr/sbin/nologin ]] || fail "home/shell: $home $shell"
    grep -q "^sdp-pmd:x:$gid:" "$root/etc/group" || fail "no sdp-pmd group with gid $gid"
else
    echo "systemd-sysusers not installed: sysusers.d file not checked"
fi

# tmpfiles.d: creates its directories in the scratch root, with the owner
# looked up in the scratch root's passwd.
if command -v systemd-tmpfiles >/dev/null && [[ -s $root/etc/passwd ]]; then
    systemd-tmpfiles --root="$root" --create "$src/systemd/tmpfiles.d/sdp-pmd.conf"
    for d in run/sdp-pmd var/lib/sdp-pmd; do
        [[ -d $root/$d ]] || fail "tmpfiles.d did not create /$d"
        echo "tmpfiles.d: /$d $(stat -c '%a %u:%g' "$root/$d")"
    done
else
    echo "systemd-tmpfiles not installed: tmpfiles.d file not checked"
fi
echo "PASSED"
