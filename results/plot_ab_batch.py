"""What each 8b item buys a batched decode step: from the A/B records of `tools/bench_8b.sh` run with
and without MINFER_PERF_OFF=<item> in one device call ("bench": "batched"), the ratio of S_TG with
the item to S_TG without it, per model and B (the mean of the rounds), one bar per item. A file
whose arms are named by MINFER_BUILD_DEFS (one of them "on") gives one bar per other arm: S_TG
"on" over S_TG of that arm.
    .venv/bin/python results/plot_ab_batch.py OUT.png FILE.jsonl [FILE.jsonl ...]"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def switch(switches, name):
    for v in (switches or "").split(","):
        if v.startswith(name + "="):
            return v.split("=", 1)[1]
    return None


def perf_off(switches):
    off = switch(switches, "MINFER_PERF_OFF") or ""
    return "" if off == "none" else off   # MINFER_PERF_OFF=none: the default, every item on


def arm(switches, named):
    """the record's arm: in a file whose arms are named by MINFER_BUILD_DEFS with one named "on"
    (several switches at once: "on", "base", "noahead", ...), that name ("" for "on"); else the
    items MINFER_PERF_OFF turned off"""
    if named:
        d = switch(switches, "MINFER_BUILD_DEFS")
        return "" if d == "on" else d
    return perf_off(switches)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    out, files = sys.argv[1], sys.argv[2:]
    bars = []   # (label, ratio)
    for f in files:
        recs = records.load([f], lambda r: r.get("bench") == "batched")
        s = defaultdict(list)   # (model, B, off) -> S_TG of each round
        named = any(switch(r.get("switches"), "MINFER_BUILD_DEFS") == "on" for r in recs)
        for r in recs:
            s[(r["model"].replace(".gguf", "").replace("minfer-7e-", "").replace("minfer-7b-", ""), r["B"],
               arm(r.get("switches"), named))].append(r["s_tg"])
        commit = recs[0].get("commit", "?") if recs else "?"
        for (model, B, off), v in sorted(s.items()):
            if not off or (model, B, "") not in s:
                continue
            on = s[(model, B, "")]
            bars.append((f"{off} {model.replace('qwen2.5-', '')} B={B} ({commit})",
                         (sum(on) / len(on)) / (sum(v) / len(v))))
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(bars) + 1.4))
    ys = range(len(bars))
    ax.barh(list(ys), [b[1] for b in bars], color=["tab:green" if b[1] >= 1 else "tab:red" for b in bars])
    ax.set_yticks(list(ys))
    ax.set_yticklabels([b[0] for b in bars], fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    for y, b in zip(ys, bars):
        ax.text(b[1], y, f" {b[1]:.2f}", va="center", fontsize=7)
    ax.set_xlabel("S_TG with the item / S_TG with MINFER_PERF_OFF=item (same call)")
    ax.set_title("8b items: batched decode speed, H200")
    ax.invert_yaxis()
    records.save(fig, out)


if __name__ == "__main__":
    main()
