/* gemm_x86.h - the x86 SIMD gemm and activation quantization, written once for
 * the x86 variants (the scheme: kern_cpu.h): gemm_avx2.c (AVX2/FMA/F16C:
 * maddubs + madd) and gemm_avx512.c (KX_ISA_AVX512: VNNI dot products,
 * 512-bit registers).
 * Quantized weights are dotted with Q8 activations in integer arithmetic, one
 * float scale per block.  Where the time goes:
 *   nc = 1 (decode) streams the weights once: AVX-512 applies the block scales
 *     16 blocks at a time (s_gemv512); AVX2 uses a 4-row tile (s_tile32).
 *   nc > 1 (prompt) is compute bound: register tiles (4 rows x 4 column pairs
 *     in zmm, s_tile512; 4 x 2 in ymm, s_tile32) decode each weight block
 *     once for several columns, inside row/column panels sized for L2.
 * K-quants decode a super-block once per tile (s_kload) and dot it with each
 * column (s_kmac); float weights convert and FMA (s_ftile: KF_RT x KF_CT
 * tiles, KF_RT1 rows for matrix x vector).
 * KX(name) gives the exported name of this variant.  No allocation: the
 * largest stack frame is about 40 KiB (prepared activation scales).
 */
#if defined(__x86_64__)
#include "kern_cpu.h"
#include "simd_x86.h"

#include <immintrin.h>
#include <string.h>

/* 1: every column of a gemm is computed by the same code whatever nc is (see s_gemm32). */
#ifndef KX_BATCH_INVARIANT
#define KX_BATCH_INVARIANT 1
#endif

/* ---- small helpers ------------------------------------------------------- */

KX_INLINE float s_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KX_INLINE int s_hsum256i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* acc + per-lane sums of u[i] * s[i] over groups of 4 bytes (u unsigned, s signed).
 * Without VNNI, u * s pairs must fit int16: u <= 127 or s small. */
