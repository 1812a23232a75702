/* The fused flash attention (fp32 build) against the plain materialised
 * kernel: forward output, o1, o2, rstd and every gradient over odd lengths,
 * head widths, GQA ratios and both architectures; the saved lse against a
 * direct log-sum-exp; the tile product and the vector exp on their own; the
 * portable path against the AVX2 and AVX-512 ones; other tilings; determinism; and
 * the workspace growing linearly in T; the bf16 mode against the plain fp32
 * kernel (tolerance of bf16 operands). Set DTX_FLASH_VERBOSE=1 to print the
 * measured errors. The bf16 tile products themselves: tile_bf16_test.c. */
#include "../test.h"
#include "kernels/attention_flash.h"
#include "kernels/kernels.h"
#include "kernels/tile_gemm.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define FLASH_TOL 1e-5 /* max-element relative error vs plain, fp32 */
/* bf16 mode vs plain, both on inputs rounded to bf16: what is left are the
 * kernel's own roundings of P, dS (and DIFF's dO) to bf16, 2^-9 relative
 * each; measured worst 4.6e-3 over the tests below (2026-11-30, verbose). */
#define FLASH_BF16_TOL 1e-2

static int verbose(void) {
    const char *v = getenv("DTX_FLASH_VERBOSE");
    return v && *v && *v != '0';
}

/* ------------------------------------------------------------ a problem */

typedef struct {
    dtx_attn_dims a;
    size_t nq, nk, nv, no, nlse, nrstd;
    real *q, *k, *v, *gamma, *dout;
} prob;

static prob prob_make(uint64_t seed, int diff, int64_t B, int64_t T, int64_t H, int64_t G, int64_t d,
                      double lam, double lam_init, double qk_sd) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    prob p;
    memset(&p, 0, sizeof p);
    p.a = (dtx_attn_dims){.geom.B = B, .geom.T = T, .geom.n_heads = H, .geom.n_kv_heads = G, .geom.head_dim = d, .arch.diff = diff, .arch.subln = diff,
                          .arch.lambda = lam, .arch.lambda_init = lam_init, .arch.eps = 1e-5};
    int64_t sub = diff ? 2 : 1;
    p.nq = (size_t)(B * T * sub * H * d), p.nk = (size_t)(B * T * sub * G * d);
    p.nv = (size_t)(B * T * G * sub * d), p.no = (size_t)(B * T * H * sub * d);
    p.nlse = (size_t)(B * sub * H * T), p.nrstd = (size_t)(B * T * H);
    p.q = randn(&r, p.nq, 0, qk_sd), p.k = randn(&r, p.nk, 0, qk_sd), p.v = randn(&r, p.nv, 0, 1);
    p.gamma = randn(&r, (size_t)(2 * d), 1, 0.3), p.dout = randn(&r, p.no, 0, 1);
    return p;
}

static void prob_free(prob *p) { free(p->q), free(p->k), free(p->v), free(p->gamma), free(p->dout); }

/* Everything one implementation produces. */
typedef struct {
    real *out, *o1, *o2, *rstd, *dq, *dk, *dv, *dg;
    float *lse;
    double dl;
} result;

static result run(const prob *p, dtx_attn_impl impl) {
    dtx_attn_dims a = p->a;
    a.run.impl = impl;
    result R = {alloc_r(p->no), alloc_r(p->no), alloc_r(p->no), alloc_r(p->nrstd), alloc_r(p->nq), alloc_r(p->nk),
                alloc_r(p->nv), alloc_r((size_t)(2 * a.geom.head_dim)), NULL, 0};
    R.lse = calloc(p->nlse, sizeof(float));
    dtx_attn_saved s = {.att = impl == DTX_ATTN_PLAIN ? alloc_r(dtx_attention_att_size(&a)) : NULL,
                        .lse = impl == DTX_ATTN_FLASH ? R.lse : NULL, .o1 = R.o1, .o2 = R.o2, .rstd = R.rstd,
                        .work = impl == DTX_ATTN_FLASH ? dtx_alloc(dtx_attention_flash_workspace_size(&a) + 1,
                                                                   sizeof(real))
                                                       : NULL};
    dtx_attention_forward(&a, R.out, &s, p->q, p->k, p->v, p->gamma);
    dtx_attention_backward(&a, R.dq, R.dk, R.dv, a.arch.subln ? R.dg : NULL, a.arch.diff ? &R.dl : NULL, p->dout, R.out,
                           &s, p->q, p->k, p->v, p->gamma);
    free(s.att), free(s.work);
    return R;
}

