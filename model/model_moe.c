/* model_moe.c - the Mixture-of-Experts feed-forward (Mixtral layout, docs/MOE.md), a stage
 * of the forward pass (model_forward.c) for layers whose declared FFN is MODEL_FFN_MOE:
 *       h = rmsnorm(x) ; r = h Wrouter ; (e_k, w_k) = topK(r)      r: (n, n_expert)
 *       x += sum_k w_k * (silu(h Wgate[e_k]) * h Wup[e_k]) Wdown[e_k]
 * with the step's (token, expert) pairs grouped by expert so that each expert
 * runs one matrix product over all its tokens.  Also the hooks of model.h: the remote
 * expert executor, the expert computation an expert actor runs, and the FFN tap (moefy).
 */
#include "model_err.h"
#include "model_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ configuration */

/* The Mixture-of-Experts keys: <arch>.expert_count (E, absent or 0: dense),
 * <arch>.expert_used_count (K, 1..E) and strata.expert_gating. */
int model_moe_config_read(const model_gguf_t *g, model_config_t *c, char *err, size_t errlen) {
    const char *path = model_gguf_path(g), *a = c->arch;
    char ke[160], ku[160];
    snprintf(ke, sizeof ke, "%s.expert_count", a);
    snprintf(ku, sizeof ku, "%s.expert_used_count", a);
    int64_t E = 0, K = 0;
    bool has_e = model_gguf_find(g, ke) != NULL, has_k = model_gguf_find(g, ku) != NULL;
    if (has_e && (!model_gguf_get_i64(g, ke, &E) || E < 0 || E > MODEL_MAX_EXPERTS))
        return model_err_set(err, errlen, -EINVAL, "%s: %s must be an integer in 0..%d (0: dense)",
                             path, ke, MODEL_MAX_EXPERTS);
    if (has_k && !model_gguf_get_i64(g, ku, &K))
        return model_err_set(err, errlen, -EINVAL, "%s: %s must be an integer", path, ku);
    if (E == 0 && K != 0)
        return model_err_set(err, errlen, -EINVAL,
                             "%s: %s is %lld but the model has no experts (%s %s)", path, ku,
                             (long long)K, ke, has_e ? "is 0" : "is missing");
    if (E > 0 && !has_k)
        return model_err_set(err, errlen, -EINVAL, "%s: %s is missing, expected 1..%lld (%s)", path,
                             ku, (long long)E, ke);
    if (E > 0 && (K < 1 || K > E))
        return model_err_set(err, errlen, -EINVAL, "%s: %s is %lld, expected 1..%lld (%s)", path,
                             ku, (long long)K, (long long)E, ke);
    c->n_expert = (int)E;
    c->n_expert_used = (int)K;
    c->gating = MODEL_GATING_SOFTMAX_TOPK;
    if (model_gguf_find(g, "strata.expert_gating")) {
        static const char *const names[] = {"softmax_topk", "softmax_all", "unit"};
        char *v = NULL;
        if (!model_gguf_get_str(g, "strata.expert_gating", &v))
            return model_err_set(err, errlen, -EINVAL,
                                 "%s: strata.expert_gating must be a string "
                                 "(softmax_topk, softmax_all or unit)",
                                 path);
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(v, names[i]))
                found = i;
        if (found < 0) {
            model_err_set(err, errlen, -EINVAL,
                          "%s: unknown strata.expert_gating '%.60s' (valid: softmax_topk, "
                          "softmax_all, unit)",
                          path, v);
            free(v);
            return -EINVAL;
        }
        free(v);
        c->gating = (model_gating_t)found;
    }
    return 0;
}

/* ------------------------------------------------------------------ MoE */

/* Route every token of the step (one thread): its K experts by router logit,
 * ties to the lower expert index, in rank order (largest first); their gate
 * weights by the gating mode; then the (token, expert) rows grouped by expert
 * ascending, each expert's rows in token order.  Cheap: n * K * E compares. */
