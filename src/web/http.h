/* http.h: a small HTTP/1.1 server on the program's event loop, for the
 * status page and the model server (serve/serve.h).
 *
 * Registered with the program's event loop (core/loop.h): it reads requests
 * and writes responses only when their sockets are ready, so a slow or
 * silent client never blocks the loop. Requests carry a body only with a
 * Content-Length (chunked request bodies get 411), up to the server's
 * max_body (0: none, as for the status page); HTTP/1.1 connections are kept
 * alive unless the client says close, HTTP/1.0 ones are closed after the
 * response. Request heads over 8 KiB and connections idle for 5 s between
 * requests are dropped. On loopback a request whose Host names another
 * machine gets 421 (DNS rebinding); with a token, a request without it gets
 * 401.
 *
 * A route may answer later (deferred): the model server answers an infer
 * request once its batch has run. tfos__http_reply then answers it by the
 * request's id; an id whose connection has gone is refused, harmlessly. */
#ifndef TFOS_RUN_HTTP_H
#define TFOS_RUN_HTTP_H
#include "core/loop.h"

#include <stddef.h>
#include <stdint.h>

/* Build the response for GET `path`: return a malloc'd body (the server
 * frees it) and set *content_type and *status (200, 404...). */
typedef char *(*tfos__http_handler)(const char *path, const char **content_type, int *status, void *user);

typedef struct tfos__http_req {
    const char *method;  /* "GET", "POST", ... */
    const char *path;    /* without the query */
    const char *query;   /* after '?', or "" */
    const char *head;    /* the raw request head (tfos__http_header reads it) */
    const char *body;    /* Content-Length bytes (NUL-terminated), "" without */
    size_t body_len;
    uint64_t id;         /* for tfos__http_reply */
} tfos__http_req;

typedef struct tfos__http_resp {
    int status;          /* default 200 */
    const char *ctype;   /* default text/plain */
    char *body;          /* malloc'd (the server frees it); NULL: the status's reason */
    size_t len;          /* 0 with a body: strlen(body) */
} tfos__http_resp;

/* A route: answer now (fill *resp, return 0) or later (return 1, then call
 * tfos__http_reply with req->id). */
typedef int (*tfos__http_route)(const tfos__http_req *req, tfos__http_resp *resp, void *user);

typedef struct tfos__http tfos__http;

/* Listen on host:port (0: any free port) and serve GET requests with h on
 * `loop` (borrowed; it must outlive the server). TFOS_ESYS (errno says
 * why), TFOS_ENOMEM. */
int tfos__http_open(tfos__http **out, tfos__loop *loop, const char *host, int port, tfos__http_handler h,
                    void *user);
/* The same with a route for every method, bodies up to max_body bytes
 * (larger ones get 413) and up to max_conns connections at once (the rest
 * wait in the kernel's backlog). */
int tfos__http_open_routes(tfos__http **out, tfos__loop *loop, const char *host, int port, tfos__http_route r,
                           void *user, size_t max_body, int max_conns);
int tfos__http_port(const tfos__http *h);
/* Require `token` (Authorization: Bearer, or ?token=) on every request;
 * NULL or "": none (loopback only, Host checked). */
void tfos__http_set_token(tfos__http *h, const char *token);
/* Answer the deferred request `id` (takes body, malloc'd, even on error).
 * TFOS_ECLOSED when its connection has gone. */
int tfos__http_reply(tfos__http *h, uint64_t id, int status, const char *ctype, char *body, size_t len);
/* Header `name` of a request head into out; 0 if absent. */
int tfos__http_header(const char *head, const char *name, char *out, size_t len);
/* The reason phrase of a status code. */
const char *tfos__http_reason(int status);
/* Whether a response is still being written (its connection open): a
 * server about to close lets these finish first. NULL: 0. */
int tfos__http_busy(const tfos__http *h);
/* Stop listening, drop every connection, free. NULL is a no-op. */
void tfos__http_close(tfos__http *h);

#endif
