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
 * Three architectures share one LLaMA-style backbone (see README "Model"):
 *   DTX_ARCH_DIFF         differential attention (V1), n_heads diff heads of
 *                         q/k width d = dim / n_heads / 2 and value width 2d;
 *   DTX_ARCH_TRANSFORMER  ordinary attention, n_heads heads of width
 *                         d = dim / n_heads;
 *   DTX_ARCH_DIFF2        DIFF V2 (spec §8): 2·n_heads query heads of width
 *                         d = dim / n_heads over n_kv_heads KV heads, output
 *                         head i = a_2i − σ(λ_i)·a_2i+1 with λ per token and
 *                         head from lambda_proj (interop.md "DIFF V2").
 * A DIFF model with H heads and G KV heads is parameter-matched by a
 * Transformer with 2H heads and 2G KV heads (dtx_config_baseline); a V2
 * model with h heads is compared with the Transformer of h heads and the
 * same KV heads (it has h·d·dim more query and h·dim more λ weights).
 */
#ifndef DIFFTX_H
#define DIFFTX_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
    DTX_ERR_NUMERIC, /* a loss or gradient is not finite (training)           */
    DTX_ERR_USAGE,   /* a flag or option given to a command, evaluation or
                      * trainer is invalid (the difftx command exits 2 on it) */
    DTX_ERR_STOPPED, /* a stop flag was raised: the step did not happen       */
} dtx_status;

/* The library's version. The shared library libdifftx.so.DTX_VERSION_MAJOR
 * exports exactly the functions this header declares; the major number
 * changes whenever a declaration or a public struct changes incompatibly. */
#define DTX_VERSION_MAJOR 1
#define DTX_VERSION_MINOR 2
/* "1.0": the version of the library running (which may be a newer minor
 * one than the header a program was built with). */
const char *dtx_version(void);
/* The public structs' layout, for bindings that mirror them: one line each,
 * "name sizeof offsets-of-its-fields-in-order" (python/difftx checks its
 * mirrors against it at load). */
const char *dtx_struct_layout(void);

/* v in the shortest %g form that reads back (strtod) as the same double,
 * as files and messages write real settings ("0.8", not
 * "0.80000000000000004"). Returns buf. */
const char *dtx_format_real(double v, char *buf, size_t cap);

/* The message of the most recent failure in this thread ("" if none). */
const char *dtx_last_error(void);
const char *dtx_status_name(dtx_status st);

/* The one random-number generator of the library (training batches,
 * sampling, initialisation): xoshiro256** seeded by
 * splitmix64, a plain value. Copy it to checkpoint, copy it back to resume:
 * the draws that follow are bit-identical. */
typedef struct {
    uint64_t s[4];
} dtx_rng;
void dtx_rng_seed(dtx_rng *r, uint64_t seed);
uint64_t dtx_rng_next(dtx_rng *r);
double dtx_rng_uniform(dtx_rng *r); /* [0, 1), 53 bits */
double dtx_rng_normal(dtx_rng *r);  /* N(0, 1), Box-Muller */

/* ---------------------------------------------------------------- files and time
 * The helpers every part of difftx reads, writes and times with (its
 * commands use them as any client can). */
/* Seconds on a monotonic clock (for intervals): the one clock of the library,
 * the tool, the tests and the benchmarks. */
double dtx_now_s(void);
/* Reads all of f (binary) into a malloc'd, NUL-terminated buffer; name is
 * used in the failure message (DTX_ERR_IO or DTX_ERR_NOMEM). */
dtx_status dtx_read_stream(FILE *f, const char *name, char **buf, size_t *len);
/* Opens path and reads it whole, as above. */
dtx_status dtx_read_file(const char *path, char **buf, size_t *len);
/* fopen(path, "rb") for a reader: NULL, with the message in dtx_last_error(), when it
 * cannot be opened or names a folder ("a folder, not a file": a folder opens
 * on Linux and fails only at the first read, with a message that says less). */
FILE *dtx_fopen_read(const char *path);
/* data[0, len) as the file path, atomically: written to PATH.tmp.PID in
 * the same folder, flushed, fsynced and renamed over PATH (and the folder
 * fsynced), so a reader, or a run resumed after a crash at any moment, sees
 * the old file or the whole new one, never a part; any failure leaves the
 * old file in place. Every file the library writes goes this way. */
dtx_status dtx_write_file_atomic(const char *path, const void *data, size_t len);
/* The files a path names: the one meaning of "a folder" for every command
 * that reads text (prepare, tokenizer train, eval needle's haystack,
 * quantize --calib). A regular file is itself. A folder is every regular
 * file below it, at any depth, walked depth-first with each folder's entries
 * in byte order of their names; names that begin with '.' (hidden files and
 * folders) and entries that are neither file nor folder (sockets, FIFOs) are
 * skipped; links are followed, to at most 32 levels (a link loop is
 * refused). dtx_paths_add appends them to out (which starts zeroed).
 * Messages: "PATH: ERR" (cannot stat or open), "PATH: neither a file nor a
 * folder" (for PATH itself), "PATH: folders nested deeper than 32 (a link
 * loop?)"; DTX_ERR_NOMEM. An empty folder adds nothing: the caller says
 * whether that is an error. */
typedef struct {
    char **v;
    size_t n, cap;
} dtx_paths;
dtx_status dtx_paths_add(dtx_paths *out, const char *path);
void dtx_paths_free(dtx_paths *p);

/* ---------------------------------------------------------------- flags
 * The table parser of the difftx command's flags and of dtx_eval_run's
 * options (one parser, one set of messages). A caller declares an array of
 * dtx_flag; dtx_flags_parse walks argv once, checks every value completely
 * (no trailing text, no overflow, the range) and stores it. A bad flag is
 * DTX_FLAGS_ERROR with status DTX_ERR_USAGE and the one-line message
 * "--flag: expected ..., got 'value'" in dtx_last_error(). */
typedef enum {
    DTX_FL_BOOL,   /* no value; stores set_to into *(int *)dst               */
    DTX_FL_I64,    /* int64_t in [imin, imax]                                 */
    DTX_FL_U64,    /* uint64_t, any non-negative integer (seeds)              */
    DTX_FL_F64,    /* finite double in [dmin, dmax] (open ends when *_open)   */
    DTX_FL_STR,    /* const char * (non-empty), pointing into argv            */
    DTX_FL_CHOICE, /* the index into the '|'-separated choices, as an int     */
} dtx_flag_kind;

typedef struct {
    const char *name; /* "--steps"; NULL: a line of text in the usage (a heading, a note) */
    dtx_flag_kind kind;
    void *dst;
    int64_t imin, imax;
    double dmin, dmax;
    int dmin_open, dmax_open;
    const char *choices;
    int set_to;
    const char *metavar; /* the value's name in the usage ("N", "PATH"); a choice's default: its choices */
    const char *help;    /* the usage's words for it; NULL: not listed (test hooks) */
    int required;        /* dtx_flags_parse refuses a command line without it */
    int seen;            /* set by dtx_flags_parse: the flag was given */
} dtx_flag;

/* The table's entries; the trailing arguments are more designated
 * initializers: DTX_FLAG_INT("--steps", &steps, 1, INT64_MAX, .metavar = "N",
 * .help = "optimizer steps"). */
#define DTX_FLAG_BOOL(n, p, v, ...) {.name = (n), .kind = DTX_FL_BOOL, .dst = (p), .set_to = (v), __VA_ARGS__}
#define DTX_FLAG_INT(n, p, lo, hi, ...) \
    {.name = (n), .kind = DTX_FL_I64, .dst = (p), .imin = (lo), .imax = (hi), __VA_ARGS__}
#define DTX_FLAG_SEED(n, p, ...) {.name = (n), .kind = DTX_FL_U64, .dst = (p), __VA_ARGS__}
/* open_lo: the lower bound itself is not allowed (e.g. lr > 0). */
#define DTX_FLAG_REAL(n, p, lo, open_lo, hi, open_hi, ...)                                                      \
    {.name = (n), .kind = DTX_FL_F64, .dst = (p), .dmin = (lo), .dmin_open = (open_lo), .dmax = (hi),      \
     .dmax_open = (open_hi), __VA_ARGS__}
#define DTX_FLAG_STR(n, p, ...) {.name = (n), .kind = DTX_FL_STR, .dst = (p), __VA_ARGS__}
#define DTX_FLAG_CHOICE(n, p, ch, ...) {.name = (n), .kind = DTX_FL_CHOICE, .dst = (p), .choices = (ch), __VA_ARGS__}
/* A line of the usage between flags: a section's heading, a note. */
#define DTX_FLAG_TEXT(t) {.help = (t)}

/* The flags more than one command takes, declared once (their words too). */
#define DTX_FLAG_MODEL(p) \
    DTX_FLAG_STR("--model", p, .metavar = "PATH", .help = "model file, or a training checkpoint", .required = 1)
#define DTX_FLAG_TOKENIZER(p) \
    DTX_FLAG_STR("--tokenizer", p, .metavar = "PATH", .help = "a tokenizer: ours, tiktoken, tokenizer.json, tokenizer.model or an HF folder")
#define DTX_FLAG_PRECISION(p)                                                                               \
    DTX_FLAG_CHOICE("--precision", p, "fp32|bf16",                                                           \
                    .help = "matrix products in fp32 (default), or with bf16 operands and fp32 accumulation")
/* The choice's index: 0 auto (dtx_kv_type_for), 1 fp32, 2 bf16 (DTX_KV_CHOICE_TYPE). */
#define DTX_FLAG_KV_CACHE(p)                                                                                \
    DTX_FLAG_CHOICE("--kv-cache", p, "auto|fp32|bf16",                                                       \
                    .help = "the KV cache's keys and values in bf16 (half its memory and of the bytes a decode "    \
                            "step reads from it, the values rounded) or fp32; auto (default): bf16 for bf16 or "   \
                            "quantised weights, fp32 for fp32 ones (docs/generate.md)")
