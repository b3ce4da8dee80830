#!/usr/bin/env python3
"""Writes a copy of a GGUF file with its tensors' data sorted by tensor name, for benchmarks.

usage: scripts/reorder-gguf-tensors.py IN.gguf OUT.gguf

The header and metadata are copied as they are; only each tensor's data offset and the order
of the data change (blk.0.attn_k, blk.0.attn_norm, ..., blk.1..., blk.10..., as a checkpoint's
index lists names), so that the next tensor in the file is not the next one decode reads.
kvpack's own `make-model` writes them in the order decode reads them. Used to measure whether
the weight products' prefetches, which run on past a matrix into the bytes after it, depend
on that order (docs/performance-history.md, session 35). GGUF layout: the GGUF specification
in ggml's docs/gguf.md.
"""
import struct
import sys

SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self):
        n = self.take("<Q")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def skip_value(self, kind):
        if kind == STRING:
            self.string()
        elif kind == ARRAY:
            item_kind, n = self.take("<IQ")
            for _ in range(n):
                self.skip_value(item_kind)
        else:
            self.pos += SCALAR_BYTES[kind]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().split("\n\n")[1])
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    r = Reader(data)
    if r.take("<4s") != b"GGUF":
        sys.exit(f"{sys.argv[1]}: not a GGUF file")
    r.take("<I")  # version
    n_tensors, n_kv = r.take("<QQ")
    alignment = 32
    for _ in range(n_kv):
        key, kind = r.string(), r.take("<I")
        if key == b"general.alignment":
            alignment = struct.unpack_from("<I", data, r.pos)[0]
        r.skip_value(kind)
    metadata_end = r.pos
    tensors = []  # [name, dims bytes, type, offset]
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.take("<I")
        dims = data[r.pos:r.pos + 8 * n_dims]
        r.pos += 8 * n_dims
        kind, offset = r.take("<IQ")
        tensors.append([name, n_dims, dims, kind, offset])
    data_start = (r.pos + alignment - 1) // alignment * alignment

    # Each tensor's bytes run to the next tensor's offset (padding included).
    by_offset = sorted(tensors, key=lambda t: t[4])
    size = {}
    for i, t in enumerate(by_offset):
        end = by_offset[i + 1][4] if i + 1 < len(by_offset) else len(data) - data_start
        size[t[0]] = end - t[4]
    new_offset, at = {}, 0
    for t in sorted(tensors, key=lambda t: t[0]):
        new_offset[t[0]] = at
        at += (size[t[0]] + alignment - 1) // alignment * alignment

    out = bytearray(data[:metadata_end])
    for name, n_dims, dims, kind, _ in tensors:
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", n_dims) + dims
        out += struct.pack("<IQ", kind, new_offset[name])
    out += bytes(-len(out) % alignment)
    new_start = len(out)
    out += bytes(at)
    for name, _, _, _, offset in tensors:
        src = data_start + offset
        out[new_start + new_offset[name]:new_start + new_offset[name] + size[name]] = \
            data[src:src + size[name]]
    with open(sys.argv[2], "wb") as f:
        f.write(out)
    print(f"{sys.argv[2]}: {n_tensors} tensors, data sorted by name")


if __name__ == "__main__":
    main()
