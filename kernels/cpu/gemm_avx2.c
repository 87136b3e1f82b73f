/* gemm_avx2.c - gemm and activation quantization for AVX2/FMA/F16C CPUs
 * (the code is in gemm_x86.h, shared with the AVX-512 variant). */
#if defined(__x86_64__)
#define KX(name) name##_avx2
#include "gemm_x86.h"
#endif