#define DTX_KV_CHOICE_TYPE(m, choice) ((choice) == 0 ? dtx_kv_type_for(m) : (dtx_kv_type)((choice)-1))
#define DTX_FLAG_ATTN_BITS(p)                                                                               \
    DTX_FLAG_INT("--attn-bits", p, 0, 16, .metavar = "B",                                                  \
                 .help = "quantise the attention logits to B bits, 2..16 (dynamic absmax); 0 = off (default)")
#define DTX_FLAG_ATTN_SCOPE(p)                                                                              \
    DTX_FLAG_CHOICE("--attn-scope", p, "row|tensor",                                                         \
                    .help = "one absmax step per query row and head (default), or per layer and map over each " \
                            "model call")
#define DTX_FLAG_SEED_OF(p, what) DTX_FLAG_SEED("--seed", p, .metavar = "S", .help = (what))

enum { DTX_FLAGS_OK = 0, DTX_FLAGS_HELP = 1, DTX_FLAGS_ERROR = 2 };

/* Parses argv[1..argc) (argv[0] is the command's name; cmd, "train" or
 * "eval needle", names it in messages). `--flag value` and `--flag=value`
 * are accepted; `--help` or `-h` returns DTX_FLAGS_HELP at once. Arguments
 * that do not start with '-' (or follow "--") go to pos, at most max_pos of
 * them. A required flag that is not given is "--flag is required" (the
 * first of the table's). */
int dtx_flags_parse(const char *cmd, dtx_flag *fl, int n_fl, int argc, char **argv, const char **pos, int max_pos,
                    int *n_pos);
/* The usage text: head (the synopsis and what the command does, as
 * written), then each flag of the table with its value's name and its words
 * wrapped at 80 columns, then " [required]" for a required flag, or
 * " (default V)" from the value the flag holds now when the words do not
 * say it (and it is not 0, negative or none), and the text entries as
 * written. malloc'd (free() it); NULL when out of memory. */
char *dtx_flags_usage(const char *head, const dtx_flag *fl, int n_fl);
/* 1 when argv[1..argc) asks for the usage (--help or -h before any "--"):
 * what dtx_flags_parse would answer DTX_FLAGS_HELP to, asked before it
 * stores anything, so that the usage shows the defaults. */
int dtx_flags_want_help(int argc, char **argv);
/* The entry named name (NULL when the table has none). */
dtx_flag *dtx_flags_get(dtx_flag *fl, int n_fl, const char *name);
/* Strict numbers: the whole string, no leading space, no overflow; 0 on success. */
int dtx_parse_i64(const char *s, int64_t *out);
int dtx_parse_f64(const char *s, double *out);
/* A comma-separated list of distinct integers in [lo, hi], at most cap of
 * them, into out: the count, or -1 with DTX_ERR_USAGE and the message that
 * names the flag name. */
int dtx_flags_int_list(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out, int cap);

/* ---------------------------------------------------------------- config */

typedef enum { DTX_ARCH_DIFF = 0, DTX_ARCH_TRANSFORMER = 1, DTX_ARCH_DIFF2 = 2 } dtx_arch;

/* The per-head RMSNorm on each head's attention output (interop.md
 * "Variants", key `subln`). DEFAULT (0, what a zeroed config holds) is the
 * architecture's own: RMS for DIFF, NONE for the Transformer.
 *   DIFF + NONE: no norm and no subln weight; the (1 − λ_init) scale stays
 *     (Table 6 "− GroupNorm").
 *   Transformer + RMS: each d-wide head output RMS-normalised with one
 *     weight [head_dim] shared by the layer's heads, no scale ("+ GroupNorm"). */
typedef enum { DTX_SUBLN_DEFAULT = 0, DTX_SUBLN_RMS = 1, DTX_SUBLN_NONE = 2 } dtx_subln;

/* DIFF V2's λ (metadata key `v2_lambda`, diff2 only), spec §8.3's cheap
 * ablations beside the official form:
 *   SIGMOID (0, the default): λ = σ(x·lambda_projᵀ), in (0, 1);
 *   LINEAR: λ = x·lambda_projᵀ, unbounded ("λ without sigmoid");
 *   NONE: λ = 1, no lambda_proj weight ("no λ": a_2i − a_2i+1).          */
typedef enum { DTX_V2_LAMBDA_SIGMOID = 0, DTX_V2_LAMBDA_LINEAR = 1, DTX_V2_LAMBDA_NONE = 2 } dtx_v2_lambda;

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
    /* Table 6's variants (interop.md "Variants"); zero means the defaults. */
    dtx_subln subln;
    int lambda_init_fixed;    /* DIFF: 0 = the schedule 0.8 − 0.6 exp(−0.3 l);
                                 1 = lambda_init_value in every layer, both in
                                 λ and in the (1 − λ_init) output scale      */
    double lambda_init_value;
    dtx_v2_lambda v2_lambda;  /* DIFF2 only                                  */
    /* Llama 3.1's RoPE scaling (Hugging Face's rope_type "llama3";
     * docs/huggingface.md), where rope_factor > 0 (0: none, the plain
     * frequencies). Of the frequencies f = θ^(−2i/d), of wavelength w = 2π/f,
     * with orig = rope_orig_max_pos: w > orig/rope_low_freq gives f/factor,
     * w < orig/rope_high_freq keeps f, and between them (1 − s)·f/factor +
     * s·f with s = (orig/w − low)/(high − low). */
    double rope_factor, rope_low_freq, rope_high_freq;
    int64_t rope_orig_max_pos;
    /* The q/k width of a head (d), where it is not the arch's default (0):
     * dim / (2·n_heads) for diff, dim / n_heads otherwise. Models imported
     * from Hugging Face with an explicit head_dim; the attention's output,
     * out_proj's input, is then dtx_config_attn_dim wide, not dim. */
    int64_t head_dim;
    /* DIFF only: how much of a converted Transformer's form remains, τ in
     * [0, 1] (0, the default: none; difftx convert --to-diff starts at 1,
     * and difftx train --diff-warmup N brings it to 0): λ_init becomes
     * (1 − τ)·λ_init, in λ and in the output scale, and each head's output
     * is τ·O + (1 − τ)·(its usual epilogue of O), O = A1·v − λ·A2·v. */
    double transformer_mix;
} dtx_config;

/* A small DIFF default (dim 256, 4 layers, 4 heads, vocab 4096, ...). */
dtx_config dtx_config_default(void);
/* The parameter-matched other architecture: DIFF (H, G) <-> Transformer
 * (2H, 2G), in its default variant (subln and lambda_init at the defaults);
 * DIFF2 (h, g) -> Transformer (h, g), V2's own comparison (spec §8.2).
 * Table 6's "Transformer with half the heads at twice the width" is a
 * Transformer config with DIFF's n_heads and n_kv_heads (d = dim / H).      */
dtx_config dtx_config_baseline(const dtx_config *c);
/* Checks divisibility and ranges; DTX_ERR_CONFIG naming the key otherwise. */
dtx_status dtx_config_validate(const dtx_config *c);
/* q/k (sub-)head width d: head_dim, or the arch's own. */
int64_t dtx_config_head_dim(const dtx_config *c);
/* The arch's own head width, dim / (2·n_heads) for diff and dim / n_heads
 * otherwise; 0 where that does not divide (then head_dim must be set). */
int64_t dtx_config_default_head_dim(const dtx_config *c);
/* The layer's lambda_init = 0.8 - 0.6 exp(-0.3 l), l 0-based (the schedule). */
double dtx_lambda_init(int64_t layer);
/* This config's λ_init of a layer: the schedule, or the fixed value. */
double dtx_config_lambda_init(const dtx_config *c, int64_t layer);
/* 1 when heads are RMS-normalised (subln resolved against the arch).      */
int dtx_config_has_subln(const dtx_config *c);
/* Variant values as interop.md writes them: `rms` | `none`, and
 * `schedule` | a decimal number. Parsing refuses anything else, and a fixed
 * lambda_init outside [0, 1) or on a Transformer (DTX_ERR_CONFIG, one line
 * naming the value); set_lambda_init leaves the arch check to validate. */
dtx_status dtx_config_set_subln(dtx_config *c, const char *value);
dtx_status dtx_config_set_lambda_init(dtx_config *c, const char *value);
const char *dtx_config_subln_name(const dtx_config *c);
/* `sigmoid` | `linear` | `none` (DIFF2's λ); parsing refuses anything else. */
dtx_status dtx_config_set_v2_lambda(dtx_config *c, const char *value);
const char *dtx_config_v2_lambda_name(const dtx_config *c);
/* 1 when a DIFF2 config has the lambda_proj weight (v2_lambda not NONE). */
int dtx_config_has_lambda_proj(const dtx_config *c);
/* Width of q_proj's output: 2·n_heads·d for diff and diff2 (two query
 * heads per head), n_heads·d for a Transformer; dim, or 2·dim for diff2,
 * unless head_dim is set. */
int64_t dtx_config_q_dim(const dtx_config *c);
/* Width of the attention's output (out_proj's input): 2·n_heads·d for diff
 * (values 2d wide), n_heads·d otherwise; dim unless head_dim is set. */
int64_t dtx_config_attn_dim(const dtx_config *c);
/* `schedule` or the value with %.17g (cap ≥ 32). */
void dtx_config_lambda_init_str(const dtx_config *c, char *buf, size_t cap);
/* The parameter count of a model of config c (and, in *nonembed when not
 * NULL, without tok_embeddings and output), computed without building it. */
