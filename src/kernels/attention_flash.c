/* Fused causal flash attention, forward and backward, for both the
 * Transformer and differential attention (spec §2.2–2.8, §4.1, §5.1). Same
 * contracts and layouts as the plain kernel (attention.c, kernels.h), but no
 * T×T buffer: the forward keeps online-softmax states per query row and saves
 * the row log-sum-exp; the backward recomputes the maps tile by tile.
 *
 * DIFF, per head, in one pass over the key tiles: two online-softmax states
 * per row (maps (q1,k1) and (q2,k2)) against the same V tile (2d wide),
 * O1 = A1·V and O2 = A2·V accumulated in the working precision directly in
 * s->o1 / s->o2, then the epilogue O = O1 − λ·O2, RMSNorm over 2d, scale.
 * The backward shares what the two branches share: dO1 = dO and dO2 = −λ·dO,
 * so dP2 = −λ·dP1 (one dO·Vᵀ product) and dV += (P1 − λ·P2)ᵀ·dO (one product).
 * Its product count then equals that of a Transformer with twice the heads.
 *
 * Every product is a tile product C (=|+=) A·B with B read by rows
 * (tile_gemm.c, at the ISA level in use): S = Q·Kᵀ and dP = dO·Vᵀ read Kᵀ
 * and Vᵀ from the workspace (transposed per sub-head or KV group, key tile
 * by key tile); Pᵀ and dSᵀ are read as strided A. In fp32 the products read
 * per-head copies of q, k, v and dO too (see "fp32 and emulated copies").
 *
 * Threads: forward tasks are (batch, head, query tile), longest rows first;
 * backward tasks are (batch, KV group), which own their dk, dv, dq rows, so
 * nothing is shared; the γ and λ gradients are reduced from per-task
 * partials in task order. Every value is computed by one task in a fixed
 * order, so results do not depend on the thread count or schedule.
 *
 * bf16 mode (a->run.precision, float build): the same tiles and the same loops,
 * but every product takes bf16 operands (tile_bf16.h): q, k, v and dO are
 * converted once per call into the two operand layouts in s->work (k, v and
 * q of a backward task by that task), the P and dS tiles just before their
 * products; S, P, dP, dS, the softmax states and the O accumulators stay
 * fp32. Tile sizes are rounded down to even there (pairs must not straddle
 * a tile edge).
 *
 * Emulated bf16 (a->run.precision bf16 at an ISA level without native bf16,
 * i.e. below DTX_ISA_AVX512_BF16): the fp32 tiles and loops on operands
 * rounded to bf16, the native mode's numerics at fp32 speed. q, k, v (and
 * the Transformer's dO) are rounded into copies in s->work, DIFF's dO in
 * place, Kᵀ and Vᵀ transposed from the rounded copies; P is rounded before
 * P·v (in the forward in place, in the backward into Pc, as dS needs P
 * unrounded), dS in place before its two products. A product of two bf16
 * values is exact in fp32, so the two modes differ only in the order of the
 * fp32 additions.
 *
 * Memory: s->lse, s->o1/o2/rstd (as the plain kernel) and s->work
 * (dtx_attention_flash_workspace_size, linear in T); per-task stack scratch
 * of 4·BQ·BK elements (plus two bf16 tiles). Nothing is allocated. */
#include "kernels/attention_flash.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/tile_bf16.h"
#include "kernels/tile_gemm.h"

enum { MAX_BQ = DTX_FLASH_MAX_BQ, MAX_TILE = DTX_FLASH_MAX_TILE, MAXW = 2 * DTX_ATTN_MAX_HEAD_DIM };

static int64_t tile_bq = DTX_FLASH_BQ, tile_bk = DTX_FLASH_BK;

void dtx_flash_set_tiles(int64_t bq, int64_t bk) {
    if (bq <= 0 || bk <= 0) bq = DTX_FLASH_BQ, bk = DTX_FLASH_BK;
    assert(bq <= MAX_BQ && bq * bk <= MAX_TILE);
    tile_bq = bq, tile_bk = bk;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }
/* Valid keys of row r in a tile pair with diag = q0 − k0 (key c ≤ diag + r). */
static inline int64_t valid_cols(int64_t diag, int64_t r, int64_t n) {
    int64_t v = diag + r + 1;
    return v < 0 ? 0 : v > n ? n : v;
}

/* ------------------------------------------------------------- geometry */

/* Shapes, strides and workspace layout shared by forward and backward. */
typedef struct {
    int64_t B, T, Tp, H, G, n_rep, d, w; /* Tp: Kᵀ/Vᵀ row stride, see make_fgeom */
    int64_t NQ, NK;                      /* q and k sub-heads */
    int64_t qs, ks, vs, os;              /* row strides of q, k, v, out (= o1, o2) */
    int64_t bq, bk;                      /* tile sizes */
    int diff, bf16;                      /* bf16: the products take bf16 operands */
    int subln, ident;                    /* per-head norm; identity epilogue (out = A·v) */
    int emul;                            /* emulated bf16: fp32 products of bf16-rounded operands */
    int hm;                              /* fp32 and emulated: the head-major copies below are in use */
    int64_t dp, wp, Tpair;               /* bf16: d, w rounded up to even; ⌈T/2⌉ pair rows */
    real scale; /* 1/√d */
    /* s->work regions, offsets in elements of real (each a multiple of 16) */
    int64_t off_part, off_kt, off_vt, off_do, off_D, off_lse, total;
    int64_t off_qh, off_kh, off_vh;                   /* head-major copies of q, k, v (fp32, emulated) */
    int64_t off_qa, off_qb, off_kb, off_doa, off_dob; /* bf16 copies (see the bf16 section) */
} fgeom;

static inline int64_t even_down(int64_t n) { return n > 2 ? n & ~(int64_t)1 : 2; }

