/* reader.c: CSV, JSON-lines and .npy files to columnar batches (reader.h).
 *
 * Text formats (CSV, JSONL) share one input buffer and one set of column
 * builders. The input buffer holds unconsumed bytes [start, end) of the file
 * (for a memory source it is the caller's memory itself, read-only); a record
 * is located with a scan that only moves `start` once the row is taken, so a
 * row that does not fit the current batch is simply scanned again for the
 * next one. A row is staged: its values are appended to the column builders
 * past their committed length, and either committed or rolled back, so a bad
 * row never leaves half a row behind.
 *
 * NPY data is read straight into the data region of the batch. */
#include "core/reader.h"

#include "core/codec.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK ((size_t)64 << 10)
#define NPY_MAX_HEADER ((size_t)1 << 20)
#define NUM_MAX 400 /* longest number text converted with strtod */
#define MAX_ROW_VALUES TFOS_TCB_MAX_COLS

/* ---- growable byte vectors ----------------------------------------------- */

typedef struct vec {
    uint8_t *p;
    size_t len, cap;
} vec;

static int vec_reserve(vec *v, size_t extra)
{
    if (extra <= v->cap - v->len)
        return 0;
    size_t cap = v->cap ? v->cap : 256;
    while (cap - v->len < extra) {
        if (cap > SIZE_MAX / 2)
            return TFOS_ENOMEM;
        cap *= 2;
    }
    uint8_t *p = realloc(v->p, cap);
    if (!p)
        return TFOS_ENOMEM;
    v->p = p;
    v->cap = cap;
    return 0;
}

static int vec_add(vec *v, const void *src, size_t n)
{
    if (vec_reserve(v, n))
        return TFOS_ENOMEM;
    if (n)
        memcpy(v->p + v->len, src, n);
    v->len += n;
    return 0;
}

static int vec_add_u64(vec *v, uint64_t x)
{
    return vec_add(v, &x, 8);
}

static void vec_free(vec *v)
{
    free(v->p);
    memset(v, 0, sizeof *v);
}

/* ---- the reader ----------------------------------------------------------- */

/* One output column being built: values of the rows of the current batch. */
typedef struct colb {
    char *name;
    uint16_t name_len;
    uint8_t kind, dtype, ndim;
    uint32_t shape[TFOS_TCB_MAX_DIMS];
    uint64_t elems; /* FIXED: numbers per row */
    vec data;       /* FIXED: row-major values; var: value bytes */
    vec offs;       /* var: u64 offsets, offs[0] = 0 */
    size_t data_commit, offs_commit;
} colb;

/* JSON values of one line. */
enum { J_INT = 1, J_FLOAT, J_BOOL, J_STR, J_ARR };

typedef struct jnum {
    int64_t i;
    double d;
    bool isf;
} jnum;

typedef struct jval {
    uint8_t type;
    bool b;
    bool arr_float; /* J_ARR: some element is not an integer */
    uint8_t ndim;
    uint32_t shape[TFOS_TCB_MAX_DIMS];
    int64_t i;
    double d;
    size_t key_off, key_len; /* object rows: the key, in sbuf */
    size_t s_off, s_len;     /* J_STR: bytes in sbuf */
    size_t n_off, n_cnt;     /* J_ARR: jnums in nbuf */
} jval;

enum { ROWS_ARRAYS = 1, ROWS_OBJECTS = 2 };

struct tfos__reader {
    int format;
    tfos__reader_opts o;
    char *name;
    int fd; /* -1 for a memory source */
    const uint8_t *mem;
    size_t mem_len, mem_pos;

    /* text input: unconsumed bytes [start, end) of data */
    uint8_t *own; /* data == own for files */
    const uint8_t *data;
    size_t cap, start, end;
    bool eof, started;
    uint64_t line; /* line number of data[start] */
    uint64_t row;  /* number of the next data row */

    /* columns */
    bool have_schema;
    uint32_t ncols;
    colb *cols;
    tfos__tcb_col *tcols;
    uint64_t schema_line; /* line of the row that set the types */
    uint64_t base_bytes;  /* batch size bound without the column data */
    int row_kind;         /* JSONL: ROWS_ARRAYS / ROWS_OBJECTS */
    bool header;          /* CSV: names came from a header */
    uint64_t header_line;
    uint8_t *seen; /* JSONL objects: per column, seen in this row */

    /* scratch for one row */
    vec fbuf, foff; /* CSV fields: bytes and size_t offsets */
    uint32_t nfields;
    vec hbuf, hoff; /* CSV header fields, kept until the first data row */
    uint32_t nheader;
    vec jv, sbuf, nbuf; /* JSONL: jvals, string bytes, jnums */
    uint32_t njv;

    /* npy */
    uint64_t npy_rows, npy_row_bytes, npy_data_start;
    uint8_t npy_dtype, npy_ndim;
    uint32_t npy_shape[TFOS_TCB_MAX_DIMS];

    /* output */
    uint8_t *out;
    size_t out_cap, out_len;

    int final_rc; /* once set: returned by every later next() */
    char msg[1024];
};

__attribute__((format(printf, 3, 4))) static int rfail(tfos__reader *r, int rc, const char *fmt, ...)
{
    int saved = errno;
    int n = snprintf(r->msg, sizeof r->msg, "%s: ", r->name ? r->name : "(input)");
    if (n < 0 || (size_t)n >= sizeof r->msg)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg + n, sizeof r->msg - (size_t)n, fmt, ap);
    va_end(ap);
    errno = saved;
    return rc;
}

static void copy_msg(const tfos__reader *r, char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", r->msg);
}

/* A value for a message: at most 40 bytes, control bytes as '?'. */
static const char *snip(const uint8_t *s, size_t n, char out[48])
{
    size_t k = n > 40 ? 40 : n, j = 0;
    for (size_t i = 0; i < k; i++)
        out[j++] = s[i] < 0x20 || s[i] == 0x7f ? '?' : (char)s[i];
    if (n > k) {
        memcpy(out + j, "...", 3);
        j += 3;
    }
    out[j] = '\0';
    return out;
}

/* "column 3" or "column 3 (\"price\")" (1-based). */
static const char *col_label(const tfos__reader *r, uint32_t j, char out[80])
{
    if (j < r->ncols && r->cols && r->cols[j].name_len) {
        char s[48];
        snprintf(out, 80, "column %u (\"%s\")", j + 1,
                 snip((const uint8_t *)r->cols[j].name, r->cols[j].name_len, s));
    } else {
        snprintf(out, 80, "column %u", j + 1);
    }
    return out;
}

static const char *fmt_shape(uint8_t ndim, const uint32_t *shape, char out[120])
{
    size_t n = 0;
    out[n++] = '(';
    for (int d = 0; d < ndim; d++)
        n += (size_t)snprintf(out + n, 120 - n, d ? ", %u" : "%u", shape[d]);
    snprintf(out + n, 120 - n, ndim == 1 ? ",)" : ")");
    return out;
}

/* ---- input ---------------------------------------------------------------- */

