/* codec.c: the columnar batch: layout, encoder helpers, validating decoder.
 * The format is described in codec.h. The decoder trusts nothing in the
 * buffer: every count, offset and length is checked against the buffer's
 * length before it is used, with arithmetic that cannot overflow (every
 * value that takes part in a sum is first bounded by TFOS_TCB_LIMIT). */
#include "core/codec.h"

#include "tfos/tfos.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the columnar batch format is little-endian");

static const struct {
    uint8_t size;
    const char *numpy;
} dtypes[TFOS_TCB_DTYPE_MAX_ + 1] = {
    [TFOS_TCB_BOOL] = {1, "|b1"}, [TFOS_TCB_I8] = {1, "|i1"},  [TFOS_TCB_I16] = {2, "<i2"},
    [TFOS_TCB_I32] = {4, "<i4"},  [TFOS_TCB_I64] = {8, "<i8"}, [TFOS_TCB_U8] = {1, "|u1"},
    [TFOS_TCB_U16] = {2, "<u2"},  [TFOS_TCB_U32] = {4, "<u4"}, [TFOS_TCB_U64] = {8, "<u8"},
    [TFOS_TCB_F32] = {4, "<f4"},  [TFOS_TCB_F64] = {8, "<f8"},
};

size_t tfos__tcb_dtype_size(int dt)
{
    return dt >= 1 && dt <= TFOS_TCB_DTYPE_MAX_ ? dtypes[dt].size : 0;
}

const char *tfos__tcb_dtype_numpy(int dt)
{
    return dt >= 1 && dt <= TFOS_TCB_DTYPE_MAX_ ? dtypes[dt].numpy : NULL;
}

int tfos__tcb_dtype_from_numpy(const char *d, size_t n)
{
    if (n != 3 || (d[0] != '<' && d[0] != '|'))
        return 0;
    for (int dt = 1; dt <= TFOS_TCB_DTYPE_MAX_; dt++) {
        const char *np = dtypes[dt].numpy;
        if (d[1] != np[1] || d[2] != np[2])
            continue;
        /* numpy writes '|' for 1-byte types and '<' for the others; take '<'
         * for 1-byte types too (byte order means nothing there). */
        if (d[0] == np[0] || (d[0] == '<' && dtypes[dt].size == 1))
            return dt;
    }
    return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint16_t get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint64_t align64(uint64_t x)
{
    return (x + (TFOS_TCB_ALIGN - 1)) & ~(uint64_t)(TFOS_TCB_ALIGN - 1);
}

static int fail(int rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Bytes per row of a FIXED description, 0 if the dtype, ndim or shape is bad
 * or the row is larger than TFOS_TCB_LIMIT. */
static uint64_t fixed_row_bytes(uint8_t dtype, uint8_t ndim, const uint32_t *shape)
{
    uint64_t n = tfos__tcb_dtype_size(dtype);
    if (!n || ndim > TFOS_TCB_MAX_DIMS)
        return 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0 || n > TFOS_TCB_LIMIT / shape[d])
            return 0;
        n *= shape[d];
    }
    return n;
}

