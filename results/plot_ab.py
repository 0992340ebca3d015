#!/usr/bin/env python3
"""Phase-7e records and plots, made from the bench JSON lines in results/*.jsonl (and the
bench-7e-records.jsonl that gates/device.sh packs into logs.tgz, once copied here):
  results/phases-tok_s.png   tok/s per phase (7b .. 7e) for each model and test (CUDA records)
  results/ab-7e.png          ratio off/on of every 7e item and of MINFER_NO_CUDA_GRAPH (bench-7e)
  results/RECORDS.md         every recorded CUDA run per phase (tok/s, GB/s, % of roofline,
                             commit, GPU), the A/B table and the two plots
Usage: python3 results/plot_ab.py [extra.jsonl ...]"""
import glob, json, os, sys
from collections import OrderedDict

here = os.path.dirname(os.path.abspath(__file__))
PEAK_TFLOPS, HBM_GBS = 776.0, 4600.0           # measured on the H200 (docs TARGETS.md, 2026-11-29)
PARAMS = {"qwen2.5-7b": 7.62e9, "qwen2.5-0.5b": 0.49e9}


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            for i, line in enumerate(f):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    print(f"{p}:{i + 1}: skipping a malformed line", file=sys.stderr)
                    continue
                r["_file"] = os.path.basename(p)
                recs.append(r)
    return recs


RELEVANT = ("MINFER_PERF_OFF", "MINFER_NO_CUDA_GRAPH", "MINFER_NO_FUSION", "MINFER_DISABLE_CUDA", "cuda_graph")


def tidy(r):
    """switches: only the ones that change what runs (the device exports many MINFER_* for its
    gates); commit: MINFER_COMMIT where the bench could not ask git"""
    sw = [x for x in str(r.get("switches", "")).split(",") if x]
    for x in sw:
        if x.startswith("MINFER_COMMIT=") and r.get("commit") in (None, "", "unknown"):
            r["commit"] = x.split("=", 1)[1][:12]
    r["switches"] = ",".join(x for x in sw if x.startswith(RELEVANT))
    # the same seeded synthetic file under the name of the gate that made it (minfer-7b-..., minfer-7e-...)
    m = str(r.get("model", ""))
    if m.startswith("minfer-7") and m[9:10] == "-":
        r["model"] = m[10:]
    return r


def shape_of(r):
    m = str(r.get("model", ""))
    for k in PARAMS:
        if k in m:
            return k
    return None


def roofline(r):
    """(roofline tok/s, % of it) or (None, None)"""
    if r.get("roofline_tok_s"):
        return r["roofline_tok_s"], 100.0 * r["tok_s"] / r["roofline_tok_s"]
    sh, t = shape_of(r), r.get("test", "")
    if not sh or not r.get("tok_s"):
        return None, None
    if t.startswith("pp"):
        roof = PEAK_TFLOPS * 1e12 / (2 * PARAMS[sh])
    elif r.get("gb_s"):
        roof = HBM_GBS * 1e9 / (r["gb_s"] * 1e9 / r["tok_s"])
    else:
        return None, None
    return roof, 100.0 * r["tok_s"] / roof