static void result_free(result *R) {
    free(R->out), free(R->o1), free(R->o2), free(R->rstd), free(R->dq), free(R->dk), free(R->dv), free(R->dg);
    free(R->lse);
}

static double worst_seen;

/* Flash vs plain on every output; returns the worst relative error. */
static double compare(const prob *p, const result *f, const result *r, const char *name, double tol) {
    const char *names[8] = {"out", "o1", "o2", "rstd", "dq", "dk", "dv", "dsubln"};
    const real *fa[8] = {f->out, f->o1, f->o2, f->rstd, f->dq, f->dk, f->dv, f->dg};
    const real *ra[8] = {r->out, r->o1, r->o2, r->rstd, r->dq, r->dk, r->dv, r->dg};
    const dtx_attn_arch *ar = &p->a.arch;
    size_t n[8] = {p->no, p->no, p->no, p->nrstd, p->nq, p->nk, p->nv,
                   (size_t)((ar->diff ? 2 : 1) * p->a.geom.head_dim)};
    /* what this variant saves: o1 unless the epilogue is the identity, o2 (DIFF), rstd and dγ (subln) */
    int has[8] = {1, !dtx_attn_epilogue_is_identity(ar), ar->diff, ar->subln, 1, 1, 1, ar->subln};
    /* dq and dk are measured against the largest input gradient (dq, dk or
     * dv): at T = 1 they are exactly 0 and what is left is fp32 rounding of
     * dO·vᵀ − rowsum(dO ⊙ o), which the plain kernel sums in double. */
    double gscale = 0;
    for (int i = 4; i < 7; i++)
        for (size_t j = 0; j < n[i]; j++) gscale = fmax(gscale, fabs(ra[i][j]));
    double worst = 0;
    for (int i = 0; i < 8; i++) {
        if (!has[i]) continue;
        double e = rel_err(fa[i], ra[i], n[i], 0, i == 4 || i == 5 ? gscale : 1e-30);
        CHECKF(e < tol, "%s: %s rel err %.3g", name, names[i], e);
        worst = e > worst || e != e ? e : worst;
    }
    if (p->a.arch.diff) {
        /* dλ sums B·T·H·2d terms of both signs that largely cancel: measure
         * it against the size of dγ, a sum over the same rows. */
        double floor = 0;
        for (int64_t c = 0; c < 2 * p->a.geom.head_dim; c++) floor = fmax(floor, fabs(r->dg[c]));
        if (!ar->subln) { /* no dγ: the terms' own size Σ|dO ⊙ o2| (dO = s·dout) scales the cancellation */
            floor = 0;
            for (size_t c = 0; c < p->no; c++) floor += fabs(p->dout[c] * r->o2[c]) * dtx_attn_out_scale(ar);
        }
        double e = fabs(f->dl - r->dl) / fmax(fabs(r->dl), floor);
        CHECKF(e < tol, "%s: dlambda rel err %.3g (%.9g vs %.9g)", name, e, f->dl, r->dl);
        worst = e > worst ? e : worst;
    }
    if (verbose()) printf("    %-40s worst rel err %.2e\n", name, worst);
    worst_seen = worst > worst_seen ? worst : worst_seen;
    return worst;
}

static void round_bf16(real *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = dtx_bf16_to_f32(dtx_f32_to_bf16(x[i]));
}

/* Flash (in precision prec) vs the plain fp32 kernel; returns the worst
 * error. For bf16 both see inputs already rounded to bf16, so the error
 * measured is that of the kernel's own roundings (P, dS and DIFF's dO). */
static double flash_vs_plain_variant(int diff, int subln, int64_t T, int64_t H, int64_t G, int64_t d, double lam,
                                     double qk_sd, uint64_t seed, dtx_precision prec) {
    prob p = prob_make(seed, diff, 2, T, H, G, d, lam, 0.8 - 0.6 * exp(-0.3 * (double)(seed % 5)), qk_sd);
    p.a.arch.subln = subln;
    if (prec == DTX_PREC_BF16) /* the operands as the kernel will see them: what is left is its own rounding */
        round_bf16(p.q, p.nq), round_bf16(p.k, p.nk), round_bf16(p.v, p.nv), round_bf16(p.dout, p.no);
    result r = run(&p, DTX_ATTN_PLAIN);
    p.a.run.precision = prec;
    result f = run(&p, DTX_ATTN_FLASH);
    char name[96];
    snprintf(name, sizeof name, "%s%s T%lld H%lld G%lld d%lld sd%.0f%s %s", diff ? "diff" : "tfm",
             subln == diff ? "" : subln ? " +subln" : " -subln", (long long)T, (long long)H, (long long)G,
             (long long)d, qk_sd, prec == DTX_PREC_BF16 ? " bf16" : "", dtx_isa_name(dtx_tile_isa()));
    double e = compare(&p, &f, &r, name, prec == DTX_PREC_BF16 ? FLASH_BF16_TOL : FLASH_TOL);
    result_free(&f), result_free(&r), prob_free(&p);
    return e;
}