int tfos__tcb_layout(tfos__tcb_enc *e, uint32_t nrows, uint32_t ncols, tfos__tcb_col *cols, uint32_t flags,
                     char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    if (ncols == 0 || ncols > TFOS_TCB_MAX_COLS)
        return fail(TFOS_EINVAL, err, errlen, "a batch needs 1 to %d columns, not %u", TFOS_TCB_MAX_COLS, ncols);
    if (flags & ~(uint32_t)TFOS_TCB_FLAT_ROWS)
        return fail(TFOS_EINVAL, err, errlen, "unknown batch flags 0x%x", flags);
    if ((flags & TFOS_TCB_FLAT_ROWS) && ncols != 1)
        return fail(TFOS_EINVAL, err, errlen, "flat rows need exactly one column, not %u", ncols);
    uint64_t pos = TFOS_TCB_HEADER + (uint64_t)ncols * TFOS_TCB_COLENTRY;
    for (uint32_t i = 0; i < ncols; i++) {
        if (cols[i].name_len && !cols[i].name)
            return fail(TFOS_EINVAL, err, errlen, "column %u: name_len without a name", i);
        cols[i].name_off = pos;
        pos += (cols[i].name_len + 7u) & ~7u;
    }
    for (uint32_t i = 0; i < ncols; i++) {
        tfos__tcb_col *c = &cols[i];
        if (c->kind == TFOS_TCB_FIXED) {
            if (!tfos__tcb_dtype_size(c->dtype))
                return fail(TFOS_EINVAL, err, errlen, "column %u: unknown dtype %u", i, c->dtype);
            if (c->ndim > TFOS_TCB_MAX_DIMS)
                return fail(TFOS_EINVAL, err, errlen, "column %u: %u dimensions (at most %d)", i, c->ndim,
                            TFOS_TCB_MAX_DIMS);
            c->row_bytes = fixed_row_bytes(c->dtype, c->ndim, c->shape);
            if (!c->row_bytes) {
                for (int d = 0; d < c->ndim; d++)
                    if (c->shape[d] == 0)
                        return fail(TFOS_EINVAL, err, errlen, "column %u: dimension %d is 0", i, d);
                return fail(TFOS_ETOOBIG, err, errlen, "column %u: a row is over 2^40 bytes", i);
            }
            if (nrows && c->row_bytes > TFOS_TCB_LIMIT / nrows)
                return fail(TFOS_ETOOBIG, err, errlen, "column %u: %u rows are over 2^40 bytes", i, nrows);
            c->data_len = c->row_bytes * nrows;
            c->offsets_off = 0;
        } else if (c->kind == TFOS_TCB_BYTES || c->kind == TFOS_TCB_STR) {
            if (c->data_len > TFOS_TCB_LIMIT)
                return fail(TFOS_ETOOBIG, err, errlen, "column %u: values are over 2^40 bytes", i);
            c->row_bytes = 0;
            pos = align64(pos);
            c->offsets_off = pos;
            pos += 8 * ((uint64_t)nrows + 1);
        } else {
            return fail(TFOS_EINVAL, err, errlen, "column %u: unknown kind %u", i, c->kind);
        }
        pos = align64(pos);
        c->data_off = pos;
        pos += c->data_len;
        if (pos > TFOS_TCB_LIMIT)
            return fail(TFOS_ETOOBIG, err, errlen, "batch is over 2^40 bytes");
    }
    e->nrows = nrows;
    e->ncols = ncols;
    e->flags = flags;
    e->cols = cols;
    e->total = align64(pos);
    return 0;
}

int tfos__tcb_begin(tfos__tcb_enc *e, void *buf, size_t cap)
{
    if (!e->cols || !buf || cap < e->total)
        return TFOS_EINVAL;
    uint8_t *b = buf;
    e->buf = b;
    memcpy(b, TFOS_TCB_MAGIC, 4);
    put32(b + 4, e->nrows);
    put32(b + 8, e->ncols);
    put32(b + 12, e->flags);
    put64(b + 16, e->total);
    put64(b + 24, 0);
    for (uint32_t i = 0; i < e->ncols; i++) {
        const tfos__tcb_col *c = &e->cols[i];
        uint8_t *t = b + TFOS_TCB_HEADER + (size_t)i * TFOS_TCB_COLENTRY;
        int fixed = c->kind == TFOS_TCB_FIXED;
        memset(t, 0, TFOS_TCB_COLENTRY);
        t[0] = c->kind;
        t[1] = fixed ? c->dtype : 0;
        t[2] = fixed ? c->ndim : 0;
        memcpy(t + 4, &c->name_len, 2);
        for (int d = 0; fixed && d < c->ndim; d++)
            put32(t + 8 + 4 * d, c->shape[d]);
        put64(t + 40, c->data_off);
        put64(t + 48, c->data_len);
        put64(t + 56, c->offsets_off);
        put64(t + 64, c->name_off);
        size_t padded = (c->name_len + 7u) & ~7u;
        memset(b + c->name_off, 0, padded);
        if (c->name_len)
            memcpy(b + c->name_off, c->name, c->name_len);
    }
    /* Zero the gaps between regions so no stale memory (ring contents) goes
     * out; the data regions themselves are the caller's to fill. */
    const tfos__tcb_col *last = &e->cols[e->ncols - 1];
    uint64_t end = last->name_off + ((last->name_len + 7u) & ~7u);
    for (uint32_t i = 0; i < e->ncols; i++) {
        const tfos__tcb_col *c = &e->cols[i];
        if (c->kind != TFOS_TCB_FIXED) {
            memset(b + end, 0, c->offsets_off - end);
            put64(b + c->offsets_off, 0);
            end = c->offsets_off + 8 * ((uint64_t)e->nrows + 1);
        }
        memset(b + end, 0, c->data_off - end);
        end = c->data_off + c->data_len;
    }
    memset(b + end, 0, e->total - end);
    return 0;
}

void *tfos__tcb_data(const tfos__tcb_enc *e, uint32_t col)
{
    return col < e->ncols && e->buf ? e->buf + e->cols[col].data_off : NULL;
}

