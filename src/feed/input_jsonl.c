/* input_jsonl.c: the JSON lines reader of `tfos run --input` (semantics in
 * input.h), behind tfos__input_jsonl_ops. The first row is parsed by
 * jansson, and types the columns; a later row is read by a fast path that
 * appends its values straight to the batch builder (core/batchbuild.h)
 * while it is a well-formed row of those columns, and goes to jansson as
 * soon as it is anything else (its values taken back): jansson then
 * accepts what JSON allows and says what is wrong, so both paths accept the
 * same rows, give the same values and the same errors (tests/c/input_test.c
 * compares them). jansson's tree of each row cost 2.5-3.4x the time. */
#include "core/json.h"
#include "core/log.h"
#include "feed/input.h"
#include "feed/input_ops.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE ((size_t)16 << 20)

typedef struct jsonl_reader {
    tfos__input_text t; /* first: the path, the stream, the builder */
    uint64_t line;      /* the line last read, from 1 */
    int typed;          /* the first row has set the columns */
    char *linebuf;      /* getline's, kept across lines */
    size_t linecap;
    char *text;         /* the fast path's decoded string (escapes) */
    size_t textcap;
} jsonl_reader;

int tfos__jsonl_fast = 1; /* 0: every row through jansson (tests compare the two) */

