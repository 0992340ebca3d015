/* Device check of mi8a_matvec_stream (item d5). Each case: W of one format [K, M], x, optional
 * bias and residual r, on the device
 *   - against 7b's matmul (mi7b_matmul, then 7b's add for r): bit for bit (the kernel is 7b's
 *     order and expression; only the copies differ),
 *   - against the CPU reference (scalar dots of x quantized the same way, + r): NMSE <= 1e-6,
 *   - against itself on a second run with the output NaN-poisoned: bit for bit.
 * Shapes: every format the kernel takes at K = 2048 .. 18944 (the 7B's Q6_K v, down and a slice
 * of its output head, the 0.5B's Q4_0 down), M not a multiple of the warps, and weights placed
 * 4 or 6 bytes past a 16-byte boundary and ending mid-piece, so the first and the
 * last 16-byte pieces of the tensor take the byte-by-byte path; Q4_K's long rows. Also: the
 * kernel refuses Q4_K's short rows, K below MI8A_STREAM_MIN_K and unquantized types. */
#include "gates/8a/matvec_stream_check.h"
#include "gates/7e/dev7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase7b_ops/ops7b.h"
#include "common/quant/mi_types.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void stream_case(gu_run *R, cudaStream_t S, unsigned long long *seed, mi_type t, int64_t K, int64_t M,
                        bool bias, bool res, size_t off) {
    char name[128];
    snprintf(name, sizeof name, "stream_%s_K%lld_M%lld%s%s%s", mi_type_name(t), (long long)K, (long long)M,
             bias ? "_bias" : "", res ? "_res" : "", off ? "_offset" : "");
    gu_begin(R, name);
    if (!mi8a_matvec_stream_supported(t, K, M)) {
        gu_fail(R, "the kernel refuses a shape it is meant to cover");
        return;
    }
    size_t wb;
    uint8_t *w = gu_make_weights(seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(seed, (size_t)K, -2.f, 2.f), *b = gu_rand_f32(seed, (size_t)M, -0.5f, 0.5f);
    float *r = gu_rand_f32(seed, (size_t)M, -1.f, 1.f), *ref = malloc((size_t)M * 4);
    float *got = malloc((size_t)M * 4), *got2 = malloc((size_t)M * 4), *old = malloc((size_t)M * 4);
    cpu_matmul(t, w, x, bias ? b : NULL, ref, K, M, 1);
    if (res)
        for (int64_t m = 0; m < M; m++) ref[m] = r[m] + ref[m];
    void *bw, *bx, *bb, *br;
    void *dw = dev_up_at(w, wb, off, &bw);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *db = dev_up_at(b, (size_t)M * 4, 0, &bb);
    float *dr = dev_up_at(r, (size_t)M * 4, 0, &br);
    float *dy0 = dev_poison((size_t)M * 4), *dy = dev_poison((size_t)M * 4);
    const size_t wsb = mi8a_matvec_stream_workspace(t, K), ws7 = mi7b_matmul_workspace(t, K, 1);
    void *ws = dev_poison((wsb > ws7 ? wsb : ws7) + 64);
    const float *pb = bias ? db : NULL, *pr = res ? dr : NULL;
    mi_status st = mi8a_matvec_stream(S, t, dw, dx, pb, pr, dy, K, M, ws);
    if (st == MI_OK) { dev_down_on(S, got, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi8a_matvec_stream(S, t, dw, dx, pb, pr, dy, K, M, ws);
    if (st == MI_OK) { dev_down_on(S, got2, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi7b_matmul(S, t, dw, dx, pb, res ? dy0 : dy, K, M, 1, ws);
    if (st == MI_OK && res) st = mi7b_binary(S, 0, dr, dy0, dy, M, 1, 1);
    if (st == MI_OK) dev_down_on(S, old, dy, (size_t)M * 4);
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, (size_t)M);
        const size_t d_old = gu_first_diff(got, old, (size_t)M * 4), d_rep = gu_first_diff(got, got2, (size_t)M * 4);
        if (!(e_cpu <= 1e-6) || d_old != (size_t)-1 || d_rep != (size_t)-1) {
            const size_t i = d_old != (size_t)-1 ? d_old / 4 : first_bad(got, ref, (size_t)M, 1e-3, 1.0);
            if (i != (size_t)-1 && i < (size_t)M)
                printf("    %s: row %zu stream %.9g 7b %.9g cpu %.9g\n", name, i, got[i], old[i], ref[i]);
            gu_fail(R, "nmse vs cpu %.3g (bound 1e-6); vs 7b %s; repeat %s", e_cpu,
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(R, "bit-identical to 7b's matmul%s and to itself; nmse vs cpu %.3g", res ? " + add" : "", e_cpu);
        }
    }
    free(w); free(x); free(b); free(r); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(bb); cudaFree(br); cudaFree(dy0); cudaFree(dy); cudaFree(ws);
}

void matvec_stream_check(gu_run *R, cudaStream_t S, unsigned long long *seed) {
    const mi_type fmt[] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0, MI_TYPE_Q5_K, MI_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
        stream_case(R, S, seed, fmt[i], 2560, 333, true, false, 0);
        stream_case(R, S, seed, fmt[i], 2048, 200, false, true, 4);   /* both tensor edges piecewise */
    }
    stream_case(R, S, seed, MI_TYPE_Q6_K, 3584, 512, true, false, 0);     /* 7B v */
    stream_case(R, S, seed, MI_TYPE_Q6_K, 18944, 300, false, true, 0);    /* 7B down's rows, + residual */
    stream_case(R, S, seed, MI_TYPE_Q6_K, 3584, 4099, false, false, 6);   /* 7B output head's rows */
    stream_case(R, S, seed, MI_TYPE_Q4_0, 4864, 896, false, true, 0);     /* 0.5B down + residual */
    stream_case(R, S, seed, MI_TYPE_Q8_0, 2304, 1000, false, false, 0);
    stream_case(R, S, seed, MI_TYPE_Q4_K, 18944, 260, false, true, 0);    /* 7B Q4_K down's rows */
    stream_case(R, S, seed, MI_TYPE_Q8_0, 896, MI8A_STREAM_MIN_M + 5, false, false, 2);   /* 0.5B output head's shape */
    gu_begin(R, "stream_refuses");
    const bool refuses = !mi8a_matvec_stream_supported(MI_TYPE_Q4_K, MI8A_STREAM_Q4K_MIN_K - 256, 512) &&
                         !mi8a_matvec_stream_supported(MI_TYPE_Q6_K, MI8A_STREAM_MIN_K - 256, 512) &&
                         !mi8a_matvec_stream_supported(MI_TYPE_Q8_0, 896, MI8A_STREAM_MIN_M - 1) &&
                         !mi8a_matvec_stream_supported(MI_TYPE_F16, 4096, 512) &&
                         !mi8a_matvec_stream_supported(MI_TYPE_Q8_0, 4096, 0);
    if (refuses)
        gu_pass(R, "Q4_K below K = %d, K below %d with M below %d, F16 and M = 0 refused", MI8A_STREAM_Q4K_MIN_K,
                MI8A_STREAM_MIN_K, MI8A_STREAM_MIN_M);
    else gu_fail(R, "a shape outside the rule was accepted");
}
