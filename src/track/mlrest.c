/* mlrest.c: MLflow's REST API over httpc (mlrest.h). */
#include "track/mlrest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "platform/httpc.h"
#include "tfos/tfos.h"

#define TIMEOUT_DEFAULT_MS 10000
#define ARTIFACTS "/api/2.0/mlflow-artifacts/artifacts"

struct tfos__mlflow {
    char *base;          /* "http://host:port[/prefix]", no trailing '/' */
    char *shown;         /* base without user:password@ */
    char *auth;          /* "Authorization: ..." or NULL */
    int insecure;
    long timeout_ms;
};

/* base64 of s (basic authentication), malloc'd. */
static char *b64(const char *s)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(s), o = 0;
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)s[i] << 16;
        if (i + 1 < n) v |= (unsigned char)s[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)s[i + 2];
        out[o++] = t[(v >> 18) & 63];
        out[o++] = t[(v >> 12) & 63];
        out[o++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[o] = 0;
    return out;
}

int tfos__mlflow_open(tfos__mlflow **out, const char *uri, long timeout_ms, char *err, size_t errlen)
{
    *out = NULL;
    if (!uri || !*uri) {
        snprintf(err, errlen, "no MLflow tracking URI: give --mlflow http://HOST:PORT (or set MLFLOW_TRACKING_URI)");
        return TFOS_EINVAL;
    }
    if (strncasecmp(uri, "http://", 7) != 0 && strncasecmp(uri, "https://", 8) != 0) {
        snprintf(err, errlen,
                 "MLflow tracking URI %.200s: tfos speaks to a tracking server over HTTP; give its "
                 "http:// or https:// address (start one with `mlflow server`; file stores and "
                 "\"databricks\" are not supported)",
                 uri);
        return TFOS_EINVAL;
    }
    tfos__mlflow *m = calloc(1, sizeof *m);
    if (!m) return TFOS_ENOMEM;
    m->timeout_ms = timeout_ms > 0 ? timeout_ms : TIMEOUT_DEFAULT_MS;
    size_t len = strlen(uri);
    while (len > 0 && uri[len - 1] == '/') len--;
    m->base = strndup(uri, len);
    m->shown = malloc(len + 1);
    if (!m->base || !m->shown) goto oom;
    /* shown: the base without user:password@ */
    const char *host = strstr(m->base, "://") + 3;
    const char *at = strchr(host, '@');
    const char *slash = strchr(host, '/');
    if (at && (!slash || at < slash))
        snprintf(m->shown, len + 1, "%.*s%s", (int)(host - m->base), m->base, at + 1);
    else
        snprintf(m->shown, len + 1, "%s", m->base);
    const char *token = getenv("MLFLOW_TRACKING_TOKEN");
    const char *user = getenv("MLFLOW_TRACKING_USERNAME");
    const char *pass = getenv("MLFLOW_TRACKING_PASSWORD");
    if (token && *token) {
        size_t n = strlen(token) + 32;
        if (!(m->auth = malloc(n))) goto oom;
        snprintf(m->auth, n, "Authorization: Bearer %s", token);
    } else if (user && *user) {
        size_t n = strlen(user) + (pass ? strlen(pass) : 0) + 2;
        char *pair = malloc(n);
        if (!pair) goto oom;
        snprintf(pair, n, "%s:%s", user, pass ? pass : "");
        char *enc = b64(pair);
        free(pair);
        if (!enc) goto oom;
        n = strlen(enc) + 32;
        m->auth = malloc(n);
        if (m->auth) snprintf(m->auth, n, "Authorization: Basic %s", enc);
        free(enc);
        if (!m->auth) goto oom;
    }
    const char *insecure = getenv("MLFLOW_TRACKING_INSECURE_TLS");
    m->insecure = insecure && (!strcasecmp(insecure, "true") || !strcmp(insecure, "1"));
    *out = m;
    return 0;
oom:
    tfos__mlflow_close(m);
    return TFOS_ENOMEM;
}

void tfos__mlflow_close(tfos__mlflow *m)
{
    if (!m) return;
    free(m->base);
    free(m->shown);
    free(m->auth);
    free(m);
}

const char *tfos__mlflow_shown(const tfos__mlflow *m) { return m->shown; }

/* The reply of a non-2xx status, as err: MLflow's error_code and message
 * when it sent them. */
static void error_text(const tfos__mlflow *m, const char *what, const tfos__http_reply *r, char *err, size_t errlen)
{
    json_t *j = r->body ? json_loads(r->body, 0, NULL) : NULL;
    const char *code = j ? json_string_value(json_object_get(j, "error_code")) : NULL;
    const char *msg = j ? json_string_value(json_object_get(j, "message")) : NULL;
    if (code || msg)
        snprintf(err, errlen, "MLflow at %s: %s: %s: %.300s", m->shown, what, code ? code : "error", msg ? msg : "");
    else
        snprintf(err, errlen, "MLflow at %s: %s: HTTP %ld %.200s", m->shown, what, r->status,
                 r->body ? r->body : "");
    json_decref(j);
}

