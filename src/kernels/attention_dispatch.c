/* The attention entry points: one forward and one backward for the model,
 * dispatching to the plain materialised reference or the fused flash kernel.
 * Quantised logits (evaluation only, a->run.quant_bits > 0) take the plain
 * kernel's own path or, instead of the fused kernel, the row path
 * (dtx_attention_quant_forward): the fused kernel's online softmax never
 * holds a whole logit row, and a row is what the quantiser needs. */
#include "common/profile.h"
#include "kernels/kernels.h"

#include <assert.h>

size_t dtx_attention_workspace_size(const dtx_attn_dims *a) {
    size_t f = dtx_attention_flash_workspace_size(a), q = dtx_attention_quant_workspace_size(a);
    return f > q ? f : q;
}

static void attention_forward_run(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q, const real *k,
                                  const real *v, const real *subln_w) {
    if (a->run.impl == DTX_ATTN_FLASH && a->run.quant_bits) dtx_attention_quant_forward(a, out, s, q, k, v, subln_w);
    else if (a->run.impl == DTX_ATTN_FLASH) dtx_attention_flash_forward(a, out, s, q, k, v, subln_w);
    else dtx_attention_plain_forward(a, out, s, q, k, v, subln_w);
}

void dtx_attention_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q, const real *k,
                           const real *v, const real *subln_w) {
    DTX_PROF(DTX_PROF_ATTENTION, 0, attention_forward_run(a, out, s, q, k, v, subln_w));
}

static void attention_backward_run(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w, double *dlambda,
                                   const real *dout, const real *out, const dtx_attn_saved *s, const real *q, const real *k,
                                   const real *v, const real *subln_w) {
    assert(a->run.quant_bits == 0); /* training never quantises the logits */
    if (a->run.impl == DTX_ATTN_FLASH)
        dtx_attention_flash_backward(a, dq, dk, dv, dsubln_w, dlambda, dout, out, s, q, k, v, subln_w);
    else dtx_attention_plain_backward(a, dq, dk, dv, dsubln_w, dlambda, dout, out, s, q, k, v, subln_w);
}

void dtx_attention_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w, double *dlambda,
                            const real *dout, const real *out, const dtx_attn_saved *s, const real *q, const real *k,
                            const real *v, const real *subln_w) {
    DTX_PROF(DTX_PROF_ATTENTION, 1, attention_backward_run(a, dq, dk, dv, dsubln_w, dlambda, dout, out, s, q, k, v, subln_w));
}
