/* libFuzzer target past the parser: GGUF bytes -> model load (CPU) -> tokenizer load ->
 * encode a prompt with special tokens -> one decode step of the prompt and one of the
 * greedy next token -> detokenize. The bytes reach mi_model_load through a memfd, so the
 * real open/mmap path is what is fuzzed.
 *
 * Inputs whose tensors add up to more than MAX_ELEMS elements (counting shared data ranges
 * once per tensor, as the forward pass does) or whose hyper-parameters are large are
 * skipped before loading: a decode step costs about one multiply-add per element, and
 * without the cap libFuzzer would report slow-unit timeouts and RSS-limit OOMs for
 * files that are merely big. What remains runs in milliseconds, so a timeout or an OOM
 * finding is a real bug (a loop or allocation not bounded by the file). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mman.h>
#include "common/gguf/gguf.h"
#include "common/model/mi.h"
#include "common/tokenizer/tokenizer.h"

#define MAX_ELEMS (4 << 20)
#define MAX_LAYERS 16
#define MAX_CTX 32

static volatile float g_sink;

/* hyper-parameter key ARCH.suffix as an integer, or 0 when absent or not an integer */
static int64_t hp(const gguf_file *f, const char *arch, const char *suffix) {
    char key[160];
    int64_t v = 0;
    snprintf(key, sizeof key, "%.64s.%s", arch, suffix);
    if (gguf_find_key(f, key) < 0 || gguf_get_i64(f, key, &v) != MI_OK) return 0;
    return v;
}

static int small_enough(const gguf_file *f) {
    uint64_t elems = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        uint64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) {
            if (t->ne[d] <= 0 || (uint64_t)t->ne[d] > MAX_ELEMS) return 0;
            n *= (uint64_t)t->ne[d];
            if (n > MAX_ELEMS) return 0;
        }
        elems += n;
        if (elems > MAX_ELEMS) return 0;
    }
    const char *arch;
    size_t len;
    char a[65];
    if (gguf_get_str(f, "general.architecture", &arch, &len) != MI_OK) return 1;   /* load rejects it */
    snprintf(a, sizeof a, "%.*s", (int)(len < 64 ? len : 64), arch);
    if (memchr(arch, 0, len)) return 1;
    int64_t L = hp(f, a, "block_count");
    /* a layer reads at least its norms; more layers than that bound are shared-data files */
    return L <= MAX_LAYERS && hp(f, a, "attention.head_count") <= 256 && hp(f, a, "attention.head_count_kv") <= 256;
}

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    g_fd = memfd_create("fuzz_model.gguf", 0);
    if (g_fd < 0) { perror("memfd_create"); abort(); }
    snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    return 0;
}

static void run_model(mi_model *m) {
    mi_tokenizer *tok = NULL;
    mi_session *s = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (tok_load(mi_model_gguf(m), &tok) != MI_OK) return;
    static const char prompt[] = "<|im_start|>user\nHi, caf\xc3\xa9 123 \xf0\x9f\x98\x80!<|im_end|>\n";
    if (tok_encode(tok, prompt, sizeof prompt - 1, true, &ids, &n_ids) != MI_OK || n_ids <= 0) goto out;
    char buf[4096];
    mi_detok d = {0};
    for (int64_t i = 0; i < n_ids; i++) {
        size_t len;
        const char *p = tok_piece(tok, ids[i], &len);
        if (p && len) g_sink += (float)p[len - 1];
        tok_detok_push(tok, &d, ids[i], buf, sizeof buf);
    }
    tok_detok_flush(&d, buf, sizeof buf);
    mi_session_params sp;
    mi_session_params_default(&sp);
    sp.backend = "cpu";
    sp.n_threads = 1;
    sp.n_ctx = MAX_CTX;
    if (mi_session_new(m, &sp, &s) != MI_OK) goto out;
    if (n_ids > MAX_CTX - 1) n_ids = MAX_CTX - 1;
    if (mi_session_decode(s, ids, n_ids, false) != MI_OK) goto out;
    int64_t rows;
    const float *lg = mi_logits(s, &rows);
    int64_t nv = mi_model_hparams(m)->n_vocab;
    int32_t best = 0;
    for (int64_t i = 1; i < nv; i++)
        if (lg[i] > lg[best]) best = (int32_t)i;
    g_sink += lg[best];
    if (mi_session_decode(s, &best, 1, false) == MI_OK) {
        lg = mi_logits(s, &rows);
        g_sink += lg[nv - 1];
        tok_detok_push(tok, &d, best, buf, sizeof buf);
    }
out:
    mi_session_free(s);
    free(ids);
    tok_free(tok);
}

