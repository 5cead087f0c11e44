/* http_test.c: the HTTP server (web/http.h) on a loop, with a client
 * socket in the test: request line and headers, Content-Length bodies,
 * chunked bodies (411), bodies over a route's limit (413, 405), heads over
 * 8 KiB (431, closed without a reset), keep-alive and HTTP/1.0 close,
 * pipelining, the Host check against DNS rebinding, the token (header and
 * ?token=, checked before any body is read), route-list dispatch by prefix
 * and method, a deferred reply, an idle connection dropped; and abuse:
 * clients that drip their requests a byte at a time (one deadline per
 * request, slots taken from them for real clients), bodies announced by
 * many clients at once (a budget), a 64 MiB body. */
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

/* Send what the socket takes now; -1 (errno set) when the server has gone. */
static ssize_t try_say(client *c, const char *text, size_t len)
{
    ssize_t w = send(c->fd, text, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    return w < 0 && errno == EAGAIN ? 0 : w;
}

static void say(client *c, const char *text, size_t len)
{
    if (!len)
        len = strlen(text);
    while (len) {
        ssize_t w = send(c->fd, text, len, MSG_NOSIGNAL | MSG_DONTWAIT);
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

static uint64_t g_deferred, g_ids[64];
static int g_ndeferred;

static int later(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)rs;
    (void)user;
    g_deferred = rq->id;
    if (g_ndeferred < 64)
        g_ids[g_ndeferred] = rq->id;
    g_ndeferred++;
    return 1;
}

/* "N": the body's length, once every byte was checked against fill() */
static int sizer(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)user;
    for (size_t i = 0; i < rq->body_len; i++)
        CHECK(rq->body[i] == (char)('a' + i % 26));
    CHECK(asprintf(&rs->body, "%zu", rq->body_len) > 0);
    return 0;
}

/* n bytes of a body sizer checks */
static char *fill(size_t n)
{
    char *b = malloc(n + 1);
    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)('a' + i % 26);
    b[n] = '\0';
    return b;
}

static void run_until(int (*done)(void), int ms)
{
    for (int64_t until = tfos__now_ms() + ms; !done() && tfos__now_ms() < until;)
        tfos__loop_run(g_loop, 5);
}