/* An error about the current line: "<path> line <n>: <what>". */
static int fail(const jsonl_reader *in, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(const jsonl_reader *in, char *err, size_t errlen, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tfos__errf(err, errlen, TFOS_EPROTO, "%s line %llu: %s", in->t.path, (unsigned long long)in->line, what);
}

/* A line jansson could not parse. jansson gives one code to every syntax
 * error (json_error_invalid_syntax, or premature_end_of_input for a row cut
 * short), and says what it expected only in its message; the structural
 * ones are put in this reader's words by that message's start, and any other
 * is passed on as jansson wrote it. Either way the message ends with the
 * byte of the line where parsing stopped and jansson's own text. */
static int parse_error(const jsonl_reader *in, const json_error_t *je, char *err, size_t errlen)
{
    static const struct {
        const char *jansson, *ours;
    } syntax[] = {
        {"']' expected", "expected , or ]"},
        {"'}' expected", "expected , or }"},
        {"':' expected", "expected :"},
        {"string or '}' expected", "expected a key"},
        {"invalid escape", "bad escape in a string"},
        {"invalid Unicode", "bad \\u escape in a string"},
    };
    const char *what = "not valid JSON";
    switch (json_error_code(je)) {
    case json_error_out_of_memory:
        return TFOS_ENOMEM;
    case json_error_end_of_input_expected:
        what = "text after the row";
        break;
    case json_error_invalid_utf8:
        what = "not valid UTF-8";
        break;
    case json_error_duplicate_key:
        what = "a key appears twice";
        break;
    case json_error_null_byte_in_key:
        what = "\\u0000 in a key";
        break;
    case json_error_numeric_overflow:
        what = "a number out of range (integers are int64)";
        break;
    case json_error_stack_overflow:
        what = "values nested too deep";
        break;
    default:
        for (size_t i = 0; i < sizeof syntax / sizeof *syntax; i++)
            if (!strncmp(je->text, syntax[i].jansson, strlen(syntax[i].jansson)))
                what = syntax[i].ours;
        break;
    }
    return fail(in, err, errlen, "%s (byte %d: %s)", what, je->position, je->text);
}

/* A number as short as it reads back, for messages. */
static void number_text(const json_t *v, char *buf, size_t len)
{
    if (json_is_integer(v)) {
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    }
    double d = json_real_value(v);
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

/* A flat array of numbers for column c (index col); typing: the first row. */
static int add_array(jsonl_reader *in, tfos__build_col *c, int col, int typing, const json_t *v, char *err,
                     size_t errlen)
{
    size_t count = json_array_size(v);
    if (count == 0)
        return fail(in, err, errlen, "empty array");
    int any_float = 0;
    for (size_t k = 0; k < count; k++) {
        const json_t *e = json_array_get(v, k);
        if (!json_is_number(e))
            return fail(in, err, errlen, "arrays may hold numbers only");
        any_float |= json_is_real(e);
    }
    if (typing) {
        c->kind = TFOS_COL_FIXED;
        c->ndim = 1;
        c->len = (uint32_t)count;
        c->dtype = any_float ? TFOS_DT_F64 : TFOS_DT_I64;
    } else if (c->kind != TFOS_COL_FIXED || c->ndim != 1 || c->len != count) {
        return fail(in, err, errlen, "column %d: an array of %zu numbers where the first row has %s", col + 1, count,
                    c->ndim ? "another length" : "a scalar");
    } else if (c->dtype == TFOS_DT_I64 && any_float) {
        return fail(in, err, errlen, "column %d: a float in an integer array column", col + 1);
    }
    for (size_t k = 0; k < count; k++) {
        const json_t *e = json_array_get(v, k);
        int rc;
        if (c->dtype == TFOS_DT_I64) {
            int64_t x = json_integer_value(e);
            rc = tfos__batch_build_push_fixed(c, &x, 8);
        } else {
            double x = json_number_value(e);
            rc = tfos__batch_build_push_fixed(c, &x, 8);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* One value for column c (index col); typing: the first row sets its type. */
static int add_value(jsonl_reader *in, tfos__build_col *c, int col, int typing, const json_t *v, char *err,
                     size_t errlen)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return fail(in, err, errlen, "null in column %d (every value needs a type)", col + 1);
    case JSON_TRUE:
    case JSON_FALSE: {
        if (typing) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = TFOS_DT_BOOL;
        } else if (c->kind != TFOS_COL_FIXED || c->dtype != TFOS_DT_BOOL || c->ndim) {
            return fail(in, err, errlen, "column %d: a boolean where the first row has another type", col + 1);
        }
        uint8_t b = json_is_true(v);
        return tfos__batch_build_push_fixed(c, &b, 1);
    }
    case JSON_STRING:
        if (!typing && c->kind != TFOS_COL_STR)
            return fail(in, err, errlen, "column %d: a string where the first row has a number", col + 1);
        c->kind = TFOS_COL_STR;
        return tfos__batch_build_push_var(c, in->t.b.nrows, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
    case JSON_REAL: {
        int is_int = json_is_integer(v);
        if (typing) {
            c->kind = TFOS_COL_FIXED;
            c->dtype = is_int ? TFOS_DT_I64 : TFOS_DT_F64;
        } else if (c->kind != TFOS_COL_FIXED || c->ndim || (c->dtype != TFOS_DT_I64 && c->dtype != TFOS_DT_F64)) {
            return fail(in, err, errlen, "column %d: a number where the first row has another type", col + 1);
        } else if (c->dtype == TFOS_DT_I64 && !is_int) {
            char num[40];
            number_text(v, num, sizeof num);
            return fail(in, err, errlen,
                        "column %d: %s in an integer column (write the first row's value as a float)", col + 1, num);
        }
        if (c->dtype == TFOS_DT_I64) {
            int64_t x = json_integer_value(v);
            return tfos__batch_build_push_fixed(c, &x, 8);
        }
        double x = json_number_value(v);
        return tfos__batch_build_push_fixed(c, &x, 8);
    }
    case JSON_ARRAY:
        return add_array(in, c, col, typing, v, err, errlen);
    case JSON_OBJECT:
        break;
    }
    return fail(in, err, errlen, "column %d: an object (values are numbers, true/false, strings and arrays of "
                "numbers)", col + 1);
}

/* Column col of a row: its key (objects; NULL for arrays) and value. */
static int add_column(jsonl_reader *in, int col, int typing, const char *key, const json_t *v, char *err,
                      size_t errlen)
{
    if (col >= TFOS__BUILD_MAX_COLS)
        return fail(in, err, errlen, "more than %d columns", TFOS__BUILD_MAX_COLS);
    if (!typing && col >= in->t.b.ncols)
        return fail(in, err, errlen, "more columns than the first row");
    tfos__build_col *c = &in->t.b.cols[col];
    if (key && typing) {
        size_t kl = strlen(key);
        if (kl >= sizeof c->name)
            return fail(in, err, errlen, "key '%.40s...' is over %zu bytes", key, sizeof c->name - 1);
        memcpy(c->name, key, kl + 1);
    } else if (key && strcmp(c->name, key)) {
        return fail(in, err, errlen, "key '%.100s' where the first row has '%.100s' (keys and their order must "
                    "match the first row)", key, c->name);
    }
    return add_value(in, c, col, typing, v, err, errlen);
}

/* ---- the fast path ----------------------------------------------------- */

/* What the fast path does not take (the row goes to jansson), or an error
 * of its own (TFOS_ENOMEM). */
#define NOT_FAST 1

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A JSON number at *pp (RFC 8259's grammar: no '+', no leading zero, digits
 * on both sides of '.'), as an int64 (*is_int) or a double; NOT_FAST for
 * anything else, and for what jansson refuses (an integer out of int64, a
 * real that overflows), which it will then name. */
static int fast_number(const char **pp, const char *e, int *is_int, int64_t *i, double *d)
{
    const char *p = *pp, *s = p;
    if (p < e && *p == '-')
        p++;
    if (p < e && *p == '0')
        p++;
    else if (p < e && *p >= '1' && *p <= '9')
        while (p < e && is_digit(*p))
            p++;
    else
        return NOT_FAST;
    *is_int = 1;
    if (p < e && *p == '.') {
        if (++p >= e || !is_digit(*p))
            return NOT_FAST;
        while (p < e && is_digit(*p))
            p++;
        *is_int = 0;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p >= e || !is_digit(*p))
            return NOT_FAST;
        while (p < e && is_digit(*p))
            p++;
        *is_int = 0;
    }
    /* the line ends in '\n' or NUL (getline's), so the conversions stop at
     * p, where the grammar did; checked all the same */
    char *end;
    errno = 0;
    if (*is_int) {
        *i = strtoll(s, &end, 10);
        if (errno == ERANGE)
            return NOT_FAST;
        *d = (double)*i;
    } else {
        *d = strtod(s, &end);
        if (errno == ERANGE && isinf(*d))
            return NOT_FAST;
    }
    if (end != p)
        return NOT_FAST;
    *pp = p;
    return 0;
}

static int hex4(const char *p, const char *e, unsigned *u)
{
    *u = 0;
    for (int k = 0; k < 4; k++, p++) {
        if (p >= e)
            return -1;
        char c = *p;
        unsigned h = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16;
        if (h == 16)
            return -1;
        *u = *u << 4 | h;
    }
    return 0;
}

/* The string whose opening quote is at *pp: *s, *n its bytes (in the line
 * when it has no escape, else decoded into in->text); nul: whether \u0000
 * may appear (values; not keys). NOT_FAST for what jansson would refuse or
 * put otherwise. */
static int fast_string(jsonl_reader *in, const char **pp, const char *e, int nul, const char **s, size_t *n)
{
    const char *p = *pp + 1, *start = p;
    int escaped = 0;
    while (p < e && *p != '"') {
        unsigned char c = (unsigned char)*p;
        if (c == '\\') {
            escaped = 1;
            p += 2;
        } else if (c < 0x20) {
            return NOT_FAST;
        } else if (c < 0x80) {
            p++;
        } else {
            /* jansson takes the same sequences; the line is NUL-terminated
             * (getline's), so the check stops inside it */
            int k = tfos__utf8_len((const unsigned char *)p);
            if (!k)
                return NOT_FAST;
            p += k;
        }
    }
    if (p >= e)
        return NOT_FAST;
    *pp = p + 1;
    if (!escaped) {
        *s = start;
        *n = (size_t)(p - start);
        return 0;
    }
    /* decoded: never longer than the text it comes from */
    size_t need = (size_t)(p - start);
    if (need + 1 > in->textcap) {
        char *t = realloc(in->text, need + 1);
        if (!t)
            return TFOS_ENOMEM;
        in->text = t;
        in->textcap = need + 1;
    }
    char *o = in->text;
    for (const char *q = start; q < p;) {
        if (*q != '\\') {
            *o++ = *q++;
            continue;
        }
        char c = q[1];
        q += 2;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *f = c ? strchr(from, c) : NULL;
        if (f) {
            *o++ = to[f - from];
            continue;
        }
        unsigned u, lo;
        if (c != 'u' || hex4(q, p, &u))
            return NOT_FAST;
        q += 4;
        if (u >= 0xDC00 && u <= 0xDFFF)
            return NOT_FAST; /* a low surrogate first */
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (p - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return NOT_FAST;
            q += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (u == 0 && !nul)
            return NOT_FAST;
        if (u < 0x80) {
            *o++ = (char)u;
        } else if (u < 0x800) {
            *o++ = (char)(0xC0 | u >> 6);
            *o++ = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            *o++ = (char)(0xE0 | u >> 12);
            *o++ = (char)(0x80 | (u >> 6 & 0x3F));
            *o++ = (char)(0x80 | (u & 0x3F));
        } else {
            *o++ = (char)(0xF0 | u >> 18);
            *o++ = (char)(0x80 | (u >> 12 & 0x3F));
            *o++ = (char)(0x80 | (u >> 6 & 0x3F));
            *o++ = (char)(0x80 | (u & 0x3F));
        }
    }
    *s = in->text;
    *n = (size_t)(o - in->text);
    return 0;
}

/* Column c's value at *pp, of the type the first row gave it. */
static int fast_value(jsonl_reader *in, tfos__build_col *c, const char **pp, const char *e)
{
    const char *p = *pp;
    int is_int;
    int64_t i;
    double d;
    int rc;
    if (c->kind == TFOS_COL_STR) {
        const char *s;
        size_t n;
        if (*p != '"' || (rc = fast_string(in, &p, e, 1, &s, &n)))
            return *p != '"' ? NOT_FAST : rc;
        rc = tfos__batch_build_push_var(c, in->t.b.nrows, s, n);
    } else if (c->kind != TFOS_COL_FIXED) {
        return NOT_FAST;
    } else if (c->dtype == TFOS_DT_BOOL) {
        uint8_t b;
        if (e - p >= 4 && !memcmp(p, "true", 4))
            b = 1, p += 4;
        else if (e - p >= 5 && !memcmp(p, "false", 5))
            b = 0, p += 5;
        else
            return NOT_FAST;
        rc = tfos__batch_build_push_fixed(c, &b, 1);
    } else if (c->ndim == 0) {
        if (fast_number(&p, e, &is_int, &i, &d) || (c->dtype == TFOS_DT_I64 && !is_int))
            return NOT_FAST;
        rc = c->dtype == TFOS_DT_I64 ? tfos__batch_build_push_fixed(c, &i, 8) : tfos__batch_build_push_fixed(c, &d, 8);
    } else {
        if (*p != '[')
            return NOT_FAST;
        p = skip_ws(p + 1, e);
        rc = 0;
        for (uint32_t k = 0; k < c->len && !rc; k++) {
            if (k) {
                if (p >= e || *p != ',')
                    return NOT_FAST;
                p = skip_ws(p + 1, e);
            }
            if (fast_number(&p, e, &is_int, &i, &d) || (c->dtype == TFOS_DT_I64 && !is_int))
                return NOT_FAST;
            p = skip_ws(p, e);
            rc = c->dtype == TFOS_DT_I64 ? tfos__batch_build_push_fixed(c, &i, 8)
                                         : tfos__batch_build_push_fixed(c, &d, 8);
        }
        if (rc)
            return rc;
        if (p >= e || *p != ']')
            return NOT_FAST;
        p++;
    }
    *pp = p;
    return rc;
}

/* A row of the typed columns, p..e (from its '[' or '{'). 0: appended;
 * NOT_FAST: nothing appended (values taken back); or TFOS_ENOMEM. */
static int fast_row(jsonl_reader *in, const char *p, const char *e)
{
    tfos__batch_build *b = &in->t.b;
    char close = *p == '[' ? ']' : '}';
    int objects = *p == '{', col = 0, rc = 0;
    size_t mark[TFOS__BUILD_MAX_COLS];
    p = skip_ws(p + 1, e);
    for (; col < b->ncols; col++) {
        tfos__build_col *c = &b->cols[col];
        if (col) {
            if (p >= e || *p != ',')
                break;
            p = skip_ws(p + 1, e);
        }
        if (objects) {
            const char *k;
            size_t kn;
            if (p >= e || *p != '"' || (rc = fast_string(in, &p, e, 0, &k, &kn)))
                break;
            if (kn != strlen(c->name) || memcmp(k, c->name, kn))
                break;
            p = skip_ws(p, e);
            if (p >= e || *p != ':')
                break;
            p = skip_ws(p + 1, e);
        }
        if (p >= e)
            break;
        mark[col] = c->vlen;
        if ((rc = fast_value(in, c, &p, e))) {
            col++; /* its value may be half in */
            break;
        }
        p = skip_ws(p, e);
    }
    if (!rc && col == b->ncols && p < e && *p == close && skip_ws(p + 1, e) == e)
        return 0;
    /* taken back: every column before col had its one value pushed */
    for (int k = 0; k < col && k < b->ncols; k++)
        b->cols[k].vlen = mark[k];
    return rc < 0 ? rc : NOT_FAST;
}

/* Parse one line and append its row. 1 for a blank line, 0, or an error (a
 * failed row leaves partial values behind: the whole read fails). */
static int add_row(jsonl_reader *in, const char *line, size_t len, char *err, size_t errlen)
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n'))
        i++;
    if (i == len)
        return 1;
    if (line[i] != '[' && line[i] != '{')
        return fail(in, err, errlen, "a row must be a JSON array or object");
    if (in->typed && tfos__jsonl_fast) {
        int rc = fast_row(in, line + i, line + len);
        if (rc == 0) {
            in->t.b.nrows++;
            return 0;
        }
        if (rc < 0)
            return rc;
    }
    json_error_t je;
    json_t *row = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!row)
        return parse_error(in, &je, err, errlen);
    int typing = !in->typed, col = 0, rc = 0;
    if (json_is_array(row)) {
        size_t k;
        json_t *v;
        json_array_foreach(row, k, v) {
            if ((rc = add_column(in, col++, typing, NULL, v, err, errlen)))
                break;
        }
    } else {
        const char *key;
        json_t *v;
        json_object_foreach(row, key, v) {
            if ((rc = add_column(in, col++, typing, key, v, err, errlen)))
                break;
        }
    }
    json_decref(row);
    if (rc)
        return rc;
    if (col == 0)
        return fail(in, err, errlen, "empty row");
    if (typing) {
        in->t.b.ncols = col;
        in->typed = 1;
    } else if (col != in->t.b.ncols) {
        return fail(in, err, errlen, "%d columns where the first row has %d", col, in->t.b.ncols);
    }
    in->t.b.nrows++;
    return 0;
}

static int jsonl_open(void **state, tfos__input_src *src, const char *path, const tfos__input_opts *o, char *err,
                      size_t errlen)
{
    (void)o;
    return tfos__input_text_open(state, sizeof(jsonl_reader), src, path, err, errlen);
}

static int jsonl_next(void *state, uint32_t max_rows, const void **batch, size_t *len, uint32_t *nrows, char *err,
                      size_t errlen)
{
    jsonl_reader *in = state;
    while (in->t.b.nrows < max_rows) {
        ssize_t n = getline(&in->linebuf, &in->linecap, in->t.f);
        if (n < 0 || ferror(in->t.f)) {
            /* the end, or a read that failed (or was stopped) midway */
            int rc = tfos__input_text_eof(&in->t, in->line + 1, err, errlen);
            if (rc != TFOS_EEND)
                return rc;
            break;
        }
        in->line++;
        if ((size_t)n > MAX_LINE)
            return tfos__errf(err, errlen, TFOS_ETOOBIG, "%s line %llu: over %zu bytes", in->t.path,
                              (unsigned long long)in->line, MAX_LINE);
        int rc = add_row(in, in->linebuf, (size_t)n, err, errlen);
        if (rc < 0)
            return rc;
    }
    return tfos__input_text_finish(&in->t, batch, len, nrows, err, errlen);
}

static void jsonl_close(void *state)
{
    jsonl_reader *in = state;
    free(in->linebuf);
    free(in->text);
    tfos__input_text_close(&in->t);
}

const struct tfos__input_ops tfos__input_jsonl_ops = {
    .open = jsonl_open,
    .next = jsonl_next,
    .rows = NULL,
    .close = jsonl_close,
};
