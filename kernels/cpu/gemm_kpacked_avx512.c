/* gemm_kpacked_avx512.c - gemm of packed K-quant weights for AVX-512 VNNI CPUs: the avx512 instance
 * of gemm_kpacked_x86.h (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX512 1
#include "gemm_kpacked_x86.h"