void *tfos__tcb_offsets(const tfos__tcb_enc *e, uint32_t col)
{
    if (col >= e->ncols || !e->buf || e->cols[col].kind == TFOS_TCB_FIXED)
        return NULL;
    return e->buf + e->cols[col].offsets_off;
}

int tfos__tcb_set_fixed(tfos__tcb_enc *e, uint32_t col, uint32_t row, const void *value)
{
    if (col >= e->ncols || row >= e->nrows || !e->buf || e->cols[col].kind != TFOS_TCB_FIXED)
        return TFOS_EINVAL;
    const tfos__tcb_col *c = &e->cols[col];
    memcpy(e->buf + c->data_off + (size_t)row * c->row_bytes, value, c->row_bytes);
    return 0;
}

int tfos__tcb_set_var(tfos__tcb_enc *e, uint32_t col, uint32_t row, const void *value, size_t len)
{
    if (col >= e->ncols || row >= e->nrows || !e->buf || e->cols[col].kind == TFOS_TCB_FIXED)
        return TFOS_EINVAL;
    const tfos__tcb_col *c = &e->cols[col];
    uint8_t *offs = e->buf + c->offsets_off;
    uint64_t at = get64(offs + 8 * (size_t)row);
    if (at > c->data_len || len > c->data_len - at)
        return TFOS_ETOOBIG;
    if (len)
        memcpy(e->buf + c->data_off + at, value, len);
    put64(offs + 8 * ((size_t)row + 1), at + len);
    return 0;
}

int tfos__tcb_finish(const tfos__tcb_enc *e, char *err, size_t errlen)
{
    if (!e->buf)
        return fail(TFOS_EINVAL, err, errlen, "batch not begun");
    for (uint32_t i = 0; i < e->ncols; i++) {
        const tfos__tcb_col *c = &e->cols[i];
        if (c->kind == TFOS_TCB_FIXED)
            continue;
        const uint8_t *offs = e->buf + c->offsets_off;
        uint64_t prev = get64(offs);
        if (prev != 0)
            return fail(TFOS_EINVAL, err, errlen, "column %u: first offset is not 0", i);
        for (uint32_t r = 1; r <= e->nrows; r++) {
            uint64_t o = get64(offs + 8 * (size_t)r);
            if (o < prev || o > c->data_len)
                return fail(TFOS_EINVAL, err, errlen, "column %u: row %u was not filled in order", i, r - 1);
            prev = o;
        }
        if (prev != c->data_len)
            return fail(TFOS_EINVAL, err, errlen, "column %u: rows hold %llu bytes, layout said %llu", i,
                        (unsigned long long)prev, (unsigned long long)c->data_len);
    }
    return 0;
}

/* ---- decoder ------------------------------------------------------------ */

/* [off, off+n) inside [0, len)? */
static int inside(uint64_t off, uint64_t n, uint64_t len)
{
    return off <= len && n <= len - off;
}

/* Decode and check entry i on its own (ranges inside the buffer, alignment,
 * kind/dtype/shape, sizes). Ordering and var offsets are checked by the
 * caller. */
