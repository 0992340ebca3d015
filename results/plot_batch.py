"""Aggregate decode speed against the number of sequences a step runs: S_TG (and S_PP) of
`minfer bench --batch` records ("bench": "batched"), one line per model and backend, with the
B = 1 decode speed times B as the line a step would follow if B sequences cost what one does. Records
of another engine ("engine": "llama.cpp", S_TG only) are drawn dashed, without the B x line.
    .venv/bin/python results/plot_batch.py OUT.png FILE.jsonl [FILE.jsonl ...]"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


BOOKKEEPING = ("MINFER_COMMIT=", "MINFER_PYTHON=", "MINFER_BENCH_DIR=", "MINFER_GATE_")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    out, files = sys.argv[1], sys.argv[2:]
    recs = records.load(files, lambda r: r.get("bench") == "batched")
    by = defaultdict(dict)   # (engine, model, backend, pp, tg, commit, switches) -> B -> record (the last)
    for r in recs:
        by[(r.get("engine", "minfer"), r["model"], r["backend"], r["pp"], r["tg"], r.get("commit", "?"),
            r.get("switches", ""))][r["B"]] = r
    fig, axes = plt.subplots(1, 2, figsize=(13, 7))
    for key, rows in sorted(by.items()):
        bs = sorted(rows)
        engine, model, backend, pp, tg, commit, sw = key
        name = model.replace(".gguf", "")
        for pre in ("minfer-7e-", "minfer-7b-"):
            name = name.replace(pre, "")
        # the engine's switches only (older records also list the run's bookkeeping variables)
        sw = ",".join(v for v in sw.split(",") if v and not v.startswith(BOOKKEEPING))
        label = f"{engine} {name} ({backend}, PP {pp}, TG {tg}, {commit}{' ' + sw if sw else ''})"
        other = engine != "minfer"
        for ax, col in zip(axes, ("s_tg", "s_pp")):
            if col not in rows[bs[0]]:
                continue
            line, = ax.plot(bs, [rows[b][col] for b in bs], marker="o", label=label, linestyle="--" if other else "-")
            if 1 in rows and not other and col == "s_tg":  # a prompt step is batched at B = 1 already
                ax.plot(bs, [rows[1][col] * b for b in bs], linestyle=":", color=line.get_color(), alpha=0.6)
    for ax, title in zip(axes, ("decode: S_TG (dotted: B x the B = 1 speed)", "prompt: S_PP")):
        ax.set_xlabel("sequences a step (B)")
        ax.set_ylabel("tokens/s, all sequences")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.14), ncol=1, frameon=False)
    records.save(fig, out)


if __name__ == "__main__":
    main()
