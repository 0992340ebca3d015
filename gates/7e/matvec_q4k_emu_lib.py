# Shared pieces of the host emulations of phase7e_perf/matvec_q4k_kernel.cuh (gates/7e/emu_matvec_q4k.py,
# emu_matvec_q4k_qx.py): the pass/fail/skip counter, the GGUF Q4_K / Q8_K block builders,
# stage_act's shared layout (act_perm) and the host toolchain lookup. Imported, never run: the name
# must not match emu_*.py, which gates/common/py_emu_kernels.py runs as scripts.
import os
import shutil
import numpy as np

WARPS = 8
AK = 292
rng = np.random.default_rng(12)


class Checks:
    """counts passed / failed / skipped checks; prints the first 10 mismatches as they happen"""

    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.first_bad = []

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            if len(self.first_bad) < 10:
                self.first_bad.append(f"{name}: {detail}")
                print(f"  MISMATCH {name}: {detail}")

    def skip(self, what):
        self.skipped += 1
        print(f"skip {what}")

    def save(self):  # negative controls run checks that must fail, then drop them
        return self.passed, self.failed, list(self.first_bad)

    def restore(self, state):
        self.passed, self.failed = state[0], state[1]
        self.first_bad[:] = state[2]

    def report(self):
        """the last line gates/common/py_emu_kernels.py reads; returns the exit status"""
        print(f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped")
        return 1 if self.failed else 0


# ---------------- test data (GGUF block layouts) ----------------
def rand_f16(n, lo, hi):
    return (rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)).astype(np.float16)


def make_q4k(M, nsb):
    b = rng.integers(0, 256, size=(M, nsb, 144), dtype=np.uint8)
    b[:, :, 0:2] = rand_f16(M * nsb, 1e-3, 2e-2).view(np.uint8).reshape(M, nsb, 2)
    b[:, :, 2:4] = rand_f16(M * nsb, 1e-3, 2e-2).view(np.uint8).reshape(M, nsb, 2)
    return b


def make_act(nsb):
    """one Q8_K row: per block f32 d, int8 qs[256], int16 bsums[16] (sums of 16 qs)"""
    d = rng.uniform(1e-3, 1e-2, nsb).astype(np.float32)
    qs = rng.integers(-127, 128, size=(nsb, 256)).astype(np.int8)
    bs = qs.astype(np.int16).reshape(nsb, 16, 16).sum(axis=2).astype(np.int16)
    raw = np.zeros((nsb, AK), np.uint8)
    raw[:, 0:4] = d.view(np.uint8).reshape(nsb, 4)
    raw[:, 4:260] = qs.view(np.uint8)
    raw[:, 260:292] = bs.view(np.uint8).reshape(nsb, 32)
    return raw.reshape(-1), d, qs, bs


# ---------------- the shared activation layout of kernel_matvec_q4k ----------------
def act_perm(v):
    return v ^ ((v & 8) >> 2)


def stage_act(raw, nsb):
    """stage_act: word i of the 292-byte blocks -> sq (permuted uint4), sd, sbs"""
    words = raw.view("<u4").astype(np.uint64)
    sqw = np.zeros(nsb * 64, np.uint64)
    sd = np.zeros(nsb, np.float32)
    sbs = np.zeros(nsb * 8, np.uint64)
    i = np.arange(nsb * 73)
    s, o = i // 73, i % 73
    m0, mq, mb = o == 0, (o >= 1) & (o <= 64), o >= 65
    sd[s[m0]] = words[i[m0]].astype(np.uint32).view(np.float32)
    oq = o[mq] - 1
    sqw[s[mq] * 64 + act_perm(oq >> 2) * 4 + (oq & 3)] = words[i[mq]]
    sbs[s[mb] * 8 + (o[mb] - 65)] = words[i[mb]]
    return sqw.reshape(nsb * 16, 4), sd, sbs


# ---------------- host builds of the kernel source ----------------
HOST_FP16 = r"""/* host stub for the matvec_q4k host harnesses */
#pragma once
#include <stdint.h>
#include <string.h>
struct __half { unsigned short b; };
static inline __half __ushort_as_half(unsigned short b) { __half h; h.b = b; return h; }
static inline float __half2float(__half h) { _Float16 f; memcpy(&f, &h.b, 2); return (float)f; }
"""


def host_tools():
    """(repo root, g++ path or None, CUDA include dirs holding vector_functions.h)"""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    cxx = shutil.which("g++")
    cuda_inc = [d for d in (os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include")
                if os.path.exists(os.path.join(d, "vector_functions.h"))]
    return root, cxx, cuda_inc

# the integer / load intrinsics both host harnesses (emu_matvec_q4k.py, emu_matvec_q4k_qx.py) stub the same way
HOST_INTRINSICS = r"""static inline uint4 __ldg(const uint4 *p) { return *p; }
static inline unsigned short __ldg(const unsigned short *p) { return *p; }
static inline unsigned int __ldg(const unsigned int *p) { return *p; }
static inline int __ldg(const int *p) { return *p; }
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int k = 0; k < 4; k++) r |= (((a >> (8 * k)) - (b >> (8 * k))) & 0xFFu) << (8 * k);
    return r;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (s & 31));
}
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
"""
