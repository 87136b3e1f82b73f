/* model_device.c - see model_device.h.  The stages of a layer, in dataflow order, each one
 * backend op over the whole batch (the shapes as model_forward.c's):
 *   x = embed(tokens) (* embd_mul)                         (n, d_model)
 *   h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv (+ biases)  (n, q_dim), (n, kv_dim) x 2
 *   q, k = rmsnorm of each head (qk_norm) ; rope(q, k) ; KV[pos] = k, v
 *   o = attention(q, KV) Wo (+ bo) ; x += o or rmsnorm(o)
 *   h = rmsnorm(x) ; x += (act(h Wg) * h Wu) Wd, or its rmsnorm   act: silu or gelu_tanh
 * (attention over the last `window` positions in a sliding-window layer, with its own RoPE
 * base when the model has one)
 *   logits = rmsnorm(x[wanted]) Wout
 * The host computes what is cheap and per token (the RoPE angles, the block tables) and
 * uploads it once per batch. */
#include "model_device.h"

#include "model_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A weight in backend memory. */
typedef struct {
    kern_type_t type;
    const void *data; /* backend memory: rows * row_bytes */
    int rows, cols;
    size_t row_bytes;
} s_w_t;

/* One layer's weights in backend memory (NULL where the model has none). */
typedef struct {
    s_w_t wq, wk, wv, wo, wg, wu, wd;
    const float *attn_norm, *ffn_norm, *bq, *bk, *bv, *bo, *q_norm, *k_norm, *attn_post, *ffn_post;
} s_layer_t;

#define S_MAX_OWNED 4096 /* backend allocations of one model (its weights and scratch) */
#define S_GRAPHS 64      /* graphs kept (least recently used replaced) */
#define S_GRAPH_TOKENS 8 /* batches of up to this many tokens run as graphs (decode) */
#define S_CTX_BUCKET 256 /* with graphs, the attention's context bound rounded up to this */

/* A batch shape's graph: the ops of a forward pass recorded once, replayed after. */
typedef struct {
    int n, n_out, max_ctx; /* the shape (max_ctx rounded up to S_CTX_BUCKET) */
    const void *pool;      /* the KV pool it was recorded over */
    void *g;               /* the backend's graph, or NULL: not recorded (yet) */
    bool failed;           /* recording failed: this shape runs without a graph */
    uint64_t used;         /* last use (d->tick) */
} s_graph_t;

struct model_dev_t {
    const model_t *m;   /* borrowed */
    kern_backend_t *be; /* borrowed */
    int max_tokens, max_seqs, max_blocks;
    s_layer_t *layers; /* (n_layer) */
    s_w_t embd, out;
    const float *out_norm;
    /* activations and per-batch inputs, backend memory */
    float *x, *h, *q, *k, *v, *att, *tmp, *ff_g, *ff_u; /* as model_ctx_t's */
    float *cs;                                          /* (max_tokens, n_rot) RoPE angles */
    float *cs_swa; /* the same with rope_theta_swa (sliding-window layers), or NULL */
    float *logits; /* (max_tokens, n_vocab) */
    int32_t *ids, *pos, *n_ctx, *seq, *rows; /* (max_tokens) each */
    int32_t *blocks;                         /* (max_seqs, max_blocks) */
    /* host staging of the per-batch inputs */
    int32_t *h_ids, *h_nctx, *h_rows, *h_blocks;
    /* device sampling: the recent tokens of each row sampled, backend memory and staging */
    int32_t *hist, *hist_off, *n_hist;       /* (max_tokens * MODEL_DEV_HIST), (max_tokens) x 2 */
    int32_t *h_hist, *h_hist_off, *h_n_hist; /* the same, host */
    int n_out;                               /* rows of logits the last forward left */
    float *h_cs, *h_cs_swa;
    void *owned[S_MAX_OWNED]; /* every backend allocation, freed at destroy */
    int n_owned;
    bool graphs;                   /* decode batches as graphs (a backend with them) */
    s_graph_t graph[S_GRAPHS];     /* by shape */
    int n_graphs;                  /* entries used */
    uint64_t tick;                 /* graph lookups */
    model_dev_graph_stats_t gstat; /* counters */
};