/* ---- structure-aware mutation ----
 * Byte-level mutation of a GGUF mostly breaks its framing, so few inputs get past the
 * parser into hyper-parameters, tokenizer and kernels. Half of the mutations instead
 * rewrite one value in place, keeping every length: a numeric key or array element gets
 * an interesting number (0, 1, -1, powers of two and their neighbours, NaN, Inf, a small
 * random count), a string or one string of a string array gets a byte changed. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static void put_number(uint8_t *p, size_t width, gguf_vtype t, uint64_t *s) {
    static const int64_t ints[] = {0, 1, 2, 3, -1, -2, 7, 8, 31, 32, 33, 63, 64, 127, 128, 255, 256, 511, 512,
                                   1023, 1024, 4095, 4096, 65535, 65536, INT32_MAX, (int64_t)INT32_MAX + 1,
                                   (int64_t)UINT32_MAX, (int64_t)UINT32_MAX + 1, INT64_MAX, INT64_MIN};
    static const float floats[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, 1e-6f, 0.5f, 2.0f, 1e4f, 1e38f,
                                   __builtin_nanf(""), __builtin_inff(), -__builtin_inff()};
    if (t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64) {
        float x = floats[rnd(s) % (sizeof floats / sizeof floats[0])];
        if (width == 4) memcpy(p, &x, 4);
        else { double d = x; memcpy(p, &d, 8); }
        return;
    }
    int64_t v = rnd(s) % 3 ? ints[rnd(s) % (sizeof ints / sizeof ints[0])] : (int64_t)(rnd(s) % 600);
    memcpy(p, &v, width);   /* little-endian host: the low bytes */
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    gguf_file *f;
    if (rnd(&s) % 2 || gguf_open_mem(data, size, &f) != MI_OK) return LLVMFuzzerMutate(data, size, max_size);
    if (gguf_n_kv(f) == 0) {
        gguf_close(f);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    int64_t id = (int64_t)(rnd(&s) % (uint64_t)gguf_n_kv(f));
    gguf_vtype t = gguf_kv_type(f, id);
    uint8_t *p = NULL;
    size_t len = 0;
    if (t == GGUF_VT_ARRAY && gguf_arr_n(f, id) > 0) {
        uint64_t i = rnd(&s) % gguf_arr_n(f, id);
        gguf_vtype et = gguf_arr_type(f, id);
        if (gguf_vt_size(et) && gguf_arr_data(f, id)) {
            len = gguf_vt_size(et);
            p = (uint8_t *)gguf_arr_data(f, id) + i * len;
            t = et;
        } else if (et == GGUF_VT_STRING) {
            p = (uint8_t *)gguf_arr_str(f, id, i, &len);
            t = GGUF_VT_STRING;
        }
    } else if (t != GGUF_VT_ARRAY) {
        p = (uint8_t *)gguf_kv_data(f, id, &len);
    }
    if (p && len && p >= data && p + len <= data + size) {
        if (t == GGUF_VT_STRING) {
            static const uint8_t bytes[] = {0, ' ', 0xff, 0xc3, 0x80, '<', '|', 'a', '\n'};
            p[rnd(&s) % len] = rnd(&s) % 2 ? bytes[rnd(&s) % sizeof bytes] : (uint8_t)rnd(&s);
        } else if (t == GGUF_VT_BOOL) {
            p[0] = (uint8_t)(rnd(&s) % 3);
        } else {
            put_number(p, len, t, &s);
        }
    }
    gguf_close(f);
    return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f;
    if (gguf_open_mem(data, size, &f) != MI_OK) return 0;
    int ok = small_enough(f);
    gguf_close(f);
    if (!ok) return 0;
    if (ftruncate(g_fd, 0) || pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
    mi_model_params mp = {.backend = "cpu"};
    mi_model *m;
    if (mi_model_load_params(g_path, &mp, &m) != MI_OK) return 0;
    run_model(m);
    mi_model_free(m);
    return 0;
}
