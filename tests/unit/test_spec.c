/* test_spec.c - speculative decoding: the n-gram drafter, the verification
 * rule (greedy output equals plain greedy decoding; sampled output has exactly
 * the target's distribution, and is even the same sample per seed), adaptive
 * depth, the model drafter with its rolled-back paged KV, the vocabulary check,
 * and the draft actor over inproc sockets.  Everything runs on small synthetic
 * models written by test_synth_model (random F32 weights), so no download is
 * needed. */
#include "actor_draft.h"
#include "actor_registry.h"
#include "model.h"
#include "model_sampler.h"
#include "model_spec.h"
#include "serve_drafter.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char DIR_[256];
static char TARGET[300], DRAFT[300], OTHER_VOCAB[300], BIG_VOCAB[300];
static model_t *M; /* the target */
static int NV;     /* its vocabulary */

/* ------------------------------------------------------------------ n-gram */

/* The definition, by brute force: longest g first, then the most recent end j. */
static int ngram_ref(const int32_t *t, int n, int gmin, int gmax, int k, int32_t *out) {
    for (int g = gmax < n - 1 ? gmax : n - 1; g >= gmin; g--)
        for (int j = n - 1; j >= g; j--) {
            if (memcmp(t + j - g, t + n - g, (size_t)g * sizeof *t))
                continue;
            for (int i = 0; i < k; i++)
                out[i] = j + i < n ? t[j + i] : out[j + i - n];
            return k;
        }
    return 0;
}

START_TEST(ngram_cases) {
    int32_t out[16];
    /* no earlier occurrence of the last token */
    const int32_t a[] = {1, 2, 3, 4};
    ck_assert_int_eq(model_spec_ngram(a, 4, 1, 4, 3, out), 0);
    /* "1 2" occurred at the start, followed by 3 4 1 */
    const int32_t b[] = {1, 2, 3, 4, 1, 2};
    ck_assert_int_eq(model_spec_ngram(b, 6, 1, 4, 3, out), 3);
    ck_assert_int_eq(out[0], 3);
    ck_assert_int_eq(out[1], 4);
    ck_assert_int_eq(out[2], 1);
    /* the longest suffix wins over a more recent shorter one: "1 2 3" -> 9, not "2 3" -> 8 */
    const int32_t c[] = {5, 1, 2, 3, 9, 7, 2, 3, 8, 1, 2, 3};
    ck_assert_int_eq(model_spec_ngram(c, 12, 1, 4, 1, out), 1);
    ck_assert_int_eq(out[0], 9);
    /* equal lengths: the most recent */
    const int32_t d[] = {1, 2, 7, 1, 2, 8, 1, 2};
    ck_assert_int_eq(model_spec_ngram(d, 8, 1, 4, 1, out), 1);
    ck_assert_int_eq(out[0], 8);
    /* a repeating pattern keeps repeating past the end of the history */
    const int32_t e[] = {1, 2, 3, 1, 2, 3, 1};
    ck_assert_int_eq(model_spec_ngram(e, 7, 1, 4, 5, out), 5);
    const int32_t e_want[] = {2, 3, 1, 2, 3};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(out[i], e_want[i]);
    /* min_ngram: only a unigram recurs */
    const int32_t f[] = {1, 2, 3, 4, 5, 9, 5};
    ck_assert_int_eq(model_spec_ngram(f, 7, 2, 4, 2, out), 0);
    ck_assert_int_eq(model_spec_ngram(f, 7, 1, 4, 2, out), 2);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[1], 5);
    /* bad arguments */
    ck_assert_int_eq(model_spec_ngram(f, 1, 1, 4, 2, out), 0);
    ck_assert_int_eq(model_spec_ngram(f, 7, 3, 2, 2, out), 0);
    ck_assert_int_eq(model_spec_ngram(f, 7, 1, 4, 0, out), 0);

    /* against the brute-force definition on random histories over small alphabets */
    uint64_t rs = 7;
    int32_t t[200], o1[16], o2[16];
    for (int it = 0; it < 3000; it++) {
        int n = 2 + (int)(test_rand_u64(&rs) % 120), alpha = 2 + (int)(test_rand_u64(&rs) % 6);
        int gmin = 1 + (int)(test_rand_u64(&rs) % 3), gmax = gmin + (int)(test_rand_u64(&rs) % 4);
        int k = 1 + (int)(test_rand_u64(&rs) % 16);
        for (int i = 0; i < n; i++)
            t[i] = (int32_t)(test_rand_u64(&rs) % (uint64_t)alpha);
        int r1 = model_spec_ngram(t, n, gmin, gmax, k, o1);
        int r2 = ngram_ref(t, n, gmin, gmax, k, o2);
        ck_assert_int_eq(r1, r2);
        for (int i = 0; i < r1; i++)
            ck_assert_int_eq(o1[i], o2[i]);
    }
}
END_TEST

/* An 8k-token history (a long chat): every lookup matches, and gives what the
 * brute-force definition gives.  Its speed is not a unit test's business (a shared
 * machine makes any bound flaky). */
START_TEST(ngram_long_history) {
    enum { N = 8192 };
    int32_t *t = malloc(N * sizeof *t), out[8], want[8];
    ck_assert_ptr_nonnull(t);
    uint64_t rs = 3;
    for (int i = 0; i < N; i++)
        t[i] = (int32_t)(test_rand_u64(&rs) % 50); /* many unigram hits, few long ones */
    for (int it = 0; it < 200; it++) {
        t[N - 1] = it % 50;
        int got = model_spec_ngram(t, N, 1, 4, 8, out);
        ck_assert_int_eq(got, 8);
        ck_assert_int_eq(ngram_ref(t, N, 1, 4, 8, want), 8);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(out[i] == want[i], "lookup %d: token %d is %d, want %d", it, i, out[i],
                          want[i]);
    }
    free(t);
}
END_TEST

/* ------------------------------------------------------------------ verification rule */

/* Plain decoding over the same rows: sample row i with history + draft[0..i),
 * stop after the first token that differs from the draft. */
