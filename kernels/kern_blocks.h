/* kern_blocks.h - every weight/activation type strata understands, and the
 * layout of each quantized block.  Shared by C and CUDA; the type ids are the
 * GGML ids that GGUF files store, so a tensor's type field indexes them directly.
 */
#ifndef KERN_BLOCKS_H
#define KERN_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define KERN_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#include <assert.h>
#define KERN_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* Tensor element types: values are the GGML type ids found in GGUF files. */
typedef enum {
    KERN_F32 = 0,
    KERN_F16 = 1,
    KERN_Q4_0 = 2,
    KERN_Q4_1 = 3,
    KERN_Q5_0 = 6,
    KERN_Q5_1 = 7,
    KERN_Q8_0 = 8,
    KERN_Q8_1 = 9, /* activations only (dot partner of Q4_1/Q5_1) */
    KERN_Q4_K = 12,
    KERN_Q5_K = 13,
    KERN_Q6_K = 14,
    KERN_Q8_K = 15, /* activations only (dot partner of the K-quants) */
    KERN_I8 = 24,   /* int8 KV cache rows with one float scale per row (kern_ops.h) */
    KERN_BF16 = 30,
    KERN_TYPE_COUNT = 31
} kern_type_t;

typedef uint16_t kern_f16_t;  /* IEEE half, raw bits */
typedef uint16_t kern_bf16_t; /* bfloat16, raw bits */

#define KERN_QK 32    /* elements per block of the simple quants */
#define KERN_QK_K 256 /* elements per super-block of the K-quants */
#define KERN_K_SCALE_SIZE 12

/* Q4_0: x = d * (q - 8), q in 0..15.  qs[j] holds element j (low nibble) and j+16 (high). */
typedef struct {
    kern_f16_t d;            /* scale */
    uint8_t qs[KERN_QK / 2]; /* nibbles */
} kern_block_q4_0;
KERN_STATIC_ASSERT(sizeof(kern_block_q4_0) == 18, "q4_0 block size");

/* Q4_1: x = d * q + m, q in 0..15; same nibble order as Q4_0. */
typedef struct {
    kern_f16_t d;            /* scale */
    kern_f16_t m;            /* minimum */
    uint8_t qs[KERN_QK / 2]; /* nibbles */
} kern_block_q4_1;
KERN_STATIC_ASSERT(sizeof(kern_block_q4_1) == 20, "q4_1 block size");

/* Q5_0: x = d * (q - 16), q = nibble | (bit << 4); bit j of qh belongs to element j. */
typedef struct {
    kern_f16_t d;            /* scale */
    uint8_t qh[4];           /* fifth bits, element j at bit j (little-endian uint32) */
    uint8_t qs[KERN_QK / 2]; /* low nibbles as in Q4_0 */
} kern_block_q5_0;
KERN_STATIC_ASSERT(sizeof(kern_block_q5_0) == 22, "q5_0 block size");

/* Q5_1: x = d * q + m, q = nibble | (bit << 4). */
typedef struct {
    kern_f16_t d;            /* scale */
    kern_f16_t m;            /* minimum */
    uint8_t qh[4];           /* fifth bits */
    uint8_t qs[KERN_QK / 2]; /* low nibbles */
} kern_block_q5_1;
KERN_STATIC_ASSERT(sizeof(kern_block_q5_1) == 24, "q5_1 block size");

/* Q8_0: x = d * q, q in -127..127. */
typedef struct {
    kern_f16_t d;       /* scale */
    int8_t qs[KERN_QK]; /* values */
} kern_block_q8_0;
KERN_STATIC_ASSERT(sizeof(kern_block_q8_0) == 34, "q8_0 block size");

/* Q8_1: x = d * q; s = d * sum(q), so a dot with an offset format needs no extra pass. */
typedef struct {
    kern_f16_t d;       /* scale */
    kern_f16_t s;       /* d * sum(qs) */
    int8_t qs[KERN_QK]; /* values */
} kern_block_q8_1;
KERN_STATIC_ASSERT(sizeof(kern_block_q8_1) == 36, "q8_1 block size");

/* Q4_K: 8 sub-blocks of 32; x = d*sc[j]*q - dmin*mn[j]; 6-bit sc/mn packed in scales[12]. */
typedef struct {
    kern_f16_t d;                      /* super-block scale for the sub-block scales */
    kern_f16_t dmin;                   /* super-block scale for the sub-block minimums */
    uint8_t scales[KERN_K_SCALE_SIZE]; /* 8 scales + 8 minimums, 6 bits each */
    uint8_t qs[KERN_QK_K / 2];         /* nibbles: 64-element groups, low nibble first 32 */
} kern_block_q4_K;
KERN_STATIC_ASSERT(sizeof(kern_block_q4_K) == 144, "q4_K block size");

/* Q5_K: as Q4_K plus a fifth bit per element in qh. */
typedef struct {
    kern_f16_t d;                      /* super-block scale for the scales */
    kern_f16_t dmin;                   /* super-block scale for the minimums */
    uint8_t scales[KERN_K_SCALE_SIZE]; /* 6-bit scales and minimums */
    uint8_t qh[KERN_QK_K / 8];         /* fifth bits */
    uint8_t qs[KERN_QK_K / 2];         /* low nibbles */
} kern_block_q5_K;
KERN_STATIC_ASSERT(sizeof(kern_block_q5_K) == 176, "q5_K block size");

/* Q6_K: 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q 6 bits from ql (4) + qh (2). */
typedef struct {
    uint8_t ql[KERN_QK_K / 2];     /* low 4 bits */
    uint8_t qh[KERN_QK_K / 4];     /* high 2 bits */
    int8_t scales[KERN_QK_K / 16]; /* 8-bit sub-block scales */
    kern_f16_t d;                  /* super-block scale */
} kern_block_q6_K;
KERN_STATIC_ASSERT(sizeof(kern_block_q6_K) == 210, "q6_K block size");

/* Q8_K: activation partner of the K-quants; bsums[j] = sum of qs[16j .. 16j+15]. */
typedef struct {
    float d;                       /* scale */
    int8_t qs[KERN_QK_K];          /* values */
    int16_t bsums[KERN_QK_K / 16]; /* group sums */
} kern_block_q8_K;
KERN_STATIC_ASSERT(sizeof(kern_block_q8_K) == 292, "q8_K block size");

#endif
