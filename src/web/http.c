/* http.c: the HTTP server (see http.h). Each connection is read until its
 * request's head ends; the head is checked (who asks, framing) and matched
 * to a route, whose limits and the server's budget for bodies decide whether
 * its body (Content-Length bytes) is read at all; the route answers into a
 * buffer at once or later (tfos__http_reply), and the response is written
 * out as the socket takes it. A kept-alive connection then reads its next
 * request (bytes of it already read are kept); one that is to close shuts
 * its side, then reads what the client still sends until the client closes
 * or 2 s pass, so the client reads the answer and not a reset.
 *
 * Time: each connection has one deadline, set when it enters a state and
 * never pushed back by the bytes that arrive (a client that drips a byte a
 * second gets no more time than a silent one): idle (no request begun),
 * request (from its first byte: head and body), write, linger. One timer
 * fires at the earliest. A connection waiting for a deferred answer has none.
 *
 * Slots: a fixed table. With every slot used, a new connection takes the
 * slot of the oldest that is lingering, still in its first head (or silent),
 * kept alive between requests, or in its body, in that order (see
 * rank), once it has had EVICT_MS
 * (a real client sends its head at once; the second keeps a busy server
 * from dropping clients it has accepted but not yet read). Connections
 * waiting for an answer or being written to are never taken; with none to
 * take the listening socket is not accepted from, so clients wait in the
 * kernel's backlog instead of being dropped.
 *
 * Memory: request heads live in a buffer of HEAD_MAX + 2 bytes per
 * connection; a body's buffer is sized to it once admitted, counted against
 * the body budget until the route has seen it, and given back then, so a
 * connection kept alive or waiting for a deferred answer holds no body.
 *
 * Who may ask: on loopback, only requests whose Host is a loopback literal
 * (a page from elsewhere that rebinds its DNS name to 127.0.0.1 still sends
 * its own name, and gets 421); with a token (required when listening beyond
 * loopback), only requests carrying it, as `Authorization: Bearer TOKEN` or
 * `?token=TOKEN`. */
#include "web/http.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define IDLE_MS 5000
#define REQUEST_MS 10000
#define BODY_BUDGET (256LL << 20)
#define BODY_RATE (1 << 20)  /* bytes a second a body or a response must move at, past the first deadline */
#define WRITE_MS 10000
#define LINGER_MS 2000
#define EVICT_MS 1000

enum { C_HEAD, C_BODY, C_PENDING, C_WRITE, C_LINGER };

typedef struct hconn {
    int fd;          /* -1: free slot */
    int state;
    int route;       /* the matched route (index), once the head is read */
    char method[16];
    char path[1024]; /* the request target, cut at '?' */
    const char *query; /* into path: after the '?', or "" */
    uint32_t gen;    /* bumped at every request: a stale reply id is refused */
    int keep;        /* keep the connection after this response */
    int served;      /* a response was sent on it (it is kept alive between requests) */
    int minor;       /* the request's HTTP/1.x, answered in kind */
    int64_t since;   /* when the connection entered its state (its age, for taking its slot) */
    int64_t deadline; /* when it is dropped (or answered 408); 0: none (C_PENDING) */
    char *buf;       /* the request (head, then body), NUL-terminated */
    size_t len, cap;
    size_t head_len, body_len; /* once the head is read */
    size_t budget;   /* body bytes counted against the server's budget */
    char *out;       /* the response, once built */
    size_t out_len, out_off;
} hconn;

struct tfos__http {
    tfos__loop *loop;
    int lfd, port;
    int paused;      /* no slot free nor to take: not accepting */
    char token[80];  /* "" : none */
    tfos__http_route *routes; /* paths malloc'd */
    int nroutes, cap_routes;
    tfos__timer timer;
    int idle_ms, request_ms;
    size_t body_budget, bodies; /* the budget, and the bytes of admitted bodies not yet handed to a route */
    int nconns;
    hconn *conns;
};

/* A buffer that holds a head (and a NUL) and no body: what a connection keeps. */
#define SMALL_CAP (HEAD_MAX + 2)

