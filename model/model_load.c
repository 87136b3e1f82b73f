/* model_load.c - a model from a GGUF, as its architecture declares it (model_arch.h):
 * general.architecture picks the declaration from the table, its keys fill model_config_t,
 * its tensors the model's weights, each checked for presence and shape.  Owns the model's
 * lifetime (model_load, model_destroy) and the kernels' packed copies of its weights.
 */
#include "base_log.h"
#include "model_err.h"
#include "model_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TAG "model"

/* ------------------------------------------------------------------ configuration */

/* One declared key into its config field; false when a required one is missing or invalid
 * (an invalid optional one keeps the field as it is: its fallback). */
static bool s_key_read(const model_gguf_t *g, const char *arch, const model_key_t *k,
                       model_config_t *c) {
    char name[160];
    snprintf(name, sizeof name, "%s.%s", arch, k->key);
    if (k->kind == MODEL_KEY_FLOAT) {
        float *f = (float *)((char *)c + k->field);
        double v;
        *f = (float)k->fallback;
        if (model_gguf_get_f64(g, name, &v) && v > 0)
            *f = (float)v;
        else if (k->required)
            return false;
        return true;
    }
    int *f = (int *)((char *)c + k->field);
    int64_t v;
    *f = (int)k->fallback;
    if (!model_gguf_get_i64(g, name, &v) || v <= 0 || v > (1 << 30))
        return !k->required;
    *f = (int)v;
    return true;
}

/* The configuration and the architecture of an open GGUF. */
static int s_config_read(const model_gguf_t *g, model_config_t *c, const model_arch_t **arch_p,
                         char *err, size_t errlen) {
    const char *path = model_gguf_path(g);
    memset(c, 0, sizeof *c);
    char *arch = NULL;
    if (!model_gguf_get_str(g, "general.architecture", &arch))
        return model_err_set(err, errlen, -EINVAL, "%s: missing general.architecture", path);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    bool known = model_arch_known(arch);
    free(arch);
    if (!known)
        return model_err_set(err, errlen, -EINVAL,
                             "%s: unsupported architecture '%s' (strata runs: %s; "
                             "model/model_arch.h says how to add one)",
                             path, c->arch, model_arch_names());
    char *name = NULL;
    if (model_gguf_get_str(g, "general.name", &name)) {
        snprintf(c->name, sizeof c->name, "%s", name);
        free(name);
    } else {
        const char *b = strrchr(path, '/');
        snprintf(c->name, sizeof c->name, "%s", b ? b + 1 : path);
    }
    int rc = model_moe_config_read(g, c, err, errlen);
    if (rc)
        return rc;
    const model_arch_t *A = model_arch_find(c->arch, c->n_expert > 0);
    if (!A)
        return model_err_set(err, errlen, -EINVAL, "%s: architecture '%s' has no %s variant", path,
                             c->arch, c->n_expert > 0 ? "Mixture-of-Experts" : "dense");
    const char *a = c->arch;
    for (const model_key_t *k = A->keys; k->key; k++)
        if (!s_key_read(g, a, k, c))
            return model_err_set(err, errlen, -EINVAL,
                                 "%s: missing or invalid %s.%s (architecture %s: a positive %s)",
                                 path, a, k->key, A->name,
                                 k->kind == MODEL_KEY_INT ? "integer" : "number");
    /* the derived defaults of model_arch.h */
    if (c->n_head_kv == 0)
        c->n_head_kv = c->n_head;
    if (c->head_dim == 0)
        c->head_dim = c->d_model / c->n_head;
    if (c->n_rot == 0)
        c->n_rot = c->head_dim;
    if (c->query_scalar == 0)
        c->query_scalar = c->head_dim;
    if (c->rope_base_swa == 0)
        c->rope_base_swa = c->rope_base;
    if (c->n_head % c->n_head_kv || c->n_rot > c->head_dim || c->n_rot % 2 || c->head_dim % 2)
        return model_err_set(err, errlen, -EINVAL,
                             "%s: inconsistent heads: %d query heads, %d KV heads, "
                             "head_dim %d, rope dims %d",
                             path, c->n_head, c->n_head_kv, c->head_dim, c->n_rot);
    /* Every product of header values the model uses must fit in an int: query and
     * KV widths, and the KV elements one position takes over all layers. */
    int q_dim, kv_dim, kv_pos;
    if (__builtin_mul_overflow(c->n_head, c->head_dim, &q_dim) ||
        __builtin_mul_overflow(c->n_head_kv, c->head_dim, &kv_dim) ||
        __builtin_mul_overflow(kv_dim, 2, &kv_pos) ||
        __builtin_mul_overflow(kv_pos, c->n_layer, &kv_pos))
        return model_err_set(err, errlen, -EINVAL,
                             "%s: attention too large: %d layers, %d query heads, %d KV "
                             "heads of head_dim %d overflow",
                             path, c->n_layer, c->n_head, c->n_head_kv, c->head_dim);
    c->rope_neox = A->rope == MODEL_ROPE_NEOX;
    *arch_p = A;
    return 0;
}

