#!/usr/bin/env python3
"""tok/s per layer, one figure per benchmark model, from `minfer bench --json` lines.

    python3 results/plot.py [FILE.jsonl ...] [-o DIR] [--gpu H200]

Inputs: the JSONL files named (tools/bench_phases.sh writes bench-phases.jsonl: the same tests at
every phase in one device call); with none, every results/*.jsonl. Output: DIR/phases-<model>.png
(DIR: this script's folder), one per model that has records:
  qwen2.5-0.5b Q4_0 and qwen2.5-7b Q4_K_M (synthetic files, `minfer synth`).
Each figure has three panels with linear axes from 0 (pp512, pp2048, tg128), a bar per phase
(cpu, 7b, 7c, 7d, 7e: mean +- sd), llama.cpp on the same H200 and files as a reference band, and
the roofline (decode: weight bytes per token / 4.6 TB/s; prefill: 2 x params / 776 TFLOP/s), all
from /work/shared/TARGETS.md. A reference more than 4x the tallest bar is named at the top of its
panel instead of flattening the bars.

Records used: default switches only (none of MINFER_PERF_OFF, MINFER_NO_CUDA_GRAPH, MINFER_NO_FUSION,
MINFER_DISABLE_CUDA; no A/B item records), no depth or batch runs, the CUDA ones on the GPU named by
--gpu, the CPU ones only from the host that ran those CUDA records (another machine's CPU is not a
bar of this figure). Per phase and test the latest record wins; a decode panel takes tg128, else the
latest tgN of that phase (its bar is labelled with its test)."""
import argparse, glob, os, re, sys
from collections import Counter

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ["cpu", "7b", "7c", "7d", "7e"]
PANELS = [("pp512", "prefill 512 tokens"), ("pp2048", "prefill 2048 tokens"), ("tg128", "decode 128 tokens")]
HBM_GBS, PEAK_TFLOPS = 4600.0, 776.0          # measured on the H200 (TARGETS.md)
# model key -> what the figure needs: llama.cpp's range per test (TARGETS.md: 34af94cd, CUDA graphs,
# -fa 1, same H200, same synthetic files), weight bytes read per decoded token, parameter count
MODELS = {
    "qwen2.5-0.5b-q4_0": dict(title="qwen2.5-0.5b Q4_0 (synthetic)", bytes_tok=0.35e9, params=0.49e9,
                              peer={"pp512": (49480, 52236), "pp2048": (53892, 54864), "tg128": (909, 926)}),
    "qwen2.5-7b-q4_k_m": dict(title="qwen2.5-7b Q4_K_M (synthetic)", bytes_tok=4.68e9, params=7.62e9,
                              peer={"pp512": (9508, 9623), "pp2048": (9948, 9980), "tg128": (262, 268)}),
}
OFF_SWITCHES = ("MINFER_PERF_OFF", "MINFER_NO_CUDA_GRAPH=1", "MINFER_NO_FUSION=1", "MINFER_DISABLE_CUDA=1",
                "cuda_graph=off")
COLORS = {"cpu": "#9a9a9a", "7b": "#c6dbef", "7c": "#8fb8de", "7d": "#4f8fc6", "7e": "#1f4e8c"}


def load(paths):
    return records.load(paths, records.at_depth_zero)


def model_key(r):
    """'qwen2.5-0.5b-q4_0' / 'qwen2.5-7b-q4_k_m' for the synthetic benchmark files, else None"""
    name = re.sub(r"^minfer-7[a-e]-", "", os.path.basename(str(r.get("model", ""))))
    s = f"{r.get('shape', '')} {name}".lower()
    if re.search(r"coder|instruct|smollm", s):
        return None
    typ = str(r.get("type", "")).upper()
    if re.search(r"0\.5b", s) and typ == "Q4_0":
        return "qwen2.5-0.5b-q4_0"
    if re.search(r"(^|[^0-9.])7b", s) and typ == "Q4_K_M":
        return "qwen2.5-7b-q4_k_m"
    return None


def usable(r, gpu):
    if "tok_s" not in r or r.get("item") or r.get("bench") == "bench-7e":
        return False
    if r.get("depth") or (r.get("batch") or 1) != 1:
        return False
    sw = str(r.get("switches", ""))
    if any(x in sw for x in OFF_SWITCHES):
        return False
    if r.get("backend") == "cuda":
        return gpu.lower() in str(r.get("gpu", "")).lower()
    return r.get("backend") == "cpu"


def pick(recs):
    """{(phase, panel test): record}: the latest; decode prefers tg128"""
    out = {}
    for r in sorted(recs, key=lambda r: r.get("date", "")):
        ph = "cpu" if r["backend"] == "cpu" else str(r.get("phase", "?"))
        t = str(r.get("test", ""))
        if t in ("pp512", "pp2048"):
            out[(ph, t)] = r
        elif re.fullmatch(r"tg\d+", t):
            cur = out.get((ph, "tg128"))
            if t == "tg128" or cur is None or cur["test"] != "tg128":
                out[(ph, "tg128")] = r
    return out


