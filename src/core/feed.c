/* feed.c: the C consumer API (include/tfos/feed.h) over the ring and the
 * columnar batch. A batch of fixed-size columns only is handed out where it
 * lies in the ring, with no copy, and its record is released by the next
 * call: tfos__batch_open reads every field of the header once into the
 * column table here, so a producer changing the shared bytes afterwards
 * changes values, never a length or an offset the caller relies on. A batch
 * with variable-length columns (whose offsets the caller reads from the
 * batch) is copied out of the ring before it is checked, as before. */
#include "tfos/feed.h"

#include "core/batch.h"
#include "core/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_COLUMNS (TFOS_RING_TAG_USER + 1)

struct tfos_feed {
    tfos__ring *in;
    uint64_t partition;
    uint64_t aborted;
    uint8_t *buf;
    size_t cap;
    int held; /* the last batch is still in the ring (peeked): released by the next call */
    tfos__col cols[TFOS_BATCH_MAX_COLS];
    tfos_feed_column out[TFOS_BATCH_MAX_COLS];
};

int tfos_feed_open_fds(tfos_feed **out, int in_fd, int out_fd)
{
    (void)out_fd; /* results are written by the Python API for now */
    tfos_feed *f = calloc(1, sizeof *f);
    if (!f)
        return TFOS_ENOMEM;
    int rc = tfos__ring_attach(&f->in, in_fd, TFOS_RING_CONSUMER);
    if (rc) {
        free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int tfos_feed_open(tfos_feed **out)
{
    const char *e = getenv("TFOS_FEED_FDS");
    int in_fd, out_fd;
    if (!e || sscanf(e, "%d,%d", &in_fd, &out_fd) != 2)
        return TFOS_EINVAL;
    return tfos_feed_open_fds(out, in_fd, out_fd);
}

/* Copy a record's batch out of the ring (f->buf) and release it. */
static int copy_out(tfos_feed *f, const tfos__ring_rec *rec, const uint8_t **base)
{
    if (rec->len > f->cap) {
        uint8_t *nb = realloc(f->buf, rec->len);
        if (!nb) {
            tfos__ring_release(f->in);
            return TFOS_ENOMEM;
        }
        f->buf = nb;
        f->cap = rec->len;
    }
    memcpy(f->buf, rec->data, rec->len);
    tfos__ring_release(f->in);
    *base = f->buf;
    return 0;
}

int tfos_feed_next(tfos_feed *f, tfos_feed_batch *b, int timeout_ms)
{
    if (f->held) { /* the caller is done with the batch handed out last */
        tfos__ring_release(f->in);
        f->held = 0;
    }
    for (;;) {
        tfos__ring_rec rec;
        int rc = tfos__ring_peek(f->in, &rec, timeout_ms);
        if (rc)
            return rc;
        switch (rec.tag) {
        case TFOS_RING_PARTITION_BEGIN:
            f->partition = rec.partition;
            tfos__ring_release(f->in);
            continue;
        case TFOS_RING_PARTITION_END:
            f->partition = 0;
            tfos__ring_release(f->in);
            tfos__ring_ack(f->in, 1); /* the caller has had every batch before it */
            continue;
        case TFOS_RING_PARTITION_ABORT:
            f->aborted++;
            f->partition = 0;
            tfos__ring_release(f->in);
            tfos__ring_ack(f->in, 1);
            continue;
        default:
            break;
        }
        if (rec.tag != TAG_COLUMNS) {
            tfos__ring_release(f->in);
            return TFOS_EPROTO;
        }
        tfos__batch_view v;
        char err[160];
        const uint8_t *base = rec.data;
        int fixed = tfos__batch_open(base, rec.len, &v, f->cols, TFOS_BATCH_MAX_COLS, err, sizeof err) == 0;
        for (uint32_t i = 0; fixed && i < v.ncols; i++)
            fixed = v.cols[i].kind == TFOS_COL_FIXED;
        if (fixed) {
            f->held = 1;
        } else {
            int rc = copy_out(f, &rec, &base);
            if (rc)
                return rc;
            if (tfos__batch_open(base, rec.len, &v, f->cols, TFOS_BATCH_MAX_COLS, err, sizeof err))
                return TFOS_EPROTO;
        }
        for (uint32_t i = 0; i < v.ncols; i++) {
            const tfos__col *c = &v.cols[i];
            tfos_feed_column *o = &f->out[i];
            memset(o, 0, sizeof *o);
            o->name = c->name;
            o->name_len = c->name_len;
            o->kind = c->kind;
            o->data = base + c->data_off;
            o->data_len = (size_t)c->data_len;
            if (c->kind == TFOS_COL_FIXED) {
                o->dtype = tfos__dtype_numpy(c->dtype);
                o->itemsize = tfos__dtype_size(c->dtype);
                o->ndim = c->ndim;
                memcpy(o->shape, c->shape, sizeof o->shape);
            } else {
                o->offsets = (const uint64_t *)(const void *)(base + c->offsets_off);
            }
        }
        tfos__ring_count_taken(f->in, v.nrows);
        b->partition = f->partition;
        b->nrows = v.nrows;
        b->ncols = v.ncols;
        b->columns = f->out;
        return 0;
    }
}

int tfos_feed_report(tfos_feed *f, const char *text)
{
    if (!f || !text)
        return TFOS_EINVAL;
    return tfos__ring_report(f->in, text, strlen(text));
}

uint64_t tfos_feed_aborted(const tfos_feed *f)
{
    return f->aborted;
}

void tfos_feed_close(tfos_feed *f)
{
    if (!f)
        return;
    tfos__ring_close(f->in);
    free(f->buf);
    free(f);
}
