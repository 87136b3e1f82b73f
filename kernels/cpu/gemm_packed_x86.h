/* gemm_packed_x86.h - gemm of packed weights (layout in kern_cpu.h) for every
 * x86 variant: in zmm with AVX-512 VNNI (KX_ISA_AVX512), in ymm with AVX2
 * maddubs + madd (KX_ISA_AVX2) or AVX-VNNI (KX_ISA_AVXVNNI: VEX vpdpbusd,
 * Alder Lake and later, Zen 5).  The K-quants' packed gemm is
 * gemm_kpacked_x86.h's; the entry point passes them on.
 * A lane is a row: for one block, each step multiplies 4 weight bytes per row
 * with the same 4 activation bytes (broadcast from memory), so after the steps
 * of a block every lane holds its row's integer block sum - no cross-lane
 * sums.  A record's 64-byte step is one zmm of 16 rows, or two ymm of 8 rows
 * each (a "half": rows 0..7 at bytes 0..31, rows 8..15 at 32..63).  Then per
 * (rows, column, block): one conversion, one multiply by dw * dx, one FMA (and
 * one for the minimum), blocks in order, as kern_ref_gemm_packed does: each
 * output's float operations depend only on its row and column, never on nc,
 * the tile or the column's place in it, so results are bitwise equal to the
 * reference for every nc, r0 and nr.
 * Exact integers without VNNI: maddubs multiplies unsigned by signed bytes
 * into int16 pairs, which saturate above 32767.  The weight operand is always
 * a small unsigned level: nibbles 0..15 (sums of 16 products per int16 lane,
 * |sum| <= 16 * 15 * 128 = 30720), Q5 levels 0..31 (folded to int32 after 8
 * products: 31744), and Q8_0's biased byte q + 128 split into its two nibbles
 * (sum = 16 * hi + lo, each nibble sum as for Q4).  The bias of the levels
 * (8, 16, 128) is removed through the activation sums (s_prep).
 * Tiles: PK_ROWS rows (a half) x up to PK_CT columns, the columns reusing
 * each block's records from L1; nc = 1 (decode) streams the weights once,
 * every half of a block in one tile, fetching ahead.
 */
#if defined(__x86_64__)
#include "kern_cpu.h"
#include "simd_x86.h"

#include <assert.h>
#include <immintrin.h>
#include <string.h>

#ifdef KX_ISA_AVX512
#define PK_ROWS 16 /* rows per tile: a zmm lane is a row */
#define PK_CT 8    /* columns per register tile */
#else
#define PK_ROWS 8 /* rows per tile: a ymm lane is a row */
#define PK_CT 4   /* columns per register tile */
#endif
#define PK_HALVES (KERN_PK_ROWS / PK_ROWS) /* tiles of rows per 16-row group */
#define PK_PREP 4096 /* prepared (column, block) entries per pass: 32 KiB of stack */
#define PK_BK 512    /* blocks per pass at most */
#ifndef PK_PF
#define PK_PF 12288 /* bytes of weights to prefetch ahead (0: none) */
#endif

/* ---- the activations of a pass ------------------------------------------ */

KX_INLINE bool s_min(kern_type_t T) {
    return T == KERN_Q4_1 || T == KERN_Q5_1;
}

/* The unsigned bias of the weight levels, removed through the activation sums. */
KX_INLINE int s_off(kern_type_t T) {
    return T == KERN_Q4_0 ? 8 : T == KERN_Q5_0 ? 16 : T == KERN_Q8_0 ? 128 : 0;
}

/* One pass's activations, per (column, block) at [column * nbk + block]: the
 * scale, and the sum term sx (Q4_1 / Q5_1) or the bias correction -off * sum(q). */
typedef struct {
    float dx[PK_PREP];
    union {
        float sx[PK_PREP];
        int32_t corr[PK_PREP];
    } u;
} s_prep_t;

