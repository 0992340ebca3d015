#!/usr/bin/env python3
"""Where a kernel's warps stall, by CUDA source line, from Nsight Compute's source page.

    ncu --section SourceCounters --import-source yes --page source --print-source cuda,sass --csv ... > k.csv
    python3 tools/ncu_source_top.py k.csv[.gz] [N]

The page holds one table a source file (a "File Path" line, then a header row and a row a line or
SASS instruction). This prints the N lines (20 by default) with the most warp-stall samples:
file:line, their share of the kernel's samples, and the samples of the main stall reasons
(long_sb: a global memory or barrier-wait scoreboard, wait: a fixed-latency dependency, short_sb:
shared memory, mio: the shared-memory queue full, barrier: __syncthreads, math: a pipe busy,
selected: issuing). Standard library only.
"""
import csv
import gzip
import sys

REASONS = ["stall_long_sb", "stall_wait", "stall_short_sb", "stall_mio", "stall_barrier", "stall_math",
           "stall_selected"]
SAMPLES = "Warp Stall Sampling (All Samples)"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def source_lines(path):
    """(file name, row dict) for every CUDA source line of the page"""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    header, name, rows = None, None, []
    for line in lines:
        if line.startswith('"File Path"'):
            name = next(csv.reader([line]))[1].split("/")[-1]
        elif line.startswith('"Line No"'):
            header = next(csv.reader([line]))
        elif header and line.startswith('"'):
            row = next(csv.reader([line]))
            if len(row) == len(header):
                d = dict(zip(header, row))
                if d.get("Line No"):   # a CUDA line; the SASS rows leave it empty
                    rows.append((name, d))
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rows = source_lines(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no source lines (was the page printed with --page source --csv?)")
    total = sum(number(d[SAMPLES]) for _, d in rows)
    print(f"{sys.argv[1]}: {len(rows)} source lines, {total:.0f} stall samples")
    print("line | share | " + " ".join(r.replace("stall_", "") for r in REASONS))
    rows.sort(key=lambda r: -number(r[1][SAMPLES]))
    for name, d in rows[:top]:
        share = 100 * number(d[SAMPLES]) / total if total else 0.0
        print(f"{name}:{d['Line No']} | {share:4.1f}% | " + " ".join(f"{number(d.get(r, '0')):.0f}" for r in REASONS))


if __name__ == "__main__":
    main()
