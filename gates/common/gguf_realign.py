"""Re-write a GGUF file at another general.alignment, byte for byte otherwise: the
metadata values are copied verbatim (as the PyPI gguf package's GGUFReader locates
them) and the tensor data unchanged, packed at the new alignment. Used by
sh_misaligned.sh. Not a gate itself.

The data section is placed so that alignment 1 puts every tensor at an odd address
(tensor sizes are all even) and alignment 2 puts the F32 tensors (written first) at
2 mod 4: every type's data is then misaligned for its typed loads.

    python gguf_realign.py SRC DST ALIGNMENT"""
import struct
import sys

import numpy as np
import gguf

VT = gguf.GGUFValueType


def _raw(field):
    return b"".join(bytes(p.tobytes()) for p in field.parts)


def realign(src, dst, alignment):
    r = gguf.GGUFReader(src)
    raw = np.memmap(src, mode="r")
    kvs = [_raw(f) for name, f in r.fields.items()
           if not name.startswith("GGUF.") and name != "general.alignment"]

    def kv_str(key, val):
        k, v = key.encode(), val.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", VT.STRING, len(v)) + v

    kvs.append(struct.pack("<Q", 17) + b"general.alignment" + struct.pack("<II", VT.UINT32, alignment))
    # F32 first: at alignment 2 they then sit at 2 mod 4, before any other size shifts them
    ts = sorted(r.tensors, key=lambda t: t.tensor_type != gguf.GGMLQuantizationType.F32)
    offs, off = [], 0
    for t in ts:
        offs.append(off)
        off += -(-t.n_bytes // alignment) * alignment
    infos = b"".join(_raw(t.field)[:-8] + struct.pack("<Q", o) for t, o in zip(ts, offs))
    want = {1: 1, 2: 2}.get(alignment, 0)      # data_off mod 4
    for pad in range(8):                       # a padding string sets the data offset's residue
        head = struct.pack("<4sIQQ", b"GGUF", 3, len(ts), len(kvs) + 1)
        meta = head + b"".join(kvs) + kv_str("test.realign_pad", "x" * pad) + infos
        data_off = -(-len(meta) // alignment) * alignment
        if data_off % 4 == want:
            break
    else:
        raise SystemExit("gguf_realign: no padding gives the wanted data offset")
    with open(dst, "wb") as f:
        f.write(meta)
        f.write(b"\0" * (data_off - len(meta)))
        for t, o in zip(ts, offs):
            assert f.tell() == data_off + o
            f.write(raw[t.data_offset:t.data_offset + t.n_bytes].tobytes())
            f.write(b"\0" * (-t.n_bytes % alignment))
    # the point of the file: data where the types' typed loads need better
    if alignment == 1:
        assert all((data_off + o) % 2 == 1 for o in offs), "a tensor landed on an even address"
    if alignment == 2 and any(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in ts):
        assert (data_off + offs[0]) % 4 == 2, "the first F32 tensor is 4-aligned"
    # read back with the independent reader: same tensors, same bytes
    back = gguf.GGUFReader(dst)
    assert back.alignment == alignment and back.data_offset == data_off
    by_name = {t.name: t for t in r.tensors}
    for t in back.tensors:
        s = by_name[t.name]
        assert t.n_bytes == s.n_bytes and bytes(raw[s.data_offset:s.data_offset + s.n_bytes]) == \
            bytes(np.memmap(dst, mode="r")[t.data_offset:t.data_offset + t.n_bytes])
    return data_off


if __name__ == "__main__":
    realign(sys.argv[1], sys.argv[2], int(sys.argv[3]))
