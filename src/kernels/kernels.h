/* Numeric kernels: the plain reference versions (issue 2). Each layer has a
 * forward and a backward side by side. Conventions:
 *   - flat row-major arrays of `real` (float, or double in the test build);
 *   - shapes in the comment above each function, names as in the spec;
 *   - no allocation; OpenMP inside where it pays;
 *   - every backward ACCUMULATES (+=) into its gradient outputs; any gradient
 *     pointer documented as optional may be NULL to skip it.
 * Fast versions (issue 3) keep these signatures and are tested against these. */
#ifndef DTX_KERNELS_H
#define DTX_KERNELS_H

#include "common/common.h"
#include "common/team.h"

#include <math.h>

/* ---- linear layer without bias (nn.Linear orientation)
 * x [M, K], w [N, K]  ->  out [M, N] = x · wᵀ  (out is overwritten)
 * p = DTX_PREC_FP32: fp32 products; DTX_PREC_BF16: x, w (and dout) rounded to
 * bf16, fp32 accumulation, fp32 outputs. The float build runs oneDNN matmul
 * primitives (matmul_dnnl.c, cached per shape) and falls back to the
 * reference below (fp32), with one warning line, if oneDNN fails; the double
 * build always runs the reference and ignores p. oneDNN shares the OpenMP
 * runtime: call these outside parallel regions. Thread-safe (serialised). */
void dtx_matmul_forward(real *out, const real *x, const real *w, int64_t M, int64_t K, int64_t N,
                        dtx_precision p);
/* dx [M, K] += dout · w ; dw [N, K] += doutᵀ · x   (dx, dw optional)          */
void dtx_matmul_backward(real *dx, real *dw, const real *dout, const real *x, const real *w,
                         int64_t M, int64_t K, int64_t N, dtx_precision p);
/* The same with operands the caller has already rounded to bf16 values
 * (bits of pre): emulated bf16 (no native bf16 matmul) then skips their
 * rounding pass; native bf16 and fp32 ignore pre. Rounding an activation
 * once where it is made, instead of once per product that reads it, is
 * what keeps emulated bf16 at fp32 speed. A pre-rounded operand must hold
 * bf16 values exactly (dtx_bf16_round), or the results are not bf16's.  */
enum { DTX_MM_PRE_X = 1, DTX_MM_PRE_W = 2, DTX_MM_PRE_DOUT = 4 };
void dtx_matmul_forward_pre(real *out, const real *x, const real *w, int64_t M, int64_t K, int64_t N, dtx_precision p,
                            unsigned pre);
void dtx_matmul_backward_pre(real *dx, real *dw, const real *dout, const real *x, const real *w, int64_t M, int64_t K,
                             int64_t N, dtx_precision p, unsigned pre);
/* The reference: plain blocked loops in the working precision, results
 * independent of the thread count. Same contracts as above.                   */
void dtx_matmul_ref_forward(real *out, const real *x, const real *w, int64_t M, int64_t K, int64_t N);
void dtx_matmul_ref_backward(real *dx, real *dw, const real *dout, const real *x, const real *w,
                             int64_t M, int64_t K, int64_t N);
/* Which engine runs the forward and dx products: the tile GEMM
 * (matmul_tiles.c) where it measured faster than oneDNN (matmul.c says
 * where), oneDNN elsewhere, and always for dw. dtx_matmul_tiles_used: 1 when
 * a product of M rows in precision p takes the tiles now.
 * dtx_matmul_set_tiles (tests, bench): 1 always, 0 never, -1 the default;
 * returns the previous setting. Call outside parallel regions.               */
int dtx_matmul_tiles_used(int64_t M, dtx_precision p);
int dtx_matmul_set_tiles(int mode);
/* oneDNN primitives created so far (cache misses; 0 in the double build), and
 * freeing every cached primitive and the bf16 scratch (also done at exit).   */
/* Below this many elements an elementwise kernel (norms, RoPE, SwiGLU, the
 * residual, the embedding, the loss) runs on the calling thread: starting
 * and joining the OpenMP team costs more than the work (about 3 µs for two
 * threads on these shared 2-core machines), so a decode step's one-row
 * elementwise work never wakes it. */
#define DTX_PAR_MIN ((int64_t)1 << 15)
/* CALL for I in [0, N): over the threads (`omp parallel for`, static) when
 * WORK (about the elements touched) reaches DTX_PAR_MIN outside a decode
 * step (common/team.h: no OpenMP region inside one), else a plain loop
 * on the calling thread. Not OpenMP's `if` clause: with it false libgomp
 * still builds and ends a team of one, 1.2 µs a call on these VMs (Zen 5,
 * 2026-12-04), more than a decode step's norm of 768 values takes; a step
 * of the 110M model made ~85 such calls. CALL is one statement (a call). */