KX_INLINE __m256i s_dot_us(__m256i acc, __m256i u, __m256i s) {
#ifdef KX_ISA_AVX512
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    __m256i p = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* 16 packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high ones. */
KX_INLINE __m256i s_nibbles(const uint8_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(w, _mm256_set1_epi8(0x0F));
}

/* ---- 32-element block types against Q8_0 / Q8_1 ------------------------- */

/* Weight block b of type T: levels u (as bytes), scale d, minimum m.
 * For Q4_0/Q5_0 the levels are unsigned and the offset (8, 16) is removed
 * through the activation sums; Q8_0 levels are signed (offset 128 with VNNI). */
KX_INLINE __m256i s_wblock(kern_type_t T, const uint8_t *p, float *d, float *m) {
    switch (T) {
    case KERN_Q4_0:
        *d = kx86_f16(p);
        return s_nibbles(p + 2);
    case KERN_Q4_1:
        *d = kx86_f16(p);
        *m = kx86_f16(p + 2);
        return s_nibbles(p + 4);
    case KERN_Q5_0:
        *d = kx86_f16(p);
        return _mm256_or_si256(s_nibbles(p + 6), kx86_bits5(p + 2));
    case KERN_Q5_1:
        *d = kx86_f16(p);
        *m = kx86_f16(p + 2);
        return _mm256_or_si256(s_nibbles(p + 8), kx86_bits5(p + 4));
    default: /* KERN_Q8_0 */
        *d = kx86_f16(p);
        return _mm256_loadu_si256((const __m256i *)(p + 2));
    }
}

KX_INLINE int s_wbytes(kern_type_t T) {
    switch (T) {
    case KERN_Q4_0:
        return sizeof(kern_block_q4_0);
    case KERN_Q4_1:
        return sizeof(kern_block_q4_1);
    case KERN_Q5_0:
        return sizeof(kern_block_q5_0);
    case KERN_Q5_1:
        return sizeof(kern_block_q5_1);
    default:
        return sizeof(kern_block_q8_0);
    }
}

KX_INLINE int s_offset(kern_type_t T) {
    switch (T) {
    case KERN_Q4_0:
        return 8;
    case KERN_Q5_0:
        return 16;
#ifdef KX_ISA_AVX512
    case KERN_Q8_0:
        return 128;
#endif
    default:
        return 0;
    }
}

KX_INLINE bool s_has_min(kern_type_t T) {
    return T == KERN_Q4_1 || T == KERN_Q5_1;
}

/* One RT x CT tile over nb blocks.  x columns are Q8_1 for types with a
 * minimum, Q8_0 otherwise. */
KX_INLINE void s_tile32(kern_type_t T, const int RT, const int CT, int64_t nb, const uint8_t *w,
                        size_t ws, const uint8_t *x, size_t xs, float *out, size_t os) {
    const int WB = s_wbytes(T);
    const bool MIN = s_has_min(T);
    const int XB = MIN ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = MIN ? 4 : 2;
    const int OFF = s_offset(T);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 4
        for (int c = 0; c < CT; c++)
            acc[r][c] = _mm256_setzero_ps();

    for (int64_t b = 0; b < nb; b++) {
        __m256i xq[4], corr[4];
        __m256 dx[4], sx[4];
#pragma GCC unroll 4
        for (int c = 0; c < CT; c++) {
            const uint8_t *xb = x + (size_t)c * xs + (size_t)b * XB;
            xq[c] = _mm256_loadu_si256((const __m256i *)(xb + XQ));
            dx[c] = _mm256_set1_ps(kx86_f16(xb));
            if (MIN)
                sx[c] = _mm256_set1_ps(kx86_f16(xb + 2) * 0.125f);
            if (OFF) {
                __m256i z = _mm256_setzero_si256();
                corr[c] = _mm256_sub_epi32(z, s_dot_us(z, _mm256_set1_epi8((char)OFF), xq[c]));
            } else {
                corr[c] = _mm256_setzero_si256();
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < RT; r++) {
            float d, m = 0;
            if (CT == 1) /* matrix x vector streams the weights: fetch ahead */
                _mm_prefetch((const char *)(w + (size_t)r * ws + (size_t)(b + 12) * WB),
                             _MM_HINT_T0);
            __m256i q = s_wblock(T, w + (size_t)r * ws + (size_t)b * WB, &d, &m);
#if !defined(KX_ISA_AVX512)
            __m256i qa = T == KERN_Q8_0 ? _mm256_sign_epi8(q, q) : q;
#else
            __m256i qa = T == KERN_Q8_0 ? _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)) : q;
#endif
            __m256 dw = _mm256_set1_ps(d);
            __m256 mv = _mm256_set1_ps(m);
#pragma GCC unroll 4
            for (int c = 0; c < CT; c++) {
                __m256i xs_ = xq[c];
#if !defined(KX_ISA_AVX512)
                if (T == KERN_Q8_0)
                    xs_ = _mm256_sign_epi8(xs_, q);
#endif
                __m256i si = s_dot_us(corr[c], qa, xs_);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(dw, dx[c]), acc[r][c]);
                if (MIN)
                    acc[r][c] = _mm256_fmadd_ps(mv, sx[c], acc[r][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 4
        for (int c = 0; c < CT; c++)
            out[(size_t)c * os + r] = s_hsum256(acc[r][c]);
}

#ifdef KX_ISA_AVX512
/* ---- matrix x vector (nc = 1) for the 32-element types with AVX-512 -------
 * Decode is bound by the instructions spent per weight block, so the scales
 * are applied 16 blocks at a time: integer dot products whose reduction tree
 * leaves the 16 block sums of a row in one zmm (in the order s_gperm(T)), then
 * one gather of the 16 weight scales (and minimums), one conversion and one
 * FMA.  The activation side (scales, sums, offset corrections) is prepared
 * once per call in that same order.
 * Nibble types: a zmm holds 16 bytes of each of 4 blocks (one block per
 * 128-bit lane), low nibbles in one register and high in another, so two
 * VNNI steps leave each block's partial sums in its own lane.
 * Q8_0: a zmm holds 2 whole blocks (lanes: b, b, b+1, b+1). */

#define KV_CHUNK 128 /* blocks of activations prepared at a time */

static const int s_perm_q8[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
static const int s_perm_nib[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

KX_INLINE const int *s_gperm(kern_type_t T) {
    return T == KERN_Q8_0 ? s_perm_q8 : s_perm_nib;
}

KX_INLINE __m512i s_red1(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

KX_INLINE __m512i s_red2(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* Lanes L0,L1 of each input hold one block and L2,L3 the next: add the pairs. */
KX_INLINE __m512i s_red3(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 16 bytes at offset off of each of 4 blocks b .. b+3 (stride bs), one per lane. */
KX_INLINE __m512i s_quad(const uint8_t *p, int bs) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + bs)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 2 * bs)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 3 * bs)), 3);
}

/* Fifth bits of 4 blocks (qh at p, stride bs) as byte masks for the low
 * (elements 0..15) and high (16..31) halves, block i in bytes 16i..16i+15. */
KX_INLINE void s_quad_bits5(const uint8_t *p, int bs, __mmask64 *lo, __mmask64 *hi) {
    int32_t h[4];
    for (int i = 0; i < 4; i++)
        memcpy(&h[i], p + i * bs, 4);
    __m128i v = _mm_setr_epi32(h[0], h[1], h[2], h[3]);
    v = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    *lo = (__mmask64)_mm_cvtsi128_si64(v);
    *hi = (__mmask64)_mm_extract_epi64(v, 1);
}

/* The activations of NX columns (blocks c0 .. c0+cn-1), laid out once per
 * call so that the row loop takes them straight from L1: per 16-block group,
 * 8 zmm in the lane order of the weights (s_gemv_group), and the scales, sums
 * and offset corrections in s_gperm(T) order. */
typedef struct {
    __m512i xq[4][KV_CHUNK / 2]; /* [column][group * 8 + i] */
    float dx[4][KV_CHUNK];
    float sx[4][KV_CHUNK];
    int32_t corr[4][KV_CHUNK];
} s_gemv_x_t;

KX_INLINE void s_gemv_prep(kern_type_t T, int NX, int ng, const uint8_t *x, size_t xs,
                           s_gemv_x_t *p) {
    const bool MIN = s_has_min(T);
    const int XB = MIN ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = MIN ? 4 : 2;
    const int OFF = s_offset(T);
    for (int c = 0; c < NX; c++) {
        const uint8_t *xc = x + (size_t)c * xs;
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = xc + (size_t)16 * g * XB + XQ;
            __m512i *q = p->xq[c] + 8 * g;
            if (T == KERN_Q8_0) {
                for (int i = 0; i < 8; i++)
                    q[i] = _mm512_inserti64x4(
                        _mm512_castsi256_si512(
                            _mm256_loadu_si256((const __m256i *)(xg + 2 * i * XB))),
                        _mm256_loadu_si256((const __m256i *)(xg + (2 * i + 1) * XB)), 1);
            } else {
                for (int i = 0; i < 4; i++) {
                    q[2 * i] = s_quad(xg + 4 * i * XB, XB);
                    q[2 * i + 1] = s_quad(xg + 4 * i * XB + 16, XB);
                }
            }
            for (int j = 0; j < 16; j++) {
                const uint8_t *xb = xc + (size_t)(16 * g + s_gperm(T)[j]) * XB;
                p->dx[c][16 * g + j] = kx86_f16(xb);
                p->sx[c][16 * g + j] = MIN ? kx86_f16(xb + 2) : 0.0f;
                int sum = 0;
                if (OFF)
                    for (int i = 0; i < 32; i++)
                        sum += (int8_t)xb[XQ + i];
                p->corr[c][16 * g + j] = -OFF * sum;
            }
        }
    }
}

/* One 16-block group of one row, dotted with NX prepared columns: acc[c] +=. */
KX_INLINE void s_gemv_group(kern_type_t T, const int NX, const uint8_t *wb, int g,
                            const s_gemv_x_t *p, __m512i gidx, __m512 *acc) {
    const int WB = s_wbytes(T);
    const bool MIN = s_has_min(T);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i wq[8]; /* the weights, in the lane order of p->xq */
    if (T == KERN_Q8_0) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const uint8_t *pb = wb + (size_t)(2 * i) * WB + 2;
            __m512i z =
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pb)),
                                   _mm256_loadu_si256((const __m256i *)(pb + WB)), 1);
            wq[i] = _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80));
        }
    } else {
        const int QO = T == KERN_Q4_0 ? 2 : T == KERN_Q4_1 ? 4 : T == KERN_Q5_0 ? 6 : 8;
        const int HO = T == KERN_Q5_0 ? 2 : 4;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m512i z = s_quad(wb + (size_t)(4 * i) * WB + QO, WB);
            __m512i lo = _mm512_and_si512(z, m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
            if (T == KERN_Q5_0 || T == KERN_Q5_1) {
                const __m512i b4 = _mm512_set1_epi8(0x10);
                __mmask64 mlo, mhi;
                s_quad_bits5(wb + (size_t)(4 * i) * WB + HO, WB, &mlo, &mhi);
                lo = _mm512_mask_mov_epi8(lo, mlo, _mm512_or_si512(lo, b4));
                hi = _mm512_mask_mov_epi8(hi, mhi, _mm512_or_si512(hi, b4));
            }
            wq[2 * i] = lo;
            wq[2 * i + 1] = hi;
        }
    }
    /* the 16 scales (and minimums) of this row's blocks, in s_gperm order */
    __m512i gs = _mm512_i32gather_epi32(gidx, wb, 1);
    __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gs));
    __m512 mw = _mm512_setzero_ps();
    if (MIN)
        mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(gs, 16)));
#pragma GCC unroll 4
    for (int c = 0; c < NX; c++) {
        const __m512i *xq = p->xq[c] + 8 * g;
        __m512i sums;
        if (T == KERN_Q8_0) {
            __m512i l1[4];
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                l1[q] = s_red1(
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[2 * q], xq[2 * q]),
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[2 * q + 1], xq[2 * q + 1]));
            sums = s_red3(s_red2(l1[0], l1[1]), s_red2(l1[2], l1[3]));
        } else {
            __m512i d[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                d[i] = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[2 * i], xq[2 * i]),
                    wq[2 * i + 1], xq[2 * i + 1]);
            sums = s_red2(s_red1(d[0], d[1]), s_red1(d[2], d[3]));
        }
        if (!MIN)
            sums = _mm512_add_epi32(sums, _mm512_loadu_si512(p->corr[c] + 16 * g));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                 _mm512_mul_ps(dw, _mm512_loadu_ps(p->dx[c] + 16 * g)), acc[c]);
        if (MIN)
            acc[c] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(p->sx[c] + 16 * g), acc[c]);
    }
}

/* out[c * os + i] (+)= W[i] . x_c for RT rows and NX columns: ng full groups
 * from the prepared columns, then the last `tail` blocks one at a time (wt,
 * xt: the same rows and columns from there).  Several rows at a time keep the
 * core busy when rows are short; the tail is done while the rows are hot. */
