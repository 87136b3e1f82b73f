// kern_backend_cuda.cu - the CUDA backend: kern_backend.h's table over
// kern_cuda.h.  Host code only (no kernels); owns its kern_cuda context.
// Limits beside the CPU backend: weights F32/F16/Q4_0/Q4_1/Q8_0/Q4_K/Q6_K, KV
// pool F16, device sampling for top_k <= KERN_CUDA_TOPK_MAX.
#include "cuda_common.cuh"

#include <cstdlib>

extern "C" {
#include "kern_backend.h"
}

static kern_cuda_ctx_t *s_ctx(kern_backend_t *be) {
    return (kern_cuda_ctx_t *)be->impl;
}

static int s_matmul(kern_backend_t *be, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
                    size_t w_stride, const float *x, size_t x_stride, float *out,
                    size_t out_stride) {
    return kern_cuda_matmul(s_ctx(be), wt, k, nr, nc, w, w_stride, x, x_stride, out, out_stride);
}

static int s_attention(kern_backend_t *be, const kern_backend_attn_t *a) {
    if (!a)
        return -EINVAL;
    if (a->kv_type != KERN_F16)
        return -ENOTSUP;
    kern_cuda_attn_t c;
    c.n_head = a->n_head;
    c.n_head_kv = a->n_head_kv;
    c.head_dim = a->head_dim;
    c.n_tok = a->n_tok;
    c.q = a->q;
    c.out = a->out;
    c.n_ctx = a->n_ctx;
    c.seq = a->seq;
    c.blocks = a->blocks;
    c.max_blocks = a->max_blocks;
    c.max_ctx = a->max_ctx;
    c.pool = a->pool;
    c.block_bytes = a->block_bytes;
    c.block_size = a->block_size;
    c.layer = a->layer;
    c.scale = a->scale;
    c.window = a->window;
    return kern_cuda_attention(s_ctx(be), &c);
}

static int s_kv_store(kern_backend_t *be, const kern_backend_kv_t *a) {
    if (!a)
        return -EINVAL;
    if (a->kv_type != KERN_F16)
        return -ENOTSUP;
    return kern_cuda_kv_store(s_ctx(be), a->pool, a->block_bytes, a->block_size, a->n_head_kv,
                              a->head_dim, a->layer, a->n_tok, a->k, a->v, a->pos, a->seq,
                              a->blocks, a->max_blocks);
}

static int s_rmsnorm(kern_backend_t *be, float *out, const float *x, const float *w, int n_rows,
                     int n, float eps) {
    return kern_cuda_rmsnorm(s_ctx(be), out, x, w, n_rows, n, eps);
}

static int s_softmax(kern_backend_t *be, float *x, int n_rows, int n) {
    return kern_cuda_softmax(s_ctx(be), x, n_rows, n);
}

static int s_rope(kern_backend_t *be, float *x, int n_tok, int n_heads, int head_dim, int n_rot,
                  const float *cos_sin, bool neox) {
    return kern_cuda_rope(s_ctx(be), x, n_tok, n_heads, head_dim, n_rot, cos_sin, neox ? 1 : 0);
}

static int s_add(kern_backend_t *be, float *x, const float *y, int n_rows, int dim,
                 size_t y_stride) {
    return kern_cuda_add(s_ctx(be), x, y, n_rows, dim, y_stride);
}

static int s_geglu(kern_backend_t *be, float *out, const float *gate, const float *up, int64_t n) {
    return kern_cuda_geglu(s_ctx(be), out, gate, up, n);
}

static int s_scale(kern_backend_t *be, float *x, int64_t n, float s) {
    return kern_cuda_scale(s_ctx(be), x, n, s);
}

static int s_swiglu(kern_backend_t *be, float *out, const float *gate, const float *up, int64_t n) {
    return kern_cuda_swiglu(s_ctx(be), out, gate, up, n);
}

static int s_embed(kern_backend_t *be, kern_type_t wt, const void *table, size_t row_bytes,
                   int n_rows, const int32_t *ids, int n_tok, int dim, float *out) {
    return kern_cuda_embed(s_ctx(be), wt, table, row_bytes, n_rows, ids, n_tok, dim, out);
}

