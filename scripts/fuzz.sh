#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Coverage-guided fuzzing with libFuzzer (clang), ASan + UBSan.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 60 s, all targets)
# A TARGET is NAME:CORPUS_DIR (the seed corpus, relative to the repository).
# Each target runs for a bounded time on a copy of its seed corpus; any crash,
# leak or sanitizer report fails the script and leaves the reproducer in
# build/fuzz/artifacts/. The last stats line of every target (executions,
# coverage) is collected in build/fuzz/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(
    fuzz_codec:tests/fuzz/corpus/pm
    fuzz_pmsp:tests/fuzz/corpus/pmsp
    fuzz_config:tests/fuzz/corpus/config
    fuzz_cluster:tests/fuzz/corpus/cluster
    fuzz_preload_rules:tests/fuzz/corpus/preload_rules
    fuzz_control:tests/fuzz/control/corpus
    fuzz_iwarp_mpa:tests/fuzz/iwarp/corpus/mpa
    fuzz_iwarp_fpdu:tests/fuzz/iwarp/corpus/fpdu
    fuzz_sdp_wire:tests/fuzz/sdp_wire/corpus/wire
    fuzz_sdp_engine:tests/fuzz/sdp_wire/corpus/engine
    fuzz_sdp_landing:tests/fuzz/sdp_wire/corpus/landing
  )
fi

scripts/deps.sh --test
if ! command -v clang++ >/dev/null || ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSDPPM_LIBFUZZER=ON -DSDPPM_SANITIZE=ON >/dev/null
names=()
for spec in "${targets[@]}"; do names+=("${spec%%:*}"); done
echo "== build fuzz targets: ${names[*]}"
if ! cmake --build build/fuzz -j "$(nproc)" --target "${names[@]}" >build/fuzz/build.log 2>&1; then
  grep -E "error|FAILED" build/fuzz/build.log | head -20 >&2
  echo "fuzz targets did not build (clang); log build/fuzz/build.log" >&2
  exit 1
fi
rm -rf build/fuzz/artifacts
mkdir -p build/fuzz/artifacts
: >build/fuzz/summary.txt
for spec in "${targets[@]}"; do
  name=${spec%%:*}; corpus=${spec#*:}
  [[ -d $corpus ]] || { echo "$name: no seed corpus at $corpus" >&2; exit 1; }
  work=build/fuzz/corpus-$name
  mkdir -p "$work"; cp -rn "$corpus"/. "$work"/
  echo "== $name for ${seconds}s"
  rc=0
  build/fuzz/bin/"$name" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
    -artifact_prefix=build/fuzz/artifacts/"$name"- "$work" >build/fuzz/"$name".log 2>&1 || rc=$?
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|DONE" build/fuzz/"$name".log | tail -3 || true
  done_line=$(grep -E "#[0-9]+[[:space:]]+DONE" build/fuzz/"$name".log | tail -1 || true)
  echo "$name: ${done_line:-no DONE line}" >>build/fuzz/summary.txt
  if [[ $rc -ne 0 ]] || ls build/fuzz/artifacts/"$name"-* >/dev/null 2>&1; then
    grep -E "ERROR|SUMMARY" build/fuzz/"$name".log | head -5 >&2 || true
    # The log and the reproducer go with the build tree (CI deletes its
    # clone): their ends go to stderr, the reproducer as base64.
    tail -n 60 build/fuzz/"$name".log >&2 || true
    for a in build/fuzz/artifacts/"$name"-*; do
      [[ -f $a ]] || continue
      echo "reproducer $a (base64, first 8 KiB):" >&2
      head -c 8192 "$a" | base64 -w 0 >&2 || true
      echo >&2
    done
    echo "$name: failed (rc $rc); log build/fuzz/$name.log, reproducers in build/fuzz/artifacts" >&2
    exit 1
  fi
done
echo "== fuzzing passed"
cat build/fuzz/summary.txt