/* Read more of the file into the buffer. 1: got bytes, 0: end of file. */
static int fill(tfos__reader *r)
{
    if (r->eof)
        return 0;
    if (r->fd < 0) {
        r->eof = true;
        return 0;
    }
    if (r->start && (r->end == r->cap || r->start >= r->cap / 2)) {
        memmove(r->own, r->own + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end == r->cap) {
        if (r->cap > SIZE_MAX / 2)
            return rfail(r, TFOS_ENOMEM, "out of memory for the line buffer");
        uint8_t *p = realloc(r->own, r->cap * 2);
        if (!p)
            return rfail(r, TFOS_ENOMEM, "out of memory for a line buffer of %zu bytes", r->cap * 2);
        r->own = p;
        r->data = p;
        r->cap *= 2;
    }
    ssize_t n;
    do
        n = read(r->fd, r->own + r->end, r->cap - r->end);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return rfail(r, TFOS_ESYS, "read failed: %s", strerror(errno));
    if (n == 0) {
        r->eof = true;
        return 0;
    }
    r->end += (size_t)n;
    return 1;
}

/* Read up to n bytes from the source (NPY). Returns the count or an error. */
static int64_t src_read(tfos__reader *r, void *dst, size_t n)
{
    if (r->fd < 0) {
        size_t k = r->mem_len - r->mem_pos < n ? r->mem_len - r->mem_pos : n;
        if (k)
            memcpy(dst, r->mem + r->mem_pos, k);
        r->mem_pos += k;
        return (int64_t)k;
    }
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > ((size_t)1 << 30) ? (size_t)1 << 30 : n - got;
        ssize_t k = read(r->fd, (uint8_t *)dst + got, want);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return rfail(r, TFOS_ESYS, "read failed: %s", strerror(errno));
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (int64_t)got;
}

static void consume(tfos__reader *r, size_t tlen, uint64_t nl)
{
    r->start += tlen;
    r->line += nl;
}

static int skip_bom(tfos__reader *r)
{
    while (r->end - r->start < 3) {
        int rc = fill(r);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
    }
    if (r->end - r->start >= 3 && !memcmp(r->data + r->start, "\xef\xbb\xbf", 3))
        r->start += 3;
    return 0;
}

/* The line that starts `from` bytes past start (JSONL): *clen bytes of
 * content (without LF or CRLF), *tlen bytes with them. */
static int scan_line(tfos__reader *r, size_t from, size_t *clen, size_t *tlen, uint64_t *nl)
{
    size_t searched = from;
    for (;;) {
        const uint8_t *b = r->data + r->start;
        size_t avail = r->end - r->start;
        const uint8_t *q = searched < avail ? memchr(b + searched, '\n', avail - searched) : NULL;
        if (q) {
            size_t len = (size_t)(q - b) - from;
            if (len > r->o.max_line)
                return rfail(r, TFOS_ETOOBIG, "line %llu is longer than the %zu-byte limit",
                             (unsigned long long)r->line, r->o.max_line);
            *tlen = len + 1;
            if (len && b[from + len - 1] == '\r')
                len--;
            *clen = len;
            *nl = 1;
            return 0;
        }
        searched = avail;
        if (avail - from > r->o.max_line)
            return rfail(r, TFOS_ETOOBIG, "line %llu is longer than the %zu-byte limit",
                         (unsigned long long)r->line, r->o.max_line);
        int rc = fill(r);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            if (avail == from)
                return TFOS_EEND;
            b = r->data + r->start; /* fill may have moved the bytes */
            size_t len = avail - from;
            *tlen = len;
            if (b[from + len - 1] == '\r')
                len--;
            *clen = len;
            *nl = 0;
            return 0;
        }
    }
}

/* The CSV record that starts `from` bytes past start: like scan_line, but
 * newlines inside quoted fields do not end it. *nl counts its LFs. */
static int scan_csv(tfos__reader *r, size_t from, size_t *clen, size_t *tlen, uint64_t *nl)
{
    enum { FSTART, UNQ, INQ, QSEEN } st = FSTART;
    const uint8_t d = (uint8_t)r->o.csv_delim;
    size_t i = from;
    uint64_t lines = 0;
    for (;;) {
        const uint8_t *b = r->data + r->start;
        size_t avail = r->end - r->start;
        while (i < avail) {
            uint8_t c = b[i];
            if (st == INQ) {
                const uint8_t *q = memchr(b + i, '"', avail - i);
                size_t stop = q ? (size_t)(q - b) : avail;
                for (const uint8_t *p = b + i; (p = memchr(p, '\n', (size_t)(b + stop - p))); p++)
                    lines++;
                i = stop;
                if (q) {
                    st = QSEEN;
                    i++;
                }
                continue;
            }
            if (c == '\n') {
                size_t len = i - from;
                if (len > r->o.max_line)
                    break;
                *tlen = len + 1;
                if (len && b[i - 1] == '\r')
                    len--;
                *clen = len;
                *nl = lines + 1;
                return 0;
            }
            if (c == d)
                st = FSTART;
            else if (c == '"' && (st == FSTART || st == QSEEN))
                st = INQ;
            else
                st = UNQ;
            i++;
        }
        if (i - from > r->o.max_line)
            return rfail(r, TFOS_ETOOBIG, "the record starting on line %llu is longer than the %zu-byte limit",
                         (unsigned long long)r->line, r->o.max_line);
        int rc = fill(r);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            if (avail == from)
                return TFOS_EEND;
            b = r->data + r->start; /* fill may have moved the bytes */
            if (st == INQ)
                return rfail(r, TFOS_EPROTO, "line %llu: quoted field not closed before the end of the file",
                             (unsigned long long)r->line + lines);
            size_t len = avail - from;
            *tlen = len;
            if (b[avail - 1] == '\r')
                len--;
            *clen = len;
            *nl = lines;
            return 0;
        }
    }
}

/* ---- columns and batches ----------------------------------------------------- */

static int schema_alloc(tfos__reader *r, uint32_t ncols)
{
    r->cols = calloc(ncols, sizeof *r->cols);
    r->tcols = calloc(ncols, sizeof *r->tcols);
    r->seen = calloc(ncols, 1);
    if (!r->cols || !r->tcols || !r->seen)
        return rfail(r, TFOS_ENOMEM, "out of memory for %u columns", ncols);
    r->ncols = ncols;
    return 0;
}

static int col_set_name(tfos__reader *r, uint32_t j, const uint8_t *s, size_t n, uint64_t line)
{
    if (n > UINT16_MAX)
        return rfail(r, TFOS_EPROTO, "line %llu: column %u's name is %zu bytes (at most 65535)",
                     (unsigned long long)line, j + 1, n);
    if (!tfos__utf8_valid(s, n))
        return rfail(r, TFOS_EPROTO, "line %llu: column %u's name is not valid UTF-8", (unsigned long long)line,
                     j + 1);
    r->cols[j].name = malloc(n ? n : 1);
    if (!r->cols[j].name)
        return rfail(r, TFOS_ENOMEM, "out of memory");
    if (n)
        memcpy(r->cols[j].name, s, n);
    r->cols[j].name_len = (uint16_t)n;
    return 0;
}

/* After the column types are set: per-column fixed parts of the batch size. */
static int schema_done(tfos__reader *r)
{
    uint64_t base = TFOS_TCB_HEADER + TFOS_TCB_ALIGN;
    for (uint32_t j = 0; j < r->ncols; j++) {
        colb *c = &r->cols[j];
        base += TFOS_TCB_COLENTRY + ((c->name_len + 7u) & ~7u) + 2 * TFOS_TCB_ALIGN;
        if (c->kind != TFOS_TCB_FIXED && vec_add_u64(&c->offs, 0))
            return rfail(r, TFOS_ENOMEM, "out of memory");
        c->offs_commit = c->offs.len;
        c->elems = 1;
        for (int d = 0; d < c->ndim; d++)
            c->elems *= c->shape[d];
    }
    r->base_bytes = base;
    r->have_schema = true;
    return 0;
}

static void rollback(tfos__reader *r)
{
    for (uint32_t j = 0; j < r->ncols; j++) {
        r->cols[j].data.len = r->cols[j].data_commit;
        r->cols[j].offs.len = r->cols[j].offs_commit;
    }
}

static void commit(tfos__reader *r)
{
    for (uint32_t j = 0; j < r->ncols; j++) {
        r->cols[j].data_commit = r->cols[j].data.len;
        r->cols[j].offs_commit = r->cols[j].offs.len;
    }
}

/* An upper bound of the encoded size of the rows staged so far. */
static uint64_t staged_bytes(const tfos__reader *r)
{
    uint64_t n = r->base_bytes;
    for (uint32_t j = 0; j < r->ncols; j++)
        n += r->cols[j].data.len + r->cols[j].offs.len;
    return n;
}

static int ensure_out(tfos__reader *r, uint64_t total)
{
    if (total <= r->out_cap)
        return 0;
    if (total > SIZE_MAX)
        return rfail(r, TFOS_ETOOBIG, "a batch of %llu bytes does not fit in memory", (unsigned long long)total);
    free(r->out);
    r->out = NULL;
    r->out_cap = 0;
    void *p;
    if (posix_memalign(&p, TFOS_TCB_ALIGN, (size_t)total))
        return rfail(r, TFOS_ENOMEM, "out of memory for a batch of %llu bytes", (unsigned long long)total);
    r->out = p;
    r->out_cap = (size_t)total;
    return 0;
}

