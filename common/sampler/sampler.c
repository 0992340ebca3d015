/* Sampling filters and the seeded draw (see sampler.h for the order of application).
 * Sorting is only as wide as needed: with top-k a size-k heap, otherwise a full sort. */
#include "sampler.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void mi_sampler_params_default(mi_sampler_params *p) {
    p->temp = 0.0f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->seed = 1234;
}

mi_status mi_sampler_init(mi_sampler *s, const mi_sampler_params *p, int64_t n_vocab) {
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0) return mi_err(MI_ERR_INVALID, "sampler: empty vocabulary");
    if (p->temp != p->temp || p->top_p != p->top_p || p->min_p != p->min_p)
        return mi_err(MI_ERR_INVALID, "sampler: NaN parameter");
    if (p->min_p > 1.0f) return mi_err(MI_ERR_INVALID, "sampler: min-p %g is above 1", (double)p->min_p);
    s->p = *p;
    s->rng = p->seed;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s->cand) return mi_err(MI_ERR_NOMEM, "sampler: out of memory");
    return MI_OK;
}

void mi_sampler_free(mi_sampler *s) {
    free(s->cand);
    s->cand = NULL;
}

uint64_t mi_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float mi_rng_uniform(uint64_t *state) {
    return (float)(mi_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

int32_t mi_sample_greedy(const float *logits, int64_t n) {
    int64_t best = 0;
    float bv = -INFINITY;
    bool any = false;
    for (int64_t i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v) continue;
        if (!any || v > bv) {
            bv = v;
            best = i;
            any = true;
        }
    }
    return (int32_t)best;
}

/* "a ranks before b": larger value, then lower id (total order: deterministic) */
static inline bool before(const mi_cand *a, const mi_cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb) {
    const mi_cand *a = pa, *b = pb;
    if (before(a, b)) return -1;
    if (before(b, a)) return 1;
    return 0;
}

/* min-heap on rank (root = worst of the kept k) */
static void heap_down(mi_cand *h, int64_t k, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && before(&h[w], &h[l])) w = l;
        if (r < k && before(&h[w], &h[r])) w = r;
        if (w == i) return;
        mi_cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

int64_t mi_sample_top_k(const float *logits, int64_t n, float inv_t, int64_t top_k, mi_cand *cand) {
    int64_t k = (top_k > 0 && top_k < n) ? top_k : n;
    int64_t m = 0;
    if (k < n) {
        for (int64_t i = 0; i < n; i++) {
            float v = logits[i];
            if (v != v) v = -INFINITY;
            mi_cand c = {(int32_t)i, v * inv_t};
            if (m < k) {
                cand[m++] = c;
                if (m == k)
                    for (int64_t j = k / 2 - 1; j >= 0; j--) heap_down(cand, k, j);
            } else if (before(&c, &cand[0])) {
                cand[0] = c;
                heap_down(cand, k, 0);
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float v = logits[i];
            cand[m].id = (int32_t)i;
            cand[m].v = (v != v ? -INFINITY : v * inv_t);
            m++;
        }
    }
    qsort(cand, (size_t)m, sizeof *cand, cmp_cand);
    return m;
}

int64_t mi_sample_filter(const mi_sampler_params *p, mi_cand *cand, int64_t m) {
    /* softmax over the kept set, max-subtracted; double sums for 150k-entry vocabularies */
    float mx = cand[0].v;
    if (mx == -INFINITY) {   /* every logit -inf/NaN: the first id is all we can say */
        cand[0].v = 1.0f;
        return 1;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < m; i++) {
        float e = expf(cand[i].v - mx);
        cand[i].v = e;
        sum += e;
    }
    for (int64_t i = 0; i < m; i++) cand[i].v = (float)(cand[i].v / sum);
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        int64_t keep = m;
        for (int64_t i = 0; i < m; i++) {
            cum += cand[i].v;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    if (p->min_p > 0.0f) {
        float thr = p->min_p * cand[0].v;
        int64_t keep = 1;
        while (keep < m && cand[keep].v >= thr) keep++;
        m = keep;
    }
    sum = 0.0;
    for (int64_t i = 0; i < m; i++) sum += cand[i].v;
    for (int64_t i = 0; i < m; i++) cand[i].v = (float)(cand[i].v / sum);
    return m;
}

int64_t mi_sample_dist(const mi_sampler_params *p, const float *logits, int64_t n, mi_cand *cand) {
    return mi_sample_filter(p, cand, mi_sample_top_k(logits, n, 1.0f / p->temp, p->top_k, cand));
}

int32_t mi_sample_pick(const mi_cand *cand, int64_t n, float u) {
    double cum = 0.0, target = (double)u;
    for (int64_t i = 0; i < n; i++) {
        cum += cand[i].v;
        if (target < cum) return cand[i].id;
    }
    return cand[n - 1].id;   /* rounding left u just past the total */
}

int32_t mi_sampler_sample(mi_sampler *s, const float *logits) {
    if (!(s->p.temp > 0.0f)) return mi_sample_greedy(logits, s->n_vocab);
    int64_t m = mi_sample_dist(&s->p, logits, s->n_vocab, s->cand);
    return mi_sample_pick(s->cand, m, mi_rng_uniform(&s->rng));
}

void mi_sample_top_k_pack(const float *logits, int64_t n, float inv_t, int64_t k, mi_cand *cand, float *out) {
    const int64_t m = mi_sample_top_k(logits, n, inv_t, k, cand);
    for (int64_t i = 0; i < m; i++) {
        out[i] = cand[i].v;
        out[k + i] = (float)cand[i].id;
    }
}

int32_t mi_sampler_sample_top(mi_sampler *s, const float *top, int64_t K) {
    const int64_t k = s->p.top_k;
    for (int64_t i = 0; i < k; i++) s->cand[i] = (mi_cand){(int32_t)top[K + i], top[i]};
    int64_t m = mi_sample_filter(&s->p, s->cand, k);
    return mi_sample_pick(s->cand, m, mi_rng_uniform(&s->rng));
}
