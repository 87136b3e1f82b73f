/* model_llama.c - llama-architecture weights and the batched forward pass.
 *
 * The forward pass reads like the paper, one section per stage in dataflow order:
 *   x = embed(tokens)
 *   for each layer:
 *       h = rmsnorm(x) ; q,k,v = h Wq, h Wk, h Wv ; rope(q, k) ; KV[pos] = k, v
 *       x += attention(q, KV) Wo
 *       h = rmsnorm(x) ; x += (silu(h Wgate) * h Wup) Wdown
 *   logits = rmsnorm(x) Wout           (only for tokens that want them)
 * In a Mixture-of-Experts model (Mixtral layout, docs/MOE.md) the feed-forward
 * block routes each token to K of E experts, each a SwiGLU FFN of its own:
 *       h = rmsnorm(x) ; r = h Wrouter ; (e_k, w_k) = topK(r)
 *       x += sum_k w_k * (silu(h Wgate[e_k]) * h Wup[e_k]) Wdown[e_k]
 * with the step's (token, expert) pairs grouped by expert so that each expert
 * runs one matrix product over all its tokens.
 * The whole pass is one base_pool_run: every thread walks the same stages and
 * takes its share of each (rows of a matrix, or tokens), with a barrier where a
 * stage reads what another thread wrote.  Time goes to the matrix products
 * (kern gemm, activations quantized to 8 bits first) and, for long contexts,
 * attention.
 */
#include "model_llama.h"
#include "base_log.h"
#include "base_pool.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "model"
#define S_MAX_QTYPES 3    /* distinct activation formats one input may need */
#define S_MAX_EXPERTS 256 /* experts per layer we accept (Mixtral 8, DeepSeek-V3 256) */

typedef struct {
    float *attn_norm;  /* (d_model) */
    model_weight_t wq; /* (n_head*head_dim, d_model) */
    model_weight_t wk; /* (n_head_kv*head_dim, d_model) */
    model_weight_t wv; /* (n_head_kv*head_dim, d_model) */
    model_weight_t wo; /* (d_model, n_head*head_dim) */
    float *ffn_norm;   /* (d_model) */
    model_weight_t wg; /* (d_ff, d_model) */
    model_weight_t wu; /* (d_ff, d_model) */
    model_weight_t wd; /* (d_model, d_ff) */
    /* MoE layers (n_expert > 0) instead of wg, wu, wd: */
    model_weight_t wr;            /* (n_expert, d_model) router */
    model_weight_t *experts;      /* (3 * n_expert): gate, up, down of each expert, slabs of
                                     the 3-D tensors: eg (d_ff, d_model), eu, ed (d_model, d_ff) */
    model_weight_t *eg, *eu, *ed; /* (n_expert) views into experts */
} s_layer_t;

struct model_llama_t {
    model_gguf_t *gguf;  /* owns the mapping the weights point into */
    model_config_t cfg;  /* hyper-parameters */
    model_weight_t embd; /* (n_vocab, d_model) token embeddings */
    float *out_norm;     /* (d_model) */
    model_weight_t out;  /* (n_vocab, d_model); token_embd when tied */
    float *rope_freqs;   /* (n_rot/2) frequency divisors, or NULL */
    double *rope_theta;  /* (n_rot/2) angle per position of each rotated pair */
    s_layer_t *layers;   /* (n_layer) */
    size_t weight_bytes; /* sum of tensor sizes */
    size_t packed_bytes; /* sum of the packed copies */
};

/* ------------------------------------------------------------------ loading */

static int s_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int s_err(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", path, msg);
    return -EINVAL;
}

/* Find tensor `name` with shape (cols, rows) in GGUF order (ne[0] = cols). */
static int s_weight(model_llama_t *m, const char *name, int64_t cols, int64_t rows,
                    model_weight_t *w, char *err, size_t errlen) {
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    const char *path = model_gguf_path(m->gguf);
    if (!t)
        return s_err(err, errlen, path, "missing tensor '%s'", name);
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
        return s_err(err, errlen, path, "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                     name, (long long)t->ne[0], (long long)t->ne[1], (long long)cols,
                     (long long)rows);
    w->type = t->type;
    w->data = t->data;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = kern_row_size(t->type, cols);
    m->weight_bytes += t->nbytes;
    return 0;
}

/* The 3-D tensor `name` of E stacked matrices, shape [cols, rows, E] in GGUF
 * order; ws[e] (E entries) becomes expert e's matrix, a contiguous slab of it. */
static int s_experts(model_llama_t *m, const char *name, int64_t cols, int64_t rows, int E,
                     const char *dims, model_weight_t *ws, char *err, size_t errlen) {
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    const char *path = model_gguf_path(m->gguf);
    const char *a = m->cfg.arch;
    if (!t)
        return s_err(err, errlen, path, "missing tensor '%s' (an MoE model: %s.expert_count is %d)",
                     name, a, E);
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E)
        return s_err(err, errlen, path,
                     "tensor '%s' has %d dims [%lld, %lld, %lld], expected [%lld, %lld, %d] (%s)",
                     name, t->n_dims, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                     (long long)cols, (long long)rows, E, dims);
    size_t row_bytes = kern_row_size(t->type, cols);
    for (int e = 0; e < E; e++)
        ws[e] = (model_weight_t){
            .type = t->type,
            .data = (const uint8_t *)t->data + (size_t)e * rows * row_bytes,
            .rows = rows,
            .cols = cols,
            .row_bytes = row_bytes,
        };
    m->weight_bytes += t->nbytes;
    return 0;
}

/* A 1-D tensor of n elements, converted to a malloc'd float array. */
static int s_vector(model_llama_t *m, const char *name, int64_t n, float **out, char *err,
                    size_t errlen) {
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    const char *path = model_gguf_path(m->gguf);
    if (!t)
        return s_err(err, errlen, path, "missing tensor '%s'", name);
    if (t->n_dims != 1 || t->ne[0] != n)
        return s_err(err, errlen, path, "tensor '%s' has %lld elements, expected %lld", name,
                     (long long)t->ne[0], (long long)n);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return s_err(err, errlen, path, "out of memory");
    kern_ops_ref()->dequant_row(t->type, t->data, v, n);
    m->weight_bytes += t->nbytes;
    *out = v;
    return 0;
}

static bool s_get_int(const model_gguf_t *g, const char *arch, const char *key, int *out,
                      bool required) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v;
    if (!model_gguf_get_i64(g, k, &v) || v <= 0 || v > (1 << 30))
        return !required;
    *out = (int)v;
    return true;
}

/* The Mixture-of-Experts keys: <arch>.expert_count (E, absent or 0: dense),
 * <arch>.expert_used_count (K, 1..E) and strata.expert_gating. */