static int deferred_one(void)
{
    return g_ndeferred >= 1;
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
        {.path = "/upload", .methods = TFOS_HTTP_POST, .fn = sizer, .max_body = (size_t)96 << 20},
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

static void heads_over_8k_get_431_and_a_clean_close(void)
{
    int port;
    tfos__http *h = serve(&port);
    client *c = dial(port);
    say(c, "GET /status HTTP/1.1\r\n", 0);
    char line[128];
    memset(line, 'a', sizeof line);
    memcpy(line, "X-Pad: ", 7);
    memcpy(line + sizeof line - 2, "\r\n", 2);
    /* 70 * 128 > 8 KiB with no blank line, then 256 KiB more while the
     * server answers: what it has not read must not turn its close into a
     * reset (the client would lose the answer) */
    int failed = 0;
    for (int i = 0; i < 70 + 2048 && !failed; i++) {
        for (size_t off = 0; off < sizeof line && !failed;) {
            ssize_t w = try_say(c, line + off, sizeof line - off);
            failed = w < 0;
            off += w > 0 ? (size_t)w : 0;
            if (!w)
                tfos__loop_run(g_loop, 5);
        }
    }
    CHECK(!failed);
    char body[4096], head[1024];
    CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 431);
    CHECK(strstr(body, "over 8192 bytes"));
    CHECK(strstr(head, "Connection: close"));
    CHECK(closed(c)); /* an end of stream, not ECONNRESET */
    hang_up(c);
    /* one just under the bound is fine */
    c = dial(port);
    say(c, "GET /status HTTP/1.1\r\n", 0);
    for (int i = 0; i < 60; i++)
        say(c, line, sizeof line);
    say(c, "\r\n", 0);
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
    /* names that only start like a loopback literal resolve wherever their owner likes */
    static const char *const far[] = {"127.0.0.1.evil.example", "127.0.0.1.evil.example:80", "localhost.evil.example",
                                      "127.0.0.1:80.evil.example", "localhost:abc", "localhost:", "localhost:123456",
                                      "[::1].evil.example", "[::1]:80x", "[::2]", "[::ffff:127.0.0.1]", "[::1",
                                      "127.1", "0x7f.0.0.1", "", "evil.example#@127.0.0.1"};
    for (size_t i = 0; i < sizeof far / sizeof *far; i++) {
        snprintf(req, sizeof req, "GET /status HTTP/1.1\r\nHost: %s\r\n\r\n", far[i]);
        if (ask(port, req, body, sizeof body) != 421) {
            fprintf(stderr, "Host: %s was taken\n", far[i]);
            CHECK(0);
        }
    }
    static const char *const here[] = {"localhost", "localhost:8500", "127.0.0.1", "127.0.0.1:8500", "127.1.2.3:1",
                                       "[::1]", "[::1]:8500", "[0:0:0:0:0:0:0:1]:80", "LOCALHOST:80"};
    for (size_t i = 0; i < sizeof here / sizeof *here; i++) {
        snprintf(req, sizeof req, "GET /status HTTP/1.1\r\nHost: %s\r\n\r\n", here[i]);
        if (ask(port, req, body, sizeof body) != 200) {
            fprintf(stderr, "Host: %s was refused\n", here[i]);
            CHECK(0);
        }
    }
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
    /* checked on the head: a body is not waited for (nor read) without the token */
    client *b = dial(port);
    say(b, "POST /v2/x HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", 0);
    CHECK_EQ(response(b, body, sizeof body, NULL, 0), 401);
    CHECK(closed(b));
    hang_up(b);
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

static int deferred_eight(void)
{
    return g_ndeferred >= 8;
}

static void slots_taken_wait_in_the_backlog(void)
{
    int port;
    tfos__http *h = serve(&port); /* 8 connections at once */
    /* every slot waits for a deferred answer: none may be taken */
    client *held[8];
    g_ndeferred = 0;
    for (int i = 0; i < 8; i++) {
        held[i] = dial(port);
        say(held[i], "GET /later HTTP/1.1\r\n\r\n", 0);
    }
    run_until(deferred_eight, 3000);
    CHECK_EQ(g_ndeferred, 8);
    client *c = dial(port); /* the kernel takes it; the server does not yet */
    say(c, "GET /status HTTP/1.1\r\n\r\n", 0);
    CHECK(pump(c, has_response) == 0 && c->len == 0);
    /* one is answered and its client goes: c is served */
    char body[4096];
    CHECK_EQ(tfos__http_reply(h, g_ids[0], 200, NULL, strdup("first"), 0), 0);
    CHECK_EQ(response(held[0], body, sizeof body, NULL, 0), 200);
    hang_up(held[0]);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    hang_up(c);
    for (int i = 1; i < 8; i++) {
        CHECK_EQ(tfos__http_reply(h, g_ids[i], 200, NULL, strdup("later"), 0), 0);
        CHECK_EQ(response(held[i], body, sizeof body, NULL, 0), 200);
        hang_up(held[i]);
    }
    tfos__http_close(h);
}

/* The status of a whole response that has arrived (consumed), 0 while none
 * has, -1 once the server has closed. */
static int poll_response(client *c)
{
    ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, MSG_DONTWAIT);
    if (r > 0) {
        c->len += (size_t)r;
        c->buf[c->len] = '\0';
    }
    size_t total = whole_response(c);
    if (!total)
        return r == 0 || (r < 0 && errno != EAGAIN) ? -1 : 0;
    int status = 0;
    CHECK(sscanf(c->buf, "HTTP/1.%*d %d", &status) == 1);
    memmove(c->buf, c->buf + total, c->len - total);
    c->len -= total;
    c->buf[c->len] = '\0';
    return status;
}

#define NDRIP 16

/* One of the drippers' connections: the start of a head, then a byte at a time. */
static client *drip_dial(int port)
{
    client *c = dial(port);
    say(c, "GET /status HTTP/1.1\r\nX-Slow: ", 0);
    return c;
}