static void resume(tfos__http *s)
{
    if (s->paused) {
        s->paused = 0;
        tfos__loop_events(s->loop, s->lfd, TFOS_EV_READ);
    }
}

static void drop(tfos__http *s, hconn *c)
{
    tfos__loop_unwatch(s->loop, c->fd);
    close(c->fd);
    c->fd = -1;
    c->gen++;
    s->bodies -= c->budget;
    c->budget = 0;
    c->len = c->head_len = c->body_len = 0;
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    if (c->cap > SMALL_CAP) { /* a body's buffer goes back */
        free(c->buf);
        c->buf = NULL;
        c->cap = 0;
    }
    resume(s); /* a slot is free again */
}

/* The ms a transfer of n bytes may take beyond its first deadline. */
static int64_t transfer_ms(size_t n)
{
    return (int64_t)(n / (BODY_RATE / 1000));
}

int tfos__http_header(const char *head, const char *name, char *out, size_t len)
{
    size_t nl = strlen(name);
    const char *end = strstr(head, "\r\n\r\n");
    for (const char *p = strchr(head, '\n'); p && (!end || p < end + 2); p = strchr(p + 1, '\n')) {
        if (!strncasecmp(p + 1, name, nl) && p[1 + nl] == ':') {
            const char *v = p + 2 + nl;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = strcspn(v, "\r\n");
            snprintf(out, len, "%.*s", (int)n, v);
            return 1;
        }
    }
    return 0;
}

const char *tfos__http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized (this server needs its token)";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 421: return "Misdirected Request (Host is not this machine)";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Server Error";
    }
}

/* Does a Host header name this machine by a loopback literal: localhost,
 * an IPv4 address in 127/8, or [::1], each with an optional :port? A name
 * that only starts so (127.0.0.1.attacker.example, localhost.attacker.example)
 * resolves wherever its owner likes, so it is not one. */
