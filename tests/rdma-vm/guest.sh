#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the rdma lab's VM (tests/rdma-vm/run.sh builds the initramfs
# and boots it): loads siw (stock, then peer-to-peer), runs the rdma device
# tests, the soft/rdma interop matrix over siw0, the cross runs with the host
# and sdp-perf. Results go to the console as "@@RESULT name PASS|FAIL detail"
# lines, logs and captures to /out (9p, the host's $OUT/share).
# Busybox sh; every wait is bounded (timeout, counted loops).
set -u
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /tmp
echo 1 >/proc/sys/kernel/panic_on_oops
echo 1 >/proc/sys/kernel/panic_on_warn 2>/dev/null
# A task stuck in the kernel (D state) for 20 s is reported with its stack.
echo 20 >/proc/sys/kernel/hung_task_timeout_secs 2>/dev/null

R() { echo "@@RESULT $1 $2 $3"; }
S() { echo "@@START $1"; } # a run that never reports is named by the host
ONLY=${ONLY:-*} # run only what matches one of these patterns (debugging)
want() {
  set -f
  for pat in $ONLY; do
    # shellcheck disable=SC2254 # a pattern on purpose
    case $1 in $pat) set +f; return 0 ;; esac
  done
  set +f
  return 1
}
# Waits up to $2 s for pid $1 to end; sets rc. On a hang, dumps the task's
# kernel stack to the console and gives up on it (rc 254).
wait_pid() {
  i=0
  while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 10)) ]; do
    sleep 0.1
    i=$((i + 1))
  done
  if kill -0 "$1" 2>/dev/null; then
    echo "@@LOG pid $1 stuck: $(grep State /proc/$1/status) $(cat /proc/$1/wchan 2>/dev/null)"
    sed 's/^/@@LOG   /' /proc/$1/stack 2>/dev/null
    for t in /proc/[0-9]*; do
      grep -q 'State:.*D' $t/status 2>/dev/null && { echo "@@LOG D-state $(cat $t/comm) ${t#/proc/}:"; sed 's/^/@@LOG   /' $t/stack; }
    done
    rc=254
    return
  fi
  wait "$1"
  rc=$?
}
log() { echo "@@LOG $*"; }
A=10.0.2.15
T=120 # bound for one transfer (TCG is slow)

modprobe -a virtio_pci virtio_net crc32c_generic crc32_generic libcrc32c ib_core rdma_ucm iw_cm \
  9pnet_virtio 9p || log "modprobe failed"
mkdir -p /out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /out || log "no 9p share"
ip link set lo up
ip addr add $A/24 dev eth0
ip link set eth0 up
ip route add default via 10.0.2.2
# shellcheck disable=SC3045 # busybox sh has it
ulimit -l unlimited # siw pins registered memory against RLIMIT_MEMLOCK, root too
host_port=$(cat /out/host_port 2>/dev/null || echo 0)

load_siw() { # stock|p2p
  rdma link delete siw0 2>/dev/null
  rmmod siw 2>/dev/null
  insmod /lib/siw/$1.ko || { R "siw-$1-load" FAIL "insmod failed"; return 1; }
  rdma link add siw0 type siw netdev eth0 || { R "siw-$1-link" FAIL "rdma link add failed"; return 1; }
  if ibv_devinfo -d siw0 2>&1 | grep -q 'transport:.*iWARP'; then
    R "siw-$1-device" PASS "siw0 on eth0, transport iWARP"
  else
    R "siw-$1-device" FAIL "ibv_devinfo: $(ibv_devinfo 2>&1 | head -3 | tr '\n' ' ')"
    return 1
  fi
}

sha() { sha256sum <"$1" | cut -c1-64; }
empty_sha=$(sha /dev/null)

# Waits until something listens on TCP port $1 (siw listens on a kernel
# socket too), at most 10 s.
wait_listen() {
  i=0
  while [ $i -lt 100 ]; do
    netstat -ltn 2>/dev/null | grep -q ":$1 " && return 0
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}

port=7000  # captured: 7001-7499
bport=7500 # not captured: 16 MiB and abort runs (unbounded streams)
cap_pid=""
start_capture() { # name
  tcpdump -Z root -B 32768 -i lo -s 0 -U -w "/out/$1.pcap" 'tcp portrange 7000-7499' >/tmp/tcpdump.log 2>&1 &
  cap_pid=$!
  sleep 1
  cap_name=$1
}
stop_capture() {
  sleep 0.5
  kill -INT "$cap_pid" 2>/dev/null
  wait "$cap_pid" 2>/dev/null
  log "capture $cap_name: $(tail -3 /tmp/tcpdump.log | tr '\n' ' ')"
}

