/* httpc.c: HTTP requests through libcurl loaded at run time (httpc.h).
 *
 * The functions are taken from libcurl.so.4 with dlsym; the option numbers
 * come from curl's header (libcurl keeps its ABI: they do not change). */
#include "platform/httpc.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tfos/tfos.h"

#define REPLY_MAX_DEFAULT (16u << 20)

/* libcurl's entry points tfos calls. */
static struct {
    void *lib;
    char why[160];
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} C;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* RTLD_DEEPBIND: libcurl's calls to its own functions and to its TLS
 * library must reach the libraries it was linked with. Without it they
 * bind to the first global definition, and TensorFlow's
 * libtensorflow_framework.so (loaded RTLD_GLOBAL by `import tensorflow`)
 * exports a curl of its own: curl_easy_perform then jumped into TF's
 * curl_multi_add_handle and crashed the process (a Spark driver that had
 * imported TensorFlow, then logged to MLflow). The sanitizers' runtimes
 * refuse RTLD_DEEPBIND; their builds go without it and must not import
 * TensorFlow in the same process. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CURL_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CURL_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#endif
#endif
#ifndef CURL_DLOPEN_FLAGS
#define CURL_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
#endif

static void load(void)
{
    const char *names[] = {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so", NULL};
    for (int i = 0; names[i] && !C.lib; i++) C.lib = dlopen(names[i], CURL_DLOPEN_FLAGS);
    if (!C.lib) {
        snprintf(C.why, sizeof C.why,
                 "libcurl is not installed (libcurl.so.4 not found): install it (Debian: apt-get install libcurl4)");
        return;
    }
#define SYM(field, name)                                                           \
    do {                                                                           \
        *(void **)&C.field = dlsym(C.lib, name);                                   \
        if (!C.field) {                                                            \
            snprintf(C.why, sizeof C.why, "libcurl.so.4 lacks %s: too old", name); \
            goto bad;                                                              \
        }                                                                          \
    } while (0)
    SYM(global_init, "curl_global_init");
    SYM(easy_init, "curl_easy_init");
    SYM(easy_setopt, "curl_easy_setopt");
    SYM(easy_perform, "curl_easy_perform");
    SYM(easy_getinfo, "curl_easy_getinfo");
    SYM(easy_cleanup, "curl_easy_cleanup");
    SYM(easy_strerror, "curl_easy_strerror");
    SYM(slist_append, "curl_slist_append");
    SYM(slist_free_all, "curl_slist_free_all");
#undef SYM
    if (C.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(C.why, sizeof C.why, "libcurl could not start (curl_global_init failed)");
        goto bad;
    }
    return;
bad:
    dlclose(C.lib);
    C.lib = NULL;
}

int tfos__http_available(char *err, size_t errlen)
{
    pthread_once(&load_once, load);
    if (C.lib) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", C.why);
    errno = ENOENT;
    return TFOS_ESYS;
}

/* The URL as an error may show it: scheme, host and path, without
 * credentials (user:password@) or the query. */
static void url_shown(const char *url, char *buf, size_t size)
{
    const char *s = strstr(url, "://");
    const char *host = s ? s + 3 : url;
    const char *at = strchr(host, '@');
    const char *slash = strchr(host, '/');
    if (at && (!slash || at < slash)) host = at + 1;
    size_t scheme = s ? (size_t)(s + 3 - url) : 0;
    size_t rest = strcspn(host, "?#");
    snprintf(buf, size, "%.*s%.*s", (int)scheme, url, (int)rest, host);
}

typedef struct sink {
    tfos__http_reply *out;
    CURL *h;
    size_t max;
    const char *path;
    FILE *file;
    int file_err;   /* errno of a failed open/write of path */
    int too_big;
} sink;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
    sink *k = user;
    size_t n = size * nmemb;
    long code = 0;
    C.easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &code);
    if (k->path && code >= 200 && code < 300) {
        if (!k->file && !(k->file = fopen(k->path, "wb"))) {
            k->file_err = errno;
            return 0;
        }
        if (fwrite(ptr, 1, n, k->file) != n) {
            k->file_err = errno ? errno : EIO;
            return 0;
        }
        return n;
    }
    tfos__http_reply *r = k->out;
    if (r->len + n > k->max) {
        k->too_big = 1;
        return 0;
    }
    char *b = realloc(r->body, r->len + n + 1);
    if (!b) return 0;
    memcpy(b + r->len, ptr, n);
    r->len += n;
    b[r->len] = 0;
    r->body = b;
    return n;
}