static int s_read_moe(const model_gguf_t *g, model_config_t *c, char *err, size_t errlen) {
    const char *path = model_gguf_path(g), *a = c->arch;
    char ke[160], ku[160];
    snprintf(ke, sizeof ke, "%s.expert_count", a);
    snprintf(ku, sizeof ku, "%s.expert_used_count", a);
    int64_t E = 0, K = 0;
    bool has_e = model_gguf_find(g, ke) != NULL, has_k = model_gguf_find(g, ku) != NULL;
    if (has_e && (!model_gguf_get_i64(g, ke, &E) || E < 0 || E > S_MAX_EXPERTS))
        return s_err(err, errlen, path, "%s must be an integer in 0..%d (0: dense)", ke,
                     S_MAX_EXPERTS);
    if (has_k && !model_gguf_get_i64(g, ku, &K))
        return s_err(err, errlen, path, "%s must be an integer", ku);
    if (E == 0 && K != 0)
        return s_err(err, errlen, path, "%s is %lld but the model has no experts (%s %s)", ku,
                     (long long)K, ke, has_e ? "is 0" : "is missing");
    if (E > 0 && !has_k)
        return s_err(err, errlen, path, "%s is missing, expected 1..%lld (%s)", ku, (long long)E,
                     ke);
    if (E > 0 && (K < 1 || K > E))
        return s_err(err, errlen, path, "%s is %lld, expected 1..%lld (%s)", ku, (long long)K,
                     (long long)E, ke);
    c->n_expert = (int)E;
    c->n_expert_used = (int)K;
    c->gating = MODEL_GATING_SOFTMAX_TOPK;
    if (model_gguf_find(g, "strata.expert_gating")) {
        static const char *const names[] = {"softmax_topk", "softmax_all", "unit"};
        char *v = NULL;
        if (!model_gguf_get_str(g, "strata.expert_gating", &v))
            return s_err(err, errlen, path,
                         "strata.expert_gating must be a string "
                         "(softmax_topk, softmax_all or unit)");
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(v, names[i]))
                found = i;
        if (found < 0) {
            s_err(err, errlen, path,
                  "unknown strata.expert_gating '%.60s' (valid: softmax_topk, "
                  "softmax_all, unit)",
                  v);
            free(v);
            return -EINVAL;
        }
        free(v);
        c->gating = (model_gating_t)found;
    }
    return 0;
}

int model_llama_read_config(const model_gguf_t *g, model_config_t *c, char *err, size_t errlen) {
    const char *path = model_gguf_path(g);
    memset(c, 0, sizeof *c);
    char *arch = NULL;
    if (!model_gguf_get_str(g, "general.architecture", &arch))
        return s_err(err, errlen, path, "missing general.architecture");
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    bool ok = !strcmp(arch, "llama") || !strcmp(arch, "mistral");
    free(arch);
    if (!ok)
        return s_err(err, errlen, path,
                     "unsupported architecture '%s' (strata runs llama-architecture models: "
                     "SmolLM2, TinyLlama, Llama 2/3.x, Mistral)",
                     c->arch);
    char *name = NULL;
    if (model_gguf_get_str(g, "general.name", &name)) {
        snprintf(c->name, sizeof c->name, "%s", name);
        free(name);
    } else {
        const char *b = strrchr(path, '/');
        snprintf(c->name, sizeof c->name, "%s", b ? b + 1 : path);
    }
    const char *a = c->arch;
    if (!s_get_int(g, a, "block_count", &c->n_layer, true) ||
        !s_get_int(g, a, "embedding_length", &c->d_model, true) ||
        !s_get_int(g, a, "feed_forward_length", &c->d_ff, true) ||
        !s_get_int(g, a, "attention.head_count", &c->n_head, true))
        return s_err(err, errlen, path,
                     "missing or invalid %s.block_count / embedding_length / "
                     "feed_forward_length / attention.head_count",
                     a);
    c->n_head_kv = c->n_head;
    s_get_int(g, a, "attention.head_count_kv", &c->n_head_kv, false);
    c->n_ctx_train = 2048;
    s_get_int(g, a, "context_length", &c->n_ctx_train, false);
    c->head_dim = c->d_model / c->n_head;
    s_get_int(g, a, "attention.key_length", &c->head_dim, false);
    c->n_rot = c->head_dim;
    s_get_int(g, a, "rope.dimension_count", &c->n_rot, false);
    if (c->n_head % c->n_head_kv || c->n_rot > c->head_dim || c->n_rot % 2 || c->head_dim % 2)
        return s_err(err, errlen, path,
                     "inconsistent heads: %d query heads, %d KV heads, "
                     "head_dim %d, rope dims %d",
                     c->n_head, c->n_head_kv, c->head_dim, c->n_rot);
    /* Every product of header values the model uses must fit in an int: query and
     * KV widths, and the KV elements one position takes over all layers. */
    int q_dim, kv_dim, kv_pos;
    if (__builtin_mul_overflow(c->n_head, c->head_dim, &q_dim) ||
        __builtin_mul_overflow(c->n_head_kv, c->head_dim, &kv_dim) ||
        __builtin_mul_overflow(kv_dim, 2, &kv_pos) ||
        __builtin_mul_overflow(kv_pos, c->n_layer, &kv_pos))
        return s_err(err, errlen, path,
                     "attention too large: %d layers, %d query heads, %d KV "
                     "heads of head_dim %d overflow",
                     c->n_layer, c->n_head, c->n_head_kv, c->head_dim);
    char k[160];
    double v;
    c->rope_base = 10000.0f;
    snprintf(k, sizeof k, "%s.rope.freq_base", a);
    if (model_gguf_get_f64(g, k, &v) && v > 0)
        c->rope_base = (float)v;
    c->rms_eps = 1e-5f;
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", a);
    if (model_gguf_get_f64(g, k, &v) && v > 0)
        c->rms_eps = (float)v;
    c->rope_neox = false; /* GGUF llama stores Q/K permuted for the adjacent-pair layout */
    return s_read_moe(g, c, err, errlen);
}

/* Repack w into the kernels' row-interleaved layout when the kernel table has
 * one for its type (the packed gemm is several times faster and batch-invariant).
 * Every matrix of a fused group (q/k/v, gate/up) gets the same treatment because
 * all rows counts here are multiples of 16 and the type decides. */
static int s_pack(model_llama_t *m, model_weight_t *w, const kern_ops_t *k) {
    if (w->packed || w->rows % 16 || !k->packed_size || !k->pack)
        return 0;
    size_t n = k->packed_size(w->type, w->cols, (int)w->rows);
    if (n == 0)
        return 0;
    void *p = NULL;
    if (posix_memalign(&p, 64, n))
        return -ENOMEM;
    k->pack(w->type, w->cols, (int)w->rows, w->data, w->row_bytes, p);
    w->packed = p;
    m->packed_bytes += n;
    return 0;
}