# One transfer: xfer NAME LPROV CPROV SIZE DIR [expect [MECH]]
# DIR c2l: client sends; l2c: listener sends; both: both send (half-close
# on each side while the other still sends). expect=reject: the connection
# must fail quickly and clearly (stock siw initiator against soft).
# MECH (zcopy): both ends run with --mechanism MECH, and every receiving
# end must have taken bytes by zero copy (RDMA Read of the sender's
# buffer, 9.2), as sdp-cat -v reports.
zbytes() { # sent|received FILE: the zero-copy byte count sdp-cat -v reported
  sed -n "s/.*zero copy sent \([0-9]*\) received \([0-9]*\).*/\1 \2/p" "$2" | tail -1 |
    { read -r zs zr; [ "$1" = sent ] && echo "${zs:-0}" || echo "${zr:-0}"; }
}
wbytes() { # FILE: the bytes the peer RDMA-Wrote into lent buffers (9.3), as sdp-cat -v reported
  sed -n "s/.*RDMA Write sent [0-9]* received \([0-9]*\).*/\1/p" "$1" | tail -1 | { read -r w; echo "${w:-0}"; }
}
xfer() {
  name=$1 lp=$2 cp=$3 size=$4 dir=$5 expect=${6:-data} mech=${7:-}
  mopt=""
  [ -n "$mech" ] && mopt="-v --mechanism $mech"
  want "$name" || return 0
  S "$name"
  # Up to 1 MiB on captured ports; bigger runs (sha256 only) on the others.
  if [ "$size" -le 1048577 ]; then port=$((port + 1)); p=$port; else bport=$((bport + 1)); p=$bport; fi
  lin=/dev/null cin=/dev/null
  case $dir in
    c2l) cin=/tmp/d$size ;;
    l2c) lin=/tmp/d$size ;;
    both) cin=/tmp/d$size lin=/tmp/e$size ;;
  esac
  rm -f /tmp/l.out /tmp/c.out
  # shellcheck disable=SC2086 # mopt is words on purpose
  timeout $T sdp-cat $mopt --provider "$lp" -l --bind $A $p <$lin >/tmp/l.out 2>/tmp/l.err &
  lpid=$!
  if ! wait_listen $p; then
    kill $lpid 2>/dev/null
    R "$name" FAIL "listener never listened: $(tail -1 /tmp/l.err)"
    return
  fi
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout $T sdp-cat -v $mopt --provider "$cp" --sdp $A $p <$cin >/tmp/c.out 2>/tmp/c.err
  crc=$?
  t1=$(date +%s)
  if [ "$expect" = reject ]; then
    kill $lpid 2>/dev/null
    wait $lpid 2>/dev/null
    if [ $crc -ne 0 ] && [ $crc -ne 124 ] && [ $((t1 - t0)) -le 15 ]; then
      R "$name" PASS "refused in $((t1 - t0)) s as decided: $(tail -1 /tmp/c.err)"
    else
      R "$name" FAIL "client rc $crc after $((t1 - t0)) s: $(tail -1 /tmp/c.err)"
    fi
    return
  fi
  wait $lpid
  lrc=$?
  want_l=$empty_sha want_c=$empty_sha
  [ "$cin" != /dev/null ] && want_l=$(sha "$cin")
  [ "$lin" != /dev/null ] && want_c=$(sha "$lin")
  got_l=$(sha /tmp/l.out) got_c=$(sha /tmp/c.out)
  zok=1 zinfo=""
  if [ -n "$mech" ]; then
    zl=$(zbytes received /tmp/l.err) zc=$(zbytes received /tmp/c.err)
    zinfo=", zero copy received: listener $zl B (RDMA Write $(wbytes /tmp/l.err) B), client $zc B (RDMA Write $(wbytes /tmp/c.err) B)"
    [ "$cin" != /dev/null ] && [ "$zl" -eq 0 ] && zok=0
    [ "$lin" != /dev/null ] && [ "$zc" -eq 0 ] && zok=0
  fi
  if [ $crc -eq 0 ] && [ $lrc -eq 0 ] && [ "$got_l" = "$want_l" ] && [ "$got_c" = "$want_c" ] && [ $zok = 1 ]; then
    R "$name" PASS "$size B $dir, sha256 ok, $((t1 - t0)) s$zinfo"
  elif [ "$v" = stock ] && [ "$lp" = rdma ] && [ "$cp" = rdma ] &&
    grep -q 'RDMA_CM_EVENT_CONNECT_ERROR (status -22' /tmp/c.err; then
    # Stock siw to stock siw (client-server MPA): the responder sends the
    # HelloAck at once and the siw initiator refuses an FPDU that comes
    # with the MPA Reply (RFC 5044 7.1.2, "peer sent extra data"): a race
    # SDP cannot avoid without peer-to-peer mode (docs/rdma.md).
    R "$name" KNOWN "stock-siw startup race (RFC 5044 7.1.2): $(tail -1 /tmp/c.err)"
  else
    R "$name" FAIL "$size B $dir$zinfo: client rc $crc, listener rc $lrc, listener got $(wc -c </tmp/l.out) B (sha ok: $([ "$got_l" = "$want_l" ] && echo y || echo n)), client got $(wc -c </tmp/c.out) B (sha ok: $([ "$got_c" = "$want_c" ] && echo y || echo n)); client: $(tail -1 /tmp/c.err); listener: $(tail -1 /tmp/l.err)"
    cp /tmp/c.err "/out/$name.client.err"
    cp /tmp/l.err "/out/$name.listener.err"
  fi
}

