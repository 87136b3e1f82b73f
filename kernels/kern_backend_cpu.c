/* kern_backend_cpu.c - the CPU backend: thin wrappers that call the kern_ops.h
 * kernels (activation quantization for gemm, one attention call per token and
 * KV head) plus the host sampler, behind kern_backend.h's table.  Owns only
 * its scratch buffers. */
#include "kern_backend.h"
#include "kern_kv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float logit; /* value, then probability */
    int32_t id;  /* token */
} s_cand_t;

typedef struct {
    const kern_ops_t *ops; /* the kernel table every op calls */
    void *xq;              /* quantized activations for matmul */
    size_t xq_bytes;       /* its size */
    float *att;            /* attention scores scratch */
    size_t att_floats;     /* its size */
    s_cand_t *cand;        /* sampler candidates */
    int n_cand;            /* its size */
} s_cpu_t;

static s_cpu_t *s_self(kern_backend_t *be) {
    return (s_cpu_t *)be->impl;
}

/* Grow *buf to at least bytes; 0 or -ENOMEM (the old buffer is kept then). */
static int s_grow(void **buf, size_t *have, size_t bytes) {
    if (bytes <= *have)
        return 0;
    void *p = realloc(*buf, bytes);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *have = bytes;
    return 0;
}

/* ---- matmul -------------------------------------------------------------- */

static int s_matmul(kern_backend_t *be, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
                    size_t w_stride, const float *x, size_t x_stride, float *out,
                    size_t out_stride) {
    s_cpu_t *s = s_self(be);
    const kern_type_traits_t *tr = kern_type_traits(wt);
    if (!tr || !tr->is_weight)
        return -ENOTSUP;
    if (!w || !x || !out || k < 1 || nr < 1 || nc < 1 || x_stride < (size_t)k ||
        out_stride < (size_t)nr || k % tr->block_size)
        return -EINVAL;
    kern_type_t vt = tr->vec_dot_type;
    if (vt == KERN_F32) { /* float weights take float activations as they are */
        s->ops->gemm(wt, k, nr, nc, w, w_stride, x, x_stride * sizeof(float), out, out_stride);
        return 0;
    }
    size_t row = kern_row_size(vt, k);
    if (row == 0)
        return -EINVAL;
    if (s_grow(&s->xq, &s->xq_bytes, row * (size_t)nc))
        return -ENOMEM;
    for (int c = 0; c < nc; c++)
        s->ops->quant_row(vt, x + (size_t)c * x_stride, (uint8_t *)s->xq + (size_t)c * row, k);
    s->ops->gemm(wt, k, nr, nc, w, w_stride, s->xq, row, out, out_stride);
    return 0;
}

/* ---- attention and the KV store ------------------------------------------ */

static int s_attention(kern_backend_t *be, const kern_backend_attn_t *a) {
    s_cpu_t *s = s_self(be);
    if (!a || !a->q || !a->out || !a->n_ctx || !a->seq || !a->blocks || !a->pool || a->n_tok < 0 ||
        a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->head_dim < 1 ||
        a->block_size < 1 || a->max_blocks < 1 || a->layer < 0)
        return -EINVAL;
    size_t slab = kern_kv_slab_bytes(a->kv_type, a->block_size, a->head_dim);
    if (slab == 0)
        return -ENOTSUP;
    int n_q = a->n_head / a->n_head_kv, D = a->head_dim;
    for (int t = 0; t < a->n_tok; t++) {
        int n_ctx = a->n_ctx[t];
        if (n_ctx < 1 || n_ctx > a->max_blocks * a->block_size)
            return -EINVAL;
        void *att = s->att;
        size_t have = s->att_floats * sizeof(float);
        if (s_grow(&att, &have, (size_t)n_q * n_ctx * sizeof(float)))
            return -ENOMEM;
        s->att = att;
        s->att_floats = have / sizeof(float);
        for (int hk = 0; hk < a->n_head_kv; hk++) {
            const uint8_t *base = (const uint8_t *)a->pool;
            kern_attn_args_t args = {
                .head_dim = D,
                .n_q = n_q,
                .q = a->q + ((size_t)t * a->n_head + (size_t)hk * n_q) * D,
                .out = a->out + ((size_t)t * a->n_head + (size_t)hk * n_q) * D,
                .n_ctx = n_ctx,
                .pos0 = a->window > 0 && n_ctx > a->window ? n_ctx - a->window : 0,
                .blocks = a->blocks + (size_t)a->seq[t] * a->max_blocks,
                .block_size = a->block_size,
                .k_base = base + ((size_t)(a->layer * 2 + 0) * a->n_head_kv + hk) * slab,
                .v_base = base + ((size_t)(a->layer * 2 + 1) * a->n_head_kv + hk) * slab,
                .block_stride = a->block_bytes,
                .kv_type = a->kv_type,
                .scale = a->scale,
                .scratch = s->att,
            };
            s->ops->attention(&args);
        }
    }
    return 0;
}

