// cuda_attention.cu - paged attention over an F16 KV pool in kern_kv.h's
// layout, and the store of new K/V rows into it.
//
// Flash-decoding: the positions of each (token, head) are cut into chunks of
// KERN_CUDA_ATTN_SPLIT; one thread block per (chunk, head, token) computes the
// chunk's scores, their maximum m, the sum l of exp(score - m) and the
// unnormalised sum of exp(score - m) * V; a second kernel combines the chunks
// (out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s, M the largest m_s).
// Decode (one token per sequence) and prefill chunks (consecutive positions,
// causal through n_ctx[t]) are the same launch.
#include "cuda_common.cuh"

#define KC_ATT_THREADS 128
#define KC_ATT_WARPS (KC_ATT_THREADS / 32)

struct kc_att_part {
    float m; // chunk maximum score (-inf when the chunk is empty)
    float l; // sum of exp(score - m)
};

// Address of row `pos` of the (layer, kv, head) slab of a sequence.
__device__ __forceinline__ const __half *kc_kv_row(const kern_cuda_attn_t &a, const int32_t *bt,
                                                   int kv, int hk, int pos) {
    size_t slab = (size_t)a.block_size * a.head_dim * 2;
    const uint8_t *blk = (const uint8_t *)a.pool + (size_t)bt[pos / a.block_size] * a.block_bytes;
    const uint8_t *s = blk + ((size_t)(a.layer * 2 + kv) * a.n_head_kv + hk) * slab;
    return (const __half *)s + (size_t)(pos % a.block_size) * a.head_dim;
}

__global__ static void __launch_bounds__(KC_ATT_THREADS)
    s_attn_chunk(kern_cuda_attn_t a, int n_split, kc_att_part *parts, float *accs) {
    __shared__ float q[KERN_CUDA_ATTN_MAX_D];
    __shared__ float p[KERN_CUDA_ATTN_SPLIT];
    __shared__ float red[KC_ATT_WARPS];
    int s = blockIdx.x, h = blockIdx.y, t = blockIdx.z, D = a.head_dim;
    int hk = h / (a.n_head / a.n_head_kv);
    int n_ctx = a.n_ctx[t];
    int lo = a.window > 0 && n_ctx > a.window ? n_ctx - a.window : 0; // sliding window
    int p0 = max(s * KERN_CUDA_ATTN_SPLIT, lo);
    int p1 = min(n_ctx, p0 + KERN_CUDA_ATTN_SPLIT);
    size_t part = ((size_t)t * a.n_head + h) * n_split + s;
    float *acc = accs + part * D;
    if (p0 >= p1) { // nothing to attend in this chunk
        if (threadIdx.x == 0)
            parts[part] = kc_att_part{-INFINITY, 0.0f};
        for (int d = threadIdx.x; d < D; d += blockDim.x)
            acc[d] = 0.0f;
        return;
    }
    const int32_t *bt = a.blocks + (size_t)a.seq[t] * a.max_blocks;
    const float *qt = a.q + ((size_t)t * a.n_head + h) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        q[d] = qt[d];
    __syncthreads();
    // scores: a warp per position, lanes over D
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int pos = p0 + wid; pos < p1; pos += KC_ATT_WARPS) {
        const __half *k = kc_kv_row(a, bt, 0, hk, pos);
        float dot = 0.0f;
        for (int d = lane; d < D; d += 32)
            dot = fmaf(q[d], __half2float(k[d]), dot);
        for (int o = 16; o > 0; o >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (lane == 0)
            p[pos - p0] = dot * a.scale;
    }
    __syncthreads();
    // chunk maximum and exp-sum
    float m = -INFINITY;
    for (int i = threadIdx.x; i < p1 - p0; i += blockDim.x)
        m = fmaxf(m, p[i]);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
        red[wid] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < KC_ATT_WARPS; w++)
        m = fmaxf(m, red[w]);
    __syncthreads(); // everyone has read red before it is reused
    float l = 0.0f;
    for (int i = threadIdx.x; i < p1 - p0; i += blockDim.x) {
        float e = expf(p[i] - m);
        p[i] = e;
        l += e;
    }
    for (int o = 16; o > 0; o >>= 1)
        l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0)
        red[wid] = l;
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int w = 0; w < KC_ATT_WARPS; w++)
            sum += red[w];
        parts[part] = kc_att_part{m, sum};
    }
    // weighted V: a thread per dimension, positions in order
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = 0.0f;
        for (int pos = p0; pos < p1; pos++)
            v = fmaf(p[pos - p0], __half2float(kc_kv_row(a, bt, 1, hk, pos)[d]), v);
        acc[d] = v;
    }
}