# Abort: one end is killed mid-stream (LLP abort); the other must end with
# an error, bounded, and the kernel must stay up.
abort_run() { # name lprov cprov victim(client|listener)
  name=$1 lp=$2 cp=$3 victim=$4
  want "$name" || return 0
  S "$name"
  bport=$((bport + 1))
  p=$bport
  if [ "$victim" = client ]; then
    timeout $T sdp-cat --provider "$lp" -l --bind $A $p </dev/null >/tmp/l.out 2>/tmp/l.err &
  else
    timeout $T sdp-cat --provider "$lp" -l --bind $A $p </dev/zero >/dev/null 2>/tmp/l.err &
  fi
  lpid=$!
  wait_listen $p || { R "$name" FAIL "listener never listened"; kill $lpid; return; }
  if [ "$victim" = client ]; then
    timeout $T sdp-cat --provider "$cp" --sdp $A $p </dev/zero >/dev/null 2>/tmp/c.err &
  else
    timeout $T sdp-cat --provider "$cp" --sdp $A $p </dev/null >/tmp/c.out 2>/tmp/c.err &
  fi
  cpid=$!
  i=0
  while [ $i -lt 100 ]; do
    [ -s /tmp/l.out ] || [ -s /tmp/c.out ] && break
    sleep 0.1
    i=$((i + 1))
  done
  sleep 1
  t0=$(date +%s)
  if [ "$victim" = client ]; then
    kill -KILL $cpid
    wait_pid $lpid 40
    orc=$rc other=listener err=/tmp/l.err
    wait_pid $cpid 10
  else
    kill -KILL $lpid
    wait_pid $cpid 40
    orc=$rc other=client err=/tmp/c.err
    wait_pid $lpid 10
  fi
  t1=$(date +%s)
  if [ $orc -ne 0 ] && [ $orc -ne 124 ] && [ $orc -ne 254 ] && [ $((t1 - t0)) -le 30 ]; then
    R "$name" PASS "$victim killed mid-stream: $other exited $orc after $((t1 - t0)) s: $(tail -1 $err)"
  else
    R "$name" FAIL "$victim killed mid-stream: $other rc $orc after $((t1 - t0)) s: $(tail -1 $err)"
  fi
  rm -f /tmp/l.out /tmp/c.out
}

