/* Criterion tests of the tokenizer's pieces that the HF parity gate (py_tokenizer.py) does
 * not isolate: the Unicode class lookup, UTF-8 decoding of malformed input, the splitters on
 * edge cases (expected piece ends recorded from HF tokenizers 0.23.3's Split pre-tokenizers
 * with the regexes of docs/TOKENIZER.md), the streaming detokenizer on split characters, BPE
 * merge order and load errors on tiny hand-made vocabularies, and the chat templates. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/gguf/gguf.h"
#include "common/tokenizer/tok_internal.h"
#include "common/tokenizer/tokenizer.h"

/* ---- Unicode classes ---- */
static uint8_t table_flags(uint32_t cp) {   /* linear scan: independent of uc_flags' search */
    for (size_t i = 0; i < mi_uc_n_ranges; i++)
        if (mi_uc_ranges[i].lo <= cp && cp <= mi_uc_ranges[i].hi) return mi_uc_ranges[i].flags;
    return 0;
}

Test(unicode, ascii_fast_path_matches_table) {
    for (uint32_t c = 0; c < 0x80; c++) cr_expect_eq(uc_flags(c), table_flags(c), "U+%04X", c);
}

Test(unicode, table_sorted_and_search_agrees) {
    for (size_t i = 1; i < mi_uc_n_ranges; i++) cr_assert_gt(mi_uc_ranges[i].lo, mi_uc_ranges[i - 1].hi);
    for (uint32_t c = 0x80; c < 0x30000; c += 7) cr_expect_eq(uc_flags(c), table_flags(c), "U+%04X", c);
}

Test(unicode, known_code_points) {   /* general categories from the Unicode standard */
    cr_expect_eq(uc_flags(0xAA), MI_UC_L);      /* FEMININE ORDINAL INDICATOR, Lo */
    cr_expect_eq(uc_flags(0xB2), MI_UC_N);      /* SUPERSCRIPT TWO, No */
    cr_expect_eq(uc_flags(0x0660), MI_UC_N);    /* ARABIC-INDIC DIGIT ZERO, Nd */
    cr_expect_eq(uc_flags(0x2167), MI_UC_N);    /* ROMAN NUMERAL EIGHT, Nl */
    cr_expect_eq(uc_flags(0x4E00), MI_UC_L);    /* CJK ideograph, Lo */
    cr_expect_eq(uc_flags(0x3000), MI_UC_WS);   /* IDEOGRAPHIC SPACE */
    cr_expect_eq(uc_flags(0x85), MI_UC_WS);     /* NEXT LINE */
    cr_expect_eq(uc_flags(0x200B), 0);          /* ZERO WIDTH SPACE is Cf, not White_Space */
    cr_expect_eq(uc_flags(0x1C), 0);            /* str.isspace() says yes; White_Space says no */
    cr_expect_eq(uc_flags(0x0301), 0);          /* combining acute, Mn */
    cr_expect_eq(uc_flags(0x1F600), 0);         /* emoji, So */
    cr_expect_eq(uc_flags(0x110041), 0);        /* pseudo code point of a bad byte */
}

/* ---- UTF-8 decoding ---- */
Test(utf8, valid_and_malformed) {
    struct { const char *s; size_t n, want_len; uint32_t want_cp; } c[] = {
        {"A", 1, 1, 'A'}, {"\xc3\xa9", 2, 2, 0xE9}, {"\xe4\xbd\xa0", 3, 3, 0x4F60}, {"\xf0\x9f\x98\x80", 4, 4, 0x1F600},
        {"\xc0\x80", 2, 1, 0x110000 + 0xC0},           /* overlong */
        {"\xe0\x80\x80", 3, 1, 0x110000 + 0xE0},       /* overlong 3-byte */
        {"\xed\xa0\x80", 3, 1, 0x110000 + 0xED},       /* surrogate */
        {"\xf4\x90\x80\x80", 4, 1, 0x110000 + 0xF4},  /* past U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 1, 0x110000 + 0xF5},  /* invalid lead */
        {"\x80", 1, 1, 0x110000 + 0x80},                /* stray continuation */
        {"\xe4\xbd", 2, 1, 0x110000 + 0xE4},           /* truncated */
        {"\xe4" "A" "\xa0", 3, 1, 0x110000 + 0xE4},     /* broken */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        uint32_t cp;
        size_t l = utf8_decode((const unsigned char *)c[i].s, c[i].n, &cp);
        cr_expect_eq(l, c[i].want_len, "case %zu", i);
        cr_expect_eq(cp, c[i].want_cp, "case %zu: got %X", i, cp);
    }
}

