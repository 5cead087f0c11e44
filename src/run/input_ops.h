/* input_ops.h: the ops table each `--input` format implements, one format a
 * file (input_csv.c, input_jsonl.c, input_npy.c), as nng keeps one transport
 * a file. input.c picks the table by format and does what every format
 * shares: the file descriptor, its size, the count of rows returned, the end
 * of input. */
#ifndef TFOS_RUN_INPUT_OPS_H
#define TFOS_RUN_INPUT_OPS_H
#include "core/batchbuild.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Every function gets the reader's own state, made by open. Error messages
 * start with the file's path and name the line (or row) and column. */
struct tfos__input_ops {
    /* Start reading `path` from fd (open for reading, at offset 0; the reader
     * owns it from here, also on failure). csv_header: 1, 0 or -1 (detect),
     * for CSV. *state gets the reader's state. 0, TFOS_EPROTO (not a file
     * of this format), TFOS_ESYS, TFOS_ENOMEM. */
    int (*open)(void **state, int fd, const char *path, int csv_header, char *err, size_t errlen);
    /* The next batch of 1..max_rows rows, in a buffer the reader owns (valid
     * until the next call or close); *nrows gets its row count. TFOS_EEND
     * when no row is left; other errors as tfos__input_next. */
    int (*next)(void *state, uint32_t max_rows, const void **batch, size_t *len, uint32_t *nrows, char *err,
                size_t errlen);
    /* Bytes of the file consumed so far (it may read ahead of the rows). */
    uint64_t (*progress)(const void *state);
    /* Rows the file holds, or -1 when not known in advance. */
    int64_t (*rows)(const void *state);
    /* Close the file and free the state. */
    void (*close)(void *state);
};

/* What the text readers (CSV, JSON lines) share; each one's state starts
 * with it, and the helpers below (input.c) serve both. */
typedef struct tfos__input_text {
    char path[1024]; /* for messages */
    FILE *f;         /* the file, read with stdio */
    tfos__batch_build b;
} tfos__input_text;

/* Allocate a zeroed state of `size` bytes (a struct starting with a
 * tfos__input_text) reading fd as a stdio stream, into *state. 0,
 * TFOS_ENOMEM, TFOS_ESYS (fd is closed on failure). */
int tfos__input_text_open(void **state, size_t size, int fd, const char *path, char *err, size_t errlen);

/* The batch of the rows the reader appended to t->b (see
 * tfos__batch_build_finish); *nrows its row count. TFOS_EEND when there are
 * none, TFOS_ETOOBIG (err names the file), TFOS_ENOMEM. */
int tfos__input_text_finish(tfos__input_text *t, const void **batch, size_t *len, uint32_t *nrows, char *err,
                            size_t errlen);

/* ops->progress of a text reader: the stream's position. */
uint64_t tfos__input_text_progress(const void *state);

/* Close the stream, free the builder and then the state itself (the reader
 * frees its own buffers first). NULL: nothing to do. */
void tfos__input_text_close(tfos__input_text *t);

extern const struct tfos__input_ops tfos__input_csv_ops;
extern const struct tfos__input_ops tfos__input_jsonl_ops;
extern const struct tfos__input_ops tfos__input_npy_ops;

#endif
