// cuda_matvec.cu - quantized matrix x vector and small-batch products that
// dequantize the weight on the fly: decode (nc = 1) and small batches
// (nc <= 8) read each weight byte once for all columns, so they run at the
// speed of the weight stream from HBM.
//
// One warp per output row.  Lane l decodes the row's 32-element groups l,
// l+32, ... (one simple-quant block, or a Q4_K / Q6_K sub-block run sharing
// its scales), multiplies them with every column's matching 32 activations in
// F32, and the warp sums its lanes with shuffles.  Activations stay F32 (the
// CPU quantizes them to Q8; here the weight stream, not the arithmetic, is the
// limit).
#include "cuda_common.cuh"

#define KC_MV_WARPS 4 // rows per block

template <int T, int NC>
__global__ static void __launch_bounds__(KC_MV_WARPS * 32)
    s_matvec(int64_t k, int nr, const void *w, size_t w_stride, const float *x, size_t x_stride,
             float *out, size_t out_stride) {
    int row = blockIdx.x * KC_MV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= nr)
        return;
    const void *wr = (const uint8_t *)w + (size_t)row * w_stride;
    int64_t n_groups = k / KC_GROUP;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++)
        acc[c] = 0.0f;
    for (int64_t g = lane; g < n_groups; g += 32) {
        float y[KC_GROUP];
        kc_dequant_group<T>(wr, g, y);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const float *xc = x + c * x_stride + g * KC_GROUP;
            float s = 0.0f;
#pragma unroll
            for (int l = 0; l < KC_GROUP; l++)
                s = fmaf(y[l], __ldg(xc + l), s);
            acc[c] += s;
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        float v = acc[c];
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
            out[c * out_stride + row] = v;
    }
}

template <int T>
static void s_launch(cudaStream_t st, int nc, int64_t k, int nr, const void *w, size_t w_stride,
                     const float *x, size_t x_stride, float *out, size_t out_stride) {
    dim3 grid((unsigned)((nr + KC_MV_WARPS - 1) / KC_MV_WARPS)), block(KC_MV_WARPS * 32);
#define KC_MV_CASE(N)                                                                              \
    case N:                                                                                        \
        s_matvec<T, N><<<grid, block, 0, st>>>(k, nr, w, w_stride, x, x_stride, out, out_stride);  \
        break;
    switch (nc) {
        KC_MV_CASE(1)
        KC_MV_CASE(2)
        KC_MV_CASE(3)
        KC_MV_CASE(4)
        KC_MV_CASE(5)
        KC_MV_CASE(6)
        KC_MV_CASE(7)
        KC_MV_CASE(8)
    default:
        break;
    }
#undef KC_MV_CASE
}

int kc_matvec(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
              size_t w_stride, const float *x, size_t x_stride, float *out, size_t out_stride) {
    // Columns in chunks of KERN_CUDA_MATVEC_MAX_NC: each chunk re-reads the weight.
    for (int c0 = 0; c0 < nc; c0 += KERN_CUDA_MATVEC_MAX_NC) {
        int n = nc - c0 < KERN_CUDA_MATVEC_MAX_NC ? nc - c0 : KERN_CUDA_MATVEC_MAX_NC;
        const float *xc = x + (size_t)c0 * x_stride;
        float *oc = out + (size_t)c0 * out_stride;
        KC_DISPATCH_TYPE(
            wt, (s_launch<KT>(c->stream, n, k, nr, w, w_stride, xc, x_stride, oc, out_stride)));
        int rc = kern_cuda_launched(c, "matvec");
        if (rc)
            return rc;
    }
    return 0;
}
