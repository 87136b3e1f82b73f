/* quant_ref.c - scalar reference of dequant_row and quant_row for every type.
 * Dequantization follows the GGUF (ggml) block formats exactly, since strata
 * reads real GGUF files; quantization is a simple, sound method of our own.
 */
#include "kern_cpu.h"

#include <math.h>
#include <string.h>

#define F16(x) kern_f16_to_f32(x)
#define TOF16(x) kern_f32_to_f16(x)

/* ---- dequantization ------------------------------------------------------ */

static void s_deq_q4_0(const kern_block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK) {
        float d = F16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            y[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void s_deq_q4_1(const kern_block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK) {
        float d = F16(b[i].d), m = F16(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            y[j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static uint32_t s_qh(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void s_deq_q5_0(const kern_block_q5_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK) {
        float d = F16(b[i].d);
        uint32_t qh = s_qh(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int x0 = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int x1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(x0 - 16);
            y[j + 16] = d * (float)(x1 - 16);
        }
    }
}

static void s_deq_q5_1(const kern_block_q5_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK) {
        float d = F16(b[i].d), m = F16(b[i].m);
        uint32_t qh = s_qh(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int x0 = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int x1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)x0 + m;
            y[j + 16] = d * (float)x1 + m;
        }
    }
}

static void s_deq_q8_0(const kern_block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK) {
        float d = F16(b[i].d);
        for (int j = 0; j < KERN_QK; j++)
            y[j] = d * (float)b[i].qs[j];
    }
}

static void s_deq_q8_1(const kern_block_q8_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK) {
        float d = F16(b[i].d);
        for (int j = 0; j < KERN_QK; j++)
            y[j] = d * (float)b[i].qs[j];
    }
}

static void s_deq_q4_K(const kern_block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            kern_k4_scale_min(2 * c, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            kern_k4_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void s_deq_q5_K(const kern_block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        for (int c = 0; c < 4; c++, ql += 32) {
            uint8_t sc, m;
            kern_k4_scale_min(2 * c, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            kern_k4_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void s_deq_q6_K(const kern_block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = F16(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void s_deq_q8_K(const kern_block_q8_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KERN_QK_K)
        for (int j = 0; j < KERN_QK_K; j++)
            y[j] = b[i].d * (float)b[i].qs[j];
}

void kern_ref_dequant_row(kern_type_t t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case KERN_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case KERN_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = F16(((const kern_f16_t *)src)[i]);
        return;
    case KERN_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = kern_bf16_to_f32(((const kern_bf16_t *)src)[i]);
        return;
    case KERN_Q4_0:
        s_deq_q4_0(src, dst, n / KERN_QK);
        return;
    case KERN_Q4_1:
        s_deq_q4_1(src, dst, n / KERN_QK);
        return;
    case KERN_Q5_0:
        s_deq_q5_0(src, dst, n / KERN_QK);
        return;
    case KERN_Q5_1:
        s_deq_q5_1(src, dst, n / KERN_QK);
        return;
    case KERN_Q8_0:
        s_deq_q8_0(src, dst, n / KERN_QK);
        return;
    case KERN_Q8_1:
        s_deq_q8_1(src, dst, n / KERN_QK);
        return;
    case KERN_Q4_K:
        s_deq_q4_K(src, dst, n / KERN_QK_K);
        return;
    case KERN_Q5_K:
        s_deq_q5_K(src, dst, n / KERN_QK_K);
        return;
    case KERN_Q6_K:
        s_deq_q6_K(src, dst, n / KERN_QK_K);
        return;
    case KERN_Q8_K:
        s_deq_q8_K(src, dst, n / KERN_QK_K);
        return;
    default:
        return; /* unsupported type: programmer error, caller checks traits */
    }
}

/* ---- quantization -------------------------------------------------------- */

static inline int s_nearest(float f) {
    return (int)lrintf(f);
}

static inline int s_clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* The element of largest magnitude, with its sign. */
static float s_signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void s_q_q4_0(const float *x, kern_block_q4_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK) {
        float max = s_signed_absmax(x, KERN_QK);
        float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = TOF16(d);
        for (int j = 0; j < 16; j++) {
            int a = s_clampi(s_nearest(x[j] * id) + 8, 0, 15);
            int c = s_clampi(s_nearest(x[j + 16] * id) + 8, 0, 15);
            b[i].qs[j] = (uint8_t)(a | (c << 4));
        }
    }
}

static void s_minmax(const float *x, int n, float *mn, float *mx) {
    *mn = x[0];
    *mx = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < *mn)
            *mn = x[j];
        if (x[j] > *mx)
            *mx = x[j];
    }
}

static void s_q_q4_1(const float *x, kern_block_q4_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK) {
        float mn, mx;
        s_minmax(x, KERN_QK, &mn, &mx);
        float d = (mx - mn) / 15.0f, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = TOF16(d);
        b[i].m = TOF16(mn);
        for (int j = 0; j < 16; j++) {
            int a = s_clampi(s_nearest((x[j] - mn) * id), 0, 15);
            int c = s_clampi(s_nearest((x[j + 16] - mn) * id), 0, 15);
            b[i].qs[j] = (uint8_t)(a | (c << 4));
        }
    }
}

static void s_q_q5_0(const float *x, kern_block_q5_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK) {
        float max = s_signed_absmax(x, KERN_QK);
        float d = max / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = TOF16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = s_clampi(s_nearest(x[j] * id) + 16, 0, 31);
            int c = s_clampi(s_nearest(x[j + 16] * id) + 16, 0, 31);
            b[i].qs[j] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j | (uint32_t)(c >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

static void s_q_q5_1(const float *x, kern_block_q5_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK) {
        float mn, mx;
        s_minmax(x, KERN_QK, &mn, &mx);
        float d = (mx - mn) / 31.0f, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = TOF16(d);
        b[i].m = TOF16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = s_clampi(s_nearest((x[j] - mn) * id), 0, 31);
            int c = s_clampi(s_nearest((x[j + 16] - mn) * id), 0, 31);
            b[i].qs[j] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j | (uint32_t)(c >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

/* Q8_0 and Q8_1 share this: d = amax / 127, q = round(x / d).  Returns sum(q). */
static int s_q8_block(const float *x, float *d_out, int8_t *qs) {
    float amax = 0;
    for (int j = 0; j < KERN_QK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < KERN_QK; j++) {
        qs[j] = (int8_t)s_clampi(s_nearest(x[j] * id), -127, 127);
        sum += qs[j];
    }
    *d_out = d;
    return sum;
}

static void s_q_q8_0(const float *x, kern_block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK) {
        float d;
        s_q8_block(x, &d, b[i].qs);
        b[i].d = TOF16(d);
    }
}

static void s_q_q8_1(const float *x, kern_block_q8_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK) {
        float d;
        int sum = s_q8_block(x, &d, b[i].qs);
        b[i].d = TOF16(d);
        b[i].s = TOF16(d * (float)sum);
    }
}

static void s_q_q8_K(const float *x, kern_block_q8_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KERN_QK_K) {
        float amax = 0;
        for (int j = 0; j < KERN_QK_K; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int g = 0; g < KERN_QK_K / 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                b[i].qs[j] = (int8_t)s_clampi(s_nearest(x[j] * id), -127, 127);
                sum += b[i].qs[j];
            }
            b[i].bsums[g] = (int16_t)sum;
        }
    }
}

/* Q4_K / Q5_K: per 32-element sub-block, an offset mn <= 0 and a step
 * (max - mn) / qmax; the steps and offsets are then themselves quantized to
 * 6 bits against the super-block's d and dmin, and the values re-quantized
 * with the quantized step and offset.  L receives q in 0..qmax. */
static void s_q_kmin(const float *x, int qmax, kern_f16_t *d_out, kern_f16_t *dmin_out,
                     uint8_t scales[KERN_K_SCALE_SIZE], uint8_t L[KERN_QK_K]) {
    float step[8], off[8], max_step = 0, max_off = 0;
    for (int j = 0; j < 8; j++) {
        float mn, mx;
        s_minmax(x + 32 * j, 32, &mn, &mx);
        if (mn > 0)
            mn = 0;
        step[j] = (mx - mn) / (float)qmax;
        off[j] = -mn;
        max_step = fmaxf(max_step, step[j]);
        max_off = fmaxf(max_off, off[j]);
    }
    float d = max_step / 63.0f, dmin = max_off / 63.0f;
    kern_f16_t dh = TOF16(d), dminh = TOF16(dmin);
    float df = kern_f16_to_f32(dh), dminf = kern_f16_to_f32(dminh);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(df > 0 ? s_clampi(s_nearest(step[j] / df), 0, 63) : 0);
        m[j] = (uint8_t)(dminf > 0 ? s_clampi(s_nearest(off[j] / dminf), 0, 63) : 0);
        /* a non-zero step must not round to a zero scale */
        if (sc[j] == 0 && step[j] > 0 && df > 0)
            sc[j] = 1;
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
    for (int j = 0; j < 8; j++) {
        float s = df * sc[j], o = dminf * m[j];
        float is = s > 0 ? 1.0f / s : 0.0f;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)s_clampi(s_nearest((x[32 * j + l] + o) * is), 0, qmax);
    }
    *d_out = dh;
    *dmin_out = dminh;
}

static void s_q_q4_K(const float *x, kern_block_q4_K *b, int64_t nb) {
    uint8_t L[KERN_QK_K];
    for (int64_t i = 0; i < nb; i++, x += KERN_QK_K) {
        s_q_kmin(x, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void s_q_q5_K(const float *x, kern_block_q5_K *b, int64_t nb) {
    uint8_t L[KERN_QK_K];
    for (int64_t i = 0; i < nb; i++, x += KERN_QK_K) {
        s_q_kmin(x, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

/* Q6_K: per 16-element sub-block a signed step amax / 31 (q - 32 in -32..31),
 * the steps quantized to int8 against the super-block's d. */
static void s_q_q6_K(const float *x, kern_block_q6_K *b, int64_t nb) {
    uint8_t L[KERN_QK_K];
    for (int64_t i = 0; i < nb; i++, x += KERN_QK_K) {
        float step[16], max_step = 0;
        for (int j = 0; j < 16; j++) {
            float amax = 0;
            for (int l = 0; l < 16; l++)
                amax = fmaxf(amax, fabsf(x[16 * j + l]));
            step[j] = amax / 31.0f;
            max_step = fmaxf(max_step, step[j]);
        }
        float d = max_step / 127.0f;
        b[i].d = TOF16(d);
        float df = kern_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            int s = df > 0 ? s_clampi(s_nearest(step[j] / df), 0, 127) : 0;
            if (s == 0 && step[j] > 0 && df > 0)
                s = 1;
            b[i].scales[j] = (int8_t)s;
            float st = df * (float)s, is = st > 0 ? 1.0f / st : 0.0f;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(s_clampi(s_nearest(x[16 * j + l] * is), -32, 31) + 32);
        }
        for (int n = 0; n < 2; n++) {
            uint8_t *ql = b[i].ql + 64 * n, *qh = b[i].qh + 32 * n;
            const uint8_t *Ln = L + 128 * n;
            for (int l = 0; l < 32; l++) {
                int q1 = Ln[l], q2 = Ln[l + 32], q3 = Ln[l + 64], q4 = Ln[l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] =
                    (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

void kern_ref_quant_row(kern_type_t t, const float *src, void *dst, int64_t n) {
    switch (t) {
    case KERN_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case KERN_F16:
        for (int64_t i = 0; i < n; i++)
            ((kern_f16_t *)dst)[i] = TOF16(src[i]);
        return;
    case KERN_BF16:
        for (int64_t i = 0; i < n; i++)
            ((kern_bf16_t *)dst)[i] = kern_f32_to_bf16(src[i]);
        return;
    case KERN_Q4_0:
        s_q_q4_0(src, dst, n / KERN_QK);
        return;
    case KERN_Q4_1:
        s_q_q4_1(src, dst, n / KERN_QK);
        return;
    case KERN_Q5_0:
        s_q_q5_0(src, dst, n / KERN_QK);
        return;
    case KERN_Q5_1:
        s_q_q5_1(src, dst, n / KERN_QK);
        return;
    case KERN_Q8_0:
        s_q_q8_0(src, dst, n / KERN_QK);
        return;
    case KERN_Q8_1:
        s_q_q8_1(src, dst, n / KERN_QK);
        return;
    case KERN_Q4_K:
        s_q_q4_K(src, dst, n / KERN_QK_K);
        return;
    case KERN_Q5_K:
        s_q_q5_K(src, dst, n / KERN_QK_K);
        return;
    case KERN_Q6_K:
        s_q_q6_K(src, dst, n / KERN_QK_K);
        return;
    case KERN_Q8_K:
        s_q_q8_K(src, dst, n / KERN_QK_K);
        return;
    default:
        return;
    }
}
