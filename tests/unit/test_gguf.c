/* test_gguf.c - the GGUF reader and model loader: the real default model opens
 * with the expected metadata; every kind of malformed file is refused with a
 * message that names the problem (run under ASan to prove "never a crash"). */
#include "model.h"
#include "model_arch.h"
#include "model_gguf.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a tiny byte builder for hand-made GGUF files */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf_t;

static void put(buf_t *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(buf_t *b, uint32_t v) {
    put(b, &v, 4);
}
static void put_u64(buf_t *b, uint64_t v) {
    put(b, &v, 8);
}
static void put_str(buf_t *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_str(buf_t *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, GGUF_STRING);
    put_str(b, v);
}
static void kv_u32(buf_t *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, GGUF_UINT32);
    put_u32(b, v);
}
static void pad_to(buf_t *b, size_t align) {
    while (b->n % align)
        put(b, "", 1);
}

/* A valid file: n_kv metadata entries and one F32 tensor "w" of shape [8, 2]. */
static buf_t make_valid(uint32_t tensor_type) {
    buf_t b = {0};
    put_u32(&b, 0x46554747);
    put_u32(&b, 3);
    put_u64(&b, 1); /* tensors */
    put_u64(&b, 2); /* kv */
    kv_str(&b, "general.architecture", "llama");
    kv_u32(&b, "llama.block_count", 1);
    put_str(&b, "w");
    put_u32(&b, 2);
    put_u64(&b, 8);
    put_u64(&b, 2);
    put_u32(&b, tensor_type);
    put_u64(&b, 0);
    pad_to(&b, 32);
    float data[16];
    for (int i = 0; i < 16; i++)
        data[i] = (float)i;
    put(&b, data, sizeof data);
    return b;
}

static const char *write_tmp(const buf_t *b) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/strata_test_gguf_%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (b->n)
        ck_assert_uint_eq(fwrite(b->p, 1, b->n, f), b->n);
    fclose(f);
    return path;
}

/* Open must fail and the message must contain `needle`. */
static void expect_fail(const buf_t *b, const char *needle) {
    char err[512] = "";
    const char *path = write_tmp(b);
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g == NULL, "expected failure (%s)", needle);
    ck_assert_msg(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
    unlink(path);
}

START_TEST(valid_small_file) {
    buf_t b = make_valid(0);
    char err[256];
    const char *path = write_tmp(&b);
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_int_eq(model_gguf_version(g), 3);
    ck_assert_int_eq(model_gguf_tensor_count(g), 1);
    char *arch = NULL;
    ck_assert(model_gguf_get_str(g, "general.architecture", &arch));
    ck_assert_str_eq(arch, "llama");
    free(arch);
    uint64_t n;
    ck_assert(model_gguf_get_u64(g, "llama.block_count", &n));
    ck_assert_uint_eq(n, 1);
    ck_assert(!model_gguf_get_u64(g, "general.architecture", &n)); /* wrong type */
    const model_gguf_tensor_t *t = model_gguf_tensor(g, "w");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ne[0], 8);
    ck_assert_int_eq(t->ne[1], 2);
    ck_assert_float_eq(((const float *)t->data)[15], 15.0f);
    model_gguf_destroy(&g);
    ck_assert_ptr_null(g);
    model_gguf_destroy(&g); /* safe twice */
    unlink(path);
    free(b.p);
}
END_TEST

