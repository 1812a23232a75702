/* The table of SIMD kernel implementations, one per ISA level (simd.h). */
#include "kernels/simd.h"

static const dtx_simd_ops portable = {"portable",
                                      dtx_tile_gemm_portable,
                                      dtx_tile_transpose_portable,
                                      dtx_tile_exp_portable,
                                      dtx_tile_softmax_update_portable,
                                      dtx_tile_exp_rows_portable,
                                      dtx_dot_heads_portable,
                                      dtx_axpy_heads_portable,
                                      dtx_dot_heads_bf16_portable,
                                      dtx_axpy_heads_bf16_portable,
                                      dtx_gemv_portable,
                                      dtx_gemv_bf16_portable,
                                      dtx_gemv_q8_portable,
                                      dtx_gemv_q4_portable,
                                      dtx_gemv_q8a8_portable,
                                      DTX_BF16_PORTABLE,
                                      NULL, NULL}; /* gemv_q8_nb, gemv_q4_nb: the one-input kernel per input */

/* Index: dtx_isa. AVX-512 BF16 is the AVX-512 table with the native bf16
 * tiles; the double build has only the portable kernels. */
static const dtx_simd_ops *const table[DTX_ISA_AVX512_BF16 + 1] = {
#if DTX_SIMD_X86
    &portable, &dtx_simd_avx2, &dtx_simd_avx512, &dtx_simd_avx512_bf16,
#else
    &portable, &portable, &portable, &portable,
#endif
};

const dtx_simd_ops *dtx_simd_for(dtx_isa lvl) { return table[lvl]; }
const dtx_simd_ops *dtx_simd(void) { return table[dtx_isa_level()]; }
