/* input.c: CSV, JSON lines and .npy files to columnar batches (see input.h). */
#include "run/input.h"

#include "core/batch.h"
#include "core/log.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_COLS 1024
#define MAX_LINE ((size_t)16 << 20)

typedef struct column {
    char name[128];
    uint8_t kind, dtype, ndim;
    uint32_t len; /* array columns: elements per row */
    uint8_t *vals;  /* fixed values, or var bytes */
    size_t vlen, vcap;
    uint64_t *offs; /* var: nrows+1 */
    size_t ocap;
} column;

/* One parsed CSV record: fields as spans of buf. */
typedef struct record {
    char *buf;
    size_t len, cap;
    size_t start[MAX_COLS + 1], flen[MAX_COLS + 1];
    int n;
    uint64_t line;
} record;

struct tfos__input {
    int fmt;
    char path[1024];
    FILE *f;
    int fd;
    uint64_t line;       /* CSV/JSONL: physical line number of the next character */
    uint64_t rows;       /* rows returned so far */
    int typed, ncols, csv_header;
    column cols[MAX_COLS];
    uint32_t nrows;      /* rows accumulated for the batch being built */
    record cur, pending;
    int have_pending;
    char *linebuf;
    size_t linecap;
    /* npy */
    uint64_t npy_total, npy_row_bytes;
    int npy_dtype, npy_ndim;
    uint32_t npy_shape[TFOS_BATCH_MAX_DIMS];
    /* output */
    uint8_t *out;
    size_t out_cap;
    int eof;
    uint64_t size; /* the file's size at open, for progress */
};


int tfos__input_format(const char *name)
{
    if (!strcmp(name, "auto"))
        return TFOS_FMT_AUTO;
    if (!strcmp(name, "csv"))
        return TFOS_FMT_CSV;
    if (!strcmp(name, "jsonl") || !strcmp(name, "json") || !strcmp(name, "ndjson"))
        return TFOS_FMT_JSONL;
    if (!strcmp(name, "npy"))
        return TFOS_FMT_NPY;
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return TFOS_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- numbers ----------------------------------------------------------- */

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

/* ---- accumulating columns ------------------------------------------------ */

static int push_fixed(column *c, const void *v, size_t size)
{
    if (grow((void **)&c->vals, &c->vcap, c->vlen + size, 1))
        return TFOS_ENOMEM;
    memcpy(c->vals + c->vlen, v, size);
    c->vlen += size;
    return 0;
}

static int push_var(column *c, uint32_t row, const char *s, size_t n)
{
    if (grow((void **)&c->vals, &c->vcap, c->vlen + n + 1, 1) ||
        grow((void **)&c->offs, &c->ocap, (size_t)row + 2, sizeof *c->offs))
        return TFOS_ENOMEM;
    if (row == 0)
        c->offs[0] = 0;
    if (n)
        memcpy(c->vals + c->vlen, s, n);
    c->vlen += n;
    c->offs[row + 1] = c->vlen;
    return 0;
}

/* Build the batch from the accumulated rows and reset the accumulators. */
static int build_batch(tfos__input *in, const void **batch, size_t *len, char *err, size_t errlen)
{
    tfos__col cols[MAX_COLS];
    memset(cols, 0, sizeof cols);
    for (int i = 0; i < in->ncols; i++) {
        column *c = &in->cols[i];
        cols[i].name = c->name;
        cols[i].name_len = (uint16_t)strlen(c->name);
        cols[i].kind = c->kind;
        cols[i].dtype = c->dtype;
        cols[i].ndim = c->ndim;
        cols[i].shape[0] = c->len;
        if (c->kind != TFOS_COL_FIXED)
            cols[i].data_len = c->vlen;
    }
    uint64_t total = tfos__batch_layout(in->nrows, (uint32_t)in->ncols, cols);
    if (!total)
        return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s: a batch of %u rows is too large", in->path, in->nrows);
    if (grow((void **)&in->out, &in->out_cap, total, 1))
        return TFOS_ENOMEM;
    tfos__batch_write_header(in->out, total, in->nrows, (uint32_t)in->ncols, 0, cols);
    for (int i = 0; i < in->ncols; i++) {
        column *c = &in->cols[i];
        if (c->vlen)
            memcpy(in->out + cols[i].data_off, c->vals, c->vlen);
        if (c->kind != TFOS_COL_FIXED)
            memcpy(in->out + cols[i].offsets_off, c->offs, 8 * ((size_t)in->nrows + 1));
        c->vlen = 0;
    }
    *batch = in->out;
    *len = total;
    in->rows += in->nrows;
    in->nrows = 0;
    return 0;
}

/* ---- CSV ------------------------------------------------------------------ */

/* Read one record (handles quotes and newlines inside quotes). 0, TFOS_EEND
 * at end of file, TFOS_EPROTO for a bad quote, TFOS_ETOOBIG. */
static int csv_read(tfos__input *in, record *r, char *err, size_t errlen)
{
    FILE *f = in->f;
    r->len = 0;
    r->n = 0;
    r->line = in->line;
    int ch = getc_unlocked(f);
    if (ch == EOF)
        return TFOS_EEND;
    for (;;) {
        /* one field */
        if (r->n >= MAX_COLS)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: more than %d fields", in->path,
                        (unsigned long long)r->line, MAX_COLS);
        r->start[r->n] = r->len;
        int quoted = ch == '"';
        if (quoted)
            ch = getc_unlocked(f);
        for (;;) {
            if (ch == EOF) {
                if (quoted)
                    return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: a quoted field is not closed",
                                in->path, (unsigned long long)r->line);
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
                                    in->path, (unsigned long long)in->line, r->n + 1);
                    continue;
                }
            } else if (!quoted && (ch == ',' || ch == '\n' || ch == '\r')) {
                break;
            }
            if (ch == '\n')
                in->line++;
            if (r->len + 1 >= MAX_LINE)
                return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s line %llu: a record over %zu bytes", in->path,
                            (unsigned long long)r->line, MAX_LINE);
            if (grow((void **)&r->buf, &r->cap, r->len + 1, 1))
                return TFOS_ENOMEM;
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

