/* ops_ref.c - scalar reference of the element-wise ops (rmsnorm, softmax,
 * rope, swiglu) and of paged attention, plus the reference kernel table.
 */
#include "kern_cpu.h"

#include <math.h>

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
        long v = lrintf(x[i] * id);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return amax / 127.0f;
}

/* Address of K or V of position p (a row of head_dim elements). */
static const uint8_t *s_kv_row(const kern_attn_args_t *a, const uint8_t *base, int p) {
    size_t elt = a->kv_type == KERN_F16 ? 2 : 4;
    int b = a->blocks[p / a->block_size], s = p % a->block_size;
    return base + (size_t)b * a->block_stride + (size_t)s * a->head_dim * elt;
}

static float s_kv_at(const kern_attn_args_t *a, const uint8_t *row, int i) {
    return a->kv_type == KERN_F16 ? kern_f16_to_f32(((const kern_f16_t *)row)[i])
                                  : ((const float *)row)[i];
}

void kern_ref_attention(const kern_attn_args_t *a) {
    int D = a->head_dim;
    for (int h = 0; h < a->n_q; h++) {
        const float *q = a->q + (size_t)h * D;
        float *sc = a->scratch + (size_t)h * a->n_ctx;
        for (int p = 0; p < a->n_ctx; p++) {
            const uint8_t *k = s_kv_row(a, a->k_base, p);
            float s = 0;
            for (int i = 0; i < D; i++)
                s += q[i] * s_kv_at(a, k, i);
            sc[p] = s * a->scale;
        }
        kern_ref_softmax(sc, a->n_ctx);
        float *o = a->out + (size_t)h * D;
        for (int i = 0; i < D; i++)
            o[i] = 0;
        for (int p = 0; p < a->n_ctx; p++) {
            const uint8_t *v = s_kv_row(a, a->v_base, p);
            for (int i = 0; i < D; i++)
                o[i] += sc[p] * s_kv_at(a, v, i);
        }
    }
}

const kern_ops_t kern_ops_ref_tab = {
    .name = "scalar",
    .dequant_row = kern_ref_dequant_row,
    .quant_row = kern_ref_quant_row,
    .gemm = kern_ref_gemm,
    .packed_size = kern_ref_packed_size,
    .pack = kern_ref_pack,
    .gemm_packed = kern_ref_gemm_packed,
    .rmsnorm = kern_ref_rmsnorm,
    .softmax = kern_ref_softmax,
    .rope = kern_ref_rope,
    .swiglu = kern_ref_swiglu,
    .attention = kern_ref_attention,
};
