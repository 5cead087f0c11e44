/* models.c: what the model servers said of their models: signatures
 * (the newest metadata), the versions each server holds (see serve_int.h). */
#include "serve/serve_int.h"

#include "core/json.h"

#include <stdlib.h>
#include <string.h>

model *tfos__serve_find_model(tfos__serve *s, const char *name)
{
    for (int i = 0; i < s->nmodels; i++)
        if (!strcmp(s->models[i].name, name))
            return &s->models[i];
    return NULL;
}

canary *tfos__serve_find_canary(tfos__serve *s, const char *name)
{
    for (int i = 0; i < s->ncanaries; i++)
        if (!strcmp(s->canaries[i].name, name))
            return &s->canaries[i];
    return NULL;
}

model *tfos__serve_route_model(tfos__serve *s, const char *name)
{
    model *m = tfos__serve_find_model(s, name);
    canary *c = m ? NULL : tfos__serve_find_canary(s, name);
    if (!c)
        return m;
    long long total = 0;
    int best = 0;
    for (int k = 0; k < c->n; k++) {
        c->credit[k] += c->weight[k];
        total += c->weight[k];
        if (c->credit[k] > c->credit[best])
            best = k;
    }
    c->credit[best] -= total;
    return &s->models[c->arm[best]];
}

int tfos__serve_canary(tfos__serve *s, const char *name, const char *const *arms, const long long *weights, int n,
                       char *err, size_t errlen)
{
    if (s->ncanaries == MAX_CANARIES) {
        snprintf(err, errlen, "canary %s: at most %d canaries", name, MAX_CANARIES);
        return TFOS_EFULL;
    }
    if (n < 2 || n > MAX_ARMS || strlen(name) >= sizeof s->canaries[0].name || tfos__serve_find_model(s, name) ||
        tfos__serve_find_canary(s, name)) {
        snprintf(err, errlen, "canary %s: 2 to %d models, under a name no model or canary has", name, MAX_ARMS);
        return TFOS_EINVAL;
    }
    canary *c = &s->canaries[s->ncanaries];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    for (int k = 0; k < n; k++) {
        model *m = tfos__serve_find_model(s, arms[k]);
        if (!m || weights[k] <= 0 || weights[k] > 1000000) {
            snprintf(err, errlen, "canary %s: %s is %s", name, arms[k], m ? "weighed out of 1..1000000" : "no model");
            return TFOS_EINVAL;
        }
        c->arm[k] = (int)(m - s->models);
        c->weight[k] = weights[k];
    }
    c->n = n;
    s->ncanaries++;
    return 0;
}

char *tfos__serve_canary_json(const tfos__serve *s, const canary *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fputs("{\"name\": ", f);
    tfos__json_str(f, c->name);
    fputs(", \"canary\": [", f);
    for (int k = 0; k < c->n; k++) {
        char *arm = tfos__serve_model_json(s, &s->models[c->arm[k]]);
        fprintf(f, "%s{\"weight\": %lld, \"model\": %s}", k ? ", " : "", c->weight[k], arm ? arm : "null");
        free(arm);
    }
    fputs("]}", f);
    fclose(f);
    return buf;
}

static int read_specs(json_t *arr, tensor_spec *specs, int *n)
{
    size_t i;
    json_t *t;
    if (!json_is_array(arr) || json_array_size(arr) > MAX_IO)
        return -1;
    *n = 0;
    json_array_foreach(arr, i, t) {
        tensor_spec *sp = &specs[i];
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *dt = json_string_value(json_object_get(t, "datatype"));
        json_t *shape = json_object_get(t, "shape");
        if (!name || !dt || !json_is_array(shape) || json_array_size(shape) < 1 ||
            json_array_size(shape) > TFOS_BATCH_MAX_DIMS + 1 || !(sp->dtype = tfos__dtype_by_oip(dt)))
            return -1;
        snprintf(sp->name, sizeof sp->name, "%s", name);
        sp->ndim = (int)json_array_size(shape);
        for (int d = 0; d < sp->ndim; d++)
            sp->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
        (*n)++;
    }
    return 0;
}

/* Versions as numbers where they are (TensorFlow Serving's), else text:
 * newest first. */
static int version_cmp(const char *a, const char *b)
{
    char *ea, *eb;
    long long x = strtoll(a, &ea, 10), y = strtoll(b, &eb, 10);
    if (!*ea && !*eb && *a && *b)
        return x < y ? 1 : x > y ? -1 : 0;
    return -strcmp(a, b);
}

/* A server's metadata (HELLO, or MODELS when its versions change):
 * {"models": [{name, versions, platform, inputs, outputs}]}. The newest
 * metadata gives a model its signature; the server's versions are its own. */
int tfos__serve_take_metadata(tfos__serve *s, int ix, const char *text, size_t len)
{
    json_error_t e;
    json_t *doc = json_loadb(text, len, 0, &e);
    json_t *models = json_object_get(doc, "models");
    size_t i;
    json_t *jm;
    int rc = json_is_array(models) ? 0 : -1;
    json_array_foreach(models, i, jm) {
        model *m = tfos__serve_find_model(s, json_string_value(json_object_get(jm, "name")) ?: "");
        if (!m) {
            rc = -1;
            continue;
        }
        model tmp = *m;
        json_t *versions = json_object_get(jm, "versions");
        const char *platform = json_string_value(json_object_get(jm, "platform"));
        snprintf(tmp.platform, sizeof tmp.platform, "%s", platform ? platform : "");
        if (read_specs(json_object_get(jm, "inputs"), tmp.in, &tmp.nin) ||
            read_specs(json_object_get(jm, "outputs"), tmp.out, &tmp.nout) || !tmp.nin || !tmp.nout ||
            !json_is_array(versions) || !json_array_size(versions)) {
            rc = -1;
            continue;
        }
        tmp.known = 1;
        *m = tmp;
        server_versions *sv = &s->servers[ix].mv[m - s->models];
        sv->n = 0;
        size_t k;
        json_t *jv;
        json_array_foreach(versions, k, jv) if (json_is_string(jv) && sv->n < MAX_VERSIONS)
            snprintf(sv->v[sv->n++], sizeof sv->v[0], "%s", json_string_value(jv));
    }
    json_decref(doc);
    return rc;
}