START_TEST(missing_and_non_gguf) {
    char err[256];
    ck_assert_ptr_null(model_gguf_open("/nonexistent/model.gguf", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
    buf_t b = {0};
    expect_fail(&b, "not a GGUF file");
    put(&b, "this is plainly a text file, not a model at all", 48);
    expect_fail(&b, "bad magic");
    free(b.p);
    ck_assert_ptr_null(model_gguf_open("/tmp", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
}
END_TEST

START_TEST(truncated_everywhere) {
    buf_t b = make_valid(0);
    /* every prefix of the file must be refused, never crash */
    for (size_t cut = 0; cut < b.n; cut++) {
        buf_t t = {b.p, cut, cut};
        char err[512] = "";
        const char *path = write_tmp(&t);
        model_gguf_t *g = model_gguf_open(path, err, sizeof err);
        ck_assert_msg(g == NULL, "prefix of %zu bytes accepted", cut);
        ck_assert_msg(err[0], "no message for prefix %zu", cut);
    }
    unlink(write_tmp(&b));
    free(b.p);
}
END_TEST

START_TEST(bad_fields) {
    buf_t b = make_valid(0);
    b.p[4] = 7; /* version */
    expect_fail(&b, "unsupported GGUF version 7");
    free(b.p);

    b = make_valid(0);
    uint64_t huge = 1ull << 60;
    memcpy(b.p + 16, &huge, 8); /* kv count */
    expect_fail(&b, "cannot fit");
    free(b.p);

    b = make_valid(0);
    memcpy(b.p + 24, &huge, 8); /* length of the first key */
    expect_fail(&b, "runs past the end");
    free(b.p);

    b = make_valid(99); /* tensor type */
    expect_fail(&b, "unsupported type 99");
    free(b.p);

    b = make_valid(16); /* IQ2_XXS: a real GGML type strata does not support */
    expect_fail(&b, "unsupported type 16");
    free(b.p);

    b = make_valid(0);
    /* tensor offset field: find it as the 8 bytes before the padding */
    size_t off_pos = 0;
    for (size_t i = 0; i + 1 < b.n; i++)
        if (b.p[i] == 'w' && b.p[i - 1] == 0 && b.p[i - 8] == 1) {
            off_pos = i + 1 + 4 + 16 + 4;
            break;
        }
    ck_assert_uint_gt(off_pos, 0);
    uint64_t bad = 4;
    memcpy(b.p + off_pos, &bad, 8);
    expect_fail(&b, "not aligned");
    bad = 1 << 20;
    memcpy(b.p + off_pos, &bad, 8);
    expect_fail(&b, "runs past the end of the file");
    free(b.p);
}
END_TEST

START_TEST(loader_rejects_other_arch) {
    buf_t b = {0};
    put_u32(&b, 0x46554747);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 1);
    kv_str(&b, "general.architecture", "gpt-neox");
    char err[512];
    const char *path = write_tmp(&b);
    ck_assert_ptr_null(model_load(path, err, sizeof err));
    ck_assert_msg(strstr(err, "unsupported architecture 'gpt-neox'"), "%s", err);
    free(b.p);
    b = make_valid(0); /* llama but no weights */
    path = write_tmp(&b);
    ck_assert_ptr_null(model_load(path, err, sizeof err));
    ck_assert_msg(strstr(err, "missing"), "%s", err);
    unlink(path);
    free(b.p);
}
END_TEST

START_TEST(default_model_metadata) {
    const char *path = test_model_path(); /* a "model" tcase: it is there */
    ck_assert_ptr_nonnull(path);
    char err[512];
    model_t *m = model_load(path, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    const model_config_t *c = model_config(m);
    ck_assert_int_eq(c->n_layer, 30);
    ck_assert_int_eq(c->d_model, 576);
    ck_assert_int_eq(c->n_head, 9);
    ck_assert_int_eq(c->n_head_kv, 3);
    ck_assert_int_eq(c->head_dim, 64);
    ck_assert_int_eq(c->d_ff, 1536);
    ck_assert_int_eq(c->n_vocab, 49152);
    ck_assert_float_eq_tol(c->rope_base, 100000.0f, 1e-3f);
    ck_assert_int_eq(c->ftype, KERN_Q4_1);
    const model_gguf_t *g = model_file(m);
    model_gguf_vtype_t et;
    uint64_t n;
    ck_assert(model_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n));
    ck_assert_int_eq(et, GGUF_STRING);
    ck_assert_uint_eq(n, 49152);
    model_gguf_str_t s;
    ck_assert(model_gguf_arr_str(g, "tokenizer.ggml.tokens", 1, &s));
    ck_assert(model_gguf_str_eq(s, "<|im_start|>"));
    model_destroy(&m);
}
END_TEST

/* Truncating the real model anywhere must give an error, not a crash. */
START_TEST(truncated_real_model) {
    const char *path = test_model_path(); /* a "model" tcase: it is there */
    ck_assert_ptr_nonnull(path);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t want = 3 << 20;
    buf_t b = {malloc(want), 0, want};
    b.n = fread(b.p, 1, want, f);
    fclose(f);
    size_t cuts[] = {10, 100, 1000, 100000, 1 << 20, (3 << 20) - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        buf_t t = {b.p, cuts[i], cuts[i]};
        char err[512] = "";
        const char *p = write_tmp(&t);
        ck_assert_ptr_null(model_gguf_open(p, err, sizeof err));
        ck_assert_msg(strstr(err, "truncated") || strstr(err, "past the end"), "%s", err);
        ck_assert_ptr_null(model_load(p, err, sizeof err));
        unlink(p);
    }
    free(b.p);
}
END_TEST

/* ---- every error names the file offset of the bad item */

/* Where the items of a make_two file sit, noted while writing it (so the
 * expected offsets do not come from the reader under test). */
typedef struct {
    size_t key2;    /* length field of the second metadata key */
    size_t type2;   /* value type of the second metadata entry */
    size_t tensor2; /* the second tensor info (its name's length field) */
    size_t dim2;    /* the second dimension of tensor 2 */
    size_t offset2; /* the data offset field of tensor 2 */
    size_t data;    /* the tensor data section */
} offsets_t;

/* A valid file: general.architecture, general.alignment = 32, then two F32
 * tensors "a" [8, 2] and name2 [ne0, ne1] (data only for 8 x 2). */
static buf_t make_two(const char *name2, uint64_t ne0, uint64_t ne1, offsets_t *o) {
    buf_t b = {0};
    put_u32(&b, 0x46554747);
    put_u32(&b, 3);
    put_u64(&b, 2); /* tensors */
    put_u64(&b, 2); /* kv */
    kv_str(&b, "general.architecture", "llama");
    o->key2 = b.n;
    put_str(&b, "general.alignment");
    o->type2 = b.n;
    put_u32(&b, GGUF_UINT32);
    put_u32(&b, 32);
    put_str(&b, "a");
    put_u32(&b, 2);
    put_u64(&b, 8);
    put_u64(&b, 2);
    put_u32(&b, 0);
    put_u64(&b, 0);
    o->tensor2 = b.n;
    put_str(&b, name2);
    put_u32(&b, 2);
    put_u64(&b, ne0);
    o->dim2 = b.n;
    put_u64(&b, ne1);
    put_u32(&b, 0);
    o->offset2 = b.n;
    put_u64(&b, 64);
    pad_to(&b, 32);
    o->data = b.n;
    float data[32] = {0};
    put(&b, data, sizeof data);
    return b;
}

/* Open must fail with "at offset <at>:" and `needle` in the message. */
static void expect_fail_at(const buf_t *b, size_t at, const char *needle) {
    char err[512] = "", want[64];
    snprintf(want, sizeof want, ": at offset %zu: ", at);
    const char *path = write_tmp(b);
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g == NULL, "expected failure at %zu (%s)", at, needle);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
    ck_assert_msg(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
    unlink(path);
}

START_TEST(error_offsets) {
    offsets_t o;
    buf_t b = make_two("b", 8, 2, &o);
    char err[512];
    model_gguf_t *g = model_gguf_open(write_tmp(&b), err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_ptr_eq(model_gguf_tensor(g, "b"), model_gguf_tensor_at(g, 1));
    ck_assert_ptr_null(model_gguf_tensor(g, "c"));
    ck_assert_uint_eq(model_gguf_data_offset(g), o.data);
    model_gguf_destroy(&g);

    b.p[0] = 'X';
    expect_fail_at(&b, 0, "bad magic");
    b.p[0] = 'G';
    b.p[4] = 9;
    expect_fail_at(&b, 4, "unsupported GGUF version 9");
    b.p[4] = 3;

    buf_t cut = {b.p, 12, 12}; /* 4 of the tensor count's 8 bytes */
    expect_fail_at(&cut, 8, "truncated file: tensor count");
    uint64_t huge = 1ull << 60;
    memcpy(b.p + 16, &huge, 8);
    expect_fail_at(&b, 16, "cannot fit");
    free(b.p);

    b = make_two("b", 8, 2, &o);
    memcpy(b.p + o.key2, &huge, 8);
    expect_fail_at(&b, o.key2, "string length 1152921504606846976 for metadata key #1");
    free(b.p);

    b = make_two("b", 8, 2, &o);
    uint32_t bad_type = 99;
    memcpy(b.p + o.type2, &bad_type, 4);
    expect_fail_at(&b, o.type2, "unknown value type 99");
    uint32_t three = 3;
    memcpy(b.p + o.type2, &(uint32_t){GGUF_UINT32}, 4);
    memcpy(b.p + o.type2 + 4, &three, 4);
    expect_fail_at(&b, o.type2 + 4, "general.alignment must be a power-of-two");
    free(b.p);

    b = make_two("a", 8, 2, &o);
    expect_fail_at(&b, o.tensor2, "duplicate tensor name 'a'");
    free(b.p);

    b = make_two("b", 8, 2, &o);
    uint64_t far = 1 << 20;
    memcpy(b.p + o.offset2, &far, 8);
    expect_fail_at(&b, o.offset2, "runs past the end of the file");
    far = 40; /* not a multiple of the alignment */
    memcpy(b.p + o.offset2, &far, 8);
    expect_fail_at(&b, o.offset2, "not aligned to 32");
    free(b.p);

    b = make_two("b", 1ull << 32, 1ull << 32, &o); /* 2^64 elements */
    expect_fail_at(&b, o.dim2, "invalid dimension 1 = 4294967296");
    free(b.p);
}
END_TEST

/* n one-row F32 tensors "blk.<i>.w" holding i; with dup >= 0 the last one is
 * named "blk.<dup>.w" instead.  *last: where the last tensor info starts. */
static buf_t make_many(int n, int dup, size_t *last) {
    buf_t b = {0};
    put_u32(&b, 0x46554747);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)n);
    put_u64(&b, 0);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i == n - 1 && dup >= 0 ? dup : i);
        *last = b.n;
        put_str(&b, name);
        put_u32(&b, 1);
        put_u64(&b, 8);
        put_u32(&b, 0);
        put_u64(&b, (uint64_t)i * 32);
    }
    pad_to(&b, 32);
    for (int i = 0; i < n; i++) {
        float row[8] = {(float)i};
        put(&b, row, sizeof row);
    }
    return b;
}

