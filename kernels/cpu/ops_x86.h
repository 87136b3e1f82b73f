/* ops_x86.h - rmsnorm, softmax, rope, swiglu, geglu and paged attention in AVX2/FMA,
 * written once for the x86 variants (the scheme: kern_cpu.h): ops_avx2.c and
 * ops_avx512.c (KX_ISA_AVX512: zmm attention).  KX(name) gives the exported
 * name of the variant.
 */
#if defined(__x86_64__)
#include "kern_cpu.h"
#include "simd_x86.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

KX_INLINE float s_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KX_INLINE float s_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x for x in float range: 2^n * p(r), n = round(x / ln2), |r| <= ln2 / 2,
 * p a degree-6 Taylor polynomial (relative error ~2e-7).  Saturates to 0 below
 * -87.3 and to +inf above 88.7. */
KX_INLINE __m256 s_exp(__m256 x) {
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

/* gelu_tanh(g) * up as g * sigmoid(2u), the reference's formula (kern_ops.h). */
void KX(kern_geglu)(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    const float c = 0.7978845608f; /* sqrt(2/pi) */
    const __m256 one = _mm256_set1_ps(1.0f), m2c = _mm256_set1_ps(-2.0f * c);
    const __m256 k3 = _mm256_set1_ps(0.044715f);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
        __m256 e = s_exp(_mm256_mul_ps(m2c, _mm256_fmadd_ps(k3, g3, g))); /* e^(-2u) */
        __m256 gg = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(gg, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i], u = c * (g + 0.044715f * g * g * g);
        out[i] = g / (1.0f + expf(-2.0f * u)) * up[i];
    }
}

/* ---- paged attention -------------------------------------------------------
 * One pass over K and V with an online softmax.  Positions go in tiles of W
 * (8 in ymm, 16 in zmm).  The scores of a tile come out as one vector per
 * query head, lane j for position j: each (position, head) dot product is
 * accumulated over D in one vector, then the W accumulators are reduced
 * together by a transposing tree (W - 1 adds and 2 (W - 1) shuffles per head,
 * instead of a horizontal sum per position).  Per head and tile (a chunk of
 * 4 tiles in zmm): m = running max of the scores (allowed to trail it by
 * S_ATTN_SLACK); when m is raised, the output accumulators and the running
 * sum l are multiplied by e^(m_old - m); p = e^(s - m); l += p; out += p V.
 * At the end out /= l.  Same math as the reference (softmax, then the
 * weighted sum of V), rounded in another order; the result depends on the
 * arguments only.  scratch is used only by the fallback for head_dim not a
 * multiple of 8.  A sliding window
 * (pos0 > 0) starts the walk at block pos0 / block_size, slot pos0 % block_size.
 *
 * K/V kinds (kt, a compile-time constant in every specialised function):
 * S_KT_F32, S_KT_F16, S_KT_I8.  INT8 rows are widened to floats; a row's
 * scale is factored out of the sums: score = (q . k_int) * k_scale * scale,
 * and the softmax weight p of a row is multiplied by its V scale before it
 * multiplies the (integer) V row, so the reference's q * scale products
 * come out in another rounding order. */
#define S_KT_F32 0
#define S_KT_F16 1
#define S_KT_I8 2
#define S_KV_ELT(kt) ((kt) == S_KT_I8 ? 1 : (kt) == S_KT_F16 ? 2 : 4)

KX_INLINE int s_kt_of(kern_type_t t) {
    return t == KERN_I8 ? S_KT_I8 : t == KERN_F16 ? S_KT_F16 : S_KT_F32;
}

/* The INT8 scale of slot `slot` of the slab at base + blk_off. */
KX_INLINE float s_kv_scale(const kern_attn_args_t *a, const uint8_t *base, size_t blk_off,
                           int slot) {
    float f;
    memcpy(&f, base + blk_off + (size_t)a->block_size * a->head_dim + 4 * (size_t)slot, 4);
    return f;
}

/* 8 elements of a K or V row as floats. */
KX_INLINE __m256 s_kv8(const int kt, const uint8_t *row, int i) {
    if (kt == S_KT_I8)
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + i))));
    if (kt == S_KT_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
    return _mm256_loadu_ps((const float *)row + i);
}

/* Element i of a row (INT8: the integer, unscaled). */
KX_INLINE float s_kv1(const int kt, const uint8_t *row, int i) {
    if (kt == S_KT_I8)
        return (float)((const int8_t *)row)[i];
    if (kt == S_KT_F16)
        return kern_f16_to_f32(((const kern_f16_t *)row)[i]);
    return ((const float *)row)[i];
}

