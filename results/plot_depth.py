"""Decode speed against the context already filled: tg128 @ dN records of `minfer bench -d`
("depth" in the record), one panel per model, one line per attention path and KV cache size (runs of one depth are left out)
(records with MINFER_PERF_OFF=d4 ran 7d's single-block kernel, the rest phase 8a's split-KV
where the cache is long enough). Log-free axes: tok/s from 0.
    .venv/bin/python results/plot_depth.py OUT.png FILE.jsonl [FILE.jsonl ...]"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def variant(r):
    sw, key = {}, None   # "A=x,y,B=z": a piece without '=' continues the value before it
    for piece in r.get("switches", "").split(","):
        if "=" in piece:
            key, val = piece.split("=", 1)
            sw[key] = val
        elif key:
            sw[key] += "," + piece
    off = set(sw.get("MINFER_PERF_OFF", "").split(",")) - {"", "none"}
    skv = sw.get("MINFER_SKV_MIN_CTX")
    if "d4" in off:
        path = "7d kernel (d4 off)"
    elif skv == "1000000":
        path = "d20 at every depth"
    else:
        path = "split-KV (d4)" + (" at every depth" if skv == "1" else "")
        path += "".join(f", {i} off" for i in sorted(off))
    size = f"context {r['n_ctx']}" if "n_ctx" in r else f"{r.get('kv_mb', 0):.0f} MB KV cache"
    return f"{path}, {size}, {r.get('commit', '?')}"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    out, files = sys.argv[1], sys.argv[2:]
    recs = records.load(files, lambda r: str(r.get("test", "")).startswith("tg") and "depth" in r)
    by = defaultdict(lambda: defaultdict(list))   # model -> variant -> [(depth, tok/s)]
    for r in recs:
        by[r["model"]][variant(r)].append((r["depth"], r["tok_s"]))
    models = sorted(by)
    fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 4.8), squeeze=False)
    for ax, m in zip(axes[0], models):
        for v, pts in sorted(by[m].items()):
            pts = sorted(pts)
            if len({p[0] for p in pts}) < 2:   # a plain tg128 run: no depth to draw
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=v)
        ax.set_title(m.replace("minfer-7e-", "").replace(".gguf", ""))
        ax.set_xlabel("tokens already in the context")
        ax.set_ylabel("decode tok/s (tg128)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Decode at depth (NVIDIA H200)")
    records.save(fig, out)


if __name__ == "__main__":
    main()
