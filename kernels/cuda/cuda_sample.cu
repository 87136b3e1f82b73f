// cuda_sample.cu - token choice on the device, so only token ids come back:
// argmax, and the sampler of model/model_sampler.c (logit bias, repetition
// penalty, OpenAI's presence and frequency penalties, temperature, top-k,
// softmax, top-p, min-p, the (seed, position) draw).
//
// One thread block per row.  Top-k is exact: a 32-step bisection on the
// order-preserving integer key of logit / temperature finds the k-th largest
// value K; the values above K and the lowest-id values equal to K (the CPU's
// tie order) are gathered and bitonic-sorted by (value desc, id asc); one
// thread then runs the CPU's softmax / top-p / min-p / draw on those k in the
// same float and double operations.  The one difference left is expf, which
// CUDA computes within 2 ulp rather than glibc's rounding: a draw can differ
// only when it falls within ~1e-7 (relative) of a boundary between two tokens.
#include "cuda_common.cuh"

#define KC_S_THREADS KERN_CUDA_TOPK_MAX // one candidate per thread in the sort

// Order-preserving unsigned key of a float (not NaN); -0 and +0 share one
// key, as they compare equal on the CPU (and then tie by id).
__device__ __forceinline__ uint32_t kc_key(float f) {
    uint32_t u = __float_as_uint(f + 0.0f); // -0 + 0 = +0 under round-to-nearest
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// splitmix64 of (seed, pos): model_sampler.c's s_mix.
__device__ __forceinline__ uint64_t kc_mix(uint64_t seed, uint64_t pos) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (pos + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Number of threads in the block for which pred holds, and this thread's rank
// among them (in thread order).
__device__ __forceinline__ int kc_block_rank(bool pred, int *total, int *warp_counts) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    unsigned b = __ballot_sync(0xffffffffu, pred);
    __syncthreads();
    if (lane == 0)
        warp_counts[wid] = __popc(b);
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < nw; w++) {
        before += w < wid ? warp_counts[w] : 0;
        all += warp_counts[w];
    }
    *total = all;
    return before + __popc(b & ((1u << lane) - 1u));
}

struct kc_row_args {
    const int32_t *hist;     // device history ids (or NULL)
    const int32_t *hist_off; // device (n_rows) or NULL
    const int32_t *n_hist;   // device (n_rows) or NULL
};

