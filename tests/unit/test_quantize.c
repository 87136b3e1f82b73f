/* test_quantize.c - the GGUF writer (write, reopen with the reader, compare) and
 * model_quantize on tiny hand-made models (types chosen per tensor, values kept). */
#include "kern_ops.h"
#include "model_gguf.h"
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

static char s_dir[256];

static void s_setup(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/strata_test_quantize.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s_dir));
}

static void s_teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void s_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", s_dir, name);
}

static void s_fill_rand(float *x, int n, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < n; i++)
        x[i] = test_rand_f32(&s, -1.0f, 1.0f);
}

/* Fill callback for the writer test: tensor i's byte k is (i + k) & 0xff. */
static int s_fill_pattern(void *arg, int64_t i, void *dst, size_t nbytes) {
    int *calls = arg;
    (*calls)++;
    for (size_t k = 0; k < nbytes; k++)
        ((uint8_t *)dst)[k] = (uint8_t)((size_t)i + k);
    return 0;
}

START_TEST(test_write_roundtrip) {
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(model_gguf_write_set_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w, "general.alignment", 64), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w, "llama.block_count", 7), 0);
    ck_assert_int_eq(model_gguf_write_set_f32(w, "llama.rope.freq_base", 100000.0f), 0);
    ck_assert_int_eq(model_gguf_write_set_bool(w, "x.flag", true), 0);
    ck_assert_int_eq(model_gguf_write_set_i32(w, "x.neg", -5), 0);
    ck_assert_int_eq(model_gguf_write_set_u64(w, "x.big", 1ull << 40), 0);
    int32_t arr[3] = {1, -2, 3};
    ck_assert_int_eq(model_gguf_write_set_arr(w, "x.arr", GGUF_INT32, 3, arr), 0);
    const char *strs[3] = {"a", "", "<|im_end|>"};
    ck_assert_int_eq(model_gguf_write_set_arr_str(w, "x.strs", strs, 3), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w, "llama.block_count", 30), 0); /* replaces */
    ck_assert_int_eq(model_gguf_write_kv_count(w), 9);

    float a[3 * 8];
    s_fill_rand(a, 24, 1);
    char err[256] = "";
    int64_t ne_a[2] = {8, 3}, ne_b[1] = {32}, ne_c[3] = {32, 2, 2};
    ck_assert_int_eq(model_gguf_write_add_tensor(w, "a", KERN_F32, 2, ne_a, a, err, sizeof err), 0);
    ck_assert_int_eq(model_gguf_write_add_tensor(w, "b", KERN_Q8_0, 1, ne_b, NULL, err, sizeof err),
                     1);
    ck_assert_int_eq(model_gguf_write_add_tensor(w, "c", KERN_F16, 3, ne_c, NULL, err, sizeof err),
                     2);
    /* errors: duplicate name, a row that is not a whole number of blocks */
    ck_assert_int_eq(model_gguf_write_add_tensor(w, "a", KERN_F32, 2, ne_a, a, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "twice"));
    ck_assert_int_eq(model_gguf_write_add_tensor(w, "d", KERN_Q8_0, 2, ne_a, a, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "block"));

    int calls = 0;
    model_gguf_write_set_fill(w, s_fill_pattern, &calls);
    char path[512];
    s_path(path, sizeof path, "w.gguf");
    ck_assert_int_eq(model_gguf_write_save(w, path, err, sizeof err), 0);
    ck_assert_int_eq(calls, 2);
    model_gguf_write_destroy(&w);
    ck_assert_ptr_null(w);
    model_gguf_write_destroy(&w); /* safe twice */

    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_uint_eq(model_gguf_version(g), 3);
    ck_assert_uint_eq(model_gguf_alignment(g), 64);
    ck_assert_uint_eq(model_gguf_data_offset(g) % 64, 0);
    ck_assert_int_eq(model_gguf_kv_count(g), 9);
    char *s = NULL;
    ck_assert(model_gguf_get_str(g, "general.architecture", &s));
    ck_assert_str_eq(s, "llama");
    free(s);
    uint64_t u = 0;
    ck_assert(model_gguf_get_u64(g, "llama.block_count", &u));
    ck_assert_uint_eq(u, 30);
    ck_assert(model_gguf_get_u64(g, "x.big", &u));
    ck_assert_uint_eq(u, 1ull << 40);
    int64_t i64 = 0;
    ck_assert(model_gguf_get_i64(g, "x.neg", &i64));
    ck_assert_int_eq(i64, -5);
    double f = 0;
    ck_assert(model_gguf_get_f64(g, "llama.rope.freq_base", &f));
    ck_assert_double_eq(f, 100000.0);
    bool b = false;
    ck_assert(model_gguf_get_bool(g, "x.flag", &b));
    ck_assert(b);
    model_gguf_vtype_t et;
    uint64_t len;
    ck_assert(model_gguf_get_arr(g, "x.arr", &et, &len));
    ck_assert_int_eq(et, GGUF_INT32);
    ck_assert_uint_eq(len, 3);
    ck_assert(model_gguf_arr_num(g, "x.arr", 1, &f));
    ck_assert_double_eq(f, -2.0);
    model_gguf_str_t str;
    ck_assert(model_gguf_arr_str(g, "x.strs", 2, &str));
    ck_assert(model_gguf_str_eq(str, "<|im_end|>"));
    ck_assert(model_gguf_arr_str(g, "x.strs", 1, &str));
    ck_assert_uint_eq(str.len, 0);

    ck_assert_int_eq(model_gguf_tensor_count(g), 3);
    const model_gguf_tensor_t *ta = model_gguf_tensor(g, "a");
    ck_assert_ptr_nonnull(ta);
    ck_assert_int_eq(ta->type, KERN_F32);
    ck_assert_int_eq(ta->n_dims, 2);
    ck_assert_int_eq(ta->ne[0], 8);
    ck_assert_int_eq(ta->ne[1], 3);
    ck_assert_mem_eq(ta->data, a, sizeof a);
    const model_gguf_tensor_t *tb = model_gguf_tensor(g, "b");
    ck_assert_int_eq(tb->type, KERN_Q8_0);
    ck_assert_uint_eq(tb->nbytes, sizeof(kern_block_q8_0));
    ck_assert_uint_eq(((const uint8_t *)tb->data)[5], 6); /* tensor 1, byte 5 */
    const model_gguf_tensor_t *tc = model_gguf_tensor(g, "c");
    ck_assert_int_eq(tc->n_dims, 3);
    ck_assert_int_eq(tc->ne[2], 2);
    ck_assert_uint_eq(tc->nbytes, 32 * 2 * 2 * 2);
    ck_assert_uint_eq(((const uint8_t *)tc->data)[100], 102);
    for (int64_t i = 0; i < 3; i++)
        ck_assert_uint_eq(model_gguf_tensor_at(g, i)->offset % 64, 0);

    /* copy the metadata into a second file, override one key */
    model_gguf_write_t *w2 = model_gguf_write_new();
    ck_assert_int_eq(model_gguf_write_copy_kvs(w2, g), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w2, "general.file_type", 7), 0);
    model_gguf_write_remove(w2, "general.alignment");
    ck_assert_int_eq(model_gguf_write_kv_count(w2), 9);
    char path2[512];
    s_path(path2, sizeof path2, "w2.gguf");
    ck_assert_int_eq(model_gguf_write_save(w2, path2, err, sizeof err), 0);
    model_gguf_write_destroy(&w2);
    model_gguf_t *g2 = model_gguf_open(path2, err, sizeof err);
    ck_assert_msg(g2 != NULL, "%s", err);
    ck_assert_uint_eq(model_gguf_alignment(g2), 32);
    ck_assert(model_gguf_get_u64(g2, "general.file_type", &u));
    ck_assert_uint_eq(u, 7);
    ck_assert(model_gguf_arr_str(g2, "x.strs", 2, &str));
    ck_assert(model_gguf_str_eq(str, "<|im_end|>"));
    ck_assert(model_gguf_get_f64(g2, "llama.rope.freq_base", &f));
    ck_assert_double_eq(f, 100000.0);
    ck_assert_int_eq(model_gguf_tensor_count(g2), 0);
    model_gguf_destroy(&g2);
    model_gguf_destroy(&g);
}
END_TEST

