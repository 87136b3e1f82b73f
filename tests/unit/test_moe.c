/* test_moe.c - Mixture-of-Experts llama models (Mixtral layout) on small synthetic
 * GGUFs: bad MoE files are refused with a one-line reason; experts cut from a dense
 * FFN with "unit" gating and K = E reproduce the dense model; a token's logits are
 * bitwise the same alone or in a batch of 37 (F32 and packed Q4_1 experts); the
 * remote-expert hook (model_ctx_set_moe_exec + model_moe_expert_rows) gives bitwise
 * the local result and passes an executor's error through; the FFN tap is called
 * per layer.  (The NumPy oracle, tests/oracle/test_moe_oracle.py, checks the math.) */
#include "model.h"
#include "model_gguf_write.h"
#include "model_quantize.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char DIR_[64];
static char DENSE[128]; /* the synthetic dense model the MoE files derive from */
static const test_synth_t SYN = {.n_layer = 2,
                                 .d_model = 64,
                                 .n_head = 4,
                                 .n_head_kv = 2,
                                 .d_ff = 128,
                                 .n_vocab = 64,
                                 .seed = 7};

/* How to derive an MoE file from DENSE. */
typedef struct {
    int E, K;           /* expert_count / expert_used_count; a key is left out when < 0 */
    const char *gating; /* strata.expert_gating, or NULL: absent */
    bool split_dense;   /* experts = slices of the dense FFN (as moefy) instead of random */
    const char *drop;   /* leave out this tensor suffix (e.g. "ffn_up_exps"), or NULL */
    int bad;            /* ffn_up_exps of a wrong shape: 1 E+1, 2 d_ff*2, 3 d_model*2;
                           4: router of E+1 rows */
} moe_opts_t;

static float *rand_buf(uint64_t *st, size_t n, float amp) {
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = test_rand_f32(st, -amp, amp);
    return p;
}

