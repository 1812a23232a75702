/* difftx: train, score, sample and inspect Differential Transformer models. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"

int cmd_tokenizer(int argc, char **argv); /* src/cli/tokenizer_cmd.c */
int cmd_prepare(int argc, char **argv);   /* src/cli/prepare.c */
int cmd_generate(int argc, char **argv);  /* src/cli/generate.c */
int cmd_serve(int argc, char **argv);     /* src/cli/serve.c */

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"train", cmd_train, "train a model (new or --init FILE) on a token file"},
    {"score", cmd_score, "mean next-token cross-entropy of one token sequence, as JSON"},
    {"sample", cmd_sample, "continue a prompt, greedily or with a temperature"},
    {"generate", cmd_generate, "continue a text prompt, streaming text (KV-cached decoding)"},
    {"serve", cmd_serve, "an OpenAI-compatible server (continuous batching) and an attention explorer"},
    {"info", cmd_info, "architecture, config and parameter counts of a model file"},
    {"quantize", cmd_quantize, "a calibrated int8 or 4-bit copy of a model (w8a16, w8a8, w4a16)"},
    {"convert", cmd_convert, "Hugging Face checkpoints (DiffLlama, Llama) in and out"},
    {"tokenizer", cmd_tokenizer, "train, apply or inspect a byte-level BPE tokenizer"},
    {"prepare", cmd_prepare, "encode text files into a token shard (docs/data.md)"},
    {"eval", cmd_eval, "the paper's measurements (below)"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *out) {
    fputs("usage: difftx <command> [flags]\n"
          "\n"
          "The Differential Transformer (Ye et al., ICLR 2025) and its parameter-matched\n"
          "LLaMA-style baseline, in C.\n"
          "\n"
          "commands:\n",
          out);
    for (int i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("  help      this text, or 'difftx help <command>'\n"
          "  --version the version of difftx and of its library\n"
          "\n"
          "measurements (difftx eval <measurement>):\n",
          out);
    cli_eval_list(out, "  ");
    fputs("\n'difftx <command> --help' describes a command's flags.\n"
          "Exit status: 0 success, 1 runtime failure (bad file, I/O), 2 usage error.\n",
          out);
}

static const command *find(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || (strcmp(name, "help") == 0 && argc == 2)) {
        usage(stdout);
        return finish_stdout("help");
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("difftx %s (the library libdifftx.so.%d, ISA %s)\n", dtx_version(), DTX_VERSION_MAJOR,
               dtx_isa_name(dtx_isa_level()));
        return finish_stdout("--version");
    }
    if (strcmp(name, "help") == 0) {
        /* "difftx help train" is "difftx train --help". */
        const command *c = find(argv[2]);
        if (!c) return usage_error("help", "unknown command '%s' (see 'difftx --help')", argv[2]);
        char *help_argv[] = {argv[2], "--help", NULL};
        return c->run(2, help_argv);
    }
    const char *isa_err = dtx_isa_env_error();
    if (isa_err) {
        fprintf(stderr, "difftx: %s\n", isa_err);
        return EXIT_USAGE;
    }
    const command *c = find(name);
    if (!c) {
        fprintf(stderr, "difftx: unknown command '%s' (see 'difftx --help')\n", name);
        return EXIT_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
