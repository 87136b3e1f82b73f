/* gemm_kpacked_avx512.c - gemm of packed K-quant weights for AVX-512 VNNI
 * CPUs (the code is in gemm_kpacked_x86.h, shared with the AVX2 variant);
 * kern_gemm_packed_avx512 sends the K types here. */
#if defined(__x86_64__)
#define KX_AVX512 1
#define KX(name) name##_avx512
#include "gemm_kpacked_x86.h"
#endif