static int plain_over_rows(model_sampler_t *s, const model_sampler_params_t *sp, const float *rows,
                           int nv, const int32_t *draft, int k, const int32_t *hist, int n_hist,
                           int32_t *out) {
    int32_t h[512];
    memcpy(h, hist, (size_t)n_hist * sizeof *h);
    float *row = malloc((size_t)nv * sizeof *row);
    int e = 0;
    for (int i = 0; i <= k; i++) {
        memcpy(row, rows + (size_t)i * nv, (size_t)nv * sizeof *row);
        int32_t t = model_sampler_sample(s, sp, row, h, n_hist + i, n_hist + i);
        out[e++] = t;
        if (i == k || t != draft[i])
            break;
        h[n_hist + i] = t;
    }
    free(row);
    return e;
}

/* On random logits and every sampler setting: verify emits exactly what plain
 * sequential sampling emits (the acceptance test shares the sampler's seeded
 * uniform), and greedy verify accepts the drafts that equal the argmax. */
START_TEST(verify_matches_plain_sampling) {
    enum { V = 50, K = 8 };
    model_sampler_t *s = model_sampler_new(V);
    ck_assert_int_eq(model_sampler_n_vocab(s), V);
    model_sampler_params_t settings[6];
    for (int i = 0; i < 6; i++) {
        settings[i] = model_sampler_defaults();
        settings[i].top_k = 0;
        settings[i].top_p = 1;
        settings[i].min_p = 0;
        settings[i].temperature = 1;
    }
    settings[0].temperature = 0;       /* greedy */
    settings[1].top_k = 5;             /* top-k */
    settings[2].top_p = 0.8f;          /* nucleus */
    settings[3].min_p = 0.1f;          /* min-p */
    settings[4].repeat_penalty = 1.8f; /* the penalty sees the accepted drafts */
    settings[4].repeat_last_n = 6;
    settings[5] = model_sampler_defaults();
    settings[5].repeat_penalty = 1.3f;
    uint64_t rs = 11;
    float rows[(K + 1) * V], work[(K + 1) * V];
    int32_t hist[64], draft[K], o1[K + 1], o2[K + 1];
    int accepted = 0, total = 0;
    for (int it = 0; it < 3000; it++) {
        model_sampler_params_t sp = settings[it % 6];
        sp.seed = (uint64_t)it * 7919;
        int k = (int)(test_rand_u64(&rs) % (K + 1)), nh = 1 + (int)(test_rand_u64(&rs) % 20);
        for (int i = 0; i < (K + 1) * V; i++)
            rows[i] = test_rand_f32(&rs, -3, 3);
        for (int i = 0; i < nh; i++)
            hist[i] = (int32_t)(test_rand_u64(&rs) % 8); /* penalised tokens near the top */
        /* drafts that are right about half the time: the plain choice, or noise */
        for (int i = 0; i < k; i++) {
            draft[i] = (int32_t)(test_rand_u64(&rs) % V);
            if (test_rand_u64(&rs) % 2) {
                /* make it the argmax of its row, a likely accept */
                rows[i * V + draft[i]] = 6;
            }
        }
        memcpy(work, rows, sizeof rows);
        int e1 = model_spec_verify(s, &sp, work, draft, k, hist, nh, nh, o1);
        int e2 = plain_over_rows(s, &sp, rows, V, draft, k, hist, nh, o2);
        ck_assert_int_eq(e1, e2);
        ck_assert(e1 >= 1 && e1 <= k + 1);
        for (int i = 0; i < e1; i++)
            ck_assert_int_eq(o1[i], o2[i]);
        for (int i = 0; i + 1 < e1; i++)
            ck_assert_int_eq(o1[i], draft[i]);
        if (sp.temperature <= 0 && sp.repeat_penalty == 1.0f)
            for (int i = 0; i < e1; i++)
                ck_assert_int_eq(o1[i], model_argmax(rows + i * V, V));
        accepted += e1 - 1;
        total += k;
    }
    printf("verify vs plain: identical over 3000 cases (%d of %d drafts accepted)\n", accepted,
           total);
    ck_assert_int_eq(model_spec_verify(s, &settings[0], work, draft, -1, hist, 1, 1, o1), -EINVAL);
    ck_assert_int_eq(model_spec_verify(s, &settings[0], work, NULL, 2, hist, 1, 1, o1), -EINVAL);
    model_sampler_destroy(&s);
}
END_TEST

/* model_sampler_dist is the distribution model_sampler_sample draws from. */
START_TEST(dist_matches_sampler) {
    enum { V = 6 };
    model_sampler_t *s = model_sampler_new(V);
    model_sampler_params_t sp = model_sampler_defaults();
    sp.top_k = 4;
    sp.top_p = 0.97f;
    sp.min_p = 0.02f;
    sp.temperature = 0.9f;
    const float base[V] = {1.0f, 0.2f, -0.5f, 0.8f, -2.0f, 0.1f};
    float l[V], probs[V];
    int32_t ids[V];
    memcpy(l, base, sizeof l);
    int m = model_sampler_dist(s, &sp, l, NULL, 0, ids, probs);
    ck_assert(m >= 1 && m <= 4);
    double sum = 0, p_of[V] = {0};
    for (int i = 0; i < m; i++) {
        sum += probs[i];
        p_of[ids[i]] = probs[i];
        if (i)
            ck_assert(probs[i] <= probs[i - 1]);
    }
    ck_assert(fabs(sum - 1) < 1e-5);
    int cnt[V] = {0};
    const int N = 20000;
    for (int pos = 0; pos < N; pos++) {
        memcpy(l, base, sizeof l);
        cnt[model_sampler_sample(s, &sp, l, NULL, 0, pos)]++;
    }
    double chi = 0;
    for (int v = 0; v < V; v++) {
        if (p_of[v] == 0) {
            ck_assert_int_eq(cnt[v], 0);
            continue;
        }
        double e = N * p_of[v];
        chi += (cnt[v] - e) * (cnt[v] - e) / e;
    }
    /* df = m - 1 <= 3; the 1e-4 upper quantile of chi-square(3) is 21.1 */
    printf("model_sampler_dist: %d candidates, chi-square %.2f over %d draws\n", m, chi, N);
    ck_assert_msg(chi < 21.1, "chi-square %.2f", chi);
    sp.temperature = 0;
    memcpy(l, base, sizeof l);
    ck_assert_int_eq(model_sampler_dist(s, &sp, l, NULL, 0, ids, probs), 1);
    ck_assert_int_eq(ids[0], 0);
    ck_assert(probs[0] == 1.0f);
    model_sampler_destroy(&s);
}
END_TEST

