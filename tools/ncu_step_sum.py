"""Sums an Nsight Compute CSV (gpu__time_duration.sum per kernel) by kernel name, per decode step.

    usage: ncu_step_sum.py CSV STEP_KERNEL_REGEX
A step is counted by the kernel matching STEP_KERNEL_REGEX (one a step: the argmax). Prints
count a step and microseconds a step for each kernel name, longest first, and the total:
the device time of one step without launch gaps, to set beside the step's wall time."""
import csv
import re
import sys
from collections import defaultdict

rows = list(csv.reader(open(sys.argv[1])))
start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")   # the program's own output comes first
rows = [r for r in rows[start:] if len(r) == len(rows[start])]
head = rows[0]
ki, mi, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
tot, cnt = defaultdict(float), defaultdict(int)
steps = 0
for r in rows[1:]:
    if r[mi] != "gpu__time_duration.sum":
        continue
    name = re.sub(r"\(.*", "", r[ki]).replace("void ", "")[:70]
    us = float(r[vi].replace(",", "")) / 1000.0   # ns
    tot[name] += us
    cnt[name] += 1
    steps += bool(re.search(sys.argv[2], name))
steps = max(steps, 1)
print(f"{steps} steps; per step:")
for n in sorted(tot, key=lambda n: -tot[n])[:30]:
    print(f"  {cnt[n] / steps:7.1f} x {n:70s} {tot[n] / steps:9.1f} us")
print(f"  total {sum(cnt.values()) / steps:.0f} kernels, {sum(tot.values()) / steps:.1f} us a step")
