/* Internals of the tokenizer shared by its .c files and its tests: the generated Unicode
 * class table (unicode_tables.c), UTF-8 decoding, and the pre-tokenizer splitters that
 * stand in for each tokenizer.ggml.pre regex (pretok.c). Not part of the public API. */
#ifndef MI_TOK_INTERNAL_H
#define MI_TOK_INTERNAL_H
#include <stdint.h>
#include <stddef.h>
#include "common/tokenizer/tokenizer.h"

enum { MI_UC_L = 1, MI_UC_N = 2, MI_UC_WS = 4 };

typedef struct { uint32_t lo, hi; uint8_t flags; } mi_uc_range;   /* [lo, hi] inclusive */
extern const mi_uc_range mi_uc_ranges[];
extern const size_t mi_uc_n_ranges;
extern const char mi_uc_unicode_version[];

/* Class flags (MI_UC_*) of a code point; 0 for anything else (punctuation, symbols, marks,
 * controls other than White_Space, unassigned, and the pseudo code points of bad bytes). */
uint8_t uc_flags(uint32_t cp);

/* Decode one UTF-8 sequence at s[0..len). Returns its byte length (1..4) and sets *cp.
 * A malformed or truncated sequence consumes one byte and yields 0x110000 + byte, a
 * pseudo code point of class 0, so every input byte survives the byte-level encoding. */
size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp);
/* Length a lead byte announces (1..4), 0 for a continuation or invalid lead byte. */
int utf8_lead_len(unsigned char c);

/* Split cps[0..n) (code points) into pre-tokens as the regex of `kind` does with HF
 * tokenizers' Split(behavior=Isolated). Writes each piece's end index (exclusive, in
 * code points) to ends[] (capacity n: every piece is non-empty) and returns the count. */
size_t pretok_split(mi_pretok kind, const uint32_t *cps, size_t n, size_t *ends);
/* tokenizer.ggml.pre value -> kind; false for names we do not implement. */
bool pretok_from_name(const char *name, size_t len, mi_pretok *out, bool *ignore_merges);

/* tok_encode with control tokens recognised only inside the byte ranges
 * [ctrl[2k], ctrl[2k+1]) (sorted, disjoint), each match wholly inside one range; user-defined
 * tokens are matched everywhere, as with tok_encode. The text between matches is ordinary
 * text whichever ranges it spans, so it splits and merges exactly as in tok_encode. */
mi_status tok_encode_ranges(const mi_tokenizer *t, const char *text, size_t len, const size_t *ctrl, int n_ctrl,
                            int32_t **out, int64_t *n_out);

#endif
