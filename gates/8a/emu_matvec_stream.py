# Host emulation of the copy ring of phase8a_decode/matvec_stream.cu (item d5): for random formats,
# row lengths, row counts, grids and tensor offsets, every warp's chunk sequence is replayed as
# the kernel runs it (prologue of MVS_STAGES - 1 copies, then copy-one / compute-one), with
# mvs_issue's pieces (16 bytes from the boundary at or below the chunk, the tensor's edge pieces
# byte by byte). Checked: the slot a chunk is computed from holds that chunk (never refilled
# before it is used), the bytes lane l reads for its unit (unit_unpack's block address on the
# shared copy) are that unit's bytes in the tensor, every 16-byte copy is aligned and inside the
# tensor, no byte outside the tensor is read, a slot's pieces fit its size, and every row's units
# are computed once each, lane l taking units l, l + 32, ... in order. CPU only.
import random

random.seed(5)
STAGES, UNITS, WARPS = 4, 32, 8
# (bytes a block, units a block): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K
FORMATS = {"Q4_0": (18, 1), "Q4_1": (20, 1), "Q5_0": (22, 1), "Q5_1": (24, 1), "Q8_0": (34, 1),
           "Q4_K": (144, 8), "Q5_K": (176, 8), "Q6_K": (210, 8)}
bad = []


def check(cond, what):
    if not cond and len(bad) < 20:
        bad.append(what)


def issue(mem, slot_buf, W, te, wrow, m, c, chunk, reads):
    src = W + m * wrow + c * chunk
    n = min(chunk, wrow - c * chunk)
    a0, a1 = src & ~15, (src + n + 15) & ~15
    pieces = (a1 - a0) >> 4
    for p in range(pieces):
        g = a0 + 16 * p
        if g >= W and g + 16 <= te:
            check(g % 16 == 0, f"cp.async source {g} not 16-byte aligned")
            slot_buf[16 * p:16 * p + 16] = mem[g:g + 16]
            reads.update(range(g, g + 16))
        else:
            for b in range(16):
                inside = W <= g + b < te
                slot_buf[16 * p + b] = mem[g + b] if inside else 0
                if inside:
                    reads.add(g + b)
    return pieces, src


trials = 0
for fmt, (bb, upb) in FORMATS.items():
    chunk = UNITS // upb * bb
    slot = ((chunk + 15) // 16 + 1) * 16
    for _ in range(40):
        trials += 1
        nblocks = random.choice([1, 2, 3, 7, 14, 28, 74]) if upb == 8 else random.choice([1, 5, 28, 64, 72, 152])
        nunits = nblocks * upb
        wrow = nblocks * bb
        M = random.randint(1, 70)
        grid = random.randint(1, 5)
        off = random.choice([0, 2, 4, 6, 10, 14])
        W = 1024 + off
        te = W + M * wrow
        mem = bytearray(random.getrandbits(8) for _ in range(te + 64))
        cpr = (nunits + UNITS - 1) // UNITS
        reads = set()
        seen = {}
        nw = grid * WARPS
        for w0 in range(nw):
            if w0 >= M:
                continue
            ring = [bytearray(slot) for _ in range(STAGES)]
            held = [None] * STAGES            # (m, c, lead) of the chunk a slot holds
            mx, cx, sx = w0, 0, 0
            for _i in range(STAGES - 1):
                if mx < M:
                    pieces, src = issue(mem, ring[sx], W, te, wrow, mx, cx, chunk, reads)
                    check(pieces * 16 <= slot, f"{fmt}: {pieces} pieces overflow a slot of {slot}")
                    held[sx] = (mx, cx, src & 15)
                    cx += 1
                    if cx == cpr:
                        cx, mx = 0, mx + nw
                sx += 1
            m, c, sc = w0, 0, 0
            while m < M:
                if mx < M:
                    check(held[sx] is None or held[sx] == "used", f"{fmt}: slot {sx} refilled before use")
                    pieces, src = issue(mem, ring[sx], W, te, wrow, mx, cx, chunk, reads)
                    check(pieces * 16 <= slot, f"{fmt}: {pieces} pieces overflow a slot of {slot}")
                    held[sx] = (mx, cx, src & 15)
                    cx += 1
                    if cx == cpr:
                        cx, mx = 0, mx + nw
                sx = (sx + 1) % STAGES
                h = held[sc]
                check(h is not None and h != "used" and h[:2] == (m, c), f"{fmt}: slot {sc} holds {h}, not ({m}, {c})")
                lead = h[2] if h not in (None, "used") else 0
                src = W + m * wrow + c * chunk
                check(lead == src % 16, f"{fmt}: lead {lead} for a chunk at {src}")
                for lane in range(32):
                    u = c * UNITS + lane
                    if u >= nunits:
                        continue
                    blk = lead + (lane // upb) * bb          # unit_unpack's block on the shared copy
                    gblk = W + m * wrow + (u // upb) * bb   # the unit's block in the tensor
                    check(bytes(ring[sc][blk:blk + bb]) == bytes(mem[gblk:gblk + bb]),
                          f"{fmt}: row {m} unit {u} reads other bytes")
                    seen.setdefault((m, lane), []).append(u)
                held[sc] = "used"
                if c == cpr - 1:
                    c, m = 0, m + nw
                else:
                    c += 1
                sc = (sc + 1) % STAGES
        check(all(W <= p < te for p in reads), f"{fmt}: a read outside the tensor")
        for mm in range(M):
            units = sorted(u for lane in range(32) for u in seen.get((mm, lane), []))
            check(units == list(range(nunits)), f"{fmt}: row {mm} computed units {units[:5]}.. of {nunits}")
            for lane in range(32):
                us = seen.get((mm, lane), [])
                check(us == list(range(lane, nunits, 32)), f"{fmt}: row {mm} lane {lane} order {us[:4]}")

for b in bad:
    print("BAD", b)
print(f"matvec_stream ring emulation: {trials} cases, " + ("ok" if not bad else f"{len(bad)} failures"))
if bad:
    raise SystemExit(1)
