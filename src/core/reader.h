/* reader.h: CSV, JSON-lines and NumPy .npy files to columnar batches.
 *
 * A reader opens one file (or a block of memory) and yields its rows as
 * columnar batches (core/codec.h) of up to batch_rows rows, for a producer to
 * put into a feed ring. Files are streamed: memory use is one batch plus one
 * line (CSV, JSONL) or one batch (NPY), never the whole file.
 *
 * Ownership: the batch handed out by tfos__reader_next lives in memory the
 * reader owns (64-byte aligned); it stays valid until the next call to
 * tfos__reader_next or tfos__reader_close. Copy it (e.g. into the ring) before.
 *
 * Rows are numbered from 0 in file order, counting data rows only (not a CSV
 * header, not blank lines). Lines are numbered from 1 and are physical lines
 * of the file (a CSV record with newlines in quoted fields spans several;
 * messages name the line where the record starts).
 *
 * Errors: every message starts with the file's name and names the line
 * (CSV, JSONL) or byte offset and row (NPY), and the column where one is at
 * fault. A bad row ends the reader: the rows before it in the current batch
 * are still delivered (as a shorter batch), then every later call returns the
 * same error. Codes: TFOS_EPROTO (malformed input or a row that does not fit
 * the columns), TFOS_ETOOBIG (a line or record over max_line; a row over
 * max_batch_bytes), TFOS_ESYS (open/read failed; errno kept), TFOS_ENOMEM,
 * TFOS_EINVAL (bad options). An empty file gives no batches (TFOS_EEND at
 * once).
 *
 * CSV (RFC 4180). Fields are separated by `csv_delim` (default ','; ".tsv"
 * files default to tab); records end with LF or CRLF (a CR not before LF is
 * data). A field that starts with '"' is quoted: it may hold delimiters,
 * CR and LF, and "" for a quote; after its closing quote only a delimiter or
 * the end of the record may follow. A quote inside an unquoted field is kept
 * as data. Empty lines are skipped. A UTF-8 byte order mark at the start of
 * the file is skipped. Header: csv_header YES (first record gives the column
 * names), NO (columns unnamed), or AUTO (the default): the first record is a
 * header when none of its fields is empty or a number and the second record
 * has at least one number.
 * Column types come from the first data row, quoted or not, ignoring spaces
 * and tabs around numbers: an integer that fits 64 bits -> I64 ("<i8"),
 * another number (decimal with '.' or exponent, an integer beyond 64 bits,
 * nan, inf, infinity) -> F64 ("<f8"), anything else (including an empty
 * field) -> STR. Later rows: an I64 column takes only integers (a float or an
 * empty field is an error: types never change between batches, so there is
 * no promotion); an F64 column takes any number, and an empty field as NaN;
 * a STR column takes any valid UTF-8. Every record must have as many fields
 * as the first.
 *
 * JSON lines. Each non-blank line is one JSON value (RFC 8259, strict: UTF-8,
 * no trailing commas, no comments): an array (columns by position, unnamed)
 * or an object (columns named by its keys, in the first row's order; later
 * rows must have the same keys, in any order, no duplicates). Values: an
 * integer that fits 64 bits -> I64, another number -> F64 (an integer beyond
 * 64 bits or a number beyond the double range is an error), true/false ->
 * BOOL, a string -> STR, an array of numbers nested up to 8 deep and
 * rectangular -> FIXED of that shape, I64 if all its numbers are integers in
 * the first row, else F64. Later rows must give each column the same kind of
 * value and shape; an F64 column (scalar or array) also takes integers, an
 * I64 one never takes floats. null, objects inside a row, empty arrays and
 * arrays of non-numbers are errors. Nesting is bounded (the row plus 8 array
 * levels), strings handle every escape including \uXXXX surrogate pairs.
 *
 * NPY (format 1.0, 2.0, 3.0). The header dict must have 'descr' (one of
 * "|b1" "|i1" "<i2" "<i4" "<i8" "|u1" "<u2" "<u4" "<u8" "<f4" "<f8"; "<" is
 * also taken for 1-byte types), 'fortran_order' and 'shape'. fortran_order
 * True is an error unless at most one dimension is above 1 (then both orders
 * are the same bytes). Shape (N, d1, ...) gives N rows of shape (d1, ...)
 * (at most 8 dims, each >= 1; a 1-D array gives scalar rows; a 0-d array is
 * an error). Batches have one unnamed FIXED column and the flag
 * TFOS_TCB_FLAT_ROWS. The data is read in batch-sized chunks straight into
 * the batch; a file shorter than its header promises is an error at open
 * (for regular files and memory) or at the read that comes up short.
 */
#ifndef TFOS_CORE_READER_H
#define TFOS_CORE_READER_H
#include <stddef.h>
#include <stdint.h>

#include "core/codec.h"

enum {
    TFOS_READER_AUTO = 0, /* from the name: .csv .tsv / .jsonl .ndjson .json / .npy */
    TFOS_READER_CSV = 1,
    TFOS_READER_JSONL = 2,
    TFOS_READER_NPY = 3,
};

enum { TFOS_CSV_HEADER_AUTO = 0, TFOS_CSV_HEADER_YES = 1, TFOS_CSV_HEADER_NO = 2 };

#define TFOS_READER_DEFAULT_ROWS 1024u
#define TFOS_READER_DEFAULT_MAX_LINE ((size_t)16 << 20)

typedef struct tfos__reader_opts {
    int format;               /* TFOS_READER_* */
    uint32_t batch_rows;      /* rows per batch; 0: TFOS_READER_DEFAULT_ROWS */
    int csv_header;           /* TFOS_CSV_HEADER_* */
    char csv_delim;           /* 0: ',' (tab for .tsv); not '"', CR or LF */
    size_t max_line;          /* longest line/record in bytes; 0: 16 MiB */
    uint64_t max_batch_bytes; /* batches end early to stay within this many
                                 encoded bytes (e.g. the ring's largest record);
                                 0: no limit */
} tfos__reader_opts;

typedef struct tfos__reader tfos__reader;

/* Open the file at `path` (opts may be NULL: all defaults). Reads the NPY
 * header now; CSV and JSONL are read from the first tfos__reader_next. */
int tfos__reader_open(tfos__reader **out, const char *path, const tfos__reader_opts *opts, char *err,
                      size_t errlen);

/* Read from data[0..len) instead of a file; `name` is used in messages and,
 * with format AUTO, for the format. The memory is borrowed: keep it alive and
 * unchanged until tfos__reader_close. */
int tfos__reader_open_mem(tfos__reader **out, const char *name, const void *data, size_t len,
                          const tfos__reader_opts *opts, char *err, size_t errlen);

/* The next batch: *batch and *len describe it (owned by the reader, see
 * above), *first_row is the number of its first row. Returns 0, TFOS_EEND
 * when the file is done, or an error with a message in err. */
int tfos__reader_next(tfos__reader *r, const void **batch, size_t *len, uint64_t *first_row, char *err,
                      size_t errlen);

/* Close the file and free everything (NULL is fine). */
void tfos__reader_close(tfos__reader *r);

#endif
