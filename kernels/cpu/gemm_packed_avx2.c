/* gemm_packed_avx2.c - gemm of packed weights for AVX2/FMA/F16C CPUs: the avx2 instance of
 * gemm_packed_x86.h (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX2 1
#include "gemm_packed_x86.h"
