/* codec_test.c: columnar batch round trips of every dtype and kind, the
 * encoder's argument checks, the decoder's rejection of each corrupt field,
 * and a deterministic mutation fuzz of the decoder (run it under ASan/UBSan:
 * every mutated batch is copied into an exact-size heap block, so a read past
 * its end is caught). */
#include "check.h"
#include "core/codec.h"
#include "tfos/tfos.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void *xalloc(size_t n)
{
    void *p = NULL;
    CHECK(posix_memalign(&p, 64, n ? n : 64) == 0);
    return p;
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void dtypes(void)
{
    static const char *names[] = {NULL, "|b1", "|i1", "<i2", "<i4", "<i8", "|u1",
                                  "<u2", "<u4", "<u8", "<f4", "<f8"};
    static const size_t sizes[] = {0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
    for (int dt = 1; dt <= TFOS_TCB_DTYPE_MAX_; dt++) {
        CHECK_EQ(tfos__tcb_dtype_size(dt), sizes[dt]);
        CHECK_STR(tfos__tcb_dtype_numpy(dt), names[dt]);
        CHECK_EQ(tfos__tcb_dtype_from_numpy(names[dt], 3), dt);
    }
    CHECK_EQ(tfos__tcb_dtype_size(0), 0);
    CHECK_EQ(tfos__tcb_dtype_size(12), 0);
    CHECK(tfos__tcb_dtype_numpy(0) == NULL);
    CHECK(tfos__tcb_dtype_numpy(99) == NULL);
    CHECK_EQ(tfos__tcb_dtype_from_numpy("<u1", 3), TFOS_TCB_U8);
    CHECK_EQ(tfos__tcb_dtype_from_numpy(">f4", 3), 0);
    CHECK_EQ(tfos__tcb_dtype_from_numpy("|f4", 3), 0);
    CHECK_EQ(tfos__tcb_dtype_from_numpy("<f2", 3), 0);
    CHECK_EQ(tfos__tcb_dtype_from_numpy("<f4x", 4), 0);
    CHECK_EQ(tfos__tcb_dtype_from_numpy("O", 1), 0);
}

/* Every dtype as a scalar column and as a (2, 3) column, filled by rows and by
 * whole columns, decoded back byte for byte. */
static void roundtrip_fixed(void)
{
    enum { NROWS = 5 };
    tfos__tcb_col cols[2 * TFOS_TCB_DTYPE_MAX_];
    uint32_t ncols = 0;
    char names[2 * TFOS_TCB_DTYPE_MAX_][16];
    for (int dt = 1; dt <= TFOS_TCB_DTYPE_MAX_; dt++) {
        for (int shaped = 0; shaped < 2; shaped++) {
            tfos__tcb_col *c = &cols[ncols];
            memset(c, 0, sizeof *c);
            snprintf(names[ncols], sizeof names[ncols], "c%d_%d", dt, shaped);
            c->name = names[ncols];
            c->name_len = (uint16_t)strlen(names[ncols]);
            c->kind = TFOS_TCB_FIXED;
            c->dtype = (uint8_t)dt;
            if (shaped) {
                c->ndim = 2;
                c->shape[0] = 2;
                c->shape[1] = 3;
            }
            ncols++;
        }
    }
    tfos__tcb_enc e;
    char err[200];
    CHECK_EQ(tfos__tcb_layout(&e, NROWS, ncols, cols, 0, err, sizeof err), 0);
    CHECK_EQ(e.total % 64, 0);
    uint8_t *buf = xalloc(e.total);
    memset(buf, 0xAA, e.total); /* stale ring memory */
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total - 1), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    for (uint32_t i = 0; i < ncols; i++) {
        CHECK_EQ(cols[i].data_off % 64, 0);
        CHECK_EQ(cols[i].row_bytes, tfos__tcb_dtype_size(cols[i].dtype) * (cols[i].ndim ? 6 : 1));
        CHECK_EQ(cols[i].data_len, cols[i].row_bytes * NROWS);
        CHECK(tfos__tcb_offsets(&e, i) == NULL);
        if (i % 2 == 0) { /* row at a time */
            for (uint32_t r = 0; r < NROWS; r++) {
                uint8_t row[64];
                for (size_t k = 0; k < cols[i].row_bytes; k++)
                    row[k] = (uint8_t)(i * 31 + r * 7 + k);
                CHECK_EQ(tfos__tcb_set_fixed(&e, i, r, row), 0);
            }
        } else { /* whole column */
            uint8_t *d = tfos__tcb_data(&e, i);
            for (size_t k = 0; k < cols[i].data_len; k++)
                d[k] = (uint8_t)(i * 31 + (k / cols[i].row_bytes) * 7 + k % cols[i].row_bytes);
        }
    }
    CHECK_EQ(tfos__tcb_set_fixed(&e, 0, NROWS, buf), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_set_fixed(&e, ncols, 0, buf), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_set_var(&e, 0, 0, "x", 1), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_finish(&e, err, sizeof err), 0);

    tfos__tcb_view v;
    CHECK_EQ(tfos__tcb_open(buf, e.total, &v, err, sizeof err), 0);
    CHECK_EQ(v.nrows, NROWS);
    CHECK_EQ(v.ncols, ncols);
    CHECK_EQ(v.flags, 0);
    for (uint32_t i = 0; i < ncols; i++) {
        tfos__tcb_col c;
        CHECK_EQ(tfos__tcb_column(&v, i, &c), 0);
        CHECK_EQ(c.kind, TFOS_TCB_FIXED);
        CHECK_EQ(c.dtype, cols[i].dtype);
        CHECK_EQ(c.ndim, cols[i].ndim);
        CHECK_EQ(c.shape[0], cols[i].shape[0]);
        CHECK_EQ(c.shape[1], cols[i].shape[1]);
        CHECK_EQ(c.name_len, cols[i].name_len);
        CHECK(memcmp(c.name, names[i], c.name_len) == 0);
        CHECK_EQ(c.data_off, cols[i].data_off);
        CHECK_EQ(c.row_bytes, cols[i].row_bytes);
        const uint8_t *d = tfos__tcb_col_data(&v, &c);
        CHECK(d == buf + cols[i].data_off);
        for (size_t k = 0; k < c.data_len; k++)
            CHECK_EQ(d[k], (uint8_t)(i * 31 + (k / c.row_bytes) * 7 + k % c.row_bytes));
        const uint8_t *p;
        size_t n;
        CHECK_EQ(tfos__tcb_var(&v, &c, 0, &p, &n), TFOS_EINVAL);
    }
    tfos__tcb_col c;
    CHECK_EQ(tfos__tcb_column(&v, ncols, &c), TFOS_EINVAL);
    /* Typed values read back as numbers (the consumer's view). */
    double f = 0;
    memcpy(&f, buf + cols[2 * (TFOS_TCB_F64 - 1)].data_off, 8);
    (void)f;
    free(buf);
}

/* A batch with a shaped F32 column, an unnamed STR column and a BYTES column
 * holding empty values. */
static const char *strs[3] = {"héllo", "", "wörld!"};
static const char *bytes[3] = {"", "\0\1\2", ""};
static const size_t bytes_len[3] = {0, 3, 0};

static uint8_t *build_sample(size_t *len, tfos__tcb_col *cols)
{
    memset(cols, 0, 3 * sizeof *cols);
    cols[0].name = "x";
    cols[0].name_len = 1;
    cols[0].kind = TFOS_TCB_FIXED;
    cols[0].dtype = TFOS_TCB_F32;
    cols[0].ndim = 1;
    cols[0].shape[0] = 2;
    cols[1].kind = TFOS_TCB_STR;
    cols[2].name = "raw";
    cols[2].name_len = 3;
    cols[2].kind = TFOS_TCB_BYTES;
    for (int r = 0; r < 3; r++) {
        cols[1].data_len += strlen(strs[r]);
        cols[2].data_len += bytes_len[r];
    }
    tfos__tcb_enc e;
    char err[200];
    CHECK_EQ(tfos__tcb_layout(&e, 3, 3, cols, 0, err, sizeof err), 0);
    uint8_t *buf = xalloc(e.total);
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    for (uint32_t r = 0; r < 3; r++) {
        float x[2] = {(float)r, (float)r + 0.5f};
        CHECK_EQ(tfos__tcb_set_fixed(&e, 0, r, x), 0);
        CHECK_EQ(tfos__tcb_set_var(&e, 1, r, strs[r], strlen(strs[r])), 0);
        CHECK_EQ(tfos__tcb_set_var(&e, 2, r, bytes[r], bytes_len[r]), 0);
    }
    CHECK_EQ(tfos__tcb_finish(&e, err, sizeof err), 0);
    *len = e.total;
    return buf;
}

static void roundtrip_var(void)
{
    tfos__tcb_col cols[3];
    size_t len;
    uint8_t *buf = build_sample(&len, cols);
    tfos__tcb_view v;
    char err[200];
    CHECK_EQ(tfos__tcb_open(buf, len, &v, err, sizeof err), 0);
    CHECK_EQ(v.nrows, 3);
    CHECK_EQ(v.ncols, 3);
    tfos__tcb_col c;
    CHECK_EQ(tfos__tcb_column(&v, 0, &c), 0);
    const float *x = tfos__tcb_col_data(&v, &c);
    CHECK(x[0] == 0.0f && x[1] == 0.5f && x[4] == 2.0f && x[5] == 2.5f);
    CHECK_EQ(tfos__tcb_column(&v, 1, &c), 0);
    CHECK_EQ(c.kind, TFOS_TCB_STR);
    CHECK_EQ(c.name_len, 0);
    CHECK_EQ(c.offsets_off % 64, 0);
    for (uint32_t r = 0; r < 3; r++) {
        const uint8_t *p;
        size_t n;
        CHECK_EQ(tfos__tcb_var(&v, &c, r, &p, &n), 0);
        CHECK_EQ(n, strlen(strs[r]));
        CHECK(memcmp(p, strs[r], n) == 0);
    }
    CHECK_EQ(tfos__tcb_check_utf8(&v, &c, err, sizeof err), 0);
    const uint8_t *p;
    size_t n;
    CHECK_EQ(tfos__tcb_var(&v, &c, 3, &p, &n), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_column(&v, 2, &c), 0);
    CHECK_EQ(c.kind, TFOS_TCB_BYTES);
    CHECK(memcmp(c.name, "raw", 3) == 0);
    for (uint32_t r = 0; r < 3; r++) {
        CHECK_EQ(tfos__tcb_var(&v, &c, r, &p, &n), 0);
        CHECK_EQ(n, bytes_len[r]);
        CHECK(memcmp(p, bytes[r], n) == 0);
    }
    /* A STR column holding invalid UTF-8 opens (structure is fine) but fails
     * the UTF-8 check, naming the row. */
    CHECK_EQ(tfos__tcb_column(&v, 1, &c), 0);
    buf[c.data_off + 6] = 0xff; /* inside "wörld!" (row 2) */
    CHECK_EQ(tfos__tcb_open(buf, len, &v, err, sizeof err), 0);
    CHECK_EQ(tfos__tcb_check_utf8(&v, &c, err, sizeof err), TFOS_EPROTO);
    CHECK(strstr(err, "row 2"));
    free(buf);
}

static void var_whole_columns_and_zero_rows(void)
{
    /* Whole var column: offsets and values with memcpy. */
    tfos__tcb_col cols[2];
    memset(cols, 0, sizeof cols);
    cols[0].kind = TFOS_TCB_STR;
    cols[0].data_len = 6;
    cols[1].kind = TFOS_TCB_FIXED;
    cols[1].dtype = TFOS_TCB_BOOL;
    tfos__tcb_enc e;
    char err[200];
    CHECK_EQ(tfos__tcb_layout(&e, 3, 2, cols, 0, err, sizeof err), 0);
    uint8_t *buf = xalloc(e.total);
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    uint64_t offs[4] = {0, 1, 3, 6};
    memcpy(tfos__tcb_offsets(&e, 0), offs, sizeof offs);
    memcpy(tfos__tcb_data(&e, 0), "abbccc", 6);
    memcpy(tfos__tcb_data(&e, 1), "\1\0\1", 3);
    CHECK_EQ(tfos__tcb_finish(&e, err, sizeof err), 0);
    tfos__tcb_view v;
    CHECK_EQ(tfos__tcb_open(buf, e.total, &v, err, sizeof err), 0);
    tfos__tcb_col c;
    const uint8_t *p;
    size_t n;
    CHECK_EQ(tfos__tcb_column(&v, 0, &c), 0);
    CHECK_EQ(tfos__tcb_var(&v, &c, 2, &p, &n), 0);
    CHECK_EQ(n, 3);
    CHECK(memcmp(p, "ccc", 3) == 0);
    /* finish notices a column filled short. */
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    CHECK_EQ(tfos__tcb_set_var(&e, 0, 0, "a", 1), 0);
    CHECK_EQ(tfos__tcb_set_var(&e, 0, 1, "bb", 2), 0);
    CHECK_EQ(tfos__tcb_set_var(&e, 0, 2, "cccc", 4), TFOS_ETOOBIG); /* over data_len */
    CHECK_EQ(tfos__tcb_set_var(&e, 0, 2, "cc", 2), 0);
    CHECK_EQ(tfos__tcb_set_var(&e, 0, 3, "", 0), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_finish(&e, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "5 bytes"));
    free(buf);

    /* Zero rows: FIXED (8 dims), STR and BYTES. */
    memset(cols, 0, sizeof cols);
    cols[0].kind = TFOS_TCB_FIXED;
    cols[0].dtype = TFOS_TCB_U16;
    cols[0].ndim = 8;
    for (int d = 0; d < 8; d++)
        cols[0].shape[d] = (uint32_t)(d % 2 + 1);
    cols[1].kind = TFOS_TCB_BYTES;
    CHECK_EQ(tfos__tcb_layout(&e, 0, 2, cols, 0, err, sizeof err), 0);
    CHECK_EQ(cols[0].row_bytes, 2 * 16);
    buf = xalloc(e.total);
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    CHECK_EQ(tfos__tcb_finish(&e, err, sizeof err), 0);
    CHECK_EQ(tfos__tcb_open(buf, e.total, &v, err, sizeof err), 0);
    CHECK_EQ(v.nrows, 0);
    CHECK_EQ(tfos__tcb_column(&v, 0, &c), 0);
    CHECK_EQ(c.ndim, 8);
    CHECK_EQ(c.shape[7], 2);
    CHECK_EQ(c.data_len, 0);
    CHECK_EQ(tfos__tcb_column(&v, 1, &c), 0);
    CHECK_EQ(tfos__tcb_var(&v, &c, 0, &p, &n), TFOS_EINVAL);
    free(buf);

    /* Flat rows: one column. */
    memset(cols, 0, sizeof cols);
    cols[0].kind = TFOS_TCB_FIXED;
    cols[0].dtype = TFOS_TCB_I64;
    CHECK_EQ(tfos__tcb_layout(&e, 2, 1, cols, TFOS_TCB_FLAT_ROWS, err, sizeof err), 0);
    buf = xalloc(e.total);
    CHECK_EQ(tfos__tcb_begin(&e, buf, e.total), 0);
    int64_t vals[2] = {-1, 1LL << 62};
    memcpy(tfos__tcb_data(&e, 0), vals, sizeof vals);
    CHECK_EQ(tfos__tcb_open(buf, e.total, &v, err, sizeof err), 0);
    CHECK_EQ(v.flags, TFOS_TCB_FLAT_ROWS);
    CHECK_EQ(tfos__tcb_column(&v, 0, &c), 0);
    CHECK(memcmp(tfos__tcb_col_data(&v, &c), vals, sizeof vals) == 0);
    free(buf);
}

static void layout_errors(void)
{
    tfos__tcb_col cols[2];
    tfos__tcb_enc e;
    char err[200];
    memset(cols, 0, sizeof cols);
    cols[0].kind = TFOS_TCB_FIXED;
    cols[0].dtype = TFOS_TCB_F32;
    cols[1] = cols[0];
    CHECK_EQ(tfos__tcb_layout(&e, 1, 0, cols, 0, err, sizeof err), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_layout(&e, 1, TFOS_TCB_MAX_COLS + 1, cols, 0, err, sizeof err), TFOS_EINVAL);
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 8, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "flags"));
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, TFOS_TCB_FLAT_ROWS, err, sizeof err), TFOS_EINVAL);
    cols[1].kind = 3;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "column 1: unknown kind"));
    cols[1].kind = TFOS_TCB_FIXED;
    cols[1].dtype = 0;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "dtype"));
    cols[1].dtype = 12;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_EINVAL);
    cols[1].dtype = TFOS_TCB_F64;
    cols[1].ndim = 9;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_EINVAL);
    cols[1].ndim = 2;
    cols[1].shape[0] = 3;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_EINVAL);
    CHECK(strstr(err, "dimension 1 is 0"));
    cols[1].shape[0] = cols[1].shape[1] = 0xffffffffu; /* product overflows 2^40 */
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_ETOOBIG);
    cols[1].shape[0] = cols[1].shape[1] = 1u << 15; /* 2^30 * 8 bytes per row: fits */
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), 0);
    CHECK_EQ(tfos__tcb_layout(&e, 1u << 10, 2, cols, 0, err, sizeof err), TFOS_ETOOBIG); /* 2^43 */
    cols[1].ndim = 0;
    cols[1].kind = TFOS_TCB_STR;
    cols[1].data_len = TFOS_TCB_LIMIT + 1;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_ETOOBIG);
    cols[1].data_len = 0;
    cols[1].name_len = 3;
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), TFOS_EINVAL);
    cols[1].name = "abc";
    CHECK_EQ(tfos__tcb_layout(&e, 1, 2, cols, 0, err, sizeof err), 0);
    uint8_t small[16];
    CHECK_EQ(tfos__tcb_begin(&e, small, sizeof small), TFOS_EINVAL);
}

