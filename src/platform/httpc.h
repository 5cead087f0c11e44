/* httpc.h: HTTP(S) requests to the services tfos reports to and reads from
 * (an MLflow tracking server and its model registry), through the system's
 * libcurl.
 *
 * libcurl is loaded on first use (dlopen "libcurl.so.4"), not linked: tfos
 * starts and runs everything else on a machine without it, and only what
 * needs HTTP says that libcurl is missing (Debian: libcurl4). TLS, proxies
 * (http_proxy, https_proxy, no_proxy) and redirects are libcurl's.
 *
 * Every call blocks its caller for at most the request's timeout: callers
 * that must not block (the launcher's loop) make them on a thread of their
 * own. The calls are safe from several threads at once. */
#ifndef TFOS_PLATFORM_HTTPC_H
#define TFOS_PLATFORM_HTTPC_H
#include <stddef.h>

typedef struct tfos__http_req {
    const char *method;          /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *url;             /* http:// or https:// */
    const char *const *headers;  /* "Name: value" strings, NULL-ended; may be NULL */
    const void *body;            /* sent as is (NULL: none) */
    size_t body_len;
    const char *upload_path;     /* send this file's content instead of body (PUT) */
    const char *download_path;   /* write a 2xx reply's body to this file instead of memory */
    long timeout_ms;             /* the whole request, connect included; > 0 */
    size_t max_reply;            /* bound on a body kept in memory (0: 16 MiB) */
    int insecure;                /* do not verify the server's TLS certificate */
    int negotiate;               /* answer a 401 with SPNEGO: Kerberos, the ticket cache's ticket */
} tfos__http_req;

typedef struct tfos__http_reply {
    long status;                 /* the HTTP status (0 when no reply came) */
    char *body;                  /* NUL-terminated (NULL when downloaded or empty) */
    size_t len;
} tfos__http_reply;

/* 0 when libcurl can be loaded; else TFOS_ESYS with why in err. */
int tfos__http_available(char *err, size_t errlen);

/* Make one request. 0 when a reply came, whatever its status (out->status
 * says it; out->body holds its body unless download_path took it); else
 * TFOS_ETIMEDOUT, TFOS_ETOOBIG (a body over max_reply), TFOS_ESYS (no
 * libcurl; the connection failed; the file could not be read or written)
 * or TFOS_EINVAL (a bad request), with why in err (the URL's host named,
 * never its credentials). out is always set: free it with
 * tfos__http_reply_free. */
int tfos__http_do(const tfos__http_req *rq, tfos__http_reply *out, char *err, size_t errlen);

void tfos__http_reply_free(tfos__http_reply *r);

/* s with the characters a URL query value cannot hold %-escaped, into
 * buf (NUL-terminated). 0, or TFOS_ETOOBIG when buf is too small. */
int tfos__http_escape(const char *s, char *buf, size_t size);
/* The same for a URL's path: its slashes are kept. */
int tfos__http_escape_path(const char *s, char *buf, size_t size);

#endif
