/* input.c: the files of `tfos run --input` to columnar batches (see
 * input.h). This file picks a format's reader (input_csv.c, input_jsonl.c,
 * input_npy.c, behind struct tfos__input_ops) and keeps what every format
 * shares: opening the file, reading it in bounded waits, its size for
 * progress, the index of the next row, and the end of input. */
#include "feed/input.h"

#include "core/log.h"
#include "feed/input_ops.h"
#include "tfos/defaults.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tfos__input {
    const struct tfos__input_ops *ops;
    void *state;   /* the reader's */
    tfos__input_src src;
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

/* The reader of a format (TFOS_FMT_*, not AUTO), NULL for an unknown one. */
static const struct tfos__input_ops *ops_of(int format)
{
    return format == TFOS_FMT_CSV     ? &tfos__input_csv_ops
           : format == TFOS_FMT_JSONL ? &tfos__input_jsonl_ops
           : format == TFOS_FMT_NPY   ? &tfos__input_npy_ops
                                      : NULL;
}

/* ---- bounded reads (input_ops.h) ------------------------------------------ */

#define SLICE_MS 200

ssize_t tfos__input_read(tfos__input_src *s, void *buf, size_t n)
{
    for (;;) {
        if (s->stop && *s->stop) {
            errno = s->error = ECANCELED;
            return -1;
        }
        if (s->stream) {
            /* Poll first: a FIFO with no writer reads as its end, but polls
             * as nothing yet until a writer has come (and gone). */
            struct pollfd p = {.fd = s->fd, .events = POLLIN};
            int r = poll(&p, 1, SLICE_MS);
            if (r < 0 && errno != EINTR) {
                s->error = errno;
                return -1;
            }
            if (r <= 0)
                continue;
        }
        ssize_t got = read(s->fd, buf, n);
        if (got >= 0) {
            s->consumed += (uint64_t)got;
            return got;
        }
        if (errno == EAGAIN || errno == EINTR) {
            s->stream = 1; /* would block: poll from now on */
            continue;
        }
        s->error = errno;
        return -1;
    }
}

/* ---- what the text readers share (input_ops.h) ---------------------------- */

/* The stdio stream of a text reader reads its src through this cookie,
 * which drops a UTF-8 byte order mark at the very start of the file. */
typedef struct text_cookie {
    tfos__input_src *src;
    int started;        /* the first bytes were checked for a BOM */
    unsigned char head[3];
    size_t nhead, ihead; /* the first bytes held back, and how many of them went out */
} text_cookie;

static ssize_t cookie_read(void *c_, char *buf, size_t n)
{
    text_cookie *c = c_;
    if (!c->started) {
        while (c->nhead < 3) {
            ssize_t r = tfos__input_read(c->src, c->head + c->nhead, 3 - c->nhead);
            if (r < 0)
                return -1;
            if (r == 0)
                break;
            c->nhead += (size_t)r;
        }
        c->started = 1;
        if (c->nhead == 3 && !memcmp(c->head, "\xef\xbb\xbf", 3))
            c->nhead = 0;
    }
    if (c->ihead < c->nhead) {
        size_t k = c->nhead - c->ihead < n ? c->nhead - c->ihead : n;
        memcpy(buf, c->head + c->ihead, k);
        c->ihead += k;
        return (ssize_t)k;
    }
    return tfos__input_read(c->src, buf, n);
}

static int cookie_close(void *c)
{
    free(c);
    return 0;
}

int tfos__input_text_open(void **state, size_t size, tfos__input_src *src, const char *path, char *err,
                          size_t errlen)
{
    tfos__input_text *t = calloc(1, size);
    text_cookie *c = calloc(1, sizeof *c);
    if (!t || !c) {
        free(t);
        free(c);
        return TFOS_ENOMEM;
    }
    c->src = src;
    snprintf(t->path, sizeof t->path, "%s", path);
    t->src = src;
    t->f = fopencookie(c, "r", (cookie_io_functions_t){.read = cookie_read, .close = cookie_close});
    if (!t->f) {
        int rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
        free(c);
        free(t);
        return rc;
    }
    setvbuf(t->f, NULL, _IOFBF, 64 << 10);
    tfos__batch_build_init(&t->b);
    *state = t;
    return 0;
}