/* ---- splitters ---- */
static const char *const split_cases[] = {
    "Hello world",
    "it's I'M they'LL '" "\xc5\xbf",
    "a  b",
    "a   " "\x0a" "\x0a" "  b  ",
    "x" "\x0d" "\x0a" "\x0d" "\x0a" "y",
    "1234567",
    " 12 345",
    "\x09" "\x09" "if (x) {" "\x0a" "\x09" "\x09" "return;" "\x0a" "\x09" "}",
    "\xe4\xbd\xa0" "\xe5\xa5\xbd" " " "\xe4\xb8\x96" "\xe7\x95\x8c" "\xef\xbc\x81",
    "\xf0\x9f\x98\x80" "\xf0\x9f\x91\x8d" "\xf0\x9f\x8f\xbd" " ok",
    "e" "\xcc\x81" "t" "\xc3\xa9",
    "\xc2\xa0" "\xe3\x80\x80" "x ",
    "$$ (a)" "\x0a" "\x0a",
    "\xd9\xa3" "\xd9\xa4" "5 " "\xc2\xb2",
    "'x 's",
    "  ",
    "\x0a",
    "a" "\xe2\x80\x8b" "b",
    "\x1c" "\x1d" "z",
};
/* gpt2 */
static const int split_gpt2[][24] = {
    {2, 5, 11},
    {10, 2, 4, 6, 7, 8, 13, 14, 16, 18, 20},
    {3, 1, 2, 4},
    {4, 1, 7, 9, 11},
    {4, 1, 4, 5, 6},
    {1, 7},
    {2, 3, 7},
    {14, 1, 2, 4, 6, 7, 8, 10, 12, 13, 19, 20, 21, 22, 23},
    {3, 6, 13, 16},
    {2, 12, 15},
    {3, 1, 3, 6},
    {4, 2, 5, 6, 7},
    {5, 2, 4, 5, 6, 8},
    {2, 5, 8},
    {4, 1, 2, 4, 5},
    {1, 2},
    {1, 1},
    {3, 1, 4, 5},
    {2, 2, 3},
};
/* llama-bpe */
static const int split_llama_bpe[][24] = {
    {2, 5, 11},
    {8, 2, 4, 6, 8, 13, 16, 18, 20},
    {3, 1, 2, 4},
    {5, 1, 6, 7, 9, 11},
    {3, 1, 5, 6},
    {3, 3, 6, 7},
    {4, 1, 3, 4, 7},
    {11, 1, 4, 6, 7, 8, 11, 12, 19, 21, 22, 23},
    {3, 6, 13, 16},
    {2, 12, 15},
    {2, 1, 6},
    {3, 2, 6, 7},
    {4, 2, 4, 5, 8},
    {3, 5, 6, 8},
    {3, 2, 4, 5},
    {1, 2},
    {1, 1},
    {2, 1, 5},
    {2, 2, 3},
};
/* qwen2 */
static const int split_qwen2[][24] = {
    {2, 5, 11},
    {8, 2, 4, 6, 8, 13, 16, 18, 20},
    {3, 1, 2, 4},
    {5, 1, 6, 7, 9, 11},
    {3, 1, 5, 6},
    {7, 1, 2, 3, 4, 5, 6, 7},
    {7, 1, 2, 3, 4, 5, 6, 7},
    {11, 1, 4, 6, 7, 8, 11, 12, 19, 21, 22, 23},
    {3, 6, 13, 16},
    {2, 12, 15},
    {2, 1, 6},
    {3, 2, 6, 7},
    {4, 2, 4, 5, 8},
    {5, 2, 4, 5, 6, 8},
    {3, 2, 4, 5},
    {1, 2},
    {1, 1},
    {2, 1, 5},
    {2, 2, 3},
};
/* smollm */
static const int split_smollm[][24] = {
    {2, 5, 11},
    {10, 2, 4, 6, 7, 8, 13, 14, 16, 18, 20},
    {3, 1, 2, 4},
    {4, 1, 7, 9, 11},
    {4, 1, 4, 5, 6},
    {7, 1, 2, 3, 4, 5, 6, 7},
    {7, 1, 2, 3, 4, 5, 6, 7},
    {14, 1, 2, 4, 6, 7, 8, 10, 12, 13, 19, 20, 21, 22, 23},
    {3, 6, 13, 16},
    {2, 12, 15},
    {3, 1, 3, 6},
    {4, 2, 5, 6, 7},
    {5, 2, 4, 5, 6, 8},
    {5, 2, 4, 5, 6, 8},
    {4, 1, 2, 4, 5},
    {1, 2},
    {1, 1},
    {3, 1, 4, 5},
    {2, 2, 3},
};