static int s_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int s_fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* bytes of backend memory, kept for destroy; src (host, NULL: none) copied in. */
static void *s_alloc(model_dev_t *d, const void *src, size_t bytes) {
    void *p = NULL;
    if (d->n_owned == S_MAX_OWNED || d->be->alloc(d->be, &p, bytes ? bytes : 4))
        return NULL;
    d->owned[d->n_owned++] = p;
    if (src && bytes && d->be->upload(d->be, p, src, bytes))
        return NULL;
    return p;
}

/* An optional vector of n floats (NULL stays NULL); false when out of memory. */
static bool s_vec(model_dev_t *d, const float *src, int n, const float **out) {
    *out = NULL;
    return !src || (*out = s_alloc(d, src, (size_t)n * sizeof(float)));
}

static int s_weight(model_dev_t *d, const model_weight_t *w, s_w_t *out, const char *name,
                    char *err, size_t errlen) {
    const kern_type_traits_t *tr = kern_type_traits(w->type);
    if (!d->be->matmul[w->type])
        return s_fail(err, errlen, -ENOTSUP, "%s: the %s backend has no matmul for %s", name,
                      d->be->name, tr ? tr->name : "this type");
    *out = (s_w_t){w->type, NULL, (int)w->rows, (int)w->cols, w->row_bytes};
    if (!(out->data = s_alloc(d, w->data, (size_t)w->rows * w->row_bytes)))
        return s_fail(err, errlen, -ENOMEM, "%s: out of backend memory", name);
    return 0;
}

/* What this path cannot run yet, or NULL. */
static const char *s_unsupported(const model_t *m) {
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (m->layers[l].st.ffn == MODEL_FFN_MOE)
            return "Mixture-of-Experts layers";
    return NULL;
}