static int parse_entry(const uint8_t *b, size_t len, uint32_t nrows, uint32_t i, tfos__tcb_col *c, char *err,
                       size_t errlen)
{
    const uint8_t *t = b + TFOS_TCB_HEADER + (size_t)i * TFOS_TCB_COLENTRY;
    memset(c, 0, sizeof *c);
    c->kind = t[0];
    c->dtype = t[1];
    c->ndim = t[2];
    c->name_len = get16(t + 4);
    for (int d = 0; d < TFOS_TCB_MAX_DIMS; d++)
        c->shape[d] = get32(t + 8 + 4 * d);
    c->data_off = get64(t + 40);
    c->data_len = get64(t + 48);
    c->offsets_off = get64(t + 56);
    c->name_off = get64(t + 64);
    if (t[3] || get16(t + 6) || get64(t + 72))
        return fail(TFOS_EPROTO, err, errlen, "column %u: reserved fields are not 0", i);
    if (!inside(c->name_off, c->name_len, len))
        return fail(TFOS_EPROTO, err, errlen, "column %u: name outside the batch", i);
    c->name = (const char *)b + c->name_off;
    if (!inside(c->data_off, c->data_len, len))
        return fail(TFOS_EPROTO, err, errlen, "column %u: data region [%llu, +%llu) outside the %zu-byte batch", i,
                    (unsigned long long)c->data_off, (unsigned long long)c->data_len, len);
    if (c->data_off % TFOS_TCB_ALIGN)
        return fail(TFOS_EPROTO, err, errlen, "column %u: data region at %llu is not 64-byte aligned", i,
                    (unsigned long long)c->data_off);
    if (c->kind == TFOS_TCB_FIXED) {
        if (!tfos__tcb_dtype_size(c->dtype))
            return fail(TFOS_EPROTO, err, errlen, "column %u: unknown dtype %u", i, c->dtype);
        if (c->ndim > TFOS_TCB_MAX_DIMS)
            return fail(TFOS_EPROTO, err, errlen, "column %u: %u dimensions (at most %d)", i, c->ndim,
                        TFOS_TCB_MAX_DIMS);
        for (int d = c->ndim; d < TFOS_TCB_MAX_DIMS; d++)
            if (c->shape[d])
                return fail(TFOS_EPROTO, err, errlen, "column %u: shape has values past its %u dimensions", i,
                            c->ndim);
        for (int d = 0; d < c->ndim; d++)
            if (!c->shape[d])
                return fail(TFOS_EPROTO, err, errlen, "column %u: dimension %d is 0", i, d);
        c->row_bytes = fixed_row_bytes(c->dtype, c->ndim, c->shape);
        if (!c->row_bytes || (nrows && c->row_bytes > TFOS_TCB_LIMIT / nrows))
            return fail(TFOS_EPROTO, err, errlen, "column %u: shape too large (over 2^40 bytes)", i);
        if (c->row_bytes * nrows != c->data_len)
            return fail(TFOS_EPROTO, err, errlen, "column %u: %llu data bytes do not match %u rows of %llu bytes", i,
                        (unsigned long long)c->data_len, nrows, (unsigned long long)c->row_bytes);
        if (c->offsets_off)
            return fail(TFOS_EPROTO, err, errlen, "column %u: fixed column with offsets", i);
    } else if (c->kind == TFOS_TCB_BYTES || c->kind == TFOS_TCB_STR) {
        if (c->dtype || c->ndim)
            return fail(TFOS_EPROTO, err, errlen, "column %u: variable-length column with a dtype or shape", i);
        for (int d = 0; d < TFOS_TCB_MAX_DIMS; d++)
            if (c->shape[d])
                return fail(TFOS_EPROTO, err, errlen, "column %u: variable-length column with a shape", i);
        /* nrows < 2^32, so 8*(nrows+1) cannot overflow. */
        if (!inside(c->offsets_off, 8 * ((uint64_t)nrows + 1), len))
            return fail(TFOS_EPROTO, err, errlen, "column %u: offsets outside the batch", i);
        if (c->offsets_off % TFOS_TCB_ALIGN)
            return fail(TFOS_EPROTO, err, errlen, "column %u: offsets at %llu are not 64-byte aligned", i,
                        (unsigned long long)c->offsets_off);
    } else {
        return fail(TFOS_EPROTO, err, errlen, "column %u: unknown kind %u", i, c->kind);
    }
    return 0;
}