int64_t dtx_config_num_params(const dtx_config *c, int64_t *nonembed);
/* The RoPE scaling as model files write it: `none`, or `llama3 FACTOR LOW
 * HIGH ORIG` (cap ≥ 96); parsing refuses anything else (one line). */
void dtx_config_rope_scaling_str(const dtx_config *c, char *buf, size_t cap);
dtx_status dtx_config_set_rope_scaling(dtx_config *c, const char *value);
/* The d/2 rotation frequencies of a d-wide head under c's theta and scaling. */
void dtx_config_rope_freqs(const dtx_config *c, int64_t d, double *freq);
/* 1 when the config is its arch's default variant. */
int dtx_config_is_default_variant(const dtx_config *c);
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
/* The same with a choice of initialisation: DTX_INIT_TORCH is the above;
 * DTX_INIT_GPT2 (GPT-2 / nanoGPT) draws every linear weight, embedding and
 * untied output from N(0, 0.02²) and the projections into the residual
 * stream (out_proj, w2) from N(0, (0.02/sqrt(2·n_layers))²); λ vectors and
 * norm weights as above. The same seed draws the same stream for both. */
typedef enum { DTX_INIT_TORCH = 0, DTX_INIT_GPT2 = 1 } dtx_init_scheme;
dtx_status dtx_model_init_scheme(dtx_model **out, const dtx_config *c, uint64_t seed, dtx_init_scheme scheme);
const char *dtx_init_scheme_name(dtx_init_scheme s);
/* Load a safetensors model file (interop.md). */
dtx_status dtx_model_load(dtx_model **out, const char *path);
/* difftx info's report on m (read from path; ckpt_step >= 0: a training
 * checkpoint's model, written after that step): the architecture, every
 * config value, λ per layer, the parameter counts, the parameter-matched
 * baseline of the other architecture and the difference, with tensors
 * every tensor's shape; as text, or as one JSON line when json. malloc'd
 * (free() it); NULL when out of memory. */
char *dtx_model_describe(const dtx_model *m, const char *path, int64_t ckpt_step, int tensors, int json);
/* What runs the numbers here (difftx info --system): the ISA level and the
 * CPU's, DTX_ISA, the kernels and oneDNN's ISA, whether bf16 is native. */
char *dtx_system_describe(int json);
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
 * and the flash attention's tile products (q·kᵀ, P·v and their gradients)
 * multiply bf16 operands with fp32 accumulation; parameters, gradients,
 * AdamW state, softmax and everything outside the matrix products stay
 * fp32. The plain attention, generation's KV-cache attention (prefill and
 * decode) and the double test build stay fp32 whatever it says. */
typedef enum { DTX_PREC_FP32 = 0, DTX_PREC_BF16 = 1 } dtx_precision;
dtx_status dtx_model_set_precision(dtx_model *m, dtx_precision p);
dtx_precision dtx_model_precision(const dtx_model *m);
const char *dtx_precision_name(dtx_precision p);
dtx_real *dtx_model_grads(dtx_model *m);  /* allocated on first backward */

/* dtx_model_load, or the model inside a training checkpoint (difftx train's
 * --ckpt-dir files) when path is one, or a Hugging Face checkpoint folder
 * (dtx_hf_import) when path is one (otherwise the model reader's message,
 * which names what is wrong with the file), with its matrix products set to
 * precision. *out is NULL on failure. */
dtx_status dtx_model_open(dtx_model **out, const char *path, dtx_precision precision);
/* Hugging Face checkpoint folders (docs/huggingface.md): config.json with
 * model.safetensors, or with model.safetensors.index.json and the shards
 * it names; F32, BF16 or F16 tensors. DiffLlamaForCausalLM is read as a
 * diff model and LlamaForCausalLM as a transformer, computing what
 * transformers computes (the RoPE rows and the heads reordered into
 * difftx's layout; an explicit head_dim and Llama 3.1's RoPE scaling become
 * the config's). A config difftx cannot compute exactly (biases, another
 * RoPE scaling or activation, ...) is DTX_ERR_CONFIG naming the key; a tensor missing, of another shape, not
 * in its shard or not in the index, DTX_ERR_FORMAT naming it. */
dtx_status dtx_hf_import(dtx_model **out, const char *dir);
/* Whether path is a folder holding a config.json. */
int dtx_is_hf_dir(const char *path);
/* Writes m as such a folder (made if missing; config.json and the tensor
 * files replaced): one model.safetensors, or shards of at most
 * max_shard_bytes each (<= 0: one file) with their index; BF16 tensors
 * when bf16, else F32; metadata {"format": "pt"}. A diff model's per-head
 * norm weight is folded into o_proj (DiffLlama's norm has none).
 * DTX_ERR_CONFIG naming what HF cannot express: DIFF V2, subln none, a
 * constant lambda_init, a transformer with subln, a quantised model. */
dtx_status dtx_hf_export(const dtx_model *m, const char *dir, int bf16, int64_t max_shard_bytes);
/* A DIFF model that computes what the Transformer t computes (docs/
 * huggingface.md "A Llama into DIFF"): each of t's heads of width d becomes
 * a DIFF head of q/k width d (head_dim d: the head count kept, so about
 * twice the attention weights of the parameter-matched DIFF) whose second
 * map's query is zero and whose λ is exactly 0 at the start (λ vectors in
 * equal pairs, seeded), second value half a copy with out_proj columns of
 * zero; a standard DIFF model (norm weight one, the λ_init schedule) at
 * transformer_mix 1. Training grows the subtracted map; dtx_train_options'
 * diff_warmup phases the norm and λ_init in. DTX_ERR_CONFIG for another
 * arch, a Transformer with subln, a quantised model. */
dtx_status dtx_model_to_diff(dtx_model **out, const dtx_model *t, uint64_t seed);
/* Sets a DIFF model's transformer_mix (dtx_config) to tau in [0, 1], as
 * difftx train --diff-warmup does before each step; DTX_ERR_ARG otherwise. */
dtx_status dtx_model_set_transformer_mix(dtx_model *m, double tau);
/* Whether path is a training checkpoint (its metadata names a checkpoint
 * version; a file that cannot be read is not one). */
int dtx_is_checkpoint(const char *path);
/* The model of a training checkpoint, read and checked whole (the optimizer
 * state too, then dropped), and the step it was written after. */
dtx_status dtx_checkpoint_open(dtx_model **out, int64_t *step, const char *path);
/* The one-line note for precision bf16 where this CPU has no native bf16
 * (what is rounded, and that sums stay fp32); NULL when there is nothing
 * to say (fp32, or native bf16). */
const char *dtx_precision_note(dtx_precision precision);

/* Low-bit attention logits, for evaluation (spec §6.9, docs/eval_quant.md):
 * dynamic absmax quantisation of the pre-softmax logits z = q·k/√d inside
 * the attention. Over the unmasked (causal) logits of a group, step
 * s = max|z| / (2^(bits−1) − 1), z_q = round(z/s)·s (half away from zero;
 * s = 0 gives z_q = 0), then the usual softmax. DIFF quantises z1 and z2
 * separately, each with its own step. Groups:
 *   DTX_QUANT_ROW     one step per (batch row, head or DIFF sub-head, query
 *                     row): the default;
 *   DTX_QUANT_TENSOR  one step per (batch row, layer, map) over all heads and
 *                     all query rows of one call: dtx_model_forward's T rows,
 *                     a prefill's n rows, a decode step's one row (so cached
 *                     decoding differs from the full forward in this scope).
 * bits 0 turns it off (exactly the unquantised model); 16 is a real 16-bit
 * quantisation, not "off". Applied by dtx_model_forward, dtx_model_prefill
 * and dtx_model_decode; forward only: dtx_model_backward after a quantised
 * forward is DTX_ERR_ARG. DTX_ERR_ARG for bits outside {0} ∪ [2, 16] or an
 * unknown scope. Off for a new or loaded model. */
typedef enum { DTX_QUANT_ROW = 0, DTX_QUANT_TENSOR = 1 } dtx_quant_scope;
dtx_status dtx_model_set_attention_quant(dtx_model *m, int bits, dtx_quant_scope scope);

/* Quantised weights (docs/quantize.md): the linear weights (q/k/v/out
 * projections, w1, w3, w2, the token embedding and an untied output) held
 * in few bits, for inference:
 *   DTX_WQ_W8A16  int8, one scale per output channel; activations 16-bit
 *                 (bf16, or fp16 where quantised with act_fp16);
 *   DTX_WQ_W8A8   the same weights; every linear layer's input, and the
 *                 attention's q and k, int8 with one static scale each
 *                 (calibrated, docs/quantize.md);
 *   DTX_WQ_W4A16  the layers' weights 4 bits in groups of 32 along the
 *                 input, one scale per group (the embedding and the output
 *                 int8 as W8A16); activations as W8A16.
 * Norm weights and λ vectors stay fp32. A quantised model runs
 * dtx_model_forward, prefill and decode (and so every eval); its
 * parameters read as zeros where a weight is quantised, and
 * dtx_model_backward refuses it. DTX_WQ_NONE: not quantised. */
typedef enum { DTX_WQ_NONE = 0, DTX_WQ_W8A16 = 1, DTX_WQ_W8A8 = 2, DTX_WQ_W4A16 = 3 } dtx_wquant;
dtx_wquant dtx_model_wquant(const dtx_model *m);
const char *dtx_wquant_name(dtx_wquant q); /* "none", "w8a16", "w8a8", "w4a16" */
/* 1 and *out set when s names a scheme ("w8a16", "w8a8", "w4a16"). */
int dtx_wquant_parse(const char *s, dtx_wquant *out);
/* 1 when a W8A16 / W4A16 model rounds its linear inputs to fp16 (IEEE half:
 * nearest, ties to even, past ±65504 infinite), 0 for bf16 or other schemes. */
