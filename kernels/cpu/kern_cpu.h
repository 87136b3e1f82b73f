/* kern_cpu.h - private to kernels/: the pieces the CPU kernel tables share
 * (the entry points of every variant, the tables themselves, the packed
 * layouts and the K-quant scale unpacking).  Not part of the public kernel API.
 *
 * ---- how a variant is compiled: one scheme for every file of kernels/cpu/ --
 *   <family>_ref.c    the scalar reference of a family of ops (ops, quant,
 *                     gemm, gemm_packed, gemm_kpacked), plain C17.
 *   <family>_x86.h    the family's SIMD code, written once for every x86
 *                     variant: a template that selects its code with
 *                     KX_ISA_AVX2 / KX_ISA_AVXVNNI / KX_ISA_AVX512 and names
 *                     what it exports KX(name), that is name_<isa>.
 *   <family>_<isa>.c  an instance: `#define KX_ISA_<ISA> 1` then
 *                     `#include "<family>_x86.h"`, nothing else.
 *                     CMakeLists.txt compiles every *_<isa>.c with the -m
 *                     flags of that variant (by file-name suffix);
 *                     simd_x86.h checks that exactly one KX_ISA_ is defined
 *                     and that the flags agree with it.
 *   kern_tables.c     one kern_ops_t per variant of KERN_ISA_LIST
 *                     (kern_ops.h): which function each op of it runs.
 * A family has an instance only for the variants that have code of their own
 * in it; a table names another variant's function otherwise (the AVX-VNNI
 * table is the AVX2 one with its own gemm_packed).  What the templates share
 * (the per-type dispatch of an entry point, the column tiles of the tile
 * walkers, small AVX2 helpers) is in simd_x86.h.
 * A new variant: a row of KERN_ISA_LIST, its flags in CMakeLists.txt, its
 * KX_ISA_ macro in simd_x86.h, the instances of the families it has code
 * for with their declarations below (KERN_<FAMILY>_X86_DECL), and its table
 * in kern_tables.c.
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
void kern_ref_geglu(float *out, const float *gate, const float *up, int n);
void kern_ref_attention(const kern_attn_args_t *a);

size_t kern_ref_packed_size(kern_type_t wt, int64_t k, int nr);
void kern_ref_pack(kern_type_t wt, int64_t k, int nr, const void *w, size_t w_stride, void *dst);
void kern_ref_gemm_packed(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                          const void *x, size_t x_stride, float *out, size_t out_stride);
/* packed_size of a table without a packed layout: always 0 (no table uses it now). */
size_t kern_no_packed_size(kern_type_t wt, int64_t k, int nr);

/* ---- the x86 variants' entry points: what each family's template exports
 * (arguments as kern_ops_t's ops of the same name). */
/* gemm_x86.h: gemm and activation quantization. */
#define KERN_GEMM_X86_DECL(isa)                                                                    \
    void kern_dequant_row_##isa(kern_type_t t, const void *src, float *dst, int64_t n);            \
    void kern_quant_row_##isa(kern_type_t t, const float *src, void *dst, int64_t n);              \
    void kern_gemm_##isa(kern_type_t wt, int64_t k, int nr, int nc, const void *w,                 \
                         size_t w_stride, const void *x, size_t x_stride, float *out,              \
                         size_t out_stride);
/* ops_x86.h: element-wise ops and attention. */
#define KERN_OPS_X86_DECL(isa)                                                                     \
    void kern_rmsnorm_##isa(float *out, const float *x, const float *w, int n, float eps);         \
    void kern_softmax_##isa(float *x, int n);                                                      \
    void kern_rope_##isa(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin,     \
                         bool neox);                                                               \
    void kern_swiglu_##isa(float *out, const float *gate, const float *up, int n);                 \
    void kern_geglu_##isa(float *out, const float *gate, const float *up, int n);                  \
    void kern_attention_##isa(const kern_attn_args_t *a);
/* gemm_packed_x86.h: the packed gemm (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 here, the
 * K-quants passed on to a gemm_kpacked), and the packed_size of the table
 * (the reference layout, for the types this gemm_packed packs: the ymm
 * variants leave Q6_K unpacked). */
