/* dtx_vexpf: a float exp that gcc vectorises.
 *
 * libm's expf is not vectorised under -O2 (it may set errno, and there is no
 * libmvec call without -ffast-math), so a softmax or silu loop calling it
 * runs one element at a time. dtx_vexpf is branch-free straight-line code:
 * inlined into a loop marked `#pragma omp simd` it becomes 16-lane AVX-512
 * (or 8-lane AVX2) code.
 *
 * Method (Cephes expf): n = round(x·log2 e) by the 1.5·2²³ trick (no
 * float→int conversion, so no undefined behaviour on NaN or huge inputs);
 * r = x − n·ln 2 in two FMA steps (Cody–Waite), |r| ≤ ln2/2; exp(r) by
 * Cephes' degree-7 polynomial 1 + r + r²·P(r); the result p·2ⁿ is scaled by
 * two exact powers of two 2^⌊n/2⌋·2^(n−⌊n/2⌋), so n = 128 (x just below the
 * overflow bound) and n < −126 (subnormal results) need no special cases.
 *
 * Accuracy: max relative error 8.5e-8 (0.71 · FLT_EPSILON, i.e. ≤ 1.5 ulp)
 * against exp() in double, measured over every float in [−87, 88] (2.2e9
 * values); unbiased (mean relative error < 1e-9). Results are normal there.
 * Below −87.34 the result is subnormal with an absolute error within the
 * smallest subnormal; x < −104 (and −inf) gives +0; x > 88.7228 = ln FLT_MAX (and
 * +inf) gives +inf; NaN gives NaN. tests/kernels/elementwise_test.c
 * (kernel_ew_vexpf_accuracy) checks a dense sample and the special values.
 * Deterministic: the same bits whether a lane is computed scalar or vector
 * (the FMAs are explicit; nothing depends on -ffp-contract).
 *
 * Using it: call it in a loop marked `#pragma omp simd` over float arrays.
 * Keep a widening of its result (`sum += (double)e`) out of that loop: gcc
 * (-ftrapping-math) then refuses to if-convert the final selects and the
 * loop stays scalar; sum in a second loop instead (see crossentropy.c).
 *
 * Needs FMA hardware for speed (fmaf is a single instruction with
 * -march=native on x86-64 v3+; elsewhere it is a correct but slow call). */
#ifndef DTX_VEXP_H
#define DTX_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float dtx_vexpf(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f; /* Cephes C1, C2 */
    const float round_magic = 12582912.0f;                       /* 1.5·2²³ */
    /* n = nearest integer to x·log2 e, as a float and as (two's complement)
     * bits; out-of-range x makes garbage here, replaced at the end. No input
     * clamp: gcc would thread the clamped constant through and emit three
     * blended copies of the body. */
    float k = fmaf(x, log2e, round_magic); /* one rounding, whatever -ffp-contract */
    float n = k - round_magic;
    uint32_t kb, mb;
    memcpy(&kb, &k, sizeof kb);
    memcpy(&mb, &round_magic, sizeof mb);
    uint32_t ni = kb - mb;
    /* r = x − n·ln2, |r| ≤ ~0.347 */
    float r = fmaf(n, -ln2_hi, x);
    r = fmaf(n, -ln2_lo, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float y = fmaf(p, r * r, r) + 1.0f;
    /* 2ⁿ as two factors 2^n1·2^n2, each a normal float for n in [−150, 128]
     * (n = 128 overflows to inf as it should). Unsigned arithmetic: the
     * garbage lanes must not be undefined behaviour. */
    uint32_t n1 = (uint32_t)((int32_t)ni >> 1), n2 = ni - n1; /* gcc: >> of a negative is arithmetic */
    uint32_t b1 = (n1 + 127u) << 23, b2 = (n2 + 127u) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    y = y * s1 * s2;
    y = x > 88.8f ? INFINITY : y;   /* exp overflows from 88.7228 on anyway */
    return x < -104.0f ? 0.0f : y;  /* below the smallest subnormal; NaN passes */
}

#endif
