#!/usr/bin/env python3
"""Regenerates the committed seed corpus of fuzz_model (gates/common/fuzz/corpus_model/):
the bad-input campaign's three base models (llama Q4_0, qwen2 Q5_1, qwen3 Q4_K_M, each
with a real BPE tokenizer) and three small models of odd but valid shapes (F32/F16, a few
KB of weights), so the fuzzer starts from files that load, tokenize and decode.
Usage: make_model_corpus.py MINFER"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "badinput"))
import gen  # noqa: E402

OUT = os.path.join(HERE, "corpus_model")


def main():
    minfer = sys.argv[1] if len(sys.argv) > 1 else "build/minfer"
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    with tempfile.TemporaryDirectory() as tmp:
        bases = [(spec[0], spec[-1], gen.micro_model(minfer, tmp, *spec)) for spec in gen.BASES]
    for name, mix, g in bases:
        with open(os.path.join(OUT, f"{name}-{mix}.gguf"), "wb") as f:
            f.write(gen.ser(g))
    tok = [kv for kv in bases[0][2].kvs if kv[0].startswith(b"tokenizer.")]
    odd = [("llama", 8, 2, 2, 1, 4, 3, dict(ctx=4, ttype=1)),
           ("qwen2", 6, 1, 3, 3, 2, 5, dict(ctx=8)),
           ("qwen3", 18, 2, 1, 1, 10, 33, dict(ctx=16, n_rot=2, ttype=1))]
    for arch, E, L, H, Hkv, kl, F, kw in odd:
        g = gen.build_model(tok, arch, E, L, H, Hkv, kl, F, seed=E, **kw)
        with open(os.path.join(OUT, f"odd-{arch}-E{E}.gguf"), "wb") as f:
            f.write(gen.ser(g))


if __name__ == "__main__":
    main()
