/* Pre-tokenizer splitters: one hand-written matcher per tokenizer.ggml.pre regex, over the
 * generated Unicode class table, reproducing leftmost-first alternation with backtracking
 * exactly as HF tokenizers' Split(Regex, Isolated) does (docs/TOKENIZER.md lists the regexes). */
#include <stdlib.h>
#include <string.h>
#include "common/tokenizer/tok_internal.h"

uint8_t uc_flags(uint32_t cp) {
    if (cp < 0x80) {   /* ASCII fast path; agrees with the table (checked by the tests) */
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return MI_UC_L;
        if (cp >= '0' && cp <= '9') return MI_UC_N;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return MI_UC_WS;
        return 0;
    }
    size_t lo = 0, hi = mi_uc_n_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mi_uc_ranges[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < mi_uc_n_ranges && mi_uc_ranges[lo].lo <= cp) return mi_uc_ranges[lo].flags;
    return 0;
}

int utf8_lead_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp) {
    int n = utf8_lead_len(s[0]);
    if (n == 1) { *cp = s[0]; return 1; }
    if (n == 0 || (size_t)n > len) goto bad;
    uint32_t v = s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (s[i] & 0x3F);
    }
    /* overlong, surrogate and out-of-range forms are malformed */
    if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF))
        goto bad;
    *cp = v;
    return (size_t)n;
bad:
    *cp = 0x110000u + s[0];
    return 1;
}

/* ---- shared pieces of the regexes ---- */
typedef struct { const uint32_t *cp; const uint8_t *fl; size_t n; } span;

static bool is_L(const span *s, size_t i) { return s->fl[i] & MI_UC_L; }
static bool is_N(const span *s, size_t i) { return s->fl[i] & MI_UC_N; }
static bool is_WS(const span *s, size_t i) { return s->fl[i] & MI_UC_WS; }
static bool is_other(const span *s, size_t i) { return !(s->fl[i] & (MI_UC_L | MI_UC_N | MI_UC_WS)); }
static bool is_crlf(const span *s, size_t i) { return s->cp[i] == '\r' || s->cp[i] == '\n'; }

/* Case folding for (?i:...) on the contraction letters: ASCII, plus U+017F (long s), which
 * Unicode folds to 's' and Oniguruma therefore matches. */
static uint32_t fold(uint32_t c, bool ci) {
    if (!ci) return c;
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c == 0x17F) return 's';
    return c;
}

/* 's|'t|'re|'ve|'m|'ll|'d  -> end, or i when no match */
static size_t m_contraction(const span *s, size_t i, bool ci) {
    if (s->cp[i] != '\'' || i + 1 >= s->n) return i;
    uint32_t a = fold(s->cp[i + 1], ci);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= s->n) return i;
    uint32_t b = fold(s->cp[i + 2], ci);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
}

static size_t run(const span *s, size_t i, bool (*pred)(const span *, size_t)) {
    while (i < s->n && pred(s, i)) i++;
    return i;
}

/* ` ?X+` for a class X that excludes the space: end, or i when no match */
static size_t m_space_opt_run(const span *s, size_t i, bool (*pred)(const span *, size_t)) {
    size_t j = i;
    if (s->cp[j] == ' ' && j + 1 < s->n && pred(s, j + 1)) j++;
    if (!pred(s, j)) return i;
    return run(s, j, pred);
}

/* \s+(?!\S)|\s+ at a whitespace code point: the whole run when it ends the span, else the
 * run minus its last code point (the lookahead backtracks), else (a run of one) that one. */
static size_t m_ws_tail(const span *s, size_t i) {
    size_t k = run(s, i, is_WS);
    if (k == s->n) return k;
    return k - i >= 2 ? k - 1 : k;
}

/* GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t m_gpt2(const span *s, size_t i) {
    size_t e;
    if ((e = m_contraction(s, i, false)) > i) return e;
    if ((e = m_space_opt_run(s, i, is_L)) > i) return e;
    if ((e = m_space_opt_run(s, i, is_N)) > i) return e;
    if ((e = m_space_opt_run(s, i, is_other)) > i) return e;
    if (is_WS(s, i)) return m_ws_tail(s, i);
    return i + 1;   /* unreachable: every code point is L, N, WS or other */
}

