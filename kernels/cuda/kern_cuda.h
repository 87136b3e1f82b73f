/* kern_cuda.h - the CUDA backend's C interface: a context (device, stream,
 * cuBLAS handle, scratch), device memory and pinned host buffers, and one
 * function per op.  Built only where nvcc exists (STRATA_HAVE_CUDA); the CPU
 * path never depends on it.  No CUDA type appears here, so C code includes it.
 *
 * Conventions.  Every int function returns 0 or a negative errno: -ENODEV (no
 * device, or a context for another device), -EINVAL (a bad argument: checked
 * before anything is launched), -ENOMEM (device or pinned memory), -ENOTSUP
 * (a weight type or parameter this backend does not handle), -EIO (a CUDA or
 * cuBLAS error; the context's last error text says which).  Pointers named d*
 * or documented "device" are device memory from kern_cuda_malloc; ops are
 * queued on the context's stream and return before they finish: call
 * kern_cuda_sync to wait and collect a launch or execution error.  A context
 * is used by one thread at a time.
 */
#ifndef KERN_CUDA_H
#define KERN_CUDA_H

#include "kern_blocks.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices and contexts ------------------------------------------------ */

/* Number of usable CUDA devices (0 when no driver or no GPU). */
int kern_cuda_device_count(void);
/* Name of device 0 into buf; 0 or a negative errno. */
int kern_cuda_device_name(char *buf, int len);

typedef struct kern_cuda_ctx_t kern_cuda_ctx_t;

/* A context on device `device`: its own non-blocking compute stream, a copy
 * stream for KV transfers, a cuBLAS handle bound to the compute stream, and
 * scratch grown on demand.  NULL when the device does not exist or a resource
 * cannot be made. */
kern_cuda_ctx_t *kern_cuda_ctx_new(int device);
/* Make the context's device current for the calling thread (kern_cuda_ctx_new
 * does so for its caller; a thread taking the context over calls this first). */
int kern_cuda_ctx_bind(kern_cuda_ctx_t *self);
/* Free everything the context owns and null *self_p; safe on NULL and twice. */
void kern_cuda_ctx_destroy(kern_cuda_ctx_t **self_p);
/* Wait for the compute stream; 0, or -EIO for any error since the last sync. */
int kern_cuda_sync(kern_cuda_ctx_t *self);
/* Text of the context's last CUDA/cuBLAS error ("" when none). */
const char *kern_cuda_last_error(const kern_cuda_ctx_t *self);

/* The backend seam (kern_backend.h) over a new context on `device`; NULL when
 * the context cannot be made.  Programs reach it through kern_backend_cuda_new,
 * which loads the module (kern_cuda_module.h); the cuda tests call it too. */
struct kern_backend_t *kern_cuda_backend_new(int device);

/* ---- memory -------------------------------------------------------------- */

/* Device memory of `bytes` (256-byte aligned) into *dptr; -ENOMEM on failure. */
int kern_cuda_malloc(kern_cuda_ctx_t *self, void **dptr, size_t bytes);
/* Free device memory from kern_cuda_malloc; NULL is a no-op. */
void kern_cuda_free(kern_cuda_ctx_t *self, void *dptr);
/* Copy host -> device / device -> host, ordered after the work queued on the
 * compute stream and waited for: complete on return. */
int kern_cuda_upload(kern_cuda_ctx_t *self, void *dst, const void *src, size_t bytes);
int kern_cuda_download(kern_cuda_ctx_t *self, void *dst, const void *src, size_t bytes);
/* Copy device -> device, queued on the compute stream (not waited for). */
int kern_cuda_copy(kern_cuda_ctx_t *self, void *dst, const void *src, size_t bytes);
/* Free and total device memory of the context's device, in bytes. */
int kern_cuda_mem_info(kern_cuda_ctx_t *self, size_t *free_bytes, size_t *total_bytes);
/* Set bytes of device memory to 0 on the compute stream. */
int kern_cuda_memzero(kern_cuda_ctx_t *self, void *dst, size_t bytes);

/* A pool of pinned (page-locked, cudaHostAlloc) host buffers of one size, for
 * KV blocks moving between T0 (device) and T1 (host).  Buffers are made once,
 * at kern_cuda_pinned_new, and reused: get/put never allocate. */
