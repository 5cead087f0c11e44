/* webhdfs.c: HDFS writes over WebHDFS (webhdfs.h). Each call is one or two
 * HTTP requests made with httpc.h; replies are JSON ({"boolean": true},
 * {"Location": "..."}, or {"RemoteException": {"exception", "message"}}). */
#include "platform/webhdfs.h"

#include "platform/httpc.h"
#include "tfos/tfos.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 30000
#define MAX_DEPTH 32
#define URL_MAX (PATH_MAX * 3 + 1024)

struct tfos__webhdfs {
    char base[512];    /* http://host:port, no trailing slash */
    char user[300];    /* user.name=, escaped */
    long timeout_ms;
    int negotiate;     /* SPNEGO with the ticket cache's ticket (tfos__webhdfs_kerberos_token) */
};

/* w->base from base (no trailing slash). 0, or TFOS_EINVAL with err. */
static int set_base(tfos__webhdfs *w, const char *base, char *err, size_t errlen)
{
    size_t bl = base ? strlen(base) : 0;
    while (bl && base[bl - 1] == '/')
        bl--;
    if (!base || (strncmp(base, "http://", 7) && strncmp(base, "https://", 8)) || bl >= sizeof w->base) {
        snprintf(err, errlen, "WebHDFS address '%.200s' is not http://HOST:PORT (TFOS_WEBHDFS, from the "
                 "NameNode's dfs.namenode.http-address)", base ? base : "");
        return TFOS_EINVAL;
    }
    memcpy(w->base, base, bl);
    w->base[bl] = 0;
    return 0;
}

int tfos__webhdfs_open(tfos__webhdfs **out, const char *base, long timeout_ms, char *err, size_t errlen)
{
    *out = NULL;
    tfos__webhdfs probe;
    if (set_base(&probe, base, err, errlen))
        return TFOS_EINVAL;
    const char *user = getenv("HADOOP_USER_NAME");
    struct passwd *pw = user && *user ? NULL : getpwuid(getuid());
    if (!(user && *user) && !(pw && pw->pw_name && *pw->pw_name)) {
        snprintf(err, errlen, "uid %d has no user name, so Hadoop's user is unknown: set HADOOP_USER_NAME",
                 (int)getuid());
        return TFOS_EINVAL;
    }
    tfos__webhdfs *w = calloc(1, sizeof *w);
    if (!w)
        return TFOS_ENOMEM;
    if (tfos__http_escape(user && *user ? user : pw->pw_name, w->user, sizeof w->user)) {
        free(w);
        snprintf(err, errlen, "Hadoop's user name is too long");
        return TFOS_EINVAL;
    }
    memcpy(w->base, probe.base, sizeof w->base);
    w->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
    *out = w;
    return 0;
}

void tfos__webhdfs_close(tfos__webhdfs *w)
{
    free(w);
}

const char *tfos__webhdfs_path(const char *url)
{
    if (!url || strncmp(url, "hdfs://", 7))
        return NULL;
    const char *p = strchr(url + 7, '/');
    return p ? p : "/";
}

/* "delegation=TOKEN" (escaped) from the file $TFOS_HDFS_TOKEN_FILE names,
 * read at each request (the ApplicationMaster renames a fresh one into place),
 * else "user.name=USER". 0, or TFOS_ETOOBIG. */
static int auth_param(const tfos__webhdfs *w, char *buf, size_t size)
{
    const char *file = getenv("TFOS_HDFS_TOKEN_FILE");
    FILE *f = file && *file ? fopen(file, "r") : NULL;
    if (!f)
        return (size_t)snprintf(buf, size, "user.name=%s", w->user) >= size ? TFOS_ETOOBIG : 0;
    char token[4096];
    size_t n = fread(token, 1, sizeof token - 1, f);
    fclose(f);
    while (n && (token[n - 1] == '\n' || token[n - 1] == '\r'))
        n--;
    token[n] = 0;
    int o = snprintf(buf, size, "delegation=");
    return tfos__http_escape(token, buf + o, size - (size_t)o);
}

/* base/webhdfs/v1<path>?op=<op>&<auth_param><extra> into url: the path
 * %-escaped but for its slashes. 0, or TFOS_ETOOBIG. */
static int make_url(const tfos__webhdfs *w, const char *path, const char *op, const char *extra, char *url,
                    size_t size)
{
    int n = snprintf(url, size, "%s/webhdfs/v1%s", w->base, path[0] == '/' ? "" : "/");
    if (n < 0 || (size_t)n >= size)
        return TFOS_ETOOBIG;
    size_t o = (size_t)n;
    if (tfos__http_escape_path(path, url + o, size - o))
        return TFOS_ETOOBIG;
    o += strlen(url + o);
    n = snprintf(url + o, size - o, "?op=%s&", op);
    if (n < 0 || (size_t)n >= size - o)
        return TFOS_ETOOBIG;
    o += (size_t)n;
    if (auth_param(w, url + o, size - o)) /* straight into url: no second buffer of the token's size */
        return TFOS_ETOOBIG;
    o += strlen(url + o);
    if ((size_t)snprintf(url + o, size - o, "%s", extra ? extra : "") >= size - o)
        return TFOS_ETOOBIG;
    return 0;
}

