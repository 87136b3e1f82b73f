/* gemm_packed_avx2.c - gemm of packed weights (layout in kern_cpu.h) in ymm
 * registers: AVX2 maddubs + madd here, and AVX-VNNI (VEX vpdpbusd) when
 * gemm_packed_avxvnni.c compiles this same file with PK_AVXVNNI.
 * A record's 64-byte step is two ymm of 8 rows each (a "half": rows 0..7 at
 * bytes 0..31, rows 8..15 at 32..63); an int32 lane is a row, so after the
 * steps of a block every lane holds its row's integer block sum - no
 * cross-lane sums.  Then per (8 rows, column, block): one conversion, one
 * multiply by dw * dx, one FMA (and one for the minimum), blocks in order, as
 * kern_ref_gemm_packed does: results are bitwise equal to it for every nc, r0
 * and nr.
 * Exact integers without VNNI: maddubs multiplies unsigned by signed bytes
 * into int16 pairs, which saturate above 32767.  The weight operand is always
 * a small unsigned level: nibbles 0..15 (sums of 16 products per int16 lane,
 * |sum| <= 16 * 15 * 128 = 30720), Q5 levels 0..31 (folded to int32 after 8
 * products: 31744), and Q8_0's biased byte q + 128 split into its two nibbles
 * (sum = 16 * hi + lo, each nibble sum as for Q4).  The bias of the levels
 * (8, 16, 128) is removed through the activation sums, as in the AVX-512 code.
 * nc = 1 (decode) streams the weights once, both halves per block, fetching
 * ahead; nc > 1 runs register tiles of 8 rows x PK_CT columns, the columns
 * reusing each block's records from L1.  The K-quants' packed gemm is
 * gemm_kpacked_avx2.c's; the entry point passes them on.
 */
#if defined(__x86_64__)
#include "kern_cpu.h"

#include <assert.h>
#include <immintrin.h>
#include <string.h>

#ifdef PK_AVXVNNI
#define PK_NAME kern_gemm_packed_avxvnni
#else
#define PK_NAME kern_gemm_packed_avx2
#endif

#define PK_INLINE static inline __attribute__((always_inline))
#define PK_CT 4      /* columns per register tile (8 rows each) */
#define PK_PREP 4096 /* prepared (column, block) entries per pass: 32 KiB of stack */
#define PK_BK 512    /* blocks per pass at most */
#ifndef PK_PF
#define PK_PF 12288 /* bytes of weights to prefetch ahead (0: none) */
#endif

#include "gemm_packed_x86.h"