#define DTX_PAR_FOR(WORK, I, N, CALL)                                        \
    do {                                                                     \
        if ((WORK) < DTX_PAR_MIN || dtx_team_in_step()) {                    \
            for (int64_t I = 0; I < (N); I++) CALL;                          \
        } else {                                                             \
            _Pragma("omp parallel for schedule(static)")                     \
            for (int64_t I = 0; I < (N); I++) CALL;                          \
        }                                                                    \
    } while (0)

size_t dtx_matmul_primitives_created(void);
void dtx_matmul_cache_clear(void);

/* ---- One-row products (rowdot.c: decoding reads each weight and each cached
 * key once per token, so these are memory-bound; per-ISA kernels, simd.h).
 * The cached attention's two walks over n cache rows (row t at k + t·ldk),
 * the rows in order and each row's slices in turn: one stream through the
 * cache, which the hardware prefetchers follow (a block of rows walked one
 * head's slice at a time is as many short streams). Single-threaded.
 * Scores of the m query sub-heads x_i = x + i·d (d wide), off[i] the
 * column of the key sub-head x_i meets:
 *   s[i·lds + t] = scale · Σ_{c<d} x_i[c]·k[t·ldk + off[i] + c].          */
void dtx_dot_heads(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off, const real *k,
                   int64_t ldk, int64_t n, real scale);
/* Weighted values of m heads (w wide), p_i = p + i·ldp their weights:
 *   y[i·w + c] += Σ_t p_i[t]·v[t·ldv + off[i] + c], added in row order.   */
void dtx_axpy_heads(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off, const real *v,
                    int64_t ldv, int64_t n);
/* The same two over rows of bf16 bits (a bf16 KV cache, dtx_kv_type): the
 * same bits as over the rows widened to real. */
void dtx_dot_heads_bf16(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                        const uint16_t *k, int64_t ldk, int64_t n, real scale);
void dtx_axpy_heads_bf16(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                         const uint16_t *v, int64_t ldv, int64_t n);
/* out [N] = x [K] · w [N, K]ᵀ (a linear layer of one token); rows split over
 * the OpenMP threads when big enough, results independent of the count.  */
void dtx_gemv(real *out, const real *x, const real *w, int64_t K, int64_t N);
#ifndef DTX_DOUBLE
/* The same with w in bf16 bits: x·w in fp32 (exact products when x is
 * bf16-rounded by the caller, as for bf16 activations), summed in fp32.   */
void dtx_gemv_bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N);
#endif

/* ---- Quantised linear weights and activations (quant_linear.c; float arrays in
 * both builds: quantised models are for inference).
 * A weight w [N, K] (nn.Linear orientation) is stored as
 *   Q8  int8 q [N, K] and float scale [N]: w[n,k] ≈ scale[n]·q[n,k],
 *       symmetric, q in [-127, 127];
 *   Q4  groups of DTX_Q4_GROUP consecutive k; each row ceil(K/32) groups of
 *       16 bytes (dtx_q4_row_bytes), byte j of a group holding element j in
 *       its low nibble and element j + 16 in its high one, each as q + 8
 *       with q in [-7, 7] (past K: q = 0); float scale [N, ceil(K/32)]:
 *       w[n,k] ≈ scale[n, k/32]·q[n,k].
 * An int8 activation x [K] is xq [K] with one float scale: x ≈ xscale·xq,
 * q in [-127, 127]. Rounding is to nearest, ties to even, everywhere.
 * The products below accumulate in fp32 (Q8, Q4: x·q, then the scale) or
 * exactly in int32 (Q8 × int8 activations), and split rows over the OpenMP
 * threads like dtx_gemv (the same bits whatever the thread count). They
 * are tested against dequantise-then-fp32 (dtx_q8_dequantize, ...). */
#ifndef DTX_Q4_GROUP
#define DTX_Q4_GROUP 32
#endif
static inline int64_t dtx_q4_groups(int64_t K) { return (K + DTX_Q4_GROUP - 1) / DTX_Q4_GROUP; }
static inline int64_t dtx_q4_row_bytes(int64_t K) { return dtx_q4_groups(K) * (DTX_Q4_GROUP / 2); }
/* q [K], returns scale = amax / 127: the row's absolute maximum, or the
 * clipping bound amax when amax > 0 (values past it saturate). A row of
 * zeros gets scale 0 (and dequantises to zeros).                          */