model_dev_t *model_dev_new(const model_t *m, kern_backend_t *be, int max_tokens, int max_seqs,
                           int max_blocks, char *err, size_t errlen) {
    const model_config_t *c = &m->cfg;
    const char *no = s_unsupported(m);
    if (no) {
        s_fail(err, errlen, -ENOTSUP, "%s: %s are not on the backend path yet", c->name, no);
        return NULL;
    }
    if (max_tokens < 1 || max_seqs < 1 || max_blocks < 1 || !be->add || !be->geglu || !be->scale) {
        s_fail(err, errlen, -EINVAL, "model_dev_new: bad limits, or a backend without an op");
        return NULL;
    }
    model_dev_t *d = calloc(1, sizeof *d);
    if (!d || !(d->layers = calloc((size_t)c->n_layer, sizeof *d->layers))) {
        free(d);
        s_fail(err, errlen, -ENOMEM, "out of memory");
        return NULL;
    }
    d->m = m;
    d->be = be;
    d->max_tokens = max_tokens;
    d->max_seqs = max_seqs;
    d->max_blocks = max_blocks;
    char name[64];
    int rc = s_weight(d, &m->embd, &d->embd, "token_embd", err, errlen);
    if (!rc)
        rc = s_weight(d, &m->out, &d->out, "output", err, errlen);
    if (!rc && !s_vec(d, m->out_norm, c->d_model, &d->out_norm))
        rc = s_fail(err, errlen, -ENOMEM, "out of backend memory");
    for (int l = 0; !rc && l < c->n_layer; l++) {
        const model_layer_t *L = &m->layers[l];
        s_layer_t *D = &d->layers[l];
        const model_weight_t *src[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd};
        s_w_t *dst[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->wg, &D->wu, &D->wd};
        const char *wn[7] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                             "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; !rc && i < 7; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, wn[i]);
            rc = s_weight(d, src[i], dst[i], name, err, errlen);
        }
        const int q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
        if (!rc &&
            !(s_vec(d, L->attn_norm, c->d_model, &D->attn_norm) &&
              s_vec(d, L->ffn_norm, c->d_model, &D->ffn_norm) && s_vec(d, L->bq, q_dim, &D->bq) &&
              s_vec(d, L->bk, kv_dim, &D->bk) && s_vec(d, L->bv, kv_dim, &D->bv) &&
              s_vec(d, L->bo, c->d_model, &D->bo) && s_vec(d, L->q_norm, c->head_dim, &D->q_norm) &&
              s_vec(d, L->k_norm, c->head_dim, &D->k_norm) &&
              s_vec(d, L->attn_post_norm, c->d_model, &D->attn_post) &&
              s_vec(d, L->ffn_post_norm, c->d_model, &D->ffn_post)))
            rc = s_fail(err, errlen, -ENOMEM, "out of backend memory");
    }
    /* scratch */
    const size_t T = (size_t)max_tokens, F = sizeof(float), I = sizeof(int32_t);
    const size_t q_dim = (size_t)c->n_head * c->head_dim,
                 kv_dim = (size_t)c->n_head_kv * c->head_dim;
    if (!rc &&
        (!(d->x = s_alloc(d, NULL, T * c->d_model * F)) ||
         !(d->h = s_alloc(d, NULL, T * c->d_model * F)) ||
         !(d->q = s_alloc(d, NULL, T * q_dim * F)) || !(d->k = s_alloc(d, NULL, T * kv_dim * F)) ||
         !(d->v = s_alloc(d, NULL, T * kv_dim * F)) ||
         !(d->att = s_alloc(d, NULL, T * q_dim * F)) ||
         !(d->tmp = s_alloc(d, NULL, T * c->d_model * F)) ||
         !(d->ff_g = s_alloc(d, NULL, T * c->d_ff * F)) ||
         !(d->ff_u = s_alloc(d, NULL, T * c->d_ff * F)) ||
         !(d->cs = s_alloc(d, NULL, T * c->n_rot * F)) ||
         !(d->logits = s_alloc(d, NULL, T * c->n_vocab * F)) ||
         !(d->ids = s_alloc(d, NULL, T * I)) || !(d->pos = s_alloc(d, NULL, T * I)) ||
         !(d->n_ctx = s_alloc(d, NULL, T * I)) || !(d->seq = s_alloc(d, NULL, T * I)) ||
         !(d->rows = s_alloc(d, NULL, T * I)) ||
         !(d->blocks = s_alloc(d, NULL, (size_t)max_seqs * max_blocks * I)) ||
         !(d->h_ids = malloc(T * I)) || !(d->h_nctx = malloc(T * I)) ||
         !(d->h_rows = malloc(T * I)) || !(d->hist = s_alloc(d, NULL, T * MODEL_DEV_HIST * I)) ||
         !(d->hist_off = s_alloc(d, NULL, T * I)) || !(d->n_hist = s_alloc(d, NULL, T * I)) ||
         !(d->h_hist = malloc(T * MODEL_DEV_HIST * I)) || !(d->h_hist_off = malloc(T * I)) ||
         !(d->h_n_hist = malloc(T * I)) ||
         !(d->h_blocks = malloc((size_t)max_seqs * max_blocks * I)) ||
         !(d->h_cs = malloc(T * c->n_rot * F)) ||
         (m->rope_theta_swa && (!(d->cs_swa = s_alloc(d, NULL, T * c->n_rot * F)) ||
                                !(d->h_cs_swa = malloc(T * c->n_rot * F))))))
        rc = s_fail(err, errlen, -ENOMEM, "out of memory for the scratch of %d tokens", max_tokens);
    const char *env = getenv("STRATA_GRAPHS");
    model_dev_use_graphs(d, !(env && !strcmp(env, "0")));
    if (rc)
        model_dev_destroy(&d);
    return d;
}

void model_dev_use_graphs(model_dev_t *d, bool on) {
    kern_backend_t *be = d->be;
    d->graphs = on && be->capture_begin && be->capture_end && be->replay && be->graph_free;
}

model_dev_graph_stats_t model_dev_graph_stats(const model_dev_t *d) {
    return d->gstat;
}

void model_dev_destroy(model_dev_t **self_p) {
    model_dev_t *d = self_p ? *self_p : NULL;
    if (!d)
        return;
    for (int i = 0; i < d->n_graphs; i++)
        if (d->graph[i].g)
            d->be->graph_free(d->be, d->graph[i].g);
    for (int i = 0; i < d->n_owned; i++)
        d->be->free(d->be, d->owned[i]);
    free(d->layers);
    free(d->h_ids);
    free(d->h_nctx);
    free(d->h_rows);
    free(d->h_hist);
    free(d->h_hist_off);
    free(d->h_n_hist);
    free(d->h_blocks);
    free(d->h_cs);
    free(d->h_cs_swa);
    free(d);
    *self_p = NULL;
}

