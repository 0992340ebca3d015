# Host emulation (NumPy) of kernel_gemm_f16s in phase8b_batch/gemm_f16_stream.cu (item b6): the f16
# activations in groups stored as (e0, e2, e1, e3) by kernel_act_f16 (pairs), the ring's activation rows
# of 544 bytes, the stage's f16 scales, each lane's 32-bit level words turned into f16 weights by the
# kernel's bit operations (OR 0x6400, subtract 1024 or 1056, a Q4_K word's high nibbles masked in place
# and x / 16 - 64, one rounded multiply-add), the fragments
# per the PTX ISA tables of gates/7e/ptx_frag.py (mma.m16n8k16), the epilogue's rows and tokens, and
# stream-K: P runs of the band x stage units, each block's ring loading them in unit order across band
# edges (issue and compute pointers apart), the pieces written whole to Y or to slots 2p / 2p + 1, the
# launcher's cut test and kernel_f16s_fixup adding a cut band's pieces in unit order, every output and
# slot element written once (the fixup's bounds from f16s_run_of checked against a scan of the runs).
# And b22's form (gemm_f16_wgmma_sm90a.cu): the activations' 16-element groups as evens then odds,
# their stage in the 128-byte-swizzled slot as the issue loop writes it and as each k16 step's
# matrix descriptor reads it, the warpgroups' rows and K halves, the accumulators' rows and tokens.
# And b39's slot protocol (full and empty mbarriers, no barrier a stage) with each block's warps
# interleaved at random: no slot refilled while read, no aliased parity wait, no deadlock. And b42's
# f16s_band_cut (the SwiGLU finding a cut band's pieces) against the fixup's blocks on every plan.
# Checked against a direct formula from ggml's Q4_K / Q6_K definitions with the same f16 roundings
# (must agree to float64 noise) and reported against the exact product. A wrong element order in
# either operand, a wrong byte offset or scale index shows as an O(1) error.
# CPU only: python3 gates/8b/emu_gemm_f16s.py
import os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "7e"))
from ptx_frag import A_row, A_col, B_row, B_col, C_row, C_col   # noqa: E402

rng = np.random.default_rng(86)
BM, ASLOT = 128, 544
FX_TOK = 32   # tokens a fixup block sums (its 256 threads: a row each, two tokens a pass)
# the rings: (slots, stages loading ahead of the one computed, lag): a slot may take a new unit at the
# barrier `lag` stages after its last unit was computed. b6 (FS_NS): the next barrier. b22 with b32
# (fw_ring): a warpgroup's last products of stage s run on through stage s + 1, so the slot is free at
# stage s + 2's barrier; Q4_K loads two stages ahead in four slots, Q6_K one ahead in three.
RING_B6, RING_B22, RING_B22_Q6 = (3, 2, 1), (4, 2, 2), (3, 1, 2)
RINGS = (RING_B6, RING_B22, RING_B22_Q6)
Q4_K, Q6_K = "q4_k", "q6_k"
WB = {Q4_K: 144, Q6_K: 210}


def h(x):  # round to f16, as float64
    return np.float16(x).astype(np.float64)


def make_weights(wt, K, M):
    nb = K // 256
    raw = rng.integers(0, 256, size=(M, nb, WB[wt]), dtype=np.uint8)
    def put16(off, lo, hi):
        v = rng.uniform(lo, hi, size=(M, nb)).astype(np.float16)
        raw[:, :, off:off + 2] = v.view(np.uint8).reshape(M, nb, 2)
    if wt == Q4_K: put16(0, 0.01, 0.1); put16(2, 0.0, 0.05)
    else: put16(208, 0.005, 0.05)
    return raw.reshape(M, nb * WB[wt])


def q4k_scale_min(sc, j):   # ggml get_scale_min_k4
    if j < 4: return sc[j] & 63, sc[j + 4] & 63
    return (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)