static int csv_type(tfos__input *in, const record *r)
{
    in->ncols = r->n;
    for (int i = 0; i < r->n; i++) {
        column *c = &in->cols[i];
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

static int csv_first(tfos__input *in, char *err, size_t errlen)
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
            size_t l = in->cur.flen[i] < sizeof in->cols[i].name - 1 ? in->cur.flen[i] : sizeof in->cols[i].name - 1;
            memcpy(in->cols[i].name, in->cur.buf + in->cur.start[i], l);
            in->cols[i].name[l] = 0;
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

static int csv_add(tfos__input *in, const record *r, char *err, size_t errlen)
{
    if (r->n != in->ncols)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: %d fields where the first row has %d", in->path,
                    (unsigned long long)r->line, r->n, in->ncols);
    for (int i = 0; i < r->n; i++) {
        column *c = &in->cols[i];
        const char *s = r->buf + r->start[i];
        size_t n = r->flen[i];
        int rc = 0;
        if (c->kind == TFOS_COL_STR) {
            rc = push_var(c, in->nrows, s, n);
        } else if (c->dtype == TFOS_DT_I64) {
            int64_t v;
            if (!parse_int(s, n, &v))
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is not an integer (the "
                            "column's type comes from the first row)", in->path, (unsigned long long)r->line, i + 1,
                            (int)(n > 40 ? 40 : n), s);
            rc = push_fixed(c, &v, 8);
        } else {
            double v;
            if (!parse_float(s, n, &v))
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is not a number (the "
                            "column's type comes from the first row)", in->path, (unsigned long long)r->line, i + 1,
                            (int)(n > 40 ? 40 : n), s);
            rc = push_fixed(c, &v, 8);
        }
        if (rc)
            return rc;
    }
    in->nrows++;
    return 0;
}

static int csv_next(tfos__input *in, uint32_t max_rows, char *err, size_t errlen)
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
    while (in->nrows < max_rows) {
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
    return in->nrows ? 0 : TFOS_EEND;
}

/* ---- JSON lines ------------------------------------------------------------ */

typedef struct jp {
    const char *p, *end;
    const tfos__input *in;
    char *err;
    size_t errlen;
} jp;

static void ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
        j->p++;
}