static void s_route(model_ctx_t *c, int n) {
    const model_config_t *cfg = &c->m->cfg;
    const int E = cfg->n_expert, K = cfg->n_expert_used;
    int32_t sel[MODEL_MAX_EXPERTS];
    bool used[MODEL_MAX_EXPERTS];
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
    int fill[MODEL_MAX_EXPERTS];
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
    const model_layer_t *L = &c->m->layers[l];
    const model_plan_t *P = c->plans + (size_t)l * MODEL_PLANS_PER_LAYER;
    const int d = cfg->d_model, ff = cfg->d_ff, E = cfg->n_expert, rows = off[E];
    int r0, r1;
    base_pool_split(rows, 1, ith, nth, &r0, &r1);
    /* gather each row's input, quantized for gate/up (quantizing is per row, so
     * a row's bytes do not depend on where it sits) */
    for (int j = 0; j < P[MODEL_PLAN_GU].n; j++)
        for (int r = r0; r < r1; r++)
            c->k->quant_row(P[MODEL_PLAN_GU].type[j], h + (size_t)(tok ? tok[r] : r) * d,
                            c->qbuf[j] + (size_t)r * P[MODEL_PLAN_GU].row_bytes[j], d);
    base_pool_barrier(c->pool);
    for (int e = 0; e < E; e++) {
        if (off[e + 1] == off[e])
            continue;
        const model_weight_t *gu[2] = {&L->eg[e], &L->eu[e]};
        float *gu_out[2] = {c->ff_g + (size_t)off[e] * ff, c->ff_u + (size_t)off[e] * ff};
        model_ctx_matmul(c, &P[MODEL_PLAN_GU], gu, gu_out, 2, off[e], off[e + 1] - off[e], ith,
                         nth);
    }
    base_pool_barrier(c->pool);
    for (int r = r0; r < r1; r++)
        c->k->swiglu(c->ff_g + (size_t)r * ff, c->ff_g + (size_t)r * ff, c->ff_u + (size_t)r * ff,
                     ff);
    model_ctx_plan_fill(c, &P[MODEL_PLAN_WD], c->ff_g, ff, r0, r1);
    base_pool_barrier(c->pool);
    for (int e = 0; e < E; e++) {
        if (off[e + 1] == off[e])
            continue;
        const model_weight_t *wd[1] = {&L->ed[e]};
        float *out = y + (size_t)off[e] * d;
        model_ctx_matmul(c, &P[MODEL_PLAN_WD], wd, &out, 1, off[e], off[e + 1] - off[e], ith, nth);
    }
    base_pool_barrier(c->pool);
}

/* The MoE feed-forward of layer l, c->h holding rmsnorm(x) of this thread's
 * tokens: route, run the experts (here, or through the remote executor), then
 * x += sum_k w_k y_k for this thread's tokens, summed in rank order k so a
 * token's result does not depend on the rest of the batch.  Returns 0, or the
 * executor's error (the same in every thread). */
int model_moe_stage(model_ctx_t *c, int l, int n, int ith, int nth, int t0, int t1) {
    const model_config_t *cfg = &c->m->cfg;
    const model_layer_t *L = &c->m->layers[l];
    const model_plan_t *P = c->plans + (size_t)l * MODEL_PLANS_PER_LAYER;
    const int d = cfg->d_model, K = cfg->n_expert_used;
    const model_weight_t *wr[1] = {&L->wr};
    model_ctx_plan_fill(c, &P[MODEL_PLAN_ROUTER], c->h, d, t0, t1);
    base_pool_barrier(c->pool);
    model_ctx_matmul(c, &P[MODEL_PLAN_ROUTER], wr, &c->rlog, 1, 0, n, ith, nth);
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
    int off[MODEL_MAX_EXPERTS + 1], E = c->m->cfg.n_expert;
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
