/* simd_x86.h - what the x86 kernel templates (<family>_x86.h, the scheme in
 * kern_cpu.h) share: the choice of the variant (KX_ISA_*, KX(name)), the
 * per-type dispatch of an entry point, the column tiles of a tile walker, and
 * the small AVX2 helpers.  Every x86 kernel file enables AVX2, FMA and F16C.
 */
#ifndef SIMD_X86_H
#define SIMD_X86_H

#include "kern_cpu.h"

#include <assert.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* ---- the variant ---------------------------------------------------------
 * The instance file (<family>_<isa>.c) defines exactly one KX_ISA_ before it
 * includes its template; KX(name) is then the name the variant exports.  The
 * compiler flags come from CMakeLists.txt by the file's suffix: a file whose
 * flags do not match its KX_ISA_ stops here. */
#if (defined(KX_ISA_AVX2) + defined(KX_ISA_AVXVNNI) + defined(KX_ISA_AVX512)) != 1
#error "an x86 kernel instance defines exactly one of KX_ISA_AVX2, KX_ISA_AVXVNNI, KX_ISA_AVX512"
#endif
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || !defined(__BMI2__)
#error "x86 kernel instances are compiled with -mavx2 -mfma -mf16c -mbmi2 (CMakeLists.txt)"
#endif
#if defined(KX_ISA_AVX512)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) ||                   \
    !defined(__AVX512DQ__) || !defined(__AVX512VNNI__)
#error "an _avx512.c instance is compiled without the AVX-512 flags of CMakeLists.txt"
#endif
#define KX(name) name##_avx512
#elif defined(KX_ISA_AVXVNNI)
#if !defined(__AVXVNNI__)
#error "an _avxvnni.c instance is compiled without -mavxvnni (CMakeLists.txt)"
#endif
#define KX(name) name##_avxvnni
#else
#define KX(name) name##_avx2
#endif

#define KX_INLINE static inline __attribute__((always_inline))

/* ---- per-type dispatch of an entry point -----------------------------------
 * The weight types in lists X(a, tn, T) (tn: a suffix for names, T: the type;
 * X and a are the caller's): the types with the 32-element packed layout
 * (kern_pk_type), the K-quants (kern_kpk_type), the float weights. */
#define KX_PK_TYPES(X, a)                                                                          \
    X(a, q4_0, KERN_Q4_0)                                                                          \
    X(a, q4_1, KERN_Q4_1) X(a, q5_0, KERN_Q5_0) X(a, q5_1, KERN_Q5_1) X(a, q8_0, KERN_Q8_0)
#define KX_KPK_TYPES(X, a) X(a, q4_K, KERN_Q4_K) X(a, q5_K, KERN_Q5_K) X(a, q6_K, KERN_Q6_K)
#define KX_F_TYPES(X, a) X(a, f32, KERN_F32) X(a, f16, KERN_F16) X(a, bf16, KERN_BF16)

/* KX_GEMM_FN_ / KX_GEMM_CASE_, for a list and an impl(T, k, nr, nc, w, ws, x,
 * xs, out, os) (kern_ops_t.gemm's arguments): one noinline function
 * impl_<tn> per type that runs impl with T a constant, so that each inlines
 * only its own type's code, and the switch cases of an entry point (whose
 * arguments have kern_ops_t.gemm's names) that call them. */
#define KX_GEMM_FN_(impl, tn, T)                                                                   \
    static __attribute__((noinline)) void impl##_##tn(int64_t k, int nr, int nc, const uint8_t *w, \
                                                      size_t ws, const uint8_t *x, size_t xs,      \
                                                      float *out, size_t os) {                     \
        impl(T, k, nr, nc, w, ws, x, xs, out, os);                                                 \
    }
#define KX_GEMM_CASE_(impl, tn, T)                                                                 \
    case T:                                                                                        \
        impl##_##tn(k, nr, nc, w, w_stride, x, x_stride, out, out_stride);                         \
        return;