static int request(tfos__mlflow *m, tfos__http_req *rq, const char *path, tfos__http_reply *r, char *err,
                   size_t errlen)
{
    size_t n = strlen(m->base) + strlen(path) + 1;
    char *url = malloc(n);
    if (!url) return TFOS_ENOMEM;
    snprintf(url, n, "%s%s", m->base, path);
    const char *hdrs[4] = {0};
    int h = 0;
    if (rq->body) hdrs[h++] = "Content-Type: application/json";
    if (m->auth) hdrs[h++] = m->auth;
    rq->url = url;
    rq->headers = hdrs;
    rq->timeout_ms = m->timeout_ms;
    rq->insecure = m->insecure;
    int rc = tfos__http_do(rq, r, err, errlen);
    free(url);
    return rc;
}

int tfos__mlflow_call(tfos__mlflow *m, const char *method, const char *path, json_t *body, json_t **reply,
                      long *status, char *err, size_t errlen)
{
    if (reply) *reply = NULL;
    if (status) *status = 0;
    char *text = NULL;
    if (body && !(text = json_dumps(body, JSON_COMPACT))) return TFOS_ENOMEM;
    tfos__http_req rq = {.method = method, .body = text, .body_len = text ? strlen(text) : 0};
    tfos__http_reply r;
    int rc = request(m, &rq, path, &r, err, errlen);
    free(text);
    if (status) *status = r.status;
    if (rc == 0 && (r.status < 200 || r.status >= 300)) {
        error_text(m, path, &r, err, errlen);
        rc = TFOS_EPROTO;
    } else if (rc == 0 && reply) {
        json_error_t je;
        *reply = json_loads(r.body ? r.body : "{}", 0, &je);
        if (!*reply) {
            snprintf(err, errlen, "MLflow at %s: %s: the reply is not JSON (%s)", m->shown, path, je.text);
            rc = TFOS_EPROTO;
        }
    }
    tfos__http_reply_free(&r);
    return rc;
}

/* ARTIFACTS "/" artifact_path with each segment %-escaped, '/' kept. */
static char *artifact_url_path(const char *artifact_path)
{
    size_t n = strlen(ARTIFACTS) + 3 * strlen(artifact_path) + 2;
    char *p = malloc(n);
    if (!p) return NULL;
    size_t o = (size_t)snprintf(p, n, "%s/", ARTIFACTS);
    char seg[1024];
    while (*artifact_path == '/') artifact_path++;
    while (*artifact_path) {
        size_t len = strcspn(artifact_path, "/");
        if (len >= sizeof seg / 3) {
            free(p);
            return NULL;
        }
        char raw[sizeof seg / 3 + 1];
        memcpy(raw, artifact_path, len);
        raw[len] = 0;
        if (tfos__http_escape(raw, seg, sizeof seg) != 0) {
            free(p);
            return NULL;
        }
        o += (size_t)snprintf(p + o, n - o, "%s%s", seg, artifact_path[len] ? "/" : "");
        artifact_path += len;
        while (*artifact_path == '/') artifact_path++;
    }
    return p;
}

static int transfer(tfos__mlflow *m, const char *method, const char *artifact_path, const char *file, char *err,
                    size_t errlen)
{
    char *path = artifact_url_path(artifact_path);
    if (!path) {
        snprintf(err, errlen, "artifact path too long: %.200s", artifact_path);
        return TFOS_EINVAL;
    }
    tfos__http_req rq = {.method = method};
    if (!strcmp(method, "PUT"))
        rq.upload_path = file;
    else
        rq.download_path = file;
    tfos__http_reply r;
    int rc = request(m, &rq, path, &r, err, errlen);
    if (rc == 0 && (r.status < 200 || r.status >= 300)) {
        error_text(m, artifact_path, &r, err, errlen);
        rc = TFOS_EPROTO;
    }
    tfos__http_reply_free(&r);
    free(path);
    return rc;
}

int tfos__mlflow_upload(tfos__mlflow *m, const char *artifact_path, const char *file, char *err, size_t errlen)
{
    return transfer(m, "PUT", artifact_path, file, err, errlen);
}

int tfos__mlflow_download(tfos__mlflow *m, const char *artifact_path, const char *file, char *err, size_t errlen)
{
    return transfer(m, "GET", artifact_path, file, err, errlen);
}

int tfos__mlflow_list(tfos__mlflow *m, const char *artifact_dir, json_t **reply, char *err, size_t errlen)
{
    char q[2048], path[2200];
    if (tfos__http_escape(artifact_dir, q, sizeof q) != 0) {
        snprintf(err, errlen, "artifact path too long: %.200s", artifact_dir);
        return TFOS_EINVAL;
    }
    snprintf(path, sizeof path, "%s?path=%s", ARTIFACTS, q);
    return tfos__mlflow_call(m, "GET", path, NULL, reply, NULL, err, errlen);
}