/* The default variant of each architecture (subln for DIFF only). */
static double flash_vs_plain_prec(int diff, int64_t T, int64_t H, int64_t G, int64_t d, double lam, double qk_sd,
                                  uint64_t seed, dtx_precision prec) {
    return flash_vs_plain_variant(diff, diff, T, H, G, d, lam, qk_sd, seed, prec);
}

/* fp32 at every ISA level the CPU has (the name of each comparison says
 * which ran). */
static void flash_vs_plain(int diff, int64_t T, int64_t H, int64_t G, int64_t d, double lam, double qk_sd,
                           uint64_t seed) {
    FOR_EACH_ISA(lvl) flash_vs_plain_prec(diff, T, H, G, d, lam, qk_sd, seed, DTX_PREC_FP32);
}

/* ------------------------------------------------------- flash vs plain */

/* Odd lengths around and across the default tiles of 128 queries × 64 keys
 * (63, 65 around a key tile, 130 around a query tile, 257 across three),
 * every head width, GQA ratios 1, 2, 4 (and 3 for the Transformer). */
TEST(kernel_flash_matches_plain_diff) {
    static const int64_t Ts[] = {1, 7, 63, 65, 130, 257}, ds[] = {8, 16, 64, 128}, reps[] = {1, 2, 4};
    uint64_t seed = 100;
    for (int it = 0; it < 6; it++)
        for (int id = 0; id < 4; id++) {
            int64_t rep = reps[(it + id) % 3], G = rep == 4 ? 1 : 2;
            if (Ts[it] == 257 && ds[id] == 128 && rep == 1) G = 1; /* keep the plain reference quick */
            flash_vs_plain(1, Ts[it], G * rep, G, ds[id], 0.5 + 0.1 * id, 1, seed++);
        }
    if (verbose()) printf("    worst over the sweep %.2e\n", worst_seen);
}

TEST(kernel_flash_matches_plain_transformer) {
    static const int64_t Ts[] = {1, 7, 63, 65, 130, 257}, ds[] = {8, 16, 64, 128}, reps[] = {1, 2, 3, 4};
    uint64_t seed = 200;
    for (int it = 0; it < 6; it++)
        for (int id = 0; id < 4; id++) {
            int64_t rep = reps[(it + id) % 4], G = rep >= 3 ? 1 : 2;
            flash_vs_plain(0, Ts[it], G * rep, G, ds[id], 0, 1, seed++);
        }
}

/* Every GQA ratio at a length spanning three query tiles. */
TEST(kernel_flash_matches_plain_gqa) {
    for (int64_t rep = 1; rep <= 4; rep++) {
        flash_vs_plain(0, 150, 2 * rep, 2, 32, 0, 1, 300 + (uint64_t)rep);
        if (rep != 3) flash_vs_plain(1, 150, 2 * rep, 2, 32, 0.8, 1, 310 + (uint64_t)rep);
    }
}

/* Table 6's variants (DIFF without the per-head norm, the Transformer with
 * one; a constant λ_init is only a different number to the kernels): odd
 * lengths across tiles, GQA, fp32 at every ISA level and bf16, against the
 * plain kernel. */
TEST(kernel_flash_matches_plain_variants) {
    static const int64_t Ts[] = {1, 65, 130};
    uint64_t seed = 1500;
    for (int diff = 0; diff <= 1; diff++)
        for (int it = 0; it < 3; it++) {
            int64_t G = it == 1 ? 1 : 2, H = 2 * G;
            FOR_EACH_ISA(lvl) flash_vs_plain_variant(diff, !diff, Ts[it], H, G, 16 << it, 0.7, 1, seed++, DTX_PREC_FP32);
            flash_vs_plain_variant(diff, !diff, Ts[it], H, G, 16 << it, 0.7, 1, seed++, DTX_PREC_BF16);
        }
    /* peaked maps (scores of sd ~3) in both variants */
    flash_vs_plain_variant(1, 0, 200, 2, 1, 32, 0.3, 3, seed++, DTX_PREC_FP32);
    flash_vs_plain_variant(0, 1, 200, 2, 2, 32, 0, 3, seed++, DTX_PREC_FP32);
}

