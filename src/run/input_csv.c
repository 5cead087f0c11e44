/* input_csv.c: the CSV reader of `tfos run --input` (RFC 4180; semantics in
 * input.h), behind tfos__input_csv_ops. Records are read with stdio, typed
 * by the first data row, and appended to a batch builder (core/batchbuild.h). */
#include "core/log.h"
#include "run/input.h"
#include "run/input_ops.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLS TFOS__BUILD_MAX_COLS
#define MAX_LINE ((size_t)16 << 20)

/* One parsed CSV record: fields as spans of buf. */
typedef struct record {
    char *buf;
    size_t len, cap;
    size_t start[MAX_COLS + 1], flen[MAX_COLS + 1];
    int n;
    uint64_t line;
} record;

typedef struct csv_reader {
    tfos__input_text t;  /* first: the path, the stream, the builder */
    uint64_t line;       /* physical line number of the next character */
    int typed, csv_header;
    record cur, pending; /* pending: the row read ahead to detect a header */
    int have_pending;
} csv_reader;

static int parse_int(const char *s, size_t n, int64_t *v)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    size_t i = (buf[0] == '-' || buf[0] == '+') ? 1 : 0;
    if (!buf[i])
        return 0;
    for (size_t k = i; buf[k]; k++)
        if (buf[k] < '0' || buf[k] > '9')
            return 0;
    errno = 0;
    long long x = strtoll(buf, NULL, 10);
    if (errno)
        return 0;
    *v = x;
    return 1;
}

static int parse_float(const char *s, size_t n, double *v)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double x = strtod(buf, &end);
    if (end == buf || *end)
        return 0;
    *v = x;
    return 1;
}
/* Read one record (handles quotes and newlines inside quotes). 0, TFOS_EEND
 * at end of file, TFOS_EPROTO for a bad quote, TFOS_ETOOBIG. */
static int csv_read(csv_reader *in, record *r, char *err, size_t errlen)
{
    FILE *f = in->t.f;
    r->len = 0;
    r->n = 0;
    r->line = in->line;
    int ch = getc_unlocked(f);
    if (ch == EOF)
        return TFOS_EEND;
    for (;;) {
        /* one field */
        if (r->n >= MAX_COLS)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: more than %d fields", in->t.path,
                        (unsigned long long)r->line, MAX_COLS);
        r->start[r->n] = r->len;
        int quoted = ch == '"';
        if (quoted)
            ch = getc_unlocked(f);
        for (;;) {
            if (ch == EOF) {
                if (quoted)
                    return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: a quoted field is not closed",
                                in->t.path, (unsigned long long)r->line);
                break;
            }
            if (quoted && ch == '"') {
                int next = getc_unlocked(f);
                if (next == '"') {
                    ch = '"';
                } else {
                    quoted = 0;
                    ch = next;
                    if (ch != ',' && ch != '\n' && ch != '\r' && ch != EOF)
                        return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: text after a closing quote",
                                    in->t.path, (unsigned long long)in->line, r->n + 1);
                    continue;
                }
            } else if (!quoted && (ch == ',' || ch == '\n' || ch == '\r')) {
                break;
            }
            if (ch == '\n')
                in->line++;
            if (r->len + 1 >= MAX_LINE)
                return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s line %llu: a record over %zu bytes", in->t.path,
                            (unsigned long long)r->line, MAX_LINE);
            if (r->len + 1 > r->cap) {
                size_t cap = r->cap ? 2 * r->cap : 4096;
                char *nb = realloc(r->buf, cap);
                if (!nb)
                    return TFOS_ENOMEM;
                r->buf = nb;
                r->cap = cap;
            }
            r->buf[r->len++] = (char)ch;
            ch = getc_unlocked(f);
        }
        r->flen[r->n] = r->len - r->start[r->n];
        r->n++;
        if (ch == ',') {
            ch = getc_unlocked(f);
            continue;
        }
        if (ch == '\r') {
            ch = getc_unlocked(f);
            if (ch != '\n' && ch != EOF)
                ungetc(ch, f);
        }
        in->line++;
        return 0;
    }
}

static int numeric(const record *r, int i)
{
    int64_t iv;
    double dv;
    return parse_int(r->buf + r->start[i], r->flen[i], &iv) || parse_float(r->buf + r->start[i], r->flen[i], &dv);
}

static void swap_records(record *a, record *b)
{
    record t = *a;
    *a = *b;
    *b = t;
}

static int csv_type(csv_reader *in, const record *r)
{
    in->t.b.ncols = r->n;
    for (int i = 0; i < r->n; i++) {
        tfos__build_col *c = &in->t.b.cols[i];
        int64_t iv;
        double dv;
        const char *s = r->buf + r->start[i];
        if (parse_int(s, r->flen[i], &iv)) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = TFOS_DT_I64;
        } else if (parse_float(s, r->flen[i], &dv)) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = TFOS_DT_F64;
        } else {
            c->kind = TFOS_COL_STR;
        }
    }
    in->typed = 1;
    return 0;
}

