/* ops_avx2.c - element-wise ops and attention for AVX2/FMA/F16C CPUs
 * (the AVX2 and AVX-VNNI tables): the avx2 instance of ops_x86.h
 * (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVX2 1
#include "ops_x86.h"