typedef struct kern_cuda_pinned_t kern_cuda_pinned_t;
/* n_bufs buffers of buf_bytes each; NULL on failure (nothing leaks). */
kern_cuda_pinned_t *kern_cuda_pinned_new(kern_cuda_ctx_t *ctx, int n_bufs, size_t buf_bytes);
/* Free the buffers (every buffer must be back) and null *self_p; safe twice. */
void kern_cuda_pinned_destroy(kern_cuda_pinned_t **self_p);
/* A free buffer, or NULL when all are in use. */
void *kern_cuda_pinned_get(kern_cuda_pinned_t *self);
/* Return a buffer from kern_cuda_pinned_get; -EINVAL for any other pointer. */
int kern_cuda_pinned_put(kern_cuda_pinned_t *self, void *buf);
/* Buffers currently out (get minus put): 0 when nothing leaks. */
int kern_cuda_pinned_in_use(const kern_cuda_pinned_t *self);
/* CUDA graphs: the work queued on the compute stream between capture_begin and
 * capture_end recorded (not run) as one graph, instantiated, and launched again and again
 * with the same kernels, arguments and pointers (a decode step's ~300 launches as one).
 * Capture is thread-local: a call that would synchronize (a scratch that must grow, an
 * upload) fails the capture; capture_end then returns an error (-EIO, or -ESTALE when the
 * scratch moved) and nothing was run: the caller runs the work without a graph.  launch
 * returns -ESTALE for a graph captured before the scratch last moved (free it, capture
 * again). */
typedef struct kern_cuda_graph_t kern_cuda_graph_t;
int kern_cuda_capture_begin(kern_cuda_ctx_t *self);
int kern_cuda_capture_end(kern_cuda_ctx_t *self, kern_cuda_graph_t **graph);
int kern_cuda_graph_launch(kern_cuda_ctx_t *self, kern_cuda_graph_t *graph);
void kern_cuda_graph_free(kern_cuda_graph_t *graph);

/* One pinned host buffer of `bytes` (cudaHostAlloc) into *p / its release
 * (NULL a no-op): what a worker stages KV blocks in. */
int kern_cuda_host_alloc(kern_cuda_ctx_t *self, void **p, size_t bytes);
void kern_cuda_host_free(kern_cuda_ctx_t *self, void *p);
/* bytes device -> pinned host (d2h) or pinned host -> device (h2d) on the
 * context's copy stream, after the work queued on the compute stream so far
 * (the forward pass that wrote a block), waited for before returning, so a
 * caller sees the data; compute queued later does not wait for the copy. */
int kern_cuda_block_d2h(kern_cuda_ctx_t *self, void *host, const void *dev, size_t bytes);
int kern_cuda_block_h2d(kern_cuda_ctx_t *self, void *dev, const void *host, size_t bytes);

/* ---- matrix products ----------------------------------------------------- */

/* True when kern_cuda_matmul takes weights of type wt: F32, F16, Q4_0, Q4_1,
 * Q8_0, Q4_K, Q6_K. */
int kern_cuda_matmul_supports(kern_type_t wt);

/* out[c * out_stride + r] = sum_i W[r][i] * X[c][i]   for r < nr, c < nc.
 * W (device): nr rows of type wt, k elements each (k a multiple of the block
 * size), row r at (char *)w + r * w_stride.  X (device): nc rows of k floats,
 * row c at x + c * x_stride (floats).  out (device), out_stride in floats.
 * F32/F16 weights need 16-byte aligned rows (w and w_stride), or -EINVAL.
 * nc <= KERN_CUDA_MATVEC_MAX_NC: the dequantize-on-the-fly kernel (F32
 * arithmetic, weights read once for all nc columns).  Larger nc: the weight is
 * dequantized to F16 in tiles of rows and multiplied with cublasGemmEx (F16
 * inputs, F32 accumulation); X is rounded to F16 for it. */
#define KERN_CUDA_MATVEC_MAX_NC 8
int kern_cuda_matmul(kern_cuda_ctx_t *self, kern_type_t wt, int64_t k, int nr, int nc,
                     const void *w, size_t w_stride, const float *x, size_t x_stride, float *out,
                     size_t out_stride);
/* As kern_cuda_matmul, forcing one path: the mat-vec kernel for any nc
 * (force_gemm 0) or the cuBLAS one (force_gemm 1).  For tests and benchmarks. */
int kern_cuda_matmul_path(kern_cuda_ctx_t *self, int force_gemm, kern_type_t wt, int64_t k, int nr,
                          int nc, const void *w, size_t w_stride, const float *x, size_t x_stride,
                          float *out, size_t out_stride);
/* cublasGemmEx on F16 operands with F32 accumulation, column-major as cuBLAS:
 * C (m, n) = A^T (m, k) * B (k, n), A (k, m) lda = k, B (k, n) ldb = k,
 * C ldc = m, F32 output.  The building block of the large-batch path; also
 * what the benchmark times. */
int kern_cuda_gemm_f16(kern_cuda_ctx_t *self, int m, int n, int k, const kern_f16_t *a,
                       const kern_f16_t *b, float *c);