/* Thousands of tensors: every name is found by model_gguf_tensor, and a duplicate
 * is reported at the info that repeats the name (the reader keeps a hash set). */
START_TEST(many_tensors) {
    enum { N = 5000 };
    size_t last;
    buf_t b = make_many(N, -1, &last);
    char err[512];
    const char *path = write_tmp(&b);
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i);
        const model_gguf_tensor_t *t = model_gguf_tensor(g, name);
        ck_assert_ptr_eq(t, model_gguf_tensor_at(g, i));
        ck_assert_float_eq(((const float *)t->data)[0], (float)i);
    }
    model_gguf_destroy(&g);
    unlink(path);
    free(b.p);

    b = make_many(N, 17, &last);
    expect_fail_at(&b, last, "duplicate tensor name 'blk.17.w' (tensor #4999; #17 has it");
    free(b.p);
}
END_TEST

/* Header values whose products overflow an int are refused by the config reader. */
START_TEST(config_products_overflow) {
    buf_t b = {0};
    put_u32(&b, 0x46554747);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 6);
    kv_str(&b, "general.architecture", "llama");
    kv_u32(&b, "llama.block_count", 1);
    kv_u32(&b, "llama.embedding_length", 1u << 20);
    kv_u32(&b, "llama.feed_forward_length", 64);
    kv_u32(&b, "llama.attention.head_count", 1u << 20);
    kv_u32(&b, "llama.attention.key_length", 1u << 20); /* 2^40 query width */
    char err[512];
    const char *path = write_tmp(&b);
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    model_config_t c;
    ck_assert_int_eq(model_config_read(g, &c, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "overflow"), "%s", err);
    model_gguf_destroy(&g);
    ck_assert_ptr_null(model_load(path, err, sizeof err));
    ck_assert_msg(strstr(err, "overflow"), "%s", err);
    unlink(path);
    free(b.p);
}
END_TEST