/* ------------------------------------------------------------------ on the synthetic model */

/* A target "engine" the way a worker runs it: one sequence, paged KV with an
 * identity block table, positions below n-1 already in the KV. */
typedef struct {
    model_ctx_t *ctx;
    kern_kv_pool_t kv;
    int32_t blocks[64];
    float *logits; /* (256, NV) */
} eng_t;

static void eng_init(eng_t *g) {
    const model_config_t *cfg = model_config(M);
    kern_kv_shape_t shape = model_kv_shape(cfg, 16);
    ck_assert_int_eq(kern_kv_pool_init(&g->kv, &shape, KERN_F32, 64), 0);
    for (int i = 0; i < 64; i++)
        g->blocks[i] = 63 - i; /* any order works */
    g->ctx = model_ctx_new(M, 256, 1024, 1, NULL);
    ck_assert_ptr_nonnull(g->ctx);
    g->logits = malloc((size_t)256 * NV * sizeof(float)); /* (256, NV) */
}

static void eng_free(eng_t *g) {
    model_ctx_destroy(&g->ctx);
    kern_kv_pool_free(&g->kv);
    free(g->logits);
}

/* Run toks[0..n) at positions pos0.. ; logits of all of them when want_all,
 * else of none.  Returns rows written. */
static int eng_run(eng_t *g, const int32_t *toks, int n, int pos0, bool want_all) {
    int32_t pos[256], seq[256] = {0};
    bool want[256];
    ck_assert(n <= 256);
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        want[i] = want_all;
    }
    model_seq_view_t sv = {g->blocks, 64, NULL, 0, 0};
    model_batch_t b = {n, toks, pos, seq, want, 1, &sv, NULL};
    int got = model_ctx_forward(g->ctx, &b, &g->kv, g->logits);
    ck_assert_int_eq(got, want_all ? n : 0);
    return got;
}

typedef enum { DRAFT_NONE, DRAFT_NGRAM, DRAFT_MODEL, DRAFT_WRONG } draft_kind_t;

/* Generate n_gen tokens after prompt: plain (k = 0) or speculative with drafts
 * of kind from the given source; returns tokens in out and counts drafts
 * proposed / accepted. */
static void generate(const int32_t *prompt, int n_prompt, int n_gen,
                     const model_sampler_params_t *sp, draft_kind_t kind, int k_fixed,
                     serve_drafter_t *drafter, int32_t *out, int *proposed, int *accepted) {
    eng_t g;
    eng_init(&g);
    model_sampler_t *s = model_sampler_new(NV);
    int32_t hist[1024];
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    int n = n_prompt;
    if (n > 1)
        eng_run(&g, hist, n - 1, 0, false);
    model_spec_adapt_t ad;
    model_spec_adapt_init(&ad, k_fixed, MODEL_SPEC_MAX_K);
    while (n - n_prompt < n_gen) {
        int32_t draft[MODEL_SPEC_MAX_K], emit[MODEL_SPEC_MAX_K + 1], batch[MODEL_SPEC_MAX_K + 1];
        int k = kind == DRAFT_NONE ? 0 : model_spec_adapt_next_k(&ad, 1);
        int left = n_gen - (n - n_prompt);
        if (k > left - 1)
            k = left - 1 > 0 ? left - 1 : 0;
        int nd = 0;
        if (k > 0 && kind == DRAFT_NGRAM)
            nd = model_spec_ngram(hist, n, 1, 4, k, draft);
        if (k > 0 && kind == DRAFT_MODEL) {
            serve_drafter_job_t j = {0, 42, hist, n, k, draft, 0, 0};
            ck_assert_int_eq(serve_drafter_propose(drafter, &j, 1), 0);
            nd = j.n_out;
        }
        if (k > 0 && kind == DRAFT_WRONG) {
            for (int i = 0; i < k; i++)
                draft[i] = (int32_t)((hist[n - 1] * 7 + i * 13 + 5) % NV);
            nd = k;
        }
        batch[0] = hist[n - 1];
        memcpy(batch + 1, draft, (size_t)nd * sizeof *batch);
        eng_run(&g, batch, nd + 1, n - 1, true);
        int e = model_spec_verify(s, sp, g.logits, draft, nd, hist, n, n, emit);
        ck_assert(e >= 1 && e <= nd + 1);
        model_spec_adapt_observe(&ad, nd, e - 1);
        *proposed += nd;
        *accepted += e - 1;
        for (int i = 0; i < e && n - n_prompt < n_gen; i++)
            hist[n++] = emit[i];
    }
    memcpy(out, hist + n_prompt, (size_t)n_gen * sizeof *out);
    if (drafter)
        serve_drafter_reset(drafter, 0, 42);
    model_sampler_destroy(&s);
    eng_free(&g);
}

static void random_prompt(uint64_t seed, int32_t *p, int n) {
    uint64_t rs = seed;
    for (int i = 0; i < n; i++)
        p[i] = 3 + (int32_t)(test_rand_u64(&rs) % (uint64_t)(NV - 3));
}

/* Greedy: speculative output equals plain greedy decoding, for n-gram drafts,
 * always-wrong drafts, and model drafts (the target itself as draft model:
 * every draft accepted; another model: some), at fixed k 1..16 and adaptive k. */
