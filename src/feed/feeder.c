/* feeder.c: files -> partitions -> the nodes' input rings. */
#include "feed/feeder.h"
#include "feed/position.h"

#include "core/feedsock.h"
#include "core/log.h"
#include "core/ring.h"
#include "feed/input.h"
#include "tfos/tfos.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLICE_MS 200

typedef struct target {
    tfos__ring *ring;
    char node[64];
    int terminated;      /* its program called terminate(): feed it no more */
    tfos__feed_node *pn; /* its live counters, or NULL */
} target;

int tfos__feed_progress_init(tfos__feed_progress *p, int nnodes)
{
    memset(p, 0, sizeof *p);
    p->nodes = calloc((size_t)(nnodes > 0 ? nnodes : 1), sizeof *p->nodes);
    if (!p->nodes)
        return TFOS_ENOMEM;
    p->nnodes = nnodes;
    for (int i = 0; i < nnodes; i++)
        atomic_init(&p->nodes[i].observer, NULL);
    return 0;
}

void tfos__feed_progress_fini(tfos__feed_progress *p)
{
    for (int i = 0; p->nodes && i < p->nnodes; i++)
        tfos__ring_close(atomic_exchange(&p->nodes[i].observer, NULL));
    free(p->nodes);
    memset(p, 0, sizeof *p);
}

/* Hand the launcher an observer handle on the ring in in_fd (best effort:
 * without one, that node's ring counters just stay unknown). */
static void publish_observer(tfos__feed_progress *p, int i, int in_fd)
{
    tfos__ring *obs;
    if (!p || i >= p->nnodes || tfos__ring_attach(&obs, in_fd, TFOS_RING_OBSERVER))
        return;
    tfos__ring *none = NULL;
    if (!atomic_compare_exchange_strong(&p->nodes[i].observer, &none, obs))
        tfos__ring_close(obs);
}

static tfos__input_opts input_opts(const tfos__feeder_opts *o)
{
    return (tfos__input_opts){.format = o->format, .csv_header = o->csv_header, .csv_delimiter = o->csv_delimiter,
                              .stop = o->stop};
}

/* What the whole feed will read: file sizes x epochs, and for .npy files
 * (whose header tells) the rows and partitions to expect. */
static void plan_progress(const tfos__feeder_opts *o)
{
    tfos__feed_progress *p = o->progress;
    if (!p)
        return;
    uint64_t bytes = 0, rows = 0, parts = 0;
    int rows_known = 1;
    for (int f = 0; f < o->ninputs; f++) {
        struct stat sb;
        if (stat(o->inputs[f], &sb) || !S_ISREG(sb.st_mode)) {
            rows_known = 0; /* a FIFO or pipe is read once, by the feed itself */
            continue;
        }
        if (sb.st_size > 0)
            bytes += (uint64_t)sb.st_size;
        tfos__input *in;
        char err[256];
        tfos__input_opts io = input_opts(o);
        if (!rows_known || tfos__input_open_opts(&in, o->inputs[f], &io, err, sizeof err)) {
            rows_known = 0;
            continue;
        }
        int64_t n = tfos__input_rows(in);
        tfos__input_close(in);
        if (n < 0) {
            rows_known = 0;
            continue;
        }
        rows += (uint64_t)n;
        parts += ((uint64_t)n + o->partition_rows - 1) / o->partition_rows;
    }
    uint64_t epochs = (uint64_t)o->epochs;
    atomic_store(&p->input_bytes, bytes * epochs);
    if (rows_known && rows) {
        atomic_store(&p->rows_expected, rows * epochs);
        atomic_store(&p->partitions_expected, parts * epochs);
    }
}

/* ECLOSED from a consumer that closed on purpose (DataFeed.terminate) is not
 * an error: that node takes no more data. */
static int terminated_now(target *t, int rc)
{
    if (rc != TFOS_ECLOSED)
        return 0;
    tfos__ring_stats st;
    tfos__ring_stats_get(t->ring, &st);
    if (!st.consumer_terminated)
        return 0;
    t->terminated = 1;
    return 1;
}

static target *next_target(target *t, int n, int *next)
{
    for (int k = 0; k < n; k++) {
        target *c = &t[*next];
        *next = (*next + 1) % n;
        if (!c->terminated)
            return c;
    }
    return NULL;
}


/* Retry a ring operation in slices until it is done, fails, or stop is set. */
static int ring_error(const tfos__feeder_opts *o, const target *t, int rc, char *err, size_t errlen)
{
    if (rc == TFOS_ECLOSED)
        return tfos__errf(err, errlen, rc, "%s stopped reading its feed (its program ended or died)", t->node);
    if (o->stop && *o->stop)
        return tfos__errf(err, errlen, TFOS_ESTOPPED, "the feed was stopped");
    return tfos__errf(err, errlen, rc, "feeding %s: %s", t->node, tfos_strerror(rc));
}

static int waiting(int rc)
{
    return rc == TFOS_ETIMEDOUT || rc == TFOS_EFULL || rc == TFOS_EAGAIN;
}

/* Repeat a ring call that waits in SLICE_MS slices until it is done or
 * fails, or the launcher stops the feed; rc gets its last result. */
