/* Sampler tests: each filter checked against a brute-force computation written here
 * (softmax in double, rank counting), and the seeded draw against the probabilities. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include "common/sampler/sampler.h"

static void fill_logits(float *x, int n, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < n; i++) x[i] = (mi_rng_uniform(&st) - 0.5f) * 8.0f;
}

/* reference softmax of logits/temp in double */
static void ref_softmax(const float *x, int n, double temp, double *p) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, x[i] / temp);
    for (int i = 0; i < n; i++) s += (p[i] = exp(x[i] / temp - mx));
    for (int i = 0; i < n; i++) p[i] /= s;
}

static int rank_of(const float *x, int n, int id) { /* how many rank strictly before id */
    int r = 0;
    for (int i = 0; i < n; i++) r += x[i] > x[id] || (x[i] == x[id] && i < id);
    return r;
}

Test(sampler, greedy_matches_bruteforce) {
    float x[1000];
    for (int t = 0; t < 20; t++) {
        fill_logits(x, 1000, 100 + t);
        int best = 0;
        for (int i = 1; i < 1000; i++) if (x[i] > x[best]) best = i;
        cr_assert_eq(mi_sample_greedy(x, 1000), best, "trial %d: got %d want %d", t, mi_sample_greedy(x, 1000), best);
    }
    float y[4] = {NAN, 1.0f, 3.0f, 3.0f};
    cr_assert_eq(mi_sample_greedy(y, 4), 2, "NaN must not win; ties go to the first");
}

Test(sampler, temperature_distribution) {
    enum { N = 300 };
    float x[N];
    double p[N];
    mi_cand c[N];
    fill_logits(x, N, 7);
    float temps[3] = {0.5f, 1.0f, 1.7f};
    for (int t = 0; t < 3; t++) {
        mi_sampler_params sp = {.temp = temps[t], .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
        int64_t m = mi_sample_dist(&sp, x, N, c);
        cr_assert_eq(m, N);
        ref_softmax(x, N, temps[t], p);
        for (int i = 0; i < m; i++)
            cr_assert(fabs(c[i].v - p[c[i].id]) < 1e-6 + 1e-5 * p[c[i].id], "temp %g id %d: got %g want %g",
                      (double)temps[t], c[i].id, (double)c[i].v, p[c[i].id]);
    }
}

Test(sampler, top_k_keeps_k_largest) {
    enum { N = 5000 };
    float *x = malloc(N * sizeof *x);
    mi_cand *c = malloc(N * sizeof *c);
    fill_logits(x, N, 11);
    int ks[4] = {1, 5, 40, 777};
    for (int t = 0; t < 4; t++) {
        mi_sampler_params sp = {.temp = 1.0f, .top_k = ks[t], .top_p = 1.0f, .min_p = 0.0f};
        int64_t m = mi_sample_dist(&sp, x, N, c);
        cr_assert_eq(m, ks[t], "k=%d kept %lld", ks[t], (long long)m);
        for (int i = 0; i < m; i++) {
            cr_assert_lt(rank_of(x, N, c[i].id), ks[t], "k=%d: id %d is not among the k largest", ks[t], c[i].id);
            if (i) cr_assert(c[i - 1].v >= c[i].v, "not sorted at %d", i);
        }
    }
    free(x);
    free(c);
}

Test(sampler, top_p_minimal_set) {
    enum { N = 2000 };
    float *x = malloc(N * sizeof *x);
    double *p = malloc(N * sizeof *p);
    mi_cand *c = malloc(N * sizeof *c);
    fill_logits(x, N, 13);
    ref_softmax(x, N, 1.0, p);
    float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int t = 0; t < 3; t++) {
        mi_sampler_params sp = {.temp = 1.0f, .top_k = 0, .top_p = ps[t], .min_p = 0.0f};
        int64_t m = mi_sample_dist(&sp, x, N, c);
        double mass = 0, last = 0;
        for (int i = 0; i < m; i++) {
            cr_assert_eq(rank_of(x, N, c[i].id), i, "top-p set is not a prefix of the ranking");
            mass += p[c[i].id];
            last = p[c[i].id];
        }
        cr_assert(mass >= ps[t] - 1e-6, "p=%g: kept mass %g", (double)ps[t], mass);
        cr_assert(mass - last < ps[t] + 1e-6, "p=%g: set not minimal (mass without last %g)", (double)ps[t], mass - last);
    }
    free(x);
    free(p);
    free(c);
}