/* Fallback for any head_dim: scores into scratch, softmax, weighted sum. */
KX_INLINE void s_attention(const kern_attn_args_t *a, const int kt) {
    const int D = a->head_dim, nq = a->n_q, p0 = a->pos0, n = a->n_ctx - p0;
    const size_t rowb = (size_t)D * S_KV_ELT(kt);
    /* scores: each K row is read once for the whole query group; score j is position p0 + j */
    for (int j = 0; j < n; j++) {
        const int p = p0 + j;
        const size_t bo = (size_t)a->blocks[p / a->block_size] * a->block_stride;
        const uint8_t *k = a->k_base + bo + (size_t)(p % a->block_size) * rowb;
        const float ks =
            kt == S_KT_I8 ? s_kv_scale(a, a->k_base, bo, p % a->block_size) * a->scale : a->scale;
        for (int h = 0; h < nq; h++) {
            const float *q = a->q + (size_t)h * D;
            __m256 acc = _mm256_setzero_ps();
            int i = 0;
            for (; i + 8 <= D; i += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), s_kv8(kt, k, i), acc);
            float s = s_hsum(acc);
            for (; i < D; i++)
                s += q[i] * s_kv1(kt, k, i);
            a->scratch[(size_t)h * n + j] = s * ks;
        }
    }
    for (int h = 0; h < nq; h++)
        KX(kern_softmax)(a->scratch + (size_t)h * n, n);
    if (a->weights)
        for (int h = 0; h < nq; h++)
            for (int j = 0; j < n; j++)
                a->weights[j] += a->scratch[(size_t)h * n + j];
    for (int h = 0; h < nq; h++)
        for (int i = 0; i < D; i++)
            a->out[(size_t)h * D + i] = 0;
    for (int j = 0; j < n; j++) {
        const int p = p0 + j;
        const size_t bo = (size_t)a->blocks[p / a->block_size] * a->block_stride;
        const uint8_t *v = a->v_base + bo + (size_t)(p % a->block_size) * rowb;
        const float vs = kt == S_KT_I8 ? s_kv_scale(a, a->v_base, bo, p % a->block_size) : 1.0f;
        for (int h = 0; h < nq; h++) {
            float *o = a->out + (size_t)h * D;
            float pw = a->scratch[(size_t)h * n + j] * vs;
            __m256 pv = _mm256_set1_ps(pw);
            int i = 0;
            for (; i + 8 <= D; i += 8)
                _mm256_storeu_ps(o + i,
                                 _mm256_fmadd_ps(pv, s_kv8(kt, v, i), _mm256_loadu_ps(o + i)));
            for (; i < D; i++)
                o[i] += pw * s_kv1(kt, v, i);
        }
    }
}

/* Transposing reduction, ymm.  s_sum2_8: per 128-bit half (a0+a2, b0+b2,
 * a1+a3, b1+b3); s_sum4_8 of two such: per half, partial sums of a, b, c, d. */
KX_INLINE __m256 s_sum2_8(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
}

KX_INLINE __m256 s_sum4_8(__m256 t01, __m256 t23) {
    __m256d lo = _mm256_unpacklo_pd(_mm256_castps_pd(t01), _mm256_castps_pd(t23));
    __m256d hi = _mm256_unpackhi_pd(_mm256_castps_pd(t01), _mm256_castps_pd(t23));
    return _mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi));
}

/* Lane j = the sum of the 8 lanes of acc[j]. */
KX_INLINE __m256 s_reduce8(const __m256 *acc) {
    __m256 u0 = s_sum4_8(s_sum2_8(acc[0], acc[1]), s_sum2_8(acc[2], acc[3]));
    __m256 u1 = s_sum4_8(s_sum2_8(acc[4], acc[5]), s_sum2_8(acc[6], acc[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* The running max m is raised only when a score exceeds m + S_ATTN_SLACK
 * (then to the tile's max), which saves a horizontal max per tile; p stays
 * at most e^8, far from overflow. */
#define S_ATTN_SLACK 8.0f

/* Online-softmax step of one head: s = this tile's scores (lanes past the
 * tile hold -inf).  Rescales the head's D outputs at o when the max grows;
 * returns p = e^(s - m) (0 in the -inf lanes) and adds it to *l. */
KX_INLINE __m256 s_online8(__m256 s, float *m, __m256 *l, float *o, int D) {
    if (_mm256_movemask_ps(_mm256_cmp_ps(s, _mm256_set1_ps(*m + S_ATTN_SLACK), _CMP_GT_OQ))) {
        float mt = s_hmax(s);
        __m256 al = _mm256_set1_ps(expf(*m - mt)); /* 0 on the first tile */
        for (int i = 0; i < D; i += 8)
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), al));
        *l = _mm256_mul_ps(*l, al);
        *m = mt;
    }
    __m256 p = s_exp(_mm256_sub_ps(s, _mm256_set1_ps(*m)));
    *l = _mm256_add_ps(*l, p);
    return p;
}

/* Attention weights (a->weights): while the online softmax runs, the raw scores of
 * query head h at position p are kept in scratch[h * (n_ctx - pos0) + p - pos0]; at the
 * end each becomes e^(s - m) / l with the head's final m and l (the same m and l that
 * normalise its output) and is added to weights[p - pos0].  sk: where this head's
 * scores of a run of positions go, or NULL when not collecting. */
KX_INLINE float *s_score_keep(const kern_attn_args_t *a, int h, int p) {
    return a->weights ? a->scratch + (size_t)h * (a->n_ctx - a->pos0) + (p - a->pos0) : NULL;
}

#ifdef KX_ISA_AVX512
KX_INLINE void s_weights_add(const kern_attn_args_t *a, int h, float m, float l);
#else
KX_INLINE void s_weights_add(const kern_attn_args_t *a, int h, float m, float l) {
    const int n = a->n_ctx - a->pos0;
    const float *sc = a->scratch + (size_t)h * n;
    float *w = a->weights;
    const float inv = 1.0f / l;
    const __m256 mv = _mm256_set1_ps(m), iv = _mm256_set1_ps(inv);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 p = _mm256_mul_ps(s_exp(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mv)), iv);
        _mm256_storeu_ps(w + j, _mm256_add_ps(_mm256_loadu_ps(w + j), p));
    }
    for (; j < n; j++)
        w[j] += expf(sc[j] - m) * inv;
}
#endif

/* head_dim a multiple of 8, any n_q: tiles of 8 positions, heads in groups
 * of up to 8 (each group reads K and V once), outputs accumulated in out. */
