/* difftx quantize: a calibrated int8 or 4-bit copy of a model
 * (docs/quantize.md). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

static const char *CMD = "quantize";
enum { RECOMMENDED_SAMPLES = 300 };

static const char USAGE[] =
    "usage: difftx quantize --model MODEL --calib FILE|DIR --scheme SCHEME --out Q.safetensors [flags]\n"
    "\n"
    "Writes a quantised copy of MODEL: its linear weights (q/k/v/out projections,\n"
    "w1, w3, w2, the embedding, an untied output) in 8 or 4 bits, calibrated on\n"
    "--calib-samples sequences of --calib-len tokens cut from the calibration\n"
    "tokens at evenly spaced places. Every command that reads a model reads it.\n"
    "\n";

/* --calib: a file, or a folder's files (dtx_tokens_gather). */
static int read_calib(const char *path, const char *tokenizer, int64_t vocab, int32_t **ids, int64_t *n,
                      int *n_files) {
    dtx_tokenizer *tok = NULL;
    if (tokenizer && dtx_tokenizer_load(&tok, tokenizer) != DTX_OK) return lib_error(CMD);
    int rc = EXIT_OK;
    if (dtx_tokens_gather(path, tok, vocab, ids, n, n_files) != DTX_OK)
        rc = runtime_error(CMD, "--calib %s", dtx_last_error());
    dtx_tokenizer_free(tok);
    return rc;
}

