# Host emulation (Python) of stage_bytes in phase7e_perf/matvec_staged_exact.cu (the staged one-token matmul's row staging):
# staged bytes equal the tensor's at every alignment, no read outside the tensor. CPU only.
# Host emulation of stage_bytes (phase7e_perf/matvec_staged_exact.cu): staged rows equal the tensor's
# bytes at every alignment and size, and no byte outside the tensor is read.
import random
random.seed(3)
def stage(mem, src, n, tb, te, T=128):
    a0 = src & ~15; a1 = (src + n + 15) & ~15; nch = (a1 - a0) >> 4
    lo = 1 if a0 < tb else 0; hi = nch - 1 if a1 > te else nch
    dst = bytearray(16 * nch); reads = set()
    for tid in range(T):
        i = lo + tid
        while i < hi:
            for j in range(8):
                idx = i + j * T
                if idx < hi:
                    for b in range(16):
                        reads.add(a0 + 16 * idx + b); dst[16 * idx + b] = mem[a0 + 16 * idx + b]
            i += 8 * T
    for e in range(2):
        i = 0 if e == 0 else nch - 1
        if lo <= i < hi: continue
        if e == 1 and nch == 1 and lo == 1: continue
        for b in range(16):
            p = a0 + 16 * i + b
            if tb <= p < te: reads.add(p); dst[16 * i + b] = mem[p]
            else: dst[16 * i + b] = 0
    return dst, src - a0, reads
bad = 0
for trial in range(3000):
    base = 4096; off = random.choice([0, 2, 4, 6, 8, 14]); M = random.randint(1, 9); wrow = random.choice([18, 22, 34, 144, 176, 210, 504, 952])
    tb = base + off; te = tb + M * wrow
    mem = bytearray(random.getrandbits(8) for _ in range(te + 64))
    RB = random.randint(1, 4)
    for m0 in range(0, M, RB):
        rows = min(RB, M - m0); src = tb + m0 * wrow
        dst, lead, reads = stage(mem, src, rows * wrow, tb, te)
        if bytes(dst[lead:lead + rows * wrow]) != bytes(mem[src:src + rows * wrow]): bad += 1
        if any(p < tb or p >= te for p in reads): bad += 1
        if (lead % 16) != (src % 16): bad += 1
print("stage_bytes emulation:", "ok" if bad == 0 else f"{bad} BAD cases")
if bad:
    raise SystemExit(1)
