"""Reading bench records (one JSON object a line, results/README.md) for the plot scripts."""
import json
import os
import sys


def load(paths, keep=lambda r: True):
    """Every record of the files for which keep(record) holds, each with "_file" (its file's
    name); a line that is not JSON is reported on stderr and left out."""
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
                if keep(r):
                    r["_file"] = os.path.basename(p)
                    recs.append(r)
    return recs


def at_depth_zero(r):
    """a test into an empty context (records with "depth": D > 0 ran after D tokens)"""
    return not r.get("depth", 0)


def save(fig, out, dpi=110):
    """fig into out through a temporary file and a rename: a reader never sees half a PNG"""
    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=dpi)
    os.replace(tmp, out)
    print(f"wrote {out}")
