/* kern_ops.h - the CPU compute kernels behind one table of function pointers.
 * Every op has a scalar reference (kernels/cpu/NAME_ref.c) and SIMD variants
 * (AVX2/FMA, AVX-VNNI, AVX-512/VNNI: KERN_ISA_LIST below); kern_ops_best()
 * picks once from the CPU's features.
 * Kernels do compute only: no allocation, no I/O, no threads (callers split work).
 */
#ifndef KERN_OPS_H
#define KERN_OPS_H

#include "kern_blocks.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a type is: name, elements per block, bytes per block, and the type the
 * activations must be quantized to before a dot product with a row of it. */
typedef struct {
    const char *name;         /* "q4_1", as GGUF tools spell it */
    int block_size;           /* elements per block (1 for float types) */
    size_t type_size;         /* bytes per block */
    kern_type_t vec_dot_type; /* activation format for kern_ops_t.gemm */
    bool is_weight;           /* may appear as a weight tensor */
} kern_type_traits_t;

/* Traits of type t, or NULL when t is not a type strata supports. */
const kern_type_traits_t *kern_type_traits(int t);
/* Bytes of a row of n elements of type t (n must be a multiple of its block size). */
size_t kern_row_size(kern_type_t t, int64_t n);

float kern_f16_to_f32(kern_f16_t h);
kern_f16_t kern_f32_to_f16(float f);
float kern_bf16_to_f32(kern_bf16_t h);
kern_bf16_t kern_f32_to_bf16(float f); /* round to nearest even */

/* A KERN_I8 KV row: symmetric int8 with one float scale per row of n values:
 * scale = max|x| / 127, q = round-to-nearest-even(x * (127 / max|x|)) in
 * -127..127, x ~= q * scale (q all zero and scale 0 for a zero row).  Writes
 * q[0..n) and returns the scale.  The one definition that both the pool writer
 * (model/model_forward.c) and kvstore/kv_codec.c use, so their bytes agree. */
float kern_i8_quant_row(const float *x, int8_t *q, int n);

/* Attention of one KV head's query group at one query position, over paged KV.
 * Position p of the sequence lives in block blocks[p / block_size], slot
 * s = p % block_size.  k_base points at this (layer, KV head)'s slab in block
 * 0 and each block's slab is block_stride bytes further; within a slab:
 *   KERN_F32, KERN_F16  row s at slab + s * head_dim * elt (elt 4 or 2);
 *   KERN_I8             (block_size, head_dim) int8, row s at slab + s * head_dim,
 *                       then (block_size) floats: row s's scale at
 *                       slab + block_size * head_dim + 4 s; x = q * scale
 *                       (rows written with kern_i8_quant_row).
 * V likewise from v_base. */
typedef struct {
    int head_dim;          /* D */
    int n_q;               /* query heads sharing this KV head (GQA group) */
    const float *q;        /* (n_q, D) queries, RoPE applied */
    float *out;            /* (n_q, D) softmax(q.K^T * scale) . V */
    int n_ctx;             /* attend to positions pos0 .. n_ctx-1 (causal: pos + 1) */
    int pos0;              /* first position attended, 0 <= pos0 < n_ctx: 0 for full attention,
                              pos + 1 - window for a sliding window of `window` positions */
    const int32_t *blocks; /* block table of the sequence */
    int block_size;        /* tokens per block */
    const uint8_t *k_base; /* K of this layer and KV head, in block 0 */
    const uint8_t *v_base; /* V of this layer and KV head, in block 0 */
    size_t block_stride;   /* bytes from one block to the next */
    kern_type_t kv_type;   /* KERN_F32, KERN_F16 or KERN_I8 */
    float scale;           /* usually 1/sqrt(D) */
    float *scratch;        /* at least n_q * (n_ctx - pos0) floats */
    float *weights;        /* NULL, or (n_ctx - pos0) floats: the softmax weight of each
                              position attended, summed over the n_q query heads, is ADDED
                              to weights[p - pos0] (what attention-score KV eviction,
                              kvstore/kv_compress.h, accumulates) */
} kern_attn_args_t;