float dtx_q8_quantize_row(int8_t *q, const float *w, int64_t K, float amax);
void dtx_q8_dequantize(float *w, const int8_t *q, const float *scale, int64_t N, int64_t K);
/* One row: q [dtx_q4_row_bytes(K)], scale [dtx_q4_groups(K)], each group's
 * scale = its absolute maximum · clip / 7 (clip in (0, 1]; 1 = absmax).  */
void dtx_q4_quantize_row(uint8_t *q, float *scale, const float *w, int64_t K, float clip);
void dtx_q4_dequantize(float *w, const uint8_t *q, const float *scale, int64_t N, int64_t K);
/* The quantised weight formats, one row each (as ggml's type_traits;
 * qformat.c): what a row of K weights occupies, quantising a row and
 * dequantising rows, the codes' validity, and the one-row product (which
 * runs the ISA level's kernel, simd.h). The model's storage, files and
 * products read a format only through its row: a new format is a new row,
 * its kernels (here, and per ISA in simd.h's table), and nothing else but
 * a calibration search if it has one (calibrate.c). */
typedef struct {
    int bits;          /* 8, 4, 16 (bf16 in place): what a dtx_qweight's bits names */
    const char *name;  /* "q8", "q4", "bf16"                                  */
    int signed_codes;  /* the codes' file dtype: int8 (1) or uint8 (0)        */
    int scales_2d;     /* the scales' file shape: [N] (0) or [N, row_scales] (1) */
    int64_t (*row_bytes)(int64_t K);
    int64_t (*row_scales)(int64_t K);
    /* one row: codes q [row_bytes], scale [row_scales] from w [K], with a clip
     * factor per scale in (0, 1] (NULL: 1, the absolute maximum) */
    void (*quantize_row)(void *q, float *scale, const float *w, int64_t K, const float *clip);
    void (*dequantize)(float *w, const void *q, const float *scale, int64_t N, int64_t K);
    /* the index of the first byte of n that holds no valid code, -1 when all
     * do (NULL: every byte is valid), and what is wrong with it */
    int64_t (*bad_code)(const uint8_t *q, size_t n);
    const char *bad_code_words;
    /* out [N] = Σ_k x[k]·w[n,k] over the dequantised rows (rows over threads) */
    void (*gemv)(float *out, const float *x, const void *q, const float *scale, int64_t K, int64_t N);
    /* the same for nb inputs x [nb, K] into out [nb, N], the weights read once */
    void (*gemv_batch)(float *out, const float *x, int64_t nb, const void *q, const float *scale, int64_t K,
                       int64_t N);
} dtx_qformat;
/* The format of bits (NULL when none has them). */
const dtx_qformat *dtx_qformat_of(int bits);

/* f rounded to the nearest IEEE half (fp16) value, ties to even, as a
 * float: subnormals kept, past the largest half (65504) infinite, as
 * hardware converting to fp16 does; NaN stays NaN. */
float dtx_f16_round_f32(float f);
void dtx_f16_round(float *out, const float *x, int64_t n); /* out may be x */
/* The clipping factor of one 4-bit group (kg <= 32 weights w), among
 * 1, 0.975, ..., 0.5, whose dequantised weights v minimise
 * sum_k m2[k]·(w[k] − v[k])², m2 the mean squares of the inputs those
 * weights multiply (NULL: all 1): the output error of the group under
 * uncorrelated inputs. The first of equal errors (the largest factor) wins. */
float dtx_q4_best_clip(const float *w, int64_t kg, const double *m2);
/* The q4 value of element k of a quantised row (in [-7, 7]; 0 past K). */
static inline int dtx_q4_get(const uint8_t *row, int64_t k) {
    uint8_t b = row[k / DTX_Q4_GROUP * (DTX_Q4_GROUP / 2) + k % (DTX_Q4_GROUP / 2)];
    return (k % DTX_Q4_GROUP < DTX_Q4_GROUP / 2 ? b & 15 : b >> 4) - 8;
}
/* xq [K] = clamp(rint(x / xscale), -127, 127) (xscale > 0).              */
void dtx_a8_quantize(int8_t *xq, const float *x, int64_t K, float xscale);
/* out [N] = scale[n] · Σ_k x[k]·q[n,k] (w8a16: x as given, bf16-rounded by
 * the caller for bf16 activations).                                      */
void dtx_gemv_q8(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N);
/* out [N] = Σ_g scale[n,g] · Σ_{k in g} x[k]·q[n,k] (w4a16).              */
void dtx_gemv_q4(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N);
/* out [N] = xscale · scale[n] · Σ_k xq[k]·q[n,k], the sum exact in int32
 * (w8a8; K < 2^17 keeps it in range).                                    */
void dtx_gemv_q8a8(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale, int64_t K,
                   int64_t N);

