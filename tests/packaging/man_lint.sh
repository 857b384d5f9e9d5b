#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# man_lint.sh PAGE...
# Every page must pass `mandoc -T lint -W warning` and `groff -ww -z -mdoc`
# (the formatter man(1) uses on Debian) without a single message. mandoc's
# STYLE level is not enforced: it reports cross-references to pages that are
# not installed on this machine, such as our own.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

[[ $# -gt 0 ]] || fail "no manual pages given"
have_mandoc=0
have_groff=0
command -v mandoc >/dev/null && have_mandoc=1
command -v groff >/dev/null && have_groff=1
[[ $have_mandoc -eq 1 || $have_groff -eq 1 ]] || skip "neither mandoc nor groff is installed"

bad=0
for page in "$@"; do
    if [[ $have_mandoc -eq 1 ]]; then
        # "outdated mandoc.db" lines are about this machine's database.
        out=$(mandoc -T lint -W warning "$page" 2>&1 | grep -v 'outdated mandoc.db' || true)
        if [[ -n $out ]]; then
            echo "$out" >&2
            bad=1
        fi
    fi
    if [[ $have_groff -eq 1 ]]; then
        out=$(groff -ww -z -mdoc "$page" 2>&1 || true)
        if [[ -n $out ]]; then
            echo "$(basename "$page"): groff: $out" >&2
            bad=1
        fi
    fi
    echo "checked $(basename "$page")"
done
[[ $bad -eq 0 ]] || fail "manual pages have warnings"
[[ $have_mandoc -eq 1 ]] || skip "mandoc is not installed: checked with groff only"
[[ $have_groff -eq 1 ]] || skip "groff is not installed: checked with mandoc only"
echo "PASSED"
