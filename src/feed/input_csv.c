/* input_csv.c: the CSV reader of `tfos run --input` (RFC 4180; semantics in
 * input.h), behind tfos__input_csv_ops. Records are read with stdio, typed
 * by the first data row, and appended to a batch builder (core/batchbuild.h).
 * The first two records are read before anything is typed: the second
 * decides whether the first is a header, and gives a type to a column whose
 * first value is empty. */
#include "core/log.h"
#include "feed/input.h"
#include "feed/input_ops.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <math.h>
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
    unsigned char quoted[MAX_COLS + 1];
    int n;
    uint64_t line;
} record;

typedef struct csv_reader {
    tfos__input_text t;  /* first: the path, the stream, the builder */
    uint64_t line;       /* physical line number of the next character */
    int typed, csv_header;
    int delim, delim_given;
    record cur, pending; /* pending: the row read ahead (header detection, types of empty values) */
    int have_pending;
} csv_reader;

/* ---- numbers --------------------------------------------------------------
 * A number is written in decimal: [+-]digits[.digits][(e|E)[+-]digits] (or
 * .digits), or inf, infinity, nan in any case; spaces and tabs around it are
 * allowed. Nothing else is a number: not 0x10, not 1_000, not "1,5". */

enum { NUM_NONE = 0, NUM_EMPTY, NUM_INT, NUM_FLOAT };

typedef struct number {
    int kind;     /* NUM_* */
    int int_ok;   /* NUM_INT: fits int64 */
    int float_ok; /* NUM_INT or NUM_FLOAT: finite as float64, or written as inf */
    int64_t i;
    double d;
} number;

static int lower_eq(const char *s, size_t n, const char *word)
{
    if (strlen(word) != n)
        return 0;
    for (size_t k = 0; k < n; k++)
        if ((s[k] | 0x20) != word[k])
            return 0;
    return 1;
}

static void parse_number(const char *s, size_t n, number *v)
{
    memset(v, 0, sizeof *v);
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (!n) {
        v->kind = NUM_EMPTY;
        return;
    }
    size_t i = (*s == '-' || *s == '+') ? 1 : 0;
    int word = lower_eq(s + i, n - i, "inf") || lower_eq(s + i, n - i, "infinity") || lower_eq(s + i, n - i, "nan");
    int integer = 1;
    if (!word) {
        size_t digits = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, digits++;
        if (i < n && s[i] == '.') {
            integer = 0;
            for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
                digits++;
        }
        if (!digits)
            return;
        if (i < n && (s[i] == 'e' || s[i] == 'E')) {
            integer = 0;
            i++;
            if (i < n && (s[i] == '-' || s[i] == '+'))
                i++;
            size_t exp = 0;
            while (i < n && s[i] >= '0' && s[i] <= '9')
                i++, exp++;
            if (!exp)
                return;
        }
        if (i != n)
            return;
    }
    char small[128], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return; /* out of memory: taken as text, which a number column refuses */
    memcpy(buf, s, n);
    buf[n] = 0;
    v->kind = word || !integer ? NUM_FLOAT : NUM_INT;
    if (v->kind == NUM_INT) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        v->int_ok = errno == 0;
        v->i = x;
    }
    errno = 0;
    v->d = strtod(buf, NULL);
    v->float_ok = word || !(errno == ERANGE && isinf(v->d)); /* underflow to 0 or a subnormal is fine */
    if (buf != small)
        free(buf);
}

static int is_number(const record *r, int i)
{
    number v;
    parse_number(r->buf + r->start[i], r->flen[i], &v);
    return v.kind == NUM_INT || v.kind == NUM_FLOAT;
}

static int is_text(const record *r, int i)
{
    number v;
    parse_number(r->buf + r->start[i], r->flen[i], &v);
    return v.kind == NUM_NONE;
}

/* ---- records ------------------------------------------------------------- */

/* Read one record (handles quotes and newlines inside quotes). 0, TFOS_EEND
 * at end of file, TFOS_EPROTO for a bad quote, TFOS_ETOOBIG, or the read
 * error (TFOS_ESTOPPED, TFOS_ESYS). */
