// cuda_norm.cu - the row and element-wise ops: RMSNorm, softmax, SwiGLU, RoPE,
// embedding lookup and F32 -> F16 conversion.  Same contracts as the CPU
// table (kern_ops.h); each kernel here is one pass over its rows.
#include "cuda_common.cuh"

#define KC_ROW_THREADS 256

// Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
__device__ __forceinline__ float kc_block_sum(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); // red may still be read from a previous call
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

__device__ __forceinline__ float kc_block_max(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
    return s;
}

// One block per row: mean of squares, then scale by w.
__global__ static void s_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *orow = out + (size_t)blockIdx.x * n;
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i] * xr[i];
    s = kc_block_sum(s, red);
    float scale = 1.0f / sqrtf(s / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        orow[i] = xr[i] * scale * w[i];
}

extern "C" int kern_cuda_rmsnorm(kern_cuda_ctx_t *c, float *out, const float *x, const float *w,
                                 int n_rows, int n, float eps) {
    if (!c || !out || !x || !w || n_rows < 0 || n < 1)
        return -EINVAL;
    if (n_rows == 0)
        return 0;
    s_rmsnorm<<<n_rows, KC_ROW_THREADS, 0, c->stream>>>(out, x, w, n, eps);
    return kern_cuda_launched(c, "rmsnorm");
}

// One block per row: max, exp and sum, scale.
__global__ static void s_softmax(float *x, int n) {
    __shared__ float red[32];
    float *r = x + (size_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, r[i]);
    m = kc_block_max(m, red);
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float e = expf(r[i] - m);
        r[i] = e;
        s += e;
    }
    s = kc_block_sum(s, red);
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        r[i] *= inv;
}

extern "C" int kern_cuda_softmax(kern_cuda_ctx_t *c, float *x, int n_rows, int n) {
    if (!c || !x || n_rows < 0 || n < 1)
        return -EINVAL;
    if (n_rows == 0)
        return 0;
    s_softmax<<<n_rows, KC_ROW_THREADS, 0, c->stream>>>(x, n);
    return kern_cuda_launched(c, "softmax");
}

__global__ static void s_swiglu(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static int s_grid(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (int)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

__global__ static void s_add(float *x, const float *y, int64_t n, int dim, size_t y_stride) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[(size_t)(i / dim) * y_stride + (size_t)(i % dim)];
}

extern "C" int kern_cuda_add(kern_cuda_ctx_t *c, float *x, const float *y, int n_rows, int dim,
                             size_t y_stride) {
    if (!c || !x || !y || n_rows < 0 || dim < 0)
        return -EINVAL;
    int64_t n = (int64_t)n_rows * dim;
    if (n == 0)
        return 0;
    s_add<<<s_grid(n, 256), 256, 0, c->stream>>>(x, y, n, dim, y_stride);
    return kern_cuda_launched(c, "add");
}

// GeGLU in the reference's operations (kern_ref_geglu): g * sigmoid(2u), u = c (g + a g^3).
__global__ static void s_geglu(float *out, const float *gate, const float *up, int64_t n) {
    const float c = 0.7978845608f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float g = gate[i], u = c * (g + 0.044715f * g * g * g);
        out[i] = g / (1.0f + expf(-2.0f * u)) * up[i];
    }
}