/* Write the MoE variant of DENSE described by o to path; returns path. */
static const char *make_moe(const char *name, const moe_opts_t *o) {
    static char path[160];
    snprintf(path, sizeof path, "%s/%s.gguf", DIR_, name);
    char err[512];
    model_gguf_t *g = model_gguf_open(DENSE, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_int_eq(model_gguf_write_copy_kvs(w, g), 0);
    int E = o->E > 0 ? o->E : 4, d = SYN.d_model, ff = SYN.d_ff;
    int fe = o->split_dense ? ff / E : ff; /* one expert's width */
    if (o->E >= 0)
        ck_assert_int_eq(model_gguf_write_set_u32(w, "llama.expert_count", (uint32_t)o->E), 0);
    if (o->K >= 0)
        ck_assert_int_eq(model_gguf_write_set_u32(w, "llama.expert_used_count", (uint32_t)o->K), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w, "llama.feed_forward_length", (uint32_t)fe), 0);
    if (o->gating)
        ck_assert_int_eq(model_gguf_write_set_str(w, "strata.expert_gating", o->gating), 0);
    for (int64_t i = 0; i < model_gguf_tensor_count(g); i++) {
        const model_gguf_tensor_t *t = model_gguf_tensor_at(g, i);
        char tn[96];
        snprintf(tn, sizeof tn, "%.*s", (int)t->name.len, t->name.ptr);
        if (strstr(tn, ".ffn_gate.") || strstr(tn, ".ffn_up.") || strstr(tn, ".ffn_down."))
            continue;
        ck_assert_int_ge(
            model_gguf_write_add_tensor(w, tn, t->type, t->n_dims, t->ne, t->data, err, sizeof err),
            0);
    }
    float *bufs[64];
    int nb = 0;
    uint64_t st = 99;
    for (int l = 0; l < SYN.n_layer; l++) {
        char tn[96];
        const float *dg = NULL, *du = NULL, *dd = NULL;
        if (o->split_dense) {
            snprintf(tn, sizeof tn, "blk.%d.ffn_gate.weight", l);
            dg = model_gguf_tensor(g, tn)->data;
            snprintf(tn, sizeof tn, "blk.%d.ffn_up.weight", l);
            du = model_gguf_tensor(g, tn)->data;
            snprintf(tn, sizeof tn, "blk.%d.ffn_down.weight", l);
            dd = model_gguf_tensor(g, tn)->data;
        }
        struct {
            const char *suffix;
            int64_t ne[3];
            const float *data;
        } ts[4] = {
            {"ffn_gate_inp", {d, E, 1}, NULL},
            {"ffn_gate_exps", {d, fe, E}, dg}, /* expert e's gate: rows e*fe.. of the dense */
            {"ffn_up_exps", {d, fe, E}, du},
            {"ffn_down_exps", {fe, d, E}, NULL},
        };
        if (o->bad == 1)
            ts[2].ne[2] = E + 1;
        if (o->bad == 2)
            ts[2].ne[1] = fe * 2;
        if (o->bad == 3)
            ts[2].ne[0] = d * 2;
        if (o->bad == 4)
            ts[0].ne[1] = E + 1;
        for (int i = 0; i < 4; i++) {
            if (o->drop && !strcmp(o->drop, ts[i].suffix))
                continue;
            size_t n = (size_t)ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2];
            const float *data = ts[i].data;
            if (!data) {
                float *b = bufs[nb++] = rand_buf(&st, n, i == 0 ? 1.0f : sqrtf(3.0f / ts[i].ne[0]));
                if (i == 3 && dd) /* expert e's down = columns e*fe.. of the dense down */
                    for (int e = 0; e < E; e++)
                        for (int r = 0; r < d; r++)
                            for (int c = 0; c < fe; c++)
                                b[((size_t)e * d + r) * fe + c] = dd[(size_t)r * ff + e * fe + c];
                data = b;
            }
            snprintf(tn, sizeof tn, "blk.%d.%s.weight", l, ts[i].suffix);
            ck_assert_msg(model_gguf_write_add_tensor(w, tn, KERN_F32, i == 0 ? 2 : 3, ts[i].ne,
                                                      data, err, sizeof err) >= 0,
                          "%s", err);
        }
    }
    ck_assert_msg(model_gguf_write_save(w, path, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
    model_gguf_write_destroy(&w);
    model_gguf_destroy(&g);
    return path;
}

static void expect_refused(const char *name, const moe_opts_t *o, const char *needle) {
    char err[512] = "";
    const char *p = make_moe(name, o);
    model_t *m = model_load(p, err, sizeof err);
    ck_assert_msg(m == NULL, "%s: loaded", name);
    ck_assert_msg(strstr(err, needle), "%s: error '%s' lacks '%s'", name, err, needle);
    ck_assert_msg(!strchr(err, '\n'), "%s: error is not one line: %s", name, err);
    printf("  %s: %s\n", name, err);
}

START_TEST(bad_moe_files_refused) {
    expect_refused("k_gt_e", &(moe_opts_t){.E = 4, .K = 5}, "llama.expert_used_count is 5");
    expect_refused("k_zero", &(moe_opts_t){.E = 4, .K = 0}, "llama.expert_used_count is 0");
    expect_refused("k_missing", &(moe_opts_t){.E = 4, .K = -1},
                   "llama.expert_used_count is missing");
    expect_refused("k_no_e", &(moe_opts_t){.E = -1, .K = 2, .drop = "ffn_gate_inp"},
                   "has no experts");
    expect_refused("no_keys", &(moe_opts_t){.E = -1, .K = -1}, "no llama.expert_count");
    expect_refused("no_down", &(moe_opts_t){.E = 4, .K = 2, .drop = "ffn_down_exps"},
                   "missing tensor 'blk.0.ffn_down_exps.weight'");
    expect_refused("no_router", &(moe_opts_t){.E = 4, .K = 2, .drop = "ffn_gate_inp"},
                   "missing tensor 'blk.0.ffn_gate_inp.weight'");
    expect_refused("wrong_e", &(moe_opts_t){.E = 4, .K = 2, .bad = 1},
                   "'blk.0.ffn_up_exps.weight' has 3 dims [64, 128, 5], expected [64, 128, 4]");
    expect_refused("wrong_dff", &(moe_opts_t){.E = 4, .K = 2, .bad = 2},
                   "[64, 256, 4], expected [64, 128, 4]");
    expect_refused("wrong_dmodel", &(moe_opts_t){.E = 4, .K = 2, .bad = 3},
                   "[128, 128, 4], expected [64, 128, 4]");
    expect_refused("wrong_router", &(moe_opts_t){.E = 4, .K = 2, .bad = 4},
                   "'blk.0.ffn_gate_inp.weight' has shape [64, 5], expected [64, 4]");
    expect_refused("bad_gating", &(moe_opts_t){.E = 4, .K = 2, .gating = "top1"},
                   "unknown strata.expert_gating 'top1' (valid: softmax_topk, softmax_all, unit)");
}
END_TEST

/* A dense variant of DENSE: tensor blk.0.<drop> left out, or blk.0.<reshape> written with
 * one row more (both NULL: an unchanged copy). */
static const char *make_dense(const char *name, const char *drop, const char *reshape) {
    static char path[160];
    snprintf(path, sizeof path, "%s/%s.gguf", DIR_, name);
    char err[512], want[96] = "", bad[96] = "";
    if (drop)
        snprintf(want, sizeof want, "blk.0.%s.weight", drop);
    if (reshape)
        snprintf(bad, sizeof bad, "blk.0.%s.weight", reshape);
    model_gguf_t *g = model_gguf_open(DENSE, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_int_eq(model_gguf_write_copy_kvs(w, g), 0);
    float *grown = NULL;
    for (int64_t i = 0; i < model_gguf_tensor_count(g); i++) {
        const model_gguf_tensor_t *t = model_gguf_tensor_at(g, i);
        char tn[96];
        snprintf(tn, sizeof tn, "%.*s", (int)t->name.len, t->name.ptr);
        if (!strcmp(tn, want))
            continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        const void *data = t->data;
        if (!strcmp(tn, bad)) { /* one more row of zeros */
            ck_assert_int_eq(t->type, KERN_F32);
            ne[1]++;
            grown = calloc((size_t)ne[0] * ne[1], sizeof *grown);
            memcpy(grown, t->data, (size_t)t->ne[0] * t->ne[1] * sizeof *grown);
            data = grown;
        }
        ck_assert_int_ge(
            model_gguf_write_add_tensor(w, tn, t->type, t->n_dims, ne, data, err, sizeof err), 0);
    }
    ck_assert_msg(model_gguf_write_save(w, path, err, sizeof err) == 0, "%s", err);
    free(grown);
    model_gguf_write_destroy(&w);
    model_gguf_destroy(&g);
    return path;
}

/* The dense declaration's tensors are checked as the MoE ones are: one line naming the
 * tensor and, for a wrong shape, both shapes. */
START_TEST(bad_dense_files_refused) {
    char err[512];
    const char *p = make_dense("dense_copy", NULL, NULL);
    model_t *m = model_load(p, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    model_destroy(&m);
    struct {
        const char *drop, *reshape, *needle;
    } cases[] = {
        {"ffn_up", NULL, "missing tensor 'blk.0.ffn_up.weight' (architecture llama)"},
        {"attn_norm", NULL, "missing tensor 'blk.0.attn_norm.weight' (architecture llama)"},
        {NULL, "attn_k", "tensor 'blk.0.attn_k.weight' has shape [64, 33], expected [64, 32]"},
        {NULL, "ffn_down",
         "tensor 'blk.0.ffn_down.weight' has shape [128, 65], expected [128, 64]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p = make_dense("dense_bad", cases[i].drop, cases[i].reshape);
        ck_assert_ptr_null(model_load(p, err, sizeof err));
        ck_assert_msg(strstr(err, cases[i].needle), "error '%s' lacks '%s'", err, cases[i].needle);
        ck_assert_msg(!strchr(err, '\n'), "error is not one line: %s", err);
        printf("  dense: %s\n", err);
    }
}
END_TEST

/* ---- running sequences */

static const int32_t A[] = {5, 17, 33, 8, 61, 40, 12, 9, 27, 3, 50, 44};
#define NA (int)(sizeof A / sizeof A[0])

/* Logits (n, n_vocab) of toks run as one sequence in chunks, malloc'd. */
static float *run_seq(model_t *m, model_ctx_t *ctx, const int32_t *toks, int n, int chunk) {
    const model_config_t *cfg = model_config(m);
    kern_kv_shape_t shape = model_kv_shape(cfg, 16);
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &shape, KERN_F32, 4), 0);
    float *out = malloc((size_t)n * cfg->n_vocab * sizeof(float));
    int32_t pos[64], seq[64] = {0}, blocks[] = {0, 1, 2, 3};
    bool want[64];
    model_seq_view_t sv = {blocks, 4, NULL, 0, 0};
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        for (int j = 0; j < k; j++) {
            pos[j] = i + j;
            want[j] = true;
        }
        model_batch_t b = {k, toks + i, pos, seq, want, 1, &sv, NULL};
        int rc = model_ctx_forward(ctx, &b, &kv, out + (size_t)i * cfg->n_vocab);
        if (rc != k) {
            free(out);
            kern_kv_pool_free(&kv);
            return NULL;
        }
    }
    kern_kv_pool_free(&kv);
    return out;
}

static model_t *load(const char *path) {
    char err[512];
    model_t *m = model_load(path, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    return m;
}

/* Experts cut from the dense FFN (gate/up rows, down columns), all K = E used with
 * weight 1: the same sum as the dense FFN, in another order. */
START_TEST(moefy_unit_equals_dense) {
    model_t *dm = load(DENSE);
    model_t *mm = load(
        make_moe("split", &(moe_opts_t){.E = 4, .K = 4, .gating = "unit", .split_dense = true}));
    const model_config_t *mc = model_config(mm);
    ck_assert_int_eq(mc->n_expert, 4);
    ck_assert_int_eq(mc->n_expert_used, 4);
    ck_assert_int_eq(mc->gating, MODEL_GATING_UNIT);
    ck_assert_int_eq(mc->d_ff, 32);
    model_ctx_t *c1 = model_ctx_new(dm, 16, 64, 2, NULL), *c2 = model_ctx_new(mm, 16, 64, 2, NULL);
    float *a = run_seq(dm, c1, A, NA, 16), *b = run_seq(mm, c2, A, NA, 16);
    int nv = mc->n_vocab;
    double worst = 0, scale = 0;
    for (int i = 0; i < NA * nv; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    printf("moefy unit K=E vs dense: max |diff| %.3g (max |logit| %.3g)\n", worst, scale);
    ck_assert_msg(worst < 1e-4 * scale, "MoE of the cut dense FFN differs by %.3g", worst);
    free(a);
    free(b);
    model_ctx_destroy(&c1);
    model_ctx_destroy(&c2);
    model_destroy(&dm);
    model_destroy(&mm);
}
END_TEST

/* Sequence A alone (1 thread, token by token and in one chunk) and inside a batch of
 * 37 tokens from four sequences (2 threads): bitwise equal logits. */
static void check_batch_invariance(const char *path) {
    model_t *m = load(path);
    const model_config_t *cfg = model_config(m);
    int nv = cfg->n_vocab;
    model_ctx_t *c1 = model_ctx_new(m, 64, 64, 1, NULL), *c2 = model_ctx_new(m, 64, 64, 2, NULL);
    float *alone = run_seq(m, c1, A, NA, 64), *dec = run_seq(m, c1, A, NA, 1);
    ck_assert_int_eq(memcmp(alone, dec, (size_t)NA * nv * sizeof(float)), 0);
    kern_kv_shape_t shape = model_kv_shape(cfg, 16);
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &shape, KERN_F32, 8), 0);
    int32_t blk[4][1] = {{0}, {3}, {5}, {7}};
    model_seq_view_t sv[4] = {{blk[0], 1, NULL, 0, 0},
                              {blk[1], 1, NULL, 0, 0},
                              {blk[2], 1, NULL, 0, 0},
                              {blk[3], 1, NULL, 0, 0}};
    int32_t toks[37], pos[37], seq[37], np[4] = {0};
    bool want[37];
    uint64_t st = 5;
    for (int i = 0; i < 37; i++) { /* A's tokens spread among three others' */
        int s = i % 3 == 0 && np[0] < NA ? 0 : 1 + (int)(test_rand_u64(&st) % 3);
        toks[i] = s == 0 ? A[np[0]] : 3 + (int)(test_rand_u64(&st) % (uint64_t)(nv - 3));
        pos[i] = np[s]++;
        seq[i] = s;
        want[i] = true;
    }
    ck_assert_int_eq(np[0], NA);
    float *out = malloc((size_t)37 * nv * sizeof(float));
    model_batch_t b = {37, toks, pos, seq, want, 4, sv, NULL};
    ck_assert_int_eq(model_ctx_forward(c2, &b, &kv, out), 37);
    for (int i = 0; i < 37; i++)
        if (seq[i] == 0)
            ck_assert_msg(!memcmp(out + (size_t)i * nv, alone + (size_t)pos[i] * nv,
                                  (size_t)nv * sizeof(float)),
                          "%s: position %d differs in the batch", path, pos[i]);
    free(out);
    free(alone);
    free(dec);
    kern_kv_pool_free(&kv);
    model_ctx_destroy(&c1);
    model_ctx_destroy(&c2);
    model_destroy(&m);
}

START_TEST(batch_invariant) {
    const char *f32 = make_moe("topk", &(moe_opts_t){.E = 4, .K = 2});
    check_batch_invariance(f32);
    char q41[200], err[512];
    snprintf(q41, sizeof q41, "%s/topk_q4_1.gguf", DIR_);
    ck_assert_msg(model_quantize(f32, q41, "q4_1", 1, NULL, err, sizeof err) == 0, "%s", err);
    check_batch_invariance(q41); /* packed per-expert kernels (where the table has them) */
    const char *all = make_moe("all", &(moe_opts_t){.E = 8, .K = 2, .gating = "softmax_all"});
    check_batch_invariance(all);
}
END_TEST

/* ---- the remote-expert hook: an "actor" with its own context runs the rows */

typedef struct {
    model_ctx_t *remote; /* the expert actor's context */
    int calls;
    int fail; /* return this error instead (0: work) */
} remote_t;

static int remote_exec(void *user, const model_moe_call_t *call) {
    remote_t *r = user;
    r->calls++;
    if (r->fail)
        return r->fail;
    /* the router logits come with the rows: a row's expert is among its token's K
     * largest (K = n_rows / n_tokens) */
    ck_assert(call->logits && call->n_expert > 0 && call->n_rows % call->n_tokens == 0);
    for (int i = 0; i < call->n_rows; i++) {
        const float *lg = call->logits + (size_t)call->token[i] * call->n_expert;
        int above = 0;
        for (int f = 0; f < call->n_expert; f++)
            above += lg[f] > lg[call->expert[i]];
        ck_assert_int_lt(above, call->n_rows / call->n_tokens);
    }
    /* rows come grouped by expert: run each group through model_moe_expert_rows */
    float *hb = malloc((size_t)(call->n_rows + 1) * call->d_model * sizeof(float));
    for (int i = 0; i < call->n_rows;) {
        int j = i;
        while (j < call->n_rows && call->expert[j] == call->expert[i]) {
            ck_assert(j == i || call->token[j] > call->token[j - 1]);
            memcpy(hb + (size_t)(j - i) * call->d_model,
                   call->h + (size_t)call->token[j] * call->d_model, call->d_model * sizeof(float));
            j++;
        }
        ck_assert(j == call->n_rows || call->expert[j] > call->expert[i]);
        int rc = model_moe_expert_rows(r->remote, call->layer, call->expert[i], j - i, hb,
                                       call->y + (size_t)i * call->d_model);
        ck_assert_int_eq(rc, 0);
        i = j;
    }
    free(hb);
    return 0;
}

START_TEST(remote_experts_bitwise) {
    const char *f32 = make_moe("topk", &(moe_opts_t){.E = 4, .K = 2});
    char q41[200], err[512];
    snprintf(q41, sizeof q41, "%s/topk_q4_1.gguf", DIR_);
    ck_assert_msg(model_quantize(f32, q41, "q4_1", 1, NULL, err, sizeof err) == 0, "%s", err);
    model_t *m = load(q41);
    int nv = model_config(m)->n_vocab;
    model_ctx_t *local = model_ctx_new(m, 8, 64, 2, NULL), *c = model_ctx_new(m, 8, 64, 1, NULL);
    /* a remote context with few rows: model_moe_expert_rows works in chunks */
    remote_t r = {.remote = model_ctx_new(m, 2, 8, 3, NULL)};
    float h0[64] = {0}, y0[64];
    ck_assert_int_eq(model_moe_expert_rows(r.remote, 0, 4, 1, h0, y0), -EINVAL); /* no expert 4 */
    ck_assert_int_eq(model_moe_expert_rows(r.remote, 2, 0, 1, h0, y0), -EINVAL); /* no layer 2 */
    float *want = run_seq(m, local, A, NA, 8);
    model_ctx_set_moe_exec(c, remote_exec, &r);
    float *got = run_seq(m, c, A, NA, 8);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(r.calls, 2 * 2); /* two steps (8 + 4 tokens) x two layers */
    ck_assert_msg(!memcmp(want, got, (size_t)NA * nv * sizeof(float)),
                  "remote experts differ from local ones");
    r.fail = -EHOSTUNREACH;
    ck_assert_ptr_null(run_seq(m, c, A, NA, 8)); /* the step fails with the executor's error */
    int32_t pos = 0, seq = 0, blocks[] = {0};
    bool wnt = true;
    model_seq_view_t sv = {blocks, 1, NULL, 0, 0};
    kern_kv_shape_t shape = model_kv_shape(model_config(m), 16);
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &shape, KERN_F32, 1), 0);
    model_batch_t b = {1, A, &pos, &seq, &wnt, 1, &sv, NULL};
    float lg[64];
    ck_assert_int_eq(model_ctx_forward(c, &b, &kv, lg), -EHOSTUNREACH);
    model_ctx_set_moe_exec(c, NULL, NULL); /* back to local experts */
    ck_assert_int_eq(model_ctx_forward(c, &b, &kv, lg), 1);
    ck_assert(!memcmp(lg, want, sizeof lg));
    kern_kv_pool_free(&kv);
    free(want);
    free(got);
    model_ctx_destroy(&local);
    model_ctx_destroy(&c);
    model_ctx_destroy(&r.remote);
    model_destroy(&m);
}
END_TEST

