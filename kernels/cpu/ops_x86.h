/* ops_x86.h - rmsnorm, softmax, rope, swiglu and paged attention in AVX2/FMA,
 * written once and compiled by ops_avx2.c and ops_avx512.c, each of which also
 * defines its kernel table.  KX(name) gives the exported name of the variant.
 */
#include "kern_cpu.h"

#include <immintrin.h>
#include <math.h>

#define KO_INLINE static inline __attribute__((always_inline))

KO_INLINE float s_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KO_INLINE float s_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x for x in float range: 2^n * p(r), n = round(x / ln2), |r| <= ln2 / 2,
 * p a degree-6 Taylor polynomial (relative error ~2e-7).  Saturates to 0 below
 * -87.3 and to +inf above 88.7. */
KO_INLINE __m256 s_exp(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
    __m256 big = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n: n in -126..128; build it in two halves so n = 128 does not overflow */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    p = _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), big);
    return _mm256_andnot_ps(small, p);
}

void KX(kern_rmsnorm)(float *out, const float *x, const float *w, int n, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    double ss = s_hsum(acc);
    for (; i < n; i++)
        ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / n + eps));
    __m256 sv = _mm256_set1_ps(s);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                                _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = x[i] * s * w[i];
}

void KX(kern_softmax)(float *x, int n) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    float max = s_hmax(mv);
    for (; i < n; i++)
        max = fmaxf(max, x[i]);
    __m256 m = _mm256_set1_ps(max), acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = s_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    double sum = s_hsum(acc);
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= (float)(1.0 / sum);
}

void KX(kern_rope)(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin,
                   bool neox) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        int i = 0;
        if (neox) {
            for (; i + 8 <= half; i += 8) {
                /* de-interleave 8 (cos, sin) pairs */
                __m256 a = _mm256_loadu_ps(cos_sin + 2 * i),
                       b = _mm256_loadu_ps(cos_sin + 2 * i + 8);
                __m256 c = _mm256_shuffle_ps(a, b, 0x88), s = _mm256_shuffle_ps(a, b, 0xDD);
                c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(c), 0xD8));
                s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), 0xD8));
                __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + half);
                _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
                _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
            }
        } else {
            for (; i + 4 <= half; i += 4) {
                /* pairs (x[2i], x[2i+1]) line up with (cos, sin) */
                __m256 cs = _mm256_loadu_ps(cos_sin + 2 * i), xv = _mm256_loadu_ps(v + 2 * i);
                __m256 c = _mm256_moveldup_ps(cs), s = _mm256_movehdup_ps(cs);
                __m256 xs = _mm256_permute_ps(xv, 0xB1); /* (x1, x0) */
                /* (x0 c - x1 s, x1 c + x0 s) */
                _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(xv, c, _mm256_mul_ps(xs, s)));
            }
        }
        for (; i < half; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void KX(kern_swiglu)(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = s_exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
        __m256 sg = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(sg, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* 8 elements of a K or V row as floats. */
KO_INLINE __m256 s_kv8(bool f16, const uint8_t *row, int i) {
    if (f16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
    return _mm256_loadu_ps((const float *)row + i);
}

KO_INLINE float s_kv1(bool f16, const uint8_t *row, int i) {
    if (f16)
        return kern_f16_to_f32(((const kern_f16_t *)row)[i]);
    return ((const float *)row)[i];
}

KO_INLINE void s_attention(const kern_attn_args_t *a, bool f16) {
    const int D = a->head_dim, nq = a->n_q, n = a->n_ctx;
    const size_t rowb = (size_t)D * (f16 ? 2 : 4);
    /* scores: each K row is read once for the whole query group */
    for (int p = 0; p < n; p++) {
        const uint8_t *k = a->k_base + (size_t)a->blocks[p / a->block_size] * a->block_stride +
                           (size_t)(p % a->block_size) * rowb;
        for (int h = 0; h < nq; h++) {
            const float *q = a->q + (size_t)h * D;
            __m256 acc = _mm256_setzero_ps();
            int i = 0;
            for (; i + 8 <= D; i += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), s_kv8(f16, k, i), acc);
            float s = s_hsum(acc);
            for (; i < D; i++)
                s += q[i] * s_kv1(f16, k, i);
            a->scratch[(size_t)h * n + p] = s * a->scale;
        }
    }
    for (int h = 0; h < nq; h++)
        KX(kern_softmax)(a->scratch + (size_t)h * n, n);
    for (int h = 0; h < nq; h++)
        for (int i = 0; i < D; i++)
            a->out[(size_t)h * D + i] = 0;
    for (int p = 0; p < n; p++) {
        const uint8_t *v = a->v_base + (size_t)a->blocks[p / a->block_size] * a->block_stride +
                           (size_t)(p % a->block_size) * rowb;
        for (int h = 0; h < nq; h++) {
            float *o = a->out + (size_t)h * D;
            float pw = a->scratch[(size_t)h * n + p];
            __m256 pv = _mm256_set1_ps(pw);
            int i = 0;
            for (; i + 8 <= D; i += 8)
                _mm256_storeu_ps(o + i,
                                 _mm256_fmadd_ps(pv, s_kv8(f16, v, i), _mm256_loadu_ps(o + i)));
            for (; i < D; i++)
                o[i] += pw * s_kv1(f16, v, i);
        }
    }
}

#ifdef KX_AVX512
/* ---- attention with the query group and its output held in zmm registers --
 * Scores: four positions at a time, their four dot products reduced together.
 * Values: each V row is read once and added into every head's output, which
 * stays in registers.  NQ heads of DV x 16 dims each, NQ * DV <= 16. */

KO_INLINE __m512 s_kv16(bool f16, const uint8_t *row, int i) {
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * i)));
    return _mm512_loadu_ps((const float *)row + i);
}

