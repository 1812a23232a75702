/* The attention entry points: one forward and one backward for the model,
 * dispatching to the plain materialised reference or the fused flash kernel. */
#include "kernels/kernels.h"

void dtx_attention_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q, const real *k,
                           const real *v, const real *subln_w) {
    if (a->impl == DTX_ATTN_FLASH) dtx_attention_flash_forward(a, out, s, q, k, v, subln_w);
    else dtx_attention_plain_forward(a, out, s, q, k, v, subln_w);
}

void dtx_attention_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w, double *dlambda,
                            const real *dout, const real *out, const dtx_attn_saved *s, const real *q, const real *k,
                            const real *v, const real *subln_w) {
    if (a->impl == DTX_ATTN_FLASH)
        dtx_attention_flash_backward(a, dq, dk, dv, dsubln_w, dlambda, dout, out, s, q, k, v, subln_w);
    else dtx_attention_plain_backward(a, dq, dk, dv, dsubln_w, dlambda, dout, out, s, q, k, v, subln_w);
}
