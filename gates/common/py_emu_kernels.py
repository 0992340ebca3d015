#!/usr/bin/env python3
"""Host emulations of the CUDA kernels' index math (gates/7e/emu_*.py, gates/8a/emu_*.py, gates/8b/emu_*.py): which
lane stages, loads and writes which element, checked against plain Python / NumPy on random
data. They need no GPU, so CI runs them: a change to a kernel's tiling that its emulation no
longer matches fails here before a device run. Usage: py_emu_kernels.py BUILD (not used)."""
import os, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
emus = [(d, name) for d in ("7e", "8a", "8b") for name in sorted(os.listdir(os.path.join(here, "..", d)))
        if name.startswith("emu_") and name.endswith(".py")]
passed = failed = 0
for d, name in emus:
    p = subprocess.run([sys.executable, os.path.join(here, "..", d, name)], capture_output=True, text=True, timeout=600)
    last = (p.stdout.strip().splitlines() or ["(no output)"])[-1]
    if p.returncode == 0:
        passed += 1
        print(f"ok    {name}: {last}")
    else:
        failed += 1
        print(f"FAIL  {name} (exit {p.returncode}): {last}")
        print("\n".join(("    " + l) for l in (p.stdout + p.stderr).strip().splitlines()[-15:]))
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