/* The architecture table: general.architecture and expert_count pick the declaration. */
START_TEST(arch_table) {
    ck_assert_ptr_eq(model_arch_find("llama", false), &model_arch_llama);
    ck_assert_ptr_eq(model_arch_find("llama", true), &model_arch_llama_moe);
    ck_assert_ptr_eq(model_arch_find("mistral", false), &model_arch_llama);
    ck_assert_ptr_eq(model_arch_find("qwen2", false), &model_arch_qwen2);
    ck_assert_ptr_eq(model_arch_find("qwen3", false), &model_arch_qwen3);
    ck_assert_ptr_null(model_arch_find("qwen2", true));
    ck_assert(model_arch_known("mistral"));
    ck_assert(!model_arch_known("gpt-neox"));
    ck_assert(!model_arch_known(NULL));
    ck_assert_int_eq(model_arch_llama.stages.ffn, MODEL_FFN_DENSE);
    ck_assert_int_eq(model_arch_llama_moe.stages.ffn, MODEL_FFN_MOE);
    model_config_t cfg = {.n_layer = 2};
    ck_assert_ptr_null(model_arch_unsupported(&model_arch_llama, &cfg));
    cfg.n_expert = 4;
    ck_assert_ptr_null(model_arch_unsupported(&model_arch_llama_moe, &cfg));
    /* Qwen2 (Q/K/V biases) and Qwen3 (Q/K head norms) run; Gemma-3-like switches are
     * named as what the forward pass does not run yet */
    cfg.n_expert = 0;
    ck_assert_ptr_null(model_arch_unsupported(&model_arch_qwen2, &cfg));
    ck_assert_ptr_null(model_arch_unsupported(&model_arch_qwen3, &cfg));
    model_arch_t a = model_arch_llama;
    /* Q/K norms, windows, GELU and the embedding scale run (Gemma 3); a window of no
     * positions and a GELU MoE do not */
    a.stages.qk_norm = true;
    a.stages.norm_post_attn = a.stages.norm_post_ffn = true;
    a.stages.act = MODEL_ACT_GELU;
    a.embd_scale = true;
    a.stages.attn = MODEL_ATTN_SLIDING;
    a.stages.window = 512;
    ck_assert_ptr_null(model_arch_unsupported(&a, &cfg));
    a.stages.window = 0;
    ck_assert_str_eq(model_arch_unsupported(&a, &cfg), "a sliding window of no positions");
    a = model_arch_llama_moe;
    a.stages.act = MODEL_ACT_GELU;
    cfg.n_expert = 4;
    ck_assert_str_eq(model_arch_unsupported(&a, &cfg), "a GELU Mixture-of-Experts feed-forward");
    cfg.n_expert = 0;
    /* Gemma 3: every sixth layer global, the others sliding over the file's window */
    ck_assert_ptr_eq(model_arch_find("gemma3", false), &model_arch_gemma3);
    ck_assert_ptr_null(model_arch_find("gemma3", true));
    model_config_t g3 = {.n_layer = 18, .swa_window = 512};
    ck_assert_ptr_null(model_arch_unsupported(&model_arch_gemma3, &g3));
    for (int l = 0; l < 18; l++) {
        model_stages_t st;
        model_arch_layer_stages(&model_arch_gemma3, &g3, l, &st);
        ck_assert_int_eq(st.attn,
                         l == 5 || l == 11 || l == 17 ? MODEL_ATTN_FULL : MODEL_ATTN_SLIDING);
        ck_assert_int_eq(st.window, st.attn == MODEL_ATTN_SLIDING ? 512 : 0);
    }
    ck_assert_ptr_nonnull(model_arch_unsupported(&model_arch_llama, &(model_config_t){
                                                                        .n_layer = 1,
                                                                        .n_expert = 4,
                                                                    }));
}
END_TEST