KX_INLINE void s_attn8(const kern_attn_args_t *a, const int kt) {
    const int D = a->head_dim, n = a->n_ctx, bs = a->block_size;
    const size_t rowb = (size_t)D * S_KV_ELT(kt);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h0 = 0; h0 < a->n_q; h0 += 8) {
        const int hn = a->n_q - h0 < 8 ? a->n_q - h0 : 8;
        float *out = a->out + (size_t)h0 * D;
        const float *q = a->q + (size_t)h0 * D;
        float m[8];
        __m256 l[8];
        for (int h = 0; h < hn; h++) {
            m[h] = -INFINITY, l[h] = _mm256_setzero_ps();
            for (int i = 0; i < D; i++)
                out[(size_t)h * D + i] = 0;
        }
        int bi = a->pos0 / bs, slot = a->pos0 % bs; /* block index and slot of position p */
        for (int p = a->pos0; p < n; p += 8) {
            const int r = n - p < 8 ? n - p : 8;
            const uint8_t *kr[8], *vr[8];
            float ksc[8], vsc[8]; /* INT8 row scales */
            for (int j = 0; j < 8; j++) {
                if (j < r) {
                    size_t bo = (size_t)a->blocks[bi] * a->block_stride;
                    size_t off = bo + (size_t)slot * rowb;
                    kr[j] = a->k_base + off, vr[j] = a->v_base + off;
                    if (kt == S_KT_I8) {
                        ksc[j] = s_kv_scale(a, a->k_base, bo, slot);
                        vsc[j] = s_kv_scale(a, a->v_base, bo, slot);
                    }
                    if (++slot == bs)
                        slot = 0, bi++;
                } else { /* past the end: row 0 again, its lane masked off */
                    kr[j] = kr[0], vr[j] = vr[0];
                    if (kt == S_KT_I8)
                        ksc[j] = ksc[0], vsc[j] = vsc[0];
                }
            }
            const __m256 valid =
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(r), lane));
            __attribute__((aligned(32))) float pb[8][8];
            for (int h = 0; h < hn; h++) {
                const float *qh = q + (size_t)h * D;
                __m256 acc[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    acc[j] = _mm256_setzero_ps();
                for (int i = 0; i < D; i += 8) {
                    __m256 qv = _mm256_loadu_ps(qh + i);
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++)
                        acc[j] = _mm256_fmadd_ps(qv, s_kv8(kt, kr[j], i), acc[j]);
                }
                __m256 s = _mm256_mul_ps(s_reduce8(acc), _mm256_set1_ps(a->scale));
                if (kt == S_KT_I8)
                    s = _mm256_mul_ps(s, _mm256_loadu_ps(ksc));
                s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, valid);
                float *sk = s_score_keep(a, h0 + h, p);
                if (sk) {
                    __attribute__((aligned(32))) float sv[8];
                    _mm256_store_ps(sv, s);
                    memcpy(sk, sv, sizeof(float) * (size_t)r);
                }
                __m256 pw = s_online8(s, &m[h], &l[h], out + (size_t)h * D, D);
                if (kt == S_KT_I8) /* the V rows' scales go with the weights */
                    pw = _mm256_mul_ps(pw, _mm256_loadu_ps(vsc));
                _mm256_store_ps(pb[h], pw);
            }
            /* rows past the end have p = 0 and add nothing */
            for (int i = 0; i < D; i += 8) {
                __m256 vv[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    vv[j] = s_kv8(kt, vr[j], i);
                for (int h = 0; h < hn; h++) {
                    float *oh = out + (size_t)h * D + i;
                    __m256 ov = _mm256_loadu_ps(oh);
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++)
                        ov = _mm256_fmadd_ps(_mm256_set1_ps(pb[h][j]), vv[j], ov);
                    _mm256_storeu_ps(oh, ov);
                }
            }
        }
        for (int h = 0; h < hn; h++) {
            if (a->weights)
                s_weights_add(a, h0 + h, m[h], s_hsum(l[h]));
            __m256 inv = _mm256_set1_ps(1.0f / s_hsum(l[h]));
            float *oh = out + (size_t)h * D;
            for (int i = 0; i < D; i += 8)
                _mm256_storeu_ps(oh + i, _mm256_mul_ps(_mm256_loadu_ps(oh + i), inv));
        }
    }
}

#ifndef KX_ISA_AVX512
/* ---- the AVX2 path for head_dim a multiple of 16 (DV = head_dim / 8 ymm per
 * row): query heads in groups of up to 3 (NQ) that share every K and V load
 * (and, F16 / INT8, its conversion to floats).  Positions go in chunks of 32:
 *   scores: 4 positions x NQ heads at a time (4 NQ accumulators over D), each
 *     K chunk loaded once for the group; the 4 accumulators of a head folded
 *     by the tree of s_reduce8, two such halves giving a tile of 8 scores;
 *   online softmax per head over the chunk's (up to) 4 tiles, as s_online8;
 *   values: DB ymm of each head's output held in registers while the chunk's
 *     rows stream past, each V chunk loaded once for the group.
 * The outputs live in out between chunks (L1).  Rows of a chunk are addressed
 * through an offset table, so any block size and block order works; rows past
 * n_ctx repeat row 0 of the chunk with their scores set to -inf. */
#define S_CH 32
/* From this many positions on, each chunk prefetches the next one's rows:
 * measured on the micro-benchmark of test_attention.c (30 layers x 3 KV
 * heads, 16-token blocks), 25-30% faster at 1024-2048 positions and up to
 * 20% slower at 128-512, where the hardware prefetchers already keep up. */
#define S_PF_MIN 1024

/* Keeps v in a register: a row chunk loaded once feeds every head's FMA,
 * rather than the compiler folding the load into each of them. */
#define S_IN_REG8(v) __asm__("" : "+x"(v))

