/* test_gguf.c - the GGUF reader and model loader: the real default model opens
 * with the expected metadata; every kind of malformed file is refused with a
 * message that names the problem (run under ASan to prove "never a crash"). */
#include "model_gguf.h"
#include "model_llama.h"
#include "test_util.h"

#include <check.h>
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
static void put_u32(buf_t *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf_t *b, uint64_t v) { put(b, &v, 8); }
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
    ck_assert_ptr_null(model_llama_load(path, err, sizeof err));
    ck_assert_msg(strstr(err, "unsupported architecture 'gpt-neox'"), "%s", err);
    free(b.p);
    b = make_valid(0); /* llama but no weights */
    path = write_tmp(&b);
    ck_assert_ptr_null(model_llama_load(path, err, sizeof err));
    ck_assert_msg(strstr(err, "missing"), "%s", err);
    unlink(path);
    free(b.p);
}
END_TEST

START_TEST(default_model_metadata) {
    const char *path = test_model_path(); /* a "model" tcase: it is there */
    ck_assert_ptr_nonnull(path);
    char err[512];
    model_llama_t *m = model_llama_load(path, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    const model_config_t *c = model_llama_config(m);
    ck_assert_int_eq(c->n_layer, 30);
    ck_assert_int_eq(c->d_model, 576);
    ck_assert_int_eq(c->n_head, 9);
    ck_assert_int_eq(c->n_head_kv, 3);
    ck_assert_int_eq(c->head_dim, 64);
    ck_assert_int_eq(c->d_ff, 1536);
    ck_assert_int_eq(c->n_vocab, 49152);
    ck_assert_float_eq_tol(c->rope_base, 100000.0f, 1e-3f);
    ck_assert_int_eq(c->ftype, KERN_Q4_1);
    const model_gguf_t *g = model_llama_gguf(m);
    model_gguf_vtype_t et;
    uint64_t n;
    ck_assert(model_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n));
    ck_assert_int_eq(et, GGUF_STRING);
    ck_assert_uint_eq(n, 49152);
    model_gguf_str_t s;
    ck_assert(model_gguf_arr_str(g, "tokenizer.ggml.tokens", 1, &s));
    ck_assert(model_gguf_str_eq(s, "<|im_start|>"));
    model_llama_destroy(&m);
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
        ck_assert_ptr_null(model_llama_load(p, err, sizeof err));
        unlink(p);
    }
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
    TCase *tm = test_tcase_model(s, "model"); /* the default model's file */
    tcase_set_timeout(tm, 60);
    tcase_add_test(tm, default_model_metadata);
    tcase_add_test(tm, truncated_real_model);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}
