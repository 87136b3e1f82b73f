// cuda_common.cuh - what the CUDA sources share: the context's fields, error
// plumbing, and device-side dequantization of one element group per weight
// type (the CPU scalar reference, kernels/cpu/quant_ref.c, is the definition).
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include "kern_cuda.h"

#include <cerrno>
#include <cstdint>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

struct kern_cuda_ctx_t {
    int device;           // CUDA device id
    cudaStream_t stream;  // compute stream (non-blocking)
    cudaStream_t copy;    // KV transfer stream (non-blocking)
    cublasHandle_t blas;  // bound to `stream`
    void *scratch;        // device scratch, grown by s_scratch
    size_t scratch_bytes; // its size
    uint64_t scratch_gen; // bumped when scratch moves: graphs captured before are stale
    uint64_t capture_gen; // scratch_gen when the capture in progress began
    cudaEvent_t t0, t1;   // the benchmark timer
    cudaEvent_t order;    // orders a block's d2h on the copy stream after the compute stream
    char err[160];        // last error text
};

// Record a CUDA error in the context and map it to -EIO (or -ENOMEM).
int kern_cuda_fail(kern_cuda_ctx_t *c, cudaError_t e, const char *what);
int kern_cuda_blas_fail(kern_cuda_ctx_t *c, cublasStatus_t s, const char *what);
// Device scratch of at least `bytes`, valid until the next call (grows, never shrinks).
int kern_cuda_scratch(kern_cuda_ctx_t *c, size_t bytes, void **p);
// The launch status of the last kernel: 0, or -EIO recorded in c.
int kern_cuda_launched(kern_cuda_ctx_t *c, const char *what);

// The dequantize-on-the-fly mat-vec (cuda_matvec.cu) for any nc, and the
// cuBLAS path (cuda_gemm.cu); both with kern_cuda_matmul's contract, arguments
// already checked.
int kc_matvec(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
              size_t w_stride, const float *x, size_t x_stride, float *out, size_t out_stride);
int kc_gemm(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
            size_t w_stride, const float *x, size_t x_stride, float *out, size_t out_stride);