/* ---- Several one-row products in one pass over the threads (rowdot.c):
 * the products of one decode step that read one input (a layer's q, k, v
 * and λ projections; its w1 and w3), as one list of rows split over the
 * threads, so the threads start and meet once for all of them (a run of
 * the spinning team, common/team.h: about 0.9 µs on these VMs; an OpenMP
 * region 3.6 µs, as much as streaming a 768 × 768 4-bit weight). Every
 * part's row has the bits its one-part product gives (dtx_gemv,
 * dtx_gemv_bf16, dtx_gemv_q8, dtx_gemv_q4, dtx_gemv_q8a8; each is one part),
 * at any thread count. All parts are K wide. */
typedef enum { DTX_ROWS_REAL, DTX_ROWS_BF16, DTX_ROWS_Q8, DTX_ROWS_Q4, DTX_ROWS_Q8A8 } dtx_rows_kind;
typedef struct {
    dtx_rows_kind kind;
    void *out;          /* [N]: real for REAL, else float                           */
    const void *x;      /* [K]: real (float for BF16/Q8/Q4), int8 for Q8A8          */
    float xscale;       /* Q8A8: the input's scale                                  */
    const void *w;      /* the weight's rows: real, bf16 bits, int8 or 4-bit codes  */
    const float *scale; /* Q8, Q8A8: [N]; Q4: [N, groups]; else NULL                */
    int64_t N;
} dtx_gemv_part;
void dtx_gemv_parts(const dtx_gemv_part *parts, int n_parts, int64_t K);

/* ---- Several inputs against one weight (rowdot.c): the products above for
 * nb inputs x [nb, K] at once, out [nb, N] (row b = the product of input b),
 * reading each weight from memory once for all of them (the rows in chunks
 * that stay in cache while every input passes). Each row of out has the
 * bits the one-input product gives for that input. */
void dtx_gemv_batch(real *out, const real *x, int64_t nb, const real *w, int64_t K, int64_t N);
#ifndef DTX_DOUBLE
void dtx_gemv_bf16_batch(float *out, const float *x, int64_t nb, const uint16_t *w, int64_t K, int64_t N);
#endif
void dtx_gemv_q8_batch(float *out, const float *x, int64_t nb, const int8_t *q, const float *scale, int64_t K,
                       int64_t N);
void dtx_gemv_q4_batch(float *out, const float *x, int64_t nb, const uint8_t *q, const float *scale, int64_t K,
                       int64_t N);
/* xq [nb, K], one xscale for every input (W8A8's static scale). */
void dtx_gemv_q8a8_batch(float *out, const int8_t *xq, int64_t nb, float xscale, const int8_t *q,
                         const float *scale, int64_t K, int64_t N);

/* ---- RMSNorm over rows of width C
 * out [M, C] = x / sqrt(mean(x²) + eps) ⊙ w ; rstd [M] = 1/sqrt(mean(x²)+eps) */
void dtx_rmsnorm_forward(real *out, real *rstd, const real *x, const real *w, int64_t M, int64_t C,
                         double eps);
/* dx [M, C] += ..., dw [C] += Σ_rows dout ⊙ x·rstd  (dw optional)            */
void dtx_rmsnorm_backward(real *dx, real *dw, const real *dout, const real *x, const real *w,
                          const real *rstd, int64_t M, int64_t C);

/* ---- Rotary embedding, interleaved pairs (2i, 2i+1), on every d-wide
 * sub-head of x [B, T, n_sub * d], token t at absolute position pos0 + t.
 * Tables: cos, sin [max_pos, d/2], angle p·freq[i] (θ^(-2i/d) unscaled).      */
void dtx_rope_table(real *cos_t, real *sin_t, int64_t max_pos, int64_t d, const double *freq);
/* The plain frequencies θ^(−2i/d), i < d/2 (what a config without RoPE
 * scaling gives: dtx_config_rope_freqs). */
void dtx_rope_freqs(double *freq, int64_t d, double theta);
/* In place: x = R(p) x. */
void dtx_rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                      int64_t pos0, int64_t n_sub, int64_t d);
/* In place on a gradient: dx = R(p)ᵀ dx (the conjugate rotation). */
void dtx_rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                       int64_t pos0, int64_t n_sub, int64_t d);

/* ---- SwiGLU gate: out [n] = silu(a) ⊙ b, with a = x·w1ᵀ, b = x·w3ᵀ          */
void dtx_swiglu_forward(real *out, const real *a, const real *b, int64_t n);
/* da [n] += dout ⊙ b ⊙ silu'(a) ; db [n] += dout ⊙ silu(a)                    */
void dtx_swiglu_backward(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n);
/* The same with the results rounded to bf16 values when round_bf16 (out;
 * da and db after the accumulation): emulated bf16's operands made where
 * they are computed, bit-identical to dtx_bf16_round afterwards. The double
 * build ignores round_bf16.                                                 */
