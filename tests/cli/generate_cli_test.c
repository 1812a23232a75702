/* difftx generate, run as a separate process: a tokenizer trained inside the
 * test, a tiny model that memorised one sentence (so greedy generation has a
 * known answer and ends at <|eos|>), and a random model whose <|eos|> can
 * never win (so only the token limits stop it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "test.h"

static const char SENTENCE[] = "the cat sat on the mat.";

/* The tokenizer (trained once) and its file. */
static dtx_tokenizer *tok;
static const char *tok_path;

static int ensure_tokenizer(void) {
    if (tok) return 0;
    const char *texts[] = {
        "the cat sat on the mat. the dog sat on the log. a cat and a dog and a mat.",
        "on the mat the cat sat; on the log the dog sat. the end of the story.",
        SENTENCE,
    };
    tok = test_tokenizer_file(texts, 3, 300, "gen.tok", &tok_path);
    return tok ? 0 : -1;
}

static dtx_config gen_config(int64_t vocab, int64_t max_seq_len) {
    dtx_config c = dtx_config_default();
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.vocab_size = vocab;
    c.ffn_dim = 64;
    c.max_seq_len = max_seq_len;
    return c;
}

/* [<|bos|>] SENTENCE [<|eos|>] into seq; returns its length (-1 on failure). */
static int64_t sentence_ids(int32_t *seq, int64_t cap) {
    int32_t *ids;
    int64_t n;
    if (dtx_tokenizer_encode(tok, SENTENCE, strlen(SENTENCE), DTX_ENCODE_ORDINARY, &ids, &n) != DTX_OK) return -1;
    if (n + 2 > cap) {
        free(ids);
        return -1;
    }
    seq[0] = dtx_tokenizer_token_id(tok, "<|bos|>");
    memcpy(seq + 1, ids, (size_t)n * sizeof *ids);
    seq[n + 1] = dtx_tokenizer_token_id(tok, "<|eos|>");
    free(ids);
    return n + 2;
}

/* A model that memorised <|bos|> SENTENCE <|eos|>, saved once. */
static const char *memorised_model(void) {
    static const char *path;
    if (path) return path;
    if (ensure_tokenizer()) return NULL;
    int32_t seq[64];
    int64_t n = sentence_ids(seq, 64);
    if (n < 4) return NULL;
    dtx_config c = gen_config(dtx_tokenizer_vocab_size(tok), 32);
    dtx_model *m = NULL;
    dtx_optimizer *opt = NULL;
    if (dtx_model_init(&m, &c, 3) != DTX_OK) return NULL;
    dtx_optim_config o = dtx_optim_default();
    o.lr = 1e-2;
    o.min_lr = 1e-3;
    o.warmup_steps = 10;
    o.total_steps = 200;
    o.weight_decay = 0;
    double loss = 1e9;
    if (dtx_optimizer_init(&opt, m, &o) == DTX_OK) {
        for (int s = 0; s < o.total_steps; s++) {
            dtx_model_zero_grad(m);
            if (dtx_model_forward(m, seq, seq + 1, 1, n - 1, NULL, &loss) || dtx_model_backward(m, 1.0) ||
                dtx_optimizer_step(opt, NULL, NULL))
                break;
        }
    }
    const char *p = test_path("memorised.safetensors");
    int ok = loss < 0.05 && dtx_model_save(m, p, 0) == DTX_OK;
    if (!ok) fprintf(stderr, "    memorised model: loss %.4f\n", loss);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
    return ok ? (path = p) : NULL;
}

/* A random model (vocab = the tokenizer's, or as given) with the <|eos|>
 * embedding row zeroed: tied, so its logit is exactly 0 and greedy decoding
 * never picks it. */
static const char *random_model(const char *name, int64_t vocab, int64_t max_seq_len) {
    if (ensure_tokenizer()) return NULL;
    if (vocab <= 0) vocab = dtx_tokenizer_vocab_size(tok);
    dtx_config c = gen_config(vocab, max_seq_len);
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, 9) != DTX_OK) return NULL;
    const dtx_tensor_info *emb = dtx_model_find(m, "tok_embeddings.weight");
    int32_t eos = dtx_tokenizer_token_id(tok, "<|eos|>");
    if (emb && eos >= 0 && eos < vocab)
        memset(dtx_model_params(m) + emb->offset + (size_t)eos * (size_t)c.dim, 0, (size_t)c.dim * sizeof(dtx_real));
    const char *p = test_path(name);
    dtx_status st = dtx_model_save(m, p, 0);
    dtx_model_free(m);
    return st == DTX_OK ? p : NULL;
}

/* The "prefill: N tokens ...; decode: M tokens ...; KV cache T" line holds these counts. */
static int summary(long prefill, long decode) {
    char want[96];
    snprintf(want, sizeof want, "prefill: %ld tokens in ", prefill);
    const char *p = strstr(cli_out, want);
    if (!p) return 0;
    snprintf(want, sizeof want, " tok/s); decode: %ld tokens in ", decode);
    p = strstr(p, want);
    return p && strstr(p, " tok/s); KV cache ") != NULL;
}

