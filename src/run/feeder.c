/* feeder.c: files -> partitions -> the nodes' input rings. */
#include "run/feeder.h"

#include "core/feedsock.h"
#include "core/ring.h"
#include "run/input.h"
#include "core/log.h"
#include "tfos/tfos.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLICE_MS 200

typedef struct target {
    tfos__ring *ring;
    char node[64];
    int terminated; /* its program called terminate(): feed it no more */
} target;

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

int tfos__feed_files(const tfos__feeder_opts *o, tfos__feeder_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (o->nnodes < 1 || o->ninputs < 1 || o->epochs < 1 || !o->batch_rows || !o->partition_rows)
        return tfos__errf(err, errlen, TFOS_EINVAL, "nothing to feed");
    target *t = calloc((size_t)o->nnodes, sizeof *t);
    if (!t)
        return TFOS_ENOMEM;
    int rc = 0;
    for (int i = 0; i < o->nnodes; i++) {
        int in_fd, out_fd;
        char cerr[512];
        rc = tfos__feed_connect(o->cluster_id, o->executor_ids[i], o->secret, 30000, &in_fd, &out_fd, t[i].node,
                                sizeof t[i].node, cerr, sizeof cerr);
        if (rc) {
            tfos__errf(err, errlen, rc, "%s", cerr);
            goto out;
        }
        rc = tfos__ring_attach(&t[i].ring, in_fd, TFOS_RING_PRODUCER);
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
            rc = tfos__input_open(&in, o->inputs[f], o->format, o->csv_header, err, errlen);
            if (rc)
                goto out;
            int open_part = 0, skipping = 0;
            uint64_t in_part = 0;
            target *cur = NULL;
            for (;;) {
                uint32_t want = o->batch_rows;
                if (o->partition_rows - in_part < want)
                    want = (uint32_t)(o->partition_rows - in_part);
                const void *batch;
                size_t len;
                uint64_t first;
                rc = tfos__input_next(in, want, &batch, &len, &first, err, errlen);
                if (rc == TFOS_EEND) {
                    rc = 0;
                    break;
                }
                if (rc)
                    break; /* err names the file and row */
                uint32_t nb;
                memcpy(&nb, (const uint8_t *)batch + 4, 4);
                if (skipping) { /* the rest of a partition whose node terminated its feed */
                    in_part += nb;
                    if (in_part >= o->partition_rows) {
                        skipping = 0;
                        in_part = 0;
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
                        in_part = nb;
                        continue;
                    }
                    if (rc) {
                        ring_error(o, cur, rc, err, errlen);
                        break;
                    }
                    open_part = 1;
                    in_part = 0;
                }
                if (len > tfos__ring_max_record(cur->ring)) {
                    rc = tfos__errf(err, errlen, TFOS_ETOOBIG, "%s rows %llu..: a batch of %zu bytes does not fit %s's "
                              "feed ring (largest record %zu): use a smaller --batch-rows or a larger --feed-mb",
                              o->inputs[f], (unsigned long long)first, len, cur->node,
                              tfos__ring_max_record(cur->ring));
                    break;
                }
                rc = write_rec(o, cur, batch, len, err, errlen);
                if (terminated_now(cur, rc)) {
                    rc = 0;
                    open_part = 0;
                    skipping = 1;
                    in_part += nb;
                    st->terminated++;
                    continue;
                }
                if (rc)
                    break;
                in_part += nb;
                st->rows += nb;
                st->bytes += len;
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
