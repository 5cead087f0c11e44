/* http.c: the HTTP server (see http.h). Each connection is read until its
 * request's head ends; the head is checked (who asks, framing) and matched
 * to a route, whose limits decide whether its body (Content-Length bytes) is
 * read at all; the route answers into a buffer at once or later
 * (tfos__http_reply), and the response is written out as the socket takes
 * it. A kept-alive connection
 * then reads its next request (bytes of it already read are kept). One
 * timer drops idle connections (a connection waiting for a deferred answer
 * is not idle). While every slot is taken the listening socket is not
 * accepted from, so clients wait in the kernel's backlog instead of being
 * dropped.
 *
 * Who may ask: on loopback, only requests whose Host is a loopback name (a
 * page from elsewhere that rebinds its DNS name to 127.0.0.1 still sends its
 * own name, and gets 421); with a token (required when listening beyond
 * loopback), only requests carrying it, as `Authorization: Bearer TOKEN` or
 * `?token=TOKEN`. */
#include "web/http.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define IDLE_MS 5000

enum { C_HEAD, C_BODY, C_PENDING, C_WRITE };

typedef struct hconn {
    int fd;          /* -1: free slot */
    int state;
    int route;       /* the matched route (index), once the head is read */
    char method[16];
    char path[1024]; /* the request target, cut at '?' */
    const char *query; /* into path: after the '?', or "" */
    uint32_t gen;    /* bumped at every request: a stale reply id is refused */
    int keep;        /* keep the connection after this response */
    int minor;       /* the request's HTTP/1.x, answered in kind */
    int64_t since;
    char *buf;       /* the request (head, then body), NUL-terminated */
    size_t len, cap;
    size_t head_len, body_len; /* once the head is read */
    char saved;      /* the byte after the body, while the route sees a NUL there */
    char *out;       /* the response, once built */
    size_t out_len, out_off;
} hconn;

struct tfos__http {
    tfos__loop *loop;
    int lfd, port;
    int paused;      /* every slot taken: not accepting */
    char token[80];  /* "" : none */
    tfos__http_route *routes; /* paths malloc'd */
    int nroutes, cap_routes;
    tfos__timer idle;
    int nconns;
    hconn *conns;
};

static void drop(tfos__http *s, hconn *c)
{
    tfos__loop_unwatch(s->loop, c->fd);
    close(c->fd);
    c->fd = -1;
    c->gen++;
    c->len = c->head_len = c->body_len = 0;
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    if (c->cap > 2 * HEAD_MAX) { /* a big body's buffer goes back */
        free(c->buf);
        c->buf = NULL;
        c->cap = 0;
    }
    if (s->paused) { /* a slot is free again */
        s->paused = 0;
        tfos__loop_events(s->loop, s->lfd, TFOS_EV_READ);
    }
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
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 421: return "Misdirected Request (Host is not this machine)";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Server Error";
    }
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
    char name[300];
    snprintf(name, sizeof name, "%s", host);
    if (name[0] == '[') {
        char *e = strchr(name, ']');
        if (e)
            e[1] = '\0';
    } else {
        char *colon = strrchr(name, ':');
        if (colon)
            *colon = '\0';
    }
    /* an address literal in 127/8, not any name that starts so
     * (127.attacker.example resolves wherever its owner likes) */
    struct in_addr v4;
    if (!strcasecmp(name, "localhost") || !strcmp(name, "[::1]") ||
        (inet_pton(AF_INET, name, &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127))
        return 0;
    return 421;
}

static void on_idle(tfos__loop *l, tfos__timer *t, void *user);

static void schedule_idle(tfos__http *s)
{
    int64_t at = INT64_MAX;
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].state != C_PENDING && s->conns[i].since + IDLE_MS < at)
            at = s->conns[i].since + IDLE_MS;
    if (at == INT64_MAX)
        tfos__timer_disarm(s->loop, &s->idle);
    else
        tfos__timer_arm(s->loop, &s->idle, at, on_idle, s);
}

static void on_idle(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    tfos__http *s = user;
    int64_t now = tfos__now_ms();
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].state != C_PENDING && now - s->conns[i].since >= IDLE_MS)
            drop(s, &s->conns[i]);
    schedule_idle(s);
}