static fgeom make_fgeom(const dtx_attn_dims *a) {
    assert(a && a->geom.B >= 0 && a->geom.T >= 0 && a->geom.n_heads > 0 && a->geom.n_kv_heads > 0);
    assert(a->geom.n_heads % a->geom.n_kv_heads == 0);
    assert(a->geom.head_dim > 0 && a->geom.head_dim <= DTX_ATTN_MAX_HEAD_DIM);
    fgeom g;
    g.B = a->geom.B, g.T = a->geom.T, g.H = a->geom.n_heads, g.G = a->geom.n_kv_heads, g.d = a->geom.head_dim;
    /* The Kᵀ/Vᵀ regions hold d (w) rows of Tp. The bf16 mode's pair layouts
     * use Tp as their row stride: rows start on cache lines (T rounded up to
     * 16 floats) an odd number of lines apart, so the rows a product walks
     * down do not all land in the same L1 sets (a 4 KiB stride would, at
     * T = 1024). The fp32 mode's key-tiled transposes fit in the same space. */
    g.Tp = round16(a->geom.T);
    if ((g.Tp / 16) % 2 == 0) g.Tp += 16;
    g.n_rep = g.H / g.G;
    g.diff = a->arch.diff != 0;
    g.subln = a->arch.subln != 0;
    g.ident = dtx_attn_epilogue_is_identity(&a->arch);
    int64_t sub = g.diff ? 2 : 1;
    g.NQ = sub * g.H, g.NK = sub * g.G, g.w = sub * g.d;
    g.qs = g.NQ * g.d, g.ks = g.NK * g.d, g.vs = g.G * g.w, g.os = g.H * g.w;
    g.bq = tile_bq, g.bk = tile_bk;
#ifdef DTX_DOUBLE
    g.bf16 = g.emul = 0;
#else
    g.bf16 = a->run.precision == DTX_PREC_BF16 && dtx_tile_bf16_simd();
    g.emul = a->run.precision == DTX_PREC_BF16 && !g.bf16;
#endif
    g.hm = !g.bf16;
    if (g.bf16) g.bq = even_down(g.bq), g.bk = even_down(g.bk);
    assert(g.bq <= MAX_BQ && g.bq * g.bk <= MAX_TILE);
    g.dp = g.d + (g.d & 1), g.wp = g.w + (g.w & 1), g.Tpair = (g.T + 1) / 2;
    g.scale = (real)(1.0 / sqrt((double)g.d));
    int64_t per_double = (int64_t)(sizeof(double) / sizeof(real)), o = 0;
    g.off_part = o, o += round16(g.diff || g.subln ? g.B * g.G * (g.w + 1) * per_double : 0); /* first: 8-byte aligned */
    g.off_kt = o, o += round16(g.B * g.NK * g.d * g.Tp);
    g.off_vt = o, o += round16(g.B * g.G * g.w * g.Tp);
    g.off_do = o, o += round16(g.B * g.T * g.H * g.w);
    g.off_D = o, o += round16(g.B * g.NQ * g.T);
#ifdef DTX_DOUBLE
    g.off_lse = o, o += round16(g.B * g.NQ * g.T); /* lse refined to double, see refine_lse */
#else
    g.off_lse = -1;
#endif
    g.off_qh = o, o += round16(g.B * g.T * g.qs);
    g.off_kh = o, o += round16(g.B * g.T * g.ks);
    g.off_vh = o, o += round16(g.B * g.T * g.vs);
    /* bf16 regions, sizes in floats (a bf16 pair is one float); sized
     * whenever the precision is bf16, so that one workspace serves the
     * native and the emulated mode (which follows the ISA level at each
     * call). */
    int64_t bf = a->run.precision == DTX_PREC_BF16;
#ifdef DTX_DOUBLE
    bf = 0;
#endif
    g.off_qa = o, o += round16(bf * g.B * g.T * g.NQ * g.dp / 2);
    g.off_qb = o, o += round16(bf * g.B * g.NQ * g.Tpair * g.d);
    g.off_kb = o, o += round16(bf * g.B * g.NK * g.Tpair * g.d);
    g.off_doa = o, o += round16(bf * g.B * g.T * g.H * g.wp / 2);
    g.off_dob = o, o += round16(bf * g.B * g.H * g.Tpair * g.w);
    g.total = o;
    return g;
}

size_t dtx_attention_flash_workspace_size(const dtx_attn_dims *a) {
    if (a->run.impl != DTX_ATTN_FLASH) return 0;
    return (size_t)make_fgeom(a).total;
}

/* ------------------------------------------- fp32 and emulated copies
 * The products of the fp32 (and emulated bf16) mode read per-head copies
 * in the workspace, never the caller's interleaved rows, whose 2 KiB and
 * larger strides cost the AVX2 micro-kernels 10–15% (L1 set conflicts, TLB
 * misses):
 *   q sub-head j, k sub-head:  [T × d], row stride d (qh, kh);
 *   v of a KV group:           [T × w], row stride w (vh);
 *   dO of head h (backward):   [T × w], row stride w (the dO region);
 *   Kᵀ, Vᵀ (per sub-head / group): key-tiled, the key tile at k0 a
 *     [d × nk] (or [w × nk]) block at offset k0·d (k0·w) with row stride
 *     nk = min(bk, T − k0), so a tile's rows are contiguous.
 * In emulated mode every copy is rounded to bf16. */

#ifndef DTX_DOUBLE
/* dst [n] = bf16(src) as floats (dst may be src). Inline: a tile's rows are
 * short (64 values), and a call per row cost the emulated mode 6% of its
 * attention time. */
static inline void round_row(real *dst, const real *src, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) dst[i] = dtx_bf16_round_f32(src[i]);
}
#endif

/* x [rows × cols] (row stride ld) rounded to bf16 in place (emulated mode;
 * a no-op otherwise). */
static void round_tile(const fgeom *g, real *x, int64_t ld, int64_t rows, int64_t cols) {
#ifndef DTX_DOUBLE
    if (g->emul)
        for (int64_t r = 0; r < rows; r++) round_row(x + r * ld, x + r * ld, cols);
#else
    (void)g, (void)x, (void)ld, (void)rows, (void)cols;
#endif
}

/* dst [rows × cols] (stride ldd) = src (stride lds), rounded to bf16 in
 * emulated mode (dst may be src when the strides agree). */
static void copy_rows(const fgeom *g, real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows,
                      int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
#ifndef DTX_DOUBLE
        if (g->emul) {
            round_row(dst + r * ldd, src + r * lds, cols);
            continue;
        }
#endif
        if (dst != src) memcpy(dst + r * ldd, src + r * lds, sizeof(real) * (size_t)cols);
    }
}

static real *qh_ptr(const fgeom *g, real *work, int64_t b, int64_t j) {
    return work + g->off_qh + (b * g->NQ + j) * g->T * g->d;
}
static real *kh_ptr(const fgeom *g, real *work, int64_t b, int64_t sub) {
    return work + g->off_kh + (b * g->NK + sub) * g->T * g->d;
}
static real *vh_ptr(const fgeom *g, real *work, int64_t b, int64_t grp) {
    return work + g->off_vh + (b * g->G + grp) * g->T * g->w;
}

