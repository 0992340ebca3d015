/* The K split's cost model of the two weight-streaming matmuls of a batch (gemm_int8_stream.cu,
 * gemm_f16_stream.cu): plain C, so the host's cases check it without a device (gate_8b's
 * split_cost). */
#ifndef MI_SPLIT_COST_H
#define MI_SPLIT_COST_H
#include <stdint.h>
#include "phase8b_batch/batch8b.h"

/* Stages a split (chunk) and the split count S for M weight rows in bands of bm, nst stages of
 * wbytes a row, N tokens: the S (<= MI8B_SPLIT_MAX, chunks of two stages at least) that
 * minimizes an estimate of the time in stage-times of a full GPU: waves of blocks x stages a
 * block, plus writing and reading the partials and the second launch. slots: blocks resident
 * on the whole GPU at once. cap (NULL: none; item b48): cap[s] for 2 <= s <= 8, where non-zero,
 * the blocks resident at once when a split of s runs in clusters of s blocks (b33): a cluster
 * takes s multiprocessors of one GPC, so whole clusters may leave some of them idle and a grid
 * of slots blocks may need two waves. */
static inline int64_t stream_chunk(int64_t M, int64_t N, int64_t nst, int64_t slots, int64_t wbytes, int bm,
                                   int *S_out, const int64_t *cap) {
    const int64_t bands = (M + bm - 1) / bm;
    const double wave_bytes = (double)slots * bm * (double)wbytes;   /* one stage of every block resident */
    int64_t best_chunk = nst;
    double best = 1e300;
    for (int64_t s = 1; s <= MI8B_SPLIT_MAX && s <= nst; s++) {
        const int64_t chunk = (nst + s - 1) / s;
        if (s > 1 && chunk < 2) break;
        const int64_t se = (nst + chunk - 1) / chunk;
        if (se != s) continue;
        const int64_t blocks = bands * se;
        const int64_t at_once = cap && se >= 2 && se <= 8 && cap[se] > 0 && cap[se] < slots ? cap[se] : slots;
        double t = (double)((blocks + at_once - 1) / at_once) * (double)chunk;
        if (se > 1) t += 2.0 + (double)se * (double)N * (double)M * 8.0 / wave_bytes;
        if (t < best - 1e-9) {
            best = t;
            best_chunk = chunk;
        }
    }
    *S_out = (int)((nst + best_chunk - 1) / best_chunk);
    return best_chunk;
}
#endif