TEST(generate_cli_continues_the_memorised_sentence) {
    const char *mp = memorised_model();
    REQUIRE(mp);
    /* prompt: <|bos|> "the" " cat" (3 tokens); the rest " sat on the mat." then <|eos|> */
    int32_t seq[64];
    int64_t n = sentence_ids(seq, 64);
    int32_t *pre;
    int64_t np;
    REQUIRE(dtx_tokenizer_encode(tok, "the cat", 7, DTX_ENCODE_ORDINARY, &pre, &np) == DTX_OK);
    free(pre);
    long rest = (long)(n - 2 - np); /* tokens of " sat on the mat." */
    int rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0", mp, tok_path);
    CHECKF(rc == 0, "exit %d: %s", rc, cli_out);
    CHECKF(strncmp(cli_out, " sat on the mat.prefill: ", 25) == 0, "got: %s", cli_out);
    /* the last text token came from a decode step; <|eos|> was sampled after it */
    CHECKF(summary((long)np + 1, rest), "want prefill %ld, decode %ld: %s", (long)np + 1, rest, cli_out);
    /* the same from stdin, and with bf16 products */
    const char *pf = test_path("prompt.txt");
    REQUIRE(write_file(pf, "the cat", 7) == 0);
    rc = cli("generate --model '%s' --tokenizer '%s' --temperature 0 < '%s'", mp, tok_path, pf);
    CHECKF(rc == 0 && strncmp(cli_out, " sat on the mat.prefill: ", 25) == 0, "stdin: %d %s", rc, cli_out);
    /* bf16: stdout holds only the text; where bf16 is emulated, one note line on stderr says so */
    rc = cli_split("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0 --precision bf16", mp,
                   tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, " sat on the mat.", 16) == 0 && !strstr(cli_out, "difftx:"), "bf16: %d %s", rc,
           cli_out);
    int native = dtx_matmul_bf16_native() && dtx_isa_level() >= DTX_ISA_AVX512_BF16;
    CHECKF(native ? !strstr(cli_err, "emulated") : strstr(cli_err, "difftx: note: bf16 is emulated here") == cli_err,
           "bf16 stderr: %s", cli_err);
    /* a bf16 KV cache: the memorised text still */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0 --kv-cache bf16", mp, tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, " sat on the mat.prefill: ", 25) == 0, "kv-cache bf16: %d %s", rc, cli_out);
    CHECKF(cli_has("KV cache bf16"), "kv-cache bf16: the summary does not say so: %s", cli_out);
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --kv-cache fp16", mp, tok_path);
    CHECKF(rc == 2 && cli_has("--kv-cache"), "kv-cache fp16: %d %s", rc, cli_out);
    /* auto, the default: an fp32 model's cache is fp32 (dtx_kv_type_for; bf16 and quantised weights:
     * tests/model/in_place_test.c) */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0 --kv-cache auto", mp, tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, " sat on the mat.prefill: ", 25) == 0 && cli_has("KV cache fp32"),
           "kv-cache auto: %d %s", rc, cli_out);
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0", mp, tok_path);
    CHECKF(rc == 0 && cli_has("KV cache fp32"), "kv-cache default: %d %s", rc, cli_out);
    /* a low temperature with top-k / top-p still follows the memorised text */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0.3 --top-k 3 --top-p 0.9 "
             "--seed 4",
             mp, tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, " sat on the mat.prefill: ", 25) == 0, "top-k/top-p: %d %s", rc, cli_out);
    /* --max-tokens 2: two tokens, the second from the one decode step */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0 --max-tokens 2", mp, tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, " sat on", 7) == 0 && !cli_has("mat") && summary((long)np + 1, 1), "max 2: %d %s",
           rc, cli_out);
    /* --max-tokens 1: the prefill's token only */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat' --temperature 0 --max-tokens 1", mp, tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, " sat", 4) == 0 && summary((long)np + 1, 0), "max 1: %d %s", rc, cli_out);
}