START_TEST(test_write_errors) {
    model_gguf_write_t *w = model_gguf_write_new();
    char err[256] = "";
    int64_t ne[1] = {32};
    ck_assert_int_eq(model_gguf_write_add_tensor(w, "t", KERN_F32, 1, ne, NULL, err, sizeof err),
                     0);
    char path[512];
    s_path(path, sizeof path, "nofill.gguf");
    ck_assert_int_lt(model_gguf_write_save(w, path, err, sizeof err), 0); /* no data, no fill */
    ck_assert_int_ne(access(path, F_OK), 0);                              /* nothing left */
    ck_assert_int_lt(model_gguf_write_save(w, "/nonexistent-dir/x.gguf", err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "nonexistent-dir"));
    model_gguf_write_destroy(&w);
}
END_TEST

/* A tiny llama-shaped model in F32: two matrices, a norm, an embedding. */
static void s_write_tiny(const char *path, int row) {
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_int_eq(model_gguf_write_set_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w, "general.file_type", 0), 0);
    ck_assert_int_eq(model_gguf_write_set_u32(w, "llama.embedding_length", (uint32_t)row), 0);
    static float q[4 * 256], norm[256], emb[8 * 256], odd[2 * 48];
    s_fill_rand(q, 4 * row, 2);
    s_fill_rand(norm, row, 3);
    s_fill_rand(emb, 8 * row, 4);
    s_fill_rand(odd, 2 * 48, 5);
    q[5] = 7.5f; /* an outlier: its block's scale must follow it */
    char err[256];
    int64_t ne_q[2] = {row, 4}, ne_n[1] = {row}, ne_e[2] = {row, 8}, ne_o[2] = {48, 2};
    ck_assert_int_ge(model_gguf_write_add_tensor(w, "token_embd.weight", KERN_F32, 2, ne_e, emb,
                                                 err, sizeof err),
                     0);
    ck_assert_int_ge(model_gguf_write_add_tensor(w, "blk.0.attn_norm.weight", KERN_F32, 1, ne_n,
                                                 norm, err, sizeof err),
                     0);
    ck_assert_int_ge(model_gguf_write_add_tensor(w, "blk.0.attn_q.weight", KERN_F32, 2, ne_q, q,
                                                 err, sizeof err),
                     0);
    ck_assert_int_ge(
        model_gguf_write_add_tensor(w, "blk.0.odd.weight", KERN_F32, 2, ne_o, odd, err, sizeof err),
        0);
    ck_assert_int_eq(model_gguf_write_save(w, path, err, sizeof err), 0);
    model_gguf_write_destroy(&w);
}