def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def figure(key, recs, outdir, sources):
    spec = MODELS[key]
    cuda = [r for r in recs if r["backend"] == "cuda"]
    host = Counter(r.get("cpu") for r in cuda if r.get("cpu")).most_common(1)
    host = host[0][0] if host else None
    recs = [r for r in recs if r["backend"] == "cuda" or (host and r.get("cpu") == host)]
    chosen = pick(recs)
    roof = {"tg128": ("memory roofline", HBM_GBS * 1e9 / spec["bytes_tok"]),
            "pp512": ("compute roofline", PEAK_TFLOPS * 1e12 / (2 * spec["params"])),
            "pp2048": ("compute roofline", PEAK_TFLOPS * 1e12 / (2 * spec["params"]))}

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.9))
    for ax, (test, what) in zip(axes, PANELS):
        vals = [chosen.get((p, test)) for p in PHASES]
        ys = [r["tok_s"] if r else 0.0 for r in vals]
        sds = [r.get("tok_s_sd", 0.0) if r else 0.0 for r in vals]
        ax.bar(PHASES, ys, yerr=sds, capsize=3, color=[COLORS[p] for p in PHASES], edgecolor="#333333", lw=0.5,
               zorder=3)
        lo, hi = spec["peer"][test]
        top = max([y + s for y, s in zip(ys, sds)] + [hi])
        rname, rval = roof[test]
        draw_roof = rval <= 4 * top
        ymax = 1.12 * max(top, rval) if draw_roof else 1.2 * top
        ax.set_ylim(0, ymax)
        # llama.cpp: its measured range as a band, its middle as a line
        ax.axhspan(lo, hi, color="#e8750a", alpha=0.25, zorder=1, lw=0)
        ax.axhline((lo + hi) / 2, color="#e8750a", lw=1.4, ls="--", zorder=2)
        box = dict(facecolor="white", alpha=0.8, lw=0, pad=1)
        ax.text(-0.45, hi, f"llama.cpp {fmt(lo)}-{fmt(hi)}", color="#b35400", fontsize=8, va="bottom", bbox=box,
                zorder=5)
        if draw_roof:
            ax.axhline(rval, color="#2a7a2a", lw=1.4, ls=":", zorder=2)
            ax.text(-0.45, rval, f"{rname} {fmt(rval)}", color="#2a7a2a", fontsize=8, va="bottom", bbox=box, zorder=5)
        else:
            ax.text(0.02, 0.97, f"{rname} {fmt(rval)} tok/s: off scale (x{rval / top:.0f} the top here)",
                    transform=ax.transAxes, color="#2a7a2a", fontsize=8, va="top")
        for x, (p, r, y, s) in enumerate(zip(PHASES, vals, ys, sds)):
            if r is None:
                ax.text(x, ymax * 0.02, "not\nmeasured", ha="center", va="bottom", fontsize=7.5, color="#777777")
                continue
            label = fmt(y) + ("" if r["test"] == test else f"\n({r['test']})")
            ax.text(x, y + s + ymax * 0.01, label, ha="center", va="bottom", fontsize=8, zorder=6, bbox=box)
        ratio = f"\n7e / llama.cpp: x{ys[-1] / ((lo + hi) / 2):.2f}" if vals[-1] is not None else ""
        ax.set_title(f"{test}: {what}{ratio}", fontsize=10)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.grid(axis="y", color="#dddddd", zorder=0)
        ax.set_axisbelow(True)
    axes[0].set_ylabel("tok/s (higher is better)")

    used = [r for r in chosen.values()]
    gpu = sorted({r.get("gpu") for r in used if r["backend"] == "cuda"})
    commits = sorted({str(r.get("commit", "?")) for r in used})
    dates = sorted(r.get("date", "")[:10] for r in used)
    files = sorted({r["_file"] for r in used})
    cpu_note = (f"cpu: the GPU host's CPU ({host}), --backend cpu" if any(r["backend"] == "cpu" for r in used)
                else "cpu: no record from the GPU host in these files (tools/bench_phases.sh runs it)")
    fig.suptitle(f"{spec['title']} on {', '.join(gpu) or '?'}: tok/s at each layer", fontsize=12, weight="bold")
    fig.text(0.01, 0.01,
             f"bars: minfer, mean ± sd over the reps; 7b..7e: the CUDA backend built at PHASE=7b..7e; {cpu_note}.\n"
             f"orange: llama.cpp on the same H200 and files (its measured range); green: roofline "
             f"(decode: {spec['bytes_tok'] / 1e9:g} GB a token / {HBM_GBS / 1000:g} TB/s; prefill: 2 x "
             f"{spec['params'] / 1e9:g} B params / {PEAK_TFLOPS:g} TFLOP/s); TARGETS.md.\n"
             f"records: {', '.join(files)}; commit {', '.join(commits)}; "
             f"{dates[0] if dates else '?'}{' .. ' + dates[-1] if dates and dates[-1] != dates[0] else ''}.",
             fontsize=7.5, color="#444444", va="bottom")
    fig.tight_layout(rect=(0, 0.10, 1, 0.95))
    out = os.path.join(outdir, f"phases-{key}.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="bench JSONL files (default: results/*.jsonl)")
    ap.add_argument("-o", "--outdir", default=HERE)
    ap.add_argument("--gpu", default="H200", help="use CUDA records whose gpu field contains this")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    paths = a.files or sorted(glob.glob(os.path.join(HERE, "*.jsonl")))
    if not paths:
        sys.exit("plot.py: no input files")
    by_model = {}
    for r in load(paths):
        k = model_key(r)
        if k and usable(r, a.gpu):
            by_model.setdefault(k, []).append(r)
    if not by_model:
        sys.exit(f"plot.py: no usable records for {', '.join(MODELS)} in {len(paths)} file(s)")
    for k in MODELS:
        if k in by_model:
            print("wrote", figure(k, by_model[k], a.outdir, paths))


if __name__ == "__main__":
    main()
