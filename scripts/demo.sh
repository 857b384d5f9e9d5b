#!/usr/bin/env bash
# The main job: installs dependencies, builds, starts sdp-pmd on loopback with
# the example config (demo mappings 127.0.0.1:7000 -> 127.0.0.1:7001 and the
# same on [::1]), resolves them with the libpmclient example client, registers
# a mapping at run time with sdp-pmctl, and moves a file over SDP (userspace
# iWARP) to an address resolved through the Port Mapper. Then stops.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target sdp-pmd sdp-pmctl pm-resolve sdp-cat

bin=build/default/bin
work=$(mktemp -d -t sdp-pm-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The example config, plus a control socket and state file in the work dir.
cp examples/sdp-pmd.yaml "$work/sdp-pmd.yaml"
printf 'control:\n  socket: %s/control.sock\nstate_file: %s/registrations.json\n' \
  "$work" "$work" >> "$work/sdp-pmd.yaml"

echo "== starting sdp-pmd --config examples/sdp-pmd.yaml (+ control socket in $work)"
"$bin/sdp-pmd" --config "$work/sdp-pmd.yaml" --foreground 2>"$work/sdp-pmd.log" &
pmd=$!
pids+=("$pmd")
for _ in $(seq 50); do   # bounded wait until the daemon answers
  if "$bin/pm-resolve" 127.0.0.1 7000 >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pmd" 2>/dev/null; then echo "sdp-pmd exited:"; cat "$work/sdp-pmd.log"; exit 1; fi
  sleep 0.1
done
ctl=("$bin/sdp-pmctl" --socket "$work/control.sock")

echo "== resolve the demo service 127.0.0.1:7000 (IPv4)"
"$bin/pm-resolve" 127.0.0.1 7000
echo "== resolve the demo service [::1]:7000 (IPv6)"
"$bin/pm-resolve" ::1 7000
echo "== resolve a port with no mapping (the client falls back to the Conventional Address)"
"$bin/pm-resolve" 127.0.0.1 7999 || echo "(exit $?: denied, as expected)"

echo "== register 127.0.0.1:7100 -> 127.0.0.1:7101 at run time, and query it"
"${ctl[@]}" register files 127.0.0.1:7100 127.0.0.1:7101 --pm-time 30s
"${ctl[@]}" query 127.0.0.1 --service 127.0.0.1:7100
"${ctl[@]}" services

echo "== move a file over SDP: sdp-cat resolves 127.0.0.1:7100 through sdp-pmd"
head -c 4194304 /dev/urandom > "$work/file"
"$bin/sdp-cat" -l --bind 127.0.0.1 7101 > "$work/copy" &
listener=$!
pids+=("$listener")
ok=""
for _ in $(seq 50); do   # bounded: retry until the listener is up
  if "$bin/sdp-cat" -v 127.0.0.1 7100 < "$work/file" 2>"$work/cat.err"; then ok=1; break; fi
  sleep 0.1
done
[[ -n $ok ]] || { cat "$work/cat.err"; exit 1; }
wait "$listener"
cat "$work/cat.err"
cmp "$work/file" "$work/copy" && echo "4 MiB copied over SDP, contents identical"

"${ctl[@]}" stats | grep -E "^(accepted|acked|denied_no_service|transactions):" || true
kill -TERM "$pmd"
wait "$pmd" && echo "== sdp-pmd stopped cleanly"
pids=()
echo "== daemon log"
cat "$work/sdp-pmd.log"
