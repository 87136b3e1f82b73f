/* gemm_kpacked_avx2.c - gemm of packed K-quant weights for AVX2/FMA/F16C
 * CPUs (the code is in gemm_kpacked_x86.h, shared with the AVX-512 variant);
 * the AVX2 table's gemm_packed sends the K types here. */
#if defined(__x86_64__)
#define KX(name) name##_avx2
#include "gemm_kpacked_x86.h"
#endif
