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

size_t kern_ref_packed_size(kern_type_t wt, int64_t k, int nr);
void kern_ref_pack(kern_type_t wt, int64_t k, int nr, const void *w, size_t w_stride, void *dst);
void kern_ref_gemm_packed(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                          const void *x, size_t x_stride, float *out, size_t out_stride);
/* packed_size of a table without a packed layout: always 0 (no table uses it now). */
size_t kern_no_packed_size(kern_type_t wt, int64_t k, int nr);
/* The AVX-512 VNNI gemm of packed weights (gemm_packed_avx512.c). */
void kern_gemm_packed_avx512(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                             const void *x, size_t x_stride, float *out, size_t out_stride);
/* The ymm gemm of packed weights: AVX2 maddubs (gemm_packed_avx2.c) and the
 * same code with AVX-VNNI (gemm_packed_avxvnni.c); the packed_size of both
 * tables (kern_ref_packed_size for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, else 0). */
size_t kern_packed_size_avx2(kern_type_t wt, int64_t k, int nr);
void kern_gemm_packed_avx2(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                           const void *x, size_t x_stride, float *out, size_t out_stride);
void kern_gemm_packed_avxvnni(kern_type_t wt, int64_t k, int r0, int nr, int nc,
                              const void *packed, const void *x, size_t x_stride, float *out,
                              size_t out_stride);

/* ---- the packed weight layout (kern_ops_t.pack) --------------------------
 * Rows in groups of KERN_PK_ROWS = 16, the last group padded with zero rows.
 * Group g, block b (of nb = k / 32) is the record at
 * packed + (g * nb + b) * kern_pk_rec(wt), 64-byte aligned when 16 rows' worth
 * of the type is (Q4_1, Q5_1).  A record, row j of the group in lane j:
 *   qs  at 0: kern_pk_steps(wt) steps of 64 bytes; bytes 4j..4j+3 of step s
 *       are bytes 4s..4s+3 of row j's levels.  Q8_0: 8 steps, each byte
 *       biased by +128 (stored as q ^ 0x80, unsigned).  Nibble types: 4 steps
 *       of the qs bytes as GGUF stores them (low nibble = element 4s+i, high
 *       nibble = element 16+4s+i).
 *   qh  (Q5_0, Q5_1) at kern_pk_qh_off: 8 little-endian uint64 bit masks, mask
 *       2s for the low nibbles of step s and 2s+1 for the high ones: bit 4j+i
 *       is the fifth bit of element 4s+i (16+4s+i) of row j.
 *   d   at kern_pk_d_off: 16 f16 scales, row j at index j.
 *   m   (Q4_1, Q5_1) at kern_pk_d_off + 32: 16 f16 minimums. */
#define KERN_PK_ROWS 16

static inline bool kern_pk_type(kern_type_t t) {
    return t == KERN_Q4_0 || t == KERN_Q4_1 || t == KERN_Q5_0 || t == KERN_Q5_1 || t == KERN_Q8_0;
}
static inline int kern_pk_steps(kern_type_t t) {
    return t == KERN_Q8_0 ? 8 : 4;
}
static inline int kern_pk_qh_off(kern_type_t t) {
    return 64 * kern_pk_steps(t);
}
static inline int kern_pk_d_off(kern_type_t t) {
    return kern_pk_qh_off(t) + (t == KERN_Q5_0 || t == KERN_Q5_1 ? 64 : 0);
}
static inline int kern_pk_rec(kern_type_t t) {
    return kern_pk_d_off(t) + (t == KERN_Q4_1 || t == KERN_Q5_1 ? 64 : 32);
}

/* The tables; kern_types.c hands them out after checking the CPU's features. */
extern const kern_ops_t kern_ops_ref_tab;
extern const kern_ops_t kern_ops_avx2_tab;
extern const kern_ops_t kern_ops_avxvnni_tab;
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