static int s_pack_all(model_llama_t *m, char *err, size_t errlen) {
    const kern_ops_t *k = kern_ops_best();
    int rc = 0;
    for (int l = 0; l < m->cfg.n_layer && !rc; l++) {
        s_layer_t *L = &m->layers[l];
        model_weight_t *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd, &L->wr};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0] && !rc; i++)
            rc = s_pack(m, ws[i], k);
        for (int e = 0; L->experts && e < 3 * m->cfg.n_expert && !rc; e++)
            rc = s_pack(m, &L->experts[e], k); /* each expert's slab on its own */
    }
    if (!rc)
        rc = s_pack(m, &m->out, k); /* a copy even when tied: the lookup reads embd.data */
    if (rc)
        s_err(err, errlen, model_gguf_path(m->gguf), "out of memory repacking weights");
    else if (m->packed_bytes)
        LOG_I(TAG, "repacked %.1f MiB of weights for the %s kernels", m->packed_bytes / 1048576.0,
              k->name);
    return rc;
}

/* Layer l's router and experts (model_config_t.n_expert > 0). */
static int s_load_moe_layer(model_llama_t *m, int l, char *err, size_t errlen) {
    const model_config_t *c = &m->cfg;
    s_layer_t *L = &m->layers[l];
    int E = c->n_expert;
    char n[4][64];
    const char *suffix[4] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int i = 0; i < 4; i++)
        snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, suffix[i]);
    if (!model_gguf_tensor(m->gguf, n[0]))
        return s_err(err, errlen, model_gguf_path(m->gguf),
                     "missing tensor '%s' (an MoE model: %s.expert_count is %d)", n[0], c->arch, E);
    L->experts = calloc((size_t)3 * E, sizeof *L->experts);
    if (!L->experts)
        return s_err(err, errlen, model_gguf_path(m->gguf), "out of memory");
    L->eg = L->experts;
    L->eu = L->experts + E;
    L->ed = L->experts + 2 * E;
    return s_weight(m, n[0], c->d_model, E, &L->wr, err, errlen) ||
                   s_experts(m, n[1], c->d_model, c->d_ff, E, "d_model, d_ff, expert_count", L->eg,
                             err, errlen) ||
                   s_experts(m, n[2], c->d_model, c->d_ff, E, "d_model, d_ff, expert_count", L->eu,
                             err, errlen) ||
                   s_experts(m, n[3], c->d_ff, c->d_model, E, "d_ff, d_model, expert_count", L->ed,
                             err, errlen)
               ? -EINVAL
               : 0;
}

model_llama_t *model_llama_load(const char *path, char *err, size_t errlen) {
    model_llama_t *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    m->gguf = model_gguf_open(path, err, errlen);
    if (!m->gguf || model_llama_read_config(m->gguf, &m->cfg, err, errlen))
        goto fail;
    model_config_t *c = &m->cfg;
    const model_gguf_tensor_t *te = model_gguf_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims != 2) {
        s_err(err, errlen, path, "missing 2-D tensor 'token_embd.weight'");
        goto fail;
    }
    if (te->ne[1] > INT32_MAX) {
        s_err(err, errlen, path, "vocabulary of %lld tokens is too large", (long long)te->ne[1]);
        goto fail;
    }
    c->n_vocab = (int)te->ne[1];
    /* read_config checked that these products fit */
    int q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    if (s_weight(m, "token_embd.weight", c->d_model, c->n_vocab, &m->embd, err, errlen) ||
        s_vector(m, "output_norm.weight", c->d_model, &m->out_norm, err, errlen))
        goto fail;
    if (model_gguf_tensor(m->gguf, "output.weight")) {
        if (s_weight(m, "output.weight", c->d_model, c->n_vocab, &m->out, err, errlen))
            goto fail;
    } else {
        m->out = m->embd; /* tied embeddings */
    }
    if (model_gguf_tensor(m->gguf, "rope_freqs.weight") &&
        s_vector(m, "rope_freqs.weight", c->n_rot / 2, &m->rope_freqs, err, errlen))
        goto fail;
    /* RoPE: pair i turns by pos * base^(-2i/n_rot) (divided by rope_freqs[i] when
     * the model has them); the per-pair rate is fixed, so compute it once. */
    m->rope_theta = malloc((size_t)(c->n_rot / 2) * sizeof *m->rope_theta);
    if (!m->rope_theta) {
        s_err(err, errlen, path, "out of memory");
        goto fail;
    }
    for (int i = 0; i < c->n_rot / 2; i++) {
        m->rope_theta[i] = pow((double)c->rope_base, -2.0 * i / c->n_rot);
        if (m->rope_freqs)
            m->rope_theta[i] /= m->rope_freqs[i];
    }
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) {
        s_err(err, errlen, path, "out of memory");
        goto fail;
    }
    for (int l = 0; l < c->n_layer; l++) {
        s_layer_t *L = &m->layers[l];
        char n[9][64];
        const char *suffix[9] = {"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
                                 "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++)
            snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, suffix[i]);
        if (s_vector(m, n[0], c->d_model, &L->attn_norm, err, errlen) ||
            s_weight(m, n[1], c->d_model, q_dim, &L->wq, err, errlen) ||
            s_weight(m, n[2], c->d_model, kv_dim, &L->wk, err, errlen) ||
            s_weight(m, n[3], c->d_model, kv_dim, &L->wv, err, errlen) ||
            s_weight(m, n[4], q_dim, c->d_model, &L->wo, err, errlen) ||
            s_vector(m, n[5], c->d_model, &L->ffn_norm, err, errlen))
            goto fail;
        if (c->n_expert > 0) {
            if (s_load_moe_layer(m, l, err, errlen))
                goto fail;
            continue;
        }
        snprintf(n[0], sizeof n[0], "blk.%d.ffn_gate_exps.weight", l);
        if (model_gguf_tensor(m->gguf, n[0])) {
            s_err(err, errlen, path,
                  "tensor '%s' but no %s.expert_count: an MoE model needs "
                  "%s.expert_count and %s.expert_used_count",
                  n[0], c->arch, c->arch, c->arch);
            goto fail;
        }
        if (s_weight(m, n[6], c->d_model, c->d_ff, &L->wg, err, errlen) ||
            s_weight(m, n[7], c->d_model, c->d_ff, &L->wu, err, errlen) ||
            s_weight(m, n[8], c->d_ff, c->d_model, &L->wd, err, errlen))
            goto fail;
    }
    c->ftype = c->n_layer > 0 ? m->layers[0].wq.type : m->embd.type;
    if (s_pack_all(m, err, errlen))
        goto fail;
    return m;
fail:
    model_llama_destroy(&m);
    return NULL;
}

