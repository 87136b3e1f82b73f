/* test_moefy.c - MoEfication (model_moefy) on a small synthetic model: planted neuron
 * groups are found, the router learns which group a token needs, the written GGUF holds
 * the dense weights permuted into expert slabs (bitwise for F32, within the quantization
 * step for Q8_0), and bad inputs are refused with a reason. */
#include "kern_ops.h"
#include "model_gguf.h"
#include "model_moefy.h"
#include "model_quantize.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D_MODEL 64
#define D_FF 128
#define N_LAYER 2
#define E 4
#define M (D_FF / E)
#define N_TOK 768

static char s_dir[256];
static char s_dense[300];

static void s_setup(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/strata_test_moefy.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s_dir));
    snprintf(s_dense, sizeof s_dense, "%s/dense.gguf", s_dir);
    test_synth_t cfg = {.n_layer = N_LAYER, .d_model = D_MODEL, .d_ff = D_FF, .seed = 7};
    char err[256] = "";
    ck_assert_msg(test_synth_model(s_dense, &cfg, err, sizeof err) == 0, "%s", err);
}

static void s_teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Planted structure: neuron i belongs to group planted[i] (a shuffled balanced split);
 * token t has a topic z(t); the neurons of its topic fire strongly, the others weakly; h(t)
 * carries the topic in its first E coordinates plus noise. */
static int s_planted[N_LAYER][D_FF];

static void s_plant(uint64_t seed) {
    uint64_t st = seed;
    for (int l = 0; l < N_LAYER; l++) {
        for (int i = 0; i < D_FF; i++)
            s_planted[l][i] = i / M;
        for (int i = D_FF - 1; i > 0; i--) {
            int j = (int)(test_rand_u64(&st) % (uint64_t)(i + 1));
            int t = s_planted[l][i];
            s_planted[l][i] = s_planted[l][j];
            s_planted[l][j] = t;
        }
    }
}

static void s_feed(model_moefy_t *mf, int n_tok, uint64_t seed) {
    uint64_t st = seed;
    float h[16][D_MODEL], a[16][D_FF];
    for (int t0 = 0; t0 < n_tok; t0 += 16) {
        int n = n_tok - t0 < 16 ? n_tok - t0 : 16;
        for (int l = 0; l < N_LAYER; l++) {
            for (int c = 0; c < n; c++) {
                int z = (int)((unsigned)(t0 + c) * 2654435761u >> 7) % E; /* topic of token */
                for (int j = 0; j < D_MODEL; j++)
                    h[c][j] = test_rand_f32(&st, -0.3f, 0.3f) + (j == z ? 3.0f : 0.0f);
                for (int i = 0; i < D_FF; i++) {
                    float mag = s_planted[l][i] == z ? test_rand_f32(&st, 1.0f, 2.0f)
                                                     : test_rand_f32(&st, 0.0f, 0.05f);
                    a[c][i] = test_rand_u64(&st) & 1 ? mag : -mag;
                }
            }
            model_moefy_tap(mf, l, n, &h[0][0], D_MODEL, &a[0][0], D_FF);
        }
    }
}

