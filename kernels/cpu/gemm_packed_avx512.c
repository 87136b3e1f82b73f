/* gemm_packed_avx512.c - gemm of packed weights (layout in kern_cpu.h) with
 * AVX-512 VNNI.  A zmm lane is a row: for one block of 16 rows, each VNNI step
 * multiplies 4 weight bytes per row with the same 4 activation bytes
 * (broadcast from memory), so after 8 steps every lane holds its row's integer
 * block sum - no cross-lane reductions.  Then per (16 rows, column, block):
 * one conversion, one multiply by dw * dx, one FMA (and one for the minimum),
 * in a fixed order over the blocks: each output's float operations depend only
 * on its row and column, never on nc, the tile or the column's place in it.
 * Register tile: 16 rows x up to PK_CT columns; the weights of a block are
 * decoded once per tile.
 */
#if defined(__x86_64__)
#include "kern_cpu.h"

#include <assert.h>
#include <immintrin.h>
#include <string.h>

#define PK_INLINE static inline __attribute__((always_inline))
#define PK_CT 8      /* columns per register tile */
#define PK_PREP 4096 /* prepared (column, block) entries per pass: 32 KiB of stack */
#define PK_BK 512    /* blocks per pass at most (PK_PREP / PK_CT) */
#ifndef PK_PF
#define PK_PF 12288 /* bytes of weights to prefetch ahead (0: none) */
#endif

#include "gemm_packed_x86.h"

/* acc + VNNI dot of the unsigned bytes of w with the 4 signed bytes at p in
 * every lane.  GCC does not fold the broadcast into the instruction by itself
 * (it emits a separate vpbroadcastd), hence the one line of assembly. */
PK_INLINE __m512i s_dpb(__m512i acc, __m512i w, const uint8_t *p) {
#if defined(__GNUC__) && !defined(PK_NO_ASM)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const char(*)[4])p));
    return acc;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(v));
#endif
}

/* 16 rows (lanes, stored where rm says) x C columns over nbk blocks: rec is
 * the group's first record, x column 0 at the first block, prep column pc.
 * add: continue from the values in out (a later pass over k); pf: prefetch
 * the weights ahead (the first tile of a group; the others find them in L1). */
PK_INLINE void s_tile(kern_type_t T, const int C, int nbk, const uint8_t *rec, const uint8_t *x,
                      size_t xs, const s_prep_t *p, int pc, float *out, size_t os, __mmask16 rm,
                      bool add, bool pf) {
    const int REC = kern_pk_rec(T), DOF = kern_pk_d_off(T), QHO = kern_pk_qh_off(T);
    const bool MIN = s_min(T), FIVE = T == KERN_Q5_0 || T == KERN_Q5_1;
    const int XB = MIN ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = MIN ? 4 : 2, OFF = s_off(T);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    __m512 acc[PK_CT];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        acc[c] = add ? _mm512_maskz_loadu_ps(rm, out + (size_t)c * os) : _mm512_setzero_ps();
    for (int b = 0; b < nbk; b++) {
        const uint8_t *o = rec + (size_t)b * REC;
        if (PK_PF && pf) /* the hardware prefetcher stops at 4 KiB pages: fetch ahead */
            for (int l = 0; l < REC; l += 64)
                _mm_prefetch((const char *)(o + PK_PF + l), _MM_HINT_T0);
        __m512i w[8]; /* Q8_0: step s; nibbles: low of step s at 2s, high at 2s+1 */
        if (T == KERN_Q8_0) {
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++)
                w[s] = _mm512_loadu_si512((const void *)(o + 64 * s));
        } else {
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                __m512i z = _mm512_loadu_si512((const void *)(o + 64 * s));
                w[2 * s] = _mm512_and_si512(z, m4);
                w[2 * s + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
                if (FIVE) {
                    uint64_t lo, hi;
                    memcpy(&lo, o + QHO + 16 * s, 8);
                    memcpy(&hi, o + QHO + 16 * s + 8, 8);
                    w[2 * s] = _mm512_mask_add_epi8(w[2 * s], (__mmask64)lo, w[2 * s], b4);
                    w[2 * s + 1] =
                        _mm512_mask_add_epi8(w[2 * s + 1], (__mmask64)hi, w[2 * s + 1], b4);
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + DOF)));
        __m512 mw = _mm512_setzero_ps();
        if (MIN)
            mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + DOF + 32)));
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const uint8_t *xq = x + (size_t)c * xs + (size_t)b * XB + XQ;
            const int pi = (pc + c) * nbk + b;
            __m512i i0 = OFF ? _mm512_set1_epi32(p->u.corr[pi]) : _mm512_setzero_si512();
            __m512i i1 = _mm512_setzero_si512();
            if (T == KERN_Q8_0) {
#pragma GCC unroll 4
                for (int s = 0; s < 8; s += 2) {
                    i0 = s_dpb(i0, w[s], xq + 4 * s);
                    i1 = s_dpb(i1, w[s + 1], xq + 4 * s + 4);
                }
            } else {
#pragma GCC unroll 4
                for (int s = 0; s < 4; s++) {
                    i0 = s_dpb(i0, w[2 * s], xq + 4 * s);
                    i1 = s_dpb(i1, w[2 * s + 1], xq + 16 + 4 * s);
                }
            }
            /* the block sums are exact integers below 2^24: the conversion is exact */
            const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
            acc[c] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(p->dx[pi])), acc[c]);
            if (MIN)
                acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(p->u.sx[pi]), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        _mm512_mask_storeu_ps(out + (size_t)c * os, rm, acc[c]);
}

