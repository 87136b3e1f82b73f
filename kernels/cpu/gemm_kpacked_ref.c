/* gemm_kpacked_ref.c - the packed layout of the K-quants (Q4_K, Q5_K, Q6_K;
 * described in kern_cpu.h): the packing, done once at model load, and the
 * scalar reference of its gemm against Q8_K activations, which does the exact
 * integer and float operations of the SIMD variants (gemm_kpacked_x86.h).
 */
#include "kern_cpu.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define F16(x) kern_f16_to_f32(x)

size_t kern_ref_kpacked_size(kern_type_t wt, int64_t k, int nr) {
    if (!kern_kpk_type(wt) || k <= 0 || k % KERN_QK_K || nr <= 0)
        return 0;
    size_t groups = ((size_t)nr + KERN_PK_ROWS - 1) / KERN_PK_ROWS;
    return groups * (size_t)(k / KERN_QK_K) * (size_t)kern_kpk_rec(wt);
}

/* A super-block as unsigned levels L, scales sc, minimums m and the raw f16
 * d and dmin (zero for a padding row: p NULL). */
typedef struct {
    uint8_t L[KERN_QK_K];
    int8_t sc[16]; /* Q4_K / Q5_K: 8 used, 0..63 */
    uint8_t m[8];
    kern_f16_t d, dmin;
} s_sblk_t;

