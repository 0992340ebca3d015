/* Where the rows of a run live (item d13): the rows of up to MI8A_RUN_MAX weights of one x, one
 * after another, so row m of a launch is row m - start of the weight whose range holds it. The
 * weight of a row is found by compares against the run's ends and selects with constant indices
 * (the kernel parameter holding this is never indexed at run time). It serves as the row map of
 * 7e's Q4_K kernel body (matvec_q4k_rows: w(k, m, wrow), add_bias, y(m)) and of 7b's warp-per-row
 * body (mm_q_row: w(m), add_bias, y(c, m) with one column). */
#ifndef MI_RUN_ROWS_CUH
#define MI_RUN_ROWS_CUH
#include <stdint.h>
#include "phase8a_decode/decode8a.h"

struct run_rows {
    const uint8_t *W[MI8A_RUN_MAX];
    const float *bias[MI8A_RUN_MAX];
    float *Y[MI8A_RUN_MAX];
    int64_t end[MI8A_RUN_MAX];   /* cumulative rows; unused slots hold INT64_MAX */
    size_t wrow;                 /* bytes of a weight row (7b's body) */
    __device__ __forceinline__ int seg(int64_t row, int64_t *local) const {
        int64_t start = 0;
        int i = 0;
#pragma unroll
        for (int k = 0; k + 1 < MI8A_RUN_MAX; k++)
            if (row >= end[k]) i = k + 1, start = end[k];
        *local = row - start;
        return i;
    }
    template <class T>
    __device__ __forceinline__ static T pick(const T (&a)[MI8A_RUN_MAX], int i) {
        T v = a[0];
#pragma unroll
        for (int k = 1; k < MI8A_RUN_MAX; k++)
            if (i == k) v = a[k];
        return v;
    }
    __device__ __forceinline__ const uint8_t *w(int k, int64_t row, size_t bytes) const {
        int64_t m;
        const int i = seg(row, &m);
        return pick(W, i) + (size_t)m * bytes;
    }
    __device__ __forceinline__ const uint8_t *w(int64_t row) const { return w(0, row, wrow); }
    __device__ __forceinline__ float add_bias(int64_t row, float s) const {
        int64_t m;
        const float *b = pick(bias, seg(row, &m));
        return b ? s + b[m] : s;
    }
    __device__ __forceinline__ float *y(int64_t row) const {
        int64_t m;
        float *p = pick(Y, seg(row, &m));
        return p + m;
    }
    __device__ __forceinline__ float *y(int64_t c, int64_t row) const { return y(row); }   /* one column */
};

/* the map of a run from its weights (host side); false when a weight is unusable */
static inline bool run_rows_make(run_rows *r, const mi8a_run_seg *seg, int n, size_t wrow, int64_t *M) {
    *M = 0;
    for (int i = 0; i < MI8A_RUN_MAX; i++) {
        if (i < n) {
            if (!seg[i].w || !seg[i].y || seg[i].M <= 0) return false;
            *M += seg[i].M;
        }
        r->W[i] = (const uint8_t *)seg[i < n ? i : 0].w;
        r->bias[i] = i < n ? seg[i].bias : NULL;
        r->Y[i] = seg[i < n ? i : 0].y;
        r->end[i] = i < n ? *M : INT64_MAX;
    }
    r->wrow = wrow;
    return true;
}

#endif