/* Peaked maps (scores of sd ~10): the running max moves from tile to tile
 * and most probabilities underflow. λ near 1 makes O1 − λ·O2 cancel. */
TEST(kernel_flash_matches_plain_peaked) {
    flash_vs_plain(1, 200, 2, 1, 32, 0.3, 3, 401);
    flash_vs_plain(0, 200, 2, 2, 32, 0, 3, 402);
    flash_vs_plain(1, 130, 2, 2, 16, 0.95, 1, 403);
}

/* Other tilings: query tiles larger and smaller than key tiles, ragged
 * sizes not multiples of 16, a single tile for everything. */
TEST(kernel_flash_tilings) {
    static const int64_t tiles[][2] = {{16, 48}, {64, 128}, {32, 16}, {7, 5}, {64, 64}, {256, 32}};
    for (int i = 0; i < 6; i++) {
        dtx_flash_set_tiles(tiles[i][0], tiles[i][1]);
        flash_vs_plain(1, 131, 4, 2, 16, 0.6, 1, 500 + (uint64_t)i);
        flash_vs_plain(0, 131, 4, 2, 16, 0, 1, 510 + (uint64_t)i);
    }
    dtx_flash_set_tiles(0, 0);
}

/* ------------------------------------------------------------ bf16 mode */

/* bf16 operands against the plain fp32 kernel: odd lengths (a pad pair),
 * odd and even head widths, GQA, both architectures, at every ISA level the
 * CPU has (AVX-512 BF16: native bf16 tiles; below: emulated, the fp32 tiles
 * on rounded operands). The error must also not vanish: bf16 rounding
 * is there (an fp32 run in disguise would pass at 1e-6). */
TEST(kernel_flash_bf16_matches_plain) {
    static const int64_t Ts[] = {1, 7, 65, 130, 257}, ds[] = {8, 13, 64, 128};
    double worst = 0, least = 1;
    uint64_t seed = 1000;
    FOR_EACH_ISA(lvl) {
        for (int it = 0; it < 5; it++)
            for (int id = 0; id < 4; id++) {
                if (lvl == DTX_ISA_PORTABLE && (it + id) % 2) continue; /* the portable path is slow: half the grid */
                int64_t rep = 1 + (it + id) % 3, G = rep == 3 ? 1 : 2, diff = (it + id + (int)lvl) % 2;
                double e = flash_vs_plain_prec((int)diff, Ts[it], G * rep, G, ds[id], 0.6, 1, seed++, DTX_PREC_BF16);
                worst = fmax(worst, e);
                if (Ts[it] > 7) least = fmin(least, e);
            }
    }
    CHECKF(least > 1e-5, "bf16 errors as small as %.3g: are the products really bf16?", least);
    if (verbose()) printf("    bf16 worst over the sweep %.2e, least %.2e\n", worst, least);
}

/* Peaked maps and λ near 1 (O1 − λ·O2 cancels), and other even and odd
 * tilings (odd ones are rounded down to even in bf16 mode). */
TEST(kernel_flash_bf16_peaked_and_tilings) {
    flash_vs_plain_prec(1, 200, 2, 1, 32, 0.3, 3, 1101, DTX_PREC_BF16);
    flash_vs_plain_prec(0, 200, 2, 2, 32, 0, 3, 1102, DTX_PREC_BF16);
    flash_vs_plain_prec(1, 130, 2, 2, 16, 0.95, 1, 1103, DTX_PREC_BF16);
    static const int64_t tiles[][2] = {{16, 48}, {32, 16}, {7, 5}, {256, 32}};
    for (int i = 0; i < 4; i++) {
        dtx_flash_set_tiles(tiles[i][0], tiles[i][1]);
        flash_vs_plain_prec(1, 131, 4, 2, 16, 0.6, 1, 1110 + (uint64_t)i, DTX_PREC_BF16);
        flash_vs_plain_prec(0, 131, 4, 2, 16, 0, 1, 1120 + (uint64_t)i, DTX_PREC_BF16);
    }
    dtx_flash_set_tiles(0, 0);
}

/* Native bf16 tiles (AVX-512 BF16) and the emulation (the fp32 tiles on
 * rounded operands, forced by capping the level at AVX-512) agree: the same
 * bf16 products summed in fp32 in another order, so only P or dS values
 * near a rounding boundary can round apart. */
