/* intake.c: requests into the front end: the Open Inference Protocol's
 * JSON (serve/oip.c parses it) and local clients' INFER frames, both
 * checked against the model's signature before they are queued. */
#include "serve/serve_int.h"

#include "serve/oip.h"

#include <stdlib.h>
#include <string.h>

/* What a value of dtype is, for an error that names one that is not. */
static const char *value_hint(int dtype)
{
    switch (dtype) {
    case TFOS_DT_BOOL: return "true or false";
    case TFOS_DT_I8: return "a whole number from -128 to 127";
    case TFOS_DT_I16: return "a whole number from -32768 to 32767";
    case TFOS_DT_I32: return "a whole number from -2147483648 to 2147483647";
    case TFOS_DT_I64: return "a whole number from -2^63 to 2^63 - 1";
    case TFOS_DT_U8: return "a whole number from 0 to 255";
    case TFOS_DT_U16: return "a whole number from 0 to 65535";
    case TFOS_DT_U32: return "a whole number from 0 to 4294967295";
    case TFOS_DT_U64: return "a whole number from 0 to 2^64 - 1";
    case TFOS_DT_F32: return "a number within +-3.4028235e38";
    case TFOS_DT_F64: return "a number within +-1.7976931348623157e308";
    }
    return "a number";
}

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
    int prc = tfos__oip_parse(body, len, rq, why, sizeof why);
    if (prc) {
        snprintf(err, errlen, "%s: %s", prc == -2 ? "the request is refused" : "the request body is not JSON", why);
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
        if (!t->datatype[0] || tfos__dtype_by_oip(t->datatype) != sp->dtype) {
            snprintf(err, errlen, "input %s: datatype %s, but model %s takes %s", name,
                     t->datatype[0] ? t->datatype : "(none)", m->name, tfos__dtype_oip(sp->dtype));
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
            snprintf(err, errlen, "input %s: data[%zu] is not a %s value (%s)", name, at, tfos__dtype_oip(sp->dtype),
                     value_hint(sp->dtype));
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

int tfos__serve_infer(tfos__serve *s, model *m, const char *version, const tfos__http_req *rq, tfos__http_resp *rs)
{
    if (!m->known)
        return tfos__serve_fail_now(rs, 503, "model %s is loading: no model server is ready yet", m->name);
    req *r = calloc(1, sizeof *r);
    if (!r)
        return tfos__serve_fail_now(rs, 503, "out of memory");
    char err[1024] = "";
    int status = parse_infer(m, rq->body, rq->body_len, r, err, sizeof err);
    if (status) {
        tfos__serve_free_req(r);
        m->failed++;
        return tfos__serve_fail_now(rs, status, "%s", err);
    }
    r->http_id = rq->id;
    r->client = -1;
    snprintf(r->version, sizeof r->version, "%s", version);
    r->model = (int)(m - s->models);
    if ((status = tfos__serve_enqueue(s, r, err, sizeof err))) {
        tfos__serve_free_req(r);
        return tfos__serve_fail_now(rs, status, "%s", err);
    }
    return 1;
}

/* Bytes of local client ix's requests waiting: in its model's queue or in
 * a batch on a server (not yet answered). */
static size_t client_held(const tfos__serve *s, int ix)
{
    uint32_t gen = s->servers[ix].gen;
    size_t n = 0;
    for (int mi = 0; mi < s->nmodels; mi++)
        for (const req *r = s->models[mi].head; r; r = r->next)
            if (r->client == ix && r->client_gen == gen)
                for (int k = 0; k < MAX_IO; k++)
                    n += r->nbytes[k];
    for (const flight *fl = s->flights; fl; fl = fl->next)
        for (const req *r = fl->reqs; r; r = r->next)
            if (!r->done && r->client == ix && r->client_gen == gen)
                for (int k = 0; k < MAX_IO; k++)
                    n += r->nbytes[k];
    return n;
}

/* A local client's SERVE_INFER frame: meta model and version, a columnar
 * batch of the inputs. Checked as an HTTP request is; errors go back as
 * SERVE_FAIL (status, JSON). */
void tfos__serve_client_infer(tfos__serve *s, int ix, const tfos__frame *f)
{
    req *r = calloc(1, sizeof *r);
    char err[1024] = "", name[128] = "";
    int status = 400;
    uint64_t id = f->id;
    model *m = NULL;
    if (!r) {
        status = 503;
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    r->client = ix;
    r->client_gen = s->servers[ix].gen;
    r->http_id = id;
    if (tfos__kv_str(f->meta, f->meta_len, "model", name, sizeof name) ||
        (tfos__kv_str(f->meta, f->meta_len, "version", r->version, sizeof r->version) == TFOS_ETOOBIG)) {
        snprintf(err, sizeof err, "malformed infer frame: no model, or a version over %zu bytes",
                 sizeof r->version - 1);
        goto fail;
    }
    if (!(m = tfos__serve_route_model(s, name))) {
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
    /* as HTTP: a version no server holds is 404 now, never a wait in the
     * queue (in front of the requests behind it) */
    if (r->version[0] && !tfos__serve_version_ready(s, r->model, r->version, err, sizeof err)) {
        status = 404;
        goto fail;
    }
    /* one client's requests waiting are bounded (as its answers unread
     * are, by its link): one that sends and never reads costs at most both
     * bounds, then is dropped when its answers reach theirs */
    size_t held = client_held(s, ix);
    if (held && held + f->body_len > CLIENT_MAX_HELD) {
        status = 429;
        snprintf(err, sizeof err, "this local client has %zu bytes of requests waiting (at most %u): read its "
                 "answers before sending more", held, CLIENT_MAX_HELD);
        goto fail;
    }
    const char *b = f->body;
    size_t blen = f->body_len;
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
                     c->kind != TFOS_COL_FIXED ? "not a tensor of numbers" : tfos__dtype_oip(c->dtype), m->name,
                     tfos__dtype_oip(sp->dtype));
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
    if ((status = tfos__serve_enqueue(s, r, err, sizeof err)))
        goto fail;
    m->local++;
    return;
fail:
    if (m)
        m->failed++;
    char *body = tfos__serve_error_jsonf("%s", err);
    tfos__serve_send_error(s, ix, id, status, body ? body : "{}");
    free(body);
    if (r)
        tfos__serve_free_req(r);
}
