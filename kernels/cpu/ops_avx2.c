/* ops_avx2.c - element-wise ops and attention for AVX2/FMA/F16C CPUs, and the
 * AVX2 kernel table (kern_ops_avx2() in kern_types.c checks the CPU first). */
#if defined(__x86_64__)
#define KX(name) name##_avx2
#include "ops_x86.h"

const kern_ops_t kern_ops_avx2_tab = {
    .name = "avx2",
    .dequant_row = kern_dequant_row_avx2,
    .quant_row = kern_quant_row_avx2,
    .gemm = kern_gemm_avx2,
    .packed_size = kern_no_packed_size, /* no packed layout: pack, gemm_packed NULL */
    .rmsnorm = kern_rmsnorm_avx2,
    .softmax = kern_softmax_avx2,
    .rope = kern_rope_avx2,
    .swiglu = kern_swiglu_avx2,
    .attention = kern_attention_avx2,
};
#endif
