# PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type", as index tables for the
# host emulations of the f16 tensor-core kernels (emu_attn_flash.py, emu_gemm_f16.py); imported, not run.
# Element i of a lane: register i // 2, half i % 2 (the lower index in the low half).
import numpy as np

lane = np.arange(32); gid = lane >> 2; tig = lane & 3
iA = np.arange(8)
A_row = gid[:, None] + 8 * ~np.isin(iA, [0, 1, 4, 5])[None, :]
A_col = tig[:, None] * 2 + (iA & 1)[None, :] + 8 * (iA >= 4)[None, :]
iB = np.arange(4)
B_row = tig[:, None] * 2 + (iB & 1)[None, :] + 8 * (iB >= 2)[None, :]
B_col = np.repeat(gid[:, None], 4, axis=1)
C_row = gid[:, None] + 8 * (iB >= 2)[None, :]
C_col = tig[:, None] * 2 + (iB & 1)[None, :]
for _R, _C, _shp in ((A_row, A_col, (16, 16)), (B_row, B_col, (16, 8)), (C_row, C_col, (16, 8))):
    _cover = np.zeros(_shp, int); np.add.at(_cover, (_R, _C), 1); assert (_cover == 1).all()  # a permutation