int dtx_model_act_fp16(const dtx_model *m);

/* Sets a metadata key that difftx itself does not read (kept and written
 * on save, as a file's unknown keys are): what made the model, e.g. the
 * calibration behind a quantisation. DTX_ERR_ARG for a key difftx reads. */
dtx_status dtx_model_set_meta(dtx_model *m, const char *key, const char *value);
/* Such a key's value (NULL when absent). */
const char *dtx_model_meta(const dtx_model *m, const char *key);
/* Bytes the model's weights take in memory: fp32 parameters, plus the
 * quantised codes and scales where a weight is quantised (instead of its
 * 4 bytes per value). */
size_t dtx_model_weight_bytes(const dtx_model *m);
/* Whether m reads its 2-D weights where they lie in a BF16 model file
 * (dtx_model_load and dtx_model_open map such a file and keep no fp32 copy
 * of its weights: every product reads the bf16 values, as x · w in the
 * model's precision), and widening them into fp32 parameters, which
 * training, saving, converting, quantising and dtx_model_params do
 * themselves first. DTX_WEIGHTS_COPY=1 in the environment makes the
 * readers copy into fp32 as before. */
int dtx_model_weights_in_place(const dtx_model *m);
dtx_status dtx_model_materialize(dtx_model *m);
typedef enum { DTX_CALIB_ABSMAX = 0, DTX_CALIB_PERCENTILE = 1, DTX_CALIB_MSE = 2 } dtx_calib_method;
typedef struct {
    dtx_wquant scheme;
    dtx_calib_method act_method; /* W8A8 only */
    double percentile;           /* PERCENTILE: in (50, 100], e.g. 99.99 */
    int clip_search;
    int act_fp16;                /* W8A16 / W4A16: fp16 activations instead of bf16 */
    unsigned a16_inputs;         /* W8A8: the kinds of input (DTX_A8_*) kept 16-bit (bf16); 0: none */
} dtx_quant_options;
/* The kinds of quantised input, for a16_inputs: the attention's input
 * (q/k/v projections), its output (out projection), the FFN's input (w1,
 * w3), its hidden state (w2), the attention's q and k, the output
 * projection's input. */
enum {
    DTX_A8_ATTN_IN = 1,
    DTX_A8_ATTN_OUT = 2,
    DTX_A8_FFN_IN = 4,
    DTX_A8_FFN_HIDDEN = 8,
    DTX_A8_QK = 16,
    DTX_A8_OUTPUT = 32,
    DTX_A8_ALL = 63
};
const char *dtx_a8_kind_name(unsigned kind); /* "attn_in", ..., "output" for one bit; NULL otherwise */
dtx_quant_options dtx_quant_options_default(dtx_wquant scheme); /* ABSMAX, 99.99, clip_search 1, bf16 */
const char *dtx_calib_method_name(dtx_calib_method m);             /* "absmax", "percentile", "mse" */
int dtx_calib_method_parse(const char *s, dtx_calib_method *out);
typedef struct {
    int64_t rows;           /* calibration tokens seen (n_seq·len)                */
    double mean_clip;       /* mean weight clipping factor chosen (1: absmax)     */
    double act_clip;        /* W8A8: mean of (chosen range / absmax) over inputs  */
} dtx_quant_summary;
/* Quantising a model from calibration text (docs/quantize.md): the fp32
 * model runs over n_seq calibration sequences of len tokens each (tokens
 * [n_seq, len], row-major); what each linear layer (and the attention's q,
 * k) receives is recorded, then the weights are quantised in place.
 *   act_method (W8A8): each input's static int8 scale from its absolute
 *     maximum (ABSMAX), the percentile of |x| (PERCENTILE), or the range
 *     with the least squared rounding-and-clipping error (MSE);
 *   clip_search: each 8-bit weight row's clipping factor (of 1, 0.95, ...,
 *     0.7 of its absolute maximum) chosen to minimise the squared error of
 *     that row's outputs on calibration inputs, each 4-bit group's (of 1,
 *     0.975, ..., 0.5) the error of its weights weighted by their inputs'
 *     mean squares; 0: absmax.
 *   a16_inputs (W8A8): those kinds of input stay 16-bit (a mixed model, and
 *     the way to find which inputs' int8 grids cost the most);
 * DTX_ERR_ARG for a quantised model, an unknown scheme or method, act_fp16
 * with W8A8, a16_inputs without W8A8 or past DTX_A8_ALL, no sequence, len
 * outside [1, max_seq_len], or an id outside the vocab. */
dtx_status dtx_model_quantize(dtx_model *m, const dtx_quant_options *o, const int32_t *tokens, int64_t n_seq,
                              int64_t len, dtx_quant_summary *summary);

/* ------------------------------------------------------- forward/backward */

/* A target that counts in neither the loss nor its gradient (a padded
 * position, or one a task does not grade: PyTorch's ignore_index). */
#define DTX_TARGET_IGNORE (-1)
/* Forward over a batch of tokens [B, T] (T <= max_seq_len, 0 <= id < vocab).
 * When targets [B, T] is non-NULL the mean cross-entropy over the targets
 * that are not DTX_TARGET_IGNORE is returned in *loss (0 when all are) and
 * the activations are kept for dtx_model_backward. logits, when non-NULL,
 * receives [B, T, vocab]. */
dtx_status dtx_model_forward(dtx_model *m, const int32_t *tokens, const int32_t *targets,
                             int64_t B, int64_t T, dtx_real *logits, double *loss);
/* The per-position losses behind the last forward's mean: out [B·T] =
 * −log softmax(logits)[target] in nats (a probability that underflowed to
 * 0 reads as −log FLT_MIN; an ignored target's position reads 0). Valid between a forward with targets and the
 * next backward (which turns the probabilities into gradients in place);
 * DTX_ERR_ARG otherwise. */
dtx_status dtx_model_token_losses(const dtx_model *m, double *out);
/* Accumulate d(loss * loss_scale)/d(params) into the gradients (llm.c style:
 * backward adds, dtx_model_zero_grad clears). loss_scale is 1/accum_steps
 * for gradient accumulation. Uses the activations of the last forward. */
dtx_status dtx_model_backward(dtx_model *m, double loss_scale);
void dtx_model_zero_grad(dtx_model *m);
/* A hook of dtx_model_backward for data-parallel training: fn(ctx, lo, hi)
 * each time the gradients [lo, hi) (offsets into dtx_model_grads) hold
 * their final values of this backward, so that their sum over ranks can
 * start while the pass goes on. The ranges come in descending order and
 * are contiguous: the output layer's and the final norm's first, then each
 * layer's from the last, the embedding's (tied or not) last; together they
 * cover every parameter before dtx_model_backward returns. NULL: none. */
typedef void (*dtx_grads_ready_fn)(void *ctx, size_t lo, size_t hi);
void dtx_model_on_grads_ready(dtx_model *m, dtx_grads_ready_fn fn, void *ctx);
/* Current lambda of a DIFF layer (computed from its four vectors). */
double dtx_model_lambda(const dtx_model *m, int64_t layer);

/* Attention maps of the last dtx_model_forward (spec §6.5), recomputed in
 * double from what the forward keeps (post-RoPE q and k, λ): softmax of
 * q·k/√d with max subtraction. Heads are numbered 0..n_heads-1 in every arch:
 * a DIFF head's FIRST and SECOND maps are its two softmax maps (q sub-heads
 * 2h and 2h+1 over the KV head GQA gives it), a DIFF2 head's the maps of its
 * query heads 2h and 2h+1 over their one KV head; COMBINED is A1 − λ·A2 (the
 * weights the values are summed with: DIFF's layer λ, DIFF2's λ of each
 * query row). A Transformer head has one map: FIRST and COMBINED give it,
 * SECOND is DTX_ERR_ARG. */
typedef enum {
    DTX_MAP_FIRST = 0,
    DTX_MAP_SECOND = 1,
    DTX_MAP_COMBINED = 2,
} dtx_attn_map;
/* out [T, T] (T of the last forward), row-major: row t holds the weights of
 * query t over keys 0..t and zeros above the diagonal, for batch row b.
 * DTX_ERR_ARG, with a message, before any forward or for b, layer, head or
 * which out of range. Reads the model only (several threads may call it). */
dtx_status dtx_model_attention_map(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map which,
                                   double *out);

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
    /* A schedule extended past its first end (dtx_optimizer_extend) restarts
     * at restart_step (0: never): from restart_lr, the rate there, it rises
     * linearly back to lr over warmup_steps (at most a tenth of the new
     * steps), then decays as schedule says to min_lr at the new last step.
     * The steps before restart_step are the run's past: dtx_lr_at gives
     * them for the extended length, not as they ran. */
    int64_t restart_step;
    double restart_lr;
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
/* Extends the schedule to total_steps (more than it had) from the step the
 * optimizer is at: a warm restart there (dtx_optim_config's restart_step and
 * restart_lr): a finished or running run continues with a new warmup and
 * decay over the new steps, every other setting unchanged. */
dtx_status dtx_optimizer_extend(dtx_optimizer *opt, int64_t total_steps);

/* ---------------------------------------------------------------- training
 * The training loop of `difftx train` (docs/training.md), one optimizer step
 * per call, so that a caller can watch, evaluate, checkpoint or stop between
 * steps: each step samples accum micro-batches of batch rows of seq + 1
 * tokens from the training tokens (uniformly, from the trainer's own
 * generator), runs forward and backward, averages the gradients and takes
 * one AdamW step at the schedule's rate. The same options, config, seed and
 * tokens give bit-identical weights to `difftx train` on the same machine and
 * thread count, and a run resumed from a checkpoint continues bit-identically
 * to an uninterrupted one. */
typedef struct dtx_trainer dtx_trainer;

