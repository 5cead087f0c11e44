/* answers.c: tfos serve's answers: OIP JSON for HTTP clients, a
 * columnar batch for local ones, and errors (see serve_int.h). */
#include "serve/serve_int.h"

#include "core/json.h"
#include "serve/oip.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

char *tfos__serve_error_json(const char *fmt, va_list ap)
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

char *tfos__serve_error_jsonf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = tfos__serve_error_json(fmt, ap);
    va_end(ap);
    return body;
}

int tfos__serve_fail_now(tfos__http_resp *rs, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rs->body = tfos__serve_error_json(fmt, ap);
    va_end(ap);
    rs->status = status;
    rs->ctype = "application/json";
    return 0;
}

void tfos__serve_free_req(req *r)
{
    for (int i = 0; i < MAX_IO; i++)
        free(r->data[i]);
    free(r);
}

/* Answer r with an error, and count it. */
static void answer_error(tfos__serve *s, req *r, int status, const char *fmt, va_list ap)
{
    char *body = tfos__serve_error_json(fmt, ap);
    model *m = &s->models[r->model];
    m->failed++;
    tfos__serve_observe(m, r->t0);
    if (r->client < 0) {
        tfos__http_reply(s->http, r->http_id, status, "application/json", body, 0);
    } else {
        if (tfos__serve_client_current(s, r))
            tfos__serve_send_error(s, r->client, r->http_id, status, body ? body : "{}");
        free(body);
    }
}

void tfos__serve_fail_req(tfos__serve *s, req *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    answer_error(s, r, status, fmt, ap);
    va_end(ap);
    tfos__serve_free_req(r);
}

void tfos__serve_fail_in_flight(tfos__serve *s, req *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    answer_error(s, r, status, fmt, ap);
    va_end(ap);
    r->done = 1;
    for (int i = 0; i < MAX_IO; i++) { /* its inputs went out with the batch */
        free(r->data[i]);
        r->data[i] = NULL;
    }
}

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

/* n bytes at s (a column's name: not NUL-terminated) as a JSON string: a
 * name is the model's to choose, '"' and all. */
static void json_strn(FILE *f, const char *s, size_t n)
{
    char small[256], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) {
        fputs("\"\"", f);
        return;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    tfos__json_str(f, buf);
    if (buf != small)
        free(buf);
}

/* One request's answer: rows [row0, row0 + r->rows) of every output. */
char *tfos__serve_answer_json(const model *m, const char *version, const req *r, const tfos__batch_view *v,
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
        fputs(first ? "{\"name\": " : ", {\"name\": ", f);
        json_strn(f, col->name, col->name_len);
        fprintf(f, ", \"datatype\": \"%s\", \"shape\": [%u", tfos__dtype_oip(col->dtype), r->rows);
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
void tfos__serve_count_answer(model *m, req *r, const char *version)
{
    m->ok++;
    for (int k = 0; k < MAX_VSTATS; k++)
        if (!strcmp(m->vstat[k].v, version) || !m->vstat[k].v[0]) {
            snprintf(m->vstat[k].v, sizeof m->vstat[k].v, "%s", version);
            m->vstat[k].ok++;
            break;
        }
    tfos__serve_observe(m, r->t0);
    tfos__serve_free_req(r);
}

/* A local client's answer: its rows of every output, as a columnar batch,
 * and the version that ran them. */
void tfos__serve_answer_client(tfos__serve *s, req *r, const char *version, const tfos__batch_view *v, const char *batch,
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
        tfos__serve_send_error(s, r->client, r->http_id, 503, "{\"error\": \"out of memory\"}");
        return;
    }
    tfos__batch_write_header(out, total, r->rows, v->ncols, 0, cols);
    for (uint32_t c = 0; c < v->ncols; c++) {
        size_t row_bytes = tfos__col_row_elems(&v->cols[c]) * tfos__dtype_size(v->cols[c].dtype);
        memcpy(out + cols[c].data_off, batch + v->cols[c].data_off + (uint64_t)row0 * row_bytes,
               (size_t)r->rows * row_bytes);
    }
    const char *kv[] = {"version", version, NULL};
    tfos__serve_send(s, r->client, TFOS_MSG_SERVE_RESULT, r->http_id, kv, out, total);
    free(out);
}
