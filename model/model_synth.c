/* model_synth.c - random-weight llama GGUFs (model_synth.h). */
#include "model_synth.h"

#include "kern_ops.h"
#include "model_gguf_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the fill callback makes of tensor i. */
typedef struct {
    uint64_t seed;     /* weights */
    kern_type_t wtype; /* the matrices' type */
    int n_tensors;     /* added so far */
    int cap;           /* of amp and mat */
    float *amp;        /* (n_tensors) uniform amplitude; 0: a norm vector near 1 */
} s_fill_t;

static uint64_t s_rand(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static float s_uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((s_rand(s) >> 40) * (1.0 / 16777216.0));
}

/* Quantized blocks of random bytes whose values spread about +-a: Q8_0 (scale a/127) and
 * Q4_K (sub-block scales and minimums random 6-bit, super-block scales so that
 * d * 63 * 15 ~ 2a). */
static void s_fill_blocks(kern_type_t t, uint64_t *s, uint8_t *dst, size_t nbytes, float a) {
    for (size_t j = 0; j < nbytes; j += 8) {
        uint64_t r = s_rand(s);
        memcpy(dst + j, &r, nbytes - j < 8 ? nbytes - j : 8);
    }
    if (t == KERN_Q8_0) {
        kern_block_q8_0 *b = (kern_block_q8_0 *)dst;
        for (size_t k = 0; k < nbytes / sizeof *b; k++)
            b[k].d = kern_f32_to_f16(a / 127.0f);
    } else { /* KERN_Q4_K */
        kern_block_q4_K *b = (kern_block_q4_K *)dst;
        for (size_t k = 0; k < nbytes / sizeof *b; k++) {
            b[k].d = kern_f32_to_f16(2.0f * a / (63.0f * 15.0f));
            b[k].dmin = kern_f32_to_f16(a / 63.0f);
        }
    }
}

static int s_fill(void *arg, int64_t i, void *dst, size_t nbytes) {
    s_fill_t *f = arg;
    uint64_t s = f->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1;
    float a = f->amp[i];
    if (a > 0 && (f->wtype == KERN_Q8_0 || f->wtype == KERN_Q4_K)) {
        s_fill_blocks(f->wtype, &s, dst, nbytes, a);
    } else if (a > 0 && f->wtype == KERN_F16) {
        kern_f16_t *x = dst;
        for (size_t j = 0; j < nbytes / sizeof *x; j++)
            x[j] = kern_f32_to_f16(s_uniform(&s, -a, a));
    } else {
        float *x = dst;
        for (size_t j = 0; j < nbytes / sizeof *x; j++)
            x[j] = a > 0 ? s_uniform(&s, -a, a) : 1.0f + s_uniform(&s, -0.1f, 0.1f);
    }
    return 0;
}

/* A matrix (rows > 0, of the fill's type) or a norm vector (rows 0, F32) of std. */
static int s_add(model_gguf_write_t *w, s_fill_t *f, const char *name, int64_t cols, int64_t rows,
                 float std, char *err, size_t errlen) {
    int64_t ne[2] = {cols, rows};
    if (f->n_tensors == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        float *amp = realloc(f->amp, (size_t)cap * sizeof *amp);
        if (!amp)
            return -ENOMEM;
        f->amp = amp;
        f->cap = cap;
    }
    kern_type_t t = rows ? f->wtype : KERN_F32;
    int64_t rc = model_gguf_write_add_tensor(w, name, t, rows ? 2 : 1, ne, NULL, err, errlen);
    if (rc < 0)
        return (int)rc;
    f->amp[f->n_tensors++] = std * sqrtf(3.0f); /* uniform(-a, a) has std a / sqrt(3) */
    return 0;
}

/* The vocabulary and the llama metadata. */
static int s_metadata(model_gguf_write_t *w, const model_synth_t *c, int hd) {
    char **text = calloc((size_t)c->n_vocab, sizeof *text);
    float *scores = calloc((size_t)c->n_vocab, sizeof *scores);
    int32_t *types = calloc((size_t)c->n_vocab, sizeof *types);
    int rc = -ENOMEM;
    if (!text || !scores || !types)
        goto done;
    for (int i = 0; i < c->n_vocab; i++) {
        char buf[64];
        if (i < 3)
            snprintf(buf, sizeof buf, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else
            snprintf(buf, sizeof buf, "%s%d", c->vocab_tag, i);
        if (!(text[i] = strdup(buf)))
            goto done;
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : 1; /* unknown, control, normal */
    }
    rc = model_gguf_write_set_str(w, "general.architecture", "llama");
    rc = rc ? rc : model_gguf_write_set_str(w, "general.name", c->name);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.block_count", (uint32_t)c->n_layer);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.embedding_length", (uint32_t)c->d_model);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.feed_forward_length", (uint32_t)c->d_ff);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_head);
    rc = rc ? rc
            : model_gguf_write_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_head_kv);
    if (!rc && hd * c->n_head != c->d_model)
        rc = model_gguf_write_set_u32(w, "llama.attention.key_length", (uint32_t)hd);
    if (!rc && hd * c->n_head != c->d_model)
        rc = model_gguf_write_set_u32(w, "llama.attention.value_length", (uint32_t)hd);
    rc = rc ? rc : model_gguf_write_set_u32(w, "llama.context_length", 4096);
    rc = rc ? rc : model_gguf_write_set_f32(w, "llama.rope.freq_base", c->rope_base);
    rc = rc ? rc : model_gguf_write_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rc = rc ? rc : model_gguf_write_set_str(w, "tokenizer.ggml.model", "llama");
    rc = rc ? rc
            : model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)text,
                                           (uint64_t)c->n_vocab);
    rc = rc ? rc
            : model_gguf_write_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32,
                                       (uint64_t)c->n_vocab, scores);
    rc = rc ? rc
            : model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32,
                                       (uint64_t)c->n_vocab, types);
    rc = rc ? rc : model_gguf_write_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rc = rc ? rc : model_gguf_write_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rc = rc ? rc : model_gguf_write_set_bool(w, "tokenizer.ggml.add_bos_token", false);