/* Kᵀ of k sub-head `sub` in batch b (a region of d·Tp elements). */
static real *kt_ptr(const fgeom *g, real *work, int64_t b, int64_t sub) {
    return work + g->off_kt + (b * g->NK + sub) * g->d * g->Tp;
}

/* Vᵀ of KV group grp in batch b (a region of w·Tp elements). */
static real *vt_ptr(const fgeom *g, real *work, int64_t b, int64_t grp) {
    return work + g->off_vt + (b * g->G + grp) * g->w * g->Tp;
}

/* Row stride of the key-tiled transposes' tile at k0. */
static inline int64_t tile_ld(const fgeom *g, int64_t k0) { return min64(g->bk, g->T - k0); }

/* dst = the key-tiled transpose of src [T × cols] (row stride cols). */
static void transpose_tiled(const fgeom *g, real *dst, const real *src, int64_t cols) {
    for (int64_t k0 = 0; k0 < g->T; k0 += g->bk) {
        int64_t nk = tile_ld(g, k0);
        dtx_tile_transpose(dst + k0 * cols, nk, src + k0 * cols, cols, nk, cols);
    }
}

/* The copies of k sub-head `sub` of batch b: kh, then its Kᵀ. */
static void stage_k(const fgeom *g, real *work, const real *k, int64_t b, int64_t sub) {
    real *kh = kh_ptr(g, work, b, sub);
    copy_rows(g, kh, g->d, k + b * g->T * g->ks + sub * g->d, g->ks, g->T, g->d);
    transpose_tiled(g, kt_ptr(g, work, b, sub), kh, g->d);
}
/* vh of group grp (and its Vᵀ, for the backward). */
static void stage_v(const fgeom *g, real *work, const real *v, int64_t b, int64_t grp, int with_t) {
    real *vh = vh_ptr(g, work, b, grp);
    copy_rows(g, vh, g->w, v + b * g->T * g->vs + grp * g->w, g->vs, g->T, g->w);
    if (with_t) transpose_tiled(g, vt_ptr(g, work, b, grp), vh, g->w);
}
static void stage_q(const fgeom *g, real *work, const real *q, int64_t b, int64_t j) {
    copy_rows(g, qh_ptr(g, work, b, j), g->d, q + b * g->T * g->qs + j * g->d, g->qs, g->T, g->d);
}

/* ------------------------------------------------- bf16 operand copies
 * (tile_bf16.h layouts; bf16 mode only, so never in the double build):
 *   Kᵀ of k sub-head:   B layout of kᵀ [d × T], ldp Tp, in the Kᵀ region;
 *   V of a KV group:    forward: B layout of v [T × w] (pairs of keys),
 *                       ldp w; backward: B layout of vᵀ [w × T], ldp Tp;
 *                       both in the Vᵀ region;
 *   q sub-head j:       A layout [T × d'] inside rows of NQ·d' (qa), and
 *                       B layout [T × d] (pairs of queries), ldp d (qb);
 *   k sub-head:         B layout [T × d] (pairs of keys), ldp d (kb);
 *   dO of head h:       A layout inside rows of H·w' (doa), B layout
 *                       [T × w], ldp w (dob).
 * A tile starting at row t0 (even) of a B-layout copy starts t0·ldp bf16
 * values in; one starting at column t0 of kᵀ or vᵀ starts 2·t0 in. */
#ifndef DTX_DOUBLE
static dtx_bf16 *as_bf16(real *p) { return (dtx_bf16 *)(void *)p; }
static dtx_bf16 *ktb_ptr(const fgeom *g, real *work, int64_t b, int64_t sub) {
    return as_bf16(kt_ptr(g, work, b, sub));
}
static dtx_bf16 *vb_ptr(const fgeom *g, real *work, int64_t b, int64_t grp) {
    return as_bf16(vt_ptr(g, work, b, grp));
}
static dtx_bf16 *qa_ptr(const fgeom *g, real *work, int64_t b, int64_t j) {
    return as_bf16(work + g->off_qa) + (b * g->T * g->NQ + j) * g->dp;
}
static dtx_bf16 *qb_ptr(const fgeom *g, real *work, int64_t b, int64_t j) {
    return as_bf16(work + g->off_qb) + (b * g->NQ + j) * g->Tpair * 2 * g->d;
}
static dtx_bf16 *kb_ptr(const fgeom *g, real *work, int64_t b, int64_t sub) {
    return as_bf16(work + g->off_kb) + (b * g->NK + sub) * g->Tpair * 2 * g->d;
}
static dtx_bf16 *doa_ptr(const fgeom *g, real *work, int64_t b, int64_t h) {
    return as_bf16(work + g->off_doa) + (b * g->T * g->H + h) * g->wp;
}
static dtx_bf16 *dob_ptr(const fgeom *g, real *work, int64_t b, int64_t h) {
    return as_bf16(work + g->off_dob) + (b * g->H + h) * g->Tpair * 2 * g->w;
}

static void pack_kt(const fgeom *g, real *work, const real *k, int64_t b, int64_t sub) {
    dtx_bf16_pack_bt(ktb_ptr(g, work, b, sub), g->Tp, k + b * g->T * g->ks + sub * g->d, g->ks, g->T, g->d);
}
static void pack_q(const fgeom *g, real *work, const real *q, int64_t b, int64_t j, int both) {
    const real *src = q + b * g->T * g->qs + j * g->d;
    dtx_bf16_pack_a(qa_ptr(g, work, b, j), g->NQ * g->dp, src, g->qs, 1, g->T, g->d);
    if (both) dtx_bf16_pack_b(qb_ptr(g, work, b, j), g->d, src, g->qs, g->T, g->d);
}
#endif

/* ---------------------------------------------------------------- forward */

/* Online-softmax state of one map over a query tile, and its score tile. */
typedef struct {
    real m[MAX_BQ], l[MAX_BQ], alpha[MAX_BQ]; /* running max, denominator, last rescale */
    _Alignas(64) real S[MAX_TILE];            /* [bq × bk] scores, then probabilities */
#ifndef DTX_DOUBLE
    _Alignas(64) dtx_bf16 Pb[MAX_TILE]; /* bf16 mode: P in the A layout */
#endif
} fmap;

