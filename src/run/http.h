/* http.h: a tiny HTTP/1.0 server for the status page.
 *
 * GET only, one request per connection, registered with the program's event
 * loop (core/loop.h): it reads requests and writes responses only when their
 * sockets are ready, so a slow or silent client never blocks the loop.
 * Requests over 8 KiB, and connections idle for 5 s, are dropped. On
 * loopback a request whose Host names another machine gets 421 (DNS
 * rebinding); with a token, a request without it gets 401. */
#ifndef TFOS_RUN_HTTP_H
#define TFOS_RUN_HTTP_H
#include "core/loop.h"

/* Build the response for `path`: return a malloc'd body (the server frees
 * it) and set *content_type and *status (200, 404...). */
typedef char *(*tfos__http_handler)(const char *path, const char **content_type, int *status, void *user);

typedef struct tfos__http tfos__http;

/* Listen on host:port (0: any free port) and serve on `loop` (borrowed; it
 * must outlive the server). TFOS_ESYS (errno says why), TFOS_ENOMEM. */
int tfos__http_open(tfos__http **out, tfos__loop *loop, const char *host, int port, tfos__http_handler h,
                    void *user);
int tfos__http_port(const tfos__http *h);
/* Require `token` (Authorization: Bearer, or ?token=) on every request;
 * NULL or "": none (loopback only, Host checked). */
void tfos__http_set_token(tfos__http *h, const char *token);
/* Whether a response is still being written (its connection open): a
 * server about to close lets these finish first. NULL: 0. */
int tfos__http_busy(const tfos__http *h);
/* Stop listening, drop every connection, free. NULL is a no-op. */
void tfos__http_close(tfos__http *h);

#endif