done:
    for (int i = 0; text && i < c->n_vocab; i++)
        free(text[i]);
    free(text);
    free(scores);
    free(types);
    return rc;
}

/* The defaults of model_synth.h filled in; 0 or -EINVAL with the reason in err. */
static int s_defaults(model_synth_t *c, char *err, size_t errlen) {
    c->n_layer = c->n_layer ? c->n_layer : 2;
    c->d_model = c->d_model ? c->d_model : 64;
    c->n_head = c->n_head ? c->n_head : 4;
    c->n_head_kv = c->n_head_kv ? c->n_head_kv : 2;
    c->d_ff = c->d_ff ? c->d_ff : 128;
    c->n_vocab = c->n_vocab ? c->n_vocab : 64;
    c->seed = c->seed ? c->seed : 1;
    c->vocab_tag = c->vocab_tag ? c->vocab_tag : "t";
    c->out_std = c->out_std > 0 ? c->out_std : 0.2f;
    c->head_dim = c->head_dim ? c->head_dim : c->d_model / c->n_head;
    c->rope_base = c->rope_base > 0 ? c->rope_base : 10000.0f;
    c->name = c->name ? c->name : "synthetic";
    kern_type_t t = c->wtype;
    const kern_type_traits_t *tr = kern_type_traits(t);
    int bs = tr ? tr->block_size : 1;
    if (c->n_vocab < 4 || c->n_layer > 256 || c->n_head % c->n_head_kv ||
        (t != KERN_F32 && t != KERN_F16 && t != KERN_Q8_0 && t != KERN_Q4_K) || c->d_model % bs ||
        c->d_ff % bs || (c->n_head * c->head_dim) % bs) {
        snprintf(err, errlen,
                 "synthetic model: n_vocab >= 4, n_layer <= 256, heads a multiple of the KV "
                 "heads, weights F32/F16/Q8_0/Q4_K with rows a multiple of the type's block");
        return -EINVAL;
    }
    return 0;
}

int model_synth_write(const char *path, const model_synth_t *cfg, char *err, size_t errlen) {
    model_synth_t c = *cfg;
    int rc = s_defaults(&c, err, errlen);
    if (rc)
        return rc;
    model_gguf_write_t *w = model_gguf_write_new();
    s_fill_t f = {c.seed, c.wtype, 0, 0, NULL};
    rc = w ? s_metadata(w, &c, c.head_dim) : -ENOMEM;
    if (rc) {
        snprintf(err, errlen, "synthetic model: cannot set metadata (%d)", rc);
        goto done;
    }
    int d = c.d_model, q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
    float sd = 1.0f / sqrtf((float)d), sf = 1.0f / sqrtf((float)c.d_ff);
    rc = s_add(w, &f, "token_embd.weight", d, c.n_vocab, 1.0f, err, errlen);
    rc = rc ? rc : s_add(w, &f, "output_norm.weight", d, 0, 0, err, errlen);
    rc = rc ? rc : s_add(w, &f, "output.weight", d, c.n_vocab, c.out_std, err, errlen);
    for (int l = 0; l < c.n_layer && !rc; l++) {
        char n[64];
        const struct {
            const char *suffix;
            int cols, rows;
            float std;
        } t[] = {{"attn_norm", d, 0, 0},
                 {"attn_q", d, q, sd},
                 {"attn_k", d, kv, sd},
                 {"attn_v", d, kv, sd},
                 {"attn_output", q, d, 1.0f / sqrtf((float)q)},
                 {"ffn_norm", d, 0, 0},
                 {"ffn_gate", d, c.d_ff, sd},
                 {"ffn_up", d, c.d_ff, sd},
                 {"ffn_down", c.d_ff, d, sf}};
        for (size_t k = 0; !rc && k < sizeof t / sizeof *t; k++) {
            snprintf(n, sizeof n, "blk.%d.%s.weight", l, t[k].suffix);
            rc = s_add(w, &f, n, t[k].cols, t[k].rows, t[k].std, err, errlen);
        }
    }
    if (rc)
        goto done;
    model_gguf_write_set_fill(w, s_fill, &f);
    rc = model_gguf_write_save(w, path, err, errlen);
done:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "synthetic model: out of memory");
    free(f.amp);
    model_gguf_write_destroy(&w);
    return rc;
}

int model_synth_shape(const char *name, model_synth_t *c) {
    static const struct {
        const char *name;
        int n_layer, d_model, d_ff, n_head, n_head_kv, head_dim, n_vocab;
        float rope_base;
    } shapes[] = {
        {"llama-1b", 16, 2048, 8192, 32, 8, 64, 128256, 500000.0f},
        {"llama-3b", 28, 3072, 8192, 24, 8, 128, 128256, 500000.0f},
        {"llama-8b", 32, 4096, 14336, 32, 8, 128, 128256, 500000.0f},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (strcmp(name, shapes[i].name))
            continue;
        c->n_layer = shapes[i].n_layer;
        c->d_model = shapes[i].d_model;
        c->d_ff = shapes[i].d_ff;
        c->n_head = shapes[i].n_head;
        c->n_head_kv = shapes[i].n_head_kv;
        c->head_dim = shapes[i].head_dim;
        c->n_vocab = shapes[i].n_vocab;
        c->rope_base = shapes[i].rope_base;
        c->name = shapes[i].name;
        return 0;
    }
    return -EINVAL;
}