/* dst[r * k + i] = W[r][i] as F16, for rows r0 .. r0+nr-1 of a weight laid
 * out as in kern_cuda_matmul (dst device, nr * k halves). */
int kern_cuda_dequant_f16(kern_cuda_ctx_t *self, kern_type_t wt, int64_t k, int nr, const void *w,
                          size_t w_stride, kern_f16_t *dst);
/* x (device, n floats) -> dst (device, n halves), round to nearest even. */
int kern_cuda_f32_to_f16(kern_cuda_ctx_t *self, const float *x, kern_f16_t *dst, size_t n);

/* ---- elementwise and row ops (device buffers, floats) ---------------------- */

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for n_rows rows of n; out may equal x. */
int kern_cuda_rmsnorm(kern_cuda_ctx_t *self, float *out, const float *x, const float *w, int n_rows,
                      int n, float eps);
/* Each of n_rows rows of n floats = softmax(row), in place, max subtracted. */
int kern_cuda_softmax(kern_cuda_ctx_t *self, float *x, int n_rows, int n);
/* x[r][i] += y[r * y_stride + i] for n_rows rows of dim (y_stride 0: one row for all). */
int kern_cuda_add(kern_cuda_ctx_t *self, float *x, const float *y, int n_rows, int dim,
                  size_t y_stride);
/* out[i] = gelu_tanh(gate[i]) * up[i] (the reference's formula) for n elements. */
int kern_cuda_geglu(kern_cuda_ctx_t *self, float *out, const float *gate, const float *up,
                    int64_t n);
/* x[i] *= s for n elements. */
int kern_cuda_scale(kern_cuda_ctx_t *self, float *x, int64_t n, float s);
/* out[i] = silu(gate[i]) * up[i] for n elements; out may equal gate. */
int kern_cuda_swiglu(kern_cuda_ctx_t *self, float *out, const float *gate, const float *up,
                     int64_t n);
/* RoPE as kern_ops_t.rope, for n_tok tokens: x is (n_tok, n_heads, head_dim),
 * cos_sin (n_tok, n_rot) holds each token's n_rot/2 (cos, sin) pairs (the
 * table the CPU forward computes), neox as kern_ops_t.rope.  In place. */
int kern_cuda_rope(kern_cuda_ctx_t *self, float *x, int n_tok, int n_heads, int head_dim, int n_rot,
                   const float *cos_sin, int neox);
/* Embedding lookup: out[t] = dequant(table row ids[t]) for n_tok tokens, each
 * row `dim` elements of type wt, row_bytes apart; ids (device) must lie in
 * 0 .. n_rows-1 (others give a zero row).  F32/F16 tables need 16-byte
 * aligned rows (-EINVAL otherwise), as matmul's float weights do. */
int kern_cuda_embed(kern_cuda_ctx_t *self, kern_type_t wt, const void *table, size_t row_bytes,
                    int n_rows, const int32_t *ids, int n_tok, int dim, float *out);

/* ---- paged attention (F16 KV, kern_kv.h layout) ---------------------------- */

/* One call attends n_tok query tokens, any mix of sequences and positions
 * (decode: one token per sequence; a prefill chunk: consecutive positions of
 * one sequence, causal), over the F16 pool in kern_kv.h's layout: block b at
 * pool + b * block_bytes, (n_layer, 2 [K, V], n_head_kv) slabs of
 * (block_size, head_dim) halves.  Positions are split in chunks of
 * KERN_CUDA_ATTN_SPLIT, each chunk's partial softmax reduced afterwards
 * (flash-decoding), so a long context uses the whole device. */
#define KERN_CUDA_ATTN_SPLIT 256
#define KERN_CUDA_ATTN_MAX_D 256
typedef struct {
    int n_head;            /* query heads */
    int n_head_kv;         /* KV heads (n_head a multiple of it: GQA) */
    int head_dim;          /* D, at most KERN_CUDA_ATTN_MAX_D */
    int n_tok;             /* query tokens in this call */
    const float *q;        /* device (n_tok, n_head, D), RoPE applied */
    float *out;            /* device (n_tok, n_head, D) */
    const int32_t *n_ctx;  /* device (n_tok): token t attends positions 0 .. n_ctx[t]-1 */
    const int32_t *seq;    /* device (n_tok): row of `blocks` for token t */
    const int32_t *blocks; /* device (n_seq, max_blocks): block tables */
    int max_blocks;        /* row stride of blocks */
    int max_ctx;           /* upper bound of every n_ctx[t] (host side: sizes the grid) */
    const void *pool;      /* device base of the F16 KV pool */
    size_t block_bytes;    /* bytes per block (kern_kv_block_bytes) */
    int block_size;        /* positions per block */
    int layer;             /* which layer's slabs */
    float scale;           /* usually 1/sqrt(D) */
    int window;            /* > 0: token t attends only n_ctx[t]-window .. n_ctx[t]-1 */
} kern_cuda_attn_t;
int kern_cuda_attention(kern_cuda_ctx_t *self, const kern_cuda_attn_t *a);

