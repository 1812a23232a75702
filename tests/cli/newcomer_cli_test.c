/* What a new user tried and difftx took badly, each refused with one line
 * naming what is wrong, before any work, and the right exit status: one table
 * of command lines (run by one loop) over the files a newcomer hands it by
 * mistake: a folder, an empty corpus, a text file where a model belongs, a
 * model whose weights went NaN, a tokenizer made for another model, and a
 * terminal where a prompt was expected. */
#define _XOPEN_SOURCE 600
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

typedef struct {
    char cmdline[1024];
    int rc;            /* the exit status: 2 usage, 1 runtime */
    const char *cmd;   /* "difftx CMD: " starts the line */
    const char *s1, *s2;
} refusal;

static const char *texts[] = {"the quick brown fox jumps over the lazy dog. ", "a second text, with other words in it. "};

/* A model of vocab V whose w2 of layer 1 holds a NaN when nan is set. */
static const char *model_of(const char *name, int64_t vocab, int nan) {
    dtx_config c = test_config(DTX_ARCH_DIFF, 32, 2, 2, 2, vocab, 64, 64, 1);
    dtx_model *m;
    if (dtx_model_init(&m, &c, 5) != DTX_OK) return NULL;
    if (nan) dtx_model_params(m)[dtx_model_find(m, "layers.1.feed_forward.w2.weight")->offset + 3] = NAN;
    const char *p = test_path(name);
    dtx_status st = dtx_model_save(m, p, 0);
    dtx_model_free(m);
    return st == DTX_OK ? p : NULL;
}