def main():
    paths = sorted(glob.glob(os.path.join(here, "*.jsonl"))) + sys.argv[1:]
    recs = sorted((tidy(r) for r in load(paths)), key=lambda r: r.get("date", ""))
    runs = [r for r in recs if r.get("backend") == "cuda" and "tok_s" in r and "item" not in r]
    ab = [r for r in recs if r.get("bench") == "bench-7e"]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # ---- tok/s per phase (latest record per model, test, phase, switches) ----
    latest = OrderedDict()
    for r in runs:
        latest[(r["model"], r["test"], r.get("phase", "?"), r.get("switches", ""))] = r
    keys = sorted({(k[0], k[1]) for k in latest})
    phases = ["7b", "7c", "7d", "7e"]
    plots = []
    if keys:
        fig, axes = plt.subplots(len(keys), 1, figsize=(7, 1.6 * len(keys) + 1), squeeze=False)
        for ax, (model, test) in zip(axes[:, 0], keys):
            vals = []
            for p in phases:
                c = [r for k, r in latest.items() if k[0] == model and k[1] == test and k[2] == p and not k[3]]
                vals.append(c[-1]["tok_s"] if c else 0.0)
            ax.barh(phases, vals, color="#4477aa")
            ax.set_title(f"{model} {test}", fontsize=9)
            ax.set_xscale("symlog")
            for y, v in enumerate(vals):
                if v:
                    ax.text(v, y, f" {v:,.1f}", va="center", fontsize=8)
        axes[-1, 0].set_xlabel("tok/s (CUDA, H200)")
        fig.tight_layout()
        fig.savefig(os.path.join(here, "phases-tok_s.png"), dpi=110)
        plt.close(fig)
        plots.append(("tok/s per phase", "phases-tok_s.png"))

    # ---- A/B ratios (latest per model, test, item) ----
    ab_last = OrderedDict()
    for r in ab:
        ab_last[(r["model"], r["test"], r["item"])] = r
    ab_last = OrderedDict(sorted(ab_last.items(), key=lambda kv: kv[0], reverse=True))
    if ab_last:
        labels = [f"{k[0].replace('.gguf', '')[-22:]} {k[1]} {k[2]}" for k in ab_last]
        vals = [r["ratio_off_on"] for r in ab_last.values()]
        fig, ax = plt.subplots(figsize=(8, 0.28 * len(vals) + 1.2))
        # green: the item pays (off is slower by > 2%); red: it costs; grey: within 2%
        ax.barh(labels, vals, color=["#117733" if v < 0.98 else "#cc6677" if v > 1.02 else "#999999" for v in vals])
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel("tok/s off / tok/s on (< 1: the item pays)")
        ax.tick_params(axis="y", labelsize=7)
        for y, v in enumerate(vals):
            ax.text(v, y, f" {v:.2f}", va="center", fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(here, "ab-7e.png"), dpi=110)
        plt.close(fig)
        plots.append(("7e items: A/B ratio", "ab-7e.png"))

    # ---- RECORDS.md ----
    out = ["# Records", "",
           "Generated by `results/plot_ab.py` from the JSON lines in `results/*.jsonl`; do not edit by hand.",
           f"Roofline: prefill 2 x params / {PEAK_TFLOPS:g} TFLOP/s (bf16 GEMM measured on this H200), decode bytes per",
           f"token / {HBM_GBS:g} GB/s (HBM read measured on this H200); docs TARGETS.md. Seed Era-A: 7B Q4_K_M pp2048",
           "30.7 tok/s on a GB10; llama.cpp on this H200: 7B Q4_K_M pp2048 10,026, tg128 271 tok/s.", "",
           "## Every recorded CUDA run, per phase", "",
           "| phase | model | test | tok/s | ± | GB/s | roofline tok/s | % of roofline | commit | GPU | switches | date | file |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |"]
    for r in sorted(runs, key=lambda r: (r.get("phase", ""), r.get("model", ""), r.get("test", ""), r.get("date", ""))):
        roof, pct = roofline(r)
        out.append(f"| {r.get('phase', '?')} | {r.get('model', '?')} | {r.get('test', '?')} | {r['tok_s']:,.1f} | "
                   f"{r.get('tok_s_sd', 0):,.1f} | {r.get('gb_s', 0) or 0:,.0f} | {f'{roof:,.0f}' if roof else '-'} | "
                   f"{f'{pct:.1f}%' if pct else '-'} | {r.get('commit', '?')} | {r.get('gpu', '?')} | "
                   f"{r.get('switches', '') or '-'} | {r.get('date', '?')} | {r['_file']} |")
    out += ["", "## 7e items on vs off (bench-7e: A B A B ..., medians)", "",
            "| model | test | item off | tok/s all on | tok/s item off | off / on | reps | commit | GPU |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for (m, t, it), r in ab_last.items():
        out.append(f"| {m} | {t} | {it} | {r['tok_s_on']:,.1f} | {r['tok_s_off']:,.1f} | {r['ratio_off_on']:.3f} | "
                   f"{r.get('reps', '?')} | {r.get('commit', '?')} | {r.get('gpu', '?')} |")
    if not ab_last:
        out.append("| (no bench-7e records yet: `make bench-7e` on the device) | | | | | | | | |")
    out.append("")
    for title, png in plots:
        out += [f"## {title}", "", f"![{title}]({png})", ""]
    with open(os.path.join(here, "RECORDS.md"), "w") as f:
        f.write("\n".join(out))
    print(f"RECORDS.md: {len(runs)} CUDA runs, {len(ab_last)} A/B rows; plots: {', '.join(p for _, p in plots) or 'none'}")


if __name__ == "__main__":
    main()
