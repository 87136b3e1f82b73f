/* gemm_packed_avx512.c - gemm of packed weights for AVX-512 VNNI CPUs: the avx512 instance of
 * gemm_packed_x86.h (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX512 1
#include "gemm_packed_x86.h"
