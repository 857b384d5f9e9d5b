#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Three network namespaces on one bridge: pmsp (sdp-pmd), client1, client2.
# The bridge lives in a fourth, "switch" namespace of its own, never in the
# root namespace: the host's netfilter (Docker's FORWARD policy DROP with
# bridge-nf-call-iptables=1, say) then never sees the test's traffic.
# nftables in the pmsp namespace drops 30% of the packets to UDP 3935 at
# random (`numgen random mod 100 < 30`); there is no tc netem here. Both
# clients resolve through libpmclient (pm-resolve-many) at the same time and
# every resolution must end as accept, deny or timeout (the fallback); the
# daemon must hold no transaction afterwards. Exit 77 (skip) without root,
# `ip netns` or nft. Namespaces are removed on every exit path.
#
# usage: nft_loss.sh SDP_PMD PM_RESOLVE_MANY [COUNT]
set -euo pipefail

pmd="$1"
resolver="$2"
count="${3:-2000}"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "no ip(8)"
command -v nft >/dev/null || skip "no nft(8)"

tag="sdppm$$"
ns_s="${tag}-pmsp"; ns_1="${tag}-c1"; ns_2="${tag}-c2"; ns_sw="${tag}-sw"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/sdppm-topo-XXXXXX")"
pmd_pid=""

cleanup() {
  set +e
  if [ -n "$pmd_pid" ]; then
    kill "$pmd_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pmd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pmd_pid" 2>/dev/null
    wait "$pmd_pid" 2>/dev/null
  fi
  # Deleting the switch namespace deletes the bridge and the veth pairs.
  for ns in "$ns_s" "$ns_1" "$ns_2" "$ns_sw"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$ns_sw" 2>/dev/null || skip "cannot create network namespaces"
ip netns add "$ns_s"
ip netns add "$ns_1"
ip netns add "$ns_2"
if ! ip -n "$ns_sw" link add br0 type bridge 2>/dev/null; then skip "no bridge support"; fi
ip -n "$ns_sw" link set br0 up
i=1
for ns in "$ns_s" "$ns_1" "$ns_2"; do
  ip -n "$ns_sw" link add "port$i" type veth peer name eth0 netns "$ns"
  ip -n "$ns_sw" link set "port$i" master br0 up
  ip -n "$ns" addr add "10.99.0.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  i=$((i + 1))
done

# The random drop, in the server's namespace.
ip netns exec "$ns_s" nft -f - <<NFT
table inet chaos {
  chain input {
    type filter hook input priority 0; policy accept;
    udp dport 3935 numgen random mod 100 < 30 counter drop
  }
}
NFT

cat >"$tmp/pmd.yaml" <<YAML
listen: ["10.99.0.1:3935"]
log_level: notice
ack_timeout: 1s
health: off  # nothing listens on the SDP address; this is about the PM exchange
services:
  - name: web
    conventional: "10.99.0.1:80"
    sdp: ["10.99.0.1:8080"]
    pm_time: 30s
YAML
ip netns exec "$ns_s" "$pmd" --config "$tmp/pmd.yaml" 2>"$tmp/pmd.err" &
pmd_pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/pmd.err" && break; kill -0 "$pmd_pid" || break; sleep 0.05; done
grep -q ready "$tmp/pmd.err" || { echo "sdp-pmd did not start"; cat "$tmp/pmd.err"; exit 1; }

# Both clients at once, each with its own CpIPAddr and CpPorts.
ip netns exec "$ns_1" "$resolver" --pmsp 10.99.0.1:3935 --conventional 10.99.0.1:80 \
  --cp 10.99.0.2 --count "$count" --concurrency 128 >"$tmp/c1.json" &
c1=$!
ip netns exec "$ns_2" "$resolver" --pmsp 10.99.0.1:3935 --conventional 10.99.0.1:80 \
  --cp 10.99.0.3 --count "$count" --concurrency 128 >"$tmp/c2.json" &
c2=$!
rc=0
wait "$c1" || rc=1
wait "$c2" || rc=1
echo "client1: $(cat "$tmp/c1.json")"
echo "client2: $(cat "$tmp/c2.json")"
echo "nft: $(ip netns exec "$ns_s" nft list chain inet chaos input | grep -o 'packets [0-9]*' || true) dropped"
[ "$rc" = 0 ] || { echo "FAIL: a resolution did not end as accept, deny or timeout"; exit 1; }
for f in c1 c2; do
  acc="$(sed -n 's/.*"accepted":\([0-9]*\).*/\1/p' "$tmp/$f.json")"
  [ "${acc:-0}" -ge $((count / 2)) ] || { echo "FAIL: $f: only $acc of $count accepted"; exit 1; }
done

# After more than ack_timeout, the daemon holds no transaction. Bounded.
line=""
for _ in $(seq 20); do
  sleep 0.5
  kill -USR1 "$pmd_pid"
  sleep 0.1
  line="$(grep 'counters:' "$tmp/pmd.err" | tail -1)"
  case "$line" in *" transactions=0 "*) break ;; esac
done
echo "sdp-pmd ${line#*<5>}"
case "$line" in *" transactions=0 "*) ;; *) echo "FAIL: transactions left"; exit 1 ;; esac
get() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$line"; }
if [ "$(get accepted)" != "$(( $(get acked) + $(get timeouts) + $(get superseded) + $(get shed) + $(get released_on_deny) ))" ]; then
  echo "FAIL: accepted != acked + timeouts + superseded + shed + released_on_deny"; exit 1
fi
echo PASS
