/* gemm_packed_x86.h - what the packed gemms in ymm (gemm_packed_avx2.c) and in
 * zmm (gemm_packed_avx512.c) share: the traits of the packed types and the
 * preparation of a pass's activations (per column and block: the scale, and the
 * minimum's sum term or the bias correction).  Include after defining PK_INLINE
 * and PK_PREP; the code is AVX2, which both compile for.
 */
#ifndef GEMM_PACKED_X86_H
#define GEMM_PACKED_X86_H

#include "kern_cpu.h"
#include "simd_x86.h"

#include <immintrin.h>
#include <string.h>

PK_INLINE bool s_min(kern_type_t T) {
    return T == KERN_Q4_1 || T == KERN_Q5_1;
}

/* The unsigned bias of the weight levels, removed through the activation sums. */
PK_INLINE int s_off(kern_type_t T) {
    return T == KERN_Q4_0 ? 8 : T == KERN_Q5_0 ? 16 : T == KERN_Q8_0 ? 128 : 0;
}

/* One pass's activations, per (column, block) at [column * nbk + block]: the
 * scale, and the sum term sx (Q4_1 / Q5_1) or the bias correction -off * sum(q). */
typedef struct {
    float dx[PK_PREP];
    union {
        float sx[PK_PREP];
        int32_t corr[PK_PREP];
    } u;
} s_prep_t;

PK_INLINE void s_prep(kern_type_t T, int cn, int nbk, const uint8_t *x, size_t xs, s_prep_t *p) {
    const int XB = s_min(T) ? (int)sizeof(kern_block_q8_1) : (int)sizeof(kern_block_q8_0);
    const int XQ = s_min(T) ? 4 : 2, OFF = s_off(T);
    for (int c = 0; c < cn; c++)
        for (int b = 0; b < nbk; b++) {
            const uint8_t *xb = x + (size_t)c * xs + (size_t)b * XB;
            const int i = c * nbk + b;
            p->dx[i] = kx86_f16(xb);
            if (s_min(T)) {
                p->u.sx[i] = kx86_f16(xb + 2);
            } else {
                /* sum of the 32 signed levels: as unsigned (+128) with SAD */
                __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(xb + XQ)),
                                             _mm256_set1_epi8((char)0x80));
                __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
                __m128i h =
                    _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
                p->u.corr[i] = -OFF * ((int)_mm_cvtsi128_si32(h) - 32 * 128);
            }
        }
}

#endif
