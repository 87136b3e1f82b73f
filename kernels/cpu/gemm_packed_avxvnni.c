/* gemm_packed_avxvnni.c - the ymm packed gemm of gemm_packed_avx2.c with
 * AVX-VNNI dot products (VEX vpdpbusd, Alder Lake and later, Zen 5): compiled
 * from the same source with PK_AVXVNNI, exported as kern_gemm_packed_avxvnni. */
#define PK_AVXVNNI 1
#include "gemm_packed_avx2.c"
