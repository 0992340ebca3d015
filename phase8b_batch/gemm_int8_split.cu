/* A batch's matmul at 9..64 rows: 7e's int8 tensor-core kernel (gemm_int8_kernel.cuh) with the
 * K dimension split over blocks. Unsplit, a tile is 64 weight rows by 64 tokens, so a step of
 * 16 sequences on a 3584-row weight runs 56 blocks and the GPU reads its weights at 64 GB/s;
 * split in S, block z of each tile sums units [z chunk, (z + 1) chunk) into part [z][N][M] and
 * a second kernel adds the parts in z order, then the bias. The unit dots are the same exact
 * integers; only the float sum over units is split, so results are within 7b's matmul bound and
 * repeat bit for bit (fixed S for a shape, fixed order). */
#include "phase7e_perf/gemm_int8_kernel.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/split_sum.cuh"

/* units a split: S splits of whole stages, at least two stages each, enough blocks for about
 * four a multiprocessor; S = 1 when the tiles fill the GPU already */
static int64_t split_chunk(int64_t M, int64_t N, int64_t nunits, int *S_out) {
    const int64_t tiles = ((M + MQ_BM - 1) / MQ_BM) * ((N + MQ_BN - 1) / MQ_BN);
    int64_t s = (4 * (int64_t)mi7e_sm_count() + tiles - 1) / tiles;
    const int64_t smax = nunits / (2 * MQ_BK);
    if (s > smax) s = smax;
    if (s > MI8B_SPLIT_MAX) s = MI8B_SPLIT_MAX;
    if (s < 1) s = 1;
    int64_t chunk = (nunits + s - 1) / s;
    chunk = (chunk + MQ_BK - 1) / MQ_BK * MQ_BK;
    *S_out = (int)((nunits + chunk - 1) / chunk);
    return chunk;
}

static size_t act_bytes(mi_type wt, int64_t K, int64_t N) { return (mi7b_act_row_bytes(wt, K) * (size_t)N + 255) & ~(size_t)255; }

extern "C" int mi8b_gemm_split_count(mi_type wt, int64_t K, int64_t M, int64_t N) {
    int S = 1;
    if (mi7b_act_row_bytes(wt, K) == 0 || M <= 0 || N <= 0) return 1;
    split_chunk(M, N, K / 32, &S);
    return S;
}

extern "C" bool mi8b_gemm_split_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return N > MI7E_MATVEC_MAX_N && N <= MI8B_SPLIT_MAX_N && mi7e_gemm_int8_supported(wt, K, N) &&
           mi8b_gemm_split_count(wt, K, M, N) > 1;
}

extern "C" size_t mi8b_gemm_split_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return act_bytes(wt, K, N) + (size_t)mi8b_gemm_split_count(wt, K, M, N) * (size_t)M * (size_t)N * sizeof(float);
}

template <int WT>
static mi_status launch_split(cudaStream_t st, const uint8_t *w, const uint8_t *a, size_t arow, const float *bias,
                              float *y, int64_t K, int64_t M, int64_t N, float *part) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int64_t nunits = K / 32, gx = (M + MQ_BM - 1) / MQ_BM, gy = (N + MQ_BN - 1) / MQ_BN;
    int S = 1;
    const int64_t chunk = split_chunk(M, N, nunits, &S);
    kernel_gemm_int8<WT, true><<<dim3((unsigned)gx, (unsigned)gy, (unsigned)S), 128, 0, st>>>(w, wrow, a, arow, NULL, y,
                                                                                             M, N, nunits, chunk, part);
    MI_CU_CHECK_LAUNCH("kernel_gemm_int8<split>");
    kernel_split_sum<<<split_sum_blocks(M, N), 256, 0, st>>>(part, bias, y, M, N, S);
    MI_CU_CHECK_LAUNCH("kernel_split_sum");
    return MI_OK;
}

extern "C" mi_status mi8b_gemm_split(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                     float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi8b_gemm_split_supported(wt, K, M, N))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_split: type %s, K = %lld, M = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)M, (long long)N);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_split: null pointer");
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *a = (const uint8_t *)workspace;
    float *part = (float *)((uint8_t *)workspace + act_bytes(wt, K, N));
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_split<WT>(st, (const uint8_t *)w, a, arow, bias, y, K, M, N, part));
}
