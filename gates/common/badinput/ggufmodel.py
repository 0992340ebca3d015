"""A GGUF file as plain Python data (header, key/values, tensor infos, data) that can be
parsed from bytes and written back with any field broken. The writer is deliberately
permissive (it writes whatever it is given) so mutations can produce invalid files; it
also returns the byte offset of every field so byte-level mutations can aim at them."""
import struct

MAGIC = b"GGUF"
VT_U8, VT_I8, VT_U16, VT_I16, VT_U32, VT_I32, VT_F32, VT_BOOL, VT_STR, VT_ARR, VT_U64, VT_I64, VT_F64 = range(13)
SCALAR_FMT = {VT_U8: "<B", VT_I8: "<b", VT_U16: "<H", VT_I16: "<h", VT_U32: "<I", VT_I32: "<i",
              VT_F32: "<f", VT_BOOL: "<?", VT_U64: "<Q", VT_I64: "<q", VT_F64: "<d"}

# ggml type -> (block elements, block bytes)
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
             12: (256, 144), 13: (256, 176), 14: (256, 210), 24: (1, 1), 25: (1, 2), 26: (1, 4), 30: (1, 2)}


def align_up(x, a):
    return (x + a - 1) // a * a


def tensor_nbytes(ttype, dims):
    blk, size = TYPE_SIZE[ttype]
    n = 1
    for d in dims[1:]:
        n *= d
    return dims[0] // blk * size * n


class Tensor:
    def __init__(self, name, dims, ttype, data):
        self.name, self.dims, self.type, self.data = name, list(dims), ttype, data
        self.offset = None   # None: laid out by the writer; an int: written as given


class Gguf:
    def __init__(self):
        self.version = 3
        self.kvs = []        # [key bytes, vtype, value]; arrays: (elem vtype, [values])
        self.tensors = []
        self.n_kv = None     # None: len(kvs); an int: written instead
        self.n_tensors = None
        self.layout_align = None   # None: general.alignment if sane, else 32

    def copy(self):
        g = Gguf()
        g.version, g.n_kv, g.n_tensors, g.layout_align = self.version, self.n_kv, self.n_tensors, self.layout_align
        g.kvs = [[k, t, v] for k, t, v in self.kvs]
        for t in self.tensors:
            c = Tensor(t.name, t.dims, t.type, t.data)
            c.offset = t.offset
            g.tensors.append(c)
        return g

    def kv_index(self, key):
        key = key.encode() if isinstance(key, str) else key
        for i, kv in enumerate(self.kvs):
            if kv[0] == key:
                return i
        return -1

    def get(self, key, default=None):
        i = self.kv_index(key)
        return self.kvs[i][2] if i >= 0 else default

    def set(self, key, vtype, value):
        key = key.encode() if isinstance(key, str) else key
        i = self.kv_index(key)
        if i >= 0:
            self.kvs[i] = [key, vtype, value]
        else:
            self.kvs.append([key, vtype, value])

    def remove(self, key):
        i = self.kv_index(key)
        if i >= 0:
            del self.kvs[i]

    def tensor(self, name):
        for t in self.tensors:
            if t.name == (name.encode() if isinstance(name, str) else name):
                return t
        return None

    def alignment(self):
        if self.layout_align:
            return self.layout_align
        i = self.kv_index("general.alignment")
        if i >= 0 and self.kvs[i][1] == VT_U32:
            a = self.kvs[i][2]
            if isinstance(a, int) and 0 < a <= 1 << 16 and a & (a - 1) == 0:
                return a
        return 32


def _w_str(out, s):
    out += struct.pack("<Q", len(s)) + s


def _w_val(out, vt, v):
    if vt in SCALAR_FMT:
        out += struct.pack(SCALAR_FMT[vt], v)
    elif vt == VT_STR:
        _w_str(out, v)
    elif vt == VT_ARR:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for it in items:
            if et == VT_ARR:
                _w_val(out, VT_ARR, it)
            else:
                _w_val(out, et, it)
    elif vt == "raw":      # bytes written as they are, type field included by the caller
        out += v
    else:
        raise ValueError(vt)