/* Max |a - b| over a tensor of the quantized model vs the same tensor of the source. */
static float s_max_err(const model_gguf_t *src, const model_gguf_t *dst, const char *name,
                       float *max_abs_src) {
    const model_gguf_tensor_t *a = model_gguf_tensor(src, name), *b = model_gguf_tensor(dst, name);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(a->n_dims, b->n_dims);
    ck_assert_int_eq(a->ne[0], b->ne[0]);
    ck_assert_int_eq(a->ne[1], b->ne[1]);
    int64_t n = a->ne[0] * a->ne[1];
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    const kern_ops_t *ref = kern_ops_ref();
    int64_t rows = a->ne[1];
    for (int64_t r = 0; r < rows; r++) {
        ref->dequant_row(a->type, (const uint8_t *)a->data + r * kern_row_size(a->type, a->ne[0]),
                         x + r * a->ne[0], a->ne[0]);
        ref->dequant_row(b->type, (const uint8_t *)b->data + r * kern_row_size(b->type, b->ne[0]),
                         y + r * a->ne[0], a->ne[0]);
    }
    float e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmaxf(e, fabsf(x[i] - y[i]));
        m = fmaxf(m, fabsf(x[i]));
    }
    free(x);
    free(y);
    if (max_abs_src)
        *max_abs_src = m;
    return e;
}