#define RETRY(rc, o, call)                                \
    do {                                                  \
        (rc) = (call);                                    \
    } while (waiting(rc) && !((o)->stop && *(o)->stop))

static int write_rec(const tfos__feeder_opts *o, target *t, const void *buf, size_t len, char *err, size_t errlen)
{
    int rc;
    RETRY(rc, o, tfos__ring_write(t->ring, TFOS_RING_TAG_USER + 1, buf, len, SLICE_MS));
    return rc ? ring_error(o, t, rc, err, errlen) : 0;
}

/* The input's bytes read so far, for the status page. */
static void report_read(const tfos__feeder_opts *o, const tfos__input *in, uint64_t read_before)
{
    if (o->progress) {
        uint64_t got, size;
        tfos__input_progress(in, &got, &size);
        atomic_store(&o->progress->input_bytes_read, read_before + got);
    }
}

/* Reserve len bytes in t's ring and have the input read its next batch of
 * nb rows straight into them (one copy); a read that fails leaves nothing
 * in the ring. */
static int fill_rec(const tfos__feeder_opts *o, target *t, tfos__input *in, uint32_t nb, size_t len, char *err,
                    size_t errlen)
{
    int rc;
    void *slot;
    RETRY(rc, o, tfos__ring_reserve(t->ring, TFOS_RING_TAG_USER + 1, len, &slot, SLICE_MS));
    if (rc)
        return ring_error(o, t, rc, err, errlen);
    if ((rc = tfos__input_fill(in, nb, slot, len, err, errlen))) {
        tfos__ring_cancel(t->ring);
        return rc;
    }
    return tfos__ring_commit(t->ring, len);
}

