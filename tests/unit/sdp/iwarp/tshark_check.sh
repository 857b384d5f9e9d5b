#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Independent wire check: tshark's own MPA/DDP/RDMAP dissectors must decode
# every data segment of the soft provider's traffic as iwarp_mpa (+
# iwarp_ddp_rdmap for FPDUs), with no bad CRC and nothing malformed.
# usage: tshark_check.sh DUMP_TOOL WORKDIR
set -eu
dump=$1
work=$2
if ! command -v tshark >/dev/null 2>&1; then
  echo "tshark not installed: skipping" >&2
  exit 77
fi
mkdir -p "$work"
opts="-o tcp.try_heuristic_first:TRUE --disable-heuristic rpcrdma_iwarp --disable-heuristic smb_direct_iwarp"
fail=0

run_case() {
  name=$1; shift
  pcap="$work/$name.pcap"
  if ! segs=$("$dump" "$pcap" "$@" 2>"$work/$name.log"); then
    echo "FAIL: $name: dump tool failed" >&2
    cat "$work/$name.log" >&2
    fail=1
    return 0
  fi
  # shellcheck disable=SC2086
  tshark -n -r "$pcap" $opts -V > "$work/$name.txt" 2>/dev/null
  # shellcheck disable=SC2086
  tshark -n -r "$pcap" $opts -Y 'tcp.len > 0' -T fields -e frame.number -e frame.protocols \
    > "$work/$name.protos" 2>/dev/null
  total=$(wc -l < "$work/$name.protos")
  mpa=$(grep -c ':iwarp_mpa' "$work/$name.protos" || true)
  ddp=$(grep -c ':iwarp_mpa:iwarp_ddp_rdmap' "$work/$name.protos" || true)
  bad=$(grep -c 'Bad CRC32' "$work/$name.txt" || true)
  malformed=$(grep -ci 'malformed' "$work/$name.txt" || true)
  echo "$name: $segs segments, $total with data, $mpa iwarp_mpa, $ddp iwarp_ddp_rdmap, $bad bad CRC, $malformed malformed"
  if [ "$total" -ne "$segs" ] || [ "$mpa" -ne "$segs" ] || [ "$ddp" -ne $((segs - 2)) ] \
     || [ "$malformed" -ne 0 ]; then
    echo "FAIL: $name" >&2
    grep -v ':iwarp_mpa:iwarp_ddp_rdmap' "$work/$name.protos" | head >&2 || true
    fail=1
  fi
  return 0
}

expect_bad_crc() {
  if [ "$(grep -c 'Bad CRC32' "$work/$1.txt" || true)" -ne "$2" ]; then
    echo "FAIL: $1: expected $2 'Bad CRC32'" >&2
    fail=1
  fi
}

run_case plain
expect_bad_crc plain 0
run_case crc --crc
expect_bad_crc crc 0
run_case p2p_write --crc --p2p-write
expect_bad_crc p2p_write 0
run_case p2p_read --p2p-read
expect_bad_crc p2p_read 0
run_case terminate --crc --terminate
expect_bad_crc terminate 0
# Negative control: the oracle must notice one corrupted CRC.
run_case corrupt --crc --corrupt-crc
expect_bad_crc corrupt 1

# Field-level spot checks on the CRC case.
# shellcheck disable=SC2086
tshark -n -r "$work/crc.pcap" $opts -Y iwarp_rdma -T fields -e iwarp_rdma.opcode \
  2>/dev/null | sort | uniq -c > "$work/crc.opcodes"
cat "$work/crc.opcodes"
# shellcheck disable=SC2086
tshark -n -r "$work/terminate.pcap" $opts -Y 'iwarp_rdma.opcode == 7' -T fields \
  -e iwarp_rdma.term_layer -e iwarp_rdma.term_etype_ddp -e iwarp_rdma.term_errcode_ddp_tagged \
  > "$work/term.fields" 2>/dev/null
cat "$work/term.fields"
# Write to an unknown STag: layer DDP (1), Tagged Buffer (1), Invalid STag (0).
if ! grep -q "^0x01	0x01	0x00$" "$work/term.fields"; then
  echo "FAIL: Terminate not decoded as DDP / tagged buffer / invalid STag" >&2
  fail=1
fi
exit $fail