static model_moefy_t *s_fitted(const model_gguf_t *g, int top_k) {
    const model_config_t *cfg;
    char err[256] = "";
    model_t *m = model_load(s_dense, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    cfg = model_config(m);
    model_moefy_opts_t o = {.n_experts = E, .top_k = top_k, .max_tokens = N_TOK};
    model_moefy_t *mf = model_moefy_new(cfg, &o, err, sizeof err);
    model_destroy(&m);
    ck_assert_msg(mf != NULL, "%s", err);
    s_plant(11);
    s_feed(mf, N_TOK + 40, 5); /* more than max_tokens: the rest is ignored */
    ck_assert_int_eq(model_moefy_recorded(mf), N_TOK);
    ck_assert_msg(model_moefy_fit(mf, g, 2, err, sizeof err) == 0, "%s", err);
    return mf;
}

START_TEST(test_planted_groups_and_router) {
    char err[256] = "";
    model_gguf_t *g = model_gguf_open(s_dense, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    model_moefy_t *mf = s_fitted(g, 1);
    for (int l = 0; l < N_LAYER; l++) {
        const int32_t *p = model_moefy_perm(mf, l);
        ck_assert_ptr_nonnull(p);
        /* a permutation, ascending within each expert, each expert one planted group */
        int seen[D_FF] = {0};
        for (int e = 0; e < E; e++)
            for (int j = 0; j < M; j++) {
                int i = p[e * M + j];
                ck_assert(i >= 0 && i < D_FF);
                seen[i]++;
                if (j > 0)
                    ck_assert_int_lt(p[e * M + j - 1], i);
                ck_assert_int_eq(s_planted[l][i], s_planted[l][p[e * M]]);
            }
        for (int i = 0; i < D_FF; i++)
            ck_assert_int_eq(seen[i], 1);
        /* the router picks the topic's group: the one whose output is largest */
        const model_moefy_stats_t *st = model_moefy_stats(mf, l);
        ck_assert_int_eq(st->n_tokens, N_TOK);
        ck_assert_msg(st->recall > 0.97f, "layer %d recall %.3f", l, st->recall);
        ck_assert_float_le(st->use_max_mean, 1.3f);
        ck_assert_float_ge(st->use_entropy, 0.95f);
        float sum = 0;
        for (int e = 0; e < E; e++)
            sum += st->use[e];
        ck_assert_float_eq_tol(sum, 1.0f, 1e-5f);
        ck_assert_float_le(st->err_router, st->err_oracle + 0.05f);
    }
    /* held-out tokens from the same source route as well */
    model_moefy_reset(mf);
    ck_assert_int_eq(model_moefy_recorded(mf), 0);
    s_feed(mf, 256, 99);
    ck_assert_msg(model_moefy_evaluate(mf, g, 1, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(model_moefy_stats(mf, 0)->n_tokens, 256);
    ck_assert_float_gt(model_moefy_stats(mf, 0)->recall, 0.95f);
    model_moefy_destroy(&mf);
    model_moefy_destroy(&mf); /* safe twice */
    model_gguf_destroy(&g);
}
END_TEST

/* Reopen the written model and compare every expert slab with the dense tensors. */
static void s_check_written(const model_moefy_t *mf, const model_gguf_t *dense, const char *path,
                            int top_k, bool exact_down) {
    char err[256] = "";
    model_gguf_t *o = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(o != NULL, "%s", err);
    uint64_t v = 0;
    ck_assert(model_gguf_get_u64(o, "llama.expert_count", &v) && v == E);
    ck_assert(model_gguf_get_u64(o, "llama.expert_used_count", &v) && v == (uint64_t)top_k);
    ck_assert(model_gguf_get_u64(o, "llama.feed_forward_length", &v) && v == M);
    char *gating = NULL;
    ck_assert(model_gguf_get_str(o, "strata.expert_gating", &gating));
    ck_assert_str_eq(gating, "unit");
    free(gating);
    ck_assert(model_gguf_get_u64(o, "llama.block_count", &v) && v == N_LAYER); /* copied */
    /* 9 tensors per layer became 7 (+router, 3 experts for 3 dense) */
    ck_assert_int_eq(model_gguf_tensor_count(o), model_gguf_tensor_count(dense) + N_LAYER);
    const kern_ops_t *ref = kern_ops_ref();
    for (int l = 0; l < N_LAYER; l++) {
        const int32_t *p = model_moefy_perm(mf, l);
        char n[64];
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l);
        ck_assert_ptr_null(model_gguf_tensor(o, n));
        snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", l);
        const model_gguf_tensor_t *r = model_gguf_tensor(o, n);
        ck_assert_ptr_nonnull(r);
        ck_assert(r->type == KERN_F32 && r->n_dims == 2 && r->ne[0] == D_MODEL && r->ne[1] == E);
        ck_assert_int_eq(memcmp(r->data, model_moefy_router(mf, l), sizeof(float) * E * D_MODEL),
                         0);
        const char *kinds[2] = {"gate", "up"};
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "blk.%d.ffn_%s.weight", l, kinds[k]);
            const model_gguf_tensor_t *s = model_gguf_tensor(dense, n);
            snprintf(n, sizeof n, "blk.%d.ffn_%s_exps.weight", l, kinds[k]);
            const model_gguf_tensor_t *x = model_gguf_tensor(o, n);
            ck_assert_ptr_nonnull(x);
            ck_assert(x->type == s->type && x->n_dims == 3 && x->ne[0] == D_MODEL &&
                      x->ne[1] == M && x->ne[2] == E);
            size_t rb = kern_row_size(s->type, D_MODEL);
            for (int k2 = 0; k2 < D_FF; k2++) /* expert k2 / M, row k2 % M */
                ck_assert_int_eq(memcmp((const uint8_t *)x->data + (size_t)k2 * rb,
                                        (const uint8_t *)s->data + (size_t)p[k2] * rb, rb),
                                 0);
        }
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        const model_gguf_tensor_t *s = model_gguf_tensor(dense, n);
        snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", l);
        const model_gguf_tensor_t *x = model_gguf_tensor(o, n);
        ck_assert_ptr_nonnull(x);
        ck_assert(x->type == s->type && x->n_dims == 3 && x->ne[0] == M && x->ne[1] == D_MODEL &&
                  x->ne[2] == E);
        float dense_row[D_FF], exp_row[M];
        size_t srb = kern_row_size(s->type, D_FF), xrb = kern_row_size(x->type, M);
        for (int e = 0; e < E; e++)
            for (int rr = 0; rr < D_MODEL; rr++) {
                ref->dequant_row(s->type, (const uint8_t *)s->data + (size_t)rr * srb, dense_row,
                                 D_FF);
                ref->dequant_row(x->type,
                                 (const uint8_t *)x->data + ((size_t)e * D_MODEL + rr) * xrb,
                                 exp_row, M);
                float amax = 0;
                for (int j = 0; j < D_FF; j++)
                    amax = fmaxf(amax, fabsf(dense_row[j]));
                for (int j = 0; j < M; j++) {
                    float want = dense_row[p[e * M + j]];
                    if (exact_down)
                        ck_assert_float_eq(exp_row[j], want);
                    else /* q8_0 twice: within two quantization steps of the row's range */
                        ck_assert_float_le(fabsf(exp_row[j] - want), 2.0f * amax / 127.0f);
                }
            }
    }
    model_gguf_destroy(&o);
}

START_TEST(test_write_f32) {
    char err[256] = "", out[320];
    model_gguf_t *g = model_gguf_open(s_dense, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    model_moefy_t *mf = s_fitted(g, 2);
    snprintf(out, sizeof out, "%s/moe.gguf", s_dir);
    ck_assert_msg(model_moefy_write(mf, g, out, err, sizeof err) == 0, "%s", err);
    s_check_written(mf, g, out, 2, true);
    /* the output is a MoE model: moefy refuses it */
    model_gguf_t *o = model_gguf_open(out, err, sizeof err);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(model_moefy_check(o, E, 2, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "already a MoE model"));
    model_gguf_destroy(&o);
    model_moefy_destroy(&mf);
    model_gguf_destroy(&g);
}
END_TEST

START_TEST(test_write_q8_0_requantizes_down) {
    char err[256] = "", q8[320], out[320];
    snprintf(q8, sizeof q8, "%s/dense-q8.gguf", s_dir);
    ck_assert_msg(model_quantize(s_dense, q8, "q8_0", 1, NULL, err, sizeof err) == 0, "%s", err);
    model_gguf_t *g = model_gguf_open(q8, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    model_moefy_t *mf = s_fitted(g, 1);
    snprintf(out, sizeof out, "%s/moe-q8.gguf", s_dir);
    ck_assert_msg(model_moefy_write(mf, g, out, err, sizeof err) == 0, "%s", err);
    s_check_written(mf, g, out, 1, false);
    model_moefy_destroy(&mf);
    model_gguf_destroy(&g);
}
END_TEST

START_TEST(test_down_type) {
    ck_assert_int_eq(model_moefy_down_type(KERN_F32, 3), KERN_F32);
    ck_assert_int_eq(model_moefy_down_type(KERN_F16, 192), KERN_F16);
    ck_assert_int_eq(model_moefy_down_type(KERN_Q4_1, 192), KERN_Q4_1);
    ck_assert_int_eq(model_moefy_down_type(KERN_Q4_K, 192), KERN_Q8_0); /* 256 !| 192 */
    ck_assert_int_eq(model_moefy_down_type(KERN_Q4_0, 48), KERN_F16);
}
END_TEST

START_TEST(test_bad_input) {
    char err[256] = "";
    model_gguf_t *g = model_gguf_open(s_dense, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_int_eq(model_moefy_check(g, E, 2, err, sizeof err), 0);
    ck_assert_int_eq(model_moefy_check(g, 3, 1, err, sizeof err), -EINVAL); /* 3 !| 128 */
    ck_assert_ptr_nonnull(strstr(err, "do not divide"));
    ck_assert_int_eq(model_moefy_check(g, E, E + 1, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--top-k"));
    ck_assert_int_eq(model_moefy_check(g, 1, 1, err, sizeof err), -EINVAL);
    /* nothing recorded, nothing fitted */
    model_t *m = model_load(s_dense, err, sizeof err);
    ck_assert_ptr_nonnull(m);
    model_moefy_opts_t o = {.n_experts = E, .top_k = 2, .max_tokens = 16};
    model_moefy_t *mf = model_moefy_new(model_config(m), &o, err, sizeof err);
    ck_assert_ptr_nonnull(mf);
    ck_assert_int_eq(model_moefy_fit(mf, g, 1, err, sizeof err), -EINVAL);
    ck_assert_int_eq(model_moefy_evaluate(mf, g, 1, err, sizeof err), -EINVAL);
    ck_assert_int_eq(model_moefy_write(mf, g, "/nonexistent/x.gguf", err, sizeof err), -EINVAL);
    ck_assert_ptr_null(model_moefy_perm(mf, 0));
    /* a tap of the wrong shape spoils the record */
    float h[D_MODEL] = {0}, a[D_FF + 1] = {0};
    model_moefy_tap(mf, 0, 1, h, D_MODEL, a, D_FF + 1);
    ck_assert_int_eq(model_moefy_fit(mf, g, 1, err, sizeof err), -EINVAL);
    model_moefy_destroy(&mf);
    o.n_experts = 5; /* does not divide d_ff */
    ck_assert_ptr_null(model_moefy_new(model_config(m), &o, err, sizeof err));
    model_destroy(&m);
    model_gguf_destroy(&g);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("moefy");
    TCase *tc = tcase_create("synthetic");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_planted_groups_and_router);
    tcase_add_test(tc, test_write_f32);
    tcase_add_test(tc, test_write_q8_0_requantizes_down);
    tcase_add_test(tc, test_down_type);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