START_TEST(greedy_equals_plain) {
    model_sampler_params_t sp = model_sampler_defaults();
    sp.temperature = 0;
    char err[256];
    serve_drafter_config_t same = {
        .mode = SERVE_DRAFTER_MODEL, .draft_model = TARGET, .target_model = TARGET};
    serve_drafter_config_t other = same;
    other.draft_model = DRAFT;
    serve_drafter_t *d_same = serve_drafter_new(&same, err, sizeof err);
    ck_assert_msg(d_same != NULL, "%s", err);
    serve_drafter_t *d_other = serve_drafter_new(&other, err, sizeof err);
    ck_assert_msg(d_other != NULL, "%s", err);
    const int ks[] = {0, 1, 2, 4, 7, 16};
    int prop[4] = {0}, acc[4] = {0};
    for (int pi = 0; pi < 6; pi++) {
        int32_t prompt[40], plain[64], spec[64];
        int np = 3 + pi * 6;
        random_prompt(100 + pi, prompt, np);
        int dummy = 0;
        generate(prompt, np, 48, &sp, DRAFT_NONE, 0, NULL, plain, &dummy, &dummy);
        for (int ki = 0; ki < 6; ki++) {
            draft_kind_t kinds[] = {DRAFT_NGRAM, DRAFT_WRONG, DRAFT_MODEL, DRAFT_MODEL};
            for (int di = 0; di < 4; di++) {
                int p = 0, a = 0;
                generate(prompt, np, 48, &sp, kinds[di], ks[ki], di == 2 ? d_same : d_other, spec,
                         &p, &a);
                for (int i = 0; i < 48; i++)
                    ck_assert_msg(spec[i] == plain[i],
                                  "prompt %d, k %d, drafter %d: token %d is %d, plain %d", pi,
                                  ks[ki], di, i, spec[i], plain[i]);
                prop[di] += p;
                acc[di] += a;
                if (di == 2)
                    ck_assert_int_eq(a, p); /* the target drafting for itself */
            }
        }
    }
    printf("greedy == plain; accepted/proposed: ngram %d/%d, wrong %d/%d, self %d/%d, "
           "other model %d/%d\n",
           acc[0], prop[0], acc[1], prop[1], acc[2], prop[2], acc[3], prop[3]);
    ck_assert_int_gt(acc[0], 0);
    ck_assert_int_gt(prop[2], 100);
    serve_drafter_destroy(&d_same);
    serve_drafter_destroy(&d_other);
    ck_assert_ptr_null(d_same);
}
END_TEST

/* Sampling: with the batched verification pass the logits are bitwise those of
 * plain decoding (batch-invariant kernels), so the speculative output is the
 * same sample, seed for seed, as plain sampling - for every sampler setting. */
START_TEST(sampling_same_per_seed) {
    model_sampler_params_t sps[4];
    for (int i = 0; i < 4; i++) {
        sps[i] = model_sampler_defaults();
        sps[i].temperature = 1;
        sps[i].top_k = 0;
        sps[i].top_p = 1;
        sps[i].min_p = 0;
    }
    sps[1].top_k = 8;
    sps[2] = model_sampler_defaults(); /* T 0.8, top-k 40, top-p 0.95, min-p 0.05 */
    sps[3].repeat_penalty = 1.5f;
    sps[3].temperature = 0.7f;
    int prop = 0, acc = 0;
    for (int it = 0; it < 24; it++) {
        model_sampler_params_t sp = sps[it % 4];
        sp.seed = 1000 + (uint64_t)it;
        int32_t prompt[12], plain[40], spec[40];
        random_prompt(500 + it, prompt, 12);
        int dummy = 0;
        generate(prompt, 12, 40, &sp, DRAFT_NONE, 0, NULL, plain, &dummy, &dummy);
        generate(prompt, 12, 40, &sp, it % 2 ? DRAFT_NGRAM : DRAFT_WRONG, 1 + it % 6, NULL, spec,
                 &prop, &acc);
        for (int i = 0; i < 40; i++)
            ck_assert_msg(spec[i] == plain[i], "run %d: token %d is %d, plain %d", it, i, spec[i],
                          plain[i]);
    }
    printf("sampling: speculative == plain per seed (%d of %d drafts accepted)\n", acc, prop);
}
END_TEST

/* The upper 1e-4 quantile of chi-square(df), Wilson-Hilferty (within ~1% for
 * df >= 3; z = 3.7190 is the standard normal's 1e-4 upper quantile). */
static double chi2_crit_1e4(int df) {
    double h = 2.0 / (9.0 * df);
    double x = 1 - h + 3.7190 * sqrt(h);
    return df * x * x * x;
}

/* Chi-square of counts against probabilities (cells with expectation < 5
 * pooled into one); *df gets the degrees of freedom. */
static double chi2(const int *cnt, const double *p, int cells, int n, int *df) {
    double chi = 0, pe = 0;
    int pc = 0, used = 0;
    for (int c = 0; c < cells; c++) {
        double e = n * p[c];
        if (p[c] == 0) {
            ck_assert_msg(cnt[c] == 0, "cell %d has probability 0 but %d draws", c, cnt[c]);
            continue;
        }
        if (e < 5) {
            pe += e;
            pc += cnt[c];
            continue;
        }
        chi += (cnt[c] - e) * (cnt[c] - e) / e;
        used++;
    }
    if (pe > 0) {
        chi += (pc - pe) * (pc - pe) / pe;
        used++;
    }
    *df = used - 1;
    return chi;
}

/* Exact target distribution at one position (full vocabulary) from a row. */
static void exact_dist(model_sampler_t *s, const model_sampler_params_t *sp, const float *row,
                       const int32_t *hist, int nh, double *p) {
    float *l = malloc((size_t)NV * sizeof *l), *pr = malloc((size_t)NV * sizeof *pr);
    int32_t *ids = malloc((size_t)NV * sizeof *ids);
    memcpy(l, row, (size_t)NV * sizeof *l);
    int m = model_sampler_dist(s, sp, l, hist, nh, ids, pr);
    for (int v = 0; v < NV; v++)
        p[v] = 0;
    for (int i = 0; i < m; i++)
        p[ids[i]] = pr[i];
    free(l);
    free(pr);
    free(ids);
}

/* The statistical test.  Speculative sampling with deterministic drafts that
 * are sometimes right (draft 0 = the target's most likely token, draft 1 = the
 * most likely token after it) and sometimes impossible (draft 2 is outside
 * the top-k: always rejected), over N seeds; a rejection at the first position
 * is followed by a second verification step with a one-token draft.  The
 * tokens at positions 1 and 2 are compared with the exact target distribution
 * (computed from the model with model_sampler_dist): position 1 alone (df <=
 * 7) and the joint of positions 1 and 2 (df <= 63), each by Pearson's
 * chi-square at alpha = 1e-4, so a correct implementation fails one of the two
 * checks with probability about 2e-4.  The logits do not depend on the seed,
 * so they are computed once (one forward per possible first token) and the
 * N seeded verifications cost microseconds each. */