/* Each corrupt field of a valid batch is rejected with TFOS_EPROTO and a
 * message that says what is wrong. */
static uint8_t *sample_buf;
static size_t sample_len;
static tfos__tcb_col sample_cols[3];

static void expect_bad(const uint8_t *b, size_t len, const char *what)
{
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, b, len);
    tfos__tcb_view v;
    char err[200] = "";
    int rc = tfos__tcb_open(copy, len, &v, err, sizeof err);
    if (rc != TFOS_EPROTO || !strstr(err, what)) {
        fprintf(stderr, "expected rejection with \"%s\", got rc %d \"%s\"\n", what, rc, err);
        exit(1);
    }
    free(copy);
}

#define ENTRY(i) (TFOS_TCB_HEADER + (i) * TFOS_TCB_COLENTRY)

static void corrupt_fields(void)
{
    sample_buf = build_sample(&sample_len, sample_cols);
    const size_t n = sample_len;
    uint8_t *b = malloc(n);
    tfos__tcb_view v;
    char err[200];
    CHECK_EQ(tfos__tcb_open(sample_buf, n, &v, err, sizeof err), 0);
#define RESET() memcpy(b, sample_buf, n)
    RESET();
    expect_bad(b, 31, "shorter than its header");
    expect_bad(b, 0, "shorter than its header");
    CHECK_EQ(tfos__tcb_open(NULL, 0, &v, err, sizeof err), TFOS_EPROTO);
    expect_bad(b, n - 1, "record has");
    b[0] = 'X';
    expect_bad(b, n, "magic");
    RESET();
    b[3] = '2';
    expect_bad(b, n, "version 0x32");
    RESET();
    put64(b + 16, n + 64);
    expect_bad(b, n, "record has");
    RESET();
    b[24] = 1;
    expect_bad(b, n, "reserved header");
    RESET();
    put32(b + 8, 0);
    expect_bad(b, n, "0 columns");
    RESET();
    put32(b + 8, 5000);
    expect_bad(b, n, "5000 columns");
    RESET();
    put32(b + 8, 40); /* table runs past the end */
    expect_bad(b, n, "column table");
    RESET();
    put32(b + 12, 2);
    expect_bad(b, n, "flags");
    RESET();
    put32(b + 12, TFOS_TCB_FLAT_ROWS);
    expect_bad(b, n, "flat rows");
    RESET();
    put32(b + 4, 1u << 31); /* rows: FIXED data length no longer matches */
    expect_bad(b, n, "do not match");
    RESET();
    put32(b + 4, 2); /* 2 rows: x has 24 bytes for 16 */
    expect_bad(b, n, "do not match");
    /* column entries */
    RESET();
    b[ENTRY(0) + 3] = 1;
    expect_bad(b, n, "reserved fields");
    RESET();
    b[ENTRY(1) + 7] = 1;
    expect_bad(b, n, "column 1: reserved");
    RESET();
    b[ENTRY(2) + 79] = 1;
    expect_bad(b, n, "column 2: reserved");
    RESET();
    b[ENTRY(0)] = 7;
    expect_bad(b, n, "unknown kind 7");
    RESET();
    b[ENTRY(0) + 1] = 0;
    expect_bad(b, n, "unknown dtype 0");
    RESET();
    b[ENTRY(0) + 1] = 200;
    expect_bad(b, n, "unknown dtype 200");
    RESET();
    b[ENTRY(0) + 1] = TFOS_TCB_F64; /* 8 bytes per element: length mismatch */
    expect_bad(b, n, "do not match");
    RESET();
    b[ENTRY(0) + 2] = 9;
    expect_bad(b, n, "9 dimensions");
    RESET();
    b[ENTRY(0) + 2] = 0; /* shape[0] is now past ndim */
    expect_bad(b, n, "past its 0 dimensions");
    RESET();
    put32(b + ENTRY(0) + 8, 0);
    expect_bad(b, n, "dimension 0 is 0");
    RESET();
    b[ENTRY(0) + 2] = 3;
    put32(b + ENTRY(0) + 8, 0xffffffffu);
    put32(b + ENTRY(0) + 12, 0xffffffffu);
    put32(b + ENTRY(0) + 16, 0xffffffffu);
    expect_bad(b, n, "shape too large");
    RESET();
    b[ENTRY(0) + 2] = 2;
    put32(b + ENTRY(0) + 8, 1u << 20);
    put32(b + ENTRY(0) + 12, 1u << 19); /* 2^39 * 4 bytes: a row over 2^40 */
    expect_bad(b, n, "shape too large");
    RESET();
    put64(b + ENTRY(0) + 48, 0); /* data_len */
    expect_bad(b, n, "do not match");
    RESET();
    put64(b + ENTRY(0) + 40, get64(b + ENTRY(0) + 40) + 8);
    expect_bad(b, n, "not 64-byte aligned");
    RESET();
    put64(b + ENTRY(0) + 40, n); /* data_len 24 past the end */
    expect_bad(b, n, "outside");
    RESET();
    put64(b + ENTRY(0) + 40, UINT64_MAX - 63); /* off + len wraps */
    expect_bad(b, n, "outside");
    RESET();
    put64(b + ENTRY(0) + 48, UINT64_MAX);
    expect_bad(b, n, "outside");
    RESET();
    put64(b + ENTRY(0) + 56, 64);
    expect_bad(b, n, "fixed column with offsets");
    RESET();
    put64(b + ENTRY(0) + 64, n); /* name off the end */
    expect_bad(b, n, "name outside");
    RESET();
    put64(b + ENTRY(0) + 64, 0); /* name inside the header */
    expect_bad(b, n, "name overlaps");
    RESET();
    b[ENTRY(0) + 4] = 200; /* name longer: overlaps the next name's place? no: next has none */
    expect_bad(b, n, "overlap");
    RESET();
    b[ENTRY(1) + 1] = TFOS_TCB_F32;
    expect_bad(b, n, "column 1: variable-length column with a dtype");
    RESET();
    put32(b + ENTRY(1) + 8, 1);
    expect_bad(b, n, "column 1: variable-length column with a shape");
    RESET();
    put64(b + ENTRY(1) + 56, get64(b + ENTRY(1) + 56) + 8);
    expect_bad(b, n, "column 1: offsets at");
    RESET();
    put64(b + ENTRY(1) + 56, n - 16);
    expect_bad(b, n, "column 1: offsets outside");
    RESET();
    put64(b + ENTRY(2) + 56, sample_cols[1].offsets_off); /* shares column 1's offsets */
    expect_bad(b, n, "column 2: offsets overlap");
    RESET();
    put64(b + ENTRY(1) + 40, sample_cols[0].data_off); /* shares column 0's data */
    expect_bad(b, n, "column 1: data overlaps");
    RESET();
    put64(b + ENTRY(2) + 40, sample_cols[1].data_off); /* column 2's data on column 1's */
    put64(b + ENTRY(2) + 48, 3);
    expect_bad(b, n, "column 2: data overlaps");
    RESET();
    put64(b + ENTRY(0) + 40, sample_cols[2].data_off); /* out of order */
    expect_bad(b, n, "overlap");
    /* var offsets */
    uint8_t *offs1 = b + sample_cols[1].offsets_off;
    RESET();
    put64(offs1, 1);
    expect_bad(b, n, "column 1: first offset is 1");
    RESET();
    put64(offs1 + 16, 1); /* row 1 ends before it starts */
    expect_bad(b, n, "column 1, row 1: offsets go backwards");
    RESET();
    put64(offs1 + 8, 1000);
    expect_bad(b, n, "column 1, row 0: value ends past");
    RESET();
    put64(offs1 + 24, sample_cols[1].data_len - 1);
    expect_bad(b, n, "values fill");
    RESET();
    put64(b + ENTRY(1) + 48, sample_cols[1].data_len + 1);
    expect_bad(b, n, "values fill");
    RESET();
    put64(offs1 + 24, UINT64_MAX);
    expect_bad(b, n, "past the column's data");
    /* Error buffer may be NULL; a 1-byte buffer is truncated, not overrun. */
    RESET();
    b[0] = 0;
    CHECK_EQ(tfos__tcb_open(b, n, &v, NULL, 0), TFOS_EPROTO);
    char tiny[1] = {'z'};
    CHECK_EQ(tfos__tcb_open(b, n, &v, tiny, 1), TFOS_EPROTO);
    CHECK_EQ(tiny[0], 0);
    /* A buffer changed after open: column() and var() check again. */
    RESET();
    CHECK_EQ(tfos__tcb_open(b, n, &v, err, sizeof err), 0);
    put64(b + ENTRY(1) + 40, UINT64_MAX - 63);
    tfos__tcb_col c;
    CHECK_EQ(tfos__tcb_column(&v, 1, &c), TFOS_EPROTO);
    RESET();
    CHECK_EQ(tfos__tcb_column(&v, 1, &c), 0);
    put64(offs1 + 8, 1u << 30);
    const uint8_t *p;
    size_t len;
    CHECK_EQ(tfos__tcb_var(&v, &c, 0, &p, &len), TFOS_EPROTO);
    CHECK_EQ(tfos__tcb_var(&v, &c, 1, &p, &len), TFOS_EPROTO);
    CHECK_EQ(tfos__tcb_var(&v, &c, 2, &p, &len), 0);
    free(b);
}