void dtx_swiglu_forward_r(real *out, const real *a, const real *b, int64_t n, int round_bf16);
void dtx_swiglu_backward_r(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n,
                           int round_bf16);

/* ---- DIFF V2's head pairs (diff2_combine.c), N token rows:
 * out [N, h·d] from the attention output A [N, 2h·d] (2h heads of width d,
 * heads 2i and 2i+1 on one KV head) and the λ logits l [N, h]
 * (x·lambda_projᵀ): out_i = A_{2i} − λ_i·A_{2i+1} with λ_i = σ(l_i)
 * (SIGMOID), l_i (LINEAR) or 1 (NONE: l unused, may be NULL).              */
void dtx_diff2_combine_forward(real *out, const real *A, const real *l, int64_t N, int64_t h, int64_t d,
                               dtx_v2_lambda mode);
/* dA [N, 2h·d] = (dout_i, −λ_i·dout_i) per pair, and dl [N, h] =
 * −λ'(l_i)·(dout_i · A_{2i+1}) (σ(1 − σ) or 1; not written for NONE, may be
 * NULL); both overwritten.                                                  */
void dtx_diff2_combine_backward(real *dA, real *dl, const real *dout, const real *A, const real *l, int64_t N,
                                int64_t h, int64_t d, dtx_v2_lambda mode);

/* ---- Residual add: out [n] = a + b (out may alias a or b).                  */
void dtx_residual_forward(real *out, const real *a, const real *b, int64_t n);

/* ---- Token embedding: out [n, C] = table[tok[i]]                           */
void dtx_embedding_forward(real *out, const int32_t *tok, const real *table, int64_t n, int64_t C);
/* dtable [V, C] += scatter of dout [n, C] by tok                              */
void dtx_embedding_backward(real *dtable, const real *dout, const int32_t *tok, int64_t n, int64_t C);

/* ---- Softmax cross-entropy over rows of width V.
 * probs [N, V] = softmax(logits) (probs may alias logits); returns the mean
 * of -log p[target] (computed in double) over the rows whose target is not
 * DTX_TARGET_IGNORE (difftx.h; 0 when every row's is). An ignored row adds
 * nothing to either backward (the in-place one zeroes it); the caller's
 * scale is then loss_scale / dtx_crossentropy_count.                       */
int64_t dtx_crossentropy_count(const int32_t *targets, int64_t N); /* the rows not ignored */
double dtx_crossentropy_forward(real *probs, const real *logits, const int32_t *targets, int64_t N,
                                int64_t V);
/* dlogits [N, V] += (probs - onehot(target)) · scale  (scale = loss_scale / N) */
void dtx_crossentropy_backward(real *dlogits, const real *probs, const int32_t *targets, int64_t N,
                               int64_t V, double scale);
/* In place: probs [N, V] becomes dlogits = (probs − onehot(target)) · scale
 * (overwritten, not accumulated: the same values as dtx_crossentropy_backward
 * into a zeroed buffer), so the N×V logits need to exist only once.         */
void dtx_crossentropy_backward_inplace(real *probs, const int32_t *targets, int64_t N, int64_t V,
                                       double scale);

/* ---- Causal attention, both architectures behind one forward and one backward.
 * Q [B, T, NQ·d] is viewed as NQ sub-heads of width d, K [B, T, NK·d] likewise.
 *   Transformer: NQ = n_heads, NK = n_kv_heads, V [B, T, NK·d];
 *     head j reads KV head j / (n_heads / n_kv_heads); out [B, T, NQ·d] is the
 *     concatenated head outputs A·V.
 *   DIFF: NQ = 2·n_heads, NK = 2·n_kv_heads, V [B, T, n_kv_heads·2d];
 *     head h owns q1 = sub-head 2h, q2 = sub-head 2h+1 and reads group
 *     g = h / (n_heads / n_kv_heads): k1 = K sub-head 2g, k2 = 2g+1, v = V[g];
 *     O = A1·v − λ·A2·v (2d wide).
 * Each head's output goes through the epilogue (dtx_attn_arch): by default
 * DIFF's out_h = (1 − λ_init) · γ ⊙ O / rms(O) over the 2d channels,
 * γ = subln_w [2d] shared by heads, and the Transformer's out_h = O.
 * Scores are scaled by 1/√d, masked causally (key s ≤ query t), softmax in
 * the working precision.                                                     */
/* Largest head_dim d the attention kernels accept: they keep per-row
 * accumulators (up to 2d wide) on the stack instead of allocating.          */