/* Encode the committed rows into r->out and empty the builders. */
static int emit_text(tfos__reader *r, uint32_t rows)
{
    for (uint32_t j = 0; j < r->ncols; j++) {
        const colb *c = &r->cols[j];
        tfos__tcb_col *t = &r->tcols[j];
        memset(t, 0, sizeof *t);
        t->name = c->name;
        t->name_len = c->name_len;
        t->kind = c->kind;
        t->dtype = c->dtype;
        t->ndim = c->ndim;
        memcpy(t->shape, c->shape, sizeof t->shape);
        t->data_len = c->kind == TFOS_TCB_FIXED ? 0 : c->data.len;
    }
    tfos__tcb_enc e;
    char why[200];
    int rc = tfos__tcb_layout(&e, rows, r->ncols, r->tcols, 0, why, sizeof why);
    if (rc)
        return rfail(r, rc, "cannot encode rows from line %llu on: %s", (unsigned long long)r->schema_line, why);
    if ((rc = ensure_out(r, e.total)))
        return rc;
    tfos__tcb_begin(&e, r->out, r->out_cap);
    for (uint32_t j = 0; j < r->ncols; j++) {
        colb *c = &r->cols[j];
        if (c->data.len)
            memcpy(tfos__tcb_data(&e, j), c->data.p, c->data.len);
        if (c->kind != TFOS_TCB_FIXED)
            memcpy(tfos__tcb_offsets(&e, j), c->offs.p, c->offs.len);
        c->data.len = c->data_commit = 0;
        c->offs.len = c->offs_commit = c->kind == TFOS_TCB_FIXED ? 0 : 8;
    }
    r->out_len = (size_t)e.total;
    return 0;
}

static int add_var(tfos__reader *r, colb *c, const uint8_t *s, size_t n)
{
    if (vec_add(&c->data, s, n) || vec_add_u64(&c->offs, c->data.len))
        return rfail(r, TFOS_ENOMEM, "out of memory");
    return 0;
}

static int add_fixed(tfos__reader *r, colb *c, const void *v, size_t n)
{
    if (vec_add(&c->data, v, n))
        return rfail(r, TFOS_ENOMEM, "out of memory");
    return 0;
}

/* ---- numbers ------------------------------------------------------------- */

static bool is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

/* Digits s[0..n) as a 64-bit integer with sign; false on overflow. */
static bool digits_i64(const uint8_t *s, size_t n, bool neg, int64_t *out)
{
    uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t dg = (uint64_t)(s[i] - '0');
        if (v > (lim - dg) / 10)
            return false;
        v = v * 10 + dg;
    }
    *out = !neg ? (int64_t)v : v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    return true;
}

static bool to_double(const uint8_t *s, size_t n, double *out)
{
    char tmp[NUM_MAX + 1];
    if (n > NUM_MAX)
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *end;
    *out = strtod(tmp, &end);
    return end == tmp + n;
}

static bool ci_eq(const uint8_t *s, size_t n, const char *word)
{
    size_t k = strlen(word);
    if (n != k)
        return false;
    for (size_t i = 0; i < k; i++)
        if ((s[i] | 0x20) != word[i])
            return false;
    return true;
}

enum { NUM_NO = 0, NUM_INT = 1, NUM_FLOAT = 2, NUM_EMPTY = 3 };

/* What a CSV field is: an integer, another number, empty (spaces only), or
 * something else. */
static int csv_number(const uint8_t *s, size_t n, int64_t *iv, double *dv)
{
    while (n && (s[0] == ' ' || s[0] == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (!n)
        return NUM_EMPTY;
    size_t i = 0;
    bool neg = false;
    if (s[0] == '+' || s[0] == '-') {
        neg = s[0] == '-';
        i = 1;
    }
    if (ci_eq(s + i, n - i, "nan")) {
        *dv = neg ? -NAN : NAN;
        return NUM_FLOAT;
    }
    if (ci_eq(s + i, n - i, "inf") || ci_eq(s + i, n - i, "infinity")) {
        *dv = neg ? -INFINITY : INFINITY;
        return NUM_FLOAT;
    }
    size_t d0 = i;
    while (i < n && is_digit(s[i]))
        i++;
    size_t nd = i - d0, nf = 0;
    if (i == n && nd) {
        if (digits_i64(s + d0, nd, neg, iv))
            return NUM_INT;
        return to_double(s, n, dv) ? NUM_FLOAT : NUM_NO;
    }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && is_digit(s[i]))
            i++, nf++;
    }
    if (!nd && !nf)
        return NUM_NO;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e0 = i;
        while (i < n && is_digit(s[i]))
            i++;
        if (i == e0)
            return NUM_NO;
    }
    if (i != n)
        return NUM_NO;
    return to_double(s, n, dv) ? NUM_FLOAT : NUM_NO;
}

/* ---- CSV ----------------------------------------------------------------- */

static const uint8_t *field(const tfos__reader *r, uint32_t k, size_t *n)
{
    const size_t *off = (const size_t *)(void *)r->foff.p;
    *n = off[k + 1] - off[k];
    return r->fbuf.p + off[k];
}

/* Split the record s[0..n) into fields (unquoted, unescaped). */
static int csv_fields(tfos__reader *r, const uint8_t *s, size_t n)
{
    const uint8_t d = (uint8_t)r->o.csv_delim;
    size_t zero = 0;
    r->fbuf.len = r->foff.len = 0;
    r->nfields = 0;
    if (vec_add(&r->foff, &zero, sizeof zero))
        return rfail(r, TFOS_ENOMEM, "out of memory");
    size_t i = 0;
    for (;;) {
        if (r->nfields == MAX_ROW_VALUES)
            return rfail(r, TFOS_EPROTO, "line %llu: more than %d fields", (unsigned long long)r->line,
                         MAX_ROW_VALUES);
        r->nfields++;
        if (i < n && s[i] == '"') {
            i++;
            for (;;) {
                const uint8_t *q = i < n ? memchr(s + i, '"', n - i) : NULL;
                if (!q)
                    return rfail(r, TFOS_EPROTO, "line %llu, column %u: quoted field not closed",
                                 (unsigned long long)r->line, r->nfields);
                if (vec_add(&r->fbuf, s + i, (size_t)(q - (s + i))))
                    return rfail(r, TFOS_ENOMEM, "out of memory");
                i = (size_t)(q - s) + 1;
                if (i < n && s[i] == '"') {
                    if (vec_add(&r->fbuf, "\"", 1))
                        return rfail(r, TFOS_ENOMEM, "out of memory");
                    i++;
                    continue;
                }
                break;
            }
            if (i < n && s[i] != d)
                return rfail(r, TFOS_EPROTO, "line %llu, column %u: text after the closing quote of a quoted field",
                             (unsigned long long)r->line, r->nfields);
        } else {
            const uint8_t *q = i < n ? memchr(s + i, d, n - i) : NULL;
            size_t e = q ? (size_t)(q - s) : n;
            if (vec_add(&r->fbuf, s + i, e - i))
                return rfail(r, TFOS_ENOMEM, "out of memory");
            i = e;
        }
        size_t end = r->fbuf.len;
        if (vec_add(&r->foff, &end, sizeof end))
            return rfail(r, TFOS_ENOMEM, "out of memory");
        if (i >= n)
            return 0;
        i++; /* the delimiter */
    }
}

static int csv_schema(tfos__reader *r)
{
    int rc;
    if (r->header && r->nheader != r->nfields)
        return rfail(r, TFOS_EPROTO, "line %llu: %u fields, but the header (line %llu) names %u columns",
                     (unsigned long long)r->line, r->nfields, (unsigned long long)r->header_line, r->nheader);
    if ((rc = schema_alloc(r, r->nfields)))
        return rc;
    for (uint32_t j = 0; j < r->nfields; j++) {
        colb *c = &r->cols[j];
        if (r->header) {
            const size_t *ho = (const size_t *)(void *)r->hoff.p;
            if ((rc = col_set_name(r, j, r->hbuf.p + ho[j], ho[j + 1] - ho[j], r->header_line)))
                return rc;
        }
        size_t n;
        const uint8_t *s = field(r, j, &n);
        int64_t iv;
        double dv;
        switch (csv_number(s, n, &iv, &dv)) {
        case NUM_INT: c->kind = TFOS_TCB_FIXED, c->dtype = TFOS_TCB_I64; break;
        case NUM_FLOAT: c->kind = TFOS_TCB_FIXED, c->dtype = TFOS_TCB_F64; break;
        default: c->kind = TFOS_TCB_STR; break;
        }
    }
    vec_free(&r->hbuf);
    vec_free(&r->hoff);
    r->schema_line = r->line;
    return schema_done(r);
}

