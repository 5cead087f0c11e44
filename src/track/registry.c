/* registry.c: models:/ URIs resolved through MLflow's registry REST API,
 * and a version's artifacts copied into a local version directory
 * (registry.h). */
#include "track/registry.h"

#include "platform/fs.h"
#include "platform/httpc.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 32      /* directories inside a model's artifacts */
#define MAX_FILES 100000  /* files in one version: a bound on what a registry entry can make us fetch */

/* " (model registry at URL)" unless the error names the server already */
#define AT(m, why)                                                                                           \
    strstr(why, tfos__mlflow_shown(m)) ? "" : " (model registry at ", strstr(why, tfos__mlflow_shown(m)) ? "" : \
    tfos__mlflow_shown(m), strstr(why, tfos__mlflow_shown(m)) ? "" : ")"

static int name_ok(const char *s, size_t n)
{
    return n > 0 && n < 256 && !memchr(s, '/', n);
}

int tfos__registry_parse(const char *uri, tfos__registry_ref *ref, char *err, size_t errlen)
{
    memset(ref, 0, sizeof *ref);
    if (strncmp(uri, "models:/", 8)) {
        snprintf(err, errlen, "'%.200s' is not a registry URI (models:/NAME@ALIAS or models:/NAME/VERSION)", uri);
        return TFOS_EINVAL;
    }
    const char *p = uri + 8, *at = strrchr(p, '@'), *slash = strchr(p, '/');
    if (at && !slash && name_ok(p, (size_t)(at - p)) && at[1] && strlen(at + 1) < sizeof ref->alias &&
        !strchr(at + 1, '/')) {
        snprintf(ref->name, sizeof ref->name, "%.*s", (int)(at - p), p);
        snprintf(ref->alias, sizeof ref->alias, "%s", at + 1);
        return 0;
    }
    if (slash && !at && name_ok(p, (size_t)(slash - p)) && slash[1] && strlen(slash + 1) < 20 &&
        strspn(slash + 1, "0123456789") == strlen(slash + 1)) {
        snprintf(ref->name, sizeof ref->name, "%.*s", (int)(slash - p), p);
        snprintf(ref->version, sizeof ref->version, "%s", slash + 1);
        return 0;
    }
    snprintf(err, errlen, "'%.200s': a registry URI is models:/NAME@ALIAS or models:/NAME/VERSION (a number); "
             "stages (models:/NAME/Production) are deprecated by MLflow and not taken", uri);
    return TFOS_EINVAL;
}

int tfos__registry_resolve(tfos__mlflow *m, tfos__registry_ref *ref, char *err, size_t errlen)
{
    char n[800], x[800], path[1800], why[512] = "";
    json_t *reply = NULL;
    if (tfos__http_escape(ref->name, n, sizeof n) ||
        tfos__http_escape(ref->alias[0] ? ref->alias : ref->version, x, sizeof x)) {
        snprintf(err, errlen, "models:/%.200s: name too long", ref->name);
        return TFOS_EINVAL;
    }
    if (ref->alias[0])
        snprintf(path, sizeof path, "/api/2.0/mlflow/registered-models/alias?name=%s&alias=%s", n, x);
    else
        snprintf(path, sizeof path, "/api/2.0/mlflow/model-versions/get?name=%s&version=%s", n, x);
    int rc = tfos__mlflow_call(m, "GET", path, NULL, &reply, NULL, why, sizeof why);
    const char *v = json_string_value(json_object_get(json_object_get(reply, "model_version"), "version"));
    if (!rc && (!v || !*v || strlen(v) >= sizeof ref->version)) {
        snprintf(why, sizeof why, "the reply names no version");
        rc = TFOS_EPROTO;
    }
    if (rc) {
        snprintf(err, errlen, "models:/%.200s%s%.200s: %s%s%s%s", ref->name, ref->alias[0] ? "@" : "/",
                 ref->alias[0] ? ref->alias : ref->version, why, AT(m, why));
    } else {
        snprintf(ref->version, sizeof ref->version, "%s", v);
    }
    json_decref(reply);
    return rc;
}

typedef struct walk {
    tfos__mlflow *m;
    int files;
    char *err;
    size_t errlen;
} walk;

/* The artifact directory src (a path under mlflow-artifacts:/) into the
 * local directory dst (made here). */
