"""Aggregate decode speed against the number of sequences a step runs: S_TG (and S_PP) of
`minfer bench --batch` records ("bench": "batched"), one line per model and backend, with the
B = 1 decode speed times B as the line a step would follow if B sequences cost what one does. Records
of another engine ("engine": "llama.cpp", S_TG only) are drawn dashed, without the B x line.
With --latest only the newest table of each engine, model and backend is drawn (the records'
dates), so the current tables stand beside the peer's with a readable legend.
    .venv/bin/python results/plot_batch.py [--latest] OUT.png FILE.jsonl [FILE.jsonl ...]"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


BOOKKEEPING = ("MINFER_COMMIT=", "MINFER_PYTHON=", "MINFER_BENCH_DIR=", "MINFER_GATE_")


def short_name(model):
    name = model.replace(".gguf", "")
    for pre in ("minfer-7e-", "minfer-7b-"):
        name = name.replace(pre, "")
    return name


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    args = sys.argv[1:]
    latest = "--latest" in args
    args = [a for a in args if a != "--latest"]
    if len(args) < 2:
        print(__doc__)
        sys.exit(2)
    out, files = args[0], args[1:]
    recs = records.load(files, lambda r: r.get("bench") == "batched")
    by = defaultdict(dict)   # (engine, model, backend, pp, tg, commit, switches) -> B -> record (the last)
    for r in recs:
        by[(r.get("engine", "minfer"), r["model"], r["backend"], r["pp"], r["tg"], r.get("commit", "?"),
            r.get("switches", ""))][r["B"]] = r
    if latest:   # per (engine, model, backend) the table whose newest record is the newest
        newest = {}
        for key, rows in by.items():
            d = max(r.get("date", "") for r in rows.values())
            k3 = (key[0], short_name(key[1]), key[2])
            if k3 not in newest or d > newest[k3][0]:
                newest[k3] = (d, key)
        by = {key: by[key] for _, key in newest.values()}
    fig, axes = plt.subplots(1, 2, figsize=(13, 7 if latest else 9))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n_series, (key, rows) in enumerate(sorted(by.items())):
        color = colors[n_series % len(colors)]   # one series, one color in both panels
        bs = sorted(rows)
        engine, model, backend, pp, tg, commit, sw = key
        name = short_name(model)
        # the engine's switches only (older records also list the run's bookkeeping variables)
        sw = ",".join(v for v in sw.split(",") if v and not v.startswith(BOOKKEEPING))
        label = f"{engine} {name} ({backend}, PP {pp}, TG {tg}, {commit}{' ' + sw if sw and not latest else ''})"
        other = engine != "minfer"
        for ax, col in zip(axes, ("s_tg", "s_pp")):
            if col not in rows[bs[0]]:
                continue
            ax.plot(bs, [rows[b][col] for b in bs], marker="o", label=label, linestyle="--" if other else "-",
                    color=color)
            if 1 in rows and not other and col == "s_tg":  # a prompt step is batched at B = 1 already
                ax.plot(bs, [rows[1][col] * b for b in bs], linestyle=":", color=color, alpha=0.6)
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
