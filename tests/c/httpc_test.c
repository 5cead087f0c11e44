/* httpc_test.c: the HTTP client (platform/httpc.h) against a server thread
 * in the test on 127.0.0.1: a POST's body and headers arrive as sent; a
 * reply's status and body come back (200 and 404 alike); a 2xx body goes to
 * a file when asked, an error's stays in memory; a PUT sends a file; a
 * reply over max_reply is TFOS_ETOOBIG; a server that never answers is
 * TFOS_ETIMEDOUT within the timeout; a closed port is TFOS_ESYS naming the
 * URL without its credentials. */
#include "check.h"
#include "platform/httpc.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* One connection at a time: read the request (head + Content-Length body),
 * keep it, answer with `reply` (NULL: answer nothing, hold the connection). */
typedef struct server {
    int lfd, port;
    char req[1 << 16];
    size_t req_len;
    const char *reply;
    int hold_ms;
} server;

static void *serve_one(void *arg)
{
    server *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    CHECK(fd >= 0);
    s->req_len = 0;
    for (;;) {
        ssize_t n = read(fd, s->req + s->req_len, sizeof s->req - 1 - s->req_len);
        if (n <= 0) break;
        s->req_len += (size_t)n;
        s->req[s->req_len] = 0;
        char *end = strstr(s->req, "\r\n\r\n");
        if (!end) continue;
        char *cl = strcasestr(s->req, "content-length:");
        size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0;
        if (s->req_len >= (size_t)(end + 4 - s->req) + want) break;
    }
    if (s->reply) {
        size_t len = strlen(s->reply);
        CHECK((size_t)write(fd, s->reply, len) == len);
    } else {
        usleep((useconds_t)s->hold_ms * 1000);
    }
    close(fd);
    return NULL;
}

static void start(server *s, const char *reply, pthread_t *t)
{
    s->reply = reply;
    CHECK(pthread_create(t, NULL, serve_one, s) == 0);
}

int main(void)
{
    char err[512];
    if (tfos__http_available(err, sizeof err) != 0) {
        /* The build machine has libcurl's header; a machine without the
         * library must say so, and does: that is the case here. */
        CHECK(strstr(err, "libcurl") != NULL);
        printf("httpc: %s (only the missing-library case checked)\n", err);
        return 0;
    }
    server s = {0};
    s.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(s.lfd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(s.lfd, 4) == 0);
    socklen_t al = sizeof a;
    CHECK(getsockname(s.lfd, (struct sockaddr *)&a, &al) == 0);
    s.port = ntohs(a.sin_port);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/2.0/x?q=1", s.port);
    pthread_t t;
    tfos__http_reply r;

    /* POST: the body and a header arrive; the reply's body comes back. */
    start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"run\": 7}\n", &t);
    const char *hdrs[] = {"Content-Type: application/json", "Authorization: Bearer tok", NULL};
    tfos__http_req rq = {.method = "POST", .url = url, .headers = hdrs, .body = "{\"a\":1}", .body_len = 7,
                         .timeout_ms = 5000};
    CHECK_EQ(tfos__http_do(&rq, &r, err, sizeof err), 0);
    pthread_join(t, NULL);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "{\"run\": 7}\n");
    CHECK(strncmp(s.req, "POST /api/2.0/x?q=1 HTTP/1.1\r\n", 30) == 0);
    CHECK(strstr(s.req, "Authorization: Bearer tok\r\n") != NULL);
    CHECK(strstr(s.req, "\r\n\r\n{\"a\":1}") != NULL);
    tfos__http_reply_free(&r);

    /* A 404 is a reply: status and body, rc 0; a download path is not
     * written for it. */
    char path[] = "/tmp/tfos-httpc-XXXXXX";
    int pfd = mkstemp(path);
    CHECK(pfd >= 0);
    close(pfd);
    unlink(path);
    start(&s, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno model\n", &t);
    tfos__http_req get = {.method = "GET", .url = url, .download_path = path, .timeout_ms = 5000};
    CHECK_EQ(tfos__http_do(&get, &r, err, sizeof err), 0);
    pthread_join(t, NULL);
    CHECK_EQ(r.status, 404);
    CHECK_STR(r.body, "no model\n");
    CHECK(access(path, F_OK) != 0);
    tfos__http_reply_free(&r);

    /* A 200 with a download path: the body is in the file. */
    start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbytes", &t);
    CHECK_EQ(tfos__http_do(&get, &r, err, sizeof err), 0);
    pthread_join(t, NULL);
    CHECK_EQ(r.status, 200);
    CHECK(r.body == NULL);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    char got[16] = {0};
    CHECK_EQ(fread(got, 1, sizeof got, f), 5);
    fclose(f);
    CHECK_STR(got, "bytes");

    /* PUT a file: its content is the body. */
    start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", &t);
    tfos__http_req put = {.method = "PUT", .url = url, .upload_path = path, .timeout_ms = 5000};
    CHECK_EQ(tfos__http_do(&put, &r, err, sizeof err), 0);
    pthread_join(t, NULL);
    CHECK(strncmp(s.req, "PUT /api/2.0/x?q=1 HTTP/1.1\r\n", 29) == 0);
    CHECK(strstr(s.req, "\r\n\r\nbytes") != NULL);
    tfos__http_reply_free(&r);
    unlink(path);

    /* A reply over the bound. */
    start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 20\r\nConnection: close\r\n\r\n01234567890123456789", &t);
    tfos__http_req small = {.method = "GET", .url = url, .timeout_ms = 5000, .max_reply = 8};
    CHECK_EQ(tfos__http_do(&small, &r, err, sizeof err), TFOS_ETOOBIG);
    pthread_join(t, NULL);
    CHECK(strstr(err, "over 8 bytes") != NULL);
    tfos__http_reply_free(&r);

    /* A server that reads the request and never answers: the timeout. */
    s.hold_ms = 700;
    start(&s, NULL, &t);
    tfos__http_req slow = {.method = "GET", .url = url, .timeout_ms = 300};
    CHECK_EQ(tfos__http_do(&slow, &r, err, sizeof err), TFOS_ETIMEDOUT);
    CHECK(strstr(err, "no reply within 300 ms") != NULL);
    pthread_join(t, NULL);
    tfos__http_reply_free(&r);

    /* Nobody listening: the error names the URL, never its password. */
    close(s.lfd);
    char secret_url[160];
    snprintf(secret_url, sizeof secret_url, "http://user:hunter2@127.0.0.1:%d/api?token=abc", s.port);
    tfos__http_req gone = {.method = "GET", .url = secret_url, .timeout_ms = 2000};
    CHECK_EQ(tfos__http_do(&gone, &r, err, sizeof err), TFOS_ESYS);
    CHECK(strstr(err, "127.0.0.1") != NULL);
    CHECK(strstr(err, "hunter2") == NULL && strstr(err, "abc") == NULL);
    CHECK_EQ(r.status, 0);
    tfos__http_reply_free(&r);

    char esc[32];
    CHECK_EQ(tfos__http_escape("a b/c@", esc, sizeof esc), 0);
    CHECK_STR(esc, "a%20b%2Fc%40");
    CHECK_EQ(tfos__http_escape("abcdef", esc, 4), TFOS_ETOOBIG);
    printf("httpc: ok\n");
    return 0;
}