/* out (n, w->rows) = x (n, w->cols) W^T. */
static int s_mm(model_dev_t *d, const s_w_t *w, const float *x, int n, float *out) {
    return d->be->matmul[w->type](d->be, w->type, w->cols, w->rows, n, w->data, w->row_bytes, x,
                                  (size_t)w->cols, out, (size_t)w->rows);
}

/* One layer over the n tokens of the batch (inputs already uploaded). */
static int s_layer(model_dev_t *d, int l, int n, const kern_kv_pool_t *kv, int max_ctx) {
    kern_backend_t *be = d->be;
    const model_t *m = d->m;
    const model_config_t *c = &m->cfg;
    const model_stages_t *st = &m->layers[l].st;
    const s_layer_t *L = &d->layers[l];
    const int dm = c->d_model, D = c->head_dim, H = c->n_head, Hkv = c->n_head_kv;
    const int q_dim = H * D, kv_dim = Hkv * D;
    const bool sliding = st->attn == MODEL_ATTN_SLIDING;
    const float *cs = sliding && d->cs_swa ? d->cs_swa : d->cs; /* its own base, when it has one */
    int rc;
    /* ---- attention: h = rmsnorm(x); q, k, v = h W (+ b) */
    if ((rc = be->rmsnorm(be, d->h, d->x, L->attn_norm, n, dm, c->rms_eps)) ||
        (rc = s_mm(d, &L->wq, d->h, n, d->q)) || (rc = s_mm(d, &L->wk, d->h, n, d->k)) ||
        (rc = s_mm(d, &L->wv, d->h, n, d->v)))
        return rc;
    if (st->qkv_bias && ((rc = be->add(be, d->q, L->bq, n, q_dim, 0)) ||
                         (rc = be->add(be, d->k, L->bk, n, kv_dim, 0)) ||
                         (rc = be->add(be, d->v, L->bv, n, kv_dim, 0))))
        return rc;
    if (st->qk_norm && ((rc = be->rmsnorm(be, d->q, d->q, L->q_norm, n * H, D, c->rms_eps)) ||
                        (rc = be->rmsnorm(be, d->k, d->k, L->k_norm, n * Hkv, D, c->rms_eps))))
        return rc;
    if ((rc = be->rope(be, d->q, n, H, D, c->n_rot, cs, c->rope_neox)) ||
        (rc = be->rope(be, d->k, n, Hkv, D, c->n_rot, cs, c->rope_neox)))
        return rc;
    kern_backend_kv_t st_kv = {.pool = kv->base,
                               .block_bytes = kv->block_bytes,
                               .block_size = kv->block_size,
                               .n_head_kv = Hkv,
                               .head_dim = D,
                               .layer = l,
                               .kv_type = kv->type,
                               .n_tok = n,
                               .k = d->k,
                               .v = d->v,
                               .pos = d->pos,
                               .seq = d->seq,
                               .blocks = d->blocks,
                               .max_blocks = d->max_blocks};
    kern_backend_attn_t at = {.n_head = H,
                              .n_head_kv = Hkv,
                              .head_dim = D,
                              .n_tok = n,
                              .q = d->q,
                              .out = d->att,
                              .n_ctx = d->n_ctx,
                              .seq = d->seq,
                              .blocks = d->blocks,
                              .max_blocks = d->max_blocks,
                              .max_ctx = max_ctx,
                              .pool = kv->base,
                              .block_bytes = kv->block_bytes,
                              .block_size = kv->block_size,
                              .layer = l,
                              .kv_type = kv->type,
                              .scale = m->attn_scale,
                              .window = sliding ? st->window : 0};
    if ((rc = be->kv_store(be, &st_kv)) || (rc = be->attention(be, &at)) ||
        (rc = s_mm(d, &L->wo, d->att, n, d->tmp)))
        return rc;
    if (st->out_bias && (rc = be->add(be, d->tmp, L->bo, n, dm, 0)))
        return rc;
    if (st->norm_post_attn &&
        (rc = be->rmsnorm(be, d->tmp, d->tmp, L->attn_post, n, dm, c->rms_eps)))
        return rc;
    /* ---- feed-forward: x += o; h = rmsnorm(x); x += (silu(h Wg) * h Wu) Wd */
    if ((rc = be->add(be, d->x, d->tmp, n, dm, (size_t)dm)) ||
        (rc = be->rmsnorm(be, d->h, d->x, L->ffn_norm, n, dm, c->rms_eps)) ||
        (rc = s_mm(d, &L->wg, d->h, n, d->ff_g)) || (rc = s_mm(d, &L->wu, d->h, n, d->ff_u)) ||
        (rc = (st->act == MODEL_ACT_GELU ? be->geglu : be->swiglu)(be, d->ff_g, d->ff_g, d->ff_u,
                                                                   (int64_t)n * c->d_ff)) ||
        (rc = s_mm(d, &L->wd, d->ff_g, n, d->tmp)))
        return rc;
    if (st->norm_post_ffn && (rc = be->rmsnorm(be, d->tmp, d->tmp, L->ffn_post, n, dm, c->rms_eps)))
        return rc;
    return be->add(be, d->x, d->tmp, n, dm, (size_t)dm);
}

