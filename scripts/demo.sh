#!/usr/bin/env bash
# The main job: installs dependencies, builds, starts sdp-pmd on loopback with
# the example config (a demo mapping 127.0.0.1:7000 -> 127.0.0.1:7001), and
# resolves it with the libpmclient example client, then stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target sdp-pmd pm-resolve

bin=build/default/bin
log=$(mktemp -t sdp-pmd-demo.XXXXXX.log)
echo "== starting sdp-pmd --config examples/sdp-pmd.yaml (log: $log)"
"$bin/sdp-pmd" --config examples/sdp-pmd.yaml --foreground 2>"$log" &
pmd=$!
trap 'kill -TERM $pmd 2>/dev/null || true; wait $pmd 2>/dev/null || true' EXIT

# Wait (bounded) until the daemon answers.
for _ in $(seq 50); do
  if "$bin/pm-resolve" 127.0.0.1 7000 >/dev/null 2>&1; then break; fi
  if ! kill -0 $pmd 2>/dev/null; then echo "sdp-pmd exited:"; cat "$log"; exit 1; fi
  sleep 0.1
done

echo "== resolve the demo service 127.0.0.1:7000 (IPv4)"
"$bin/pm-resolve" 127.0.0.1 7000
echo "== resolve the demo service [::1]:7000 (IPv6)"
"$bin/pm-resolve" ::1 7000
echo "== resolve a port with no mapping (the client falls back to the Conventional Address)"
"$bin/pm-resolve" 127.0.0.1 7999 || echo "(exit $?: denied, as expected)"

kill -TERM $pmd
wait $pmd && echo "== sdp-pmd stopped cleanly"
trap - EXIT
echo "== daemon log"
cat "$log"
