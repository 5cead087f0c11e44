/* input.h: files read by `tfos run --input`, turned into columnar batches.
 * One reader a format (input_csv.c, input_jsonl.c, input_npy.c) behind the
 * ops table of input_ops.h; input.c picks one.
 *
 * Formats:
 *   CSV    RFC 4180 (quoted fields, doubled quotes, newlines inside quotes,
 *          LF or CRLF); a UTF-8 byte order mark at the start is skipped;
 *          blank lines are skipped. The field separator is ',' or the one
 *          given (--csv-delimiter): it is never guessed, but with the default
 *          a first line whose unquoted fields hold ';' or a tab is an error
 *          that suggests --csv-delimiter (give --csv-delimiter , to read such
 *          a file as it is).
 *          Numbers are decimal: [+-]digits[.digits][e[+-]digits], or inf,
 *          infinity, nan (any case), with spaces or tabs around allowed;
 *          0x10, 1_000 or "1,5" are text. Column types come from the first
 *          data row: an integer is int64, another number float64, anything
 *          else a string. An empty first value takes its type from the
 *          next row: a number there makes it an error (numbers have no
 *          missing value), text or another empty value a string column.
 *          A later row that does not fit (another field count, text or an
 *          empty value in a number column) is an error naming the file, line
 *          and column; an int64 column meeting a float is an error too
 *          (declare the column float by writing "1.0" in the first row). A
 *          number out of range (an integer beyond int64, a float beyond
 *          float64 such as 1e400; not an underflow to 0) is an error, in
 *          typing as in later rows.
 *          Header (unless --csv-header/--no-csv-header forces it): the first
 *          row is a header when it holds no number (names, maybe one empty,
 *          as pandas writes over its index) and the next row has a number
 *          under one of its names; it is data when it holds no text, or holds
 *          numbers and text with no number below the text. Anything else
 *          (a text-only file, a header alone, text above numbers in a row
 *          that holds numbers too) is an error asking for --csv-header or
 *          --no-csv-header: a data row is never dropped, nor a header fed as
 *          data, on a guess. A forced header with no row after it is an empty
 *          file.
 *   JSONL  one JSON value per line: an array (columns by position) or an
 *          object (columns by key, in the first row's order; later rows need
 *          the same keys). Values: numbers, true/false, strings, and flat
 *          arrays of numbers (one array column, same length in every row).
 *          null is an error naming the line. Each line is parsed by jansson:
 *          text must be UTF-8, a key may appear once in a row (a repeated
 *          key is an error), strings may hold \u0000, a number out of range
 *          (an integer beyond int64, 1e400) is an error; a line that is not
 *          JSON is an error naming the line and the byte where parsing
 *          stopped. A UTF-8 byte order mark at the start is skipped.
 *   NPY    NumPy .npy v1-v3, C order, little-endian numbers or bool; an array
 *          of shape (N, ...) gives N rows of shape (...). Read in chunks. The
 *          header is parsed as the dict it is and must hold descr,
 *          fortran_order and shape once each (numpy takes the last of a
 *          repeated key; here it is an error, so no file reads differently
 *          than in numpy).
 * Lines longer than 16 MiB are an error (TFOS_ETOOBIG) naming the line.
 *
 * Files: a regular file, or a FIFO or pipe (`--input /dev/stdin`), read as a
 * stream; a directory is an error. Opening never waits for a FIFO's writer
 * and every read waits in 200 ms slices, watching the caller's stop flag:
 * a stopped open or read ends with TFOS_ESTOPPED within a slice, so a run
 * whose input never comes still stops on a signal. */
#ifndef TFOS_RUN_INPUT_H
#define TFOS_RUN_INPUT_H
#include <stddef.h>
#include <stdint.h>

enum { TFOS_FMT_AUTO = 0, TFOS_FMT_CSV = 1, TFOS_FMT_JSONL = 2, TFOS_FMT_NPY = 3 };

/* "csv", "jsonl"/"json", "npy" or "auto" -> TFOS_FMT_*, -1 if unknown. */
int tfos__input_format(const char *name);

typedef struct tfos__input tfos__input;