__global__ static void __launch_bounds__(KC_S_THREADS)
    s_sample(float *logits, int n, const kern_cuda_sample_params_t *params, const int32_t *pos,
             kc_row_args h, int greedy_only, int32_t *ids) {
    __shared__ float cv[KC_S_THREADS];
    __shared__ int ci[KC_S_THREADS];
    __shared__ int wc[KC_S_THREADS / 32];
    __shared__ float bv[KC_S_THREADS];
    __shared__ int bi[KC_S_THREADS];
    __shared__ int s_n;
    int row = blockIdx.x, tid = threadIdx.x;
    float *x = logits + (size_t)row * n;
    kern_cuda_sample_params_t p = params[row];
    if (greedy_only)
        p.temperature = 0.0f;

    // logit bias (sequential, in the CPU's order)
    if (!greedy_only && tid == 0 && p.bias)
        for (int i = 0; i < p.n_bias; i++) {
            int32_t t = p.bias[i].token;
            if (t >= 0 && t < n)
                x[t] = __fadd_rn(x[t], p.bias[i].bias);
        }
    // repetition penalty (sequential, as on the CPU: each distinct token once)
    if (!greedy_only && tid == 0 && h.hist && h.n_hist && h.hist_off && p.repeat_penalty != 1.0f &&
        p.repeat_last_n > 0) {
        const int32_t *hs = h.hist + h.hist_off[row];
        int nh = h.n_hist[row];
        int from = nh > p.repeat_last_n ? nh - p.repeat_last_n : 0;
        for (int i = from; i < nh; i++) {
            int32_t t = hs[i];
            if (t < 0 || t >= n)
                continue;
            bool seen = false;
            for (int j = from; j < i && !seen; j++)
                seen = hs[j] == t;
            if (!seen)
                x[t] = x[t] > 0 ? x[t] / p.repeat_penalty : x[t] * p.repeat_penalty;
        }
    }
    __syncthreads();
    // presence / frequency penalties over the completion hist[gen_start ..): the
    // thread holding a token's first occurrence counts it and adjusts its logit
    // (one writer per token), with the CPU's operations, unfused
    if (!greedy_only && h.hist && h.n_hist && h.hist_off &&
        (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)) {
        const int32_t *hs = h.hist + h.hist_off[row];
        int nh = h.n_hist[row], from = p.gen_start > 0 ? p.gen_start : 0;
        for (int i = from + tid; i < nh; i += blockDim.x) {
            int32_t t = hs[i];
            bool first = t >= 0 && t < n;
            for (int j = from; j < i && first; j++)
                first = hs[j] != t;
            if (!first)
                continue;
            int cnt = 1;
            for (int j = i + 1; j < nh; j++)
                cnt += hs[j] == t;
            float f = __fmul_rn(p.frequency_penalty, (float)cnt);
            x[t] = __fsub_rn(x[t], __fadd_rn(f, p.presence_penalty));
        }
    }
    __syncthreads();

    if (p.temperature <= 0.0f) { // argmax: first index of the maximum, NaN never wins
        float best = -INFINITY;
        int at = n;
        for (int i = tid; i < n; i += blockDim.x)
            // strict: the lowest index of this thread's stride wins; the first
            // -inf stands when nothing is larger (model_argmax's second pass)
            if (x[i] > best || (at == n && x[i] == best)) {
                best = x[i];
                at = i;
            }
        bv[tid] = best;
        bi[tid] = at;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) {
                float ov = bv[tid + s];
                int oi = bi[tid + s];
                if (ov > bv[tid] || (ov == bv[tid] && oi < bi[tid])) {
                    bv[tid] = ov;
                    bi[tid] = oi;
                }
            }
            __syncthreads();
        }
        if (tid == 0)
            ids[row] = bi[0] < n ? bi[0] : 0; // every value NaN or -inf: 0, as model_argmax
        return;
    }

    int k = p.top_k > 0 && p.top_k < n ? p.top_k : n; // the caller checked k <= KC_S_THREADS
    // bisection for the k-th largest key: the largest K with count(key >= K) >= k
    uint32_t K = 0;
    for (int bit = 31; bit >= 0; bit--) {
        uint32_t cand = K | (1u << bit);
        int cnt = 0;
        for (int i = tid; i < n; i += blockDim.x)
            cnt += kc_key(x[i] / p.temperature) >= cand;
        // block sum of cnt
        for (int o = 16; o > 0; o >>= 1)
            cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
        __syncthreads();
        if ((tid & 31) == 0)
            wc[tid >> 5] = cnt;
        __syncthreads();
        int total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            total += wc[w];
        if (total >= k)
            K = cand;
    }
    // gather: keys above K in any order, then keys equal to K by increasing id
    if (tid == 0)
        s_n = 0;
    __syncthreads();
    for (int i = tid; i < n; i += blockDim.x) {
        float v = x[i] / p.temperature;
        if (kc_key(v) > K) {
            int at = atomicAdd(&s_n, 1);
            cv[at] = v;
            ci[at] = i;
        }
    }
    __syncthreads();
    int n_above = s_n;
    int filled = n_above;
    for (int base = 0; base < n && filled < k; base += blockDim.x) {
        int i = base + tid;
        float v = i < n ? x[i] / p.temperature : 0.0f;
        bool eq = i < n && kc_key(v) == K;
        int total;
        int r = kc_block_rank(eq, &total, wc);
        if (eq && filled + r < k) {
            cv[filled + r] = v;
            ci[filled + r] = i;
        }
        filled += total;
    }
    __syncthreads();
    // bitonic sort of the k candidates (padding sorts last) by (value desc, id asc)
    if (tid >= k) {
        cv[tid] = -INFINITY;
        ci[tid] = INT32_MAX;
    }
    __syncthreads();
    for (int size = 2; size <= KC_S_THREADS; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            int j = tid ^ stride;
            if (j > tid) {
                float a = cv[tid], b = cv[j];
                int ia = ci[tid], ib = ci[j];
                bool a_first = a > b || (a == b && ia < ib);
                bool up = (tid & size) == 0;
                if (up != a_first) {
                    cv[tid] = b;
                    cv[j] = a;
                    ci[tid] = ib;
                    ci[j] = ia;
                }
            }
            __syncthreads();
        }
    if (tid != 0)
        return;
    // model_sampler.c's s_candidates and draw, operation for operation
    int m = k;
    float mx = cv[0];
    double sum = 0;
    for (int i = 0; i < m; i++) {
        cv[i] = expf(cv[i] - mx);
        sum += cv[i];
    }
    for (int i = 0; i < m; i++)
        cv[i] = (float)(cv[i] / sum);
    if (p.top_p < 1.0f) {
        double cum = 0;
        int keep = m;
        for (int i = 0; i < m; i++) {
            cum += cv[i];
            if (cum >= p.top_p) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    if (p.min_p > 0) {
        float thr = p.min_p * cv[0];
        int keep = 1;
        while (keep < m && cv[keep] >= thr)
            keep++;
        m = keep;
    }
    double total = 0;
    for (int i = 0; i < m; i++)
        total += cv[i];
    double u =
        (double)(kc_mix(p.seed, (uint64_t)pos[row]) >> 11) * (1.0 / 9007199254740992.0) * total;
    double cum = 0;
    for (int i = 0; i < m; i++) {
        cum += cv[i];
        if (u < cum) {
            ids[row] = ci[i];
            return;
        }
    }
    ids[row] = ci[m - 1];
}

static int s_run(kern_cuda_ctx_t *c, float *logits, int n_rows, int n_vocab,
                 const kern_cuda_sample_params_t *p, kc_row_args h, const int32_t *pos,
                 int greedy_only, int32_t *ids) {
    size_t pb = ((size_t)n_rows * sizeof *p + 255) / 256 * 256;
    size_t ib = ((size_t)n_rows * sizeof(int32_t) + 255) / 256 * 256;
    void *scr;
    int rc = kern_cuda_scratch(c, pb + 2 * ib, &scr);
    if (rc)
        return rc;
    kern_cuda_sample_params_t *dp = (kern_cuda_sample_params_t *)scr;
    int32_t *dpos = (int32_t *)((uint8_t *)scr + pb), *dids = (int32_t *)((uint8_t *)scr + pb + ib);
    if (p)
        KC_CHECK(c, cudaMemcpyAsync(dp, p, (size_t)n_rows * sizeof *p, cudaMemcpyHostToDevice,
                                    c->stream));
    else
        KC_CHECK(c, cudaMemsetAsync(dp, 0, (size_t)n_rows * sizeof *p, c->stream));
    if (pos)
        KC_CHECK(c, cudaMemcpyAsync(dpos, pos, (size_t)n_rows * sizeof *pos, cudaMemcpyHostToDevice,
                                    c->stream));
    else
        KC_CHECK(c, cudaMemsetAsync(dpos, 0, (size_t)n_rows * sizeof *pos, c->stream));
    s_sample<<<n_rows, KC_S_THREADS, 0, c->stream>>>(logits, n_vocab, dp, dpos, h, greedy_only,
                                                     dids);
    if ((rc = kern_cuda_launched(c, "sample")))
        return rc;
    KC_CHECK(c, cudaMemcpyAsync(ids, dids, (size_t)n_rows * sizeof *ids, cudaMemcpyDeviceToHost,
                                c->stream));
    KC_CHECK(c, cudaStreamSynchronize(c->stream));
    return kern_cuda_launched(c, "sample");
}

extern "C" int kern_cuda_argmax(kern_cuda_ctx_t *c, const float *logits, int n_rows, int n_vocab,
                                int32_t *ids) {
    if (!c || !logits || !ids || n_rows < 0 || n_vocab < 1)
        return -EINVAL;
    if (n_rows == 0)
        return 0;
    // greedy_only never writes the logits: the cast is safe
    return s_run(c, (float *)logits, n_rows, n_vocab, nullptr,
                 kc_row_args{nullptr, nullptr, nullptr}, nullptr, 1, ids);
}

extern "C" int kern_cuda_sample(kern_cuda_ctx_t *c, float *logits, int n_rows, int n_vocab,
                                const kern_cuda_sample_params_t *p, const int32_t *hist,
                                const int32_t *hist_off, const int32_t *n_hist, const int32_t *pos,
                                int32_t *ids) {
    if (!c || !logits || !p || !pos || !ids || n_rows < 0 || n_vocab < 1)
        return -EINVAL;
    for (int r = 0; r < n_rows; r++) {
        if (p[r].temperature <= 0)
            continue;
        int k = p[r].top_k > 0 && p[r].top_k < n_vocab ? p[r].top_k : n_vocab;
        if (k > KERN_CUDA_TOPK_MAX)
            return -ENOTSUP;
    }
    if (n_rows == 0)
        return 0;
    return s_run(c, logits, n_rows, n_vocab, p, kc_row_args{hist, hist_off, n_hist}, pos, 0, ids);
}
