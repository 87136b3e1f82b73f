// cuda_gemm.cu - the large-batch path (prefill, nc > KERN_CUDA_MATVEC_MAX_NC)
// and the dispatcher behind kern_cuda_matmul.
//
// Weights stay in their GGUF form in device memory; for a large batch the
// rows are dequantized to F16 in tiles (at most KC_TILE_BYTES of halves at a
// time, in the context's scratch) and multiplied with cublasGemmEx, F16
// operands and F32 accumulation.  No persistent F16 copy of the model is
// kept: the tile costs one extra pass over the weight per call, small beside
// the GEMM once nc is large, and device memory stays the quantized size.
#include "cuda_common.cuh"

#define KC_TILE_BYTES ((size_t)32 << 20)

// One thread per (row, 32-element group): dst row r = dequant(W row r0 + r) as F16.
template <int T>
__global__ static void s_dequant_f16(int64_t k, int nr, const void *w, size_t w_stride,
                                     uint16_t *dst) {
    int64_t n_groups = k / KC_GROUP;
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_groups * nr)
        return;
    int r = (int)(i / n_groups);
    int64_t g = i % n_groups;
    float y[KC_GROUP];
    kc_dequant_group<T>((const uint8_t *)w + (size_t)r * w_stride, g, y);
    uint16_t *o = dst + (size_t)r * k + g * KC_GROUP;
#pragma unroll
    for (int l = 0; l < KC_GROUP; l++)
        o[l] = __half_as_ushort(__float2half_rn(y[l]));
}

// dst (nc, k) contiguous halves from x rows x_stride floats apart.
__global__ static void s_x_f16(const float *x, size_t x_stride, int64_t k, int nc, uint16_t *dst) {
    int64_t n = k * nc;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i / k, j = i % k;
        dst[i] = __half_as_ushort(__float2half_rn(x[c * x_stride + j]));
    }
}

static unsigned s_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < (1 << 30) ? (b > 0 ? b : 1) : (1 << 30));
}

static int s_dequant(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, const void *w,
                     size_t w_stride, uint16_t *dst) {
    int64_t n = k / KC_GROUP * nr;
    KC_DISPATCH_TYPE(
        wt, (s_dequant_f16<KT><<<s_blocks(n, 128), 128, 0, c->stream>>>(k, nr, w, w_stride, dst)));
    return kern_cuda_launched(c, "dequant_f16");
}

extern "C" int kern_cuda_gemm_f16(kern_cuda_ctx_t *c, int m, int n, int k, const kern_f16_t *a,
                                  const kern_f16_t *b, float *out) {
    if (!c || !a || !b || !out || m < 1 || n < 1 || k < 1)
        return -EINVAL;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16F,
                                    k, b, CUDA_R_16F, k, &zero, out, CUDA_R_32F, m,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : kern_cuda_blas_fail(c, s, "cublasGemmEx");
}

int kc_gemm(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
            size_t w_stride, const float *x, size_t x_stride, float *out, size_t out_stride) {
    if (k > INT32_MAX || out_stride > INT32_MAX)
        return -EINVAL;
    int64_t tile_rows = (int64_t)(KC_TILE_BYTES / ((size_t)k * 2));
    if (tile_rows < 64)
        tile_rows = 64;
    if (tile_rows > nr)
        tile_rows = nr;
    size_t x_bytes = ((size_t)nc * k * 2 + 255) / 256 * 256;
    void *scr;
    int rc = kern_cuda_scratch(c, x_bytes + (size_t)tile_rows * k * 2, &scr);
    if (rc)
        return rc;
    uint16_t *x16 = (uint16_t *)scr, *w16 = (uint16_t *)((uint8_t *)scr + x_bytes);
    s_x_f16<<<s_blocks((int64_t)nc * k, 256), 256, 0, c->stream>>>(x, x_stride, k, nc, x16);
    if ((rc = kern_cuda_launched(c, "x_f16")))
        return rc;
    const float one = 1.0f, zero = 0.0f;
    for (int r0 = 0; r0 < nr; r0 += (int)tile_rows) {
        int rows = nr - r0 < tile_rows ? nr - r0 : (int)tile_rows;
        rc = s_dequant(c, wt, k, rows, (const uint8_t *)w + (size_t)r0 * w_stride, w_stride, w16);
        if (rc)
            return rc;
        // Column-major view: C (rows, nc) at out + r0, ldc out_stride, is
        // W16^T (rows, k) * X16 (k, nc).
        cublasStatus_t s =
            cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, nc, (int)k, &one, w16, CUDA_R_16F,
                         (int)k, x16, CUDA_R_16F, (int)k, &zero, out + r0, CUDA_R_32F,
                         (int)out_stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS)
            return kern_cuda_blas_fail(c, s, "cublasGemmEx");
    }
    return 0;
}

extern "C" int kern_cuda_matmul_supports(kern_type_t wt) {
    switch (wt) {
    case KERN_F32:
    case KERN_F16:
    case KERN_Q4_0:
    case KERN_Q4_1:
    case KERN_Q8_0:
    case KERN_Q4_K:
    case KERN_Q6_K:
        return 1;
    default:
        return 0;
    }
}

// Arguments both paths need: sizes, a whole number of groups, and 16-byte
// aligned rows for the float types (read with vector loads).
static int s_check(kern_type_t wt, int64_t k, int nr, int nc, const void *w, size_t w_stride,
                   const float *x, size_t x_stride, const float *out, size_t out_stride) {
    if (!w || !x || !out || k < 1 || nr < 1 || nc < 1 || x_stride < (size_t)k ||
        out_stride < (size_t)nr)
        return -EINVAL;
    if (!kern_cuda_matmul_supports(wt))
        return -ENOTSUP;
    if (k % kc_group_elems(wt))
        return -EINVAL;
    if ((wt == KERN_F32 || wt == KERN_F16) && (((uintptr_t)w | w_stride) % 16))
        return -EINVAL;
    return 0;
}

extern "C" int kern_cuda_matmul_path(kern_cuda_ctx_t *c, int force_gemm, kern_type_t wt, int64_t k,
                                     int nr, int nc, const void *w, size_t w_stride, const float *x,
                                     size_t x_stride, float *out, size_t out_stride) {
    if (!c)
        return -EINVAL;
    int rc = s_check(wt, k, nr, nc, w, w_stride, x, x_stride, out, out_stride);
    if (rc)
        return rc;
    return force_gemm ? kc_gemm(c, wt, k, nr, nc, w, w_stride, x, x_stride, out, out_stride)
                      : kc_matvec(c, wt, k, nr, nc, w, w_stride, x, x_stride, out, out_stride);
}

extern "C" int kern_cuda_matmul(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, int nc,
                                const void *w, size_t w_stride, const float *x, size_t x_stride,
                                float *out, size_t out_stride) {
    return kern_cuda_matmul_path(c, nc > KERN_CUDA_MATVEC_MAX_NC, wt, k, nr, nc, w, w_stride, x,
                                 x_stride, out, out_stride);
}

extern "C" int kern_cuda_dequant_f16(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr,
                                     const void *w, size_t w_stride, kern_f16_t *dst) {
    if (!c || !w || !dst || k < 1 || nr < 1)
        return -EINVAL;
    if (!kern_cuda_matmul_supports(wt))
        return -ENOTSUP;
    if (k % kc_group_elems(wt) ||
        ((wt == KERN_F32 || wt == KERN_F16) && (((uintptr_t)w | w_stride) % 16)))
        return -EINVAL;
    return s_dequant(c, wt, k, nr, w, w_stride, dst);
}