KX_INLINE void s_gemv_tile(kern_type_t T, const int RT, const int NX, int ng, const uint8_t *w,
                           size_t ws, const s_gemv_x_t *p, __m512i gidx, int tail,
                           const uint8_t *wt, const uint8_t *xt, size_t xs, bool add, float *out,
                           size_t os) {
    const int WB = s_wbytes(T);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < RT; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++)
            acc[i][c] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++)
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++)
            s_gemv_group(T, NX, w + (size_t)i * ws + (size_t)16 * g * WB, g, p, gidx, acc[i]);
    float t[4 * 4] = {0}; /* [column][row] */
    if (tail)
        s_tile32(T, RT, NX, tail, wt, ws, xt, xs, t, 4);
#pragma GCC unroll 4
    for (int i = 0; i < RT; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NX; c++) {
            float v = _mm512_reduce_add_ps(acc[i][c]) + t[4 * c + i];
            float *o = out + (size_t)c * os + i;
            *o = add ? *o + v : v;
        }
}

/* out[c * os + r] = W[r] . x_c for nr rows and NX (1..4) columns of Q8_0 /
 * Q8_1 activations: the weights are decoded once for all the columns. */
KX_INLINE void s_gemv512(kern_type_t T, const int NX, int64_t k, int nr, const uint8_t *w,
                         size_t ws, const uint8_t *x, size_t xs, float *out, size_t os) {
    const int64_t nb = k / KERN_QK;
    const int XB = s_has_min(T) ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int WB = s_wbytes(T);
    const __m512i gidx = _mm512_mullo_epi32(_mm512_loadu_si512(s_gperm(T)), _mm512_set1_epi32(WB));
    const int RT = NX == 1 ? 4 : 2;
    s_gemv_x_t prep __attribute__((aligned(64)));
    for (int64_t c0 = 0; c0 < nb; c0 += KV_CHUNK) {
        const int cn = (int)(nb - c0 < KV_CHUNK ? nb - c0 : KV_CHUNK);
        const int ng = cn / 16, tail = cn % 16;
        s_gemv_prep(T, NX, ng, x + (size_t)c0 * XB, xs, &prep);
        const uint8_t *wc = w + (size_t)c0 * WB;
        const uint8_t *xt = x + (size_t)(c0 + 16 * ng) * XB;
        const size_t toff = (size_t)16 * ng * WB;
        int r = 0;
        for (; r + RT <= nr; r += RT)
            s_gemv_tile(T, RT, NX, ng, wc + (size_t)r * ws, ws, &prep, gidx, tail,
                        wc + (size_t)r * ws + toff, xt, xs, c0 > 0, out + r, os);
        for (; r < nr; r++)
            s_gemv_tile(T, 1, NX, ng, wc + (size_t)r * ws, ws, &prep, gidx, tail,
                        wc + (size_t)r * ws + toff, xt, xs, c0 > 0, out + r, os);
    }
}

/* One function per (type, column count), so that each stays small. */
typedef void (*s_gemv_fn)(int64_t, int, const uint8_t *, size_t, const uint8_t *, size_t, float *,
                          size_t);
#define KX_GEMV_FN(name, TT, NX)                                                                   \
    static __attribute__((noinline)) void name(int64_t k, int nr, const uint8_t *w, size_t ws,     \
                                               const uint8_t *x, size_t xs, float *out,            \
                                               size_t os) {                                        \
        s_gemv512(TT, NX, k, nr, w, ws, x, xs, out, os);                                           \
    }