int tfos__tcb_open(const void *buf, size_t len, tfos__tcb_view *v, char *err, size_t errlen)
{
    const uint8_t *b = buf;
    if (!b || len < TFOS_TCB_HEADER)
        return fail(TFOS_EPROTO, err, errlen, "not a columnar batch: %zu bytes, shorter than its header", len);
    if (memcmp(b, "TCB", 3))
        return fail(TFOS_EPROTO, err, errlen, "not a columnar batch (bad magic)");
    if (b[3] != '1')
        return fail(TFOS_EPROTO, err, errlen, "columnar batch version 0x%02x not supported (this is version 1)",
                    b[3]);
    uint32_t nrows = get32(b + 4), ncols = get32(b + 8), flags = get32(b + 12);
    uint64_t total = get64(b + 16);
    if (len > TFOS_TCB_LIMIT)
        return fail(TFOS_EPROTO, err, errlen, "batch of %zu bytes is over 2^40", len);
    if (total != len)
        return fail(TFOS_EPROTO, err, errlen, "batch says %llu bytes but the record has %zu",
                    (unsigned long long)total, len);
    if (get64(b + 24))
        return fail(TFOS_EPROTO, err, errlen, "reserved header field is not 0");
    if (ncols == 0 || ncols > TFOS_TCB_MAX_COLS)
        return fail(TFOS_EPROTO, err, errlen, "batch has %u columns (1 to %d)", ncols, TFOS_TCB_MAX_COLS);
    if (flags & ~(uint32_t)TFOS_TCB_FLAT_ROWS)
        return fail(TFOS_EPROTO, err, errlen, "unknown batch flags 0x%x", flags);
    if ((flags & TFOS_TCB_FLAT_ROWS) && ncols != 1)
        return fail(TFOS_EPROTO, err, errlen, "flat rows need exactly one column, batch has %u", ncols);
    uint64_t cursor = TFOS_TCB_HEADER + (uint64_t)ncols * TFOS_TCB_COLENTRY;
    if (cursor > len)
        return fail(TFOS_EPROTO, err, errlen, "column table (%u columns) runs past the %zu-byte batch", ncols, len);
    tfos__tcb_col c;
    int rc;
    /* Names come right after the table, in column order. */
    for (uint32_t i = 0; i < ncols; i++) {
        if ((rc = parse_entry(b, len, nrows, i, &c, err, errlen)))
            return rc;
        if (c.name_off < cursor)
            return fail(TFOS_EPROTO, err, errlen, "column %u: name overlaps the table or another name", i);
        cursor = c.name_off + c.name_len;
    }
    /* Then each column's offsets and data, in column order, never overlapping. */
    for (uint32_t i = 0; i < ncols; i++) {
        parse_entry(b, len, nrows, i, &c, NULL, 0); /* passed above */
        if (c.kind != TFOS_TCB_FIXED) {
            if (c.offsets_off < cursor)
                return fail(TFOS_EPROTO, err, errlen, "column %u: offsets overlap an earlier region", i);
            cursor = c.offsets_off + 8 * ((uint64_t)nrows + 1);
        }
        if (c.data_off < cursor)
            return fail(TFOS_EPROTO, err, errlen, "column %u: data overlaps an earlier region", i);
        cursor = c.data_off + c.data_len;
        if (c.kind == TFOS_TCB_FIXED)
            continue;
        const uint8_t *offs = b + c.offsets_off;
        uint64_t prev = get64(offs);
        if (prev != 0)
            return fail(TFOS_EPROTO, err, errlen, "column %u: first offset is %llu, not 0", i,
                        (unsigned long long)prev);
        for (uint32_t r = 1; r <= nrows; r++) {
            uint64_t o = get64(offs + 8 * (size_t)r);
            if (o < prev)
                return fail(TFOS_EPROTO, err, errlen, "column %u, row %u: offsets go backwards", i, r - 1);
            if (o > c.data_len)
                return fail(TFOS_EPROTO, err, errlen, "column %u, row %u: value ends past the column's data", i,
                            r - 1);
            prev = o;
        }
        if (prev != c.data_len)
            return fail(TFOS_EPROTO, err, errlen, "column %u: values fill %llu of %llu data bytes", i,
                        (unsigned long long)prev, (unsigned long long)c.data_len);
    }
    v->buf = b;
    v->len = len;
    v->nrows = nrows;
    v->ncols = ncols;
    v->flags = flags;
    return 0;
}

int tfos__tcb_column(const tfos__tcb_view *v, uint32_t i, tfos__tcb_col *out)
{
    if (i >= v->ncols)
        return TFOS_EINVAL;
    return parse_entry(v->buf, v->len, v->nrows, i, out, NULL, 0);
}

const void *tfos__tcb_col_data(const tfos__tcb_view *v, const tfos__tcb_col *c)
{
    return inside(c->data_off, c->data_len, v->len) ? v->buf + c->data_off : NULL;
}

int tfos__tcb_var(const tfos__tcb_view *v, const tfos__tcb_col *c, uint32_t row, const uint8_t **p, size_t *n)
{
    if (c->kind == TFOS_TCB_FIXED || row >= v->nrows)
        return TFOS_EINVAL;
    if (!inside(c->offsets_off, 8 * ((uint64_t)v->nrows + 1), v->len) || !inside(c->data_off, c->data_len, v->len))
        return TFOS_EPROTO;
    const uint8_t *offs = v->buf + c->offsets_off;
    uint64_t a = get64(offs + 8 * (size_t)row), z = get64(offs + 8 * ((size_t)row + 1));
    if (a > z || z > c->data_len)
        return TFOS_EPROTO;
    *p = v->buf + c->data_off + a;
    *n = (size_t)(z - a);
    return 0;
}

bool tfos__utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (k > n - i - 1)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

int tfos__tcb_check_utf8(const tfos__tcb_view *v, const tfos__tcb_col *c, char *err, size_t errlen)
{
    if (c->kind != TFOS_TCB_STR)
        return 0;
    for (uint32_t r = 0; r < v->nrows; r++) {
        const uint8_t *p;
        size_t n;
        int rc = tfos__tcb_var(v, c, r, &p, &n);
        if (rc)
            return fail(TFOS_EPROTO, err, errlen, "row %u: bad offsets", r);
        if (!tfos__utf8_valid(p, n))
            return fail(TFOS_EPROTO, err, errlen, "row %u: string is not valid UTF-8", r);
    }
    return 0;
}
