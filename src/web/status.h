/* status.h: the launcher's HTTP status endpoints (see status.c). Their feed
 * statistics come from the feed meter, declared in meter.h (included here
 * for the files that include only this header). */
#ifndef TFOS_RUN_STATUS_H
#define TFOS_RUN_STATUS_H
#include "feed/meter.h"
#include "tfos/tfos.h"
#include "web/logbuf.h"

#include <stddef.h>
#include <stdint.h>

/* What the handler reads; its owner (the launcher, or a Python
 * Coordinator on Spark's driver) keeps it current. */
typedef struct tfos__status_src {
    tfos_coord *coord; /* NULL between attempts */
    int attempt, max_restarts;
    const char *log_dir;      /* the nodes' logs on this machine (/logs/...); NULL: none here */
    const char *node_log_dir; /* NULL, or where each node's log is on its own host (shown as text) */
    const tfos_policy *policy; /* the restart policy: its history; NULL: none */
    int partitions_refed;     /* partitions fed again after a failure (Spark) */
    const tfos__feed_meter *feed;
    tfos__logbuf *lines;       /* the nodes' forwarded output (/logs/stream/<seq>); NULL: none */
} tfos__status_src;

/* The /status document (malloc'd; NULL: out of memory). */
char *tfos__status_json(const tfos__status_src *src);

/* A tfos__http_handler; `user` is a tfos__status_src. Serves /status,
 * /metrics, /feed/history, /, (with a log_dir) /logs/<job>-<index>.log and
 * (with lines) /logs/stream/<seq>: the forwarded lines from seq on. */
char *tfos__status_handle(const char *path, const char **ctype, int *status, void *user);

#endif