int model_config_read(const model_gguf_t *g, model_config_t *c, char *err, size_t errlen) {
    const model_arch_t *arch;
    return s_config_read(g, c, &arch, err, errlen);
}

/* ------------------------------------------------------------------ tensors */

/* Find tensor `name` with shape (cols, rows) in GGUF order (ne[0] = cols). */
static int s_weight(model_t *m, const char *name, int64_t cols, int64_t rows, model_weight_t *w,
                    char *err, size_t errlen) {
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    const char *path = model_gguf_path(m->gguf);
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
        return model_err_set(
            err, errlen, -EINVAL, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
            path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)cols, (long long)rows);
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
static int s_experts(model_t *m, const char *name, int64_t cols, int64_t rows, int E,
                     const char *dims, model_weight_t *ws, char *err, size_t errlen) {
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    const char *path = model_gguf_path(m->gguf);
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E)
        return model_err_set(
            err, errlen, -EINVAL,
            "%s: tensor '%s' has %d dims [%lld, %lld, %lld], expected [%lld, %lld, %d] (%s)", path,
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
static int s_vector(model_t *m, const char *name, int64_t n, float **out, char *err,
                    size_t errlen) {
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    const char *path = model_gguf_path(m->gguf);
    if (t->n_dims != 1 || t->ne[0] != n)
        return model_err_set(err, errlen, -EINVAL,
                             "%s: tensor '%s' has %lld elements, expected %lld", path, name,
                             (long long)t->ne[0], (long long)n);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
    kern_ops_ref()->dequant_row(t->type, t->data, v, n);
    m->weight_bytes += t->nbytes;
    *out = v;
    return 0;
}

/* The size of a declared dimension; its name for messages in *name. */
static int64_t s_dim(const model_config_t *c, model_dim_t d, const char **name) {
    switch (d) {
    case MODEL_DIM_D_MODEL:
        *name = "d_model";
        return c->d_model;
    case MODEL_DIM_Q:
        *name = "n_head*head_dim";
        return (int64_t)c->n_head * c->head_dim;
    case MODEL_DIM_KV:
        *name = "n_head_kv*head_dim";
        return (int64_t)c->n_head_kv * c->head_dim;
    case MODEL_DIM_FF:
        *name = "d_ff";
        return c->d_ff;
    case MODEL_DIM_VOCAB:
        *name = "n_vocab";
        return c->n_vocab;
    case MODEL_DIM_EXPERT:
        *name = "expert_count";
        return c->n_expert;
    case MODEL_DIM_HEAD:
        *name = "head_dim";
        return c->head_dim;
    case MODEL_DIM_ROT_HALF:
        *name = "n_rot/2";
        return c->n_rot / 2;
    case MODEL_DIM_NONE:
        break;
    }
    *name = "";
    return 1;
}

/* Where slot s of layer L (NULL: the model's own) goes: a float vector or a weight; for a
 * stacked expert tensor, the (n_expert) views it fills. */
static void s_slot(model_t *m, model_layer_t *L, model_slot_t s, float ***vec, model_weight_t **w) {
    *vec = NULL;
    *w = NULL;
    switch (s) {
    case MODEL_W_EMBD:
        *w = &m->embd;
        break;
    case MODEL_W_OUT_NORM:
        *vec = &m->out_norm;
        break;
    case MODEL_W_OUT:
        *w = &m->out;
        break;
    case MODEL_W_ROPE_FREQS:
        *vec = &m->rope_freqs;
        break;
    case MODEL_W_ATTN_NORM:
        *vec = &L->attn_norm;
        break;
    case MODEL_W_Q:
        *w = &L->wq;
        break;
    case MODEL_W_K:
        *w = &L->wk;
        break;
    case MODEL_W_V:
        *w = &L->wv;
        break;
    case MODEL_W_O:
        *w = &L->wo;
        break;
    case MODEL_W_Q_BIAS:
        *vec = &L->bq;
        break;
    case MODEL_W_K_BIAS:
        *vec = &L->bk;
        break;
    case MODEL_W_V_BIAS:
        *vec = &L->bv;
        break;
    case MODEL_W_O_BIAS:
        *vec = &L->bo;
        break;
    case MODEL_W_Q_NORM:
        *vec = &L->q_norm;
        break;
    case MODEL_W_K_NORM:
        *vec = &L->k_norm;
        break;
    case MODEL_W_ATTN_POST_NORM:
        *vec = &L->attn_post_norm;
        break;
    case MODEL_W_FFN_NORM:
        *vec = &L->ffn_norm;
        break;
    case MODEL_W_GATE:
        *w = &L->wg;
        break;
    case MODEL_W_UP:
        *w = &L->wu;
        break;
    case MODEL_W_DOWN:
        *w = &L->wd;
        break;
    case MODEL_W_ROUTER:
        *w = &L->wr;
        break;
    case MODEL_W_GATE_EXPS:
        *w = L->eg;
        break;
    case MODEL_W_UP_EXPS:
        *w = L->eu;
        break;
    case MODEL_W_DOWN_EXPS:
        *w = L->ed;
        break;
    case MODEL_W_FFN_POST_NORM:
        *vec = &L->ffn_post_norm;
        break;
    case MODEL_W_COUNT:
        break;
    }
}

/* One declared tensor (of layer l, or the model's when L is NULL): presence, then shape. */
static int s_tensor(model_t *m, model_layer_t *L, int l, const model_tensor_t *d, char *err,
                    size_t errlen) {
    const model_config_t *c = &m->cfg;
    const char *path = model_gguf_path(m->gguf);
    char name[96];
    snprintf(name, sizeof name, d->name, l);
    const model_gguf_tensor_t *t = model_gguf_tensor(m->gguf, name);
    if (d->forbid) {
        if (!t)
            return 0;
        return model_err_set(err, errlen, -EINVAL,
                             "%s: tensor '%s' but no %s.%s: architecture %s has no such tensor "
                             "(an MoE model needs %s.expert_count and %s.expert_used_count)",
                             path, name, c->arch, d->forbid, m->arch->name, c->arch, c->arch);
    }
    if (!t) {
        if (!d->required)
            return 0;
        if (c->n_expert)
            return model_err_set(err, errlen, -EINVAL,
                                 "%s: missing tensor '%s' (an MoE model: %s.expert_count is %d)",
                                 path, name, c->arch, c->n_expert);
        return model_err_set(err, errlen, -EINVAL, "%s: missing tensor '%s' (architecture %s)",
                             path, name, m->arch->name);
    }
    const char *dn[3];
    int64_t ne[3];
    int n_dims = 0;
    for (int i = 0; i < 3; i++) {
        ne[i] = s_dim(c, d->ne[i], &dn[i]);
        if (d->ne[i] != MODEL_DIM_NONE)
            n_dims = i + 1;
    }
    float **vec;
    model_weight_t *w;
    s_slot(m, L, d->slot, &vec, &w);
    if (n_dims == 1 && vec)
        return s_vector(m, name, ne[0], vec, err, errlen);
    if (n_dims == 2 && w)
        return s_weight(m, name, ne[0], ne[1], w, err, errlen);
    if (n_dims == 3 && w) {
        char dims[96];
        snprintf(dims, sizeof dims, "%s, %s, %s", dn[0], dn[1], dn[2]);
        return s_experts(m, name, ne[0], ne[1], (int)ne[2], dims, w, err, errlen);
    }
    /* a declaration whose shape does not fit its slot: a bug in model_arch_<name>.c */
    return model_err_set(err, errlen, -EINVAL, "%s: architecture %s declares '%s' wrongly", path,
                         m->arch->name, name);
}

/* ------------------------------------------------------------------ packing */

/* The matrices the kernels get a packed copy of, in the order a forward pass reads them;
 * calls fn(m, w, k, arg) on each until one returns non-zero. */
static int s_each_packable(model_t *m, const kern_ops_t *k,
                           int (*fn)(model_t *, model_weight_t *, const kern_ops_t *, void *),
                           void *arg) {
    int rc = 0;
    for (int l = 0; l < m->cfg.n_layer && !rc; l++) {
        model_layer_t *L = &m->layers[l];
        model_weight_t *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd, &L->wr};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0] && !rc; i++)
            rc = fn(m, ws[i], k, arg);
        for (int e = 0; L->experts && e < 3 * m->cfg.n_expert && !rc; e++)
            rc = fn(m, &L->experts[e], k, arg); /* each expert's slab on its own */
    }
    if (!rc)
        rc = fn(m, &m->out, k, arg); /* a copy even when tied: the lookup reads embd.data */
    return rc;
}

