/*
 * feed.h: read a tfos node's data feed from C or C++.
 *
 * A program started by tfos (`tfos run --input …`, or a Spark node) inherits
 * its node's input ring; this API hands its columnar batches to the program
 * as typed arrays, one batch at a time, with no per-row work. Producers that
 * write columnar batches: `tfos run --input` (CSV, JSON lines, .npy), and
 * Python's FeedClient.feed_partition / feed_arrays for rows of numbers,
 * strings and arrays. Records in other encodings (pickled rows, Arrow) are
 * for Python consumers: tfos_feed_next reports them as TFOS_EPROTO.
 *
 *   tfos_feed *f;
 *   if (tfos_feed_open(&f)) ...;            // from $TFOS_FEED_FDS
 *   tfos_feed_batch b;
 *   while (tfos_feed_next(f, &b, -1) == 0)
 *       for (uint32_t c = 0; c < b.ncols; c++)
 *           use(b.columns[c].data, b.nrows);  // row-major (nrows, shape...)
 *   tfos_feed_close(f);
 */
#ifndef TFOS_FEED_H
#define TFOS_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "tfos/tfos.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TFOS_FEED_FIXED = 0, TFOS_FEED_BYTES = 1, TFOS_FEED_STR = 2 };

typedef struct tfos_feed_column {
    const char *name;       /* not NUL-terminated; name_len bytes (may be 0) */
    size_t name_len;
    int kind;               /* TFOS_FEED_FIXED, _BYTES or _STR */
    const char *dtype;      /* FIXED: numpy's name, e.g. "<f4", "<i8", "|u1", "|b1" */
    size_t itemsize;        /* FIXED: bytes per element */
    int ndim;               /* FIXED: per-row dimensions (0: a scalar per row) */
    uint32_t shape[8];      /* FIXED: per-row shape */
    const void *data;       /* FIXED: nrows * prod(shape) elements, row-major;
                             * BYTES/STR: the values back to back */
    size_t data_len;
    const uint64_t *offsets; /* BYTES/STR: nrows+1 offsets into data; else NULL */
} tfos_feed_column;

typedef struct tfos_feed_batch {
    uint64_t partition;     /* the partition the rows belong to (0: none) */
    uint32_t nrows;
    uint32_t ncols;
    const tfos_feed_column *columns; /* valid until the next tfos_feed_next or close */
} tfos_feed_batch;

typedef struct tfos_feed tfos_feed;

/* The node's feed, from the fds named by $TFOS_FEED_FDS. TFOS_EINVAL when the
 * program was not started with a feed. The caller owns *out. */
int tfos_feed_open(tfos_feed **out);
/* The same from explicit fds (input ring, output ring; out_fd may be -1). */
int tfos_feed_open_fds(tfos_feed **out, int in_fd, int out_fd);

/* Wait up to timeout_ms (-1: without bound) for the next batch. A
 * producer's death is no error here: the partition it was writing is
 * aborted (tfos_feed_aborted) and fed again by a new producer, from where it
 * stopped when the re-feed reaches this node (docs/FEED.md), and the wait
 * goes on. Returns 0, TFOS_EEND at the end of the feed, TFOS_ETIMEDOUT,
 * TFOS_ECLOSED (the node is stopping: no producer will feed it again; every
 * later call too), TFOS_EPROTO (a corrupt
 * batch or a record that is not a columnar batch; it is skipped, the next
 * call goes on). The batch's columns stay valid until the next
 * tfos_feed_next or tfos_feed_close, and no longer: a batch of fixed-size
 * columns is read where it lies in the ring, with no copy (its room in the
 * ring is given back by that next call); one with variable-length columns
 * is the feed's own copy. Copy what must outlive the call. */
int tfos_feed_next(tfos_feed *f, tfos_feed_batch *batch, int timeout_ms);

/* Publish the program's progress for the status page: pairs "name=number"
 * separated by single spaces, e.g. "step=120 loss=0.31" (at most 16 pairs,
 * names [A-Za-z_][A-Za-z0-9_.]{0,31}, 1024 bytes). Shown per node on the
 * status page and in `tfos status`; counts as progress for --hang-timeout.
 * 0, TFOS_ETOOBIG, TFOS_EAGAIN (another thread was publishing: this one is
 * dropped). A report that does not check is shown as nothing. */
int tfos_feed_report(tfos_feed *f, const char *text);

/* Partitions whose producer died before finishing them (they are fed
 * again; see tfos_feed_next). */
uint64_t tfos_feed_aborted(const tfos_feed *f);

/* Stop reading: producers get told at once and stop (DataFeed.terminate). */
void tfos_feed_close(tfos_feed *f);

#ifdef __cplusplus
}
#endif
#endif