static int loopback_host(const char *host)
{
    char name[64];
    size_t n = strlen(host);
    while (n && (host[n - 1] == ' ' || host[n - 1] == '\t'))
        n--;
    const char *port;
    if (host[0] == '[') {
        const char *e = memchr(host, ']', n);
        struct in6_addr a6;
        if (!e || (size_t)(e - host - 1) >= sizeof name)
            return 0;
        snprintf(name, sizeof name, "%.*s", (int)(e - host - 1), host + 1);
        if (inet_pton(AF_INET6, name, &a6) != 1 || !IN6_IS_ADDR_LOOPBACK(&a6))
            return 0;
        port = e + 1;
    } else {
        size_t nl = strcspn(host, ":");
        struct in_addr v4;
        if (nl > n || nl >= sizeof name)
            return 0;
        snprintf(name, sizeof name, "%.*s", (int)nl, host);
        if (strcasecmp(name, "localhost") && !(inet_pton(AF_INET, name, &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127))
            return 0;
        port = host + nl;
    }
    size_t rest = n - (size_t)(port - host);
    if (!rest)
        return 1;
    size_t digits = strspn(port + 1, "0123456789");
    return port[0] == ':' && digits >= 1 && digits <= 5 && digits == rest - 1;
}

/* Is the request allowed (see the top of this file)? 0, or the status. */
static int refused(const tfos__http *s, const char *head, const char *query)
{
    if (s->token[0]) {
        char auth[160] = "";
        const char *t = strstr(query, "token=");
        size_t tl = strlen(s->token);
        if (tfos__http_header(head, "Authorization", auth, sizeof auth) && !strncmp(auth, "Bearer ", 7) &&
            !strcmp(auth + 7, s->token))
            return 0;
        if (t && (t == query || t[-1] == '&') && !strncmp(t + 6, s->token, tl) &&
            (t[6 + tl] == '\0' || t[6 + tl] == '&'))
            return 0;
        return 401;
    }
    char host[300];
    if (!tfos__http_header(head, "Host", host, sizeof host))
        return 0; /* HTTP/1.0 without Host: not a browser */
    return loopback_host(host) ? 0 : 421;
}

/* Whose slot a new connection may take, in classes (lower goes first), or
 * -1: lingering, then in a head (or silent) since it connected, then kept
 * alive between requests (a client that has asked before, and may ask every
 * few seconds), then in its body. */
static int rank(const hconn *c)
{
    if (c->fd < 0)
        return -1;
    switch (c->state) {
    case C_LINGER: return 0;
    case C_HEAD: return c->served && !c->len ? 2 : 1;
    case C_BODY: return 3;
    default: return -1;
    }
}

/* The oldest connection of the lowest class there is, or NULL. Its slot is
 * taken once it has had EVICT_MS, and not one of a higher class meanwhile:
 * a flood of new connections only ever takes its own kind's slots. */
static hconn *candidate(tfos__http *s)
{
    hconn *v = NULL;
    int vr = 4;
    for (int i = 0; i < s->nconns; i++) {
        hconn *c = &s->conns[i];
        int r = rank(c);
        if (r >= 0 && (r < vr || (r == vr && c->since < v->since))) {
            v = c;
            vr = r;
        }
    }
    return v;
}

static hconn *victim(tfos__http *s, int64_t now)
{
    hconn *v = candidate(s);
    return v && now - v->since >= EVICT_MS ? v : NULL;
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user);

/* Arm the timer at the earliest deadline, or while not accepting, at the
 * moment a slot may be taken. */
static void schedule(tfos__http *s)
{
    int64_t at = INT64_MAX;
    for (int i = 0; i < s->nconns; i++) {
        const hconn *c = &s->conns[i];
        if (c->fd >= 0 && c->deadline && c->deadline < at)
            at = c->deadline;
    }
    const hconn *v = s->paused ? candidate(s) : NULL;
    if (v && v->since + EVICT_MS < at)
        at = v->since + EVICT_MS;
    if (at == INT64_MAX)
        tfos__timer_disarm(s->loop, &s->timer);
    else
        tfos__timer_arm(s->loop, &s->timer, at, on_timer, s);
}

/* Put the response into c->out and start writing it (takes body). */
static void respond(tfos__http *s, hconn *c, int status, const char *ctype, char *body, size_t len, const char *extra)
{
    if (!body) {
        body = strdup(tfos__http_reason(status));
        len = body ? strlen(body) : 0;
        ctype = "text/plain; charset=utf-8";
    } else if (!len) {
        len = strlen(body);
    }
    free(c->out);
    c->out = NULL;
    FILE *f = open_memstream(&c->out, &c->out_len);
    if (!f) {
        free(body);
        drop(s, c);
        return;
    }
    fprintf(f, "HTTP/1.%d %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s%s\r\n",
            c->minor, status, tfos__http_reason(status), ctype ? ctype : "text/plain; charset=utf-8", len,
            c->keep ? "" : "Connection: close\r\n", extra ? extra : "");
    if (body)
        fwrite(body, 1, len, f);
    fclose(f);
    free(body);
    c->out_off = 0;
    c->state = C_WRITE;
    c->since = tfos__now_ms();
    c->deadline = c->since + WRITE_MS + transfer_ms(c->out_len);
    tfos__loop_events(s->loop, c->fd, TFOS_EV_WRITE);
}

static void send_response(tfos__http *s, hconn *c, int status, const char *ctype, char *body, size_t len)
{
    respond(s, c, status, ctype, body, len, NULL);
}

static uint64_t conn_id(const tfos__http *s, const hconn *c)
{
    return ((uint64_t)(c - s->conns) << 32) | c->gen;
}

/* Wait for the next request: its head, or idle until one begins. */
static void await_request(tfos__http *s, hconn *c)
{
    c->state = C_HEAD;
    c->since = tfos__now_ms();
    c->deadline = c->since + (c->len ? s->request_ms : s->idle_ms);
}

/* The request at the front of c->buf has been handed over (or refused from
 * its head): give back its body's share of the budget, keep only what
 * follows it (a pipelined request's first bytes), in a buffer of a head's
 * size. */
static void consume(tfos__http *s, hconn *c)
{
    size_t used = c->head_len + c->body_len, rest = c->len - used;
    s->bodies -= c->budget;
    c->budget = 0;
    memmove(c->buf, c->buf + used, rest);
    c->len = rest;
    c->buf[rest] = '\0';
    c->head_len = c->body_len = 0;
    if (c->cap > SMALL_CAP) { /* rest <= HEAD_MAX: read with the head (see on_conn) */
        char *b = realloc(c->buf, SMALL_CAP);
        if (b) {
            c->buf = b;
            c->cap = SMALL_CAP;
        }
    }
}

/* The head and body are in: ask the route, then let the request go. */
static void dispatch(tfos__http *s, hconn *c)
{
    char *body = c->buf + c->head_len;
    char saved = body[c->body_len]; /* a pipelined request's first byte */
    body[c->body_len] = '\0';
    const tfos__http_route *r = &s->routes[c->route];
    tfos__http_req rq = {.method = c->method, .path = c->path, .query = c->query, .head = c->buf, .body = body,
                         .body_len = c->body_len, .id = conn_id(s, c)};
    tfos__http_resp rs = {.status = 200, .ctype = "text/plain; charset=utf-8"};
    c->state = C_PENDING;
    c->deadline = 0;
    uint32_t gen = c->gen;
    int later = r->fn(&rq, &rs, r->user) == 1;
    if (c->fd < 0 || c->gen != gen) { /* the route answered it, and the connection went (drop took the buffer) */
        if (!later)
            free(rs.body);
        return;
    }
    body[c->body_len] = saved;
    consume(s, c);
    if (later)
        return; /* tfos__http_reply answers it */
    send_response(s, c, rs.status, rs.ctype, rs.body, rs.len);
}

/* The route for path and method: its index, or -404 / -405. */
static int match(const tfos__http *s, const char *path, const char *method)
{
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < s->nroutes; i++) {
        const tfos__http_route *r = &s->routes[i];
        size_t n = strlen(r->path);
        if (!r->prefix && !strcmp(path, r->path)) {
            best = i;
            break;
        }
        if (r->prefix && !strncmp(path, r->path, n) && (best < 0 || n > best_len)) {
            best = i;
            best_len = n;
        }
    }
    if (best < 0)
        return -404;
    unsigned m = s->routes[best].methods;
    unsigned bit = !strcmp(method, "GET") ? TFOS_HTTP_GET : !strcmp(method, "POST") ? TFOS_HTTP_POST : 0;
    return m && !(m & bit) ? -405 : best;
}

