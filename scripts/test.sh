#!/usr/bin/env bash
# Runs the whole test suite: installs dependencies, checks formatting, builds
# the default preset (and the asan preset), and runs every CTest label.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh --test

echo "== format check"
git ls-files '*.cpp' '*.hpp' '*.h' '*.c' | xargs -r clang-format --dry-run --Werror

jobs=$(nproc)
echo "== build (default preset)"
cmake --preset default >/dev/null
cmake --build --preset default -j "$jobs"
echo "== tests (default preset)"
ctest --preset default -j "$jobs"

if [[ "${1:-}" != "--no-asan" ]]; then
  echo "== build (asan preset: ASan + UBSan)"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  echo "== tests (asan preset)"
  ctest --preset asan -j "$jobs" -LE "fuzz|topology"
fi
echo "== all tests passed"