__global__ static void s_attn_reduce(kern_cuda_attn_t a, int n_split, const kc_att_part *parts,
                                     const float *accs) {
    int h = blockIdx.x, t = blockIdx.y, D = a.head_dim;
    size_t base = ((size_t)t * a.n_head + h) * n_split;
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++)
        M = fmaxf(M, parts[base + s].m);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++)
        if (parts[base + s].l > 0.0f)
            L += expf(parts[base + s].m - M) * parts[base + s].l;
    float *o = a.out + ((size_t)t * a.n_head + h) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < n_split; s++)
            if (parts[base + s].l > 0.0f)
                v += expf(parts[base + s].m - M) * accs[(base + s) * D + d];
        o[d] = L > 0.0f ? v / L : 0.0f;
    }
}

extern "C" int kern_cuda_attention(kern_cuda_ctx_t *c, const kern_cuda_attn_t *a) {
    if (!c || !a || !a->q || !a->out || !a->n_ctx || !a->seq || !a->blocks || !a->pool)
        return -EINVAL;
    if (a->n_tok < 0 || a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv ||
        a->head_dim < 1 || a->head_dim > KERN_CUDA_ATTN_MAX_D || a->block_size < 1 ||
        a->max_blocks < 1 || a->max_ctx < 1 || a->layer < 0 ||
        a->block_bytes <
            (size_t)(a->layer + 1) * 2 * a->n_head_kv * a->block_size * a->head_dim * 2)
        return -EINVAL;
    if (a->n_tok == 0)
        return 0;
    if (a->n_tok > 65535 || a->n_head > 65535)
        return -EINVAL;
    int n_split = (a->max_ctx + KERN_CUDA_ATTN_SPLIT - 1) / KERN_CUDA_ATTN_SPLIT;
    size_t n_parts = (size_t)a->n_tok * a->n_head * n_split;
    size_t part_bytes = (n_parts * sizeof(kc_att_part) + 255) / 256 * 256;
    void *scr;
    int rc = kern_cuda_scratch(c, part_bytes + n_parts * a->head_dim * sizeof(float), &scr);
    if (rc)
        return rc;
    kc_att_part *parts = (kc_att_part *)scr;
    float *accs = (float *)((uint8_t *)scr + part_bytes);
    s_attn_chunk<<<dim3((unsigned)n_split, (unsigned)a->n_head, (unsigned)a->n_tok), KC_ATT_THREADS,
                   0, c->stream>>>(*a, n_split, parts, accs);
    if ((rc = kern_cuda_launched(c, "attention chunks")))
        return rc;
    s_attn_reduce<<<dim3((unsigned)a->n_head, (unsigned)a->n_tok), 128, 0, c->stream>>>(
        *a, n_split, parts, accs);
    return kern_cuda_launched(c, "attention reduce");
}

// One block per (token, KV head, K|V): rows rounded to F16 (nearest even), as
// kern_f32_to_f16 does on the CPU.
__global__ static void s_kv_store(uint8_t *pool, size_t block_bytes, int block_size, int n_head_kv,
                                  int D, int layer, const float *k, const float *v,
                                  const int32_t *pos, const int32_t *seq, const int32_t *blocks,
                                  int max_blocks) {
    int t = blockIdx.x, hk = blockIdx.y, kv = blockIdx.z;
    int p = pos[t];
    const int32_t *bt = blocks + (size_t)seq[t] * max_blocks;
    size_t slab = (size_t)block_size * D * 2;
    uint8_t *blk = pool + (size_t)bt[p / block_size] * block_bytes;
    __half *row = (__half *)(blk + ((size_t)(layer * 2 + kv) * n_head_kv + hk) * slab) +
                  (size_t)(p % block_size) * D;
    const float *src = (kv ? v : k) + ((size_t)t * n_head_kv + hk) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        row[d] = __float2half_rn(src[d]);
}

extern "C" int kern_cuda_kv_store(kern_cuda_ctx_t *c, void *pool, size_t block_bytes,
                                  int block_size, int n_head_kv, int head_dim, int layer, int n_tok,
                                  const float *k, const float *v, const int32_t *pos,
                                  const int32_t *seq, const int32_t *blocks, int max_blocks) {
    if (!c || !pool || !k || !v || !pos || !seq || !blocks || block_size < 1 || n_head_kv < 1 ||
        head_dim < 1 || layer < 0 || n_tok < 0 || n_tok > 65535 || n_head_kv > 65535 ||
        max_blocks < 1 ||
        block_bytes < (size_t)(layer + 1) * 2 * n_head_kv * block_size * head_dim * 2)
        return -EINVAL;
    if (n_tok == 0)
        return 0;
    s_kv_store<<<dim3((unsigned)n_tok, (unsigned)n_head_kv, 2), 128, 0, c->stream>>>(
        (uint8_t *)pool, block_bytes, block_size, n_head_kv, head_dim, layer, k, v, pos, seq,
        blocks, max_blocks);
    return kern_cuda_launched(c, "kv_store");
}
