/*
 * difftx: the Differential Transformer (Ye et al., ICLR 2025) in C.
 *
 * One public header. Names are dtx_<module>_<verb>. Objects come in init/free
 * pairs. Runtime failures (bad files, bad configs, out of memory) return a
 * dtx_status and leave a one-line message in dtx_last_error(); programmer
 * errors (NULL where a pointer is required, shapes that the caller promised)
 * are asserts.
 *
 * Numbers: the library computes in dtx_real, which is float. The test suite
 * also builds it with -DDTX_DOUBLE (dtx_real = double) to check every
 * backward against finite differences; that build is not meant for users.
 *
 * Two architectures share one LLaMA-style backbone (see README "Model"):
 *   DTX_ARCH_DIFF         differential attention, n_heads diff heads of
 *                         q/k width d = dim / n_heads / 2 and value width 2d;
 *   DTX_ARCH_TRANSFORMER  ordinary attention, n_heads heads of width
 *                         d = dim / n_heads.
 * A DIFF model with H heads and G KV heads is parameter-matched by a
 * Transformer with 2H heads and 2G KV heads (dtx_config_baseline).
 */
#ifndef DIFFTX_H
#define DIFFTX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef DTX_DOUBLE
typedef double dtx_real;
#else
typedef float dtx_real;
#endif

/* ---------------------------------------------------------------- status */

typedef enum {
    DTX_OK = 0,
    DTX_ERR_IO,      /* a file could not be opened, read or written          */
    DTX_ERR_FORMAT,  /* a file's contents break the format (interop.md)      */
    DTX_ERR_CONFIG,  /* a model or training configuration is invalid         */
    DTX_ERR_ARG,     /* a runtime argument is invalid (token id, length, ...) */
    DTX_ERR_NOMEM,   /* an allocation failed                                  */
} dtx_status;

/* The message of the most recent failure in this thread ("" if none). */
const char *dtx_last_error(void);
const char *dtx_status_name(dtx_status st);

/* ---------------------------------------------------------------- config */

typedef enum { DTX_ARCH_DIFF = 0, DTX_ARCH_TRANSFORMER = 1 } dtx_arch;

typedef struct {
    dtx_arch arch;
    int64_t dim;          /* model width                                        */
    int64_t n_layers;
    int64_t n_heads;      /* diff heads for DIFF, ordinary heads otherwise      */
    int64_t n_kv_heads;   /* KV heads (GQA); equals n_heads for MHA             */
    int64_t vocab_size;
    int64_t ffn_dim;      /* SwiGLU hidden width                                */
    int64_t max_seq_len;
    double rope_theta;    /* default 10000                                      */
    double norm_eps;      /* default 1e-5, every RMSNorm                        */
    int tie_embeddings;   /* 1: output projection is tok_embeddings             */
} dtx_config;

/* A small DIFF default (dim 256, 4 layers, 4 heads, vocab 4096, ...). */
dtx_config dtx_config_default(void);
/* The parameter-matched other architecture: DIFF (H, G) <-> Transformer (2H, 2G). */
dtx_config dtx_config_baseline(const dtx_config *c);
/* Checks divisibility and ranges; DTX_ERR_CONFIG naming the key otherwise. */
dtx_status dtx_config_validate(const dtx_config *c);
/* q/k (sub-)head width d. */
int64_t dtx_config_head_dim(const dtx_config *c);
/* The layer's lambda_init = 0.8 - 0.6 exp(-0.3 l), l 0-based. */
double dtx_lambda_init(int64_t layer);
const char *dtx_arch_name(dtx_arch a);

/* ---------------------------------------------------------------- model */

/* One named parameter tensor: a slice of the flat parameter buffer. */
typedef struct {
    char name[64];      /* interop.md name, e.g. "layers.0.attention.q_proj.weight" */
    int ndim;           /* 1 or 2                                                   */
    int64_t shape[2];   /* PyTorch nn.Linear orientation [out, in]                  */
    size_t offset;      /* into params / grads / m / v, in elements                 */
    size_t numel;
    int decay;          /* 1: weight decay applies (linear weights; embeddings by flag) */
    int is_embedding;   /* tok_embeddings / output                                  */
} dtx_tensor_info;

typedef struct dtx_model dtx_model;

/* A model with freshly initialised weights (seeded, reproducible):
 * linear weights U(-1/sqrt(in), 1/sqrt(in)) (PyTorch nn.Linear default),
 * embeddings and untied output N(0, dim^-1/2), lambda vectors N(0, 0.1^2),
 * norm weights 1. */
dtx_status dtx_model_init(dtx_model **out, const dtx_config *c, uint64_t seed);
/* Load a safetensors model file (interop.md). */
dtx_status dtx_model_load(dtx_model **out, const char *path);
/* Save as safetensors; bf16 != 0 writes BF16 tensors, otherwise F32. */
dtx_status dtx_model_save(const dtx_model *m, const char *path, int bf16);
void dtx_model_free(dtx_model *m);

