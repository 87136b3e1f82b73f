/* ops_avx2.c - element-wise ops and attention for AVX2/FMA/F16C CPUs, and the
 * AVX2 and AVX-VNNI kernel tables (kern_ops_avx2() / kern_ops_avxvnni() in
 * kern_types.c check the CPU first).  The two tables differ only in the packed
 * gemm (gemm_packed_avx2.c compiled without and with PK_AVXVNNI). */
#if defined(__x86_64__)
#define KX(name) name##_avx2
#include "ops_x86.h"

const kern_ops_t kern_ops_avx2_tab = {
    .name = "avx2",
    .dequant_row = kern_dequant_row_avx2,
    .quant_row = kern_quant_row_avx2,
    .gemm = kern_gemm_avx2,
    .packed_size = kern_packed_size_avx2,
    .pack = kern_ref_pack,
    .gemm_packed = kern_gemm_packed_avx2,
    .rmsnorm = kern_rmsnorm_avx2,
    .softmax = kern_softmax_avx2,
    .rope = kern_rope_avx2,
    .swiglu = kern_swiglu_avx2,
    .attention = kern_attention_avx2,
};

const kern_ops_t kern_ops_avxvnni_tab = {
    .name = "avxvnni",
    .dequant_row = kern_dequant_row_avx2,
    .quant_row = kern_quant_row_avx2,
    .gemm = kern_gemm_avx2,
    .packed_size = kern_packed_size_avx2,
    .pack = kern_ref_pack,
    .gemm_packed = kern_gemm_packed_avxvnni,
    .rmsnorm = kern_rmsnorm_avx2,
    .softmax = kern_softmax_avx2,
    .rope = kern_rope_avx2,
    .swiglu = kern_swiglu_avx2,
    .attention = kern_attention_avx2,
};
#endif