#define DTX_ATTN_MAX_HEAD_DIM 256

/* Which implementation: the plain materialised reference, or the fused
 * flash kernel (no T×T buffer; recomputes the maps from per-row lse). */
typedef enum { DTX_ATTN_PLAIN = 0, DTX_ATTN_FLASH = 1 } dtx_attn_impl;

/* What one call computes, in three parts: the shapes (geometry), what the
 * layer is (architecture: the same for every call of a layer) and how this
 * call runs it (implementation, precision, evaluation-only quantisation). */
typedef struct {
    int64_t B, T;
    int64_t n_heads;     /* diff heads (DIFF) or heads (Transformer) */
    int64_t n_kv_heads;
    int64_t head_dim;    /* d */
} dtx_attn_geom;

/* The epilogue of every head (attention_epilogue.c): with O the head's
 * combined output (DIFF: A1·v − λ·A2·v, 2d wide; Transformer: A·v, d wide),
 *   subln: y = s · γ ⊙ O / rms(O), rms over the head's channels (eps);
 *   no subln: y = s · O;
 * s = 1 − lambda_init for DIFF and 1 for the Transformer (interop.md
 * "Variants": Table 6's "− GroupNorm" and "+ GroupNorm"). γ (subln_w) has
 * the head's width and is shared by the layer's heads. */
typedef struct {
    int diff;            /* 1: differential attention */
    int subln;           /* 1: per-head RMSNorm (DIFF's default; the Transformer's is 0) */
    double lambda;       /* DIFF: this layer's λ */
    double lambda_init;  /* DIFF: output scale is (1 − lambda_init) */
    double eps;          /* per-head RMSNorm eps (subln) */
    double keep;         /* DIFF: τ, the share of y that is O itself (a converted
                          * Transformer's phase-in: y = τ·O + (1 − τ)·epilogue(O)); 0: none */
} dtx_attn_arch;

typedef struct {
    dtx_attn_impl impl;
    /* Evaluation only: absmax quantisation of the scaled logits to
     * quant_bits bits (2..16; 0 = off, exactly the unquantised kernels).
     * quant_tensor = 0: one scale per (batch row, sub-head, query row);
     * 1: one per (batch row, map) over every head and query row of the call
     * (map: z1 or z2 for DIFF, the one map otherwise). Forward only. See
     * dtx_quant_step below and docs/eval_quant.md. */
    int quant_bits;
    int quant_tensor;
    /* FLASH only: DTX_PREC_BF16 runs the kernel's tile products (q·kᵀ, P·v
     * and the five of the backward) on bf16 operands with fp32 accumulation,
     * as the bf16 matmuls do; scores, softmax, lse, the O accumulators, the
     * epilogue and every output stay fp32 (tile_bf16.h). DTX_PREC_FP32 (0,
     * the default) is fp32 throughout. PLAIN and the double build ignore it. */
    dtx_precision precision;
} dtx_attn_run;

typedef struct {
    dtx_attn_geom geom;
    dtx_attn_arch arch;
    dtx_attn_run run;
} dtx_attn_dims;

/* ---- The head epilogue (attention_epilogue.c), one head row of width w
 * (2d DIFF, d Transformer) for every kernel:
 *   O = o1 − λ·o2 (o2 == NULL: O = o1), in double;
 *   subln: r = 1/sqrt(mean(O²) + eps), y = s·γ ⊙ O·r; otherwise r = 1, y = s·O;
 * s = dtx_attn_out_scale. Returns r. y may be o1 (in place).              */
double dtx_attn_out_scale(const dtx_attn_arch *ar);
/* 1 when the epilogue is y = O (the default Transformer): kernels skip it. */
int dtx_attn_epilogue_is_identity(const dtx_attn_arch *ar);
double dtx_attn_epilogue_forward(const dtx_attn_arch *ar, real *y, const real *o1, const real *o2,
                                 const real *gamma, int64_t w);
/* The row terms a kernel's backward needs after the epilogue's:
 * d1 = dO·o1 and d2 = dO·o2 (the FlashAttention D of each map, with dO as
 * the products see it) and dl = −dO·o2 (this row's ∂L/∂λ, dO as stored). */
typedef struct {
    double d1, d2, dl;
} dtx_attn_epi_terms;
/* Backward of one row: dO [w] = ∂L/∂O from dY = ∂L/∂y and the forward's o1,
 * o2 (NULL: none; d2 = dl = 0) and r; dgamma [w] += s·dY ⊙ O·r (subln; may
 * be NULL). round_bf16: d1 and d2 take dO rounded to bf16 (the flash bf16
 * modes' operand); dO itself is stored unrounded.                         */