static int s_kv_store(kern_backend_t *be, const kern_backend_kv_t *a) {
    (void)be;
    if (!a || !a->pool || !a->k || !a->v || !a->pos || !a->seq || !a->blocks || a->n_tok < 0 ||
        a->n_head_kv < 1 || a->head_dim < 1 || a->block_size < 1 || a->layer < 0 ||
        a->max_blocks < 1)
        return -EINVAL;
    int D = a->head_dim, bs = a->block_size;
    size_t slab = kern_kv_slab_bytes(a->kv_type, bs, D);
    if (slab == 0)
        return -ENOTSUP;
    for (int t = 0; t < a->n_tok; t++) {
        int p = a->pos[t];
        if (p < 0 || p >= a->max_blocks * bs)
            return -EINVAL;
        uint8_t *blk =
            (uint8_t *)a->pool +
            (size_t)a->blocks[(size_t)a->seq[t] * a->max_blocks + p / bs] * a->block_bytes;
        int slot = p % bs;
        for (int kv = 0; kv < 2; kv++)
            for (int hk = 0; hk < a->n_head_kv; hk++) {
                const float *src = (kv ? a->v : a->k) + ((size_t)t * a->n_head_kv + hk) * D;
                uint8_t *sl = blk + ((size_t)(a->layer * 2 + kv) * a->n_head_kv + hk) * slab;
                if (a->kv_type == KERN_F32) {
                    memcpy(sl + (size_t)slot * D * 4, src, (size_t)D * 4);
                } else if (a->kv_type == KERN_F16) {
                    kern_f16_t *r = (kern_f16_t *)sl + (size_t)slot * D;
                    for (int d = 0; d < D; d++)
                        r[d] = kern_f32_to_f16(src[d]);
                } else { /* KERN_I8: int8 rows, then one float scale per row */
                    float sc = kern_i8_quant_row(src, (int8_t *)sl + (size_t)slot * D, D);
                    memcpy(sl + (size_t)bs * D + (size_t)slot * 4, &sc, 4);
                }
            }
    }
    return 0;
}

/* ---- row and element-wise ops -------------------------------------------- */

static int s_rmsnorm(kern_backend_t *be, float *out, const float *x, const float *w, int n_rows,
                     int n, float eps) {
    if (!out || !x || !w || n_rows < 0 || n < 1)
        return -EINVAL;
    for (int r = 0; r < n_rows; r++)
        s_self(be)->ops->rmsnorm(out + (size_t)r * n, x + (size_t)r * n, w, n, eps);
    return 0;
}

static int s_softmax(kern_backend_t *be, float *x, int n_rows, int n) {
    if (!x || n_rows < 0 || n < 1)
        return -EINVAL;
    for (int r = 0; r < n_rows; r++)
        s_self(be)->ops->softmax(x + (size_t)r * n, n);
    return 0;
}

static int s_rope(kern_backend_t *be, float *x, int n_tok, int n_heads, int head_dim, int n_rot,
                  const float *cos_sin, bool neox) {
    if (!x || !cos_sin || n_tok < 0 || n_heads < 1 || head_dim < 1 || n_rot < 0 ||
        n_rot > head_dim || n_rot % 2)
        return -EINVAL;
    for (int t = 0; t < n_tok; t++)
        s_self(be)->ops->rope(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, n_rot,
                              cos_sin + (size_t)t * n_rot, neox);
    return 0;
}

static int s_add(kern_backend_t *be, float *x, const float *y, int n_rows, int dim,
                 size_t y_stride) {
    (void)be;
    if (!x || !y || n_rows < 0 || dim < 0)
        return -EINVAL;
    for (int r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * dim;
        const float *yr = y + (size_t)r * y_stride;
        for (int i = 0; i < dim; i++)
            xr[i] += yr[i];
    }
    return 0;
}

