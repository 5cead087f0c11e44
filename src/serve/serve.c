/* serve.c: tfos serve's front end (see serve.h).
 *
 * Everything runs on the launcher's event loop: HTTP requests come in
 * through the route, model servers' frames through their sockets, and one
 * timer fires when the oldest waiting request's delay is up or a request's
 * deadline passes. Every request is in exactly one place: a model's queue,
 * a batch in flight (on one server), or answered (freed). */
#include "serve/serve.h"

#include "core/auth.h"
#include "core/batch.h"
#include "core/json.h"
#include "core/log.h"
#include "platform/clock.h"
#include "platform/net.h"
#include "serve/oip.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_SERVERS 64
#define MAX_IO 16             /* inputs or outputs of a model */
#define FRAME_HEAD 16
#define FRAME_MAX (1u << 30)  /* a batch frame's payload */
#define INFLIGHT 2            /* batches on one server at once */
#define LAT_BUCKETS 14
#define MAX_VERSIONS 8        /* versions of a model one server holds */
#define MAX_VSTATS 16         /* versions counted apart in /metrics */

static const double lat_bounds_ms[LAT_BUCKETS] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000};

typedef struct tensor_spec {
    char name[128];
    int dtype;                /* TFOS_DT_* */
    int ndim;                 /* with the batch dimension */
    int64_t shape[TFOS_BATCH_MAX_DIMS + 1]; /* -1: any */
} tensor_spec;

typedef struct model {
    char name[128];
    char platform[64];
    int known;                /* metadata received from a server */
    int nin, nout;
    tensor_spec in[MAX_IO], out[MAX_IO];
    struct req *head, *tail;  /* waiting, oldest first */
    long long queued_rows;
    /* metrics */
    unsigned long long ok, failed, refused, rows, batches, local;
    struct {
        char v[32];
        unsigned long long ok;
    } vstat[MAX_VSTATS];      /* answers by the version that ran them */
    unsigned long long lat[LAT_BUCKETS + 1];
    double lat_sum_ms;
} model;

typedef struct req {
    struct req *next;
    uint64_t http_id;
    int client;               /* -1: an HTTP request; else its client's slot (a local client) */
    uint32_t client_gen;      /* that slot's connection when it asked */
    int model;
    uint32_t rows;
    int64_t t0, deadline;
    char id[160];             /* the request's "id", echoed */
    char version[32];         /* the version asked for; "": the server's latest */
    uint64_t want;            /* outputs asked for (bit per output); 0: all */
    uint32_t inner[MAX_IO][TFOS_BATCH_MAX_DIMS]; /* per-row shape of each input */
    int inner_ndim[MAX_IO];
    void *data[MAX_IO];       /* each input's rows, the model's dtype */
    size_t nbytes[MAX_IO];
} req;

typedef struct flight {
    struct flight *next;
    uint64_t id;
    int server;
    int model;
    req *reqs;                /* in batch order */
    uint32_t rows;
} flight;

typedef struct server_versions {
    int n;
    char v[MAX_VERSIONS][32]; /* the first: the one served when none is named */
} server_versions;

typedef struct server {
    int fd;                   /* -1: free */
    int is_client;            /* a local client (predict_udf), not a model server */
    uint32_t gen;             /* bumped when the slot's connection goes */
    server_versions *mv;      /* per model: the versions this server holds */
    int ready;                /* said HELLO with the secret */
    int node;
    int inflight;
    char *in;                 /* frames being read */
    size_t in_len, in_cap;
    char *out;                /* frames being written */
    size_t out_len, out_off, out_cap;
} server;

struct tfos__serve {
    tfos__loop *loop;
    tfos_serve_opts o;
    char secret[TFOS_HEX_SECRET_LEN + 1];
    char address[40];         /* "@tfos-serve-<hex>" */
    char link[300];           /* what model servers connect to: address, or "HOST:PORT" (tcp_host) */
    int lfd, tfd;             /* the abstract socket's and the TCP listener's (-1: none) */
    tfos__http *http;
    tfos__status_src *status;
    char token[80];           /* the HTTP token, which local clients give too; "": none */
    int nmodels;
    model *models;
    server servers[MAX_SERVERS];
    flight *flights;
    uint64_t next_batch;
    tfos__timer timer;
};

/* ---- dtypes ---------------------------------------------------------------- */

static const struct {
    const char *oip;
    int dt;
} dtypes[] = {{"BOOL", TFOS_DT_BOOL}, {"INT8", TFOS_DT_I8},   {"INT16", TFOS_DT_I16}, {"INT32", TFOS_DT_I32},
              {"INT64", TFOS_DT_I64}, {"UINT8", TFOS_DT_U8},  {"UINT16", TFOS_DT_U16}, {"UINT32", TFOS_DT_U32},
              {"UINT64", TFOS_DT_U64}, {"FP32", TFOS_DT_F32}, {"FP64", TFOS_DT_F64}};

static int dtype_of(const char *oip)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(oip, dtypes[i].oip))
            return dtypes[i].dt;
    return 0;
}

static const char *oip_of(int dt)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dt == dt)
            return dtypes[i].oip;
    return "?";
}

/* ---- answers ----------------------------------------------------------------- */

static char *error_json(const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fputs("{\"error\": ", f);
    tfos__json_str(f, msg);
    fputs("}", f);
    fclose(f);
    return buf;
}

static char *error_jsonf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *error_jsonf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = error_json(fmt, ap);
    va_end(ap);
    return body;
}

