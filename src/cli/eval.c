/* difftx eval: the paper's measurements on any model file (spec §6). Each
 * subcommand lives in its own file (src/cli/eval_*.c); this one dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} eval_command;

static const eval_command evals[] = {
    {"ppl", cmd_eval_ppl, "perplexity of a token file or text, sliding window past the context"},
    {"needle", cmd_eval_needle, "multi-needle retrieval grid (N needles, R queries, depth x length)"},
    {"attn-mass", cmd_eval_attn_mass, "attention on BOS / answer needle / other context / query"},
    {"outliers", cmd_eval_outliers, "top-k and median of |attention logits| and |hidden states|"},
    {"attn-map", cmd_eval_attn_map, "one prompt's attention maps for a layer and head, as JSON"},
    {"icl", cmd_eval_icl, "many-shot in-context classification: accuracy by shots, order robustness"},
    {"halluc", cmd_eval_halluc, "contextual faithfulness: contradicted facts, list every number, absent"},
};
enum { N_EVALS = sizeof evals / sizeof evals[0] };

/* The measurements, one line each (difftx --help lists them too). */
void cli_eval_list(FILE *out, const char *indent) {
    for (int i = 0; i < N_EVALS; i++) fprintf(out, "%s%-10s %s\n", indent, evals[i].name, evals[i].summary);
}

static void usage(FILE *out) {
    fputs("usage: difftx eval <measurement> [flags]\n"
          "\n"
          "Measurements of the DIFF Transformer paper (Ye et al., ICLR 2025), on any\n"
          "difftx model file. Each prints a readable table and writes JSON with --json.\n"
          "\n",
          out);
    cli_eval_list(out, "  ");
    fputs("\n'difftx eval <measurement> --help' describes its flags.\n", out);
}

int cmd_eval(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return finish_stdout("eval");
    }
    for (int i = 0; i < N_EVALS; i++)
        if (strcmp(evals[i].name, argv[1]) == 0) return evals[i].run(argc - 1, argv + 1);
    return usage_error("eval", "unknown measurement '%s' (see 'difftx eval --help')", argv[1]);
}
