/* model_embedder.c - a text's pooled embedding, in place (model_embedder.h). */
#include "model_embedder.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BLOCK 16 /* KV positions per block of the embedder's own pool */

struct model_embedder_t {
    const model_t *model;
    const model_tokenizer_t *tok;
    model_ctx_t *ctx;
    kern_kv_pool_t kv;
    int max_tokens; /* rounded up to whole blocks */
    int ubatch;     /* tokens per forward pass */
    int dim;
    int32_t *blocks, *pos, *seq, *ids;
    bool *want, *hid;
    float *logits; /* (ubatch, n_vocab): the forward pass writes the wanted rows */
    float *hidden; /* (ubatch, dim) */
    double *sum;   /* (dim) */
};

void model_embedder_destroy(model_embedder_t **self_p) {
    model_embedder_t *e = *self_p;
    if (!e)
        return;
    model_ctx_destroy(&e->ctx);
    kern_kv_pool_free(&e->kv);
    free(e->blocks);
    free(e->pos);
    free(e->seq);
    free(e->ids);
    free(e->want);
    free(e->hid);
    free(e->logits);
    free(e->hidden);
    free(e->sum);
    free(e);
    *self_p = NULL;
}

model_embedder_t *model_embedder_new(const model_t *model, const model_tokenizer_t *tok,
                                     int max_tokens, int n_threads, char *err, size_t errlen) {
    if (!model || !tok || max_tokens < 1 || n_threads < 1) {
        snprintf(err, errlen, "bad arguments");
        return NULL;
    }
    const model_config_t *c = model_config(model);
    model_embedder_t *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->model = model;
    e->tok = tok;
    e->dim = c->d_model;
    e->max_tokens = (max_tokens + S_BLOCK - 1) / S_BLOCK * S_BLOCK;
    e->ubatch = e->max_tokens < 128 ? e->max_tokens : 128;
    int nb = e->max_tokens / S_BLOCK;
    kern_kv_shape_t shape = model_kv_shape(c, S_BLOCK);
    if (kern_kv_pool_init(&e->kv, &shape, KERN_F16, nb)) {
        snprintf(err, errlen, "cannot allocate KV for %d positions", e->max_tokens);
        free(e);
        return NULL;
    }
    e->ctx = model_ctx_new(model, e->ubatch, e->max_tokens, n_threads, NULL);
    e->blocks = malloc((size_t)nb * sizeof *e->blocks);
    e->pos = malloc((size_t)e->ubatch * sizeof *e->pos);
    e->seq = calloc((size_t)e->ubatch, sizeof *e->seq);
    e->ids = malloc((size_t)e->max_tokens * sizeof *e->ids);
    e->want = calloc((size_t)e->ubatch, sizeof *e->want);
    e->hid = malloc((size_t)e->ubatch * sizeof *e->hid);
    e->logits = malloc((size_t)c->n_vocab * sizeof *e->logits);
    e->hidden = malloc((size_t)e->ubatch * (size_t)e->dim * sizeof *e->hidden);
    e->sum = malloc((size_t)e->dim * sizeof *e->sum);
    if (!e->ctx || !e->blocks || !e->pos || !e->seq || !e->ids || !e->want || !e->hid ||
        !e->logits || !e->hidden || !e->sum) {
        snprintf(err, errlen, "out of memory");
        model_embedder_destroy(&e);
        return NULL;
    }
    for (int i = 0; i < nb; i++)
        e->blocks[i] = i;
    for (int i = 0; i < e->ubatch; i++)
        e->hid[i] = true;
    return e;
}

int model_embedder_dim(const model_embedder_t *self) {
    return self->dim;
}

int model_embedder_ids(model_embedder_t *e, const int32_t *ids, int n, float *out) {
    if (n < 1)
        return -EINVAL;
    if (n > e->max_tokens)
        return -E2BIG;
    int d = e->dim;
    for (int i = 0; i < d; i++)
        e->sum[i] = 0;
    model_seq_view_t sv = {e->blocks, e->kv.n_blocks, NULL, 0, 0};
    for (int i = 0; i < n; i += e->ubatch) {
        int m = n - i < e->ubatch ? n - i : e->ubatch;
        for (int j = 0; j < m; j++)
            e->pos[j] = i + j;
        model_batch_t b = {m, ids + i, e->pos, e->seq, e->want, 1, &sv, NULL};
        int rc = model_ctx_forward_hidden(e->ctx, &b, &e->kv, e->logits, e->hid, e->hidden);
        if (rc < 0)
            return rc;
        for (int j = 0; j < m; j++)
            for (int k = 0; k < d; k++)
                e->sum[k] += e->hidden[(size_t)j * d + k];
    }
    double norm = 0; /* the mean, then unit length: as the embeddings path */
    for (int k = 0; k < d; k++) {
        double v = e->sum[k] / n;
        norm += v * v;
    }
    norm = sqrt(norm);
    for (int k = 0; k < d; k++)
        out[k] = norm > 0 ? (float)(e->sum[k] / n / norm) : 0.0f;
    return n;
}

int model_embedder_text(model_embedder_t *e, const char *text, size_t len, float *out) {
    if (!text || !len)
        return -EINVAL;
    bool bos = model_tokenizer_add_bos(e->tok);
    int n = model_tokenizer_encode(e->tok, text, len, bos, false, e->ids, e->max_tokens);
    if (n < 0)
        return n;
    if (n > e->max_tokens)
        return -E2BIG;
    return model_embedder_ids(e, e->ids, n, out);
}
