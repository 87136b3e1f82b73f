/* gemm_kpacked_x86.h - gemm of packed K-quant weights (Q4_K, Q5_K, Q6_K;
 * layout and float contract in kern_cpu.h) against Q8_K activations, written
 * once for the x86 variants (the scheme: kern_cpu.h): gemm_kpacked_avx512.c
 * (KX_ISA_AVX512: a zmm lane is a row, VNNI dot products, 16 rows per tile)
 * and gemm_kpacked_avx2.c (a ymm lane is a row, maddubs + madd, 8 rows per
 * tile; the AVX-VNNI table runs it too).
 * Within a tile every lane sums its own row, so no horizontal sums: per step
 * (4 levels of each row) the activation bytes are broadcast and multiplied
 * into a per-sub-block chain; at the end of a sub-block the chain is scaled
 * by the row's integer scale into isum.  The minimums (Q4_K, Q5_K) and
 * Q6_K's -32 offset come from the activation group sums (x.bsums) with one
 * int16 pair product per pair of groups.  Then per (rows, column, super-block)
 * the float operations of the contract, in order over the super-blocks.
 * Integer arithmetic is exact (the bounds are beside each chain), so every
 * output equals the scalar reference bitwise, whatever nc, r0 or the tile.
 * KX(name) gives the exported name of this variant.
 */
#if defined(__x86_64__)
#include "kern_cpu.h"
#include "simd_x86.h"

#include <assert.h>
#include <immintrin.h>
#include <string.h>

#define KP_XB ((int)sizeof(kern_block_q8_K)) /* d at 0, qs at 4, bsums at 260 */
#define KP_XQ 4
#define KP_XS 260
#define KP_BK 8 /* super-blocks per pass over k: a group's records stay in L1 */

#ifdef KX_ISA_AVX512
/* ---- AVX-512 VNNI: 16 rows (zmm lanes) -------------------------------- */
/* v shifted left by n bits in its 16-bit lanes (right by -n); n is a constant
 * once the steps are unrolled.  The high-bit vectors only move bits within a
 * byte (|n| <= 4 to bits 4 and 5), so the lanes' width does not matter. */
KX_INLINE __m512i s_shift(__m512i v, int n) {
    return n > 0   ? _mm512_slli_epi16(v, (unsigned)n)
           : n < 0 ? _mm512_srli_epi16(v, (unsigned)-n)
                   : v;
}
#define KP_CT 6 /* columns per register tile */
#define KP_ROWS 16
typedef __m512i s_vi;
typedef __m512 s_vf;

/* acc + VNNI dot of the unsigned bytes of w with the 4 signed bytes at p in
 * every lane (one instruction with an embedded broadcast; GCC would emit a
 * separate vpbroadcastd). */
KX_INLINE __m512i s_dpb(__m512i acc, __m512i w, const uint8_t *p) {
#if defined(__GNUC__) && !defined(KP_NO_ASM)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const char(*)[4])p));
    return acc;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(v));
#endif
}

/* acc + per lane: int16 pair of w times the int16 pair at p (vpdpwssd). */
KX_INLINE __m512i s_dpw(__m512i acc, __m512i w, const uint8_t *p) {
#if defined(__GNUC__) && !defined(KP_NO_ASM)
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const char(*)[4])p));
    return acc;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpwssd_epi32(acc, w, _mm512_set1_epi32(v));
#endif
}

/* Levels of step st for the tile's rows (h: row half, unused here): low
 * nibbles to *lo, high to *hi, with the high bits (kern_cpu.h's qh vectors)
 * shifted into place and or-ed in by one ternary logic op each. */
KX_INLINE void s_levels(kern_type_t T, const uint8_t *o, int st, int h, s_vi *lo, s_vi *hi) {
    (void)h;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i z = _mm512_loadu_si512((const void *)(o + kern_kpk_qs_off(T, st)));
    __m512i l = _mm512_and_si512(z, m4), u = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    if (kern_kpk_hbits(T)) {
        const __m512i q = _mm512_loadu_si512((const void *)(o + kern_kpk_hvec(T, st)));
        const __m512i mh = _mm512_set1_epi8(kern_kpk_hbits(T) == 1 ? 0x10 : 0x30);
        /* a | (b & c): 0xF0 | (0xCC & 0xAA) */
        l = _mm512_ternarylogic_epi32(l, s_shift(q, 4 - kern_kpk_hpos(T, st, 0)), mh, 0xF8);
        u = _mm512_ternarylogic_epi32(u, s_shift(q, 4 - kern_kpk_hpos(T, st, 1)), mh, 0xF8);
    }
    *lo = l;
    *hi = u;
}