TEST(kernel_flash_bf16_native_matches_emulated) {
    REQUIRE_ISA(DTX_ISA_AVX512_BF16);
    for (int diff = 0; diff <= 1; diff++) {
        prob p = prob_make(1200 + (uint64_t)diff, diff, 2, 190, 4, 2, 64, 0.6, 0.5, 1);
        p.a.run.precision = DTX_PREC_BF16;
        dtx_isa prev = dtx_isa_set_cap(DTX_ISA_AVX512_BF16);
        result nat = run(&p, DTX_ATTN_FLASH);
        dtx_isa_set_cap(DTX_ISA_AVX512);
        result emu = run(&p, DTX_ATTN_FLASH);
        dtx_isa_set_cap(prev);
        compare(&p, &emu, &nat, diff ? "bf16 emulated vs native diff" : "bf16 emulated vs native tfm", FLASH_BF16_TOL);
        result_free(&nat), result_free(&emu), prob_free(&p);
    }
}

/* ------------------------------------------------------------ lse */

TEST(kernel_flash_lse) {
    for (int diff = 0; diff <= 1; diff++) {
        int64_t B = 2, T = 150, H = 4, G = 2, d = 16, sub = diff ? 2 : 1, NQ = sub * H, NK = sub * G;
        prob p = prob_make(600 + (uint64_t)diff, diff, B, T, H, G, d, 0.5, 0.5, 2);
        result f = run(&p, DTX_ATTN_FLASH);
        double worst = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < NQ; j++) {
                /* query sub-head j reads key sub-head: DIFF 2g + (j & 1), Transformer g */
                int64_t hh = diff ? j / 2 : j, ksub = diff ? 2 * (hh / (H / G)) + (j & 1) : hh / (H / G);
                for (int64_t t = 0; t < T; t++) {
                    double z[150], mx = -INFINITY, sum = 0;
                    for (int64_t s = 0; s <= t; s++) {
                        double acc = 0;
                        for (int64_t c = 0; c < d; c++)
                            acc += (double)p.q[(b * T + t) * NQ * d + j * d + c] * p.k[(b * T + s) * NK * d + ksub * d + c];
                        z[s] = acc / sqrt((double)d);
                        mx = fmax(mx, z[s]);
                    }
                    for (int64_t s = 0; s <= t; s++) sum += exp(z[s] - mx);
                    double want = mx + log(sum), got = f.lse[(b * NQ + j) * T + t];
                    worst = fmax(worst, fabs(got - want) / fmax(1, fabs(want)));
                }
            }
        CHECKF(worst < 2e-6, "%s lse error %.3g", diff ? "diff" : "tfm", worst);
        if (verbose()) printf("    lse %s worst err %.2e\n", diff ? "diff" : "tfm", worst);
        result_free(&f), prob_free(&p);
    }
}

/* ------------------------------------------------------------ tile ops */

/* ---------------------------------------------- paths, determinism, memory */

/* Every SIMD level agrees with the portable path on whole problems (the
 * tile tests above check the pieces); levels the CPU lacks are skipped. */
static void simd_matches_portable(dtx_isa want) {
    REQUIRE_ISA(want);
    for (int diff = 0; diff <= 1; diff++) {
        prob p = prob_make(800 + (uint64_t)diff, diff, 2, 200, 4, 2, 64, 0.7, 0.5, 1);
        dtx_isa prev = dtx_isa_set_cap(want);
        CHECK(dtx_tile_isa() == want);
        result s = run(&p, DTX_ATTN_FLASH);
        dtx_isa_set_cap(DTX_ISA_PORTABLE);
        result f = run(&p, DTX_ATTN_FLASH);
        dtx_isa_set_cap(prev);
        char name[64];
        snprintf(name, sizeof name, "portable vs %s %s", dtx_isa_name(want), diff ? "diff" : "tfm");
        compare(&p, &f, &s, name, FLASH_TOL);
        double e = 0;
        for (size_t i = 0; i < p.nlse; i++) e = fmax(e, fabs(f.lse[i] - s.lse[i]));
        CHECKF(e < 1e-5, "lse %s %.3g", name, e);
        result_free(&s), result_free(&f), prob_free(&p);
    }
}
TEST(kernel_flash_avx2_matches_portable) { simd_matches_portable(DTX_ISA_AVX2); }
TEST(kernel_flash_avx512_matches_portable) { simd_matches_portable(DTX_ISA_AVX512); }

