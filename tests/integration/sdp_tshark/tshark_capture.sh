#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Capture a real SDP session on loopback and require tshark's own dissectors
# (iwarp_mpa, iwarp_ddp_rdmap) to decode all of it:
#   - the MPA Request and Reply are decoded (first data segment each way);
#   - every later data segment decodes as iwarp_mpa + iwarp_ddp_rdmap, or is
#     the head of an FPDU that tshark reassembles in a later segment
#     (tcp.reassembled_in): loopback TCP segments do not align with FPDUs;
#   - byte accounting: per direction, MPA header + sum of FPDU sizes
#     (2 + ULPDU length + pad + CRC) == all TCP payload bytes, so no byte is
#     left undecoded;
#   - every FPDU has one RDMAP header, one "Good CRC32" each, no "Bad CRC32",
#     nothing malformed;
#   - enough Send messages carry at least the whole input client -> server;
#   - with MECHANISM zcopy: the server RDMA-Reads the client's buffers
#     (Read Zcopy, 9.2: Read Requests one way, Read Responses the other, the
#     final RdmaRdCompl as Send with SE and Invalidate) or the client
#     RDMA-Writes into buffers the server lent (Write Zcopy, 9.3: RDMA
#     Writes and the RdmaWrCompl as Send with SE and Invalidate, client to
#     server), and Sends, Read Responses and RDMA Writes carry the whole
#     input.
# usage: tshark_capture.sh SDP_CAT [bcopy|zcopy]
set -u
cat_bin=${1:?usage: tshark_capture.sh SDP_CAT [bcopy|zcopy]}
mech=${2:-bcopy}
size=$((384 * 1024))

skip() { echo "SKIP: $*" >&2; exit 77; }
die() {
  echo "FAIL: $*" >&2
  # For the log: TCP sequence numbers and tshark's analysis of every data
  # segment (out-of-order capture, gaps, retransmissions).
  if [ -n "${pcap:-}" ] && [ -s "$pcap" ]; then
    tshark -r "$pcap" -n -Y 'tcp.len > 0' -T fields -e frame.number -e tcp.srcport \
      -e tcp.seq -e tcp.len -e tcp.analysis.flags -e _ws.expert.message 2>/dev/null >&2 || true
  fi
  exit 1
}

[ "${EUID:-$(id -u)}" -eq 0 ] || skip "not root: cannot capture on lo"
command -v tshark >/dev/null 2>&1 || skip "tshark not installed"
[ -x "$cat_bin" ] || die "sdp-cat not found: $cat_bin"