/* Answer from the head alone (the body, if any, is not read: then the
 * connection closes after the answer). Takes msg. */
static void answer_head(tfos__http *s, hconn *c, int status, char *msg, const char *extra)
{
    char v[64];
    if (tfos__http_header(c->buf, "Content-Length", v, sizeof v) ? strcmp(v, "0") != 0
                                                                   : tfos__http_header(c->buf, "Transfer-Encoding", v,
                                                                                       sizeof v))
        c->keep = 0;
    c->body_len = 0;
    respond(s, c, status, NULL, msg, 0, extra);
}

/* Grow c->buf to hold `need` bytes and a NUL (exactly: a body's size is
 * known before it is read). */
static int reserve(hconn *c, size_t need)
{
    if (need + 1 <= c->cap)
        return 0;
    char *b = realloc(c->buf, need + 1);
    if (!b)
        return -1;
    c->buf = b;
    c->cap = need + 1;
    return 0;
}

/* A request head has ended at c->buf[head_len): check who asks, read its
 * framing, find its route, and admit its body. */
static void head_done(tfos__http *s, hconn *c)
{
    char v[64], version[16] = "", target[1024] = "";
    c->body_len = 0;
    c->method[0] = '\0';
    c->minor = 1;
    if (memchr(c->buf, '\0', c->head_len) || sscanf(c->buf, "%15s %1023s %15s", c->method, target, version) != 3 ||
        strncmp(version, "HTTP/1.", 7)) {
        c->keep = 0;
        send_response(s, c, 400, NULL, NULL, 0);
        return;
    }
    char saved = c->buf[c->head_len]; /* the head alone is a string while it is read */
    c->buf[c->head_len] = '\0';
    int http11 = !strcmp(version, "HTTP/1.1");
    c->minor = http11;
    c->keep = http11;
    if (tfos__http_header(c->buf, "Connection", v, sizeof v))
        c->keep = !strcasecmp(v, "close") ? 0 : !strcasecmp(v, "keep-alive") ? 1 : c->keep;
    memcpy(c->path, target, sizeof c->path);
    char *q = strchr(c->path, '?');
    c->query = "";
    if (q) {
        *q = '\0';
        c->query = q + 1;
    }
    c->state = C_BODY; /* unless answered below */
    int status = refused(s, c->buf, c->query);
    if (status) {
        answer_head(s, c, status, NULL, NULL);
    } else if (tfos__http_header(c->buf, "Transfer-Encoding", v, sizeof v)) {
        c->keep = 0;
        send_response(s, c, 411, NULL, strdup("a request body needs a Content-Length (chunked bodies are not "
                                                "taken)"), 0);
    } else if ((c->route = match(s, c->path, c->method)) < 0) {
        answer_head(s, c, -c->route, NULL, NULL);
    } else if (tfos__http_header(c->buf, "Content-Length", v, sizeof v)) {
        size_t max_body = s->routes[c->route].max_body;
        char *end, *msg = NULL;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            c->keep = 0;
            send_response(s, c, 400, NULL, strdup("Content-Length is not a number"), 0);
        } else if (n > max_body) {
            c->keep = 0;
            if (asprintf(&msg, "the request body has %llu bytes; %s takes up to %zu", n, c->path, max_body) < 0)
                msg = NULL;
            send_response(s, c, max_body ? 413 : 405, NULL, msg, 0);
        } else if (n && s->bodies && s->bodies + n > s->body_budget) {
            /* the bodies being received would hold more than the budget: refused
             * before this one is read (one alone is always taken) */
            if (asprintf(&msg, "the server is receiving %zu bytes of request bodies already, and takes up to %zu "
                               "at once: try again shortly", s->bodies, s->body_budget) < 0)
                msg = NULL;
            answer_head(s, c, 503, msg, "Retry-After: 1\r\n");
        } else if (n && reserve(c, c->head_len + (size_t)n)) {
            c->keep = 0;
            send_response(s, c, 503, NULL, strdup("the server is out of memory"), 0);
        } else {
            c->body_len = (size_t)n;
            c->budget = (size_t)n;
            s->bodies += c->budget;
            /* the request's deadline, from its first byte, grows once with its body */
            c->deadline += transfer_ms(c->body_len);
        }
    }
    if (c->state == C_BODY) {
        c->since = tfos__now_ms();
        if (c->body_len && tfos__http_header(c->buf, "Expect", v, sizeof v) && !strcasecmp(v, "100-continue")) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            (void)!send(c->fd, cont, sizeof cont - 1, MSG_NOSIGNAL); /* 25 bytes into an empty socket buffer */
        }
    }
    if (c->fd >= 0 && c->buf)
        c->buf[c->head_len] = saved;
}

