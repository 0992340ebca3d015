/* GGUF reader (v2/v3, mmap'd, every length/offset/shape checked against the file
 * before use) and writer (streams tensor data, so multi-GB files need no RAM copy).
 * Strings returned by the reader point into the mapping and are NOT NUL-terminated:
 * always use the returned length. */
#ifndef MI_GGUF_H
#define MI_GGUF_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "../core/mi_err.h"
#include "../quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12, GGUF_VT_COUNT
} gguf_vtype;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_file gguf_file;

typedef struct {
    const char *name; size_t name_len;  /* not NUL-terminated in the mapping; name is also NUL-terminated copy */
    mi_type type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];          /* ne[0] = row length (innermost); unused dims = 1 */
    uint64_t offset;                    /* relative to the data section */
    size_t nbytes;                      /* checked: fits inside the file */
    const void *data;                   /* into the mapping, or into an aligned copy where the
                                           file's alignment left it short of mi_type_align */
} gguf_tensor_info;

/* Open and validate. On error returns a status and a one-line message (mi_errmsg) that
 * does not name the file: the caller adds that ("minfer: PATH: message"). */
mi_status gguf_open(const char *path, gguf_file **out);
/* Same over a caller-owned memory image (fuzzing, tests). The memory must outlive the file. */
mi_status gguf_open_mem(const void *data, size_t size, gguf_file **out);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_alignment(const gguf_file *f);
size_t gguf_file_size(const gguf_file *f);
size_t gguf_data_offset(const gguf_file *f);   /* start of the tensor data section */

/* Metadata. Key ids are 0..n_kv-1; gguf_find_key returns -1 if absent. */
int64_t gguf_n_kv(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, int64_t id);        /* NUL-terminated */
gguf_vtype gguf_kv_type(const gguf_file *f, int64_t id);
int64_t gguf_find_key(const gguf_file *f, const char *key);
/* Arrays: element type and count; for non-arrays returns GGUF_VT_COUNT and 0. */
gguf_vtype gguf_arr_type(const gguf_file *f, int64_t id);
uint64_t gguf_arr_n(const gguf_file *f, int64_t id);
/* Raw little-endian element data of a numeric array (not for strings/nested arrays). */
const void *gguf_arr_data(const gguf_file *f, int64_t id);
/* i-th string of a string array. */
const char *gguf_arr_str(const gguf_file *f, int64_t id, uint64_t i, size_t *len);
/* Nested arrays: i-th element of an array of arrays, as a pseudo key id usable with
 * gguf_arr_* (negative ids below -1 are reserved for that). */
int64_t gguf_arr_elem(const gguf_file *f, int64_t id, uint64_t i);

/* Scalar getters. They convert between integer widths when the value fits and
 * return MI_ERR_FORMAT (with a message naming the key) on a missing key or
 * wrong type. */
mi_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
mi_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
mi_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
mi_status gguf_get_f32(const gguf_file *f, const char *key, float *out); /* accepts f32/f64 */
mi_status gguf_get_bool(const gguf_file *f, const char *key, bool *out);
mi_status gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len);
/* Scalar value of key id as text (for `minfer info`); arrays summarised. */
void gguf_kv_format(const gguf_file *f, int64_t id, char *buf, size_t bufsz);

/* Names and sizes of value types: "u8" "i8" "u16" "i16" "u32" "i32" "f32" "bool" "str"
 * "arr" "u64" "i64" "f64" ("?" if unknown); size 0 for str/arr/unknown. */
const char *gguf_vt_name(gguf_vtype t);
size_t gguf_vt_size(gguf_vtype t);
/* Bytes of a scalar or string value of key id (pseudo ids of nested elements too):
 * scalars: the little-endian value (*len = its size); strings: the text, not
 * NUL-terminated (*len = its length). NULL for arrays and bad ids. */
const void *gguf_kv_data(const gguf_file *f, int64_t id, size_t *len);
/* The encoded value of key id as it lies in the file (after its type field), so that a
 * writer can copy it verbatim (gguf_w_raw). false for a bad id. */
bool gguf_kv_raw(const gguf_file *f, int64_t id, const void **raw, size_t *len);

/* Tensors. */
int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor_info *gguf_tensor(const gguf_file *f, int64_t i);
const gguf_tensor_info *gguf_find_tensor(const gguf_file *f, const char *name);

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);           /* v3, alignment 32 unless general.alignment is set */
void gguf_writer_free(gguf_writer *w);
/* Setters copy their arguments. Setting an existing key replaces it. */
void gguf_w_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_w_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_w_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_w_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_f64(gguf_writer *w, const char *key, double v);
void gguf_w_bool(gguf_writer *w, const char *key, bool v);
void gguf_w_str(gguf_writer *w, const char *key, const char *s);
void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n); /* numeric */
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Set a value from its GGUF encoding (the bytes after the type field), e.g. a nested
 * array or a value taken from gguf_kv_raw. The caller vouches for the encoding. */
void gguf_w_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *raw, size_t len);
/* Copy every kv of an opened file (used by quantize). */
void gguf_w_copy_kv(gguf_writer *w, const gguf_file *src);

/* Tensor data either given (data != NULL, must stay valid until write) or produced
 * on demand by fill(user, tensor_index, dst, nbytes) at write time (streaming). */
typedef mi_status (*gguf_fill_fn)(void *user, int64_t tensor_index, void *dst, size_t nbytes);
int64_t gguf_w_tensor(gguf_writer *w, const char *name, mi_type type, int n_dims,
                      const int64_t *ne, const void *data);
/* Write the file; fill is used for tensors added with data == NULL. progress (may be
 * NULL) is called with bytes written so far and total. The file is written beside path
 * and renamed over it (common/core/mi_file.h): on any failure an existing file at path is
 * left as it was, and a path that is not a regular file is refused. */
mi_status gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user,
                            void (*progress)(void *user, size_t done, size_t total));

#ifdef __cplusplus
}
#endif
#endif
