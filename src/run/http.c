/* http.c: the status page server (see http.h). Each connection is read
 * until its request's header ends, answered into a buffer, and written out
 * as its socket takes it; one timer drops the oldest idle connection. */
#include "run/http.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    } else {
        char *q = strchr(path, '?');
        if (q)
            *q = 0;
        body = s->handler(path, &ctype, &status, s->user);
    }
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed"
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
    int rc = tfos__tcp_listen(host, port, 64, &s->lfd, &s->port);
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