/* What one map reads for a query tile: fp32 (and emulated) qh [mq, d]
 * (the query tile's rows, stride d), kt (the key-tiled Kᵀ), vh [T, w]
 * (stride w); or in bf16 mode the copies qa (query tile rows), ktb, vb
 * (whole sequence). */
typedef struct {
    const real *qh, *kt, *vh;
#ifndef DTX_DOUBLE
    const dtx_bf16 *qa, *ktb, *vb;
#endif
} mapsrc;

/* S [mq × nk] (stride ld) = q·kᵀ of query rows [q0, q0+mq) and keys
 * [k0, k0+nk) of one map; beyond the diagonal unspecified (DTX_TRI_N_HI). */
static void scores(const fgeom *g, const mapsrc *in, real *S, int64_t ld, int64_t q0, int64_t mq, int64_t k0,
                   int64_t nk) {
#ifndef DTX_DOUBLE
    if (g->bf16) {
        dtx_bf16_gemm_tri(mq, nk, g->d, in->qa, g->NQ * g->dp, in->ktb + 2 * k0, g->Tp, S, ld, 0, DTX_TRI_N_HI,
                          q0 - k0);
        return;
    }
#endif
    dtx_tile_gemm_tri(mq, nk, g->d, in->qh, g->d, 1, in->kt + k0 * g->d, tile_ld(g, k0), S, ld, 0, DTX_TRI_N_HI,
                      q0 - k0);
}

/* The sources of q sub-head j (query rows from q0, batch b) against k
 * sub-head ksub and value group grp, in the working layout of either mode. */
static mapsrc map_src(const fgeom *g, real *work, int64_t b, int64_t j, int64_t ksub,
                      int64_t grp, int64_t q0) {
    mapsrc in = {.qh = qh_ptr(g, work, b, j) + q0 * g->d, .kt = kt_ptr(g, work, b, ksub), .vh = vh_ptr(g, work, b, grp)};
#ifndef DTX_DOUBLE
    if (g->bf16)
        in.qa = qa_ptr(g, work, b, j) + q0 * g->NQ * g->dp, in.ktb = ktb_ptr(g, work, b, ksub),
        in.vb = vb_ptr(g, work, b, grp);
#endif
    return in;
}

/* One key tile [k0, k0 + nk) of one map for query rows [q0, q0 + mq):
 * S = q·ktᵀ, online softmax update, o = alpha·o + P·v. On the diagonal the
 * products skip what the causal mask zeroes (DTX_TRI_*). o [mq, w] (stride os). */
static void map_step(fmap *f, const fgeom *g, const mapsrc *in, int64_t w, real *o, int64_t q0, int64_t mq,
                     int64_t k0, int64_t nk) {
    int64_t bk = g->bk, diag = q0 - k0;
    scores(g, in, f->S, bk, q0, mq, k0, nk);
    dtx_tile_softmax_update(f->S, bk, mq, nk, diag, g->scale, f->m, f->l, f->alpha);
    if (k0 > 0) /* the first tile overwrites o instead (acc = 0 below) */
        for (int64_t r = 0; r < mq; r++) {
            real al = f->alpha[r], *orow = o + r * g->os;
            if (al == 1) continue;
#pragma omp simd
            for (int64_t c = 0; c < w; c++) orow[c] *= al;
        }
#ifndef DTX_DOUBLE
    if (g->bf16) {
        dtx_bf16_pack_a(f->Pb, bk, f->S, bk, 1, mq, nk);
        dtx_bf16_gemm_tri(mq, w, nk, f->Pb, bk, in->vb + k0 * w, w, o, g->os, k0 > 0, DTX_TRI_K_HI, diag);
        return;
    }
#endif
    round_tile(g, f->S, bk, mq, nk); /* emulated bf16: P as the product's operand (l already has it unrounded) */
    dtx_tile_gemm_tri(mq, w, nk, f->S, bk, 1, in->vh + k0 * w, w, o, g->os, k0 > 0, DTX_TRI_K_HI, diag);
}

static void map_init(fmap *f, int64_t mq) {
    for (int64_t r = 0; r < mq; r++) f->m[r] = -INFINITY, f->l[r] = 0;
}

/* Normalise o [mq, w] by 1/l and store lse = m + log l (lse [mq], stride 1). */
static void map_finish(const fmap *f, const fgeom *g, real *o, int64_t w, float *lse, int64_t mq) {
    for (int64_t r = 0; r < mq; r++) {
        real inv = 1 / f->l[r], *orow = o + r * g->os;
#pragma omp simd
        for (int64_t c = 0; c < w; c++) orow[c] *= inv;
        lse[r] = (float)(f->m[r] + log((double)f->l[r]));
    }
}

/* The epilogue of head h's rows [q0, q0 + mq) from s->o1 (and DIFF's
 * s->o2) into out, with rstd saved under subln. */
static void epilogue_rows(const fgeom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                          const real *gamma, int64_t b, int64_t h, int64_t q0, int64_t mq) {
    int64_t w = g->w, T = g->T, off = (b * T + q0) * g->os + h * w;
    for (int64_t r = 0; r < mq; r++) {
        int64_t o = off + r * g->os;
        double rs = dtx_attn_epilogue_forward(&a->arch, out + o, s->o1 + o, g->diff ? s->o2 + o : NULL, gamma, w);
        if (g->subln) s->rstd[(b * T + q0 + r) * g->H + h] = (real)rs;
    }
}

/* Transformer head j of batch b, query rows [q0, q0 + mq): out rows of head
 * j (accumulated in place, or in s->o1 before a norm). */
static void fwd_tile(const fgeom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *gamma,
                     int64_t b, int64_t j, int64_t q0, int64_t mq) {
    int64_t d = g->d, T = g->T, kv = j / g->n_rep;
    mapsrc in = map_src(g, s->work, b, j, kv, kv, q0);
    real *o = (g->ident ? out : s->o1) + (b * T + q0) * g->os + j * d;
    fmap f;
    map_init(&f, mq);
    for (int64_t k0 = 0; k0 < q0 + mq; k0 += g->bk) map_step(&f, g, &in, d, o, q0, mq, k0, min64(g->bk, q0 + mq - k0));
    map_finish(&f, g, o, d, s->lse + (b * g->NQ + j) * T + q0, mq);
    if (!g->ident) epilogue_rows(g, a, out, s, gamma, b, j, q0, mq);
}

