/* model_matmul.c - how every stage of the forward pass multiplies (model_impl.h): the
 * activation plan of a set of weights (which quantized formats their inputs need), the
 * quantization of activation rows into the plan's buffers, and one thread's share of
 * X W^T over a set of weights.  Used by the dense stages (model_forward.c) and the MoE
 * stage (model_moe.c) alike, which is why it is a file of its own: neither calls the other's
 * code for it. */
#include "model_impl.h"

#include <stdbool.h>

/* Which activation formats an input consumed by weights ws[0..nw) needs. */
void model_plan_make(model_plan_t *qi, const model_weight_t *const *ws, int nw) {
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

static const uint8_t *s_plan_get(const model_ctx_t *c, const model_plan_t *qi, kern_type_t t,
                                 size_t *row_bytes) {
    for (int j = 0; j < qi->n; j++)
        if (qi->type[j] == t) {
            *row_bytes = qi->row_bytes[j];
            return c->qbuf[j];
        }
    return NULL; /* unreachable: model_plan_make saw every weight */
}

/* model_impl.h */
void model_ctx_plan_fill(model_ctx_t *c, const model_plan_t *qi, const float *src, int cols, int t0,
                         int t1) {
    for (int j = 0; j < qi->n; j++)
        for (int t = t0; t < t1; t++)
            c->k->quant_row(qi->type[j], src + (size_t)t * cols,
                            c->qbuf[j] + (size_t)t * qi->row_bytes[j], cols);
}

/* model_impl.h */
void model_ctx_matmul(model_ctx_t *c, const model_plan_t *qi, const model_weight_t *const *ws,
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
