"""The one-token matmul ladder as a picture: per model, every kernel on every decode-step
weight shape as a bar of its share of the HBM read rate (gates/7e/bench_roofline records,
"bench": "roofline"), with the 80% line phase 8a aims at. Linear axis, 0 .. 100%.
    .venv/bin/python results/plot_roofline.py FILE.jsonl [FILE.jsonl ...] [--out OUT_PREFIX]
writes OUT_PREFIX-<model>.png (default results/roofline). With several files the newest record of
each (shape, kernel) is drawn (a later ladder of some shapes over an earlier full one), and the
title names every commit drawn."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def latest(recs):
    """the newest record per (model, tensor, type, kernel)"""
    by = {}
    for r in recs:
        k = (r["model"], r["tensor"], r["type"], r["kernel"])
        if k not in by or r.get("date", "") >= by[k].get("date", ""):
            by[k] = r
    return list(by.values())


def plot_model(model, rows, out):
    rows = sorted(rows, key=lambda r: (r["tensor"], r["type"], -r.get("roofline_frac", 0)))
    labels = [f'{r["tensor"]} ({r["type"]})\n{r["kernel"]}' for r in rows]
    vals = [100 * r["roofline_frac"] if r.get("valid") else 0 for r in rows]
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.6))
    colors = ["#1f4e8c" if r.get("valid") else "#bbbbbb" for r in rows]
    ax.barh(range(len(rows)), vals, color=colors)
    for i, (r, v) in enumerate(zip(rows, vals)):
        txt = f'{v:.0f}%  {r["gb_s"]:,.0f} GB/s  {r["us"]:.1f} us' if r.get("valid") else "failed validation"
        ax.text(min(v, 100) + 1, i, txt, va="center", fontsize=7)
    ax.axvline(80, color="#2a7a2a", ls=":", lw=1.2)
    ax.text(80.5, len(rows) - 0.4, "80% (phase 8a target)", color="#2a7a2a", fontsize=7, va="bottom")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=6.5)
    ax.invert_yaxis()
    ax.set_xlim(0, 125)
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel(f'share of the HBM read rate ({rows[0]["peak_gb_s"]:,.0f} GB/s)')
    g = rows[0].get("gpu", "")
    commits = ", ".join(sorted({r.get("commit", "?") for r in rows}))
    ax.set_title(f"{model}: one-token matmul, each kernel alone ({g}, commit {commits})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def main():
    args = sys.argv[1:]
    prefix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roofline")
    if "--out" in args:
        i = args.index("--out")
        if i + 1 >= len(args):
            sys.exit(__doc__)
        prefix = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    recs = latest(records.load(args, lambda r: r.get("bench") == "roofline"))
    if not recs:
        sys.exit(f"{', '.join(args)}: no roofline records")
    for model in sorted({r["model"] for r in recs}):
        slug = model.lower().replace(" ", "-").replace(".", "")
        plot_model(model, [r for r in recs if r["model"] == model], f"{prefix}-{slug}.png")


if __name__ == "__main__":
    main()