static int jfail(jp *j, const char *what)
{
    return tfos__errf(j->err, j->errlen, TFOS_EPROTO, "%s line %llu: %s", j->in->path,
                (unsigned long long)j->in->line, what);
}

static void put_utf8(char **o, unsigned cp)
{
    char *q = *o;
    if (cp < 0x80) {
        *q++ = (char)cp;
    } else if (cp < 0x800) {
        *q++ = (char)(0xC0 | (cp >> 6));
        *q++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *q++ = (char)(0xE0 | (cp >> 12));
        *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *q++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *q++ = (char)(0xF0 | (cp >> 18));
        *q++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *q++ = (char)(0x80 | (cp & 0x3F));
    }
    *o = q;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        *v <<= 4;
        if (c >= '0' && c <= '9')
            *v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            *v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            *v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    return 1;
}

/* A JSON string, unescaped in place into out (at most as long as the input). */
static int jstring(jp *j, char *out, size_t *outlen)
{
    if (j->p >= j->end || *j->p != '"')
        return jfail(j, "expected a string");
    j->p++;
    char *o = out;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        if (c < 0x20)
            return jfail(j, "control character in a string");
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        if (j->p >= j->end)
            return jfail(j, "unterminated escape");
        char e = *j->p++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (j->end - j->p < 4 || !hex4(j->p, &cp))
                return jfail(j, "bad \\u escape");
            j->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || !hex4(j->p + 2, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return jfail(j, "unpaired surrogate in \\u escape");
                j->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return jfail(j, "unpaired surrogate in \\u escape");
            }
            put_utf8(&o, cp); /* at most 4 bytes for the 6 or 12 consumed */
            break;
        }
        default:
            return jfail(j, "bad escape in a string");
        }
    }
    if (j->p >= j->end)
        return jfail(j, "unterminated string");
    j->p++;
    *outlen = (size_t)(o - out);
    return 0;
}

/* A number token: its span and whether it is an integer. */
static int jnumber(jp *j, const char **s, size_t *n, int *is_int)
{
    const char *st = j->p;
    int integer = 1;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || *j->p == '.' || *j->p == 'e' || *j->p == 'E' ||
                             *j->p == '+' || *j->p == '-')) {
        if (*j->p == '.' || *j->p == 'e' || *j->p == 'E')
            integer = 0;
        j->p++;
    }
    if (j->p == st)
        return jfail(j, "expected a value");
    *s = st;
    *n = (size_t)(j->p - st);
    *is_int = integer;
    double d = 0;
    int64_t i;
    if (integer ? !parse_int(st, *n, &i) : !parse_float(st, *n, &d))
        return jfail(j, integer ? "integer out of range or malformed" : "malformed number");
    return 0;
}

/* One value for column `c` of row `row` (types fixed by the first row when
 * `typing` is set). */
