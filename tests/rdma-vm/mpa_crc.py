#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Second opinion on MPA CRCs (RFC 5044 4.1, 6.1): reads one TCP stream as
# printed by `tshark -q -z follow,tcp,raw,N`, walks each direction from its
# MPA Request/Reply through every FPDU (ULPDU_Length, ULPDU, pad, CRC) and
# checks each CRC32c. tshark's MPA dissector can report a bad CRC for an
# FPDU whose TCP segments were cut anew on the way (qemu's user networking
# is a TCP proxy); walking the reassembled byte stream cannot.
# Prints one line per direction; exits 1 if any FPDU has a bad CRC or the
# stream cannot be walked.
import sys

POLY = 0x82F63B78  # CRC32c, reflected
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def read_follow(text):
    """Node 0's bytes (lines without a tab) and node 1's (tab-indented)."""
    a, b = bytearray(), bytearray()
    started = False
    for line in text.split("\n"):
        if line.startswith("Node 1:"):
            started = True
            continue
        if not started or line.startswith("=") or not line.strip():
            continue
        (b if line.startswith("\t") else a).extend(bytes.fromhex(line.strip()))
    return bytes(a), bytes(b)


def frame_header(buf):
    """(flags byte, bytes taken) of the MPA Request/Reply at buf[0]."""
    if len(buf) < 20 or not buf.startswith(b"MPA ID Re"):
        return None
    return buf[16], 20 + int.from_bytes(buf[18:20], "big")


def walk(buf, crc):
    """(good, bad, unchecked, trailing bytes) for the FPDUs after the header."""
    hdr = frame_header(buf)
    good = bad = unchecked = 0
    off = hdr[1]
    while off + 2 <= len(buf):
        n = 2 + int.from_bytes(buf[off:off + 2], "big")
        end = off + n + (-n) % 4
        tail = 4 if crc else 0
        if end + tail > len(buf):
            break
        if crc:
            if crc32c(buf[off:end]) == int.from_bytes(buf[end:end + 4], "little"):
                good += 1
            else:
                bad += 1
        else:
            unchecked += 1
        off = end + tail
    return good, bad, unchecked, len(buf) - off


def main():
    a, b = read_follow(sys.stdin.read())
    ha, hb = frame_header(a), frame_header(b)
    if ha is None or hb is None:
        print("mpa_crc: the stream does not start with an MPA Request and Reply")
        return 1
    if (ha[0] | hb[0]) & 0x80:
        print("mpa_crc: markers in use: not checked")
        return 1
    # The Reply's C bit says whether CRCs are used (RFC 5044 7.1.2).
    reply, request = (a, b) if a.startswith(b"MPA ID Rep") else (b, a)
    crc = bool(frame_header(reply)[0] & 0x40)
    rc = 0
    for name, buf in (("initiator", request), ("responder", reply)):
        good, bad, unchecked, trailing = walk(buf, crc)
        print(f"mpa_crc: {name}: {good} good, {bad} bad, {unchecked} without CRC, "
              f"{trailing} trailing bytes")
        if bad:
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
