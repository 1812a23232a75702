/* Models and tokenizers for the commands (cli.h): the library's openers
 * with the command's one-line messages. */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/flags.h"

dtx_status cli_model_load(dtx_model **m, const char *path, int precision) {
    dtx_status st = dtx_model_open(m, path, (dtx_precision)precision);
    if (!st) cli_note_precision(precision);
    return st;
}

int cli_load_model_and_tokenizer(const char *cmd, const char *model, const char *tokenizer, int precision,
                                 dtx_model **m, dtx_tokenizer **tok) {
    if (dtx_model_open_with_tokenizer(m, tok, model, tokenizer, (dtx_precision)precision) != DTX_OK)
        return lib_error(cmd);
    cli_note_precision(precision);
    return EXIT_OK;
}

void cli_note(const char *note) { fprintf(stderr, "difftx: note: %s\n", note); }

void cli_note_precision(int precision) {
    static int said;
    const char *note = dtx_precision_note((dtx_precision)precision);
    if (!note || said) return;
    said = 1;
    cli_note(note);
}
