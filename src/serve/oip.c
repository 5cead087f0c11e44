/* oip.c: an Open Inference Protocol infer request, read (see oip.h).
 *
 * A recursive-descent JSON reader (RFC 8259) that keeps only what the front
 * end needs. Nesting is bounded (64), so a hostile body cannot exhaust the
 * stack; every read is bounded by the body's length. Numbers: JSON's
 * grammar; a float with at most 15 significant digits and a power of ten
 * up to 22 is exact as m * 10^e (Clinger's fast path), others go through
 * strtod, however many digits they have; FP32 values are the double rounded
 * to float. A literal beyond the dtype's range (1e400; 1e39 as FP32; an
 * integer past its type's bounds, 2^64 - 1 the highest) is refused, never
 * taken as infinity or wrapped. */
#include "serve/oip.h"

#include "core/batch.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct cur {
    const char *p, *end, *start;
    char *err;
    size_t errlen;
    int failed;
    int refused;   /* the failure is valid JSON this reader refuses, not bad JSON */
} cur;

static int fail(cur *c, const char *what)
{
    if (!c->failed) {
        int line = 1, col = 1;
        for (const char *q = c->start; q < c->p && q < c->end; q++) {
            if (*q == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        snprintf(c->err, c->errlen, "%s (line %d, column %d)", what, line, col);
        c->failed = 1;
    }
    return -1;
}

static void ws(cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int expect(cur *c, char ch, const char *what)
{
    ws(c);
    if (c->p >= c->end || *c->p != ch)
        return fail(c, what);
    c->p++;
    return 0;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                                                                           : -1;
        if (d < 0)
            return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

/* A string, decoded into out (NULL: skipped); *truncated when it did not fit. */
static int string(cur *c, char *out, size_t outlen, int *truncated)
{
    size_t n = 0;
    if (truncated)
        *truncated = 0;
    if (expect(c, '"', "a string was expected"))
        return -1;
    for (;;) {
        if (c->p >= c->end)
            return fail(c, "a string is not closed");
        unsigned char ch = (unsigned char)*c->p++;
        unsigned cp = ch;
        if (ch == '"')
            break;
        if (ch < 0x20)
            return fail(c, "a string holds a control character");
        if (ch == '\\') {
            if (c->p >= c->end)
                return fail(c, "a string is not closed");
            char e = *c->p++;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (c->end - c->p < 4 || hex4(c->p, &cp))
                    return fail(c, "a \\u escape needs 4 hex digits");
                c->p += 4;
                if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
                    unsigned lo;
                    if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || hex4(c->p + 2, &lo) || lo < 0xDC00 ||
                        lo > 0xDFFF)
                        return fail(c, "a \\u escape is half a surrogate pair");
                    c->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                break;
            default: return fail(c, "a string has an unknown escape");
            }
        }
        if (!out)
            continue;
        char u[4];
        size_t k = 0;
        if (ch != '\\' || cp < 0x80) {
            u[k++] = (char)cp; /* raw bytes are copied as they are */
        } else if (cp < 0x800) {
            u[k++] = (char)(0xC0 | (cp >> 6));
            u[k++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            u[k++] = (char)(0xE0 | (cp >> 12));
            u[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            u[k++] = (char)(0xF0 | (cp >> 18));
            u[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            u[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[k++] = (char)(0x80 | (cp & 0x3F));
        }
        if (n + k < outlen) {
            memcpy(out + n, u, k);
            n += k;
        } else if (truncated) {
            *truncated = 1;
        }
    }
    if (out && outlen)
        out[n] = '\0';
    return 0;
}

/* The extent of a JSON number at p (its grammar), or 0. */
static size_t number_len(const char *p, const char *end)
{
    const char *q = p;
    if (q < end && *q == '-')
        q++;
    if (q >= end || *q < '0' || *q > '9')
        return 0;
    if (*q == '0')
        q++;
    else
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    if (q < end && *q == '.') {
        q++;
        if (q >= end || *q < '0' || *q > '9')
            return 0;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if (q >= end || *q < '0' || *q > '9')
            return 0;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    return (size_t)(q - p);
}

static int value(cur *c, int depth);

/* A list's '[' (and ']' at once when it is empty): 1 when empty, 0 when
 * elements follow, -1 on error. */
static int list_open(cur *c)
{
    if (expect(c, '[', "a list was expected"))
        return -1;
    ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 1;
    }
    return 0;
}

/* After a list's element: 1 when another follows (its ',' taken), 0 at the
 * list's end (its ']' taken), -1 on error. */
static int list_next(cur *c)
{
    ws(c);
    if (c->p < c->end && *c->p == ',') {
        c->p++;
        return 1;
    }
    return expect(c, ']', "',' or ']' was expected in a list") ? -1 : 0;
}

static int literal(cur *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n))
        return fail(c, "a value was expected");
    c->p += n;
    return 0;
}

static int array(cur *c, int depth)
{
    int rc = list_open(c);
    while (rc == 0) {
        if (value(c, depth + 1))
            return -1;
        rc = list_next(c) == 1 ? 0 : -2;
    }
    return rc == -1 ? -1 : c->failed ? -1 : 0;
}

/* An object: for each member, on_member(key) reads the value (or value()
 * skips it when on_member is NULL or returns 1). */
typedef int (*member_fn)(cur *c, const char *key, void *user, int depth);

static int object(cur *c, int depth, member_fn on_member, void *user)
{
    if (expect(c, '{', "an object was expected"))
        return -1;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        char key[64];
        int trunc;
        if (string(c, key, sizeof key, &trunc) || expect(c, ':', "':' was expected after a key"))
            return -1;
        int rc = on_member && !trunc ? on_member(c, key, user, depth) : 1;
        if (rc < 0 || (rc == 1 && value(c, depth + 1)))
            return -1;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        return expect(c, '}', "',' or '}' was expected in an object");
    }
}

static int value(cur *c, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(c, "the JSON is nested too deep");
    ws(c);
    if (c->p >= c->end)
        return fail(c, "a value was expected");
    switch (*c->p) {
    case '{': return object(c, depth, NULL, NULL);
    case '[': return array(c, depth);
    case '"': return string(c, NULL, 0, NULL);
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    default: {
        size_t n = number_len(c->p, c->end);
        if (!n)
            return fail(c, "a value was expected");
        c->p += n;
        return 0;
    }
    }
}

/* ---- the request ---------------------------------------------------------------- */

/* A key the reader keeps given twice in one object: refused, as JSONL input
 * refuses it (which of the two would count is anybody's guess: jansson and
 * Python take the last, others the first). `seen` holds a bit per key. */
static int once(cur *c, unsigned *seen, unsigned bit, const char *key)
{
    if (*seen & bit) {
        char what[96];
        snprintf(what, sizeof what, "the key \"%s\" is given twice in one object", key);
        c->refused = !c->failed;
        return fail(c, what);
    }
    *seen |= bit;
    return 0;
}

/* A string kept in out[outlen]: one longer is refused, naming the limit,
 * rather than cut (a cut name would match another, a cut id be echoed
 * wrong). */
static int bounded_string(cur *c, char *out, size_t outlen, const char *what)
{
    int trunc;
    const char *at = c->p;
    if (string(c, out, outlen, &trunc))
        return -1;
    if (trunc) {
        char msg[128];
        c->p = at;
        snprintf(msg, sizeof msg, "%s is longer than %zu bytes, the most tfos serve takes", what, outlen - 1);
        c->refused = !c->failed;
        return fail(c, msg);
    }
    return 0;
}

/* The index of key in keys (NULL-terminated), or -1. */
static int key_index(const char *key, const char *const *keys)
{
    for (int i = 0; keys[i]; i++)
        if (!strcmp(key, keys[i]))
            return i;
    return -1;
}

static int is_string(cur *c)
{
    return c->p < c->end && *c->p == '"';
}

static int tensor_member(cur *c, const char *key, void *user, int depth)
{
    static const char *const keys[] = {"name", "datatype", "shape", "data", NULL};
    tfos__oip_tensor *t = user;
    int k = key_index(key, keys);
    ws(c);
    if (k < 0)
        return 1;
    if (once(c, &t->seen, 1u << k, key))
        return -1;
    if (k == 0 && is_string(c))
        return bounded_string(c, t->name, sizeof t->name, "an input's \"name\"");
    if (k == 1 && is_string(c))
        return bounded_string(c, t->datatype, sizeof t->datatype, "a \"datatype\"");
    if (!strcmp(key, "data")) {
        t->data = c->p;
        if (value(c, depth + 1))
            return -1;
        t->data_len = (size_t)(c->p - t->data);
        t->has_data = 1;
        return 0;
    }
    if (!strcmp(key, "shape") && c->p < c->end && *c->p == '[') {
        t->has_shape = 1;
        t->ndim = 0;
        int rc = list_open(c);
        for (; rc == 0; rc = list_next(c) == 1 ? 0 : 1) {
            ws(c);
            size_t n = c->p < c->end ? number_len(c->p, c->end) : 0;
            if (n && *c->p != '-' && !memchr(c->p, '.', n) && !memchr(c->p, 'e', n) && !memchr(c->p, 'E', n) &&
                n <= 12) {
                if (t->ndim >= 0 && t->ndim < TFOS_OIP_MAX_DIMS)
                    t->shape[t->ndim++] = strtoll(c->p, NULL, 10);
                else
                    t->ndim = -1;
                c->p += n;
            } else {
                t->bad_shape = 1;
                if (value(c, depth + 2))
                    return -1;
            }
        }
        return c->failed ? -1 : 0;
    }
    return 1;
}

static int output_member(cur *c, const char *key, void *user, int depth)
{
    (void)depth;
    ws(c);
    if (!strcmp(key, "name") && is_string(c))
        return bounded_string(c, (char *)user, 128, "an output's \"name\"");
    return 1;
}

/* A list of objects; each read by fn into slot i (up to max; *count -1
 * beyond), or a value that is not a list (*is_list 0). */
static int object_list(cur *c, int depth, member_fn fn, void *base, size_t stride, int max, int *count, int *is_list)
{
    ws(c);
    *count = 0;
    *is_list = c->p < c->end && *c->p == '[';
    if (!*is_list)
        return value(c, depth);
    int rc = list_open(c);
    for (; rc == 0; rc = list_next(c) == 1 ? 0 : 1) {
        ws(c);
        if (c->p < c->end && *c->p == '{' && *count >= 0 && *count < max) {
            if (object(c, depth + 1, fn, (char *)base + stride * (size_t)*count))
                return -1;
            (*count)++;
        } else {
            if (c->p < c->end && *c->p == '{')
                *count = -1;
            else
                *is_list = 0; /* a list of something else */
            if (value(c, depth + 1))
                return -1;
        }
    }
    return c->failed ? -1 : 0;
}

static int request_member(cur *c, const char *key, void *user, int depth)
{
    static const char *const keys[] = {"id", "inputs", "outputs", "parameters", NULL};
    tfos__oip_request *rq = user;
    int k = key_index(key, keys);
    ws(c);
    if (k < 0)
        return 1;
    if (once(c, &rq->seen, 1u << k, key))
        return -1;
    if (k == 0 && is_string(c))
        return bounded_string(c, rq->id, sizeof rq->id, "the request's \"id\"");
    if (k == 1)
        return object_list(c, depth + 1, tensor_member, rq->inputs, sizeof rq->inputs[0], TFOS_OIP_MAX_TENSORS,
                           &rq->ninputs, &rq->inputs_is_list);
    if (k == 2) {
        rq->has_outputs = 1;
        return object_list(c, depth + 1, output_member, rq->outputs, sizeof rq->outputs[0], TFOS_OIP_MAX_TENSORS,
                           &rq->noutputs, &rq->outputs_is_list);
    }
    return 1;
}

int tfos__oip_parse(const char *body, size_t len, tfos__oip_request *rq, char *err, size_t errlen)
{
    memset(rq, 0, sizeof *rq);
    cur c = {.p = body, .end = body + len, .start = body, .err = err, .errlen = errlen};
    ws(&c);
    if (c.p < c.end && *c.p != '{') {
        if (value(&c, 0))
            return -1;
        snprintf(err, errlen, "the request is not a JSON object");
        return -1;
    }
    if (object(&c, 0, request_member, rq))
        return c.refused ? -2 : -1;
    ws(&c);
    if (c.p != c.end)
        return fail(&c, "there is more after the JSON object");
    return 0;
}

/* ---- numbers ---------------------------------------------------------------------- */

static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number's text as a double: 0, or -1 when it is beyond a
 * double's range (1e400: strtod's infinity, which JSON cannot mean). */
static int to_double(const char *p, size_t n, double *out)
{
    const char *q = p, *end = p + n;
    int neg = *q == '-';
    q += neg;
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    for (; q < end && *q >= '0' && *q <= '9'; q++) {
        if (digits < 19) {
            if (m || *q != '0')
                digits++;
            m = m * 10 + (uint64_t)(*q - '0');
        } else {
            exp10++;
            digits++;
        }
    }
    if (q < end && *q == '.') {
        for (q++; q < end && *q >= '0' && *q <= '9'; q++) {
            if (digits < 19) {
                if (m || *q != '0')
                    digits++;
                m = m * 10 + (uint64_t)(*q - '0');
                exp10--;
            } else {
                digits++;
            }
        }
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = *q == '-';
        q += *q == '-' || *q == '+';
        long e = 0;
        for (; q < end && *q >= '0' && *q <= '9'; q++)
            if (e < 100000)
                e = e * 10 + (*q - '0');
        exp10 += (int)(eneg ? -e : e);
    }
    if (digits <= 15 && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / pow10_exact[-exp10] : d * pow10_exact[exp10];
        *out = neg ? -d : d;
        return 0;
    }
    /* strtod needs the text NUL-terminated: a copy, on the heap for a long
     * literal (valid JSON has no bound on its digits: 521 of them are
     * still a double) */
    char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    if (buf != small)
        free(buf);
    return isinf(*out) ? -1 : 0; /* beyond a double's range: refused, not taken as infinity */
}

static int put(const char *p, size_t n, int dt, char *out)
{
    if (dt == TFOS_DT_BOOL) {
        if (n == 4 && !memcmp(p, "true", 4))
            *(uint8_t *)out = 1;
        else if (n == 5 && !memcmp(p, "false", 5))
            *(uint8_t *)out = 0;
        else
            return -1;
        return 0;
    }
    if (*p != '-' && (*p < '0' || *p > '9'))
        return -1; /* true, false, null, a string, an object */
    if (dt == TFOS_DT_F32 || dt == TFOS_DT_F64) {
        double d;
        if (to_double(p, n, &d))
            return -1;
        if (dt == TFOS_DT_F32) {
            float f = (float)d;
            if (isinf(f))
                return -1; /* beyond a float's range (1e39) */
            memcpy(out, &f, 4);
        } else {
            memcpy(out, &d, 8);
        }
        return 0;
    }
    if (memchr(p, '.', n) || memchr(p, 'e', n) || memchr(p, 'E', n))
        return -1;
    int neg = *p == '-';
    uint64_t v = 0;
    for (size_t i = (size_t)neg; i < n; i++) {
        unsigned dig = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - dig) / 10)
            return -1; /* past 2^64 - 1 */
        v = v * 10 + dig;
    }
    if (neg && v > (uint64_t)INT64_MAX + 1)
        return -1;
    int64_t s = neg ? (int64_t)(0 - v) : (int64_t)v;
    switch (dt) {
    case TFOS_DT_I8: if (s < INT8_MIN || s > INT8_MAX || (!neg && v > INT8_MAX)) return -1; *(int8_t *)out = (int8_t)s; return 0;
    case TFOS_DT_I16: { if (s < INT16_MIN || s > INT16_MAX || (!neg && v > INT16_MAX)) return -1; int16_t y = (int16_t)s; memcpy(out, &y, 2); return 0; }
    case TFOS_DT_I32: { if (s < INT32_MIN || s > INT32_MAX || (!neg && v > INT32_MAX)) return -1; int32_t y = (int32_t)s; memcpy(out, &y, 4); return 0; }
    case TFOS_DT_I64: { if (!neg && v > INT64_MAX) return -1; memcpy(out, &s, 8); return 0; }
    case TFOS_DT_U8: if (neg || v > UINT8_MAX) return -1; *(uint8_t *)out = (uint8_t)v; return 0;
    case TFOS_DT_U16: { if (neg || v > UINT16_MAX) return -1; uint16_t y = (uint16_t)v; memcpy(out, &y, 2); return 0; }
    case TFOS_DT_U32: { if (neg || v > UINT32_MAX) return -1; uint32_t y = (uint32_t)v; memcpy(out, &y, 4); return 0; }
    case TFOS_DT_U64: if (neg && v) return -1; memcpy(out, &v, 8); return 0;
    }
    return -1;
}