/* Store n_tok tokens' K and V (device (n_tok, n_head_kv, head_dim) floats) into
 * the F16 pool at layer `layer`: token t at position pos[t] of block table row
 * seq[t] (pos, seq, blocks device; same layout as kern_cuda_attn_t). */
int kern_cuda_kv_store(kern_cuda_ctx_t *self, void *pool, size_t block_bytes, int block_size,
                       int n_head_kv, int head_dim, int layer, int n_tok, const float *k,
                       const float *v, const int32_t *pos, const int32_t *seq,
                       const int32_t *blocks, int max_blocks);

/* ---- token choice -------------------------------------------------------- */

/* One logit_bias entry (model_logit_bias_t's layout): logit[token] += bias. */
typedef struct {
    int32_t token; /* 0 .. n_vocab-1 (others skipped) */
    float bias;
} kern_cuda_logit_bias_t;

/* Sampler parameters: model_sampler_params_t's fields, the same meaning and the
 * same order (fields after seed are zero = off in a positional initializer). */
typedef struct {
    float temperature;       /* <= 0: greedy */
    int top_k;               /* 1 .. KERN_CUDA_TOPK_MAX on the device (0: -ENOTSUP) */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    int repeat_last_n;       /* recent tokens the penalty looks at */
    uint64_t seed;           /* per-request seed */
    float presence_penalty;  /* OpenAI's, over the row's history from gen_start; 0: off */
    float frequency_penalty; /* per occurrence there; 0: off */
    int gen_start;           /* index in the row's history of the first generated token */
    const kern_cuda_logit_bias_t *bias; /* (n_bias) device memory, or NULL */
    int n_bias;                         /* entries of bias */
} kern_cuda_sample_params_t;
#define KERN_CUDA_TOPK_MAX 256

/* ids[t] (host) = first index of the maximum of logits row t (device,
 * (n_rows, n_vocab)), as model_argmax: first index on ties, NaN never wins. */
int kern_cuda_argmax(kern_cuda_ctx_t *self, const float *logits, int n_rows, int n_vocab,
                     int32_t *ids);
/* One token per row as model_sampler_sample would choose it for row t with
 * params p[t] (host), history (device, n_hist[t] ids from hist_off[t] of hist;
 * hist, hist_off, n_hist may be NULL when no penalty applies) and position
 * pos[t] (host): logit bias, repetition penalty, presence/frequency penalties,
 * temperature, top-k, softmax, top-p, min-p, then the (seed, pos) draw.  Bias and
 * penalties are applied to the logits in place, as on the CPU, with the same float
 * operations (so the adjusted logits are bitwise the CPU's).  ids (host) get the tokens; only they
 * come back.  -ENOTSUP when a row has temperature > 0 and top_k outside 1 .. KERN_CUDA_TOPK_MAX
 * (and < n_vocab): the caller then samples on the host. */
int kern_cuda_sample(kern_cuda_ctx_t *self, float *logits, int n_rows, int n_vocab,
                     const kern_cuda_sample_params_t *p, const int32_t *hist,
                     const int32_t *hist_off, const int32_t *n_hist, const int32_t *pos,
                     int32_t *ids);

/* ---- host-buffer conveniences (tests) ------------------------------------ */

/* out[r] = rmsnorm(x[r]) * w for n_rows rows of n floats, on device 0, host
 * buffers in and out.  0, or -ENODEV / -EIO. */
int kern_cuda_rmsnorm_host(float *out, const float *x, const float *w, int n_rows, int n,
                           float eps);

/* ---- measurement (benchmarks) -------------------------------------------- */

/* Device-to-device copy bandwidth in GB/s (10^9 bytes read + written per
 * second) over `bytes` buffers, best of `iters`: the HBM bound the mat-vec
 * figures are compared with.  0 or a negative errno. */
int kern_cuda_copy_bandwidth(kern_cuda_ctx_t *self, size_t bytes, int iters, double *gbps);
/* Seconds between two points on the compute stream: start a timer, queue
 * work, stop it (which syncs). */
int kern_cuda_timer_start(kern_cuda_ctx_t *self);
int kern_cuda_timer_stop(kern_cuda_ctx_t *self, double *seconds);

#ifdef __cplusplus
}
#endif
#endif
