/* http.c: the status page server (see http.h). Each connection is read
 * until its request's header ends, answered into a buffer, and written out
 * as its socket takes it; one timer drops idle connections. While every
 * slot is taken the listening socket is not accepted from, so clients wait
 * in the kernel's backlog instead of being dropped.
 *
 * Who may ask: on loopback, only requests whose Host is a loopback name (a
 * page from elsewhere that rebinds its DNS name to 127.0.0.1 still sends its
 * own name, and gets 421); with a token (required when listening beyond
 * loopback), only requests carrying it, as `Authorization: Bearer TOKEN` or
 * `?token=TOKEN`. */
#include "run/http.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 64
#define REQ_MAX 8192
#define IDLE_MS 5000

typedef struct hconn {
    int fd;          /* -1: free slot */
    size_t len;
    int64_t since;
    char *out;       /* the response, once built */
    size_t out_len, out_off;
    char buf[REQ_MAX];
} hconn;

struct tfos__http {
    tfos__loop *loop;
    int lfd, port;
    int paused;      /* every slot taken: not accepting */
    char token[80];  /* "" : none */
    tfos__http_handler handler;
    void *user;
    tfos__timer idle;
    hconn conns[MAX_CONNS];
};

static void drop(tfos__http *s, hconn *c)
{
    tfos__loop_unwatch(s->loop, c->fd);
    close(c->fd);
    c->fd = -1;
    c->len = 0;
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    if (s->paused) { /* a slot is free again */
        s->paused = 0;
        tfos__loop_events(s->loop, s->lfd, TFOS_EV_READ);
    }
}

/* The value of header `name` (case-insensitive) into out, or 0 if absent. */
static int header(const char *req, const char *name, char *out, size_t len)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(req, "\n"); p; p = strstr(p + 1, "\n")) {
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

/* Is the request allowed (see the top of this file)? 0, or the status. */
static int refused(const tfos__http *s, const char *req, char *path)
{
    if (s->token[0]) {
        char auth[160] = "";
        char *q = strchr(path, '?');
        const char *t = q ? strstr(q, "token=") : NULL;
        if (header(req, "Authorization", auth, sizeof auth) && !strncmp(auth, "Bearer ", 7) &&
            !strcmp(auth + 7, s->token))
            return 0;
        if (t && (t == q + 1 || t[-1] == '&') && !strncmp(t + 6, s->token, strlen(s->token)) &&
            (t[6 + strlen(s->token)] == '\0' || t[6 + strlen(s->token)] == '&'))
            return 0;
        return 401;
    }
    char host[300];
    if (!header(req, "Host", host, sizeof host))
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
    if (!strcasecmp(name, "localhost") || !strcmp(name, "[::1]") || !strncmp(name, "127.", 4))
        return 0;
    return 421;
}

static void on_idle(tfos__loop *l, tfos__timer *t, void *user);

static void schedule_idle(tfos__http *s)
{
    int64_t at = INT64_MAX;
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].since + IDLE_MS < at)
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
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0 && now - s->conns[i].since >= IDLE_MS)
            drop(s, &s->conns[i]);
    schedule_idle(s);
}

/* Build the response into c->out. */
static void respond(tfos__http *s, hconn *c)
{
    char method[8], path[512];
    int status = 200;
    const char *ctype = "text/plain; charset=utf-8";
    char *body = NULL;
    if (sscanf(c->buf, "%7s %511s HTTP/", method, path) != 2) {
        status = 400;
    } else if (strcmp(method, "GET")) {
        status = 405;
    } else if ((status = refused(s, c->buf, path))) {
        /* 401 without the token; 421 for a Host that is not this machine */
    } else {
        status = 200;
        char *q = strchr(path, '?');
        if (q)
            *q = 0;
        body = s->handler(path, &ctype, &status, s->user);
    }
    const char *reason = status == 200   ? "OK"
                         : status == 404 ? "Not Found"
                         : status == 405 ? "Method Not Allowed"
                         : status == 401 ? "Unauthorized (the status page needs its token)"
                         : status == 421 ? "Misdirected Request (Host is not this machine)"
                                         : "Bad Request";
    if (!body) {
        body = strdup(reason);
        ctype = "text/plain; charset=utf-8";
    }
    size_t blen = body ? strlen(body) : 0;
    FILE *f = open_memstream(&c->out, &c->out_len);
    if (!f) {
        free(body);
        drop(s, c);
        return;
    }
    fprintf(f, "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
               "Connection: close\r\n\r\n", status, reason, ctype, blen);
    if (body)
        fwrite(body, 1, blen, f);
    fclose(f);
    free(body);
    c->out_off = 0;
    tfos__loop_events(s->loop, c->fd, TFOS_EV_WRITE);
}

static void on_conn(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    tfos__http *s = user;
    hconn *c = NULL;
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd == fd)
            c = &s->conns[i];
    if (!c)
        return;
    if (c->out) {
        if (!(events & TFOS_EV_WRITE))
            return;
        ssize_t w = send(fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0)
            c->out_off += (size_t)w;
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || c->out_off == c->out_len)
            drop(s, c);
        return;
    }
    ssize_t r = recv(fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        drop(s, c);
        return;
    }
    if (r < 0)
        return;
    c->len += (size_t)r;
    c->buf[c->len] = 0;
    if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n"))
        respond(s, c);
    else if (c->len >= sizeof c->buf - 1)
        drop(s, c);
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
        for (int i = 0; i < MAX_CONNS && !c; i++)
            if (s->conns[i].fd < 0)
                c = &s->conns[i];
        if (!c || tfos__loop_watch(l, fd, TFOS_EV_READ, on_conn, s)) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->len = 0;
        c->since = tfos__now_ms();
        int busy = 1;
        for (int i = 0; i < MAX_CONNS && busy; i++)
            busy = s->conns[i].fd >= 0;
        if (busy) { /* the rest wait in the backlog until a slot is free */
            s->paused = 1;
            tfos__loop_events(l, lfd, 0);
            break;
        }
    }
    schedule_idle(s);
}

int tfos__http_open(tfos__http **out, tfos__loop *loop, const char *host, int port, tfos__http_handler h,
                    void *user)
{
    tfos__http *s = calloc(1, sizeof *s);
    if (!s)
        return TFOS_ENOMEM;
    for (int i = 0; i < MAX_CONNS; i++)
        s->conns[i].fd = -1;
    int rc = tfos__tcp_listen(host, port, 1024, &s->lfd, &s->port);
    if (rc) {
        free(s);
        return rc;
    }
    s->loop = loop;
    s->handler = h;
    s->user = user;
    rc = tfos__loop_watch(loop, s->lfd, TFOS_EV_READ, on_listen, s);
    if (rc) {
        close(s->lfd);
        free(s);
        return rc;
    }
    *out = s;
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
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].out && s->conns[i].out_off < s->conns[i].out_len)
            return 1;
    return 0;
}

void tfos__http_close(tfos__http *s)
{
    if (!s)
        return;
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0)
            drop(s, &s->conns[i]);
    tfos__timer_disarm(s->loop, &s->idle);
    tfos__loop_unwatch(s->loop, s->lfd);
    close(s->lfd);
    free(s);
}