/* Check b against the limits and fill the host staging.  The wanted tokens' count, or
 * -EINVAL. */
static int s_stage(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv, int *max_ctx) {
    const model_config_t *c = &d->m->cfg;
    if (b->n_tokens < 1 || b->n_tokens > d->max_tokens || b->n_seqs < 1 ||
        b->n_seqs > d->max_seqs || !kv->base)
        return -EINVAL;
    for (int s = 0; s < b->n_seqs; s++) {
        const model_seq_view_t *v = &b->seqs[s];
        if (v->n_blocks > d->max_blocks || v->weights)
            return -EINVAL; /* attention weights are collected by the CPU pass only */
        for (int i = 0; i < d->max_blocks; i++)
            d->h_blocks[(size_t)s * d->max_blocks + i] = i < v->n_blocks ? v->blocks[i] : 0;
    }
    int n_out = 0;
    *max_ctx = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= c->n_vocab || b->seq[t] < 0 ||
            b->seq[t] >= b->n_seqs || b->pos[t] < 0)
            return -EINVAL;
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        const int slot = b->slot ? b->slot[t] : b->pos[t]; /* its KV row */
        int blk = slot / kv->block_size;
        if (slot < 0 || blk >= s->n_blocks || s->blocks[blk] < 0 || s->blocks[blk] >= kv->n_blocks)
            return -EINVAL;
        d->h_nctx[t] = slot + 1;
        if (d->h_nctx[t] > *max_ctx)
            *max_ctx = d->h_nctx[t];
        model_rope_angles(d->h_cs + (size_t)t * c->n_rot, b->pos[t], d->m->rope_theta, c->n_rot);
        if (d->h_cs_swa)
            model_rope_angles(d->h_cs_swa + (size_t)t * c->n_rot, b->pos[t], d->m->rope_theta_swa,
                              c->n_rot);
        if (b->want && b->want[t])
            d->h_rows[n_out++] = t;
    }
    return n_out;
}

/* The final hidden state (x after the output norm) of every token i with hidden[i] into
 * row i of hidden_out (host), downloaded in runs of consecutive rows. */
