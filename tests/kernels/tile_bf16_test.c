/* The bf16 tiles' rounding (tile_bf16.c), and the native packer against the
 * portable one through the entry points. The packers and the product at
 * every ISA level against their index formulas and a double reference:
 * tests/kernels/simd_ops_test.c. */
#include "../test.h"
#include "kernels/tile_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float rb(float x) { return dtx_bf16_to_f32(dtx_f32_to_bf16(x)); }

/* The rounding the packers share: ties to even, NaN kept quiet. */
TEST(tile_bf16_rounding) {
    CHECK(dtx_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(rb(1.0f + 1.0f / 256) == 1.0f);            /* tie: to even (down) */
    CHECK(rb(1.0f + 3.0f / 256) == 1.0f + 4.0f / 256); /* tie: to even (up) */
    CHECK(isnan(rb(NAN)) && isinf(rb(INFINITY)));
}

/* The native packer rounds as the portable one (ties included). */
TEST(tile_bf16_native_rounds_as_portable) {
    REQUIRE_ISA(DTX_ISA_AVX512_BF16);
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = 1.0f + (float)i / 512;
    dtx_bf16 a[32], b[32];
    dtx_isa prev = dtx_isa_set_cap(DTX_ISA_AVX512_BF16);
    CHECK(dtx_tile_bf16_simd());
    dtx_bf16_pack_a(a, 32, x, 32, 1, 1, 32);
    dtx_isa_set_cap(DTX_ISA_PORTABLE);
    dtx_bf16_pack_a(b, 32, x, 32, 1, 1, 32);
    dtx_isa_set_cap(prev);
    CHECK(memcmp(a, b, sizeof a) == 0);
}
