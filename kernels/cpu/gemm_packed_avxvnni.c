/* gemm_packed_avxvnni.c - gemm of packed weights for AVX-VNNI CPUs (VEX vpdpbusd): the avxvnni
 * instance of gemm_packed_x86.h (how a variant is compiled: kern_cpu.h). */
#define KX_ISA_AVXVNNI 1
#include "gemm_packed_x86.h"