static uint64_t interesting(size_t n)
{
    static const uint64_t vals[] = {0, 1, 7, 8, 63, 64, 65, 128, 0xffffffffu, 0x100000000ull, 1ull << 40,
                                    UINT64_MAX, UINT64_MAX - 63, 1ull << 63};
    uint64_t k = next_rand() % (sizeof vals / sizeof vals[0] + 3);
    if (k == sizeof vals / sizeof vals[0])
        return n;
    if (k == sizeof vals / sizeof vals[0] + 1)
        return n - 1;
    if (k == sizeof vals / sizeof vals[0] + 2)
        return next_rand() % (n + 1);
    return vals[k];
}

/* Touch every byte the view hands out, so ASan sees any read past the block. */
static unsigned consume(const tfos__tcb_view *v)
{
    unsigned sum = 0;
    for (uint32_t i = 0; i < v->ncols; i++) {
        tfos__tcb_col c;
        CHECK_EQ(tfos__tcb_column(v, i, &c), 0);
        CHECK(c.name_off + c.name_len <= v->len);
        for (size_t k = 0; k < c.name_len; k++)
            sum += (uint8_t)c.name[k];
        const uint8_t *d = tfos__tcb_col_data(v, &c);
        CHECK(d != NULL);
        CHECK(c.data_off + c.data_len <= v->len);
        if (c.kind == TFOS_TCB_FIXED) {
            CHECK_EQ(c.data_len, c.row_bytes * v->nrows);
            for (size_t k = 0; k < c.data_len; k++)
                sum += d[k];
        } else {
            for (uint32_t r = 0; r < v->nrows; r++) {
                const uint8_t *p;
                size_t n;
                CHECK_EQ(tfos__tcb_var(v, &c, r, &p, &n), 0);
                for (size_t k = 0; k < n; k++)
                    sum += p[k];
            }
            char err[100];
            tfos__tcb_check_utf8(v, &c, err, sizeof err);
        }
    }
    return sum;
}