def ref_weights(wt, W, K):
    """[M, K]: ggml's dequantization with the kernel's f16 roundings (f16 scale and min, one rounding of
    the product), and without them (exact), from the formats' definitions"""
    M = W.shape[0]
    wr, we = np.zeros((M, K)), np.zeros((M, K))
    for m in range(M):
        for b in range(K // 256):
            blk = W[m, b * WB[wt]:(b + 1) * WB[wt]].astype(np.int64)
            y0 = 256 * b
            if wt == Q4_K:
                d = float(W[m, b * 144:b * 144 + 2].view(np.float16)[0]); dmin = float(W[m, b * 144 + 2:b * 144 + 4].view(np.float16)[0])
                for j in range(8):
                    sc, mn = q4k_scale_min(blk[4:16], j)
                    q = (blk[16 + 32 * (j // 2):48 + 32 * (j // 2)] >> (4 * (j % 2))) & 15
                    S, Mn = h(np.float32(d) * np.float32(sc)), h(-(np.float32(dmin) * np.float32(mn)))
                    wr[m, y0 + 32 * j:y0 + 32 * j + 32] = h(q * S + Mn)
                    we[m, y0 + 32 * j:y0 + 32 * j + 32] = d * sc * q - dmin * mn
            else:
                d = float(W[m, b * 210 + 208:b * 210 + 210].view(np.float16)[0])
                ql, qh, scl = blk[0:128], blk[128:192], W[m, b * 210 + 192:b * 210 + 208].view(np.int8).astype(np.int64)
                for half in range(2):
                    L, H = ql[64 * half:64 * half + 64], qh[32 * half:32 * half + 32]
                    for l in range(32):
                        vals = [((L[l] & 15) | (((H[l] >> 0) & 3) << 4)) - 32, ((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32,
                                ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32, ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32]
                        for g in range(4):
                            e, sc = y0 + 128 * half + 32 * g + l, scl[8 * half + 2 * g + l // 16]
                            wr[m, e] = h(vals[g] * h(np.float32(d) * np.float32(sc)))
                            we[m, e] = d * sc * vals[g]
    return wr, we


def halves(words):   # uint32 -> (low f16, high f16) as float64
    w = np.asarray(words, dtype=np.uint32)
    return (w & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64), (w >> 16).astype(np.uint16).view(np.float16).astype(np.float64)


def deq(v, s, m, wt, high=False):   # deq_q4 / deq_q6 on each lane's word v (uint32) -> 2 f16 values [lane, 2]
    if wt == Q4_K:
        if high:   # nib_levels' high nibbles, masked in place: 1024 + 16 L, then x / 16 - 64 (one rounding, exact)
            lo, hi = halves((v & 0x00F000F0) | 0x64006400)
            lo, hi = h(lo * 0.0625 - 64.0), h(hi * 0.0625 - 64.0)
        else:
            lo, hi = halves((v & 0x000F000F) | 0x64006400)
            lo, hi = lo - 1024.0, hi - 1024.0
        return np.stack([h(lo * s + m), h(hi * s + m)], axis=1)
    lo, hi = halves((v & 0x00FF00FF) | 0x64006400)
    return np.stack([h((lo - 1056.0) * s), h((hi - 1056.0) * s)], axis=1)


def mma(D, A8, B4):   # D [lane, 4] += A [16, 16] @ B [16, 8] from the lanes' elements
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    A[A_row, A_col] = A8; B[B_row, B_col] = B4
    C = A @ B
    return D + C[C_row, C_col]


class Plan:   # f16s_plan: stream-K (S == 0, P runs) or a K split (S chunks of `chunk` stages a band)
    def __init__(self, bands, nst, P=None, S=0, chunk=0):
        self.units, self.nst, self.S, self.chunk = bands * nst, nst, S, chunk
        self.P = P if S == 0 else bands * S

    def __str__(self):
        return f"P {self.P}" if self.S == 0 else f"K split {self.S} (chunk {self.chunk}), P {self.P}"


def run_start(pl, p):   # f16s_run_start: the first unit of run p; run p is [start (p), start (p + 1))
    if pl.S == 0: return p * pl.units // pl.P
    return (p // pl.S) * pl.nst + min((p % pl.S) * pl.chunk, pl.nst)


def run_of(pl, u):   # f16s_run_of: the run holding unit u
    if pl.S == 0: return ((u + 1) * pl.P - 1) // pl.units
    return (u // pl.nst) * pl.S + min((u % pl.nst) // pl.chunk, pl.S - 1)


def band_order(pl, b):   # kernel_f16s_fixup's slots for band b: run lo's last piece, then the runs beginning inside b
    lo, hi = run_of(pl, b * pl.nst), run_of(pl, b * pl.nst + pl.nst - 1)
    return [2 * lo + 1] + [2 * q for q in range(lo + 1, hi + 1)]


def band_cut(pl, b):   # f16s_band_cut (b42's SwiGLU): None for a band the run wrote whole, else its slots in order
    u0 = b * pl.nst
    p = run_of(pl, u0) + 1
    if p >= pl.P or run_start(pl, p) >= u0 + pl.nst: return None
    return [2 * p - 1] + [2 * q for q in range(p, run_of(pl, u0 + pl.nst - 1) + 1)]


def cut(pl):   # the launcher's f16s_cut: a run boundary inside a band
    if pl.S: return pl.S > 1
    return any(run_start(pl, p) % pl.nst != 0 for p in range(1, pl.P))


def block_steps(p, pl, ring=RING_B6):
    """kernel_gemm_f16s's (ring RING_B22: kernel_gemm_f16w's) control flow for block p, line by line:
    ('load', ring slot, band, stage) for each issue, ('unit', ring slot, band, stage) for each unit computed,
    ('piece', band, whole, slot, first unit, end unit) at each epilogue"""
    ns, ahead, _ = ring
    nst = pl.nst
    u0 = run_start(pl, p)
    ln = run_start(pl, p + 1) - u0
    ib, is_ = u0 // nst, u0 % nst
    cb, cs = ib, is_
    head = cs != 0
    pstart = u0
    for q in range(ahead):   # the prologue
        if q < ln:
            yield ('load', q, ib, is_)
            is_ += 1
            if is_ == nst: is_, ib = 0, ib + 1
    for s in range(ln):
        q = s % ns
        if s + ahead < ln:
            yield ('load', (s + ahead) % ns, ib, is_)
            is_ += 1
            if is_ == nst: is_, ib = 0, ib + 1
        yield ('unit', q, cb, cs)
        if cs == nst - 1 or s == ln - 1:   # the piece ends: the band's last stage or the run's last unit
            yield ('piece', cb, (not head) and cs == nst - 1, 2 * p + (0 if head else 1), pstart, u0 + s + 1)
            head = False
            pstart = u0 + s + 1
        cs += 1
        if cs == nst: cs, cb = 0, cb + 1
    assert (cb, cs) == (ib, is_) == divmod(u0 + ln, nst), "the load and compute pointers end apart"


def fixup_blocks(pl, N):
    """kernel_f16s_fixup's control flow: (block x, block y, band, the slots it adds in order) for the blocks
    that write"""
    nst, P = pl.nst, pl.P
    for bx in range(P - 1):
        p = bx + 1
        u = run_start(pl, p)
        if u % nst == 0: continue
        b = u // nst
        bs, be = b * nst, b * nst + nst
        if run_start(pl, p - 1) > bs: continue
        order = [2 * p - 1]
        q = p
        while q < P and run_start(pl, q) < be:
            order.append(2 * q); q += 1
        for by in range((N + FX_TOK - 1) // FX_TOK):
            yield bx, by, b, order


def check_plan(bands, nst, P=None, N=64, quiet=False, S=0, chunk=0, ring=RING_B6):
    """the runs, the ring's order, the pieces, the slots, the launcher's cut test and the fixup's pieces
    on index math alone: every unit computed once, in unit order within a run, each ring slot computed
    as loaded and loaded again only `lag` stages after; each band either one whole piece or fixed up
    once from pieces covering its units in order; each slot one piece. Returns {slot: (band, first
    unit, end unit)} and the cut bands."""
    pl = Plan(bands, nst, P, S, chunk)
    units, P = pl.units, pl.P
    assert 1 <= P <= units, "P runs, none empty"
    seen = np.zeros(units, np.int64)
    piece_of, whole_bands = {}, []
    for p in range(P):
        assert run_start(pl, p + 1) - run_start(pl, p) >= 1, "an empty run"
        assert all(run_of(pl, u) == p for u in range(run_start(pl, p), run_start(pl, p + 1))), "run_of disagrees"
        slots = [None] * ring[0]
        done_at = [None] * ring[0]   # the stage at which each slot's last unit was computed
        last = run_start(pl, p) - 1
        step = 0
        for ev in block_steps(p, pl, ring):
            if ev[0] == 'load':
                assert slots[ev[1]] is None, "a ring slot loaded before it was computed"
                assert done_at[ev[1]] is None or done_at[ev[1]] <= step - ring[2], \
                    "a ring slot loaded while its last unit's products may still read it"
                slots[ev[1]] = ev[2:]
            elif ev[0] == 'unit':
                assert slots[ev[1]] == ev[2:], "a ring slot computed as another unit than loaded"
                slots[ev[1]] = None
                done_at[ev[1]] = step
                step += 1
                u = ev[2] * nst + ev[3]
                assert u == last + 1, "units out of order"
                last = u; seen[u] += 1
            else:
                _, b, wh, slot, u0, u1 = ev
                assert b * nst <= u0 < u1 <= b * nst + nst, "a piece outside its band"
                if wh:
                    assert (u0, u1) == (b * nst, b * nst + nst), "a whole write of a part of a band"
                    whole_bands.append(b)
                else:
                    assert (u0, u1) != (b * nst, b * nst + nst), "a whole band into a slot"
                    assert slot not in piece_of, f"slot {slot} holds two pieces"
                    piece_of[slot] = (b, u0, u1)
        assert all(r is None for r in slots), "a loaded ring slot never computed"
    assert (seen == 1).all(), "a unit computed twice or never"
    cut_bands = sorted({b for b, _, _ in piece_of.values()})
    assert cut(pl) == bool(cut_bands), "the launcher's cut test disagrees with the runs"
    fixed = {}
    if cut(pl):
        for bx, by, b, order in fixup_blocks(pl, N):
            if by == 0:
                assert b not in fixed, f"band {b} fixed up by two blocks"
                fixed[b] = order
            spans = [piece_of.get(sl) for sl in order]
            assert all(sp is not None and sp[0] == b for sp in spans), f"band {b}: a slot it reads holds no piece of it"
            assert [sp[1] for sp in spans] == [b * nst] + [sp[2] for sp in spans[:-1]] and spans[-1][2] == b * nst + nst, \
                f"band {b}: pieces out of unit order or missing: {spans}"
            assert band_order(pl, b) == order, f"band {b}: run_of's bounds read {band_order(pl, b)}, the scan {order}"
    assert sorted(fixed) == cut_bands, "a cut band without its fixup, or a fixup of an uncut band"
    for b in range(bands):   # b42: the SwiGLU finds each band's pieces itself, as the fixup's blocks do
        assert band_cut(pl, b) == fixed.get(b), f"band {b}: f16s_band_cut reads {band_cut(pl, b)}, the fixup {fixed.get(b)}"
    assert sorted(whole_bands + cut_bands) == list(range(bands)), "a band neither whole nor fixed up, or both"
    if not quiet:
        print(f"plan: {bands} bands x {nst} stages, {pl}: {len(whole_bands)} whole, {len(cut_bands)} cut "
              f"({len(piece_of)} slots), runs of {units // P}..{(units + P - 1) // P} units")
    return piece_of, cut_bands


def check_empty_bars(pl, p, seed, ns=4, ahead=2, warps=16):
    """b39's protocol for block p's run (gemm_f16_wgmma_sm90a.cu, OV 2), its warps interleaved at random:
    each waits on its stage's full mbarrier (the bulk copies of the slot); warp 0 (thread 0) then waits on
    the empty mbarrier of the slot stage s + ahead takes and issues its copies; each warp arrives on the
    empty mbarrier of stage s - 1's slot at its wait before stage s's second pair of products (its products
    of stage s - 1 done), and at a piece's end all warps meet at the block's barriers. Checked: no slot is
    refilled while a warp may still read the stage it held, every parity wait sees its barrier at the
    awaited phase or the one after (no phase aliasing), and the run ends (no deadlock)."""
    r = np.random.default_rng(seed)
    u0 = run_start(pl, p)
    L = run_start(pl, p + 1) - u0
    ends = [((u0 + s) % pl.nst == pl.nst - 1) or s == L - 1 for s in range(L)]   # fs_walk's piece_ends
    full = [0] * ns      # phases completed of each slot's full mbarrier (one arrival, its copies' bytes)
    empty = [0] * ns     # of each slot's empty one
    arrivals = [0] * ns  # arrivals in the empty barrier's current phase
    inflight = []        # stages whose copies are issued and not yet landed
    reading = [[None] * ns for _ in range(warps)]   # the stage each warp may still read in each slot
    def phase_ok(c, u, what):
        assert c in (u, u + 1), f"{what}: a parity wait for phase {u} at phase {c} (aliased)"
        return c > u
    def issue(t):
        q = t % ns
        assert all(reading[w][q] != t - ns for w in range(warps)), "a slot refilled while a warp may read it"
        inflight.append(t)
    for t in range(min(ahead, L)):   # the prologue's copies
        issue(t)
    # a warp's program counter: (stage, step) with steps 0 full wait, 1 the producer's turn (warp 0),
    # 2 the second pair's wait and the arrival, 3 the piece's end barrier, 4 the next stage
    pc = [(0, 0)] * warps
    at_barrier = set()
    while any(s < L for s, _ in pc):
        runnable = []
        for w in range(warps):
            s, k = pc[w]
            if s >= L: continue
            if k == 0 and not phase_ok(full[s % ns], s // ns, "full"): continue
            if k == 1 and w == 0 and s + ahead < L and s + ahead >= ns and \
                    not phase_ok(empty[(s + ahead) % ns], (s + ahead) // ns - 1, "empty"): continue
            if k == 3 and ends[s] and len(at_barrier) < warps and w in at_barrier: continue
            runnable.append(w)
        choices = runnable + (['copy'] if inflight else [])
        assert choices, f"deadlock in run {p} at {pc}"
        c = choices[r.integers(len(choices))]
        if c == 'copy':   # the oldest copy lands (they complete in issue order on one engine or not: any)
            t = inflight.pop(r.integers(len(inflight)))
            full[t % ns] += 1
            assert full[t % ns] == t // ns + 1, "a slot's copies landed out of its uses' order"
            continue
        w = c
        s, k = pc[w]
        if k == 0:
            reading[w][s % ns] = s
            pc[w] = (s, 1)
        elif k == 1:
            if w == 0 and s + ahead < L: issue(s + ahead)
            pc[w] = (s, 2)
        elif k == 2:
            if s > 0:   # its products of stage s - 1 are done: it arrives on that slot's empty mbarrier
                q = (s - 1) % ns
                if reading[w][q] == s - 1: reading[w][q] = None
                arrivals[q] += 1
                if arrivals[q] == warps: arrivals[q], empty[q] = 0, empty[q] + 1
            pc[w] = (s, 3)
        elif k == 3:
            if ends[s]:
                at_barrier.add(w)
                if len(at_barrier) < warps: continue   # waits at the barrier (runnable again once all are in)
                at_barrier.clear()
                for v in range(warps): pc[v] = (s + 1, 0) if pc[v] == (s, 3) else pc[v]
                continue
            pc[w] = (s + 1, 0)
    assert not inflight, "copies issued past the run"


def swz(n, b):   # the 128-byte swizzle: byte b of token n's 128-byte row of a column block (8-row groups 1024 apart)
    return n * 128 + (((b >> 4) ^ (n & 7)) << 4) + (b & 15)


def run(wt, K, M, N, woff, P=None, S=0, chunk=0, kh=False, wg=False, tm=False):
    NT = 2 if N <= 16 else 4 if N <= 32 else 8
    # n-tiles a warp: 16 warps, row group w & 7; token half w >> 3, or with kh (b11) every token and
    # units 4 (w >> 3) .. + 3 of each stage. wg (b22, gemm_f16_wgmma_sm90a.cu): 64 tokens a block,
    # warpgroup g (warps 4g .. 4g + 3) rows 64 (g & 1) + 16 (w & 3) .. and units 4 (g >> 1) .. + 3
    NTOK, NTW = 8 * NT, NT if kh else NT // 2
    assert not kh or 8 * NTW * 4 * 32 * 4 <= NTOK * ASLOT, "the K halves' hand-over does not fit the activation slot"
    assert not wg or 32 < N <= 64
    # tm (b28): the stage's bytes as the bulk tensor copies write them: Q4_K rows of a 16-byte aligned
    # tensor 144 bytes apart from their first byte, rows past M and tokens past N zero
    assert not tm or wg
    wt_tma = tm and wt == Q4_K and woff % 16 == 0
    BN, CB = 64, 64 * 128   # b22: tokens a block, bytes of a 64-k column block
    W = make_weights(wt, K, M)
    bias = rng.uniform(-0.5, 0.5, size=M).astype(np.float32)
    x = rng.uniform(-1, 1, size=(N, K)).astype(np.float32)
    # kernel_act_f16's pairs: every group of four as (e0, e2, e1, e3); b22's evens-then-odds form:
    # every group of 16 as its evens, then its odds
    order = [0, 2, 1, 3] if not wg else list(range(0, 16, 2)) + list(range(1, 16, 2))
    X = x.reshape(N, K // len(order), len(order))[:, :, order].astype(np.float16).reshape(N, K)
    Xb = X.view(np.uint8).reshape(-1)
    wrow = K // 256 * WB[wt]
    mem = np.zeros(woff + M * wrow + 16, np.uint8)
    mem[woff:woff + M * wrow] = W.reshape(-1)
    nst = K // 256
    bands = (M + BM - 1) // BM
    units = bands * nst
    pl = Plan(bands, nst, P, S, chunk)
    P = pl.P
    wslot = 144 if wt_tma else 16 * (((WB[wt] + 30) // 16) | 1)
    lane = np.arange(32); gid, tig = lane >> 2, lane & 3
    conflicts = [0]   # b28: loads of a quad's rows that share a bank

    def issue(b, st):   # band b's stage st as a ring slot: each row at offset (src & 15) of a 16-byte window; tokens at 544 bytes
        m0, wo = b * BM, st * WB[wt]
        rw = np.zeros(BM * wslot, np.uint8); ra = np.zeros(BN * 512 if wg else NTOK * ASLOT, np.uint8)
        for r in range(BM):
            if m0 + r >= M: continue
            src = woff + (m0 + r) * wrow + wo
            o = 0 if wt_tma else src & 15
            rw[r * wslot + o:r * wslot + o + WB[wt]] = mem[src:src + WB[wt]]
        for n in range(N):
            for c in range(32):
                a = (n * K + st * 256) * 2 + 16 * c
                d = (c >> 3) * CB + n * 128 + (((c & 7) ^ (n & 7)) << 4) if wg else n * ASLOT + 16 * c
                ra[d:d + 16] = Xb[a:a + 16]
        return rw, ra

    def compute(rw, ra, m0, st, acc):   # one unit from ring slot (rw, ra), at the computing side's band m0 and stage st
        wo = st * WB[wt]
        offs = np.zeros(BM, np.int64)   # (W + (m0 + r) wrow + wo) & 15
        for r in range(BM):
            if m0 + r < M and not wt_tma: offs[r] = (woff + (m0 + r) * wrow + wo) & 15
        # the stage's scales: sS, sM per [unit][row]
        sS = np.zeros((8, BM)); sM = np.zeros((8, BM))
        for r in range(BM):
            if m0 + r >= M: continue
            b = r * wslot + offs[r]
            if wt == Q4_K:
                d = float(rw[b:b + 2].view(np.float16)[0]); dmin = float(rw[b + 2:b + 4].view(np.float16)[0])
                for k in range(8):
                    sc, mn = q4k_scale_min(rw[b + 4:b + 16].astype(np.int64), k)
                    sS[k, r] = h(np.float32(d) * np.float32(sc)); sM[k, r] = h(-(np.float32(dmin) * np.float32(mn)))
            else:
                d = float(rw[b + 208:b + 210].view(np.float16)[0]); scl = rw[b + 192:b + 208].view(np.int8)
                for k in range(8):
                    sS[k, r] = h(np.float32(d) * np.float32(scl[2 * k])); sM[k, r] = h(np.float32(d) * np.float32(scl[2 * k + 1]))
        def ld32(base):   # little-endian words of rw at byte addresses base [lane]
            return sum(rw[base + i].astype(np.uint32) << (8 * i) for i in range(4)).astype(np.uint32)
        if wg:   # the B operand as the tensor cores read it through the descriptor of each k16 step j:
            # start (j >> 2) CB + 32 (j & 3) in the swizzled column block, k position kk at byte 2 kk further
            Bj = np.zeros((16, 16, BN))
            for j in range(16):
                for kk in range(16):
                    for n in range(BN):
                        a = (j >> 2) * CB + swz(n, 32 * (j & 3) + 2 * kk)
                        Bj[j, kk, n] = float(ra[a:a + 2].view(np.float16)[0]) if n < N else 0.0
        for warp in range(16):
            if wg: r0 = 64 * ((warp >> 2) & 1) + 16 * (warp & 3) + gid
            else: r0, n0 = (warp & 7) * 16 + gid, 0 if kh else (warp >> 3) * NTW * 8
            w0, w1 = r0 * wslot + offs[r0], (r0 + 8) * wslot + offs[r0 + 8]
            k_lo = 4 * (warp >> 3) if (kh or wg) else 0
            for k in range(k_lo, k_lo + (4 if (kh or wg) else 8)):
                s0, s1, t0, t1 = sS[k, r0], sS[k, r0 + 8], sM[k, r0], sM[k, r0 + 8]
                if wt == Q4_K:
                    o, hn = 16 + 32 * (k >> 1) + 4 * tig, bool(k & 1)   # odd units: the chunk's high nibbles
                    if wt_tma:   # one 32-bit load a lane: 8 rows x 4 tig on 32 distinct banks
                        for base in (w0 + o, w1 + o, w0 + o + 16, w1 + o + 16):
                            conflicts[0] += 32 - len(set(((base // 4) % 32).tolist()))
                    v0, v1 = ld32(w0 + o), ld32(w1 + o)
                    v2, v3 = ld32(w0 + o + 16), ld32(w1 + o + 16)
                    A1 = [deq(v0, s0, t0, wt, hn), deq(v1, s1, t1, wt, hn), deq(v0 >> 8, s0, t0, wt, hn), deq(v1 >> 8, s1, t1, wt, hn)]
                    A2 = [deq(v2, s0, t0, wt, hn), deq(v3, s1, t1, wt, hn), deq(v2 >> 8, s0, t0, wt, hn), deq(v3 >> 8, s1, t1, wt, hn)]
                else:
                    n_, q = k >> 2, k & 3
                    ol, oh, ls, hs = 64 * n_ + (q & 1) * 32 + 4 * tig, 128 + 32 * n_ + 4 * tig, (q >> 1) * 4, 2 * q
                    # fs_unit_frags' word: the low nibbles, and the two high bits moved to bits 4, 5 of each byte
                    Q6V = lambda w, e: ((ld32(w + ol + e) >> ls) & 0x0F0F0F0F) | \
                        (((ld32(w + oh + e) << (4 - hs)) if hs <= 4 else (ld32(w + oh + e) >> 2)) & 0x30303030)
                    v0, v1, v2, v3 = Q6V(w0, 0), Q6V(w1, 0), Q6V(w0, 16), Q6V(w1, 16)
                    A1 = [deq(v0, s0, 0, wt), deq(v1, s1, 0, wt), deq(v0 >> 8, s0, 0, wt), deq(v1 >> 8, s1, 0, wt)]
                    A2 = [deq(v2, t0, 0, wt), deq(v3, t1, 0, wt), deq(v2 >> 8, t0, 0, wt), deq(v3 >> 8, t1, 0, wt)]
                A1 = np.concatenate(A1, axis=1); A2 = np.concatenate(A2, axis=1)   # [lane, 8]: regs a0..a3, two halves each
                if wg:   # two wgmma m64n64k16 (a warp's 16 rows of each): A as mma.m16n8k16's fragment, B from the slot
                    for j, A8 in ((2 * k, A1), (2 * k + 1, A2)):
                        A = np.zeros((16, 16)); A[A_row, A_col] = A8
                        acc[warp] += A @ Bj[j]
                    continue
                for nt in range(NTW):
                    bp = (n0 + gid) * ASLOT + 8 * tig + nt * 8 * ASLOT + 64 * k
                    def ld64(p):   # uint2 at byte addresses p -> 4 halves [lane, 4] (b0 low, b0 high, b1 low, b1 high)
                        return np.stack([ra[p[i]:p[i] + 8].view(np.float16).astype(np.float64) for i in range(32)])
                    acc[warp, nt] = mma(acc[warp, nt], A1, ld64(bp))
                    acc[warp, nt] = mma(acc[warp, nt], A2, ld64(bp + 32))

    rg = (RING_B22 if wt == Q4_K else RING_B22_Q6) if wg else RING_B6
    piece_of, cut_bands = check_plan(bands, nst, pl.P if S == 0 else None, N, quiet=True, S=S, chunk=chunk, ring=rg)
    Y = np.full((N, M), np.nan)
    part = np.full((2 * P, N, BM), np.nan)   # slots [slot][N][FS_BM]
    pieces = whole = 0
    for p in range(P):   # kernel_gemm_f16s, block p
        ring = [None] * rg[0]
        acc = np.zeros((16, 16, BN)) if wg else np.zeros((16, NTW, 32, 4))
        for ev in block_steps(p, pl, rg):
            if ev[0] == 'load':
                ring[ev[1]] = issue(ev[2], ev[3])
            elif ev[0] == 'unit':   # the unit's data from the ring slot, its band and stage from the compute side
                compute(ring[ev[1]][0], ring[ev[1]][1], ev[2] * BM, ev[3], acc)
            else:
                _, b, wh, slot, _, _ = ev
                pieces += 1; whole += wh
                m0 = b * BM
                if kh or wg:   # warps 8..15 (b22: warpgroups 2, 3) hand their sums to warps 0..7, which write
                    acc[:8] += acc[8:]; acc[8:] = 0.0
                if wg:   # accumulator i of a lane: row gid + 8 ((i >> 1) & 1) of the warp's 16, token 8 (i >> 2) + 2 tig + (i & 1)
                    for warp in range(8):
                        r0 = 64 * ((warp >> 2) & 1) + 16 * (warp & 3) + gid
                        for i in range(32):
                            hr, n = (i >> 1) & 1, 8 * (i >> 2) + 2 * tig + (i & 1)
                            r = r0 + 8 * hr
                            m = m0 + r
                            v = acc[warp, gid + 8 * hr, np.minimum(n, BN - 1)]
                            ok = (m < M) & (n < N)
                            if wh:
                                assert np.isnan(Y[n[ok], m[ok]]).all(), "output written twice"
                                Y[n[ok], m[ok]] = v[ok] + bias[m[ok]]
                            else:
                                assert np.isnan(part[slot, n[ok], r[ok]]).all(), "slot element written twice"
                                part[slot, n[ok], r[ok]] = v[ok]
                    acc[:] = 0.0
                    continue
                for warp in range(8 if kh else 16):
                    r0, n0 = (warp & 7) * 16 + gid, 0 if kh else (warp >> 3) * NTW * 8
                    for nt in range(NTW):
                        for i in range(4):
                            r = r0 + (i >> 1) * 8
                            m = m0 + r
                            n = n0 + nt * 8 + 2 * tig + (i & 1)
                            ok = (m < M) & (n < N)
                            if wh:
                                assert np.isnan(Y[n[ok], m[ok]]).all(), "output written twice"
                                Y[n[ok], m[ok]] = acc[warp, nt, ok, i] + bias[m[ok]]
                            else:
                                assert np.isnan(part[slot, n[ok], r[ok]]).all(), "slot element written twice"
                                part[slot, n[ok], r[ok]] = acc[warp, nt, ok, i]
                acc[:] = 0.0
    if cut(pl):   # kernel_f16s_fixup: blocks (P - 1) x ceil(N / FX_TOK) of 256 threads
        for bx, by, b, order in fixup_blocks(pl, N):
            p = bx + 1
            hi = run_of(pl, b * nst + nst - 1)   # the kernel's hi
            for t in range(2 * BM):
                r = t % BM
                m = b * BM + r
                if m >= M: continue
                for n in [by * FX_TOK + t // BM + 2 * j for j in range(FX_TOK // 2)]:
                    if n >= N: continue
                    sm, read = part[2 * (p - 1) + 1, n, r], [2 * (p - 1) + 1]
                    for q in range(p, hi + 1):
                        sm += part[2 * q, n, r]; read.append(2 * q)
                    assert read == order, f"band {b}: the sum reads slots {read}, the plan {order}"
                    assert np.isnan(Y[n, m]), "output written twice"
                    Y[n, m] = sm + bias[m]
    used = sorted(piece_of)
    assert not np.isnan(Y).any(), "an output never written"
    for sl in range(2 * P):   # slot elements written: the rows < M of every slot holding a piece, nothing else
        rows = min(BM, M - piece_of[sl][0] * BM) if sl in piece_of else 0
        assert not np.isnan(part[sl, :, :rows]).any() and np.isnan(part[sl, :, rows:]).all(), f"slot {sl}"
    wr, we = ref_weights(wt, W, K)
    ref = x.astype(np.float16).astype(np.float64) @ wr.T + bias
    exact = x.astype(np.float64) @ we.T + bias
    err = np.max(np.abs(Y - ref) / (np.abs(ref) + 1e-3))
    nmse = float(((Y - exact) ** 2).sum() / (exact ** 2).sum())
    if wt_tma: print(f"  b28's slot: {conflicts[0]} bank conflicts in the quads' weight loads")
    print(f"{wt} K={K} M={M} N={N} ({'b22 wgmma' if wg else 'NT ' + str(NT)}{', K halves' if kh else ''}{', b28 bulk copies' if tm else ''}) tensor at +{woff}: {bands} bands x {nst} stages, {pl}: "
          f"{pieces} pieces ({whole} whole), slots {used}, fixup {'bands ' + str(cut_bands) if cut_bands else 'none'}; "
          f"max rel err vs the same roundings {err:.3g}, nmse vs the exact product {nmse:.3g}")
    return bool(err <= 1e-9) and nmse <= 1e-5 and conflicts[0] == 0


def main():
    # the index math alone on the gate's shapes at the H200's P (132 multiprocessors, one block each) and twice
    # that: the 7B's gate/up (148 bands x 14), q/o (28 x 14), k/v (4 x 14), down (28 x 74), K = 256 (132 x 1)
    # (each plan through both kernels' rings)
    # (b42's band_cut against the fixup's blocks on each; the gate/up run's 296 bands too)
    for rg in RINGS:
        for bands, nst in ((148, 14), (296, 14), (28, 14), (4, 14), (28, 74), (132, 1), (3, 10), (2, 13)):
            for P in sorted({min(132, bands * nst), min(264, bands * nst)}):
                check_plan(bands, nst, P, quiet=rg is not RING_B6, ring=rg)
        # the K split plans (stream_chunk's S and chunk) of q/o, k/v, down and the output head on the H200
        # and of the q + k and q + k + v runs (32 and 36 bands: split 4 or 3, as b48 prices their clusters)
        for bands, nst, S, chunk in ((28, 14, 4, 4), (4, 14, 7, 2), (28, 74, 4, 19), (1188, 14, 1, 14), (3, 10, 3, 4),
                                     (32, 14, 4, 4), (32, 14, 3, 5), (36, 14, 3, 5)):
            check_plan(bands, nst, S=S, chunk=chunk, quiet=rg is not RING_B6, ring=rg)
    # b39's empty mbarriers on the 7B's Q4_K plans at 64 rows (gate/up stream-K, q/o and down K splits,
    # k) and short runs, several interleavings of each block's warps
    n39 = 0
    for pl in (Plan(148, 14, 132, 0, 0), Plan(28, 14, None, 4, 4), Plan(28, 74, None, 4, 19), Plan(4, 14, None, 7, 2),
               Plan(3, 10, 7, 0, 0), Plan(2, 13, None, 2, 7)):
        for p in sorted({0, 1, pl.P // 2, pl.P - 1}):
            for seed in range(3):
                check_empty_bars(pl, p, 1000 * p + seed)
                n39 += 1
    print(f"b39: {n39} runs' warps interleaved at random: no slot refilled while read, no aliased phase, no deadlock")

    ok = [
        run(Q4_K, 512, 130, 64, 0, P=2),         # two bands (rows past M), NT 8; P divides the units by bands: no fixup
        run(Q4_K, 256, 700, 33, 0, P=4),         # one stage a band: 6 bands in runs of 1 or 2, never cut
        run(Q4_K, 768, 40, 33, 4, P=2),          # one band cut in two (1 + 2 stages), a 4-byte-aligned tensor
        run(Q6_K, 768, 16, 64, 2, P=3),          # P > bands: runs of one stage, the middle one inside the band
        run(Q4_K, 512, 818, 24, 0, P=4),         # 7 bands (rows past M): run 1 a band's end, a whole band, the next's start
        run(Q6_K, 768, 300, 40, 2, P=7),         # 3 bands, 9 units, runs of 1 or 2: cuts, and boundaries on band edges
        run(Q4_K, 768, 256, 17, 4, P=5),         # 2 bands, 6 units, NT 4, a 4-byte-aligned tensor
        run(Q6_K, 512, 20, 17, 6, P=1),          # 210-byte super-blocks, tensor at +6, one run
        run(Q4_K, 256, 9, 9, 0, P=1),            # NT 2, one stage, a band of 9 rows
        run(Q4_K, 512, 130, 4, 2, P=3),          # b21: 4 rows in an n-tile pair of 16, two bands cut
        run(Q6_K, 768, 40, 2, 0, S=2, chunk=2),  # 2 rows, K split
        run(Q6_K, 768, 300, 40, 2, S=2, chunk=2),  # K split: 3 bands x (2 + 1 stages), a 2-byte-aligned tensor
        run(Q4_K, 1024, 260, 24, 4, S=2, chunk=3), # K split 3 + 1 stages, rows past M
        run(Q4_K, 512, 300, 17, 0, S=1, chunk=2),  # whole bands: no fixup
        # b11: a warp takes every token and half of each stage's units
        run(Q4_K, 768, 40, 33, 4, P=2, kh=True),
        run(Q6_K, 768, 300, 40, 2, P=7, kh=True),
        run(Q4_K, 768, 256, 17, 4, P=5, kh=True),
        run(Q4_K, 256, 9, 9, 0, P=1, kh=True),
        run(Q6_K, 768, 300, 40, 2, S=2, chunk=2, kh=True),
        run(Q4_K, 512, 130, 64, 0, P=2, kh=True),
        # b22: the same plan on wgmma (the activations' evens-then-odds order, the swizzled slot as the
        # descriptor reads it, the warpgroups' rows and K halves, the accumulators' rows and tokens)
        run(Q4_K, 768, 40, 33, 4, P=2, wg=True),
        run(Q6_K, 768, 300, 40, 2, P=7, wg=True),
        run(Q4_K, 512, 130, 64, 0, P=2, wg=True),
        run(Q6_K, 768, 300, 64, 2, S=2, chunk=2, wg=True),
        # b28: the slot as the bulk copies write it (Q4_K aligned: rows 144 bytes apart; else b25's rows)
        run(Q4_K, 512, 130, 64, 0, P=2, wg=True, tm=True),
        run(Q4_K, 768, 40, 33, 4, P=2, wg=True, tm=True),
        run(Q6_K, 768, 300, 40, 2, P=7, wg=True, tm=True),
    ]
    if not all(ok):
        print("emulation does not match the reference"); raise SystemExit(1)
    print(f"{len(ok)} cases match the direct formula")


if __name__ == "__main__":
    main()