/* How to read a file. */
typedef struct tfos__input_opts {
    int format;         /* TFOS_FMT_*; TFOS_FMT_AUTO picks by extension (.csv, .jsonl/.json/.ndjson, .npy) */
    int csv_header;     /* 1 yes, 0 no, -1 detect */
    int csv_delimiter;  /* the CSV field separator byte; 0: ',' (see the top of this file on the check it adds) */
    _Atomic int *stop; /* NULL, or a flag another thread sets to make waiting opens and reads give up */
} tfos__input_opts;

/* Open `path` as o says. The file is not read yet (a FIFO's writer is not
 * waited for). TFOS_EINVAL (unknown format, a directory), TFOS_ESYS,
 * TFOS_ENOMEM; .npy: its header is read here, so also TFOS_EPROTO and
 * TFOS_ESTOPPED. */
int tfos__input_open_opts(tfos__input **out, const char *path, const tfos__input_opts *o, char *err, size_t errlen);

/* tfos__input_open_opts with only the format and csv_header (1 yes, 0 no,
 * -1 detect) given. */
int tfos__input_open(tfos__input **out, const char *path, int format, int csv_header, char *err, size_t errlen);

/* The next batch of up to max_rows rows as a columnar batch in a buffer owned
 * by the input (valid until the next call or close). *first_row is the
 * 0-based index of its first row in the file. Returns 0, TFOS_EEND after the
 * last row, TFOS_EPROTO / TFOS_ETOOBIG (bad data; err names file, line or
 * row, and column), TFOS_ESYS, TFOS_ENOMEM, TFOS_ESTOPPED (the stop flag was
 * set while it waited for data). */
int tfos__input_next(tfos__input *in, uint32_t max_rows, const void **batch, size_t *len, uint64_t *first_row,
                     char *err, size_t errlen);

/* Reading into the caller's buffer, for formats whose next batch's size is
 * known before it is read (.npy): tfos__input_next_size gives the next
 * batch's rows (up to max_rows), bytes and first row's index, reading
 * nothing (TFOS_EEND after the last row; TFOS_EINVAL for a format that
 * cannot: use tfos__input_next); tfos__input_fill then writes exactly that
 * batch into buf (len bytes), the rows read from the file straight into it:
 * one copy where tfos__input_next makes two. Errors as tfos__input_next. */
int tfos__input_next_size(tfos__input *in, uint32_t max_rows, uint32_t *nrows, size_t *len, uint64_t *first_row);
/* The same, with the batch cut to what fits in cap bytes (at least one row;
 * cap 0: no cap). */
int tfos__input_next_size_capped(tfos__input *in, uint32_t max_rows, size_t cap, uint32_t *nrows, size_t *len,
                                 uint64_t *first_row);
int tfos__input_fill(tfos__input *in, uint32_t nrows, void *buf, size_t len, char *err, size_t errlen);

/* How far reading has got, for progress reports: *read gets the bytes of the
 * file consumed so far (CSV and JSON lines read a little ahead of the rows
 * returned), *size the file's size when it was opened. */
void tfos__input_progress(const tfos__input *in, uint64_t *read, uint64_t *size);

/* Rows the file holds when its header says so (.npy), else -1 (CSV and JSON
 * lines are not counted in advance). */
int64_t tfos__input_rows(const tfos__input *in);

void tfos__input_close(tfos__input *in);

/* The input ring size in MiB (a power of two) for feeding these files in
 * records of batch_rows rows, when the user gave none; 0: the default
 * (TFOS_DEFAULT_FEED_MB) because some file's records have no size known in
 * advance (a format without next_size: CSV, JSON lines, Arrow; a FIFO; a
 * file that will not open). Regular files of the others (.npy): room for 8 of the largest record, between 4 and
 * TFOS_DEFAULT_FEED_MB MiB, so that a ring of records up to 2 MiB fits in
 * a processor's last-level cache and the consumer reads what the feeder has
 * just written from there (docs/BENCHMARKS.md, "Tensors from a file");
 * above that default only as far as one record needs (a record may take
 * half the ring), up to 1024. */
int tfos__input_ring_mb(char *const *paths, int npaths, int format, uint32_t batch_rows);

#endif