TEST(cli_newcomer_refusals) {
    const char *folder = test_path("a_folder");
    REQUIRE(mkdir(folder, 0755) == 0);
    const char *empty = test_path("empty.txt");
    REQUIRE(write_file(empty, "", 0) == 0);
    const char *text = test_path("notes.txt");
    REQUIRE(write_file(text, "some notes, not a model\n", 24) == 0);
    const char *tok = NULL, *tokens = test_path("ids.txt");
    dtx_tokenizer *t = test_tokenizer_file(texts, 2, 300, "tok300.txt", &tok);
    REQUIRE(t);
    int64_t v = dtx_tokenizer_vocab_size(t); /* two short texts: fewer merges than asked for */
    dtx_tokenizer_free(t);
    REQUIRE(v < 512 - 128);
    REQUIRE(write_file(tokens, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", 50) == 0);
    const char *mv = model_of("mv.safetensors", v, 0), *mpad = model_of("mpad.safetensors", (v + 127) / 128 * 128, 0);
    const char *m512 = model_of("m512.safetensors", 512, 0), *mnan = model_of("mnan.safetensors", v, 1);
    REQUIRE(mv && mpad && m512 && mnan);
    char has_v[64];
    snprintf(has_v, sizeof has_v, "has %lld tokens and the model", (long long)v);
    const char *out = test_path("never.safetensors");
    static const char *TRAIN = "train --dim 32 --layers 2 --heads 2 --vocab 32 --ffn 64 --seq 8 --batch 2 --steps 2";
    refusal cases[16];
    int n = 0;
#define ROW(rc_, cmd_, s1_, s2_, ...)                                                         \
    do {                                                                                      \
        snprintf(cases[n].cmdline, sizeof cases[n].cmdline, __VA_ARGS__);                     \
        cases[n].rc = rc_, cases[n].cmd = cmd_, cases[n].s1 = s1_, cases[n].s2 = s2_, n++; \
    } while (0)
    /* --out a folder: refused before the training, not after it */
    ROW(2, "train", "--out", "a folder; name the model file", "%s --tokens '%s' --out '%s'", TRAIN, tokens, folder);
    ROW(2, "train", "a folder; name the model file", "model.safetensors", "%s --tokens '%s' --out '%s/'", TRAIN,
        tokens, folder);
    /* --tokens a folder: said so, not "read error" */
    ROW(1, "train", folder, "a folder, not a file", "%s --tokens '%s' --out '%s'", TRAIN, folder, out);
    /* a text file given as a model */
    ROW(1, "info", text, "not a safetensors file: it starts with text", "info '%s'", text);
    ROW(1, "generate", text, "not a safetensors file", "generate --model '%s' --tokenizer '%s' --prompt hi", text, tok);
    /* a model with a NaN weight: refused at load, naming the tensor */
    ROW(1, "generate", "tensor 'layers.1.feed_forward.w2.weight' holds NaN at element 3", mnan,
        "generate --model '%s' --tokenizer '%s' --prompt hi", mnan, tok);
    ROW(1, "score", "holds NaN", "layers.1.feed_forward.w2.weight", "score --model '%s' --tokens '%s'", mnan, tokens);
    /* a tokenizer made for another model: both sizes named */
    ROW(1, "generate", has_v, "vocab_size of 512",
        "generate --model '%s' --tokenizer '%s' --prompt hi", m512, tok);
    /* empty corpora */
    ROW(1, "tokenizer train", empty, "no text to learn from", "tokenizer train --input '%s' --vocab-size 300 --out '%s'",
        empty, test_path("never_tok.txt"));
    ROW(1, "prepare", empty, "no text to encode", "prepare --tokenizer '%s' --input '%s' --out '%s'", tok, empty,
        test_path("never.bin"));
    for (int i = 0; i < n; i++) {
        int rc = cli("%s", cases[i].cmdline);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "difftx %s: ", cases[i].cmd);
        CHECKF(rc == cases[i].rc, "%s: exit %d, want %d: %s", cases[i].cmdline, rc, cases[i].rc, cli_out);
        CHECKF(cli_one_line_from(prefix), "%s: not one line from '%s': %s", cases[i].cmdline, prefix, cli_out);
        CHECKF(cli_has(cases[i].s1) && cli_has(cases[i].s2), "%s: want '%s' and '%s' in: %s", cases[i].cmdline,
               cases[i].s1, cases[i].s2, cli_out);
    }
    CHECK(access(out, F_OK) != 0 && access(test_path("never.bin"), F_OK) != 0 &&
          access(test_path("never_tok.txt"), F_OK) != 0);
    /* what still works: the tokenizer with a model of its vocabulary, and with one padded to a multiple of 128 */
    CHECKF(cli("generate --model '%s' --tokenizer '%s' --prompt hi --max-tokens 2", mv, tok) == 0, "%s", cli_out);
    CHECKF(cli("generate --model '%s' --tokenizer '%s' --prompt hi --max-tokens 2", mpad, tok) == 0, "%s", cli_out);
}

/* generate with no --prompt reads stdin to its end: on a terminal it would
 * wait for Ctrl-D with nothing said, so it is refused there (and not on a
 * pipe). */
TEST(cli_generate_needs_a_prompt_on_a_terminal) {
    const char *tok = NULL;
    dtx_tokenizer *t = test_tokenizer_file(texts, 2, 300, "tok300b.txt", &tok);
    REQUIRE(t);
    int64_t v = dtx_tokenizer_vocab_size(t);
    dtx_tokenizer_free(t);
    const char *m = model_of("mb.safetensors", v, 0);
    REQUIRE(m);
    int pt = posix_openpt(O_RDWR | O_NOCTTY);
    REQUIRE(pt >= 0 && grantpt(pt) == 0 && unlockpt(pt) == 0);
    const char *tty = ptsname(pt);
    REQUIRE(tty);
    int rc = cli("generate --model '%s' --tokenizer '%s' --max-tokens 2 < %s", m, tok, tty);
    CHECKF(rc == 2 && cli_one_line_from("difftx generate: ") && cli_has("no --prompt, and stdin is a terminal"),
           "exit %d: %s", rc, cli_out);
    close(pt);
    const char *prompt = test_path("prompt.txt");
    REQUIRE(write_file(prompt, "the quick", 9) == 0);
    CHECKF(cli("generate --model '%s' --tokenizer '%s' --max-tokens 2 < '%s'", m, tok, prompt) == 0, "%s", cli_out);
}
