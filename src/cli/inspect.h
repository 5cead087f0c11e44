/* inspect.h: what inspect.c (`tfos status`, `tfos logs`) lends the other
 * commands: reading a status page. */
#ifndef TFOS_CLI_INSPECT_H
#define TFOS_CLI_INSPECT_H

/* GET path from a status page at url ("http://HOST:PORT/[?token=T]"): the
 * body of a 200 answer (malloc'd), or NULL. Bounded by 5 s. */
char *tfos__http_get(const char *url, const char *path);

#endif
