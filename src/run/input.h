/* input.h: files read by `tfos run --input`, turned into columnar batches.
 * One reader a format (input_csv.c, input_jsonl.c, input_npy.c) behind the
 * ops table of input_ops.h; input.c picks one.
 *
 * Formats:
 *   CSV    RFC 4180 (quoted fields, doubled quotes, newlines inside quotes,
 *          LF or CRLF). Column types come from the first data row: an
 *          integer field is int64, another number float64, anything else a
 *          string. A later row that does not fit (another field count, text
 *          in a number column) is an error naming the file, line and column;
 *          an int64 column meeting a float is an error too (declare the column
 *          float by writing "1.0" in the first row). A header row is taken
 *          when the first row has a field that is not a number and the second
 *          row's fields in those places are numbers, or when forced.
 *   JSONL  one JSON value per line: an array (columns by position) or an
 *          object (columns by key, in the first row's order; later rows need
 *          the same keys). Values: numbers, true/false, strings, and flat
 *          arrays of numbers (one array column, same length in every row).
 *          null is an error naming the line. Each line is parsed by jansson:
 *          text must be UTF-8, a key may appear once in a row, strings may
 *          hold \u0000; a line that is not JSON is an error naming the line
 *          and the byte where parsing stopped.
 *   NPY    NumPy .npy v1-v3, C order, little-endian numbers or bool; an array
 *          of shape (N, ...) gives N rows of shape (...). Read in chunks.
 * Lines longer than 16 MiB are an error (TFOS_ETOOBIG) naming the line. */
#ifndef TFOS_RUN_INPUT_H
#define TFOS_RUN_INPUT_H
#include <stddef.h>
#include <stdint.h>

enum { TFOS_FMT_AUTO = 0, TFOS_FMT_CSV = 1, TFOS_FMT_JSONL = 2, TFOS_FMT_NPY = 3 };

/* "csv", "jsonl"/"json", "npy" or "auto" -> TFOS_FMT_*, -1 if unknown. */
int tfos__input_format(const char *name);

typedef struct tfos__input tfos__input;

/* Open `path`. format TFOS_FMT_AUTO picks by extension (.csv, .jsonl/.json/
 * .ndjson, .npy). csv_header: 1 yes, 0 no, -1 detect. */
int tfos__input_open(tfos__input **out, const char *path, int format, int csv_header, char *err, size_t errlen);

/* The next batch of up to max_rows rows as a columnar batch in a buffer owned
 * by the input (valid until the next call or close). *first_row is the
 * 0-based index of its first row in the file. Returns 0, TFOS_EEND after the
 * last row, TFOS_EPROTO / TFOS_ETOOBIG (bad data; err names file, line or
 * row, and column), TFOS_ESYS, TFOS_ENOMEM. */
int tfos__input_next(tfos__input *in, uint32_t max_rows, const void **batch, size_t *len, uint64_t *first_row,
                     char *err, size_t errlen);

/* How far reading has got, for progress reports: *read gets the bytes of the
 * file consumed so far (CSV and JSON lines read a little ahead of the rows
 * returned), *size the file's size when it was opened. */
void tfos__input_progress(const tfos__input *in, uint64_t *read, uint64_t *size);

/* Rows the file holds when its header says so (.npy), else -1 (CSV and JSON
 * lines are not counted in advance). */
int64_t tfos__input_rows(const tfos__input *in);

void tfos__input_close(tfos__input *in);

#endif