/* DIFF head h of batch b, query rows [q0, q0 + mq): o1, o2, the two lse
 * rows, then the epilogue of O = o1 − λ·o2 into out. */
static void fwd_diff_tile(const fgeom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                          const real *gamma, int64_t b, int64_t h, int64_t q0, int64_t mq) {
    int64_t w = g->w, T = g->T, grp = h / g->n_rep, off = (b * T + q0) * g->os + h * w;
    mapsrc in[2] = {map_src(g, s->work, b, 2 * h, 2 * grp, grp, q0),
                    map_src(g, s->work, b, 2 * h + 1, 2 * grp + 1, grp, q0)};
    real *o1 = s->o1 + off, *o2 = s->o2 + off;
    fmap f[2];
    map_init(&f[0], mq), map_init(&f[1], mq);
    for (int64_t k0 = 0; k0 < q0 + mq; k0 += g->bk) {
        int64_t nk = min64(g->bk, q0 + mq - k0);
        map_step(&f[0], g, &in[0], w, o1, q0, mq, k0, nk);
        map_step(&f[1], g, &in[1], w, o2, q0, mq, k0, nk);
    }
    float *lse1 = s->lse + (b * g->NQ + 2 * h) * T + q0;
    map_finish(&f[0], g, o1, w, lse1, mq);
    map_finish(&f[1], g, o2, w, lse1 + T, mq);
    epilogue_rows(g, a, out, s, gamma, b, h, q0, mq);
}

void dtx_attention_flash_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q,
                                 const real *k, const real *v, const real *subln_w) {
    fgeom g = make_fgeom(a);
    assert(out && s && s->lse && s->work && q && k && v);
    assert(g.ident || s->o1);
    assert(!g.diff || s->o2);
    assert(!g.subln || (s->rstd && subln_w));
    int64_t nqt = (g.T + g.bq - 1) / g.bq, nbh = g.B * g.H;
#pragma omp parallel
    {
        if (g.hm) { /* the head-major copies (rounded when emulating bf16) and Kᵀ */
#pragma omp for collapse(2) schedule(static) nowait
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t sub = 0; sub < g.NK; sub++) stage_k(&g, s->work, k, b, sub);
#pragma omp for collapse(2) schedule(static) nowait
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t grp = 0; grp < g.G; grp++) stage_v(&g, s->work, v, b, grp, 0);
#pragma omp for collapse(2) schedule(static)
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t j = 0; j < g.NQ; j++) stage_q(&g, s->work, q, b, j);
        } else {
#ifndef DTX_DOUBLE
#pragma omp for collapse(2) schedule(static) nowait
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t sub = 0; sub < g.NK; sub++) pack_kt(&g, s->work, k, b, sub);
#pragma omp for collapse(2) schedule(static) nowait
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t grp = 0; grp < g.G; grp++)
                    dtx_bf16_pack_b(vb_ptr(&g, s->work, b, grp), g.w, v + b * g.T * g.vs + grp * g.w, g.vs, g.T, g.w);
#pragma omp for collapse(2) schedule(static)
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t j = 0; j < g.NQ; j++) pack_q(&g, s->work, q, b, j, 0);
#endif
        }
        /* (implicit barrier: every Kᵀ, or every bf16 copy, is complete) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < nqt * nbh; task++) {
            int64_t qt = nqt - 1 - task / nbh, bh = task % nbh; /* longest rows first */
            int64_t b = bh / g.H, h = bh % g.H, q0 = qt * g.bq, mq = min64(g.bq, g.T - q0);
            if (g.diff) fwd_diff_tile(&g, a, out, s, subln_w, b, h, q0, mq);
            else fwd_tile(&g, a, out, s, subln_w, b, h, q0, mq);
        }
    }
}

/* --------------------------------------------------------------- backward */

/* Everything a backward task reads or writes. */
typedef struct {
    const real *q, *k, *v, *dout, *out, *gamma;
    const dtx_attn_saved *s;
    real *dq, *dk, *dv;
    real *dO; /* [B, T, H·w] (or head-major, see dO_head) gradient of O (workspace) */
    real *D;  /* [B, NQ, T] row terms: rowsum(dO ⊙ o1) (DIFF: and rowsum(dO ⊙ o2)) */
    const dtx_attn_arch *arch;
    double lam;
} bargs;

/* Head h's dO [T × w] (row stride w) in the dO region: the fp32 and
 * emulated modes' head-major layout (the bf16 mode keeps rows of H·w). */
static real *dO_head(const fgeom *g, const bargs *p, int64_t b, int64_t h) { return p->dO + (b * g->H + h) * g->T * g->w; }

/* Head h, batch b, every row (spec §4.1 steps 2–3): the epilogue's backward
 * writes dO (the gradient of O = A·v, or DIFF's A1·v − λ·A2·v) to the
 * workspace and gives the row terms D = rowsum(dO ⊙ o1) (DIFF: and
 * rowsum(dO ⊙ o2), the branch-2 FlashAttention term being −λ times it),
 * with dO rounded in the bf16 modes as dP = dO·vᵀ takes it, so that
 * Σ_s P_s·(dP_s − D) stays 0 as it must (at T = 1 dq is then exactly 0).
 * dg [w] (subln) and *dl (DIFF) are this task's partials, or NULL. */
static void prep_head(const fgeom *g, const bargs *p, int64_t b, int64_t h, double *dg, double *dl) {
    int64_t w = g->w, T = g->T, sub = g->diff ? 2 : 1;
    real *D1 = p->D + (b * g->NQ + sub * h) * T;
    const real *O1 = g->ident ? p->out : p->s->o1; /* the identity's o1 is its output */
    for (int64_t t = 0; t < T; t++) {
        int64_t off = (b * T + t) * g->os + h * w;
        real *dO = g->hm ? dO_head(g, p, b, h) + t * w : p->dO + off;
        double rs = g->subln ? p->s->rstd[(b * T + t) * g->H + h] : 1.0;
        dtx_attn_epi_terms e = dtx_attn_epilogue_backward(p->arch, dO, dg, p->dout + off, O1 + off,
                                                          g->diff ? p->s->o2 + off : NULL, p->gamma, rs, w,
                                                          g->bf16 || g->emul);
        D1[t] = (real)e.d1;
        if (g->diff) D1[T + t] = (real)e.d2, *dl += e.dl;
    }
}

