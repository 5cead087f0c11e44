/* http.h: the one HTTP/1.1 server of a tfos program, on its event loop,
 * with a route list: components register the paths they answer (the status
 * page: web/status.h; tfos serve's front end: /v2/...), the server parses,
 * checks and dispatches.
 *
 * Registered with the program's event loop (core/loop.h): it reads requests
 * and writes responses only when their sockets are ready, so a slow or
 * silent client never blocks the loop. Requests carry a body only with a
 * Content-Length (chunked request bodies get 411), up to the matched route's
 * max_body (larger: 413, or 405 from a route that takes none); HTTP/1.1
 * connections are kept alive unless the client says close, HTTP/1.0 ones are
 * closed after the response. Who may ask is checked on the head, before any
 * body is read: on loopback a request whose Host is not a loopback literal
 * (localhost, 127.x.y.z, [::1], each with an optional port) gets 421 (DNS
 * rebinding); with a token, a request without it gets 401.
 *
 * What a client can hold (tfos__http_limits): a request head over 8 KiB gets
 * 431; a connection with no request begun is closed after idle_ms; a request
 * must arrive whole within request_ms of its first byte, plus a second per
 * MiB of its body (else 408) -- one deadline, not restarted by each byte; the
 * bodies being received at once hold at most body_budget bytes (a request
 * over it gets 503 before its body is read; one body is always taken). When
 * every connection slot is used, a new connection takes the slot of the
 * oldest that is still receiving its request or idle (those that never
 * finished a request first) once it has had a second; connections waiting
 * for a deferred answer or being written to keep theirs, and with none to
 * take, new connections wait in the kernel's backlog. A connection is closed
 * after its answer has been sent and what the client still sends has been
 * read (for up to 2 s), so the client reads the answer instead of a reset.
 *
 * Routing: an exact path beats a prefix, a longer prefix beats a shorter
 * one; a path no route takes gets 404, a method its route does not take 405.
 *
 * A route may answer later (deferred): tfos serve answers an infer request
 * once its batch has run. tfos__http_reply then answers it by the request's
 * id; an id whose connection has gone is refused, harmlessly. A connection
 * waiting for its deferred answer has no deadline here (the route's own
 * bounds its wait). */
#ifndef TFOS_WEB_HTTP_H
#define TFOS_WEB_HTTP_H
#include "core/loop.h"

#include <stddef.h>
#include <stdint.h>

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

/* A route's handler: answer now (fill *resp, return 0) or later (return 1,
 * then call tfos__http_reply with req->id). Runs on the loop's thread; req
 * is valid only during the call. */
typedef int (*tfos__http_fn)(const tfos__http_req *req, tfos__http_resp *resp, void *user);

/* The methods a route takes, as bits; 0: every method (the handler checks). */
enum { TFOS_HTTP_GET = 1, TFOS_HTTP_POST = 2 };

/* One entry of the route list. */
typedef struct tfos__http_route {
    const char *path;    /* "/status" (exact), or with prefix "/v2/" (every path that starts so) */
    int prefix;
    unsigned methods;    /* TFOS_HTTP_* bits; 0: any */
    size_t max_body;     /* the largest request body it takes; 0: none */
    tfos__http_fn fn;
    void *user;          /* handed to fn; borrowed: it must outlive the route */
} tfos__http_route;

typedef struct tfos__http tfos__http;

/* What one client may hold of the server (see the top of this file); a
 * field <= 0 takes its default. */
typedef struct tfos__http_limits {
    int idle_ms;        /* no request begun (new, or kept alive between requests): closed after (5,000) */
    int request_ms;     /* a request, head and body, arrives within this of its first byte (10,000), plus
                         * 1 s per MiB of its body */
    long long body_budget; /* bytes of request bodies being received at once, every connection together
                            * (256 MiB); one body alone is always taken, up to its route's max_body */
} tfos__http_limits;

/* Listen on host:port (0: any free port) on `loop` (borrowed; it must
 * outlive the server), with up to max_conns connections at once (<= 0: 64;
 * beyond them a new connection takes the slot of one still receiving its
 * request, or waits in the kernel's backlog), and the default limits. No
 * routes yet: every path is 404 until tfos__http_add. TFOS_ESYS (errno says
 * why), TFOS_ENOMEM. */
int tfos__http_open(tfos__http **out, tfos__loop *loop, const char *host, int port, int max_conns);
/* Set the limits (NULL: the defaults), for connections from now on. */
void tfos__http_set_limits(tfos__http *h, const tfos__http_limits *lim);
/* Add a route (copied, its path too). A route for a path and kind (exact or
 * prefix) already listed replaces it. 0, or TFOS_EINVAL (no path or fn),
 * TFOS_ENOMEM. */
int tfos__http_add(tfos__http *h, const tfos__http_route *r);
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