dtx_attn_epi_terms dtx_attn_epilogue_backward(const dtx_attn_arch *ar, real *dO, double *dgamma, const real *dY,
                                              const real *o1, const real *o2, const real *gamma, double rstd,
                                              int64_t w, int round_bf16);

/* The quantiser both kernels apply (one definition, so the reference and the
 * row kernel round alike): step s = absmax / (2^(b−1) − 1) over the unmasked
 * logits; z_q = round(z/s)·s, half away from zero (C round); s = 0 (all
 * logits 0) gives z_q = 0. Logits are quantised in double and rounded to
 * real once. */
static inline double dtx_quant_step(double absmax, int bits) {
    return absmax / (double)(((int64_t)1 << (bits - 1)) - 1);
}
static inline real dtx_quant_apply(real z, double step) {
    return step > 0 ? (real)(round((double)z / step) * step) : (real)0;
}

/* What the forward keeps for the backward (caller-owned buffers). */
typedef struct {
    real *att;   /* PLAIN: [B, NQ, T, T] softmax probabilities (row t, s ≤ t)    */
    float *lse;  /* FLASH: [B, NQ, T] per-row log-sum-exp of the scaled scores  */
    real *o1;    /* [B, T, n_heads·w]  A1·v (DIFF) or A·v, before the epilogue   */
    real *o2;    /* DIFF: [B, T, n_heads·2d]  A2·v                               */
    real *rstd;  /* subln: [B, T, n_heads]    1/rms(O) per head                  */
    real *work;  /* FLASH: caller-owned scratch of dtx_attention_flash_workspace_size
                  * elements, used by both the forward and the backward; its contents
                  * are undefined between calls (nothing is carried in it). Must be
                  * 8-byte aligned (64 recommended: dtx_alloc). Unused by PLAIN. */
} dtx_attn_saved;

/* Element counts of the saved buffers: att is 0 for FLASH, lse 0 for PLAIN;
 * o1 (o_size) is kept when the epilogue is not the identity (DIFF, or a
 * subln), o2 for DIFF only, rstd with subln only; 0 when not kept (the
 * pointer in dtx_attn_saved may then be NULL). */
size_t dtx_attention_att_size(const dtx_attn_dims *a);
size_t dtx_attention_lse_size(const dtx_attn_dims *a);
size_t dtx_attention_o_size(const dtx_attn_dims *a);
size_t dtx_attention_o2_size(const dtx_attn_dims *a);
size_t dtx_attention_rstd_size(const dtx_attn_dims *a);
/* Elements of `real` the flash kernel needs in s->work (0 for PLAIN); linear
 * in T, never T². With w = 2d (DIFF) or d, NQ/NK the q/k sub-heads, H heads,
 * G KV heads, Tp = T rounded up to an odd multiple of 16, each term rounded
 * up to 16 elements:
 *   B·NK·d·Tp (Kᵀ) + B·G·w·Tp (Vᵀ) + B·NQ·T (row terms D) + B·T·H·w (dO)
 *   + B·T·NQ·d + B·T·NK·d + B·T·G·w (per-head copies of q, k, v, which the
 *     fp32 products read: the interleaved rows' large strides cost the
 *     micro-kernels L1 and TLB misses)
 *   + DIFF or subln: B·G·(w+1) doubles (per-task γ/λ gradient partials,
 *     reduced in a fixed order)
 *   + double build only: B·NQ·T (lse refined to double for the backward)
 *   + bf16 only, for the native mode (which follows the ISA level at each
 *     call: the emulated mode reads the fp32 copies, rounded): with d', w' =
 *     d, w rounded up to even and T' = ⌈T/2⌉, bf16 copies of q and dO in
 *     both operand layouts and of k along keys:
 *     B·T·NQ·d'/2 + B·NQ·T'·d + B·NK·T'·d + B·T·H·w'/2 + B·H·T'·w.         */
size_t dtx_attention_flash_workspace_size(const dtx_attn_dims *a);
/* Elements of `real` the quantised FLASH forward (a->quant_bits > 0, impl
 * FLASH: dtx_attention_quant_forward) needs in s->work; 0 otherwise. Linear
 * in T, each term rounded up to 16 elements: B·NQ·T (one row of scores per
 * (batch, sub-head)) + B·T·2 doubles (per-row absmax, TENSOR scope).       */
size_t dtx_attention_quant_workspace_size(const dtx_attn_dims *a);
/* What s->work must hold for any call with these dims: the larger of the
 * two above (so a buffer sized with quantisation on also serves it off).   */
size_t dtx_attention_workspace_size(const dtx_attn_dims *a);