static int s_geglu(kern_backend_t *be, float *out, const float *gate, const float *up, int64_t n) {
    if (!out || !gate || !up || n < 0 || n > INT32_MAX)
        return -EINVAL;
    s_self(be)->ops->geglu(out, gate, up, (int)n);
    return 0;
}

static int s_scale(kern_backend_t *be, float *x, int64_t n, float s) {
    (void)be;
    if (!x || n < 0)
        return -EINVAL;
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
    return 0;
}

static int s_swiglu(kern_backend_t *be, float *out, const float *gate, const float *up, int64_t n) {
    if (!out || !gate || !up || n < 0 || n > INT32_MAX)
        return -EINVAL;
    s_self(be)->ops->swiglu(out, gate, up, (int)n);
    return 0;
}

static int s_embed(kern_backend_t *be, kern_type_t wt, const void *table, size_t row_bytes,
                   int n_rows, const int32_t *ids, int n_tok, int dim, float *out) {
    const kern_type_traits_t *tr = kern_type_traits(wt);
    if (!tr)
        return -ENOTSUP;
    if (!table || !ids || !out || n_tok < 0 || dim < 1 || dim % tr->block_size)
        return -EINVAL;
    for (int t = 0; t < n_tok; t++) {
        if (ids[t] < 0 || ids[t] >= n_rows)
            return -EINVAL;
        s_self(be)->ops->dequant_row(wt, (const uint8_t *)table + (size_t)ids[t] * row_bytes,
                                     out + (size_t)t * dim, dim);
    }
    return 0;
}

/* ---- sampling ------------------------------------------------------------ *
 * The host sampler, operation for operation model/model_sampler.c's (which
 * kernels/ may not call: it is a layer above).  test_backend checks the two
 * give the same token on random logits and parameters. */

static int32_t s_argmax(const float *x, int n) {
    float best = -INFINITY;
    for (int i = 0; i < n; i++)
        best = x[i] > best ? x[i] : best;
    for (int i = 0; i < n; i++)
        if (x[i] == best)
            return i;
    return 0;
}