/* ---- the FFN tap */

typedef struct {
    int calls, next_layer, n_tokens, with_act;
    double act_sum;
} tap_t;

static void tap(void *user, int layer, int n_tokens, const float *h, int d_model, const float *act,
                int d_ff) {
    tap_t *t = user;
    ck_assert_int_eq(layer, t->next_layer);
    t->next_layer = (layer + 1) % SYN.n_layer;
    t->calls++;
    t->n_tokens = n_tokens;
    ck_assert_int_eq(d_model, SYN.d_model);
    ck_assert(isfinite(h[(size_t)n_tokens * d_model - 1]));
    if (act) {
        t->with_act++;
        for (int i = 0; i < n_tokens * d_ff; i++)
            t->act_sum += act[i];
    }
}

START_TEST(ffn_tap_per_layer) {
    model_t *dm = load(DENSE);
    model_t *mm = load(make_moe("topk", &(moe_opts_t){.E = 4, .K = 2}));
    model_ctx_t *c = model_ctx_new(dm, 8, 64, 2, NULL), *cm = model_ctx_new(mm, 8, 64, 2, NULL);
    tap_t t = {0};
    model_ctx_set_ffn_tap(c, tap, &t);
    float *a = run_seq(dm, c, A, NA, 8); /* steps of 8 and 4 tokens */
    ck_assert_int_eq(t.calls, 4);
    ck_assert_int_eq(t.with_act, 4);
    ck_assert_int_eq(t.n_tokens, 4);
    ck_assert(t.act_sum != 0 && isfinite(t.act_sum));
    model_ctx_set_ffn_tap(c, NULL, NULL);
    float *b = run_seq(dm, c, A, NA, 8);
    ck_assert_int_eq(t.calls, 4);
    ck_assert(
        !memcmp(a, b, (size_t)NA * SYN.n_vocab * sizeof(float))); /* the tap changes nothing */
    tap_t tm = {0};
    model_ctx_set_ffn_tap(cm, tap, &tm);
    float *m = run_seq(mm, cm, A, NA, 8);
    ck_assert_int_eq(tm.calls, 4);
    ck_assert_int_eq(tm.with_act, 0); /* MoE layers: act NULL */
    free(a);
    free(b);
    free(m);
    model_ctx_destroy(&c);
    model_ctx_destroy(&cm);
    model_destroy(&dm);
    model_destroy(&mm);
}
END_TEST

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", DIR_);
}

int main(int argc, char **argv) {
    snprintf(DIR_, sizeof DIR_, "/tmp/strata_moe_XXXXXX");
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(DENSE, sizeof DENSE, "%s/dense.gguf", DIR_);
    char err[512];
    if (test_synth_model(DENSE, &SYN, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        cleanup();
        return 1;
    }
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("moe");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bad_moe_files_refused);
    tcase_add_test(tc, bad_dense_files_refused);
    tcase_add_test(tc, moefy_unit_equals_dense);
    tcase_add_test(tc, batch_invariant);
    tcase_add_test(tc, remote_experts_bitwise);
    tcase_add_test(tc, ffn_tap_per_layer);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(argc, argv, s, CK_NOFORK);
    cleanup();
    return rc;
}
