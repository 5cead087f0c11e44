/* input_ops.h: the ops table each `--input` format implements, one format a
 * file (input_csv.c, input_jsonl.c, input_npy.c), as nng keeps one transport
 * a file. input.c picks the table by format and does what every format
 * shares: the file descriptor and its bounded reads (tfos__input_src), its
 * size, the count of rows returned, the end of input. */
#ifndef TFOS_RUN_INPUT_OPS_H
#define TFOS_RUN_INPUT_OPS_H
#include "core/batchbuild.h"
#include "feed/input.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The open file every reader reads through, owned by input.c (it closes
 * the fd). Reads never block for longer than a slice: the fd is
 * non-blocking, and a FIFO or pipe is polled in 200 ms slices between which
 * *stop is checked. */
typedef struct tfos__input_src {
    int fd;
    int stream;          /* a FIFO, pipe or other non-regular file: poll before reading */
    _Atomic int *stop;   /* NULL or the caller's stop flag (set by another thread) */
    uint64_t consumed;   /* bytes read so far */
    int error;           /* errno of the last failed read */
} tfos__input_src;

/* Read up to n bytes: > 0 bytes read, 0 at the end of the file, -1 with
 * errno on error (ECANCELED when *stop was set while it waited). */
ssize_t tfos__input_read(tfos__input_src *s, void *buf, size_t n);

/* Every function gets the reader's own state, made by open. Error messages
 * start with the file's path and name the line (or row) and column. */
struct tfos__input_ops {
    /* Start reading `path` from src (at its start; it stays input.c's: the
     * reader reads it and never closes it). o: the CSV options. *state gets
     * the reader's state. 0, TFOS_EPROTO (not a file of this format),
     * TFOS_ESYS, TFOS_ENOMEM, TFOS_ESTOPPED. */
    int (*open)(void **state, tfos__input_src *src, const char *path, const tfos__input_opts *o, char *err,
                size_t errlen);
    /* The next batch of 1..max_rows rows, in a buffer the reader owns (valid
     * until the next call or close); *nrows gets its row count. TFOS_EEND
     * when no row is left; other errors as tfos__input_next. */
    int (*next)(void *state, uint32_t max_rows, const void **batch, size_t *len, uint32_t *nrows, char *err,
                size_t errlen);
    /* Optional (formats whose batches have a size known before reading,
     * .npy): the next batch's rows (1..max_rows) and bytes, reading
     * nothing; TFOS_EEND when no row is left. Then fill writes that batch
     * into buf (len bytes: the caller's, e.g. a ring reservation), its rows
     * read straight in; errors as next. */
    int (*next_size)(void *state, uint32_t max_rows, uint32_t *nrows, size_t *len);
    int (*fill)(void *state, uint32_t nrows, void *buf, size_t len, char *err, size_t errlen);
    /* Rows the file holds, or -1 when not known in advance. */
    int64_t (*rows)(const void *state);
    /* Free the state (not the src). */
    void (*close)(void *state);
};

/* What the text readers (CSV, JSON lines) share; each one's state starts
 * with it, and the helpers below (input.c) serve both. */
typedef struct tfos__input_text {
    char path[1024]; /* for messages */
    FILE *f;         /* a stdio stream over the src (a UTF-8 byte order mark at its start is skipped) */
    tfos__input_src *src;
    tfos__batch_build b;
} tfos__input_text;

/* Allocate a zeroed state of `size` bytes (a struct starting with a
 * tfos__input_text) reading src as a stdio stream, into *state. 0,
 * TFOS_ENOMEM, TFOS_ESYS. */
int tfos__input_text_open(void **state, size_t size, tfos__input_src *src, const char *path, char *err,
                          size_t errlen);

/* The stream gave EOF: TFOS_EEND at a clean end of the file, else the read
 * error (TFOS_ESTOPPED when the stop flag was set, TFOS_ESYS) with err
 * naming the file and `line`. */
int tfos__input_text_eof(tfos__input_text *t, uint64_t line, char *err, size_t errlen);

/* The batch of the rows the reader appended to t->b (see
 * tfos__batch_build_finish); *nrows its row count. TFOS_EEND when there are
 * none, TFOS_ETOOBIG (err names the file), TFOS_ENOMEM. */
int tfos__input_text_finish(tfos__input_text *t, const void **batch, size_t *len, uint32_t *nrows, char *err,
                            size_t errlen);

/* Close the stream, free the builder and then the state itself (the reader
 * frees its own buffers first). NULL: nothing to do. */
void tfos__input_text_close(tfos__input_text *t);

extern const struct tfos__input_ops tfos__input_csv_ops;
extern const struct tfos__input_ops tfos__input_jsonl_ops;
extern const struct tfos__input_ops tfos__input_npy_ops;

#endif