/* One request; its reply's JSON object in *doc (owned by the caller) when
 * the status is `want`. Otherwise an error naming what and where. */
static int request(const tfos__webhdfs *w, const char *method, const char *url, const char *upload, long want,
                   json_t **doc, const char *what, const char *path, char *err, size_t errlen)
{
    tfos__http_req rq = {.method = method, .url = url, .timeout_ms = w->timeout_ms, .upload_path = upload,
                         .max_reply = 1 << 20, .negotiate = w->negotiate};
    if (!upload && strcmp(method, "GET")) { /* a PUT without a body still says so (Content-Length: 0) */
        rq.body = "";
        rq.body_len = 0;
    }
    tfos__http_reply r;
    char why[512];
    int rc = tfos__http_do(&rq, &r, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "%s %.300s on HDFS (WebHDFS at %s): %s", what, path, w->base, why);
        tfos__http_reply_free(&r);
        return rc;
    }
    json_t *j = r.body ? json_loads(r.body, 0, NULL) : NULL;
    if (r.status != want) {
        json_t *ex = json_object_get(json_object_get(j, "RemoteException"), "exception");
        json_t *msg = json_object_get(json_object_get(j, "RemoteException"), "message");
        const char *m = msg ? json_string_value(msg) : r.body && r.status ? r.body : "";
        const char *e = ex ? json_string_value(ex) : "";
        /* a delegation token the NameNode no longer takes: past its life, and nobody renewed or replaced it */
        int gone = (e && strstr(e, "InvalidToken")) ||
                   (m && (strstr(m, " is expired") || strstr(m, "can't be found in cache")));
        snprintf(err, errlen, "%s %.300s on HDFS (WebHDFS at %s): HTTP %ld%s%s%s%.300s%s", what, path, w->base,
                 r.status, ex ? ", " : "", e ? e : "", msg ? ": " : "", m ? m : "",
                 gone ? " (" TFOS_WEBHDFS_TOKEN_FIX ")"
                 : w->negotiate && (r.status == 401 || r.status == 403)
                     ? " (no Kerberos ticket it takes: run `kinit YOU@REALM`; $KRB5CCNAME names the ticket cache)"
                     : "");
        json_decref(j);
        tfos__http_reply_free(&r);
        return r.status ? TFOS_EPROTO : TFOS_ESYS;
    }
    tfos__http_reply_free(&r);
    if (doc)
        *doc = j;
    else
        json_decref(j);
    return 0;
}

/* A call answered {"boolean": ...}: 0 when true; false is TFOS_EPROTO
 * (with `false_means` in err) unless false_ok. */
static int boolean_call(tfos__webhdfs *w, const char *method, const char *path, const char *op, const char *extra,
                        const char *what, const char *false_means, int false_ok, char *err, size_t errlen)
{
    char url[URL_MAX];
    json_t *doc = NULL;
    if (make_url(w, path, op, extra, url, sizeof url)) {
        snprintf(err, errlen, "%s %.300s: path too long", what, path);
        return TFOS_ETOOBIG;
    }
    int rc = request(w, method, url, NULL, 200, &doc, what, path, err, errlen);
    if (!rc && !json_is_true(json_object_get(doc, "boolean")) && !false_ok) {
        snprintf(err, errlen, "%s %.300s on HDFS (WebHDFS at %s): %s", what, path, w->base, false_means);
        rc = TFOS_EPROTO;
    }
    json_decref(doc);
    return rc;
}

int tfos__webhdfs_mkdirs(tfos__webhdfs *w, const char *path, char *err, size_t errlen)
{
    return boolean_call(w, "PUT", path, "MKDIRS", "&permission=700", "mkdir", "the NameNode answered false", 0,
                        err, errlen);
}

int tfos__webhdfs_rename(tfos__webhdfs *w, const char *from, const char *to, char *err, size_t errlen)
{
    char dest[PATH_MAX * 3 + 32] = "&destination=";
    if (tfos__http_escape(to, dest + strlen(dest), sizeof dest - strlen(dest))) {
        snprintf(err, errlen, "rename to %.300s: path too long", to);
        return TFOS_ETOOBIG;
    }
    char why[PATH_MAX + 100];
    snprintf(why, sizeof why, "not renamed to %.300s (the source is missing or the destination exists)", to);
    return boolean_call(w, "PUT", from, "RENAME", dest, "rename", why, 0, err, errlen);
}

int tfos__webhdfs_delete(tfos__webhdfs *w, const char *path, char *err, size_t errlen)
{
    /* false: nothing was there */
    return boolean_call(w, "DELETE", path, "DELETE", "&recursive=true", "delete", "", 1, err, errlen);
}