/* The chain of a sub-block: a VNNI int32 sum per lane.  Its bound: 32 levels
 * (Q4_K/Q5_K) or 16 (Q6_K) times 63 * 128, far inside int32. */
#define KP_FLUSH(T) ((T) == KERN_Q6_K ? 4 : 8) /* steps per sub-block */
KX_INLINE s_vi s_chain(s_vi acc, s_vi w, const uint8_t *p) {
    return s_dpb(acc, w, p);
}
/* Scale of sub-block u for each row, ready for s_flush. */
KX_INLINE s_vi s_scale(kern_type_t T, const uint8_t *o, int u, int h) {
    (void)h;
    const __m128i v = _mm_loadu_si128((const __m128i *)(o + kern_kpk_sc_off(T) + 16 * u));
    return T == KERN_Q6_K ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}
/* isum + chain * scale (exact: below 2^31 by the bounds above). */
KX_INLINE s_vi s_flush(s_vi isum, s_vi chain, s_vi sc) {
    return _mm512_add_epi32(isum, _mm512_mullo_epi32(chain, sc));
}
/* int16 pairs (a, b) per lane from two int32 vectors. */
KX_INLINE s_vi s_pair(s_vi a, s_vi b) {
    return _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, a, _mm512_slli_epi32(b, 16));
}
/* Correction coefficient pair u of the rows: (m_u, m_u) for Q4_K / Q5_K (times
 * the bsums of sub-block u), (sc_2u, sc_2u+1) for Q6_K. */
KX_INLINE s_vi s_corr_coef(kern_type_t T, const uint8_t *o, int u, int h) {
    (void)h;
    const uint8_t *p = o + kern_kpk_sc_off(T);
    if (T == KERN_Q6_K)
        return s_pair(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 32 * u))),
                      _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 32 * u + 16))));
    const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 128 + 16 * u)));
    return s_pair(m, m);
}
KX_INLINE s_vf s_f16v(const uint8_t *p, int h) {
    (void)h;
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
#define v_zero() _mm512_setzero_si512()
#define v_add(a, b) _mm512_add_epi32(a, b)
#define v_sub(a, b) _mm512_sub_epi32(a, b)
#define v_shl5(a) _mm512_slli_epi32(a, 5)
#define v_cvt(a) _mm512_cvtepi32_ps(a)
#define v_fzero() _mm512_setzero_ps()
#define v_fset1(f) _mm512_set1_ps(f)
#define v_fmul(a, b) _mm512_mul_ps(a, b)
#define v_fmadd(a, b, c) _mm512_fmadd_ps(a, b, c)
#define v_fnmadd(a, b, c) _mm512_fnmadd_ps(a, b, c)
typedef __mmask16 s_rmask;
#define v_fload(rm, p) _mm512_maskz_loadu_ps(rm, p)
#define v_fstore(p, rm, v) _mm512_mask_storeu_ps(p, rm, v)
KX_INLINE s_rmask s_rowmask(int rows) {
    return rows >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rows) - 1);
}

#else
/* ---- AVX2: 8 rows (ymm lanes), half h of a 16-row record -------------- */
KX_INLINE __m256i s_shift(__m256i v, int n) { /* as the AVX-512 one */
    return n > 0 ? _mm256_slli_epi16(v, n) : n < 0 ? _mm256_srli_epi16(v, -n) : v;
}
#define KP_CT 3
#define KP_ROWS 8
typedef __m256i s_vi;
typedef __m256 s_vf;

KX_INLINE __m256i s_bcast(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

KX_INLINE void s_levels(kern_type_t T, const uint8_t *o, int st, int h, s_vi *lo, s_vi *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i z = _mm256_loadu_si256((const __m256i *)(o + kern_kpk_qs_off(T, st) + 32 * h));
    __m256i l = _mm256_and_si256(z, m4), u = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
    if (kern_kpk_hbits(T)) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(o + kern_kpk_hvec(T, st) + 32 * h));
        const __m256i mh = _mm256_set1_epi8(kern_kpk_hbits(T) == 1 ? 0x10 : 0x30);
        l = _mm256_or_si256(l, _mm256_and_si256(s_shift(q, 4 - kern_kpk_hpos(T, st, 0)), mh));
        u = _mm256_or_si256(u, _mm256_and_si256(s_shift(q, 4 - kern_kpk_hpos(T, st, 1)), mh));
    }
    *lo = l;
    *hi = u;
}