def serialize(g):
    """Returns (bytes, offsets): offsets names every field's position ('n_tensors',
    'kv3.key', 'kv3.type', 'kv3.value', 'ti2.name', 'ti2.n_dims', 'ti2.dims', 'ti2.type',
    'ti2.offset', 'data', 'tensor2' (data start))."""
    out = bytearray(MAGIC)
    off = {}
    out += struct.pack("<I", g.version)
    off["n_tensors"] = len(out)
    out += struct.pack("<Q", len(g.tensors) if g.n_tensors is None else g.n_tensors & (2**64 - 1))
    off["n_kv"] = len(out)
    out += struct.pack("<Q", len(g.kvs) if g.n_kv is None else g.n_kv & (2**64 - 1))
    for i, (k, vt, v) in enumerate(g.kvs):
        off[f"kv{i}.key"] = len(out)
        _w_str(out, k)
        off[f"kv{i}.type"] = len(out)
        out += struct.pack("<I", vt if isinstance(vt, int) else VT_U8)
        if vt == "raw":
            out[-4:] = v[:4]
            out += v[4:]
        else:
            off[f"kv{i}.value"] = len(out)
            _w_val(out, vt, v)
    align = g.alignment()
    pos = 0
    offsets = []
    for t in g.tensors:
        if t.offset is None:
            offsets.append(pos)
            pos = align_up(pos + len(t.data), align)
        else:
            offsets.append(t.offset)
    for i, t in enumerate(g.tensors):
        off[f"ti{i}.name"] = len(out)
        _w_str(out, t.name)
        off[f"ti{i}.n_dims"] = len(out)
        out += struct.pack("<I", len(t.dims) & 0xffffffff)
        off[f"ti{i}.dims"] = len(out)
        for d in t.dims:
            out += struct.pack("<Q", d & (2**64 - 1))
        off[f"ti{i}.type"] = len(out)
        out += struct.pack("<I", t.type & 0xffffffff)
        off[f"ti{i}.offset"] = len(out)
        out += struct.pack("<Q", offsets[i] & (2**64 - 1))
    data_off = align_up(len(out), align)
    out += b"\0" * (data_off - len(out))
    off["data"] = data_off
    for i, t in enumerate(g.tensors):
        if t.offset is not None:
            continue
        off[f"tensor{i}"] = data_off + offsets[i]
        need = data_off + offsets[i] - len(out)
        out += b"\0" * need + t.data
    return bytes(out), off


def _r_str(b, o):
    n, = struct.unpack_from("<Q", b, o)
    return b[o + 8:o + 8 + n], o + 8 + n


def _r_val(b, o, vt):
    if vt in SCALAR_FMT:
        return struct.unpack_from(SCALAR_FMT[vt], b, o)[0], o + struct.calcsize(SCALAR_FMT[vt])
    if vt == VT_STR:
        return _r_str(b, o)
    et, n = struct.unpack_from("<IQ", b, o)
    o += 12
    items = []
    for _ in range(n):
        v, o = _r_val(b, o, et)
        items.append(v)
    return (et, items), o


def parse(b):
    """A valid GGUF (as written by minfer or gguf-py) -> Gguf."""
    assert b[:4] == MAGIC
    g = Gguf()
    g.version, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    o = 24
    for _ in range(nkv):
        k, o = _r_str(b, o)
        vt, = struct.unpack_from("<I", b, o)
        v, o = _r_val(b, o + 4, vt)
        g.kvs.append([k, vt, v])
    infos = []
    for _ in range(nt):
        name, o = _r_str(b, o)
        nd, = struct.unpack_from("<I", b, o)
        dims = list(struct.unpack_from(f"<{nd}Q", b, o + 4))
        o += 4 + 8 * nd
        tt, toff = struct.unpack_from("<IQ", b, o)
        o += 12
        infos.append((name, dims, tt, toff))
    data_off = align_up(o, g.alignment())
    for name, dims, tt, toff in infos:
        n = tensor_nbytes(tt, dims)
        g.tensors.append(Tensor(name, dims, tt, b[data_off + toff:data_off + toff + n]))
    return g