/* Make progress on what has been read: a head, a body, a dispatch. */
static void advance(tfos__http *s, hconn *c)
{
    if (c->state == C_HEAD) {
        char *e = memmem(c->buf, c->len, "\r\n\r\n", 4);
        size_t hl = e ? (size_t)(e - c->buf) + 4 : 0;
        char *e2 = memmem(c->buf, e ? (size_t)(e - c->buf) + 2 : c->len, "\n\n", 2);
        if (e2)
            hl = (size_t)(e2 - c->buf) + 2;
        if (!hl || hl > HEAD_MAX) {
            if (hl || c->len > HEAD_MAX) {
                char *msg = NULL;
                c->keep = 0;
                c->minor = 1;
                if (asprintf(&msg, "the request head (request line and headers) is over %d bytes", HEAD_MAX) < 0)
                    msg = NULL;
                send_response(s, c, 431, NULL, msg, 0);
            }
            return;
        }
        c->head_len = hl;
        head_done(s, c);
        if (c->state != C_BODY)
            return;
    }
    if (c->state == C_BODY && c->len >= c->head_len + c->body_len)
        dispatch(s, c);
}

/* The response went out: keep the connection for its next request, or
 * shut our side and read what the client still sends until it closes. */
static void response_sent(tfos__http *s, hconn *c)
{
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    if (!c->keep) {
        shutdown(c->fd, SHUT_WR);
        c->state = C_LINGER;
        c->since = tfos__now_ms();
        c->deadline = c->since + LINGER_MS;
        tfos__loop_events(s->loop, c->fd, TFOS_EV_READ);
        return;
    }
    c->gen++;
    c->served = 1;
    if (c->head_len) /* answered from its head */
        consume(s, c);
    await_request(s, c);
    tfos__loop_events(s->loop, c->fd, TFOS_EV_READ);
    if (c->len)
        advance(s, c);
}