work=$(mktemp -d "${TMPDIR:-/tmp}/sdp_tshark.XXXXXX") || die "mktemp"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -KILL "$p" 2>/dev/null
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# wait_exit PID TENTHS: wait up to TENTHS/10 s for PID to end; 0 when it did.
wait_exit() {
  local i
  for ((i = 0; i < $2; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$1" 2>/dev/null
}
# wait_grep FILE PATTERN PID TENTHS: wait until FILE matches PATTERN (0), or
# PID ends / time runs out (1).
wait_grep() {
  local i
  for ((i = 0; i < $4; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "$2" "$1" 2>/dev/null
}
pick_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + RANDOM % 20000))
}

head -c "$size" /dev/urandom > "$work/in" || die "cannot make input"
pcap=$work/sdp.pcapng

# Start capture + listener; retry with another port if the port was taken.
listening=0
for attempt in 1 2 3; do
  port=$(pick_port)
  rm -f "$pcap" "$work/tshark.err" "$work/listen.err"
  tshark -n -i lo -B 16 -f "tcp port $port" -w "$pcap" -q 2> "$work/tshark.err" &
  tshark_pid=$!
  pids+=("$tshark_pid")
  # "Capture started" comes once dumpcap writes the file with the filter
  # active; "Capturing on" comes earlier, and under load a fast session
  # could start before the filter did (seen in the preload tests).
  if ! wait_grep "$work/tshark.err" "Capture started" "$tshark_pid" 100; then
    cat "$work/tshark.err" >&2
    skip "tshark could not capture on lo (capture not permitted?)"
  fi
  "$cat_bin" -v --mechanism "$mech" -l --bind 127.0.0.1 "$port" < /dev/null > "$work/out" 2> "$work/listen.err" &
  listen_pid=$!
  pids+=("$listen_pid")
  if wait_grep "$work/listen.err" "listening on" "$listen_pid" 100; then
    listening=1
    break
  fi
  cat "$work/listen.err" >&2
  kill -KILL "$listen_pid" "$tshark_pid" 2>/dev/null
  wait "$listen_pid" "$tshark_pid" 2>/dev/null
done
[ "$listening" -eq 1 ] || die "sdp-cat -l never listened"
echo "port $port, $size bytes, $mech"

timeout 60 "$cat_bin" -v --mechanism "$mech" --sdp 127.0.0.1 "$port" < "$work/in" > "$work/client.out" \
  2> "$work/client.err"
crc=$?
cat "$work/client.err"
[ "$crc" -eq 0 ] || die "sdp-cat --sdp exited $crc"
wait_exit "$listen_pid" 300 || die "sdp-cat -l did not end"
wait "$listen_pid"
lrc=$?
cat "$work/listen.err"
[ "$lrc" -eq 0 ] || die "sdp-cat -l exited $lrc"
cmp "$work/in" "$work/out" || die "data received differs from data sent"
grep -q "connected over SDP" "$work/client.err" || die "client did not report an SDP connection"

# Let dumpcap write the last packets, then stop it (SIGINT flushes).
sleep 0.5
kill -INT "$tshark_pid" 2>/dev/null
wait_exit "$tshark_pid" 100 || die "tshark did not stop on SIGINT"
wait "$tshark_pid"
grep -v "dangerous" "$work/tshark.err" | grep -i "captured\|dropped"
[ -s "$pcap" ] || die "empty capture"

# On lo with two CPUs, a segment sent from one CPU can be captured before an
# earlier one sent from the other; tshark then sees a gap and, by default,
# gives up reassembling the FPDU across it. Let it put them back in order.
opts=(-n -o tcp.try_heuristic_first:TRUE -o tcp.desegment_tcp_streams:TRUE
      -o tcp.reassemble_out_of_order:TRUE
      --disable-heuristic rpcrdma_iwarp --disable-heuristic smb_direct_iwarp)
tshark -r "$pcap" "${opts[@]}" -V > "$work/v.txt" 2> "$work/v.err" || die "tshark -r -V failed"
# Two passes so tcp.reassembled_in is known on the segments before.
tshark -2 -r "$pcap" "${opts[@]}" -Y 'tcp.len > 0' -T fields -E occurrence=a -E aggregator=, \
  -e frame.number -e tcp.srcport -e tcp.len -e frame.protocols -e tcp.reassembled_in \
  -e iwarp_mpa.key.req -e iwarp_mpa.key.rep -e iwarp_mpa.pdlength -e iwarp_mpa.crc_flag \
  -e iwarp_mpa.ulpdulength -e iwarp_rdma.opcode > "$work/f.txt" 2> "$work/f.err" \
  || die "tshark -r -T fields failed"

# TCP retransmissions (a loaded machine sees tail-loss-probe and RTO
# retransmits even on loopback) repeat bytes already counted and are not
# dissected again by tshark: leave them out of the checks below.
tshark -2 -r "$pcap" "${opts[@]}" -Y 'tcp.len > 0 && (tcp.analysis.retransmission ||
  tcp.analysis.fast_retransmission || tcp.analysis.spurious_retransmission)' \
  -T fields -e frame.number > "$work/rexmit.txt" 2> "$work/rexmit.err" \
  || die "tshark -r (retransmissions) failed"
nrexmit=$(grep -c . "$work/rexmit.txt")
[ "$nrexmit" -eq 0 ] || echo "note: $nrexmit TCP retransmission(s) in the capture, not counted"

good=$(grep -c "Good CRC32" "$work/v.txt")
bad=$(grep -c "Bad CRC32" "$work/v.txt")
malformed=$(grep -ci "malformed" "$work/v.txt")
badlen=$(grep -ci "bad length" "$work/v.txt")

awk -F'\t' -v port="$port" -v size="$size" -v mech="$mech" -v good="$good" -v bad="$bad" \
    -v malformed="$malformed" -v badlen="$badlen" -v rexfile="$work/rexmit.txt" '