START_TEST(sampling_distribution_chi_square) {
    enum { NS = 20000, TOPK = 8, NP = 10 };
    model_sampler_params_t sp = model_sampler_defaults();
    sp.temperature = 1;
    sp.top_k = TOPK;
    sp.top_p = 1;
    sp.min_p = 0;
    model_sampler_t *s = model_sampler_new(NV);
    int32_t hist[NP + 4];
    random_prompt(77, hist, NP);
    eng_t g;
    eng_init(&g);
    eng_run(&g, hist, NP - 1, 0, false);
    /* p1 and the drafts */
    eng_run(&g, hist + NP - 1, 1, NP - 1, true);
    float *row1 = malloc((size_t)NV * sizeof *row1);
    memcpy(row1, g.logits, (size_t)NV * sizeof *row1);
    double p1[256];
    exact_dist(s, &sp, row1, hist, NP, p1);
    int32_t d0 = model_argmax(row1, NV);
    /* p2(. | t1) for every t1 in the support of p1: row after t1 at position NP */
    float *row2 = malloc((size_t)NV * NV * sizeof *row2);
    double *p2 = calloc((size_t)NV * NV, sizeof *p2);
    for (int t1 = 0; t1 < NV; t1++) {
        if (p1[t1] == 0)
            continue;
        int32_t tok = t1;
        eng_run(&g, &tok, 1, NP, true);
        memcpy(row2 + (size_t)t1 * NV, g.logits, (size_t)NV * sizeof *row2);
        hist[NP] = tok;
        exact_dist(s, &sp, row2 + (size_t)t1 * NV, hist, NP + 1, p2 + (size_t)t1 * NV);
    }
    int32_t d1 = model_argmax(row2 + (size_t)d0 * NV, NV);
    int32_t d2 = -1;
    /* a token outside the top-k after d0 d1: never accepted */
    int32_t first3[3] = {d0, d1, 0};
    eng_run(&g, first3, 2, NP, true); /* rows: after d0 (= row2[d0]), after d1 */
    float *rows = malloc((size_t)4 * NV * sizeof *rows);
    memcpy(rows, row1, (size_t)NV * sizeof *rows);
    memcpy(rows + NV, g.logits, (size_t)2 * NV * sizeof *rows);
    {
        double p3[256];
        hist[NP] = d0;
        hist[NP + 1] = d1;
        exact_dist(s, &sp, rows + 2 * NV, hist, NP + 2, p3);
        for (int v = 0; v < NV && d2 < 0; v++)
            if (p3[v] == 0)
                d2 = v;
    }
    first3[2] = d2;
    memcpy(rows + 3 * NV, rows + 2 * NV, (size_t)NV * sizeof *rows); /* bonus row: unused */
    int32_t draft[3] = {d0, d1, d2};

    int *c1 = calloc(NV, sizeof *c1), *c12 = calloc((size_t)NV * NV, sizeof *c12);
    int e_hist[5] = {0};
    float *work = malloc((size_t)4 * NV * sizeof *work);
    for (int seed = 1; seed <= NS; seed++) {
        model_sampler_params_t q = sp;
        q.seed = (uint64_t)seed * 0x9E3779B97F4A7C15ull;
        int32_t out[4], out2[2];
        memcpy(work, rows, (size_t)4 * NV * sizeof *work);
        int e = model_spec_verify(s, &q, work, draft, 3, hist, NP, NP, out);
        ck_assert(e >= 1 && e <= 3); /* d2 is never accepted */
        e_hist[e]++;
        int t1 = out[0], t2;
        if (e >= 2) {
            t2 = out[1];
        } else {
            /* next step: history + t1, draft one token (the most likely after t1) */
            int32_t h2[NP + 1];
            memcpy(h2, hist, NP * sizeof *h2);
            h2[NP] = t1;
            const float *r = row2 + (size_t)t1 * NV;
            int32_t dd = model_argmax(r, NV);
            memcpy(work, r, (size_t)NV * sizeof *work);
            memcpy(work + NV, r, (size_t)NV * sizeof *work); /* bonus row: unused */
            int e2 = model_spec_verify(s, &q, work, &dd, 1, h2, NP + 1, NP + 1, out2);
            ck_assert(e2 >= 1);
            t2 = out2[0];
        }
        c1[t1]++;
        c12[t1 * NV + t2]++;
    }
    double *pj = malloc((size_t)NV * NV * sizeof *pj);
    for (int a = 0; a < NV; a++)
        for (int b = 0; b < NV; b++)
            pj[a * NV + b] = p1[a] * p2[(size_t)a * NV + b];
    int df1, df12;
    double x1 = chi2(c1, p1, NV, NS, &df1), x12 = chi2(c12, pj, NV * NV, NS, &df12);
    double k1 = chi2_crit_1e4(df1), k12 = chi2_crit_1e4(df12);
    printf("spec sampling vs exact target (%d seeds, top-k %d; accepted 0/1/2 drafts: %d/%d/%d):\n"
           "  position 1: chi-square %.2f, df %d (1e-4 critical %.1f)\n"
           "  positions 1-2 joint: chi-square %.2f, df %d (1e-4 critical %.1f)\n",
           NS, TOPK, e_hist[1], e_hist[2], e_hist[3], x1, df1, k1, x12, df12, k12);
    ck_assert_msg(x1 < k1, "position 1: chi-square %.2f >= %.2f", x1, k1);
    ck_assert_msg(x12 < k12, "positions 1-2: chi-square %.2f >= %.2f", x12, k12);
    /* the drafts must exercise both outcomes */
    ck_assert_int_gt(e_hist[1], NS / 20);
    ck_assert_int_gt(e_hist[2] + e_hist[3], NS / 20);
    free(work);
    free(pj);
    free(c1);
    free(c12);
    free(rows);
    free(row1);
    free(row2);
    free(p2);
    eng_free(&g);
    model_sampler_destroy(&s);
}
END_TEST

/* ------------------------------------------------------------------ adaptive depth */

