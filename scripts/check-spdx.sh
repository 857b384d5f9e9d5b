#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source, build, script, unit and man page file tracked by git carries
# "SPDX-License-Identifier: Apache-2.0" in its first lines (the project is
# licensed Apache-2.0: LICENSE, packaging/copyright).
#
# usage: scripts/check-spdx.sh [--fix]
#   without --fix: list the files without the identifier, exit 1 if any
#   --fix: add the identifier as a comment in each file's own syntax
set -euo pipefail
cd "$(dirname "$0")/.."
fix=""
[[ "${1:-}" == "--fix" ]] && fix=1
id="SPDX-License-Identifier: Apache-2.0"

# The comment syntax a file takes, or "" for files that carry none (data,
# formats without comments, the license texts themselves).
syntax() {
  local f="$1"
  case "$f" in
    */corpus/*|LICENSE|packaging/copyright|*.json|*.md|packaging/deb/*/conffiles|\
    packaging/deb/*/triggers|packaging/changelog.Debian.in|.gitignore|.clang-format) echo "" ;;
    *.cpp|*.hpp|*.cc) echo "//" ;;
    *.h|*.c|*.map) echo "/*" ;;
    man/*.[0-9]) echo '.\"' ;;
    *CMakeLists.txt|*.cmake|*.cmake.in|*.pc.in|*.sh|*.yaml|*.yml|*.nft|*.service|*.socket|\
    */Dockerfile|Dockerfile|systemd/*/*.conf|packaging/bash-completion/*|packaging/deb/*/*|\
    .ci/run|bench/compare|*.conf.example|*.py) echo "#" ;;
    *) if head -c 2 "$f" | grep -q '#!'; then echo "#"; else echo "?"; fi ;;
  esac
}

missing=()
unknown=()
while IFS= read -r -d '' f; do
  [[ -f $f ]] || continue
  s=$(syntax "$f")
  [[ -z $s ]] && continue
  if [[ $s == "?" ]]; then
    unknown+=("$f")
    continue
  fi
  head -n 5 "$f" | grep -qF "$id" && continue
  if [[ -z $fix ]]; then
    missing+=("$f")
    continue
  fi
  case "$s" in
    "/*") line="/* $id */" ;;
    *) line="$s $id" ;;
  esac
  tmp=$(mktemp)
  if head -c 2 "$f" | grep -q '#!'; then
    { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } > "$tmp"
  else
    { echo "$line"; cat "$f"; } > "$tmp"
  fi
  cat "$tmp" > "$f"
  rm -f "$tmp"
  echo "added: $f"
done < <(git ls-files -z)

status=0
if [[ ${#unknown[@]} -gt 0 ]]; then
  printf 'check-spdx: no comment syntax known for %s (add it to scripts/check-spdx.sh)\n' "${unknown[@]}" >&2
  status=1
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  for f in "${missing[@]}"; do echo "check-spdx: no \"$id\" in $f" >&2; done
  echo "check-spdx: run scripts/check-spdx.sh --fix" >&2
  status=1
fi
[[ $status -eq 0 && -z $fix ]] && echo "check-spdx: every source file carries $id"
exit $status
