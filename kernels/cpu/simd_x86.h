/* simd_x86.h - the small AVX2 helpers that the x86 kernel sources share
 * (gemm_x86.h, gemm_packed_x86.h and the packed gemms): one definition each.
 * Compiled into every x86 kernel file, all of which enable AVX2 and F16C.
 */
#ifndef SIMD_X86_H
#define SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KX86_INLINE static inline __attribute__((always_inline))

/* The half-precision value at p (any alignment) as a float. */
KX86_INLINE float kx86_f16(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 32 fifth bits of Q5 levels (bit j for element j, little-endian at qh) ->
 * 32 bytes of 0x10 or 0. */
KX86_INLINE __m256i kx86_bits5(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                          0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), idx);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

#endif