/* llama3 (max_digits 3) and qwen2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t m_llama3(const span *s, size_t i, size_t max_digits) {
    size_t e;
    if ((e = m_contraction(s, i, true)) > i) return e;
    if (!is_crlf(s, i) && !is_L(s, i) && !is_N(s, i) && i + 1 < s->n && is_L(s, i + 1)) return run(s, i + 1, is_L);
    if (is_L(s, i)) return run(s, i, is_L);
    if (is_N(s, i)) {
        e = i;
        while (e < s->n && e - i < max_digits && is_N(s, e)) e++;
        return e;
    }
    if ((e = m_space_opt_run(s, i, is_other)) > i) return run(s, e, is_crlf);
    if (is_WS(s, i)) {
        /* \s*[\r\n]+: \s* backtracks from the end of the run to its last CR/LF */
        size_t k = run(s, i, is_WS), last = k;
        for (size_t j = i; j < k; j++)
            if (is_crlf(s, j)) last = j;
        if (last < k) return last + 1;
        return m_ws_tail(s, i);
    }
    return i + 1;
}

size_t pretok_split(mi_pretok kind, const uint32_t *cps, size_t n, size_t *ends) {
    uint8_t small[256];
    uint8_t *fl = n <= sizeof small ? small : malloc(n);
    if (!fl) return 0;
    for (size_t i = 0; i < n; i++) fl[i] = uc_flags(cps[i]);
    size_t np = 0, i = 0;
    while (i < n) {
        size_t e;
        if (kind == MI_PRETOK_SMOLLM) {
            /* stage 1 isolates every \p{N}; stage 2 runs the GPT-2 regex on each gap alone,
             * so the gap's end is the end of its string for the lookahead */
            if (fl[i] & MI_UC_N) {
                e = i + 1;
            } else {
                size_t gap_end = i;
                while (gap_end < n && !(fl[gap_end] & MI_UC_N)) gap_end++;
                span s = {cps, fl, gap_end};
                e = m_gpt2(&s, i);
            }
        } else {
            span s = {cps, fl, n};
            if (kind == MI_PRETOK_LLAMA3) e = m_llama3(&s, i, 3);
            else if (kind == MI_PRETOK_QWEN2) e = m_llama3(&s, i, 1);
            else e = m_gpt2(&s, i);
        }
        ends[np++] = e;
        i = e;
    }
    if (fl != small) free(fl);
    return np;
}

const char *tok_pretok_name(mi_pretok kind) {
    switch (kind) {
    case MI_PRETOK_GPT2: return "gpt2";
    case MI_PRETOK_LLAMA3: return "llama3";
    case MI_PRETOK_QWEN2: return "qwen2";
    case MI_PRETOK_SMOLLM: return "smollm";
    }
    return "?";
}

/* Names as llama.cpp's converter writes them, grouped by the regex they use. */
bool pretok_from_name(const char *name, size_t len, mi_pretok *out, bool *ignore_merges) {
    static const struct { const char *name; mi_pretok kind; bool ignore_merges; } names[] = {
        {"gpt2", MI_PRETOK_GPT2, false},       {"gpt-2", MI_PRETOK_GPT2, false},
        {"phi-2", MI_PRETOK_GPT2, false},      {"mpt", MI_PRETOK_GPT2, false},
        {"olmo", MI_PRETOK_GPT2, false},       {"jais", MI_PRETOK_GPT2, false},
        {"llama3", MI_PRETOK_LLAMA3, true},    {"llama-v3", MI_PRETOK_LLAMA3, true},
        {"llama-bpe", MI_PRETOK_LLAMA3, true}, {"falcon3", MI_PRETOK_LLAMA3, true},
        {"qwen2", MI_PRETOK_QWEN2, false},     {"deepseek-r1-qwen", MI_PRETOK_QWEN2, false},
        {"stablelm2", MI_PRETOK_QWEN2, false},
        {"smollm", MI_PRETOK_SMOLLM, false},   {"starcoder", MI_PRETOK_SMOLLM, false},
        {"refact", MI_PRETOK_SMOLLM, false},   {"command-r", MI_PRETOK_SMOLLM, false},
        {"codeshell", MI_PRETOK_SMOLLM, false}, {"exaone", MI_PRETOK_SMOLLM, false},
        {"minerva-7b", MI_PRETOK_SMOLLM, false},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i].name) == len && !memcmp(names[i].name, name, len)) {
            *out = names[i].kind;
            *ignore_merges = names[i].ignore_merges;
            return true;
        }
    }
    return false;
}