static int csv_convert(tfos__reader *r)
{
    char lab[80], sn[48];
    for (uint32_t j = 0; j < r->ncols; j++) {
        colb *c = &r->cols[j];
        size_t n;
        const uint8_t *s = field(r, j, &n);
        int64_t iv;
        double dv;
        int rc = 0;
        if (c->kind == TFOS_TCB_STR) {
            if (!tfos__utf8_valid(s, n))
                return rfail(r, TFOS_EPROTO, "line %llu, %s: not valid UTF-8", (unsigned long long)r->line,
                             col_label(r, j, lab));
            rc = add_var(r, c, s, n);
        } else {
            int kind = csv_number(s, n, &iv, &dv);
            if (c->dtype == TFOS_TCB_I64) {
                if (kind != NUM_INT)
                    return rfail(r, TFOS_EPROTO,
                                 "line %llu, %s: \"%s\" is not an integer, and the column holds integers (as on line "
                                 "%llu)",
                                 (unsigned long long)r->line, col_label(r, j, lab), snip(s, n, sn),
                                 (unsigned long long)r->schema_line);
                rc = add_fixed(r, c, &iv, 8);
            } else {
                if (kind == NUM_INT)
                    dv = (double)iv;
                else if (kind == NUM_EMPTY)
                    dv = NAN;
                else if (kind != NUM_FLOAT)
                    return rfail(r, TFOS_EPROTO,
                                 "line %llu, %s: \"%s\" is not a number, and the column holds numbers (as on line "
                                 "%llu)",
                                 (unsigned long long)r->line, col_label(r, j, lab), snip(s, n, sn),
                                 (unsigned long long)r->schema_line);
                rc = add_fixed(r, c, &dv, 8);
            }
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Header handling, once, before the first row. */
static int csv_start(tfos__reader *r)
{
    size_t c1 = 0, t1 = 0, c2 = 0, t2 = 0, from;
    uint64_t n1 = 0, n2 = 0;
    int rc;
    if (r->o.csv_header == TFOS_CSV_HEADER_NO)
        return 0;
    /* Skip blank lines before the first record. */
    for (;;) {
        if ((rc = scan_csv(r, 0, &c1, &t1, &n1)))
            return rc == TFOS_EEND ? 0 : rc;
        if (c1)
            break;
        consume(r, t1, n1);
    }
    bool is_header = true;
    if (r->o.csv_header == TFOS_CSV_HEADER_AUTO) {
        /* Look at the next record too, without consuming either. */
        from = t1;
        for (;;) {
            rc = scan_csv(r, from, &c2, &t2, &n2);
            if (rc == TFOS_EEND)
                break;
            if (rc)
                return rc;
            if (c2)
                break;
            from += t2;
        }
        if (rc == TFOS_EEND) {
            is_header = false;
        } else {
            int64_t iv;
            double dv;
            if ((rc = csv_fields(r, r->data + r->start + from, c2)))
                return rc;
            bool any_number = false;
            for (uint32_t k = 0; k < r->nfields; k++) {
                size_t n;
                const uint8_t *s = field(r, k, &n);
                int kind = csv_number(s, n, &iv, &dv);
                any_number |= kind == NUM_INT || kind == NUM_FLOAT;
            }
            if ((rc = csv_fields(r, r->data + r->start, c1)))
                return rc;
            for (uint32_t k = 0; k < r->nfields; k++) {
                size_t n;
                const uint8_t *s = field(r, k, &n);
                int kind = csv_number(s, n, &iv, &dv);
                if (kind != NUM_NO)
                    is_header = false;
            }
            is_header &= any_number;
        }
    }
    if (!is_header)
        return 0;
    if ((rc = csv_fields(r, r->data + r->start, c1)))
        return rc;
    /* Keep the names until the first data row sets up the columns. */
    if (vec_add(&r->hbuf, r->fbuf.p, r->fbuf.len) || vec_add(&r->hoff, r->foff.p, r->foff.len))
        return rfail(r, TFOS_ENOMEM, "out of memory");
    r->nheader = r->nfields;
    r->header = true;
    r->header_line = r->line;
    consume(r, t1, n1);
    return 0;
}

/* Stage the next CSV row: 0 (staged; *tlen bytes and *nl lines to take),
 * 1 (blank line), TFOS_EEND, or an error. */
static int csv_stage(tfos__reader *r, size_t *tlen, uint64_t *nl)
{
    size_t clen = 0;
    int rc = scan_csv(r, 0, &clen, tlen, nl);
    if (rc)
        return rc;
    if (clen == 0)
        return 1;
    if ((rc = csv_fields(r, r->data + r->start, clen)))
        return rc;
    if (!r->have_schema && (rc = csv_schema(r)))
        return rc;
    if (r->nfields != r->ncols)
        return rfail(r, TFOS_EPROTO, "line %llu: %u fields, but line %llu has %u", (unsigned long long)r->line,
                     r->nfields, (unsigned long long)(r->header ? r->header_line : r->schema_line), r->ncols);
    if ((rc = csv_convert(r)))
        rollback(r);
    return rc;
}

/* ---- JSON lines ------------------------------------------------------------ */

typedef struct jp {
    tfos__reader *r;
    const uint8_t *s;
    size_t n, i;
} jp;

static int jerr(jp *p, const char *what)
{
    return rfail(p->r, TFOS_EPROTO, "line %llu, byte %zu: %s", (unsigned long long)p->r->line, p->i + 1, what);
}

static void jws(jp *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\r' || p->s[p->i] == '\n'))
        p->i++;
}

static int hex4(jp *p, uint32_t *out)
{
    if (p->n - p->i < 4)
        return jerr(p, "\\u escape needs four hex digits");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = p->s[p->i + (size_t)k];
        uint32_t h = c >= '0' && c <= '9' ? (uint32_t)(c - '0')
                     : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (uint32_t)((c | 0x20) - 'a' + 10)
                                                               : 99;
        if (h == 99)
            return jerr(p, "\\u escape needs four hex digits");
        v = v << 4 | h;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* A string at p->i (the opening quote), its UTF-8 bytes appended to out.
 * The line was checked to be valid UTF-8 already. */
static int jstring(jp *p, vec *out)
{
    p->i++;
    for (;;) {
        size_t run = p->i;
        while (run < p->n && p->s[run] != '"' && p->s[run] != '\\' && p->s[run] >= 0x20)
            run++;
        if (vec_add(out, p->s + p->i, run - p->i))
            return rfail(p->r, TFOS_ENOMEM, "out of memory");
        p->i = run;
        if (p->i >= p->n)
            return jerr(p, "string not closed");
        uint8_t c = p->s[p->i];
        if (c == '"') {
            p->i++;
            return 0;
        }
        if (c < 0x20)
            return jerr(p, "control character in a string (escape it)");
        /* backslash */
        if (++p->i >= p->n)
            return jerr(p, "string not closed");
        c = p->s[p->i++];
        uint8_t one;
        switch (c) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            int rc = hex4(p, &cp);
            if (rc)
                return rc;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return jerr(p, "unpaired low surrogate in a \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                    return jerr(p, "unpaired high surrogate in a \\u escape");
                p->i += 2;
                if ((rc = hex4(p, &lo)))
                    return rc;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return jerr(p, "high surrogate not followed by a low surrogate");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            uint8_t u[4];
            size_t k;
            if (cp < 0x80) {
                u[0] = (uint8_t)cp, k = 1;
            } else if (cp < 0x800) {
                u[0] = (uint8_t)(0xc0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3f)), k = 2;
            } else if (cp < 0x10000) {
                u[0] = (uint8_t)(0xe0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
                u[2] = (uint8_t)(0x80 | (cp & 0x3f)), k = 3;
            } else {
                u[0] = (uint8_t)(0xf0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
                u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f)), u[3] = (uint8_t)(0x80 | (cp & 0x3f)), k = 4;
            }
            if (vec_add(out, u, k))
                return rfail(p->r, TFOS_ENOMEM, "out of memory");
            continue;
        }
        default:
            p->i--;
            return jerr(p, "unknown escape in a string");
        }
        if (vec_add(out, &one, 1))
            return rfail(p->r, TFOS_ENOMEM, "out of memory");
    }
}

static int jnumber(jp *p, jnum *out)
{
    size_t s0 = p->i, i = p->i;
    const uint8_t *s = p->s;
    bool neg = false, isf = false;
    if (i < p->n && s[i] == '-')
        neg = true, i++;
    size_t d0 = i;
    if (i < p->n && s[i] == '0')
        i++;
    else if (i < p->n && s[i] >= '1' && s[i] <= '9')
        while (i < p->n && is_digit(s[i]))
            i++;
    else
        return p->i = i, jerr(p, "bad number");
    size_t nd = i - d0;
    if (i < p->n && s[i] == '.') {
        i++;
        if (i >= p->n || !is_digit(s[i]))
            return p->i = i, jerr(p, "bad number: digits must follow '.'");
        while (i < p->n && is_digit(s[i]))
            i++;
        isf = true;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= p->n || !is_digit(s[i]))
            return p->i = i, jerr(p, "bad number: digits must follow the exponent");
        while (i < p->n && is_digit(s[i]))
            i++;
        isf = true;
    }
    out->isf = isf;
    if (!isf) {
        if (!digits_i64(s + d0, nd, neg, &out->i))
            return jerr(p, "integer out of the 64-bit range");
        out->d = (double)out->i;
    } else {
        if (i - s0 > NUM_MAX)
            return jerr(p, "number longer than 400 characters");
        errno = 0;
        if (!to_double(s + s0, i - s0, &out->d))
            return jerr(p, "bad number");
        if (errno == ERANGE && isinf(out->d))
            return jerr(p, "number out of the range of a double");
    }
    p->i = i;
    return 0;
}

typedef struct arrst {
    int ndim; /* -1 until the first number */
    uint32_t dims[TFOS_TCB_MAX_DIMS];
    bool any_float;
} arrst;

/* An array of numbers at p->i (its '['), `level` arrays deep (0: the
 * outermost). Numbers go to nbuf; dims are set by the first array closed at
 * each level and must match after. */
static int jarray(jp *p, int level, arrst *a)
{
    tfos__reader *r = p->r;
    p->i++;
    jws(p);
    if (p->i < p->n && p->s[p->i] == ']')
        return jerr(p, "empty array (every dimension must be at least 1)");
    uint64_t count = 0;
    for (;;) {
        jws(p);
        if (p->i >= p->n)
            return jerr(p, "array not closed");
        uint8_t c = p->s[p->i];
        if (c == '[') {
            if (level + 1 >= TFOS_TCB_MAX_DIMS)
                return jerr(p, "arrays nested more than 8 deep");
            if (a->ndim != -1 && level + 1 >= a->ndim)
                return jerr(p, "ragged array: an array where a number was expected");
            int rc = jarray(p, level + 1, a);
            if (rc)
                return rc;
        } else if (c == '-' || is_digit(c)) {
            if (a->ndim == -1)
                a->ndim = level + 1;
            else if (a->ndim != level + 1)
                return jerr(p, "ragged array: a number where an array was expected");
            jnum num;
            int rc = jnumber(p, &num);
            if (rc)
                return rc;
            a->any_float |= num.isf;
            if (vec_add(&r->nbuf, &num, sizeof num))
                return rfail(r, TFOS_ENOMEM, "out of memory");
        } else {
            return jerr(p, "arrays may hold only numbers or arrays of numbers");
        }
        count++;
        jws(p);
        if (p->i >= p->n)
            return jerr(p, "array not closed");
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] != ']')
            return jerr(p, "expected ',' or ']' in an array");
        p->i++;
        break;
    }
    if (count > UINT32_MAX)
        return jerr(p, "array too long");
    if (a->dims[level] == 0)
        a->dims[level] = (uint32_t)count;
    else if (a->dims[level] != count)
        return jerr(p, "ragged array: rows of different lengths");
    return 0;
}