/* Put the response into c->out and start writing it (takes body). */
static void send_response(tfos__http *s, hconn *c, int status, const char *ctype, char *body, size_t len)
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
    fprintf(f, "HTTP/1.%d %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s\r\n",
            c->minor, status, tfos__http_reason(status), ctype ? ctype : "text/plain; charset=utf-8", len,
            c->keep ? "" : "Connection: close\r\n");
    if (body)
        fwrite(body, 1, len, f);
    fclose(f);
    free(body);
    c->out_off = 0;
    c->state = C_WRITE;
    c->since = tfos__now_ms();
    tfos__loop_events(s->loop, c->fd, TFOS_EV_WRITE);
}

static uint64_t conn_id(const tfos__http *s, const hconn *c)
{
    return ((uint64_t)(c - s->conns) << 32) | c->gen;
}

/* The head and body are in: ask the route. */
static void dispatch(tfos__http *s, hconn *c)
{
    char *body = c->buf + c->head_len;
    c->saved = body[c->body_len]; /* a pipelined request's first byte: put back by response_sent */
    body[c->body_len] = '\0';
    const tfos__http_route *r = &s->routes[c->route];
    tfos__http_req rq = {.method = c->method, .path = c->path, .query = c->query, .head = c->buf, .body = body,
                         .body_len = c->body_len, .id = conn_id(s, c)};
    tfos__http_resp rs = {.status = 200, .ctype = "text/plain; charset=utf-8"};
    c->state = C_PENDING;
    if (r->fn(&rq, &rs, r->user) == 1)
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
static void answer_head(tfos__http *s, hconn *c, int status, char *msg)
{
    char v[64];
    if (tfos__http_header(c->buf, "Content-Length", v, sizeof v) ? strcmp(v, "0") != 0
                                                                   : tfos__http_header(c->buf, "Transfer-Encoding", v,
                                                                                       sizeof v))
        c->keep = 0;
    c->body_len = 0;
    send_response(s, c, status, NULL, msg, 0);
}

/* A request head has ended at c->buf[head_len): check who asks, read its
 * framing and find its route. */
static void head_done(tfos__http *s, hconn *c)
{
    char v[64], version[16] = "", target[1024] = "";
    c->saved = c->buf[c->head_len];
    c->body_len = 0;
    c->method[0] = '\0';
    if (sscanf(c->buf, "%15s %1023s %15s", c->method, target, version) != 3 || strncmp(version, "HTTP/1.", 7)) {
        c->keep = 0;
        send_response(s, c, 400, NULL, NULL, 0);
        return;
    }
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
    int status = refused(s, c->buf, c->query);
    if (status) {
        answer_head(s, c, status, NULL);
        return;
    }
    if (tfos__http_header(c->buf, "Transfer-Encoding", v, sizeof v)) {
        c->keep = 0;
        send_response(s, c, 411, NULL, strdup("a request body needs a Content-Length (chunked bodies are not "
                                                "taken)"), 0);
        return;
    }
    c->route = match(s, c->path, c->method);
    if (c->route < 0) {
        answer_head(s, c, -c->route, NULL);
        return;
    }
    size_t max_body = s->routes[c->route].max_body;
    if (tfos__http_header(c->buf, "Content-Length", v, sizeof v)) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            c->keep = 0;
            send_response(s, c, 400, NULL, strdup("Content-Length is not a number"), 0);
            return;
        }
        if (n > max_body) {
            c->keep = 0;
            char *msg = NULL;
            if (asprintf(&msg, "the request body has %llu bytes; %s takes up to %zu", n, c->path, max_body) < 0)
                msg = NULL;
            send_response(s, c, max_body ? 413 : 405, NULL, msg, 0);
            return;
        }
        c->body_len = (size_t)n;
    }
    if (c->body_len && tfos__http_header(c->buf, "Expect", v, sizeof v) && !strcasecmp(v, "100-continue")) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)!send(c->fd, cont, sizeof cont - 1, MSG_NOSIGNAL); /* 25 bytes into an empty socket buffer */
    }
    c->state = C_BODY;
}

/* Grow c->buf to hold `need` bytes and a NUL. */
static int reserve(hconn *c, size_t need)
{
    if (need + 1 <= c->cap)
        return 0;
    size_t cap = c->cap ? c->cap : HEAD_MAX;
    while (cap < need + 1)
        cap *= 2;
    char *b = realloc(c->buf, cap);
    if (!b)
        return -1;
    c->buf = b;
    c->cap = cap;
    return 0;
}