void model_llama_destroy(model_llama_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_llama_t *m = *self_p;
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) {
        s_layer_t *L = &m->layers[l];
        free(L->attn_norm);
        free(L->ffn_norm);
        model_weight_t *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd, &L->wr};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            free(ws[i]->packed);
        for (int e = 0; L->experts && e < 3 * m->cfg.n_expert; e++)
            free(L->experts[e].packed);
        free(L->experts);
    }
    free(m->out.packed);
    free(m->layers);
    free(m->out_norm);
    free(m->rope_freqs);
    free(m->rope_theta);
    model_gguf_destroy(&m->gguf);
    free(m);
    *self_p = NULL;
}

const model_config_t *model_llama_config(const model_llama_t *self) {
    return &self->cfg;
}
const model_gguf_t *model_llama_gguf(const model_llama_t *self) {
    return self->gguf;
}
size_t model_llama_weight_bytes(const model_llama_t *self) {
    return self->weight_bytes;
}

/* ------------------------------------------------------------------ KV pool */

kern_kv_shape_t model_kv_shape(const model_config_t *c, int block_size) {
    return (kern_kv_shape_t){c->n_layer, c->n_head_kv, c->head_dim, block_size};
}

/* ------------------------------------------------------------------ context */

/* The activation formats one input must be quantized into for its consumers. */
typedef struct {
    int n;                          /* formats in use */
    kern_type_t type[S_MAX_QTYPES]; /* format; slot j lives in ctx->qbuf[j] */
    size_t row_bytes[S_MAX_QTYPES]; /* bytes per row in that format */
} s_plan_t;

enum { S_PLAN_QKV, S_PLAN_WO, S_PLAN_GU, S_PLAN_WD, S_PLAN_ROUTER, S_PLANS_PER_LAYER };

struct model_ctx_t {
    const model_llama_t *m; /* borrowed */
    const kern_ops_t *k;    /* kernel table */
    base_pool_t *pool;      /* threads */
    int max_tokens;         /* batch capacity */
    int max_rows;           /* FFN rows: max_tokens * n_expert_used (max_tokens when dense) */
    int max_ctx;            /* positions attended at most */
    float *x;               /* (max_tokens, d_model) residual stream */
    float *h;               /* (max_tokens, d_model) normed input of a sub-layer */
    float *q;               /* (max_tokens, n_head*head_dim) */
    float *kv_k;            /* (max_tokens, n_head_kv*head_dim) new keys */
    float *kv_v;            /* (max_tokens, n_head_kv*head_dim) new values */
    float *att;             /* (max_tokens, n_head*head_dim) attention output */
    float *tmp;             /* (max_tokens, d_model) sub-layer output before the residual add */
    float *ff_g;            /* (max_rows, d_ff) gate, then silu(gate)*up */
    float *ff_u;            /* (max_rows, d_ff) up */
    float *cs;              /* (max_tokens, n_rot) cos/sin pairs per token */
    float *scratch;         /* (n_threads, n_head/n_head_kv * max_ctx) attention scores */
    int *out_rows;          /* (max_tokens) batch index of each wanted token */
    uint8_t *qbuf[S_MAX_QTYPES]; /* (max_rows, widest row) quantized activations */
    /* MoE routing of the step (NULL when dense); rows = routed (token, expert) pairs */
    float *rlog;      /* (max_tokens, n_expert) router logits */
    float *gw;        /* (max_tokens, K) gate weight of each token's k-th expert */
    int32_t *row_of;  /* (max_tokens, K) row of each token's k-th expert */
    int32_t *row_tok; /* (max_rows) token of each row; rows grouped by expert ascending */
    int32_t *row_exp; /* (max_rows) expert of each row */
    int *off;         /* (n_expert + 1) rows [off[e], off[e+1]) are expert e's */
    float *y;         /* (max_rows, d_model) expert outputs, before the gate weights */
    int moe_rc;       /* the remote executor's error in this run, or 0 */
    /* model_moe_expert_rows' job, read by its workers */
    struct {
        int layer, expert, n;
        const float *h;
        float *y;
    } xr;
    s_plan_t *plans; /* (n_layer * S_PLANS_PER_LAYER + 1) formats per input, fixed at creation */
    /* per-run state, read by the workers */
    const model_batch_t *batch;
    const kern_kv_pool_t *kv;
    float *logits;
    int n_out;
    /* hooks (model_llama.h), borrowed */
    model_ffn_tap_fn tap; /* FFN tap or NULL */
    void *tap_user;
    model_moe_exec_fn moe_exec; /* remote experts or NULL (local) */
    void *moe_user;
};

static size_t s_max_row_bytes(int64_t cols) {
    size_t best = cols * sizeof(float);
    kern_type_t act[] = {KERN_Q8_0, KERN_Q8_1, KERN_Q8_K};
    for (int i = 0; i < 3; i++)
        if (cols % kern_type_traits(act[i])->block_size == 0) {
            size_t b = kern_row_size(act[i], cols);
            if (b > best)
                best = b;
        }
    return best;
}

/* Which activation formats an input consumed by weights ws[0..nw) needs. */
static void s_plan_make(s_plan_t *qi, const model_weight_t *const *ws, int nw) {
    qi->n = 0;
    for (int i = 0; i < nw; i++) {
        kern_type_t t = kern_type_traits(ws[i]->type)->vec_dot_type;
        bool seen = false;
        for (int j = 0; j < qi->n; j++)
            seen |= qi->type[j] == t;
        if (!seen) {
            qi->type[qi->n] = t;
            qi->row_bytes[qi->n] = kern_row_size(t, ws[i]->cols);
            qi->n++;
        }
    }
}

static const uint8_t *s_plan_get(const model_ctx_t *c, const s_plan_t *qi, kern_type_t t,
                                 size_t *row_bytes) {
    for (int j = 0; j < qi->n; j++)
        if (qi->type[j] == t) {
            *row_bytes = qi->row_bytes[j];
            return c->qbuf[j];
        }
    return NULL; /* unreachable: s_plan_make saw every weight */
}

/* Quantize rows [t0, t1) of src (cols each) into every format of plan qi. */
static void s_plan_fill(model_ctx_t *c, const s_plan_t *qi, const float *src, int cols, int t0,
                        int t1) {
    for (int j = 0; j < qi->n; j++)
        for (int t = t0; t < t1; t++)
            c->k->quant_row(qi->type[j], src + (size_t)t * cols,
                            c->qbuf[j] + (size_t)t * qi->row_bytes[j], cols);
}