#define KERN_PACKED_X86_DECL(isa)                                                                  \
    size_t kern_packed_size_##isa(kern_type_t wt, int64_t k, int nr);                              \
    void kern_gemm_packed_##isa(kern_type_t wt, int64_t k, int r0, int nr, int nc,                 \
                                const void *packed, const void *x, size_t x_stride, float *out,    \
                                size_t out_stride);
/* gemm_kpacked_x86.h: the packed gemm of the K-quants (Q4_K, Q5_K, Q6_K). */
#define KERN_KPACKED_X86_DECL(isa)                                                                 \
    void kern_gemm_kpacked_##isa(kern_type_t wt, int64_t k, int r0, int nr, int nc,                \
                                 const void *packed, const void *x, size_t x_stride, float *out,   \
                                 size_t out_stride);
KERN_GEMM_X86_DECL(avx2)
KERN_GEMM_X86_DECL(avx512)
KERN_OPS_X86_DECL(avx2)
KERN_OPS_X86_DECL(avx512)
KERN_PACKED_X86_DECL(avx2)
KERN_PACKED_X86_DECL(avxvnni)
KERN_PACKED_X86_DECL(avx512)
KERN_KPACKED_X86_DECL(avx2) /* the AVX-VNNI table's gemm_packed sends K types here too */
KERN_KPACKED_X86_DECL(avx512)

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

/* ---- the packed K-quant layout (Q4_K, Q5_K, Q6_K against Q8_K) -----------
 * The same 16-row groups: group g, super-block b (of nb = k / 256) is the
 * record at packed + (g * nb + b) * kern_kpk_rec(wt), a multiple of 64 bytes.
 * Every type's levels are unsigned (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63; Q6_K's
 * value is level - 32) and laid out alike, so one kernel reads all three.
 * Steps s = 0..31 cover chunk c = s / 8 (elements 64c .. 64c+63); in step s,
 * byte i (0..3) of a row holds element e = 64c + 4(s % 8) + i in its low
 * nibble and element e + 32 in its high nibble.  Row j of the group in lane j.
 * A record is a head of 5 lines, then the lines of the steps in the order the
 * kernels read them, so a record streams from memory front to back (with the
 * high bits in a region of their own, the hardware prefetchers of an AMD Zen 4
 * fetched Q5_K and Q6_K at 10 GB/s a core where Q4_K streams at 25):
 *   d   at kern_kpk_d_off (0): 16 f16 super-block scales, row j at index j;
 *   dmin (Q4_K, Q5_K) at kern_kpk_d_off + 32: 16 f16.
 *   sc  at kern_kpk_sc_off (64): kern_kpk_nsub(wt) x 16 bytes: byte 16t + j is
 *       the scale of sub-block t of row j (Q4_K / Q5_K: 8 sub-blocks of 32,
 *       6-bit unsigned, unpacked from GGUF's 12 bytes; Q6_K: 16 groups of 16,
 *       int8).
 *   m   (Q4_K, Q5_K) at kern_kpk_sc_off + 128: 8 x 16 bytes: the 6-bit
 *       minimum of sub-block t of row j at byte 16t + j.
 *   qs  of step s at kern_kpk_qs_off(s): 64 bytes; bytes 4j..4j+3 are row j's
 *       bytes of step s (for Q4_K / Q5_K the GGUF qs bytes 4s..4s+3; Q6_K
 *       re-nibbled from its ql / qh).
 *   qh  (Q5_K, Q6_K): the hb = kern_kpk_hbits high bits of each level (bit 4;
 *       Q6_K bits 4 and 5), byte-parallel with qs so that a kernel adds them
 *       with a shift and a mask: 64-byte vectors, each shared by P = 4 / hb
 *       steps and stored after their qs lines; step s uses the vector at
 *       kern_kpk_hvec(s), where byte 4j+i holds, from bit kern_kpk_hpos(s, 0)
 *       = 2 hb (s % P), the high bits of the low nibble's level of byte i of
 *       row j in step s, and from kern_kpk_hpos(s, 1) = that + hb those of the
 *       high nibble's.
 * Sizes: Q4_K 2368 bytes per record (16 rows of GGUF: 2304), Q5_K 2880
 * (2816), Q6_K 3392 (3360).
 *
 * The float operations of kern_ops_t.gemm_packed for K types, per output
 * (row, column), super-blocks b in order, acc starting at 0, with x the
 * column's Q8_K block b (dx = x.d) and d, dmin the row's (f16 -> float):
 *   t_u   = sum over sub-block u of level * x.qs       (exact int32)
 *   Q4_K, Q5_K:  isum = sum_u sc_u * t_u,
 *                msum = sum_u m_u * (x.bsums[2u] + x.bsums[2u + 1])
 *                acc = fmaf((float)isum, d * dx, acc)
 *                acc = fmaf(-(float)msum, dmin * dx, acc)
 *   Q6_K:        isum = sum_u sc_u * t_u - 32 * sum_u sc_u * x.bsums[u]
 *                acc = fmaf((float)isum, d * dx, acc)
 * (products d * dx, dmin * dx rounded to float first).  The integer sums are
 * exact for every Q8_K input with |q| <= 128, so every table agrees bitwise. */