/* Make progress on what has been read: a head, a body, a dispatch. */
static void advance(tfos__http *s, hconn *c)
{
    if (c->state == C_HEAD) {
        char *e = strstr(c->buf, "\r\n\r\n");
        size_t hl = e ? (size_t)(e - c->buf) + 4 : 0;
        if (!e && (e = strstr(c->buf, "\n\n")))
            hl = (size_t)(e - c->buf) + 2;
        if (!hl) {
            if (c->len >= HEAD_MAX)
                drop(s, c);
            return;
        }
        c->head_len = hl;
        head_done(s, c);
        if (c->state != C_BODY)
            return;
    }
    if (c->state == C_BODY && c->len >= c->head_len + c->body_len) {
        if (reserve(c, c->head_len + c->body_len + 1)) {
            drop(s, c);
            return;
        }
        dispatch(s, c);
    }
}

/* The response went out: close, or take the connection's next request. */
static void response_sent(tfos__http *s, hconn *c)
{
    if (!c->keep) {
        drop(s, c);
        return;
    }
    size_t used = c->head_len + c->body_len;
    size_t rest = c->len > used ? c->len - used : 0;
    c->buf[used] = c->saved;
    memmove(c->buf, c->buf + used, rest);
    c->len = rest;
    c->buf[rest] = '\0';
    c->head_len = c->body_len = 0;
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    c->gen++;
    c->state = C_HEAD;
    c->since = tfos__now_ms();
    tfos__loop_events(s->loop, c->fd, TFOS_EV_READ);
    if (rest)
        advance(s, c);
    schedule_idle(s);
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
            return;
        ssize_t w = send(fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0)
            c->out_off += (size_t)w;
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            drop(s, c);
        else if (c->out_off == c->out_len)
            response_sent(s, c);
        return;
    }
    if (c->state == C_PENDING) {
        /* the answer is not ready: only notice a client that has gone */
        char b;
        ssize_t r = recv(fd, &b, 1, MSG_PEEK);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            drop(s, c);
        else if (r > 0) /* pipelined: read it once this one is answered */
            tfos__loop_events(s->loop, fd, 0);
        return;
    }
    size_t want = c->state == C_BODY ? c->head_len + c->body_len - c->len : 4096;
    if (want < 4096)
        want = 4096;
    if (reserve(c, c->len + want)) {
        drop(s, c);
        return;
    }
    size_t room = c->state == C_HEAD && c->cap - 1 - c->len > HEAD_MAX ? HEAD_MAX : c->cap - 1 - c->len;
    ssize_t r = recv(fd, c->buf + c->len, room, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        drop(s, c);
        return;
    }
    if (r < 0)
        return;
    c->len += (size_t)r;
    c->buf[c->len] = '\0';
    c->since = tfos__now_ms();
    advance(s, c);
}

static void on_listen(tfos__loop *l, int lfd, int events, void *user)
{
    (void)events;
    tfos__http *s = user;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        hconn *c = NULL;
        for (int i = 0; i < s->nconns && !c; i++)
            if (s->conns[i].fd < 0)
                c = &s->conns[i];
        if (!c || reserve(c, HEAD_MAX) || tfos__loop_watch(l, fd, TFOS_EV_READ, on_conn, s)) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->len = 0;
        c->buf[0] = '\0';
        c->state = C_HEAD;
        c->since = tfos__now_ms();
        int busy = 1;
        for (int i = 0; i < s->nconns && busy; i++)
            busy = s->conns[i].fd >= 0;
        if (busy) { /* the rest wait in the backlog until a slot is free */
            s->paused = 1;
            tfos__loop_events(l, lfd, 0);
            break;
        }
    }
    schedule_idle(s);
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
    schedule_idle(s);
    return 0;
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
    tfos__timer_disarm(s->loop, &s->idle);
    tfos__loop_unwatch(s->loop, s->lfd);
    close(s->lfd);
    for (int i = 0; i < s->nroutes; i++)
        free((char *)s->routes[i].path);
    free(s->routes);
    free(s->conns);
    free(s);
}