model_ctx_t *model_ctx_new(const model_llama_t *m, int max_tokens, int max_ctx, int n_threads,
                           const kern_ops_t *kernels) {
    if (max_tokens < 1 || max_ctx < 1 || n_threads < 1)
        return NULL;
    model_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const model_config_t *cfg = &m->cfg;
    c->m = m;
    c->k = kernels ? kernels : kern_ops_best();
    c->max_tokens = max_tokens;
    c->max_ctx = max_ctx;
    c->pool = base_pool_new(n_threads);
    size_t T = (size_t)max_tokens, E = (size_t)cfg->n_expert, K = (size_t)cfg->n_expert_used;
    size_t R = E ? T * K : T; /* FFN rows */
    c->max_rows = (int)R;
    int q_dim = cfg->n_head * cfg->head_dim, kv_dim = cfg->n_head_kv * cfg->head_dim;
    int widest = cfg->d_model > q_dim ? cfg->d_model : q_dim;
    if (cfg->d_ff > widest)
        widest = cfg->d_ff;
    c->x = malloc(T * cfg->d_model * sizeof(float));
    c->h = malloc(T * cfg->d_model * sizeof(float));
    c->q = malloc(T * q_dim * sizeof(float));
    c->kv_k = malloc(T * kv_dim * sizeof(float));
    c->kv_v = malloc(T * kv_dim * sizeof(float));
    c->att = malloc(T * q_dim * sizeof(float));
    c->tmp = malloc(T * cfg->d_model * sizeof(float));
    c->ff_g = malloc(R * cfg->d_ff * sizeof(float));
    c->ff_u = malloc(R * cfg->d_ff * sizeof(float));
    c->cs = malloc(T * cfg->n_rot * sizeof(float));
    c->scratch =
        malloc((size_t)n_threads * (cfg->n_head / cfg->n_head_kv) * max_ctx * sizeof(float));
    c->out_rows = malloc(T * sizeof(int));
    bool ok = c->pool && c->x && c->h && c->q && c->kv_k && c->kv_v && c->att && c->tmp &&
              c->ff_g && c->ff_u && c->cs && c->scratch && c->out_rows;
    if (ok && E) {
        c->rlog = malloc(T * E * sizeof(float));
        c->gw = malloc(T * K * sizeof(float));
        c->row_of = malloc(T * K * sizeof(int32_t));
        c->row_tok = malloc(R * sizeof(int32_t));
        c->row_exp = malloc(R * sizeof(int32_t));
        c->off = malloc((E + 1) * sizeof(int));
        c->y = malloc(R * cfg->d_model * sizeof(float));
        ok = c->rlog && c->gw && c->row_of && c->row_tok && c->row_exp && c->off && c->y;
    }
    for (int i = 0; ok && i < S_MAX_QTYPES; i++) {
        c->qbuf[i] = malloc(R * s_max_row_bytes(widest) + 64);
        ok = c->qbuf[i] != NULL;
    }
    c->plans = calloc((size_t)cfg->n_layer * S_PLANS_PER_LAYER + 1, sizeof *c->plans);
    ok = ok && c->plans;
    for (int l = 0; ok && l < cfg->n_layer; l++) {
        const s_layer_t *L = &m->layers[l];
        s_plan_t *p = c->plans + (size_t)l * S_PLANS_PER_LAYER;
        const model_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv}, *gu[2] = {&L->wg, &L->wu};
        const model_weight_t *wd = &L->wd;
        if (E) { /* every expert of a layer has the types of expert 0 (one tensor each) */
            gu[0] = &L->eg[0];
            gu[1] = &L->eu[0];
            wd = &L->ed[0];
            s_plan_make(&p[S_PLAN_ROUTER], (const model_weight_t *[]){&L->wr}, 1);
        }
        s_plan_make(&p[S_PLAN_QKV], qkv, 3);
        s_plan_make(&p[S_PLAN_WO], (const model_weight_t *[]){&L->wo}, 1);
        s_plan_make(&p[S_PLAN_GU], gu, 2);
        s_plan_make(&p[S_PLAN_WD], &wd, 1);
    }
    if (ok)
        s_plan_make(&c->plans[(size_t)cfg->n_layer * S_PLANS_PER_LAYER],
                    (const model_weight_t *[]){&m->out}, 1);
    if (!ok)
        model_ctx_destroy(&c);
    return c;
}

void model_ctx_destroy(model_ctx_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_ctx_t *c = *self_p;
    base_pool_destroy(&c->pool);
    free(c->x);
    free(c->h);
    free(c->q);
    free(c->kv_k);
    free(c->kv_v);
    free(c->att);
    free(c->tmp);
    free(c->ff_g);
    free(c->ff_u);
    free(c->cs);
    free(c->scratch);
    free(c->out_rows);
    free(c->rlog);
    free(c->gw);
    free(c->row_of);
    free(c->row_tok);
    free(c->row_exp);
    free(c->off);
    free(c->y);
    for (int i = 0; i < S_MAX_QTYPES; i++)
        free(c->qbuf[i]);
    free(c->plans);
    free(c);
    *self_p = NULL;
}

int model_ctx_max_tokens(const model_ctx_t *self) {
    return self->max_tokens;
}
int model_ctx_threads(const model_ctx_t *self) {
    return base_pool_size(self->pool);
}

/* ------------------------------------------------------------------ stages */

/* This thread's share of out = X W^T for each weight in ws (outputs outs, each
 * row-major (n, rows)), X the n quantized activation rows from row x0 of the
 * plan's buffers.  Rows are split in multiples of 16 so SIMD tiles stay whole. */
static void s_matmul(model_ctx_t *c, const s_plan_t *qi, const model_weight_t *const *ws,
                     float *const *outs, int nw, int x0, int n, int ith, int nth) {
    int total = 0;
    for (int i = 0; i < nw; i++)
        total += (int)ws[i]->rows;
    int lo, hi;
    base_pool_split(total, 16, ith, nth, &lo, &hi);
    int base = 0;
    for (int i = 0; i < nw && lo < hi; i++) {
        const model_weight_t *w = ws[i];
        int r0 = lo - base, r1 = hi - base;
        if (r0 < 0)
            r0 = 0;
        if (r1 > w->rows)
            r1 = (int)w->rows;
        if (r0 < r1) {
            size_t xs = 0;
            const uint8_t *xq = s_plan_get(c, qi, kern_type_traits(w->type)->vec_dot_type, &xs);
            xq += (size_t)x0 * xs;
            if (w->packed && c->k->gemm_packed && r0 % 16 == 0)
                c->k->gemm_packed(w->type, w->cols, r0, r1 - r0, n, w->packed, xq, xs, outs[i] + r0,
                                  (size_t)w->rows);
            else
                c->k->gemm(w->type, w->cols, r1 - r0, n,
                           (const uint8_t *)w->data + r0 * w->row_bytes, w->row_bytes, xq, xs,
                           outs[i] + r0, (size_t)w->rows);
        }
        base += (int)w->rows;
    }
}