#define KX_GEMV_FNS(tn, TT)                                                                        \
    KX_GEMV_FN(s_gemv_##tn##_1, TT, 1)                                                             \
    KX_GEMV_FN(s_gemv_##tn##_2, TT, 2)                                                             \
    KX_GEMV_FN(s_gemv_##tn##_3, TT, 3)                                                             \
    KX_GEMV_FN(s_gemv_##tn##_4, TT, 4)
KX_GEMV_FNS(q4_0, KERN_Q4_0)
KX_GEMV_FNS(q4_1, KERN_Q4_1)
KX_GEMV_FNS(q5_0, KERN_Q5_0)
KX_GEMV_FNS(q5_1, KERN_Q5_1)
KX_GEMV_FNS(q8_0, KERN_Q8_0)
#undef KX_GEMV_FN
#undef KX_GEMV_FNS
#define KX_GEMV_ROW(tn)                                                                            \
    { s_gemv_##tn##_1, s_gemv_##tn##_2, s_gemv_##tn##_3, s_gemv_##tn##_4 }
/* [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0][nc - 1] */
static const s_gemv_fn s_gemv_tab[5][4] = {KX_GEMV_ROW(q4_0), KX_GEMV_ROW(q4_1), KX_GEMV_ROW(q5_0),
                                           KX_GEMV_ROW(q5_1), KX_GEMV_ROW(q8_0)};
#undef KX_GEMV_ROW
#endif

#ifdef KX_ISA_AVX512
#define KX_RT 4
#define KX_CT 4
#else
#define KX_RT 4
#define KX_CT 2
#endif

/* Cache blocking for prompt processing: a panel of rows (weights, ~512 KiB)
 * against a panel of columns (activations, ~192 KiB) stays in L2 while the
 * register tiles sweep it. */
static inline void s_panels(int64_t row_bytes, int64_t col_bytes, int nr, int nc, int rt, int ct,
                            int *rp, int *cp) {
    int64_t r = (512 << 10) / (row_bytes > 0 ? row_bytes : 1);
    int64_t c = (192 << 10) / (col_bytes > 0 ? col_bytes : 1);
    r = r < rt ? rt : r - r % rt;
    c = c < ct ? ct : c - c % ct;
    *rp = r > nr ? nr : (int)r;
    *cp = c > nc ? nc : (int)c;
}

KX_INLINE void s_block32(kern_type_t T, int64_t nb, int nr, int nc, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *out, size_t os) {
    int r = 0;
    for (; r + KX_RT <= nr; r += KX_RT) {
        int c = 0;
        for (; c + KX_CT <= nc; c += KX_CT)
            s_tile32(T, KX_RT, KX_CT, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                     out + (size_t)c * os + r, os);
        for (; c < nc; c++)
            s_tile32(T, KX_RT, 1, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                     out + (size_t)c * os + r, os);
    }
    for (; r < nr; r++) {
        int c = 0;
        for (; c + KX_CT <= nc; c += KX_CT)
            s_tile32(T, 1, KX_CT, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                     out + (size_t)c * os + r, os);
        for (; c < nc; c++)
            s_tile32(T, 1, 1, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                     out + (size_t)c * os + r, os);
    }
}

#ifdef KX_ISA_AVX512
/* ---- prompt processing (nc > 1) for the 32-element types with AVX-512 ------
 * A zmm holds one block of two columns (c, c+1); the weight block is
 * broadcast to both halves, so each VNNI instruction does 64 products.  The
 * tile is 4 rows x 4 column pairs.  Offsets (Q4_0, Q5_0, and the +128 that
 * makes Q8_0 unsigned) are removed in integer arithmetic; the minimum of
 * Q4_1/Q5_1 adds sum_b m[b] * s[b], done after the main loop 16 blocks at a
 * time.  dxf/sxf: the activation scales / sums as floats, column c at c * nb. */

#define KP_MAXF 4096 /* floats of prepared activation scales per column panel (16 KiB) */

KX_INLINE __m512 s_pair_ps(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* Sums of the low and high 256-bit halves of v. */
KX_INLINE void s_hsum_pair(__m512 v, float *lo, float *hi) {
    __m256 a = _mm512_castps512_ps256(v), b = _mm512_extractf32x8_ps(v, 1);
    __m256 s =
        _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    s = _mm256_hadd_ps(s, s);
    s = _mm256_hadd_ps(s, s);
    *lo = _mm256_cvtss_f32(s);
    *hi = _mm_cvtss_f32(_mm256_extractf128_ps(s, 1));
}

KX_INLINE void s_tile512(kern_type_t T, const int RT, const int CP, int64_t nb, const uint8_t *w,
                         size_t ws, const uint8_t *x, size_t xs, const float *dxf, const float *sxf,
                         int ncv, float *out, size_t os) {
    const int WB = s_wbytes(T);
    const bool MIN = s_has_min(T);
    const int XB = MIN ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = MIN ? 4 : 2;
    const int OFF = s_offset(T);
    int cidx[8];
#pragma GCC unroll 8
    for (int c = 0; c < 2 * CP; c++)
        cidx[c] = c < ncv ? c : ncv - 1; /* a missing last column repeats the one before */
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 4
        for (int p = 0; p < CP; p++)
            acc[r][p] = _mm512_setzero_ps();

    for (int64_t b = 0; b < nb; b++) {
        __m512i xz[4], corr[4];
        __m512 dxz[4];
#pragma GCC unroll 4
        for (int p = 0; p < CP; p++) {
            const int c0 = cidx[2 * p], c1 = cidx[2 * p + 1];
            const uint8_t *x0 = x + (size_t)c0 * xs + (size_t)b * XB + XQ;
            const uint8_t *x1 = x + (size_t)c1 * xs + (size_t)b * XB + XQ;
            xz[p] =
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0)),
                                   _mm256_loadu_si256((const __m256i *)x1), 1);
            dxz[p] = s_pair_ps(dxf[(size_t)c0 * nb + b], dxf[(size_t)c1 * nb + b]);
            corr[p] = _mm512_setzero_si512();
            if (OFF)
                corr[p] = _mm512_sub_epi32(
                    corr[p], _mm512_dpbusd_epi32(corr[p], _mm512_set1_epi8((char)OFF), xz[p]));
        }
#pragma GCC unroll 4
        for (int r = 0; r < RT; r++) {
            float d, m = 0;
            __m256i q = s_wblock(T, w + (size_t)r * ws + (size_t)b * WB, &d, &m);
            if (T == KERN_Q8_0)
                q = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
            const __m512i qz = _mm512_broadcast_i64x4(q);
            const __m512 dw = _mm512_set1_ps(d);
#pragma GCC unroll 4
            for (int p = 0; p < CP; p++) {
                __m512i si = _mm512_dpbusd_epi32(corr[p], qz, xz[p]);
                acc[r][p] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(dw, dxz[p]), acc[r][p]);
            }
        }
    }
    if (MIN) {
        const __m512i gidx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(WB));
#pragma GCC unroll 4
        for (int r = 0; r < RT; r++) {
            __m512 macc[8];
#pragma GCC unroll 8
            for (int c = 0; c < 2 * CP; c++)
                macc[c] = _mm512_setzero_ps();
            for (int64_t g = 0; g < nb; g += 16) {
                __mmask16 mk = nb - g >= 16 ? 0xFFFF : (__mmask16)((1u << (nb - g)) - 1);
                __m512i mh = _mm512_mask_i32gather_epi32(
                    _mm512_setzero_si512(), mk, gidx, w + (size_t)r * ws + (size_t)g * WB + 2, 1);
                __m512 mv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(mh));
#pragma GCC unroll 8
                for (int c = 0; c < 2 * CP; c++)
                    macc[c] = _mm512_fmadd_ps(
                        mv, _mm512_maskz_loadu_ps(mk, sxf + (size_t)cidx[c] * nb + g), macc[c]);
            }
#pragma GCC unroll 4
            for (int p = 0; p < CP; p++) {
                __m256 a = _mm256_add_ps(_mm512_castps512_ps256(macc[2 * p]),
                                         _mm512_extractf32x8_ps(macc[2 * p], 1));
                __m256 bb = _mm256_add_ps(_mm512_castps512_ps256(macc[2 * p + 1]),
                                          _mm512_extractf32x8_ps(macc[2 * p + 1], 1));
                acc[r][p] =
                    _mm512_add_ps(acc[r][p], _mm512_insertf32x8(_mm512_castps256_ps512(a), bb, 1));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RT; r++) {
#pragma GCC unroll 4
        for (int p = 0; p < CP; p++) {
            float lo, hi;
            s_hsum_pair(acc[r][p], &lo, &hi);
            if (2 * p < ncv)
                out[(size_t)(2 * p) * os + r] = lo;
            if (2 * p + 1 < ncv)
                out[(size_t)(2 * p + 1) * os + r] = hi;
        }
    }
}

/* One row panel x column panel with the zmm tiles (nc * nb <= KP_MAXF). */
KX_INLINE void s_block512(kern_type_t T, int64_t nb, int nr, int nc, const uint8_t *w, size_t ws,
                          const uint8_t *x, size_t xs, float *out, size_t os) {
    const bool MIN = s_has_min(T);
    const int XB = MIN ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    if ((int64_t)nc * nb > KP_MAXF) { /* not reached: s_gemm32 sizes the panels */
        s_block32(T, nb, nr, nc, w, ws, x, xs, out, os);
        return;
    }
    float dxf[KP_MAXF], sxf[MIN ? KP_MAXF : 1];
    for (int c = 0; c < nc; c++) {
        const uint8_t *xc = x + (size_t)c * xs;
        for (int64_t b = 0; b < nb; b++) {
            dxf[(size_t)c * nb + b] = kx86_f16(xc + (size_t)b * XB);
            if (MIN)
                sxf[(size_t)c * nb + b] = kx86_f16(xc + (size_t)b * XB + 2);
        }
    }
    const float *sx = MIN ? sxf : NULL;
    int r = 0;
    for (; r + 4 <= nr; r += 4) {
        int c = 0;
        for (; c + 8 <= nc; c += 8)
            s_tile512(T, 4, 4, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                      dxf + (size_t)c * nb, MIN ? sx + (size_t)c * nb : NULL, 8,
                      out + (size_t)c * os + r, os);
        if (c < nc) { /* 1 to 7 columns left: one tile of 1 to 4 pairs */
            const int left = nc - c, pairs = (left + 1) / 2;
            const float *sxc = MIN ? sx + (size_t)c * nb : NULL;
            if (pairs == 1)
                s_tile512(T, 4, 1, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                          dxf + (size_t)c * nb, sxc, left, out + (size_t)c * os + r, os);
            else if (pairs == 2)
                s_tile512(T, 4, 2, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                          dxf + (size_t)c * nb, sxc, left, out + (size_t)c * os + r, os);
            else if (pairs == 3)
                s_tile512(T, 4, 3, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                          dxf + (size_t)c * nb, sxc, left, out + (size_t)c * os + r, os);
            else
                s_tile512(T, 4, 4, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                          dxf + (size_t)c * nb, sxc, left, out + (size_t)c * os + r, os);
        }
    }
    for (; r < nr; r++) {
        int c = 0;
        for (; c + 8 <= nc; c += 8)
            s_tile512(T, 1, 4, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                      dxf + (size_t)c * nb, MIN ? sx + (size_t)c * nb : NULL, 8,
                      out + (size_t)c * os + r, os);
        for (; c < nc; c += 2)
            s_tile512(T, 1, 1, nb, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                      dxf + (size_t)c * nb, MIN ? sx + (size_t)c * nb : NULL, nc - c < 2 ? 1 : 2,
                      out + (size_t)c * os + r, os);
    }
}
#endif

KX_INLINE void s_gemm32(kern_type_t T, int64_t k, int nr, int nc, const uint8_t *w, size_t ws,
                        const uint8_t *x, size_t xs, float *out, size_t os) {
    int64_t nb = k / KERN_QK;
#ifdef KX_ISA_AVX512
    if (nc <= 4 || KX_BATCH_INVARIANT) {
        /* A few columns: decode and matrix x vector are the same problem.  With
         * KX_BATCH_INVARIANT every nc takes this path, 4 columns at a time: each
         * column then sees the same float operations whatever else is in the
         * batch, so a sequence's logits do not depend on batch composition
         * (continuous batching must reproduce single-sequence greedy output). */
        const int ti = T == KERN_Q4_0   ? 0
                       : T == KERN_Q4_1 ? 1
                       : T == KERN_Q5_0 ? 2
                       : T == KERN_Q5_1 ? 3
                                        : 4;
        /* Many columns: walk the rows in panels that stay in L2 while every
         * 4-column group passes over them (panels are multiples of 16 rows, so
         * a row's arithmetic is the same as in one unpanelled call). */
        int rb = nc <= 4 ? nr : (int)((256 * 1024) / (ws ? ws : 1)) & ~15;
        if (rb < 16)
            rb = 16;
        for (int r0 = 0; r0 < nr; r0 += rb) {
            int rn = nr - r0 < rb ? nr - r0 : rb;
            for (int c0 = 0; c0 < nc; c0 += 4) {
                int m = nc - c0 < 4 ? nc - c0 : 4;
                s_gemv_tab[ti][m - 1](k, rn, w + (size_t)r0 * ws, ws, x + (size_t)c0 * xs, xs,
                                      out + (size_t)c0 * os + r0, os);
            }
        }
        return;
    }
#endif
    if (nc == 1) {
        /* matrix x vector: stream the rows, KX_RT at a time */
        int r = 0;
        for (; r + KX_RT <= nr; r += KX_RT)
            s_tile32(T, KX_RT, 1, nb, w + (size_t)r * ws, ws, x, xs, out + r, os);
        for (; r < nr; r++)
            s_tile32(T, 1, 1, nb, w + (size_t)r * ws, ws, x, xs, out + r, os);
        return;
    }
    int rp, cp;
    s_panels(nb * s_wbytes(T), nb * (s_has_min(T) ? 36 : 34), nr, nc, KX_RT, KX_CT, &rp, &cp);
#ifdef KX_ISA_AVX512
    /* the prepared activation scales of a column panel must fit KP_MAXF */
    int cz = (int64_t)cp * nb > KP_MAXF ? (int)(KP_MAXF / nb) & ~7 : cp;
    if (cz >= 1 && (cz >= 8 || cz >= nc)) {
        for (int r0 = 0; r0 < nr; r0 += rp)
            for (int c0 = 0; c0 < nc; c0 += cz)
                s_block512(T, nb, nr - r0 < rp ? nr - r0 : rp, nc - c0 < cz ? nc - c0 : cz,
                           w + (size_t)r0 * ws, ws, x + (size_t)c0 * xs, xs,
                           out + (size_t)c0 * os + r0, os);
        return;
    }
#endif
    for (int r0 = 0; r0 < nr; r0 += rp)
        for (int c0 = 0; c0 < nc; c0 += cp)
            s_block32(T, nb, nr - r0 < rp ? nr - r0 : rp, nc - c0 < cp ? nc - c0 : cp,
                      w + (size_t)r0 * ws, ws, x + (size_t)c0 * xs, xs, out + (size_t)c0 * os + r0,
                      os);
}

/* ---- K-quants against Q8_K ----------------------------------------------
 * A super-block is decoded once into 8 chunks of 32 unsigned levels and, per
 * chunk, an int16 scale vector for madd; the minimum (Q4_K, Q5_K) or the -32
 * offset (Q6_K) comes from the activation group sums:
 *   dot = dx * (d * sum_t <q_t, x_t>_scaled + dm * sum_g mc[g] * bsums[g]). */

#ifdef KX_ISA_AVX512
/* AVX-512: a zmm holds two chunks (t = 2p, 2p+1), so each instruction covers
 * 64 levels; the per-chunk scales are laid out by vpermw. */
typedef struct {
    __m512i q[4];   /* levels of chunks 2p (low half) and 2p+1 (high half) */
    __m512i scv[4]; /* int16 scales for the 32 byte pairs of q[p] */
    __m256i mc;     /* int16 coefficient of each of the 16 bsums */
    float d, dm;    /* scale of the scaled dot, and of the bsums term */
} s_kblk_t;
typedef __m512 s_kacc_t;
#define s_kacc_zero() _mm512_setzero_ps()
#define s_kacc_sum(v) _mm512_reduce_add_ps(v)

/* vpermw index of pair p: Q4_K/Q5_K take scale 2p for 16 lanes, then 2p+1;
 * Q6_K (16-element groups) takes 4p, 4p+1, 4p+2, 4p+3 for 8 lanes each. */
static const int16_t s_kperm[2][4][32] __attribute__((aligned(64))) = {
#define KP8(p)                                                                                     \
    {                                                                                              \
        2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, \
            2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, \
            2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,           \
            2 * p + 1, 2 * p + 1, 2 * p + 1                                                        \
    }
#define KP16(p)                                                                                    \
    {                                                                                              \
        4 * p, 4 * p, 4 * p, 4 * p, 4 * p, 4 * p, 4 * p, 4 * p, 4 * p + 1, 4 * p + 1, 4 * p + 1,   \
            4 * p + 1, 4 * p + 1, 4 * p + 1, 4 * p + 1, 4 * p + 1, 4 * p + 2, 4 * p + 2,           \
            4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p + 3,           \
            4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 3            \
    }
    {KP8(0), KP8(1), KP8(2), KP8(3)},
    {KP16(0), KP16(1), KP16(2), KP16(3)},
#undef KP8
#undef KP16
};

KX_INLINE void s_kload(kern_type_t T, const uint8_t *p, s_kblk_t *s) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i sc; /* int16 scales in lanes 0..7 (K4/K5) or 0..15 (K6) */
    if (T == KERN_Q6_K) {
        const kern_block_q6_K *b = (const kern_block_q6_K *)p;
        const __m512i m3 = _mm512_set1_epi8(3);
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++) {
            __m512i L = _mm512_loadu_si512(b->ql + 64 * n); /* ql of chunks 4n+0 | 4n+1 */
            __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * n));
            __m512i H = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
            s->q[2 * n] = _mm512_or_si512(_mm512_and_si512(L, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(H, m3), 4));
            s->q[2 * n + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(H, 4), m3), 4));
        }
        __m128i s8 = _mm_loadu_si128((const __m128i *)b->scales);
        s->mc = _mm256_cvtepi8_epi16(s8);
        sc = _mm512_castsi256_si512(s->mc);
        s->d = kx86_f16(&b->d);
        s->dm = -32.0f * s->d;
    } else {
        const uint8_t *scales, *qs;
        if (T == KERN_Q4_K) {
            const kern_block_q4_K *b = (const kern_block_q4_K *)p;
            scales = b->scales, qs = b->qs;
            s->d = kx86_f16(&b->d);
            s->dm = -kx86_f16(&b->dmin);
        } else {
            const kern_block_q5_K *b = (const kern_block_q5_K *)p;
            scales = b->scales, qs = b->qs;
            s->d = kx86_f16(&b->d);
            s->dm = -kx86_f16(&b->dmin);
        }
        __m512i hz = _mm512_setzero_si512();
        if (T == KERN_Q5_K)
            hz = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)((const kern_block_q5_K *)p)->qh));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
            z = _mm512_and_si512(z, m4);
            if (T == KERN_Q5_K) {
                /* chunk 2c takes bit 2c of qh, chunk 2c+1 bit 2c+1 */
                const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
                                                        _mm256_set1_epi8((char)(2 << (2 * c))), 1);
                __mmask64 k = _mm512_test_epi8_mask(hz, bits);
                z = _mm512_or_si512(z, _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x10)));
            }
            s->q[c] = z;
        }
        uint32_t w0, w1, w2;
        memcpy(&w0, scales, 4);
        memcpy(&w1, scales + 4, 4);
        memcpy(&w2, scales + 8, 4);
        uint32_t sc_lo = w0 & 0x3F3F3F3Fu;
        uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
        uint32_t m_lo = w1 & 0x3F3F3F3Fu;
        uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
        __m128i v = _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
        __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
        sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(v));
        s->mc = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m16, m16)),
                                        _mm_unpackhi_epi16(m16, m16), 1);
    }
    const int16_t(*perm)[32] = s_kperm[T == KERN_Q6_K];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        s->scv[q] = _mm512_permutexvar_epi16(_mm512_load_si512(perm[q]), sc);
}

