#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The rdma VM lab (issue #14): boots Debian's packaged kernel under qemu (TCG)
# with Linux siw built out of tree, runs the project's rdma device tests, the
# soft/rdma interop matrix and sdp-perf inside, a soft provider on the host
# against siw in the VM across qemu user networking, and checks every
# capture with tshark. See docs/rdma.md ("The VM lab").
#
# Usage: tests/rdma-vm/run.sh [BUILD_DIR]     (default: build/default)
# Exit:  0 all passed, 1 a failure (the reason is printed), 77 skipped
#        (no qemu/packages to be had here; the reason is printed).
# Environment:
#   SDPPM_VM_CACHE    cache root (default /var/cache/sdppm-rdma-vm, else
#                     ~/.cache/sdppm-rdma-vm when that is not writable)
#   SDPPM_VM_OUT      results (default BUILD_DIR/rdma-vm): console.log,
#                     results.txt, *.pcap, tshark reports
#   SDPPM_VM_TIMEOUT  hard bound on the VM's life in seconds (default 420)
#   SDPPM_VM_QUICK=1  smaller matrix (sizes up to 1 MiB)
#   SDPPM_VM_ONLY=PATS only the guest runs whose name matches one of these
#                     shell patterns (debugging; e.g. 'p2p-Lrdma-Csoft-*')
set -euo pipefail

# The one place the kernel ABI is pinned. Image, headers and linux-source-6.1
# must be the same Debian upload (checked below).
KABI=6.1.0-56-amd64

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build/default}" 2>/dev/null && pwd) || {
  echo "FAIL: build directory ${1:-$root/build/default} does not exist (build the default preset first)"
  exit 1
}
out=${SDPPM_VM_OUT:-$build/rdma-vm}
vm_timeout=${SDPPM_VM_TIMEOUT:-420}
quick=${SDPPM_VM_QUICK:-}
t_start=$(date +%s)

say() { echo "rdma-vm: $*"; }
skip() { echo "SKIP: rdma VM lab: $*"; exit 77; }
fail() { echo "FAIL: rdma VM lab: $*"; exit 1; }

# --- packages ------------------------------------------------------------------
need_pkgs=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_cmd qemu-system-x86_64 || need_pkgs+=(qemu-system-x86)
[[ -x /bin/busybox ]] && /bin/busybox --list 2>/dev/null | grep -qx poweroff &&
  file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need_pkgs+=(busybox-static)
have_cmd depmod || need_pkgs+=(kmod)
have_cmd tshark || need_pkgs+=(tshark)
have_cmd cpio || need_pkgs+=(cpio)
have_cmd xz || need_pkgs+=(xz-utils)
have_cmd rdma || need_pkgs+=(iproute2)
have_cmd make || need_pkgs+=(make)
have_cmd gcc || need_pkgs+=(gcc)
have_cmd file || need_pkgs+=(file)
[[ -e /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so ]] || need_pkgs+=(ibverbs-providers)
have_cmd rping || need_pkgs+=(rdmacm-utils)
have_cmd ibv_devinfo || need_pkgs+=(ibverbs-utils)
have_cmd tcpdump || need_pkgs+=(tcpdump)
[[ -d /usr/src/linux-headers-$KABI ]] || need_pkgs+=("linux-headers-$KABI")
[[ -e /usr/src/linux-source-6.1.tar.xz ]] || need_pkgs+=(linux-source-6.1)

