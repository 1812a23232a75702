/* The difftx commands. Each takes argv with argv[0] = the command name and
 * returns the process exit code (flags.h: EXIT_OK, EXIT_RUNTIME, EXIT_USAGE). */
#ifndef DTX_CLI_H
#define DTX_CLI_H

int cmd_train(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_info(int argc, char **argv);

#endif