/* Per-task tile scratch (on the stack of the task's thread). */
typedef struct {
    _Alignas(64) real P1[MAX_TILE]; /* P, then dS (branch 1 / Transformer) */
    _Alignas(64) real P2[MAX_TILE]; /* DIFF branch 2 */
    _Alignas(64) real dP[MAX_TILE]; /* dO·Vᵀ */
    _Alignas(64) real Pc[MAX_TILE]; /* DIFF P1 − λ·P2 */
#ifndef DTX_DOUBLE
    _Alignas(64) dtx_bf16 X[MAX_TILE]; /* bf16 mode: dS [mq × nk] in the A layout */
    _Alignas(64) dtx_bf16 Y[MAX_TILE]; /* bf16 mode: Pᵀ or dSᵀ [nk × mq] in the A layout */
#endif
} btile;

/* The lse row of q sub-head j in batch b, as the backward uses it: the
 * saved float values in the float build, the refined copy in the double one. */
static const real *lse_row(const fgeom *g, const bargs *p, int64_t b, int64_t j) {
#ifdef DTX_DOUBLE
    return p->s->work + g->off_lse + (b * g->NQ + j) * g->T;
#else
    return p->s->lse + (b * g->NQ + j) * g->T;
#endif
}

/* dS = scale·P ⊙ (dP − D) in place of P1 (Transformer; D: the tile's row terms). */
static void ds_rows(const fgeom *g, btile *bt, const real *D, int64_t mq, int64_t nk, int64_t diag) {
    int64_t bk = g->bk;
    real sc = g->scale;
    for (int64_t r = 0; r < mq; r++) {
        real *pr = bt->P1 + r * bk, *dpr = bt->dP + r * bk, Dr = D[r];
        int64_t nv = valid_cols(diag, r, nk); /* dP is unspecified beyond */
#pragma omp simd
        for (int64_t c = 0; c < nv; c++) pr[c] = sc * pr[c] * (dpr[c] - Dr);
    }
}

/* DIFF: Pc = P1 − λ·P2, then dS1 = scale·P1 ⊙ (dP − D1) in place of P1 and
 * dS2 = −λ·scale·P2 ⊙ (dP − D2) in place of P2. */
static void ds_diff_rows(const fgeom *g, btile *bt, real lam, const real *D1, const real *D2, int64_t mq, int64_t nk,
                         int64_t diag) {
    int64_t bk = g->bk;
    real c1 = g->scale, c2 = -lam * g->scale;
    for (int64_t r = 0; r < mq; r++) {
        real *p1 = bt->P1 + r * bk, *p2 = bt->P2 + r * bk, *pc = bt->Pc + r * bk, *dpr = bt->dP + r * bk;
        real d1 = D1[r], d2 = D2[r];
        int64_t nv = valid_cols(diag, r, nk); /* dP is unspecified beyond; P1, P2 are 0 there */
#pragma omp simd
        for (int64_t c = 0; c < nv; c++) {
            pc[c] = p1[c] - lam * p2[c];
            p1[c] = c1 * p1[c] * (dpr[c] - d1);
            p2[c] = c2 * p2[c] * (dpr[c] - d2);
        }
        for (int64_t c = nv; c < nk; c++) pc[c] = 0;
    }
}

/* The tile steps of the backward, each in the working layout of either
 * mode (bf16: the copies of the bf16 section, P and dS packed per tile into
 * X (rows) and Y (transposed)). Query tile [q0, q0+mq) × key tile [k0, k0+nk),
 * batch b; diag = q0 − k0. */

/* P [mq × nk] (stride bk) of q sub-head j against k sub-head ksub:
 * exp(scale·q·kᵀ − lse), 0 where masked. */
static void recompute_p(const fgeom *g, const bargs *p, real *P, int64_t b, int64_t j, int64_t ksub, int64_t q0,
                        int64_t mq, int64_t k0, int64_t nk) {
    mapsrc in = map_src(g, p->s->work, b, j, ksub, g->diff ? ksub / 2 : ksub, q0);
    scores(g, &in, P, g->bk, q0, mq, k0, nk);
    dtx_tile_exp_rows(P, P, g->bk, mq, nk, q0 - k0, g->scale, lse_row(g, p, b, j) + q0);
}

/* The gradient of head h's attention output before the value product,
 * from query row q0 on, and its row stride: the head-major dO (fp32,
 * emulated); in bf16 mode dout (Transformer) or DIFF's dO in rows of H·w. */
static const real *grad_o(const fgeom *g, const bargs *p, int64_t b, int64_t h, int64_t q0, int64_t *ld) {
    if (g->hm) {
        *ld = g->w;
        return dO_head(g, p, b, h) + q0 * g->w;
    }
    *ld = g->os;
    return p->dO + (b * g->T + q0) * g->os + h * g->w;
}

/* dP [mq × nk] (stride bk) = dO·vᵀ for head h (value group grp, w wide). */
static void dp_tile(const fgeom *g, const bargs *p, real *dP, int64_t b, int64_t h, int64_t grp, int64_t q0,
                    int64_t mq, int64_t k0, int64_t nk) {
    real *work = p->s->work;
#ifndef DTX_DOUBLE
    if (g->bf16) {
        dtx_bf16_gemm_tri(mq, nk, g->w, doa_ptr(g, work, b, h) + q0 * g->H * g->wp, g->H * g->wp,
                          vb_ptr(g, work, b, grp) + 2 * k0, g->Tp, dP, g->bk, 0, DTX_TRI_N_HI, q0 - k0);
        return;
    }
#endif
    int64_t ld;
    const real *dO = grad_o(g, p, b, h, q0, &ld);
    dtx_tile_gemm_tri(mq, nk, g->w, dO, ld, 1, vt_ptr(g, work, b, grp) + k0 * g->w, tile_ld(g, k0), dP, g->bk, 0,
                      DTX_TRI_N_HI, q0 - k0);
}

