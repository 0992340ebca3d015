#!/usr/bin/env python3
"""Plots made from the bench records in results/*.jsonl (one JSON object a line, the
record shape of docs/DESIGN): tok/s per backend/phase and test, and A/B ratios where
records carry an "ab" field. Writes PNGs beside this script."""
import glob, json, os, sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
recs = []
for path in sorted(glob.glob(os.path.join(here, "*.jsonl"))):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError:
                    print(f"{path}: skipping a malformed line", file=sys.stderr)
if not recs:
    sys.exit("no bench records under results/")

# latest record per (model, type, backend, phase, switches, test)
latest = {}
for r in recs:
    key = (r.get("model", "?"), r.get("type", "?"), r.get("backend", "?"), r.get("phase", "?"),
           r.get("switches", "") or "", r.get("test", "?"))
    latest[key] = r

groups = defaultdict(list)
for (model, typ, be, phase, sw, test), r in latest.items():
    groups[(os.path.basename(str(model)), typ)].append((f"{be}/{phase}{' ' + sw if sw else ''}", test, r))

for (model, typ), rows in groups.items():
    tests = sorted({t for _, t, _ in rows})
    configs = sorted({c for c, _, _ in rows})
    fig, axes = plt.subplots(1, len(tests), figsize=(4 * len(tests) + 1, 3.5), squeeze=False)
    for ax, test in zip(axes[0], tests):
        vals = [next((r["tok_s"] for c2, t2, r in rows if c2 == c and t2 == test), 0) for c in configs]
        errs = [next((r.get("tok_s_sd", 0) for c2, t2, r in rows if c2 == c and t2 == test), 0) for c in configs]
        ax.barh(configs, vals, xerr=errs, color="#4477aa")
        ax.set_title(test)
        ax.set_xlabel("tok/s")
        for y, v in enumerate(vals):
            if v:
                ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    fig.suptitle(f"{model} ({typ})")
    fig.tight_layout()
    out = os.path.join(here, f"plot-{model.replace('.gguf', '')}-{typ}.png".replace("/", "_"))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print("wrote", out)
