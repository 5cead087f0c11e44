/* http_test.c: the HTTP server (web/http.h) on a loop, with a client
 * socket in the test: request line and headers, Content-Length bodies,
 * chunked bodies (411), bodies over a route's limit (413, 405), heads over
 * 8 KiB, keep-alive and HTTP/1.0 close, pipelining, the Host check against
 * DNS rebinding, the token (header and ?token=), route-list dispatch by
 * prefix and method, a deferred reply, an idle connection dropped. */
#include "check.h"
#include "core/loop.h"
#include "platform/clock.h"
#include "tfos/tfos.h"
#include "web/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a client on the test's side ------------------------------------------ */

typedef struct client {
    int fd;
    char buf[1 << 17];
    size_t len;
} client;

static tfos__loop *g_loop;

static client *dial(int port)
{
    client *c = calloc(1, sizeof *c);
    CHECK(c != NULL);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(c->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(c->fd, (struct sockaddr *)&a, sizeof a) == 0);
    return c;
}

static void hang_up(client *c)
{
    close(c->fd);
    free(c);
}

static void say(client *c, const char *text, size_t len)
{
    if (!len)
        len = strlen(text);
    while (len) {
        ssize_t w = send(c->fd, text, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN) { /* the server reads only while its loop runs */
            tfos__loop_run(g_loop, 5);
            continue;
        }
        CHECK(w > 0);
        text += w;
        len -= (size_t)w;
    }
}

/* Run the loop and read until pred holds or 3 s pass. Returns 1 when the
 * server closed the connection. */
static int pump(client *c, int (*pred)(const client *))
{
    int64_t until = tfos__now_ms() + 3000;
    while (!pred(c) && tfos__now_ms() < until) {
        tfos__loop_run(g_loop, 5);
        ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, MSG_DONTWAIT);
        if (r == 0)
            return 1;
        if (r > 0) {
            c->len += (size_t)r;
            c->buf[c->len] = '\0';
        }
    }
    return 0;
}

/* The length of the first whole response in c->buf, or 0. */
static size_t whole_response(const client *c)
{
    const char *end = strstr(c->buf, "\r\n\r\n");
    if (!end)
        return 0;
    const char *cl = strstr(c->buf, "Content-Length: ");
    size_t n = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
    size_t total = (size_t)(end + 4 - c->buf) + n;
    return c->len >= total ? total : 0;
}

static int has_response(const client *c)
{
    return whole_response(c) != 0;
}

/* The next response: its status, body into body (NUL-terminated) and its
 * head into head (when not NULL). -1: none came (closed or timed out). */
static int response(client *c, char *body, size_t cap, char *head, size_t hcap)
{
    pump(c, has_response);
    size_t total = whole_response(c);
    if (!total)
        return -1;
    int status = 0;
    CHECK(sscanf(c->buf, "HTTP/1.%*d %d", &status) == 1);
    const char *b = strstr(c->buf, "\r\n\r\n") + 4;
    snprintf(body, cap, "%.*s", (int)(c->buf + total - b), b);
    if (head)
        snprintf(head, hcap, "%.*s", (int)(b - c->buf), c->buf);
    memmove(c->buf, c->buf + total, c->len - total);
    c->len -= total;
    c->buf[c->len] = '\0';
    return status;
}

static int never(const client *c)
{
    (void)c;
    return 0;
}

/* Did the server close the connection (within 3 s, after what it sent)? */
static int closed(client *c)
{
    return pump(c, never);
}

/* One request on a fresh connection: its status (body into body). */
static int ask(int port, const char *request, char *body, size_t cap)
{
    client *c = dial(port);
    say(c, request, 0);
    int st = response(c, body, cap, NULL, 0);
    hang_up(c);
    return st;
}

/* ---- routes ------------------------------------------------------------------ */

/* "METHOD PATH ?QUERY X-Test=VALUE BODY" */
static int echo(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    char x[64] = "";
    tfos__http_header(rq->head, "X-Test", x, sizeof x);
    CHECK(asprintf(&rs->body, "%s:%s %s ?%s X-Test=%s %.*s", (const char *)user, rq->method, rq->path, rq->query, x,
                   (int)rq->body_len, rq->body) > 0);
    return 0;
}