static int jvalue(jp *j, tfos__input *in, column *c, int col, int typing)
{
    ws(j);
    if (j->p >= j->end)
        return jfail(j, "expected a value");
    char ch = *j->p;
    char what[160];
    if (ch == 'n')
        return snprintf(what, sizeof what, "null in column %d (every value needs a type)", col + 1), jfail(j, what);
    if (ch == 't' || ch == 'f') {
        int v = ch == 't';
        const char *word = v ? "true" : "false";
        size_t wl = strlen(word);
        if ((size_t)(j->end - j->p) < wl || memcmp(j->p, word, wl))
            return jfail(j, "bad literal");
        j->p += wl;
        if (typing) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = TFOS_DT_BOOL;
        } else if (c->kind != TFOS_COL_FIXED || c->dtype != TFOS_DT_BOOL || c->ndim) {
            snprintf(what, sizeof what, "column %d: a boolean where the first row has another type", col + 1);
            return jfail(j, what);
        }
        uint8_t b = (uint8_t)v;
        return push_fixed(c, &b, 1);
    }
    if (ch == '"') {
        if (!typing && c->kind != TFOS_COL_STR) {
            snprintf(what, sizeof what, "column %d: a string where the first row has a number", col + 1);
            return jfail(j, what);
        }
        c->kind = TFOS_COL_STR;
        /* unescape into the column's byte buffer directly */
        size_t room = (size_t)(j->end - j->p);
        if (grow((void **)&c->vals, &c->vcap, c->vlen + room + 4, 1) ||
            grow((void **)&c->offs, &c->ocap, (size_t)in->nrows + 2, sizeof *c->offs))
            return TFOS_ENOMEM;
        size_t n;
        int rc = jstring(j, (char *)c->vals + c->vlen, &n);
        if (rc)
            return rc;
        if (in->nrows == 0)
            c->offs[0] = 0;
        c->vlen += n;
        c->offs[in->nrows + 1] = c->vlen;
        return 0;
    }
    if (ch == '[') {
        j->p++;
        uint32_t count = 0;
        int any_float = 0;
        size_t start = c->vlen;
        ws(j);
        if (j->p < j->end && *j->p == ']')
            return jfail(j, "empty array");
        for (;;) {
            ws(j);
            const char *s;
            size_t n;
            int is_int;
            int rc = jnumber(j, &s, &n, &is_int);
            if (rc)
                return jfail(j, "arrays may hold numbers only");
            any_float |= !is_int;
            int64_t iv = 0;
            double dv = 0;
            if (is_int)
                parse_int(s, n, &iv);
            else
                parse_float(s, n, &dv);
            if (typing) {
                /* stored as double for now; rewritten as int64 below when
                 * every element was an integer */
                if (is_int)
                    dv = (double)iv;
                rc = push_fixed(c, &dv, 8);
            } else if (c->dtype == TFOS_DT_I64) {
                if (!is_int) {
                    snprintf(what, sizeof what, "column %d: a float in an integer array column", col + 1);
                    return jfail(j, what);
                }
                rc = push_fixed(c, &iv, 8);
            } else {
                if (is_int)
                    dv = (double)iv;
                rc = push_fixed(c, &dv, 8);
            }
            if (rc)
                return rc;
            count++;
            ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                break;
            }
            return jfail(j, "expected , or ] in an array");
        }
        if (typing) {
            c->kind = TFOS_COL_FIXED;
            c->ndim = 1;
            c->len = count;
            c->dtype = any_float ? TFOS_DT_F64 : TFOS_DT_I64;
            if (!any_float) { /* the values went in as doubles: rewrite as int64 */
                for (uint32_t k = 0; k < count; k++) {
                    double d;
                    memcpy(&d, c->vals + start + 8 * k, 8);
                    int64_t v = (int64_t)d;
                    memcpy(c->vals + start + 8 * k, &v, 8);
                }
            }
        } else if (c->ndim != 1 || c->len != count) {
            snprintf(what, sizeof what, "column %d: an array of %u numbers where the first row has %s", col + 1,
                     count, c->ndim ? "another length" : "a scalar");
            return jfail(j, what);
        }
        return 0;
    }
    const char *s;
    size_t n;
    int is_int;
    int rc = jnumber(j, &s, &n, &is_int);
    if (rc)
        return rc;
    if (typing) {
        c->kind = TFOS_COL_FIXED;
        c->dtype = is_int ? TFOS_DT_I64 : TFOS_DT_F64;
    } else if (c->kind != TFOS_COL_FIXED || c->ndim || (c->dtype != TFOS_DT_I64 && c->dtype != TFOS_DT_F64)) {
        snprintf(what, sizeof what, "column %d: a number where the first row has another type", col + 1);
        return jfail(j, what);
    } else if (c->dtype == TFOS_DT_I64 && !is_int) {
        snprintf(what, sizeof what, "column %d: %.*s in an integer column (write the first row's value as a float)",
                 col + 1, (int)(n > 30 ? 30 : n), s);
        return jfail(j, what);
    }
    if (c->dtype == TFOS_DT_I64) {
        int64_t v = 0;
        parse_int(s, n, &v);
        return push_fixed(c, &v, 8);
    }
    double d = 0;
    if (is_int) {
        int64_t v = 0;
        parse_int(s, n, &v);
        d = (double)v;
    } else {
        parse_float(s, n, &d);
    }
    return push_fixed(c, &d, 8);
}