/* Embedding lookup and RoPE angles for this thread's tokens. */
static void s_stage_embed(model_ctx_t *c, int t0, int t1) {
    const model_config_t *cfg = &c->m->cfg;
    const model_batch_t *b = c->batch;
    for (int t = t0; t < t1; t++) {
        const model_weight_t *e = &c->m->embd;
        c->k->dequant_row(e->type, (const uint8_t *)e->data + (size_t)b->tokens[t] * e->row_bytes,
                          c->x + (size_t)t * cfg->d_model, cfg->d_model);
        float *cs = c->cs + (size_t)t * cfg->n_rot;
        for (int i = 0; i < cfg->n_rot / 2; i++) {
            double th = b->pos[t] * c->m->rope_theta[i];
            cs[2 * i] = (float)cos(th);
            cs[2 * i + 1] = (float)sin(th);
        }
    }
}

/* Apply RoPE to q and k of this thread's tokens and store k, v into the pool:
 * as floats, halves, or (KERN_I8) each head's row of D values quantized to
 * int8 with one float scale, kern_i8_quant_row, the scale in the slab's
 * (block_size) scale array after its (block_size, D) int8 values. */
static void s_stage_rope_store(model_ctx_t *c, int layer, int t0, int t1) {
    const model_config_t *cfg = &c->m->cfg;
    const model_batch_t *b = c->batch;
    const kern_kv_pool_t *kv = c->kv;
    int D = cfg->head_dim, H = cfg->n_head, Hkv = cfg->n_head_kv;
    size_t slab =
        kern_kv_slab_bytes(kv->type, kv->block_size, D); /* bytes of one (layer, K|V, head) */
    size_t elt = kv->type == KERN_F32 ? 4 : kv->type == KERN_F16 ? 2 : 1;
    for (int t = t0; t < t1; t++) {
        const float *cs = c->cs + (size_t)t * cfg->n_rot;
        float *q = c->q + (size_t)t * H * D;
        float *k = c->kv_k + (size_t)t * Hkv * D;
        const float *v = c->kv_v + (size_t)t * Hkv * D;
        c->k->rope(q, H, D, cfg->n_rot, cs, cfg->rope_neox);
        c->k->rope(k, Hkv, D, cfg->n_rot, cs, cfg->rope_neox);
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        int p = b->pos[t];
        uint8_t *blk = kv->base + (size_t)s->blocks[p / kv->block_size] * kv->block_bytes;
        int slot = p % kv->block_size;
        for (int h = 0; h < Hkv; h++) {
            uint8_t *ks = blk + ((size_t)(layer * 2 + 0) * Hkv + h) * slab; /* K slab */
            uint8_t *vs = blk + ((size_t)(layer * 2 + 1) * Hkv + h) * slab; /* V slab */
            uint8_t *kr = ks + (size_t)slot * D * elt, *vr = vs + (size_t)slot * D * elt;
            if (kv->type == KERN_F32) {
                memcpy(kr, k + h * D, D * sizeof(float));
                memcpy(vr, v + h * D, D * sizeof(float));
            } else if (kv->type == KERN_F16) { /* round to nearest even, as kern_f32_to_f16 */
                c->k->quant_row(KERN_F16, k + h * D, kr, D);
                c->k->quant_row(KERN_F16, v + h * D, vr, D);
            } else { /* KERN_I8: the row, then its scale at (block_size, D) + slot floats */
                size_t so = (size_t)kv->block_size * D + 4 * (size_t)slot;
                float kscale = kern_i8_quant_row(k + h * D, (int8_t *)kr, D);
                float vscale = kern_i8_quant_row(v + h * D, (int8_t *)vr, D);
                memcpy(ks + so, &kscale, 4);
                memcpy(vs + so, &vscale, 4);
            }
        }
    }
}

/* Attention for this thread's share of (token, kv head) pairs. */
static void s_stage_attention(model_ctx_t *c, int layer, int n, int ith, int nth) {
    const model_config_t *cfg = &c->m->cfg;
    const model_batch_t *b = c->batch;
    const kern_kv_pool_t *kv = c->kv;
    int D = cfg->head_dim, H = cfg->n_head, Hkv = cfg->n_head_kv, G = H / Hkv;
    size_t slab = kern_kv_slab_bytes(kv->type, kv->block_size, D);
    int lo, hi;
    base_pool_split(n * Hkv, 1, ith, nth, &lo, &hi);
    float *scratch = c->scratch + (size_t)ith * G * c->max_ctx;
    for (int w = lo; w < hi; w++) {
        int t = w / Hkv, h = w % Hkv;
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        kern_attn_args_t a = {
            .head_dim = D,
            .n_q = G,
            .q = c->q + ((size_t)t * H + (size_t)h * G) * D,
            .out = c->att + ((size_t)t * H + (size_t)h * G) * D,
            .n_ctx = b->pos[t] + 1,
            .blocks = s->blocks,
            .block_size = kv->block_size,
            .k_base = kv->base + ((size_t)(layer * 2 + 0) * Hkv + h) * slab,
            .v_base = kv->base + ((size_t)(layer * 2 + 1) * Hkv + h) * slab,
            .block_stride = kv->block_bytes,
            .kv_type = kv->type,
            .scale = 1.0f / sqrtf((float)D),
            .scratch = scratch,
        };
        c->k->attention(&a);
    }
}

/* ------------------------------------------------------------------ MoE */

/* Route every token of the step (one thread): its K experts by router logit,
 * ties to the lower expert index, in rank order (largest first); their gate
 * weights by the gating mode; then the (token, expert) rows grouped by expert
 * ascending, each expert's rows in token order.  Cheap: n * K * E compares. */
static void s_route(model_ctx_t *c, int n) {
    const model_config_t *cfg = &c->m->cfg;
    const int E = cfg->n_expert, K = cfg->n_expert_used;
    int32_t sel[S_MAX_EXPERTS];
    bool used[S_MAX_EXPERTS];
    for (int e = 0; e <= E; e++)
        c->off[e] = 0;
    for (int t = 0; t < n; t++) {
        const float *lg = c->rlog + (size_t)t * E;
        float *w = c->gw + (size_t)t * K;
        memset(used, 0, (size_t)E * sizeof *used);
        for (int kk = 0; kk < K; kk++) { /* strict > : the lower index wins a tie */
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!used[e] && (best < 0 || lg[e] > lg[best]))
                    best = e;
            used[best] = true;
            sel[kk] = best;
        }
        /* softmax over the K (or all E) logits, max subtracted, in double */
        double mx = lg[sel[0]], sum = 0;
        if (cfg->gating == MODEL_GATING_SOFTMAX_ALL)
            for (int e = 0; e < E; e++)
                sum += exp((double)lg[e] - mx);
        else
            for (int kk = 0; kk < K; kk++)
                sum += exp((double)lg[sel[kk]] - mx);
        for (int kk = 0; kk < K; kk++) {
            w[kk] = cfg->gating == MODEL_GATING_UNIT ? 1.0f
                                                     : (float)(exp((double)lg[sel[kk]] - mx) / sum);
            c->row_of[(size_t)t * K + kk] = sel[kk]; /* the expert for now; its row below */
            c->off[sel[kk] + 1]++;
        }
    }
    for (int e = 0; e < E; e++)
        c->off[e + 1] += c->off[e];
    int fill[S_MAX_EXPERTS];
    memcpy(fill, c->off, (size_t)E * sizeof *fill);
    for (int t = 0; t < n; t++)
        for (int kk = 0; kk < K; kk++) {
            int32_t *r = &c->row_of[(size_t)t * K + kk];
            int e = *r, row = fill[e]++;
            c->row_tok[row] = t;
            c->row_exp[row] = e;
            *r = row;
        }
}

