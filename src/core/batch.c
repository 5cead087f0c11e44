/* batch.c: the columnar batch: layout, header, validation. */
#include "core/batch.h"

#include "tfos/tfos.h"

#include <stdio.h>
#include <string.h>

/* The one table of element types: every other place (tfos serve's OIP
 * names, the Python extension's DTYPES, hence tfos.feed and tfos.serve)
 * reads it through the functions below. */
static const struct {
    size_t size;
    const char *numpy; /* numpy's dtype string */
    const char *oip;   /* the Open Inference Protocol's datatype */
} dtypes[TFOS_DT_MAX_ + 1] = {
    [TFOS_DT_BOOL] = {1, "|b1", "BOOL"},  [TFOS_DT_I8] = {1, "|i1", "INT8"},    [TFOS_DT_I16] = {2, "<i2", "INT16"},
    [TFOS_DT_I32] = {4, "<i4", "INT32"},  [TFOS_DT_I64] = {8, "<i8", "INT64"},  [TFOS_DT_U8] = {1, "|u1", "UINT8"},
    [TFOS_DT_U16] = {2, "<u2", "UINT16"}, [TFOS_DT_U32] = {4, "<u4", "UINT32"}, [TFOS_DT_U64] = {8, "<u8", "UINT64"},
    [TFOS_DT_F32] = {4, "<f4", "FP32"},   [TFOS_DT_F64] = {8, "<f8", "FP64"},
};

size_t tfos__dtype_size(int dt)
{
    return dt >= 1 && dt <= TFOS_DT_MAX_ ? dtypes[dt].size : 0;
}

const char *tfos__dtype_numpy(int dt)
{
    return dt >= 1 && dt <= TFOS_DT_MAX_ ? dtypes[dt].numpy : NULL;
}

const char *tfos__dtype_oip(int dt)
{
    return dt >= 1 && dt <= TFOS_DT_MAX_ ? dtypes[dt].oip : NULL;
}

int tfos__dtype_by_oip(const char *name)
{
    for (int dt = 1; name && dt <= TFOS_DT_MAX_; dt++)
        if (!strcmp(name, dtypes[dt].oip))
            return dt;
    return 0;
}

#define LIMIT ((uint64_t)1 << 40) /* no batch, column or count beyond 1 TiB */

uint64_t tfos__col_row_elems(const tfos__col *c)
{
    uint64_t n = 1;
    for (int i = 0; i < c->ndim; i++) {
        if (c->shape[i] == 0 || n > LIMIT / c->shape[i])
            return 0;
        n *= c->shape[i];
    }
    return n;
}

static uint64_t align64(uint64_t x)
{
    return (x + 63) & ~(uint64_t)63;
}

uint64_t tfos__batch_layout(uint32_t nrows, uint32_t ncols, tfos__col *cols)
{
    if (ncols == 0 || ncols > TFOS_BATCH_MAX_COLS)
        return 0;
    uint64_t pos = TFOS_BATCH_HEADER + (uint64_t)ncols * TFOS_BATCH_COLENTRY;
    for (uint32_t i = 0; i < ncols; i++)
        pos += (cols[i].name_len + 7u) & ~7u;
    for (uint32_t i = 0; i < ncols; i++) {
        tfos__col *c = &cols[i];
        if (c->kind == TFOS_COL_FIXED) {
            size_t isz = tfos__dtype_size(c->dtype);
            uint64_t per = tfos__col_row_elems(c);
            if (!isz || !per || c->ndim > TFOS_BATCH_MAX_DIMS || per > LIMIT / isz ||
                (nrows && per * isz > LIMIT / nrows))
                return 0;
            c->data_len = per * isz * nrows;
            c->offsets_off = 0;
        } else if (c->kind == TFOS_COL_BYTES || c->kind == TFOS_COL_STR) {
            if (c->data_len > LIMIT)
                return 0;
            pos = align64(pos);
            c->offsets_off = pos;
            pos += 8 * ((uint64_t)nrows + 1);
        } else {
            return 0;
        }
        pos = align64(pos);
        c->data_off = pos;
        pos += c->data_len;
        if (pos > LIMIT)
            return 0;
    }
    return align64(pos);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4); /* the format is little-endian; so is every host tfos builds on */
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
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

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the columnar batch format is little-endian");

void tfos__batch_write_header(void *buf, uint64_t total, uint32_t nrows, uint32_t ncols, uint32_t flags,
                              const tfos__col *cols)
{
    uint8_t *b = buf;
    memcpy(b, "TCB1", 4);
    put32(b + 4, nrows);
    put32(b + 8, ncols);
    put32(b + 12, flags);
    put64(b + 16, total);
    put64(b + 24, 0);
    uint64_t name_pos = TFOS_BATCH_HEADER + (uint64_t)ncols * TFOS_BATCH_COLENTRY;
    for (uint32_t i = 0; i < ncols; i++) {
        const tfos__col *c = &cols[i];
        uint8_t *e = b + TFOS_BATCH_HEADER + (size_t)i * TFOS_BATCH_COLENTRY;
        memset(e, 0, TFOS_BATCH_COLENTRY);
        e[0] = c->kind;
        e[1] = c->kind == TFOS_COL_FIXED ? c->dtype : 0;
        e[2] = c->kind == TFOS_COL_FIXED ? c->ndim : 0;
        memcpy(e + 4, &c->name_len, 2);
        for (int d = 0; d < TFOS_BATCH_MAX_DIMS; d++)
            put32(e + 8 + 4 * d, c->kind == TFOS_COL_FIXED && d < c->ndim ? c->shape[d] : 0);
        put64(e + 40, c->data_off);
        put64(e + 48, c->data_len);
        put64(e + 56, c->offsets_off);
        put64(e + 64, name_pos);
        if (c->name_len)
            memcpy(b + name_pos, c->name, c->name_len);
        uint64_t padded = (c->name_len + 7u) & ~7u;
        memset(b + name_pos + c->name_len, 0, padded - c->name_len);
        name_pos += padded;
    }
}