static int jsonl_row(tfos__input *in, const char *line, size_t len, char *err, size_t errlen)
{
    jp j = {.p = line, .end = line + len, .in = in, .err = err, .errlen = errlen};
    int typing = !in->typed;
    ws(&j);
    if (j.p >= j.end)
        return 1; /* blank line */
    char open = *j.p;
    if (open != '[' && open != '{')
        return jfail(&j, "a row must be a JSON array or object");
    j.p++;
    int col = 0;
    char keybuf[128];
    ws(&j);
    if (j.p < j.end && *j.p == (open == '[' ? ']' : '}'))
        return jfail(&j, "empty row");
    for (;;) {
        if (col >= MAX_COLS)
            return jfail(&j, "more than 1024 columns");
        ws(&j);
        if (open == '{') {
            size_t kl;
            const char *kstart = j.p;
            if (j.p >= j.end || *j.p != '"')
                return jfail(&j, "expected a key");
            const char *q = memchr(j.p + 1, '"', (size_t)(j.end - j.p - 1));
            if (!q || (size_t)(q - kstart) >= sizeof keybuf)
                return jfail(&j, "key too long or not closed");
            int rc = jstring(&j, keybuf, &kl);
            if (rc)
                return rc;
            keybuf[kl] = 0;
            if (typing) {
                memcpy(in->cols[col].name, keybuf, kl + 1);
            } else if (strcmp(in->cols[col].name, keybuf)) {
                char what[300];
                snprintf(what, sizeof what, "key '%.100s' where the first row has '%.100s' (keys and their order must "
                         "match the first row)", keybuf, in->cols[col].name);
                return jfail(&j, what);
            }
            ws(&j);
            if (j.p >= j.end || *j.p != ':')
                return jfail(&j, "expected :");
            j.p++;
        }
        if (!typing && col >= in->ncols)
            return jfail(&j, "more columns than the first row");
        int rc = jvalue(&j, in, &in->cols[col], col, typing);
        if (rc)
            return rc;
        col++;
        ws(&j);
        if (j.p < j.end && *j.p == ',') {
            j.p++;
            continue;
        }
        if (j.p < j.end && *j.p == (open == '[' ? ']' : '}')) {
            j.p++;
            break;
        }
        return jfail(&j, open == '[' ? "expected , or ]" : "expected , or }");
    }
    ws(&j);
    if (j.p != j.end)
        return jfail(&j, "text after the row");
    if (typing) {
        in->ncols = col;
        in->typed = 1;
    } else if (col != in->ncols) {
        char what[96];
        snprintf(what, sizeof what, "%d columns where the first row has %d", col, in->ncols);
        return jfail(&j, what);
    }
    in->nrows++;
    return 0;
}

static int jsonl_next(tfos__input *in, uint32_t max_rows, char *err, size_t errlen)
{
    while (in->nrows < max_rows) {
        in->line++;
        ssize_t n = getline(&in->linebuf, &in->linecap, in->f);
        if (n < 0) {
            in->line--;
            break;
        }
        if ((size_t)n > MAX_LINE)
            return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s line %llu: over %zu bytes", in->path,
                        (unsigned long long)in->line, MAX_LINE);
        /* a failed row leaves partial values behind: the whole read fails */
        int rc = jsonl_row(in, in->linebuf, (size_t)n, err, errlen);
        if (rc < 0)
            return rc;
    }
    return in->nrows ? 0 : TFOS_EEND;
}

/* ---- NPY --------------------------------------------------------------- */

