/* input.c: the files of `tfos run --input` to columnar batches (see
 * input.h). This file picks a format's reader (input_csv.c, input_jsonl.c,
 * input_npy.c, behind struct tfos__input_ops) and keeps what every format
 * shares: opening the file, its size for progress, the index of the next
 * row, and the end of input. */
#include "run/input.h"

#include "core/log.h"
#include "run/input_ops.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tfos__input {
    const struct tfos__input_ops *ops;
    void *state;   /* the reader's */
    uint64_t rows; /* rows returned so far */
    uint64_t size; /* the file's size at open, for progress */
    int eof;
};

int tfos__input_format(const char *name)
{
    if (!strcmp(name, "auto"))
        return TFOS_FMT_AUTO;
    if (!strcmp(name, "csv"))
        return TFOS_FMT_CSV;
    if (!strcmp(name, "jsonl") || !strcmp(name, "json") || !strcmp(name, "ndjson"))
        return TFOS_FMT_JSONL;
    if (!strcmp(name, "npy"))
        return TFOS_FMT_NPY;
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The format of `path` by its extension, -1 if none fits. */
static int format_of(const char *path)
{
    if (ends_with(path, ".csv"))
        return TFOS_FMT_CSV;
    if (ends_with(path, ".jsonl") || ends_with(path, ".json") || ends_with(path, ".ndjson"))
        return TFOS_FMT_JSONL;
    if (ends_with(path, ".npy"))
        return TFOS_FMT_NPY;
    return -1;
}

/* ---- what the text readers share (input_ops.h) ---------------------------- */

int tfos__input_text_open(void **state, size_t size, int fd, const char *path, char *err, size_t errlen)
{
    tfos__input_text *t = calloc(1, size);
    if (!t) {
        close(fd);
        return TFOS_ENOMEM;
    }
    snprintf(t->path, sizeof t->path, "%s", path);
    t->f = fdopen(fd, "r");
    if (!t->f) {
        int rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
        close(fd);
        free(t);
        return rc;
    }
    tfos__batch_build_init(&t->b);
    *state = t;
    return 0;
}

int tfos__input_text_finish(tfos__input_text *t, const void **batch, size_t *len, uint32_t *nrows, char *err,
                            size_t errlen)
{
    if (!t->b.nrows)
        return TFOS_EEND;
    *nrows = t->b.nrows;
    int rc = tfos__batch_build_finish(&t->b, 0, batch, len);
    if (rc == TFOS_ETOOBIG)
        return tfos__errf(err, errlen, rc, "%s: a batch of %u rows is too large", t->path, *nrows);
    return rc;
}

uint64_t tfos__input_text_progress(const void *state)
{
    off_t pos = ftello(((const tfos__input_text *)state)->f);
    return pos > 0 ? (uint64_t)pos : 0;
}

void tfos__input_text_close(tfos__input_text *t)
{
    if (!t)
        return;
    fclose(t->f);
    tfos__batch_build_fini(&t->b);
    free(t);
}

/* ---- the public interface (input.h) ---------------------------------------- */

int tfos__input_open(tfos__input **out, const char *path, int format, int csv_header, char *err, size_t errlen)
{
    if (format == TFOS_FMT_AUTO && (format = format_of(path)) < 0)
        return tfos__errf(err, errlen, TFOS_EINVAL, "%s: unknown file type (use .csv, .jsonl or .npy, or give "
                          "--input-format)", path);
    const struct tfos__input_ops *ops = format == TFOS_FMT_CSV     ? &tfos__input_csv_ops
                                        : format == TFOS_FMT_JSONL ? &tfos__input_jsonl_ops
                                        : format == TFOS_FMT_NPY   ? &tfos__input_npy_ops
                                                                   : NULL;
    if (!ops)
        return tfos__errf(err, errlen, TFOS_EINVAL, "%s: unknown input format %d", path, format);
    tfos__input *in = calloc(1, sizeof *in);
    if (!in)
        return TFOS_ENOMEM;
    in->ops = ops;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
        free(in);
        return rc;
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0)
        in->size = (uint64_t)sb.st_size;
    int rc = ops->open(&in->state, fd, path, csv_header, err, errlen);
    if (rc) {
        free(in);
        return rc;
    }
    *out = in;
    return 0;
}

int tfos__input_next(tfos__input *in, uint32_t max_rows, const void **batch, size_t *len, uint64_t *first_row,
                     char *err, size_t errlen)
{
    if (max_rows == 0)
        return TFOS_EINVAL;
    *first_row = in->rows;
    if (in->eof)
        return TFOS_EEND;
    uint32_t n = 0;
    int rc = in->ops->next(in->state, max_rows, batch, len, &n, err, errlen);
    if (rc == 0)
        in->rows += n;
    else if (rc == TFOS_EEND)
        in->eof = 1;
    return rc;
}

void tfos__input_progress(const tfos__input *in, uint64_t *read, uint64_t *size)
{
    *read = in->ops->progress(in->state);
    if (in->eof || *read > in->size)
        *read = in->size;
    *size = in->size;
}

int64_t tfos__input_rows(const tfos__input *in)
{
    return in->ops->rows ? in->ops->rows(in->state) : -1;
}

void tfos__input_close(tfos__input *in)
{
    if (!in)
        return;
    in->ops->close(in->state);
    free(in);
}