/* One chunk of rc <= S_CH positions for heads h0 .. h0+NQ-1 (q, out at their
 * first head); off[j]: byte offset of row j from k_base / v_base; ks, vs: the
 * INT8 rows' scales.  m, l: the heads' running max and sum.  sk: where head h0's raw
 * scores of this chunk go (s_score_keep), or NULL. */
KX_INLINE void s_chunk32(const kern_attn_args_t *a, const int kt, const int NQ, const int DB,
                         const float *q, float *out, const int rc, const size_t *off,
                         const float *ks, const float *vs, float *m, __m256 *l, float *sk) {
    const int D = a->head_dim, DV = D / 8, nt = (rc + 7) / 8;
    __attribute__((aligned(32))) float pb[3][S_CH];
    /* scores */
    for (int t = 0; t < nt; t++) {
        __m256 u[2][3];
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            const uint8_t *kr[4];
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++)
                kr[jj] = a->k_base + off[8 * t + 4 * half + jj];
            __m256 acc[3][4];
#pragma GCC unroll 3
            for (int h = 0; h < NQ; h++)
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; jj++)
                    acc[h][jj] = _mm256_setzero_ps();
            for (int d = 0; d < DV; d++) {
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; jj++) {
                    __m256 kv = s_kv8(kt, kr[jj], 8 * d);
                    S_IN_REG8(kv);
#pragma GCC unroll 3
                    for (int h = 0; h < NQ; h++)
                        acc[h][jj] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * D + 8 * d), kv,
                                                     acc[h][jj]);
                }
            }
#pragma GCC unroll 3
            for (int h = 0; h < NQ; h++)
                u[half][h] =
                    s_sum4_8(s_sum2_8(acc[h][0], acc[h][1]), s_sum2_8(acc[h][2], acc[h][3]));
        }
        const int r = rc - 8 * t; /* valid rows in this tile */
#pragma GCC unroll 3
        for (int h = 0; h < NQ; h++) {
            __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(u[0][h], u[1][h], 0x20),
                                     _mm256_permute2f128_ps(u[0][h], u[1][h], 0x31));
            s = _mm256_mul_ps(s, _mm256_set1_ps(a->scale));
            if (kt == S_KT_I8)
                s = _mm256_mul_ps(s, _mm256_loadu_ps(ks + 8 * t));
            if (r < 8) {
                const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                    _mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
                s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, valid);
            }
            _mm256_store_ps(pb[h] + 8 * t, s);
        }
    }
    if (sk)
        for (int h = 0; h < NQ; h++)
            memcpy(sk + (size_t)h * (a->n_ctx - a->pos0), pb[h], sizeof(float) * (size_t)rc);
            /* online softmax: raise m (rescaling out and l) when a score passes
             * m + S_ATTN_SLACK; p = e^(s - m) */
#pragma GCC unroll 3
    for (int h = 0; h < NQ; h++) {
        __m256 mx = _mm256_load_ps(pb[h]);
        for (int t = 1; t < nt; t++)
            mx = _mm256_max_ps(mx, _mm256_load_ps(pb[h] + 8 * t));
        const __m256 lim = _mm256_set1_ps(m[h] + S_ATTN_SLACK);
        if (_mm256_movemask_ps(_mm256_cmp_ps(mx, lim, _CMP_GT_OQ))) {
            float mt = s_hmax(mx);
            __m256 al = _mm256_set1_ps(expf(m[h] - mt)); /* 0 on the first chunk */
            float *oh = out + (size_t)h * D;
            for (int i = 0; i < D; i += 8)
                _mm256_storeu_ps(oh + i, _mm256_mul_ps(_mm256_loadu_ps(oh + i), al));
            l[h] = _mm256_mul_ps(l[h], al);
            m[h] = mt;
        }
        const __m256 mv = _mm256_set1_ps(m[h]);
        for (int t = 0; t < nt; t++) {
            __m256 p = s_exp(_mm256_sub_ps(_mm256_load_ps(pb[h] + 8 * t), mv));
            l[h] = _mm256_add_ps(l[h], p);
            if (kt == S_KT_I8) /* the V rows' scales go with the weights */
                p = _mm256_mul_ps(p, _mm256_loadu_ps(vs + 8 * t));
            _mm256_store_ps(pb[h] + 8 * t, p);
        }
    }
    /* values: rows past rc have p = 0 and are skipped */
    for (int d0 = 0; d0 < DV; d0 += DB) {
        __m256 o[3][4];
#pragma GCC unroll 3
        for (int h = 0; h < NQ; h++)
#pragma GCC unroll 4
            for (int db = 0; db < DB; db++)
                o[h][db] = _mm256_loadu_ps(out + (size_t)h * D + 8 * (d0 + db));
        for (int j = 0; j < rc; j++) {
            const uint8_t *v = a->v_base + off[j];
            __m256 vv[4];
#pragma GCC unroll 4
            for (int db = 0; db < DB; db++) {
                vv[db] = s_kv8(kt, v, 8 * (d0 + db));
                S_IN_REG8(vv[db]);
            }
#pragma GCC unroll 3
            for (int h = 0; h < NQ; h++) {
                const __m256 pw = _mm256_broadcast_ss(&pb[h][j]);
#pragma GCC unroll 4
                for (int db = 0; db < DB; db++)
                    o[h][db] = _mm256_fmadd_ps(pw, vv[db], o[h][db]);
            }
        }
#pragma GCC unroll 3
        for (int h = 0; h < NQ; h++)
#pragma GCC unroll 4
            for (int db = 0; db < DB; db++)
                _mm256_storeu_ps(out + (size_t)h * D + 8 * (d0 + db), o[h][db]);
    }
}

