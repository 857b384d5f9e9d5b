# SPDX-License-Identifier: Apache-2.0
# Helpers shared by the packaging test scripts (sourced, not run).

# A private temporary directory, removed on exit.
make_tmp() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/sdppm-pkgtest.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
}

skip() {
    echo "SKIPPED: $*"
    exit 77
}

fail() {
    echo "FAILED: $*" >&2
    exit 1
}

# populate_root ROOT: make ROOT a minimal file system that
# `systemd-analyze verify --root=ROOT` can load units from: the host's target
# units (the dependencies every unit gets) and /bin/kill.
populate_root() {
    local root=$1 hostunits
    mkdir -p "$root/lib/systemd/system" "$root/usr/lib/systemd/system" "$root/bin" "$root/usr/sbin"
    for hostunits in /lib/systemd/system /usr/lib/systemd/system; do
        if [[ -d $hostunits ]]; then
            cp -n "$hostunits"/*.target "$root/lib/systemd/system/" 2>/dev/null || true
        fi
    done
    cp /bin/kill "$root/bin/kill"
}

# verify_units ROOT MANPATH UNIT...: systemd-analyze verify, strict: any
# message (unknown key, bad value, missing binary or man page) is a failure.
verify_units() {
    local root=$1 manpath=$2 out rc
    shift 2
    rc=0
    out=$(MANPATH=$manpath systemd-analyze verify --root="$root" --man=yes "$@" 2>&1) || rc=$?
    if [[ $rc -ne 0 || -n $out ]]; then
        echo "$out" >&2
        fail "systemd-analyze verify $* (exit $rc)"
    fi
    echo "systemd-analyze verify: OK: $*"
}
