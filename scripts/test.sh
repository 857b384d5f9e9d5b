#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the whole test suite: installs dependencies, checks formatting, builds
# the default preset (and the asan preset), and runs every CTest label.
# Then runs every libFuzzer target for a bounded time (scripts/fuzz.sh):
# FUZZ_SECONDS per target, default 60 when $CI is set and 20 otherwise.
# Usage: scripts/test.sh [--no-asan] [--no-fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."
asan=1
fuzz=1
for arg in "$@"; do
  case $arg in
    --no-asan) asan="" ;;
    --no-fuzz) fuzz="" ;;
    *) echo "usage: scripts/test.sh [--no-asan] [--no-fuzz]" >&2; exit 2 ;;
  esac
done

scripts/deps.sh --test

echo "== format check"
git ls-files '*.cpp' '*.hpp' '*.h' '*.c' | xargs -r clang-format --dry-run --Werror
echo "== layering check (sans-I/O cores: no Asio, sockets, threads, clocks, environment)"
scripts/check-layering.sh
echo "== license check (SPDX identifiers)"
scripts/check-spdx.sh

jobs=$(nproc)
echo "== build (default preset)"
cmake --preset default >/dev/null
cmake --build --preset default -j "$jobs"
echo "== tests (default preset)"
ctest --preset default -j "$jobs"

if [[ -n $asan ]]; then
  echo "== build (asan preset: ASan + UBSan)"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  echo "== tests (asan preset)"
  ctest --preset asan -j "$jobs" -LE "fuzz|topology|vm"
fi
if [[ -n $fuzz ]]; then
  if [[ -n "${CI:-}" ]]; then default_seconds=60; else default_seconds=20; fi
  echo "== fuzzing (libFuzzer, ASan + UBSan)"
  scripts/fuzz.sh "${FUZZ_SECONDS:-$default_seconds}"
fi
echo "== all tests passed"