/* (sum a0, sum a1, sum a2, sum a3) */
KO_INLINE __m128 s_red4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 u01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 u23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(u01), _mm512_castps_pd(u23));
    __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(u01), _mm512_castps_pd(u23));
    __m512 v = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

KO_INLINE const uint8_t *s_row(const kern_attn_args_t *a, const uint8_t *base, int p, size_t rowb) {
    return base + (size_t)a->blocks[p / a->block_size] * a->block_stride +
           (size_t)(p % a->block_size) * rowb;
}

KO_INLINE void s_attn_group(const kern_attn_args_t *a, bool f16, const int DV, const int NQ,
                            int h0) {
    const int D = a->head_dim, n = a->n_ctx;
    const size_t rowb = (size_t)D * (f16 ? 2 : 4);
    const float *q = a->q + (size_t)h0 * D;
    float *sc = a->scratch + (size_t)h0 * n;
    int p = 0;
    for (; p + 4 <= n; p += 4) {
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int h = 0; h < NQ; h++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[h][j] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const uint8_t *k = s_row(a, a->k_base, p + j, rowb);
#pragma GCC unroll 8
            for (int d = 0; d < DV; d++) {
                __m512 kv = s_kv16(f16, k, 16 * d);
#pragma GCC unroll 4
                for (int h = 0; h < NQ; h++)
                    acc[h][j] =
                        _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * D + 16 * d), kv, acc[h][j]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < NQ; h++)
            _mm_storeu_ps(sc + (size_t)h * n + p,
                          _mm_mul_ps(s_red4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]),
                                     _mm_set1_ps(a->scale)));
    }
    for (; p < n; p++) {
        const uint8_t *k = s_row(a, a->k_base, p, rowb);
#pragma GCC unroll 4
        for (int h = 0; h < NQ; h++) {
            __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int d = 0; d < DV; d++)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * D + 16 * d),
                                      s_kv16(f16, k, 16 * d), acc);
            sc[(size_t)h * n + p] = _mm512_reduce_add_ps(acc) * a->scale;
        }
    }
    for (int h = 0; h < NQ; h++)
        KX(kern_softmax)(sc + (size_t)h * n, n);
    __m512 o[4][8];
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++)
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++)
            o[h][d] = _mm512_setzero_ps();
    for (p = 0; p < n; p++) {
        const uint8_t *v = s_row(a, a->v_base, p, rowb);
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++) {
            __m512 vv = s_kv16(f16, v, 16 * d);
#pragma GCC unroll 4
            for (int h = 0; h < NQ; h++)
                o[h][d] = _mm512_fmadd_ps(_mm512_set1_ps(sc[(size_t)h * n + p]), vv, o[h][d]);
        }
    }
    float *out = a->out + (size_t)h0 * D;
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++)
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++)
            _mm512_storeu_ps(out + (size_t)h * D + 16 * d, o[h][d]);
}

