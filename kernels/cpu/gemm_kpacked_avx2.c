/* gemm_kpacked_avx2.c - gemm of packed K-quant weights for AVX2/FMA/F16C CPUs
 * (the AVX2 and AVX-VNNI tables): the avx2 instance of gemm_kpacked_x86.h
 * (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX2 1
#include "gemm_kpacked_x86.h"