/* Bytes of w's packed copy (64-byte multiples), 0 when the kernel table has no packed
 * layout for its type (every rows count of a fused group is a multiple of 16, so the
 * type decides and q/k/v, gate/up are treated alike). */
static size_t s_packed_size(const model_weight_t *w, const kern_ops_t *k) {
    if (w->rows % 16 || !k->packed_size || !k->pack)
        return 0;
    return (k->packed_size(w->type, w->cols, (int)w->rows) + 63) / 64 * 64;
}

static int s_add_size(model_t *m, model_weight_t *w, const kern_ops_t *k, void *arg) {
    (void)m;
    *(size_t *)arg += s_packed_size(w, k);
    return 0;
}

/* Repack w into the kernels' row-interleaved layout (the packed gemm is several times
 * faster and batch-invariant) at the arena's next free byte, *(size_t *)arg. */
static int s_pack(model_t *m, model_weight_t *w, const kern_ops_t *k, void *arg) {
    size_t *off = arg, n = s_packed_size(w, k);
    if (n == 0)
        return 0;
    void *p = (uint8_t *)m->packed_arena + *off;
    k->pack(w->type, w->cols, (int)w->rows, w->data, w->row_bytes, p);
    w->packed = p;
    *off += n;
    /* The kernels read the copy from now on: let the file's pages of the original go (a
     * later reader, such as the token lookup of a tied head, faults them back in). */
    const uintptr_t pg = 4096, a = ((uintptr_t)w->data + pg - 1) / pg * pg,
                    e = ((uintptr_t)w->data + (size_t)w->rows * w->row_bytes) / pg * pg;
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_DONTNEED);
    return 0;
}

