/* model_forward.c - the generic forward pass: the context (scratch, threads, activation
 * plans) and the stages of a layer in dataflow order, as the architecture declares them
 * (model_arch.h; the MoE FFN is model_moe.c's):
 *   x = embed(tokens) (* sqrt(d_model): embd_scale)     (n, d_model)
 *   for each layer:
 *       h = rmsnorm(x) ; q,k,v = h Wq, h Wk, h Wv         (n, q_dim), (n, kv_dim) x 2
 *       q,k,v += bq,bk,bv                               qkv_bias
 *       q, k = rmsnorm of each head                     qk_norm
 *       rope(q, k) ; KV[pos] = k, v
 *       o = attention(q, KV) Wo (+bo)                   (n, d_model); full, or the last
 *                                                       window positions (sliding)
 *       x += o  or  x += rmsnorm(o)                     norm_post_attn (sandwich)
 *       h = rmsnorm(x) ; f = ffn(h)                     dense: (act(h Wgate) * h Wup) Wdown,
 *                                                       act silu or gelu_tanh
 *       x += f  or  x += rmsnorm(f)                     norm_post_ffn
 *   logits = rmsnorm(x) Wout           (only for tokens that want them: (n_out, n_vocab))
 *   hidden = rmsnorm(x)                (only for tokens asking for it, model_ctx_forward_hidden)
 * The whole pass is one base_pool_run: every thread walks the same stages and
 * takes its share of each (rows of a matrix, or tokens), with a barrier where a
 * stage reads what another thread wrote.  Time goes to the matrix products
 * (kern gemm, activations quantized to 8 bits first) and, for long contexts,
 * attention.
 */
#include "model_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ context */

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