static int csv_first(csv_reader *in, char *err, size_t errlen)
{
    int rc = csv_read(in, &in->cur, err, errlen);
    if (rc)
        return rc;
    int header = in->csv_header;
    if (header < 0) {
        header = 0;
        int text = 0;
        for (int i = 0; i < in->cur.n; i++)
            text |= !numeric(&in->cur, i);
        if (text) {
            rc = csv_read(in, &in->pending, err, errlen);
            if (rc && rc != TFOS_EEND)
                return rc;
            if (rc == 0) {
                in->have_pending = 1;
                int numeric_below = 0;
                for (int i = 0; i < in->cur.n && i < in->pending.n; i++)
                    if (!numeric(&in->cur, i) && numeric(&in->pending, i))
                        numeric_below = 1;
                header = numeric_below;
            }
        }
    }
    if (header) {
        for (int i = 0; i < in->cur.n; i++) {
            size_t l = in->cur.flen[i] < sizeof in->t.b.cols[i].name - 1 ? in->cur.flen[i] : sizeof in->t.b.cols[i].name - 1;
            memcpy(in->t.b.cols[i].name, in->cur.buf + in->cur.start[i], l);
            in->t.b.cols[i].name[l] = 0;
        }
        if (in->have_pending) {
            swap_records(&in->cur, &in->pending);
            in->have_pending = 0;
        } else {
            rc = csv_read(in, &in->cur, err, errlen);
            if (rc)
                return rc;
        }
    }
    csv_type(in, &in->cur);
    return 0;
}

static int csv_add(csv_reader *in, const record *r, char *err, size_t errlen)
{
    if (r->n != in->t.b.ncols)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: %d fields where the first row has %d", in->t.path,
                    (unsigned long long)r->line, r->n, in->t.b.ncols);
    for (int i = 0; i < r->n; i++) {
        tfos__build_col *c = &in->t.b.cols[i];
        const char *s = r->buf + r->start[i];
        size_t n = r->flen[i];
        int rc = 0;
        if (c->kind == TFOS_COL_STR) {
            rc = tfos__batch_build_push_var(c, in->t.b.nrows, s, n);
        } else if (c->dtype == TFOS_DT_I64) {
            int64_t v;
            if (!parse_int(s, n, &v))
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is not an integer (the "
                            "column's type comes from the first row)", in->t.path, (unsigned long long)r->line, i + 1,
                            (int)(n > 40 ? 40 : n), s);
            rc = tfos__batch_build_push_fixed(c, &v, 8);
        } else {
            double v;
            if (!parse_float(s, n, &v))
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is not a number (the "
                            "column's type comes from the first row)", in->t.path, (unsigned long long)r->line, i + 1,
                            (int)(n > 40 ? 40 : n), s);
            rc = tfos__batch_build_push_fixed(c, &v, 8);
        }
        if (rc)
            return rc;
    }
    in->t.b.nrows++;
    return 0;
}

/* Append up to max_rows rows to the builder. */
static int csv_fill(csv_reader *in, uint32_t max_rows, char *err, size_t errlen)
{
    int rc;
    if (!in->typed) {
        rc = csv_first(in, err, errlen);
        if (rc)
            return rc;
        rc = csv_add(in, &in->cur, err, errlen);
        if (rc)
            return rc;
    }
    while (in->t.b.nrows < max_rows) {
        if (in->have_pending) {
            swap_records(&in->cur, &in->pending);
            in->have_pending = 0;
        } else {
            rc = csv_read(in, &in->cur, err, errlen);
            if (rc == TFOS_EEND)
                break;
            if (rc)
                return rc;
        }
        if (in->cur.n == 1 && in->cur.flen[0] == 0)
            continue; /* blank line */
        rc = csv_add(in, &in->cur, err, errlen);
        if (rc)
            return rc;
    }
    return in->t.b.nrows ? 0 : TFOS_EEND;
}

static int csv_open(void **state, int fd, const char *path, int csv_header, char *err, size_t errlen)
{
    int rc = tfos__input_text_open(state, sizeof(csv_reader), fd, path, err, errlen);
    if (rc)
        return rc;
    csv_reader *in = *state;
    in->line = 1;
    in->csv_header = csv_header;
    return 0;
}

static int csv_next(void *state, uint32_t max_rows, const void **batch, size_t *len, uint32_t *nrows, char *err,
                    size_t errlen)
{
    csv_reader *in = state;
    int rc = csv_fill(in, max_rows, err, errlen);
    if (rc && rc != TFOS_EEND)
        return rc;
    return tfos__input_text_finish(&in->t, batch, len, nrows, err, errlen);
}

static void csv_close(void *state)
{
    csv_reader *in = state;
    free(in->cur.buf);
    free(in->pending.buf);
    tfos__input_text_close(&in->t);
}

const struct tfos__input_ops tfos__input_csv_ops = {
    .open = csv_open,
    .next = csv_next,
    .progress = tfos__input_text_progress,
    .rows = NULL,
    .close = csv_close,
};