/* Every packed copy in one anonymous mapping (m->packed_arena) in reading order, on
 * transparent huge pages where the kernel gives them: decode streams the whole arena once
 * per token, and 2 MiB pages take a TLB miss per 2 MiB instead of per 4 KiB. */
static int s_pack_all(model_t *m, char *err, size_t errlen) {
    const kern_ops_t *k = kern_ops_best();
    size_t total = 0, off = 0;
    s_each_packable(m, k, s_add_size, &total);
    if (total == 0)
        return 0;
    void *a = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return model_err_set(err, errlen, -ENOMEM, "%s: out of memory repacking weights",
                             model_gguf_path(m->gguf));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, total, MADV_HUGEPAGE); /* a hint: 4 KiB pages where refused */
#endif
    m->packed_arena = a;
    m->packed_bytes = total;
    s_each_packable(m, k, s_pack, &off);
    LOG_I(TAG, "repacked %.1f MiB of weights for the %s kernels", total / 1048576.0, k->name);
    return 0;
}

/* ------------------------------------------------------------------ the model */

model_t *model_load(const char *path, char *err, size_t errlen) {
    model_t *m = calloc(1, sizeof *m);
    if (!m) {
        model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    m->gguf = model_gguf_open(path, err, errlen);
    if (!m->gguf || s_config_read(m->gguf, &m->cfg, &m->arch, err, errlen))
        goto fail;
    model_config_t *c = &m->cfg;
    const model_arch_t *A = m->arch;
    /* n_vocab is the row count of the embedding table */
    const model_gguf_tensor_t *te = model_gguf_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims != 2) {
        model_err_set(err, errlen, -EINVAL, "%s: missing 2-D tensor 'token_embd.weight'", path);
        goto fail;
    }
    if (te->ne[1] > INT32_MAX) {
        model_err_set(err, errlen, -EINVAL, "%s: vocabulary of %lld tokens is too large", path,
                      (long long)te->ne[1]);
        goto fail;
    }
    c->n_vocab = (int)te->ne[1];
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) {
        model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (int l = 0; l < c->n_layer; l++)
        model_arch_layer_stages(A, c, l, &m->layers[l].st);
    const char *why = model_arch_unsupported(A, c);
    if (why) {
        model_err_set(err, errlen, -EINVAL,
                      "%s: architecture %s declares %s, which the forward pass does not run yet",
                      path, A->name, why);
        goto fail;
    }
    for (const model_tensor_t *d = A->top; d->name; d++)
        if (s_tensor(m, NULL, 0, d, err, errlen))
            goto fail;
    if (!m->out.data) {
        if (!A->tied_output) {
            model_err_set(err, errlen, -EINVAL, "%s: missing the output head (architecture %s)",
                          path, A->name);
            goto fail;
        }
        m->out = m->embd; /* tied embeddings */
    }
    /* RoPE: pair i turns by pos * base^(-2i/n_rot) (divided by rope_freqs[i] when
     * the model has them); the per-pair rate is fixed, so compute it once. */
    m->rope_theta = malloc((size_t)(c->n_rot / 2) * sizeof *m->rope_theta);
    if (!m->rope_theta) {
        model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < c->n_rot / 2; i++) {
        m->rope_theta[i] = pow((double)c->rope_base, -2.0 * i / c->n_rot);
        if (m->rope_freqs)
            m->rope_theta[i] /= m->rope_freqs[i];
    }
    /* sliding-window layers with a base of their own (Gemma 3's local 10000 against the
     * global 1e6) turn by a second table; NULL when they share the first */
    bool sliding = false;
    for (int l = 0; l < c->n_layer; l++)
        sliding |= m->layers[l].st.attn == MODEL_ATTN_SLIDING;
    if (sliding && c->rope_base_swa != c->rope_base) {
        m->rope_theta_swa = malloc((size_t)(c->n_rot / 2) * sizeof *m->rope_theta_swa);
        if (!m->rope_theta_swa) {
            model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        for (int i = 0; i < c->n_rot / 2; i++) {
            m->rope_theta_swa[i] = pow((double)c->rope_base_swa, -2.0 * i / c->n_rot);
            if (m->rope_freqs)
                m->rope_theta_swa[i] /= m->rope_freqs[i];
        }
    }
    m->embd_mul = A->embd_scale ? sqrtf((float)c->d_model) : 1.0f;
    m->attn_scale = 1.0f / sqrtf((float)c->query_scalar);
    for (int l = 0; l < c->n_layer; l++) {
        model_layer_t *L = &m->layers[l];
        if (L->st.ffn == MODEL_FFN_MOE) { /* the stacked experts' views */
            int E = c->n_expert;
            L->experts = calloc((size_t)3 * E, sizeof *L->experts);
            if (!L->experts) {
                model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
                goto fail;
            }
            L->eg = L->experts;
            L->eu = L->experts + E;
            L->ed = L->experts + 2 * E;
        }
        for (const model_tensor_t *d = A->blk; d->name; d++)
            if (s_tensor(m, L, l, d, err, errlen))
                goto fail;
    }
    c->ftype = c->n_layer > 0 ? m->layers[0].wq.type : m->embd.type;
    if (s_pack_all(m, err, errlen))
        goto fail;
    return m;
fail:
    model_destroy(&m);
    return NULL;
}

void model_destroy(model_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_t *m = *self_p;
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) {
        model_layer_t *L = &m->layers[l];
        float *vs[] = {
            L->attn_norm, L->ffn_norm,       L->bq,           L->bk, L->bv, L->bo, L->q_norm,
            L->k_norm,    L->attn_post_norm, L->ffn_post_norm};
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
            free(vs[i]);
        free(L->experts);
    }
    if (m->packed_arena)
        munmap(m->packed_arena, m->packed_bytes);
    free(m->layers);
    free(m->out_norm);
    free(m->rope_freqs);
    free(m->rope_theta);
    free(m->rope_theta_swa);
    model_gguf_destroy(&m->gguf);
    free(m);
    *self_p = NULL;
}

