/* ops_avx512.c - element-wise ops and attention for AVX-512 CPUs: the avx512 instance of ops_x86.h
 * (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX512 1
#include "ops_x86.h"