KX_INLINE void s_prep(kern_type_t T, int cn, int nbk, const uint8_t *x, size_t xs, s_prep_t *p) {
    const int XB = s_min(T) ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = s_min(T) ? 4 : 2, OFF = s_off(T);
    for (int c = 0; c < cn; c++)
        for (int b = 0; b < nbk; b++) {
            const uint8_t *xb = x + (size_t)c * xs + (size_t)b * XB;
            const int i = c * nbk + b;
            p->dx[i] = kx86_f16(xb);
            if (s_min(T)) {
                p->u.sx[i] = kx86_f16(xb + 2);
            } else {
                /* sum of the 32 signed levels: as unsigned (+128) with SAD */
                __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(xb + XQ)),
                                             _mm256_set1_epi8((char)0x80));
                __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
                __m128i h =
                    _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
                p->u.corr[i] = -OFF * ((int)_mm_cvtsi128_si32(h) - 32 * 128);
            }
        }
}

/* ---- zmm: AVX-512 VNNI, 16 rows per tile ---------------------------------- */
#ifdef KX_ISA_AVX512
/* acc + VNNI dot of the unsigned bytes of w with the 4 signed bytes at p in
 * every lane.  GCC does not fold the broadcast into the instruction by itself
 * (it emits a separate vpbroadcastd), hence the one line of assembly. */
KX_INLINE __m512i s_dpb(__m512i acc, __m512i w, const uint8_t *p) {
#if defined(__GNUC__) && !defined(PK_NO_ASM)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const char(*)[4])p));
    return acc;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(v));
#endif
}

/* The group's 16 rows (lanes; rows 0 .. rows-1 exist and are stored) x C
 * columns over nbk blocks, arguments as the ymm s_tile's (NH, h0: the one
 * half). */
KX_INLINE void s_tile(kern_type_t T, const int NH, const int C, int h0, int nbk, const uint8_t *rec,
                      const uint8_t *x, size_t xs, const s_prep_t *p, int pc, float *out, size_t os,
                      int rows, bool add, bool pf) {
    (void)NH, (void)h0; /* one half of 16 rows */
    const __mmask16 rm = rows >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rows) - 1);
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