extern "C" int kern_cuda_geglu(kern_cuda_ctx_t *c, float *out, const float *gate, const float *up,
                               int64_t n) {
    if (!c || !out || !gate || !up || n < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    s_geglu<<<s_grid(n, 256), 256, 0, c->stream>>>(out, gate, up, n);
    return kern_cuda_launched(c, "geglu");
}

__global__ static void s_scale(float *x, int64_t n, float s) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

extern "C" int kern_cuda_scale(kern_cuda_ctx_t *c, float *x, int64_t n, float s) {
    if (!c || !x || n < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    s_scale<<<s_grid(n, 256), 256, 0, c->stream>>>(x, n, s);
    return kern_cuda_launched(c, "scale");
}

extern "C" int kern_cuda_swiglu(kern_cuda_ctx_t *c, float *out, const float *gate, const float *up,
                                int64_t n) {
    if (!c || !out || !gate || !up || n < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    s_swiglu<<<s_grid(n, 256), 256, 0, c->stream>>>(out, gate, up, n);
    return kern_cuda_launched(c, "swiglu");
}

// One block per token, a thread per (head, pair).  The products are written
// unfused (__fmul_rn) so each value is the reference's expression rounded the
// same way: x0*c - x1*s, x0*s + x1*c.
__global__ static void s_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin,
                              int neox) {
    int half = n_rot / 2;
    float *xt = x + (size_t)blockIdx.x * n_heads * head_dim;
    const float *cs = cos_sin + (size_t)blockIdx.x * n_rot;
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        int h = j / half, i = j % half;
        float *v = xt + (size_t)h * head_dim;
        float cc = cs[2 * i], s = cs[2 * i + 1];
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = __fmul_rn(x0, cc) - __fmul_rn(x1, s);
        v[b] = __fmul_rn(x0, s) + __fmul_rn(x1, cc);
    }
}

extern "C" int kern_cuda_rope(kern_cuda_ctx_t *c, float *x, int n_tok, int n_heads, int head_dim,
                              int n_rot, const float *cos_sin, int neox) {
    if (!c || !x || !cos_sin || n_tok < 0 || n_heads < 1 || head_dim < 1 || n_rot < 0 ||
        n_rot > head_dim || n_rot % 2)
        return -EINVAL;
    if (n_tok == 0 || n_rot == 0)
        return 0;
    s_rope<<<n_tok, 128, 0, c->stream>>>(x, n_heads, head_dim, n_rot, cos_sin, neox);
    return kern_cuda_launched(c, "rope");
}

// One block per token; each thread decodes whole 32-element groups.
template <int T>
__global__ static void s_embed(const void *table, size_t row_bytes, int n_rows, const int32_t *ids,
                               int dim, float *out) {
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * dim;
    int n_groups = dim / KC_GROUP;
    if (id < 0 || id >= n_rows) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            o[i] = 0.0f;
        return;
    }
    const void *row = (const uint8_t *)table + (size_t)id * row_bytes;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float y[KC_GROUP];
        kc_dequant_group<T>(row, g, y);
#pragma unroll
        for (int l = 0; l < KC_GROUP; l++)
            o[g * KC_GROUP + l] = y[l];
    }
}

extern "C" int kern_cuda_embed(kern_cuda_ctx_t *c, kern_type_t wt, const void *table,
                               size_t row_bytes, int n_rows, const int32_t *ids, int n_tok, int dim,
                               float *out) {
    if (!c || !table || !ids || !out || n_tok < 0 || n_rows < 1 || dim < 1 ||
        dim % kc_group_elems(wt))
        return -EINVAL;
    if ((wt == KERN_F32 || wt == KERN_F16) && (((uintptr_t)table | row_bytes) % 16))
        return -EINVAL; /* float rows are read with 16-byte loads */
    if (n_tok == 0)
        return 0;
    KC_DISPATCH_TYPE(
        wt, (s_embed<KT><<<n_tok, 128, 0, c->stream>>>(table, row_bytes, n_rows, ids, dim, out)));
    return kern_cuda_launched(c, "embed");
}

__global__ static void s_to_f16(const float *x, uint16_t *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __half_as_ushort(__float2half_rn(x[i]));
}

extern "C" int kern_cuda_f32_to_f16(kern_cuda_ctx_t *c, const float *x, kern_f16_t *dst, size_t n) {
    if (!c || !x || !dst)
        return -EINVAL;
    if (n == 0)
        return 0;
    s_to_f16<<<s_grid((int64_t)n, 256), 256, 0, c->stream>>>(x, dst, n);
    return kern_cuda_launched(c, "f32_to_f16");
}