/* Passes over k (PK_BK blocks) and over columns (what fits PK_PREP), then
 * row groups, then column tiles: a group's records stay in L1 while every
 * column tile of the pass uses them.  Splitting k only stores and reloads the
 * exact accumulators, so it changes no result. */
PK_INLINE void s_gemm_pk(kern_type_t T, int64_t k, int r0, int nr, int nc, const uint8_t *packed,
                         const uint8_t *x, size_t xs, float *out, size_t os) {
    const int64_t nb = k / KERN_QK;
    const int REC = kern_pk_rec(T);
    const int XB = s_min(T) ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    s_prep_t prep __attribute__((aligned(64)));
    const int g0 = r0 / KERN_PK_ROWS, g1 = (r0 + nr - 1) / KERN_PK_ROWS;
    for (int64_t b0 = 0; b0 < nb; b0 += PK_BK) {
        const int nbk = (int)(nb - b0 < PK_BK ? nb - b0 : PK_BK);
        int cc = (PK_PREP / nbk) / PK_CT * PK_CT;
        for (int c0 = 0; c0 < nc; c0 += cc) {
            const int cn = nc - c0 < cc ? nc - c0 : cc;
            const uint8_t *xc = x + (size_t)c0 * xs + (size_t)b0 * XB;
            s_prep(T, cn, nbk, xc, xs, &prep);
            for (int g = g0; g <= g1; g++) {
                const int rows = r0 + nr - g * KERN_PK_ROWS;
                const __mmask16 rm = rows >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rows) - 1);
                const uint8_t *rec = packed + ((size_t)g * nb + b0) * REC;
                float *o = out + (size_t)c0 * os + (size_t)(g * KERN_PK_ROWS - r0);
                int c = 0;
                for (; c + PK_CT <= cn; c += PK_CT)
                    s_tile(T, PK_CT, nbk, rec, xc + (size_t)c * xs, xs, &prep, c,
                           o + (size_t)c * os, os, rm, b0 > 0, c == 0);
                const uint8_t *xt = xc + (size_t)c * xs;
                float *ot = o + (size_t)c * os;
                switch (cn - c) {
#define PK_CASE(n)                                                                                 \
    case n:                                                                                        \
        s_tile(T, n, nbk, rec, xt, xs, &prep, c, ot, os, rm, b0 > 0, c == 0);                      \
        break;
                    PK_CASE(1)
                    PK_CASE(2)
                    PK_CASE(3)
                    PK_CASE(4)
                    PK_CASE(5)
                    PK_CASE(6)
                    PK_CASE(7)
#undef PK_CASE
                default:
                    break;
                }
            }
        }
    }
}

#define PK_FN(name, TT)                                                                            \
    static __attribute__((noinline)) void name(int64_t k, int r0, int nr, int nc,                  \
                                               const uint8_t *packed, const uint8_t *x, size_t xs, \
                                               float *out, size_t os) {                            \
        s_gemm_pk(TT, k, r0, nr, nc, packed, x, xs, out, os);                                      \
    }
PK_FN(s_pk_q4_0, KERN_Q4_0)
PK_FN(s_pk_q4_1, KERN_Q4_1)
PK_FN(s_pk_q5_0, KERN_Q5_0)
PK_FN(s_pk_q5_1, KERN_Q5_1)
PK_FN(s_pk_q8_0, KERN_Q8_0)
#undef PK_FN

void kern_gemm_packed_avx512(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                             const void *x, size_t x_stride, float *out, size_t out_stride) {
    if (kern_kpk_type(wt)) { /* K-quants: gemm_kpacked_avx512.c */
        kern_gemm_kpacked_avx512(wt, k, r0, nr, nc, packed, x, x_stride, out, out_stride);
        return;
    }
    assert(kern_pk_type(wt) && r0 % KERN_PK_ROWS == 0 && nr >= 1 && nc >= 1);
    void (*fn)(int64_t, int, int, int, const uint8_t *, const uint8_t *, size_t, float *, size_t);
    switch (wt) {
    case KERN_Q4_0:
        fn = s_pk_q4_0;
        break;
    case KERN_Q4_1:
        fn = s_pk_q4_1;
        break;
    case KERN_Q5_0:
        fn = s_pk_q5_0;
        break;
    case KERN_Q5_1:
        fn = s_pk_q5_1;
        break;
    case KERN_Q8_0:
        fn = s_pk_q8_0;
        break;
    default: /* not a packed type: programmer error */
        return;
    }
    fn(k, r0, nr, nc, packed, x, x_stride, out, out_stride);
}
#endif