/* dv += Mᵀ·dO for M [mq × nk] (stride bk): P, or DIFF's P1 − λ·P2. */
static void dv_tile(const fgeom *g, const bargs *p, btile *bt, const real *M, int64_t b, int64_t h, int64_t grp,
                    int64_t q0, int64_t mq, int64_t k0, int64_t nk) {
    real *dv = p->dv + (b * g->T + k0) * g->vs + grp * g->w;
#ifndef DTX_DOUBLE
    if (g->bf16) {
        dtx_bf16_pack_a(bt->Y, g->bq, M, 1, g->bk, nk, mq);
        dtx_bf16_gemm_tri(nk, g->w, mq, bt->Y, g->bq, dob_ptr(g, p->s->work, b, h) + q0 * g->w, g->w, dv, g->vs, 1,
                          DTX_TRI_K_LO, q0 - k0);
        return;
    }
#endif
    (void)bt;
    int64_t ld;
    const real *dO = grad_o(g, p, b, h, q0, &ld);
    dtx_tile_gemm_tri(nk, g->w, mq, M, 1, g->bk, dO, ld, dv, g->vs, 1, DTX_TRI_K_LO, q0 - k0);
}

/* dq_j += dS·k_ksub and dk_ksub += dSᵀ·q_j for one map (dS [mq × nk],
 * stride bk, zero where masked). */
static void dqdk(const fgeom *g, const bargs *p, btile *bt, const real *dS, int64_t b, int64_t j, int64_t ksub,
                 int64_t q0, int64_t mq, int64_t k0, int64_t nk) {
    int64_t d = g->d, T = g->T, diag = q0 - k0;
    real *dq = p->dq + (b * T + q0) * g->qs + j * d, *dk = p->dk + (b * T + k0) * g->ks + ksub * d;
#ifndef DTX_DOUBLE
    if (g->bf16) {
        real *work = p->s->work;
        dtx_bf16_pack_a(bt->X, g->bk, dS, g->bk, 1, mq, nk);
        dtx_bf16_pack_a(bt->Y, g->bq, dS, 1, g->bk, nk, mq);
        dtx_bf16_gemm_tri(mq, d, nk, bt->X, g->bk, kb_ptr(g, work, b, ksub) + k0 * d, d, dq, g->qs, 1,
                          DTX_TRI_K_HI, diag);
        dtx_bf16_gemm_tri(nk, d, mq, bt->Y, g->bq, qb_ptr(g, work, b, j) + q0 * d, d, dk, g->ks, 1, DTX_TRI_K_LO,
                          diag);
        return;
    }
#endif
    (void)bt;
    round_tile(g, (real *)dS, g->bk, mq, nk); /* emulated bf16: dS as the products' operand */
    const real *qh = qh_ptr(g, p->s->work, b, j) + q0 * d, *kh = kh_ptr(g, p->s->work, b, ksub) + k0 * d;
    dtx_tile_gemm_tri(mq, d, nk, dS, g->bk, 1, kh, d, dq, g->qs, 1, DTX_TRI_K_HI, diag);
    dtx_tile_gemm_tri(nk, d, mq, dS, 1, g->bk, qh, d, dk, g->ks, 1, DTX_TRI_K_LO, diag);
}

/* Transformer head j (KV head grp), one tile pair:
 *   P = exp(scale·q·kᵀ − lse); dP = dO·vᵀ; dv += Pᵀ·dO;
 *   dS = scale·P ⊙ (dP − D); dq += dS·k; dk += dSᵀ·q. */
static void bwd_tile(const fgeom *g, const bargs *p, btile *bt, int64_t b, int64_t j, int64_t grp, int64_t q0,
                     int64_t mq, int64_t k0, int64_t nk) {
    recompute_p(g, p, bt->P1, b, j, grp, q0, mq, k0, nk);
    dp_tile(g, p, bt->dP, b, j, grp, q0, mq, k0, nk);
    const real *M = bt->P1;
    if (g->emul) { /* P rounded for dv only: dS below takes it unrounded */
        copy_rows(g, bt->Pc, g->bk, bt->P1, g->bk, mq, nk);
        M = bt->Pc;
    }
    dv_tile(g, p, bt, M, b, j, grp, q0, mq, k0, nk);
    ds_rows(g, bt, p->D + (b * g->NQ + j) * g->T + q0, mq, nk, q0 - k0);
    dqdk(g, p, bt, bt->P1, b, j, grp, q0, mq, k0, nk);
}

/* DIFF head h (group grp), one tile pair: both maps recomputed; with
 * dP = dO·vᵀ shared by the branches (dP2 = −λ·dP),
 *   dv += (P1 − λ·P2)ᵀ·dO;
 *   dS1 = scale·P1 ⊙ (dP − D1);  dS2 = −λ·scale·P2 ⊙ (dP − D2);
 *   dq_i += dS_i·k_i;  dk_i += dS_iᵀ·q_i. */
static void bwd_diff_tile(const fgeom *g, const bargs *p, btile *bt, int64_t b, int64_t h, int64_t grp,
                          int64_t q0, int64_t mq, int64_t k0, int64_t nk) {
    const real *D1 = p->D + (b * g->NQ + 2 * h) * g->T + q0;
    recompute_p(g, p, bt->P1, b, 2 * h, 2 * grp, q0, mq, k0, nk);
    recompute_p(g, p, bt->P2, b, 2 * h + 1, 2 * grp + 1, q0, mq, k0, nk);
    dp_tile(g, p, bt->dP, b, h, grp, q0, mq, k0, nk);
    ds_diff_rows(g, bt, (real)p->lam, D1, D1 + g->T, mq, nk, q0 - k0);
    round_tile(g, bt->Pc, g->bk, mq, nk); /* emulated bf16: P1 − λ·P2 as dv's operand */
    dv_tile(g, p, bt, bt->Pc, b, h, grp, q0, mq, k0, nk);
    dqdk(g, p, bt, bt->P1, b, 2 * h, 2 * grp, q0, mq, k0, nk);
    dqdk(g, p, bt, bt->P2, b, 2 * h + 1, 2 * grp + 1, q0, mq, k0, nk);
}

#ifndef DTX_DOUBLE
/* The bf16 copies one backward task reads (batch b, group grp): kᵀ and k of
 * the group's k sub-heads, vᵀ, and q, dO of its heads (after the row terms,
 * which write DIFF's dO). */
