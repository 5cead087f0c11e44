/* meter.h: the feed meter of a `tfos run`: counts, rates over the last
 * seconds, a history for the chart and an ETA, from the feeder's live
 * counters (feed/feeder.h) or from totals counted elsewhere (Spark's driver).
 * The status endpoints (status.h) and the console progress line read it. */
#ifndef TFOS_RUN_METER_H
#define TFOS_RUN_METER_H
#include "feed/feeder.h"
#include "tfos/tfos.h"

#include <stddef.h>
#include <stdint.h>

/* History kept for the chart: one sample a second, the last five minutes. */
#define TFOS__FEED_HISTORY 300
/* Rates are averaged over this many seconds. */
#define TFOS__FEED_RATE_WINDOW 5

typedef struct tfos__feed_counts {
    uint64_t rows, bytes, records, partitions_completed, partitions_aborted;
} tfos__feed_counts;

typedef struct tfos__feed_node_meter {
    char name[64];
    int executor_id;
    tfos__feed_counts c; /* this attempt */
    double rows_per_s, bytes_per_s;
    uint64_t snap_rows[TFOS__FEED_RATE_WINDOW + 1], snap_bytes[TFOS__FEED_RATE_WINDOW + 1];
} tfos__feed_node_meter;

typedef struct tfos__feed_sample {
    int64_t t_ms;             /* since the meter started */
    uint64_t rows, bytes;     /* fed so far in this run, every attempt together */
    double rows_per_s, bytes_per_s;
    uint64_t taken;           /* rows the trainers took so far in this run */
    double taken_per_s;
} tfos__feed_sample;

/* Feed statistics of a `tfos run`, driven from the launcher's loop (one
 * thread: the loop updates it, the status handler reads it). Counts are the
 * current attempt's (every attempt feeds the files again, with new rings);
 * the history runs across attempts. */
typedef struct tfos__feed_meter {
    int active;             /* a feed started in this run */
    const char *state;      /* "feeding", "done", "failed", "stopped" (static strings) */
    const char *source;     /* "files" (counted by the C feeder), "arrow" or "spark" */
    int rows_counted;
    int bytes_uncounted;    /* no byte counts (a feed counted by Spark's driver) */
    int nnodes;
    tfos__feed_node_meter *nodes;
    tfos__feed_counts total, base; /* this attempt; earlier attempts */
    double rows_per_s, bytes_per_s, read_per_s;
    uint64_t input_bytes, input_bytes_read, rows_expected, partitions_expected;
    /* rows the trainers took (their agents' counts, tfos__feed_meter_taken):
     * in this run, at the start of the current feed, and the rate */
    int taken_known;
    uint64_t taken, taken_base, taken_last, taken_at_start;
    /* rows written into this cluster's rings, as its agents last said: behind
     * the feed's own count until they report after its end */
    uint64_t reported_in;
    double taken_per_s;
    uint64_t snap_taken[TFOS__FEED_RATE_WINDOW + 1];
    int64_t t0_ms, feed_t0_ms, feed_t1_ms, node_since_ms, next_sample_ms;
    /* the rate window: the last RATE_WINDOW+1 one-second snapshots */
    int64_t snap_t[TFOS__FEED_RATE_WINDOW + 1];
    uint64_t snap_rows[TFOS__FEED_RATE_WINDOW + 1], snap_bytes[TFOS__FEED_RATE_WINDOW + 1],
        snap_read[TFOS__FEED_RATE_WINDOW + 1];
    int snap_n, snap_head;
    tfos__feed_sample hist[TFOS__FEED_HISTORY];
    int hist_n, hist_head; /* oldest sample at (hist_head - hist_n) mod HISTORY */
} tfos__feed_meter;

/* Zero the meter; times count from now_ms. */
void tfos__feed_meter_init(tfos__feed_meter *m, int64_t now_ms);
/* A feed starts (each attempt): take the node names and ids from p. The
 * counts of an earlier attempt are folded into the history's run totals.
 * TFOS_ENOMEM. */
int tfos__feed_meter_start(tfos__feed_meter *m, const tfos__feed_progress *p, const char *source, int64_t now_ms);
/* Read p's live counters (p may be NULL: nothing new; the meter only reads
 * p) and, once a second, take a sample for the rates and the history. */
void tfos__feed_meter_update(tfos__feed_meter *m, tfos__feed_progress *p, int64_t now_ms);
/* The feeder ended: "done", "failed" or "stopped". */
void tfos__feed_meter_end(tfos__feed_meter *m, const char *state, int64_t now_ms);
/* Seconds until the feed is written, from the rows to expect (.npy) or the
 * input bytes left at the current read rate; -1 when unknown. */
double tfos__feed_meter_eta(const tfos__feed_meter *m);
/* The console progress line ("feed: partitions 3/~12, ..."), into buf;
 * once the feed is written and the trainers are still reading, what they
 * have consumed ("feed: written, trainers consumed 1200 of 5000 rows"). */
void tfos__feed_meter_line(const tfos__feed_meter *m, uint64_t partition_rows, char *buf, size_t len);
/* The rows every node's program has taken from its ring so far, summed
 * over the nodes of the current cluster (tfos_node_info.rows_out). A sum
 * lower than the last (a new cluster after a restart) starts a new count;
 * the run's total goes on. The next sample takes it. */
void tfos__feed_meter_taken(tfos__feed_meter *m, uint64_t rows_out);
/* tfos__feed_meter_taken with the sum over c's nodes (c may be NULL:
 * between attempts; nothing changes). */
void tfos__feed_meter_taken_from(tfos__feed_meter *m, const tfos_coord *c);
/* Rows of the current feed the trainers have taken. */
uint64_t tfos__feed_meter_consumed(const tfos__feed_meter *m);
/* Free what the meter holds (the node table). */
void tfos__feed_meter_fini(tfos__feed_meter *m);
/* A feed counted elsewhere (Spark's driver: totals only, no nodes, no
 * bytes): set the totals and sample. A feed that starts again after one
 * ended folds the earlier counts into the run totals. state: "feeding",
 * "done", "failed" or "stopped". */
void tfos__feed_meter_set(tfos__feed_meter *m, const char *state, uint64_t rows, uint64_t partitions_completed,
                          uint64_t partitions_aborted, uint64_t partitions_expected, int64_t now_ms);

#endif