/* An error answer now (in a route). */
static int fail_now(tfos__http_resp *rs, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_now(tfos__http_resp *rs, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rs->body = error_json(fmt, ap);
    va_end(ap);
    rs->status = status;
    rs->ctype = "application/json";
    return 0;
}

static void observe(model *m, int64_t t0)
{
    double ms = (double)(tfos__now_ms() - t0);
    int b = 0;
    while (b < LAT_BUCKETS && ms > lat_bounds_ms[b])
        b++;
    m->lat[b]++;
    m->lat_sum_ms += ms;
}

static void free_req(req *r)
{
    for (int i = 0; i < MAX_IO; i++)
        free(r->data[i]);
    free(r);
}

static void flush_out(tfos__serve *s, int ix);
static int queue_frame(struct server *sv, uint32_t type, uint64_t id, const void *a, size_t alen, const void *b,
                       size_t blen);

/* Is the local client that sent r still connected? */
static int client_current(const tfos__serve *s, const req *r)
{
    const server *c = &s->servers[r->client];
    return c->fd >= 0 && c->is_client && c->gen == r->client_gen;
}

/* An ERROR frame to local client ix: "STATUS {json error}". */
static void send_error(tfos__serve *s, int ix, uint64_t id, int status, const char *body)
{
    char head[8];
    int hl = snprintf(head, sizeof head, "%d ", status);
    if (queue_frame(&s->servers[ix], TFOS_SERVE_ERROR, id, head, (size_t)hl, body, strlen(body)) == 0)
        flush_out(s, ix);
}

/* Answer a waiting request with an error, and free it. */
static void fail_req(tfos__serve *s, req *r, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail_req(tfos__serve *s, req *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = error_json(fmt, ap);
    va_end(ap);
    model *m = &s->models[r->model];
    m->failed++;
    observe(m, r->t0);
    if (r->client < 0) {
        tfos__http_reply(s->http, r->http_id, status, "application/json", body, 0);
    } else {
        if (client_current(s, r))
            send_error(s, r->client, r->http_id, status, body ? body : "{}");
        free(body);
    }
    free_req(r);
}

/* ---- model metadata ------------------------------------------------------------ */

static model *find_model(tfos__serve *s, const char *name)
{
    for (int i = 0; i < s->nmodels; i++)
        if (!strcmp(s->models[i].name, name))
            return &s->models[i];
    return NULL;
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
            json_array_size(shape) > TFOS_BATCH_MAX_DIMS + 1 || !(sp->dtype = dtype_of(dt)))
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

/* Every version of model mi that a ready server holds, newest first; n of
 * them into out (up to max). */
static int model_versions(const tfos__serve *s, int mi, char (*out)[32], int max);

/* A server's metadata (HELLO, or MODELS when its versions change):
 * {"models": [{name, versions, platform, inputs, outputs}]}. The newest
 * metadata gives a model its signature; the server's versions are its own. */
static int take_metadata(tfos__serve *s, int ix, const char *text, size_t len)
{
    json_error_t e;
    json_t *doc = json_loadb(text, len, 0, &e);
    json_t *models = json_object_get(doc, "models");
    size_t i;
    json_t *jm;
    int rc = json_is_array(models) ? 0 : -1;
    json_array_foreach(models, i, jm) {
        model *m = find_model(s, json_string_value(json_object_get(jm, "name")) ?: "");
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
        fprintf(f, ", \"datatype\": \"%s\", \"shape\": [", oip_of(sp[i].dtype));
        for (int d = 0; d < sp[i].ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)sp[i].shape[d]);
        fputs("]}", f);
    }
    fputs("]", f);
}

static char *model_json(const tfos__serve *s, const model *m)
{
    char vs[MAX_SERVERS * MAX_VERSIONS][32];
    int nv = model_versions(s, (int)(m - s->models), vs, MAX_SERVERS * MAX_VERSIONS);
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
    fputs(", \"inputs\": ", f);
    specs_json(f, m->in, m->nin);
    fputs(", \"outputs\": ", f);
    specs_json(f, m->out, m->nout);
    fputs("}", f);
    fclose(f);
    return buf;
}

/* ---- the model servers' sockets ------------------------------------------------- */

static int servers_ready(const tfos__serve *s)
{
    int n = 0;
    for (int i = 0; i < MAX_SERVERS; i++)
        n += s->servers[i].fd >= 0 && s->servers[i].ready && !s->servers[i].is_client;
    return n;
}

static int holds(const server *sv, int mi, const char *version)
{
    if (!sv->mv)
        return 0;
    for (int k = 0; k < sv->mv[mi].n; k++)
        if (!strcmp(sv->mv[mi].v[k], version))
            return 1;
    return 0;
}

static int model_versions(const tfos__serve *s, int mi, char (*out)[32], int max)
{
    int n = 0;
    for (int i = 0; i < MAX_SERVERS; i++) {
        const server *sv = &s->servers[i];
        if (sv->fd < 0 || !sv->ready || !sv->mv)
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

static void dispatch_all(tfos__serve *s);
static void schedule(tfos__serve *s);

static int queue_frame(struct server *sv, uint32_t type, uint64_t id, const void *a, size_t alen, const void *b,
                       size_t blen)
{
    size_t need = sv->out_len + FRAME_HEAD + alen + blen;
    if (need > sv->out_cap) {
        size_t cap = sv->out_cap ? sv->out_cap : 65536;
        while (cap < need)
            cap *= 2;
        char *o = realloc(sv->out, cap);
        if (!o)
            return -1;
        sv->out = o;
        sv->out_cap = cap;
    }
    char *p = sv->out + sv->out_len;
    uint32_t len = (uint32_t)(alen + blen);
    memcpy(p, &len, 4);
    memcpy(p + 4, &type, 4);
    memcpy(p + 8, &id, 8);
    memcpy(p + FRAME_HEAD, a, alen);
    if (blen)
        memcpy(p + FRAME_HEAD + alen, b, blen);
    sv->out_len = need;
    return 0;
}

/* Put one batch's requests back at the front of its model's queue. */
static void requeue_reqs(tfos__serve *s, flight *fl)
{
    model *m = &s->models[fl->model];
    req *last = fl->reqs;
    while (last && last->next)
        last = last->next;
    if (last) {
        last->next = m->head;
        m->head = fl->reqs;
        if (!m->tail)
            m->tail = last;
    }
    m->queued_rows += fl->rows;
    free(fl);
}

/* Put a server's batches back at the front of their queues, in order. */
static void requeue_flights(tfos__serve *s, int server_ix)
{
    flight **pp = &s->flights;
    while (*pp) {
        flight *fl = *pp;
        if (fl->server != server_ix) {
            pp = &fl->next;
            continue;
        }
        *pp = fl->next;
        requeue_reqs(s, fl);
    }
}

static void drop_server(tfos__serve *s, int ix, const char *why)
{
    server *sv = &s->servers[ix];
    if (sv->ready && !sv->is_client)
        TFOS_WARN("model server %d (node worker:%d) left: %s; its %d batch(es) go to another", ix, sv->node, why,
                  sv->inflight);
    else if (sv->is_client && strcmp(why, "its connection closed"))
        TFOS_WARN("a local client left: %s", why);
    uint32_t gen = sv->gen + 1;
    tfos__loop_unwatch(s->loop, sv->fd);
    close(sv->fd);
    free(sv->in);
    free(sv->out);
    free(sv->mv);
    memset(sv, 0, sizeof *sv);
    sv->fd = -1;
    sv->gen = gen;
    requeue_flights(s, ix);
    schedule(s);
}

static void flush_out(tfos__serve *s, int ix)
{
    server *sv = &s->servers[ix];
    while (sv->out_off < sv->out_len) {
        ssize_t w = send(sv->fd, sv->out + sv->out_off, sv->out_len - sv->out_off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (w <= 0) {
            drop_server(s, ix, strerror(errno));
            return;
        }
        sv->out_off += (size_t)w;
    }
    if (sv->out_off == sv->out_len)
        sv->out_off = sv->out_len = 0;
    tfos__loop_events(s->loop, sv->fd, TFOS_EV_READ | (sv->out_len ? TFOS_EV_WRITE : 0));
}

/* ---- answering from a batch's outputs ------------------------------------------ */

static void write_value(FILE *f, int dt, const char *p)
{
    switch (dt) {
    case TFOS_DT_BOOL: fputs(*(const uint8_t *)p ? "true" : "false", f); break;
    case TFOS_DT_I8: fprintf(f, "%d", *(const int8_t *)p); break;
    case TFOS_DT_I16: { int16_t v; memcpy(&v, p, 2); fprintf(f, "%d", v); break; }
    case TFOS_DT_I32: { int32_t v; memcpy(&v, p, 4); fprintf(f, "%d", v); break; }
    case TFOS_DT_I64: { int64_t v; memcpy(&v, p, 8); fprintf(f, "%lld", (long long)v); break; }
    case TFOS_DT_U8: fprintf(f, "%u", *(const uint8_t *)p); break;
    case TFOS_DT_U16: { uint16_t v; memcpy(&v, p, 2); fprintf(f, "%u", v); break; }
    case TFOS_DT_U32: { uint32_t v; memcpy(&v, p, 4); fprintf(f, "%u", v); break; }
    case TFOS_DT_U64: { uint64_t v; memcpy(&v, p, 8); fprintf(f, "%llu", (unsigned long long)v); break; }
    case TFOS_DT_F32: {
        float v;
        char b[40];
        memcpy(&v, p, 4);
        fwrite(b, 1, (size_t)tfos__oip_fmt_f32(b, v), f);
        break;
    }
    case TFOS_DT_F64: {
        double v;
        memcpy(&v, p, 8);
        if (isfinite(v))
            fprintf(f, "%.17g", v);
        else
            fputs("null", f);
        break;
    }
    }
}

/* One request's answer: rows [row0, row0 + r->rows) of every output. */
static char *answer_json(const model *m, const char *version, const req *r, const tfos__batch_view *v,
                         const char *batch, uint32_t row0)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fputs("{\"model_name\": ", f);
    tfos__json_str(f, m->name);
    fputs(", \"model_version\": ", f);
    tfos__json_str(f, version);
    if (r->id[0]) {
        fputs(", \"id\": ", f);
        tfos__json_str(f, r->id);
    }
    fputs(", \"outputs\": [", f);
    int first = 1;
    for (uint32_t c = 0; c < v->ncols; c++) {
        const tfos__col *col = &v->cols[c];
        if (r->want && !(r->want & (1ull << c)))
            continue;
        size_t es = tfos__dtype_size(col->dtype);
        uint64_t per_row = tfos__col_row_elems(col);
        fprintf(f, "%s{\"name\": \"%.*s\", \"datatype\": \"%s\", \"shape\": [%u", first ? "" : ", ",
                (int)col->name_len, col->name, oip_of(col->dtype), r->rows);
        for (int d = 0; d < col->ndim; d++)
            fprintf(f, ", %u", col->shape[d]);
        fputs("], \"data\": [", f);
        const char *p = batch + col->data_off + (uint64_t)row0 * per_row * es;
        for (uint64_t k = 0; k < (uint64_t)r->rows * per_row; k++) {
            if (k)
                fputc(',', f);
            write_value(f, col->dtype, p + k * es);
        }
        fputs("]}", f);
        first = 0;
    }
    fputs("]}", f);
    fclose(f);
    return buf;
}

/* Count the answer to r, by the version that ran it; r is freed. */
static void count_answer(model *m, req *r, const char *version)
{
    m->ok++;
    for (int k = 0; k < MAX_VSTATS; k++)
        if (!strcmp(m->vstat[k].v, version) || !m->vstat[k].v[0]) {
            snprintf(m->vstat[k].v, sizeof m->vstat[k].v, "%s", version);
            m->vstat[k].ok++;
            break;
        }
    observe(m, r->t0);
    free_req(r);
}

/* A local client's answer: its rows of every output, as a columnar batch
 * after the version. */
static void answer_client(tfos__serve *s, req *r, const char *version, const tfos__batch_view *v, const char *batch,
                          uint32_t row0)
{
    tfos__col cols[MAX_IO];
    memset(cols, 0, sizeof cols);
    for (uint32_t c = 0; c < v->ncols; c++) {
        cols[c] = v->cols[c];
        cols[c].data_off = cols[c].offsets_off = 0;
    }
    uint64_t total = tfos__batch_layout(r->rows, v->ncols, cols);
    char *out = total ? malloc(total) : NULL;
    if (!out) {
        send_error(s, r->client, r->http_id, 503, "{\"error\": \"out of memory\"}");
        return;
    }
    tfos__batch_write_header(out, total, r->rows, v->ncols, 0, cols);
    for (uint32_t c = 0; c < v->ncols; c++) {
        size_t row_bytes = tfos__col_row_elems(&v->cols[c]) * tfos__dtype_size(v->cols[c].dtype);
        memcpy(out + cols[c].data_off, batch + v->cols[c].data_off + (uint64_t)row0 * row_bytes,
               (size_t)r->rows * row_bytes);
    }
    uint16_t vl = (uint16_t)strlen(version);
    char head[2 + 32];
    memcpy(head, &vl, 2);
    memcpy(head + 2, version, vl);
    if (queue_frame(&s->servers[r->client], TFOS_SERVE_RESULT, r->http_id, head, 2u + vl, out, total) == 0)
        flush_out(s, r->client);
    free(out);
}

static flight *take_flight(tfos__serve *s, uint64_t id, int server_ix)
{
    for (flight **pp = &s->flights; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id && (*pp)->server == server_ix) {
            flight *fl = *pp;
            *pp = fl->next;
            return fl;
        }
    return NULL;
}

static void on_result(tfos__serve *s, int ix, uint32_t type, uint64_t id, const char *p, size_t len)
{
    flight *fl = take_flight(s, id, ix);
    if (!fl) {
        drop_server(s, ix, "it answered a batch it was not given");
        return;
    }
    s->servers[ix].inflight--;
    model *m = &s->models[fl->model];
    tfos__col cols[MAX_IO];
    tfos__batch_view v;
    char err[256] = "", version[32] = "";
    int bad = type == TFOS_SERVE_ERROR;
    if (!bad) { /* the version that ran it, then the outputs */
        uint16_t vl = 0;
        if (len >= 2)
            memcpy(&vl, p, 2);
        if (len < 2u + vl || vl >= sizeof version) {
            drop_server(s, ix, "it sent a result without its version");
            requeue_reqs(s, fl);
            return;
        }
        memcpy(version, p + 2, vl);
        p += 2 + vl;
        len -= 2u + vl;
    }
    if (!bad && (tfos__batch_ncols(p, len) > MAX_IO || tfos__batch_open(p, len, &v, cols, MAX_IO, err, sizeof err)))
        bad = 1;
    if (!bad && v.nrows != fl->rows)
        snprintf(err, sizeof err, "the model gave %u rows for a batch of %u", v.nrows, fl->rows), bad = 1;
    for (uint32_t c = 0; !bad && c < v.ncols; c++)
        if (v.cols[c].kind != TFOS_COL_FIXED)
            snprintf(err, sizeof err, "output %.*s is not a tensor of numbers", (int)v.cols[c].name_len,
                     v.cols[c].name), bad = 1;
    uint32_t row0 = 0;
    for (req *r = fl->reqs, *next; r; r = next) {
        next = r->next;
        if (bad) {
            if (type == TFOS_SERVE_ERROR)
                fail_req(s, r, 500, "model %s failed on a batch of %u rows: %.*s", m->name, fl->rows,
                         (int)(len > 900 ? 900 : len), p);
            else
                fail_req(s, r, 500, "model %s's server sent a bad result: %s", m->name, err);
            continue;
        }
        if (r->client < 0) {
            char *body = answer_json(m, version, r, &v, p, row0);
            tfos__http_reply(s->http, r->http_id, body ? 200 : 500, body ? "application/json" : NULL, body, 0);
        } else if (client_current(s, r)) {
            answer_client(s, r, version, &v, p, row0);
        }
        row0 += r->rows;
        count_answer(m, r, version);
    }
    free(fl);
    dispatch_all(s);
}

static int enqueue(tfos__serve *s, req *r, char *err, size_t errlen);

/* A local client's INFER frame: model name, version, a columnar batch of
 * the inputs. Checked as an HTTP request is; errors go back as
 * "STATUS {json}". */
static void client_infer(tfos__serve *s, int ix, uint64_t id, const char *p, size_t len)
{
    req *r = calloc(1, sizeof *r);
    char err[1024] = "", name[128] = "";
    int status = 400;
    uint16_t nl = 0, vl = 0;
    model *m = NULL;
    if (!r) {
        status = 503;
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    r->client = ix;
    r->client_gen = s->servers[ix].gen;
    r->http_id = id;
    if (len >= 2)
        memcpy(&nl, p, 2);
    if (len >= 4u + nl)
        memcpy(&vl, p + 2 + nl, 2);
    if (len < 4u + nl + vl || nl >= sizeof name || vl >= sizeof r->version) {
        snprintf(err, sizeof err, "malformed infer frame");
        goto fail;
    }
    memcpy(name, p + 2, nl);
    memcpy(r->version, p + 4 + nl, vl);
    if (!(m = find_model(s, name))) {
        status = 404;
        snprintf(err, sizeof err, "no model %.127s here", name);
        goto fail;
    }
    r->model = (int)(m - s->models);
    if (!m->known) {
        status = 503;
        snprintf(err, sizeof err, "model %.127s is loading: no model server is ready yet", name);
        goto fail;
    }
    const char *b = p + 4 + nl + vl;
    size_t blen = len - 4 - nl - vl;
    tfos__col cols[MAX_IO];
    tfos__batch_view v;
    if (tfos__batch_ncols(b, blen) > MAX_IO || tfos__batch_open(b, blen, &v, cols, MAX_IO, err, sizeof err))
        goto fail;
    if (!v.nrows) {
        snprintf(err, sizeof err, "the inputs have 0 rows");
        goto fail;
    }
    r->rows = v.nrows;
    for (int k = 0; k < m->nin; k++) {
        const tensor_spec *sp = &m->in[k];
        const tfos__col *c = NULL;
        for (uint32_t j = 0; j < v.ncols && !c; j++)
            if (v.cols[j].name_len == strlen(sp->name) && !memcmp(v.cols[j].name, sp->name, v.cols[j].name_len))
                c = &v.cols[j];
        if (!c) {
            snprintf(err, sizeof err, "input %.127s of model %.127s is missing", sp->name, m->name);
            goto fail;
        }
        if (c->kind != TFOS_COL_FIXED || c->dtype != sp->dtype) {
            snprintf(err, sizeof err, "input %.127s: %s, but model %.127s takes %s", sp->name,
                     c->kind != TFOS_COL_FIXED ? "not a tensor of numbers" : oip_of(c->dtype), m->name,
                     oip_of(sp->dtype));
            goto fail;
        }
        if (c->ndim != sp->ndim - 1) {
            snprintf(err, sizeof err, "input %.127s: rows of %d dimensions, the model's have %d", sp->name, c->ndim,
                     sp->ndim - 1);
            goto fail;
        }
        for (int d = 0; d < c->ndim; d++)
            if (sp->shape[d + 1] >= 0 && c->shape[d] != sp->shape[d + 1]) {
                snprintf(err, sizeof err, "input %.127s: shape[%d] is %u, the model takes %lld", sp->name, d + 1,
                         c->shape[d], (long long)sp->shape[d + 1]);
                goto fail;
            }
        memcpy(r->inner[k], c->shape, sizeof r->inner[k]);
        r->inner_ndim[k] = c->ndim;
        r->nbytes[k] = (size_t)(tfos__col_row_elems(c) * tfos__dtype_size(c->dtype) * v.nrows);
        if (!(r->data[k] = malloc(r->nbytes[k] + 1))) {
            status = 503;
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        memcpy(r->data[k], b + c->data_off, r->nbytes[k]);
    }
    if ((status = enqueue(s, r, err, sizeof err)))
        goto fail;
    m->local++;
    return;
fail:
    if (m)
        m->failed++;
    char *body = error_jsonf("%s", err);
    send_error(s, ix, id, status, body ? body : "{}");
    free(body);
    if (r)
        free_req(r);
}

static void on_frame(tfos__serve *s, int ix, uint32_t type, uint64_t id, const char *p, size_t len)
{
    server *sv = &s->servers[ix];
    if (!sv->ready && type == TFOS_SERVE_CLIENT) {
        /* a local client: the HTTP token, if there is one */
        if (len != strlen(s->token) || memcmp(p, s->token, len)) {
            send_error(s, ix, id, 401, "{\"error\": \"this server needs its token\"}");
            return;
        }
        sv->ready = sv->is_client = 1;
        if (queue_frame(sv, TFOS_SERVE_CLIENT, id, "ok", 2, NULL, 0) == 0)
            flush_out(s, ix);
        return;
    }
    if (sv->is_client) {
        if (type == TFOS_SERVE_INFER)
            client_infer(s, ix, id, p, len);
        else
            drop_server(s, ix, "it sent a frame of an unknown type");
        return;
    }
    if (!sv->ready) {
        if (type != TFOS_SERVE_HELLO || len < TFOS_HEX_SECRET_LEN + 1 ||
            memcmp(p, s->secret, TFOS_HEX_SECRET_LEN) || p[TFOS_HEX_SECRET_LEN] != '\n') {
            drop_server(s, ix, "it does not know the cluster secret");
            return;
        }
        if (!sv->mv && !(sv->mv = calloc((size_t)s->nmodels, sizeof *sv->mv))) {
            drop_server(s, ix, "out of memory");
            return;
        }
        if (take_metadata(s, ix, p + TFOS_HEX_SECRET_LEN + 1, len - TFOS_HEX_SECRET_LEN - 1))
            TFOS_WARN("model server %d sent metadata tfos could not read whole (or for models it was not given)",
                      ix);
        sv->ready = 1;
        sv->node = (int)id;
        TFOS_INFO("model server worker:%d is ready (%d ready)", sv->node, servers_ready(s));
        dispatch_all(s);
        return;
    }
    if (type == TFOS_SERVE_RESULT || type == TFOS_SERVE_ERROR) {
        on_result(s, ix, type, id, p, len);
    } else if (type == TFOS_SERVE_MODELS) {
        if (take_metadata(s, ix, p, len))
            TFOS_WARN("model server worker:%d sent metadata tfos could not read whole", sv->node);
        for (int mi = 0; mi < s->nmodels; mi++)
            if (sv->mv[mi].n)
                TFOS_INFO("model server worker:%d: model %s, version %s (of %d held)", sv->node, s->models[mi].name,
                          sv->mv[mi].v[0], sv->mv[mi].n);
        dispatch_all(s);
    } else
        drop_server(s, ix, "it sent a frame of an unknown type");
}

static void on_server(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    tfos__serve *s = user;
    int ix = -1;
    for (int i = 0; i < MAX_SERVERS && ix < 0; i++)
        if (s->servers[i].fd == fd)
            ix = i;
    if (ix < 0)
        return;
    server *sv = &s->servers[ix];
    if (events & TFOS_EV_WRITE) {
        flush_out(s, ix);
        if (sv->fd != fd)
            return;
    }
    if (!(events & TFOS_EV_READ))
        return;
    for (;;) {
        if (sv->in_cap - sv->in_len < 65536) {
            size_t cap = sv->in_cap ? sv->in_cap * 2 : 1 << 20;
            char *b = realloc(sv->in, cap);
            if (!b) {
                drop_server(s, ix, "out of memory");
                return;
            }
            sv->in = b;
            sv->in_cap = cap;
        }
        ssize_t r = recv(fd, sv->in + sv->in_len, sv->in_cap - sv->in_len, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (r <= 0) {
            drop_server(s, ix, r == 0 ? "its connection closed" : strerror(errno));
            return;
        }
        sv->in_len += (size_t)r;
        size_t off = 0;
        while (sv->in_len - off >= FRAME_HEAD) {
            uint32_t len, type;
            uint64_t id;
            memcpy(&len, sv->in + off, 4);
            memcpy(&type, sv->in + off + 4, 4);
            memcpy(&id, sv->in + off + 8, 8);
            if (len > FRAME_MAX) {
                drop_server(s, ix, "it sent a frame over the size limit");
                return;
            }
            if (sv->in_len - off - FRAME_HEAD < len)
                break;
            on_frame(s, ix, type, id, sv->in + off + FRAME_HEAD, len);
            if (sv->fd != fd)
                return; /* dropped while handling it */
            off += FRAME_HEAD + len;
        }
        memmove(sv->in, sv->in + off, sv->in_len - off);
        sv->in_len -= off;
    }
}

static void on_accept(tfos__loop *l, int lfd, int events, void *user)
{
    (void)events;
    tfos__serve *s = user;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        int ix = -1;
        for (int i = 0; i < MAX_SERVERS && ix < 0; i++)
            if (s->servers[i].fd < 0)
                ix = i;
        if (ix < 0 || tfos__loop_watch(l, fd, TFOS_EV_READ, on_server, s)) {
            close(fd);
            continue;
        }
        if (lfd == s->tfd) { /* a model server on another host: frames go out as they are made */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        s->servers[ix].fd = fd;
    }
}

/* ---- batching ------------------------------------------------------------------ */

/* Do two requests' inputs have the same per-row shapes (can they share a
 * batch)? */
static int same_inner(const model *m, const req *a, const req *b)
{
    if (strcmp(a->version, b->version))
        return 0;
    for (int i = 0; i < m->nin; i++)
        if (a->inner_ndim[i] != b->inner_ndim[i] ||
            memcmp(a->inner[i], b->inner[i], sizeof(uint32_t) * (size_t)a->inner_ndim[i]))
            return 0;
    return 1;
}

/* The server with room and the fewest batches that holds model mi's
 * `version` ("": any), or -1. */
static int pick_server(tfos__serve *s, int mi, const char *version)
{
    int best = -1;
    for (int i = 0; i < MAX_SERVERS; i++) {
        server *sv = &s->servers[i];
        if (sv->fd >= 0 && sv->ready && sv->inflight < INFLIGHT && sv->mv && sv->mv[mi].n &&
            (!version[0] || holds(sv, mi, version)) && (best < 0 || sv->inflight < s->servers[best].inflight))
            best = i;
    }
    return best;
}

/* Send one batch of model m's first requests to server ix. */
static int send_batch(tfos__serve *s, int mi, int ix)
{
    model *m = &s->models[mi];
    req *first = m->head, *last = first;
    uint32_t rows = first->rows;
    while (last->next && rows + last->next->rows <= (uint32_t)s->o.max_batch && same_inner(m, first, last->next)) {
        last = last->next;
        rows += last->rows;
    }
    tfos__col cols[MAX_IO];
    memset(cols, 0, sizeof cols);
    for (int i = 0; i < m->nin; i++) {
        cols[i].name = m->in[i].name;
        cols[i].name_len = (uint16_t)strlen(m->in[i].name);
        cols[i].kind = TFOS_COL_FIXED;
        cols[i].dtype = (uint8_t)m->in[i].dtype;
        cols[i].ndim = (uint8_t)first->inner_ndim[i];
        memcpy(cols[i].shape, first->inner[i], sizeof cols[i].shape);
    }
    uint64_t total = tfos__batch_layout(rows, (uint32_t)m->nin, cols);
    if (!total)
        return -1;
    char *batch = malloc(total);
    if (!batch)
        return -1;
    tfos__batch_write_header(batch, total, rows, (uint32_t)m->nin, 0, cols);
    for (int i = 0; i < m->nin; i++) {
        char *p = batch + cols[i].data_off;
        for (req *r = first;; r = r->next) {
            memcpy(p, r->data[i], r->nbytes[i]);
            p += r->nbytes[i];
            if (r == last)
                break;
        }
    }
    /* the prefix: model name and the version asked for ("": the server's latest) */
    char prefix[4 + sizeof m->name + sizeof first->version];
    uint16_t nl = (uint16_t)strlen(m->name), vl = (uint16_t)strlen(first->version);
    memcpy(prefix, &nl, 2);
    memcpy(prefix + 2, m->name, nl);
    memcpy(prefix + 2 + nl, &vl, 2);
    memcpy(prefix + 4 + nl, first->version, vl);
    flight *fl = calloc(1, sizeof *fl);
    server *sv = &s->servers[ix];
    if (!fl || queue_frame(sv, TFOS_SERVE_BATCH, s->next_batch, prefix, 4u + nl + vl, batch, total)) {
        free(fl);
        free(batch);
        return -1;
    }
    free(batch);
    fl->id = s->next_batch++;
    fl->server = ix;
    fl->model = mi;
    fl->reqs = first;
    fl->rows = rows;
    m->head = last->next;
    if (!m->head)
        m->tail = NULL;
    last->next = NULL;
    m->queued_rows -= rows;
    m->batches++;
    fl->next = s->flights;
    s->flights = fl;
    sv->inflight++;
    flush_out(s, ix);
    return 0;
}

/* Answer what has waited past its deadline; send what is due. */
static void dispatch_all(tfos__serve *s)
{
    int64_t now = tfos__now_ms();
    for (int mi = 0; mi < s->nmodels; mi++) {
        model *m = &s->models[mi];
        while (m->head && m->head->deadline <= now) {
            req *r = m->head;
            m->head = r->next;
            if (!m->head)
                m->tail = NULL;
            m->queued_rows -= r->rows;
            fail_req(s, r, 504, "model %s: no model server answered within %g s (%d ready)", m->name,
                     s->o.timeout_s, servers_ready(s));
        }
        while (m->head) {
            int due = m->queued_rows >= s->o.max_batch || s->o.max_delay_ms < 0 ||
                      now - m->head->t0 >= s->o.max_delay_ms;
            int ix = due ? pick_server(s, mi, m->head->version) : -1;
            if (ix < 0 || send_batch(s, mi, ix))
                break;
        }
    }
    schedule(s);
}

static void on_timer(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    dispatch_all(user);
}

/* Wake for the next delay or deadline. */
static void schedule(tfos__serve *s)
{
    int64_t at = INT64_MAX;
    for (int mi = 0; mi < s->nmodels; mi++) {
        const model *m = &s->models[mi];
        if (!m->head)
            continue;
        int64_t due = m->head->t0 + (s->o.max_delay_ms > 0 ? s->o.max_delay_ms : 0);
        if (due < at)
            at = due;
        for (const req *r = m->head; r; r = r->next)
            if (r->deadline < at)
                at = r->deadline;
    }
    if (at == INT64_MAX)
        tfos__timer_disarm(s->loop, &s->timer);
    else
        tfos__timer_arm(s->loop, &s->timer, at, on_timer, s);
}

/* ---- parsing an infer request ---------------------------------------------------- */

/* Parse and check an infer request for model m into r. 0, or the status
 * with err. */
static int parse_infer(model *m, const char *body, size_t len, req *r, char *err, size_t errlen)
{
    tfos__oip_request *rq = malloc(sizeof *rq);
    char why[300];
    int status = 400;
    if (!rq) {
        snprintf(err, errlen, "out of memory");
        return 503;
    }
    if (tfos__oip_parse(body, len, rq, why, sizeof why)) {
        snprintf(err, errlen, "the request body is not JSON: %s", why);
        goto out;
    }
    snprintf(r->id, sizeof r->id, "%s", rq->id);
    if (!rq->inputs_is_list || !rq->ninputs) {
        snprintf(err, errlen, "the request needs \"inputs\": a list of tensors ({\"name\", \"shape\", "
                              "\"datatype\", \"data\"})");
        goto out;
    }
    if (rq->ninputs < 0) {
        snprintf(err, errlen, "the request has more than %d inputs", TFOS_OIP_MAX_TENSORS);
        goto out;
    }
    int seen[MAX_IO] = {0};
    long long rows = -1;
    for (int i = 0; i < rq->ninputs; i++) {
        const tfos__oip_tensor *t = &rq->inputs[i];
        const char *name = t->name;
        if (!name[0]) {
            snprintf(err, errlen, "inputs[%d] has no \"name\"", i);
            goto out;
        }
        int k = -1;
        for (int j = 0; j < m->nin && k < 0; j++)
            if (!strcmp(m->in[j].name, name))
                k = j;
        if (k < 0) {
            char names[600] = "";
            for (int j = 0; j < m->nin; j++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%.127s", j ? ", " : "",
                         m->in[j].name);
            snprintf(err, errlen, "model %s has no input %s (its inputs: %s)", m->name, name, names);
            goto out;
        }
        if (seen[k]++) {
            snprintf(err, errlen, "input %s is given twice", name);
            goto out;
        }
        const tensor_spec *sp = &m->in[k];
        if (!t->datatype[0] || dtype_of(t->datatype) != sp->dtype) {
            snprintf(err, errlen, "input %s: datatype %s, but model %s takes %s", name,
                     t->datatype[0] ? t->datatype : "(none)", m->name, oip_of(sp->dtype));
            goto out;
        }
        if (!t->has_shape || t->ndim != sp->ndim) {
            snprintf(err, errlen, "input %s: shape must have %d dimensions (the model's is [%lld", name, sp->ndim,
                     (long long)sp->shape[0]);
            for (int d = 1; d < sp->ndim; d++)
                snprintf(err + strlen(err), errlen - strlen(err), ", %lld", (long long)sp->shape[d]);
            snprintf(err + strlen(err), errlen - strlen(err), "])");
            goto out;
        }
        if (t->bad_shape) {
            snprintf(err, errlen, "input %s: shape holds something other than whole numbers >= 0", name);
            goto out;
        }
        size_t n = 1;
        for (int d = 0; d < sp->ndim; d++) {
            long long v = t->shape[d];
            if (v > UINT32_MAX || (sp->shape[d] >= 0 && d > 0 && v != sp->shape[d])) {
                snprintf(err, errlen, "input %s: shape[%d] is %lld, the model takes %lld", name, d, v,
                         (long long)sp->shape[d]);
                goto out;
            }
            if (d > 0)
                r->inner[k][d - 1] = (uint32_t)v;
            n *= (size_t)v;
            if (n > len) { /* every element takes a byte of the body at least */
                snprintf(err, errlen, "input %s: shape holds more elements than the request has data for", name);
                goto out;
            }
        }
        long long b = t->shape[0];
        if (rows >= 0 && b != rows) {
            snprintf(err, errlen, "input %s has %lld rows (shape[0]), another input %lld", name, b, rows);
            goto out;
        }
        rows = b;
        r->inner_ndim[k] = sp->ndim - 1;
        if (!t->has_data || t->data_len == 0 || t->data[0] != '[') {
            snprintf(err, errlen, "input %s: \"data\" must be a list (flat, or nested as its shape)", name);
            goto out;
        }
        size_t es = tfos__dtype_size(sp->dtype);
        r->nbytes[k] = n * es;
        r->data[k] = malloc(n * es + 1);
        if (!r->data[k]) {
            snprintf(err, errlen, "out of memory");
            status = 503;
            goto out;
        }
        size_t at = 0;
        int rc = tfos__oip_numbers(t->data, t->data_len, sp->dtype, r->data[k], n, &at);
        if (rc == -2) {
            snprintf(err, errlen, "input %s: data[%zu] is not a %s value", name, at, oip_of(sp->dtype));
            goto out;
        }
        if (rc == -3) {
            snprintf(err, errlen, "input %s: data has more elements than its shape holds (%zu)", name, n);
            goto out;
        }
        if (rc) {
            snprintf(err, errlen, "input %s: data has %zu elements, its shape holds %zu", name, at, n);
            goto out;
        }
    }
    for (int j = 0; j < m->nin; j++)
        if (!seen[j]) {
            snprintf(err, errlen, "input %s of model %s is missing", m->in[j].name, m->name);
            goto out;
        }
    if (rows == 0) {
        snprintf(err, errlen, "the inputs have 0 rows");
        goto out;
    }
    r->rows = (uint32_t)rows;
    if (rq->has_outputs && (!rq->outputs_is_list || rq->noutputs < 0)) {
        snprintf(err, errlen, "\"outputs\" must be a list of {\"name\": ...} (up to %d)", TFOS_OIP_MAX_TENSORS);
        goto out;
    }
    for (int i = 0; i < rq->noutputs; i++) {
        const char *name = rq->outputs[i];
        int k = -1;
        for (int j = 0; name[0] && j < m->nout && k < 0; j++)
            if (!strcmp(m->out[j].name, name))
                k = j;
        if (k < 0) {
            snprintf(err, errlen, "model %s has no output %s", m->name, name[0] ? name : "(outputs[] without a name)");
            goto out;
        }
        r->want |= 1ull << k;
    }
    status = 0;
out:
    free(rq);
    return status;
}

/* ---- HTTP routes ------------------------------------------------------------------ */

static char *metrics_text(tfos__serve *s, char *status_metrics)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return status_metrics;
    if (status_metrics)
        fputs(status_metrics, f);
    free(status_metrics);
    fprintf(f, "# HELP tfos_serve_servers_ready Model servers connected and ready.\n"
               "# TYPE tfos_serve_servers_ready gauge\ntfos_serve_servers_ready %d\n", servers_ready(s));
    static const char *const heads[] = {
        "# HELP tfos_serve_requests_total Infer requests answered, by outcome (ok; failed: 4xx/5xx after "
        "queueing; refused: 429).\n# TYPE tfos_serve_requests_total counter\n",
        "# HELP tfos_serve_rows_total Rows inferred.\n# TYPE tfos_serve_rows_total counter\n",
        "# HELP tfos_serve_batches_total Batches sent to model servers.\n# TYPE tfos_serve_batches_total counter\n",
        "# HELP tfos_serve_queue_rows Rows waiting for a batch.\n# TYPE tfos_serve_queue_rows gauge\n",
        "# HELP tfos_serve_request_seconds Time from a request's arrival to its answer.\n"
        "# TYPE tfos_serve_request_seconds histogram\n",
        "# HELP tfos_serve_version_requests_total Infer requests answered, by the model version that ran them.\n"
        "# TYPE tfos_serve_version_requests_total counter\n",
        "# HELP tfos_serve_local_requests_total Infer requests taken from local clients (predict_udf on this "
        "host), not HTTP.\n# TYPE tfos_serve_local_requests_total counter\n"};
    for (int h = 0; h < 7; h++) {
        fputs(heads[h], f);
        for (int mi = 0; mi < s->nmodels; mi++) {
            const model *m = &s->models[mi];
            char lab[200];
            snprintf(lab, sizeof lab, "model=\"%s\"", m->name);
            if (h == 0)
                fprintf(f, "tfos_serve_requests_total{%s,outcome=\"ok\"} %llu\n"
                           "tfos_serve_requests_total{%s,outcome=\"failed\"} %llu\n"
                           "tfos_serve_requests_total{%s,outcome=\"refused\"} %llu\n",
                        lab, m->ok, lab, m->failed, lab, m->refused);
            else if (h == 1)
                fprintf(f, "tfos_serve_rows_total{%s} %llu\n", lab, m->rows);
            else if (h == 6)
                fprintf(f, "tfos_serve_local_requests_total{%s} %llu\n", lab, m->local);
            else if (h == 5)
                for (int k = 0; k < MAX_VSTATS && m->vstat[k].v[0]; k++)
                    fprintf(f, "tfos_serve_version_requests_total{%s,version=\"%s\"} %llu\n", lab, m->vstat[k].v,
                            m->vstat[k].ok);
            else if (h == 2)
                fprintf(f, "tfos_serve_batches_total{%s} %llu\n", lab, m->batches);
            else if (h == 3)
                fprintf(f, "tfos_serve_queue_rows{%s} %lld\n", lab, m->queued_rows);
            else if (h == 4) {
                unsigned long long cum = 0;
                for (int b = 0; b <= LAT_BUCKETS; b++) {
                    cum += m->lat[b];
                    if (b < LAT_BUCKETS)
                        fprintf(f, "tfos_serve_request_seconds_bucket{%s,le=\"%g\"} %llu\n", lab,
                                lat_bounds_ms[b] / 1000.0, cum);
                    else
                        fprintf(f, "tfos_serve_request_seconds_bucket{%s,le=\"+Inf\"} %llu\n", lab, cum);
                }
                fprintf(f, "tfos_serve_request_seconds_sum{%s} %.6f\ntfos_serve_request_seconds_count{%s} %llu\n",
                        lab, m->lat_sum_ms / 1000.0, lab, cum);
            }
        }
    }
    fclose(f);
    return buf;
}

static int infer(tfos__serve *s, model *m, const char *version, const tfos__http_req *rq, tfos__http_resp *rs)
{
    if (!m->known)
        return fail_now(rs, 503, "model %s is loading: no model server is ready yet", m->name);
    req *r = calloc(1, sizeof *r);
    if (!r)
        return fail_now(rs, 503, "out of memory");
    char err[1024] = "";
    int status = parse_infer(m, rq->body, rq->body_len, r, err, sizeof err);
    if (status) {
        free_req(r);
        m->failed++;
        return fail_now(rs, status, "%s", err);
    }
    r->http_id = rq->id;
    r->client = -1;
    snprintf(r->version, sizeof r->version, "%s", version);
    r->model = (int)(m - s->models);
    if ((status = enqueue(s, r, err, sizeof err))) {
        free_req(r);
        return fail_now(rs, status, "%s", err);
    }
    return 1;
}

/* Queue a checked request (0), or refuse it: 429 with err. */
static int enqueue(tfos__serve *s, req *r, char *err, size_t errlen)
{
    model *m = &s->models[r->model];
    if (m->queued_rows + r->rows > s->o.max_queue_rows && m->head) {
        m->refused++;
        snprintf(err, errlen, "model %s is busy: %lld rows wait already (--max-queue-rows %lld); try again",
                 m->name, m->queued_rows, s->o.max_queue_rows);
        return 429;
    }
    r->t0 = tfos__now_ms();
    r->deadline = r->t0 + (int64_t)(s->o.timeout_s * 1000);
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->queued_rows += r->rows;
    m->rows += r->rows;
    dispatch_all(s);
    return 0;
}

/* /v2/models/NAME[/versions/V][/ready|/infer] */
static int model_route(tfos__serve *s, const tfos__http_req *rq, tfos__http_resp *rs)
{
    char name[128] = "", version[32] = "", rest[32] = "";
    const char *p = rq->path + strlen("/v2/models/");
    size_t n = strcspn(p, "/");
    if (!n || n >= sizeof name)
        return fail_now(rs, 404, "no such path: %s", rq->path);
    memcpy(name, p, n);
    p += n;
    if (!strncmp(p, "/versions/", 10)) {
        p += 10;
        n = strcspn(p, "/");
        if (!n || n >= sizeof version)
            return fail_now(rs, 404, "no such path: %s", rq->path);
        memcpy(version, p, n);
        p += n;
    }
    if (*p == '/')
        snprintf(rest, sizeof rest, "%s", p + 1);
    else if (*p)
        return fail_now(rs, 404, "no such path: %s", rq->path);
    model *m = find_model(s, name);
    if (!m)
        return fail_now(rs, 404, "no model %s here", name);
    if (version[0] && m->known) {
        char vs[MAX_SERVERS * MAX_VERSIONS][32], list[300] = "";
        int nv = model_versions(s, (int)(m - s->models), vs, MAX_SERVERS * MAX_VERSIONS), found = 0;
        for (int k = 0; k < nv; k++) {
            found |= !strcmp(vs[k], version);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.31s", k ? ", " : "", vs[k]);
        }
        if (!found)
            return fail_now(rs, 404, "model %s has no version %s loaded (versions: %s)", name, version,
                            nv ? list : "none ready");
    }
    if (!strcmp(rest, "infer")) {
        if (strcmp(rq->method, "POST"))
            return fail_now(rs, 405, "infer takes POST");
        return infer(s, m, version, rq, rs);
    }
    if (strcmp(rq->method, "GET"))
        return fail_now(rs, 405, "%s takes GET", rq->path);
    if (!strcmp(rest, "ready")) {
        rs->status = m->known && servers_ready(s) ? 200 : 503;
        rs->body = strdup(rs->status == 200 ? "{\"ready\": true}" : "{\"ready\": false}");
        rs->ctype = "application/json";
        return 0;
    }
    if (rest[0])
        return fail_now(rs, 404, "no such path: %s", rq->path);
    if (!m->known)
        return fail_now(rs, 503, "model %s is loading: no model server is ready yet", name);
    rs->body = model_json(s, m);
    rs->ctype = "application/json";
    return 0;
}

int tfos__serve_route(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    tfos__serve *s = user;
    const char *path = rq->path;
    if (!strcmp(path, "/v2/health/live") || !strcmp(path, "/v2/health/ready")) {
        int ok = !strcmp(path, "/v2/health/live") || servers_ready(s) > 0;
        rs->status = ok ? 200 : 503;
        rs->body = strdup(ok ? "{\"live\": true}" : "{\"ready\": false}");
        if (ok && strstr(path, "ready")) {
            free(rs->body);
            rs->body = strdup("{\"ready\": true}");
        }
        rs->ctype = "application/json";
        return 0;
    }
    if (!strcmp(path, "/v2") || !strcmp(path, "/v2/")) {
        if (asprintf(&rs->body, "{\"name\": \"tfos\", \"version\": \"%s\", \"extensions\": []}", TFOS_VERSION) < 0)
            rs->body = NULL;
        rs->ctype = "application/json";
        return 0;
    }
    if (!strcmp(path, "/v2/local")) {
        /* where a client on this host (predict_udf) skips HTTP: the
         * abstract socket, reachable only from this host's network
         * namespace; it asks for the token too */
        if (asprintf(&rs->body, "{\"address\": \"%s\"}", s->address) < 0)
            rs->body = NULL;
        rs->ctype = "application/json";
        return 0;
    }
    if (!strncmp(path, "/v2/models/", 11))
        return model_route(s, rq, rs);
    if (!strncmp(path, "/v2/", 4))
        return fail_now(rs, 404, "no such path: %s", path);
    if (strcmp(rq->method, "GET")) {
        rs->status = 405;
        return 0;
    }
    rs->body = tfos__status_handle(path, &rs->ctype, &rs->status, s->status);
    if (!strcmp(path, "/metrics") && rs->status == 200)
        rs->body = metrics_text(s, rs->body);
    return 0;
}

/* ---- life ------------------------------------------------------------------------ */

int tfos__serve_open(tfos__serve **out, tfos__loop *loop, const tfos_serve_opts *o, const char *secret,
                     const char *tcp_host, char *err, size_t errlen)
{
    tfos__serve *s = calloc(1, sizeof *s);
    if (!s)
        return tfos__errf(err, errlen, TFOS_ENOMEM, "out of memory");
    s->loop = loop;
    s->o = *o;
    s->o.models = NULL; /* not kept: the names are copied below */
    if (s->o.max_batch <= 0)
        s->o.max_batch = 64;
    if (s->o.max_delay_ms == 0)
        s->o.max_delay_ms = 5;
    if (s->o.max_queue_rows <= 0)
        s->o.max_queue_rows = 64LL * s->o.max_batch;
    if (s->o.timeout_s <= 0)
        s->o.timeout_s = 30;
    snprintf(s->secret, sizeof s->secret, "%s", secret);
    for (int i = 0; i < MAX_SERVERS; i++)
        s->servers[i].fd = -1;
    s->models = calloc((size_t)(o->nmodels > 0 ? o->nmodels : 1), sizeof *s->models);
    if (!s->models) {
        free(s);
        return tfos__errf(err, errlen, TFOS_ENOMEM, "out of memory");
    }
    for (int i = 0; i < o->nmodels; i++)
        snprintf(s->models[i].name, sizeof s->models[i].name, "%s", o->models[i]);
    s->nmodels = o->nmodels;
    /* an abstract socket: no path to clean up or outgrow; only servers
     * that know the secret are taken (HELLO) */
    char hex[17];
    int rc = tfos__random_hex(hex, 8);
    if (rc) {
        free(s->models);
        free(s);
        return tfos__errf(err, errlen, rc, "no random bytes for the socket's name");
    }
    snprintf(s->address, sizeof s->address, "@tfos-serve-%s", hex);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t nl = strlen(s->address);
    memcpy(a.sun_path + 1, s->address + 1, nl - 1); /* sun_path[0] = 0: abstract */
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + nl);
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, alen) || listen(s->lfd, 64) ||
        tfos__loop_watch(loop, s->lfd, TFOS_EV_READ, on_accept, s)) {
        int e = errno;
        if (s->lfd >= 0)
            close(s->lfd);
        free(s->models);
        free(s);
        return tfos__errf(err, errlen, TFOS_ESYS, "cannot listen for the model servers: %s", strerror(e));
    }
    s->tfd = -1;
    snprintf(s->link, sizeof s->link, "%s", s->address);
    if (tcp_host) {
        int port = 0;
        if ((rc = tfos__tcp_listen(tcp_host, 0, 64, &s->tfd, &port)) ||
            tfos__loop_watch(loop, s->tfd, TFOS_EV_READ, on_accept, s)) {
            int e = errno;
            if (s->tfd >= 0)
                close(s->tfd);
            tfos__loop_unwatch(loop, s->lfd);
            close(s->lfd);
            free(s->models);
            free(s);
            return tfos__errf(err, errlen, rc ? rc : TFOS_ESYS, "cannot listen for the model servers on %s: %s",
                              tcp_host, strerror(e));
        }
        snprintf(s->link, sizeof s->link, strchr(tcp_host, ':') ? "[%s]:%d" : "%s:%d", tcp_host, port);
    }
    *out = s;
    return 0;
}

const char *tfos__serve_address(const tfos__serve *s)
{
    return s->link;
}

void tfos__serve_attach(tfos__serve *s, tfos__http *h, tfos__status_src *status, const char *token)
{
    s->http = h;
    s->status = status;
    snprintf(s->token, sizeof s->token, "%s", token ? token : "");
}

void tfos__serve_close(tfos__serve *s)
{
    if (!s)
        return;
    for (int i = 0; i < MAX_SERVERS; i++)
        if (s->servers[i].fd >= 0) {
            tfos__loop_unwatch(s->loop, s->servers[i].fd);
            close(s->servers[i].fd);
            free(s->servers[i].in);
            free(s->servers[i].out);
            s->servers[i].fd = -1;
        }
    for (flight *fl = s->flights, *nf; fl; fl = nf) {
        nf = fl->next;
        for (req *r = fl->reqs, *nr; r; r = nr) {
            nr = r->next;
            fail_req(s, r, 503, "the model server is shutting down");
        }
        free(fl);
    }
    for (int mi = 0; mi < s->nmodels; mi++)
        for (req *r = s->models[mi].head, *nr; r; r = nr) {
            nr = r->next;
            fail_req(s, r, 503, "the model server is shutting down");
        }
    tfos__timer_disarm(s->loop, &s->timer);
    tfos__loop_unwatch(s->loop, s->lfd);
    close(s->lfd);
    if (s->tfd >= 0) {
        tfos__loop_unwatch(s->loop, s->tfd);
        close(s->tfd);
    }
    free(s->models);
    free(s);
}