static bool literal(jp *p, const char *word)
{
    size_t k = strlen(word);
    if (p->n - p->i < k || memcmp(p->s + p->i, word, k))
        return false;
    p->i += k;
    return true;
}

static int jvalue(jp *p, jval *v)
{
    tfos__reader *r = p->r;
    if (p->i >= p->n)
        return jerr(p, "value expected before the end of the line");
    uint8_t c = p->s[p->i];
    if (c == '"') {
        v->type = J_STR;
        v->s_off = r->sbuf.len;
        int rc = jstring(p, &r->sbuf);
        v->s_len = r->sbuf.len - v->s_off;
        return rc;
    }
    if (c == '-' || is_digit(c)) {
        jnum num;
        int rc = jnumber(p, &num);
        v->type = num.isf ? J_FLOAT : J_INT;
        v->i = num.i;
        v->d = num.d;
        return rc;
    }
    if (c == '[') {
        arrst a = {.ndim = -1};
        v->type = J_ARR;
        v->n_off = r->nbuf.len / sizeof(jnum);
        int rc = jarray(p, 0, &a);
        if (rc)
            return rc;
        v->n_cnt = r->nbuf.len / sizeof(jnum) - v->n_off;
        v->ndim = (uint8_t)a.ndim;
        memcpy(v->shape, a.dims, sizeof v->shape);
        v->arr_float = a.any_float;
        return 0;
    }
    if (literal(p, "true") || literal(p, "false")) {
        v->type = J_BOOL;
        v->b = c == 't';
        return 0;
    }
    if (literal(p, "null")) {
        p->i -= 4;
        return jerr(p, "null is not supported (every value needs a type)");
    }
    if (c == '{')
        return jerr(p, "objects inside a row are not supported");
    return jerr(p, "unexpected character (expected a value)");
}

static jval *jv_new(tfos__reader *r)
{
    if (vec_reserve(&r->jv, sizeof(jval)))
        return NULL;
    jval *v = (jval *)(void *)(r->jv.p + r->jv.len);
    memset(v, 0, sizeof *v);
    r->jv.len += sizeof(jval);
    r->njv++;
    return v;
}

/* Parse one line into r->jv; *kind gets ROWS_ARRAYS or ROWS_OBJECTS. */
static int jrow(tfos__reader *r, const uint8_t *s, size_t n, int *kind)
{
    jp p = {r, s, n, 0};
    r->jv.len = r->sbuf.len = r->nbuf.len = 0;
    r->njv = 0;
    jws(&p);
    uint8_t open = p.s[p.i]; /* the line is not blank */
    if (open != '[' && open != '{')
        return jerr(&p, "a line must hold a JSON array or object");
    *kind = open == '[' ? ROWS_ARRAYS : ROWS_OBJECTS;
    uint8_t close = open == '[' ? ']' : '}';
    p.i++;
    jws(&p);
    if (p.i < n && p.s[p.i] == close)
        return jerr(&p, "a row with no values");
    for (;;) {
        if (r->njv == MAX_ROW_VALUES)
            return jerr(&p, "more than 4096 values in a row");
        jval *v = jv_new(r);
        if (!v)
            return rfail(r, TFOS_ENOMEM, "out of memory");
        jws(&p);
        int rc;
        if (open == '{') {
            if (p.i >= n || p.s[p.i] != '"')
                return jerr(&p, "expected a key in quotes");
            size_t k0 = r->sbuf.len;
            if ((rc = jstring(&p, &r->sbuf)))
                return rc;
            v->key_off = k0;
            v->key_len = r->sbuf.len - k0;
            jws(&p);
            if (p.i >= n || p.s[p.i] != ':')
                return jerr(&p, "expected ':' after a key");
            p.i++;
            jws(&p);
        }
        if ((rc = jvalue(&p, v)))
            return rc;
        jws(&p);
        if (p.i >= n)
            return jerr(&p, open == '[' ? "array not closed" : "object not closed");
        if (p.s[p.i] == ',') {
            p.i++;
            continue;
        }
        if (p.s[p.i] != close)
            return jerr(&p, open == '[' ? "expected ',' or ']'" : "expected ',' or '}'");
        p.i++;
        break;
    }
    jws(&p);
    if (p.i != n)
        return jerr(&p, "text after the JSON value");
    return 0;
}

static const char *jtype_name(const jval *v)
{
    switch (v->type) {
    case J_INT: return "an integer";
    case J_FLOAT: return "a float";
    case J_BOOL: return "a boolean";
    case J_STR: return "a string";
    default: return "an array";
    }
}

static int jschema(tfos__reader *r, int kind)
{
    int rc;
    if ((rc = schema_alloc(r, r->njv)))
        return rc;
    const jval *vs = (const jval *)(void *)r->jv.p;
    for (uint32_t j = 0; j < r->njv; j++) {
        const jval *v = &vs[j];
        colb *c = &r->cols[j];
        if (kind == ROWS_OBJECTS) {
            for (uint32_t k = 0; k < j; k++)
                if (vs[k].key_len == v->key_len && !memcmp(r->sbuf.p + vs[k].key_off, r->sbuf.p + v->key_off, v->key_len))
                    return rfail(r, TFOS_EPROTO, "line %llu: duplicate key \"%s\"", (unsigned long long)r->line,
                                 snip(r->sbuf.p + v->key_off, v->key_len, (char[48]){0}));
            if ((rc = col_set_name(r, j, r->sbuf.p + v->key_off, v->key_len, r->line)))
                return rc;
        }
        c->kind = TFOS_TCB_FIXED;
        switch (v->type) {
        case J_INT: c->dtype = TFOS_TCB_I64; break;
        case J_FLOAT: c->dtype = TFOS_TCB_F64; break;
        case J_BOOL: c->dtype = TFOS_TCB_BOOL; break;
        case J_STR: c->kind = TFOS_TCB_STR; break;
        default:
            c->dtype = v->arr_float ? TFOS_TCB_F64 : TFOS_TCB_I64;
            c->ndim = v->ndim;
            memcpy(c->shape, v->shape, sizeof c->shape);
            break;
        }
    }
    r->row_kind = kind;
    r->schema_line = r->line;
    return schema_done(r);
}