START_TEST(adaptive_depth) {
    model_spec_adapt_t a;
    model_spec_adapt_init(&a, 0, 16);
    int k0 = model_spec_adapt_next_k(&a, 1);
    ck_assert(k0 >= 1 && k0 <= 16);
    /* high acceptance alone: deep */
    for (int i = 0; i < 50; i++)
        model_spec_adapt_observe(&a, 8, 8);
    int k_hi = model_spec_adapt_next_k(&a, 1);
    ck_assert_int_ge(k_hi, 8);
    /* the same acceptance with a big batch: shallower */
    int k_busy = model_spec_adapt_next_k(&a, 24);
    ck_assert_int_lt(k_busy, k_hi);
    ck_assert_int_ge(k_busy, 1);
    /* compute-bound: speculation does not pay unless nearly everything is accepted */
    model_spec_adapt_t b;
    model_spec_adapt_init(&b, 0, 16);
    for (int i = 0; i < 20; i++)
        model_spec_adapt_observe(&b, 4, 1);
    ck_assert_int_eq(model_spec_adapt_next_k(&b, 64), 0);
    /* acceptance collapses: off, with probes now and then */
    for (int i = 0; i < 40; i++)
        model_spec_adapt_observe(&a, 4, 0);
    int zeros = 0, probes = 0;
    for (int step = 0; step < 200; step++) {
        int k = model_spec_adapt_next_k(&a, 1);
        if (k == 0) {
            zeros++;
            continue;
        }
        probes++;
        ck_assert(a.probing);
        model_spec_adapt_observe(&a, k, 0); /* probes fail */
    }
    printf("adaptive: k %d at start, %d when accepted alone, %d with 24 running; off for %d "
           "of 200 steps with %d failed probes\n",
           k0, k_hi, k_busy, zeros, probes);
    ck_assert_int_ge(zeros, 180);
    ck_assert(probes >= 2 && probes <= 8); /* 16, 32, 64, 128 steps apart */
    /* probes that succeed turn it back on */
    int on = 0;
    for (int step = 0; step < 400 && !on; step++) {
        int k = model_spec_adapt_next_k(&a, 1);
        if (k > 0 && !a.probing)
            on = 1;
        else if (k > 0)
            model_spec_adapt_observe(&a, k, k);
    }
    ck_assert(on);
    /* fixed mode */
    model_spec_adapt_t f;
    model_spec_adapt_init(&f, 5, 16);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(model_spec_adapt_next_k(&f, 1 + i * 10), 5);
        model_spec_adapt_observe(&f, 5, 0);
    }
    model_spec_adapt_init(&f, 99, 16);
    ck_assert_int_eq(model_spec_adapt_next_k(&f, 1), MODEL_SPEC_MAX_K);
}
END_TEST

/* ------------------------------------------------------------------ the model drafter */

/* Greedy continuation of hist by the model, computed from scratch. */
static void greedy_fresh(const char *path, const int32_t *hist, int n, int k, int32_t *out) {
    char err[256];
    model_t *m = strcmp(path, TARGET) ? model_load(path, err, sizeof err) : M;
    ck_assert_ptr_nonnull(m);
    model_t *saved = M;
    M = m;
    eng_t g;
    eng_init(&g);
    int32_t seq[600];
    memcpy(seq, hist, (size_t)n * sizeof *seq);
    if (n > 1)
        eng_run(&g, seq, n - 1, 0, false);
    for (int i = 0; i < k; i++) {
        eng_run(&g, seq + n - 1 + i, 1, n - 1 + i, true);
        seq[n + i] = out[i] = model_argmax(g.logits, NV);
    }
    eng_free(&g);
    M = saved;
    if (m != M)
        model_destroy(&m);
}

/* The drafter's counters into an actor_counters_t (serve_drafter_count_fn). */
static void s_count(void *counters, const char *name, int64_t value, bool set) {
    if (set)
        actor_counters_set(counters, name, value);
    else
        actor_counters_add(counters, name, value);
}

/* The drafter rolls each request's KV back to the common prefix with the new
 * history: extending, diverging, shrinking, batching several requests, and
 * evicting under a small pool all give what a fresh greedy decode gives. */