static int npy_open(tfos__input *in, char *err, size_t errlen)
{
    uint8_t head[12];
    ssize_t r = pread(in->fd, head, 10, 0);
    if (r != 10 || memcmp(head, "\x93NUMPY", 6))
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: not a .npy file (bad magic)", in->path);
    int major = head[6];
    size_t hl, off;
    if (major == 1) {
        hl = head[8] | (size_t)head[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (pread(in->fd, head, 12, 0) != 12)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated header", in->path);
        hl = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
        off = 12;
    } else {
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: .npy format version %d is not supported", in->path, major);
    }
    if (hl > 65536)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: header of %zu bytes", in->path, hl);
    char hdr[65537];
    if (pread(in->fd, hdr, hl, (off_t)off) != (ssize_t)hl)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated header", in->path);
    hdr[hl] = 0;
    const char *d = strstr(hdr, "'descr'");
    const char *fo = strstr(hdr, "'fortran_order'");
    const char *sh = strstr(hdr, "'shape'");
    if (!d || !fo || !sh)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: header lacks descr, fortran_order or shape", in->path);
    char descr[16] = "";
    if (sscanf(d, "'descr' : '%15[^']'", descr) != 1 && sscanf(d, "'descr': '%15[^']'", descr) != 1)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable descr", in->path);
    static const struct {
        const char *descr;
        int dt;
    } map[] = {{"<f4", TFOS_DT_F32}, {"<f8", TFOS_DT_F64}, {"<i8", TFOS_DT_I64}, {"<i4", TFOS_DT_I32},
               {"<i2", TFOS_DT_I16}, {"|i1", TFOS_DT_I8},  {"<u8", TFOS_DT_U64}, {"<u4", TFOS_DT_U32},
               {"<u2", TFOS_DT_U16}, {"|u1", TFOS_DT_U8},  {"|b1", TFOS_DT_BOOL}};
    in->npy_dtype = 0;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(descr, map[i].descr))
            in->npy_dtype = map[i].dt;
    if (!in->npy_dtype)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: dtype '%s' is not supported (little-endian numbers or bool)",
                    in->path, descr);
    const char *fv = strchr(fo + 15, ':');
    while (fv && (*fv == ':' || *fv == ' '))
        fv++;
    if (!fv || strncmp(fv, "False", 5))
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: Fortran-order arrays are not supported (save with C order)",
                    in->path);
    const char *paren = strchr(sh, '(');
    if (!paren)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable shape", in->path);
    uint64_t dims[TFOS_BATCH_MAX_DIMS + 1];
    int nd = 0;
    const char *p = paren + 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || nd > TFOS_BATCH_MAX_DIMS)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: unreadable shape", in->path);
        dims[nd++] = v;
        p = end;
    }
    if (nd == 0)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s: a 0-d array has no rows", in->path);
    in->npy_total = dims[0];
    in->npy_ndim = nd - 1;
    uint64_t per = tfos__dtype_size(in->npy_dtype);
    for (int i = 1; i < nd; i++) {
        if (!dims[i] || dims[i] > UINT32_MAX || per > ((uint64_t)1 << 40) / dims[i])
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: bad shape", in->path);
        in->npy_shape[i - 1] = (uint32_t)dims[i];
        per *= dims[i];
    }
    in->npy_row_bytes = per;
    if (lseek(in->fd, (off_t)(off + hl), SEEK_SET) < 0)
        return TFOS_ESYS;
    return 0;
}

static int npy_next(tfos__input *in, uint32_t max_rows, const void **batch, size_t *len, char *err, size_t errlen)
{
    uint64_t left = in->npy_total - in->rows;
    if (left == 0)
        return TFOS_EEND;
    uint32_t n = left < max_rows ? (uint32_t)left : max_rows;
    tfos__col col;
    memset(&col, 0, sizeof col);
    col.name = "";
    col.kind = TFOS_COL_FIXED;
    col.dtype = (uint8_t)in->npy_dtype;
    col.ndim = (uint8_t)in->npy_ndim;
    memcpy(col.shape, in->npy_shape, sizeof col.shape);
    uint64_t total = tfos__batch_layout(n, 1, &col);
    if (!total)
        return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s: rows too large", in->path);
    if (grow((void **)&in->out, &in->out_cap, total, 1))
        return TFOS_ENOMEM;
    tfos__batch_write_header(in->out, total, n, 1, in->npy_ndim ? 0 : TFOS_BATCH_FLAT_ROWS, &col);
    size_t want = (size_t)col.data_len, got = 0;
    while (got < want) {
        ssize_t r = read(in->fd, in->out + col.data_off + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", in->path, strerror(errno));
        if (r == 0)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s: truncated: the header promises %llu rows, the data ends in "
                        "row %llu", in->path, (unsigned long long)in->npy_total,
                        (unsigned long long)(in->rows + got / in->npy_row_bytes));
        got += (size_t)r;
    }
    *batch = in->out;
    *len = total;
    in->rows += n;
    return 0;
}