START_TEST(test_quantize_q8_0) {
    char in[512], out[512], err[512] = "";
    s_path(in, sizeof in, "tiny.gguf");
    s_path(out, sizeof out, "tiny-q8_0.gguf");
    s_write_tiny(in, 64);
    int rc = model_quantize(in, out, "q8_0", 2, NULL, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    model_gguf_t *src = model_gguf_open(in, err, sizeof err);
    model_gguf_t *g = model_gguf_open(out, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    uint64_t ft = 0;
    ck_assert(model_gguf_get_u64(g, "general.file_type", &ft));
    ck_assert_uint_eq(ft, 7);
    char *arch = NULL;
    ck_assert(model_gguf_get_str(g, "general.architecture", &arch));
    ck_assert_str_eq(arch, "llama");
    free(arch);
    ck_assert_int_eq(model_gguf_tensor_count(g), 4);
    ck_assert_int_eq(model_gguf_tensor(g, "blk.0.attn_norm.weight")->type, KERN_F32);
    ck_assert_int_eq(model_gguf_tensor(g, "blk.0.attn_q.weight")->type, KERN_Q8_0);
    ck_assert_int_eq(model_gguf_tensor(g, "token_embd.weight")->type, KERN_Q8_0);
    ck_assert_int_eq(model_gguf_tensor(g, "blk.0.odd.weight")->type, KERN_F16); /* 48 % 32 */
    /* norms are copied exactly */
    ck_assert_float_eq(s_max_err(src, g, "blk.0.attn_norm.weight", NULL), 0.0f);
    /* Q8_0 error per element is at most half a step, d/2 = amax/254, plus the f16
     * rounding of d; values are in [-1, 1) except one outlier of 7.5 in its block */
    float amax;
    float e = s_max_err(src, g, "token_embd.weight", &amax);
    ck_assert_msg(e <= 1.0f / 254 * 1.01f, "token_embd max err %g", e);
    e = s_max_err(src, g, "blk.0.attn_q.weight", &amax);
    ck_assert_float_eq(amax, 7.5f);
    ck_assert_msg(e <= 7.5f / 254 * 1.01f, "attn_q max err %g", e);
    model_gguf_destroy(&g);
    model_gguf_destroy(&src);
}
END_TEST

/* A model with its own output matrix: token_embd and output.weight, rows of row. */
static void s_write_tiny_out(const char *path, int row) {
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_int_eq(model_gguf_write_set_str(w, "general.architecture", "llama"), 0);
    static float emb[8 * 256], out[8 * 256];
    s_fill_rand(emb, 8 * row, 6);
    s_fill_rand(out, 8 * row, 7);
    char err[256];
    int64_t ne[2] = {row, 8};
    ck_assert_int_ge(
        model_gguf_write_add_tensor(w, "token_embd.weight", KERN_F32, 2, ne, emb, err, sizeof err),
        0);
    ck_assert_int_ge(
        model_gguf_write_add_tensor(w, "output.weight", KERN_F32, 2, ne, out, err, sizeof err), 0);
    ck_assert_int_eq(model_gguf_write_save(w, path, err, sizeof err), 0);
    model_gguf_write_destroy(&w);
}

/* The type model_quantize gave tensor name of the model at path. */
static kern_type_t s_type_of(const char *path, const char *name) {
    char err[256];
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    const model_gguf_tensor_t *t = model_gguf_tensor(g, name);
    ck_assert_msg(t != NULL, "%s: no %s", path, name);
    kern_type_t ty = t->type;
    model_gguf_destroy(&g);
    return ty;
}

/* The K types follow llama.cpp's llama_tensor_get_type: rows that cannot hold
 * 256-element super-blocks fall back (q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, then f16
 * when not a multiple of 32), and the output matrix takes q6_k (q8_0 when its rows are
 * not a multiple of 256); the summary counts each type and lists the fallbacks. */
START_TEST(test_quantize_k_fallbacks) {
    char in[512], out[512], err[512] = "";
    s_path(in, sizeof in, "tiny64.gguf");
    s_path(out, sizeof out, "tiny-q4_k.gguf");
    s_write_tiny(in, 64); /* rows of 64: not a multiple of 256; token_embd is the output */
    model_quantize_summary_t sum;
    memset(&sum, 0xAB, sizeof sum); /* written on success */
    int rc = model_quantize(in, out, "Q4_K", 1, &sum, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(s_type_of(out, "blk.0.attn_q.weight"), KERN_Q5_0);
    ck_assert_int_eq(s_type_of(out, "blk.0.odd.weight"), KERN_F16); /* 48 % 32 */
    ck_assert_int_eq(s_type_of(out, "blk.0.attn_norm.weight"), KERN_F32);
    ck_assert_int_eq(s_type_of(out, "token_embd.weight"), KERN_Q8_0);
    ck_assert_int_eq(sum.n_tensors, 4);
    ck_assert_int_eq(sum.count[KERN_Q5_0], 1);
    ck_assert_int_eq(sum.count[KERN_F16], 1);
    ck_assert_int_eq(sum.count[KERN_F32], 1);
    ck_assert_int_eq(sum.count[KERN_Q8_0], 1);
    ck_assert_int_eq(sum.count[KERN_Q4_K], 0);
    ck_assert_int_eq(sum.n_fallback, 2); /* token_embd's q8_0 is a rule, not a fallback */
    ck_assert_str_eq(sum.fallback[0].name, "blk.0.attn_q.weight");
    ck_assert_int_eq(sum.fallback[0].want, KERN_Q4_K);
    ck_assert_int_eq(sum.fallback[0].got, KERN_Q5_0);
    ck_assert_int_eq(sum.fallback[0].row, 64);
    ck_assert_str_eq(sum.fallback[1].name, "blk.0.odd.weight");
    ck_assert_int_eq(sum.fallback[1].got, KERN_F16);
    model_quantize_summary_clear(&sum);
    model_quantize_summary_clear(&sum); /* safe twice */

    /* the other K types' fallbacks */
    ck_assert_int_eq(model_quantize(in, out, "q5_k", 1, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s_type_of(out, "blk.0.attn_q.weight"), KERN_Q5_1);
    ck_assert_int_eq(s_type_of(out, "token_embd.weight"), KERN_Q8_0);
    ck_assert_int_eq(model_quantize(in, out, "q6_k", 1, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s_type_of(out, "blk.0.attn_q.weight"), KERN_Q8_0);
    ck_assert_int_eq(s_type_of(out, "blk.0.odd.weight"), KERN_F16);
    /* a 32-element target keeps its rules: q8_0 embedding, f16 for rows of 48 */
    ck_assert_int_eq(model_quantize(in, out, "q4_1", 1, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s_type_of(out, "blk.0.attn_q.weight"), KERN_Q4_1);
    ck_assert_int_eq(s_type_of(out, "token_embd.weight"), KERN_Q8_0);
    ck_assert_int_eq(s_type_of(out, "blk.0.odd.weight"), KERN_F16);

    /* rows of 256: the K-quant itself, and q6_k for the (tied) output matrix */
    s_path(in, sizeof in, "tiny256.gguf");
    s_write_tiny(in, 256);
    rc = model_quantize(in, out, "q4_k", 2, &sum, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(sum.count[KERN_Q4_K], 1);
    ck_assert_int_eq(sum.count[KERN_Q6_K], 1);
    ck_assert_int_eq(sum.n_fallback, 1); /* the odd rows of 48 */
    model_quantize_summary_clear(&sum);
    model_gguf_t *src = model_gguf_open(in, err, sizeof err);
    model_gguf_t *g = model_gguf_open(out, err, sizeof err);
    ck_assert_int_eq(model_gguf_tensor(g, "blk.0.attn_q.weight")->type, KERN_Q4_K);
    ck_assert_int_eq(model_gguf_tensor(g, "token_embd.weight")->type, KERN_Q6_K);
    float amax;
    float e = s_max_err(src, g, "blk.0.attn_q.weight", &amax);
    ck_assert_msg(e < amax / 8, "q4_k max err %g (amax %g)", e, amax); /* 4 bits: coarse */
    e = s_max_err(src, g, "token_embd.weight", &amax);
    ck_assert_msg(e < amax / 30, "q6_k max err %g (amax %g)", e, amax);
    model_gguf_destroy(&g);
    model_gguf_destroy(&src);

    /* a separate output.weight: it takes q6_k (q8_0 for rows of 64), token_embd the target */
    s_write_tiny_out(in, 256);
    ck_assert_int_eq(model_quantize(in, out, "q5_k", 1, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s_type_of(out, "token_embd.weight"), KERN_Q5_K);
    ck_assert_int_eq(s_type_of(out, "output.weight"), KERN_Q6_K);
    s_write_tiny_out(in, 64);
    ck_assert_int_eq(model_quantize(in, out, "q4_k", 1, NULL, err, sizeof err), 0);
    ck_assert_int_eq(s_type_of(out, "token_embd.weight"), KERN_Q5_0);
    ck_assert_int_eq(s_type_of(out, "output.weight"), KERN_Q8_0);
}
END_TEST

START_TEST(test_quantize_errors) {
    char in[512], out[512], err[512] = "";
    s_path(in, sizeof in, "tiny.gguf");
    s_path(out, sizeof out, "out.gguf");
    s_write_tiny(in, 64);
    ck_assert_int_eq(model_quantize(in, out, "q3_k", 1, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "q3_k"));
    ck_assert_ptr_nonnull(strstr(err, "q8_0")); /* lists the valid ones */
    char missing[512];
    s_path(missing, sizeof missing, "missing.gguf");
    ck_assert_int_lt(model_quantize(missing, out, "q8_0", 1, NULL, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "missing.gguf"));
    ck_assert_int_lt(
        model_quantize(in, "/nonexistent-dir/out.gguf", "q8_0", 1, NULL, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "nonexistent-dir"));
    ck_assert_int_ne(access(out, F_OK), 0);
    /* garbage input */
    FILE *f = fopen(missing, "wb");
    fputs("not a gguf file at all, just text", f);
    fclose(f);
    ck_assert_int_lt(model_quantize(missing, out, "q8_0", 1, NULL, err, sizeof err), 0);
    ck_assert(err[0] != '\0');
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("quantize");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_write_roundtrip);
    tcase_add_test(tc, test_write_errors);
    tcase_add_test(tc, test_quantize_q8_0);
    tcase_add_test(tc, test_quantize_k_fallbacks);
    tcase_add_test(tc, test_quantize_errors);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