int tfos__input_text_eof(tfos__input_text *t, uint64_t line, char *err, size_t errlen)
{
    if (!ferror(t->f))
        return TFOS_EEND;
    if (t->src->stop && *t->src->stop)
        return tfos__errf(err, errlen, TFOS_ESTOPPED, "%s line %llu: stopped while reading", t->path,
                          (unsigned long long)line);
    return tfos__errf(err, errlen, TFOS_ESYS, "%s line %llu: %s", t->path, (unsigned long long)line,
                      strerror(t->src->error ? t->src->error : EIO));
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

void tfos__input_text_close(tfos__input_text *t)
{
    if (!t)
        return;
    fclose(t->f);
    tfos__batch_build_fini(&t->b);
    free(t);
}

/* ---- the public interface (input.h) ---------------------------------------- */

int tfos__input_open_opts(tfos__input **out, const char *path, const tfos__input_opts *o, char *err, size_t errlen)
{
    int format = o->format;
    if (format == TFOS_FMT_AUTO && (format = format_of(path)) < 0)
        return tfos__errf(err, errlen, TFOS_EINVAL, "%s: unknown file type (use .csv, .jsonl or .npy, or give "
                          "--input-format)", path);
    const struct tfos__input_ops *ops = ops_of(format);
    if (!ops)
        return tfos__errf(err, errlen, TFOS_EINVAL, "%s: unknown input format %d", path, format);
    tfos__input *in = calloc(1, sizeof *in);
    if (!in)
        return TFOS_ENOMEM;
    in->ops = ops;
    in->src.stop = o->stop;
    /* O_NONBLOCK: opening a FIFO must not wait for its writer (reads wait,
     * in slices, in tfos__input_read) */
    in->src.fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (in->src.fd < 0) {
        int rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
        free(in);
        return rc;
    }
    struct stat sb;
    int rc;
    if (fstat(in->src.fd, &sb)) {
        rc = tfos__errf(err, errlen, TFOS_ESYS, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        rc = tfos__errf(err, errlen, TFOS_EINVAL, "%s: is a directory (give the files in it as --input, one "
                        "each)", path);
        goto fail;
    }
    if (S_ISREG(sb.st_mode) && sb.st_size > 0)
        in->size = (uint64_t)sb.st_size;
    in->src.stream = !S_ISREG(sb.st_mode);
    rc = ops->open(&in->state, &in->src, path, o, err, errlen);
    if (rc)
        goto fail;
    *out = in;
    return 0;
fail:
    close(in->src.fd);
    free(in);
    return rc;
}

int tfos__input_open(tfos__input **out, const char *path, int format, int csv_header, char *err, size_t errlen)
{
    tfos__input_opts o = {.format = format, .csv_header = csv_header};
    return tfos__input_open_opts(out, path, &o, err, errlen);
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

int tfos__input_next_size(tfos__input *in, uint32_t max_rows, uint32_t *nrows, size_t *len, uint64_t *first_row)
{
    if (max_rows == 0 || !in->ops->next_size)
        return TFOS_EINVAL;
    *first_row = in->rows;
    if (in->eof)
        return TFOS_EEND;
    int rc = in->ops->next_size(in->state, max_rows, nrows, len);
    if (rc == TFOS_EEND)
        in->eof = 1;
    return rc;
}

int tfos__input_fill(tfos__input *in, uint32_t nrows, void *buf, size_t len, char *err, size_t errlen)
{
    if (!in->ops->fill || in->eof)
        return TFOS_EINVAL;
    int rc = in->ops->fill(in->state, nrows, buf, len, err, errlen);
    if (rc == 0)
        in->rows += nrows;
    return rc;
}

void tfos__input_progress(const tfos__input *in, uint64_t *read, uint64_t *size)
{
    *read = in->src.consumed;
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
    close(in->src.fd);
    free(in);
}

int tfos__input_next_size_capped(tfos__input *in, uint32_t max_rows, size_t cap, uint32_t *nrows, size_t *len,
                                 uint64_t *first_row)
{
    int rc = tfos__input_next_size(in, max_rows, nrows, len, first_row);
    if (rc || !cap || *len <= cap || *nrows <= 1)
        return rc;
    uint64_t fit = (uint64_t)*nrows * cap / *len; /* len also holds the batch's header: fit rows take < cap */
    return tfos__input_next_size(in, fit ? (uint32_t)fit : 1, nrows, len, first_row);
}

int tfos__input_ring_mb(char *const *paths, int npaths, int format, uint32_t batch_rows)
{
    uint64_t rec = 0;
    for (int i = 0; i < npaths; i++) {
        struct stat sb;
        int f = format == TFOS_FMT_AUTO ? format_of(paths[i]) : format;
        const struct tfos__input_ops *ops = ops_of(f);
        if (!ops || !ops->next_size || stat(paths[i], &sb) || !S_ISREG(sb.st_mode))
            return 0; /* reading a FIFO's header here would take it from the feed */
        tfos__input *in;
        char err[256];
        tfos__input_opts o = {.format = f};
        if (tfos__input_open_opts(&in, paths[i], &o, err, sizeof err))
            return 0; /* the feed reports why */
        uint32_t n;
        size_t len = 0;
        uint64_t first;
        int rc = batch_rows ? tfos__input_next_size(in, batch_rows, &n, &len, &first)
                            : tfos__input_next_size_capped(in, TFOS_DEFAULT_BATCH_ROWS, TFOS_AUTO_RECORD_BYTES, &n,
                                                           &len, &first);
        tfos__input_close(in);
        if (rc && rc != TFOS_EEND)
            return 0;
        if (len > rec)
            rec = len;
    }
    rec += 4096; /* the ring's record headers and padding, generously */
    int mb = 4;
    while (mb < TFOS_DEFAULT_FEED_MB && ((uint64_t)mb << 20) < 8 * rec)
        mb *= 2;
    while (mb < 1024 && ((uint64_t)mb << 20) / 2 < rec)
        mb *= 2;
    return mb;
}