static int same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* Two runs give the same bits; so do runs on 1 and on several threads. */
TEST(kernel_flash_deterministic) {
    for (int mode = 0; mode < 4; mode++) {
        int diff = mode % 2;
        prob p = prob_make(900 + (uint64_t)diff, diff, 2, 300, 4, 2, 32, 0.6, 0.5, 1);
        p.a.run.precision = mode >= 2 ? DTX_PREC_BF16 : DTX_PREC_FP32;
        int nth = omp_get_max_threads();
        result x = run(&p, DTX_ATTN_FLASH), y = run(&p, DTX_ATTN_FLASH);
        omp_set_num_threads(1);
        result z = run(&p, DTX_ATTN_FLASH);
        omp_set_num_threads(nth > 1 ? nth : 2);
        result u = run(&p, DTX_ATTN_FLASH);
        omp_set_num_threads(nth);
        const result *o[3] = {&y, &z, &u};
        size_t sr = sizeof(real);
        for (int i = 0; i < 3; i++) {
            CHECK(same_bits(x.out, o[i]->out, p.no * sr) && same_bits(x.lse, o[i]->lse, p.nlse * sizeof(float)));
            CHECK(same_bits(x.dq, o[i]->dq, p.nq * sr) && same_bits(x.dk, o[i]->dk, p.nk * sr) &&
                  same_bits(x.dv, o[i]->dv, p.nv * sr));
            if (diff)
                CHECK(same_bits(x.dg, o[i]->dg, (size_t)(2 * p.a.geom.head_dim) * sr) && x.dl == o[i]->dl &&
                      same_bits(x.o1, o[i]->o1, p.no * sr) && same_bits(x.rstd, o[i]->rstd, p.nrstd * sr));
        }
        result_free(&x), result_free(&y), result_free(&z), result_free(&u), prob_free(&p);
    }
}

/* The only T-dependent memory is s->work (plus lse/o1/o2/rstd, all O(T));
 * the stack scratch is fixed (4·BQ·BK). Doubling T at most doubles the
 * workspace (plus the 16-element rounding), and PLAIN asks for none. */
TEST(kernel_flash_workspace_linear) {
    for (int diff = 0; diff <= 1; diff++) {
        dtx_attn_dims a = {.run.impl = DTX_ATTN_FLASH, .geom.B = 3, .geom.T = 1000, .geom.n_heads = 4, .geom.n_kv_heads = 2, .geom.head_dim = 64,
                           .arch.diff = diff, .arch.subln = diff, .arch.lambda = 0.5, .arch.lambda_init = 0.2, .arch.eps = 1e-5};
        size_t w1 = dtx_attention_flash_workspace_size(&a);
        a.geom.T = 2000;
        size_t w2 = dtx_attention_flash_workspace_size(&a);
        a.geom.T = 64000;
        size_t w64 = dtx_attention_flash_workspace_size(&a);
        CHECKF(w2 <= 2 * w1 + 64 && w2 > w1, "workspace %zu -> %zu", w1, w2);
        CHECKF(w64 <= 64 * w1 + 64 * 64, "workspace not linear: %zu at T=1000, %zu at T=64000", w1, w64);
        /* formula from kernels.h, every term a multiple of 16 here */
        int64_t B = 3, T = 64000, Tp = 64016, H = 4, G = 2, d = 64, sub = diff ? 2 : 1, w = sub * d;
        size_t want = (size_t)(B * sub * G * d * Tp + B * G * w * Tp + B * sub * H * T + B * T * H * w +
                               B * T * sub * H * d + B * T * sub * G * d + B * T * G * w +
                               (diff ? ((B * G * (w + 1) * 2 + 15) / 16) * 16 : 0));
        CHECKF(w64 == want, "workspace %zu, formula %zu", w64, want);
        /* bf16 adds the native mode's bf16 copies (kernels.h): d, w even here, T' = T/2 */
        a.run.precision = DTX_PREC_BF16;
        size_t extra = (size_t)(B * T * sub * H * d / 2 + B * sub * H * (T / 2) * d + B * sub * G * (T / 2) * d +
                                B * T * H * w / 2 + B * H * (T / 2) * w);
        CHECKF(dtx_attention_flash_workspace_size(&a) == want + extra, "bf16 workspace %zu, formula %zu",
               dtx_attention_flash_workspace_size(&a), want + extra);
        a.run.precision = DTX_PREC_FP32;
        a.run.impl = DTX_ATTN_PLAIN;
        CHECK(dtx_attention_flash_workspace_size(&a) == 0);
    }
}
