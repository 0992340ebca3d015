#!/usr/bin/env python3
"""Gate: minfer's logits vs an independent NumPy forward pass (gates/common/model_ref.py)
on tiny synthetic models of each architecture (llama, qwen2, qwen3) and weight type.

For each case: `minfer synth` writes the model, `minfer run --tokens ... -n 4
--dump-logits` writes the logits of every prompt position and generated step (greedy),
and the reference recomputes the same sequence (generated ids = argmax of minfer's rows,
i.e. teacher-forced) in float64. Compared per row by NMSE = sum (a-b)^2 / sum b^2.

Bounds (why):
  F32 weights: the reference mimics the F16 KV cache (rounds K, V to half) when minfer
    uses it, so what is left is float32 vs float64 arithmetic: NMSE < 1e-6 (the issue's
    bound; measured ~1e-12).
  Quantized weights: weights are dequantized exactly by gguf.quants, and minfer quantizes
    each matmul's activations (Q8_0 / Q8_1 / Q8_K). The reference mimics that rounding, but
    it computes in float64, so an activation lying within float32 noise of a rounding
    boundary can land on the other code (one element off by d = amax/127; for Q8_1 also the
    half-precision block sum). Such a flip costs a row ~1e-7 at that op and every later
    re-quantization of the perturbed row flips more codes: measured on these 4-layer models
    up to 1.2e-4 on a row, on the 30-layer SmolLM2 up to 3e-2 (it is chaotic, not a bias).
    So the whole-graph bound is 1e-3 here, and the strict check is the teacher-forced
    per-op one below (inputs bit-identical, so no flips: bound 1e-8, measured ~1e-13).
    Against the plain float reference (no activation rounding) the
    expected NMSE is the Q8 rounding noise itself: per matmul (d^2/12)/E[x^2] with
    d ~ 2.5 sigma/127 gives ~3e-5, summed over ~7 matmuls a layer x 4 layers plus the
    output, ~1e-3, so that comparison is reported and bounded at 1e-2 (Q8_K: finer
    per-256 scale, same order).
Per-op (every case): the sequence is re-run as one batch with MINFER_DEBUG_LAYERS, and
every op is recomputed by the reference from minfer's own inputs (model_ref.check_ops):
bound 1e-8 for every op, and a failure names the first op over it with its worst elements.
Usage: py_forward_ref.py BUILD_DIR
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
ARCHS = ["llama", "qwen2", "qwen3"]
PY_TYPES = ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]   # gguf-package-written models
SYNTH_TYPES = ["f32", "q8_0", "q4_0", "q4_k_m", "q6_k"]            # `minfer synth` models
F32_BOUND = 1e-6
OP_BOUND = 1e-8
SIM_BOUND = 1e-3
PLAIN_BOUND = 1e-2
N_GEN = 4

passed = failed = skipped = 0


def run(cmd, env=None):
    e = dict(os.environ)
    e["MINFER_LOG"] = "0"
    if env:
        e.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=e, timeout=120)


def taps_for(path, seq, kv):
    """Run the whole sequence as one batch with MINFER_DEBUG_LAYERS; name -> array."""
    with tempfile.TemporaryDirectory() as td:
        taps_path = os.path.join(td, "taps.bin")
        r = run([MINFER, "run", "-m", path, "--tokens", ",".join(map(str, seq)), "-n", "1",
                 "--backend", "cpu", "--kv", kv, "--ignore-eos", "-t", "2", "--dump-logits",
                 os.path.join(td, "l.bin")], env={"MINFER_DEBUG_LAYERS": taps_path})
        if r.returncode != 0 or not os.path.exists(taps_path):
            return None, r.stderr.strip()[-300:]
        return {n: a for n, _p, a in model_ref.read_taps(taps_path)}, ""


def make_model(td, src, arch, typ):
    path = os.path.join(td, "%s-%s-%s.gguf" % (src, arch, typ))
    if os.path.exists(path):
        return path, ""
    if src == "py":
        model_tiny.write_tiny(path, arch, typ, seed=5)
        return path, ""
    r = run([MINFER, "synth", "--shape", "tiny-" + arch, "--type", typ, "-o", path, "--seed", "7"])
    if r.returncode != 0:
        return None, "synth failed: " + (r.stderr or r.stdout).strip()[-200:]
    return path, ""


def check_case(td, src, arch, typ, kv):
    global passed, failed, skipped
    name = "%s:%s %s kv=%s" % (src, arch, typ, kv)
    path, why = make_model(td, src, arch, typ)
    if not path:
        print("SKIP %s: %s" % (name, why))
        skipped += 1
        return
    mdl = model_ref.Model(path)
    rng = np.random.default_rng(sum(arch.encode()))
    prompt = [int(v) for v in rng.integers(0, mdl.n_vocab, size=7)]
    dump = os.path.join(td, "logits.bin")
    r = run([MINFER, "run", "-m", path, "--tokens", ",".join(map(str, prompt)), "-n", str(N_GEN),
             "--dump-logits", dump, "--backend", "cpu", "--kv", kv, "--ignore-eos", "-t", "2"])
    if r.returncode != 0:
        print("FAIL %s: minfer run exit %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
        failed += 1
        return
    got = model_ref.read_logits(dump)
    P = len(prompt)
    if got.shape != (P + N_GEN - 1, mdl.n_vocab):
        print("FAIL %s: dump has shape %s, want (%d, %d)" % (name, got.shape, P + N_GEN - 1, mdl.n_vocab))
        failed += 1
        return
    gen = [int(np.argmax(got[P - 1 + j])) for j in range(N_GEN - 1)]
    seq = prompt + gen
    kv16 = kv == "f16"
    sim = mdl.forward(seq, kv_f16=kv16, act_quant=True)
    plain = mdl.forward(seq, kv_f16=kv16, act_quant=False)
    e_sim = [model_ref.nmse(got[i], sim[i]) for i in range(len(seq))]
    e_plain = [model_ref.nmse(got[i], plain[i]) for i in range(len(seq))]
    quant = typ not in ("f32", "f16")
    bound = SIM_BOUND if quant else F32_BOUND
    # top-1 agreement wherever the reference's margin is clear of the noise
    top_bad = 0
    for i in range(len(seq)):
        srt = np.sort(sim[i])
        if srt[-1] - srt[-2] > 1e-2 and np.argmax(got[i]) != np.argmax(sim[i]):
            top_bad += 1
    # teacher-forced per-op check through the debug taps
    T, why = taps_for(path, seq, kv)
    wants = {}
    ops = model_ref.check_ops(mdl, T, seq, kv16, wants) if T else []
    op_worst = max(ops, key=lambda t: t[1]) if ops else ("(no taps: %s)" % why, float("inf"))
    ok = (max(e_sim) < bound and (not quant or max(e_plain) < PLAIN_BOUND) and top_bad == 0
          and op_worst[1] < OP_BOUND)
    print("%s %-26s rows %2d  logits nmse: mimic %.1e plain %.1e (bound %.0e)  top1 miss %d  "
          "ops %d worst %s %.1e" % ("PASS" if ok else "FAIL", name, len(seq), max(e_sim), max(e_plain),
                                   bound, top_bad, len(ops), op_worst[0], op_worst[1]))
    if not ok:
        bad = int(np.argmax(e_sim))
        d = np.abs(got[bad] - sim[bad])
        for i in np.argsort(-d)[:5]:
            print("    row %d logit[%d]: got %.6g want %.6g" % (bad, i, got[bad][i], sim[bad][i]))
        for nm, e in ops:
            if e >= OP_BOUND:
                print("    first op over %.0e: %s nmse %.3e" % (OP_BOUND, nm, e))
                a, b = T[nm].ravel(), wants[nm].ravel()
                for i in np.argsort(-np.abs(a - b))[:5]:
                    print("      %s[%d]: got %.6g want %.6g" % (nm, i, a[i], b[i]))
                break
        failed += 1
    else:
        passed += 1


def check_real(path, n_tok=12):
    """A real file (if present): teacher-forced per-op check on a short prompt. The whole-
    graph logits of a 30-layer quantized model are chaotic under activation rounding (see
    the bounds above), so only the per-op comparison is bounded here; the logits NMSE is
    printed for information."""
    global passed, failed, skipped
    name = "real:" + os.path.basename(path)
    if not os.path.exists(path):
        print("SKIP %s: absent (make models)" % name)
        skipped += 1
        return
    mdl = model_ref.Model(path)
    seq = [int(v) for v in np.random.default_rng(3).integers(0, mdl.n_vocab, size=n_tok)]
    T, why = taps_for(path, seq, "f16")
    if not T:
        print("FAIL %s: taps run failed: %s" % (name, why))
        failed += 1
        return
    wants = {}
    ops = model_ref.check_ops(mdl, T, seq, True, wants)
    worst = max(ops, key=lambda t: t[1])
    ok = worst[1] < OP_BOUND and len(ops) > 10 * mdl.n_layer
    print("%s %-26s ops %d, worst %s %.1e (bound %.0e)" % ("PASS" if ok else "FAIL", name, len(ops), worst[0],
                                                        worst[1], OP_BOUND))
    if ok:
        passed += 1
        return
    failed += 1
    for nm, e in ops:
        if e >= OP_BOUND:
            a, b = T[nm].ravel(), wants[nm].ravel()
            print("    first op over %.0e: %s nmse %.3e" % (OP_BOUND, nm, e))
            for i in np.argsort(-np.abs(a - b))[:5]:
                print("      %s[%d]: got %.6g want %.6g" % (nm, i, a[i], b[i]))
            break


def main():
    if not os.access(MINFER, os.X_OK):
        print("no %s: build first" % MINFER)
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory() as td:
        for arch in ARCHS:
            for typ in PY_TYPES:
                check_case(td, "py", arch, typ, "f16")
            check_case(td, "py", arch, "f32", "f32")
            for typ in SYNTH_TYPES:
                check_case(td, "synth", arch, typ, "f16")
            check_case(td, "synth", arch, "q4_0", "f32")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        check_real(os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