static int jconvert_one(tfos__reader *r, uint32_t j, const jval *v)
{
    colb *c = &r->cols[j];
    char lab[80], s1[120], s2[120];
    unsigned long long line = (unsigned long long)r->line, first = (unsigned long long)r->schema_line;
    if (c->kind == TFOS_TCB_STR) {
        if (v->type != J_STR)
            return rfail(r, TFOS_EPROTO, "line %llu, %s: %s where line %llu has a string", line,
                         col_label(r, j, lab), jtype_name(v), first);
        return add_var(r, c, r->sbuf.p + v->s_off, v->s_len);
    }
    if (c->ndim == 0) {
        if (c->dtype == TFOS_TCB_BOOL) {
            if (v->type != J_BOOL)
                return rfail(r, TFOS_EPROTO, "line %llu, %s: %s where line %llu has a boolean", line,
                             col_label(r, j, lab), jtype_name(v), first);
            uint8_t b = v->b;
            return add_fixed(r, c, &b, 1);
        }
        if (c->dtype == TFOS_TCB_I64) {
            if (v->type != J_INT)
                return rfail(r, TFOS_EPROTO, "line %llu, %s: %s where line %llu has an integer%s", line,
                             col_label(r, j, lab), jtype_name(v), first,
                             v->type == J_FLOAT ? " (integer columns stay integers: write the first row's "
                                                  "value as a float, e.g. 1.0)"
                                                : "");
            return add_fixed(r, c, &v->i, 8);
        }
        if (v->type != J_INT && v->type != J_FLOAT)
            return rfail(r, TFOS_EPROTO, "line %llu, %s: %s where line %llu has a number", line,
                         col_label(r, j, lab), jtype_name(v), first);
        return add_fixed(r, c, &v->d, 8);
    }
    if (v->type != J_ARR)
        return rfail(r, TFOS_EPROTO, "line %llu, %s: %s where line %llu has an array of shape %s", line,
                     col_label(r, j, lab), jtype_name(v), first, fmt_shape(c->ndim, c->shape, s1));
    if (v->ndim != c->ndim || memcmp(v->shape, c->shape, sizeof c->shape))
        return rfail(r, TFOS_EPROTO, "line %llu, %s: array of shape %s where line %llu has shape %s", line,
                     col_label(r, j, lab), fmt_shape(v->ndim, v->shape, s2), first, fmt_shape(c->ndim, c->shape, s1));
    if (c->dtype == TFOS_TCB_I64 && v->arr_float)
        return rfail(r, TFOS_EPROTO, "line %llu, %s: floats in an array where line %llu has only integers", line,
                     col_label(r, j, lab), first);
    if (vec_reserve(&c->data, v->n_cnt * 8))
        return rfail(r, TFOS_ENOMEM, "out of memory");
    const jnum *nums = (const jnum *)(void *)r->nbuf.p + v->n_off;
    uint8_t *dst = c->data.p + c->data.len;
    for (size_t k = 0; k < v->n_cnt; k++) {
        if (c->dtype == TFOS_TCB_I64)
            memcpy(dst + 8 * k, &nums[k].i, 8);
        else
            memcpy(dst + 8 * k, &nums[k].d, 8);
    }
    c->data.len += v->n_cnt * 8;
    return 0;
}

static int jconvert(tfos__reader *r, int kind)
{
    const jval *vs = (const jval *)(void *)r->jv.p;
    char sn[48];
    unsigned long long line = (unsigned long long)r->line, first = (unsigned long long)r->schema_line;
    int rc;
    if (kind != r->row_kind)
        return rfail(r, TFOS_EPROTO, "line %llu: an %s, but line %llu is an %s", line,
                     kind == ROWS_ARRAYS ? "array" : "object", first,
                     r->row_kind == ROWS_ARRAYS ? "array" : "object");
    if (kind == ROWS_ARRAYS) {
        if (r->njv != r->ncols)
            return rfail(r, TFOS_EPROTO, "line %llu: %u values, but line %llu has %u", line, r->njv, first,
                         r->ncols);
        for (uint32_t j = 0; j < r->ncols; j++)
            if ((rc = jconvert_one(r, j, &vs[j])))
                return rc;
        return 0;
    }
    memset(r->seen, 0, r->ncols);
    for (uint32_t k = 0; k < r->njv; k++) {
        const jval *v = &vs[k];
        const uint8_t *key = r->sbuf.p + v->key_off;
        uint32_t j = k;
        /* Usually the keys come in the first row's order. */
        if (j >= r->ncols || r->cols[j].name_len != v->key_len || memcmp(r->cols[j].name, key, v->key_len)) {
            for (j = 0; j < r->ncols; j++)
                if (r->cols[j].name_len == v->key_len && !memcmp(r->cols[j].name, key, v->key_len))
                    break;
            if (j == r->ncols)
                return rfail(r, TFOS_EPROTO, "line %llu: key \"%s\" is not among the keys of line %llu", line,
                             snip(key, v->key_len, sn), first);
        }
        if (r->seen[j])
            return rfail(r, TFOS_EPROTO, "line %llu: duplicate key \"%s\"", line, snip(key, v->key_len, sn));
        r->seen[j] = 1;
        if ((rc = jconvert_one(r, j, v)))
            return rc;
    }
    for (uint32_t j = 0; j < r->ncols; j++)
        if (!r->seen[j])
            return rfail(r, TFOS_EPROTO, "line %llu: key \"%s\" is missing (line %llu has it)", line,
                         snip((const uint8_t *)r->cols[j].name, r->cols[j].name_len, sn), first);
    return 0;
}