/* Prefetch K and V of positions p0 .. p1-1 (into L1): a block's rows are
 * contiguous, but the blocks of a sequence lie far apart (a block holds every
 * layer and head), and the hardware prefetchers stop at page edges. */
KX_INLINE void s_prefetch_rows(const kern_attn_args_t *a, size_t rowb, int p0, int p1) {
    const int bs = a->block_size;
    while (p0 < p1) {
        const int b = p0 / bs, s0 = p0 % bs, s1 = p1 - p0 < bs - s0 ? s0 + p1 - p0 : bs;
        const size_t o = (size_t)a->blocks[b] * a->block_stride;
        const uint8_t *k = a->k_base + o, *v = a->v_base + o;
        for (size_t i = (size_t)s0 * rowb; i < (size_t)s1 * rowb; i += 64) {
            _mm_prefetch((const char *)(k + i), _MM_HINT_T1);
            _mm_prefetch((const char *)(v + i), _MM_HINT_T1);
        }
        p0 += s1 - s0;
    }
}

/* Heads h0 .. h0+NQ-1 over all positions. */
KX_INLINE void s_group16(const kern_attn_args_t *a, const int kt, const int NQ, const int DB,
                         int h0) {
    const int D = a->head_dim, n = a->n_ctx, bs = a->block_size;
    const size_t rowb = (size_t)D * S_KV_ELT(kt);
    const float *q = a->q + (size_t)h0 * D;
    float *out = a->out + (size_t)h0 * D;
    float m[3];
    __m256 l[3];
    for (int h = 0; h < NQ; h++) {
        m[h] = -INFINITY, l[h] = _mm256_setzero_ps();
        memset(out + (size_t)h * D, 0, sizeof(float) * (size_t)D);
    }
    size_t off[S_CH];
    float ks[S_CH], vs[S_CH];                   /* INT8 row scales */
    int bi = a->pos0 / bs, slot = a->pos0 % bs; /* block index and slot of position p */
    for (int p = a->pos0; p < n; p += S_CH) {
        const int rc = n - p < S_CH ? n - p : S_CH;
        for (int j = 0; j < rc; j++) {
            size_t bo = (size_t)a->blocks[bi] * a->block_stride;
            off[j] = bo + (size_t)slot * rowb;
            if (kt == S_KT_I8) {
                ks[j] = s_kv_scale(a, a->k_base, bo, slot);
                vs[j] = s_kv_scale(a, a->v_base, bo, slot);
            }
            if (++slot == bs)
                slot = 0, bi++;
        }
        for (int j = rc; j < (rc + 7) / 8 * 8; j++) { /* a valid row, masked off */
            off[j] = off[0];
            if (kt == S_KT_I8)
                ks[j] = ks[0], vs[j] = vs[0];
        }
        if (n >= S_PF_MIN && p + S_CH < n) /* the next chunk, while this one computes */
            s_prefetch_rows(a, rowb, p + S_CH, n - p < 2 * S_CH ? n : p + 2 * S_CH);
        s_chunk32(a, kt, NQ, DB, q, out, rc, off, ks, vs, m, l, s_score_keep(a, h0, p));
    }
    for (int h = 0; h < NQ; h++) {
        if (a->weights)
            s_weights_add(a, h0 + h, m[h], s_hsum(l[h]));
        __m256 inv = _mm256_set1_ps(1.0f / s_hsum(l[h]));
        float *oh = out + (size_t)h * D;
        for (int i = 0; i < D; i += 8)
            _mm256_storeu_ps(oh + i, _mm256_mul_ps(_mm256_loadu_ps(oh + i), inv));
    }
}

/* One function per (K/V type, group size): DB = 4 output ymm per head for
 * groups of 1 or 2 heads when DV allows, else 2. */
#define KA2_FN(ty, kt, nq)                                                                         \
    static __attribute__((noinline)) void s_g16_##ty##_##nq(const kern_attn_args_t *a, int h0) {   \
        if ((nq) <= 2 && a->head_dim % 32 == 0)                                                    \
            s_group16(a, kt, nq, 4, h0);                                                           \
        else                                                                                       \
            s_group16(a, kt, nq, 2, h0);                                                           \
    }
#define KA2_TYPE(ty, kt) KA2_FN(ty, kt, 1) KA2_FN(ty, kt, 2) KA2_FN(ty, kt, 3)
KA2_TYPE(f32, S_KT_F32)
KA2_TYPE(f16, S_KT_F16)
KA2_TYPE(i8, S_KT_I8)
#undef KA2_TYPE
#undef KA2_FN

typedef void (*s_g16_fn)(const kern_attn_args_t *, int);
static const s_g16_fn s_g16_tab[3][3] = {{s_g16_f32_1, s_g16_f32_2, s_g16_f32_3},
                                         {s_g16_f16_1, s_g16_f16_2, s_g16_f16_3},
                                         {s_g16_i8_1, s_g16_i8_2, s_g16_i8_3}};

/* Query heads in groups of 3 (a group of 4 as 2 + 2); false when head_dim is
 * not a multiple of 16. */
static bool s_attention16(const kern_attn_args_t *a, int kt) {
    if (a->head_dim % 16 != 0 || a->head_dim <= 0)
        return false;
    for (int h0 = 0; h0 < a->n_q;) {
        int rest = a->n_q - h0, nq = rest == 4 ? 2 : rest < 3 ? rest : 3;
        s_g16_tab[kt][nq - 1](a, h0);
        h0 += nq;
    }
    return true;
}
#endif