static void on_conn(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    tfos__http *s = user;
    hconn *c = NULL;
    for (int i = 0; i < s->nconns && !c; i++)
        if (s->conns[i].fd == fd)
            c = &s->conns[i];
    if (!c)
        return;
    if (c->state == C_WRITE) {
        if (!(events & TFOS_EV_WRITE))
            goto out;
        ssize_t w = send(fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0)
            c->out_off += (size_t)w;
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            drop(s, c);
        else if (c->out_off == c->out_len)
            response_sent(s, c);
        goto out;
    }
    if (c->state == C_PENDING) {
        /* the answer is not ready: only notice a client that has gone */
        char b;
        ssize_t r = recv(fd, &b, 1, MSG_PEEK);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            drop(s, c);
        else if (r > 0) /* pipelined: read it once this one is answered */
            tfos__loop_events(s->loop, fd, 0);
        goto out;
    }
    if (c->state == C_LINGER) {
        /* what the client still sends is read and dropped, a bounded amount
         * a call, until it closes (or the deadline) */
        char sink[16384];
        for (int i = 0; i < 64; i++) {
            ssize_t r = recv(fd, sink, sizeof sink, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                drop(s, c);
                break;
            }
            if (r < 0)
                break;
        }
        goto out;
    }
    /* a head is read up to one byte past HEAD_MAX (then it is too long), a
     * body to its end, so a pipelined request's bytes read with it always
     * fit a head's buffer */
    size_t want = c->state == C_BODY ? c->head_len + c->body_len : HEAD_MAX + 1;
    if (c->len >= want || reserve(c, want)) {
        drop(s, c);
        goto out;
    }
    ssize_t r = recv(fd, c->buf + c->len, want - c->len, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        drop(s, c);
        goto out;
    }
    if (r < 0)
        goto out;
    if (!c->len) /* a request begins: it has request_ms from now, however its bytes come */
        c->deadline = tfos__now_ms() + s->request_ms;
    c->len += (size_t)r;
    c->buf[c->len] = '\0';
    advance(s, c);
out:
    schedule(s);
}

/* A deadline passed: a request that did not arrive whole gets 408; an idle,
 * lingering or unread connection goes. */
static void expire(tfos__http *s, hconn *c)
{
    if ((c->state == C_HEAD && c->len) || c->state == C_BODY) {
        char *msg = NULL;
        c->keep = 0;
        c->minor = 1;
        if (asprintf(&msg, "the request did not arrive whole in time (it has %d s from its first byte, and a "
                           "second more per MiB of body)", s->request_ms / 1000) < 0)
            msg = NULL;
        send_response(s, c, 408, NULL, msg, 0);
    } else {
        drop(s, c);
    }
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    tfos__http *s = user;
    int64_t now = tfos__now_ms();
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].deadline && now >= s->conns[i].deadline)
            expire(s, &s->conns[i]);
    if (s->paused && victim(s, now))
        resume(s);
    schedule(s);
}

