/* ops_avx512.c - element-wise ops and attention for AVX-512 CPUs (the 256-bit
 * code of ops_x86.h, with zmm attention), and the AVX-512 kernel table
 * (kern_ops_avx512() in kern_types.c checks the CPU first). */
#if defined(__x86_64__)
#define KX_AVX512 1
#define KX(name) name##_avx512
#include "ops_x86.h"

const kern_ops_t kern_ops_avx512_tab = {
    .name = "avx512",
    .dequant_row = kern_dequant_row_avx512,
    .quant_row = kern_quant_row_avx512,
    .gemm = kern_gemm_avx512,
    .packed_size = kern_ref_packed_size,
    .pack = kern_ref_pack,
    .gemm_packed = kern_gemm_packed_avx512,
    .rmsnorm = kern_rmsnorm_avx512,
    .softmax = kern_softmax_avx512,
    .rope = kern_rope_avx512,
    .swiglu = kern_swiglu_avx512,
    .attention = kern_attention_avx512,
};
#endif