#else
/* ---- ymm: AVX2 or AVX-VNNI, 8 rows (half h of the group) per tile ---------- */
/* The 4 bytes at p in every int32 lane (one vpbroadcastd from memory). */
KX_INLINE __m256i s_bcast(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#ifdef KX_ISA_AVXVNNI
/* acc + per-lane dot of 4 unsigned bytes of w with the 4 signed bytes at p. */
KX_INLINE __m256i s_dp(__m256i acc, __m256i w, const uint8_t *p) {
    return _mm256_dpbusd_avx_epi32(acc, w, s_bcast(p));
}
#else
/* a + int16 pair products of the unsigned bytes of w with the 4 signed bytes at p.
 * The empty asm keeps the sum a chain: GCC otherwise reassociates the integer
 * adds into a tree that holds every product at once and spills. */
KX_INLINE __m256i s_mad16(__m256i a, __m256i w, const uint8_t *p) {
    a = _mm256_add_epi16(a, _mm256_maddubs_epi16(w, s_bcast(p)));
    __asm__("" : "+x"(a));
    return a;
}
#endif

/* isum[c] = the integer block sums of the 8 rows of half h of record o (the
 * biased levels) with the activation levels xq[c], for C columns. */
KX_INLINE void s_isums(kern_type_t T, const int C, const uint8_t *o, int h,
                       const uint8_t *const *xq, __m256i *isum) {
    const int QHO = kern_pk_qh_off(T), H = 32 * h;
    const bool FIVE = T == KERN_Q5_0 || T == KERN_Q5_1;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#ifdef KX_ISA_AVXVNNI
    /* two sums per column (even / odd products) halve the dependent chains */
    __m256i e[PK_CT];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        isum[c] = e[c] = _mm256_setzero_si256();
    if (T == KERN_Q8_0) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s += 2) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(o + 64 * s + H));
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(o + 64 * s + 64 + H));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                isum[c] = s_dp(isum[c], w0, xq[c] + 4 * s);
                e[c] = s_dp(e[c], w1, xq[c] + 4 * s + 4);
            }
        }
    } else {
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            const __m256i z = _mm256_loadu_si256((const __m256i *)(o + 64 * s + H));
            __m256i lo = _mm256_and_si256(z, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
            if (FIVE) {
                lo = _mm256_or_si256(lo, kx86_bits5(o + QHO + 16 * s + 4 * h));
                hi = _mm256_or_si256(hi, kx86_bits5(o + QHO + 16 * s + 8 + 4 * h));
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                isum[c] = s_dp(isum[c], lo, xq[c] + 4 * s);
                e[c] = s_dp(e[c], hi, xq[c] + 16 + 4 * s);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        isum[c] = _mm256_add_epi32(isum[c], e[c]);
#else
    const __m256i one = _mm256_set1_epi16(1);
    __m256i a[PK_CT], b[PK_CT]; /* int16 sums */
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        a[c] = b[c] = _mm256_setzero_si256();
    if (T == KERN_Q8_0) { /* a: high nibbles of q + 128, b: low nibbles */
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m256i z = _mm256_loadu_si256((const __m256i *)(o + 64 * s + H));
            const __m256i lo = _mm256_and_si256(z, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                a[c] = s_mad16(a[c], hi, xq[c] + 4 * s);
                b[c] = s_mad16(b[c], lo, xq[c] + 4 * s);
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            isum[c] = _mm256_add_epi32(_mm256_madd_epi16(a[c], _mm256_set1_epi16(16)),
                                       _mm256_madd_epi16(b[c], one));
        return;
    }
    /* a: steps 0..3 of Q4 (16 products per int16); Q5: steps 0..1 (8 products),
     * folded into the int32 isum, then steps 2..3 */
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++) {
        if (FIVE && s == 2)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                isum[c] = _mm256_madd_epi16(a[c], one);
                a[c] = _mm256_setzero_si256();
            }
        const __m256i z = _mm256_loadu_si256((const __m256i *)(o + 64 * s + H));
        __m256i lo = _mm256_and_si256(z, m4), hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
        if (FIVE) {
            lo = _mm256_or_si256(lo, kx86_bits5(o + QHO + 16 * s + 4 * h));
            hi = _mm256_or_si256(hi, kx86_bits5(o + QHO + 16 * s + 8 + 4 * h));
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            a[c] = s_mad16(a[c], lo, xq[c] + 4 * s);
            a[c] = s_mad16(a[c], hi, xq[c] + 16 + 4 * s);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        isum[c] = FIVE ? _mm256_add_epi32(isum[c], _mm256_madd_epi16(a[c], one))
                       : _mm256_madd_epi16(a[c], one);
#endif
}

/* Lanes i < n of -1 (the rows of a half that exist). */
KX_INLINE __m256i s_rowmask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* NH halves from h0 (NH 2: the whole group) x C columns over nbk blocks: rec
 * is the group's first record, x column 0 at the first block, prep column pc,
 * out row 0 of the group at column 0; rows of the group exist (1..16).
 * add: continue from the values in out (a later pass over k); pf: prefetch
 * the weights ahead (the first tile of a group; the others find them in L1). */
KX_INLINE void s_tile(kern_type_t T, const int NH, const int C, int h0, int nbk, const uint8_t *rec,
                      const uint8_t *x, size_t xs, const s_prep_t *p, int pc, float *out, size_t os,
                      int rows, bool add, bool pf) {
    const int REC = kern_pk_rec(T), DOF = kern_pk_d_off(T);
    const bool MIN = s_min(T);
    const int XB = MIN ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = MIN ? 4 : 2, OFF = s_off(T);
    __m256 acc[2][PK_CT];
#pragma GCC unroll 2
    for (int hh = 0; hh < NH; hh++) {
        const int n = rows - 8 * (h0 + hh);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float *q = out + (size_t)c * os + 8 * (h0 + hh);
            acc[hh][c] = !add     ? _mm256_setzero_ps()
                         : n >= 8 ? _mm256_loadu_ps(q)
                         : n > 0  ? _mm256_maskload_ps(q, s_rowmask(n))
                                  : _mm256_setzero_ps();
        }
    }
    for (int b = 0; b < nbk; b++) {
        const uint8_t *o = rec + (size_t)b * REC;
        if (PK_PF && pf) /* the hardware prefetcher stops at 4 KiB pages: fetch ahead */
            for (int l = 0; l < REC; l += 64)
                _mm_prefetch((const char *)(o + PK_PF + l), _MM_HINT_T0);
        const uint8_t *xq[PK_CT];
        int pi[PK_CT]; /* prepared entry of each column (broadcast where used) */
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            xq[c] = x + (size_t)c * xs + (size_t)b * XB + XQ;
            pi[c] = (pc + c) * nbk + b;
        }
#pragma GCC unroll 2
        for (int hh = 0; hh < NH; hh++) {
            const int h = h0 + hh;
            __m256i is[PK_CT];
            s_isums(T, C, o, h, xq, is);
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + DOF + 16 * h)));
            __m256 mw = _mm256_setzero_ps();
            if (MIN)
                mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + DOF + 32 + 16 * h)));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                if (OFF)
                    is[c] = _mm256_add_epi32(is[c], _mm256_set1_epi32(p->u.corr[pi[c]]));
                /* the block sums are exact integers below 2^24: the conversion is exact */
                acc[hh][c] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[c]),
                                    _mm256_mul_ps(dw, _mm256_set1_ps(p->dx[pi[c]])), acc[hh][c]);
                if (MIN)
                    acc[hh][c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(p->u.sx[pi[c]]), acc[hh][c]);
            }
        }
    }