typedef struct {
    const char *name; /* "scalar", "avx2", "avxvnni", "avx512" */

    /* dst[0..n) = values of the n elements at src (n a multiple of the block size). */
    void (*dequant_row)(kern_type_t t, const void *src, float *dst, int64_t n);
    /* Quantize n floats into type t (weights for `strata quantize`, and
     * activations into Q8_0 / Q8_1 / Q8_K / F32 for gemm). */
    void (*quant_row)(kern_type_t t, const float *src, void *dst, int64_t n);

    /* out[c * out_stride + r] = sum_i W[r][i] * X[c][i]   for r < nr, c < nc.
     * W: nr rows of type wt, each k elements, row r at (char*)w + r * w_stride.
     * X: nc columns already quantized with quant_row(vec_dot_type(wt)),
     *    column c at (char*)x + c * x_stride.  (For F32/F16/BF16 weights the
     *    vec_dot_type is F32: X is plain floats.)
     * out_stride counts floats.  nr, nc >= 1 and any size; the kernel tiles internally. */
    void (*gemm)(kern_type_t wt, int64_t k, int nr, int nc, const void *w, size_t w_stride,
                 const void *x, size_t x_stride, float *out, size_t out_stride);

    /* Packed weights: a layout for the 32-element block types (Q4_0, Q4_1, Q5_0,
     * Q5_1, Q8_0) made once at model load, whose gemm needs no cross-lane sums;
     * the K-quants (Q4_K, Q5_K, Q6_K) have their own, with super-block records
     * and their own float sequence (both in kernels/cpu/kern_cpu.h).
     * Rows go in groups of 16 (the last group padded with zero rows); for each
     * block index b of a group, one record holds the b-th block of its 16 rows
     * with lane j (bytes 4j..4j+3 of each 64-byte step) from row j, then the 16
     * scales (and minimums).  Records keep the GGUF size: a group takes 16 rows'
     * bytes.  The exact record format is in kernels/cpu/kern_cpu.h.
     *
     * packed_size: bytes of the packed form of nr rows of k elements of type wt,
     *   or 0 when this table has no packed layout for wt (then pack and
     *   gemm_packed must not be called).  Every table packs the eight types above.
     * pack: write that form of the nr rows at w (row r at (char*)w + r * w_stride)
     *   to dst (packed_size bytes; 64-byte aligned for speed).  Done once.
     * gemm_packed: as gemm, for rows r0 .. r0+nr-1 of a packed matrix of k
     *   columns: out[c * out_stride + i] = W[r0 + i] . X[c] for i < nr, c < nc.
     *   r0 must be a multiple of 16 (split rows between threads on group
     *   boundaries); nr, nc >= 1 and any size.  Every output is computed by a
     *   fixed sequence of float operations that depends only on its row and
     *   column (blocks in order: acc = fma(isum, dw * dx, acc), then for Q4_1 /
     *   Q5_1 acc = fma(m, sx, acc)), so results are bitwise independent of nc,
     *   of a column's position in the batch and of r0 / nr; the scalar
     *   reference and the SIMD tables give bitwise equal results. */
    size_t (*packed_size)(kern_type_t wt, int64_t k, int nr);
    void (*pack)(kern_type_t wt, int64_t k, int nr, const void *w, size_t w_stride, void *dst);
    void (*gemm_packed)(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                        const void *x, size_t x_stride, float *out, size_t out_stride);

    /* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may equal x. */
    void (*rmsnorm)(float *out, const float *x, const float *w, int n, float eps);
    /* x = softmax(x), in place, numerically stable (max subtracted). */
    void (*softmax)(float *x, int n);
    /* Rotate the first n_rot dims of each of n_heads heads of x (n_heads, head_dim) in place.
     * cos_sin holds n_rot/2 pairs (cos theta_i, sin theta_i) for this position.
     * neox = false: pairs are (x[2i], x[2i+1]) (GGUF llama layout);
     * neox = true: pairs are (x[i], x[i + n_rot/2]). */
    void (*rope)(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin, bool neox);
    /* out[i] = silu(gate[i]) * up[i]; out may equal gate. */
    void (*swiglu)(float *out, const float *gate, const float *up, int n);
    /* out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU); out may equal gate.
     * gelu_tanh(g) = g/2 (1 + tanh(u)) = g / (1 + e^(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3). */
    void (*geglu)(float *out, const float *gate, const float *up, int n);
    /* See kern_attn_args_t. */
    void (*attention)(const kern_attn_args_t *a);
} kern_ops_t;