#ifdef KX_ISA_AVX512
/* ---- the same in zmm for head_dim 16, 32, 64, 128: tiles of 16 positions
 * in chunks of 64 (the scores of a whole chunk first, so that the latency of
 * the reductions and the exponentials overlaps other work), the outputs in
 * registers while the values are added.  NQ heads of DV x 16 dims each,
 * NQ * DV <= 16; larger groups go in several passes.  With block_size a
 * multiple of 16 a full tile is 16 consecutive rows of one block (its rows
 * addressed by constant offsets). */

/* Keeps v in a register: a row loaded once feeds every head's FMA, rather
 * than the compiler folding the load into each of them. */
#define S_IN_REG(v) __asm__("" : "+v"(v))

KX_INLINE __m512 s_kv16(const int kt, const uint8_t *row, int i) {
    if (kt == S_KT_I8)
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + i))));
    if (kt == S_KT_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * i)));
    return _mm512_loadu_ps((const float *)row + i);
}

/* As s_sum2_8 and s_sum4_8, per 128-bit quarter. */
KX_INLINE __m512 s_sum2_16(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
}

KX_INLINE __m512 s_sum4_16(__m512 t01, __m512 t23) {
    __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23));
    __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23));
    return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
}

/* u0, u1 from s_sum4_16 (positions 0-3 and 4-7 of a tile): quarters
 * (u0 q0+q2, u0 q1+q3, u1 q0+q2, u1 q1+q3). */
KX_INLINE __m512 s_sum8_16(__m512 u0, __m512 u1) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x44), _mm512_shuffle_f32x4(u0, u1, 0xEE));
}

/* Two s_sum8_16 results: lane j = the full sum for position j of 16. */
KX_INLINE __m512 s_sum16_16(__m512 s01, __m512 s23) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88),
                         _mm512_shuffle_f32x4(s01, s23, 0xDD));
}

/* e^x for x <= 0 (NaN-free; -inf gives 0): 2^n p(r) as s_exp, via scalef;
 * 0 below -87.3. */
KX_INLINE __m512 s_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f);
    __mmask16 ok = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(ok, p, n);
}

/* s_weights_add (above) sixteen positions at a time. */
KX_INLINE void s_weights_add(const kern_attn_args_t *a, int h, float m, float l) {
    const int n = a->n_ctx - a->pos0;
    const float *sc = a->scratch + (size_t)h * n;
    float *w = a->weights;
    const float inv = 1.0f / l;
    const __m512 mv = _mm512_set1_ps(m), iv = _mm512_set1_ps(inv);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 p = _mm512_mul_ps(s_exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + j), mv)), iv);
        _mm512_storeu_ps(w + j, _mm512_add_ps(_mm512_loadu_ps(w + j), p));
    }
    for (; j < n; j++)
        w[j] += expf(sc[j] - m) * inv;
}

/* o[h] += p[h][j] * (row v) for the NQ heads; p[h] at pb + 64 h. */
KX_INLINE void s_vrow16(const int kt, const int DV, const int NQ, const uint8_t *v, const float *pb,
                        int j, __m512 (*o)[8]) {
#pragma GCC unroll 8
    for (int d = 0; d < DV; d++) {
        __m512 vv = s_kv16(kt, v, 16 * d);
        S_IN_REG(vv);
#pragma GCC unroll 4
        for (int h = 0; h < NQ; h++)
            o[h][d] = _mm512_fmadd_ps(_mm512_set1_ps(pb[64 * h + j]), vv, o[h][d]);
    }
}

/* Scores of one tile of 16 positions for NQ heads, scaled, lane j for row j,
 * into sb[64 h .. 64 h + 15].  Row j is at kb + j * rowb (contig) or
 * kb + off[j]; rows j >= r repeat a valid row and their lanes get -inf.
 * INT8: ks holds the 16 rows' scales. */
KX_INLINE void s_scores16(const int kt, const int DV, const int NQ, const bool contig,
                          const uint8_t *kb, const size_t *off, const int r, const float *q,
                          const int D, const float scale, const float *ks, float *sb) {
    const size_t rowb = (size_t)DV * 16 * S_KV_ELT(kt);
    __m512 acc[4][2], t[4], u[4], s01[4];
    /* two positions at a time, the reduction tree folded in as it goes */
#pragma GCC unroll 8
    for (int pr = 0; pr < 8; pr++) {
#pragma GCC unroll 4
        for (int h = 0; h < NQ; h++)
            acc[h][0] = acc[h][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int jj = 0; jj < 2; jj++) {
            const int j = 2 * pr + jj;
            const uint8_t *k = kb + (contig ? (size_t)j * rowb : off[j]);
#pragma GCC unroll 8
            for (int d = 0; d < DV; d++) {
                __m512 kv = s_kv16(kt, k, 16 * d);
                S_IN_REG(kv);
#pragma GCC unroll 4
                for (int h = 0; h < NQ; h++)
                    acc[h][jj] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * D + 16 * d), kv,
                                                 acc[h][jj]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < NQ; h++) {
            __m512 t2 = s_sum2_16(acc[h][0], acc[h][1]);
            if (pr % 2 == 0) {
                t[h] = t2;
                continue;
            }
            __m512 u4 = s_sum4_16(t[h], t2);
            if (pr % 4 == 1) {
                u[h] = u4;
            } else if (pr == 3) {
                s01[h] = s_sum8_16(u[h], u4);
            } else {
                __m512 s =
                    _mm512_mul_ps(s_sum16_16(s01[h], s_sum8_16(u[h], u4)), _mm512_set1_ps(scale));
                if (kt == S_KT_I8)
                    s = _mm512_mul_ps(s, _mm512_loadu_ps(ks));
                if (!contig)
                    s = _mm512_mask_blend_ps((__mmask16)((1u << r) - 1), _mm512_set1_ps(-INFINITY),
                                             s);
                _mm512_store_ps(sb + 64 * h, s);
            }
        }
    }
}

