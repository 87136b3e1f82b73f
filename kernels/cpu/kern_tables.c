/* kern_tables.c - the kernel tables, one per variant of KERN_ISA_LIST
 * (kern_ops.h): which function each op of each variant runs.  Plain C, no
 * SIMD flags; kern_types.c hands a table out only to a CPU that runs it.
 */
#include "kern_cpu.h"

const kern_ops_t kern_ops_ref_tab = {
    .name = "scalar",
    .dequant_row = kern_ref_dequant_row,
    .quant_row = kern_ref_quant_row,
    .gemm = kern_ref_gemm,
    .packed_size = kern_ref_packed_size,
    .pack = kern_ref_pack,
    .gemm_packed = kern_ref_gemm_packed,
    .rmsnorm = kern_ref_rmsnorm,
    .softmax = kern_ref_softmax,
    .rope = kern_ref_rope,
    .swiglu = kern_ref_swiglu,
    .geglu = kern_ref_geglu,
    .attention = kern_ref_attention,
};

#if defined(__x86_64__) && defined(__GNUC__)
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
    .geglu = kern_geglu_avx2,
    .attention = kern_attention_avx2,
};

/* The AVX2 table with the AVX-VNNI (VEX vpdpbusd) packed gemm. */
const kern_ops_t kern_ops_avxvnni_tab = {
    .name = "avxvnni",
    .dequant_row = kern_dequant_row_avx2,
    .quant_row = kern_quant_row_avx2,
    .gemm = kern_gemm_avx2,
    .packed_size = kern_packed_size_avxvnni,
    .pack = kern_ref_pack,
    .gemm_packed = kern_gemm_packed_avxvnni,
    .rmsnorm = kern_rmsnorm_avx2,
    .softmax = kern_softmax_avx2,
    .rope = kern_rope_avx2,
    .swiglu = kern_swiglu_avx2,
    .geglu = kern_geglu_avx2,
    .attention = kern_attention_avx2,
};

const kern_ops_t kern_ops_avx512_tab = {
    .name = "avx512",
    .dequant_row = kern_dequant_row_avx512,
    .quant_row = kern_quant_row_avx512,
    .gemm = kern_gemm_avx512,
    .packed_size = kern_packed_size_avx512,
    .pack = kern_ref_pack,
    .gemm_packed = kern_gemm_packed_avx512,
    .rmsnorm = kern_rmsnorm_avx512,
    .softmax = kern_softmax_avx512,
    .rope = kern_rope_avx512,
    .swiglu = kern_swiglu_avx512,
    .geglu = kern_geglu_avx512,
    .attention = kern_attention_avx512,
};
#endif
