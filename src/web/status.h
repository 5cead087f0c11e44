/* status.h: the status page (see status.c): the routes it adds to the
 * program's HTTP server, and the series others add to its /metrics. Its
 * feed statistics come from the feed meter, declared in meter.h (included
 * here for the files that include only this header). */
#ifndef TFOS_WEB_STATUS_H
#define TFOS_WEB_STATUS_H
#include "feed/meter.h"
#include "tfos/tfos.h"
#include "web/http.h"
#include "web/logbuf.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A contributor to /metrics: writes its series (Prometheus text, HELP and
 * TYPE lines included) to f. Runs on the HTTP server's loop. */
typedef void (*tfos__metrics_fn)(FILE *f, void *user);

#define TFOS__STATUS_MAX_METRICS 4

/* What the routes read; its owner (the launcher, or a Python Coordinator
 * on Spark's driver) keeps it current, and it outlives the HTTP server. */
typedef struct tfos__status_src {
    tfos_coord *coord; /* NULL between attempts */
    int attempt, max_restarts;
    const char *log_dir;      /* the nodes' logs on this machine (/logs/...); NULL: none here */
    const char *node_log_dir; /* NULL, or where each node's log is on its own host (shown as text) */
    const tfos_policy *policy; /* the restart policy: its history; NULL: none */
    int partitions_refed;     /* partitions fed again after a failure (Spark) */
    int min_nodes, max_nodes; /* an elastic run's bounds (docs/RELIABILITY.md, "Elastic size"); 0: not elastic */
    const tfos__feed_meter *feed;
    tfos__logbuf *lines;       /* the nodes' forwarded output (/logs/stream/<seq>); NULL: none */
    /* /metrics contributors, in the order they were added
     * (tfos__status_add_metrics) */
    struct {
        tfos__metrics_fn fn;
        void *user;
    } metrics[TFOS__STATUS_MAX_METRICS];
    int nmetrics;
} tfos__status_src;

/* The /status document (malloc'd; NULL: out of memory). */
char *tfos__status_json(const tfos__status_src *src);
/* The same with the cluster's nodes first..last only (last < 0: all; see
 * tfos__coord_status_json_page): what GET /status?nodes=FIRST-LAST answers. */
char *tfos__status_json_page(const tfos__status_src *src, int first, int last);

/* Add the page's routes to h (GET only; src borrowed): /status, /metrics,
 * /feed/history, / and /index.html, /logs/<job>-<index>.log (with a
 * log_dir) and /logs/stream/<seq> (with lines: the forwarded lines from
 * seq on). 0, or TFOS_ENOMEM. */
int tfos__status_routes(tfos__http *h, tfos__status_src *src);

/* Have fn's series follow the page's own in /metrics (user: fn's, borrowed).
 * 0, or TFOS_EFULL past TFOS__STATUS_MAX_METRICS. */
int tfos__status_add_metrics(tfos__status_src *src, tfos__metrics_fn fn, void *user);

#endif
