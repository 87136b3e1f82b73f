/* test_util.c - helpers shared by the Check suites: the suite runner and skip rules
 * (test_util.h says what they mean), the default model, random numbers, a synthetic model. */
#include "test_util.h"

#include "actor_runtime.h"
#include "model.h"
#include "model_gguf_write.h"
#include "model_tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- running and skipping */

#define S_MODEL_TAG "model"

static bool s_has_model_cases; /* test_tcase_model was called */

bool test_in_ci(void) {
    const char *e = getenv("CI");
    return e && (!strcasecmp(e, "true") || !strcmp(e, "1") || !strcasecmp(e, "yes"));
}

void test_skip(bool ci_fails, const char *fmt, ...) {
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (ci_fails && test_in_ci()) {
        fprintf(stderr, "FAIL: %s (required under CI=true)\n", why);
        exit(1);
    }
    fprintf(stderr, "SKIP: %s\n", why);
    exit(TEST_SKIP);
}

/* The path the default model should be at (readable or not). */
static const char *s_model_candidate(void) {
    static char buf[4096];
    const char *e = getenv("STRATA_MODEL");
    if (e && *e)
        return e;
    const char *dir = getenv("STRATA_MODEL_DIR");
    if (dir && *dir)
        snprintf(buf, sizeof buf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(buf, sizeof buf, "%s/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    return buf;
}

const char *test_model_path(void) {
    const char *p = s_model_candidate();
    return access(p, R_OK) == 0 ? p : NULL;
}

const char *test_model_path_or_skip(void) {
    const char *p = test_model_path();
    if (!p)
        test_skip(true, "model not found: %s (set STRATA_MODEL, or run scripts/fetch-model)",
                  s_model_candidate());
    return p;
}

TCase *test_tcase_model(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_set_tags(tc, S_MODEL_TAG);
    suite_add_tcase(s, tc);
    s_has_model_cases = true;
    return tc;
}

int test_run_suite(int argc, char **argv, Suite *s, enum fork_status fork) {
    const char *include = NULL, *exclude = NULL; /* NULL: Check reads CK_*_TAGS */
    bool skipped = false;                        /* the model cases were left out */
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--model") && strcmp(argv[1], "--no-model"))) {
        fprintf(stderr, "usage: %s [--model | --no-model]\n", argv[0]);
        return 1;
    }
    if (argc == 2 && !strcmp(argv[1], "--model")) {
        if (!s_has_model_cases) {
            fprintf(stderr, "%s: --model: this suite has no model cases\n", argv[0]);
            return 1;
        }
        test_model_path_or_skip();
        include = S_MODEL_TAG;
    } else if (argc == 2 || s_has_model_cases) {
        exclude = argc == 2 || !test_model_path() ? S_MODEL_TAG : NULL;
        if (argc < 2 && exclude) {
            if (test_in_ci())
                test_model_path_or_skip(); /* fails, saying what is missing */
            printf("model not found: %s; the model cases are skipped\n", s_model_candidate());
            skipped = true;
        }
    }
    SRunner *sr = srunner_create(s);
    if (fork != CK_FORK_GETENV)
        srunner_set_fork_status(sr, fork);
    srunner_run_tagged(sr, NULL, NULL, include, exclude, CK_NORMAL);
    int run = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (failed)
        return 1;
    if (run == 0) {
        fprintf(stderr, "%s: no test ran (CK_RUN_CASE or CK_*_TAGS select none?)\n", argv[0]);
        return 1;
    }
    return skipped ? TEST_SKIP : 0;
}

/* ---- random numbers */

uint64_t test_rand_u64(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float test_rand_f32(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rand_u64(s) >> 40) * (1.0 / 16777216.0));
}

/* ---- synthetic model */

typedef struct {
    uint64_t seed; /* weights */
    int n_tensors; /* added so far */
    float amp[64]; /* (n_tensors) uniform amplitude; 0: a norm vector of ones */
} s_synth_fill_t;