/* This thread's share of y = down(swiglu(gate h, up h)) for every row of layer
 * l's experts: rows [off[e], off[e+1]) go through expert e, row r reads
 * h[tok[r]] (tok NULL: h[r]).  Each expert's rows are one matrix product; the
 * rows of each matrix are split over the threads.  Ends with a barrier. */
static void s_experts_run(model_ctx_t *c, int l, const float *h, const int32_t *tok, const int *off,
                          float *y, int ith, int nth) {
    const model_config_t *cfg = &c->m->cfg;
    const s_layer_t *L = &c->m->layers[l];
    const s_plan_t *P = c->plans + (size_t)l * S_PLANS_PER_LAYER;
    const int d = cfg->d_model, ff = cfg->d_ff, E = cfg->n_expert, rows = off[E];
    int r0, r1;
    base_pool_split(rows, 1, ith, nth, &r0, &r1);
    /* gather each row's input, quantized for gate/up (quantizing is per row, so
     * a row's bytes do not depend on where it sits) */
    for (int j = 0; j < P[S_PLAN_GU].n; j++)
        for (int r = r0; r < r1; r++)
            c->k->quant_row(P[S_PLAN_GU].type[j], h + (size_t)(tok ? tok[r] : r) * d,
                            c->qbuf[j] + (size_t)r * P[S_PLAN_GU].row_bytes[j], d);
    base_pool_barrier(c->pool);
    for (int e = 0; e < E; e++) {
        if (off[e + 1] == off[e])
            continue;
        const model_weight_t *gu[2] = {&L->eg[e], &L->eu[e]};
        float *gu_out[2] = {c->ff_g + (size_t)off[e] * ff, c->ff_u + (size_t)off[e] * ff};
        s_matmul(c, &P[S_PLAN_GU], gu, gu_out, 2, off[e], off[e + 1] - off[e], ith, nth);
    }
    base_pool_barrier(c->pool);
    for (int r = r0; r < r1; r++)
        c->k->swiglu(c->ff_g + (size_t)r * ff, c->ff_g + (size_t)r * ff, c->ff_u + (size_t)r * ff,
                     ff);
    s_plan_fill(c, &P[S_PLAN_WD], c->ff_g, ff, r0, r1);
    base_pool_barrier(c->pool);
    for (int e = 0; e < E; e++) {
        if (off[e + 1] == off[e])
            continue;
        const model_weight_t *wd[1] = {&L->ed[e]};
        float *out = y + (size_t)off[e] * d;
        s_matmul(c, &P[S_PLAN_WD], wd, &out, 1, off[e], off[e + 1] - off[e], ith, nth);
    }
    base_pool_barrier(c->pool);
}

/* The MoE feed-forward of layer l, c->h holding rmsnorm(x) of this thread's
 * tokens: route, run the experts (here, or through the remote executor), then
 * x += sum_k w_k y_k for this thread's tokens, summed in rank order k so a
 * token's result does not depend on the rest of the batch.  Returns 0, or the
 * executor's error (the same in every thread). */
static int s_stage_moe(model_ctx_t *c, int l, int n, int ith, int nth, int t0, int t1) {
    const model_config_t *cfg = &c->m->cfg;
    const s_layer_t *L = &c->m->layers[l];
    const s_plan_t *P = c->plans + (size_t)l * S_PLANS_PER_LAYER;
    const int d = cfg->d_model, K = cfg->n_expert_used;
    const model_weight_t *wr[1] = {&L->wr};
    s_plan_fill(c, &P[S_PLAN_ROUTER], c->h, d, t0, t1);
    base_pool_barrier(c->pool);
    s_matmul(c, &P[S_PLAN_ROUTER], wr, &c->rlog, 1, 0, n, ith, nth);
    base_pool_barrier(c->pool);
    if (ith == 0) {
        s_route(c, n);
        if (c->tap)
            c->tap(c->tap_user, l, n, c->h, d, NULL, cfg->d_ff);
        if (c->moe_exec) {
            model_moe_call_t call = {
                .layer = l,
                .n_tokens = n,
                .d_model = d,
                .n_expert = cfg->n_expert,
                .h = c->h,
                .logits = c->rlog,
                .n_rows = c->off[cfg->n_expert],
                .token = c->row_tok,
                .expert = c->row_exp,
                .y = c->y,
            };
            int rc = c->moe_exec(c->moe_user, &call);
            c->moe_rc = rc < 0 ? rc : 0;
        }
    }
    base_pool_barrier(c->pool);
    if (c->moe_exec) {
        if (c->moe_rc)
            return c->moe_rc;
    } else {
        s_experts_run(c, l, c->h, c->row_tok, c->off, c->y, ith, nth);
    }
    for (int t = t0; t < t1; t++) {
        float *x = c->x + (size_t)t * d, *acc = c->tmp + (size_t)t * d;
        const float *w = c->gw + (size_t)t * K;
        const int32_t *row = c->row_of + (size_t)t * K;
        memset(acc, 0, (size_t)d * sizeof *acc);
        for (int kk = 0; kk < K; kk++) {
            const float *yr = c->y + (size_t)row[kk] * d;
            for (int i = 0; i < d; i++)
                acc[i] += w[kk] * yr[i];
        }
        for (int i = 0; i < d; i++)
            x[i] += acc[i];
    }
    return 0;
}