int cmd_quantize(int argc, char **argv) {
    const char *model_path = NULL, *calib = NULL, *tokenizer = NULL, *out = NULL, *a16_list = NULL;
    int scheme = -1, method = 0, no_search = 0, act16 = 0;
    int64_t samples = RECOMMENDED_SAMPLES, len = 0;
    double percentile = 99.99;
    flag fl[] = {
        DTX_FLAG_MODEL(&model_path),
        FLAG_STR("--calib", &calib, .metavar = "FILE|DIR",
                 .help = "calibration tokens: a token shard or whitespace-separated ids; a folder: every regular file "
                         "in it, in name order; with --tokenizer, text encoded with it [required]"),
        FLAG_STR("--tokenizer", &tokenizer, .metavar = "TOK", .help = "read --calib as text"),
        FLAG_CHOICE("--scheme", &scheme, "w8a16|w8a8|w4a16",
                    .help = "[required] w8a16: int8 weights, one scale per output channel, bf16 activations; w8a8: the "
                            "same weights, int8 activations (every linear input, and the attention's q and k) with "
                            "static calibrated scales; w4a16: the layers' weights 4-bit in groups of 32 (embedding and "
                            "output int8), bf16 activations"),
        FLAG_STR("--out", &out, .metavar = "PATH", .help = "the quantised model", .required = 1),
        FLAG_INT("--calib-samples", &samples, 1, 1000000, .metavar = "N",
                 .help = "calibration sequences (default 300, the recommended minimum: fewer works, with a warning)"),
        FLAG_INT("--calib-len", &len, 1, INT64_MAX, .metavar = "L",
                 .help = "tokens per sequence (default max_seq_len, at most 512)"),
        FLAG_CHOICE("--act-method", &method, "absmax|percentile|mse",
                    .help = "w8a8's activation ranges: the absolute maximum (default), a percentile of |x|, or the range "
                            "with the least squared error"),
        FLAG_CHOICE("--act16", &act16, "bf16|fp16",
                    .help = "w8a16 and w4a16's activations (default bf16; fp16: IEEE half, past 65504 infinite as in "
                            "fp16 hardware)"),
        FLAG_STR("--a16-inputs", &a16_list, .metavar = "LIST",
                 .help = "w8a8: these kinds of input stay bf16 (comma-separated: attn_in, attn_out, ffn_in, "
                         "ffn_hidden, qk, output)"),
        FLAG_REAL("--percentile", &percentile, 50, 1, 100, 0, .metavar = "P",
                  .help = "for percentile, in (50, 100] (default 99.99)"),
        FLAG_BOOL("--no-clip-search", &no_search, 1,
                  .help = "weight scales from each row's (group's) absolute maximum, instead of the clipping with the "
                          "least output error on the calibration inputs"),
    };
    int n_fl = (int)(sizeof fl / sizeof fl[0]);
    switch (flags_parse(CMD, USAGE, fl, n_fl, argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (!calib) return usage_error(CMD, "--calib is required (calibration tokens, or text with --tokenizer)");
    if (scheme < 0) return usage_error(CMD, "--scheme is required (w8a16, w8a8 or w4a16)");
    if ((flags_get(fl, n_fl, "--act-method")->seen || flags_get(fl, n_fl, "--percentile")->seen) && scheme != 1)
        return usage_error(CMD, "--act-method and --percentile set w8a8's activation ranges; --scheme is %s",
                           scheme == 0 ? "w8a16" : "w4a16");
    unsigned a16 = 0;
    if (a16_list) {
        if (scheme != 1) return usage_error(CMD, "--a16-inputs keeps some of w8a8's inputs 16-bit; --scheme is not w8a8");
        char buf[256];
        snprintf(buf, sizeof buf, "%s", a16_list);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            unsigned k = 0;
            for (unsigned b = 1; b <= DTX_A8_ALL; b <<= 1)
                if (!strcmp(t, dtx_a8_kind_name(b))) k = b;
            if (!k)
                return usage_error(CMD, "--a16-inputs: '%s' is not attn_in, attn_out, ffn_in, ffn_hidden, qk or output", t);
            a16 |= k;
        }
    }
    if (flags_get(fl, n_fl, "--act16")->seen && scheme == 1)
        return usage_error(CMD, "--act16 sets w8a16 and w4a16's activations; w8a8's are int8");
    if (flags_get(fl, n_fl, "--percentile")->seen && method != DTX_CALIB_PERCENTILE)
        return usage_error(CMD, "--percentile goes with --act-method percentile");

    dtx_model *m = NULL;
    if (cli_model_load(&m, model_path, DTX_PREC_FP32) != DTX_OK) return lib_error(CMD);
    const dtx_config *c = dtx_model_config(m);
    int rc = EXIT_OK;
    if (dtx_model_wquant(m) != DTX_WQ_NONE)
        rc = runtime_error(CMD, "%s is already quantised (%s)", model_path, dtx_wquant_name(dtx_model_wquant(m)));
    if (!len) len = c->max_seq_len < 512 ? c->max_seq_len : 512;
    if (rc == EXIT_OK && len > c->max_seq_len)
        rc = usage_error(CMD, "--calib-len %lld exceeds the model's max_seq_len %lld", (long long)len,
                         (long long)c->max_seq_len);
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    int n_files = 0;
    if (rc == EXIT_OK) rc = read_calib(calib, tokenizer, c->vocab_size, &ids, &n_ids, &n_files);
    if (rc == EXIT_OK && n_ids < len)
        rc = runtime_error(CMD, "--calib %s: %lld tokens, fewer than one sequence of --calib-len %lld", calib,
                           (long long)n_ids, (long long)len);
    int32_t *seqs = NULL;
    if (rc == EXIT_OK && !(seqs = malloc(sizeof(int32_t) * (size_t)(samples * len))))
        rc = runtime_error(CMD, "out of memory for %lld calibration sequences", (long long)samples);
    if (rc == EXIT_OK) {
        if (samples < RECOMMENDED_SAMPLES)
            fprintf(stderr, "difftx quantize: warning: %lld calibration samples; at least %d are recommended\n",
                    (long long)samples, RECOMMENDED_SAMPLES);
        /* evenly spaced windows over the whole stream (overlapping when it is short) */
        for (int64_t i = 0; i < samples; i++) {
            int64_t start = samples > 1 ? (n_ids - len) * i / (samples - 1) : 0;
            memcpy(seqs + i * len, ids + start, sizeof(int32_t) * (size_t)len);
        }
        dtx_quant_options o = dtx_quant_options_default((dtx_wquant)(scheme + 1));
        o.act_method = (dtx_calib_method)method;
        o.percentile = percentile;
        o.clip_search = !no_search;
        o.act_fp16 = act16;
        o.a16_inputs = a16;
        dtx_quant_summary sum;
        double t0 = dtx_now_s();
        if (dtx_model_quantize(m, &o, seqs, samples, len, &sum) != DTX_OK) rc = lib_error(CMD);
        double t1 = dtx_now_s();
        char desc[1024];
        char act[192];
        if (o.scheme != DTX_WQ_W8A8) snprintf(act, sizeof act, "%s", act16 ? "fp16" : "bf16");
        else if (o.act_method == DTX_CALIB_PERCENTILE) snprintf(act, sizeof act, "int8 percentile %g", percentile);
        else snprintf(act, sizeof act, "int8 %s", dtx_calib_method_name(o.act_method));
        if (a16) {
            size_t k = strlen(act);
            snprintf(act + k, sizeof act - k, " (bf16: %.100s)", a16_list);
        }
        snprintf(desc, sizeof desc, "%s (%d file%s, %lld tokens); %lld samples x %lld tokens; activations %s; "
                 "weight clipping %s", calib, n_files, n_files == 1 ? "" : "s", (long long)n_ids, (long long)samples,
                 (long long)len, act, o.clip_search ? "searched" : "absmax");
        if (rc == EXIT_OK && (dtx_model_set_meta(m, "quant_calib", desc) != DTX_OK ||
                              dtx_model_save(m, out, 0) != DTX_OK))
            rc = lib_error(CMD);
        if (rc == EXIT_OK) {
            double secs = t1 - t0;
            printf("scheme       %s\n", dtx_wquant_name(o.scheme));
            printf("calibration  %s\n", desc);
            printf("weight clip  mean %.4f of the absolute maximum\n", sum.mean_clip);
            if (o.scheme == DTX_WQ_W8A8) printf("act ranges   mean %.4f of the absolute maximum\n", sum.act_clip);
            printf("time         %.2f s\n", secs);
            printf("wrote        %s\n", out);
        }
    }
    free(seqs);
    free(ids);
    dtx_model_free(m);
    return rc == EXIT_OK ? finish_stdout(CMD) : rc;
}