/* ---- the variants ---------------------------------------------------------
 * KERN_ISA_LIST(X) is the one list of kernel variants: X(name, tab, cpu) per
 * variant, in ascending priority (the reference first, the preferred table
 * last).  name: how STRATA_KERNELS and kern_ops_t.name spell it; tab: the
 * table's symbol is kern_ops_<tab>_tab (kernels/cpu/kern_tables.c); cpu: the
 * condition on the CPU for the table to run, an && of KERN_CPU(feature) with
 * the feature spelled as GCC's __builtin_cpu_supports does (each SIMD file is
 * compiled with the matching -m flags: CMakeLists.txt, by file-name suffix).
 * kern_types.c reads it to check the CPU, choose the best table and parse
 * STRATA_KERNELS; the tests read it to run every table against the reference.
 * How a variant's code is compiled: kernels/cpu/kern_cpu.h. */
#if defined(__x86_64__) && defined(__GNUC__)
#define KERN_ISA_LIST_X86(X)                                                                       \
    X(avx2, avx2, KERN_CPU(avx2) && KERN_CPU(fma) && KERN_CPU(f16c) && KERN_CPU(bmi2))             \
    X(avxvnni, avxvnni,                                                                            \
      KERN_CPU(avx2) && KERN_CPU(fma) && KERN_CPU(f16c) && KERN_CPU(bmi2) && KERN_CPU(avxvnni))    \
    X(avx512, avx512,                                                                              \
      KERN_CPU(avx2) && KERN_CPU(fma) && KERN_CPU(f16c) && KERN_CPU(bmi2) && KERN_CPU(avx512f) &&  \
          KERN_CPU(avx512bw) && KERN_CPU(avx512vl) && KERN_CPU(avx512dq) && KERN_CPU(avx512vnni))
#else
#define KERN_ISA_LIST_X86(X)
#endif
#define KERN_ISA_LIST(X) X(scalar, ref, 1) KERN_ISA_LIST_X86(X)

/* KERN_ISA_scalar = 0, then one value per variant of the list, in its order. */
typedef enum {
#define KERN_ISA_ENUM_(name, tab, cpu) KERN_ISA_##name,
    KERN_ISA_LIST(KERN_ISA_ENUM_)
#undef KERN_ISA_ENUM_
        KERN_ISA_COUNT
} kern_isa_t;

/* The name of variant isa ("avx2"), or NULL when isa is not one. */
const char *kern_isa_name(int isa);
/* The table of variant isa (0 .. KERN_ISA_COUNT-1), or NULL when isa is not
 * one or this CPU cannot run it.  kern_ops_isa(KERN_ISA_scalar) never fails. */
const kern_ops_t *kern_ops_isa(int isa);
/* The table named name ("ref" is accepted for "scalar"), or NULL when no
 * variant has that name or this CPU cannot run it. */
const kern_ops_t *kern_ops_named(const char *name);
/* The fastest table this CPU runs (the last of KERN_ISA_LIST it runs:
 * avx512, else avxvnni, else avx2, else scalar).  STRATA_KERNELS=NAME picks
 * the table NAME instead; for an unknown name, or one this CPU cannot run,
 * the fastest table is used, with a warning (once per process) that says why
 * and lists the valid names. */
const kern_ops_t *kern_ops_best(void);

/* How far ahead (bytes) the K-quant kernels prefetch the weights they
 * stream in decode (0: not at all, the hardware prefetchers alone).  Where it
 * pays depends on the core, not the ISA: on an AMD Zen 2 a line per step
 * 8 KiB ahead was faster than none, on a Zen 4 none streams 25-27 GB/s a core
 * where 8 KiB ahead streams 16-20 (bench/results, 2026-12-04 and -05).  The
 * default is 0 on AMD family 0x19 and later, 8192 elsewhere (Intel: not
 * measured); STRATA_PREFETCH=BYTES sets it.  Read once per process. */
int kern_prefetch_bytes(void);

/* The same as kern_ops_isa(KERN_ISA_scalar) / kern_ops_named("avx2") /
 * ("avxvnni") / ("avx512"): the names callers used before the list. */
const kern_ops_t *kern_ops_ref(void);
const kern_ops_t *kern_ops_avx2(void);
const kern_ops_t *kern_ops_avxvnni(void);
const kern_ops_t *kern_ops_avx512(void);

#endif