static int copy_dir(walk *w, const char *src, const char *dst, int depth)
{
    json_t *reply = NULL, *f;
    size_t i;
    if (depth > MAX_DEPTH) {
        snprintf(w->err, w->errlen, "%.300s: more than %d directories deep", src, MAX_DEPTH);
        return TFOS_ETOOBIG;
    }
    if (mkdir(dst, 0755) && errno != EEXIST) {
        snprintf(w->err, w->errlen, "%.300s: %s", dst, strerror(errno));
        return TFOS_ESYS;
    }
    int rc = tfos__mlflow_list(w->m, src, &reply, w->err, w->errlen);
    json_array_foreach(rc ? NULL : json_object_get(reply, "files"), i, f) {
        const char *p = json_string_value(json_object_get(f, "path"));
        const char *base = p ? strrchr(p, '/') : NULL; /* entries are named relative to src; take the last part */
        base = base ? base + 1 : p;
        if (!base || !*base || !strcmp(base, ".") || !strcmp(base, "..")) {
            snprintf(w->err, w->errlen, "%.300s: the server listed an entry without a usable name", src);
            rc = TFOS_EPROTO;
            break;
        }
        char s2[PATH_MAX], d2[PATH_MAX];
        if ((size_t)snprintf(s2, sizeof s2, "%s/%s", src, base) >= sizeof s2 ||
            (size_t)snprintf(d2, sizeof d2, "%s/%s", dst, base) >= sizeof d2) {
            snprintf(w->err, w->errlen, "%.300s/%.100s: path too long", src, base);
            rc = TFOS_ETOOBIG;
            break;
        }
        if (json_is_true(json_object_get(f, "is_dir"))) {
            rc = copy_dir(w, s2, d2, depth + 1);
        } else if (++w->files > MAX_FILES) {
            snprintf(w->err, w->errlen, "%.300s: more than %d files in one model version", src, MAX_FILES);
            rc = TFOS_ETOOBIG;
        } else {
            rc = tfos__mlflow_download(w->m, s2, d2, w->err, w->errlen);
        }
        if (rc)
            break;
    }
    json_decref(reply);
    return rc;
}

int tfos__registry_fetch(tfos__mlflow *m, const char *name, const char *version, const char *dest, char *err,
                         size_t errlen)
{
    char n[800], path[1800], why[512] = "", part[PATH_MAX];
    json_t *reply = NULL;
    if (tfos__http_escape(name, n, sizeof n) || strlen(version) > 30) {
        snprintf(err, errlen, "models:/%.200s: name too long", name);
        return TFOS_EINVAL;
    }
    snprintf(path, sizeof path, "/api/2.0/mlflow/model-versions/get-download-uri?name=%s&version=%s", n, version);
    int rc = tfos__mlflow_call(m, "GET", path, NULL, &reply, NULL, why, sizeof why);
    const char *uri = json_string_value(json_object_get(reply, "artifact_uri"));
    if (!rc && (!uri || strncmp(uri, "mlflow-artifacts:", 17))) {
        /* s3://, gs://, a local path: the client would need the store's own credentials or disk */
        snprintf(why, sizeof why, "its artifacts are at %.300s, not served through the tracking server: run "
                 "`mlflow server` with --serve-artifacts (the default) so clients fetch through it", uri ? uri : "(none)");
        rc = TFOS_EINVAL;
    }
    if (rc) {
        snprintf(err, errlen, "models:/%.200s/%s: %s%s%s%s", name, version, why, AT(m, why));
        json_decref(reply);
        return rc;
    }
    const char *ap = uri + 17;
    if (!strncmp(ap, "//", 2)) /* mlflow-artifacts://host:port/path: the host is the server's own */
        ap = strchr(ap + 2, '/') ? strchr(ap + 2, '/') : "";
    while (*ap == '/')
        ap++;
    if ((size_t)snprintf(part, sizeof part, "%s.part-%d", dest, (int)getpid()) >= sizeof part) {
        snprintf(err, errlen, "%.300s: path too long", dest);
        json_decref(reply);
        return TFOS_EINVAL;
    }
    tfos__rm_tree(part); /* a previous try's leftovers */
    walk w = {.m = m, .err = why, .errlen = sizeof why};
    rc = copy_dir(&w, ap, part, 0);
    if (!rc && rename(part, dest)) {
        snprintf(why, sizeof why, "%.300s: %s", dest, strerror(errno));
        rc = TFOS_ESYS;
    }
    if (rc) {
        tfos__rm_tree(part);
        snprintf(err, errlen, "models:/%.200s/%s: %s%s%s%s", name, version, why, AT(m, why));
    }
    json_decref(reply);
    return rc;
}