static uint64_t s_mix(uint64_t seed, uint64_t pos) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (pos + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int s_cmp_desc(const void *a, const void *b) {
    float x = ((const s_cand_t *)a)->logit, y = ((const s_cand_t *)b)->logit;
    if (x != y)
        return x < y ? 1 : -1;
    return ((const s_cand_t *)a)->id - ((const s_cand_t *)b)->id;
}

static void s_top_k(s_cand_t *c, int n, int k) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        s_cand_t x = c[i];
        if (m == k && s_cmp_desc(&x, &c[k - 1]) >= 0)
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && s_cmp_desc(&x, &c[j - 1]) < 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

static int32_t s_sample_row(s_cand_t *c, const kern_backend_sample_t *p, float *logits, int n,
                            const int32_t *hist, int n_hist, int pos) {
    if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0 && hist) {
        int from = n_hist > p->repeat_last_n ? n_hist - p->repeat_last_n : 0;
        for (int i = from; i < n_hist; i++) {
            int32_t t = hist[i];
            if (t < 0 || t >= n)
                continue;
            bool seen = false;
            for (int j = from; j < i && !seen; j++)
                seen = hist[j] == t;
            if (!seen)
                logits[t] =
                    logits[t] > 0 ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
        }
    }
    if (p->temperature <= 0)
        return s_argmax(logits, n);
    for (int i = 0; i < n; i++)
        c[i] = (s_cand_t){logits[i] / p->temperature, i};
    int m = n;
    if (p->top_k > 0 && p->top_k < n) {
        s_top_k(c, n, p->top_k);
        m = p->top_k;
    } else {
        qsort(c, (size_t)n, sizeof *c, s_cmp_desc);
    }
    float mx = c[0].logit;
    double sum = 0;
    for (int i = 0; i < m; i++) {
        c[i].logit = expf(c[i].logit - mx);
        sum += c[i].logit;
    }
    for (int i = 0; i < m; i++)
        c[i].logit = (float)(c[i].logit / sum);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = m;
        for (int i = 0; i < m; i++) {
            cum += c[i].logit;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    if (p->min_p > 0) {
        float thr = p->min_p * c[0].logit;
        int keep = 1;
        while (keep < m && c[keep].logit >= thr)
            keep++;
        m = keep;
    }
    double total = 0;
    for (int i = 0; i < m; i++)
        total += c[i].logit;
    double u = (double)(s_mix(p->seed, (uint64_t)pos) >> 11) * (1.0 / 9007199254740992.0) * total;
    double cum = 0;
    for (int i = 0; i < m; i++) {
        cum += c[i].logit;
        if (u < cum)
            return c[i].id;
    }
    return c[m - 1].id;
}

static int s_sample(kern_backend_t *be, float *logits, int n_rows, int n_vocab,
                    const kern_backend_sample_t *p, const int32_t *hist, const int32_t *hist_off,
                    const int32_t *n_hist, const int32_t *pos, int32_t *ids) {
    s_cpu_t *s = s_self(be);
    if (!logits || !p || !pos || !ids || n_rows < 0 || n_vocab < 1)
        return -EINVAL;
    if (n_vocab > s->n_cand) {
        s_cand_t *c = realloc(s->cand, (size_t)n_vocab * sizeof *c);
        if (!c)
            return -ENOMEM;
        s->cand = c;
        s->n_cand = n_vocab;
    }
    bool with_hist = hist && hist_off && n_hist;
    for (int r = 0; r < n_rows; r++)
        ids[r] =
            s_sample_row(s->cand, &p[r], logits + (size_t)r * n_vocab, n_vocab,
                         with_hist ? hist + hist_off[r] : NULL, with_hist ? n_hist[r] : 0, pos[r]);
    return 0;
}

/* ---- memory and lifetime ------------------------------------------------- */

/* calloc (whose large blocks are lazily zeroed pages) moved up to 64 bytes, the pointer
 * calloc gave kept just below: a KV pool's alignment without touching every page. */
static int s_alloc(kern_backend_t *be, void **p, size_t bytes) {
    (void)be;
    if (!p || bytes == 0 || bytes > SIZE_MAX - 128)
        return -EINVAL;
    uint8_t *raw = calloc(1, bytes + 64 + sizeof(void *));
    if (!raw)
        return -ENOMEM;
    uintptr_t at = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)at)[-1] = raw;
    *p = (void *)at;
    return 0;
}

static void s_free(kern_backend_t *be, void *p) {
    (void)be;
    if (p)
        free(((void **)p)[-1]);
}

static int s_host_alloc(kern_backend_t *be, void **p, size_t bytes) {
    (void)be;
    if (!p || bytes == 0)
        return -EINVAL;
    *p = malloc(bytes);
    return *p ? 0 : -ENOMEM;
}

static void s_host_free(kern_backend_t *be, void *p) {
    (void)be;
    free(p);
}

static int s_copy(kern_backend_t *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if ((!dst || !src) && bytes)
        return -EINVAL;
    if (bytes)
        memmove(dst, src, bytes);
    return 0;
}

static int s_sync(kern_backend_t *be) {
    (void)be;
    return 0;
}

static void s_destroy(kern_backend_t **be_p) {
    if (!be_p || !*be_p)
        return;
    s_cpu_t *s = s_self(*be_p);
    if (s) {
        free(s->xq);
        free(s->att);
        free(s->cand);
        free(s);
    }
    free(*be_p);
    *be_p = NULL;
}

kern_backend_t *kern_backend_cpu_new(const kern_ops_t *ops) {
    kern_backend_t *be = calloc(1, sizeof *be);
    s_cpu_t *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        return NULL;
    }
    s->ops = ops ? ops : kern_ops_best();
    be->name = "cpu";
    be->impl = s;
    for (int t = 0; t < KERN_TYPE_COUNT; t++) {
        const kern_type_traits_t *tr = kern_type_traits(t);
        if (tr && tr->is_weight)
            be->matmul[t] = s_matmul;
    }
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
    be->upload = s_copy;
    be->download = s_copy;
    be->copy = s_copy;
    be->host_alloc = s_host_alloc;
    be->host_free = s_host_free;
    be->block_out = s_copy;
    be->block_in = s_copy;
    be->sync = s_sync;
    be->destroy = s_destroy;
    return be;
}

void kern_backend_destroy(kern_backend_t **self_p) {
    if (self_p && *self_p && (*self_p)->destroy)
        (*self_p)->destroy(self_p);
}