static int s_sample(kern_backend_t *be, float *logits, int n_rows, int n_vocab,
                    const kern_backend_sample_t *p, const int32_t *hist, const int32_t *hist_off,
                    const int32_t *n_hist, const int32_t *pos, int32_t *ids) {
    if (!p || n_rows < 0)
        return -EINVAL;
    // kern_backend_sample_t's fields are the first of kern_cuda_sample_params_t's; the
    // rest (penalties from the completion, logit bias) are off
    kern_cuda_sample_params_t *cp =
        (kern_cuda_sample_params_t *)calloc(n_rows ? (size_t)n_rows : 1, sizeof *cp);
    if (!cp)
        return -ENOMEM;
    for (int r = 0; r < n_rows; r++) {
        cp[r].temperature = p[r].temperature;
        cp[r].top_k = p[r].top_k;
        cp[r].top_p = p[r].top_p;
        cp[r].min_p = p[r].min_p;
        cp[r].repeat_penalty = p[r].repeat_penalty;
        cp[r].repeat_last_n = p[r].repeat_last_n;
        cp[r].seed = p[r].seed;
    }
    int rc =
        kern_cuda_sample(s_ctx(be), logits, n_rows, n_vocab, cp, hist, hist_off, n_hist, pos, ids);
    free(cp);
    return rc;
}

static int s_alloc(kern_backend_t *be, void **p, size_t bytes) {
    return kern_cuda_malloc(s_ctx(be), p, bytes);
}

static void s_free(kern_backend_t *be, void *p) {
    kern_cuda_free(s_ctx(be), p);
}

static int s_upload(kern_backend_t *be, void *dst, const void *src, size_t bytes) {
    return kern_cuda_upload(s_ctx(be), dst, src, bytes);
}

static int s_download(kern_backend_t *be, void *dst, const void *src, size_t bytes) {
    return kern_cuda_download(s_ctx(be), dst, src, bytes);
}

static int s_copy(kern_backend_t *be, void *dst, const void *src, size_t bytes) {
    return kern_cuda_copy(s_ctx(be), dst, src, bytes);
}

static int s_host_alloc(kern_backend_t *be, void **p, size_t bytes) {
    return kern_cuda_host_alloc(s_ctx(be), p, bytes);
}

static void s_host_free(kern_backend_t *be, void *p) {
    kern_cuda_host_free(s_ctx(be), p);
}

static int s_block_out(kern_backend_t *be, void *host, const void *src, size_t bytes) {
    return kern_cuda_block_d2h(s_ctx(be), host, src, bytes);
}

static int s_block_in(kern_backend_t *be, void *dst, const void *host, size_t bytes) {
    return kern_cuda_block_h2d(s_ctx(be), dst, host, bytes);
}

static int s_capture_begin(kern_backend_t *be) {
    return kern_cuda_capture_begin(s_ctx(be));
}

static int s_capture_end(kern_backend_t *be, void **graph) {
    return kern_cuda_capture_end(s_ctx(be), (kern_cuda_graph_t **)graph);
}

static int s_replay(kern_backend_t *be, void *graph) {
    return kern_cuda_graph_launch(s_ctx(be), (kern_cuda_graph_t *)graph);
}

static void s_graph_free(kern_backend_t *be, void *graph) {
    (void)be;
    kern_cuda_graph_free((kern_cuda_graph_t *)graph);
}

static int s_sync(kern_backend_t *be) {
    return kern_cuda_sync(s_ctx(be));
}

static void s_destroy(kern_backend_t **be_p) {
    if (!be_p || !*be_p)
        return;
    kern_cuda_ctx_t *c = s_ctx(*be_p);
    kern_cuda_ctx_destroy(&c);
    free(*be_p);
    *be_p = nullptr;
}

extern "C" kern_backend_t *kern_cuda_backend_new(int device) {
    kern_cuda_ctx_t *c = kern_cuda_ctx_new(device);
    if (!c)
        return nullptr;
    kern_backend_t *be = (kern_backend_t *)calloc(1, sizeof *be);
    if (!be) {
        kern_cuda_ctx_destroy(&c);
        return nullptr;
    }
    be->name = "cuda";
    be->impl = c;
    for (int t = 0; t < KERN_TYPE_COUNT; t++)
        if (kern_cuda_matmul_supports((kern_type_t)t))
            be->matmul[t] = s_matmul;
    be->attention = s_attention;
    be->kv_store = s_kv_store;
    be->rmsnorm = s_rmsnorm;
    be->softmax = s_softmax;
    be->rope = s_rope;
    be->swiglu = s_swiglu;
    be->add = s_add;
    be->geglu = s_geglu;
    be->scale = s_scale;
    be->embed = s_embed;
    be->sample = s_sample;
    be->alloc = s_alloc;
    be->free = s_free;
    be->upload = s_upload;
    be->download = s_download;
    be->copy = s_copy;
    be->host_alloc = s_host_alloc;
    be->host_free = s_host_free;
    be->block_out = s_block_out;
    be->block_in = s_block_in;
    be->capture_begin = s_capture_begin;
    be->capture_end = s_capture_end;
    be->replay = s_replay;
    be->graph_free = s_graph_free;
    be->sync = s_sync;
    be->destroy = s_destroy;
    return be;
}
