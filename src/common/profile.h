/* A small wall-clock profiler for the training step: set DTX_PROFILE=1 and
 * the time spent in each kind of operation, forward and backward, is printed
 * to stderr when the process exits. Off (one branch per call) otherwise.
 * The kernels' entry points time themselves (rmsnorm, rope, swiglu,
 * residual, attention, the backward products, the loss, the embedding's
 * gradient), and the model's own steps (its linear layers, bf16 rounding,
 * the embedding lookup): the layer walker reads as a plain list of calls.
 * An entry point never calls another that times itself (no time counted
 * twice), and none runs inside an OpenMP region of its caller. */
#ifndef DTX_PROFILE_H
#define DTX_PROFILE_H

#include "common/common.h"

typedef enum {
    DTX_PROF_MATMUL,
    DTX_PROF_ATTENTION,
    DTX_PROF_NORM,
    DTX_PROF_ROPE,
    DTX_PROF_SWIGLU,
    DTX_PROF_RESIDUAL,
    DTX_PROF_EMBEDDING,
    DTX_PROF_LOSS,
    DTX_PROF_OPTIMIZER,
    DTX_PROF_ROUND,
    DTX_PROF_N
} dtx_prof_op;

extern int dtx_prof_enabled;
void dtx_prof_add(dtx_prof_op op, int backward, double seconds);

#define DTX_PROF(op, bwd, call)                                   \
    do {                                                          \
        if (dtx_prof_enabled) {                                   \
            double t0_ = dtx_now_s();                          \
            call;                                                 \
            dtx_prof_add((op), (bwd), dtx_now_s() - t0_);      \
        } else {                                                  \
            call;                                                 \
        }                                                         \
    } while (0)

#endif
