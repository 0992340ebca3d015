"""Aggregate decode speed against the number of sequences a step runs: S_TG (and S_PP) of
`minfer bench --batch` records ("bench": "batched"), one line per model and backend, with the
B = 1 speed times B as the line a step would follow if B sequences cost what one does.
    .venv/bin/python results/plot_batch.py OUT.png FILE.jsonl [FILE.jsonl ...]"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    out, files = sys.argv[1], sys.argv[2:]
    recs = records.load(files, lambda r: r.get("bench") == "batched")
    by = defaultdict(dict)   # (model, backend, threads, pp, tg) -> B -> record (the last one)
    for r in recs:
        by[(r["model"], r["backend"], r.get("threads"), r["pp"], r["tg"])][r["B"]] = r
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for key, rows in sorted(by.items()):
        bs = sorted(rows)
        label = f"{key[0]} ({key[1]}, {key[2]} threads, PP {key[3]}, TG {key[4]})"
        for ax, col in zip(axes, ("s_tg", "s_pp")):
            line, = ax.plot(bs, [rows[b][col] for b in bs], marker="o", label=label)
            if 1 in rows:
                ax.plot(bs, [rows[1][col] * b for b in bs], linestyle=":", color=line.get_color(), alpha=0.6)
    for ax, title in zip(axes, ("decode: S_TG", "prompt: S_PP")):
        ax.set_xlabel("sequences a step (B)")
        ax.set_ylabel("tokens/s, all sequences")
        ax.set_title(f"{title} (dotted: B x the B = 1 speed)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    records.save(fig, out)


if __name__ == "__main__":
    main()