int tfos__http_do(const tfos__http_req *rq, tfos__http_reply *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char shown[512];
    int rc = TFOS_EINVAL;
    CURL *h = NULL;
    struct curl_slist *hdrs = NULL;
    FILE *up = NULL;
    sink k = {.out = out, .max = rq->max_reply ? rq->max_reply : REPLY_MAX_DEFAULT, .path = rq->download_path};
    if (!rq->url || !rq->method || rq->timeout_ms <= 0) {
        snprintf(err, errlen, "bad HTTP request (no URL, method or timeout)");
        return TFOS_EINVAL;
    }
    url_shown(rq->url, shown, sizeof shown);
    if ((rc = tfos__http_available(err, errlen)) != 0) return rc;
    if (!(h = C.easy_init())) {
        snprintf(err, errlen, "libcurl: out of memory");
        return TFOS_ENOMEM;
    }
    k.h = h;
    for (const char *const *p = rq->headers; p && *p; p++) {
        struct curl_slist *n = C.slist_append(hdrs, *p);
        if (!n) { rc = TFOS_ENOMEM; snprintf(err, errlen, "libcurl: out of memory"); goto done; }
        hdrs = n;
    }
    C.easy_setopt(h, CURLOPT_URL, rq->url);
    C.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);   /* timeouts without SIGALRM: callers are threads */
    C.easy_setopt(h, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    C.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, rq->timeout_ms);
    C.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    C.easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    C.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    C.easy_setopt(h, CURLOPT_WRITEDATA, &k);
    if (hdrs) C.easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (rq->insecure) {
        C.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        C.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (rq->upload_path) {
        if (!(up = fopen(rq->upload_path, "rb"))) {
            rc = TFOS_ESYS;
            snprintf(err, errlen, "cannot read %s: %s", rq->upload_path, strerror(errno));
            goto done;
        }
        fseeko(up, 0, SEEK_END);
        curl_off_t size = ftello(up);
        rewind(up);
        C.easy_setopt(h, CURLOPT_UPLOAD, 1L);
        C.easy_setopt(h, CURLOPT_READDATA, up);   /* libcurl's default reader: fread */
        C.easy_setopt(h, CURLOPT_INFILESIZE_LARGE, size);
    } else if (rq->body) {
        C.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
        C.easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
    }
    if (rq->negotiate) {
        C.easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_NEGOTIATE);
        C.easy_setopt(h, CURLOPT_USERPWD, ":"); /* the user is the ticket's */
    }
    if (strcmp(rq->method, "GET") != 0) C.easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    CURLcode cc = C.easy_perform(h);
    C.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    if (cc == CURLE_OK) {
        rc = 0;
    } else if (k.too_big) {
        rc = TFOS_ETOOBIG;
        snprintf(err, errlen, "%s %s: the reply is over %zu bytes", rq->method, shown, k.max);
    } else if (k.file_err) {
        rc = TFOS_ESYS;
        errno = k.file_err;
        snprintf(err, errlen, "%s %s: cannot write %s: %s", rq->method, shown, rq->download_path, strerror(k.file_err));
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        rc = TFOS_ETIMEDOUT;
        snprintf(err, errlen, "%s %s: no reply within %ld ms", rq->method, shown, rq->timeout_ms);
    } else {
        rc = TFOS_ESYS;
        errno = ECONNREFUSED;
        snprintf(err, errlen, "%s %s: %s", rq->method, shown, C.easy_strerror(cc));
    }
done:
    if (k.file && fclose(k.file) != 0 && rc == 0) {
        rc = TFOS_ESYS;
        snprintf(err, errlen, "cannot write %s: %s", rq->download_path, strerror(errno));
    }
    if (up) fclose(up);
    if (hdrs) C.slist_free_all(hdrs);
    C.easy_cleanup(h);
    return rc;
}

void tfos__http_reply_free(tfos__http_reply *r)
{
    if (!r) return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

static int escape(const char *s, int keep_slash, char *buf, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
        if (o + (plain ? 1 : 3) >= size) return TFOS_ETOOBIG;
        if (plain) {
            buf[o++] = (char)*p;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    if (o >= size) return TFOS_ETOOBIG;
    buf[o] = 0;
    return 0;
}

int tfos__http_escape(const char *s, char *buf, size_t size)
{
    return escape(s, 0, buf, size);
}

int tfos__http_escape_path(const char *s, char *buf, size_t size)
{
    return escape(s, 1, buf, size);
}
