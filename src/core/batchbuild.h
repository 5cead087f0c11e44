/* batchbuild.h: building a columnar batch (core/batch.h, "TCB1") one row at
 * a time, for readers that learn their values row by row (the CSV and JSON
 * lines readers of `tfos run --input`).
 *
 * A builder holds up to TFOS__BUILD_MAX_COLS columns. The reader sets each
 * column's name, kind and type (from its first row), appends every row's
 * value to every column, counts the row in `nrows`, and calls
 * tfos__batch_build_finish to get the batch; that empties the columns (their
 * types stay) for the next batch. Columns keep their buffers between batches,
 * so a steady reader allocates only while its batches grow.
 *
 * Invariants the reader keeps: every one of the first `ncols` columns gets
 * exactly one value per row (a FIXED column its dtype's size times len
 * bytes, a var column one tfos__batch_build_push_var call with that row's
 * index); a reader whose
 * row fails half-way does not finish the batch (its columns disagree on the
 * row count; the input fails as a whole). */
#ifndef TFOS_CORE_BATCHBUILD_H
#define TFOS_CORE_BATCHBUILD_H
#include "core/batch.h"

#include <stddef.h>
#include <stdint.h>

#define TFOS__BUILD_MAX_COLS 1024
#define TFOS__BUILD_NAME_MAX 128

/* One column being filled. The reader sets name, kind, dtype, ndim and len;
 * vals/offs are the builder's. */
typedef struct tfos__build_col {
    char name[TFOS__BUILD_NAME_MAX]; /* NUL-terminated; "" for no name */
    uint8_t kind;                    /* TFOS_COL_FIXED, _BYTES or _STR */
    uint8_t dtype, ndim;             /* FIXED: dtype, and 0 (scalar) or 1 (array of len) */
    uint32_t len;                    /* FIXED arrays (ndim 1): elements per row */
    uint8_t *vals;                   /* FIXED: the values, row-major; var: the value bytes */
    size_t vlen, vcap;
    uint64_t *offs;                  /* var: nrows+1 offsets into vals */
    size_t ocap;
} tfos__build_col;

typedef struct tfos__batch_build {
    int ncols;       /* columns in use, set by the reader */
    uint32_t nrows;  /* rows appended since the last finish, counted by the reader */
    tfos__build_col cols[TFOS__BUILD_MAX_COLS];
    tfos__col desc[TFOS__BUILD_MAX_COLS]; /* scratch for the layout */
    uint8_t *out;    /* the finished batch */
    size_t out_cap;
} tfos__batch_build;

/* Zero a builder (no allocation). */
void tfos__batch_build_init(tfos__batch_build *b);

/* Free every buffer the builder holds; it may be initialised again. */
void tfos__batch_build_fini(tfos__batch_build *b);

/* Append `size` bytes (one FIXED value, or one element of an array) to a
 * column. 0 or TFOS_ENOMEM. */
int tfos__batch_build_push_fixed(tfos__build_col *c, const void *v, size_t size);

/* Append row `row`'s value s[0..n) to a var (BYTES/STR) column; rows come in
 * order from 0 since the last finish. 0 or TFOS_ENOMEM. */
int tfos__batch_build_push_var(tfos__build_col *c, uint32_t row, const char *s, size_t n);

/* Lay out and write the batch of the `nrows` rows appended so far (flags: the
 * TFOS_BATCH_* flags) into a buffer the builder owns, valid until the next
 * finish or fini; then empty the columns and set nrows to 0. Returns 0,
 * TFOS_ETOOBIG when the batch cannot be described (over the layout's
 * limits), or TFOS_ENOMEM; on error the columns are left as they were. */
int tfos__batch_build_finish(tfos__batch_build *b, uint32_t flags, const void **batch, size_t *len);

#endif