const dtx_config *dtx_model_config(const dtx_model *m);
size_t dtx_model_num_params(const dtx_model *m);
/* Parameters excluding tok_embeddings and output. */
size_t dtx_model_num_params_nonembed(const dtx_model *m);
int dtx_model_num_tensors(const dtx_model *m);
const dtx_tensor_info *dtx_model_tensor(const dtx_model *m, int i);
/* By name; NULL when absent. */
const dtx_tensor_info *dtx_model_find(const dtx_model *m, const char *name);
dtx_real *dtx_model_params(dtx_model *m);

/* Matrix-product precision. FP32: fp32 everywhere. BF16: the linear layers
 * multiply bf16 operands with fp32 accumulation; parameters, gradients,
 * AdamW state and everything outside the matrix products stay fp32. The
 * double test build ignores it. */
typedef enum { DTX_PREC_FP32 = 0, DTX_PREC_BF16 = 1 } dtx_precision;
dtx_status dtx_model_set_precision(dtx_model *m, dtx_precision p);
dtx_precision dtx_model_precision(const dtx_model *m);
const char *dtx_precision_name(dtx_precision p);
dtx_real *dtx_model_grads(dtx_model *m);  /* allocated on first backward */

/* ------------------------------------------------------- forward/backward */

/* Forward over a batch of tokens [B, T] (T <= max_seq_len, 0 <= id < vocab).
 * When targets [B, T] is non-NULL the mean cross-entropy is returned in
 * *loss and the activations are kept for dtx_model_backward. logits, when
 * non-NULL, receives [B, T, vocab]. */
dtx_status dtx_model_forward(dtx_model *m, const int32_t *tokens, const int32_t *targets,
                             int64_t B, int64_t T, dtx_real *logits, double *loss);
/* Accumulate d(loss * loss_scale)/d(params) into the gradients (llm.c style:
 * backward adds, dtx_model_zero_grad clears). loss_scale is 1/accum_steps
 * for gradient accumulation. Uses the activations of the last forward. */
dtx_status dtx_model_backward(dtx_model *m, double loss_scale);
void dtx_model_zero_grad(dtx_model *m);
/* Current lambda of a DIFF layer (computed from its four vectors). */
double dtx_model_lambda(const dtx_model *m, int64_t layer);

/* ---------------------------------------------------------------- optimizer */

typedef enum { DTX_SCHED_COSINE = 0, DTX_SCHED_LINEAR = 1, DTX_SCHED_CONSTANT = 2 } dtx_schedule;

typedef struct {
    double lr;            /* peak learning rate                                    */
    double min_lr;        /* floor reached at the last step                        */
    int64_t warmup_steps; /* linear warmup: lr * (s+1)/warmup for s < warmup        */
    int64_t total_steps;  /* schedule length                                       */
    dtx_schedule schedule;
    double beta1, beta2, eps;
    double weight_decay;  /* decoupled (AdamW); never on norm weights or lambdas   */
    int decay_embeddings; /* apply weight decay to tok_embeddings / output         */
    double clip_norm;     /* global gradient-norm clip; <= 0 disables              */
} dtx_optim_config;

dtx_optim_config dtx_optim_default(void);
dtx_status dtx_optim_validate(const dtx_optim_config *o);
/* The schedule's learning rate at 0-based step s. */
double dtx_lr_at(const dtx_optim_config *o, int64_t step);

typedef struct dtx_optimizer dtx_optimizer;
dtx_status dtx_optimizer_init(dtx_optimizer **out, dtx_model *m, const dtx_optim_config *o);
void dtx_optimizer_free(dtx_optimizer *opt);
/* Clip, then one AdamW update at the schedule's lr for the current step;
 * advances the step. *grad_norm receives the pre-clip global norm. */
dtx_status dtx_optimizer_step(dtx_optimizer *opt, double *grad_norm, double *lr_used);
int64_t dtx_optimizer_steps_done(const dtx_optimizer *opt);

/* ---------------------------------------------------------------- tokens */

/* Reads a text file of whitespace-separated non-negative token ids, or a
 * token shard (issue 4). Every id is checked against vocab_size when
 * vocab_size > 0. *out is malloc'd; free() it. */
dtx_status dtx_tokens_read(const char *path, int64_t vocab_size, int32_t **out, int64_t *n);

/* ---------------------------------------------------------------- sampling */

/* Greedy (temperature <= 0) or temperature sampling: appends n_new tokens to
 * a prompt of n_prompt tokens, writing all n_prompt + n_new into out. The
 * whole sequence must fit in max_seq_len. */
dtx_status dtx_sample(dtx_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n_new,
                      double temperature, uint64_t seed, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif /* DIFFTX_H */