static int csv_read(csv_reader *in, record *r, char *err, size_t errlen)
{
    FILE *f = in->t.f;
    const int delim = in->delim;
    r->len = 0;
    r->n = 0;
    r->line = in->line;
    if (!r->buf) { /* never NULL, even for a record of empty fields */
        if (!(r->buf = malloc(4096)))
            return TFOS_ENOMEM;
        r->cap = 4096;
    }
    int ch = getc_unlocked(f);
    if (ch == EOF)
        return tfos__input_text_eof(&in->t, in->line, err, errlen);
    for (;;) {
        /* one field */
        if (r->n >= MAX_COLS)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: more than %d fields", in->t.path,
                        (unsigned long long)r->line, MAX_COLS);
        r->start[r->n] = r->len;
        int quoted = ch == '"';
        r->quoted[r->n] = (unsigned char)quoted;
        if (quoted)
            ch = getc_unlocked(f);
        for (;;) {
            if (ch == EOF) {
                int rc = tfos__input_text_eof(&in->t, in->line, err, errlen);
                if (rc != TFOS_EEND)
                    return rc;
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
                    if (ch != delim && ch != '\n' && ch != '\r' && ch != EOF)
                        return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: text after a closing quote",
                                    in->t.path, (unsigned long long)in->line, r->n + 1);
                    continue;
                }
            } else if (!quoted && (ch == delim || ch == '\n' || ch == '\r')) {
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
        if (ch == delim) {
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

static int blank(const record *r)
{
    return r->n == 1 && r->flen[0] == 0 && !r->quoted[0];
}

/* The next record that is not a blank line. */
static int read_data(csv_reader *in, record *r, char *err, size_t errlen)
{
    int rc;
    while ((rc = csv_read(in, r, err, errlen)) == 0 && blank(r))
        ;
    return rc;
}

static void swap_records(record *a, record *b)
{
    record t = *a;
    *a = *b;
    *b = t;
}

/* ---- the first rows: delimiter check, header, types ---------------------- */

/* With the default delimiter, a first line whose unquoted fields hold ';'
 * or a tab is most likely another dialect: refuse to guess. */
static int check_delimiter(csv_reader *in, const record *r, char *err, size_t errlen)
{
    if (in->delim_given)
        return 0;
    for (int i = 0; i < r->n; i++) {
        if (r->quoted[i])
            continue;
        const char *s = r->buf + r->start[i];
        const char *semi = memchr(s, ';', r->flen[i]), *tab = memchr(s, '\t', r->flen[i]);
        if (semi || tab)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' holds a %s: if the file "
                              "is %s-separated, give --csv-delimiter '%s' (or --csv-delimiter , to read it as it is)",
                              in->t.path, (unsigned long long)r->line, i + 1, (int)(r->flen[i] > 40 ? 40 : r->flen[i]),
                              s, semi ? "';'" : "tab", semi ? "';'" : "tab", semi ? ";" : "\\t");
    }
    return 0;
}

/* Whether the first record (cur; pending the next, if have_pending) is a
 * header, when not forced. A header is a row with no number in it (names,
 * maybe an empty one) above a row with a number under one of its names.
 * Where that cannot be told, an error asks for --csv-header or
 * --no-csv-header: a data row is never dropped as a header, nor a header fed
 * as data, on a guess. */
static int detect_header(csv_reader *in, int *header, char *err, size_t errlen)
{
    const record *a = &in->cur, *b = in->have_pending ? &in->pending : NULL;
    int numbers = 0, text = 0, text_over_number = 0;
    for (int i = 0; i < a->n; i++) {
        numbers |= is_number(a, i);
        int t = is_text(a, i);
        text |= t;
        if (t && b && i < b->n && is_number(b, i))
            text_over_number = 1;
    }
    *header = 0;
    if (!text)
        return 0; /* numbers and empty values: data */
    if (!numbers && text_over_number) {
        *header = 1;
        return 0;
    }
    if (numbers && !text_over_number)
        return 0; /* text and numbers, the text above more text: string columns */
    if (numbers)
        return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: cannot tell whether this row is a header (it holds "
                          "numbers, and text above numbers of the next row): give --csv-header or --no-csv-header",
                          in->t.path, (unsigned long long)a->line);
    return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: cannot tell whether this row is a header (%s): give "
                      "--csv-header or --no-csv-header", in->t.path, (unsigned long long)a->line,
                      b ? "it and the next row hold text only" : "the file has no other row");
}

/* Column types from the first data row r (next: the row after it, or NULL).
 * An empty value takes its column's type from the next row: a number
 * there makes the empty value an error (numbers have no missing value),
 * anything else a string column. */
static int csv_type(csv_reader *in, const record *r, const record *next, char *err, size_t errlen)
{
    in->t.b.ncols = r->n;
    for (int i = 0; i < r->n; i++) {
        tfos__build_col *c = &in->t.b.cols[i];
        const char *s = r->buf + r->start[i];
        number v;
        parse_number(s, r->flen[i], &v);
        if (v.kind == NUM_EMPTY && next && i < next->n && is_number(next, i))
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: an empty value in a column of "
                              "numbers (line %llu has one; numbers have no missing value: fill it in)", in->t.path,
                              (unsigned long long)r->line, i + 1, (unsigned long long)next->line);
        if (v.kind == NUM_INT && !v.int_ok)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is out of range for an "
                              "int64 (write it as a float, e.g. %.*s.0, to make the column float64)", in->t.path,
                              (unsigned long long)r->line, i + 1, (int)(r->flen[i] > 40 ? 40 : r->flen[i]), s,
                              (int)(r->flen[i] > 40 ? 40 : r->flen[i]), s);
        if (v.kind == NUM_FLOAT && !v.float_ok)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is out of range for a "
                              "float64", in->t.path, (unsigned long long)r->line, i + 1,
                              (int)(r->flen[i] > 40 ? 40 : r->flen[i]), s);
        if (v.kind == NUM_INT) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = TFOS_DT_I64;
        } else if (v.kind == NUM_FLOAT) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = TFOS_DT_F64;
        } else {
            c->kind = TFOS_COL_STR;
        }
    }
    in->typed = 1;
    return 0;
}