model_ctx_t *model_ctx_new(const model_t *m, int max_tokens, int max_ctx, int n_threads,
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
    if (m->rope_theta_swa)
        c->cs_swa = malloc(T * cfg->n_rot * sizeof(float));
    c->scratch =
        malloc((size_t)n_threads * (cfg->n_head / cfg->n_head_kv) * max_ctx * sizeof(float));
    c->out_rows = malloc(T * sizeof(int));
    bool ok = c->pool && c->x && c->h && c->q && c->kv_k && c->kv_v && c->att && c->tmp &&
              c->ff_g && c->ff_u && c->cs && c->scratch && c->out_rows &&
              (c->cs_swa || !m->rope_theta_swa);
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
    for (int i = 0; ok && i < MODEL_MAX_QTYPES; i++) {
        c->qbuf[i] = malloc(R * s_max_row_bytes(widest) + 64);
        ok = c->qbuf[i] != NULL;
    }
    c->plans = calloc((size_t)cfg->n_layer * MODEL_PLANS_PER_LAYER + 1, sizeof *c->plans);
    ok = ok && c->plans;
    for (int l = 0; ok && l < cfg->n_layer; l++) {
        const model_layer_t *L = &m->layers[l];
        model_plan_t *p = c->plans + (size_t)l * MODEL_PLANS_PER_LAYER;
        const model_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv}, *gu[2] = {&L->wg, &L->wu};
        const model_weight_t *wd = &L->wd;
        if (E) { /* every expert of a layer has the types of expert 0 (one tensor each) */
            gu[0] = &L->eg[0];
            gu[1] = &L->eu[0];
            wd = &L->ed[0];
            model_plan_make(&p[MODEL_PLAN_ROUTER], (const model_weight_t *[]){&L->wr}, 1);
        }
        model_plan_make(&p[MODEL_PLAN_QKV], qkv, 3);
        model_plan_make(&p[MODEL_PLAN_WO], (const model_weight_t *[]){&L->wo}, 1);
        model_plan_make(&p[MODEL_PLAN_GU], gu, 2);
        model_plan_make(&p[MODEL_PLAN_WD], &wd, 1);
    }
    if (ok)
        model_plan_make(&c->plans[(size_t)cfg->n_layer * MODEL_PLANS_PER_LAYER],
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
    free(c->cs_swa);
    free(c->scratch);
    free(c->out_rows);
    free(c->rlog);
    free(c->gw);
    free(c->row_of);
    free(c->row_tok);
    free(c->row_exp);
    free(c->off);
    free(c->y);
    for (int i = 0; i < MODEL_MAX_QTYPES; i++)
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

/* model_impl.h */
void model_rope_angles(float *cs, int pos, const double *theta, int n_rot) {
    for (int i = 0; i < n_rot / 2; i++) {
        double th = pos * theta[i];
        cs[2 * i] = (float)cos(th);
        cs[2 * i + 1] = (float)sin(th);
    }
}

/* Embedding lookup (times embd_mul, embd_scale) and RoPE angles (both tables when the
 * sliding-window layers have their own base) for this thread's tokens. */
static void s_stage_embed(model_ctx_t *c, int t0, int t1) {
    const model_t *m = c->m;
    const model_config_t *cfg = &m->cfg;
    const model_batch_t *b = c->batch;
    for (int t = t0; t < t1; t++) {
        const model_weight_t *e = &m->embd;
        float *x = c->x + (size_t)t * cfg->d_model;
        c->k->dequant_row(e->type, (const uint8_t *)e->data + (size_t)b->tokens[t] * e->row_bytes,
                          x, cfg->d_model);
        if (m->embd_mul != 1.0f)
            for (int i = 0; i < cfg->d_model; i++)
                x[i] *= m->embd_mul;
        model_rope_angles(c->cs + (size_t)t * cfg->n_rot, b->pos[t], m->rope_theta, cfg->n_rot);
        if (c->cs_swa)
            model_rope_angles(c->cs_swa + (size_t)t * cfg->n_rot, b->pos[t], m->rope_theta_swa,
                              cfg->n_rot);
    }
}

/* y[t] += b for this thread's tokens t of y (n, dim): a projection's bias, added after its
 * matmul (whose rows every thread shared) has finished.  b NULL (an optional bias the file
 * lacks): nothing. */
static void s_stage_bias(float *y, const float *b, int dim, int t0, int t1) {
    if (!b)
        return;
    for (int t = t0; t < t1; t++) {
        float *r = y + (size_t)t * dim;
        for (int i = 0; i < dim; i++)
            r[i] += b[i];
    }
}

/* qk_norm: RMSNorm of each of the n_head query heads and n_head_kv key heads (head_dim
 * values each, weights q_norm / k_norm, eps rms_eps) of this thread's tokens, in place,
 * before RoPE (Gemma 3, Qwen3). */
static void s_stage_qk_norm(model_ctx_t *c, const model_layer_t *L, int t0, int t1) {
    const model_config_t *cfg = &c->m->cfg;
    const int D = cfg->head_dim, H = cfg->n_head, Hkv = cfg->n_head_kv;
    for (int t = t0; t < t1; t++) {
        float *q = c->q + (size_t)t * H * D, *k = c->kv_k + (size_t)t * Hkv * D;
        for (int h = 0; h < H; h++)
            c->k->rmsnorm(q + (size_t)h * D, q + (size_t)h * D, L->q_norm, D, cfg->rms_eps);
        for (int h = 0; h < Hkv; h++)
            c->k->rmsnorm(k + (size_t)h * D, k + (size_t)h * D, L->k_norm, D, cfg->rms_eps);
    }
}

/* x += o for this thread's tokens, o = tmp (n, d_model) a sub-layer's output; with a post
 * norm w (sandwich: norm_post_attn, norm_post_ffn) x += rmsnorm(o) w instead.  The caller
 * computes the next stage's input from x. */
static void s_residual_add(model_ctx_t *c, const float *post_norm, int t) {
    const int d = c->m->cfg.d_model;
    float *x = c->x + (size_t)t * d, *o = c->tmp + (size_t)t * d;
    if (post_norm)
        c->k->rmsnorm(o, o, post_norm, d, c->m->cfg.rms_eps);
    for (int i = 0; i < d; i++)
        x[i] += o[i];
}

/* Apply RoPE to q and k of this thread's tokens and store k, v into the pool:
 * as floats, halves, or (KERN_I8) each head's row of D values quantized to
 * int8 with one float scale, kern_i8_quant_row, the scale in the slab's
 * (block_size) scale array after its (block_size, D) int8 values. */
static void s_stage_rope_store(model_ctx_t *c, int layer, int t0, int t1) {
    const model_config_t *cfg = &c->m->cfg;
    /* a sliding-window layer's angles come from its own base when it has one */
    const float *cs_all =
        c->m->layers[layer].st.attn == MODEL_ATTN_SLIDING && c->cs_swa ? c->cs_swa : c->cs;
    const model_batch_t *b = c->batch;
    const kern_kv_pool_t *kv = c->kv;
    int D = cfg->head_dim, H = cfg->n_head, Hkv = cfg->n_head_kv;
    size_t slab =
        kern_kv_slab_bytes(kv->type, kv->block_size, D); /* bytes of one (layer, K|V, head) */
    size_t elt = kv->type == KERN_F32 ? 4 : kv->type == KERN_F16 ? 2 : 1;
    for (int t = t0; t < t1; t++) {
        const float *cs = cs_all + (size_t)t * cfg->n_rot;
        float *q = c->q + (size_t)t * H * D;
        float *k = c->kv_k + (size_t)t * Hkv * D;
        const float *v = c->kv_v + (size_t)t * Hkv * D;
        c->k->rope(q, H, D, cfg->n_rot, cs, cfg->rope_neox);
        c->k->rope(k, Hkv, D, cfg->n_rot, cs, cfg->rope_neox);
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        int p = b->slot ? b->slot[t] : b->pos[t]; /* the KV row */
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

/* Attention for this thread's share of (token, kv head) pairs: a token at position p sees
 * positions 0 .. p, or in a sliding-window layer the last window of them, p+1-window .. p
 * (as llama.cpp's LLAMA_SWA_TYPE_STANDARD masks p - p' >= window).  The KV keeps every
 * position; the window only moves where the kernel starts. */
static void s_stage_attention(model_ctx_t *c, int layer, int n, int ith, int nth) {
    const model_config_t *cfg = &c->m->cfg;
    const model_stages_t *st = &c->m->layers[layer].st;
    const int window = st->attn == MODEL_ATTN_SLIDING ? st->window : 0;
    const model_batch_t *b = c->batch;
    const kern_kv_pool_t *kv = c->kv;
    int D = cfg->head_dim, H = cfg->n_head, Hkv = cfg->n_head_kv, G = H / Hkv;
    size_t slab = kern_kv_slab_bytes(kv->type, kv->block_size, D);
    int lo, hi;
    /* Collecting weights, all of a (sequence, KV head)'s work goes to one thread (they add
     * into one row); otherwise the (token, KV head) pairs are split evenly. */
    const bool by_row = c->collect;
    if (by_row)
        lo = 0, hi = n * Hkv;
    else
        base_pool_split(n * Hkv, 1, ith, nth, &lo, &hi);
    float *scratch = c->scratch + (size_t)ith * G * c->max_ctx;
    for (int w = lo; w < hi; w++) {
        int t = w / Hkv, h = w % Hkv;
        if (by_row && (b->seq[t] * Hkv + h) % nth != ith)
            continue;
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        const int slot = b->slot ? b->slot[t] : b->pos[t]; /* the KV row; attends 0 .. slot */
        const int pos0 = window && slot + 1 > window ? slot + 1 - window : 0;
        float *weights = s->weights && slot >= s->weights_from
                             ? s->weights + ((size_t)layer * Hkv + h) * s->weights_stride + pos0
                             : NULL;
        kern_attn_args_t a = {
            .head_dim = D,
            .n_q = G,
            .q = c->q + ((size_t)t * H + (size_t)h * G) * D,
            .out = c->att + ((size_t)t * H + (size_t)h * G) * D,
            .n_ctx = slot + 1,
            .pos0 = pos0,
            .blocks = s->blocks,
            .block_size = kv->block_size,
            .k_base = kv->base + ((size_t)(layer * 2 + 0) * Hkv + h) * slab,
            .v_base = kv->base + ((size_t)(layer * 2 + 1) * Hkv + h) * slab,
            .block_stride = kv->block_bytes,
            .kv_type = kv->type,
            .scale = c->m->attn_scale,
            .scratch = scratch,
            .weights = weights,
        };
        c->k->attention(&a);
    }
}

static void s_forward_worker(void *arg, int ith, int nth) {
    model_ctx_t *c = arg;
    const model_t *m = c->m;
    const model_config_t *cfg = &m->cfg;
    const kern_ops_t *k = c->k;
    base_pool_t *pool = c->pool;
    const int n = c->batch->n_tokens, d = cfg->d_model, ff = cfg->d_ff;
    const int q_dim = cfg->n_head * cfg->head_dim, kv_dim = cfg->n_head_kv * cfg->head_dim;
    int t0, t1; /* this thread's tokens */
    base_pool_split(n, 1, ith, nth, &t0, &t1);

    s_stage_embed(c, t0, t1);

    for (int l = 0; l < cfg->n_layer; l++) {
        const model_layer_t *L = &m->layers[l];
        const model_plan_t *P = c->plans + (size_t)l * MODEL_PLANS_PER_LAYER;
        /* The stages of this layer are L->st (model_arch.h); the loader refused any this
         * pass does not run (model_arch_unsupported).  Each optional stage is a function
         * called where its switch is on (qk_norm, post norms in s_residual_add, the
         * window in s_stage_attention).
         * ---- attention block: h = rmsnorm(x) (n, d); q, k, v = h W (n, q_dim), (n, kv_dim) */
        const model_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->kv_k, c->kv_v};
        for (int t = t0; t < t1; t++)
            k->rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->attn_norm, d, cfg->rms_eps);
        model_ctx_plan_fill(c, &P[MODEL_PLAN_QKV], c->h, d, t0, t1);
        base_pool_barrier(pool);
        model_ctx_matmul(c, &P[MODEL_PLAN_QKV], qkv, qkv_out, 3, 0, n, ith, nth);
        base_pool_barrier(pool);
        /* from here to the store, each thread works on its own tokens only */
        if (L->st.qkv_bias) {
            s_stage_bias(c->q, L->bq, q_dim, t0, t1);
            s_stage_bias(c->kv_k, L->bk, kv_dim, t0, t1);
            s_stage_bias(c->kv_v, L->bv, kv_dim, t0, t1);
        }
        if (L->st.qk_norm)
            s_stage_qk_norm(c, L, t0, t1);
        s_stage_rope_store(c, l, t0, t1);
        base_pool_barrier(pool);
        s_stage_attention(c, l, n, ith, nth);
        base_pool_barrier(pool);
        /* ---- x += att Wo (n, d_model) */
        const model_weight_t *wo[1] = {&L->wo};
        model_ctx_plan_fill(c, &P[MODEL_PLAN_WO], c->att, q_dim, t0, t1);
        base_pool_barrier(pool);
        model_ctx_matmul(c, &P[MODEL_PLAN_WO], wo, &c->tmp, 1, 0, n, ith, nth);
        base_pool_barrier(pool);
        if (L->st.out_bias)
            s_stage_bias(c->tmp, L->bo, d, t0, t1);
        /* ---- feed-forward: x += o (or its post norm); h = rmsnorm(x) (n, d); MoE
         *      (model_moe.c) or dense: x += (act(h Wg) * h Wu) Wd, through (n, d_ff) */
        for (int t = t0; t < t1; t++) {
            s_residual_add(c, L->st.norm_post_attn ? L->attn_post_norm : NULL, t);
            k->rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->ffn_norm, d, cfg->rms_eps);
        }
        if (L->st.ffn == MODEL_FFN_MOE) {
            if (model_moe_stage(c, l, n, ith, nth, t0, t1))
                return; /* the remote executor failed: every thread leaves here */
            continue;
        }
        const model_weight_t *gu[2] = {&L->wg, &L->wu};
        float *gu_out[2] = {c->ff_g, c->ff_u};
        model_ctx_plan_fill(c, &P[MODEL_PLAN_GU], c->h, d, t0, t1);
        base_pool_barrier(pool);
        model_ctx_matmul(c, &P[MODEL_PLAN_GU], gu, gu_out, 2, 0, n, ith, nth);
        base_pool_barrier(pool);
        const model_weight_t *wd[1] = {&L->wd};
        for (int t = t0; t < t1; t++)
            (L->st.act == MODEL_ACT_GELU ? k->geglu : k->swiglu)(
                c->ff_g + (size_t)t * ff, c->ff_g + (size_t)t * ff, c->ff_u + (size_t)t * ff, ff);
        model_ctx_plan_fill(c, &P[MODEL_PLAN_WD], c->ff_g, ff, t0, t1);
        base_pool_barrier(pool);
        /* The tap reads h and ff_g, which nothing writes before the next barrier
         * (Wdown writes tmp); the others wait for thread 0 there. */
        if (c->tap && ith == 0)
            c->tap(c->tap_user, l, n, c->h, d, c->ff_g, ff);
        model_ctx_matmul(c, &P[MODEL_PLAN_WD], wd, &c->tmp, 1, 0, n, ith, nth);
        base_pool_barrier(pool);
        for (int t = t0; t < t1; t++)
            s_residual_add(c, L->st.norm_post_ffn ? L->ffn_post_norm : NULL, t);
        /* The next stage reads only this thread's own tokens of x, so no barrier. */
    }
    if (c->hidden) {
        /* ---- hidden = rmsnorm(x) (n, d_model), each thread its own tokens; the barrier
         *      because an MoE layer's combine splits the tokens its own way */
        base_pool_barrier(pool);
        for (int t = t0; t < t1; t++)
            if (c->hidden[t])
                k->rmsnorm(c->hidden_out + (size_t)t * d, c->x + (size_t)t * d, m->out_norm, d,
                           cfg->rms_eps);
    }
    if (c->n_out == 0)
        return;
    /* ---- logits = rmsnorm(x) Wout, for the wanted tokens only (compacted) */
    const model_weight_t *wout[1] = {&m->out};
    const model_plan_t *PO = c->plans + (size_t)cfg->n_layer * MODEL_PLANS_PER_LAYER;
    base_pool_barrier(pool); /* every token's x is final */
    int o0, o1;
    base_pool_split(c->n_out, 1, ith, nth, &o0, &o1);
    for (int o = o0; o < o1; o++)
        k->rmsnorm(c->h + (size_t)o * d, c->x + (size_t)c->out_rows[o] * d, m->out_norm, d,
                   cfg->rms_eps);
    model_ctx_plan_fill(c, PO, c->h, d, o0, o1);
    base_pool_barrier(pool);
    model_ctx_matmul(c, PO, wout, &c->logits, 1, 0, c->n_out, ith, nth);
}