static void specs_json(FILE *f, const tensor_spec *sp, int n)
{
    fputs("[", f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        tfos__json_str(f, sp[i].name);
        fprintf(f, ", \"datatype\": \"%s\", \"shape\": [", tfos__dtype_oip(sp[i].dtype));
        for (int d = 0; d < sp[i].ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)sp[i].shape[d]);
        fputs("]}", f);
    }
    fputs("]", f);
}

char *tfos__serve_model_json(const tfos__serve *s, const model *m)
{
    char vs[MAX_SERVERS * MAX_VERSIONS][32];
    int nv = tfos__serve_model_versions(s, (int)(m - s->models), vs, MAX_SERVERS * MAX_VERSIONS);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fputs("{\"name\": ", f);
    tfos__json_str(f, m->name);
    fputs(", \"versions\": [", f);
    for (int k = 0; k < nv; k++) {
        fputs(k ? ", " : "", f);
        tfos__json_str(f, vs[k]);
    }
    fputs("], \"platform\": ", f);
    tfos__json_str(f, m->platform);
    if (m->reg_uri[0]) { /* which registry version the folder served when none is named (the newest) holds */
        const char *serving = "";
        for (int k = 0; k < m->nreg && nv; k++)
            if (!strcmp(m->reg[k].folder, vs[0]))
                serving = m->reg[k].version;
        fputs(", \"registry\": {\"uri\": ", f);
        tfos__json_str(f, m->reg_uri);
        fputs(", \"version\": ", f);
        tfos__json_str(f, serving);
        fputs(", \"versions\": {", f);
        for (int k = 0; k < m->nreg; k++) {
            fputs(k ? ", " : "", f);
            tfos__json_str(f, m->reg[k].folder);
            fputs(": ", f);
            tfos__json_str(f, m->reg[k].version);
        }
        fputs("}}", f);
    }
    fputs(", \"inputs\": ", f);
    specs_json(f, m->in, m->nin);
    fputs(", \"outputs\": ", f);
    specs_json(f, m->out, m->nout);
    fputs("}", f);
    fclose(f);
    return buf;
}

int tfos__serve_servers_ready(const tfos__serve *s)
{
    int n = 0;
    for (int i = 0; i < MAX_SERVERS; i++)
        n += s->servers[i].link && s->servers[i].ready && !s->servers[i].is_client;
    return n;
}

int tfos__serve_holds(const server *sv, int mi, const char *version)
{
    if (!sv->mv)
        return 0;
    for (int k = 0; k < sv->mv[mi].n; k++)
        if (!strcmp(sv->mv[mi].v[k], version))
            return 1;
    return 0;
}

int tfos__serve_model_versions(const tfos__serve *s, int mi, char (*out)[32], int max)
{
    int n = 0;
    for (int i = 0; i < MAX_SERVERS; i++) {
        const server *sv = &s->servers[i];
        if (!sv->link || !sv->ready || !sv->mv)
            continue;
        for (int k = 0; k < sv->mv[mi].n; k++) {
            int seen = 0;
            for (int j = 0; j < n && !seen; j++)
                seen = !strcmp(out[j], sv->mv[mi].v[k]);
            if (!seen && n < max)
                snprintf(out[n++], 32, "%s", sv->mv[mi].v[k]);
        }
    }
    /* newest first (a few entries: insertion sort) */
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && version_cmp(out[b - 1], out[b]) > 0; b--) {
            char t[32];
            memcpy(t, out[b], 32);
            memcpy(out[b], out[b - 1], 32);
            memcpy(out[b - 1], t, 32);
        }
    return n;
}

int tfos__serve_version_ready(const tfos__serve *s, int mi, const char *version, char *err, size_t errlen)
{
    char vs[MAX_SERVERS * MAX_VERSIONS][32], list[300] = "";
    int nv = tfos__serve_model_versions(s, mi, vs, MAX_SERVERS * MAX_VERSIONS);
    if (!version[0])
        return nv > 0;
    for (int k = 0; k < nv; k++) {
        if (!strcmp(vs[k], version))
            return 1;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.31s", k ? ", " : "", vs[k]);
    }
    if (err)
        snprintf(err, errlen, "model %s has no version %s loaded (versions: %s)", s->models[mi].name, version,
                 nv ? list : "none ready");
    return 0;
}

void tfos__serve_registry_folder(tfos__serve *s, const char *model_name, const char *uri, const char *folder,
                                 const char *version)
{
    model *m = tfos__serve_find_model(s, model_name);
    if (!m)
        return;
    snprintf(m->reg_uri, sizeof m->reg_uri, "%s", uri);
    if (m->nreg == MAX_VSTATS) { /* the oldest folders are long unloaded (a server holds MAX_VERSIONS) */
        memmove(&m->reg[0], &m->reg[1], sizeof m->reg[0] * (MAX_VSTATS - 1));
        m->nreg--;
    }
    snprintf(m->reg[m->nreg].folder, sizeof m->reg[0].folder, "%s", folder);
    snprintf(m->reg[m->nreg].version, sizeof m->reg[0].version, "%s", version);
    m->nreg++;
}
