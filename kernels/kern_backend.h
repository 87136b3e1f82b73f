/* kern_backend.h - the seam between the forward pass and the device it runs
 * on: one table of function pointers (matmul per weight type, paged attention
 * and the KV store, norms, RoPE, activation, embedding lookup, sampling, and
 * the memory moves between them), so a forward pass is written once.  The CPU
 * backend (kern_backend_cpu.c: thin wrappers over kern_ops.h) is the
 * reference; the CUDA backend (kernels/cuda/kern_backend_cuda.cu over
 * kern_cuda.h) sits beside it.
 *
 * Every pointer an op takes is backend memory: host memory for the CPU
 * backend, device memory (from `alloc`) for CUDA; only `upload`, `download`
 * and the ids `sample` returns cross between host and backend.  Ops may be
 * queued and finish later: `sync` waits and reports an error.  Every int op
 * returns 0 or a negative errno (-EINVAL bad argument, -ENOTSUP a type or
 * parameter the backend lacks, -ENOMEM, -EIO a device error).  A backend is
 * used by one thread at a time.
 */
#ifndef KERN_BACKEND_H
#define KERN_BACKEND_H

#include "kern_blocks.h"
#include "kern_ops.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kern_backend_t kern_backend_t;

/* Paged attention of n_tok query tokens (any mix of sequences and positions:
 * decode or a causal prefill chunk) over a KV pool in kern_kv.h's layout. */
typedef struct {
    int n_head;            /* query heads; head h reads KV head h / (n_head / n_head_kv) */
    int n_head_kv;         /* KV heads */
    int head_dim;          /* D */
    int n_tok;             /* query tokens */
    const float *q;        /* (n_tok, n_head, D), RoPE applied */
    float *out;            /* (n_tok, n_head, D) */
    const int32_t *n_ctx;  /* (n_tok): token t attends positions 0 .. n_ctx[t]-1 */
    const int32_t *seq;    /* (n_tok): row of `blocks` holding token t's block table */
    const int32_t *blocks; /* (n_seq, max_blocks) block tables */
    int max_blocks;        /* row stride of blocks */
    int max_ctx;           /* >= every n_ctx[t] (a host-side bound) */
    const void *pool;      /* pool base: block b at pool + b * block_bytes */
    size_t block_bytes;    /* kern_kv_block_bytes */
    int block_size;        /* positions per block */
    int layer;             /* which layer's slabs */
    kern_type_t kv_type;   /* KERN_F32, KERN_F16, KERN_I8 (CPU); KERN_F16 (CUDA) */
    float scale;           /* usually 1/sqrt(D) */
    int window;            /* > 0: token t sees only its last `window` positions (a sliding-window
                              layer: n_ctx[t] - window .. n_ctx[t] - 1); 0: all of them */
} kern_backend_attn_t;

/* Store n_tok tokens' K and V rows ((n_tok, n_head_kv, D) floats each) into
 * the pool at `layer`: token t at position pos[t] of block table row seq[t],
 * converted to the pool's type (F16 round to nearest even; I8 by
 * kern_i8_quant_row, the scale after the slab's int8 rows). */
typedef struct {
    void *pool;            /* pool base */
    size_t block_bytes;    /* kern_kv_block_bytes */
    int block_size;        /* positions per block */
    int n_head_kv;         /* KV heads */
    int head_dim;          /* D */
    int layer;             /* layer to write */
    kern_type_t kv_type;   /* the pool's type */
    int n_tok;             /* tokens */
    const float *k;        /* (n_tok, n_head_kv, D) */
    const float *v;        /* (n_tok, n_head_kv, D) */
    const int32_t *pos;    /* (n_tok) positions */
    const int32_t *seq;    /* (n_tok) block table rows */
    const int32_t *blocks; /* (n_seq, max_blocks) */
    int max_blocks;        /* row stride of blocks */
} kern_backend_kv_t;

/* The sampler's parameters (model_sampler_params_t's fields and meaning). */
typedef struct {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;    /* recent tokens the penalty looks at */
    uint64_t seed;        /* per-request seed; the draw at position p depends on (seed, p) */
} kern_backend_sample_t;

/* out[c * out_stride + r] = W[r] . X[c] for r < nr, c < nc: W nr rows of k
 * elements of type wt, w_stride bytes apart; X nc rows of k floats, x_stride
 * floats apart; out_stride floats.  (kern_ops_t.gemm's contract with float
 * activations: a backend quantizes them as its kernels need.) */
typedef int (*kern_backend_matmul_fn)(kern_backend_t *be, kern_type_t wt, int64_t k, int nr, int nc,
                                      const void *w, size_t w_stride, const float *x,
                                      size_t x_stride, float *out, size_t out_stride);

struct kern_backend_t {
    const char *name; /* "cpu" or "cuda" */
    void *impl;       /* the backend's own state */

