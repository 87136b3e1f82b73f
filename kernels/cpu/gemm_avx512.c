/* gemm_avx512.c - gemm and activation quantization for AVX-512 VNNI CPUs: the avx512 instance of
 * gemm_x86.h (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX512 1
#include "gemm_x86.h"
