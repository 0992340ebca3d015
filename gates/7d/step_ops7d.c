/* gate_7d's op-level case: 7d's step kernels (ATTN and KV_STORE reading n_past on the device,
 * phase7d_graphs/step_kernels.c, attn_kv_step.cu) against 7b's kernels given n_past on the
 * host, bit for bit. The session-level cases and main are gate_7d.c. */
#include "gates/7d/step_ops7d.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7b_ops/ops7b.h"
#include "phase7d_graphs/graphs7d.h"
#include "common/core/mi_fp16.h"
#include <stdlib.h>
#include <string.h>

void step_ops7d_run(gu_run *run, unsigned long long *seed) {
    gu_run *const r = run;
    gu_begin(r, "step_ops_match_7b");
    void *stream = NULL;
    if (mi_cudev_stream_new(&stream) != MI_OK) {
        gu_fail(r, "stream: %s", mi_errmsg());
        return;
    }
    struct { int hd, Hq, Hkv; mi_type ct; } cfg[] = {{128, 28, 4, MI_TYPE_F16}, {64, 14, 2, MI_TYPE_F16},
                                                      {128, 16, 8, MI_TYPE_F32}, {32, 4, 2, MI_TYPE_F16}};
    const int64_t n_ctx = 320;
    const int npasts[] = {0, 1, 127, 128, 129, 300};
    int cases = 0, bad = 0;
    char first_bad[300] = "";
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int hd = cfg[ci].hd, Hq = cfg[ci].Hq, Hkv = cfg[ci].Hkv;
        const mi_type ct = cfg[ci].ct;
        const size_t esz = ct == MI_TYPE_F16 ? 2 : 4, row = (size_t)hd * Hkv;
        const size_t cbytes = row * (size_t)n_ctx * esz;
        const int64_t Nmax = 3;
        const size_t qn = (size_t)hd * Hq * Nmax, xn = row * Nmax;
        float *q = malloc(qn * 4), *x = malloc(xn * 4), *o1 = malloc(qn * 4), *o2 = malloc(qn * 4);
        unsigned char *cache = malloc(cbytes), *c1 = malloc(cbytes), *c2 = malloc(cbytes);
        for (size_t i = 0; i < qn; i++) q[i] = gu_frand(seed, -2.f, 2.f);
        for (size_t i = 0; i < xn; i++) x[i] = gu_frand(seed, -3.f, 3.f);
        for (size_t i = 0; i < row * (size_t)n_ctx; i++) {
            float v = gu_frand(seed, -2.f, 2.f);
            if (ct == MI_TYPE_F16) { uint16_t h = mi_f32_to_f16(v); memcpy(cache + 2 * i, &h, 2); }
            else memcpy(cache + 4 * i, &v, 4);
        }
        void *dq = NULL, *dx = NULL, *dk = NULL, *dv = NULL, *dk2 = NULL, *dv2 = NULL, *do1 = NULL, *do2 = NULL, *dnp = NULL;
        mi_status st = MI_OK;
        void **bufs[] = {&dq, &dx, &dk, &dv, &dk2, &dv2, &do1, &do2, &dnp};
        size_t sizes[] = {qn * 4, xn * 4, cbytes, cbytes, cbytes, cbytes, qn * 4, qn * 4, 4};
        for (int i = 0; i < 9 && st == MI_OK; i++) st = mi_cudev_malloc(bufs[i], sizes[i]);
        for (size_t ni = 0; ni < sizeof npasts / sizeof npasts[0] && st == MI_OK; ni++) {
            for (int64_t N = 1; N <= Nmax && st == MI_OK; N += 2) {
                const int32_t np = npasts[ni];
                if (np + N > n_ctx) continue;
                /* both paths from the same cache: kv_store of N new rows, then attention */
                st = mi_cudev_h2d_async(dk, cache, cbytes, stream);
                if (st == MI_OK) st = mi_cudev_h2d_async(dv, cache, cbytes, stream);
                if (st == MI_OK) st = mi_cudev_h2d_async(dk2, cache, cbytes, stream);
                if (st == MI_OK) st = mi_cudev_h2d_async(dv2, cache, cbytes, stream);
                if (st == MI_OK) st = mi_cudev_h2d_async(dq, q, qn * 4, stream);
                if (st == MI_OK) st = mi_cudev_h2d_async(dx, x, xn * 4, stream);
                if (st == MI_OK) st = mi_cudev_h2d_async(dnp, &np, 4, stream);
                if (st == MI_OK) st = mi7b_kv_store(stream, dx, dk, ct, (int64_t)row, N, np);
                if (st == MI_OK) st = mi7b_kv_store(stream, dx, dv, ct, (int64_t)row, N, np);
                if (st == MI_OK) st = mi7d_kv_store(stream, dx, dk2, ct, (int64_t)row, N, dnp, n_ctx);
                if (st == MI_OK) st = mi7d_kv_store(stream, dx, dv2, ct, (int64_t)row, N, dnp, n_ctx);
                const float scale = 1.0f / sqrtf((float)hd);
                if (st == MI_OK) st = mi7b_attn(stream, dq, dk, dv, ct, do1, N, np, hd, Hq, Hkv, scale);
                if (st == MI_OK) st = mi7d_attn(stream, dq, dk2, dv2, ct, do2, N, dnp, n_ctx, hd, Hq, Hkv, scale);
                if (st == MI_OK) st = mi_cudev_d2h_async(c1, dk, cbytes, stream);
                if (st == MI_OK) st = mi_cudev_d2h_async(c2, dk2, cbytes, stream);
                if (st == MI_OK) st = mi_cudev_stream_sync(stream);
                if (st != MI_OK) break;
                cases++;
                size_t cd = gu_first_diff(c1, c2, cbytes);
                if (cd != (size_t)-1) {
                    if (!bad++) snprintf(first_bad, sizeof first_bad, "kv_store hd %d Hkv %d %s n_past %d N %lld: "
                                         "cache byte %zu differs", hd, Hkv, mi_type_name(ct), np, (long long)N, cd);
                    continue;
                }
                st = mi_cudev_d2h_async(o1, do1, (size_t)hd * Hq * N * 4, stream);
                if (st == MI_OK) st = mi_cudev_d2h_async(o2, do2, (size_t)hd * Hq * N * 4, stream);
                if (st == MI_OK) st = mi_cudev_stream_sync(stream);
                if (st != MI_OK) break;
                const size_t db = gu_first_diff(o2, o1, (size_t)hd * Hq * N * sizeof(float));
                const int64_t d = db == (size_t)-1 ? -1 : (int64_t)(db / sizeof(float));
                if (d >= 0 && !bad++)
                    snprintf(first_bad, sizeof first_bad, "attn hd %d Hq %d Hkv %d %s n_past %d N %lld: index %lld "
                             "got %.9g want %.9g", hd, Hq, Hkv, mi_type_name(ct), np, (long long)N, (long long)d,
                             o2[d], o1[d]);
            }
        }
        for (int i = 0; i < 9; i++) mi_cudev_free(*bufs[i]);
        free(q); free(x); free(o1); free(o2); free(cache); free(c1); free(c2);
        if (st != MI_OK) {
            gu_fail(r, "device: %s", mi_errmsg());
            mi_cudev_stream_free(stream);
            return;
        }
    }
    mi_cudev_stream_free(stream);
    if (bad) gu_fail(r, "%d of %d cases differ from 7b; first: %s", bad, cases, first_bad);
    else gu_pass(r, "%d cases (4 head layouts, F16/F32 caches, n_past 0..300 incl. tile edges, N 1 and 3): "
                     "7d kv_store and attn bit-identical to 7b", cases);
}