static void fuzz_decoder(void)
{
    /* Two seeds: the sample and a many-column fixed batch. */
    tfos__tcb_col cols[6];
    memset(cols, 0, sizeof cols);
    for (int i = 0; i < 6; i++) {
        cols[i].kind = i % 3 == 2 ? TFOS_TCB_STR : TFOS_TCB_FIXED;
        cols[i].dtype = i % 3 == 2 ? 0 : (uint8_t)(1 + i);
        cols[i].ndim = (uint8_t)(i % 3);
        cols[i].shape[0] = 2;
        cols[i].shape[1] = 1;
        cols[i].name = "abcdefghij";
        cols[i].name_len = (uint16_t)i;
        cols[i].data_len = i % 3 == 2 ? 9 : 0;
    }
    tfos__tcb_enc e;
    char err[200];
    CHECK_EQ(tfos__tcb_layout(&e, 3, 6, cols, 0, err, sizeof err), 0);
    uint8_t *seed2 = xalloc(e.total);
    CHECK_EQ(tfos__tcb_begin(&e, seed2, e.total), 0);
    for (uint32_t i = 0; i < 6; i++)
        for (uint32_t r = 0; r < 3; r++) {
            if (cols[i].kind == TFOS_TCB_FIXED) {
                uint8_t row[64];
                memset(row, (int)(i + r), sizeof row);
                CHECK_EQ(tfos__tcb_set_fixed(&e, i, r, row), 0);
            } else {
                CHECK_EQ(tfos__tcb_set_var(&e, i, r, "xyz", 3), 0);
            }
        }
    CHECK_EQ(tfos__tcb_finish(&e, err, sizeof err), 0);
    const uint8_t *seeds[2] = {sample_buf, seed2};
    size_t seed_len[2] = {sample_len, e.total};

    int accepted = 0, rejected = 0;
    uint8_t *work = malloc(4096);
    unsigned sink = 0;
    for (int iter = 0; iter < 150000; iter++) {
        int s = (int)(next_rand() % 2);
        size_t n = seed_len[s];
        CHECK(n <= 4096);
        memcpy(work, seeds[s], n);
        int muts = 1 + (int)(next_rand() % 4);
        int fix_total = (int)(next_rand() % 2);
        for (int j = 0; j < muts; j++) {
            size_t at = next_rand() % n;
            switch (next_rand() % 6) {
            case 0: work[at] = (uint8_t)next_rand(); break;
            case 1: work[at] ^= (uint8_t)(1u << (next_rand() % 8)); break;
            case 2: n = at + 1; break; /* truncate */
            case 3: /* a u64 field of the table or an offset */
                at &= ~(size_t)7;
                if (at + 8 <= n)
                    put64(work + at, interesting(n));
                break;
            case 4: /* a u32 field (counts, shapes) */
                at &= ~(size_t)3;
                if (at + 4 <= n)
                    put32(work + at, (uint32_t)interesting(n));
                break;
            default: /* a small byte field: kind, dtype, ndim */
                work[at] = (uint8_t)(next_rand() % 12);
                break;
            }
        }
        if (fix_total && n >= 24)
            put64(work + 16, n); /* get past the length check */
        uint8_t *exact = malloc(n ? n : 1);
        memcpy(exact, work, n);
        tfos__tcb_view v, v2;
        char e1[200], e2[200];
        int rc = tfos__tcb_open(exact, n, &v, e1, sizeof e1);
        int rc2 = tfos__tcb_open(exact, n, &v2, e2, sizeof e2);
        CHECK_EQ(rc, rc2); /* deterministic */
        if (rc == 0) {
            accepted++;
            CHECK_EQ(v.nrows, v2.nrows);
            sink += consume(&v);
        } else {
            CHECK_EQ(rc, TFOS_EPROTO);
            CHECK(strcmp(e1, e2) == 0 && e1[0]);
            rejected++;
        }
        free(exact);
    }
    (void)sink;
    CHECK(accepted > 100);
    CHECK(rejected > 100000);
    free(work);
    free(seed2);
    free(sample_buf);
}

int main(void)
{
    RUN(dtypes);
    RUN(roundtrip_fixed);
    RUN(roundtrip_var);
    RUN(var_whole_columns_and_zero_rows);
    RUN(layout_errors);
    RUN(corrupt_fields);
    RUN(fuzz_decoder);
    return 0;
}
