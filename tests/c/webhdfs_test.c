/* webhdfs_test.c: the WebHDFS writer (platform/webhdfs.h) without a
 * cluster: the path of an hdfs:// URL; a base that is not http(s)
 * refused; a request as WebHDFS wants it (path escaped but for its
 * slashes, op, user.name from HADOOP_USER_NAME); a NameNode's
 * RemoteException named in the error with the path; DELETE's false (no
 * such path) no error; a delegation token got and renewed (its expiry), a
 * refusal naming kinit, a reply without a token. Writing to a real HDFS is tested by
 * tests/yarn/test_yarn.py::test_yarn_serve_follows_a_registry_alias_through_hdfs. */
#include "check.h"
#include "platform/httpc.h"
#include "platform/webhdfs.h"
#include "tfos/tfos.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct server {
    int lfd;
    char req[8192];
    const char *reply;
} server;

/* One connection: keep the request's head, answer with reply. */
static void *serve_one(void *arg)
{
    server *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    CHECK(fd >= 0);
    size_t len = 0;
    while (!strstr(s->req, "\r\n\r\n")) {
        ssize_t n = read(fd, s->req + len, sizeof s->req - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        s->req[len] = 0;
    }
    CHECK((size_t)write(fd, s->reply, strlen(s->reply)) == strlen(s->reply));
    close(fd);
    return NULL;
}

static void answer(server *s, const char *body, int status, pthread_t *t)
{
    static char reply[1024];
    snprintf(reply, sizeof reply, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s", status, strlen(body), body);
    memset(s->req, 0, sizeof s->req);
    s->reply = reply;
    CHECK(pthread_create(t, NULL, serve_one, s) == 0);
}

/* Two connections one after the other: the first's head kept in first_req. */
typedef struct two {
    server *s;
    const char *first, *second;
    char *first_req;
} two;

static void *serve_two(void *arg)
{
    two *tw = arg;
    pthread_t t;
    answer(tw->s, tw->first, 200, &t);
    pthread_join(t, NULL);
    memcpy(tw->first_req, tw->s->req, sizeof tw->s->req);
    answer(tw->s, tw->second, 200, &t);
    pthread_join(t, NULL);
    return NULL;
}

int main(void)
{
    CHECK(!strcmp(tfos__webhdfs_path("hdfs://nn:8020/user/me/x"), "/user/me/x"));
    CHECK(!strcmp(tfos__webhdfs_path("hdfs:///x"), "/x"));
    CHECK(!strcmp(tfos__webhdfs_path("hdfs://nn:8020"), "/"));
    CHECK(tfos__webhdfs_path("webhdfs://nn/x") == NULL && tfos__webhdfs_path("/x") == NULL);

    char err[1024];
    tfos__webhdfs *w;
    CHECK(tfos__webhdfs_open(&w, "nn:9870", 0, err, sizeof err) == TFOS_EINVAL && !w);
    CHECK(strstr(err, "is not http://HOST:PORT") != NULL);
    if (tfos__http_available(err, sizeof err) != 0) {
        printf("webhdfs: %s (only what needs no HTTP checked)\n", err);
        return 0;
    }

    server s = {0};
    s.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(bind(s.lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s.lfd, 4) == 0);
    CHECK(getsockname(s.lfd, (struct sockaddr *)&a, &al) == 0);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/", ntohs(a.sin_port));
    setenv("HADOOP_USER_NAME", "ann b", 1);
    CHECK(tfos__webhdfs_open(&w, base, 5000, err, sizeof err) == 0);
    pthread_t t;

    /* a refusal: the NameNode's exception and message, the path, the NameNode */
    answer(&s, "{\"RemoteException\":{\"exception\":\"AccessControlException\",\"message\":\"Permission denied: "
               "user=ann\"}}", 403, &t);
    CHECK(tfos__webhdfs_mkdirs(w, "/user/ann/a b/x", err, sizeof err) == TFOS_EPROTO);
    pthread_join(t, NULL);
    CHECK(strstr(s.req, "PUT /webhdfs/v1/user/ann/a%20b/x?op=MKDIRS&user.name=ann%20b") == s.req);
    CHECK(strstr(err, "/user/ann/a b/x") && strstr(err, "HTTP 403, AccessControlException: Permission denied"));
    CHECK(strstr(err, base) || strstr(err, "127.0.0.1"));

    /* a delegation token past its life: the error says what to do */
    answer(&s, "{\"RemoteException\":{\"exception\":\"InvalidToken\",\"message\":\"token (HDFS_DELEGATION_TOKEN "
               "token 7 for ann) is expired, current time: 2026-11-27\"}}", 403, &t);
    CHECK(tfos__webhdfs_mkdirs(w, "/user/ann/ckpt", err, sizeof err) == TFOS_EPROTO);
    pthread_join(t, NULL);
    CHECK(strstr(err, "HTTP 403, InvalidToken: token (HDFS_DELEGATION_TOKEN token 7 for ann) is expired") &&
          strstr(err, "tfos yarn --principal P --keytab K") && strstr(err, "max-lifetime"));

    /* DELETE of a path that is not there: false, no error */
    answer(&s, "{\"boolean\":false}", 200, &t);
    CHECK(tfos__webhdfs_delete(w, "/user/ann/gone", err, sizeof err) == 0);
    pthread_join(t, NULL);
    CHECK(strstr(s.req, "DELETE /webhdfs/v1/user/ann/gone?op=DELETE&user.name=ann%20b&recursive=true") == s.req);

    /* RENAME answered false: the destination exists or the source is missing */
    answer(&s, "{\"boolean\":false}", 200, &t);
    CHECK(tfos__webhdfs_rename(w, "/a/.1.part", "/a/1", err, sizeof err) == TFOS_EPROTO);
    pthread_join(t, NULL);
    CHECK(strstr(s.req, "op=RENAME&user.name=ann%20b&destination=%2Fa%2F1") != NULL);
    CHECK(strstr(err, "not renamed to /a/1") != NULL);

    /* in a Kerberized ApplicationMaster's container: the token in $TFOS_HDFS_TOKEN_FILE, read at each
     * request, instead of user.name */
    char tokfile[] = "/tmp/tfos-webhdfs-test-XXXXXX";
    int tfd = mkstemp(tokfile);
    CHECK(tfd >= 0 && write(tfd, "tok+/=\n", 7) == 7);
    close(tfd);
    setenv("TFOS_HDFS_TOKEN_FILE", tokfile, 1);
    answer(&s, "{\"boolean\":true}", 200, &t);
    CHECK(tfos__webhdfs_mkdirs(w, "/user/ann/k", err, sizeof err) == 0);
    pthread_join(t, NULL);
    CHECK(strstr(s.req, "PUT /webhdfs/v1/user/ann/k?op=MKDIRS&delegation=tok%2B%2F%3D&permission=700 ") == s.req);
    unsetenv("TFOS_HDFS_TOKEN_FILE");
    unlink(tokfile);
    tfos__webhdfs_close(w);

    /* a delegation token with a Kerberos ticket: GETDELEGATIONTOKEN, then RENEWDELEGATIONTOKEN for its
     * expiry (libcurl answers a 401 Negotiate with the ticket; this server asks for none) */
    char token[256], got_first[8192];
    long long expires = 0;
    two *tw = &(two){.s = &s, .first = "{\"Token\":{\"urlString\":\"AbC-_1\"}}",
                     .second = "{\"long\":1795785000123}", .first_req = got_first};
    CHECK(pthread_create(&t, NULL, serve_two, tw) == 0);
    CHECK(tfos__webhdfs_kerberos_token(base, 5000, token, sizeof token, &expires, err, sizeof err) == 0);
    pthread_join(t, NULL);
    CHECK(!strcmp(token, "AbC-_1") && expires == 1795785000123LL);
    CHECK(strstr(got_first, "GET /webhdfs/v1/?op=GETDELEGATIONTOKEN ") == got_first);
    CHECK(strstr(s.req, "PUT /webhdfs/v1/?op=RENEWDELEGATIONTOKEN&token=AbC-_1 ") == s.req);
    CHECK(tfos__webhdfs_kerberos_token("nn:9870", 0, token, sizeof token, &expires, err, sizeof err) ==
          TFOS_EINVAL);

    /* refused (no ticket): named, with kinit */
    answer(&s, "{\"RemoteException\":{\"exception\":\"SecurityException\",\"message\":\"Failed to obtain "
               "user group information\"}}", 403, &t);
    CHECK(tfos__webhdfs_kerberos_token(base, 5000, token, sizeof token, &expires, err, sizeof err) ==
          TFOS_EPROTO);
    pthread_join(t, NULL);
    CHECK(strstr(s.req, "GET /webhdfs/v1/?op=GETDELEGATIONTOKEN ") == s.req);
    CHECK(strstr(err, "HTTP 403, SecurityException: Failed to obtain user group information") &&
          strstr(err, "kinit YOU@REALM") && strstr(err, "a delegation token for the Kerberos ticket's user"));

    /* a reply without a token */
    answer(&s, "{\"Token\":{}}", 200, &t);
    CHECK(tfos__webhdfs_kerberos_token(base, 5000, token, sizeof token, &expires, err, sizeof err) ==
          TFOS_EPROTO);
    pthread_join(t, NULL);
    CHECK(strstr(err, "the reply has no Token.urlString") != NULL);
    close(s.lfd);
    return 0;
}
