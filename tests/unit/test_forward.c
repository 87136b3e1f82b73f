/* test_forward.c - properties of the batched forward pass over paged KV, on the
 * default model: a batch mixing sequences equals running them one by one;
 * chunked prefill equals one pass; token-by-token decode equals prefill; the
 * block table's order does not matter; F16 KV stays close to F32; bad batches
 * are refused.  (Correctness against an independent implementation is the
 * NumPy oracle's job: tests/oracle.) */
#include "model.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static model_t *M;
static const model_config_t *CFG;
static kern_kv_shape_t KV16; /* the model's KV blocks of 16 positions */

static const int32_t P1[] = {504, 3458, 282, 4649, 314,  7042, 30,   378, 3458, 282, 4649,
                             314, 7042, 30,  378,  3458, 282,  4649, 314, 7042, 30};
static const int32_t P2[] = {1,   9690,  198, 2683, 359, 253, 5356,  5646, 11173, 3365, 3511,
                             308, 34519, 28,  7018, 411, 407, 19712, 8182, 2,     198,  1};
#define N1 (int)(sizeof P1 / sizeof P1[0])
#define N2 (int)(sizeof P2 / sizeof P2[0])

/* Run tokens of one sequence in chunks of `chunk`, blocks as given; returns
 * logits of every position (n, n_vocab), malloc'd. */
static float *run_seq(const int32_t *toks, int n, int chunk, const int32_t *blocks, int nb,
                      kern_type_t kvt, int threads) {
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &KV16, kvt, 16), 0);
    model_ctx_t *ctx = model_ctx_new(M, chunk, 256, threads, NULL);
    ck_assert_ptr_nonnull(ctx);
    float *out = malloc((size_t)n * CFG->n_vocab * sizeof(float));
    int32_t pos[64], seq[64] = {0};
    bool want[64];
    model_seq_view_t sv = {blocks, nb, NULL, 0, 0};
    for (int i = 0; i < n; i += chunk) {
        int m = n - i < chunk ? n - i : chunk;
        for (int j = 0; j < m; j++) {
            pos[j] = i + j;
            want[j] = true;
        }
        model_batch_t b = {m, toks + i, pos, seq, want, 1, &sv, NULL};
        ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, out + (size_t)i * CFG->n_vocab), m);
    }
    model_ctx_destroy(&ctx);
    kern_kv_pool_free(&kv);
    return out;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static const int32_t IDENT[] = {0, 1, 2, 3};
static const int32_t SHUFFLED[] = {9, 2, 14, 5};

START_TEST(chunked_and_decode_equal_prefill) {
    if (!M)
        return;
    float *whole = run_seq(P1, N1, 32, IDENT, 4, KERN_F32, 2);
    float *chunk7 = run_seq(P1, N1, 7, IDENT, 4, KERN_F32, 2);
    float *decode = run_seq(P1, N1, 1, IDENT, 4, KERN_F32, 1);
    size_t n = (size_t)N1 * CFG->n_vocab;
    double d1 = max_diff(whole, chunk7, n), d2 = max_diff(whole, decode, n);
    printf("chunked vs whole: %.2e, decode vs whole: %.2e\n", d1, d2);
    /* bitwise: the kernels are batch-invariant (test_kernels checks each gemm) */
    ck_assert_msg(d1 == 0 && d2 == 0, "chunk %.3e decode %.3e", d1, d2);
    free(whole);
    free(chunk7);
    free(decode);
}
END_TEST

START_TEST(block_order_irrelevant) {
    if (!M)
        return;
    float *a = run_seq(P1, N1, 8, IDENT, 4, KERN_F32, 2);
    float *b = run_seq(P1, N1, 8, SHUFFLED, 4, KERN_F32, 2);
    ck_assert_msg(max_diff(a, b, (size_t)N1 * CFG->n_vocab) == 0, "paged layout changed results");
    free(a);
    free(b);
}
END_TEST

/* F16 KV rounds K and V to 11 significant bits.  The network amplifies any
 * perturbation (8-bit activation quantization flips a few roundings), so the
 * check is on the shape of each position's distribution: cosine similarity of
 * the logit vectors, and the same top token unless the top two are a near-tie. */
START_TEST(f16_kv_close_to_f32) {
    if (!M)
        return;
    float *a = run_seq(P2, N2, 32, IDENT, 4, KERN_F32, 2);
    float *b = run_seq(P2, N2, 32, IDENT, 4, KERN_F16, 2);
    double worst_cos = 1;
    for (int t = 0; t < N2; t++) {
        const float *x = a + (size_t)t * CFG->n_vocab, *y = b + (size_t)t * CFG->n_vocab;
        double xy = 0, xx = 0, yy = 0;
        int ax = 0, ay = 0;
        for (int v = 0; v < CFG->n_vocab; v++) {
            xy += (double)x[v] * y[v];
            xx += (double)x[v] * x[v];
            yy += (double)y[v] * y[v];
            ax = x[v] > x[ax] ? v : ax;
            ay = y[v] > y[ay] ? v : ay;
        }
        worst_cos = fmin(worst_cos, xy / sqrt(xx * yy));
        ck_assert_msg(ax == ay || fabsf(x[ax] - x[ay]) < 0.5f, "argmax differs at %d", t);
    }
    printf("f16 KV vs f32 KV: worst cosine similarity %.5f\n", worst_cos);
    ck_assert_msg(worst_cos > 0.95, "f16 KV: cosine %.4f", worst_cos);
    free(a);
    free(b);
}
END_TEST

