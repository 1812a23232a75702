/* The difftx commands. Each takes argv with argv[0] = the command name and
 * returns the process exit code (flags.h: EXIT_OK, EXIT_RUNTIME, EXIT_USAGE). */
#ifndef DTX_CLI_H
#define DTX_CLI_H

#include <stdio.h>

int cmd_train(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_eval(int argc, char **argv);
/* The measurements of difftx eval, one line each after indent (the library's dtx_eval_name). */
void cli_eval_list(FILE *out, const char *indent);
int cmd_quantize(int argc, char **argv);
int cmd_convert(int argc, char **argv);

#include "difftx.h"
/* dtx_model_open (a model file, a training checkpoint's model or a Hugging
 * Face folder), with its matrix products set to precision (a dtx_precision)
 * and the bf16 note said once. *m is NULL on failure. */
dtx_status cli_model_load(dtx_model **m, const char *path, int precision);
/* cli_model_load and dtx_tokenizer_load, and the check that the tokenizer
 * has no more tokens than the model's vocabulary: EXIT_OK, or the exit code
 * after the one-line message "difftx <cmd>: ...". *m and *tok are set to
 * what was loaded (NULL otherwise); the caller frees them either way. */
int cli_load_model_and_tokenizer(const char *cmd, const char *model, const char *tokenizer, int precision,
                                 dtx_model **m, dtx_tokenizer **tok);
/* For precision bf16 where the CPU has no native bf16: one line on stderr,
 * once per process, saying that bf16 is emulated and how. */
void cli_note_precision(int precision);
/* "difftx: note: <note>" on stderr. */
void cli_note(const char *note);

#endif