TEST(generate_cli_stops_at_max_tokens_and_max_seq_len) {
    const char *mp = random_model("random12.safetensors", 0, 12);
    REQUIRE(mp);
    /* <|bos|> + 3 prompt tokens; the sequence may grow to 12: 8 new tokens, 7 decodes */
    int32_t *ids;
    int64_t np;
    REQUIRE(dtx_tokenizer_encode(tok, "the cat sat", 11, DTX_ENCODE_ORDINARY, &ids, &np) == DTX_OK);
    free(ids);
    int rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat sat' --temperature 0 --max-tokens 100", mp,
                 tok_path);
    CHECKF(rc == 0 && summary((long)np + 1, 12 - (long)np - 2), "max_seq_len: %d %s", rc, cli_out);
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat sat' --temperature 0 --max-tokens 5", mp,
             tok_path);
    CHECKF(rc == 0 && summary((long)np + 1, 4), "max-tokens: %d %s", rc, cli_out);
    /* --no-bos: one prompt token fewer */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat sat' --temperature 0 --max-tokens 5 --no-bos",
             mp, tok_path);
    CHECKF(rc == 0 && summary((long)np, 4), "no-bos: %d %s", rc, cli_out);
    /* sampling is deterministic for a seed */
    char first[sizeof cli_out];
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the' --temperature 1 --seed 5 --max-tokens 6", mp,
             tok_path);
    REQUIRE(rc == 0);
    char *cut = strstr(cli_out, "prefill: ");
    REQUIRE(cut);
    *cut = '\0';
    strcpy(first, cli_out);
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the' --temperature 1 --seed 5 --max-tokens 6", mp,
             tok_path);
    CHECKF(rc == 0 && strncmp(cli_out, first, strlen(first)) == 0 && strstr(cli_out, "prefill: ") == cli_out + strlen(first),
           "seed 5 twice: '%s' then '%s'", first, cli_out);
}

TEST(generate_cli_refuses_bad_input) {
    const char *mp = random_model("random12b.safetensors", 0, 12);
    REQUIRE(mp);
    struct {
        const char *args, *want;
    } usage[] = {
        {"--top-p 0", "--top-p"},          {"--top-p 1.5", "--top-p"},
        {"--top-k -1", "--top-k"},         {"--max-tokens 0", "--max-tokens"},
        {"--temperature -1", "--temperature"}, {"--precision fp16", "--precision"},
        {"--bogus 1", "unknown flag"},     {"--seed -3", "--seed"},
    };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        int rc = cli("generate --model '%s' --tokenizer '%s' --prompt hi %s", mp, tok_path, usage[i].args);
        CHECKF(rc == 2 && strncmp(cli_out, "difftx generate: ", 17) == 0 && cli_has(usage[i].want) &&
                   strchr(cli_out, '\n') == cli_out + strlen(cli_out) - 1,
               "%s: exit %d: %s", usage[i].args, rc, cli_out);
    }
    int rc = cli("generate --tokenizer '%s' --prompt hi", tok_path);
    CHECKF(rc == 2 && cli_has("--model is required"), "%d %s", rc, cli_out);
    rc = cli("generate --model '%s' --prompt hi", mp);
    CHECKF(rc == 2 && cli_has("--tokenizer is required"), "%d %s", rc, cli_out);
    /* a prompt longer than max_seq_len − 1 = 11 tokens */
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt 'the cat sat on the mat. the dog sat on the log.'", mp,
             tok_path);
    CHECKF(rc == 2 && cli_has("max_seq_len 12") && cli_has("at most 11") && strchr(cli_out, '\n') == cli_out + strlen(cli_out) - 1,
           "too long: %d %s", rc, cli_out);
    /* empty prompt without <|bos|> */
    const char *empty = test_path("empty.txt");
    REQUIRE(write_file(empty, "", 0) == 0);
    rc = cli("generate --model '%s' --tokenizer '%s' --no-bos < '%s'", mp, tok_path, empty);
    CHECKF(rc == 2 && cli_has("empty"), "empty: %d %s", rc, cli_out);
    /* ... but with <|bos|> an empty prompt is fine */
    rc = cli("generate --model '%s' --tokenizer '%s' --temperature 0 --max-tokens 3 < '%s'", mp, tok_path, empty);
    CHECKF(rc == 0 && summary(1, 2), "bos only: %d %s", rc, cli_out);
    /* runtime: a model whose vocabulary is smaller than the tokenizer's; missing files */
    const char *small = random_model("small_vocab.safetensors", dtx_tokenizer_vocab_size(tok) - 1, 12);
    REQUIRE(small);
    rc = cli("generate --model '%s' --tokenizer '%s' --prompt hi", small, tok_path);
    CHECKF(rc == 1 && cli_has("difftx generate: ") && cli_has("vocab_size"), "small vocab: %d %s", rc, cli_out);
    rc = cli("generate --model '%s' --tokenizer /nonexistent/tok --prompt hi", mp);
    CHECKF(rc == 1 && cli_has("difftx generate: "), "no tokenizer: %d %s", rc, cli_out);
    rc = cli("generate --model /nonexistent/m.safetensors --tokenizer '%s' --prompt hi", tok_path);
    CHECKF(rc == 1 && cli_has("difftx generate: "), "no model: %d %s", rc, cli_out);
    rc = cli("generate --help");
    CHECKF(rc == 0 && cli_has("usage: difftx generate") && cli_has("--top-p"), "help: %d %s", rc, cli_out);
    rc = cli("help generate");
    CHECKF(rc == 0 && cli_has("usage: difftx generate"), "help generate: %d %s", rc, cli_out);
}
