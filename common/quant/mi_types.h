/* Tensor element types (GGUF/ggml type ids, bit-for-bit block layouts) and the
 * per-type operations: dequantize, quantize, and the weight x activation dot
 * product. Block structs are the ggml ones; see docs/QUANT.md for each layout. */
#ifndef MI_TYPES_H
#define MI_TYPES_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values are the GGUF on-disk type ids. */
typedef enum {
    MI_TYPE_F32  = 0,
    MI_TYPE_F16  = 1,
    MI_TYPE_Q4_0 = 2,
    MI_TYPE_Q4_1 = 3,
    MI_TYPE_Q5_0 = 6,
    MI_TYPE_Q5_1 = 7,
    MI_TYPE_Q8_0 = 8,
    MI_TYPE_Q8_1 = 9,
    MI_TYPE_Q2_K = 10,
    MI_TYPE_Q3_K = 11,
    MI_TYPE_Q4_K = 12,
    MI_TYPE_Q5_K = 13,
    MI_TYPE_Q6_K = 14,
    MI_TYPE_Q8_K = 15,
    MI_TYPE_I8   = 24,
    MI_TYPE_I16  = 25,
    MI_TYPE_I32  = 26,
    MI_TYPE_I64  = 27,
    MI_TYPE_F64  = 28,
    MI_TYPE_BF16 = 30,
    MI_TYPE_COUNT = 40, /* bound for tables indexed by type id */
} mi_type;

#define MI_QK4_0 32
#define MI_QK4_1 32
#define MI_QK5_0 32
#define MI_QK5_1 32
#define MI_QK8_0 32
#define MI_QK8_1 32
#define MI_QK_K 256
#define MI_K_SCALE_SIZE 12

/* ggml block layouts. d/m are IEEE half bits (uint16_t). */
typedef struct { uint16_t d; uint8_t qs[MI_QK4_0 / 2]; } mi_block_q4_0;                 /* 18 B */
typedef struct { uint16_t d, m; uint8_t qs[MI_QK4_1 / 2]; } mi_block_q4_1;             /* 20 B */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[MI_QK5_0 / 2]; } mi_block_q5_0; /* 22 B */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[MI_QK5_1 / 2]; } mi_block_q5_1; /* 24 B */
typedef struct { uint16_t d; int8_t qs[MI_QK8_0]; } mi_block_q8_0;                     /* 34 B */
typedef struct { uint16_t d, s; int8_t qs[MI_QK8_1]; } mi_block_q8_1;  /* s = d * sum(qs), 36 B */
typedef struct { uint16_t d, dmin; uint8_t scales[MI_K_SCALE_SIZE]; uint8_t qs[MI_QK_K / 2]; } mi_block_q4_k; /* 144 B */
typedef struct { uint16_t d, dmin; uint8_t scales[MI_K_SCALE_SIZE]; uint8_t qh[MI_QK_K / 8]; uint8_t qs[MI_QK_K / 2]; } mi_block_q5_k; /* 176 B */
typedef struct { uint8_t ql[MI_QK_K / 2]; uint8_t qh[MI_QK_K / 4]; int8_t scales[MI_QK_K / 16]; uint16_t d; } mi_block_q6_k; /* 210 B */
typedef struct { float d; int8_t qs[MI_QK_K]; int16_t bsums[MI_QK_K / 16]; } mi_block_q8_k; /* 292 B */

typedef struct {
    const char *name;     /* "Q4_K" etc, as gguf prints it */
    int64_t blck_size;    /* elements per block (1 for plain types) */
    size_t type_size;     /* bytes per block */
    bool is_quantized;
    bool supported;       /* we can dequantize it */
    mi_type vec_dot_type; /* activation format the dot product takes */
} mi_type_traits;

/* Traits of a type id; NULL for an id we do not know (never trust a file's id). */
const mi_type_traits *mi_type_get(int type_id);
const char *mi_type_name(int type_id);        /* "?" if unknown */
int mi_type_from_name(const char *name);      /* case-insensitive; -1 if unknown */
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t mi_row_size(mi_type t, int64_t n);
/* Address alignment a tensor of type t needs: the kernels read it through typed
 * pointers (block structs, float, uint16_t) and only ever with unaligned vector loads,
 * so this is the C alignment of the type's element or block (1 if unknown). */
size_t mi_type_align(mi_type t);

/* Reference (scalar) conversions. n must be a multiple of the block size. */
void mi_dequantize_row(mi_type t, const void *src, float *dst, int64_t n);
/* Quantize one row. For Q4_0..Q8_0 bit-identical to ggml's reference quantizer;
 * K-quants with an error-minimising scale search; Q8_0/Q8_1/Q8_K are the activation
 * formats. imatrix not supported. */
void mi_quantize_row(mi_type t, const float *src, void *dst, int64_t n);

/* Dot product of one weight row (type t) with one activation row already in
 * mi_type_get(t)->vec_dot_type; n elements. Result in *s. */
typedef void (*mi_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);
/* The same dot for four activation rows a, a + stride, a + 2 stride, a + 3 stride: s[j] is, bit for
 * bit, what the mi_vec_dot_fn of the same type and isa gives for row j (each row's float
 * operations in that kernel's order; the weight row's unpacking shared by the four). */
typedef void (*mi_vec_dot4_fn)(int64_t n, float *s, const void *w, const void *a, size_t stride);
/* Activation quantizer into the dot type (n elements). */
typedef void (*mi_quantize_fn)(const float *src, void *dst, int64_t n);

typedef enum { MI_ISA_SCALAR = 0, MI_ISA_AVX2 = 1, MI_ISA_AVX512 = 2, MI_ISA_BEST = 99 } mi_isa;
/* Kernel for (weight type, isa); BEST picks the fastest the CPU supports at run
 * time (cpuid). Returns NULL if that isa is unavailable for that type on this CPU. */
mi_vec_dot_fn mi_get_vec_dot(mi_type t, mi_isa isa);
/* The four-row form of mi_get_vec_dot(t, isa)'s kernel; NULL where that kernel has none. */
mi_vec_dot4_fn mi_get_vec_dot4(mi_type t, mi_isa isa);
mi_quantize_fn mi_get_quantize_act(mi_type act_type, mi_isa isa);
mi_isa mi_cpu_best_isa(void);
const char *mi_isa_name(mi_isa isa);

#ifdef __cplusplus
}
#endif
#endif