/* The chain: int16 pair sums of maddubs (level * x, two per pair, exact).
 * It must stay in int16: 2 * 15 * 128 * 8 steps (Q4_K), 2 * 31 * 128 * 4
 * (Q5_K), 2 * 63 * 128 * 2 (Q6_K) are all below 32768, hence the flush
 * periods, shorter than a sub-block for Q5_K and Q6_K. */
#define KP_FLUSH(T) ((T) == KERN_Q4_K ? 8 : (T) == KERN_Q5_K ? 4 : 2)
KX_INLINE s_vi s_chain(s_vi acc, s_vi w, const uint8_t *p) {
    s_vi r = _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, s_bcast(p)));
    /* An empty asm that the chain's value passes through: integer adds associate, and
     * GCC 12 otherwise turns the unrolled chains into trees whose leaves (a product per
     * step and column) no longer fit the 16 ymm registers: every product was stored to
     * the stack and loaded back.  Kept sequential, each chain lives in one register. */
    __asm__("" : "+x"(r));
    return r;
}
/* int16 pairs (a, b) per lane from two int32 vectors. */
KX_INLINE s_vi s_pair(s_vi a, s_vi b) {
    return _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xAA);
}
/* (sc_u, sc_u) per lane: madd with the chain's pair applies the scale. */
KX_INLINE s_vi s_scale(kern_type_t T, const uint8_t *o, int u, int h) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)(o + kern_kpk_sc_off(T) + 16 * u + 8 * h));
    const __m256i s = T == KERN_Q6_K ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
    return s_pair(s, s);
}
KX_INLINE s_vi s_flush(s_vi isum, s_vi chain, s_vi sc) {
    return _mm256_add_epi32(isum, _mm256_madd_epi16(chain, sc));
}
KX_INLINE s_vi s_corr_coef(kern_type_t T, const uint8_t *o, int u, int h) {
    const uint8_t *p = o + kern_kpk_sc_off(T) + 8 * h;
    if (T == KERN_Q6_K)
        return s_pair(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 32 * u))),
                      _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 32 * u + 16))));
    const __m256i m = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 128 + 16 * u)));
    return s_pair(m, m);
}
KX_INLINE s_vi s_dpw(s_vi acc, s_vi w, const uint8_t *p) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, s_bcast(p)));
}
KX_INLINE s_vf s_f16v(const uint8_t *p, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
}
#define v_zero() _mm256_setzero_si256()
#define v_add(a, b) _mm256_add_epi32(a, b)
#define v_sub(a, b) _mm256_sub_epi32(a, b)
#define v_shl5(a) _mm256_slli_epi32(a, 5)
#define v_cvt(a) _mm256_cvtepi32_ps(a)
#define v_fzero() _mm256_setzero_ps()
#define v_fset1(f) _mm256_set1_ps(f)
#define v_fmul(a, b) _mm256_mul_ps(a, b)
#define v_fmadd(a, b, c) _mm256_fmadd_ps(a, b, c)
#define v_fnmadd(a, b, c) _mm256_fnmadd_ps(a, b, c)
typedef __m256i s_rmask;
#define v_fload(rm, p) _mm256_maskload_ps(p, rm)
#define v_fstore(p, rm, v) _mm256_maskstore_ps(p, rm, v)
KX_INLINE s_rmask s_rowmask(int rows) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

/* NH x KP_ROWS rows (halves h0 .. h0+NH-1 of the group's records; half hh's
 * rows stored from out + hh * KP_ROWS where rm[hh] says) x C columns over nbk
 * super-blocks: rec is the first record, x column 0 at the first super-block.
 * add: continue from the values in out (a later pass over k); pf: prefetch the
 * weights this many bytes ahead (the first tile of a group; 0: none).  NH = 2 (the AVX2 ymm tiles
 * of one column) reads every step's activation bytes once for both halves. */