/* One function per (K/V type, head size, group size), each with its loops
 * unrolled and its accumulators in registers. */
#define KA_FN(dv, nqv)                                                                             \
    static __attribute__((noinline)) void s_attn_f32_##dv##_##nqv(const kern_attn_args_t *a,       \
                                                                  int h0) {                        \
        s_attn_group(a, false, dv, nqv, h0);                                                       \
    }                                                                                              \
    static __attribute__((noinline)) void s_attn_f16_##dv##_##nqv(const kern_attn_args_t *a,       \
                                                                  int h0) {                        \
        s_attn_group(a, true, dv, nqv, h0);                                                        \
    }
KA_FN(1, 1)
KA_FN(1, 2) KA_FN(1, 3) KA_FN(1, 4) KA_FN(2, 1) KA_FN(2, 2) KA_FN(2, 3) KA_FN(2, 4) KA_FN(4, 1)
    KA_FN(4, 2) KA_FN(4, 3) KA_FN(4, 4) KA_FN(8, 1) KA_FN(8, 2)
#undef KA_FN

        typedef void (*s_attn_fn)(const kern_attn_args_t *, int);
#define KA_ROW(dv)                                                                                 \
    { s_attn_f32_##dv##_1, s_attn_f32_##dv##_2, s_attn_f32_##dv##_3, s_attn_f32_##dv##_4 }
#define KA_ROW16(dv)                                                                               \
    { s_attn_f16_##dv##_1, s_attn_f16_##dv##_2, s_attn_f16_##dv##_3, s_attn_f16_##dv##_4 }
/* [f16][log2 DV][nq - 1]; DV = 8 allows nq <= 2 */
static const s_attn_fn s_attn_tab[2][4][4] = {
    {KA_ROW(1), KA_ROW(2), KA_ROW(4), {s_attn_f32_8_1, s_attn_f32_8_2, NULL, NULL}},
    {KA_ROW16(1), KA_ROW16(2), KA_ROW16(4), {s_attn_f16_8_1, s_attn_f16_8_2, NULL, NULL}},
};
#undef KA_ROW
#undef KA_ROW16

/* Heads in groups of up to 4 (2 for head_dim 128); false when head_dim is
 * not 16, 32, 64 or 128. */
static bool s_attention512(const kern_attn_args_t *a, bool f16) {
    const int D = a->head_dim;
    const int lg = D == 16 ? 0 : D == 32 ? 1 : D == 64 ? 2 : D == 128 ? 3 : -1;
    if (lg < 0)
        return false;
    const int maxq = lg == 3 ? 2 : 4;
    for (int h0 = 0; h0 < a->n_q; h0 += maxq) {
        int nq = a->n_q - h0 < maxq ? a->n_q - h0 : maxq;
        s_attn_tab[f16][lg][nq - 1](a, h0);
    }
    return true;
}
#endif

void KX(kern_attention)(const kern_attn_args_t *a) {
    const bool f16 = a->kv_type == KERN_F16;
#ifdef KX_AVX512
    if (s_attention512(a, f16))
        return;
#endif
    if (f16)
        s_attention(a, true);
    else
        s_attention(a, false);
}

void KX(kern_gemm)(kern_type_t wt, int64_t k, int nr, int nc, const void *w, size_t w_stride,
                   const void *x, size_t x_stride, float *out, size_t out_stride);
void KX(kern_quant_row)(kern_type_t t, const float *src, void *dst, int64_t n);
void KX(kern_dequant_row)(kern_type_t t, const void *src, float *dst, int64_t n);