KX_INLINE s_kacc_t s_kmac(const s_kblk_t *s, const kern_block_q8_K *xb, s_kacc_t acc) {
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int q = 0; q < 4; q += 2) {
        __m512i p0 = _mm512_maddubs_epi16(s->q[q], _mm512_loadu_si512(xb->qs + 64 * q));
        __m512i p1 = _mm512_maddubs_epi16(s->q[q + 1], _mm512_loadu_si512(xb->qs + 64 * q + 64));
        a0 = _mm512_add_epi32(a0, _mm512_madd_epi16(p0, s->scv[q]));
        a1 = _mm512_add_epi32(a1, _mm512_madd_epi16(p1, s->scv[q + 1]));
    }
    __m256i ms = _mm256_madd_epi16(s->mc, _mm256_loadu_si256((const __m256i *)xb->bsums));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)),
                          _mm512_set1_ps(s->d * xb->d), acc);
    return _mm512_fmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(ms)),
                           _mm512_set1_ps(s->dm * xb->d), acc);
}
#else
typedef struct {
    __m256i q[8];   /* levels of chunk t (elements 32t .. 32t+31) */
    __m256i scv[8]; /* int16 scales for the 16 byte pairs of chunk t */
    __m256i mc;     /* int16 coefficient of each of the 16 bsums */
    float d, dm;    /* scale of the scaled dot, and of the bsums term */
} s_kblk_t;
typedef __m256 s_kacc_t;
#define s_kacc_zero() _mm256_setzero_ps()
#define s_kacc_sum(v) s_hsum256(v)