static int s_synth_fill(void *arg, int64_t i, void *dst, size_t nbytes) {
    s_synth_fill_t *f = arg;
    float *x = dst;
    size_t n = nbytes / sizeof(float);
    uint64_t s = f->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1;
    for (size_t j = 0; j < n; j++)
        x[j] = f->amp[i] > 0 ? test_rand_f32(&s, -f->amp[i], f->amp[i])
                             : 1.0f + test_rand_f32(&s, -0.1f, 0.1f);
    return 0;
}

static int s_synth_add(model_gguf_write_t *w, s_synth_fill_t *f, const char *name, int64_t cols,
                       int64_t rows, float std, char *err, size_t errlen) {
    int64_t ne[2] = {cols, rows};
    if (f->n_tensors >= 64)
        return -E2BIG;
    int64_t rc =
        model_gguf_write_add_tensor(w, name, KERN_F32, rows ? 2 : 1, ne, NULL, err, errlen);
    if (rc < 0)
        return (int)rc;
    f->amp[f->n_tensors++] = std * sqrtf(3.0f); /* uniform(-a, a) has std a / sqrt(3) */
    return 0;
}

int test_synth_model(const char *path, const test_synth_t *cfg, char *err, size_t errlen) {
    test_synth_t c = *cfg;
    c.n_layer = c.n_layer ? c.n_layer : 2;
    c.d_model = c.d_model ? c.d_model : 64;
    c.n_head = c.n_head ? c.n_head : 4;
    c.n_head_kv = c.n_head_kv ? c.n_head_kv : 2;
    c.d_ff = c.d_ff ? c.d_ff : 128;
    c.n_vocab = c.n_vocab ? c.n_vocab : 64;
    c.seed = c.seed ? c.seed : 1;
    c.vocab_tag = c.vocab_tag ? c.vocab_tag : "t";
    c.out_std = c.out_std > 0 ? c.out_std : 0.2f;
    if (c.n_vocab < 4 || c.n_layer > 8) {
        snprintf(err, errlen, "synthetic model: n_vocab >= 4 and n_layer <= 8");
        return -EINVAL;
    }
    model_gguf_write_t *w = model_gguf_write_new();
    char **text = calloc((size_t)c.n_vocab, sizeof *text);
    float *scores = calloc((size_t)c.n_vocab, sizeof *scores);
    int32_t *types = calloc((size_t)c.n_vocab, sizeof *types);
    s_synth_fill_t *f = calloc(1, sizeof *f);
    int rc = -ENOMEM;
    if (!w || !text || !scores || !types || !f)
        goto done;
    for (int i = 0; i < c.n_vocab; i++) {
        char buf[64];
        if (i < 3)
            snprintf(buf, sizeof buf, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else
            snprintf(buf, sizeof buf, "%s%d", c.vocab_tag, i);
        if (!(text[i] = strdup(buf)))
            goto done;
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : 1; /* unknown, control, normal */
    }
    const char *a = "llama";
    rc = model_gguf_write_set_str(w, "general.architecture", a);
    rc = rc ? rc : model_gguf_write_set_str(w, "general.name", "synthetic");
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.block_count", (uint32_t)c.n_layer);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.embedding_length", (uint32_t)c.d_model);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.feed_forward_length", (uint32_t)c.d_ff);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.attention.head_count", (uint32_t)c.n_head);
    rc = rc ? rc
            : model_gguf_write_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c.n_head_kv);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.context_length", 4096);
    rc = rc ? rc : model_gguf_write_set_f32(w, "llama.rope.freq_base", 10000.0f);
    rc = rc ? rc : model_gguf_write_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rc = rc ? rc : model_gguf_write_set_str(w, "tokenizer.ggml.model", "llama");
    rc = rc ? rc
            : model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)text,
                                           (uint64_t)c.n_vocab);
    rc = rc ? rc
            : model_gguf_write_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32,
                                       (uint64_t)c.n_vocab, scores);
    rc = rc ? rc
            : model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32,
                                       (uint64_t)c.n_vocab, types);
    rc = rc ? rc : model_gguf_write_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rc = rc ? rc : model_gguf_write_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rc = rc ? rc : model_gguf_write_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    if (rc) {
        snprintf(err, errlen, "synthetic model: cannot set metadata (%d)", rc);
        goto done;
    }
    f->seed = c.seed;
    int d = c.d_model, hd = c.d_model / c.n_head, q = c.n_head * hd, kv = c.n_head_kv * hd;
    float sd = 1.0f / sqrtf((float)d), sf = 1.0f / sqrtf((float)c.d_ff);
    rc = s_synth_add(w, f, "token_embd.weight", d, c.n_vocab, 1.0f, err, errlen);
    rc = rc ? rc : s_synth_add(w, f, "output_norm.weight", d, 0, 0, err, errlen);
    rc = rc ? rc : s_synth_add(w, f, "output.weight", d, c.n_vocab, c.out_std, err, errlen);
    for (int l = 0; l < c.n_layer && !rc; l++) {
        char n[64];
#define S_ADD(suffix, cols, rows, std)                                                             \
    (snprintf(n, sizeof n, "blk.%d.%s.weight", l, suffix),                                         \
     rc = rc ? rc : s_synth_add(w, f, n, cols, rows, std, err, errlen))
        S_ADD("attn_norm", d, 0, 0);
        S_ADD("attn_q", d, q, sd);
        S_ADD("attn_k", d, kv, sd);
        S_ADD("attn_v", d, kv, sd);
        S_ADD("attn_output", q, d, 1.0f / sqrtf((float)q));
        S_ADD("ffn_norm", d, 0, 0);
        S_ADD("ffn_gate", d, c.d_ff, sd);
        S_ADD("ffn_up", d, c.d_ff, sd);
        S_ADD("ffn_down", c.d_ff, d, sf);
#undef S_ADD
    }
    if (rc)
        goto done;
    model_gguf_write_set_fill(w, s_synth_fill, f);
    rc = model_gguf_write_save(w, path, err, errlen);
done:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "synthetic model: out of memory");
    for (int i = 0; text && i < c.n_vocab; i++)
        free(text[i]);
    free(text);
    free(scores);
    free(types);
    free(f);
    model_gguf_write_destroy(&w);
    return rc;
}

int test_recv_wait(zsock_t *s, msg_any_t *m, int ms) {
    msg_err_t e;
    for (int i = 0; i < ms; i++) {
        int rc = actor_recv(s, m, &e);
        if (rc != -EAGAIN)
            return rc;
        zclock_sleep(1);
    }
    return -ETIMEDOUT;
}

int test_synth_open(test_synth_fixture_t *f, const char *tag, const test_synth_t *cfg) {
    char err[256];
    memset(f, 0, sizeof *f);
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(f->dir, sizeof f->dir, "%s/strata-test-%s-XXXXXX", tmp, tag);
    if (!mkdtemp(f->dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", f->dir, strerror(errno));
        f->dir[0] = 0;
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/synth.gguf", f->dir);
    if (test_synth_model(f->path, cfg, err, sizeof err) ||
        !(f->model = model_load(f->path, err, sizeof err)) ||
        !(f->tok = model_tokenizer_new(model_file(f->model), err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        test_synth_close(f);
        return -1;
    }
    return 0;
}

void test_synth_close(test_synth_fixture_t *f) {
    model_tokenizer_destroy(&f->tok);
    model_destroy(&f->model);
    if (f->path[0])
        unlink(f->path);
    if (f->dir[0])
        rmdir(f->dir);
    f->path[0] = f->dir[0] = 0;
}

double test_kl(const float *p, const float *q, int n) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        mp = fmax(mp, p[i]);
        mq = fmax(mq, q[i]);
    }
    for (int i = 0; i < n; i++) {
        sp += exp(p[i] - mp);
        sq += exp(q[i] - mq);
    }
    for (int i = 0; i < n; i++) {
        double lp = p[i] - mp - log(sp), lq = q[i] - mq - log(sq);
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}