static void pack_group_bf16(const fgeom *g, const bargs *p, int64_t b, int64_t grp) {
    int64_t T = g->T, sub = g->diff ? 2 : 1;
    real *work = p->s->work;
    for (int64_t i = 0; i < sub; i++) {
        int64_t ks = sub * grp + i;
        pack_kt(g, work, p->k, b, ks);
        dtx_bf16_pack_b(kb_ptr(g, work, b, ks), g->d, p->k + b * T * g->ks + ks * g->d, g->ks, T, g->d);
    }
    dtx_bf16_pack_bt(vb_ptr(g, work, b, grp), g->Tp, p->v + b * T * g->vs + grp * g->w, g->vs, T, g->w);
    for (int64_t h = grp * g->n_rep; h < (grp + 1) * g->n_rep; h++) {
        for (int64_t i = 0; i < sub; i++) pack_q(g, work, p->q, b, sub * h + i, 1);
        const real *dO = p->dO + b * T * g->os + h * g->w;
        dtx_bf16_pack_a(doa_ptr(g, work, b, h), g->H * g->wp, dO, g->os, 1, T, g->w);
        dtx_bf16_pack_b(dob_ptr(g, work, b, h), g->w, dO, g->os, T, g->w);
    }
}
#endif

#ifdef DTX_DOUBLE
/* Double build only: the saved lse is float by contract, so exp(scale·S −
 * lse) would be off by one factor exp(lse − float(lse)) per row (~1e-7),
 * which is all the finite-difference checks would see. Refine it to working
 * precision first: lse += log Σ_s exp(scale·S − lse), one extra S pass.
 * q sub-head j of batch b against k sub-head ksub; P is tile scratch. */
static void refine_lse(const fgeom *g, const bargs *p, real *P, int64_t b, int64_t j, int64_t ksub) {
    int64_t T = g->T;
    real *lr = p->s->work + g->off_lse + (b * g->NQ + j) * T;
    const float *lf = p->s->lse + (b * g->NQ + j) * T;
    for (int64_t t = 0; t < T; t++) lr[t] = lf[t]; /* = lse_row(g, p, b, j), which recompute_p reads */
    for (int64_t q0 = 0; q0 < T; q0 += g->bq) {
        int64_t mq = min64(g->bq, T - q0);
        double sum[MAX_BQ] = {0};
        for (int64_t k0 = 0; k0 < q0 + mq; k0 += g->bk) {
            int64_t nk = min64(g->bk, q0 + mq - k0);
            recompute_p(g, p, P, b, j, ksub, q0, mq, k0, nk);
            for (int64_t r = 0; r < mq; r++)
                for (int64_t c = 0; c < nk; c++) sum[r] += P[r * g->bk + c];
        }
        for (int64_t r = 0; r < mq; r++) lr[q0 + r] += log(sum[r]);
    }
}
#endif

/* One task: batch b, KV group grp, all heads of the group. Writes Kᵀ/Vᵀ of
 * the group, the row terms (and DIFF dO) of its heads, then for each head
 * every key tile against every query tile at or below it. dg/dl: DIFF
 * partials of this task (NULL for the Transformer). */
static void bwd_group(const fgeom *g, const bargs *p, int64_t b, int64_t grp, double *dg, double *dl) {
    int64_t T = g->T, sub = g->diff ? 2 : 1;
    real *work = p->s->work;
    if (g->hm) { /* this task's head-major copies (rounded when emulating bf16), Kᵀ and Vᵀ */
        for (int64_t i = 0; i < sub; i++) stage_k(g, work, p->k, b, sub * grp + i);
        stage_v(g, work, p->v, b, grp, 1);
        for (int64_t j = sub * grp * g->n_rep; j < sub * (grp + 1) * g->n_rep; j++) stage_q(g, work, p->q, b, j);
    }
    for (int64_t h = grp * g->n_rep; h < (grp + 1) * g->n_rep; h++) {
        prep_head(g, p, b, h, dg, dl);
        /* the head-major dO rounded in place when emulating (after the row terms, which take it rounded,
         * and dλ, which takes it unrounded) */
        if (g->hm) round_tile(g, dO_head(g, p, b, h), g->w, T, g->w);
    }
#ifndef DTX_DOUBLE
    if (g->bf16) pack_group_bf16(g, p, b, grp);
#endif
    btile bt;
#ifdef DTX_DOUBLE
    for (int64_t h = grp * g->n_rep; h < (grp + 1) * g->n_rep; h++)
        for (int64_t i = 0; i < sub; i++) refine_lse(g, p, bt.P1, b, sub * h + i, sub * grp + i);
#endif
    for (int64_t h = grp * g->n_rep; h < (grp + 1) * g->n_rep; h++)
        for (int64_t k0 = 0; k0 < T; k0 += g->bk) {
            int64_t nk = min64(g->bk, T - k0);
            for (int64_t q0 = k0 / g->bq * g->bq; q0 < T; q0 += g->bq) {
                int64_t mq = min64(g->bq, T - q0);
                if (g->diff) bwd_diff_tile(g, p, &bt, b, h, grp, q0, mq, k0, nk);
                else bwd_tile(g, p, &bt, b, h, grp, q0, mq, k0, nk);
            }
        }
}

void dtx_attention_flash_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                                  double *dlambda, const real *dout, const real *out, const dtx_attn_saved *s,
                                  const real *q, const real *k, const real *v, const real *subln_w) {
    fgeom g = make_fgeom(a);
    assert(dq && dk && dv && dout && s && s->lse && s->work && q && k && v);
    assert(g.ident ? out != NULL : s->o1 != NULL);
    assert(!g.diff || s->o2);
    assert(!g.subln || (s->rstd && subln_w));
    bargs p = {q, k, v, dout, out, subln_w, s, dq, dk, dv, s->work + g.off_do, s->work + g.off_D, &a->arch,
               a->arch.lambda};
    double *part = (double *)(void *)(s->work + g.off_part); /* [B·G, w + 1]: dγ partials, then dλ */
    int64_t ntask = g.B * g.G, pw = g.w + 1;
    int partials = g.diff || g.subln;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntask; task++) {
        double *pt = partials ? part + task * pw : NULL;
        if (pt) memset(pt, 0, sizeof(double) * (size_t)pw);
        bwd_group(&g, &p, task / g.G, task % g.G, g.subln ? pt : NULL, g.diff ? pt + g.w : NULL);
    }
    if (!partials) return;
    double dg_tot[MAXW] = {0}, dl_tot = 0; /* task order: deterministic */
    for (int64_t task = 0; task < ntask; task++) {
        for (int64_t c = 0; c < g.w; c++) dg_tot[c] += part[task * pw + c];
        dl_tot += part[task * pw + g.w];
    }
    if (dsubln_w && g.subln)
        for (int64_t c = 0; c < g.w; c++) dsubln_w[c] += (real)dg_tot[c];
    if (dlambda && g.diff) *dlambda += dl_tot;
}