/* KX_PACKED_ENTRY(entry, impl, TYPES, other) defines entry, with
 * kern_ops_t.gemm_packed's signature.  For each type of the list TYPES
 * (KX_PK_TYPES, KX_KPK_TYPES) a noinline function runs
 *   impl(T, k, r0, nr, nc, packed, x, x_stride, out, out_stride)
 * with T a constant; entry sends wt to it, and any other type to other (a
 * function of entry's signature: another family's entry, or kx86_not_packed). */
#define KX_PACKED_FN_(impl, tn, T)                                                                 \
    static __attribute__((noinline)) void impl##_##tn(int64_t k, int r0, int nr, int nc,           \
                                                      const uint8_t *packed, const uint8_t *x,     \
                                                      size_t xs, float *out, size_t os) {          \
        impl(T, k, r0, nr, nc, packed, x, xs, out, os);                                            \
    }
#define KX_PACKED_CASE_(impl, tn, T)                                                               \
    case T:                                                                                        \
        impl##_##tn(k, r0, nr, nc, packed, x, x_stride, out, out_stride);                          \
        return;
#define KX_PACKED_ENTRY(entry, impl, TYPES, other)                                                 \
    TYPES(KX_PACKED_FN_, impl)                                                                     \
    void entry(kern_type_t wt, int64_t k, int r0, int nr, int nc, const void *packed,              \
               const void *x, size_t x_stride, float *out, size_t out_stride) {                    \
        assert(r0 % KERN_PK_ROWS == 0 && nr >= 1 && nc >= 1);                                      \
        switch (wt) {                                                                              \
            TYPES(KX_PACKED_CASE_, impl)                                                           \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
        other(wt, k, r0, nr, nc, packed, x, x_stride, out, out_stride);                            \
    }

/* The end of a dispatch chain: wt has no packed layout (programmer error). */
KX_INLINE void kx86_not_packed(kern_type_t wt, int64_t k, int r0, int nr, int nc,
                               const void *packed, const void *x, size_t x_stride, float *out,
                               size_t out_stride) {
    (void)wt, (void)k, (void)r0, (void)nr, (void)nc, (void)packed, (void)x, (void)x_stride;
    (void)out, (void)out_stride;
    assert(!"gemm_packed of a type without a packed layout");
}

/* ---- the column tiles of a tile walker ------------------------------------
 * TILE(c, n) for c = 0, CT, 2 CT, ... with n = CT while CT columns are left
 * of cn, then once for the cn % CT left, n a constant below CT: every call
 * has a constant column count, so the tile's loops over columns unroll.
 * TILE is the caller's macro; CT is at most 8. */
#define KX_TILE_REM_(n, CT, TILE, c)                                                               \
    case n:                                                                                        \
        if ((n) < (CT))                                                                            \
            TILE(c, n);                                                                            \
        break;
#define KX_COLUMN_TILES(cn, CT, TILE)                                                              \
    do {                                                                                           \
        _Static_assert((CT) >= 1 && (CT) <= 8, "column tiles of 1 to 8");                          \
        int c_ = 0;                                                                                \
        for (; c_ + (CT) <= (cn); c_ += (CT))                                                      \
            TILE(c_, CT);                                                                          \
        switch ((cn)-c_) {                                                                         \
            KX_TILE_REM_(1, CT, TILE, c_)                                                          \
            KX_TILE_REM_(2, CT, TILE, c_)                                                          \
            KX_TILE_REM_(3, CT, TILE, c_)                                                          \
            KX_TILE_REM_(4, CT, TILE, c_)                                                          \
            KX_TILE_REM_(5, CT, TILE, c_)                                                          \
            KX_TILE_REM_(6, CT, TILE, c_)                                                          \
            KX_TILE_REM_(7, CT, TILE, c_)                                                          \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* ---- small AVX2 helpers --------------------------------------------------- */

/* The half-precision value at p (any alignment) as a float. */
KX_INLINE float kx86_f16(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 32 fifth bits of Q5 levels (bit j for element j, little-endian at qh) ->
 * 32 bytes of 0x10 or 0. */
KX_INLINE __m256i kx86_bits5(const uint8_t *qh) {
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