/* A required key the declaration names is refused by name. */
START_TEST(config_missing_key_named) {
    buf_t b = {0};
    put_u32(&b, 0x46554747);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 4);
    kv_str(&b, "general.architecture", "mistral");
    kv_u32(&b, "mistral.block_count", 1);
    kv_u32(&b, "mistral.embedding_length", 64);
    kv_u32(&b, "mistral.attention.head_count", 4); /* no feed_forward_length */
    char err[512];
    const char *path = write_tmp(&b);
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    model_config_t c;
    ck_assert_int_eq(model_config_read(g, &c, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "missing or invalid mistral.feed_forward_length (architecture llama"),
                  "%s", err);
    ck_assert_msg(!strchr(err, '\n'), "%s", err);
    model_gguf_destroy(&g);
    unlink(path);
    free(b.p);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("reader");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, valid_small_file);
    tcase_add_test(tc, missing_and_non_gguf);
    tcase_add_test(tc, truncated_everywhere);
    tcase_add_test(tc, bad_fields);
    tcase_add_test(tc, loader_rejects_other_arch);
    suite_add_tcase(s, tc);
    TCase *tco = tcase_create("offsets");
    tcase_set_timeout(tco, 60);
    tcase_add_test(tco, error_offsets);
    tcase_add_test(tco, many_tensors);
    tcase_add_test(tco, config_products_overflow);
    tcase_add_test(tco, arch_table);
    tcase_add_test(tco, config_missing_key_named);
    suite_add_tcase(s, tco);
    TCase *tm = test_tcase_model(s, "model"); /* the default model's file */
    tcase_set_timeout(tm, 60);
    tcase_add_test(tm, default_model_metadata);
    tcase_add_test(tm, truncated_real_model);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}
