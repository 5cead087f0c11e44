/* http.c: the status page server (see http.h). */
#include "run/http.h"

#include "platform/clock.h"
#include "platform/net.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 16
#define REQ_MAX 8192
#define IDLE_MS 5000

typedef struct hconn {
    int fd;
    size_t len;
    int64_t since;
    char buf[REQ_MAX];
} hconn;

struct tfos__http {
    int lfd, port;
    tfos__http_handler handler;
    void *user;
    hconn conns[MAX_CONNS];
};

int tfos__http_open(tfos__http **out, const char *host, int port, tfos__http_handler h, void *user)
{
    tfos__http *s = calloc(1, sizeof *s);
    if (!s)
        return TFOS_ENOMEM;
    for (int i = 0; i < MAX_CONNS; i++)
        s->conns[i].fd = -1;
    int rc = tfos__tcp_listen(host, port, 16, &s->lfd, &s->port);
    if (rc) {
        free(s);
        return rc;
    }
    s->handler = h;
    s->user = user;
    *out = s;
    return 0;
}

int tfos__http_port(const tfos__http *s)
{
    return s->port;
}

static void drop(hconn *c)
{
    close(c->fd);
    c->fd = -1;
    c->len = 0;
}

/* Small responses on a local socket: write them out with a short bound. */
static void write_all(int fd, const char *p, size_t n)
{
    int64_t deadline = tfos__now_ms() + 1000;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR) && tfos__now_ms() < deadline) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, 50);
            continue;
        }
        return;
    }
}

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
    char head[256];
    size_t blen = body ? strlen(body) : 0;
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason, ctype, blen);
    write_all(c->fd, head, (size_t)hl);
    if (body)
        write_all(c->fd, body, blen);
    free(body);
    drop(c);
}

void tfos__http_step(tfos__http *s)
{
    int64_t now = tfos__now_ms();
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        int slot = -1;
        for (int i = 0; i < MAX_CONNS; i++)
            if (s->conns[i].fd < 0) {
                slot = i;
                break;
            }
        if (slot < 0) {
            close(fd);
            continue;
        }
        s->conns[slot].fd = fd;
        s->conns[slot].len = 0;
        s->conns[slot].since = now;
    }
    for (int i = 0; i < MAX_CONNS; i++) {
        hconn *c = &s->conns[i];
        if (c->fd < 0)
            continue;
        ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            c->buf[c->len] = 0;
            if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n")) {
                respond(s, c);
                continue;
            }
            if (c->len >= sizeof c->buf - 1) {
                drop(c);
                continue;
            }
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            drop(c);
            continue;
        }
        if (now - c->since > IDLE_MS)
            drop(c);
    }
}

void tfos__http_close(tfos__http *s)
{
    if (!s)
        return;
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0)
            close(s->conns[i].fd);
    close(s->lfd);
    free(s);
}
