"""GGUF test files written with the PyPI gguf package's GGUFWriter (an implementation
independent of ours), shared by py_gguf_info.py and py_gguf_bad.py. Not a gate itself."""
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT, GGUFValueType as VT


def _quant_tensor(rng, qtype, rows, cols):
    """Random bytes shaped as `rows` rows of `cols` elements of a block type."""
    blk, tsize = gguf.GGML_QUANT_SIZES[qtype]
    assert cols % blk == 0
    return rng.integers(0, 256, size=(rows, cols // blk * tsize), dtype=np.uint8)


def write_full(path, alignment=None, version=None, arch="llama", long_arrays=True):
    """Every metadata value type (scalars at their extremes, strings, arrays of each
    type, a long string array and a long numeric array, nested arrays) and tensors of
    several types and ranks. version=2 patches the header afterwards (v2 and v3 share
    the little-endian layout)."""
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(path, arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_uint64("t.u64", 18446744073709551615)
    w.add_int64("t.i64", -9223372036854775808)
    w.add_float32("t.f32", 3.14159265)
    w.add_float32("t.f32_tiny", 1.4e-45)
    w.add_float32("t.f32_inf", float("-inf"))
    w.add_float64("t.f64", 2.718281828459045)
    w.add_bool("t.bool_t", True)
    w.add_bool("t.bool_f", False)
    w.add_string("t.str", "hello, gguf \"quoted\" \\ back\nslash \u00e9\u4e2d\U0001F600")
    w.add_key_value("t.str_empty", "", VT.STRING)
    w.add_key_value("t.arr_u8", [0, 1, 255], VT.ARRAY, sub_type=VT.UINT8)
    w.add_key_value("t.arr_i8", [-1, 2, -128], VT.ARRAY, sub_type=VT.INT8)
    w.add_key_value("t.arr_u16", [1, 65535], VT.ARRAY, sub_type=VT.UINT16)
    w.add_key_value("t.arr_i16", [-5, 5], VT.ARRAY, sub_type=VT.INT16)
    w.add_key_value("t.arr_u32", [7, 4294967295], VT.ARRAY, sub_type=VT.UINT32)
    w.add_key_value("t.arr_i32", [-7, 2147483647], VT.ARRAY, sub_type=VT.INT32)
    w.add_key_value("t.arr_u64", [1, 18446744073709551615], VT.ARRAY, sub_type=VT.UINT64)
    w.add_key_value("t.arr_i64", [-1, -9223372036854775808], VT.ARRAY, sub_type=VT.INT64)
    w.add_key_value("t.arr_f32", [0.5, -1.25, 1e30], VT.ARRAY, sub_type=VT.FLOAT32)
    w.add_key_value("t.arr_f64", [0.1, -1e300], VT.ARRAY, sub_type=VT.FLOAT64)
    w.add_key_value("t.arr_bool", [True, False, True], VT.ARRAY, sub_type=VT.BOOL)
    w.add_array("t.arr_str", ["a", "", "\u00fc\u00f1\u00ee", "tab\there"])
    if long_arrays:   # long enough to be hashed, not listed, by minfer info --json
        w.add_array("t.arr_str_long", [f"tok{i}_" + "x" * (i % 7) for i in range(3000)])
        w.add_key_value("t.arr_i32_long", list(range(-500, 9500)), VT.ARRAY, sub_type=VT.INT32)
    w.add_array("t.arr_nested", [[1, 2, 3], [4, 5, 6]])
    w.add_array("t.arr_nested_str", [["x", "yz"], ["", "w"]])
    # tensors: numpy shape (rows, cols) is GGUF ne [cols, rows]
    w.add_tensor("t.f32_1d", rng.standard_normal(96).astype(np.float32))
    w.add_tensor("t.f32_4d", rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    w.add_tensor("t.f16", rng.standard_normal((3, 64)).astype(np.float16))
    w.add_tensor("t.i8", rng.integers(-128, 127, size=(5, 7), dtype=np.int8))
    w.add_tensor("t.i16", rng.integers(-9, 9, size=(9,), dtype=np.int16))
    w.add_tensor("t.i32", rng.integers(-9, 9, size=(2, 2, 3), dtype=np.int32))
    for qt, rows, cols in [(QT.Q4_0, 4, 64), (QT.Q4_1, 3, 32), (QT.Q5_0, 2, 96), (QT.Q5_1, 2, 32),
                           (QT.Q8_0, 5, 128), (QT.Q4_K, 3, 256), (QT.Q5_K, 2, 512), (QT.Q6_K, 4, 256)]:
        w.add_tensor(f"t.{qt.name.lower()}", _quant_tensor(rng, qt, rows, cols), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version is not None:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(struct.pack("<I", version))


def write_small(path, extra=None):
    """A small valid file for the corruption cases: a few keys, a string array, and
    tensors of F32 and Q4_0 (block 32) so shape rules can be broken. extra(w) may add
    more keys (they come after general.architecture and before the others)."""
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "llama")
    if extra:
        extra(w)
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_string("general.name", "bad-case base")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"])
    w.add_tensor("a.weight", rng.standard_normal((2, 32)).astype(np.float32))
    w.add_tensor("b.weight", _quant_tensor(rng, QT.Q4_0, 2, 64), raw_dtype=QT.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_big_sparse(path, total_bytes=2 << 30, n_vocab=152064):
    """A large file quickly: a real-sized vocabulary and ~total_bytes of Q4_K tensors
    whose data is a hole (the file is extended by truncate, never written). A reader
    that copies or touches tensor data shows it in its peak RSS."""
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_uint32("qwen2.block_count", 28)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(n_vocab)])
    w.add_key_value("tokenizer.ggml.token_type", [1] * n_vocab, VT.ARRAY, sub_type=VT.INT32)
    blk, tsize = gguf.GGML_QUANT_SIZES[QT.Q4_K]
    cols, rows = 3584, 18944
    nbytes = rows * (cols // blk) * tsize
    n = max(1, total_bytes // nbytes)
    for i in range(n):
        w.add_tensor_info(f"blk.{i}.ffn_up.weight", [rows, cols * tsize // blk], np.dtype(np.uint8), nbytes,
                          raw_dtype=QT.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    end = f.tell()
    align = w.data_alignment
    data_off = (end + align - 1) // align * align
    padded = (nbytes + align - 1) // align * align
    f.flush()
    w.close()
    os.truncate(path, data_off + padded * n)