static inline bool kern_kpk_type(kern_type_t t) {
    return t == KERN_Q4_K || t == KERN_Q5_K || t == KERN_Q6_K;
}
static inline int kern_kpk_nsub(kern_type_t t) {
    return t == KERN_Q6_K ? 16 : 8;
}
/* High bits per level beyond the nibble: Q4_K 0, Q5_K 1, Q6_K 2. */
static inline int kern_kpk_hbits(kern_type_t t) {
    return t == KERN_Q4_K ? 0 : t == KERN_Q5_K ? 1 : 2;
}
#define KERN_KPK_HEAD 320 /* d, dmin (or padding) and the scales */
static inline int kern_kpk_d_off(kern_type_t t) {
    (void)t;
    return 0;
}
static inline int kern_kpk_sc_off(kern_type_t t) {
    (void)t;
    return 64;
}
/* Offset of step s's qs line: P of them, then their high-bit vector. */
static inline int kern_kpk_qs_off(kern_type_t t, int s) {
    const int hb = kern_kpk_hbits(t);
    if (!hb)
        return KERN_KPK_HEAD + 64 * s;
    const int p = 4 / hb;
    return KERN_KPK_HEAD + 64 * ((p + 1) * (s / p) + s % p);
}
/* Offset of step s's high-bit vector (Q5_K, Q6_K). */
static inline int kern_kpk_hvec(kern_type_t t, int s) {
    const int p = 4 / kern_kpk_hbits(t);
    return KERN_KPK_HEAD + 64 * ((p + 1) * (s / p) + p);
}
/* First bit, in a byte of step s's vector, of the high bits of the low
 * (hi = 0) or high (hi = 1) nibble's level (Q5_K, Q6_K). */
static inline int kern_kpk_hpos(kern_type_t t, int s, int hi) {
    const int hb = kern_kpk_hbits(t);
    return 2 * hb * (s % (4 / hb)) + hb * hi;
}
static inline int kern_kpk_rec(kern_type_t t) {
    return KERN_KPK_HEAD + 64 * 32 + 64 * 8 * kern_kpk_hbits(t);
}

/* The K-quant half of the packed layout (gemm_kpacked_ref.c), which
 * kern_ref_packed_size / kern_ref_pack / kern_ref_gemm_packed call for K
 * types; arguments as kern_ops_t's packed_size / pack / gemm_packed. */
size_t kern_ref_kpacked_size(kern_type_t wt, int64_t k, int nr);
void kern_ref_kpack(kern_type_t wt, int64_t k, int nr, const void *w, size_t w_stride, void *dst);
void kern_ref_gemm_kpacked(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,
                           const void *x, size_t x_stride, float *out, size_t out_stride);

/* The tables (kern_tables.c), kern_ops_<tab>_tab for each row of
 * KERN_ISA_LIST; kern_types.c hands them out after checking the CPU. */
#define KERN_TAB_DECL_(name, tab, cpu) extern const kern_ops_t kern_ops_##tab##_tab;
KERN_ISA_LIST(KERN_TAB_DECL_)
#undef KERN_TAB_DECL_

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
