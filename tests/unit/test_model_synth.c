/* test_model_synth.c - model/model_synth: random-weight models load and run.  For each
 * weight type (F32, F16, Q8_0, Q4_K) a small model of 256-wide rows is written, loaded, and
 * run for a few positions: the logits are finite and spread (not all equal), and the
 * dequantized matrices have the standard deviation asked for, within 25 % (the quantized
 * blocks are random bytes given scales for that spread).  The named shapes have the
 * dimensions of the models they are named after; bad configurations are refused. */
#include "model_synth.h"
#include "test_util.h"

#include "kern_kv.h"
#include "kern_ops.h"
#include "model.h"
#include "model_impl.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

START_TEST(every_type_loads_and_runs) {
    const kern_type_t types[] = {KERN_F32, KERN_F16, KERN_Q8_0, KERN_Q4_K};
    char dir[] = "/tmp/strata-synth-XXXXXX", path[64], err[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/m%d.gguf", dir, i);
        model_synth_t c = {.d_model = 256, .d_ff = 512, .n_vocab = 300, .wtype = types[i]};
        ck_assert_msg(model_synth_write(path, &c, err, sizeof err) == 0, "%s", err);
        model_t *m = model_load(path, err, sizeof err);
        ck_assert_msg(m != NULL, "%s", err);
        const model_config_t *cfg = model_config(m);
        ck_assert_int_eq(cfg->d_model, 256);
        ck_assert_int_eq(m->layers[0].wq.type, types[i]);
        /* the spread of blk.0.attn_q: std 1/sqrt(256) asked for */
        const model_weight_t *w = &m->layers[0].wq;
        float *row = malloc((size_t)w->cols * sizeof *row);
        double s2 = 0;
        for (int r = 0; r < 64; r++) {
            kern_ops_ref()->dequant_row(
                w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, row, w->cols);
            for (int64_t j = 0; j < w->cols; j++)
                s2 += (double)row[j] * row[j];
        }
        double sd = sqrt(s2 / (64.0 * (double)w->cols)), want = 1.0 / 16;
        ck_assert_msg(fabs(sd - want) <= 0.25 * want, "type %d: std %g, want %g", i, sd, want);
        free(row);
        /* three positions: finite, spread logits */
        kern_kv_shape_t sh = model_kv_shape(cfg, 16);
        kern_kv_pool_t kv;
        ck_assert_int_eq(kern_kv_pool_init(&kv, &sh, KERN_F32, 1), 0);
        model_ctx_t *ctx = model_ctx_new(m, 3, 16, 1, NULL);
        float *lg = malloc(3 * (size_t)cfg->n_vocab * sizeof *lg);
        int32_t tok[3] = {5, 17, 200}, pos[3] = {0, 1, 2}, seq[3] = {0}, blk = 0;
        bool want3[3] = {true, true, true};
        model_seq_view_t sv = {&blk, 1, NULL, 0, 0};
        model_batch_t b = {3, tok, pos, seq, want3, 1, &sv, NULL};
        ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, lg), 3);
        float lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < 3 * cfg->n_vocab; j++) {
            ck_assert(isfinite(lg[j]));
            lo = fminf(lo, lg[j]);
            hi = fmaxf(hi, lg[j]);
        }
        ck_assert_msg(hi - lo > 0.1f, "type %d: logits span %g", i, hi - lo);
        free(lg);
        model_ctx_destroy(&ctx);
        kern_kv_pool_free(&kv);
        model_destroy(&m);
        unlink(path);
    }
    rmdir(dir);
}
END_TEST

START_TEST(shapes_and_refusals) {
    model_synth_t c = {0};
    ck_assert_int_eq(model_synth_shape("llama-1b", &c), 0);
    ck_assert_int_eq(c.n_layer, 16);
    ck_assert_int_eq(c.d_model, 2048);
    ck_assert_int_eq(c.d_ff, 8192);
    ck_assert_int_eq(c.n_head, 32);
    ck_assert_int_eq(c.n_head_kv, 8);
    ck_assert_int_eq(c.n_vocab, 128256);
    ck_assert_int_eq(model_synth_shape("llama-3b", &c), 0);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(model_synth_shape("gpt-2", &c), -EINVAL);
    char err[256] = "";
    model_synth_t bad = {.wtype = KERN_Q4_K}; /* 64-wide rows: not a multiple of 256 */
    ck_assert_int_eq(model_synth_write("/tmp/never.gguf", &bad, err, sizeof err), -EINVAL);
    ck_assert(access("/tmp/never.gguf", F_OK) != 0);
    model_synth_t q5 = {.wtype = KERN_Q5_0};
    ck_assert_int_eq(model_synth_write("/tmp/never.gguf", &q5, err, sizeof err), -EINVAL);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("model_synth");
    TCase *tc = tcase_create("synth");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_type_loads_and_runs);
    tcase_add_test(tc, shapes_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
