/* inspect.h: `tfos status` and `tfos logs` (see inspect.c). */
#ifndef TFOS_CLI_INSPECT_H
#define TFOS_CLI_INSPECT_H

int tfos__cmd_status(const char *target, int json);
int tfos__cmd_logs(const char *node, const char *log_dir, int follow);

#endif
