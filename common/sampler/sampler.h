/* Token sampling over a logits row: greedy, temperature, top-k, top-p, min-p, with a
 * seeded PRNG. The filters are pure functions over arrays (tested on their own); the
 * mi_sampler object only adds the RNG state and a scratch buffer. */
#ifndef MI_SAMPLER_H
#define MI_SAMPLER_H
#include <stdint.h>
#include "../core/mi_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Order of application: logits / temp, top-k, softmax, top-p, min-p, renormalise, draw.
 * temp <= 0 is greedy (the other fields are then ignored). */
typedef struct {
    float temp;       /* <= 0: greedy (argmax) */
    int top_k;        /* <= 0: off */
    float top_p;      /* >= 1: off. Keep the smallest most-probable set with mass >= top_p */
    float min_p;      /* <= 0: off. Drop tokens with p < min_p * p_max */
    uint64_t seed;
} mi_sampler_params;

typedef struct { int32_t id; float v; } mi_cand;   /* v: logit, then probability */

typedef struct {
    mi_sampler_params p;
    uint64_t rng;
    mi_cand *cand;    /* [n_vocab] scratch */
    int64_t n_vocab;
} mi_sampler;

/* temp 0 (greedy), top_k 40, top_p 0.95, min_p 0.05, seed 1234 */
void mi_sampler_params_default(mi_sampler_params *p);
mi_status mi_sampler_init(mi_sampler *s, const mi_sampler_params *p, int64_t n_vocab);
void mi_sampler_free(mi_sampler *s);
/* Draw the next token from logits [n_vocab]. */
int32_t mi_sampler_sample(mi_sampler *s, const float *logits);
/* The same draw from the row's top candidates computed elsewhere (MI_OP_TOPK, mi_session_top),
 * in their packed layout: values at top[0 .. K), ids (exact as floats) at top[K .. 2K), as
 * mi_sample_top_k_pack leaves them for 1 / temp (temp > 0); the first k = its top_k <= K are
 * used. The same token and RNG step as mi_sampler_sample on the whole row. */
int32_t mi_sampler_sample_top(mi_sampler *s, const float *top, int64_t K);

/* ---- pure pieces ---- */
/* Index of the largest logit (first one on ties; NaN never wins). */
int32_t mi_sample_greedy(const float *logits, int64_t n);
/* The filtered distribution: writes kept candidates into cand (capacity n), sorted by
 * probability descending (ties: lower id first), probabilities summing to 1; returns
 * how many were kept (>= 1). p->temp must be > 0. */
int64_t mi_sample_dist(const mi_sampler_params *p, const float *logits, int64_t n, mi_cand *cand);
/* mi_sample_dist's two halves. mi_sample_top_k: the candidates logits[i] * inv_t (NaN as -inf),
 * the top_k best (all n when top_k <= 0 or >= n), sorted larger first, then lower id; returns
 * how many. mi_sample_filter: softmax, top-p, min-p and renormalise over them; returns how many
 * were kept. A device can run the first half where the logits are (MI_OP_TOPK). */
int64_t mi_sample_top_k(const float *logits, int64_t n, float inv_t, int64_t top_k, mi_cand *cand);
/* mi_sample_top_k's k < n candidates in the packed layout: out[0 .. k) their values, out[k .. 2k)
 * their ids as floats (exact: n <= 2^24); cand: scratch of k. What MI_OP_TOPK computes. */
void mi_sample_top_k_pack(const float *logits, int64_t n, float inv_t, int64_t k, mi_cand *cand, float *out);
int64_t mi_sample_filter(const mi_sampler_params *p, mi_cand *cand, int64_t m);
/* Inverse-CDF pick from a distribution (cand[0..n-1] probabilities), u in [0, 1). */
int32_t mi_sample_pick(const mi_cand *cand, int64_t n, float u);
/* splitmix64 step and a uniform float in [0, 1) with 24 random bits. */
uint64_t mi_rng_next(uint64_t *state);
float mi_rng_uniform(uint64_t *state);

#ifdef __cplusplus
}
#endif
#endif