static void check_splits(mi_pretok kind, const int (*want)[24], const char *name) {
    for (size_t i = 0; i < sizeof split_cases / sizeof split_cases[0]; i++) {
        const char *s = split_cases[i];
        size_t len = strlen(s), nc = 0;
        uint32_t cps[256];
        size_t offs[257], ends[256];
        for (size_t k = 0; k < len;) {
            offs[nc] = k;
            k += utf8_decode((const unsigned char *)s + k, len - k, &cps[nc]);
            nc++;
        }
        offs[nc] = len;
        size_t np = pretok_split(kind, cps, nc, ends);
        cr_expect_eq((int)np, want[i][0], "%s case %zu: %zu pieces, want %d", name, i, np, want[i][0]);
        for (size_t p = 0; p < np && (int)p < want[i][0]; p++)
            cr_expect_eq((int)offs[ends[p]], want[i][1 + p], "%s case %zu piece %zu: ends at %zu, want %d", name, i, p,
                         offs[ends[p]], want[i][1 + p]);
    }
}

Test(pretok, gpt2) { check_splits(MI_PRETOK_GPT2, split_gpt2, "gpt2"); }
Test(pretok, llama3) { check_splits(MI_PRETOK_LLAMA3, split_llama_bpe, "llama3"); }
Test(pretok, qwen2) { check_splits(MI_PRETOK_QWEN2, split_qwen2, "qwen2"); }
Test(pretok, smollm) { check_splits(MI_PRETOK_SMOLLM, split_smollm, "smollm"); }

Test(pretok, names) {
    mi_pretok k;
    bool im;
    cr_assert(pretok_from_name("llama-bpe", 9, &k, &im));
    cr_expect(k == MI_PRETOK_LLAMA3 && im);
    cr_assert(pretok_from_name("qwen2", 5, &k, &im));
    cr_expect(k == MI_PRETOK_QWEN2 && !im);
    cr_assert(pretok_from_name("smollm", 6, &k, &im));
    cr_expect(k == MI_PRETOK_SMOLLM);
    cr_expect(!pretok_from_name("qwen", 4, &k, &im));
    cr_expect(!pretok_from_name("deepseek-coder", 14, &k, &im));
}

/* ---- a tiny vocabulary written with the GGUF writer ---- */
/* GPT-2 byte-level text of byte b (the same map the tokenizer inverts, written out here) */
static int byte_text(int b, char *out) {
    int direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    unsigned cp = (unsigned)b;
    if (!direct) {
        int k = 0;
        for (int x = 0; x < b; x++) k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256u + (unsigned)k;
    }
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

typedef struct { char path[64]; gguf_file *f; mi_tokenizer *t; } tiny;

/* tokens: 256 bytes (id = byte value), then extra[] (texts in byte-level form), then
 * "<|im_end|>" (control) and "<x>" (user-defined) */
static mi_status tiny_make(tiny *ty, const char *pre, const char *const *extra, int n_extra,
                           const char *const *merges, int n_merges) {
    static char bt[256][3];
    const char *toks[300];
    int32_t types[300];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bt[b][byte_text(b, bt[b])] = 0;
        types[n] = 1;
        toks[n++] = bt[b];
    }
    for (int i = 0; i < n_extra; i++) { types[n] = 1; toks[n++] = extra[i]; }
    types[n] = 3; toks[n++] = "<|im_end|>";
    types[n] = 4; toks[n++] = "<x>";
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gguf_w_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types, (uint64_t)n);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n - 2));
    strcpy(ty->path, "/tmp/minfer-tok-XXXXXX");
    int fd = mkstemp(ty->path);
    cr_assert(fd >= 0);
    close(fd);
    mi_status st = gguf_writer_write(w, ty->path, NULL, NULL, NULL);
    gguf_writer_free(w);
    cr_assert_eq(st, MI_OK, "%s", mi_errmsg());
    cr_assert_eq(gguf_open(ty->path, &ty->f), MI_OK, "%s", mi_errmsg());
    ty->t = NULL;
    return tok_load(ty->f, &ty->t);
}