static int s_hidden(model_dev_t *d, int n, const bool *hidden, float *hidden_out) {
    kern_backend_t *be = d->be;
    const model_config_t *c = &d->m->cfg;
    const size_t row = (size_t)c->d_model;
    int rc = be->rmsnorm(be, d->tmp, d->x, d->out_norm, n, c->d_model, c->rms_eps);
    for (int i = 0; !rc && i < n;) {
        if (!hidden[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && hidden[j])
            j++;
        rc = be->download(be, hidden_out + i * row, d->tmp + i * row,
                          (size_t)(j - i) * row * sizeof(float));
        i = j;
    }
    return rc;
}

int model_dev_forward(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv,
                      float *logits) {
    return model_dev_forward_hidden(d, b, kv, logits, NULL, NULL);
}

/* The ops of a forward pass after the uploads: embedding, the layers, the final hidden
 * states asked for, the wanted rows' logits (left in d->logits). */
static int s_body(model_dev_t *d, int n, int n_out, const kern_kv_pool_t *kv, int max_ctx,
                  const bool *hidden, float *hidden_out) {
    kern_backend_t *be = d->be;
    const model_config_t *c = &d->m->cfg;
    const int dm = c->d_model;
    int rc;
    if ((rc = be->embed(be, d->embd.type, d->embd.data, d->embd.row_bytes, d->embd.rows, d->ids, n,
                        dm, d->x)))
        return rc;
    if (d->m->embd_mul != 1.0f && (rc = be->scale(be, d->x, (int64_t)n * dm, d->m->embd_mul)))
        return rc;
    for (int l = 0; l < c->n_layer; l++)
        if ((rc = s_layer(d, l, n, kv, max_ctx)))
            return rc;
    if (hidden && (rc = s_hidden(d, n, hidden, hidden_out)))
        return rc;
    if (n_out && /* the wanted rows of x gathered (an F32 "embedding" of x), normed, projected */
        ((rc = be->embed(be, KERN_F32, d->x, (size_t)dm * sizeof(float), n, d->rows, n_out, dm,
                         d->h)) ||
         (rc = be->rmsnorm(be, d->h, d->h, d->out_norm, n_out, dm, c->rms_eps)) ||
         (rc = s_mm(d, &d->out, d->h, n_out, d->logits))))
        return rc;
    return 0;
}

/* The graph entry of this shape: found, or made (replacing the least recently used). */
static s_graph_t *s_graph_of(model_dev_t *d, int n, int n_out, int max_ctx, const void *pool,
                             bool *fresh) {
    s_graph_t *lru = NULL;
    *fresh = false;
    for (int i = 0; i < d->n_graphs; i++) {
        s_graph_t *e = &d->graph[i];
        if (e->n == n && e->n_out == n_out && e->max_ctx == max_ctx && e->pool == pool)
            return e;
        if (!lru || e->used < lru->used)
            lru = e;
    }
    s_graph_t *e = d->n_graphs < S_GRAPHS ? &d->graph[d->n_graphs++] : lru;
    if (e->g)
        d->be->graph_free(d->be, e->g);
    *e = (s_graph_t){n, n_out, max_ctx, pool, NULL, false, 0};
    *fresh = true;
    return e;
}

/* A decode-sized batch through its shape's graph: replayed when recorded; recorded the
 * second time the shape comes (the first runs without one, so that every scratch the ops
 * use has grown to its size), then replayed; without a graph when recording fails (the ops
 * then run as they are).  0 or a backend's error. */
static int s_graphed(model_dev_t *d, int n, int n_out, const kern_kv_pool_t *kv, int max_ctx) {
    kern_backend_t *be = d->be;
    bool fresh;
    s_graph_t *e = s_graph_of(d, n, n_out, max_ctx, kv->base, &fresh);
    e->used = ++d->tick;
    if (e->g) {
        int rc = be->replay(be, e->g);
        if (rc != -ESTALE) {
            d->gstat.replayed += rc == 0;
            return rc;
        }
        be->graph_free(be, e->g); /* the backend's scratch moved: record it again */
        e->g = NULL;
        d->gstat.stale++;
    } else if (fresh || e->failed) {
        return s_body(d, n, n_out, kv, max_ctx, NULL, NULL);
    }
    int rc = be->capture_begin(be);
    if (rc == 0) {
        int body = s_body(d, n, n_out, kv, max_ctx, NULL, NULL);
        void *g = NULL;
        rc = be->capture_end(be, &g);
        if (rc == 0 && body == 0 && g) {
            rc = be->replay(be, g);
            if (rc == 0) {
                e->g = g;
                d->gstat.recorded++;
                d->gstat.replayed++;
                return 0;
            }
            if (rc != -ESTALE) {
                be->graph_free(be, g);
                return rc;
            }
        }
        if (g)
            be->graph_free(be, g);
    }
    e->failed = true; /* nothing ran: the ops again, as they are */
    d->gstat.failed++;
    return s_body(d, n, n_out, kv, max_ctx, NULL, NULL);
}

int model_dev_forward_hidden(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv,
                             float *logits, const bool *hidden, float *hidden_out) {
    return model_dev_forward_rows(d, b, kv, logits, hidden, hidden_out, NULL);
}

/* Rows [o0, o1) of the last forward's logits down into logits (host, row o at o). */
static int s_down_rows(model_dev_t *d, float *logits, int o0, int o1) {
    const size_t nv = (size_t)d->m->cfg.n_vocab;
    return d->be->download(d->be, logits + o0 * nv, d->logits + o0 * nv,
                           (size_t)(o1 - o0) * nv * sizeof(float));
}

int model_dev_logits(model_dev_t *d, int row0, int n, float *logits) {
    if (row0 < 0 || n < 1 || row0 + n > d->n_out || !logits)
        return -EINVAL;
    return s_down_rows(d, logits - (size_t)row0 * d->m->cfg.n_vocab, row0, row0 + n);
}

int model_dev_sample(model_dev_t *d, int row0, int n, const kern_backend_sample_t *p,
                     const int32_t *const *hist, const int *n_hist, const int32_t *pos,
                     int32_t *ids) {
    kern_backend_t *be = d->be;
    if (row0 < 0 || n < 1 || row0 + n > d->n_out || !p || !pos || !ids)
        return -EINVAL;
    if (!be->sample)
        return -ENOTSUP;
    const size_t I = sizeof(int32_t);
    int off = 0;
    for (int r = 0; r < n; r++) {
        if (p[r].repeat_penalty != 1.0f && p[r].repeat_last_n > MODEL_DEV_HIST)
            return -ENOTSUP; /* a window past what is kept on the backend */
        int k = hist && n_hist ? n_hist[r] : 0, from = k > MODEL_DEV_HIST ? k - MODEL_DEV_HIST : 0;
        d->h_hist_off[r] = off;
        d->h_n_hist[r] = k - from;
        for (int i = from; i < k; i++)
            d->h_hist[off++] = hist[r][i];
    }
    int rc;
    if ((off && (rc = be->upload(be, d->hist, d->h_hist, (size_t)off * I))) ||
        (rc = be->upload(be, d->hist_off, d->h_hist_off, (size_t)n * I)) ||
        (rc = be->upload(be, d->n_hist, d->h_n_hist, (size_t)n * I)))
        return rc;
    const int nv = d->m->cfg.n_vocab;
    return be->sample(be, d->logits + (size_t)row0 * nv, n, nv, p, d->hist, d->hist_off, d->n_hist,
                      pos, ids);
}

int model_dev_forward_rows(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv,
                           float *logits, const bool *hidden, float *hidden_out,
                           const bool *host_rows) {
    kern_backend_t *be = d->be;
    const model_config_t *c = &d->m->cfg;
    int max_ctx, n_out = s_stage(d, b, kv, &max_ctx);
    if (n_out < 0 || (n_out && !logits) || (hidden && !hidden_out))
        return -EINVAL;
    const int n = b->n_tokens;
    const size_t I = sizeof(int32_t);
    int rc;
    if ((rc = be->upload(be, d->ids, b->tokens, n * I)) ||
        (rc = be->upload(be, d->pos, b->pos, n * I)) ||
        (rc = be->upload(be, d->seq, b->seq, n * I)) ||
        (rc = be->upload(be, d->n_ctx, d->h_nctx, n * I)) ||
        (rc = be->upload(be, d->blocks, d->h_blocks, (size_t)b->n_seqs * d->max_blocks * I)) ||
        (rc = be->upload(be, d->cs, d->h_cs, (size_t)n * c->n_rot * sizeof(float))) ||
        (d->cs_swa &&
         (rc = be->upload(be, d->cs_swa, d->h_cs_swa, (size_t)n * c->n_rot * sizeof(float)))) ||
        (n_out && (rc = be->upload(be, d->rows, d->h_rows, n_out * I))))
        return rc;
    if (d->graphs && !hidden && n <= S_GRAPH_TOKENS) {
        /* a bucket's bound: the attention's chunks past the longest context are empty, so
         * the numbers are those of the exact bound, and one graph serves 256 positions */
        int bound = (max_ctx + S_CTX_BUCKET - 1) / S_CTX_BUCKET * S_CTX_BUCKET;
        rc = s_graphed(d, n, n_out, kv, bound);
    } else {
        rc = s_body(d, n, n_out, kv, max_ctx, hidden, hidden_out);
    }
    d->n_out = rc ? 0 : n_out;
    for (int o = 0; !rc && o < n_out;) { /* the rows asked for, in runs */
        if (host_rows && !host_rows[o]) {
            o++;
            continue;
        }
        int e = o + 1;
        while (e < n_out && (!host_rows || host_rows[e]))
            e++;
        rc = s_down_rows(d, logits, o, e);
        o = e;
    }
    if (rc)
        return rc;
    rc = be->sync(be);
    return rc ? rc : n_out;
}
