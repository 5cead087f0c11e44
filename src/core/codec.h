/* codec.h: the columnar batch ("TCB1"): encoder into caller memory and a
 * validating decoder.
 *
 * A batch is N rows of C columns. A column is FIXED (numbers of one dtype
 * with one per-row shape of 0..8 dims, each dim >= 1, stored row-major so a
 * consumer views it without copying as
 *   np.frombuffer(buf, dtype, count=N*prod(shape), offset=data_off)
 *     .reshape((N,) + shape))
 * or variable-length BYTES / STR (one value per row, N+1 offsets).
 *
 * Layout (version 1, the "1" of the magic), little-endian, all offsets from
 * the start of the batch. It is byte-for-byte the layout of core/batch.h, so
 * batches from either encoder decode with either decoder.
 *
 *   header, 32 bytes
 *     0  "TCB1"        4  u32 nrows     8  u32 ncols (1..4096)
 *     12 u32 flags     16 u64 total_len (== the record's length)
 *     24 u64 reserved (0)
 *   column table, ncols entries of 80 bytes
 *     0  u8 kind (TFOS_TCB_FIXED/BYTES/STR)
 *     1  u8 dtype (FIXED: TFOS_TCB_* code; var: 0)
 *     2  u8 ndim (FIXED: 0..8; var: 0)            3  u8 reserved (0)
 *     4  u16 name_len                             6  u16 reserved (0)
 *     8  u32 shape[8] (dims past ndim are 0)
 *     40 u64 data_off   48 u64 data_len
 *     56 u64 offsets_off (var: N+1 u64 offsets into the column's data,
 *                         first 0, non-decreasing, last == data_len; FIXED: 0)
 *     64 u64 name_off   72 u64 reserved (0)
 *   names, each padded to 8, in column order, right after the table
 *   then per column in column order: [offsets array], data region; every
 *   offsets array and data region starts on a 64-byte boundary.
 *   total_len is rounded up to 64.
 *
 * FIXED data is exactly N * prod(shape) * itemsize bytes. The decoder
 * accepts any layout that keeps this order (table, names in column order,
 * then each column's offsets and data), never overlapping and aligned as
 * above, with reserved fields 0 and a size of at most 2^40 bytes; anything
 * else is TFOS_EPROTO with a message. It does not check that STR values are
 * valid UTF-8 (tfos__tcb_check_utf8 does, on request: the consumer's own
 * str decoding validates them anyway) nor that BOOL bytes are 0 or 1.
 *
 * Encoding: fill an array of tfos__tcb_col (name, kind, dtype, ndim, shape;
 * var columns also data_len = total bytes of all their values), call
 * tfos__tcb_layout for the size, reserve that many bytes (a heap buffer or
 * straight in the ring), tfos__tcb_begin, then fill the data: a whole column
 * at a time with memcpy to tfos__tcb_data / tfos__tcb_offsets, or a row at a
 * time with tfos__tcb_set_fixed / tfos__tcb_set_var (var rows in order).
 * tfos__tcb_finish checks that every var column was filled to its size.
 *
 * The format is little-endian; so is every host tfos builds on (checked at
 * compile time in codec.c). */
#ifndef TFOS_CORE_CODEC_H
#define TFOS_CORE_CODEC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFOS_TCB_MAGIC "TCB1"
#define TFOS_TCB_HEADER 32
#define TFOS_TCB_COLENTRY 80
#define TFOS_TCB_MAX_DIMS 8
#define TFOS_TCB_MAX_COLS 4096
#define TFOS_TCB_ALIGN 64
/* No batch, column or count beyond 1 TiB. */
#define TFOS_TCB_LIMIT ((uint64_t)1 << 40)

/* Column kinds. */
enum { TFOS_TCB_FIXED = 0, TFOS_TCB_BYTES = 1, TFOS_TCB_STR = 2 };

/* Dtype codes (stable: they are on the wire). */
enum {
    TFOS_TCB_BOOL = 1, /* "|b1" */
    TFOS_TCB_I8 = 2,   /* "|i1" */
    TFOS_TCB_I16 = 3,  /* "<i2" */
    TFOS_TCB_I32 = 4,  /* "<i4" */
    TFOS_TCB_I64 = 5,  /* "<i8" */
    TFOS_TCB_U8 = 6,   /* "|u1" */
    TFOS_TCB_U16 = 7,  /* "<u2" */
    TFOS_TCB_U32 = 8,  /* "<u4" */
    TFOS_TCB_U64 = 9,  /* "<u8" */
    TFOS_TCB_F32 = 10, /* "<f4" */
    TFOS_TCB_F64 = 11, /* "<f8" */
    TFOS_TCB_DTYPE_MAX_ = 11,
};

/* Batch flags. */
enum {
    /* Each row is the value of column 0 itself, not a 1-tuple (ncols == 1). */
    TFOS_TCB_FLAT_ROWS = 1,
};

/* Bytes per element of a dtype code; 0 for an unknown code. */
size_t tfos__tcb_dtype_size(int dtype);
/* numpy's name of a dtype code ("<f4", "|b1", ...); NULL for an unknown code. */
const char *tfos__tcb_dtype_numpy(int dtype);
/* The code of a numpy dtype string as written by numpy ("<f4", "|u1", "|b1";
 * "<" also accepted for 1-byte types, "=" never); 0 if not supported. */
int tfos__tcb_dtype_from_numpy(const char *descr, size_t len);