static void s_unpack(kern_type_t t, const uint8_t *p, s_sblk_t *s) {
    memset(s, 0, sizeof *s);
    if (!p)
        return;
    if (t == KERN_Q6_K) {
        const kern_block_q6_K *b = (const kern_block_q6_K *)p;
        for (int n = 0; n < 2; n++) {
            const uint8_t *ql = b->ql + 64 * n, *qh = b->qh + 32 * n;
            uint8_t *y = s->L + 128 * n;
            for (int l = 0; l < 32; l++) {
                y[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                y[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                y[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                y[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        }
        memcpy(s->sc, b->scales, 16);
        s->d = b->d;
        return;
    }
    const bool five = t == KERN_Q5_K;
    const kern_block_q4_K *b4 = (const kern_block_q4_K *)p;
    const kern_block_q5_K *b5 = (const kern_block_q5_K *)p;
    const uint8_t *qs = five ? b5->qs : b4->qs, *scales = five ? b5->scales : b4->scales;
    s->d = five ? b5->d : b4->d;
    s->dmin = five ? b5->dmin : b4->dmin;
    for (int u = 0; u < 8; u++) {
        uint8_t sc, m;
        kern_k4_scale_min(u, scales, &sc, &m);
        s->sc[u] = (int8_t)sc;
        s->m[u] = m;
        const int c = u / 2, hi = u & 1;
        for (int l = 0; l < 32; l++) {
            int v = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
            if (five)
                v |= ((b5->qh[l] >> u) & 1) << 4;
            s->L[32 * u + l] = (uint8_t)v;
        }
    }
}

/* Element of byte i of step s (low nibble; the high nibble's is 32 further). */
static inline int s_elem(int s, int i) {
    return 64 * (s / 8) + 4 * (s % 8) + i;
}

static void s_put16(uint8_t *p, kern_f16_t v) {
    p[0] = (uint8_t)(v & 0xFF);
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t s_get16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* Row j's part of a Q4_K or Q5_K record o from its GGUF super-block (d, dmin, scales, qs
 * and, for Q5_K, qh): what the general loop of kern_ref_kpack writes, without the levels in
 * between.  Step s's bytes are GGUF's qs[4s .. 4s+3] as they are (byte i of step s holds
 * element 64(s/8) + 4(s%8) + i in its low nibble and the element 32 further in its high
 * nibble, which is how GGUF pairs them), so these types pack at about the speed of a copy
 * (model load).  Q5_K's fifth bit of element 64c + l is bit 2c of qh[l] (bit 2c+1 for the
 * element 32 further). */
static void s_kpack_k4_row(kern_type_t wt, const uint8_t *blk, int j, uint8_t *o) {
    const bool five = wt == KERN_Q5_K;
    const kern_block_q4_K *b4 = (const kern_block_q4_K *)blk;
    const kern_block_q5_K *b5 = (const kern_block_q5_K *)blk;
    const uint8_t *qs = five ? b5->qs : b4->qs, *scales = five ? b5->scales : b4->scales;
    const int sco = kern_kpk_sc_off(wt), dof = kern_kpk_d_off(wt);
    for (int st = 0; st < 32; st++) {
        memcpy(o + kern_kpk_qs_off(wt, st) + 4 * j, qs + 4 * st, 4);
        for (int i = 0; five && i < 4; i++) {
            const int l = 4 * (st % 8) + i, c = st / 8;
            uint8_t *q = o + kern_kpk_hvec(wt, st) + 4 * j + i;
            *q |= (uint8_t)(((b5->qh[l] >> (2 * c)) & 1) << kern_kpk_hpos(wt, st, 0));
            *q |= (uint8_t)(((b5->qh[l] >> (2 * c + 1)) & 1) << kern_kpk_hpos(wt, st, 1));
        }
    }
    for (int u = 0; u < 8; u++)
        kern_k4_scale_min(u, scales, &o[sco + 16 * u + j], &o[sco + 128 + 16 * u + j]);
    s_put16(o + dof + 2 * j, five ? b5->d : b4->d);
    s_put16(o + dof + 32 + 2 * j, five ? b5->dmin : b4->dmin);
}

void kern_ref_kpack(kern_type_t wt, int64_t k, int nr, const void *w, size_t w_stride, void *dst) {
    assert(kern_kpk_type(wt) && k % KERN_QK_K == 0 && nr > 0);
    const int64_t nb = k / KERN_QK_K;
    const int rec = kern_kpk_rec(wt), nsub = kern_kpk_nsub(wt);
    const int sco = kern_kpk_sc_off(wt), dof = kern_kpk_d_off(wt);
    const int hbits = kern_kpk_hbits(wt);
    const size_t tsz = kern_type_traits((int)wt)->type_size;
    const int ng = (nr + KERN_PK_ROWS - 1) / KERN_PK_ROWS;
    for (int g = 0; g < ng; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)g * nb + b) * rec;
            memset(o, 0, (size_t)rec);
            for (int j = 0; j < KERN_PK_ROWS; j++) {
                const int r = g * KERN_PK_ROWS + j;
                if (wt != KERN_Q6_K && r < nr) {
                    s_kpack_k4_row(wt, (const uint8_t *)w + (size_t)r * w_stride + b * tsz, j, o);
                    continue;
                }
                s_sblk_t s;
                s_unpack(wt, r < nr ? (const uint8_t *)w + (size_t)r * w_stride + b * tsz : NULL,
                         &s);
                for (int st = 0; st < 32; st++)
                    for (int i = 0; i < 4; i++) {
                        const int e = s_elem(st, i), lo = s.L[e], hi = s.L[e + 32];
                        o[kern_kpk_qs_off(wt, st) + 4 * j + i] =
                            (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                        if (hbits) { /* bits 4.. of the levels */
                            uint8_t *q = o + kern_kpk_hvec(wt, st) + 4 * j + i;
                            *q |= (uint8_t)((lo >> 4) << kern_kpk_hpos(wt, st, 0));
                            *q |= (uint8_t)((hi >> 4) << kern_kpk_hpos(wt, st, 1));
                        }
                    }
                for (int u = 0; u < nsub; u++)
                    o[sco + 16 * u + j] = (uint8_t)s.sc[u];
                if (wt != KERN_Q6_K)
                    for (int u = 0; u < 8; u++)
                        o[sco + 128 + 16 * u + j] = s.m[u];
                s_put16(o + dof + 2 * j, s.d);
                if (wt != KERN_Q6_K)
                    s_put16(o + dof + 32 + 2 * j, s.dmin);
            }
        }
    }
}

/* Level of byte i of step st of row j in record o (hi: the high nibble's). */
static int s_level(kern_type_t t, const uint8_t *o, int st, int j, int i, int hi) {
    const int byte = o[kern_kpk_qs_off(t, st) + 4 * j + i], hb = kern_kpk_hbits(t);
    int v = hi ? byte >> 4 : byte & 0xF;
    if (hb)
        v |= ((o[kern_kpk_hvec(t, st) + 4 * j + i] >> kern_kpk_hpos(t, st, hi)) & ((1 << hb) - 1))
             << 4;
    return v;
}

void kern_ref_gemm_kpacked(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                           const void *x, size_t x_stride, float *out, size_t out_stride) {
    assert(kern_kpk_type(wt) && r0 % KERN_PK_ROWS == 0);
    const int64_t nb = k / KERN_QK_K;
    const int rec = kern_kpk_rec(wt), nsub = kern_kpk_nsub(wt), sub = KERN_QK_K / nsub;
    const int sco = kern_kpk_sc_off(wt), dof = kern_kpk_d_off(wt);
    for (int c = 0; c < nc; c++) {
        const kern_block_q8_K *xc =
            (const kern_block_q8_K *)((const uint8_t *)x + (size_t)c * x_stride);
        for (int r = r0; r < r0 + nr; r++) {
            const int g = r / KERN_PK_ROWS, j = r % KERN_PK_ROWS;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *o = (const uint8_t *)packed + ((size_t)g * nb + b) * rec;
                const kern_block_q8_K *xb = xc + b;
                int32_t t[16] = {0};
                for (int st = 0; st < 32; st++)
                    for (int i = 0; i < 4; i++)
                        for (int hi = 0; hi < 2; hi++) {
                            const int e = s_elem(st, i) + 32 * hi;
                            t[e / sub] += s_level(wt, o, st, j, i, hi) * xb->qs[e];
                        }
                int32_t isum = 0, msum = 0;
                for (int u = 0; u < nsub; u++) {
                    const int sc =
                        wt == KERN_Q6_K ? (int8_t)o[sco + 16 * u + j] : o[sco + 16 * u + j];
                    isum += sc * t[u];
                    if (wt == KERN_Q6_K)
                        msum += sc * xb->bsums[u];
                    else
                        msum +=
                            o[sco + 128 + 16 * u + j] * (xb->bsums[2 * u] + xb->bsums[2 * u + 1]);
                }
                const float dx = xb->d, d = F16(s_get16(o + dof + 2 * j));
                if (wt == KERN_Q6_K) {
                    isum -= 32 * msum;
                    acc = fmaf((float)isum, d * dx, acc);
                } else {
                    acc = fmaf((float)isum, d * dx, acc);
                    acc = fmaf(-(float)msum, F16(s_get16(o + dof + 32 + 2 * j)) * dx, acc);
                }
            }
            out[(size_t)c * out_stride + (r - r0)] = acc;
        }
    }
}