/* ctrl[t]: pick int16 element t of each 128-bit lane, in all 8 positions. */
static const uint8_t s_kctrl[8][32] __attribute__((aligned(32))) = {
#define KC(t)                                                                                      \
    {                                                                                              \
        2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1,  \
            2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t,         \
            2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1, 2 * t, 2 * t + 1,     \
            2 * t, 2 * t + 1, 2 * t, 2 * t + 1                                                     \
    }
    KC(0), KC(1), KC(2), KC(3), KC(4),
    KC(5), KC(6), KC(7)
#undef KC
};

KX_INLINE void s_kload(kern_type_t T, const uint8_t *p, s_kblk_t *s) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i sc2; /* both 128-bit lanes: the 8 int16 values chunk t picks from */
    if (T == KERN_Q6_K) {
        const kern_block_q6_K *b = (const kern_block_q6_K *)p;
        const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * n));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * n + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * n));
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, m3), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4);
            __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4);
            __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4);
            s->q[4 * n + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), h0);
            s->q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), h1);
            s->q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2);
            s->q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3);
        }
        /* chunk t covers groups 2t (low lane) and 2t+1 (high lane) */
        __m128i s8 = _mm_loadu_si128((const __m128i *)b->scales);
        __m128i eo = _mm_shuffle_epi8(
            s8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
        sc2 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepi8_epi16(eo)),
                                      _mm_cvtepi8_epi16(_mm_srli_si128(eo, 8)), 1);
        s->mc = _mm256_cvtepi8_epi16(s8);
        s->d = kx86_f16(&b->d);
        s->dm = -32.0f * s->d;
    } else {
        const uint8_t *scales, *qs;
        if (T == KERN_Q4_K) {
            const kern_block_q4_K *b = (const kern_block_q4_K *)p;
            scales = b->scales, qs = b->qs;
            s->d = kx86_f16(&b->d);
            s->dm = -kx86_f16(&b->dmin);
        } else {
            const kern_block_q5_K *b = (const kern_block_q5_K *)p;
            scales = b->scales, qs = b->qs;
            s->d = kx86_f16(&b->d);
            s->dm = -kx86_f16(&b->dmin);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            s->q[2 * c] = _mm256_and_si256(v, m4);
            s->q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        if (T == KERN_Q5_K) {
            const kern_block_q5_K *b = (const kern_block_q5_K *)p;
            __m256i h = _mm256_loadu_si256((const __m256i *)b->qh);
            const __m256i b4 = _mm256_set1_epi8(0x10);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                /* bit j of each byte, moved to bit 4 */
                __m256i bit = j <= 4 ? _mm256_slli_epi16(h, 4 - j) : _mm256_srli_epi16(h, j - 4);
                s->q[j] = _mm256_or_si256(s->q[j], _mm256_and_si256(bit, b4));
            }
        }
        /* 6-bit scales and minimums: sc[0..3] and m[0..3] are the low 6 bits of
         * bytes 0..3 and 4..7; sc[4..7] and m[4..7] take their low 4 bits from
         * bytes 8..11 and their top 2 from the top of bytes 0..3 / 4..7. */
        uint32_t w0, w1, w2;
        memcpy(&w0, scales, 4);
        memcpy(&w1, scales + 4, 4);
        memcpy(&w2, scales + 8, 4);
        uint32_t sc_lo = w0 & 0x3F3F3F3Fu;
        uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
        uint32_t m_lo = w1 & 0x3F3F3F3Fu;
        uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
        __m128i v = _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
        __m128i sc16 = _mm_cvtepu8_epi16(v);
        __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
        sc2 = _mm256_broadcastsi128_si256(sc16);
        s->mc = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m16, m16)),
                                        _mm_unpackhi_epi16(m16, m16), 1);
    }
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++)
        s->scv[t] = _mm256_shuffle_epi8(sc2, _mm256_load_si256((const __m256i *)s_kctrl[t]));
}

/* acc += this super-block . xb (8 float lanes to be summed). */
KX_INLINE s_kacc_t s_kmac(const s_kblk_t *s, const kern_block_q8_K *xb, s_kacc_t acc) {
    __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int t = 0; t < 8; t += 2) {
        __m256i p0 =
            _mm256_maddubs_epi16(s->q[t], _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * t)));
        __m256i p1 = _mm256_maddubs_epi16(
            s->q[t + 1], _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * t + 32)));
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(p0, s->scv[t]));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(p1, s->scv[t + 1]));
    }
    __m256i ms = _mm256_madd_epi16(s->mc, _mm256_loadu_si256((const __m256i *)xb->bsums));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1)),
                          _mm256_set1_ps(s->d * xb->d), acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(s->dm * xb->d), acc);
}