/* The ranks of a data-parallel run (docs/training.md "More than one process (MPI)"):
 * a process started by mpirun (or srun) joins the others through MPI; each
 * rank's trainer takes batch / ranks rows of every batch, the gradient is
 * summed over ranks in rank order, so every rank takes the same step. A
 * NULL communicator is one rank. Every rank makes the same calls in the
 * same order (each of these but rank and size waits for all). */
typedef struct dtx_comm dtx_comm;
/* Whether an MPI launcher (mpirun, srun) started this process. */
int dtx_comm_launched_by_mpi(void);
/* MPI's ranks, through the plugin libdifftx_mpi.so (found beside the
 * running executable, or at $DTX_MPI_PLUGIN); one line naming what is
 * missing when it cannot be loaded or MPI does not start. */
dtx_status dtx_comm_mpi_open(dtx_comm **out);
int dtx_comm_rank(const dtx_comm *c); /* 0 for NULL */
int dtx_comm_size(const dtx_comm *c); /* 1 for NULL */
/* buf [n] := the sum of every rank's buf [n], in rank order. */
dtx_status dtx_comm_allreduce_f64(dtx_comm *c, double *buf, size_t n);
/* Every rank stops at once with exit status code (MPI_Abort): for a rank
 * that cannot go on while the others wait in a sum. */
void dtx_comm_abort(dtx_comm *c, int code);
/* MPI_Finalize, and frees c (NULL is fine). */
void dtx_comm_mpi_close(dtx_comm *c);

/* Rows of the batches replaced by synthetic documents (docs/eval_needle.md,
 * docs/eval_icl.md, docs/eval_halluc.md): each row independently, with these
 * probabilities, becomes a multi-needle retrieval document (needle_frac,
 * 1..needle_max needles over the haystack `text`), a copy document
 * (copy_frac: L random ids repeated), an in-context classification episode
 * (icl_frac), a faithfulness document (halluc_frac), a closed-book fact
 * row (fact_frac) or a multi-query associative recall episode (recall_frac:
 * token ids, docs/eval_recall.md); the shares add up to at most 1. Every
 * share but copy's and recall's needs `tokenizer` (the one the tokens were made with); needle and
 * faithfulness documents need `text` too. The rows depend on (seed, step,
 * micro-batch, row) alone, so a resumed run makes the same ones. */
#define DTX_NEEDLE_MAX 16 /* the most needles in one document or prompt */
typedef struct {
    double needle_frac, copy_frac, icl_frac, halluc_frac, fact_frac, recall_frac;
    int64_t needle_max;    /* needles per document, 1..needle_max uniformly */
    int64_t recall_queries, recall_distractors; /* recall rows: Q queries, 0..D distractor pairs */
    int recall_all_targets; /* recall rows graded at every position (else at the answers only:
                             * the other targets DTX_TARGET_IGNORE)                */
    const char *tokenizer; /* borrowed: read when the trainer opens          */
    const char *text;      /* a file or a folder of *.txt (borrowed)          */
} dtx_train_mix;

typedef struct {
    int64_t batch;        /* rows per micro-batch (divisible by the ranks)          */
    int64_t seq;          /* tokens per row (<= the model's max_seq_len)           */
    int64_t accum;        /* micro-batches per optimizer step                      */
    int64_t eval_batches; /* batches dtx_trainer_eval reads                        */
    uint64_t seed;        /* the batch sampler's, the mixture's, and a new model's
                           * weights'                                              */
    dtx_init_scheme init_scheme; /* a new model's initialisation               */
    dtx_precision precision;     /* the arithmetic of the forward and backward  */
    int64_t diff_warmup;  /* a converted Transformer (dtx_model_to_diff): lower the
                           * model's transformer_mix to 1 − step/diff_warmup before
                           * each step, reaching 0 (a standard DIFF model) at step
                           * diff_warmup; 0: leave it                              */
    dtx_train_mix mix;           /* synthetic rows (all shares 0: none)         */
    dtx_comm *comm;       /* the ranks (NULL: this process alone; borrowed)         */
    int zero1;            /* ZeRO-1: each rank keeps the AdamW moments of its own
                           * share of the parameters (the same results)            */
    double grad_bucket_mb; /* with ranks: sum the gradient in buckets of this many
                            * MiB, each started while the backward still runs; 0:
                            * one sum after the backward; < 0: 4 where ranks run on
                            * more than one machine, else 0                         */
    /* Polled between micro-batches (a signal handler may set it): nonzero
     * abandons the step, which then returns DTX_ERR_STOPPED with nothing
     * changed; with ranks, any rank's stop stops all. NULL: never. */
    volatile sig_atomic_t *stop;
    /* test hooks: this step's loss reads as NaN; this step fails, out of
     * memory, on the last rank alone (0: never) */
    int64_t debug_nan_at, debug_oom_at;
} dtx_train_options;
/* batch 8, seq 128, accum 1, eval_batches 10, seed 1, DTX_INIT_TORCH, fp32,
 * no mixture (needle_max 6), one rank, grad_bucket_mb -1 (difftx train's
 * defaults, but seq, which the command takes from the model). */
dtx_train_options dtx_train_options_default(void);
typedef struct {
    int64_t step;     /* steps done after this one (1 after the first) */
    double loss;      /* mean training loss over the step's rows        */
    double grad_norm; /* before clipping                                */
    double lr;        /* the rate this step used                        */
} dtx_train_stats;
/* A fresh run. tokens and val_tokens (NULL: none) are token shards or token
 * text files (dtx_tokens_read's formats), each of at least seq + 1 tokens
 * with every id below the vocab. model: the weights to start from (taken:
 * the trainer owns it from the call on, failure included), or NULL for a new
 * model of config c (c is ignored when model is given) from o->seed.
 * DTX_ERR_USAGE for options that do not fit (seq longer than the model's
 * context, a batch that does not divide over the ranks, a mixture over 1 or
 * without its files), DTX_ERR_ARG / DTX_ERR_CONFIG naming what is wrong,
 * DTX_ERR_IO. */
dtx_status dtx_trainer_init(dtx_trainer **out, const dtx_train_options *o, const char *tokens,
                            const char *val_tokens, const dtx_config *c, dtx_model *model,
                            const dtx_optim_config *oc);
/* A run resumed from a checkpoint (dtx_trainer_save's, or difftx train's):
 * the weights, the optimizer (its config, moments and step) and the
 * sampler's state come from it. DTX_ERR_USAGE naming the setting when c
 * (NULL: the checkpoint's model), oc (NULL: whatever the checkpoint holds),
 * o or the tokens differ from the run that wrote it (the model's config,
 * every optimizer setting, batch, seq, accum, seed, init_scheme, precision,
 * the mixture, the training tokens' count and hash: dtx_trainer_mismatch
 * then names it); DTX_ERR_IO / DTX_ERR_FORMAT for the file. An oc whose
 * total_steps exceeds the checkpoint's extends the run (dtx_optimizer_extend:
 * a warm restart at the checkpoint's step), as difftx train --resume does. */
dtx_status dtx_trainer_init_checkpoint(dtx_trainer **out, const dtx_train_options *o, const char *tokens,
                                       const char *val_tokens, const char *checkpoint, const dtx_config *c,
                                       const dtx_optim_config *oc);
/* After dtx_trainer_init_checkpoint refused a setting: its key (the
 * checkpoint's metadata key, docs/format.md: "batch", "lr", "data_hash", ...)
 * and its value in this run and in the checkpoint, as the checkpoint writes
 * them; NULLs after any other outcome. Valid until this thread's next call
 * of dtx_trainer_init_checkpoint. */
void dtx_trainer_mismatch(const char **key, const char **here, const char **there);
void dtx_trainer_free(dtx_trainer *t);
/* One optimizer step. DTX_ERR_NUMERIC when the loss or the gradient is not
 * finite (s->loss tells which): nothing is updated then (the step is not
 * counted, the sampler has moved on). DTX_ERR_STOPPED when the stop flag was
 * raised: nothing changed (the sampler too), the step can be taken again.
 * *s may be NULL. */
dtx_status dtx_trainer_update(dtx_trainer *t, dtx_train_stats *s);
/* The validation loss: the mean over eval_batches batches read in order from
 * the start of val_tokens (the same batches every time). Touches neither the
 * weights nor the sampler. DTX_ERR_ARG without val_tokens; DTX_ERR_STOPPED. */
dtx_status dtx_trainer_eval(dtx_trainer *t, double *val_loss);
/* Whether any rank's stop flag is raised: the same answer on every rank (a
 * collective with ranks: every rank asks). */
int dtx_trainer_should_stop(dtx_trainer *t);
/* Writes a checkpoint (docs/training.md: model, moments, step, sampler, and
 * these options), atomically. With ranks, a collective: every rank calls it,
 * rank 0 writes. */
dtx_status dtx_trainer_save(dtx_trainer *t, const char *path);
/* What a run is doing, for its reports. */
typedef struct {
    int64_t data_tokens, val_tokens; /* the streams' lengths (0: no validation) */
    int64_t start_step;   /* the checkpoint's step when resumed, else 0              */
    double start_loss;    /* the checkpoint's last loss (NaN: a fresh run)           */
    int ckpt_threads;     /* the checkpoint writer's OpenMP threads (0: unknown)     */
    int64_t extended_from; /* the checkpoint's total_steps when oc extended it, else 0 */
    double restart_lr;    /* the rate the extended schedule restarts from            */
    int rank, ranks;      /* this process's rank and how many there are              */
    int64_t grad_bucket;  /* values per bucket of the gradient's sums (0: one sum)   */
    double last_loss;     /* the last step's loss                                    */
    /* synthetic rows made by this process so far (dtx_train_mix) */
    int64_t needle_docs, copy_docs, icl_rows, halluc_rows, fact_rows, recall_rows;
} dtx_train_info;
void dtx_trainer_info(const dtx_trainer *t, dtx_train_info *i);
int64_t dtx_trainer_steps_done(const dtx_trainer *t);
/* The model being trained (owned by the trainer; its weights change with
 * each update). */