/* ---- public -------------------------------------------------------------- */

int tfos__input_open(tfos__input **out, const char *path, int format, int csv_header, char *err, size_t errlen)
{
    if (format == TFOS_FMT_AUTO) {
        if (ends_with(path, ".csv"))
            format = TFOS_FMT_CSV;
        else if (ends_with(path, ".jsonl") || ends_with(path, ".json") || ends_with(path, ".ndjson"))
            format = TFOS_FMT_JSONL;
        else if (ends_with(path, ".npy"))
            format = TFOS_FMT_NPY;
        else
            return tfos__errf(err, errlen, TFOS_EINVAL, "%s: unknown file type (use .csv, .jsonl or .npy, or give "
                        "--input-format)", path);
    }
    tfos__input *in = calloc(1, sizeof *in);
    if (!in)
        return TFOS_ENOMEM;
    in->fmt = format;
    in->fd = -1;
    in->line = 1;
    in->csv_header = csv_header;
    snprintf(in->path, sizeof in->path, "%s", path);
    int rc;
    if (format == TFOS_FMT_NPY) {
        in->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (in->fd < 0) {
            rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
            goto bad;
        }
        rc = npy_open(in, err, errlen);
        if (rc)
            goto bad;
    } else {
        in->f = fopen(path, "re");
        if (!in->f) {
            rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
            goto bad;
        }
        in->line = format == TFOS_FMT_CSV ? 1 : 0;
    }
    struct stat sb;
    if (fstat(in->f ? fileno(in->f) : in->fd, &sb) == 0 && sb.st_size > 0)
        in->size = (uint64_t)sb.st_size;
    *out = in;
    return 0;
bad:
    tfos__input_close(in);
    return rc;
}

int tfos__input_next(tfos__input *in, uint32_t max_rows, const void **batch, size_t *len, uint64_t *first_row,
                     char *err, size_t errlen)
{
    if (max_rows == 0)
        return TFOS_EINVAL;
    *first_row = in->rows;
    if (in->eof)
        return TFOS_EEND;
    int rc;
    if (in->fmt == TFOS_FMT_NPY) {
        rc = npy_next(in, max_rows, batch, len, err, errlen);
    } else {
        rc = in->fmt == TFOS_FMT_CSV ? csv_next(in, max_rows, err, errlen) : jsonl_next(in, max_rows, err, errlen);
        if (rc == 0)
            rc = build_batch(in, batch, len, err, errlen);
    }
    if (rc == TFOS_EEND)
        in->eof = 1;
    return rc;
}

void tfos__input_progress(const tfos__input *in, uint64_t *read, uint64_t *size)
{
    off_t pos = in->f ? ftello(in->f) : lseek(in->fd, 0, SEEK_CUR);
    *read = pos > 0 ? (uint64_t)pos : 0;
    if (in->eof || *read > in->size)
        *read = in->size;
    *size = in->size;
}

int64_t tfos__input_rows(const tfos__input *in)
{
    return in->fmt == TFOS_FMT_NPY ? (int64_t)in->npy_total : -1;
}

void tfos__input_close(tfos__input *in)
{
    if (!in)
        return;
    if (in->f)
        fclose(in->f);
    if (in->fd >= 0)
        close(in->fd);
    for (int i = 0; i < MAX_COLS; i++) {
        free(in->cols[i].vals);
        free(in->cols[i].offs);
    }
    free(in->cur.buf);
    free(in->pending.buf);
    free(in->linebuf);
    free(in->out);
    free(in);
}