Test(sampler, min_p_threshold) {
    enum { N = 2000 };
    float *x = malloc(N * sizeof *x);
    double *p = malloc(N * sizeof *p);
    mi_cand *c = malloc(N * sizeof *c);
    fill_logits(x, N, 17);
    ref_softmax(x, N, 1.0, p);
    double pmax = 0;
    for (int i = 0; i < N; i++) pmax = fmax(pmax, p[i]);
    mi_sampler_params sp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.2f};
    int64_t m = mi_sample_dist(&sp, x, N, c);
    int want = 0;
    for (int i = 0; i < N; i++) want += p[i] >= 0.2 * pmax * (1 + 1e-6);
    int near = 0;
    for (int i = 0; i < N; i++) near += fabs(p[i] - 0.2 * pmax) <= 0.2 * pmax * 1e-6;
    cr_assert(m >= want && m <= want + near, "kept %lld, want %d", (long long)m, want);
    for (int i = 0; i < m; i++) cr_assert(p[c[i].id] >= 0.2 * pmax * (1 - 1e-5), "id %d below min-p", c[i].id);
    free(x);
    free(p);
    free(c);
}

Test(sampler, seeded_and_top_k1_is_greedy) {
    enum { N = 1000 };
    float x[N];
    fill_logits(x, N, 23);
    mi_sampler a, b, g;
    mi_sampler_params sp = {.temp = 0.9f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
    cr_assert_eq(mi_sampler_init(&a, &sp, N), MI_OK);
    cr_assert_eq(mi_sampler_init(&b, &sp, N), MI_OK);
    sp.top_k = 1;
    cr_assert_eq(mi_sampler_init(&g, &sp, N), MI_OK);
    int diff = 0;
    for (int i = 0; i < 50; i++) {
        fill_logits(x, N, 1000 + i);
        int32_t ta = mi_sampler_sample(&a, x), tb = mi_sampler_sample(&b, x);
        cr_assert_eq(ta, tb, "same seed, step %d: %d vs %d", i, ta, tb);
        cr_assert_eq(mi_sampler_sample(&g, x), mi_sample_greedy(x, N));
        diff += ta != mi_sample_greedy(x, N);
    }
    cr_assert_gt(diff, 0, "temperature sampling never left the argmax: it is not sampling");
    mi_sampler_free(&a);
    mi_sampler_free(&b);
    mi_sampler_free(&g);
}

Test(sampler, draw_frequencies_match_probabilities) {
    enum { N = 8, DRAWS = 40000 };
    float x[N] = {0.1f, 1.5f, -0.7f, 2.0f, 0.0f, 1.0f, -2.0f, 0.5f};
    double p[N];
    ref_softmax(x, N, 1.3, p);
    mi_sampler s;
    mi_sampler_params sp = {.temp = 1.3f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 99};
    cr_assert_eq(mi_sampler_init(&s, &sp, N), MI_OK);
    int cnt[N] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = mi_sampler_sample(&s, x);
        cr_assert(t >= 0 && t < N);
        cnt[t]++;
    }
    for (int i = 0; i < N; i++) {
        double sd = sqrt(DRAWS * p[i] * (1 - p[i]));
        cr_assert(fabs(cnt[i] - DRAWS * p[i]) < 5 * sd + 1, "id %d: %d draws, expected %.1f +- %.1f", i, cnt[i], DRAWS * p[i], sd);
    }
    mi_sampler_free(&s);
}
