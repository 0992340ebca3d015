/* Private to common/gguf: the parsed form of a GGUF header. A value is a node that
 * points into the image; string-array elements and nested-array elements live in side
 * tables so that any element is reachable in O(1). */
#ifndef MI_GGUF_INTERNAL_H
#define MI_GGUF_INTERNAL_H
#include "gguf.h"

typedef struct {
    gguf_vtype type;   /* value type */
    gguf_vtype elem;   /* arrays: element type; else GGUF_VT_COUNT */
    uint64_t n;        /* strings: byte length; arrays: element count */
    const uint8_t *p;  /* scalars: the value; strings: the bytes; arrays: the first element */
    int64_t child;     /* string arrays: first index in strs[]; arrays of arrays: first index in ext[] */
} gguf_node;

typedef struct { size_t off, len; } gguf_span;          /* bytes of an encoded value in the image */
typedef struct { int64_t *slot; size_t mask; } gguf_htab; /* open addressing, -1 = empty */

struct gguf_file {
    const uint8_t *base;
    size_t size;
    size_t map_len;            /* nonzero: we own an mmap of this length */
    uint32_t version;
    size_t alignment, data_off;
    uint8_t *copy;             /* aligned copies of misaligned tensors' data (align_tensor_data) */
    int64_t n_kv, n_tensors;
    char **keys;               /* [n_kv] NUL-terminated copies */
    gguf_node *kv;             /* [n_kv] */
    gguf_span *kv_raw;         /* [n_kv] encoded value (after the type field) */
    gguf_tensor_info *ti;      /* [n_tensors] */
    char **names;              /* [n_tensors] NUL-terminated copies (ti[i].name) */
    gguf_node *ext;            /* nested array elements */
    int64_t n_ext, cap_ext;
    const uint8_t **strs;      /* string array elements: each points at its u64 length prefix */
    int64_t n_strs, cap_strs;
    gguf_htab key_hash, tensor_hash;
};

const gguf_node *gguf_node_get(const gguf_file *f, int64_t id);
bool gguf_node_int(const gguf_node *nd, uint64_t *u, int64_t *s, bool *neg);
#endif
