#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: installs dependencies, builds, starts sdp-pmd on its built-in
# defaults (UDP 0.0.0.0:3935 and [::]:3935, control socket
# /run/sdp-pmd/control.sock), registers demo services with sdp-pmctl and
# resolves them with the libpmclient example client, then moves a file over
# SDP (userspace iWARP): an sdp-cat listener registers its own mapping with the
# daemon, and an sdp-cat client resolves the Conventional Address through the
# Port Mapper and connects to the SDP Address. Then unregisters and stops.
#
# As a non-root user the daemon cannot create /run/sdp-pmd, so the control
# socket and state file go to a temporary directory instead (the only
# settings changed from the defaults).
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

pmd_args=()
ctl=("$bin/sdp-pmctl")
if [[ $(id -u) -eq 0 ]]; then
  echo "== starting sdp-pmd on its built-in defaults"
else
  printf 'control:\n  socket: %s/control.sock\nstate_file: %s/registrations.json\n' \
    "$work" "$work" >"$work/sdp-pmd.yaml"
  pmd_args=(--config "$work/sdp-pmd.yaml")
  ctl+=(--socket "$work/control.sock")
  echo "== starting sdp-pmd on its built-in defaults (control socket in $work: not root)"
fi
if ss -Hlun 'sport = :3935' 2>/dev/null | grep -q .; then
  echo "UDP port 3935 is already in use (another sdp-pmd?); stop it first" >&2
  exit 1
fi
"$bin/sdp-pmd" "${pmd_args[@]}" 2>"$work/sdp-pmd.log" &
pmd=$!
pids+=("$pmd")
for _ in $(seq 50); do   # bounded wait until the control socket answers
  if "${ctl[@]}" status >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pmd" 2>/dev/null; then echo "sdp-pmd exited:"; cat "$work/sdp-pmd.log"; exit 1; fi
  sleep 0.1
done
"${ctl[@]}" status

echo "== start the demo services' SDP listeners on 127.0.0.1:7001 and [::1]:7001"
echo "   (sdp-pmd hands out an SDP Address only while a listener is there)"
"$bin/sdp-cat" -l --bind 127.0.0.1 7001 >/dev/null 2>"$work/demo-listener.err" &
demo_listener=$!
pids+=("$demo_listener")
"$bin/sdp-cat" -l --bind '[::1]' 7001 >/dev/null 2>"$work/demo6-listener.err" &
demo6_listener=$!
pids+=("$demo6_listener")
for _ in $(seq 50); do   # bounded wait until both listen
  [[ $(ss -Hltn 'sport = :7001' 2>/dev/null | wc -l) -ge 2 ]] && break
  sleep 0.1
done
echo "== register demo services: 127.0.0.1:7000 -> 127.0.0.1:7001 and [::1]:7000 -> [::1]:7001"
"${ctl[@]}" register demo 127.0.0.1:7000 127.0.0.1:7001 --pm-time 30s --owner demo.sh
"${ctl[@]}" register demo6 '[::1]:7000' '[::1]:7001' --owner demo.sh
# Bounded wait until sdp-pmd's health checks see both listeners: a mapping
# left in the state file by an interrupted earlier run may start as down.
for _ in $(seq 100); do
  [[ $("${ctl[@]}" services 2>/dev/null | grep -cE '^demo6? +[^ ]+ +[^ ]+ +up') -ge 2 ]] && break
  sleep 0.1
done
echo "== resolve the demo service 127.0.0.1:7000 (IPv4)"
"$bin/pm-resolve" 127.0.0.1 7000
echo "== resolve the demo service [::1]:7000 (IPv6)"
"$bin/pm-resolve" ::1 7000
echo "== resolve a port with no mapping (the client falls back to the Conventional Address)"
"$bin/pm-resolve" 127.0.0.1 7999 || echo "(exit $?: denied, as expected)"
echo "== ask the Port Mapper directly, as an operator would"
"${ctl[@]}" query 127.0.0.1 --service 127.0.0.1:7000
echo "== stop the SDP listener of demo: after 2 failed checks (health fall) the answer is PMDeny"
kill -TERM "$demo_listener" 2>/dev/null || true
for _ in $(seq 50); do   # bounded: 2 checks 1 s apart
  "$bin/pm-resolve" 127.0.0.1 7000 >/dev/null 2>&1 || break
  sleep 0.1
done
"$bin/pm-resolve" 127.0.0.1 7000 || echo "(exit $?: denied, denied_unavailable in the counters)"

echo "== move a file over SDP: the listener registers 127.0.0.1:7100 -> its SDP port 7101,"
echo "   the client resolves 127.0.0.1:7100 through sdp-pmd and connects over SDP"
head -c 4194304 /dev/urandom >"$work/file"
ctl_socket=()
[[ $(id -u) -eq 0 ]] || ctl_socket=(--control "$work/control.sock")
"$bin/sdp-cat" -l --register 127.0.0.1:7100 "${ctl_socket[@]}" --bind 127.0.0.1 7101 \
  >"$work/copy" 2>"$work/listener.err" &
listener=$!
pids+=("$listener")
ok=""
for _ in $(seq 50); do   # bounded: retry until the listener is up and registered
  if "${ctl[@]}" services 2>/dev/null | grep -q "127.0.0.1:7100" &&
    "$bin/sdp-cat" -v 127.0.0.1 7100 <"$work/file" 2>"$work/cat.err"; then
    ok=1
    break
  fi
  sleep 0.1
done
[[ -n $ok ]] || { cat "$work/cat.err" "$work/listener.err" 2>/dev/null; exit 1; }
wait "$listener"
cat "$work/cat.err"
grep -q "connected over SDP" "$work/cat.err" || { echo "the copy did not use SDP" >&2; exit 1; }
cmp "$work/file" "$work/copy" && echo "4 MiB copied over SDP, contents identical"

"${ctl[@]}" services
"${ctl[@]}" stats | grep -E "^(accepted|acked|denied_no_service|denied_unavailable|transactions):" || true
echo "== unregister the demo services and stop"
"${ctl[@]}" unregister demo
"${ctl[@]}" unregister demo6
kill -TERM "$demo6_listener" 2>/dev/null || true
kill -TERM "$pmd"
wait "$pmd" && echo "== sdp-pmd stopped cleanly"
pids=()
echo "== daemon log"
cat "$work/sdp-pmd.log"