int tfos__oip_numbers(const char *data, size_t len, int dtype, void *out, size_t n, size_t *at)
{
    size_t es = tfos__dtype_size(dtype);
    const char *p = data, *end = data + len;
    *at = 0;
    /* the text was checked by tfos__oip_parse: brackets, commas, values */
    while (p < end) {
        char ch = *p;
        if (ch == '[' || ch == ']' || ch == ',' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            p++;
            continue;
        }
        const char *v = p;
        if (*at >= n)
            return -3;
        if (ch == '"' || ch == '{') /* a string, an object: not a value of any datatype here */
            return -2;
        while (p < end && *p != ',' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            p++;
        if (put(v, (size_t)(p - v), dtype, (char *)out + *at * es))
            return -2;
        (*at)++;
    }
    return *at == n ? 0 : -1;
}

/* ---- answers ---------------------------------------------------------------------- */

/* A float as JSON: 9 significant digits, which always read back as the
 * same float (printf's %.9g does the same, several times slower). The
 * digits come from one multiplication in double: its error (< 1e-7 of a
 * unit of the last digit) can move the ninth digit by one only at an exact
 * tie, and a ninth digit one off still lies within half a float's spacing
 * of the value. Trailing zeros go; -5 <= exponent < 9 is written without
 * one, as %g does. NaN and the infinities, which JSON has not: null. */
int tfos__oip_fmt_f32(char *out, float v)
{
    static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (!isfinite(v))
        return (int)(memcpy(out, "null", 4), 4);
    if (v == 0)
        return (int)(memcpy(out, signbit(v) ? "-0" : "0", signbit(v) ? 2 : 1), signbit(v) ? 2 : 1);
    double d = fabs((double)v);
    int e10 = (int)floor(log10(d));
    double sc = 0;
    for (int tries = 0; tries < 3; tries++) {
        int k = 8 - e10;
        if (k < -22 || k > 22)
            return snprintf(out, 40, "%.9g", (double)v);
        sc = nearbyint(k >= 0 ? d * p10[k] : d / p10[-k]);
        if (sc >= 1e9)
            e10++;
        else if (sc < 1e8)
            e10--;
        else
            break;
    }
    if (sc < 1e8 || sc >= 1e9)
        return snprintf(out, 40, "%.9g", (double)v);
    char dig[10];
    uint32_t m = (uint32_t)sc;
    for (int i = 8; i >= 0; i--, m /= 10)
        dig[i] = (char)('0' + m % 10);
    int nd = 9;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int n = 0;
    if (v < 0)
        out[n++] = '-';
    if (e10 >= 0 && e10 < 9) {
        for (int i = 0; i <= e10; i++)
            out[n++] = i < nd ? dig[i] : '0';
        if (nd > e10 + 1) {
            out[n++] = '.';
            for (int i = e10 + 1; i < nd; i++)
                out[n++] = dig[i];
        }
    } else if (e10 < 0 && e10 >= -5) {
        out[n++] = '0';
        out[n++] = '.';
        for (int i = -1; i > e10; i--)
            out[n++] = '0';
        for (int i = 0; i < nd; i++)
            out[n++] = dig[i];
    } else {
        out[n++] = dig[0];
        if (nd > 1) {
            out[n++] = '.';
            for (int i = 1; i < nd; i++)
                out[n++] = dig[i];
        }
        n += snprintf(out + n, 12, "e%+03d", e10);
    }
    return n;
}