/* Read the first data row (and the one after it), take a header off as the
 * options or detect_header say, and type the columns. cur gets the first
 * data row. */
static int csv_first(csv_reader *in, char *err, size_t errlen)
{
    int rc = read_data(in, &in->cur, err, errlen);
    if (rc)
        return rc;
    if ((rc = check_delimiter(in, &in->cur, err, errlen)))
        return rc;
    rc = read_data(in, &in->pending, err, errlen);
    if (rc && rc != TFOS_EEND)
        return rc;
    in->have_pending = rc == 0;
    int header = in->csv_header;
    if (header < 0 && (rc = detect_header(in, &header, err, errlen)))
        return rc;
    if (header) {
        for (int i = 0; i < in->cur.n; i++) {
            size_t l = in->cur.flen[i] < sizeof in->t.b.cols[i].name - 1 ? in->cur.flen[i] : sizeof in->t.b.cols[i].name - 1;
            memcpy(in->t.b.cols[i].name, in->cur.buf + in->cur.start[i], l);
            in->t.b.cols[i].name[l] = 0;
        }
        if (!in->have_pending)
            return TFOS_EEND; /* a header and no rows */
        swap_records(&in->cur, &in->pending);
        rc = read_data(in, &in->pending, err, errlen);
        if (rc && rc != TFOS_EEND)
            return rc;
        in->have_pending = rc == 0;
    }
    return csv_type(in, &in->cur, in->have_pending ? &in->pending : NULL, err, errlen);
}

/* ---- rows ------------------------------------------------------------------ */

/* The offset of the first byte of s[0..n) that is not part of well-formed
 * UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF), or n when it is all UTF-8. */
static size_t utf8_bad_at(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* past U+10FFFF */
        } else
            return i;
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return i;
        i += len;
    }
    return n;
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
        int shown = (int)(n > 40 ? 40 : n);
        int rc = 0;
        if (c->kind == TFOS_COL_STR) {
            /* text columns are UTF-8 (the consumer decodes them as str):
             * refuse what is not here, where the file and line are known */
            size_t bad = utf8_bad_at((const unsigned char *)s, n);
            if (bad < n)
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: byte %zu of the field is 0x%02x, "
                                  "which is not UTF-8 (text columns must be UTF-8: re-encode the file, e.g. with "
                                  "iconv -f latin1 -t utf-8)", in->t.path, (unsigned long long)r->line, i + 1,
                                  bad + 1, (unsigned)(unsigned char)s[bad]);
            rc = tfos__batch_build_push_var(c, in->t.b.nrows, s, n);
            if (rc)
                return rc;
            continue;
        }
        number v;
        parse_number(s, n, &v);
        if (v.kind == NUM_EMPTY)
            return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: an empty value in a column of "
                              "numbers (numbers have no missing value: fill it in)", in->t.path,
                              (unsigned long long)r->line, i + 1);
        if (c->dtype == TFOS_DT_I64) {
            if (v.kind == NUM_INT && !v.int_ok)
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is out of range for an "
                                  "int64", in->t.path, (unsigned long long)r->line, i + 1, shown, s);
            if (v.kind != NUM_INT)
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is not an integer (the "
                            "column's type comes from the first row)", in->t.path, (unsigned long long)r->line, i + 1,
                            shown, s);
            rc = tfos__batch_build_push_fixed(c, &v.i, 8);
        } else {
            if (v.kind != NUM_INT && v.kind != NUM_FLOAT)
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is not a number (the "
                            "column's type comes from the first row)", in->t.path, (unsigned long long)r->line, i + 1,
                            shown, s);
            if (!v.float_ok)
                return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu, column %d: '%.*s' is out of range for a "
                                  "float64", in->t.path, (unsigned long long)r->line, i + 1, shown, s);
            rc = tfos__batch_build_push_fixed(c, &v.d, 8);
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
            rc = read_data(in, &in->cur, err, errlen);
            if (rc == TFOS_EEND)
                break;
            if (rc)
                return rc;
        }
        rc = csv_add(in, &in->cur, err, errlen);
        if (rc)
            return rc;
    }
    return in->t.b.nrows ? 0 : TFOS_EEND;
}

static int csv_open(void **state, tfos__input_src *src, const char *path, const tfos__input_opts *o, char *err,
                    size_t errlen)
{
    int d = o->csv_delimiter;
    if (d == '"' || d == '\n' || d == '\r' || d < 0 || d > 127)
        return tfos__errf(err, errlen, TFOS_EINVAL, "%s: the CSV delimiter cannot be a quote, a line end or a "
                          "non-ASCII byte", path);
    int rc = tfos__input_text_open(state, sizeof(csv_reader), src, path, err, errlen);
    if (rc)
        return rc;
    csv_reader *in = *state;
    in->line = 1;
    in->csv_header = o->csv_header;
    in->delim = d ? d : ',';
    in->delim_given = d != 0;
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
    .rows = NULL,
    .close = csv_close,
};
