/* gemm_ref.c - scalar reference of the weight x activation product.
 * Each quantized row is dotted with activations in its vec_dot_type using
 * integer sums per block, the same arithmetic the SIMD kernels do.
 */
#include "kern_cpu.h"

#include <string.h>

#define F16(x) kern_f16_to_f32(x)

/* Block i of a 32-element type as integer levels q and x = d * q + m. */
static void s_unpack32(kern_type_t t, const void *row, int64_t i, int q[32], float *d, float *m) {
    uint32_t qh = 0;
    const uint8_t *qs = NULL;
    int off = 0;
    *m = 0;
    switch (t) {
    case KERN_Q4_0: {
        const kern_block_q4_0 *b = (const kern_block_q4_0 *)row + i;
        *d = F16(b->d), qs = b->qs, off = 8;
        break;
    }
    case KERN_Q4_1: {
        const kern_block_q4_1 *b = (const kern_block_q4_1 *)row + i;
        *d = F16(b->d), *m = F16(b->m), qs = b->qs;
        break;
    }
    case KERN_Q5_0: {
        const kern_block_q5_0 *b = (const kern_block_q5_0 *)row + i;
        *d = F16(b->d), qs = b->qs, off = 16;
        memcpy(&qh, b->qh, 4);
        break;
    }
    case KERN_Q5_1: {
        const kern_block_q5_1 *b = (const kern_block_q5_1 *)row + i;
        *d = F16(b->d), *m = F16(b->m), qs = b->qs;
        memcpy(&qh, b->qh, 4);
        break;
    }
    default: { /* KERN_Q8_0 */
        const kern_block_q8_0 *b = (const kern_block_q8_0 *)row + i;
        *d = F16(b->d);
        for (int j = 0; j < 32; j++)
            q[j] = b->qs[j];
        return;
    }
    }
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) + (int)(((qh >> j) & 1) << 4) - off;
        q[j + 16] = (qs[j] >> 4) + (int)(((qh >> (j + 16)) & 1) << 4) - off;
    }
}

static float s_dot32(kern_type_t t, int64_t k, const void *w, const void *x) {
    int64_t nb = k / KERN_QK;
    bool x81 = kern_type_traits(t)->vec_dot_type == KERN_Q8_1;
    double sum = 0;
    for (int64_t i = 0; i < nb; i++) {
        int q[32];
        float d, m;
        s_unpack32(t, w, i, q, &d, &m);
        const int8_t *xq;
        float dx, sx = 0;
        if (x81) {
            const kern_block_q8_1 *xb = (const kern_block_q8_1 *)x + i;
            xq = xb->qs, dx = F16(xb->d), sx = F16(xb->s);
        } else {
            const kern_block_q8_0 *xb = (const kern_block_q8_0 *)x + i;
            xq = xb->qs, dx = F16(xb->d);
        }
        int isum = 0;
        for (int j = 0; j < 32; j++)
            isum += q[j] * xq[j];
        sum += (double)(d * dx) * isum + (double)(m * sx);
    }
    return (float)sum;
}

static float s_dot_q4_K(int64_t k, const kern_block_q4_K *w, const kern_block_q8_K *x, bool five) {
    const kern_block_q5_K *w5 = (const kern_block_q5_K *)w;
    double sum = 0;
    for (int64_t i = 0; i < k / KERN_QK_K; i++) {
        const uint8_t *scales = five ? w5[i].scales : w[i].scales;
        float d = F16(five ? w5[i].d : w[i].d), dmin = F16(five ? w5[i].dmin : w[i].dmin);
        const uint8_t *qs = five ? w5[i].qs : w[i].qs;
        int64_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kern_k4_scale_min(j, scales, &sc, &m);
            int c = j / 2, hi = j & 1, s = 0;
            for (int l = 0; l < 32; l++) {
                int v = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
                if (five)
                    v += ((w5[i].qh[l] >> j) & 1) << 4;
                s += v * x[i].qs[32 * j + l];
            }
            isum += (int64_t)sc * s;
            msum += (int64_t)m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        sum += (double)x[i].d * ((double)d * (double)isum - (double)dmin * (double)msum);
    }
    return (float)sum;
}

static float s_dot_q6_K(int64_t k, const kern_block_q6_K *w, const kern_block_q8_K *x) {
    double sum = 0;
    for (int64_t i = 0; i < k / KERN_QK_K; i++) {
        int q[KERN_QK_K];
        for (int n = 0; n < 2; n++) {
            const uint8_t *ql = w[i].ql + 64 * n, *qh = w[i].qh + 32 * n;
            int *y = q + 128 * n;
            for (int l = 0; l < 32; l++) {
                y[l] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                y[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                y[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                y[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        }
        int64_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += q[16 * j + l] * x[i].qs[16 * j + l];
            isum += (int64_t)w[i].scales[j] * s;
        }
        sum += (double)x[i].d * (double)F16(w[i].d) * (double)isum;
    }
    return (float)sum;
}

static float s_dot_float(kern_type_t t, int64_t k, const void *w, const float *x) {
    double sum = 0;
    for (int64_t i = 0; i < k; i++) {
        float v = t == KERN_F32   ? ((const float *)w)[i]
                  : t == KERN_F16 ? F16(((const kern_f16_t *)w)[i])
                                  : kern_bf16_to_f32(((const kern_bf16_t *)w)[i]);
        sum += (double)v * x[i];
    }
    return (float)sum;
}

void kern_ref_gemm(kern_type_t wt, int64_t k, int nr, int nc, const void *w, size_t w_stride,
                   const void *x, size_t x_stride, float *out, size_t out_stride) {
    for (int c = 0; c < nc; c++) {
        const void *xc = (const char *)x + (size_t)c * x_stride;
        for (int r = 0; r < nr; r++) {
            const void *wr = (const char *)w + (size_t)r * w_stride;
            float v;
            switch (wt) {
            case KERN_F32:
            case KERN_F16:
            case KERN_BF16:
                v = s_dot_float(wt, k, wr, xc);
                break;
            case KERN_Q4_0:
            case KERN_Q4_1:
            case KERN_Q5_0:
            case KERN_Q5_1:
            case KERN_Q8_0:
                v = s_dot32(wt, k, wr, xc);
                break;
            case KERN_Q4_K:
                v = s_dot_q4_K(k, wr, xc, false);
                break;
            case KERN_Q5_K:
                v = s_dot_q4_K(k, wr, xc, true);
                break;
            case KERN_Q6_K:
                v = s_dot_q6_K(k, wr, xc);
                break;
            default:
                v = 0;
                break; /* not a weight type: programmer error */
            }
            out[(size_t)c * out_stride + r] = v;
        }
    }
}
