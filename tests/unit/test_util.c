/* test_util.c - helpers shared by the Check suites. */
#include "test_util.h"

#include "model_gguf_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *test_model_path(void) {
    static char buf[4096];
    const char *e = getenv("STRATA_MODEL");
    if (e && *e)
        return access(e, R_OK) == 0 ? e : NULL;
    const char *dir = getenv("STRATA_MODEL_DIR");
    if (dir && *dir)
        snprintf(buf, sizeof buf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(buf, sizeof buf, "%s/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    return access(buf, R_OK) == 0 ? buf : NULL;
}

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
