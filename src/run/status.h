/* status.h: the launcher's HTTP status endpoints (see status.c). */
#ifndef TFOS_RUN_STATUS_H
#define TFOS_RUN_STATUS_H
#include "tfos/tfos.h"

/* What the handler reads; the launcher keeps it current. */
typedef struct tfos__status_src {
    tfos_coord *coord; /* NULL between attempts */
    int attempt, max_restarts;
    const char *log_dir;
    const char *history; /* one line per failed attempt */
} tfos__status_src;

/* A tfos__http_handler; `user` is a tfos__status_src. */
char *tfos__status_handle(const char *path, const char **ctype, int *status, void *user);

#endif
