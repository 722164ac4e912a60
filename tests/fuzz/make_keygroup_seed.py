#!/usr/bin/env python3
"""Turns a real key-group file (.kg) into a keygroup_fuzz seed.

The seed is the fuzz target's input format (see keygroup_fuzz.cc):
  u8 rangeStart, u8 nGroups, u8 wantedStart, u8 wantedEnd, u32le offset * nGroups, file
The offsets are recomputed by walking the file as key_group_format.h describes:
  "JHKG" u32le(version) varint(nStates) { bytes(name) u8(kind) }*  then per key group
  { varint(stateIndex+1) bytes(key) [bytes(userKey) if MapState] bytes(value) }* varint(0)

Usage: make_keygroup_seed.py FILE.kg RANGE_START N_GROUPS OUT [WANTED_START WANTED_END]
(RANGE_START/N_GROUPS as in the checkpoint's handle: `jobhost inspect` shows "0-127").
"""
import struct
import sys


def varint(b, i):
    shift = v = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def main():
    path, start, n, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    wanted = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (start, start + n - 1)
    b = open(path, "rb").read()
    assert b[:4] == b"JHKG", "not a key-group file"
    i = 8
    nstates, i = varint(b, i)
    kinds = []
    for _ in range(nstates):
        ln, i = varint(b, i)
        i += ln
        kinds.append(b[i])
        i += 1
    offsets = []
    for _ in range(n):
        offsets.append(i)
        while True:
            tag, i = varint(b, i)
            if tag == 0:
                break
            fields = 3 if kinds[tag - 1] == 2 else 2
            for _ in range(fields):
                ln, i = varint(b, i)
                i += ln
    assert i == len(b), f"{path}: {len(b) - i} trailing bytes after {n} key groups"
    with open(out, "wb") as f:
        f.write(bytes([start, n, wanted[0], wanted[1]]))
        f.write(b"".join(struct.pack("<I", o) for o in offsets))
        f.write(b)


if __name__ == "__main__":
    main()