#define KC_CHECK(c, call)                                                                          \
    do {                                                                                           \
        cudaError_t kc_e = (call);                                                                 \
        if (kc_e != cudaSuccess)                                                                   \
            return kern_cuda_fail((c), kc_e, #call);                                               \
    } while (0)

// ---- block decoding, device and host ----------------------------------------
// The decoders are __host__ __device__ so that test_cuda_decode can check them
// against the CPU reference on a machine without a GPU.
#define KC_HD __host__ __device__ __forceinline__
// #pragma unroll for the device pass only (the host compiler does not know it).
#ifdef __CUDA_ARCH__
#define KC_UNROLL _Pragma("unroll")
#else
#define KC_UNROLL
#endif

// kc_f16: raw IEEE half bits to float (exact).
KC_HD float kc_f16(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

// a * b rounded once, never fused into a following add (the reference's
// expression order; nvcc would otherwise contract d * q - m into an fma).
KC_HD float kc_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b; // host: compiled without FMA contraction (x86-64 baseline)
#endif
}

// Q4_K / Q5_K 6-bit scale and minimum of sub-block j (as kern_k4_scale_min).
KC_HD void kc_k4_scale_min(int j, const uint8_t *q, float *sc, float *mn) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *mn = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Elements per "group": the unit one thread decodes at a time.  32 for the
// simple quants (one block), 32 for the K-quants (a sub-block run of 32 that
// shares one scale pair: Q4_K's 8 sub-blocks; Q6_K's 16-element sub-blocks go
// two to a group), 32 for the float types.
#define KC_GROUP 32

// Decode group g (elements 32g .. 32g+31) of a row of type T into y[0..32).
// The arithmetic is the reference's, element for element, so it is exact in F32.
template <int T> KC_HD void kc_dequant_group(const void *row, int64_t g, float *y);

template <> KC_HD void kc_dequant_group<KERN_F32>(const void *row, int64_t g, float *y) {
    const float4 *p = (const float4 *)((const float *)row + g * 32);
    KC_UNROLL
    for (int i = 0; i < 8; i++) {
        float4 v = p[i];
        y[4 * i] = v.x;
        y[4 * i + 1] = v.y;
        y[4 * i + 2] = v.z;
        y[4 * i + 3] = v.w;
    }
}

template <> KC_HD void kc_dequant_group<KERN_F16>(const void *row, int64_t g, float *y) {
    const uint4 *p = (const uint4 *)((const uint16_t *)row + g * 32);
    KC_UNROLL
    for (int i = 0; i < 4; i++) {
        uint4 v = p[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
        KC_UNROLL
        for (int j = 0; j < 4; j++) {
            y[8 * i + 2 * j] = kc_f16((uint16_t)(w[j] & 0xFFFF));
            y[8 * i + 2 * j + 1] = kc_f16((uint16_t)(w[j] >> 16));
        }
    }
}

template <> KC_HD void kc_dequant_group<KERN_Q4_0>(const void *row, int64_t g, float *y) {
    const kern_block_q4_0 *b = (const kern_block_q4_0 *)row + g;
    float d = kc_f16(b->d);
    KC_UNROLL
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((b->qs[j] & 0xF) - 8);
        y[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
    }
}

template <> KC_HD void kc_dequant_group<KERN_Q4_1>(const void *row, int64_t g, float *y) {
    const kern_block_q4_1 *b = (const kern_block_q4_1 *)row + g;
    float d = kc_f16(b->d), m = kc_f16(b->m);
    KC_UNROLL
    for (int j = 0; j < 16; j++) {
        y[j] = kc_mul(d, (float)(b->qs[j] & 0xF)) + m;
        y[j + 16] = kc_mul(d, (float)(b->qs[j] >> 4)) + m;
    }
}

template <> KC_HD void kc_dequant_group<KERN_Q8_0>(const void *row, int64_t g, float *y) {
    const kern_block_q8_0 *b = (const kern_block_q8_0 *)row + g;
    float d = kc_f16(b->d);
    KC_UNROLL
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)b->qs[j];
}

// Q4_K: super-block g/8; group c2 = g%8 is sub-block c2: 64-element chunk
// c2/2, low nibbles for even c2, high for odd.
template <> KC_HD void kc_dequant_group<KERN_Q4_K>(const void *row, int64_t g, float *y) {
    const kern_block_q4_K *b = (const kern_block_q4_K *)row + g / 8;
    int j = (int)(g % 8);
    float sc, mn;
    kc_k4_scale_min(j, b->scales, &sc, &mn);
    float d1 = kc_f16(b->d) * sc, m1 = kc_f16(b->dmin) * mn;
    const uint8_t *q = b->qs + 32 * (j / 2);
    int shift = (j & 1) * 4;
    KC_UNROLL
    for (int l = 0; l < 32; l++)
        y[l] = kc_mul(d1, (float)((q[l] >> shift) & 0xF)) - m1;
}

// Q6_K: super-block g/8; group j = g%8 covers elements 32j .. 32j+31: half
// n = j/4 (128 elements), quarter r = j%4 (q1..q4 of the reference), scales
// sc[8n + 2r + l/16].
template <> KC_HD void kc_dequant_group<KERN_Q6_K>(const void *row, int64_t g, float *y) {
    const kern_block_q6_K *b = (const kern_block_q6_K *)row + g / 8;
    int j = (int)(g % 8), n = j / 4, r = j % 4;
    float d = kc_f16(b->d);
    const uint8_t *ql = b->ql + 64 * n + (r & 1) * 32;
    const uint8_t *qh = b->qh + 32 * n;
    const int8_t *sc = b->scales + 8 * n + 2 * r;
    int lshift = (r >> 1) * 4, hshift = 2 * r;
    KC_UNROLL
    for (int l = 0; l < 32; l++) {
        int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
        y[l] = kc_mul(d, (float)sc[l / 16]) * (float)q;
    }
}

// Bytes of one group's worth of row for type T (for row-stride checks).
__host__ __device__ constexpr int kc_group_elems(int t) {
    return (t == KERN_Q4_K || t == KERN_Q6_K) ? 256 : 32;
}

// Call F<T>(args...) for the runtime type t; -ENOTSUP for another type.
#define KC_DISPATCH_TYPE(t, CALL)                                                                  \
    switch (t) {                                                                                   \
    case KERN_F32: {                                                                               \
        constexpr int KT = KERN_F32;                                                               \
        CALL;                                                                                      \
    } break;                                                                                       \
    case KERN_F16: {                                                                               \
        constexpr int KT = KERN_F16;                                                               \
        CALL;                                                                                      \
    } break;                                                                                       \
    case KERN_Q4_0: {                                                                              \
        constexpr int KT = KERN_Q4_0;                                                              \
        CALL;                                                                                      \
    } break;                                                                                       \
    case KERN_Q4_1: {                                                                              \
        constexpr int KT = KERN_Q4_1;                                                              \
        CALL;                                                                                      \
    } break;                                                                                       \
    case KERN_Q8_0: {                                                                              \
        constexpr int KT = KERN_Q8_0;                                                              \
        CALL;                                                                                      \
    } break;                                                                                       \
    case KERN_Q4_K: {                                                                              \
        constexpr int KT = KERN_Q4_K;                                                              \
        CALL;                                                                                      \
    } break;                                                                                       \
    case KERN_Q6_K: {                                                                              \
        constexpr int KT = KERN_Q6_K;                                                              \
        CALL;                                                                                      \
    } break;                                                                                       \
    default:                                                                                       \
        return -ENOTSUP;                                                                           \
    }

#endif