KX_INLINE void s_tile(kern_type_t T, const int C, const int NH, int nbk, const uint8_t *rec, int h0,
                      const uint8_t *x, size_t xs, float *out, size_t os, const s_rmask *rm,
                      bool add, int pf) {
    const int REC = kern_kpk_rec(T), DOF = kern_kpk_d_off(T), FL = KP_FLUSH(T);
    const bool MIN = T != KERN_Q6_K;
    s_vf acc[2][KP_CT];
#pragma GCC unroll 2
    for (int hh = 0; hh < NH; hh++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[hh][c] = add ? v_fload(rm[hh], out + hh * KP_ROWS + (size_t)c * os) : v_fzero();
    for (int b = 0; b < nbk; b++) {
        const uint8_t *o = rec + (size_t)b * REC;
        if (pf) /* the lines past the 32 steps' (the steps fetch their own) */
#pragma GCC unroll 64
            for (int l = 64 * 32; l < REC; l += 64) /* REC is a constant: no loop is left */
                _mm_prefetch((const char *)(o + pf + l), _MM_HINT_T0);
        s_vi isum[2][KP_CT];
#pragma GCC unroll 2
        for (int hh = 0; hh < NH; hh++)
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                isum[hh][c] = v_zero();
        for (int ch = 0; ch < 4; ch++) { /* chunk: elements 64ch .. 64ch+63 */
#pragma GCC unroll 4
            for (int s0 = 0; s0 < 8; s0 += FL) { /* a flush period of steps */
                s_vi tl[2][KP_CT], th[2][KP_CT]; /* chains: low and high nibbles */
#pragma GCC unroll 2
                for (int hh = 0; hh < NH; hh++)
#pragma GCC unroll 8
                    for (int c = 0; c < C; c++)
                        tl[hh][c] = th[hh][c] = v_zero();
#pragma GCC unroll 8
                for (int s = s0; s < s0 + FL; s++) {
                    if (pf) /* one line ahead per step, spread over the record */
                        _mm_prefetch((const char *)(o + pf + 64 * (8 * ch + s)), _MM_HINT_T0);
#pragma GCC unroll 2
                    for (int hh = 0; hh < NH; hh++) {
                        s_vi lo, hi;
                        s_levels(T, o, 8 * ch + s, h0 + hh, &lo, &hi);
#pragma GCC unroll 8
                        for (int c = 0; c < C; c++) {
                            const uint8_t *xq = x + (size_t)c * xs + (size_t)b * KP_XB + KP_XQ;
                            tl[hh][c] = s_chain(tl[hh][c], lo, xq + 64 * ch + 4 * s);
                            th[hh][c] = s_chain(th[hh][c], hi, xq + 64 * ch + 32 + 4 * s);
                        }
                    }
                }
                /* sub-blocks of the low and high nibbles of these steps */
                const int ul = T == KERN_Q6_K ? 4 * ch + s0 / 4 : 2 * ch;
                const int uh = T == KERN_Q6_K ? 4 * ch + 2 + s0 / 4 : 2 * ch + 1;
#pragma GCC unroll 2
                for (int hh = 0; hh < NH; hh++) {
                    const s_vi scl = s_scale(T, o, ul, h0 + hh), sch = s_scale(T, o, uh, h0 + hh);
#pragma GCC unroll 8
                    for (int c = 0; c < C; c++)
                        isum[hh][c] = s_flush(s_flush(isum[hh][c], tl[hh][c], scl), th[hh][c], sch);
                }
            }
        }
        /* minimums (Q4_K, Q5_K) or the -32 offset (Q6_K) from the group sums */
#pragma GCC unroll 2
        for (int hh = 0; hh < NH; hh++) {
            s_vi cv[8];
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++)
                cv[u] = s_corr_coef(T, o, u, h0 + hh);
            const s_vf dw = s_f16v(o + DOF, h0 + hh);
            const s_vf mw = MIN ? s_f16v(o + DOF + 32, h0 + hh) : v_fzero();
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                const uint8_t *xb = x + (size_t)c * xs + (size_t)b * KP_XB;
                s_vi corr = v_zero();
#pragma GCC unroll 8
                for (int u = 0; u < 8; u++)
                    corr = s_dpw(corr, cv[u], xb + KP_XS + 4 * u);
                float dxf;
                memcpy(&dxf, xb, 4);
                const s_vf dx = v_fset1(dxf);
                s_vf *a = &acc[hh][c];
                if (MIN) {
                    *a = v_fmadd(v_cvt(isum[hh][c]), v_fmul(dw, dx), *a);
                    *a = v_fnmadd(v_cvt(corr), v_fmul(mw, dx), *a);
                } else {
                    *a = v_fmadd(v_cvt(v_sub(isum[hh][c], v_shl5(corr))), v_fmul(dw, dx), *a);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int hh = 0; hh < NH; hh++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            v_fstore(out + hh * KP_ROWS + (size_t)c * os, rm[hh], acc[hh][c]);
}

/* One row group's tiles over super-blocks b0 .. b0+nbk-1, every column tile
 * of them (the group's records for these super-blocks stay in L1).  A whole
 * group of one column on AVX2 is one two-half tile; otherwise half by half. */
KX_INLINE void s_group_pass(kern_type_t T, int64_t nb, int64_t b0, int nbk, int g, int r0, int nr,
                            int nc, const uint8_t *packed, const uint8_t *x, size_t xs, float *out,
                            size_t os, int pf) {
    const uint8_t *rec = packed + ((size_t)g * nb + b0) * kern_kpk_rec(T);
    const uint8_t *xb = x + (size_t)b0 * KP_XB;
    const int NHALF = KERN_PK_ROWS / KP_ROWS;
    float *og = out + (size_t)(g * KERN_PK_ROWS - r0);
    if (NHALF == 2 && nc == 1 && r0 + nr - g * KERN_PK_ROWS >= KERN_PK_ROWS) {
        const s_rmask rm[2] = {s_rowmask(KP_ROWS), s_rowmask(KP_ROWS)};
        s_tile(T, 1, 2, nbk, rec, 0, xb, xs, og, os, rm, b0 > 0, pf);
        return;
    }
    for (int h = 0; h < NHALF; h++) {
        const int rows = r0 + nr - (g * KERN_PK_ROWS + h * KP_ROWS);
        if (rows <= 0)
            break;
        const s_rmask rm[1] = {s_rowmask(rows)};
        float *o = og + h * KP_ROWS;
#define S_TILE(c, n)                                                                               \
    s_tile(T, n, 1, nbk, rec, h, xb + (size_t)(c)*xs, xs, o + (size_t)(c)*os, os, rm, b0 > 0,      \
           (c) == 0 && h == 0 ? pf : 0)
        KX_COLUMN_TILES(nc, KP_CT, S_TILE);
#undef S_TILE
    }
}

/* Passes over k (KP_BK super-blocks) and row groups (and halves), then column
 * tiles.  With more than one column tile (prefill), passes are outermost: the
 * columns' activations of a pass stay in cache while every group uses them.
 * With one (decode, small batches) there is nothing to reuse across groups,
 * so each group walks its passes in turn and the weights stream in storage
 * order: the prefetch ahead then lands on the next records to be read, not
 * on records a later pass reads after they have left the cache.  Splitting k
 * only stores and reloads the float accumulators, so neither order changes
 * a result. */
KX_INLINE void s_gemm_kpk(kern_type_t T, int64_t k, int r0, int nr, int nc, const uint8_t *packed,
                          const uint8_t *x, size_t xs, float *out, size_t os) {
    const int64_t nb = k / KERN_QK_K;
    const int g0 = r0 / KERN_PK_ROWS, g1 = (r0 + nr - 1) / KERN_PK_ROWS;
    const int pf = kern_prefetch_bytes();
#define S_NBK(b0) ((int)(nb - (b0) < KP_BK ? nb - (b0) : KP_BK))
    if (nc <= KP_CT) {
        for (int g = g0; g <= g1; g++)
            for (int64_t b0 = 0; b0 < nb; b0 += KP_BK)
                s_group_pass(T, nb, b0, S_NBK(b0), g, r0, nr, nc, packed, x, xs, out, os, pf);
    } else {
        for (int64_t b0 = 0; b0 < nb; b0 += KP_BK)
            for (int g = g0; g <= g1; g++)
                s_group_pass(T, nb, b0, S_NBK(b0), g, r0, nr, nc, packed, x, xs, out, os, pf);
    }
#undef S_NBK
}

KX_PACKED_ENTRY(KX(kern_gemm_kpacked), s_gemm_kpk, KX_KPK_TYPES, kx86_not_packed)
#endif