apt_updated=""
apt_update() {
  [[ -n $apt_updated ]] && return 0
  apt_updated=1
  say "apt-get update"
  timeout 300 apt-get update -qq >/dev/null 2>&1 || skip "apt-get update failed (no package archive reachable)"
}
if ((${#need_pkgs[@]})); then
  [[ $(id -u) == 0 ]] || skip "missing ${need_pkgs[*]} and not root to install them"
  have_cmd apt-get || skip "missing ${need_pkgs[*]} and no apt-get"
  apt_update
fi
# The pinned ABI must be in the archive; say so clearly when it is gone.
kver=""
pinned_version() {
  { apt-cache show --no-all-versions "linux-image-$KABI" 2>/dev/null || true; } | awk '/^Version:/{print $2; exit}'
}
if [[ ${#need_pkgs[@]} -gt 0 ]] || ! dpkg-query -W "linux-headers-$KABI" >/dev/null 2>&1; then
  [[ $(id -u) == 0 ]] || skip "linux-headers-$KABI not installed and not root"
  apt_update
  kver=$(pinned_version)
  if [[ -z $kver ]]; then
    avail=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null | awk '{print $1}' | sort -V | tail -3 | tr '\n' ' ' || true)
    fail "the pinned kernel ABI $KABI (tests/rdma-vm/run.sh, KABI=) is not in the configured archive; available: ${avail:-none}. Move the pin to one of them."
  fi
  say "installing ${need_pkgs[*]} (kernel $kver)"
  pkgs=()
  for p in "${need_pkgs[@]}"; do
    case $p in
      linux-source-6.1) pkgs+=("linux-source-6.1=$kver") ;;
      *) pkgs+=("$p") ;;
    esac
  done
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >"${TMPDIR:-/tmp}/sdppm-rdma-vm-apt.log" 2>&1 ||
    fail "apt-get install ${pkgs[*]} failed (see ${TMPDIR:-/tmp}/sdppm-rdma-vm-apt.log)"
fi
[[ -n $kver ]] || kver=$(dpkg-query -W -f='${Version}' "linux-headers-$KABI" 2>/dev/null || true)
srcver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || true)
if [[ -n $kver && $kver != "$srcver" && $(id -u) == 0 ]]; then
  # Another upload of linux-source-6.1 is installed: siw must come from ours.
  apt_update
  say "installing linux-source-6.1=$kver (had ${srcver:-none})"
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends --allow-downgrades \
    "linux-source-6.1=$kver" >"${TMPDIR:-/tmp}/sdppm-rdma-vm-apt.log" 2>&1 ||
    fail "apt-get install linux-source-6.1=$kver failed (see ${TMPDIR:-/tmp}/sdppm-rdma-vm-apt.log)"
  srcver=$kver
fi
[[ -n $kver && $kver == "$srcver" ]] ||
  fail "linux-source-6.1 ($srcver) is not the upload of linux-headers-$KABI ($kver): run apt-get install linux-source-6.1=$kver"

# --- cache: kernel image and siw modules, keyed by ABI and these scripts --------------
# The cache holds only the kernel image and the siw builds: keyed by the
# ABI, its Debian version and siw.sh.
key=$(sha256sum <"$here/siw.sh" | cut -c1-12)
cache_root=${SDPPM_VM_CACHE:-/var/cache/sdppm-rdma-vm}
if ! mkdir -p "$cache_root" 2>/dev/null || [[ ! -w $cache_root ]]; then
  cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/sdppm-rdma-vm
  mkdir -p "$cache_root"
fi
cache=$cache_root/$KABI-$kver-$key
if [[ ! -e $cache/ok ]]; then
  say "building the cache $cache"
  tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (
    cd "$tmp"
    [[ $(id -u) != 0 ]] || apt_update
    timeout 600 apt-get download -qq "linux-image-$KABI=$kver" >/dev/null 2>&1 ||
      { echo "FAIL: rdma VM lab: cannot download linux-image-$KABI=$kver from the archive"; exit 1; }
    dpkg-deb -x linux-image-"$KABI"_*.deb image
    rm -f linux-image-"$KABI"_*.deb
  ) || exit $?
  ( apt_updated=1; cd "$tmp" && bash "$here/siw.sh" "$KABI" "$tmp/siw" ) || fail "building siw failed"
  touch "$tmp/ok"
  rm -rf "$cache"
  mv "$tmp" "$cache"
  trap - EXIT
  # Older keys of this ABI are stale.
  find "$cache_root" -maxdepth 1 -name "$KABI-*" ! -name "$(basename "$cache")" -exec rm -rf {} + 2>/dev/null || true
fi
say "cache $cache ($(($(date +%s) - t_start)) s so far)"

# --- initramfs -------------------------------------------------------------------
rm -rf "$out"
mkdir -p "$out"
rd=$out/initramfs
mkdir -p "$rd"/{bin,sbin,etc,proc,sys,dev,tmp,lib,lib64,usr/lib/x86_64-linux-gnu/libibverbs,etc/libibverbs.d,share}
cp /bin/busybox "$rd/bin/busybox"
mods=$cache/image/lib/modules/$KABI
mkdir -p "$rd/lib/modules/$KABI"
for m in kernel/drivers/infiniband/core kernel/drivers/virtio kernel/drivers/net/virtio_net.ko \
  kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/lib/libcrc32c.ko \
  kernel/crypto/crc32c_generic.ko kernel/crypto/crc32_generic.ko kernel/fs/configfs \
  kernel/net/ipv4/udp_tunnel.ko kernel/net/ipv6/ip6_udp_tunnel.ko kernel/net/9p kernel/fs/9p \
  kernel/fs/netfs kernel/fs/fscache; do
  if [[ -e $mods/$m ]]; then
    mkdir -p "$rd/lib/modules/$KABI/$(dirname "$m")"
    cp -r "$mods/$m" "$rd/lib/modules/$KABI/$(dirname "$m")/"
  fi
done
cp "$mods/modules.order" "$mods/modules.builtin" "$mods/modules.builtin.modinfo" "$rd/lib/modules/$KABI/" 2>/dev/null || true
depmod -b "$rd" "$KABI"
mkdir -p "$rd/lib/siw"
cp "$cache/siw/"*.ko "$rd/lib/siw/"
# The project's binaries at their build paths (tests find helpers there).
bins=(sdp_rdma_test sdp-cat sdp-perf sdp_provider_integration_test sdp-pmd)
mkdir -p "$rd$build/bin"
for b in "${bins[@]}"; do
  [[ -x $build/bin/$b ]] || fail "$build/bin/$b is not built (build the default preset first)"
  cp "$build/bin/$b" "$rd$build/bin/"
done
extra=(/usr/bin/rdma /usr/bin/rping /usr/bin/ibv_devinfo /usr/bin/tcpdump /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so)
for x in "${extra[@]}"; do
  [[ -e $x ]] && cp -L "$x" "$rd$x" 2>/dev/null || { mkdir -p "$rd$(dirname "$x")"; cp -L "$x" "$rd$x" 2>/dev/null || true; }
done
cp /etc/libibverbs.d/siw.driver "$rd/etc/libibverbs.d/"
# Every library they need, at the same paths.
for f in "${bins[@]/#/$build/bin/}" "${extra[@]}"; do
  [[ -e $f ]] || continue
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/lib/{print $1}'
done | sort -u | while read -r lib; do
  mkdir -p "$rd$(dirname "$lib")"
  cp -L "$lib" "$rd$lib"
done
cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$rd/lib/x86_64-linux-gnu/" # dlopen()ed by unwinding
printf 'root:x:0:0:root:/:/bin/sh\n' >"$rd/etc/passwd"  # tcpdump -Z root looks it up
printf 'root:x:0:\n' >"$rd/etc/group"
cp "$here/guest.sh" "$rd/guest.sh"
cat >"$rd/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:$build/bin
export KABI=$KABI BUILD=$build QUICK=$quick ONLY='${SDPPM_VM_ONLY:-*}'
exec sh /guest.sh
EOF
chmod +x "$rd/init"
(cd "$rd" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/initrd.gz"
rm -rf "$rd"
say "initramfs $(du -h "$out/initrd.gz" | cut -f1) ($(($(date +%s) - t_start)) s so far)"

# --- host side of the cross runs ------------------------------------------------------
mkdir -p "$out/share"
# Two free TCP ports on the host's loopback (another test may hold one).
free_port() { # LOW: a port in [LOW, LOW+2000) nobody listens on
  local p i
  for ((i = 0; i < 50; i++)); do
    p=$(($1 + RANDOM % 2000))
    ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
  echo "$p"
}
host_port_in=$(free_port 17000)  # host soft listener, the VM's siw client connects
host_fwd_port=$(free_port 19000) # hostfwd to the VM's rdma listener
cross_size=$((3 * 1024 * 1024 + 17))
head -c "$cross_size" /dev/urandom >"$out/host-to-vm.bin"
echo "$host_port_in" >"$out/share/host_port"
sdpcat=$build/bin/sdp-cat

# --- boot ------------------------------------------------------------------------------
say "booting (TCG, bound ${vm_timeout} s)"
console=$out/console.log
: >"$console"
timeout --kill-after=10 "$vm_timeout" qemu-system-x86_64 -machine q35 -cpu max -accel tcg -m 2048 -smp 2 \
  -kernel "$cache/image/boot/vmlinuz-$KABI" -initrd "$out/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 oops=panic softlockup_panic=1 net.ifnames=0" \
  -display none -serial "file:$console" -monitor none -no-reboot \
  -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$host_fwd_port-:7300" \
  -device virtio-net-pci,netdev=n0 \
  -object "filter-dump,id=f0,netdev=n0,file=$out/vm-nic.pcap" \
  -virtfs "local,path=$out/share,mount_tag=out,security_model=none,id=out" &
qemu_pid=$!
cleanup() { kill "$qemu_pid" 2>/dev/null || true; [[ -n ${lpid:-} ]] && kill "$lpid" 2>/dev/null || true; }
trap cleanup EXIT

# Waits (bounded) for a console marker; prints the line.
wait_marker() {
  local pat=$1 secs=$2 i
  for ((i = 0; i < secs * 5; i++)); do
    if grep -m1 -a -- "$pat" "$console" 2>/dev/null; then return 0; fi
    kill -0 "$qemu_pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# VM -> host: a soft listener here; the VM's rdma client reaches it as 10.0.2.2.
timeout 240 "$sdpcat" --provider soft -l --bind 127.0.0.1 "$host_port_in" </dev/null >"$out/vm-to-host.out" 2>"$out/host-listener.err" &
lpid=$!
# host -> VM: once the VM's rdma listener is up, the host's soft client sends.
cross_status=""
if wait_marker '^@@READY xfwd' "$((vm_timeout - 20))" >/dev/null; then
  if timeout 120 "$sdpcat" --provider soft --sdp 127.0.0.1 "$host_fwd_port" <"$out/host-to-vm.bin" >/dev/null 2>"$out/host-client.err"; then
    cross_status="host-client-ok"
  else
    cross_status="host-client-failed: $(tail -1 "$out/host-client.err")"
  fi
else
  cross_status="the VM never got its listener up"
fi
wait "$qemu_pid" || qemu_rc=$?
trap - EXIT
kill "$lpid" 2>/dev/null || true
wait "$lpid" 2>/dev/null || true
t_vm=$(($(date +%s) - t_start))
say "VM done after ${t_vm} s (qemu rc ${qemu_rc:-0})"

# --- verdict -----------------------------------------------------------------------------
tr -d '\r' <"$console" >"$console.txt"
bad=0
check() { # name ok detail
  if [[ $2 == ok ]]; then echo "PASS $1 ${3:-}"; else echo "FAIL $1 ${3:-}"; bad=1; fi
}
{
  if grep -a -E 'Oops|BUG:|Kernel panic|general protection fault|WARNING: CPU|Call Trace' "$console.txt" >/dev/null; then
    # Where it died: a BUG whose RIP is in iw_cm or siw is the known siw 6.1
    # event-ordering bug (docs/rdma.md, "The VM lab"); anything else is not.
    if grep -a -E '^\[ *[0-9.]+\] RIP: .*\[(iw_cm|siw)\]' "$console.txt" >/dev/null &&
      ! grep -a -E '^\[ *[0-9.]+\] RIP: ' "$console.txt" | grep -a -v -E '\[(iw_cm|siw)\]' >/dev/null; then
      kernel_known=1
    fi
    check kernel bad "oops/BUG/panic/warning in the console (see $console)"
  else
    check kernel ok "no oops, BUG, panic or warning"
  fi
  grep -a -q '^@@DONE' "$console.txt" && check guest ok "ran to the end" ||
    check guest bad "the guest did not finish (timeout ${vm_timeout} s or crash; see $console)"
  grep -a '^@@RESULT ' "$console.txt" | while read -r _ name verdict detail; do
    echo "$verdict $name $detail"
  done || true
  # A run that started and never reported (the guest hung or died in it).
  last=$(grep -a '^@@START ' "$console.txt" | tail -1 | cut -d' ' -f2 || true)
  if [[ -n $last ]] && ! grep -a -q "^@@RESULT $last " "$console.txt"; then
    check "$last" bad "started and never finished"
  fi
  # Cross runs: compare bytes.
  want=$(sha256sum <"$out/host-to-vm.bin" | cut -d' ' -f1)
  got=$(grep -a '^@@SHA xfwd ' "$console.txt" | awk '{print $3}' | head -1 || true)
  [[ $cross_status == host-client-ok && $got == "$want" ]] &&
    check cross-host-soft-client-to-vm-siw ok "$cross_size B sha256 match" ||
    check cross-host-soft-client-to-vm-siw bad "$cross_status; sha256 want $want got ${got:-none}"
  want=$(grep -a '^@@SHA xback ' "$console.txt" | awk '{print $3}' | head -1 || true)
  got=$(sha256sum <"$out/vm-to-host.out" 2>/dev/null | cut -d' ' -f1 || true)
  [[ -n $want && $got == "$want" ]] &&
    check cross-vm-siw-client-to-host-soft ok "$(stat -c %s "$out/vm-to-host.out") B sha256 match" ||
    check cross-vm-siw-client-to-host-soft bad "sha256 want ${want:-none} got $got ($(tail -1 "$out/host-listener.err" 2>/dev/null))"
} >"$out/results.txt"
grep -q '^FAIL' "$out/results.txt" && bad=1

# Captures: the VM's NIC (cross runs) and the guest's own (lo, in-VM runs).
# The MPA dissector is heuristic (no Decode-As): it needs each connection's
# MPA Request/Reply, which every capture here has. Out-of-order reassembly
# as in tests/integration/sdp_tshark; the two other iWARP heuristics would
# misread Send payloads. A bad CRC only shows in the -V text.
tsh_opts=(-n -o tcp.try_heuristic_first:TRUE -o tcp.desegment_tcp_streams:TRUE
  -o tcp.reassemble_out_of_order:TRUE
  --disable-heuristic rpcrdma_iwarp --disable-heuristic smb_direct_iwarp)
tsh() { # pcap label
  local pcap=$1 label=$2
  if [[ ! -s $pcap ]]; then echo "FAIL pcap-$label no capture ($pcap)"; return; fi
  local v=$out/$label.tshark.txt frames good badcrc malformed conns
  if ! timeout 600 tshark -r "$pcap" "${tsh_opts[@]}" -V >"$v" 2>"$out/$label.tshark.err"; then
    echo "FAIL pcap-$label tshark failed: $(tail -1 "$out/$label.tshark.err")"
    return
  fi
  frames=$(grep -c '^iWARP Marker Protocol data unit Aligned framing' "$v" || true)
  conns=$(grep -c '^    Request frame header' "$v" || true)
  good=$(grep -c 'Good CRC32' "$v" || true)
  badcrc=$(grep -c 'Bad CRC32' "$v" || true)
  malformed=$(grep -ci 'malformed' "$v" || true)
  # tshark can call a good FPDU bad when qemu's user networking (a TCP
  # proxy) cut its segments anew: walk those streams' reassembled bytes
  # with mpa_crc.py; only a CRC bad there too counts.
  local note="" s streams
  if ((badcrc > 0)); then
    streams=$(awk '/\[Stream index: [0-9]+\]/ {gsub(/[^0-9]/, ""); s = $0} /Bad CRC32/ {print s}' "$v" | sort -u)
    note=" (tshark: $badcrc Bad CRC32 in streams $(echo $streams | tr ' ' ','); rechecked on the reassembled streams:"
    for s in $streams; do
      if tshark -r "$pcap" -q -z "follow,tcp,raw,$s" 2>/dev/null | python3 "$here/mpa_crc.py" >"$out/$label.stream$s.crc"; then
        note+=" stream $s all good;"
        badcrc=$((badcrc - $(awk -v s="$s" '/\[Stream index: [0-9]+\]/ {gsub(/[^0-9]/, ""); x = $0} /Bad CRC32/ && x == s {n++} END {print n + 0}' "$v")))
      else
        note+=" stream $s BAD ($(tr '\n' ' ' <"$out/$label.stream$s.crc"));"
      fi
    done
    note+=")"
  fi
  # Keep the report small: the counts and the protocol hierarchy.
  tshark -r "$pcap" "${tsh_opts[@]}" -q -z io,phs >"$out/$label.phs" 2>/dev/null || true
  gzip -f "$v"
  if ((frames > 0 && badcrc == 0 && malformed == 0)); then
    echo "PASS pcap-$label $frames MPA frames in $conns connections, $good with a good CRC32 (the others: MPA Request/Reply, siw-to-siw FPDUs without CRC), 0 bad, nothing malformed$note"
  else
    echo "FAIL pcap-$label $frames MPA frames in $conns connections, $good good CRC32, $badcrc bad CRC32, $malformed malformed (see $v.gz)$note"
  fi
}
{
  tsh "$out/vm-nic.pcap" nic
  for v in stock p2p; do
    tsh "$out/share/$v.pcap" "guest-$v"
  done
} >>"$out/results.txt"
grep -q '^FAIL' "$out/results.txt" && bad=1
cat "$out/results.txt"
n_pass=$(grep -c '^PASS' "$out/results.txt" || true)
n_fail=$(grep -c '^FAIL' "$out/results.txt" || true)
n_known=$(grep -c '^KNOWN' "$out/results.txt" || true)
((n_known == 0)) || say "$n_known known stock-siw startup race(s) (KNOWN lines; docs/rdma.md, 'Stock siw')"
say "total ${t_vm}-$(($(date +%s) - t_start)) s wall; results in $out"
echo "rdma-vm: $n_pass passed, $n_fail failed"
# The failures once more, last: a CI log shows the head and the tail of a
# long run, and the FAIL lines sit in the middle of the list. Each with the
# last lines of the ends' standard error that the guest kept (/out).
if ((n_fail > 0)); then
  echo "rdma-vm: what failed:"
  grep '^FAIL' "$out/results.txt" | while read -r _ name _; do
    grep -m1 "^FAIL $name " "$out/results.txt"
    errs=("$out/share/$name".{client,listener}.err)
    [[ $name == cross-* ]] && errs=("$out"/host-{client,listener}.err)
    for f in "${errs[@]}"; do
      if [[ -s $f ]]; then tail -3 "$f" | sed "s|^|  ${f##*/}: |"; fi
    done
  done
fi
# Exit 3: the VM went silent (no @@DONE) without an oops, BUG or warning in
# its console: a stall of the VM itself, told apart so that ctest.sh can
# run the lab once more (and say so). Anything else that failed is 1.
# Exit 3 too for a panic in iw_cm/siw (kernel_known), the siw 6.1 bug seen
# once in CI: the kernel is not ours, the run is retried once, loudly.
if ((bad)) && grep -q '^FAIL guest' "$out/results.txt" &&
  { grep -q '^PASS kernel' "$out/results.txt" || ((${kernel_known:-0})); }; then
  ((${kernel_known:-0})) && say "KNOWN: kernel BUG in iw_cm/siw (docs/rdma.md, 'The VM lab')"
  exit 3
fi
exit $bad
