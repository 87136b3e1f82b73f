/* gemm_packed_ref.c - the packed weight layout of the 32-element block types
 * (kern_ops_t.pack, described in kern_cpu.h) and the scalar reference of its
 * gemm, which does the exact float operations the SIMD variants do.  The
 * K-quants' packed layout is in gemm_kpacked_ref.c; these entry points pass
 * K types on to it.
 */
#include "kern_cpu.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define F16(x) kern_f16_to_f32(x)

size_t kern_no_packed_size(kern_type_t wt, int64_t k, int nr) {
    (void)wt, (void)k, (void)nr;
    return 0;
}

size_t kern_ref_packed_size(kern_type_t wt, int64_t k, int nr) {
    if (kern_kpk_type(wt)) /* the K-quants: gemm_kpacked_ref.c */
        return kern_ref_kpacked_size(wt, k, nr);
    if (!kern_pk_type(wt) || k <= 0 || k % KERN_QK || nr <= 0)
        return 0;
    size_t groups = ((size_t)nr + KERN_PK_ROWS - 1) / KERN_PK_ROWS;
    return groups * (size_t)(k / KERN_QK) * (size_t)kern_pk_rec(wt);
}

/* Levels (bytes as stored), fifth bits, scale and minimum of block b of a row. */
static void s_block(kern_type_t t, const uint8_t *row, int64_t b, const uint8_t **qs, uint32_t *qh,
                    kern_f16_t *d, kern_f16_t *m) {
    const uint8_t *p = row + (size_t)b * kern_type_traits((int)t)->type_size;
    *qh = 0;
    *m = 0;
    memcpy(d, p, 2);
    switch (t) {
    case KERN_Q4_0:
        *qs = p + 2;
        break;
    case KERN_Q4_1:
        memcpy(m, p + 2, 2);
        *qs = p + 4;
        break;
    case KERN_Q5_0:
        memcpy(qh, p + 2, 4);
        *qs = p + 6;
        break;
    case KERN_Q5_1:
        memcpy(m, p + 2, 2);
        memcpy(qh, p + 4, 4);
        *qs = p + 8;
        break;
    default: /* KERN_Q8_0 */
        *qs = p + 2;
        break;
    }
}

static void s_put16(uint8_t *p, kern_f16_t v) {
    p[0] = (uint8_t)(v & 0xFF);
    p[1] = (uint8_t)(v >> 8);
}

void kern_ref_pack(kern_type_t wt, int64_t k, int nr, const void *w, size_t w_stride, void *dst) {
    if (kern_kpk_type(wt)) {
        kern_ref_kpack(wt, k, nr, w, w_stride, dst);
        return;
    }
    assert(kern_pk_type(wt) && k % KERN_QK == 0 && nr > 0);
    const int64_t nb = k / KERN_QK;
    const int rec = kern_pk_rec(wt), ns = kern_pk_steps(wt);
    const int qho = kern_pk_qh_off(wt), dof = kern_pk_d_off(wt);
    const bool five = wt == KERN_Q5_0 || wt == KERN_Q5_1, min = wt == KERN_Q4_1 || wt == KERN_Q5_1;
    const int ng = (nr + KERN_PK_ROWS - 1) / KERN_PK_ROWS;
    static const uint8_t zero[KERN_QK] = {0};
    for (int g = 0; g < ng; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)g * nb + b) * rec;
            uint64_t mask[8] = {0};
            for (int j = 0; j < KERN_PK_ROWS; j++) {
                int r = g * KERN_PK_ROWS + j;
                const uint8_t *qs = zero;
                uint32_t qh = 0;
                kern_f16_t d = 0, m = 0;
                if (r < nr)
                    s_block(wt, (const uint8_t *)w + (size_t)r * w_stride, b, &qs, &qh, &d, &m);
                for (int s = 0; s < ns; s++)
                    for (int i = 0; i < 4; i++)
                        o[64 * s + 4 * j + i] =
                            wt == KERN_Q8_0 ? (uint8_t)(qs[4 * s + i] ^ 0x80) : qs[4 * s + i];
                for (int s = 0; five && s < 4; s++)
                    for (int i = 0; i < 4; i++) {
                        mask[2 * s] |= (uint64_t)((qh >> (4 * s + i)) & 1) << (4 * j + i);
                        mask[2 * s + 1] |= (uint64_t)((qh >> (16 + 4 * s + i)) & 1) << (4 * j + i);
                    }
                s_put16(o + dof + 2 * j, d);
                if (min)
                    s_put16(o + dof + 32 + 2 * j, m);
            }
            for (int i = 0; five && i < 8; i++)
                for (int by = 0; by < 8; by++)
                    o[qho + 8 * i + by] = (uint8_t)(mask[i] >> (8 * by));
        }
    }
}

static uint16_t s_get16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* Integer dot product of row j's block in record o with activation levels xq. */
static int s_isum(kern_type_t t, const uint8_t *o, int j, const int8_t *xq) {
    int sum = 0;
    if (t == KERN_Q8_0) {
        for (int s = 0; s < 8; s++)
            for (int i = 0; i < 4; i++)
                sum += ((int)o[64 * s + 4 * j + i] - 128) * xq[4 * s + i];
        return sum;
    }
    const bool five = t == KERN_Q5_0 || t == KERN_Q5_1;
    const int off = t == KERN_Q4_0 ? 8 : t == KERN_Q5_0 ? 16 : 0;
    const uint8_t *qh = o + kern_pk_qh_off(t);
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 4; i++) {
            int byte = o[64 * s + 4 * j + i], bit = 4 * j + i;
            int lo = byte & 0xF, hi = byte >> 4;
            if (five) {
                lo |= ((qh[16 * s + bit / 8] >> (bit % 8)) & 1) << 4;
                hi |= ((qh[16 * s + 8 + bit / 8] >> (bit % 8)) & 1) << 4;
            }
            sum += (lo - off) * xq[4 * s + i] + (hi - off) * xq[16 + 4 * s + i];
        }
    return sum;
}

void kern_ref_gemm_packed(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                          const void *x, size_t x_stride, float *out, size_t out_stride) {
    if (kern_kpk_type(wt)) {
        kern_ref_gemm_kpacked(wt, k, r0, nr, nc, packed, x, x_stride, out, out_stride);
        return;
    }
    assert(kern_pk_type(wt) && r0 % KERN_PK_ROWS == 0);
    const int64_t nb = k / KERN_QK;
    const int rec = kern_pk_rec(wt), dof = kern_pk_d_off(wt);
    const bool min = wt == KERN_Q4_1 || wt == KERN_Q5_1;
    const size_t xb = min ? sizeof(kern_block_q8_1) : sizeof(kern_block_q8_0);
    for (int c = 0; c < nc; c++) {
        const uint8_t *xc = (const uint8_t *)x + (size_t)c * x_stride;
        for (int r = r0; r < r0 + nr; r++) {
            const int g = r / KERN_PK_ROWS, j = r % KERN_PK_ROWS;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *o = (const uint8_t *)packed + ((size_t)g * nb + b) * rec;
                const uint8_t *xblk = xc + (size_t)b * xb;
                const int8_t *xq = (const int8_t *)(xblk + (min ? 4 : 2));
                float dw = F16(s_get16(o + dof + 2 * j)), dx = F16(s_get16(xblk));
                acc = fmaf((float)s_isum(wt, o, j, xq), dw * dx, acc);
                if (min)
                    acc = fmaf(F16(s_get16(o + dof + 32 + 2 * j)), F16(s_get16(xblk + 2)), acc);
            }
            out[(size_t)c * out_stride + (r - r0)] = acc;
        }
    }
}