static uint64_t g_deferred;
static int g_ndeferred;

static int later(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)rs;
    (void)user;
    g_deferred = rq->id;
    g_ndeferred++;
    return 1;
}

static tfos__http *serve(int *port)
{
    tfos__http *h;
    CHECK_EQ(tfos__http_open(&h, g_loop, "127.0.0.1", 0, 8), 0);
    tfos__http_route routes[] = {
        {.path = "/status", .methods = TFOS_HTTP_GET, .fn = echo, .user = "status"},
        {.path = "/v2", .fn = echo, .user = "v2"},
        {.path = "/v2/", .prefix = 1, .fn = echo, .user = "v2/", .max_body = 1024},
        {.path = "/v2/models/", .prefix = 1, .methods = TFOS_HTTP_POST, .fn = echo, .user = "models",
         .max_body = 64},
        {.path = "/later", .methods = TFOS_HTTP_GET, .fn = later},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        CHECK_EQ(tfos__http_add(h, &routes[i]), 0);
    *port = tfos__http_port(h);
    CHECK(*port > 0);
    return h;
}

/* ---- the cases ------------------------------------------------------------------ */

static void request_line_and_headers(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096];
    CHECK_EQ(ask(port, "GET /status?a=1&b=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Test: yes\r\n\r\n", body, sizeof body),
             200);
    CHECK_STR(body, "status:GET /status ?a=1&b=2 X-Test=yes ");
    /* bare \n line ends are taken too */
    CHECK_EQ(ask(port, "GET /status HTTP/1.0\nX-Test:  tabbed\n\n", body, sizeof body), 200);
    CHECK_STR(body, "status:GET /status ? X-Test=tabbed ");
    /* not HTTP */
    CHECK_EQ(ask(port, "HELLO\r\n\r\n", body, sizeof body), 400);
    CHECK_EQ(ask(port, "GET /status SPDY/3\r\n\r\n", body, sizeof body), 400);
    tfos__http_close(h);
}

static void content_length_bodies(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096];
    CHECK_EQ(ask(port, "POST /v2/x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", body, sizeof body), 200);
    CHECK_STR(body, "v2/:POST /v2/x ? X-Test= hello");
    /* the body arrives in pieces, after an Expect: 100-continue */
    client *c = dial(port);
    say(c, "POST /v2/y HTTP/1.1\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n", 0);
    char head[512];
    CHECK(pump(c, has_response) == 0 && strstr(c->buf, "HTTP/1.1 100 Continue\r\n\r\n") == c->buf);
    c->len = 0;
    say(c, "hello", 0);
    tfos__loop_run(g_loop, 20);
    say(c, " world", 0);
    CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 200);
    CHECK_STR(body, "v2/:POST /v2/y ? X-Test= hello world");
    CHECK(strstr(head, "Content-Length: ") && strstr(head, "Cache-Control: no-store"));
    hang_up(c);
    /* not a number */
    CHECK_EQ(ask(port, "POST /v2/x HTTP/1.1\r\nContent-Length: -3\r\n\r\n", body, sizeof body), 400);
    CHECK_EQ(ask(port, "POST /v2/x HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", body, sizeof body), 400);
    tfos__http_close(h);
}

static void chunked_is_411_and_too_big_is_413(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096];
    client *c = dial(port);
    say(c, "POST /v2/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 411);
    CHECK(strstr(body, "Content-Length"));
    CHECK(closed(c)); /* the rest of the body is not read */
    hang_up(c);
    /* a route's own limit: 1024 under /v2/, 64 under /v2/models/ */
    CHECK_EQ(ask(port, "POST /v2/x HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", body, sizeof body), 413);
    CHECK(strstr(body, "1025 bytes") && strstr(body, "up to 1024"));
    CHECK_EQ(ask(port, "POST /v2/models/m HTTP/1.1\r\nContent-Length: 65\r\n\r\n", body, sizeof body), 413);
    CHECK_EQ(ask(port, "POST /v2/models/m HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", body, sizeof body), 200);
    /* a route that takes no body */
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", body, sizeof body), 405);
    tfos__http_close(h);
}

