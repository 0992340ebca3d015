#!/usr/bin/env python3
"""Gate: sessions and bad input.

1. Pieces vs one batch: the logits of a prompt fed as one batch equal those of the same
   prompt fed in several decode calls appending to the KV cache (`--chunks`), row by row.
   Bound: F32 weights 1e-6, the F32 bound of py_forward_ref.py: the batch shape may pick
   another kernel (GEMM vs dot product) and so another float32 summation order, and the
   F16 KV cache turns such last-bit differences into occasional half-precision rounding
   flips (measured up to 1.6e-9; bit-identical while both shapes use one kernel).
   Quantized weights 1e-3 (activation rounding flips, see py_forward_ref.py).
2. A real multi-turn chat (SmolLM2, if present): turn 2 appended to the cache gives the
   same logits as a fresh session fed the whole conversation (bound 1e-3, Q4_1 weights).
3. Generation that reaches the end of the context stops with a note (exit 0).
4. Clear errors, exit status 1, no crash: prompt longer than the context (explicit -c and
   the model's own context), unknown architecture, missing tensor, missing metadata key,
   wrong tensor shape, missing model file, token id outside the vocabulary.
Usage: py_session.py BUILD_DIR
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_ref  # noqa: E402
import model_tiny  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MINFER = os.path.join(BUILD, "minfer")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
passed = failed = skipped = 0


def run(args, env=None):
    e = dict(os.environ)
    e["MINFER_LOG"] = "0"
    if env:
        e.update(env)
    return subprocess.run([MINFER] + args, capture_output=True, text=True, errors="replace", env=e, timeout=180)


def result(ok, name, detail):
    global passed, failed
    print("%s %-44s %s" % ("PASS" if ok else "FAIL", name, detail))
    if ok:
        passed += 1
    else:
        failed += 1


def pieces(td, src, arch, typ, bound):
    path = os.path.join(td, "%s-%s-%s.gguf" % (src, arch, typ))
    if src == "py":
        model_tiny.write_tiny(path, arch, typ, seed=3)
    else:
        r = run(["synth", "--shape", "tiny-" + arch, "--type", typ, "-o", path, "--seed", "3"])
        if r.returncode != 0:
            global skipped
            skipped += 1
            print("SKIP pieces %s %s: synth failed: %s" % (arch, typ, r.stderr.strip()[-200:]))
            return
    n_vocab = model_ref.Model(path).n_vocab
    toks = ",".join(str(v) for v in np.random.default_rng(11).integers(0, n_vocab, size=23))
    one, sev = os.path.join(td, "one.bin"), os.path.join(td, "sev.bin")
    # MINFER_UBATCH=0: the one-batch run really is one graph (no automatic splitting)
    r1 = run(["run", "-m", path, "--tokens", toks, "-n", "3", "--ignore-eos", "--backend", "cpu", "--dump-logits", one],
             env={"MINFER_UBATCH": "0"})
    r2 = run(["run", "-m", path, "--tokens", toks, "-n", "3", "--ignore-eos", "--backend", "cpu", "--dump-logits", sev,
              "--chunks", "5,1,9"], env={"MINFER_UBATCH": "0"})
    name = "pieces 5+1+9+8 vs 23: %s:%s %s" % (src, arch, typ)
    if r1.returncode or r2.returncode:
        result(False, name, "run failed: %s %s" % (r1.stderr.strip()[-200:], r2.stderr.strip()[-200:]))
        return
    a, b = model_ref.read_logits(one), model_ref.read_logits(sev)
    if a.shape != b.shape:
        result(False, name, "row counts differ: %s vs %s" % (a.shape, b.shape))
        return
    e = [model_ref.nmse(b[i], a[i]) for i in range(a.shape[0])]
    worst = int(np.argmax(e))
    ok = max(e) < bound
    result(ok, name, "rows %d, max nmse %.1e (row %d), bound %.0e" % (a.shape[0], max(e), worst, bound))
    if not ok:
        d = np.abs(b[worst] - a[worst])
        for i in np.argsort(-d)[:5]:
            print("    row %d logit[%d]: got %.6g want %.6g" % (worst, i, b[worst][i], a[worst][i]))


def multiturn(td):
    """Two chat turns in one session vs the whole conversation fed to a fresh one. With
    -n 1 every turn samples one reply token and feeds nothing more, so the dump's last
    row is the last prompt position of turn 2."""
    global skipped
    if not os.path.exists(SMOL):
        skipped += 1
        print("SKIP multi-turn chat: %s absent (make models)" % SMOL)
        return
    name = "multi-turn chat appends to the cache"
    d1 = os.path.join(td, "turns.bin")
    r = run(["run", "-m", SMOL, "--chat", "-p", "Name a fruit.", "-p", "And a vegetable?", "-n", "1",
             "--backend", "cpu", "-t", "2", "--dump-logits", d1], env={"MINFER_UBATCH": "0"})
    if r.returncode:
        result(False, name, r.stderr.strip()[-300:])
        return
    reply = r.stdout.split("> And a vegetable?")[0].split("\n", 1)[1][:-1]
    conv = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n" + reply +
            "<|im_end|>\n<|im_start|>user\nAnd a vegetable?<|im_end|>\n<|im_start|>assistant\n")
    t = subprocess.run([MINFER, "tokenize", "-m", SMOL, "--stdin", "--special"], input=conv, capture_output=True,
                       text=True, errors="replace", timeout=60)
    if t.returncode:
        skipped += 1
        print("SKIP multi-turn chat: tokenize failed: %s" % t.stderr.strip()[-200:])
        return
    ids = t.stdout.split()
    d2 = os.path.join(td, "whole.bin")
    r2 = run(["run", "-m", SMOL, "--tokens", ",".join(ids), "-n", "1", "--backend", "cpu", "-t", "2", "--dump-logits", d2],
             env={"MINFER_UBATCH": "0"})
    if r2.returncode:
        result(False, name, r2.stderr.strip()[-300:])
        return
    a, b = model_ref.read_logits(d1), model_ref.read_logits(d2)
    e = model_ref.nmse(a[-1], b[-1])
    same_top = int(np.argmax(a[-1]) == np.argmax(b[-1]))
    ok = e < 1e-3 and a.shape[0] == b.shape[0] and len(ids) == b.shape[0]
    result(ok, name, "turn-2 last logits vs fresh whole conversation: nmse %.1e, same top-1 %d; rows computed "
           "%d = tokens of the conversation %d (nothing recomputed)" % (e, same_top, a.shape[0], len(ids)))


def expect_error(name, args, want):
    r = run(args)
    msg = (r.stderr.strip().splitlines() or [""])[-1]
    ok = r.returncode == 1 and want.lower() in r.stderr.lower() and "internal invariant" not in r.stderr
    result(ok, "error: " + name, "exit %d, %r" % (r.returncode, msg[:150]))


def errors(td):
    good = os.path.join(td, "good.gguf")
    model_tiny.write_tiny(good, "qwen2", "f32", seed=1)
    expect_error("prompt longer than -c", ["run", "-m", good, "--tokens", ",".join(["5"] * 20), "-c", "16", "-n", "1"],
                 "exceeds the context")
    expect_error("prompt longer than the model context", ["run", "-m", good, "--tokens", ",".join(["5"] * 600), "-n", "1"],
                 "exceeds the context")
    r = run(["run", "-m", good, "--tokens", "1,2,3", "-c", "8", "-n", "20", "--ignore-eos"])
    result(r.returncode == 0 and "context full (8 tokens)" in r.stderr and r.stdout.count("[") == 6,
           "generation stops cleanly at a full context", "exit %d, %d tokens, %r" % (
               r.returncode, r.stdout.count("["), r.stderr.strip().splitlines()[-1:]))
    p = os.path.join(td, "arch.gguf")
    model_tiny.write_tiny(p, "qwen2", "f32", arch_name="mamba9")
    expect_error("unknown architecture", ["run", "-m", p, "--tokens", "1,2", "-n", "1"], "unknown architecture 'mamba9'")
    p = os.path.join(td, "missing.gguf")
    model_tiny.write_tiny(p, "llama", "f32", drop=("blk.2.ffn_up.weight",))
    expect_error("missing tensor", ["run", "-m", p, "--tokens", "1,2", "-n", "1"], "missing tensor 'blk.2.ffn_up.weight'")
    p = os.path.join(td, "missing_bias.gguf")
    model_tiny.write_tiny(p, "qwen2", "f32", drop=("blk.0.attn_k.bias",))
    expect_error("missing qwen2 bias", ["run", "-m", p, "--tokens", "1,2", "-n", "1"], "missing tensor 'blk.0.attn_k.bias'")
    p = os.path.join(td, "missing_qnorm.gguf")
    model_tiny.write_tiny(p, "qwen3", "f32", drop=("blk.3.attn_q_norm.weight",))
    expect_error("missing qwen3 q_norm", ["run", "-m", p, "--tokens", "1,2", "-n", "1"], "missing tensor 'blk.3.attn_q_norm.weight'")
    p = os.path.join(td, "nokey.gguf")
    model_tiny.write_tiny(p, "llama", "f32", drop_keys=("block_count",))
    expect_error("missing metadata key", ["run", "-m", p, "--tokens", "1,2", "-n", "1"], "llama.block_count")
    p = os.path.join(td, "shape.gguf")
    model_tiny.write_tiny(p, "llama", "f32", drop_keys=("feed_forward_length",))
    expect_error("missing feed_forward_length", ["run", "-m", p, "--tokens", "1,2", "-n", "1"], "feed_forward_length")
    expect_error("missing model file", ["run", "-m", os.path.join(td, "nope.gguf"), "-p", "hi"], "nope.gguf")
    expect_error("token id outside the vocabulary", ["run", "-m", good, "--tokens", "1,99999", "-n", "1"], "outside the vocabulary")
    expect_error("unknown backend", ["run", "-m", good, "--tokens", "1", "--backend", "tpu"], "unknown backend")


def main():
    if not os.access(MINFER, os.X_OK):
        print("no %s: build first" % MINFER)
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory() as td:
        pieces(td, "py", "llama", "f32", 1e-6)
        pieces(td, "py", "qwen2", "f32", 1e-6)
        pieces(td, "py", "qwen3", "q4_1", 1e-3)
        pieces(td, "synth", "qwen3", "q4_k_m", 1e-3)
        pieces(td, "synth", "qwen2", "q4_0", 1e-3)
        multiturn(td)
        errors(td)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