dtx_model *dtx_trainer_model(dtx_trainer *t);
/* Hands the model to the caller (who frees it); the trainer cannot step
 * afterwards (DTX_ERR_ARG). */
dtx_model *dtx_trainer_take_model(dtx_trainer *t);

/* ---------------------------------------------------------------- run folders
 * What a training run writes beside its model, the same whoever drives the
 * trainer (difftx train, Python's difftx.train(out=...)), so that either
 * continues the other's run (docs/training.md "The run folder"):
 *   OUT                                  the model, written at the end
 *   OUT.lock                             held while the run lives: a second
 *                                        run on OUT is refused
 *   CKPT_DIR/ckpt_<step, 8 digits>.safetensors   checkpoints (dtx_trainer_save's
 *                                        format), the newest `keep` of them
 *   LOG                                  JSON lines, each {"step": N, ...}:
 *                                        the step's loss, lr, grad_norm,
 *                                        tokens_per_s, elapsed_s; val_loss;
 *                                        checkpoint; resumed_from; error */
typedef struct dtx_run dtx_run;
typedef struct {
    const char *out;      /* the model file (not a folder, in a writable folder)   */
    const char *ckpt_dir; /* NULL: OUT.ckpt                                         */
    int64_t keep;         /* the newest checkpoints kept; 0: all                    */
    const char *log;      /* the JSON-lines log; NULL: none                         */
    int resume;           /* continue from CKPT_DIR's newest checkpoint (none: fresh);
                           * without it a folder that holds checkpoints is refused  */
    int read_only;        /* checks and lists only: no lock, no writes (the ranks
                           * other than 0 of a data-parallel run)                    */
} dtx_run_options;
/* Checks OUT and CKPT_DIR (DTX_ERR_USAGE for a folder given as OUT), takes
 * OUT.lock, removes what killed checkpoint writes left, and finds the
 * checkpoint to resume from; all before any training. */
dtx_status dtx_run_open(dtx_run **out, const dtx_run_options *o);
/* The newest checkpoint when resuming (NULL: a fresh run), and its step. */
const char *dtx_run_resume_path(const dtx_run *r);
int64_t dtx_run_resume_step(const dtx_run *r);
const char *dtx_run_ckpt_dir(const dtx_run *r);
/* Opens the log (a resumed run's is appended to, with a resumed_from line
 * at t's step); nothing without one. */
dtx_status dtx_run_start_log(dtx_run *r, const dtx_trainer *t);
/* The log's line for t's last step, with its speed and the run's time. */
dtx_status dtx_run_log_step(dtx_run *r, const dtx_trainer *t, double tokens_per_s, double elapsed_s);
dtx_status dtx_run_log_eval(dtx_run *r, int64_t step, double val_loss, double elapsed_s);
/* A step that stopped the run: its loss and why ("the loss is not finite"). */
dtx_status dtx_run_log_error(dtx_run *r, int64_t step, double loss, const char *why);
/* Writes the checkpoint of t's state (unless that step's is already
 * written), removes all but the newest `keep`, and logs it. A read_only run
 * (a rank other than 0) takes part in gathering the state and writes nothing. */
dtx_status dtx_run_checkpoint(dtx_run *r, dtx_trainer *t);
/* The newest checkpoint written or resumed from (NULL: none), its step
 * (-1: none) and the seconds its write took. */
const char *dtx_run_last_checkpoint(const dtx_run *r, int64_t *step, double *seconds);
/* Saves t's model to OUT (bf16 != 0: BF16 tensors), atomically. */
dtx_status dtx_run_save_model(dtx_run *r, dtx_trainer *t, int bf16);
/* Closes the log and releases OUT.lock. */
void dtx_run_close(dtx_run *r);

/* ---------------------------------------------------------------- evaluations
 * The paper's measurements on any model file (docs/evaluation.md): ppl,
 * needle, attn-mass, outliers, attn-map, icl, halluc. Each takes exactly the
 * flags of `difftx eval <name>` (the command is a thin client of this), so
 * the command, Python (difftx.eval) and any other caller run the same code
 * and get the same JSON. */

/* Called as work proceeds: `done` of `total` units of what `what` says
 * ("needle: N=2 R=2 length 504: prompts"); total == 0 makes `what` a
 * one-line note to show (done is then 0). */
typedef void (*dtx_progress_fn)(void *user, const char *what, int64_t done, int64_t total);

/* The evaluations: dtx_eval_count() of them; the i-th one's name, and its
 * one-line summary into *summary when not NULL (NULL when i is out of range). */
int dtx_eval_count(void);
const char *dtx_eval_name(int i, const char **summary);
/* Runs evaluation `name` with the flags argv[0..argc) ("--model", "m.st",
 * "--samples", "5", ...; `--flag=value` too). *text receives the readable
 * report the command prints, *json the JSON document (what --json writes,
 * which is also written there when the flags have --json); both malloc'd
 * (free() them), NULL on failure. "--help" gives the usage in *text and
 * NULL in *json. A bad flag or a value the model cannot take is
 * DTX_ERR_USAGE, before any model time is spent; progress may be NULL. */
dtx_status dtx_eval_run(const char *name, int argc, char **argv, dtx_progress_fn progress, void *user, char **text,
                        char **json);

/* ---------------------------------------------------------------- tokens */

/* Reads a text file of whitespace-separated non-negative token ids, or a
 * token shard (issue 4). Every id is checked against vocab_size when
 * vocab_size > 0. *out is malloc'd; free() it. */
dtx_status dtx_tokens_read(const char *path, int64_t vocab_size, int32_t **out, int64_t *n);
/* The tokens of path, a file or a folder's files (dtx_paths_add), in order
 * and concatenated: each a token file (dtx_tokens_read), or with tok a text
 * encoded with it (ordinary tokens), every id checked against vocab_size.
 * *n_files: the files read. An empty folder is DTX_ERR_IO ("PATH: the
 * folder holds no files"). *out is malloc'd; free() it. */
struct dtx_tokenizer;
dtx_status dtx_tokens_gather(const char *path, const struct dtx_tokenizer *tok, int64_t vocab_size, int32_t **out,
                             int64_t *n, int *n_files);

/* ---------------------------------------------------------------- sampling */

/* Greedy (temperature <= 0) or temperature sampling: appends n_new tokens to
 * a prompt of n_prompt tokens, writing all n_prompt + n_new into out. The
 * whole sequence must fit in max_seq_len. */
dtx_status dtx_sample(dtx_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n_new,
                      double temperature, uint64_t seed, int32_t *out);

/* ================================================================ tokenizer
 * Byte-level BPE (docs/tokenizer.md). Text is bytes: any byte string
 * (invalid UTF-8, NULs) encodes, and decoding gives it back exactly (but
 * for a SentencePiece model, which reads invalid UTF-8 as U+FFFD).
 * A tokenizer is one of four kinds, told apart by the file's content:
 *  - trained here (256 byte tokens = ids 0..255, merges from 256 on, then
 *    the specials <|bos|>, <|eos|>, <|pad|>), our file format; encoded with
 *    tiktoken's algorithm after the cl100k_base split pattern;
 *  - a tiktoken rank file such as cl100k_base.tiktoken: the same, encoding
 *    byte-identically to tiktoken;
 *  - a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2,
 *    Llama 3, Qwen 2 without NFC): its split patterns, merges, ignore_merges
 *    and added tokens, as the `tokenizers` library encodes with
 *    add_special_tokens=False;
 *  - a SentencePiece BPE tokenizer.model (Llama 2): its normalizer's dummy
 *    prefix and "\u2581", merges by score, byte fallback, as
 *    sentencepiece's encode.
 * A tokenizer is read-only once made: encode and decode may run from several
 * threads at once. */

typedef struct dtx_tokenizer dtx_tokenizer;

#define DTX_TOKENIZER_DEFAULT_VOCAB 4096

/* Trains on the files (a folder means every regular file below it, as for
 * every command: docs/data.md "What a folder means"). vocab_size counts
 * everything, byte tokens and specials included (at least 259); training
 * stops early, with a smaller vocabulary, when no pair occurs twice.
 * Deterministic: the same bytes give the same tokenizer. */
dtx_status dtx_tokenizer_train(dtx_tokenizer **out, const char *const *paths, int n_paths, int64_t vocab_size);
/* The same on texts in memory (lens[i] bytes each; each text is pre-tokenised
 * on its own, as each file is). */
dtx_status dtx_tokenizer_train_texts(dtx_tokenizer **out, const char *const *texts, const size_t *lens, int n_texts,
                                     int64_t vocab_size);
/* Loads any of the four kinds, told apart by content; path may also be a
 * Hugging Face folder (its tokenizer.json, else its tokenizer.model).
 * A rank file that is cl100k_base's (100256 ranks) gets cl100k_base's special
 * tokens (<|endoftext|> 100257, <|fim_prefix|> 100258, <|fim_middle|> 100259,
 * <|fim_suffix|> 100260, <|endofprompt|> 100276); other rank files get none. */
dtx_status dtx_tokenizer_load(dtx_tokenizer **out, const char *path);
/* Writes our format, atomically (temporary file, fsync, rename). Only a
 * tokenizer of our format or a tiktoken rank file can be written
 * (DTX_ERR_ARG otherwise: the format has no room for another's rules). */
dtx_status dtx_tokenizer_save(const dtx_tokenizer *t, const char *path);
void dtx_tokenizer_free(dtx_tokenizer *t);