const model_config_t *model_config(const model_t *self) {
    return &self->cfg;
}
const model_gguf_t *model_file(const model_t *self) {
    return self->gguf;
}
size_t model_weight_bytes(const model_t *self) {
    return self->weight_bytes;
}

size_t model_decode_bytes(const model_t *self) {
    const model_config_t *c = &self->cfg;
    size_t b = self->weight_bytes;
    const model_weight_t *e = &self->embd;
    if (e->data != self->out.data) /* untied: one embedding row, not the table */
        b -= (size_t)(e->rows - 1) * e->row_bytes;
    if (c->n_expert > 0) /* experts: only n_expert_used of each layer's n_expert */
        for (int l = 0; l < c->n_layer; l++) {
            const model_layer_t *L = &self->layers[l];
            if (!L->experts)
                continue;
            const size_t one = (size_t)L->eg[0].rows * L->eg[0].row_bytes +
                               (size_t)L->eu[0].rows * L->eu[0].row_bytes +
                               (size_t)L->ed[0].rows * L->ed[0].row_bytes;
            b -= (size_t)(c->n_expert - c->n_expert_used) * one;
        }
    return b;
}

kern_kv_shape_t model_kv_shape(const model_config_t *c, int block_size) {
    return (kern_kv_shape_t){c->n_layer, c->n_head_kv, c->head_dim, block_size};
}