/* Two sequences interleaved in one batch (as continuous batching does) equal
 * each run alone. */
START_TEST(mixed_batch_equals_separate) {
    if (!M)
        return;
    float *a = run_seq(P1, N1, 32, IDENT, 4, KERN_F32, 2);
    float *b = run_seq(P2, N2, 32, IDENT, 4, KERN_F32, 2);
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &KV16, KERN_F32, 16), 0);
    model_ctx_t *ctx = model_ctx_new(M, 64, 256, 2, NULL);
    int32_t blk1[] = {3, 7}, blk2[] = {0, 12};
    model_seq_view_t sv[2] = {{blk1, 2, NULL, 0, 0}, {blk2, 2, NULL, 0, 0}};
    int32_t toks[64], pos[64], seq[64];
    bool want[64];
    int n = 0, i1 = 0, i2 = 0;
    while (i1 < N1 || i2 < N2) { /* interleave unevenly */
        if (i1 < N1) {
            toks[n] = P1[i1];
            pos[n] = i1;
            seq[n] = 0;
            want[n] = true;
            n++;
            i1++;
        }
        for (int k = 0; k < 2 && i2 < N2; k++) {
            toks[n] = P2[i2];
            pos[n] = i2;
            seq[n] = 1;
            want[n] = true;
            n++;
            i2++;
        }
    }
    float *out = malloc((size_t)n * CFG->n_vocab * sizeof(float));
    model_batch_t bt = {n, toks, pos, seq, want, 2, sv, NULL};
    ck_assert_int_eq(model_ctx_forward(ctx, &bt, &kv, out), n);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        const float *ref = (seq[t] == 0 ? a : b) + (size_t)pos[t] * CFG->n_vocab;
        worst = fmax(worst, max_diff(ref, out + (size_t)t * CFG->n_vocab, CFG->n_vocab));
    }
    printf("mixed batch vs separate: %.2e\n", worst);
    ck_assert_msg(worst == 0, "mixed batch differs by %.3e", worst);
    free(out);
    free(a);
    free(b);
    model_ctx_destroy(&ctx);
    kern_kv_pool_free(&kv);
}
END_TEST

START_TEST(bad_batches_refused) {
    if (!M)
        return;
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &KV16, KERN_F32, 2), 0);
    model_ctx_t *ctx = model_ctx_new(M, 4, 64, 1, NULL);
    int32_t blocks[] = {0, 1}, bad_blocks[] = {0, 5};
    model_seq_view_t sv = {blocks, 2, NULL, 0, 0}, sv_bad = {bad_blocks, 2, NULL, 0, 0};
    int32_t tok[] = {1, 2}, pos[] = {0, 1}, seq[] = {0, 0};
    float lg[2 * 49152];
    bool want[] = {false, true};
    model_batch_t b = {2, tok, pos, seq, want, 1, &sv, NULL};
    ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, lg), 1);
    int32_t badtok[] = {1, 49152};
    b.tokens = badtok;
    ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, lg), -EINVAL);
    b.tokens = tok;
    int32_t far[] = {0, 40}; /* beyond the two-block table */
    b.pos = far;
    ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, lg), -EINVAL);
    int32_t p2[] = {16, 17};
    b.pos = p2;
    b.seqs = &sv_bad; /* block id beyond the pool */
    ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, lg), -EINVAL);
    b.seqs = &sv;
    b.n_tokens = 5; /* more than the context holds */
    ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, lg), -EINVAL);
    model_ctx_destroy(&ctx);
    kern_kv_pool_free(&kv);
}
END_TEST

int main(int argc, char **argv) {
    const char *path = test_model_path_or_skip(); /* every case needs the model */
    char err[512];
    M = model_load(path, err, sizeof err);
    if (!M) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    CFG = model_config(M);
    KV16 = model_kv_shape(CFG, 16);
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, chunked_and_decode_equal_prefill);
    tcase_add_test(tc, block_order_irrelevant);
    tcase_add_test(tc, f16_kv_close_to_f32);
    tcase_add_test(tc, mixed_batch_equals_separate);
    tcase_add_test(tc, bad_batches_refused);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(argc, argv, s, CK_NOFORK);
    model_destroy(&M);
    return rc;
}
