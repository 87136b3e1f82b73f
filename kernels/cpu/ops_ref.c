/* ops_ref.c - scalar reference of the element-wise ops (rmsnorm, softmax,
 * rope, swiglu, geglu) and of paged attention (the reference table is in
 * kern_tables.c).
 */
#include "kern_cpu.h"

#include <math.h>
#include <string.h>

void kern_ref_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        out[i] = x[i] * s * w[i];
}

void kern_ref_softmax(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        max = fmaxf(max, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void kern_ref_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin,
                   bool neox) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void kern_ref_swiglu(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* gelu_tanh(g) = g/2 (1 + tanh(u)), written as g * sigmoid(2u): no tanh, and exact at the
 * saturated ends (e^(-2u) overflows to inf for g << 0, giving -0). */
void kern_ref_geglu(float *out, const float *gate, const float *up, int n) {
    const float c = 0.7978845608f; /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) {
        float g = gate[i], u = c * (g + 0.044715f * g * g * g);
        out[i] = g / (1.0f + expf(-2.0f * u)) * up[i];
    }
}

float kern_i8_quant_row(const float *x, int8_t *q, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    if (!(amax > 0)) { /* zero row (or NaN): all zeros */
        memset(q, 0, (size_t)n);
        return 0;
    }
    float id = 127.0f / amax;
    for (int i = 0; i < n; i++) {
        float v = x[i] * id; /* within [-127, 127] up to rounding */
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        /* + 1.5 * 2^23 rounds to an integer, to nearest even, as lrintf would */
        q[i] = (int8_t)(int)((v + 12582912.0f) - 12582912.0f);
    }
    return amax / 127.0f;
}

/* Bytes per K or V element of a pool type. */
static size_t s_kv_elt(kern_type_t t) {
    return t == KERN_I8 ? 1 : t == KERN_F16 ? 2 : 4;
}

/* Address of K or V of position p (a row of head_dim elements); its INT8
 * scale (KERN_I8 only) goes to *row_scale, else 1. */
static const uint8_t *s_kv_row(const kern_attn_args_t *a, const uint8_t *base, int p,
                               float *row_scale) {
    int b = a->blocks[p / a->block_size], s = p % a->block_size;
    const uint8_t *slab = base + (size_t)b * a->block_stride;
    *row_scale = 1;
    if (a->kv_type == KERN_I8)
        memcpy(row_scale, slab + (size_t)a->block_size * a->head_dim + 4 * (size_t)s, 4);
    return slab + (size_t)s * a->head_dim * s_kv_elt(a->kv_type);
}

/* Element i of a row, dequantized exactly as kvstore/kv_codec.c does (q * scale). */
static float s_kv_at(const kern_attn_args_t *a, const uint8_t *row, float row_scale, int i) {
    switch (a->kv_type) {
    case KERN_F16:
        return kern_f16_to_f32(((const kern_f16_t *)row)[i]);
    case KERN_I8:
        return (float)((const int8_t *)row)[i] * row_scale;
    default:
        return ((const float *)row)[i];
    }
}

void kern_ref_attention(const kern_attn_args_t *a) {
    int D = a->head_dim, p0 = a->pos0, n = a->n_ctx - a->pos0; /* positions p0 .. n_ctx-1 */
    for (int h = 0; h < a->n_q; h++) {
        const float *q = a->q + (size_t)h * D;
        float *sc = a->scratch + (size_t)h * n;
        for (int j = 0; j < n; j++) {
            float ks;
            const uint8_t *k = s_kv_row(a, a->k_base, p0 + j, &ks);
            float s = 0;
            for (int i = 0; i < D; i++)
                s += q[i] * s_kv_at(a, k, ks, i);
            sc[j] = s * a->scale;
        }
        kern_ref_softmax(sc, n);
        if (a->weights)
            for (int j = 0; j < n; j++)
                a->weights[j] += sc[j];
        float *o = a->out + (size_t)h * D;
        for (int i = 0; i < D; i++)
            o[i] = 0;
        for (int j = 0; j < n; j++) {
            float vs;
            const uint8_t *v = s_kv_row(a, a->v_base, p0 + j, &vs);
            for (int i = 0; i < D; i++)
                o[i] += sc[j] * s_kv_at(a, v, vs, i);
        }
    }
}
