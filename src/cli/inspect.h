/* inspect.h: `tfos status` and `tfos logs` (see inspect.c). */
#ifndef TFOS_CLI_INSPECT_H
#define TFOS_CLI_INSPECT_H

int tfos__cmd_status(const char *target, int json);
int tfos__cmd_logs(const char *node, const char *log_dir, int follow);
/* GET path from a status page at url ("http://HOST:PORT/[?token=T]"): the
 * body of a 200 answer (malloc'd), or NULL. Bounded by 5 s. */
char *tfos__http_get(const char *url, const char *path);

#endif
