/* gemm_avx512.c - gemm and activation quantization for AVX-512 VNNI CPUs
 * (the code is in gemm_x86.h, shared with the AVX2 variant). */
#if defined(__x86_64__)
#define KX_AVX512 1
#define KX(name) name##_avx512
#include "gemm_x86.h"
#endif