/* out [B, T, NQ·d] (overwritten). subln_w [w] is read when a->arch.subln
 * (ignored otherwise).
 * With a->quant_bits > 0: PLAIN quantises the logits in its T×T buffer (and
 * saves att, o1, o2, rstd as usual: the reference); FLASH runs
 * dtx_attention_quant_forward instead of the fused kernel. The backward
 * asserts quant_bits == 0 (training never quantises).                        */
void dtx_attention_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                           const real *q, const real *k, const real *v, const real *subln_w);
/* dq, dk, dv (+=) with the shapes of q, k, v; subln also dsubln_w [w] (+=);
 * DIFF also *dlambda (+=, summed over batch, positions, channels and heads).
 * out is the forward's output (the default Transformer's flash backward
 * needs it for D = rowsum(dO ⊙ O)). Both entry points dispatch on a->impl.                */
void dtx_attention_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                            double *dlambda, const real *dout, const real *out, const dtx_attn_saved *s,
                            const real *q, const real *k, const real *v, const real *subln_w);

/* The two implementations behind the entry points above (same contracts). */
void dtx_attention_plain_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q,
                                 const real *k, const real *v, const real *subln_w);
void dtx_attention_plain_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                                  double *dlambda, const real *dout, const real *out, const dtx_attn_saved *s,
                                  const real *q, const real *k, const real *v, const real *subln_w);
void dtx_attention_flash_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q,
                                 const real *k, const real *v, const real *subln_w);
void dtx_attention_flash_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                                  double *dlambda, const real *dout, const real *out, const dtx_attn_saved *s,
                                  const real *q, const real *k, const real *v, const real *subln_w);

/* ---- Cached decoding (attention_decode.c): ONE query row (the token at
 * position len − 1) over the first len rows of a layer's KV cache, the math
 * of one row of dtx_attention_forward. a->impl, a->B and a->T are ignored.
 *   q [NQ·d] (after RoPE); kcache [len, NK·d] and vcache [len, V width]
 *   (row strides NK·d and n_kv_heads·w, w = 2d DIFF / d, i.e. the rows of
 *   k and v as dtx_attention_forward takes them); out [NQ·d] (overwritten);
 *   scratch: dtx_attention_decode_scratch_size(a, len) elements.
 * Softmax in fp32 with max subtraction (sum in double); DIFF combines the two
 * maps per key before reading V. A long cache's rows run on OpenMP threads
 * in chunks fixed by len (quantised logits: the heads); results do not
 * depend on the thread count. No allocation.                                */
size_t dtx_attention_decode_scratch_size(const dtx_attn_dims *a, int64_t len);
void dtx_attention_decode(const dtx_attn_dims *a, real *out, const real *q, const real *kcache, const real *vcache,
                          int64_t len, const real *subln_w, real *scratch);
/* The same over a bf16 KV cache's rows (bf16 bits, the same layouts): the
 * same bits as over those rows widened to real. Not with quantised logits
 * (a->quant_bits must be 0).                                                */
void dtx_attention_decode_bf16(const dtx_attn_dims *a, real *out, const real *q, const uint16_t *kcache,
                               const uint16_t *vcache, int64_t len, const real *subln_w, real *scratch);
/* Quantised logits (a->quant_bits > 0) in the row kernel: the logits are then
 * the reference's (dot products in double, rounded to real once), quantised
 * per sub-head (ROW scope) or with one step per map over all heads of the
 * row (TENSOR scope: the row is the tensor). To make several rows one
 * tensor, fold each row's maxima with dtx_attention_decode_absmax into
 * absmax [2] (zeroed first; entry 1 is DIFF's z2, unused otherwise), then
 * call dtx_attention_decode_with_absmax for each row. absmax == NULL is
 * dtx_attention_decode; absmax is ignored unless quant_bits and
 * quant_tensor are both set.                                                */
void dtx_attention_decode_absmax(const dtx_attn_dims *a, double *absmax, const real *q, const real *kcache,
                                 int64_t len);
void dtx_attention_decode_with_absmax(const dtx_attn_dims *a, real *out, const real *q, const real *kcache,
                                      const real *vcache, int64_t len, const real *subln_w, real *scratch,
                                      const double *absmax);
/* The FLASH forward with quantised logits (attention_decode.c): every query
 * row through the row kernel above over the rows before it, so no T×T
 * buffer; TENSOR scope first takes every row's maxima (a second pass of dot
 * products). Tasks are (batch, head); s->work holds
 * dtx_attention_quant_workspace_size(a) elements (8-byte aligned); s->lse,
 * o1, o2 and rstd are not written (there is no backward). Same out as
 * dtx_attention_plain_forward with the same dims, to rounding.              */
void dtx_attention_quant_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q,
                                 const real *k, const real *v, const real *subln_w);

#endif