/* Up to 64 positions: scores of all of them first (independent work for the
 * core to overlap), then the online-softmax step, then the values.  Tile t
 * has its rows at kv offsets tb[t] + j * rowb when contig[t], else off[t][j];
 * INT8: row j's K and V scales in ks[t][j], vs[t][j].  The outputs ob
 * (NQ x DV zmm) stay in memory between chunks. */
KX_INLINE void s_chunk64(const kern_attn_args_t *a, const int kt, const int DV, const int NQ,
                         const float *q, const int rc, const bool *contig, const size_t *tb,
                         const size_t (*off)[16], const float (*ks)[16], const float (*vs)[16],
                         __m512 (*ob)[8], float *m, __m512 *l, float *sk) {
    const int D = a->head_dim, nt = (rc + 15) / 16;
    const size_t rowb = (size_t)DV * 16 * S_KV_ELT(kt);
    __attribute__((aligned(64))) float pb[4 * 64];
    for (int t = 0; t < nt; t++) {
        const int r = rc - 16 * t < 16 ? rc - 16 * t : 16;
        if (contig[t])
            s_scores16(kt, DV, NQ, true, a->k_base + tb[t], NULL, 16, q, D, a->scale, ks[t],
                       pb + 16 * t);
        else
            s_scores16(kt, DV, NQ, false, a->k_base, off[t], r, q, D, a->scale, ks[t], pb + 16 * t);
    }
    if (sk) /* the raw scores, for the weights (s_score_keep) */
        for (int h = 0; h < NQ; h++)
            memcpy(sk + (size_t)h * (a->n_ctx - a->pos0), pb + 64 * h, sizeof(float) * (size_t)rc);
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++) {
        float *ph = pb + 64 * h;
        __m512 mx = _mm512_load_ps(ph);
        for (int t = 1; t < nt; t++)
            mx = _mm512_max_ps(mx, _mm512_load_ps(ph + 16 * t));
        if (_mm512_cmp_ps_mask(mx, _mm512_set1_ps(m[h] + S_ATTN_SLACK), _CMP_GT_OQ)) {
            float mt = _mm512_reduce_max_ps(mx);
            __m512 al = _mm512_set1_ps(expf(m[h] - mt)); /* 0 on the first chunk */
#pragma GCC unroll 8
            for (int d = 0; d < DV; d++)
                ob[h][d] = _mm512_mul_ps(ob[h][d], al);
            l[h] = _mm512_mul_ps(l[h], al);
            m[h] = mt;
        }
        const __m512 mv = _mm512_set1_ps(m[h]);
        for (int t = 0; t < nt; t++) {
            __m512 p = s_exp16(_mm512_sub_ps(_mm512_load_ps(ph + 16 * t), mv));
            l[h] = _mm512_add_ps(l[h], p);
            if (kt == S_KT_I8) /* the V rows' scales go with the weights */
                p = _mm512_mul_ps(p, _mm512_loadu_ps(vs[t]));
            _mm512_store_ps(ph + 16 * t, p);
        }
    }
    /* Values: each V row read once, added into every head's output.  The
     * barrier makes the weights come back by broadcast loads and the
     * outputs by plain loads, rather than by shuffles and spills. */
    __asm__ volatile("" ::: "memory");
    __m512 o[4][8];
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++)
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++)
            o[h][d] = ob[h][d];
    for (int t = 0; t < nt; t++) {
        if (contig[t]) {
            const uint8_t *vt = a->v_base + tb[t];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                s_vrow16(kt, DV, NQ, vt + (size_t)j * rowb, pb + 16 * t, j, o);
        } else {
            const int r = rc - 16 * t < 16 ? rc - 16 * t : 16;
            for (int j = 0; j < r; j++)
                s_vrow16(kt, DV, NQ, a->v_base + off[t][j], pb + 16 * t, j, o);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++)
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++)
            ob[h][d] = o[h][d];
    __asm__ volatile("" ::: "memory");
}

KX_INLINE void s_attn_group(const kern_attn_args_t *a, const int kt, const int DV, const int NQ,
                            int h0) {
    const int D = a->head_dim, n = a->n_ctx, bs = a->block_size;
    const size_t rowb = (size_t)D * S_KV_ELT(kt);
    const float *q = a->q + (size_t)h0 * D;
    __m512 ob[4][8], l[4];
    float m[4];
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++) {
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++)
            ob[h][d] = _mm512_setzero_ps();
        l[h] = _mm512_setzero_ps();
        m[h] = -INFINITY;
    }
    int bi = a->pos0 / bs, slot = a->pos0 % bs; /* block index and slot of position p */
    for (int p = a->pos0; p < n; p += 64) {
        const int rc = n - p < 64 ? n - p : 64;
        bool contig[4];
        size_t tb[4], off[4][16];
        float ks[4][16], vs[4][16]; /* INT8 row scales */
        for (int t = 0; 16 * t < rc; t++) {
            const int r = rc - 16 * t < 16 ? rc - 16 * t : 16;
            /* a full tile at a multiple of 16 in a block of a multiple of 16 */
            contig[t] = r == 16 && bs % 16 == 0 && slot % 16 == 0;
            if (kt == S_KT_I8) { /* the tile's scales, rows past r repeating row 0's */
                size_t bo = (size_t)a->blocks[bi] * a->block_stride;
                for (int j = 0, b2 = bi, s2 = slot; j < 16; j++) {
                    if (j < r) {
                        bo = (size_t)a->blocks[b2] * a->block_stride;
                        ks[t][j] = s_kv_scale(a, a->k_base, bo, s2);
                        vs[t][j] = s_kv_scale(a, a->v_base, bo, s2);
                        if (++s2 == bs)
                            s2 = 0, b2++;
                    } else {
                        ks[t][j] = ks[t][0], vs[t][j] = vs[t][0];
                    }
                }
            }
            if (contig[t]) {
                tb[t] = (size_t)a->blocks[bi] * a->block_stride + (size_t)slot * rowb;
                slot += 16;
                if (slot == bs)
                    slot = 0, bi++;
                continue;
            }
            for (int j = 0; j < r; j++) {
                off[t][j] = (size_t)a->blocks[bi] * a->block_stride + (size_t)slot * rowb;
                if (++slot == bs)
                    slot = 0, bi++;
            }
            for (int j = r; j < 16; j++)
                off[t][j] = off[t][0];
        }
        s_chunk64(a, kt, DV, NQ, q, rc, contig, tb, (const size_t(*)[16])off,
                  (const float(*)[16])ks, (const float(*)[16])vs, ob, m, l, s_score_keep(a, h0, p));
    }
    float *out = a->out + (size_t)h0 * D;