/* s_kmac(s_kload(Q6_K block b), xb, acc) for one column (decode), with each chunk's
 * levels made and used at once: s_kblk_t's 8 level and 8 scale vectors live together
 * did not fit the 16 ymm registers and went through the stack.  The integer sums are
 * exact, so the result is the same bitwise. */
KX_INLINE s_kacc_t s_kdot1_q6_K(const kern_block_q6_K *b, const kern_block_q8_K *xb, s_kacc_t acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const __m128i s8 = _mm_loadu_si128((const __m128i *)b->scales);
    const __m128i eo =
        _mm_shuffle_epi8(s8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m256i sc2 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepi8_epi16(eo)),
                                                _mm_cvtepi8_epi16(_mm_srli_si128(eo, 8)), 1);
    __m256i a = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * n));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                               _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int t = 4 * n + j;
            const __m256i p =
                _mm256_maddubs_epi16(q[j], _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * t)));
            const __m256i sc =
                _mm256_shuffle_epi8(sc2, _mm256_load_si256((const __m256i *)s_kctrl[t]));
            a = _mm256_add_epi32(a, _mm256_madd_epi16(p, sc));
        }
    }
    const __m256i ms =
        _mm256_madd_epi16(_mm256_cvtepi8_epi16(s8), _mm256_loadu_si256((const __m256i *)xb->bsums));
    const float d = kx86_f16(&b->d);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(d * xb->d), acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(-32.0f * d * xb->d), acc);
}
#define KX_KDOT1_Q6_K 1

#endif

KX_INLINE void s_gemm_k(kern_type_t T, int64_t k, int nr, int nc, const uint8_t *w, size_t ws,
                        const uint8_t *x, size_t xs, float *out, size_t os) {
    const int64_t nb = k / KERN_QK_K;
    const size_t WB = T == KERN_Q4_K   ? sizeof(kern_block_q4_K)
                      : T == KERN_Q5_K ? sizeof(kern_block_q5_K)
                                       : sizeof(kern_block_q6_K);
    int rp, cp;
    s_panels(nb * (int64_t)WB, nb * (int64_t)sizeof(kern_block_q8_K), nr, nc, 1, 4, &rp, &cp);
    for (int r0 = 0; r0 < nr; r0 += rp) {
        const int r1 = nr - r0 < rp ? nr : r0 + rp;
        for (int c0 = 0; c0 < nc; c0 += cp) {
            const int c1 = nc - c0 < cp ? nc : c0 + cp;
            for (int r = r0; r < r1; r++) {
                const uint8_t *wr = w + (size_t)r * ws;
                for (int c = c0; c < c1; c += 4) {
                    const int cn = c1 - c < 4 ? c1 - c : 4;
                    s_kacc_t acc[4] = {s_kacc_zero(), s_kacc_zero(), s_kacc_zero(), s_kacc_zero()};
#ifdef KX_KDOT1_Q6_K
                    if (T == KERN_Q6_K && cn == 1) { /* decode: the vocabulary projection */
                        for (int64_t b = 0; b < nb; b++)
                            acc[0] = s_kdot1_q6_K((const kern_block_q6_K *)wr + b,
                                                  (const kern_block_q8_K *)(x + (size_t)c * xs) + b,
                                                  acc[0]);
                        out[(size_t)c * os + r] = s_kacc_sum(acc[0]);
                        continue;
                    }
#endif
                    for (int64_t b = 0; b < nb; b++) {
                        s_kblk_t s;
                        s_kload(T, wr + (size_t)b * WB, &s);
                        if (cn == 4) {
#pragma GCC unroll 4
                            for (int j = 0; j < 4; j++)
                                acc[j] = s_kmac(
                                    &s, (const kern_block_q8_K *)(x + (size_t)(c + j) * xs) + b,
                                    acc[j]);
                        } else {
                            for (int j = 0; j < cn; j++)
                                acc[j] = s_kmac(
                                    &s, (const kern_block_q8_K *)(x + (size_t)(c + j) * xs) + b,
                                    acc[j]);
                        }
                    }
                    for (int j = 0; j < cn; j++)
                        out[(size_t)(c + j) * os + r] = s_kacc_sum(acc[j]);
                }
            }
        }
    }
}

/* ---- float weights (F32, F16, BF16) against F32 activations -------------- */

#ifdef KX_ISA_AVX512
typedef __m512 s_vf;
#define VL 16
KX_INLINE s_vf s_vload(kern_type_t T, const uint8_t *w, int64_t i) {
    if (T == KERN_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 2 * i)));
    if (T == KERN_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + 2 * i))), 16));
    return _mm512_loadu_ps((const float *)w + i);
}
#define s_vx(p) _mm512_loadu_ps(p)
#define s_vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define s_vzero() _mm512_setzero_ps()
#define s_vsum(v) _mm512_reduce_add_ps(v)
#define KF_RT 4
#define KF_CT 4
#else
typedef __m256 s_vf;
#define VL 8
KX_INLINE s_vf s_vload(kern_type_t T, const uint8_t *w, int64_t i) {
    if (T == KERN_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * i)));
    if (T == KERN_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + 2 * i))), 16));
    return _mm256_loadu_ps((const float *)w + i);
}
#define s_vx(p) _mm256_loadu_ps(p)
#define s_vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define s_vzero() _mm256_setzero_ps()
#define s_vsum(v) s_hsum256(v)
/* 16 ymm: a 3 x 4 tile (12 sums, 3 weights, 1 activation) converts a weight
 * vector once per 4 FMAs; matrix x vector takes 6 rows, so that 6 FMA chains
 * hide the FMA latency, and fetches 8 KiB ahead (the weights come from L3 or
 * memory, and the hardware prefetcher stops at 4 KiB pages). */
#ifndef KF_RT
#define KF_RT 3
#endif
#ifndef KF_CT
#define KF_CT 4
#endif
#ifndef KF_RT1
#define KF_RT1 6
#endif
#ifndef KF_PF
#define KF_PF 8192
#endif
#endif
#ifndef KF_PF
#define KF_PF 1024 /* bytes of float weights fetched ahead by matrix x vector */
#endif
#ifndef KF_RT1
#define KF_RT1 KF_RT /* rows of the matrix x vector tile */
#endif

KX_INLINE float s_fscalar(kern_type_t T, const uint8_t *w, int64_t i) {
    if (T == KERN_F16)
        return kx86_f16(w + 2 * i);
    if (T == KERN_BF16) {
        uint16_t h;
        memcpy(&h, w + 2 * i, 2);
        return kern_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, w + 4 * i, 4);
    return f;
}

KX_INLINE void s_ftile(kern_type_t T, const int RT, const int CT, int64_t k, const uint8_t *w,
                       size_t ws, const uint8_t *x, size_t xs, float *out, size_t os) {
    s_vf acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++)
            acc[r][c] = s_vzero();
    int64_t i = 0;
    for (; i + VL <= k; i += VL) {
        s_vf wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            if (CT == 1 && (i * (T == KERN_F32 ? 4 : 2)) % 64 == 0)
                /* matrix x vector streams the weights: fetch ahead, once a line */
                _mm_prefetch((const char *)(w + (size_t)r * ws) + (T == KERN_F32 ? 4 : 2) * i +
                                 KF_PF,
                             _MM_HINT_T0);
            wv[r] = s_vload(T, w + (size_t)r * ws, i);
        }
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++) {
            s_vf xv = s_vx((const float *)(x + (size_t)c * xs) + i);
#pragma GCC unroll 8
            for (int r = 0; r < RT; r++)
                acc[r][c] = s_vfma(wv[r], xv, acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++) {
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++) {
            float s = s_vsum(acc[r][c]);
            const float *xc = (const float *)(x + (size_t)c * xs);
            for (int64_t j = i; j < k; j++)
                s += s_fscalar(T, w + (size_t)r * ws, j) * xc[j];
            out[(size_t)c * os + r] = s;
        }
    }
}