function err(m) { print "FAIL: " m > "/dev/stderr"; fails++ }
# "0x05" or "5" -> 5 (portable: no strtonum in mawk).
function hex(s,   v, i) {
  s = tolower(s); if (s !~ /^0x/) return s + 0
  v = 0
  for (i = 3; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
  return v
}
BEGIN { while ((getline l < rexfile) > 0) rexmit[l] = 1 }
($1 in rexmit) { next }
{
  frame = $1; src = $2; len = $3; protos = $4; rin = $5
  req = $6; rep = $7; pdlen = $8; crcf = $9; nul = split($10, ul, ","); nop = split($11, op, ",")
  dir = (src == port) ? "s2c" : "c2s"
  first = !(dir in bytes)
  bytes[dir] += len
  if (first) {
    # The first data segment each way carries the MPA Request / Reply.
    if (dir == "c2s" && req == "") err("frame " frame ": first client segment is not an MPA Request")
    if (dir == "s2c" && rep == "") err("frame " frame ": first server segment is not an MPA Reply")
    if (req != "") { nreq++; if (crcf ~ /^(1|True)$/) crc = 1 }
    if (rep != "") { nrep++; if (crcf ~ /^(1|True)$/) crc = 1 }
    fpdu[dir] += 20 + pdlen
  } else {
    if (req != "" || rep != "") err("frame " frame ": MPA Request/Reply after the exchange")
    if (protos !~ /:iwarp_mpa:iwarp_ddp_rdmap/ && rin == "")
      err("frame " frame ": data segment not decoded as iwarp_mpa/iwarp_ddp_rdmap (" protos ")")
  }
  if (protos ~ /:tcp:data/) err("frame " frame ": undissected TCP payload (" protos ")")
  if (nul != nop) err("frame " frame ": " nul " FPDUs but " nop " RDMAP headers")
  for (i = 1; i <= nul; i++) {
    l = ul[i] + 0
    fpdus++
    fl[dir] += 2 + l + (4 - (2 + l) % 4) % 4
    nf[dir]++
    o = op[i]
    o = hex(o)
    ops[o]++
    # Send, with Invalidate, with SE, with SE and Invalidate (RFC 5040 4.3).
    if (o >= 3 && o <= 6) {
      sends++
      if (dir == "c2s") { csends++; cpay += l - 18 }
    }
    if (o == 2) {
      rresp[dir]++
      if (dir == "c2s") rpay += l - 14  # tagged DDP header
    }
    if (o == 0 && dir == "c2s") wpay += l - 14  # RDMA Write (tagged)
    if (o == 1) rreq[dir]++
    if (o == 6) seinv[dir]++
  }
}
END {
  if (nreq != 1) err(nreq + 0 " MPA Requests decoded (want 1)")
  if (nrep != 1) err(nrep + 0 " MPA Replies decoded (want 1)")
  if (!crc) err("CRC not negotiated in the MPA exchange")
  for (d in bytes) {
    total = fpdu[d] + fl[d] + (crc ? 4 * nf[d] : 0)
    printf "%s: %d TCP payload bytes, %d FPDUs, MPA header + FPDUs = %d bytes\n", d, bytes[d], nf[d], total
    if (total != bytes[d]) err(d ": " bytes[d] - total " TCP payload bytes not decoded as MPA/FPDUs")
  }
  printf "FPDUs %d, Good CRC32 %d, Bad CRC32 %d, malformed %d, bad length %d\n", fpdus, good, bad, malformed, badlen
  for (o in ops) printf "  RDMAP opcode %s: %d\n", o, ops[o]
  printf "Sends: %d (client->server %d carrying %d bytes of DDP payload; input %d)\n", sends, csends, cpay, size
  printf "Read Responses client->server: %d carrying %d bytes\n", rresp["c2s"], rpay
  printf "RDMA Writes client->server carrying %d bytes\n", wpay
  if (bad != 0) err("Bad CRC32 in tshark -V")
  if (malformed != 0) err("Malformed in tshark -V")
  if (badlen != 0) err("Bad length in tshark -V")
  if (crc && good != fpdus) err(good " Good CRC32 for " fpdus " FPDUs")
  if (mech == "zcopy") {
    # Which one ran depends on who was first: the writer (SrcAvail) or the
    # reader (SinkAvail); at least one of them, each complete.
    if (rreq["s2c"] == 0 && wpay == 0) err("neither RDMA Read Requests from the server nor RDMA Writes from the client")
    if (rreq["s2c"] > 0 && rresp["c2s"] == 0) err("no RDMA Read Response from the client (Read Zcopy)")
    if (rreq["s2c"] > 0 && seinv["s2c"] == 0) err("no Send with SE and Invalidate (final RdmaRdCompl)")
    if (wpay > 0 && seinv["c2s"] == 0) err("no Send with SE and Invalidate (RdmaWrCompl)")
    if (cpay + rpay + wpay < size) err("client Sends, Read Responses and RDMA Writes carry " cpay + rpay + wpay " bytes < input " size)
  } else {
    minsends = int((size + 65534) / 65535)
    if (csends < minsends) err(csends " client Sends, want at least " minsends)
    if (cpay < size) err("client Sends carry " cpay " bytes < input " size)
  }
  if (fails) exit 1
}' "$work/f.txt" || { echo "--- fields ---" >&2; head -50 "$work/f.txt" >&2; die "decode check"; }
echo "PASS"
