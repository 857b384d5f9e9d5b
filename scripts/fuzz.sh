#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (clang), ASan + UBSan.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 60 s, all targets)
# Each target runs for a bounded time on a copy of its seed corpus; any crash
# fails the script and leaves the reproducer in build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(fuzz_codec:pm fuzz_pmsp:pmsp fuzz_config:config)

scripts/deps.sh --test
command -v clang++ >/dev/null || { apt-get install -y -qq clang >/dev/null; }
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSDPPM_LIBFUZZER=ON -DSDPPM_SANITIZE=ON >/dev/null
mkdir -p build/fuzz/artifacts
for spec in "${targets[@]}"; do
  name=${spec%%:*}; corpus=${spec#*:}
  cmake --build build/fuzz --target "$name" >/dev/null
  work=build/fuzz/corpus-$name
  mkdir -p "$work"; cp -n tests/fuzz/corpus/"$corpus"/* "$work"/ 2>/dev/null || true
  echo "== $name for ${seconds}s"
  build/fuzz/bin/"$name" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix=build/fuzz/artifacts/"$name"- "$work" 2>&1 | grep -E "^stat::|#[0-9]+.*DONE|ERROR|SUMMARY" || true
  if ls build/fuzz/artifacts/"$name"-* >/dev/null 2>&1; then
    echo "$name: crash reproducers in build/fuzz/artifacts" >&2; exit 1
  fi
done