static void s_forward_worker(void *arg, int ith, int nth) {
    model_ctx_t *c = arg;
    const model_llama_t *m = c->m;
    const model_config_t *cfg = &m->cfg;
    const kern_ops_t *k = c->k;
    base_pool_t *pool = c->pool;
    const int n = c->batch->n_tokens, d = cfg->d_model, ff = cfg->d_ff;
    const int q_dim = cfg->n_head * cfg->head_dim;
    int t0, t1; /* this thread's tokens */
    base_pool_split(n, 1, ith, nth, &t0, &t1);

    s_stage_embed(c, t0, t1);

    for (int l = 0; l < cfg->n_layer; l++) {
        const s_layer_t *L = &m->layers[l];
        const s_plan_t *P = c->plans + (size_t)l * S_PLANS_PER_LAYER;
        /* ---- attention block: h = rmsnorm(x); q, k, v = h W */
        const model_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->kv_k, c->kv_v};
        for (int t = t0; t < t1; t++)
            k->rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->attn_norm, d, cfg->rms_eps);
        s_plan_fill(c, &P[S_PLAN_QKV], c->h, d, t0, t1);
        base_pool_barrier(pool);
        s_matmul(c, &P[S_PLAN_QKV], qkv, qkv_out, 3, 0, n, ith, nth);
        base_pool_barrier(pool);
        s_stage_rope_store(c, l, t0, t1);
        base_pool_barrier(pool);
        s_stage_attention(c, l, n, ith, nth);
        base_pool_barrier(pool);
        /* ---- x += att Wo */
        const model_weight_t *wo[1] = {&L->wo};
        s_plan_fill(c, &P[S_PLAN_WO], c->att, q_dim, t0, t1);
        base_pool_barrier(pool);
        s_matmul(c, &P[S_PLAN_WO], wo, &c->tmp, 1, 0, n, ith, nth);
        base_pool_barrier(pool);
        /* ---- feed-forward: h = rmsnorm(x); x += (silu(h Wg) * h Wu) Wd */
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * d;
            const float *o = c->tmp + (size_t)t * d;
            for (int i = 0; i < d; i++)
                x[i] += o[i];
            k->rmsnorm(c->h + (size_t)t * d, x, L->ffn_norm, d, cfg->rms_eps);
        }
        if (cfg->n_expert) {
            if (s_stage_moe(c, l, n, ith, nth, t0, t1))
                return; /* the remote executor failed: every thread leaves here */
            continue;
        }
        const model_weight_t *gu[2] = {&L->wg, &L->wu};
        float *gu_out[2] = {c->ff_g, c->ff_u};
        s_plan_fill(c, &P[S_PLAN_GU], c->h, d, t0, t1);
        base_pool_barrier(pool);
        s_matmul(c, &P[S_PLAN_GU], gu, gu_out, 2, 0, n, ith, nth);
        base_pool_barrier(pool);
        const model_weight_t *wd[1] = {&L->wd};
        for (int t = t0; t < t1; t++)
            k->swiglu(c->ff_g + (size_t)t * ff, c->ff_g + (size_t)t * ff, c->ff_u + (size_t)t * ff,
                      ff);
        s_plan_fill(c, &P[S_PLAN_WD], c->ff_g, ff, t0, t1);
        base_pool_barrier(pool);
        /* The tap reads h and ff_g, which nothing writes before the next barrier
         * (Wdown writes tmp); the others wait for thread 0 there. */
        if (c->tap && ith == 0)
            c->tap(c->tap_user, l, n, c->h, d, c->ff_g, ff);
        s_matmul(c, &P[S_PLAN_WD], wd, &c->tmp, 1, 0, n, ith, nth);
        base_pool_barrier(pool);
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * d;
            const float *o = c->tmp + (size_t)t * d;
            for (int i = 0; i < d; i++)
                x[i] += o[i];
        }
        /* The next stage reads only this thread's own tokens of x, so no barrier. */
    }
    if (c->n_out == 0)
        return;
    /* ---- logits = rmsnorm(x) Wout, for the wanted tokens only (compacted) */
    const model_weight_t *wout[1] = {&m->out};
    const s_plan_t *PO = c->plans + (size_t)cfg->n_layer * S_PLANS_PER_LAYER;
    base_pool_barrier(pool); /* every token's x is final */
    int o0, o1;
    base_pool_split(c->n_out, 1, ith, nth, &o0, &o1);
    for (int o = o0; o < o1; o++)
        k->rmsnorm(c->h + (size_t)o * d, c->x + (size_t)c->out_rows[o] * d, m->out_norm, d,
                   cfg->rms_eps);
    s_plan_fill(c, PO, c->h, d, o0, o1);
    base_pool_barrier(pool);
    s_matmul(c, PO, wout, &c->logits, 1, 0, c->n_out, ith, nth);
}

int model_ctx_forward(model_ctx_t *c, const model_batch_t *b, const kern_kv_pool_t *kv,
                      float *logits) {
    const model_config_t *cfg = &c->m->cfg;
    if (b->n_tokens < 1 || b->n_tokens > c->max_tokens || !kv->base)
        return -EINVAL;
    int n_out = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= cfg->n_vocab || b->seq[t] < 0 ||
            b->seq[t] >= b->n_seqs || b->pos[t] < 0 || b->pos[t] >= c->max_ctx)
            return -EINVAL;
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        int blk = b->pos[t] / kv->block_size;
        if (blk >= s->n_blocks || s->blocks[blk] < 0 || s->blocks[blk] >= kv->n_blocks)
            return -EINVAL;
        if (b->want && b->want[t])
            c->out_rows[n_out++] = t;
    }
    if (n_out && !logits)
        return -EINVAL;
    c->batch = b;
    c->kv = kv;
    c->logits = logits;
    c->n_out = n_out;
    c->moe_rc = 0;
    base_pool_run(c->pool, s_forward_worker, c);
    c->batch = NULL;
    c->kv = NULL;
    return c->moe_rc ? c->moe_rc : n_out;
}

/* ------------------------------------------------------------------ hooks */

void model_ctx_set_ffn_tap(model_ctx_t *c, model_ffn_tap_fn fn, void *user) {
    c->tap = fn;
    c->tap_user = user;
}

void model_ctx_set_moe_exec(model_ctx_t *c, model_moe_exec_fn fn, void *user) {
    c->moe_exec = fn;
    c->moe_user = user;
}

static void s_expert_rows_worker(void *arg, int ith, int nth) {
    model_ctx_t *c = arg;
    int off[S_MAX_EXPERTS + 1], E = c->m->cfg.n_expert;
    for (int e = 0; e <= E; e++)
        off[e] = e <= c->xr.expert ? 0 : c->xr.n; /* every row is the one expert's */
    s_experts_run(c, c->xr.layer, c->xr.h, NULL, off, c->xr.y, ith, nth);
}

int model_moe_expert_rows(model_ctx_t *c, int layer, int expert, int n, const float *h, float *y) {
    const model_config_t *cfg = &c->m->cfg;
    if (cfg->n_expert == 0 || layer < 0 || layer >= cfg->n_layer || expert < 0 ||
        expert >= cfg->n_expert || n < 0 || (n && (!h || !y)))
        return -EINVAL;
    const int d = cfg->d_model;
    for (int i = 0; i < n; i += c->max_rows) { /* the scratch holds max_rows rows */
        c->xr.layer = layer;
        c->xr.expert = expert;
        c->xr.n = n - i < c->max_rows ? n - i : c->max_rows;
        c->xr.h = h + (size_t)i * d;
        c->xr.y = y + (size_t)i * d;
        base_pool_run(c->pool, s_expert_rows_worker, c);
    }
    return 0;
}