START_TEST(model_drafter_rollback_and_lru) {
    char err[256];
    actor_counters_t *cnt = actor_counters_new();
    serve_drafter_config_t cfg = {.mode = SERVE_DRAFTER_MODEL,
                                  .draft_model = DRAFT,
                                  .target_model = TARGET,
                                  .kv_blocks = 16,
                                  .block_size = 16,
                                  .step_tokens = 32,
                                  .count = s_count,
                                  .count_arg = cnt};
    serve_drafter_t *d = serve_drafter_new(&cfg, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    uint64_t rs = 5;
    int32_t base[4][200];
    for (int r = 0; r < 4; r++)
        random_prompt(900 + r, base[r], 200);
    int32_t got[16], want[16];
    int drafted = 0, fallbacks = 0;
    for (int step = 0; step < 40; step++) {
        /* a batch of 1..3 requests with histories that wander around their base */
        serve_drafter_job_t jobs[3];
        int32_t outs[3][16], hists[3][200];
        int nj = 1 + (int)(test_rand_u64(&rs) % 3);
        for (int x = 0; x < nj; x++) {
            int r = (step + x) % 4;
            int n = 5 + (int)(test_rand_u64(&rs) % 70);
            memcpy(hists[x], base[r], (size_t)n * sizeof(int32_t));
            if (test_rand_u64(&rs) % 3 == 0) /* diverge somewhere */
                hists[x][(int)(test_rand_u64(&rs) % (uint64_t)n)] = 3 + step % 7;
            int k = 1 + (int)(test_rand_u64(&rs) % 8);
            jobs[x] = (serve_drafter_job_t){r % 2, (uint64_t)r, hists[x], n, k, outs[x], 0, 0};
        }
        ck_assert_int_eq(serve_drafter_propose(d, jobs, nj), 0);
        for (int x = 0; x < nj; x++) {
            ck_assert_int_eq(jobs[x].n_out, jobs[x].k);
            if (jobs[x].by != SERVE_DRAFTER_MODEL) { /* the pool could not hold the whole batch */
                fallbacks++;
                continue;
            }
            drafted++;
            greedy_fresh(DRAFT, jobs[x].tokens, jobs[x].n, jobs[x].k, want);
            for (int i = 0; i < jobs[x].k; i++)
                ck_assert_msg(jobs[x].out[i] == want[i], "step %d job %d draft %d: %d vs %d", step,
                              x, i, jobs[x].out[i], want[i]);
        }
    }
    printf("model drafter: %d batched drafts checked, %lld prefill tokens, %lld states evicted, "
           "%lld n-gram fallbacks\n",
           drafted, (long long)actor_counters_get(cnt, "tokens.prefill"),
           (long long)actor_counters_get(cnt, "states.evicted"),
           (long long)actor_counters_get(cnt, "fallback.ngram"));
    ck_assert_int_gt(actor_counters_get(cnt, "states.evicted"), 0);
    ck_assert_int_eq(actor_counters_get(cnt, "fallback.ngram"), fallbacks);
    ck_assert_int_gt(drafted, 4 * fallbacks);
    /* a repeated (worker, rid) in one batch is refused */
    serve_drafter_job_t two[2] = {{0, 9, base[0], 10, 2, got, 0, 0},
                                  {0, 9, base[0], 12, 2, want, 0, 0}};
    ck_assert_int_eq(serve_drafter_propose(d, two, 2), -EINVAL);
    /* a history longer than the pool: n-gram fallback, no failure */
    int32_t longh[400];
    for (int i = 0; i < 400; i++)
        longh[i] = 3 + i % 5;
    serve_drafter_job_t lj = {1, 77, longh, 400, 4, got, 0, 0};
    ck_assert_int_eq(serve_drafter_propose(d, &lj, 1), 0);
    ck_assert_int_eq(lj.n_out, 4);
    ck_assert_int_eq(lj.by, SERVE_DRAFTER_NGRAM);
    ck_assert_int_eq(got[0], 3 + 400 % 5);
    ck_assert_int_ge(actor_counters_get(cnt, "fallback.ngram"), 1);
    /* end frees the state */
    int before = serve_drafter_states(d);
    serve_drafter_reset(d, 0, 0);
    serve_drafter_reset(d, 5, 12345); /* unknown: no-op */
    ck_assert_int_le(serve_drafter_states(d), before);
    serve_drafter_destroy(&d);
    actor_counters_destroy(&cnt);
}
END_TEST

/* ------------------------------------------------------------------ vocabulary check */

START_TEST(vocab_check) {
    char err[512];
    model_gguf_t *t = model_gguf_open(TARGET, err, sizeof err);
    model_gguf_t *d = model_gguf_open(DRAFT, err, sizeof err);
    model_gguf_t *o = model_gguf_open(OTHER_VOCAB, err, sizeof err);
    model_gguf_t *b = model_gguf_open(BIG_VOCAB, err, sizeof err);
    ck_assert(t && d && o && b);
    ck_assert_int_eq(serve_drafter_check_vocab(t, d, err, sizeof err), 0);
    ck_assert_int_eq(serve_drafter_check_vocab(t, o, err, sizeof err), -EINVAL);
    printf("vocab check: %s\n", err);
    ck_assert_ptr_nonnull(strstr(err, "vocabulary differs"));
    ck_assert_ptr_nonnull(strstr(err, "token 3"));
    ck_assert_int_eq(serve_drafter_check_vocab(t, b, err, sizeof err), -EINVAL);
    printf("vocab check: %s\n", err);
    ck_assert_ptr_nonnull(strstr(err, "vocabulary differs"));
    /* the drafter refuses to start with it */
    serve_drafter_config_t cfg = {
        .mode = SERVE_DRAFTER_MODEL, .draft_model = OTHER_VOCAB, .target_model = TARGET};
    ck_assert_ptr_null(serve_drafter_new(&cfg, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "vocabulary differs"));
    model_gguf_destroy(&t);
    model_gguf_destroy(&d);
    model_gguf_destroy(&o);
    model_gguf_destroy(&b);
}
END_TEST

/* ------------------------------------------------------------------ the actor */

static void topo_base(actor_topology_t *t, const char *tag) {
    memset(t, 0, sizeof *t);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://%s-front", tag);
    actor_topology_add(t, "frontend", ep);
    snprintf(ep, sizeof ep, "inproc://%s-w0", tag);
    actor_topology_add(t, "worker0", ep);
    snprintf(ep, sizeof ep, "inproc://%s-w1", tag);
    actor_topology_add(t, "worker1", ep);
}

START_TEST(actor_replies_to_the_asking_worker) {
    actor_topology_t *t = malloc(sizeof *t);
    topo_base(t, "spec-a");
    actor_topo_entry_t *e = actor_topology_add(t, "draft", "inproc://spec-a-draft");
    actor_topology_set(e, "draft", "model");
    actor_topology_set(e, "draft_model", DRAFT);
    actor_topology_set(e, "model", TARGET);
    zsock_t *w1 = actor_sock_inbound(t, "worker1", 1 << 20, 1000);
    zsock_t *front = actor_sock_inbound(t, "frontend", 1 << 20, 1000);
    char err[512];
    actor_t *a = actor_new(actor_info_find("draft"), "draft", t, 10000, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    zsock_t *to = actor_sock_outbound(t, "worker1", "draft", 100);
    int32_t hist[30];
    random_prompt(31, hist, 30);
    msg_draft_request_t q;
    msg_draft_request_init(&q);
    q.rid = 7;
    q.worker = 1;
    q.seq = 3;
    q.tokens = hist;
    q.n_tokens = 30;
    q.k = 5;
    ck_assert_int_eq(actor_send(to, MSG_DRAFT_REQUEST, &q), 0);
    msg_any_t m;
    ck_assert_int_eq(test_recv_wait(w1, &m, 5000), 0);
    ck_assert_int_eq(m.type, MSG_DRAFT_REPLY);
    ck_assert(m.u.draft_reply.rid == 7 && m.u.draft_reply.seq == 3);
    ck_assert_int_eq(m.u.draft_reply.base, 30);
    ck_assert_int_eq(m.u.draft_reply.n_tokens, 5);
    int32_t want[5];
    greedy_fresh(DRAFT, hist, 30, 5, want);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(m.u.draft_reply.tokens[i], want[i]);
    msg_any_clear(&m);
    /* draft_end, then stats */
    msg_draft_end_t de;
    msg_draft_end_init(&de);
    de.rid = 7;
    de.worker = 1;
    ck_assert_int_eq(actor_send(to, MSG_DRAFT_END, &de), 0);
    msg_stats_query_t sq;
    msg_stats_query_init(&sq);
    ck_assert_int_eq(actor_send(to, MSG_STATS_QUERY, &sq), 0);
    ck_assert_int_eq(test_recv_wait(front, &m, 5000), 0);
    ck_assert_int_eq(m.type, MSG_STATS_ANSWER);
    int64_t reqs = -1, proposed = -1, ends = -1, states = -1;
    for (int i = 0; i < m.u.stats_answer.n_counters; i++) {
        const char *n = m.u.stats_answer.counters[i].name;
        int64_t v = m.u.stats_answer.counters[i].value;
        reqs = strcmp(n, "requests") ? reqs : v;
        proposed = strcmp(n, "tokens.proposed") ? proposed : v;
        ends = strcmp(n, "ends") ? ends : v;
        states = strcmp(n, "states") ? states : v;
    }
    ck_assert_int_eq(reqs, 1);
    ck_assert_int_eq(proposed, 5);
    ck_assert_int_eq(ends, 1);
    ck_assert_int_eq(states, 0);
    msg_any_clear(&m);
    actor_destroy(&a);
    zsock_destroy(&to);
    zsock_destroy(&w1);
    zsock_destroy(&front);

    /* a draft model with another vocabulary: the actor does not start */
    topo_base(t, "spec-b");
    e = actor_topology_add(t, "draft", "inproc://spec-b-draft");
    actor_topology_set(e, "draft", "model");
    actor_topology_set(e, "draft_model", OTHER_VOCAB);
    actor_topology_set(e, "model", TARGET);
    a = actor_new(actor_info_find("draft"), "draft", t, 10000, err, sizeof err);
    ck_assert_ptr_null(a);
    printf("draft actor with another vocabulary: %s\n", err);
    ck_assert_ptr_nonnull(strstr(err, "vocabulary differs"));
    /* n-gram mode needs no model */
    topo_base(t, "spec-c");
    e = actor_topology_add(t, "draft", "inproc://spec-c-draft");
    zsock_t *w0 = actor_sock_inbound(t, "worker0", 1 << 20, 1000);
    a = actor_new(actor_info_find("draft"), "draft", t, 10000, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    to = actor_sock_outbound(t, "worker0", "draft", 100);
    const int32_t rep[] = {5, 6, 7, 8, 5, 6};
    q.tokens = (int32_t *)rep;
    q.n_tokens = 6;
    q.worker = 0;
    q.k = 2;
    ck_assert_int_eq(actor_send(to, MSG_DRAFT_REQUEST, &q), 0);
    ck_assert_int_eq(test_recv_wait(w0, &m, 5000), 0);
    ck_assert_int_eq(m.u.draft_reply.n_tokens, 2);
    ck_assert_int_eq(m.u.draft_reply.tokens[0], 7);
    ck_assert_int_eq(m.u.draft_reply.tokens[1], 8);
    msg_any_clear(&m);
    actor_destroy(&a);
    zsock_destroy(&to);
    zsock_destroy(&w0);
    free(t);
}
END_TEST

/* ------------------------------------------------------------------ main */

static void cleanup_files(void) {
    unlink(TARGET);
    unlink(DRAFT);
    unlink(OTHER_VOCAB);
    unlink(BIG_VOCAB);
    rmdir(DIR_);
}

int main(int argc, char **argv) {
    char err[512];
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(DIR_, sizeof DIR_, "%s/strata-test-spec-XXXXXX", tmp);
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(TARGET, sizeof TARGET, "%s/target.gguf", DIR_);
    snprintf(DRAFT, sizeof DRAFT, "%s/draft.gguf", DIR_);
    snprintf(OTHER_VOCAB, sizeof OTHER_VOCAB, "%s/other.gguf", DIR_);
    snprintf(BIG_VOCAB, sizeof BIG_VOCAB, "%s/big.gguf", DIR_);
    test_synth_t tc = {.seed = 1};
    test_synth_t dc = {
        .seed = 3, .n_layer = 1, .d_model = 32, .n_head = 2, .n_head_kv = 1, .d_ff = 64};
    test_synth_t oc = {.seed = 2, .vocab_tag = "u"};
    test_synth_t bc = {.seed = 4, .n_vocab = 80};
    if (test_synth_model(TARGET, &tc, err, sizeof err) ||
        test_synth_model(DRAFT, &dc, err, sizeof err) ||
        test_synth_model(OTHER_VOCAB, &oc, err, sizeof err) ||
        test_synth_model(BIG_VOCAB, &bc, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        cleanup_files();
        return 1;
    }
    M = model_load(TARGET, err, sizeof err);
    if (!M) {
        fprintf(stderr, "%s\n", err);
        cleanup_files();
        return 1;
    }
    NV = model_config(M)->n_vocab;
    Suite *s = suite_create("spec");
    TCase *tc_ = tcase_create("spec");
    tcase_set_timeout(tc_, 120);
    tcase_add_test(tc_, ngram_cases);
    tcase_add_test(tc_, ngram_long_history);
    tcase_add_test(tc_, verify_matches_plain_sampling);
    tcase_add_test(tc_, dist_matches_sampler);
    tcase_add_test(tc_, greedy_equals_plain);
    tcase_add_test(tc_, sampling_same_per_seed);
    tcase_add_test(tc_, sampling_distribution_chi_square);
    tcase_add_test(tc_, adaptive_depth);
    tcase_add_test(tc_, model_drafter_rollback_and_lru);
    tcase_add_test(tc_, vocab_check);
    tcase_add_test(tc_, actor_replies_to_the_asking_worker);
    suite_add_tcase(s, tc_);
    int rc = test_run_suite(argc, argv, s, CK_NOFORK);
    model_destroy(&M);
    cleanup_files();
    return rc;
}