static void on_listen(tfos__loop *l, int lfd, int events, void *user)
{
    (void)events;
    tfos__http *s = user;
    for (;;) {
        int64_t now = tfos__now_ms();
        hconn *c = NULL;
        for (int i = 0; i < s->nconns && !c; i++)
            if (s->conns[i].fd < 0)
                c = &s->conns[i];
        hconn *v = c ? NULL : victim(s, now);
        if (!c && !v) { /* the rest wait in the backlog until a slot is free or may be taken */
            s->paused = 1;
            tfos__loop_events(l, lfd, 0);
            break;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        if (v) {
            drop(s, v);
            c = v;
        }
        if (reserve(c, SMALL_CAP - 1) || tfos__loop_watch(l, fd, TFOS_EV_READ, on_conn, s)) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->served = 0;
        c->len = 0;
        c->buf[0] = '\0';
        await_request(s, c);
    }
    schedule(s);
}

int tfos__http_reply(tfos__http *s, uint64_t id, int status, const char *ctype, char *body, size_t len)
{
    uint32_t slot = (uint32_t)(id >> 32);
    hconn *c = s && slot < (uint32_t)s->nconns ? &s->conns[slot] : NULL;
    if (!c || c->fd < 0 || c->gen != (uint32_t)id || c->state != C_PENDING) {
        free(body);
        return TFOS_ECLOSED;
    }
    send_response(s, c, status, ctype, body, len);
    schedule(s);
    return 0;
}

void tfos__http_set_limits(tfos__http *s, const tfos__http_limits *lim)
{
    s->idle_ms = lim && lim->idle_ms > 0 ? lim->idle_ms : IDLE_MS;
    s->request_ms = lim && lim->request_ms > 0 ? lim->request_ms : REQUEST_MS;
    s->body_budget = (size_t)(lim && lim->body_budget > 0 ? lim->body_budget : BODY_BUDGET);
}

int tfos__http_open(tfos__http **out, tfos__loop *loop, const char *host, int port, int max_conns)
{
    tfos__http *s = calloc(1, sizeof *s);
    if (!s)
        return TFOS_ENOMEM;
    s->nconns = max_conns > 0 ? max_conns : 64;
    s->conns = calloc((size_t)s->nconns, sizeof *s->conns);
    if (!s->conns) {
        free(s);
        return TFOS_ENOMEM;
    }
    for (int i = 0; i < s->nconns; i++)
        s->conns[i].fd = -1;
    tfos__http_set_limits(s, NULL);
    int rc = tfos__tcp_listen(host, port, 1024, &s->lfd, &s->port);
    if (rc) {
        free(s->conns);
        free(s);
        return rc;
    }
    s->loop = loop;
    rc = tfos__loop_watch(loop, s->lfd, TFOS_EV_READ, on_listen, s);
    if (rc) {
        close(s->lfd);
        free(s->conns);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int tfos__http_add(tfos__http *s, const tfos__http_route *r)
{
    if (!s || !r || !r->path || !r->fn)
        return TFOS_EINVAL;
    char *path = strdup(r->path);
    if (!path)
        return TFOS_ENOMEM;
    for (int i = 0; i < s->nroutes; i++)
        if (!s->routes[i].prefix == !r->prefix && !strcmp(s->routes[i].path, r->path)) {
            free((char *)s->routes[i].path);
            s->routes[i] = *r;
            s->routes[i].path = path;
            return 0;
        }
    if (s->nroutes == s->cap_routes) {
        int cap = s->cap_routes ? 2 * s->cap_routes : 16;
        tfos__http_route *rs = realloc(s->routes, (size_t)cap * sizeof *rs);
        if (!rs) {
            free(path);
            return TFOS_ENOMEM;
        }
        s->routes = rs;
        s->cap_routes = cap;
    }
    s->routes[s->nroutes] = *r;
    s->routes[s->nroutes++].path = path;
    return 0;
}

int tfos__http_port(const tfos__http *s)
{
    return s->port;
}

void tfos__http_set_token(tfos__http *s, const char *token)
{
    snprintf(s->token, sizeof s->token, "%s", token ? token : "");
}

int tfos__http_busy(const tfos__http *s)
{
    if (!s)
        return 0;
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].state == C_WRITE && s->conns[i].out_off < s->conns[i].out_len)
            return 1;
    return 0;
}

void tfos__http_close(tfos__http *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nconns; i++) {
        if (s->conns[i].fd >= 0)
            drop(s, &s->conns[i]);
        free(s->conns[i].buf);
    }
    tfos__timer_disarm(s->loop, &s->timer);
    tfos__loop_unwatch(s->loop, s->lfd);
    close(s->lfd);
    for (int i = 0; i < s->nroutes; i++)
        free((char *)s->routes[i].path);
    free(s->routes);
    free(s->conns);
    free(s);
}