/* The 4 bytes at p in every int32 lane (one vpbroadcastd from memory). */
PK_INLINE __m256i s_bcast(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#ifdef PK_AVXVNNI
/* acc + per-lane dot of 4 unsigned bytes of w with the 4 signed bytes at p. */
PK_INLINE __m256i s_dp(__m256i acc, __m256i w, const uint8_t *p) {
    return _mm256_dpbusd_avx_epi32(acc, w, s_bcast(p));
}
#else
/* a + int16 pair products of the unsigned bytes of w with the 4 signed bytes at p.
 * The empty asm keeps the sum a chain: GCC otherwise reassociates the integer
 * adds into a tree that holds every product at once and spills. */
PK_INLINE __m256i s_mad16(__m256i a, __m256i w, const uint8_t *p) {
    a = _mm256_add_epi16(a, _mm256_maddubs_epi16(w, s_bcast(p)));
    __asm__("" : "+x"(a));
    return a;
}
#endif

/* isum[c] = the integer block sums of the 8 rows of half h of record o (the
 * biased levels) with the activation levels xq[c], for C columns. */
PK_INLINE void s_isums(kern_type_t T, const int C, const uint8_t *o, int h,
                       const uint8_t *const *xq, __m256i *isum) {
    const int QHO = kern_pk_qh_off(T), H = 32 * h;
    const bool FIVE = T == KERN_Q5_0 || T == KERN_Q5_1;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#ifdef PK_AVXVNNI
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
PK_INLINE __m256i s_rowmask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* NH halves from h0 (NH 2: the whole group) x C columns over nbk blocks: rec
 * is the group's first record, x column 0 at the first block, prep column pc,
 * out row 0 of the group at column 0; rows of the group exist (1..16).
 * add: continue from the values in out (a later pass over k); pf: prefetch
 * the weights ahead (the first tile of a group; the others find them in L1). */
PK_INLINE void s_tile(kern_type_t T, const int NH, const int C, int h0, int nbk, const uint8_t *rec,
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

/* Passes over k (PK_BK blocks) and over columns (what fits PK_PREP), then
 * row groups, then (nc > 1) halves and column tiles: a half's records stay in
 * L1 while every column tile of the pass uses them.  Splitting k only stores
 * and reloads the exact accumulators, so it changes no result. */
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
                int rows = r0 + nr - g * KERN_PK_ROWS;
                rows = rows > KERN_PK_ROWS ? KERN_PK_ROWS : rows;
                const uint8_t *rec = packed + ((size_t)g * nb + b0) * REC;
                float *o = out + (size_t)c0 * os + (size_t)(g * KERN_PK_ROWS - r0);
                if (cn == 1) {
                    s_tile(T, 2, 1, 0, nbk, rec, xc, xs, &prep, 0, o, os, rows, b0 > 0, true);
                    continue;
                }
                for (int h = 0; h < 2 && 8 * h < rows; h++) {
                    int c = 0;
                    for (; c + PK_CT <= cn; c += PK_CT)
                        s_tile(T, 1, PK_CT, h, nbk, rec, xc + (size_t)c * xs, xs, &prep, c,
                               o + (size_t)c * os, os, rows, b0 > 0, c == 0 && h == 0);
                    const uint8_t *xt = xc + (size_t)c * xs;
                    float *ot = o + (size_t)c * os;
                    const bool pf = c == 0 && h == 0;
                    switch (cn - c) {
                    case 1:
                        s_tile(T, 1, 1, h, nbk, rec, xt, xs, &prep, c, ot, os, rows, b0 > 0, pf);
                        break;
                    case 2:
                        s_tile(T, 1, 2, h, nbk, rec, xt, xs, &prep, c, ot, os, rows, b0 > 0, pf);
                        break;
                    case 3:
                        s_tile(T, 1, 3, h, nbk, rec, xt, xs, &prep, c, ot, os, rows, b0 > 0, pf);
                        break;
                    default:
                        break;
                    }
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

#ifndef PK_AVXVNNI
/* The ymm tables' packed_size: the reference layout, for the types their
 * gemm_packed handles (and no other type the reference may pack). */
size_t kern_packed_size_avx2(kern_type_t wt, int64_t k, int nr) {
    switch (wt) {
    case KERN_Q4_0:
    case KERN_Q4_1:
    case KERN_Q5_0:
    case KERN_Q5_1:
    case KERN_Q8_0:
    case KERN_Q4_K:
    case KERN_Q5_K:
        return kern_ref_packed_size(wt, k, nr);
    /* Q6_K stays unpacked on AVX2: turning its two high-bit masks into bytes
     * without VPSHUFBITQMB costs more than the layout saves (test_kernels_kpacked's
     * bench, 2026-12-01: 0.95x at 576x1536 and 0.74x at 4096x4096 for nc = 1,
     * 0.86x / 0.98x for nc = 64); the AVX-512 table packs it (1.1x to 2.6x). */
    default:
        return 0;
    }
}
#endif

void PK_NAME(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed, const void *x,
             size_t x_stride, float *out, size_t out_stride) {
    if (kern_kpk_type(wt)) { /* K-quants: gemm_kpacked_avx2.c (AVX2 in both tables) */
        kern_gemm_kpacked_avx2(wt, k, r0, nr, nc, packed, x, x_stride, out, out_stride);
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