KX_INLINE void s_block_f(kern_type_t T, int64_t k, int nr, int nc, const uint8_t *w, size_t ws,
                         const uint8_t *x, size_t xs, float *out, size_t os) {
    int r = 0;
    for (; r + KF_RT <= nr; r += KF_RT) {
        int c = 0;
        for (; c + KF_CT <= nc; c += KF_CT)
            s_ftile(T, KF_RT, KF_CT, k, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                    out + (size_t)c * os + r, os);
        for (; c < nc; c++)
            s_ftile(T, KF_RT, 1, k, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                    out + (size_t)c * os + r, os);
    }
    for (; r < nr; r++) {
        int c = 0;
        for (; c + KF_CT <= nc; c += KF_CT)
            s_ftile(T, 1, KF_CT, k, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                    out + (size_t)c * os + r, os);
        for (; c < nc; c++)
            s_ftile(T, 1, 1, k, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs,
                    out + (size_t)c * os + r, os);
    }
}

KX_INLINE void s_gemm_f(kern_type_t T, int64_t k, int nr, int nc, const uint8_t *w, size_t ws,
                        const uint8_t *x, size_t xs, float *out, size_t os) {
    if (nc == 1) {
        int r = 0;
        for (; r + KF_RT1 <= nr; r += KF_RT1)
            s_ftile(T, KF_RT1, 1, k, w + (size_t)r * ws, ws, x, xs, out + r, os);
        for (; r < nr; r++)
            s_ftile(T, 1, 1, k, w + (size_t)r * ws, ws, x, xs, out + r, os);
        return;
    }
    int rp, cp;
    s_panels(k * (T == KERN_F32 ? 4 : 2), k * 4, nr, nc, KF_RT, KF_CT, &rp, &cp);
    for (int r0 = 0; r0 < nr; r0 += rp)
        for (int c0 = 0; c0 < nc; c0 += cp)
            s_block_f(T, k, nr - r0 < rp ? nr - r0 : rp, nc - c0 < cp ? nc - c0 : cp,
                      w + (size_t)r0 * ws, ws, x + (size_t)c0 * xs, xs, out + (size_t)c0 * os + r0,
                      os);
}

/* ---- entry points -------------------------------------------------------- */

/* One function per weight type: each inlines only its own kernels. */
KX_PK_TYPES(KX_GEMM_FN_, s_gemm32)
KX_KPK_TYPES(KX_GEMM_FN_, s_gemm_k)
KX_F_TYPES(KX_GEMM_FN_, s_gemm_f)

void KX(kern_gemm)(kern_type_t wt, int64_t k, int nr, int nc, const void *w, size_t w_stride,
                   const void *x, size_t x_stride, float *out, size_t out_stride) {
    switch (wt) {
        KX_PK_TYPES(KX_GEMM_CASE_, s_gemm32)
        KX_KPK_TYPES(KX_GEMM_CASE_, s_gemm_k)
        KX_F_TYPES(KX_GEMM_CASE_, s_gemm_f)
    default: /* not a weight type: the reference decides what that means */
        break;
    }
    kern_ref_gemm(wt, k, nr, nc, w, w_stride, x, x_stride, out, out_stride);
}

/* Q8_0 / Q8_1 block: d = amax / 127, q = round(x / d), as the reference does. */
KX_INLINE void s_q8_block(const float *x, int8_t *qs, float *d_out, int *sum_out) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float a = _mm_cvtss_f32(m);
    float d = a / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    __m256 idv = _mm256_set1_ps(id);
    __m256i iv[4];
    for (int j = 0; j < 4; j++)
        iv[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], idv),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
    /* pack to bytes; packs interleave 128-bit lanes, the permute restores order */
    __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]);
    __m256i p16b = _mm256_packs_epi32(iv[2], iv[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    p8 = _mm256_max_epi8(p8, _mm256_set1_epi8(-127));
    _mm256_storeu_si256((__m256i *)qs, p8);
    *d_out = d;
    *sum_out = s_hsum256i(s);
}

/* Q8_K super-block: d = amax / 127 over its 256 values, q = round(x / d)
 * clamped to -127..127 and the sums of each 16, as the reference does (the
 * rounding is the same: to nearest even). */
KX_INLINE void s_q8k_block(const float *x, kern_block_q8_K *b) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < KERN_QK_K; j += 8)
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    b->d = d;
    for (int j = 0; j < KERN_QK_K; j += 32) {
        __m256i iv[4];
        for (int t = 0; t < 4; t++)
            iv[t] = _mm256_cvtps_epi32(
                _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * t), idv),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i p8 =
            _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        p8 = _mm256_max_epi8(p8, _mm256_set1_epi8(-127));
        _mm256_storeu_si256((__m256i *)(b->qs + j), p8);
        const __m256i ones = _mm256_set1_epi16(1);
        for (int h = 0; h < 2; h++) {
            const __m128i q = h ? _mm256_extracti128_si256(p8, 1) : _mm256_castsi256_si128(p8);
            b->bsums[j / 16 + h] =
                (int16_t)s_hsum256i(_mm256_madd_epi16(_mm256_cvtepi8_epi16(q), ones));
        }
    }
}

/* f32 -> f16 with the F16C instruction, rounding to nearest even like
 * kern_f32_to_f16 (the tests check the outputs are byte-identical). */
KX_INLINE kern_f16_t s_to_f16(float f) {
    return (kern_f16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

void KX(kern_quant_row)(kern_type_t t, const float *src, void *dst, int64_t n) {
    if (t == KERN_Q8_0) {
        kern_block_q8_0 *b = dst;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            float d;
            int sum;
            s_q8_block(src + i * KERN_QK, b[i].qs, &d, &sum);
            b[i].d = s_to_f16(d);
        }
        return;
    }
    if (t == KERN_Q8_1) {
        kern_block_q8_1 *b = dst;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            float d;
            int sum;
            s_q8_block(src + i * KERN_QK, b[i].qs, &d, &sum);
            b[i].d = s_to_f16(d);
            b[i].s = s_to_f16(d * (float)sum);
        }
        return;
    }
    if (t == KERN_Q8_K) {
        for (int64_t i = 0; i < n / KERN_QK_K; i++)
            s_q8k_block(src + i * KERN_QK_K, (kern_block_q8_K *)dst + i);
        return;
    }
    if (t == KERN_F16) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)((kern_f16_t *)dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
        for (; i < n; i++)
            ((kern_f16_t *)dst)[i] = kern_f32_to_f16(src[i]);
        return;
    }
    kern_ref_quant_row(t, src, dst, n);
}

void KX(kern_dequant_row)(kern_type_t t, const void *src, float *dst, int64_t n) {
    if (t == KERN_F16) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                          (const __m128i *)((const kern_f16_t *)src + i))));
        for (; i < n; i++)
            dst[i] = kern_f16_to_f32(((const kern_f16_t *)src)[i]);
        return;
    }
    kern_ref_dequant_row(t, src, dst, n);
}
#endif
