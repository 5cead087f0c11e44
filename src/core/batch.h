/* batch.h: tfos's columnar batch ("TCB1"), the native encoding of a batch of
 * rows in a feed record.
 *
 * A batch holds N rows of C columns. A column is FIXED (numbers of one dtype
 * with one per-row shape, row-major, so a consumer views it as a numpy array
 * (N, *shape) without copying) or variable-length BYTES/STR (one value per
 * row, addressed by N+1 offsets). Layout, little-endian:
 *
 *   header (32 bytes)   "TCB1", u32 nrows, u32 ncols, u32 flags, u64 total_len, u64 0
 *   column table        ncols entries of 80 bytes:
 *                         u8 kind, u8 dtype, u8 ndim, u8 0, u16 name_len, u16 0,
 *                         u32 shape[8], u64 data_off, u64 data_len,
 *                         u64 offsets_off (var columns; else 0), u64 name_off, u64 0
 *   names, then data    every data region and offsets array 64-byte aligned
 *
 * Offsets are from the start of the batch. The decoder checks every field and
 * every range against the buffer, so a corrupt or hostile batch is an error,
 * never an out-of-bounds read. */
#ifndef TFOS_CORE_BATCH_H
#define TFOS_CORE_BATCH_H
#include <stddef.h>
#include <stdint.h>

#define TFOS_BATCH_MAX_DIMS 8
#define TFOS_BATCH_MAX_COLS 4096
#define TFOS_BATCH_HEADER 32
#define TFOS_BATCH_COLENTRY 80

enum { TFOS_COL_FIXED = 0, TFOS_COL_BYTES = 1, TFOS_COL_STR = 2 };

enum {
    TFOS_DT_BOOL = 1,
    TFOS_DT_I8 = 2,
    TFOS_DT_I16 = 3,
    TFOS_DT_I32 = 4,
    TFOS_DT_I64 = 5,
    TFOS_DT_U8 = 6,
    TFOS_DT_U16 = 7,
    TFOS_DT_U32 = 8,
    TFOS_DT_U64 = 9,
    TFOS_DT_F32 = 10,
    TFOS_DT_F64 = 11,
    TFOS_DT_MAX_ = 11,
};

/* Batch flags. */
enum {
    /* Rows were single values, not tuples: a row is the value of column 0
     * itself (e.g. a scalar, or a flat list of numbers stored as one array). */
    TFOS_BATCH_FLAT_ROWS = 1,
    /* Rows were lists of fields (not tuples): a consumer that rebuilds rows
     * gives lists back. */
    TFOS_BATCH_LIST_ROWS = 2,
};

/* Bytes per element of a dtype, 0 for an unknown code. */
size_t tfos__dtype_size(int dtype);
/* numpy's name of a dtype ("<f4", "|b1", ...), NULL for an unknown code. */
const char *tfos__dtype_numpy(int dtype);
/* The Open Inference Protocol's name of a dtype ("FP32", "BOOL", ...), NULL
 * for an unknown code; and the code of such a name, 0 when unknown. */
const char *tfos__dtype_oip(int dtype);
int tfos__dtype_by_oip(const char *name);

/* One column, for the encoder (input) and the decoder (output). */
typedef struct tfos__col {
    const char *name;
    uint16_t name_len;
    uint8_t kind;
    uint8_t dtype;                          /* FIXED only */
    uint8_t ndim;                           /* FIXED only */
    uint32_t shape[TFOS_BATCH_MAX_DIMS];    /* per-row shape, FIXED only */
    uint64_t data_len;                      /* encoder: var columns give their total bytes */
    /* set by tfos__batch_layout / tfos__batch_open: */
    uint64_t data_off;
    uint64_t offsets_off;
} tfos__col;

/* Elements per row of a FIXED column (product of its shape; 1 for scalars).
 * 0 on overflow past 2^40. */
uint64_t tfos__col_row_elems(const tfos__col *c);

/* Compute where everything goes for nrows rows of cols[0..ncols): fills each
 * column's data_off, offsets_off and (FIXED) data_len, and returns the total
 * size of the batch, or 0 if the description is invalid or too large. */
uint64_t tfos__batch_layout(uint32_t nrows, uint32_t ncols, tfos__col *cols);

/* Write the header, the column table and the names into buf (which holds
 * `total` bytes from tfos__batch_layout); the caller then fills the data
 * regions (FIXED: buf + data_off; var: the u64 offsets at buf + offsets_off,
 * values at buf + data_off). */
void tfos__batch_write_header(void *buf, uint64_t total, uint32_t nrows, uint32_t ncols, uint32_t flags,
                              const tfos__col *cols);

/* A validated view of a batch. cols points into `storage` (caller-provided,
 * room for ncols columns) and names point into the buffer. */
typedef struct tfos__batch_view {
    uint32_t nrows, ncols, flags;
    tfos__col *cols;
} tfos__batch_view;

/* Number of columns a batch declares (for sizing storage), 0 if buf is not a
 * batch header. */
uint32_t tfos__batch_ncols(const void *buf, size_t len);

/* Validate buf[0..len) and describe it. Returns 0, or TFOS_EPROTO with a
 * one-line reason in err. */
int tfos__batch_open(const void *buf, size_t len, tfos__batch_view *v, tfos__col *storage, uint32_t storage_cols,
                     char *err, size_t errlen);

#endif