typedef enum {
    DTX_ENCODE_ORDINARY = 0, /* special-token text is plain text (tiktoken encode_ordinary;
                                tokenizers' split_special_tokens)                                 */
    DTX_ENCODE_SPECIAL = 1,  /* special-token text becomes its id (tiktoken allowed_special="all";
                                tokenizers' encode; SentencePiece: <s>, </s>, <unk> become ids, the
                                text between encoded each as a whole)                            */
} dtx_encode_mode;

/* Encodes text[0, len). *ids is malloc'd (free() it), *n its length. */
dtx_status dtx_tokenizer_encode(const dtx_tokenizer *t, const char *text, size_t len, dtx_encode_mode mode,
                                int32_t **ids, int64_t *n);
/* Concatenates the tokens' bytes (a special gives its name). *text is
 * malloc'd with a terminating NUL after the *len bytes; free() it. An id that
 * names no token is DTX_ERR_ARG. */
dtx_status dtx_tokenizer_decode(const dtx_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len);

/* difftx tokenizer info's report on t (read from path): its source, the
 * vocabulary, the ordinary and special tokens; text, or one JSON line when
 * json. malloc'd (free() it); NULL when out of memory. */
char *dtx_tokenizer_describe(const dtx_tokenizer *t, const char *path, int json);
/* Largest id + 1 (the model's vocab_size; tiktoken's n_vocab). */
int64_t dtx_tokenizer_vocab_size(const dtx_tokenizer *t);
/* That tok and m were made together: DTX_ERR_ARG naming both sizes (and
 * the paths, for the message) when the tokenizer has more tokens than the
 * model's vocabulary, or fewer by more than padding the vocabulary to a
 * multiple of 64 or 128 (the model would read every id as another token). */
dtx_status dtx_tokenizer_check_model(const dtx_tokenizer *tok, const dtx_model *m, const char *tok_path,
                                     const char *model_path);
/* A model (dtx_model_open) and the tokenizer it was made with
 * (dtx_tokenizer_load, then dtx_tokenizer_check_model). *m and *tok are
 * what was loaded (NULL otherwise); the caller frees both either way. */
dtx_status dtx_model_open_with_tokenizer(dtx_model **m, dtx_tokenizer **tok, const char *model_path,
                                         const char *tokenizer_path, dtx_precision precision);
/* Byte-string tokens (256 + merges). */
int64_t dtx_tokenizer_num_ordinary(const dtx_tokenizer *t);
/* Tokens matched whole in text: the special tokens, and a tokenizer.json's
 * added tokens that are not special (dtx_tokenizer_special_is_special 0). */
int dtx_tokenizer_num_special(const dtx_tokenizer *t);
/* The i-th such token's text and id (NULL when i is out of range). */
const char *dtx_tokenizer_special(const dtx_tokenizer *t, int i, int32_t *id);
int dtx_tokenizer_special_is_special(const dtx_tokenizer *t, int i);
/* The id of a special token ("<|eos|>"), -1 when there is none. */
int32_t dtx_tokenizer_token_id(const dtx_tokenizer *t, const char *special);
/* The token that starts a text and the one that ends it, -1 for none: ours
 * <|bos|> and <|eos|> (or <|endoftext|>); a tokenizer.json's from the
 * tokenizer_config.json beside it (bos_token, eos_token), else its
 * post-processor's leading special (BOS) and a conventional name
 * (<|endoftext|>, <|end_of_text|>, </s>, <|im_end|>: EOS); SentencePiece's
 * bos_id and eos_id. */
int32_t dtx_tokenizer_bos(const dtx_tokenizer *t);
int32_t dtx_tokenizer_eos(const dtx_tokenizer *t);
/* A token's bytes (not NUL-terminated) and length; NULL for an id with no token. */
const char *dtx_tokenizer_token_bytes(const dtx_tokenizer *t, int32_t id, size_t *len);
/* "difftx" (trained here, or our file format), "tiktoken" (a rank file),
 * "huggingface" (tokenizer.json) or "sentencepiece" (tokenizer.model). */
const char *dtx_tokenizer_source(const dtx_tokenizer *t);
/* ============================================================ end tokenizer */

/* ===================================================================== data
 * Token shards (docs/data.md): the binary form of a tokenised corpus that
 * `difftx prepare` writes. A 64-byte little-endian header (magic "DTXTOKS\0",
 * version 1, token width, vocab_size, token count, header size, eos id,
 * document count, reserved), then count tokens of `width` bytes each,
 * little-endian: width 2 when vocab_size <= 65536, else 4.
 *
 * A shard is opened read-only with mmap and checked whole before use (magic,
 * version, width, header size, that the file is exactly header + count *
 * width bytes, every id < vocab_size); a failure is one line naming the file
 * and the offending field, token index or byte offset. An open shard is
 * read-only: several threads may read and sample from it at once. */

#define DTX_SHARD_MAGIC "DTXTOKS" /* 8 bytes with its NUL */
#define DTX_SHARD_VERSION 1
#define DTX_SHARD_HEADER_SIZE 64

typedef struct dtx_shard dtx_shard;

/* Maps and checks the shard at path. vocab_size > 0 must equal the header's
 * (DTX_ERR_ARG otherwise: the shard was made with another tokenizer);
 * vocab_size <= 0 accepts the header's. */
dtx_status dtx_shard_open(dtx_shard **out, const char *path, int64_t vocab_size);
void dtx_shard_close(dtx_shard *s);

int64_t dtx_shard_count(const dtx_shard *s);      /* tokens                            */
int64_t dtx_shard_vocab_size(const dtx_shard *s);
int dtx_shard_width(const dtx_shard *s);          /* bytes per token: 2 or 4           */
int32_t dtx_shard_eos_id(const dtx_shard *s);     /* document separator, -1 when none  */
int64_t dtx_shard_num_docs(const dtx_shard *s);   /* documents written, 0: not recorded */
/* Token i, 0 <= i < count (asserted). */
int32_t dtx_shard_get(const dtx_shard *s, int64_t i);
/* Copies tokens [start, start + n) into dst; DTX_ERR_ARG when out of range. */
dtx_status dtx_shard_read(const dtx_shard *s, int64_t start, int64_t n, int32_t *dst);

/* B random windows of T + 1 consecutive tokens: row r starts at
 * next(rng) mod (count - T); inputs[r] = window[0, T), targets[r] =
 * window[1, T] ([B, T] each, row-major). Advances rng by exactly B draws.
 * DTX_ERR_ARG when B < 1, T < 1 or the shard holds fewer than T + 1 tokens. */
dtx_status dtx_shard_sample_batch(const dtx_shard *s, dtx_rng *rng, int64_t B, int64_t T, int32_t *inputs,
                                  int32_t *targets);
/* In order, for evaluation: row r is the window of T + 1 tokens starting at
 * *pos, and *pos advances by T, so consecutive windows share one token and
 * every token after the first is a target once. When the next window does
 * not fit (*pos + T + 1 > count): wrap != 0 restarts at 0 (always B rows);
 * wrap == 0 stops, and *rows (< B, possibly 0) says how many rows were
 * filled; the last (count - 1) mod T targets are then never visited. Start
 * with *pos = 0. DTX_ERR_ARG for B < 1, T < 1, *pos outside [0, count), or
 * a shard shorter than T + 1 tokens. rows may be NULL. */
dtx_status dtx_shard_sequential_batch(const dtx_shard *s, int64_t *pos, int wrap, int64_t B, int64_t T,
                                      int32_t *inputs, int32_t *targets, int64_t *rows);

/* Writing, streamed and atomic: tokens go to PATH.tmp.PID, and commit
 * fills in the header, fsyncs and renames it over PATH. eos_id (-1: none)
 * is recorded in the header and appended by end_document. */
typedef struct dtx_shard_writer dtx_shard_writer;
dtx_status dtx_shard_writer_open(dtx_shard_writer **out, const char *path, int64_t vocab_size, int32_t eos_id);
/* Appends n tokens; an id outside [0, vocab_size) is DTX_ERR_ARG (nothing of
 * this call is written). */
dtx_status dtx_shard_writer_append(dtx_shard_writer *w, const int32_t *tokens, int64_t n);
/* Ends a document: counts it, and appends eos_id when there is one. */
dtx_status dtx_shard_writer_end_document(dtx_shard_writer *w);
int64_t dtx_shard_writer_count(const dtx_shard_writer *w);
/* Both free w. commit publishes the file; abort removes the temporary. */
dtx_status dtx_shard_writer_commit(dtx_shard_writer *w);
void dtx_shard_writer_abort(dtx_shard_writer *w);
/* One call: tokens [0, n) as a shard with no eos and no document count. */
dtx_status dtx_shard_write(const char *path, const int32_t *tokens, int64_t n, int64_t vocab_size);
/* ================================================================= end data */

/* =============================================================== generation
 * Cached decoding (docs/generate.md). A KV cache holds, for every layer, the
 * post-RoPE keys and the values of the tokens seen so far:
 *   K [n_layers, max_len, kv_dim] and V [n_layers, max_len, kv_dim] floats,
 * kv_dim = n_kv_heads·2d (DIFF) or n_kv_heads·d (Transformer), so
 * 2·n_layers·max_len·kv_dim·sizeof(dtx_real) bytes (dtx_kvcache_bytes);
 * or, a bf16 cache (DTX_KV_BF16), the same in bf16: half the bytes, to keep
 * and to read at every decode step. A bf16 cache rounds each new key (after
 * RoPE) and value to bf16, nearest even, as it stores it, and every
 * attention of the model's steps, over a prompt's own keys or the cache,
 * reads the rounded values, so its logits are those of a model whose keys
 * and values are rounded so, not the fp32 cache's bits (docs/generate.md
 * gives the size of the difference). Not with quantised attention logits.
 * dtx_model_prefill runs the prompt through the model in one batched pass and
 * writes its keys and values into the cache; dtx_model_decode then feeds one
 * token at a time (position = tokens already cached). Both return the logits
 * of the last token, equal (to rounding) to the last row of dtx_model_forward
 * over the whole sequence so far. They honour the model's matmul precision
 * and read the parameters as they are at each call, except that with bf16
 * products the one-row products (decode steps) read a bf16 copy of the
 * parameters kept in the cache, made once per sequence (at its first such
 * step after the cache was empty). A cache belongs to one model shape
 * (checked); one sequence at a time; not thread-safe. */