static void heads_over_8k_are_dropped(void)
{
    int port;
    tfos__http *h = serve(&port);
    client *c = dial(port);
    say(c, "GET /status HTTP/1.1\r\n", 0);
    char line[128];
    memset(line, 'a', sizeof line);
    memcpy(line, "X-Pad: ", 7);
    memcpy(line + sizeof line - 2, "\r\n", 2);
    for (int i = 0; i < 70; i++) /* 70 * 128 > 8 KiB, no blank line */
        say(c, line, sizeof line);
    CHECK(closed(c));
    CHECK_EQ(c->len, 0); /* no answer, just gone */
    hang_up(c);
    /* one just under the bound is fine */
    c = dial(port);
    say(c, "GET /status HTTP/1.1\r\n", 0);
    for (int i = 0; i < 60; i++)
        say(c, line, sizeof line);
    say(c, "\r\n", 0);
    char body[4096];
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    hang_up(c);
    tfos__http_close(h);
}

static void keep_alive_and_http10_close(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096], head[1024];
    client *c = dial(port);
    for (int i = 0; i < 3; i++) { /* HTTP/1.1: one connection, several requests */
        say(c, "GET /status?n=1 HTTP/1.1\r\n\r\n", 0);
        CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 200);
        CHECK(!strstr(head, "Connection: close"));
        CHECK(!strncmp(head, "HTTP/1.1 200", 12));
    }
    /* pipelined: both answered, in order */
    say(c, "GET /status?n=A HTTP/1.1\r\n\r\nPOST /v2/p HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET /status?n=C "
           "HTTP/1.1\r\n\r\n",
        0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    CHECK_STR(body, "status:GET /status ?n=A X-Test= ");
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    CHECK_STR(body, "v2/:POST /v2/p ? X-Test= ok");
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    CHECK_STR(body, "status:GET /status ?n=C X-Test= ");
    /* Connection: close is honoured */
    say(c, "GET /status HTTP/1.1\r\nConnection: close\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 200);
    CHECK(strstr(head, "Connection: close"));
    CHECK(closed(c));
    hang_up(c);
    /* HTTP/1.0: answered in kind, then closed */
    c = dial(port);
    say(c, "GET /status HTTP/1.0\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 200);
    CHECK(!strncmp(head, "HTTP/1.0 200", 12) && strstr(head, "Connection: close"));
    CHECK(closed(c));
    hang_up(c);
    /* ... unless it asks to keep it */
    c = dial(port);
    say(c, "GET /status HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    say(c, "GET /status HTTP/1.0\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    hang_up(c);
    tfos__http_close(h);
}

static void host_check_against_dns_rebinding(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096], req[256];
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nHost: attacker.example\r\n\r\n", body, sizeof body), 421);
    snprintf(req, sizeof req, "GET /status HTTP/1.1\r\nHost: attacker.example:%d\r\n\r\n", port);
    CHECK_EQ(ask(port, req, body, sizeof body), 421);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nHost: 127.example\r\n\r\n", body, sizeof body), 421);
    snprintf(req, sizeof req, "GET /status HTTP/1.1\r\nHost: localhost:%d\r\n\r\n", port);
    CHECK_EQ(ask(port, req, body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nHost: LocalHost\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status HTTP/1.0\r\n\r\n", body, sizeof body), 200); /* no Host: not a browser */
    /* refused before the body is read: the connection then closes */
    client *c = dial(port);
    say(c, "POST /v2/x HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 5\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 421);
    CHECK(closed(c));
    hang_up(c);
    tfos__http_close(h);
}

static void the_token(void)
{
    int port;
    tfos__http *h = serve(&port);
    tfos__http_set_token(h, "s3cret-token");
    char body[4096];
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\n\r\n", body, sizeof body), 401);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nAuthorization: Bearer s3cret-token\r\n\r\n", body, sizeof body),
             200);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nAuthorization: Bearer s3cret-tokeN\r\n\r\n", body, sizeof body),
             401);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\nAuthorization: Basic s3cret-token\r\n\r\n", body, sizeof body), 401);
    CHECK_EQ(ask(port, "GET /status?token=s3cret-token HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status?a=1&token=s3cret-token HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status?token=s3cret-token&b=2 HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /status?token=s3cret-token2 HTTP/1.1\r\n\r\n", body, sizeof body), 401);
    CHECK_EQ(ask(port, "GET /status?xtoken=s3cret-token HTTP/1.1\r\n\r\n", body, sizeof body), 401);
    /* with a token the Host is not what decides */
    CHECK_EQ(ask(port, "GET /status?token=s3cret-token HTTP/1.1\r\nHost: far.example\r\n\r\n", body, sizeof body),
             200);
    /* a refused request keeps a kept-alive connection usable when it had no body */
    client *c = dial(port);
    say(c, "GET /status HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 401);
    say(c, "GET /status HTTP/1.1\r\nAuthorization: Bearer s3cret-token\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    hang_up(c);
    tfos__http_set_token(h, NULL);
    CHECK_EQ(ask(port, "GET /status HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    tfos__http_close(h);
}

static int answer_with(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)rq;
    rs->body = strdup(user);
    rs->ctype = "application/json";
    return 0;
}

static void route_list_dispatch(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096], head[1024];
    /* exact beats prefix; the longest prefix wins */
    CHECK_EQ(ask(port, "GET /v2 HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    CHECK_STR(body, "v2:GET /v2 ? X-Test= ");
    CHECK_EQ(ask(port, "GET /v2/health/ready HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    CHECK_STR(body, "v2/:GET /v2/health/ready ? X-Test= ");
    CHECK_EQ(ask(port, "POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", body, sizeof body), 200);
    CHECK_STR(body, "models:POST /v2/models/m/infer ? X-Test= {}");
    /* methods: any on /v2/ (the handler decides), POST only under /v2/models/, GET on /status */
    CHECK_EQ(ask(port, "PUT /v2/x HTTP/1.1\r\n\r\n", body, sizeof body), 200);
    CHECK_EQ(ask(port, "GET /v2/models/m HTTP/1.1\r\n\r\n", body, sizeof body), 405);
    CHECK_EQ(ask(port, "PUT /status HTTP/1.1\r\n\r\n", body, sizeof body), 405);
    CHECK_EQ(ask(port, "POST /status HTTP/1.1\r\n\r\n", body, sizeof body), 405);
    /* no route: 404; a prefix is not a path's prefix in words */
    CHECK_EQ(ask(port, "GET /nothing HTTP/1.1\r\n\r\n", body, sizeof body), 404);
    CHECK_EQ(ask(port, "GET /statusx HTTP/1.1\r\n\r\n", body, sizeof body), 404);
    CHECK_EQ(ask(port, "GET /v HTTP/1.1\r\n\r\n", body, sizeof body), 404);
    /* a route added later; one added again replaces the first */
    tfos__http_route r = {.path = "/metrics", .methods = TFOS_HTTP_GET, .fn = answer_with, .user = "{\"a\": 1}"};
    CHECK_EQ(tfos__http_add(h, &r), 0);
    client *c = dial(port);
    say(c, "GET /metrics HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 200);
    CHECK_STR(body, "{\"a\": 1}");
    CHECK(strstr(head, "Content-Type: application/json\r\n"));
    r.user = "{\"b\": 2}";
    CHECK_EQ(tfos__http_add(h, &r), 0);
    say(c, "GET /metrics HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    CHECK_STR(body, "{\"b\": 2}");
    hang_up(c);
    r.fn = NULL;
    CHECK_EQ(tfos__http_add(h, &r), TFOS_EINVAL);
    tfos__http_close(h);
}

static void deferred_reply(void)
{
    int port;
    tfos__http *h = serve(&port);
    char body[4096];
    client *c = dial(port);
    g_ndeferred = 0;
    say(c, "GET /later HTTP/1.1\r\n\r\n", 0);
    int64_t until = tfos__now_ms() + 3000;
    while (!g_ndeferred && tfos__now_ms() < until)
        tfos__loop_run(g_loop, 5);
    CHECK_EQ(g_ndeferred, 1);
    /* nothing yet, and a waiting connection is not idle */
    CHECK(pump(c, has_response) == 0 && c->len == 0);
    CHECK(tfos__http_busy(h) == 0);
    uint64_t id = g_deferred;
    CHECK_EQ(tfos__http_reply(h, id, 202, "application/json", strdup("{\"done\": true}"), 0), 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 202);
    CHECK_STR(body, "{\"done\": true}");
    /* the same id again: that request is answered */
    CHECK_EQ(tfos__http_reply(h, id, 200, NULL, strdup("x"), 0), TFOS_ECLOSED);
    /* the next request on the connection gets an id of its own */
    say(c, "GET /later HTTP/1.1\r\n\r\n", 0);
    until = tfos__now_ms() + 3000;
    while (g_ndeferred < 2 && tfos__now_ms() < until)
        tfos__loop_run(g_loop, 5);
    CHECK_EQ(g_ndeferred, 2);
    CHECK(g_deferred != id);
    id = g_deferred;
    /* the client goes: the server notices while the answer is pending, and
     * the answer is then refused, harmlessly */
    hang_up(c);
    for (int64_t t = tfos__now_ms() + 300; tfos__now_ms() < t;)
        tfos__loop_run(g_loop, 5);
    CHECK_EQ(tfos__http_reply(h, id, 200, NULL, strdup("late"), 0), TFOS_ECLOSED);
    CHECK_EQ(tfos__http_reply(h, (uint64_t)999 << 32, 200, NULL, strdup("nobody"), 0), TFOS_ECLOSED);
    tfos__http_close(h);
}

static void idle_connection_dropped(void)
{
    int port;
    tfos__http *h = serve(&port);
    client *quiet = dial(port), *talker = dial(port);
    char body[4096];
    int64_t t0 = tfos__now_ms();
    /* a connection that talks now and then stays; one that never does goes after 5 s */
    int quiet_gone = 0;
    while (tfos__now_ms() - t0 < 7000 && !quiet_gone) {
        say(talker, "GET /status HTTP/1.1\r\n\r\n", 0);
        CHECK_EQ(response(talker, body, sizeof body, NULL, 0), 200);
        int64_t until = tfos__now_ms() + 500;
        while (tfos__now_ms() < until && !quiet_gone) {
            tfos__loop_run(g_loop, 20);
            char b;
            quiet_gone = recv(quiet->fd, &b, 1, MSG_DONTWAIT) == 0;
        }
    }
    int64_t took = tfos__now_ms() - t0;
    CHECK(quiet_gone);
    CHECK(took >= 4900 && took < 7000);
    say(talker, "GET /status HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ(response(talker, body, sizeof body, NULL, 0), 200);
    hang_up(quiet);
    hang_up(talker);
    tfos__http_close(h);
}

static void slots_taken_wait_in_the_backlog(void)
{
    int port;
    tfos__http *h = serve(&port); /* 8 connections at once */
    client *held[8];
    for (int i = 0; i < 8; i++) {
        held[i] = dial(port);
        tfos__loop_run(g_loop, 5);
    }
    client *c = dial(port); /* the kernel takes it; the server does not yet */
    say(c, "GET /status HTTP/1.1\r\n\r\n", 0);
    CHECK(pump(c, has_response) == 0 && c->len == 0);
    hang_up(held[0]); /* a slot comes free: c is served */
    char body[4096];
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    hang_up(c);
    for (int i = 1; i < 8; i++)
        hang_up(held[i]);
    tfos__http_close(h);
}

int main(void)
{
    CHECK_EQ(tfos__loop_open(&g_loop), 0);
    RUN(request_line_and_headers);
    RUN(content_length_bodies);
    RUN(chunked_is_411_and_too_big_is_413);
    RUN(heads_over_8k_are_dropped);
    RUN(keep_alive_and_http10_close);
    RUN(host_check_against_dns_rebinding);
    RUN(the_token);
    RUN(route_list_dispatch);
    RUN(deferred_reply);
    RUN(slots_taken_wait_in_the_backlog);
    RUN(idle_connection_dropped);
    CHECK_EQ(tfos__http_busy(NULL), 0);
    tfos__http_close(NULL);
    tfos__loop_close(g_loop);
    return 0;
}