/* A file: the NameNode names the DataNode to write to; the bytes go there. */
static int put_file(tfos__webhdfs *w, const char *local, const char *path, char *err, size_t errlen)
{
    char url[URL_MAX];
    json_t *doc = NULL;
    if (make_url(w, path, "CREATE", "&overwrite=true&permission=600&noredirect=true", url, sizeof url)) {
        snprintf(err, errlen, "create %.300s: path too long", path);
        return TFOS_ETOOBIG;
    }
    int rc = request(w, "PUT", url, NULL, 200, &doc, "create", path, err, errlen);
    const char *loc = json_string_value(json_object_get(doc, "Location"));
    if (!rc && (!loc || (strncmp(loc, "http://", 7) && strncmp(loc, "https://", 8)))) {
        snprintf(err, errlen, "create %.300s on HDFS (WebHDFS at %s): the NameNode named no DataNode to write to "
                 "(a WebHDFS without noredirect=true, Hadoop before 2.8?)", path, w->base);
        rc = TFOS_EPROTO;
    }
    if (!rc)
        rc = request(w, "PUT", loc, local, 201, NULL, "write", path, err, errlen);
    json_decref(doc);
    return rc;
}

static int put_tree(tfos__webhdfs *w, const char *local, const char *path, int depth, char *err, size_t errlen)
{
    if (depth > MAX_DEPTH) {
        snprintf(err, errlen, "%.300s: more than %d directories deep", local, MAX_DEPTH);
        return TFOS_ETOOBIG;
    }
    int rc = tfos__webhdfs_mkdirs(w, path, err, errlen);
    DIR *d = rc ? NULL : opendir(local);
    if (!rc && !d) {
        snprintf(err, errlen, "%.300s: %s", local, strerror(errno));
        return TFOS_ESYS;
    }
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char l2[PATH_MAX], p2[PATH_MAX];
        struct stat st;
        if ((size_t)snprintf(l2, sizeof l2, "%s/%s", local, e->d_name) >= sizeof l2 ||
            (size_t)snprintf(p2, sizeof p2, "%s/%s", path, e->d_name) >= sizeof p2) {
            snprintf(err, errlen, "%.300s/%.100s: path too long", local, e->d_name);
            rc = TFOS_ETOOBIG;
        } else if (lstat(l2, &st)) {
            snprintf(err, errlen, "%.300s: %s", l2, strerror(errno));
            rc = TFOS_ESYS;
        } else if (S_ISDIR(st.st_mode)) {
            rc = put_tree(w, l2, p2, depth + 1, err, errlen);
        } else if (S_ISREG(st.st_mode)) {
            rc = put_file(w, l2, p2, err, errlen);
        } else {
            snprintf(err, errlen, "%.300s: neither a file nor a directory: not copied to HDFS", l2);
            rc = TFOS_EINVAL;
        }
    }
    if (d)
        closedir(d);
    return rc;
}

int tfos__webhdfs_put_dir(tfos__webhdfs *w, const char *local, const char *path, char *err, size_t errlen)
{
    return put_tree(w, local, path, 0, err, errlen);
}

int tfos__webhdfs_kerberos_token(const char *base, long timeout_ms, char *token, size_t size, long long *expires,
                                 char *err, size_t errlen)
{
    tfos__webhdfs w = {.timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS, .negotiate = 1};
    if (set_base(&w, base, err, errlen))
        return TFOS_EINVAL;
    const char *what = "a delegation token for", *who = "the Kerberos ticket's user";
    char url[URL_MAX];
    json_t *doc = NULL;
    snprintf(url, sizeof url, "%s/webhdfs/v1/?op=GETDELEGATIONTOKEN", w.base);
    int rc = request(&w, "GET", url, NULL, 200, &doc, what, who, err, errlen);
    if (rc)
        return rc;
    const char *s = json_string_value(json_object_get(json_object_get(doc, "Token"), "urlString"));
    size_t n = s ? strlen(s) : 0;
    if (!n || n >= size || n > sizeof url / 4) {
        snprintf(err, errlen, "%s %s on HDFS (WebHDFS at %s): %s", what, who, w.base,
                 n ? "longer than expected" : "the reply has no Token.urlString");
        json_decref(doc);
        return n ? TFOS_ETOOBIG : TFOS_EPROTO;
    }
    memcpy(token, s, n + 1);
    json_decref(doc);
    /* renewed once: the reply is the time it expires unless renewed again */
    int o = snprintf(url, sizeof url, "%s/webhdfs/v1/?op=RENEWDELEGATIONTOKEN&token=", w.base);
    tfos__http_escape(token, url + o, sizeof url - (size_t)o); /* fits: the token is at most a quarter */
    if ((rc = request(&w, "PUT", url, NULL, 200, &doc, "renewing a delegation token for", who, err, errlen)))
        return rc;
    json_t *l = json_object_get(doc, "long");
    if (!json_is_integer(l)) {
        snprintf(err, errlen, "renewing a delegation token on HDFS (WebHDFS at %s): the reply has no expiry",
                 w.base);
        json_decref(doc);
        return TFOS_EPROTO;
    }
    *expires = (long long)json_integer_value(l);
    json_decref(doc);
    return 0;
}