    /* matmul[wt]: the product for weights of type wt, NULL where this backend
     * has none (the caller checks before loading a model onto it). */
    kern_backend_matmul_fn matmul[KERN_TYPE_COUNT];
    int (*attention)(kern_backend_t *be, const kern_backend_attn_t *a);
    int (*kv_store)(kern_backend_t *be, const kern_backend_kv_t *a);
    /* n_rows rows of n: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; out may equal x. */
    int (*rmsnorm)(kern_backend_t *be, float *out, const float *x, const float *w, int n_rows,
                   int n, float eps);
    /* n_rows rows of n, each softmax'd in place. */
    int (*softmax)(kern_backend_t *be, float *x, int n_rows, int n);
    /* x (n_tok, n_heads, head_dim) in place; cos_sin (n_tok, n_rot) as kern_ops_t.rope. */
    int (*rope)(kern_backend_t *be, float *x, int n_tok, int n_heads, int head_dim, int n_rot,
                const float *cos_sin, bool neox);
    /* x[r][i] += y[r * y_stride + i] for r < n_rows, i < dim (x contiguous rows of dim):
     * y_stride dim adds a (n_rows, dim) array (a residual), 0 adds the one row y to every
     * row (a bias). */
    int (*add)(kern_backend_t *be, float *x, const float *y, int n_rows, int dim, size_t y_stride);
    /* out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU, kern_ops_t.geglu's formula); out may equal
     * gate. */
    int (*geglu)(kern_backend_t *be, float *out, const float *gate, const float *up, int64_t n);
    /* x[i] *= s for n elements. */
    int (*scale)(kern_backend_t *be, float *x, int64_t n, float s);
    /* out[i] = silu(gate[i]) * up[i]; out may equal gate. */
    int (*swiglu)(kern_backend_t *be, float *out, const float *gate, const float *up, int64_t n);
    /* out[t] = dequant(row ids[t] of table), dim elements of type wt, rows row_bytes
     * apart; an id outside 0 .. n_rows-1 gives -EINVAL (CPU) or a zero row (CUDA,
     * which does not read ids back). */
    int (*embed)(kern_backend_t *be, kern_type_t wt, const void *table, size_t row_bytes,
                 int n_rows, const int32_t *ids, int n_tok, int dim, float *out);
    /* ids[r] (host) = the token model_sampler_sample picks from logits row r
     * (n_vocab floats; the penalty is applied in place) with p[r] (host),
     * history hist[hist_off[r] ..][0 .. n_hist[r]) (backend memory; all three
     * NULL for none) and position pos[r] (host). */
    int (*sample)(kern_backend_t *be, float *logits, int n_rows, int n_vocab,
                  const kern_backend_sample_t *p, const int32_t *hist, const int32_t *hist_off,
                  const int32_t *n_hist, const int32_t *pos, int32_t *ids);

    /* Backend memory: alloc (64-byte aligned at least; zeroed for CPU, not for CUDA), free (NULL a
     * no-op), and copies from and to host memory, complete on return. */
    int (*alloc)(kern_backend_t *be, void **p, size_t bytes);
    void (*free)(kern_backend_t *be, void *p);
    int (*upload)(kern_backend_t *be, void *dst, const void *src, size_t bytes);
    int (*download)(kern_backend_t *be, void *dst, const void *src, size_t bytes);
    /* Copy bytes of backend memory to backend memory (not overlapping), ordered after
     * the ops queued before it: a KV block's copy-on-write. */
    int (*copy)(kern_backend_t *be, void *dst, const void *src, size_t bytes);
    /* Host memory that moves to and from this backend fast (CUDA: pinned, cudaHostAlloc;
     * CPU: plain): where a worker stages KV blocks; host_free(NULL) is a no-op. */
    int (*host_alloc)(kern_backend_t *be, void **p, size_t bytes);
    void (*host_free)(kern_backend_t *be, void *p);
    /* A KV block's bytes out of backend memory into host (block_out) or in from host
     * (block_in), host from host_alloc: after the ops queued so far (the forward pass
     * that wrote the block), on the backend's copy stream where it has one (CUDA), so
     * compute queued later runs beside it; complete on return. */
    int (*block_out)(kern_backend_t *be, void *host, const void *src, size_t bytes);
    int (*block_in)(kern_backend_t *be, void *dst, const void *host, size_t bytes);
    /* Graphs (NULL on a backend without them, the CPU's): the ops issued between
     * capture_begin and capture_end are recorded, not run, as one graph that replay runs
     * again with the same arguments and pointers (what changes between replays is the
     * contents of backend memory).  capture_end fails (-errno, *graph NULL, nothing run)
     * when an op could not be recorded; the caller then issues the ops again without a
     * graph.  replay gives -ESTALE for a graph the backend can no longer run (its scratch
     * moved): free it and capture again. */
    int (*capture_begin)(kern_backend_t *be);
    int (*capture_end)(kern_backend_t *be, void **graph);
    int (*replay)(kern_backend_t *be, void *graph);
    void (*graph_free)(kern_backend_t *be, void *graph);
    /* Wait for queued ops; 0 or the first error. */
    int (*sync)(kern_backend_t *be);
    /* Free the backend and null *be_p (kern_backend_destroy calls it). */
    void (*destroy)(kern_backend_t **be_p);
};

/* The CPU backend over `ops` (NULL: kern_ops_best()); NULL on ENOMEM.  Single
 * threaded: callers split rows between threads as they do with kern_ops_t. */
kern_backend_t *kern_backend_cpu_new(const kern_ops_t *ops);
/* The CUDA backend on `device`; NULL in a build without CUDA, when the CUDA
 * module (libstrata_cuda.so, kern_cuda_module.h) cannot be loaded, without
 * that device, or when its context cannot be made.  Loads the module on the
 * first call (kernels/kern_cuda_load.c). */
kern_backend_t *kern_backend_cuda_new(int device);
/* Number of usable CUDA devices (0: no driver or no GPU), loading the CUDA
 * module on the first call; -1 when there is no CUDA to ask, with the reason
 * in why (a build without CUDA, a module missing or from another build). */
int kern_backend_cuda_devices(char *why, size_t len);
/* Destroy either kind and null *self_p; safe on NULL and twice. */
void kern_backend_destroy(kern_backend_t **self_p);

#endif
