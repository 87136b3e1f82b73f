/* gemm_avx2.c - gemm and activation quantization for AVX2/FMA/F16C CPUs: the avx2 instance of
 * gemm_x86.h (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX2 1
#include "gemm_x86.h"