/* One column. The encoder reads the first group and writes the second;
 * tfos__tcb_column fills all of it from a decoded batch. */
typedef struct tfos__tcb_col {
    const char *name; /* need not be NUL-terminated; may be NULL when name_len is 0 */
    uint16_t name_len;
    uint8_t kind;  /* TFOS_TCB_FIXED/BYTES/STR */
    uint8_t dtype; /* FIXED only */
    uint8_t ndim;  /* FIXED only, 0..8 */
    uint32_t shape[TFOS_TCB_MAX_DIMS]; /* FIXED only, per row, each >= 1 */
    uint64_t data_len; /* var: input, total value bytes; FIXED: output */
    /* set by tfos__tcb_layout (offsets from the batch start): */
    uint64_t data_off;
    uint64_t offsets_off; /* var only; 0 for FIXED */
    uint64_t name_off;
    uint64_t row_bytes; /* FIXED: bytes of one row; var: 0 */
} tfos__tcb_col;

/* An encoder: the description of one batch and where it is written. */
typedef struct tfos__tcb_enc {
    uint32_t nrows, ncols, flags;
    tfos__tcb_col *cols; /* the caller's array; must outlive the encoder's use */
    uint64_t total;      /* bytes of the batch, from tfos__tcb_layout */
    uint8_t *buf;        /* set by tfos__tcb_begin; the caller's memory */
} tfos__tcb_enc;

/* Validate the description of nrows rows of cols[0..ncols) and compute every
 * offset (into cols) and the total size (e->total). Returns 0, or TFOS_EINVAL
 * (bad kind/dtype/ndim/shape/flags, 0 or too many columns) or TFOS_ETOOBIG
 * (over TFOS_TCB_LIMIT), with a message in err (may be NULL). */
int tfos__tcb_layout(tfos__tcb_enc *e, uint32_t nrows, uint32_t ncols, tfos__tcb_col *cols, uint32_t flags,
                     char *err, size_t errlen);

/* Write header, column table and names into buf (cap bytes, at least
 * e->total; ideally 64-byte aligned so numbers are aligned for the consumer),
 * zero every padding byte between regions (not the data regions: the caller
 * fills those), and set each var column's first offset to 0.
 * TFOS_EINVAL when cap is too small. */
int tfos__tcb_begin(tfos__tcb_enc *e, void *buf, size_t cap);

/* Data region of column `col` (FIXED: nrows*row_bytes; var: data_len bytes). */
void *tfos__tcb_data(const tfos__tcb_enc *e, uint32_t col);
/* Offsets array of var column `col` (nrows+1 little-endian u64, possibly
 * unaligned for uint64_t access if buf is: write with memcpy); NULL for FIXED. */
void *tfos__tcb_offsets(const tfos__tcb_enc *e, uint32_t col);
/* Copy one row (row_bytes) of FIXED column `col`. TFOS_EINVAL if not FIXED
 * or row out of range. */
int tfos__tcb_set_fixed(tfos__tcb_enc *e, uint32_t col, uint32_t row, const void *value);
/* Append the value of `row` of var column `col`. Rows must come in order
 * 0, 1, 2, ... (each appends after the previous one). TFOS_EINVAL if not a var
 * column or row out of range, TFOS_ETOOBIG if the values outgrow data_len. */
int tfos__tcb_set_var(tfos__tcb_enc *e, uint32_t col, uint32_t row, const void *value, size_t len);
/* Check every var column holds exactly data_len bytes over nrows rows. 0 or
 * TFOS_EINVAL with a message. */
int tfos__tcb_finish(const tfos__tcb_enc *e, char *err, size_t errlen);

/* A validated batch. Column details come from tfos__tcb_column. */
typedef struct tfos__tcb_view {
    const uint8_t *buf;
    size_t len;
    uint32_t nrows, ncols, flags;
} tfos__tcb_view;

/* Validate buf[0..len) completely (see the top of this file) and describe it.
 * Returns 0, or TFOS_EPROTO with a one-line reason in err (may be NULL).
 * Reads nothing outside buf[0..len); needs no memory. */
int tfos__tcb_open(const void *buf, size_t len, tfos__tcb_view *v, char *err, size_t errlen);

/* Column i of an opened batch (name points into the buffer). Re-checks the
 * entry's ranges, so a buffer changed since tfos__tcb_open (shared memory)
 * gives TFOS_EPROTO, never a bad pointer. TFOS_EINVAL if i >= ncols. */
int tfos__tcb_column(const tfos__tcb_view *v, uint32_t i, tfos__tcb_col *out);
/* Pointer to the data region of a column returned by tfos__tcb_column. */
const void *tfos__tcb_col_data(const tfos__tcb_view *v, const tfos__tcb_col *c);
/* Value of `row` of a var column: *p and *n. Bounds are checked again on
 * every call. 0, TFOS_EINVAL (not var, bad row) or TFOS_EPROTO. */
int tfos__tcb_var(const tfos__tcb_view *v, const tfos__tcb_col *c, uint32_t row, const uint8_t **p, size_t *n);
/* Whether every value of STR column c is valid UTF-8 (no overlongs, no
 * surrogates, <= U+10FFFF). 0 or TFOS_EPROTO naming the row. */
int tfos__tcb_check_utf8(const tfos__tcb_view *v, const tfos__tcb_col *c, char *err, size_t errlen);

/* Whether s[0..n) is valid UTF-8 (shared with the readers). */
bool tfos__utf8_valid(const uint8_t *s, size_t n);

#endif