#pragma GCC unroll 4
    for (int h = 0; h < NQ; h++) {
        if (a->weights)
            s_weights_add(a, h0 + h, m[h], _mm512_reduce_add_ps(l[h]));
        __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(l[h]));
#pragma GCC unroll 8
        for (int d = 0; d < DV; d++)
            _mm512_storeu_ps(out + (size_t)h * D + 16 * d, _mm512_mul_ps(ob[h][d], inv));
    }
}

/* One function per (K/V type, head size, group size), each with its loops
 * unrolled and its accumulators in registers. */
#define KA_FN(dv, nqv)                                                                             \
    static __attribute__((noinline)) void s_attn_f32_##dv##_##nqv(const kern_attn_args_t *a,       \
                                                                  int h0) {                        \
        s_attn_group(a, S_KT_F32, dv, nqv, h0);                                                    \
    }                                                                                              \
    static __attribute__((noinline)) void s_attn_f16_##dv##_##nqv(const kern_attn_args_t *a,       \
                                                                  int h0) {                        \
        s_attn_group(a, S_KT_F16, dv, nqv, h0);                                                    \
    }                                                                                              \
    static                                                                                         \
        __attribute__((noinline)) void s_attn_i8_##dv##_##nqv(const kern_attn_args_t *a, int h0) { \
        s_attn_group(a, S_KT_I8, dv, nqv, h0);                                                     \
    }
/* clang-format off */
KA_FN(1, 1) KA_FN(1, 2) KA_FN(1, 3) KA_FN(1, 4)
KA_FN(2, 1) KA_FN(2, 2) KA_FN(2, 3) KA_FN(2, 4)
KA_FN(4, 1) KA_FN(4, 2) KA_FN(4, 3) KA_FN(4, 4)
KA_FN(8, 1) KA_FN(8, 2)
/* clang-format on */
#undef KA_FN

        typedef void (*s_attn_fn)(const kern_attn_args_t *, int);
#define KA_ROW(ty, dv)                                                                             \
    {                                                                                              \
        s_attn_##ty##_##dv##_1, s_attn_##ty##_##dv##_2, s_attn_##ty##_##dv##_3,                    \
            s_attn_##ty##_##dv##_4                                                                 \
    }
#define KA_TYPE(ty)                                                                                \
    {                                                                                              \
        KA_ROW(ty, 1), KA_ROW(ty, 2), KA_ROW(ty, 4), {                                             \
            s_attn_##ty##_8_1, s_attn_##ty##_8_2, NULL, NULL                                       \
        }                                                                                          \
    }
/* [kt][log2 DV][nq - 1]; DV = 8 allows nq <= 2 */
static const s_attn_fn s_attn_tab[3][4][4] = {KA_TYPE(f32), KA_TYPE(f16), KA_TYPE(i8)};
#undef KA_ROW
#undef KA_TYPE

/* Heads in groups of up to 4 (2 for head_dim 128); false when head_dim is
 * not 16, 32, 64 or 128. */
static bool s_attention512(const kern_attn_args_t *a, int kt) {
    const int D = a->head_dim;
    const int lg = D == 16 ? 0 : D == 32 ? 1 : D == 64 ? 2 : D == 128 ? 3 : -1;
    if (lg < 0)
        return false;
    const int maxq = lg == 3 ? 2 : 4;
    for (int h0 = 0; h0 < a->n_q; h0 += maxq) {
        int nq = a->n_q - h0 < maxq ? a->n_q - h0 : maxq;
        s_attn_tab[kt][lg][nq - 1](a, h0);
    }
    return true;
}
#endif

void KX(kern_attention)(const kern_attn_args_t *a) {
    const int kt = s_kt_of(a->kv_type);
#ifdef KX_ISA_AVX512
    if (s_attention512(a, kt))
        return;
#else
    if (s_attention16(a, kt))
        return;
#endif
    /* one call per constant kind, so each is specialised */
    if (a->head_dim % 8 == 0) {
        if (kt == S_KT_I8)
            s_attn8(a, S_KT_I8);
        else if (kt == S_KT_F16)
            s_attn8(a, S_KT_F16);
        else
            s_attn8(a, S_KT_F32);
    } else if (kt == S_KT_I8) {
        s_attention(a, S_KT_I8);
    } else if (kt == S_KT_F16) {
        s_attention(a, S_KT_F16);
    } else {
        s_attention(a, S_KT_F32);
    }
}
#endif