typedef struct dtx_kvcache dtx_kvcache;

/* A cache for sequences of up to max_len tokens (1 <= max_len <=
 * max_seq_len; max_len <= 0 means max_seq_len). */
dtx_status dtx_kvcache_init(dtx_kvcache **out, const dtx_model *m, int64_t max_len);
/* What a cache keeps its keys and values in. */
typedef enum { DTX_KV_FP32 = 0, DTX_KV_BF16 = 1 } dtx_kv_type;
/* dtx_kvcache_init with the keys and values kept in type (DTX_KV_FP32 is
 * dtx_kvcache_init). */
dtx_status dtx_kvcache_init_type(dtx_kvcache **out, const dtx_model *m, int64_t max_len, dtx_kv_type type);
dtx_kv_type dtx_kvcache_type(const dtx_kvcache *c);
/* "fp32" / "bf16" (a flag's value) to a type; an error names anything else. */
dtx_status dtx_kv_type_parse(const char *s, dtx_kv_type *out);
const char *dtx_kv_type_name(dtx_kv_type t);
/* The cache type difftx's commands and Python package take unless told
 * (docs/generate.md, "Which cache"): bf16 for a model whose weights are bf16
 * used in place or quantised, which round each weight at least as coarsely
 * as a bf16 cache rounds a key or value; fp32 for fp32 weights, and when the
 * attention logits are quantised (which a bf16 cache cannot run). */
dtx_kv_type dtx_kv_type_for(const dtx_model *m);
void dtx_kvcache_free(dtx_kvcache *c);
/* Forgets the cached tokens (len = 0); keeps the memory. */
void dtx_kvcache_reset(dtx_kvcache *c);
/* Forgets all but the first len cached tokens (0 <= len <= dtx_kvcache_len;
 * DTX_ERR_ARG otherwise), so several continuations can share one prefilled
 * prefix: prefill the prefix, then per continuation append and truncate back. */
dtx_status dtx_kvcache_truncate(dtx_kvcache *c, int64_t len);
int64_t dtx_kvcache_len(const dtx_kvcache *c);     /* tokens cached            */
int64_t dtx_kvcache_max_len(const dtx_kvcache *c);
/* Bytes of the K and V arrays: 2·n_layers·max_len·kv_dim·sizeof(dtx_real),
 * or 2 bytes a value in bf16. */
size_t dtx_kvcache_bytes(const dtx_kvcache *c);
/* Bytes of the working buffers on top of that: rows of the longest prefill so
 * far, one step's attention scores, and with bf16 products the parameters'
 * bf16 copy (2 bytes each). */
size_t dtx_kvcache_scratch_bytes(const dtx_kvcache *c);

/* Appends tokens[0, n) (n >= 1) at positions len .. len + n − 1: one batched
 * pass (on an empty cache the fused flash attention; after earlier tokens each
 * row attends over the cache). logits_last [vocab], when non-NULL, receives
 * the logits of the last of them. DTX_ERR_ARG for a token out of range or
 * when the cache has no room for n more (nothing is appended then). */
dtx_status dtx_model_prefill(dtx_model *m, dtx_kvcache *c, const int32_t *tokens, int64_t n, dtx_real *logits_last);
/* Appends one token at position len and writes its logits [vocab] (when
 * non-NULL). DTX_ERR_ARG when the cache is full or the id is out of range. */
dtx_status dtx_model_decode(dtx_model *m, dtx_kvcache *c, int32_t token, dtx_real *logits);

/* One decode step of n sequences together (continuous batching): token i
 * appended to caches[i] (n distinct caches of this model's shape, each with
 * room) at its own position, the weights read from memory once for all n;
 * logits [n, vocab] (optional), row i exactly what dtx_model_decode(m,
 * caches[i], tokens[i], ...) gives, bit for bit. The first cache hosts the
 * step's working buffers (and, with bf16 products, the bf16 copy). Checks
 * everything before any work: DTX_ERR_ARG names the sequence. A cache's
 * observer hooks see only its own single-sequence steps. */
dtx_status dtx_model_decode_batch(dtx_model *m, dtx_kvcache *const *caches, const int32_t *tokens, int64_t n,
                                  dtx_real *logits);

/* Sampling: a plain configuration value. */
typedef struct {
    double temperature; /* <= 0: greedy (argmax, lowest id on ties)                  */
    int64_t top_k;      /* keep the k most probable tokens; 0: off                    */
    double top_p;       /* then the smallest set whose probability is >= top_p; 1: off */
    uint64_t seed;      /* for dtx_rng_seed                                     */
} dtx_sampler;
/* temperature 0.8, top_k 0, top_p 1, seed 1. */
dtx_sampler dtx_sampler_default(void);
/* DTX_ERR_ARG naming the field: top_k < 0, top_p outside (0, 1], a NaN. */
dtx_status dtx_sampler_validate(const dtx_sampler *s);

/* Draws a token from logits [V]: greedy when temperature <= 0; otherwise
 * p = softmax(logits / temperature), restricted to the top_k most probable
 * (when top_k > 0), then to the smallest most-probable set with cumulative
 * probability >= top_p (when top_p < 1), renormalised, one draw (ties in
 * probability are ordered by id). Without truncation the draw walks the ids
 * in order. Deterministic: the same rng state and logits give the same id;
 * advances rng by one draw (none when greedy). DTX_ERR_NOMEM when the
 * truncation's index buffer cannot be allocated. */
dtx_status dtx_sample_logits(const dtx_sampler *s, dtx_rng *rng, const dtx_real *logits, int64_t V,
                             int32_t *token);
/* ========================================================== end generation */


/* ================================================= CPU instruction set
 * The hand-written SIMD kernels (flash attention tiles, vector exp, softmax
 * rows, bf16 tiles) and oneDNN's matrix products run at one ISA level,
 * detected once per process (CPU flags and OS register support):
 *   DTX_ISA_PORTABLE     plain C (compiler-vectorised for the build's -march)
 *   DTX_ISA_AVX2         AVX2 + FMA (ymm): AMD Zen 1-3, Intel Haswell on
 *   DTX_ISA_AVX512       AVX-512 F/DQ/BW/VL (zmm)
 *   DTX_ISA_AVX512_BF16  AVX-512 with native bf16 (vdpbf16ps)
 * The environment variable DTX_ISA=portable|avx2|avx512|avx512bf16 caps it:
 * the level used is the lower of the CPU's and the one asked for, so every
 * path below the CPU's can run on one machine. It also caps oneDNN
 * (dnnl_set_max_cpu_isa) when set before the first matrix product. Without
 * native bf16 (level below AVX512_BF16, or oneDNN without a bf16 matmul),
 * the bf16 precision is emulated: operands rounded to bf16, products and
 * sums in fp32 on the fp32 kernels, the same numerics as native bf16. */
typedef enum { DTX_ISA_PORTABLE = 0, DTX_ISA_AVX2 = 1, DTX_ISA_AVX512 = 2, DTX_ISA_AVX512_BF16 = 3 } dtx_isa;
dtx_isa dtx_isa_cpu(void);         /* what the CPU supports                      */
dtx_isa dtx_isa_level(void);       /* what the kernels use (DTX_ISA applied)     */
const char *dtx_isa_name(dtx_isa i); /* "portable", "avx2", "avx512", "avx512bf16" */
/* 1 and *out set when s names a level (the DTX_ISA spellings), else 0. */
int dtx_isa_parse(const char *s, dtx_isa *out);
/* A one-line message when DTX_ISA holds something else (it is then
 * ignored), NULL when it is unset or valid. */
const char *dtx_isa_env_error(void);
/* Tests: a further cap on top of DTX_ISA (DTX_ISA_AVX512_BF16 lifts it);
 * returns the previous one. Call between kernel calls, outside parallel
 * regions. oneDNN keeps the cap it had at its first use. */
dtx_isa dtx_isa_set_cap(dtx_isa cap);
/* 1 when the CPU reports AVX-512 VNNI (the int8 × int8 one-row product
 * then adds with vpdpbusd). */
int dtx_isa_cpu_has_vnni(void);
/* 1 when the CPU runs 512-bit operations and loads at full width (AMD
 * family 1Ah, Zen 5, on), 0 where they are split in two 256-bit halves (Zen
 * 4) or unknown. The AVX-512 int8 one-row products (int8 × fp32, and
 * int8 × int8 with VNNI) read one row at a time there, two or four side by
 * side elsewhere (src/kernels/gemv_avx512.c says why).
 * dtx_isa_set_full_width(1 or 0) overrides it for tests, -1 restores what
 * the CPU says; returns the value before. */
int dtx_isa_full_width(void);
int dtx_isa_set_full_width(int v);
/* What runs the matrix products: oneDNN's ISA ("avx2", "avx512_core_bf16",
 * ...; "none" in the double build) and whether its bf16 matmul is native
 * (1) or emulated by difftx on fp32 primitives (0). Creates oneDNN's
 * engine on the first call. */
const char *dtx_matmul_isa_name(void);
int dtx_matmul_bf16_native(void);
const char *dtx_matmul_library(void); /* "oneDNN 2.6.3" */

#ifdef __cplusplus
}
#endif
#endif /* DIFFTX_H */