# SrcAvail revocation (9.5.4) over siw: the client writes 1 MiB by zero copy
# with --io-timeout 500 to an rdma listener whose standard output is a pipe
# that nobody drains for 4 s, so the listener stops reading after ~128 KiB.
# The listener's progress thread still answers the client's SrcAvailCancel:
# the client's write fails with "timed out", reports one SrcAvailCancel,
# and closes gracefully; the listener then gets a proper prefix of the data
# and a clean end of stream (exit 0), no reset.
revoke_run() { # name cprov
  name=$1 cp=$2
  want "$name" || return 0
  S "$name"
  bport=$((bport + 1))
  p=$bport
  rm -f /tmp/l.out /tmp/l.rc /tmp/l.pid
  # shellcheck disable=SC2016 # $$ is the inner shell's, on purpose
  { sh -c 'echo $$ >/tmp/l.pid; exec "$@"' sh timeout $T sdp-cat -v --mechanism zcopy \
      --provider rdma -l --bind $A $p </dev/null 2>/tmp/l.err
    echo $? >/tmp/l.rc; } | { sleep 4; cat >/tmp/l.out; } &
  lpid=$!
  if ! wait_listen $p; then
    kill "$(cat /tmp/l.pid 2>/dev/null)" $lpid 2>/dev/null
    R "$name" FAIL "listener never listened: $(tail -1 /tmp/l.err)"
    return
  fi
  timeout $T sdp-cat -v --mechanism zcopy --io-timeout 500 --provider "$cp" --sdp $A $p \
    </tmp/d1048577 >/dev/null 2>/tmp/c.err
  crc=$?
  wait_pid $lpid 60
  lrc=$(cat /tmp/l.rc 2>/dev/null || echo none)
  got=$(wc -c </tmp/l.out)
  cancels=$(sed -n 's/.*SrcAvailCancel sent \([0-9]*\).*/\1/p' /tmp/c.err | tail -1)
  if [ $crc -eq 1 ] && grep -q 'write: .*timed out' /tmp/c.err && [ "${cancels:-0}" -ge 1 ] &&
    [ "$lrc" = 0 ] && [ "$got" -gt 0 ] && [ "$got" -lt 1048577 ] && cmp -s -n "$got" /tmp/l.out /tmp/d1048577; then
    R "$name" PASS "write revoked after 500 ms (SrcAvailCancel sent $cancels), listener got a $got B prefix and a clean end"
  else
    R "$name" FAIL "client rc $crc ($(tail -1 /tmp/c.err)), SrcAvailCancel ${cancels:-none}, listener rc $lrc ($(tail -1 /tmp/l.err)), listener got $got B"
    cp /tmp/c.err "/out/$name.client.err"
    cp /tmp/l.err "/out/$name.listener.err"
  fi
  rm -f /tmp/l.out
}

gtests() { # name binary filter
  name=$1 bin=$2 filter=$3
  SDPPM_RDMA_TEST_ADDR=$A timeout 300 "$bin" --gtest_filter="$filter" >"/out/$name.log" 2>&1
  rc=$?
  passed=$(grep -o '\[  PASSED  \] [0-9]* test' "/out/$name.log" | grep -o '[0-9]*' | head -1)
  skipped=$(grep -o '\[  SKIPPED \] [0-9]* test' "/out/$name.log" | grep -o '[0-9]*' | head -1)
  failed=$(grep '\[  FAILED  \] [A-Za-z]' "/out/$name.log" | sed 's/.*FAILED  \] //' | tr '\n' ' ')
  # Stock siw to stock siw can lose a connection to the startup race
  # described at xfer (RFC 5044 7.1.2). When every failure of a stock run
  # is that one, the failed tests run once more; they must pass then.
  nfail=$(grep -c ': Failure$' "/out/$name.log")
  nrace=$(grep -c 'RDMA_CM_EVENT_CONNECT_ERROR (status -22' "/out/$name.log")
  case $name in stock-*) stock=1 ;; *) stock=0 ;; esac
  if [ $rc -ne 0 ] && [ $stock = 1 ] && [ "$nfail" -gt 0 ] && [ "$nrace" -ge "$nfail" ] && [ -n "$failed" ]; then
    R "$name-race" KNOWN "stock-siw startup race in: $failed(RFC 5044 7.1.2); running them once more"
    again=$(grep '\[  FAILED  \] [A-Za-z]' "/out/$name.log" | sed 's/.*FAILED  \] //; s/ (.*//' | sort -u | tr '\n' ':')
    SDPPM_RDMA_TEST_ADDR=$A timeout 300 "$bin" --gtest_filter="$again" >"/out/$name.rerun.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && failed="" || failed="$failed(again: $(grep '\[  FAILED  \] [A-Za-z]' "/out/$name.rerun.log" | sed 's/.*FAILED  \] //' | tr '\n' ' '))"
  fi
  if [ $rc -eq 0 ]; then
    R "$name" PASS "${passed:-0} passed, ${skipped:-0} skipped (rc 0)"
  else
    R "$name" FAIL "rc $rc, ${passed:-0} passed, failed: $failed"
  fi
  grep '\[  SKIPPED \] [A-Za-z]' "/out/$name.log" | sed "s/^/@@LOG $name /"
}

if [ -n "${QUICK:-}" ]; then sizes="1 65537 1048577"; big=1048577; else sizes="1 65537 1048577 16777216"; big=16777216; fi
for s in $sizes; do
  head -c "$s" /dev/urandom >/tmp/d$s
  head -c "$s" /dev/urandom >/tmp/e$s
done