int tfos__feed_files(const tfos__feeder_opts *o, tfos__feeder_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (o->nnodes < 1 || o->ninputs < 1 || o->epochs < 1 || !o->batch_rows || !o->partition_rows)
        return tfos__errf(err, errlen, TFOS_EINVAL, "nothing to feed");
    target *t = calloc((size_t)o->nnodes, sizeof *t);
    if (!t)
        return TFOS_ENOMEM;
    int rc = 0;
    plan_progress(o);
    uint64_t read_before = 0; /* input bytes of the files already fed */
    for (int i = 0; i < o->nnodes; i++) {
        t[i].pn = o->progress && i < o->progress->nnodes ? &o->progress->nodes[i] : NULL;
        int in_fd, out_fd;
        char cerr[512];
        rc = tfos__feed_connect(o->cluster_id, o->executor_ids[i], o->secret, 30000, o->stop, &in_fd, &out_fd,
                                t[i].node, sizeof t[i].node, cerr, sizeof cerr);
        if (rc) {
            tfos__errf(err, errlen, rc, "%s", cerr);
            goto out;
        }
        rc = tfos__ring_attach(&t[i].ring, in_fd, TFOS_RING_PRODUCER);
        if (!rc)
            publish_observer(o->progress, i, in_fd);
        close(in_fd);
        close(out_fd);
        if (rc) {
            tfos__errf(err, errlen, rc, "cannot attach to the feed of %s: %s", t[i].node, tfos_strerror(rc));
            goto out;
        }
    }
    uint64_t pid = 1;
    int next = 0;
    for (int e = 0; e < o->epochs; e++) {
        for (int f = 0; f < o->ninputs; f++) {
            tfos__input *in;
            tfos__input_opts io = input_opts(o);
            rc = tfos__input_open_opts(&in, o->inputs[f], &io, err, errlen);
            if (rc)
                goto out;
            int open_part = 0, skipping = 0, decided = 0;
            uint64_t in_part = 0, drop = 0;
            target *cur = NULL;
            for (;;) {
                /* a partition a surviving checkpoint has (wholly or its first
                 * rows) is read but not fed */
                if (!decided && !open_part && !skipping && o->resume) {
                    drop = tfos__position_whole(o->resume, pid) ? o->partition_rows
                                                                 : tfos__position_rows(o->resume, pid);
                    decided = 1;
                }
                uint32_t want = o->batch_rows;
                if (o->partition_rows - in_part < want)
                    want = (uint32_t)(o->partition_rows - in_part);
                if (drop && drop < want)
                    want = (uint32_t)drop;
                const void *batch = NULL;
                size_t len = 0;
                uint64_t first;
                uint32_t nb = 0;
                /* a batch that is fed (not dropped or skipped) of a format
                 * that can is read straight into the ring (fill_rec) */
                int direct = !drop && !skipping;
                if (direct && (rc = tfos__input_next_size_capped(in, want, o->record_bytes, &nb, &len, &first)) ==
                                  TFOS_EINVAL)
                    direct = 0;
                if (!direct) {
                    rc = tfos__input_next(in, want, &batch, &len, &first, err, errlen);
                    report_read(o, in, read_before);
                    if (rc == 0)
                        memcpy(&nb, (const uint8_t *)batch + 4, 4);
                }
                if (rc == TFOS_ETOOBIG && direct)
                    rc = tfos__errf(err, errlen, rc, "%s rows %llu..: rows too large", o->inputs[f],
                                    (unsigned long long)first);
                if (rc == TFOS_EEND) {
                    rc = 0;
                    break;
                }
                if (rc)
                    break; /* err names the file and row */
                if (drop) {
                    drop = drop > nb ? drop - nb : 0;
                    in_part += nb;
                    st->resumed_rows += nb;
                    if (in_part >= o->partition_rows) {
                        in_part = 0;
                        drop = 0;
                        decided = 0;
                        pid++;
                    }
                    continue;
                }
                if (skipping) { /* the rest of a partition whose node terminated its feed */
                    in_part += nb;
                    if (in_part >= o->partition_rows) {
                        skipping = 0;
                        in_part = 0;
                        decided = 0;
                        pid++;
                    }
                    continue;
                }
                if (!open_part) {
                    cur = next_target(t, o->nnodes, &next);
                    if (!cur)
                        break; /* every node terminated its feed */
                    RETRY(rc, o, tfos__ring_partition_begin(cur->ring, pid, SLICE_MS));
                    if (terminated_now(cur, rc)) {
                        rc = 0;
                        skipping = 1;
                        in_part = direct ? 0 : nb; /* a batch not read yet is read while skipping */
                        continue;
                    }
                    if (rc) {
                        ring_error(o, cur, rc, err, errlen);
                        break;
                    }
                    open_part = 1; /* in_part: 0, or the rows a checkpoint had */
                }
                if (len > tfos__ring_max_record(cur->ring)) {
                    rc = tfos__errf(err, errlen, TFOS_ETOOBIG, "%s rows %llu..: a batch of %zu bytes does not fit %s's "
                              "feed ring (largest record %zu): use a smaller --batch-rows or a larger --feed-mb",
                              o->inputs[f], (unsigned long long)first, len, cur->node,
                              tfos__ring_max_record(cur->ring));
                    break;
                }
                rc = direct ? fill_rec(o, cur, in, nb, len, err, errlen) : write_rec(o, cur, batch, len, err, errlen);
                report_read(o, in, read_before);
                if (terminated_now(cur, rc)) {
                    rc = 0;
                    open_part = 0;
                    skipping = 1;
                    in_part += direct ? 0 : nb; /* fill_rec's reservation failed: nothing was read */
                    st->terminated++;
                    continue;
                }
                if (rc)
                    break;
                tfos__ring_count_rows(cur->ring, nb);
                in_part += nb;
                st->rows += nb;
                st->bytes += len;
                if (cur->pn)
                    atomic_fetch_add(&cur->pn->rows, nb);
                if (in_part >= o->partition_rows) {
                    RETRY(rc, o, tfos__ring_partition_end(cur->ring, SLICE_MS));
                    if (terminated_now(cur, rc))
                        rc = 0;
                    if (rc) {
                        ring_error(o, cur, rc, err, errlen);
                        break;
                    }
                    open_part = 0;
                    in_part = 0;
                    decided = 0;
                    st->partitions++;
                    pid++;
                }
            }
            if (!rc && open_part) {
                RETRY(rc, o, tfos__ring_partition_end(cur->ring, SLICE_MS));
                if (terminated_now(cur, rc))
                    rc = 0;
                else if (rc)
                    ring_error(o, cur, rc, err, errlen);
                else {
                    st->partitions++;
                    pid++;
                }
                open_part = 0;
            } else if (!rc && in_part) {
                pid++; /* the file's last partition was read but not fed (resumed or terminated) */
            }
            if (!rc) {
                uint64_t got, size;
                tfos__input_progress(in, &got, &size);
                read_before += size;
                if (o->progress)
                    atomic_store(&o->progress->input_bytes_read, read_before);
            }
            tfos__input_close(in);
            if (rc) {
                /* a partition left open is closed below with the ring: the
                 * consumer sees it aborted, never half-delivered as whole */
                goto out;
            }
        }
    }
    for (int i = 0; i < o->nnodes; i++) {
        if (t[i].terminated)
            continue;
        RETRY(rc, o, tfos__ring_end_feed(t[i].ring, SLICE_MS));
        if (terminated_now(&t[i], rc))
            rc = 0;
        if (rc && rc != TFOS_EEND) {
            ring_error(o, &t[i], rc, err, errlen);
            goto out;
        }
        rc = 0;
    }
out:
    for (int i = 0; i < o->nnodes; i++)
        tfos__ring_close(t[i].ring);
    free(t);
    return rc;
}

void tfos__feed_observe(const tfos__feeder_opts *o)
{
    for (int i = 0; o->progress && i < o->nnodes && i < o->progress->nnodes; i++) {
        if (o->stop && *o->stop)
            return;
        int in_fd, out_fd;
        char err[512];
        if (tfos__feed_connect(o->cluster_id, o->executor_ids[i], o->secret, 5000, o->stop, &in_fd, &out_fd, NULL,
                               0, err, sizeof err)) {
            TFOS_DEBUG("feed statistics: %s", err);
            continue;
        }
        publish_observer(o->progress, i, in_fd);
        close(in_fd);
        close(out_fd);
    }
}
