/* Row lookups and byte copies: GET_ROWS (embedding lookup, any weight type, dequantized
 * with the CPU reference's products in the same order: bit-identical, docs/NUMERICS.md),
 * and the stream-ordered byte copy behind SLICE_ROWS. Built with --fmad=false. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* element e of a row of type WT, as quant_ref.c / ggml's dequantize_row compute it */
template <int WT>
__device__ __forceinline__ float dq_elem(const uint8_t *row, int64_t e) {
    const int l = (int)(e & 31);
    if (WT == MI_TYPE_F32) return ((const float *)row)[e];
    if (WT == MI_TYPE_F16) return __half2float(__ushort_as_half(((const uint16_t *)row)[e]));
    if (WT == MI_TYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)row)[e] << 16);
    if (WT == MI_TYPE_Q4_0 || WT == MI_TYPE_Q4_1) {
        const uint8_t *b = row + (size_t)(e >> 5) * (WT == MI_TYPE_Q4_0 ? 18 : 20);
        const uint8_t *qs = b + (WT == MI_TYPE_Q4_0 ? 2 : 4);
        const int q = l < 16 ? (qs[l] & 0xF) : (qs[l - 16] >> 4);
        if (WT == MI_TYPE_Q4_0) return ld_f16(b) * (float)(q - 8);
        return ld_f16(b) * (float)q + ld_f16(b + 2);
    }
    if (WT == MI_TYPE_Q5_0 || WT == MI_TYPE_Q5_1) {
        const int off = WT == MI_TYPE_Q5_0 ? 2 : 4;
        const uint8_t *b = row + (size_t)(e >> 5) * (WT == MI_TYPE_Q5_0 ? 22 : 24);
        const uint32_t qh = ld_u32_a2(b + off);
        const uint8_t *qs = b + off + 4;
        int q = l < 16 ? (qs[l] & 0xF) : (qs[l - 16] >> 4);
        q |= (int)((qh >> l) & 1u) << 4;
        if (WT == MI_TYPE_Q5_0) return ld_f16(b) * (float)(q - 16);
        return ld_f16(b) * (float)q + ld_f16(b + 2);
    }
    if (WT == MI_TYPE_Q8_0) {
        const uint8_t *b = row + (size_t)(e >> 5) * 34;
        return ld_f16(b) * (float)(int8_t)b[2 + l];
    }
    if (WT == MI_TYPE_Q4_K || WT == MI_TYPE_Q5_K) {
        const uint8_t *b = row + (size_t)(e >> 8) * (WT == MI_TYPE_Q4_K ? 144 : 176);
        const int j = (int)((e & 255) >> 5);
        int sc, mn;
        k4_scale_min(b + 4, j, &sc, &mn);
        const uint8_t *qs = b + (WT == MI_TYPE_Q4_K ? 16 : 48) + 32 * (j >> 1);
        int q = (qs[l] >> (4 * (j & 1))) & 0xF;
        if (WT == MI_TYPE_Q5_K) q |= ((b[16 + l] >> j) & 1) << 4;
        const float d1 = ld_f16(b) * (float)sc, m1 = ld_f16(b + 2) * (float)mn;
        return d1 * (float)q - m1;
    }
    if (WT == MI_TYPE_Q6_K) {
        const uint8_t *b = row + (size_t)(e >> 8) * 210;
        const int t = (int)(e & 255), n = t >> 7, r = (t & 127) >> 5;
        const int lo = (b[64 * n + (r & 1) * 32 + l] >> (4 * (r >> 1))) & 0xF;
        const int hi = (b[128 + 32 * n + l] >> (2 * r)) & 3;
        const int q = (lo | (hi << 4)) - 32;
        const int sc = ((const int8_t *)(b + 192))[8 * n + 2 * r + l / 16];
        return ld_f16(b + 208) * (float)sc * (float)q;
    }
    return 0.0f;
}

/* table [E, V], ids [N] -> y [E, N]; block y = token, threads over the row */
template <int WT>
__global__ void kernel_get_rows(const uint8_t *__restrict__ table, size_t row_bytes, int64_t E,
                                int64_t V, const int32_t *__restrict__ ids, float *__restrict__ y) {
    MI_PDL_ENTRY();
    const int64_t n = blockIdx.y;
    const int32_t id = ids[n];
    float *yr = y + (size_t)n * E;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < E; e += stride)
        yr[e] = (id >= 0 && id < V) ? dq_elem<WT>(table + (size_t)id * row_bytes, e) : __int_as_float(0x7fc00000);
}

static int64_t rows_block(mi_type t) {
    switch (t) {
    case MI_TYPE_F32: case MI_TYPE_F16: case MI_TYPE_BF16: return 1;
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0: return 32;
    case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: case MI_TYPE_Q6_K: return 256;
    default: return 0;
    }
}

extern "C" bool mi7b_get_rows_supported(mi_type t, int64_t E) {
    const int64_t bk = rows_block(t);
    return bk > 0 && E > 0 && E % bk == 0;
}

template <int WT>
static mi_status launch_get_rows(cudaStream_t st, const void *table, int64_t E, int64_t V,
                                 const int32_t *ids, float *y, int64_t N) {
    const size_t rb = mi_row_size((mi_type)WT, E);
    dim3 grid(mi7b_blocks(E, 256) > 64 ? 64 : mi7b_blocks(E, 256), (unsigned)N);
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_get_rows<WT>, grid, 256, 0, st, (const uint8_t *)table, rb, E, V, ids, y));
    MI_CU_CHECK_LAUNCH("kernel_get_rows");
    return MI_OK;
}

extern "C" mi_status mi7b_get_rows(void *stream, mi_type t, const void *table, int64_t E, int64_t V,
                                   const int32_t *ids, float *y, int64_t N) {
    if (!mi7b_get_rows_supported(t, E) || N <= 0 || N > 65535)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_get_rows: type %s, E = %lld, N = %lld",
                      mi_type_name(t), (long long)E, (long long)N);
    cudaStream_t st = (cudaStream_t)stream;
    switch (t) {   /* the float tables here, the quantized ones through MI_QTYPE_DISPATCH */
    case MI_TYPE_F32: return launch_get_rows<MI_TYPE_F32>(st, table, E, V, ids, y, N);
    case MI_TYPE_F16: return launch_get_rows<MI_TYPE_F16>(st, table, E, V, ids, y, N);
    case MI_TYPE_BF16: return launch_get_rows<MI_TYPE_BF16>(st, table, E, V, ids, y, N);
    default: break;
    }
    MI_QTYPE_DISPATCH(t, WT, return launch_get_rows<WT>(st, table, E, V, ids, y, N));
}

extern "C" mi_status mi7b_copy(void *stream, void *dst, const void *src, size_t n) {
    if (n == 0) return MI_OK;
    MI_CU_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return MI_OK;
}