static void tiny_free(tiny *ty) {
    tok_free(ty->t);
    gguf_close(ty->f);
    unlink(ty->path);
}

static int64_t enc(const mi_tokenizer *t, const char *s, bool special, int32_t *out, int64_t cap) {
    int32_t *ids;
    int64_t n;
    cr_assert_eq(tok_encode(t, s, strlen(s), special, &ids, &n), MI_OK, "%s", mi_errmsg());
    for (int64_t i = 0; i < n && i < cap; i++) out[i] = ids[i];
    free(ids);
    return n;
}

Test(bpe, merge_order_leftmost_lowest_rank) {
    /* ids: 256 "aa", 257 "aaaa", 258 "ab" ; merges by rank: "a a", "aa aa", "a b" */
    const char *extra[] = {"aa", "aaaa", "ab"};
    const char *merges[] = {"a a", "aa aa", "a b"};
    tiny ty;
    cr_assert_eq(tiny_make(&ty, "gpt2", extra, 3, merges, 3), MI_OK, "%s", mi_errmsg());
    int32_t ids[16];
    /* "aaa": both (0,1) and (1,2) are rank 0; the leftmost merges first -> aa a */
    cr_assert_eq(enc(ty.t, "aaa", false, ids, 16), 2);
    cr_expect(ids[0] == 256 && ids[1] == 'a');
    cr_assert_eq(enc(ty.t, "aaaaa", false, ids, 16), 2);   /* aa aa a -> aaaa a */
    cr_expect(ids[0] == 257 && ids[1] == 'a');
    cr_assert_eq(enc(ty.t, "aab", false, ids, 16), 2);     /* "a a" (rank 0) beats "a b" (rank 2) */
    cr_expect(ids[0] == 256 && ids[1] == 'b');
    cr_assert_eq(enc(ty.t, "ab ab", false, ids, 16), 3);   /* split: "ab", " ab" -> ab, ' ', ab */
    cr_expect(ids[0] == 258 && ids[1] == ' ' && ids[2] == 258);
    tiny_free(&ty);
}