matrix() { # variant
  v=$1
  for pair in rdma:rdma soft:rdma rdma:soft soft:soft; do
    lp=${pair%%:*} cp=${pair##*:}
    expect=data
    # Stock siw as MPA initiator cannot negotiate peer-to-peer: the soft
    # responder refuses it (docs/rdma.md, "Stock siw").
    [ "$v" = stock ] && [ "$lp" = soft ] && [ "$cp" = rdma ] && expect=reject
    if [ $expect = reject ]; then
      xfer "$v-L$lp-C$cp-refused" "$lp" "$cp" 1 c2l reject
      continue
    fi
    for s in $sizes; do
      for dir in c2l l2c both; do
        # 16 MiB each way once per pairing is enough under TCG.
        [ "$s" = "$big" ] && [ "$s" != 1048577 ] && [ $dir = both ] && continue
        xfer "$v-L$lp-C$cp-$s-$dir" "$lp" "$cp" "$s" "$dir"
      done
    done
    abort_run "$v-L$lp-C$cp-abort-client" "$lp" "$cp" client
    abort_run "$v-L$lp-C$cp-abort-listener" "$lp" "$cp" listener
    # Zero copy in every pairing and direction: each receiving end must
    # take bytes by zero copy (RDMA Read of the sender's buffer, 9.2, or
    # the sender's RDMA Write into a lent one, 9.3; both are reported).
    if [ "$v" = p2p ]; then
      for dir in c2l l2c both; do
        xfer "$v-L$lp-C$cp-zcopy-1048577-$dir" "$lp" "$cp" 1048577 $dir data zcopy
      done
      # A listener on the soft provider answers only while its application
      # calls in: revocation against it ends in a reset by design.
      [ "$lp" = rdma ] && revoke_run "$v-L$lp-C$cp-zcopy-revoke" "$cp"
    fi
  done
}

rdma_tests() { # variant
  want "$1-sdp_rdma_test" || return 0
  S "$1-sdp_rdma_test"
  gtests "$1-sdp_rdma_test" sdp_rdma_test '*'
  gtests "$1-sdp_provider_integration_test" sdp_provider_integration_test 'SdpProviderRdma.*:SdpProviderPm.RdmaThroughThePortMapper:SdpProvider.*'
}

# --- stock siw (peer_to_peer off) --------------------------------------------------
if load_siw stock; then
  rdma_tests stock
  start_capture stock
  matrix stock
  stop_capture
fi

# --- siw with peer_to_peer on (and the RTR race fixed) ------------------------
if load_siw p2p; then
  rdma_tests p2p
  start_capture p2p
  matrix p2p
  stop_capture
  # Cross runs with the host (qemu user networking: the host is 10.0.2.2).
  timeout 150 sdp-cat --provider rdma -l --bind $A 7300 </dev/null >/tmp/x.out 2>/tmp/x.err &
  xpid=$!
  if wait_listen 7300; then
    echo "@@READY xfwd"
    wait $xpid
    echo "@@SHA xfwd $(sha /tmp/x.out) rc $? $(tail -1 /tmp/x.err)"
  else
    echo "@@SHA xfwd none listener-failed $(tail -1 /tmp/x.err)"
  fi
  head -c 2097169 /dev/urandom >/tmp/xb
  echo "@@SHA xback $(sha /tmp/xb)"
  timeout 150 sdp-cat -v --provider rdma --sdp 10.0.2.2 "$host_port" </tmp/xb >/dev/null 2>/tmp/xb.err
  log "xback client rc $?: $(tail -1 /tmp/xb.err)"
  # sdp-perf over the device: a functional check; TCG numbers are not performance.
  timeout 200 sdp-perf --provider rdma --addr $A --sizes 4096,65536 --time 1 --no-latency >/out/sdp-perf.txt 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    R p2p-sdp-perf-rdma PASS "functional only (TCG): $(tail -1 /out/sdp-perf.txt | tr -s ' ')"
  else
    R p2p-sdp-perf-rdma FAIL "rc $rc: $(tail -2 /out/sdp-perf.txt | tr '\n' ' ')"
  fi
  # The same with each mechanism (Bcopy and Read Zcopy over siw).
  timeout 200 sdp-perf --provider rdma --addr $A --sizes 1048576 --time 1 --no-latency --mechanism all >/out/sdp-perf-mech.txt 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    R p2p-sdp-perf-rdma-mechanisms PASS "functional only (TCG): $(grep -i 'zcopy' /out/sdp-perf-mech.txt | tail -1 | tr -s ' ')"
  else
    R p2p-sdp-perf-rdma-mechanisms FAIL "rc $rc: $(tail -2 /out/sdp-perf-mech.txt | tr '\n' ' ')"
  fi
fi

dmesg >/out/dmesg.txt
sync
umount /out
echo "@@DONE"
poweroff -f