uint32_t tfos__batch_ncols(const void *buf, size_t len)
{
    const uint8_t *b = buf;
    if (len < TFOS_BATCH_HEADER || memcmp(b, "TCB1", 4))
        return 0;
    uint32_t n = get32(b + 8);
    return n <= TFOS_BATCH_MAX_COLS ? n : 0;
}

#define BAD(...)                                 \
    do {                                         \
        if (err)                                 \
            snprintf(err, errlen, __VA_ARGS__);  \
        return TFOS_EPROTO;                      \
    } while (0)

/* [off, off+n) inside [0, len)? */
static int inside(uint64_t off, uint64_t n, uint64_t len)
{
    return off <= len && n <= len - off;
}

int tfos__batch_open(const void *buf, size_t len, tfos__batch_view *v, tfos__col *storage, uint32_t storage_cols,
                     char *err, size_t errlen)
{
    const uint8_t *b = buf;
    if (len < TFOS_BATCH_HEADER || memcmp(b, "TCB1", 4))
        BAD("not a columnar batch (bad magic or %zu bytes)", len);
    uint32_t nrows = get32(b + 4), ncols = get32(b + 8), flags = get32(b + 12);
    uint64_t total = get64(b + 16);
    if (total != len)
        BAD("batch says %llu bytes but the record has %zu", (unsigned long long)total, len);
    if (ncols == 0 || ncols > TFOS_BATCH_MAX_COLS || ncols > storage_cols)
        BAD("batch has %u columns", ncols);
    if ((flags & ~(uint32_t)(TFOS_BATCH_FLAT_ROWS | TFOS_BATCH_LIST_ROWS)) ||
        (flags & (TFOS_BATCH_FLAT_ROWS | TFOS_BATCH_LIST_ROWS)) == (TFOS_BATCH_FLAT_ROWS | TFOS_BATCH_LIST_ROWS))
        BAD("unknown batch flags 0x%x", flags);
    if ((flags & TFOS_BATCH_FLAT_ROWS) && ncols != 1)
        BAD("flat rows need exactly one column, batch has %u", ncols);
    if (!inside(TFOS_BATCH_HEADER, (uint64_t)ncols * TFOS_BATCH_COLENTRY, len))
        BAD("column table runs past the batch");
    for (uint32_t i = 0; i < ncols; i++) {
        const uint8_t *e = b + TFOS_BATCH_HEADER + (size_t)i * TFOS_BATCH_COLENTRY;
        tfos__col *c = &storage[i];
        memset(c, 0, sizeof *c);
        c->kind = e[0];
        c->dtype = e[1];
        c->ndim = e[2];
        memcpy(&c->name_len, e + 4, 2);
        for (int d = 0; d < TFOS_BATCH_MAX_DIMS; d++)
            c->shape[d] = get32(e + 8 + 4 * d);
        c->data_off = get64(e + 40);
        c->data_len = get64(e + 48);
        c->offsets_off = get64(e + 56);
        uint64_t name_off = get64(e + 64);
        if (!inside(name_off, c->name_len, len))
            BAD("column %u: name outside the batch", i);
        c->name = (const char *)b + name_off;
        if (!inside(c->data_off, c->data_len, len) || (c->data_off & 63))
            BAD("column %u: data region outside the batch or misaligned", i);
        if (c->kind == TFOS_COL_FIXED) {
            size_t isz = tfos__dtype_size(c->dtype);
            if (!isz)
                BAD("column %u: unknown dtype %u", i, c->dtype);
            if (c->ndim > TFOS_BATCH_MAX_DIMS)
                BAD("column %u: %u dimensions", i, c->ndim);
            uint64_t per = tfos__col_row_elems(c);
            if (!per)
                BAD("column %u: bad shape", i);
            if (per > LIMIT / isz || (nrows && per * isz > LIMIT / nrows) || per * isz * nrows != c->data_len)
                BAD("column %u: %llu data bytes do not match %u rows of its shape", i,
                    (unsigned long long)c->data_len, nrows);
            if (c->offsets_off)
                BAD("column %u: fixed column with offsets", i);
        } else if (c->kind == TFOS_COL_BYTES || c->kind == TFOS_COL_STR) {
            if (c->dtype || c->ndim)
                BAD("column %u: variable-length column with a dtype", i);
            if ((c->offsets_off & 63) || !inside(c->offsets_off, 8 * ((uint64_t)nrows + 1), len))
                BAD("column %u: offsets outside the batch or misaligned", i);
            const uint8_t *offs = b + c->offsets_off;
            uint64_t prev = 0;
            if (get64(offs) != 0)
                BAD("column %u: first offset is not 0", i);
            for (uint32_t r = 1; r <= nrows; r++) {
                uint64_t o = get64(offs + 8 * (size_t)r);
                if (o < prev || o > c->data_len)
                    BAD("column %u, row %u: offset out of order or past the data", i, r - 1);
                prev = o;
            }
        } else {
            BAD("column %u: unknown kind %u", i, c->kind);
        }
    }
    v->nrows = nrows;
    v->ncols = ncols;
    v->flags = flags;
    v->cols = storage;
    return 0;
}