static int jsonl_stage(tfos__reader *r, size_t *tlen, uint64_t *nl)
{
    size_t clen = 0;
    int rc = scan_line(r, 0, &clen, tlen, nl);
    if (rc)
        return rc;
    const uint8_t *s = r->data + r->start;
    size_t i = 0;
    while (i < clen && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
        i++;
    if (i == clen)
        return 1;
    if (!tfos__utf8_valid(s, clen))
        return rfail(r, TFOS_EPROTO, "line %llu: not valid UTF-8", (unsigned long long)r->line);
    int kind = 0;
    if ((rc = jrow(r, s, clen, &kind)))
        return rc;
    if (!r->have_schema && (rc = jschema(r, kind)))
        return rc;
    if ((rc = jconvert(r, kind)))
        rollback(r);
    return rc;
}

/* ---- text batches ------------------------------------------------------------ */

static int text_next(tfos__reader *r)
{
    int rc = 0;
    if (!r->started) {
        r->started = true;
        if ((rc = skip_bom(r)))
            return rc;
        if (r->format == TFOS_READER_CSV && (rc = csv_start(r)))
            return rc;
    }
    uint32_t rows = 0;
    while (rows < r->o.batch_rows) {
        size_t tlen = 0;
        uint64_t nl = 0;
        rc = r->format == TFOS_READER_CSV ? csv_stage(r, &tlen, &nl) : jsonl_stage(r, &tlen, &nl);
        if (rc == 1) {
            consume(r, tlen, nl);
            rc = 0;
            continue;
        }
        if (rc)
            break;
        if (r->o.max_batch_bytes && staged_bytes(r) > r->o.max_batch_bytes) {
            rollback(r);
            if (rows == 0)
                rc = rfail(r, TFOS_ETOOBIG, "line %llu: the row alone is over the %llu-byte batch limit",
                           (unsigned long long)r->line, (unsigned long long)r->o.max_batch_bytes);
            break;
        }
        commit(r);
        consume(r, tlen, nl);
        rows++;
    }
    if (rc && !rows)
        return rc;
    if (rc)
        r->final_rc = rc; /* the rows before it go out first */
    if ((rc = emit_text(r, rows)))
        return rc;
    r->row += rows;
    return 0;
}

/* ---- NPY --------------------------------------------------------------------- */

typedef struct pyp {
    const uint8_t *s;
    size_t n, i;
} pyp;

static void pws(pyp *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static bool pstr(pyp *p, const uint8_t **s, size_t *n)
{
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
        return false;
    uint8_t q = p->s[p->i++];
    size_t s0 = p->i;
    while (p->i < p->n && p->s[p->i] != q) {
        if (p->s[p->i] == '\\')
            return false;
        p->i++;
    }
    if (p->i >= p->n)
        return false;
    *s = p->s + s0;
    *n = p->i - s0;
    p->i++;
    return true;
}

static bool pword(pyp *p, const char *w)
{
    size_t k = strlen(w);
    if (p->n - p->i < k || memcmp(p->s + p->i, w, k))
        return false;
    p->i += k;
    return true;
}

static int npy_header(tfos__reader *r, const uint8_t *h, size_t hn, uint64_t *shape, int *ndim, bool *fortran,
                      const uint8_t **descr, size_t *descr_len)
{
    pyp p = {h, hn, 0};
    unsigned seen = 0;
    pws(&p);
    if (!pword(&p, "{"))
        return rfail(r, TFOS_EPROTO, "header is not a dict");
    for (;;) {
        pws(&p);
        if (pword(&p, "}"))
            break;
        const uint8_t *k;
        size_t kn;
        if (!pstr(&p, &k, &kn))
            return rfail(r, TFOS_EPROTO, "header: expected a quoted key at byte %zu of the header", p.i);
        pws(&p);
        if (!pword(&p, ":"))
            return rfail(r, TFOS_EPROTO, "header: expected ':' at byte %zu of the header", p.i);
        pws(&p);
        unsigned bit;
        if (kn == 5 && !memcmp(k, "descr", 5)) {
            bit = 1;
            if (p.i < p.n && p.s[p.i] == '[')
                return rfail(r, TFOS_EPROTO, "structured dtypes (descr is a list) are not supported");
            if (!pstr(&p, descr, descr_len))
                return rfail(r, TFOS_EPROTO, "header: 'descr' is not a plain string");
        } else if (kn == 13 && !memcmp(k, "fortran_order", 13)) {
            bit = 2;
            if (pword(&p, "True"))
                *fortran = true;
            else if (pword(&p, "False"))
                *fortran = false;
            else
                return rfail(r, TFOS_EPROTO, "header: 'fortran_order' is not True or False");
        } else if (kn == 5 && !memcmp(k, "shape", 5)) {
            bit = 4;
            if (!pword(&p, "("))
                return rfail(r, TFOS_EPROTO, "header: 'shape' is not a tuple");
            *ndim = 0;
            for (;;) {
                pws(&p);
                if (pword(&p, ")"))
                    break;
                if (*ndim == TFOS_TCB_MAX_DIMS + 1)
                    return rfail(r, TFOS_EPROTO, "array has more than %d dimensions", TFOS_TCB_MAX_DIMS + 1);
                size_t d0 = p.i;
                uint64_t v = 0;
                while (p.i < p.n && is_digit(p.s[p.i])) {
                    if (v > (((uint64_t)1 << 62) - 9) / 10)
                        return rfail(r, TFOS_EPROTO, "header: a dimension of 'shape' is too large");
                    v = v * 10 + (uint64_t)(p.s[p.i++] - '0');
                }
                if (p.i == d0)
                    return rfail(r, TFOS_EPROTO, "header: 'shape' holds something other than integers");
                pword(&p, "L"); /* written by Python 2 */
                shape[(*ndim)++] = v;
                pws(&p);
                if (pword(&p, ","))
                    continue;
                if (pword(&p, ")"))
                    break;
                return rfail(r, TFOS_EPROTO, "header: 'shape' is not a tuple of integers");
            }
        } else {
            char sn[48];
            return rfail(r, TFOS_EPROTO, "header: unexpected key '%s'", snip(k, kn, sn));
        }
        if (seen & bit)
            return rfail(r, TFOS_EPROTO, "header: a key appears twice");
        seen |= bit;
        pws(&p);
        if (pword(&p, ","))
            continue;
        if (pword(&p, "}"))
            break;
        return rfail(r, TFOS_EPROTO, "header: expected ',' or '}' at byte %zu of the header", p.i);
    }
    pws(&p);
    if (p.i != p.n)
        return rfail(r, TFOS_EPROTO, "header: text after the dict");
    if (seen != 7)
        return rfail(r, TFOS_EPROTO, "header lacks '%s'", !(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape");
    return 0;
}

static int npy_open(tfos__reader *r)
{
    uint8_t pre[12];
    int64_t got = src_read(r, pre, 10);
    if (got < 0)
        return (int)got;
    if (got == 0) {
        r->npy_rows = 0; /* an empty file: no rows */
        return 0;
    }
    if (got < 8 || memcmp(pre, "\x93NUMPY", 6))
        return rfail(r, TFOS_EPROTO, "not a .npy file (bad magic)");
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return rfail(r, TFOS_EPROTO, ".npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)", major, minor);
    if (got < 10)
        return rfail(r, TFOS_EPROTO, "truncated: the file ends inside the header (byte %lld)", (long long)got);
    size_t hn, hstart;
    if (major == 1) {
        hn = (size_t)pre[8] | (size_t)pre[9] << 8;
        hstart = 10;
    } else {
        int64_t g2 = src_read(r, pre + 10, 2);
        if (g2 < 0)
            return (int)g2;
        if (g2 < 2)
            return rfail(r, TFOS_EPROTO, "truncated: the file ends inside the header (byte %lld)",
                         (long long)(10 + g2));
        hn = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        hstart = 12;
    }
    if (hn > NPY_MAX_HEADER)
        return rfail(r, TFOS_EPROTO, "header of %zu bytes is over the %zu-byte limit", hn, NPY_MAX_HEADER);
    uint8_t *h = malloc(hn ? hn : 1);
    if (!h)
        return rfail(r, TFOS_ENOMEM, "out of memory");
    int rc = 0;
    got = src_read(r, h, hn);
    if (got < 0) {
        rc = (int)got;
        goto out;
    }
    if ((size_t)got < hn) {
        rc = rfail(r, TFOS_EPROTO, "truncated: the file ends inside the header (byte %zu of %zu)",
                   hstart + (size_t)got, hstart + hn);
        goto out;
    }
    uint64_t shape[TFOS_TCB_MAX_DIMS + 1];
    int ndim = -1;
    bool fortran = false;
    const uint8_t *descr = NULL;
    size_t dn = 0;
    if ((rc = npy_header(r, h, hn, shape, &ndim, &fortran, &descr, &dn)))
        goto out;
    char sn[48];
    int dt = tfos__tcb_dtype_from_numpy((const char *)descr, dn);
    if (!dt) {
        rc = rfail(r, TFOS_EPROTO, "dtype '%s' is not supported%s", snip(descr, dn, sn),
                   dn && descr[0] == '>' ? " (big-endian: save it as little-endian, e.g. a.astype('<f4'))"
                                         : " (bool, int8-64, uint8-64, float32, float64)");
        goto out;
    }
    if (ndim == 0) {
        rc = rfail(r, TFOS_EPROTO, "a 0-d array has no rows (save it with shape (1,))");
        goto out;
    }
    int big = 0;
    for (int d = 0; d < ndim; d++)
        big += shape[d] > 1;
    if (fortran && big > 1) {
        rc = rfail(r, TFOS_EPROTO, "fortran_order is True (column-major data) which is not supported: save "
                                   "np.ascontiguousarray(a)");
        goto out;
    }
    uint64_t rb = tfos__tcb_dtype_size(dt);
    for (int d = 1; d < ndim; d++) {
        if (shape[d] == 0 || shape[d] > UINT32_MAX) {
            rc = rfail(r, TFOS_EPROTO, "dimension %d is %llu (rows need dimensions from 1 to 2^32-1)", d,
                       (unsigned long long)shape[d]);
            goto out;
        }
        if (rb > TFOS_TCB_LIMIT / shape[d]) {
            rc = rfail(r, TFOS_ETOOBIG, "one row is over 2^40 bytes");
            goto out;
        }
        rb *= shape[d];
        r->npy_shape[d - 1] = (uint32_t)shape[d];
    }
    r->npy_dtype = (uint8_t)dt;
    r->npy_ndim = (uint8_t)(ndim - 1);
    r->npy_rows = shape[0];
    r->npy_row_bytes = rb;
    r->npy_data_start = hstart + hn;
    /* Check the size up front where it is known. */
    uint64_t size = UINT64_MAX;
    struct stat st;
    if (r->fd < 0)
        size = r->mem_len;
    else if (fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode))
        size = (uint64_t)st.st_size;
    if (size != UINT64_MAX) {
        uint64_t have = size >= r->npy_data_start ? size - r->npy_data_start : 0;
        if (r->npy_rows > have / rb)
            rc = rfail(r, TFOS_EPROTO,
                       "truncated: %llu rows of %llu bytes need %llu bytes after the %llu-byte header, the file has "
                       "%llu (it ends in row %llu, at byte %llu)",
                       (unsigned long long)r->npy_rows, (unsigned long long)rb,
                       r->npy_rows > UINT64_MAX / rb ? 0ull : (unsigned long long)(r->npy_rows * rb),
                       (unsigned long long)r->npy_data_start, (unsigned long long)have,
                       (unsigned long long)(have / rb), (unsigned long long)size);
    }
out:
    free(h);
    return rc;
}

static int npy_next(tfos__reader *r)
{
    if (r->row >= r->npy_rows)
        return TFOS_EEND;
    uint64_t rows = r->npy_rows - r->row;
    if (rows > r->o.batch_rows)
        rows = r->o.batch_rows;
    tfos__tcb_col *c = &r->tcols[0];
    memset(c, 0, sizeof *c);
    c->kind = TFOS_TCB_FIXED;
    c->dtype = r->npy_dtype;
    c->ndim = r->npy_ndim;
    memcpy(c->shape, r->npy_shape, sizeof c->shape);
    tfos__tcb_enc e;
    char why[200];
    int rc;
    if (r->o.max_batch_bytes) {
        if ((rc = tfos__tcb_layout(&e, 0, 1, c, TFOS_TCB_FLAT_ROWS, why, sizeof why)))
            return rfail(r, rc, "%s", why);
        uint64_t room = r->o.max_batch_bytes & ~(uint64_t)(TFOS_TCB_ALIGN - 1);
        uint64_t fit = room > c->data_off ? (room - c->data_off) / r->npy_row_bytes : 0;
        if (fit == 0)
            return rfail(r, TFOS_ETOOBIG, "row %llu: one row of %llu bytes is over the %llu-byte batch limit",
                         (unsigned long long)r->row, (unsigned long long)r->npy_row_bytes,
                         (unsigned long long)r->o.max_batch_bytes);
        if (rows > fit)
            rows = fit;
    }
    if ((rc = tfos__tcb_layout(&e, (uint32_t)rows, 1, c, TFOS_TCB_FLAT_ROWS, why, sizeof why)))
        return rfail(r, rc, "row %llu: %s (use fewer rows per batch)", (unsigned long long)r->row, why);
    if ((rc = ensure_out(r, e.total)))
        return rc;
    tfos__tcb_begin(&e, r->out, r->out_cap);
    int64_t got = src_read(r, tfos__tcb_data(&e, 0), (size_t)c->data_len);
    if (got < 0)
        return (int)got;
    if ((uint64_t)got < c->data_len) {
        uint64_t at = r->npy_data_start + r->row * r->npy_row_bytes + (uint64_t)got;
        return rfail(r, TFOS_EPROTO, "truncated: the data ends at byte %llu, in row %llu of %llu",
                     (unsigned long long)at, (unsigned long long)(r->row + (uint64_t)got / r->npy_row_bytes),
                     (unsigned long long)r->npy_rows);
    }
    r->out_len = (size_t)e.total;
    r->row += rows;
    return 0;
}

/* ---- open / next / close ------------------------------------------------------- */

static int pick_format(const char *name)
{
    const char *dot = name ? strrchr(name, '.') : NULL;
    if (!dot)
        return 0;
    if (!strcasecmp(dot, ".csv") || !strcasecmp(dot, ".tsv"))
        return TFOS_READER_CSV;
    if (!strcasecmp(dot, ".jsonl") || !strcasecmp(dot, ".ndjson") || !strcasecmp(dot, ".json"))
        return TFOS_READER_JSONL;
    if (!strcasecmp(dot, ".npy"))
        return TFOS_READER_NPY;
    return 0;
}

static int reader_new(tfos__reader **out, const char *name, const tfos__reader_opts *opts, char *err,
                      size_t errlen)
{
    tfos__reader *r = calloc(1, sizeof *r);
    if (!r) {
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return TFOS_ENOMEM;
    }
    r->fd = -1;
    r->line = 1;
    if (opts)
        r->o = *opts;
    r->name = strdup(name ? name : "(input)");
    int rc = 0;
    if (!r->name) {
        rc = TFOS_ENOMEM;
        snprintf(r->msg, sizeof r->msg, "out of memory");
        goto fail;
    }
    r->format = r->o.format ? r->o.format : pick_format(name);
    if (r->format < TFOS_READER_CSV || r->format > TFOS_READER_NPY) {
        if (r->o.format)
            rc = rfail(r, TFOS_EINVAL, "unknown format %d", r->o.format);
        else
            rc = rfail(r, TFOS_EINVAL, "cannot tell the format from the name (.csv .tsv .jsonl .ndjson .json "
                                       ".npy): set it");
        goto fail;
    }
    if (!r->o.batch_rows)
        r->o.batch_rows = TFOS_READER_DEFAULT_ROWS;
    if (!r->o.max_line)
        r->o.max_line = TFOS_READER_DEFAULT_MAX_LINE;
    if (!r->o.csv_delim) {
        const char *dot = name ? strrchr(name, '.') : NULL;
        r->o.csv_delim = dot && !strcasecmp(dot, ".tsv") ? '\t' : ',';
    }
    if (r->o.csv_delim == '"' || r->o.csv_delim == '\r' || r->o.csv_delim == '\n') {
        rc = rfail(r, TFOS_EINVAL, "the CSV delimiter cannot be a quote, CR or LF");
        goto fail;
    }
    if (r->o.csv_header < TFOS_CSV_HEADER_AUTO || r->o.csv_header > TFOS_CSV_HEADER_NO) {
        rc = rfail(r, TFOS_EINVAL, "unknown csv_header %d", r->o.csv_header);
        goto fail;
    }
    if (r->format == TFOS_READER_NPY && (rc = schema_alloc(r, 1)))
        goto fail;
    *out = r;
    return 0;
fail:
    copy_msg(r, err, errlen);
    tfos__reader_close(r);
    return rc;
}

static int reader_start(tfos__reader *r, char *err, size_t errlen)
{
    int rc = 0;
    if (r->format == TFOS_READER_NPY) {
        rc = npy_open(r);
    } else if (r->fd >= 0) {
        r->cap = CHUNK;
        r->own = malloc(r->cap);
        r->data = r->own;
        if (!r->own)
            rc = rfail(r, TFOS_ENOMEM, "out of memory");
    }
    if (rc) {
        copy_msg(r, err, errlen);
        tfos__reader_close(r);
    }
    return rc;
}

int tfos__reader_open(tfos__reader **out, const char *path, const tfos__reader_opts *opts, char *err, size_t errlen)
{
    tfos__reader *r;
    int rc = reader_new(&r, path, opts, err, errlen);
    if (rc)
        return rc;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        rc = rfail(r, TFOS_ESYS, "cannot open: %s", strerror(errno));
        copy_msg(r, err, errlen);
        int saved = errno;
        tfos__reader_close(r);
        errno = saved;
        return rc;
    }
    if ((rc = reader_start(r, err, errlen)))
        return rc;
    *out = r;
    return 0;
}

int tfos__reader_open_mem(tfos__reader **out, const char *name, const void *data, size_t len,
                          const tfos__reader_opts *opts, char *err, size_t errlen)
{
    tfos__reader *r;
    int rc = reader_new(&r, name, opts, err, errlen);
    if (rc)
        return rc;
    r->mem = data;
    r->mem_len = len;
    r->data = data;
    r->end = len;
    r->eof = true;
    if ((rc = reader_start(r, err, errlen)))
        return rc;
    *out = r;
    return 0;
}

int tfos__reader_next(tfos__reader *r, const void **batch, size_t *len, uint64_t *first_row, char *err,
                      size_t errlen)
{
    if (r->final_rc) {
        if (r->final_rc != TFOS_EEND)
            copy_msg(r, err, errlen);
        return r->final_rc;
    }
    uint64_t first = r->row;
    int rc = r->format == TFOS_READER_NPY ? npy_next(r) : text_next(r);
    if (rc) {
        r->final_rc = rc;
        if (rc != TFOS_EEND)
            copy_msg(r, err, errlen);
        return rc;
    }
    *batch = r->out;
    *len = r->out_len;
    *first_row = first;
    return 0;
}

void tfos__reader_close(tfos__reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    for (uint32_t j = 0; r->cols && j < r->ncols; j++) {
        free(r->cols[j].name);
        vec_free(&r->cols[j].data);
        vec_free(&r->cols[j].offs);
    }
    free(r->cols);
    free(r->tcols);
    free(r->seen);
    vec_free(&r->fbuf);
    vec_free(&r->foff);
    vec_free(&r->hbuf);
    vec_free(&r->hoff);
    vec_free(&r->jv);
    vec_free(&r->sbuf);
    vec_free(&r->nbuf);
    free(r->own);
    free(r->out);
    free(r->name);
    free(r);
}