Test(bpe, ignore_merges_llama3_only) {
    /* "abc" is a token no merge produces: llama3's pre-tokenizers look whole pieces up first
     * (HF ignore_merges), the others build pieces from merges only */
    const char *extra[] = {"abc"};
    tiny ty;
    int32_t ids[8];
    cr_assert_eq(tiny_make(&ty, "llama-bpe", extra, 1, NULL, 0), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(enc(ty.t, "abc", false, ids, 8), 1);
    cr_expect_eq(ids[0], 256);
    cr_expect(tok_add_bos(ty.t) == false);   /* no bos id in this file */
    tiny_free(&ty);
    cr_assert_eq(tiny_make(&ty, "qwen2", extra, 1, NULL, 0), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(enc(ty.t, "abc", false, ids, 8), 3);
    cr_expect(ids[0] == 'a' && ids[1] == 'b' && ids[2] == 'c');
    tiny_free(&ty);
}

Test(bpe, special_tokens) {
    tiny ty;
    cr_assert_eq(tiny_make(&ty, "qwen2", NULL, 0, NULL, 0), MI_OK, "%s", mi_errmsg());
    int32_t im_end = tok_find(ty.t, "<|im_end|>"), x = tok_find(ty.t, "<x>");
    cr_assert(im_end == 256 && x == 257);
    cr_expect(tok_is_eog(ty.t, im_end));
    cr_expect(!tok_is_eog(ty.t, 'a'));
    int32_t ids[32];
    /* parse_special: control text becomes its id; otherwise it is plain text */
    cr_assert_eq(enc(ty.t, "a<|im_end|>b", true, ids, 32), 3);
    cr_expect(ids[0] == 'a' && ids[1] == im_end && ids[2] == 'b');
    cr_expect_eq(enc(ty.t, "a<|im_end|>b", false, ids, 32), 12);
    /* user-defined tokens are matched either way (as HF does for non-special added tokens) */
    cr_assert_eq(enc(ty.t, "<x><x", false, ids, 32), 3);
    cr_expect(ids[0] == x && ids[1] == '<' && ids[2] == 'x');
    size_t len;
    const char *p = tok_piece(ty.t, im_end, &len);
    cr_expect(len == 10 && !memcmp(p, "<|im_end|>", 10));
    p = tok_piece(ty.t, 0x0A, &len);   /* byte-level text "\u010a" decodes to "\n" */
    cr_expect(len == 1 && p[0] == '\n');
    cr_expect_null(tok_piece(ty.t, -1, &len));
    cr_expect_null(tok_piece(ty.t, 100000, &len));
    cr_assert_eq(enc(ty.t, "", true, ids, 32), 0);
    tiny_free(&ty);
}

Test(bpe, load_errors) {
    tiny ty;
    const char *bad_merge[] = {"a zz"};
    cr_expect_eq(tiny_make(&ty, "qwen2", NULL, 0, bad_merge, 1), MI_ERR_FORMAT);
    cr_expect(strstr(mi_errmsg(), "merges[0]") != NULL, "%s", mi_errmsg());
    tiny_free(&ty);
    const char *no_space[] = {"ab"};
    cr_expect_eq(tiny_make(&ty, "qwen2", NULL, 0, no_space, 1), MI_ERR_FORMAT);
    tiny_free(&ty);
    cr_expect_eq(tiny_make(&ty, "no-such-pre", NULL, 0, NULL, 0), MI_ERR_UNSUPPORTED);
    cr_expect(strstr(mi_errmsg(), "no-such-pre") != NULL, "%s", mi_errmsg());
    tiny_free(&ty);
    cr_expect_eq(tiny_make(&ty, NULL, NULL, 0, NULL, 0), MI_OK);   /* no pre: GPT-2 with a log line */
    cr_expect_eq(tok_pretok(ty.t), MI_PRETOK_GPT2);
    tiny_free(&ty);
}

/* ---- streaming detokenizer ---- */
static size_t push(const mi_tokenizer *t, mi_detok *d, int32_t id, char *out) { return tok_detok_push(t, d, id, out, 64); }

Test(detok, holds_incomplete_characters) {
    /* 257: "\xe4\xbd" (first two bytes of U+4F60) as one token */
    char e4[3], bd[3], txt[8];
    e4[byte_text(0xE4, e4)] = 0;
    bd[byte_text(0xBD, bd)] = 0;
    snprintf(txt, sizeof txt, "%s%s", e4, bd);
    const char *extra[] = {txt};
    tiny ty;
    cr_assert_eq(tiny_make(&ty, "qwen2", extra, 1, NULL, 0), MI_OK, "%s", mi_errmsg());
    mi_tokenizer *t = ty.t;
    char out[64];
    mi_detok d = {0};
    /* U+4F60 byte by byte: nothing until the third byte */
    cr_expect_eq(push(t, &d, 0xE4, out), 0);
    cr_expect_eq(push(t, &d, 0xBD, out), 0);
    cr_assert_eq(push(t, &d, 0xA0, out), 3);
    cr_expect(!memcmp(out, "\xe4\xbd\xa0", 3));
    /* the two-byte token then the last byte */
    cr_expect_eq(push(t, &d, 256, out), 0);
    cr_assert_eq(push(t, &d, 0xA0, out), 3);
    /* U+1F600 in four pushes, with ASCII before it in the same push as the lead byte */
    cr_expect_eq(push(t, &d, 'x', out), 1);
    cr_expect_eq(push(t, &d, 0xF0, out), 0);
    cr_expect_eq(push(t, &d, 0x9F, out), 0);
    cr_expect_eq(push(t, &d, 0x98, out), 0);
    cr_assert_eq(push(t, &d, 0x80, out), 4);
    cr_expect(!memcmp(out, "\xf0\x9f\x98\x80", 4));
    /* malformed: a stray continuation passes at once; a lead byte followed by ASCII is
     * released with it */
    cr_expect_eq(push(t, &d, 0x80, out), 1);
    cr_expect_eq(push(t, &d, 0xE4, out), 0);
    cr_assert_eq(push(t, &d, 'a', out), 2);
    cr_expect(out[0] == '\xe4' && out[1] == 'a');
    /* an unfinished character at the end comes out of flush as it is */
    cr_expect_eq(push(t, &d, 256, out), 0);
    cr_assert_eq(tok_detok_flush(&d, out, sizeof out), 2);
    cr_expect(!memcmp(out, "\xe4\xbd", 2));
    cr_expect_eq(tok_detok_flush(&d, out, sizeof out), 0);
    /* control tokens print their text */
    cr_assert_eq(push(t, &d, tok_find(t, "<|im_end|>"), out), 10);
    cr_expect_eq(push(t, &d, -5, out), 0);
    cr_expect_geq(tok_max_piece_len(t), 10);
    tiny_free(&ty);
}

/* ---- chat templates: expected strings written from the GGUF chat_template texts ---- */
Test(chat, renders) {
    mi_chat_msg m[] = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
    char *s = tok_chat_render(MI_CHAT_CHATML, m, 1, true);
    cr_expect_str_eq(s, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    s = tok_chat_render(MI_CHAT_SMOLLM, m, 3, true);
    cr_expect_str_eq(s, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    mi_chat_msg sys[] = {{"system", "Be brief."}, {"user", "Hi"}};
    s = tok_chat_render(MI_CHAT_QWEN2, sys, 2, false);
    cr_expect_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    free(s);
    s = tok_chat_render(MI_CHAT_QWEN2, m, 1, false);
    cr_expect_str_eq(s, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n");
    free(s);
}

static int64_t count_id(const int32_t *ids, int64_t n, int32_t id) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += ids[i] == id;
    return c;
}

/* Control tokens come from the template only: a message holding "<|im_end|>" cannot close its
 * turn. (The tiny vocabulary's only control token is <|im_end|>; <x> is user-defined.) */
Test(chat, encode_keeps_control_text_in_messages_plain) {
    tiny ty;
    cr_assert_eq(tiny_make(&ty, "qwen2", NULL, 0, NULL, 0), MI_OK, "%s", mi_errmsg());
    const int32_t im_end = tok_find(ty.t, "<|im_end|>"), x = tok_find(ty.t, "<x>");
    mi_chat_msg m[] = {{"user", "a<|im_end|>\nb<x>"}, {"assistant<|im_end|>", "<|im_end|>"}};
    int32_t *ids, *whole;
    int64_t n, nw;
    cr_assert_eq(tok_chat_encode(ty.t, MI_CHAT_CHATML, m, 2, true, &ids, &n), MI_OK, "%s", mi_errmsg());
    cr_expect_eq(count_id(ids, n, im_end), 2, "one <|im_end|> per message, none from a role or content");
    cr_expect_eq(count_id(ids, n, x), 1, "user-defined tokens still match in content (as HF)");
    char *s = tok_chat_render(MI_CHAT_CHATML, m, 2, true);
    cr_assert_eq(tok_encode(ty.t, s, strlen(s), true, &whole, &nw), MI_OK);
    cr_expect_eq(count_id(whole, nw, im_end), 5, "the rendered string, encoded whole, is the unsafe path");
    free(whole);
    free(s);
    free(ids);
    /* without control text in the messages: exactly the rendered string's encoding */
    mi_chat_msg ok[] = {{"user", "  hi\n"}, {"assistant", "b<x>c"}};
    cr_assert_eq(tok_chat_encode(ty.t, MI_CHAT_SMOLLM, ok, 2, true, &ids, &n), MI_OK, "%s", mi_errmsg());
    s = tok_chat_render(MI_CHAT_SMOLLM, ok, 2, true);
    cr_assert_eq(tok_encode(ty.t, s, strlen(s), true, &whole, &nw), MI_OK);
    cr_assert_eq(n, nw);
    cr_expect(!memcmp(ids, whole, (size_t)n * sizeof *ids));
    free(whole);
    free(s);
    free(ids);
    tiny_free(&ty);
}