static void drippers_cannot_hold_the_slots(void)
{
    int port;
    tfos__http *h = serve(&port); /* 8 slots, the default limits */
    char body[4096];
    /* first and oldest: a request waiting for its deferred answer */
    client *waiting = dial(port);
    g_ndeferred = 0;
    say(waiting, "GET /later HTTP/1.1\r\n\r\n", 0);
    run_until(deferred_one, 3000);
    CHECK_EQ(g_ndeferred, 1);
    uint64_t id = g_deferred;
    /* a kept-alive client that asks every 1.5 s: idle longer than a slot is
     * held against new connections, but drippers' slots go first */
    client *talker = dial(port);
    say(talker, "GET /status HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ(response(talker, body, sizeof body, NULL, 0), 200);
    int talks = 1, talking = 0;
    /* twice as many connections as slots, each dripping a byte of its head
     * every 300 ms, coming back when dropped (a slowloris) */
    client *drip[NDRIP];
    for (int i = 0; i < NDRIP; i++)
        drip[i] = drip_dial(port);
    /* after 1.5 s of that, 5 real clients: each is answered */
    client *probe[5] = {NULL};
    int answered[5] = {0}, nanswered = 0, redials = 0;
    int64_t start = tfos__now_ms(), next_drip = 0, next_talk = start + 1500;
    for (int64_t until = start + 20000; (nanswered < 5 || talks < 4) && tfos__now_ms() < until;) {
        tfos__loop_run(g_loop, 5);
        int64_t now = tfos__now_ms();
        if (!probe[0] && now >= start + 1500)
            for (int i = 0; i < 5; i++) {
                probe[i] = dial(port);
                say(probe[i], "GET /status HTTP/1.1\r\n\r\n", 0);
            }
        if (now >= next_drip) {
            next_drip = now + 300;
            for (int i = 0; i < NDRIP; i++) {
                char b;
                if (try_say(drip[i], "a", 1) < 0 || recv(drip[i]->fd, &b, 1, MSG_DONTWAIT) >= 0) {
                    hang_up(drip[i]); /* dropped (or answered): back again */
                    drip[i] = drip_dial(port);
                    redials++;
                }
            }
        }
        if (!talking && now >= next_talk) {
            say(talker, "GET /status HTTP/1.1\r\n\r\n", 0);
            talking = 1;
        }
        if (talking) {
            int st = poll_response(talker);
            CHECK(st == 0 || st == 200); /* never dropped */
            if (st == 200) {
                talks++;
                talking = 0;
                next_talk = now + 1500;
            }
        }
        for (int i = 0; i < 5 && probe[i]; i++)
            if (!answered[i]) {
                int st = poll_response(probe[i]);
                CHECK(st == 0 || st == 200);
                if (st == 200) {
                    answered[i] = 1;
                    nanswered++;
                }
            }
    }
    CHECK_EQ(nanswered, 5);
    CHECK(redials > 0 && talks >= 4);
    /* the waiting request kept its slot */
    CHECK_EQ(tfos__http_reply(h, id, 202, NULL, strdup("done"), 0), 0);
    CHECK_EQ(response(waiting, body, sizeof body, NULL, 0), 202);
    CHECK_STR(body, "done");
    for (int i = 0; i < 5; i++)
        hang_up(probe[i]);
    for (int i = 0; i < NDRIP; i++)
        hang_up(drip[i]);
    hang_up(talker);
    hang_up(waiting);
    tfos__http_close(h);
}

static void a_request_has_one_deadline(void)
{
    int port;
    tfos__http *h = serve(&port);
    tfos__http_limits lim = {.idle_ms = 1000, .request_ms = 1000};
    tfos__http_set_limits(h, &lim);
    char body[4096], head[1024];
    /* a head dripped a byte every 100 ms: 408 after its second, while it drips */
    client *c = dial(port);
    say(c, "GET /status HTTP/1.1\r\nX-Slow: ", 0);
    int st = 0;
    int64_t t0 = tfos__now_ms();
    for (int64_t next = 0; !st && tfos__now_ms() < t0 + 5000;) {
        tfos__loop_run(g_loop, 5);
        if (tfos__now_ms() >= next) {
            next = tfos__now_ms() + 100;
            CHECK(try_say(c, "a", 1) >= 0);
        }
        st = poll_response(c);
    }
    CHECK_EQ(st, 408);
    CHECK(closed(c));
    hang_up(c);
    /* a body that stops coming: 408 too */
    c = dial(port);
    say(c, "POST /upload HTTP/1.1\r\nContent-Length: 100\r\n\r\nabcdefghij", 0);
    for (int64_t until = tfos__now_ms() + 5000; !(st = poll_response(c)) && tfos__now_ms() < until;)
        tfos__loop_run(g_loop, 5);
    CHECK_EQ(st, 408);
    hang_up(c);
    /* a silent connection goes, unanswered */
    c = dial(port);
    CHECK(pump(c, never) == 1 && c->len == 0);
    hang_up(c);
    /* a kept-alive client that asks every 400 ms lives on past both deadlines */
    c = dial(port);
    t0 = tfos__now_ms();
    for (int n = 0; tfos__now_ms() - t0 < 3000; n++) {
        say(c, "GET /status HTTP/1.1\r\n\r\n", 0);
        CHECK_EQ(response(c, body, sizeof body, head, sizeof head), 200);
        CHECK(!strstr(head, "Connection: close"));
        for (int64_t t = tfos__now_ms() + 400; tfos__now_ms() < t;)
            tfos__loop_run(g_loop, 5);
    }
    hang_up(c);
    /* a request waiting for its deferred answer has no deadline here */
    c = dial(port);
    g_ndeferred = 0;
    say(c, "GET /later HTTP/1.1\r\n\r\n", 0);
    run_until(deferred_one, 3000);
    CHECK_EQ(g_ndeferred, 1);
    for (int64_t t = tfos__now_ms() + 2500; tfos__now_ms() < t;)
        tfos__loop_run(g_loop, 5);
    CHECK_EQ(poll_response(c), 0);
    CHECK_EQ(tfos__http_reply(h, g_deferred, 200, NULL, strdup("late but there"), 0), 0);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    CHECK_STR(body, "late but there");
    hang_up(c);
    tfos__http_close(h);
}

/* Send the head of a POST /upload announcing n bytes, then `sent` of them. */
static client *upload(int port, size_t n, size_t sent)
{
    char head[128];
    snprintf(head, sizeof head, "POST /upload HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", n);
    client *c = dial(port);
    say(c, head, 0);
    if (sent) {
        char *b = fill(n);
        say(c, b, sent);
        free(b);
    }
    return c;
}

/* Send the rest of what upload() began. */
static void upload_rest(client *c, size_t n, size_t sent)
{
    char *b = fill(n);
    say(c, b + sent, n - sent);
    free(b);
}

static void bodies_in_flight_have_a_budget(void)
{
    int port;
    tfos__http *h = serve(&port);
    tfos__http_limits lim = {.body_budget = 1 << 20};
    tfos__http_set_limits(h, &lim);
    char body[4096], head[1024], want[32];
    size_t k = 1024;
    /* a: 600 KiB announced, half of it sent: admitted, it holds 600 KiB */
    client *a = upload(port, 600 * k, 300 * k);
    CHECK(pump(a, has_response) == 0);
    /* b: 600 KiB more would pass the budget: 503 from its head, closed cleanly */
    client *b = upload(port, 600 * k, 0);
    CHECK_EQ(response(b, body, sizeof body, head, sizeof head), 503);
    CHECK(strstr(head, "Retry-After: 1\r\n") && strstr(body, "takes up to 1048576 at once"));
    CHECK(closed(b));
    hang_up(b);
    /* c: 300 KiB fits beside a */
    client *c = upload(port, 300 * k, 300 * k);
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    snprintf(want, sizeof want, "%zu", 300 * k);
    CHECK_STR(body, want);
    hang_up(c);
    upload_rest(a, 600 * k, 300 * k);
    CHECK_EQ(response(a, body, sizeof body, NULL, 0), 200);
    snprintf(want, sizeof want, "%zu", 600 * k);
    CHECK_STR(body, want);
    /* nothing in flight: one body over the whole budget is still taken */
    client *d = upload(port, 1536 * k, 1536 * k);
    CHECK_EQ(response(d, body, sizeof body, NULL, 0), 200);
    hang_up(d);
    /* a client that goes mid-body gives its share back */
    client *e = upload(port, 900 * k, 100 * k);
    CHECK(pump(e, has_response) == 0);
    hang_up(e);
    for (int64_t t = tfos__now_ms() + 300; tfos__now_ms() < t;)
        tfos__loop_run(g_loop, 5);
    client *f = upload(port, 900 * k, 900 * k);
    CHECK_EQ(response(f, body, sizeof body, NULL, 0), 200);
    hang_up(f);
    /* the kept-alive connection holds no body any more: a's next request is small */
    say(a, "GET /status HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ(response(a, body, sizeof body, NULL, 0), 200);
    hang_up(a);
    tfos__http_close(h);
}

static void a_64_mib_body_is_taken(void)
{
    int port;
    tfos__http *h = serve(&port); /* the default budget, 256 MiB */
    size_t n = (size_t)64 << 20;
    client *c = upload(port, n, 0);
    upload_rest(c, n, 0);
    char body[4096], want[32];
    CHECK_EQ(response(c, body, sizeof body, NULL, 0), 200);
    snprintf(want, sizeof want, "%zu", n);
    CHECK_STR(body, want);
    hang_up(c);
    tfos__http_close(h);
}

int main(void)
{
    CHECK_EQ(tfos__loop_open(&g_loop), 0);
    RUN(request_line_and_headers);
    RUN(content_length_bodies);
    RUN(chunked_is_411_and_too_big_is_413);
    RUN(heads_over_8k_get_431_and_a_clean_close);
    RUN(keep_alive_and_http10_close);
    RUN(host_check_against_dns_rebinding);
    RUN(the_token);
    RUN(route_list_dispatch);
    RUN(deferred_reply);
    RUN(slots_taken_wait_in_the_backlog);
    RUN(idle_connection_dropped);
    RUN(drippers_cannot_hold_the_slots);
    RUN(a_request_has_one_deadline);
    RUN(bodies_in_flight_have_a_budget);
    RUN(a_64_mib_body_is_taken);
    CHECK_EQ(tfos__http_busy(NULL), 0);
    tfos__http_close(NULL);
    tfos__loop_close(g_loop);
    return 0;
}