#pragma GCC unroll 2
    for (int hh = 0; hh < NH; hh++) {
        const int n = rows - 8 * (h0 + hh);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float *q = out + (size_t)c * os + 8 * (h0 + hh);
            if (n >= 8)
                _mm256_storeu_ps(q, acc[hh][c]);
            else if (n > 0)
                _mm256_maskstore_ps(q, s_rowmask(n), acc[hh][c]);
        }
    }
}

#endif

/* ---- the tile walker and the entry point ------------------------------ */

/* Passes over k (PK_BK blocks) and over columns (what fits PK_PREP), then
 * row groups, then (nc > 1) halves and column tiles: a half's records stay in
 * L1 while every column tile of the pass uses them.  Splitting k only stores
 * and reloads the exact accumulators, so it changes no result. */
KX_INLINE void s_gemm_pk(kern_type_t T, int64_t k, int r0, int nr, int nc, const uint8_t *packed,
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
                int rows = r0 + nr - g * KERN_PK_ROWS;
                rows = rows > KERN_PK_ROWS ? KERN_PK_ROWS : rows;
                const uint8_t *rec = packed + ((size_t)g * nb + b0) * REC;
                float *o = out + (size_t)c0 * os + (size_t)(g * KERN_PK_ROWS - r0);
                if (PK_HALVES > 1 && cn == 1) { /* one tile for the halves (zmm: one half anyway) */
                    s_tile(T, PK_HALVES, 1, 0, nbk, rec, xc, xs, &prep, 0, o, os, rows, b0 > 0,
                           true);
                    continue;
                }
                for (int h = 0; h < PK_HALVES && PK_ROWS * h < rows; h++) {
#define S_TILE(c, n)                                                                               \
    s_tile(T, 1, n, h, nbk, rec, xc + (size_t)(c)*xs, xs, &prep, c, o + (size_t)(c)*os, os, rows,  \
           b0 > 0, (c) == 0 && h == 0)
                    KX_COLUMN_TILES(cn, PK_CT, S_TILE);
#undef S_TILE
                }
            }
        }
    }
}

#ifdef KX_ISA_AVX512
#define PK_KPACKED kern_gemm_kpacked_avx512
#else
#define PK_KPACKED kern_gemm_kpacked_avx2 /* the AVX-VNNI variant too */
#endif
KX_PACKED_ENTRY(KX(kern_gemm_packed), s_gemm_pk, KX_PK_TYPES, PK_KPACKED)

/* The table's packed_size: the reference layout, for the types its
 * gemm_packed handles (and no other type the reference may pack). */
size_t KX(kern_packed_size)(kern_type_t wt, int64_t k, int nr) {
    switch (wt) {
    case KERN_Q4_0:
    case KERN_Q4_1:
    case KERN_Q5_0:
    case KERN_Q5_1:
    case KERN_Q8_0:
    case KERN_Q4_K:
    case KERN_Q5_K:
        return kern_ref_packed_size(wt, k, nr);
    case KERN_Q6_K:
#ifdef KX_ISA_AVX512
        return kern_ref_packed_size(wt, k, nr);
#else
        /* Q6_K stays unpacked in ymm: turning its two high-bit masks into bytes
         * without VPSHUFBITQMB costs more than the layout saves (test_kernels_kpacked's
         * bench, 2026-12-01: 0.95x at 576x1536 and 0.74x at 4096x4096 for nc = 1,
         * 0.86x / 0.98x for nc = 64); the AVX-512 table packs it (1.1x to 2.6x). */
        return 0;
#endif
    default:
        return 0;
    }
}
#endif