int model_ctx_forward(model_ctx_t *c, const model_batch_t *b, const kern_kv_pool_t *kv,
                      float *logits) {
    return model_ctx_forward_hidden(c, b, kv, logits, NULL, NULL);
}

int model_ctx_forward_hidden(model_ctx_t *c, const model_batch_t *b, const kern_kv_pool_t *kv,
                             float *logits, const bool *hidden, float *hidden_out) {
    const model_config_t *cfg = &c->m->cfg;
    if (b->n_tokens < 1 || b->n_tokens > c->max_tokens || !kv->base || (hidden && !hidden_out))
        return -EINVAL;
    int n_out = 0;
    bool collect = false;
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= cfg->n_vocab || b->seq[t] < 0 ||
            b->seq[t] >= b->n_seqs || b->pos[t] < 0 || b->pos[t] >= c->max_ctx)
            return -EINVAL;
        const model_seq_view_t *s = &b->seqs[b->seq[t]];
        const int slot = b->slot ? b->slot[t] : b->pos[t];
        int blk = slot / kv->block_size;
        if (slot < 0 || slot > b->pos[t] || blk >= s->n_blocks || s->blocks[blk] < 0 ||
            s->blocks[blk] >= kv->n_blocks || (s->weights && slot >= s->weights_stride))
            return -EINVAL;
        collect |= s->weights != NULL;
        if (b->want && b->want[t])
            c->out_rows[n_out++] = t;
    }
    if (n_out && !logits)
        return -EINVAL;
    c->batch = b;
    c->kv = kv;
    c->logits = logits;
    c->n_out = n_out;
    c->hidden = hidden;
    c->hidden_out = hidden_out;
    c->moe_rc = 0;
    c->collect = collect;
    base_pool_run(c->pool, s_forward_worker, c);
    c->batch = NULL;
    c->hidden_out = NULL;
    c->kv = NULL;
    return c->moe_rc ? c->moe_rc : n_out;
}
