/* kern_cpu.h - private to kernels/: the pieces the CPU kernel tables share
 * (scalar reference entry points that SIMD tables reuse, the tables themselves,
 * and the K-quant scale unpacking).  Not part of the public kernel API.
 */
#ifndef KERN_CPU_H
#define KERN_CPU_H

#include "kern_ops.h"

/* Scalar reference ops (kernels/cpu/<op>_ref.c). */
void kern_ref_dequant_row(kern_type_t t, const void *src, float *dst, int64_t n);
void kern_ref_quant_row(kern_type_t t, const float *src, void *dst, int64_t n);
void kern_ref_gemm(kern_type_t wt, int64_t k, int nr, int nc, const void *w, size_t w_stride,
                   const void *x, size_t x_stride, float *out, size_t out_stride);
void kern_ref_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void kern_ref_softmax(float *x, int n);
void kern_ref_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin, bool neox);
void kern_ref_swiglu(float *out, const float *gate, const float *up, int n);
void kern_ref_attention(const kern_attn_args_t *a);

/* The tables; kern_types.c hands them out after checking the CPU's features. */
extern const kern_ops_t kern_ops_ref_tab;
extern const kern_ops_t kern_ops_avx2_tab;
extern const kern_ops_t kern_ops_avx512_tab;

/* Scale and minimum j (0..7) of a Q4_K / Q5_K super-block, 6 bits each. */
static inline void kern_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
