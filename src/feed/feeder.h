/* feeder.h: feed files into the nodes of a running cluster (`tfos run
 * --input`): InputMode.SPARK without Spark.
 *
 * Each file is cut into partitions of `partition_rows` rows; partitions go to
 * the nodes in turn (round robin over chief and workers), each written whole
 * between PARTITION_BEGIN/END as columnar batches of `batch_rows` rows. Every
 * epoch feeds every file again, with new partition ids. At the end every node
 * gets end-of-feed. Backpressure: a full ring makes the feeder wait for that
 * node (waits in 200 ms slices, watching `stop`). Inputs that block (a FIFO
 * with no writer, a silent pipe) are waited for in slices too: a set `stop`
 * ends every wait of the feed within ~200 ms. A node whose program calls
 * DataFeed.terminate() gets no more partitions (the one it was getting is
 * dropped for it, as TensorFlowOnSpark skips the rest of a terminated feed);
 * the others go on. */
#ifndef TFOS_RUN_FEEDER_H
#define TFOS_RUN_FEEDER_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ring.h"

/* Live progress of a feed, written by the feeder thread and read by the
 * launcher's loop (the status page, the console progress line) while it
 * runs. The launcher allocates it and its nodes before the feed starts and
 * frees it (tfos__feed_progress_fini) once the feeder has been joined.
 *
 * Node i is the node of executor_ids[i]. Its `observer` is an observer handle
 * on the node's input ring, stored once by the feeder (NULL until then): the
 * ring's shared counters (records, bytes, partitions completed and aborted)
 * count what every producer wrote, and any thread may read them; the handle
 * is the launcher's to close. Rows are counted by the file feeder itself (a
 * record is a batch; only the feeder knows its rows). */
typedef struct tfos__feed_node {
    char name[64];                 /* "worker:0", set by the launcher */
    int executor_id;
    _Atomic(tfos__ring *) observer;
    _Atomic uint64_t rows;
} tfos__feed_node;

typedef struct tfos__feed_progress {
    int nnodes;
    tfos__feed_node *nodes;
    int rows_counted;                      /* 0: an Arrow feed, rows unknown to the launcher */
    _Atomic uint64_t input_bytes;          /* file sizes x epochs; 0: unknown */
    _Atomic uint64_t input_bytes_read;     /* of those, read so far */
    _Atomic uint64_t rows_expected;        /* rows x epochs when every file tells (.npy); 0: unknown */
    _Atomic uint64_t partitions_expected;  /* likewise */
} tfos__feed_progress;

/* Allocate nnodes nodes (names and ids for the caller to fill). TFOS_ENOMEM. */
int tfos__feed_progress_init(tfos__feed_progress *p, int nnodes);
/* Close the observer handles and free the nodes. The feeder must be done. */
void tfos__feed_progress_fini(tfos__feed_progress *p);

typedef struct tfos__feeder_opts {
    const char *cluster_id;
    const char *secret;
    int nnodes;
    const int *executor_ids;
    char *const *inputs;
    int ninputs;
    int format;          /* TFOS_FMT_* */
    int csv_header;      /* 1, 0, -1 detect */
    int csv_delimiter;   /* the CSV field separator; 0: ',' */
    int epochs;          /* >= 1 */
    uint32_t batch_rows; /* rows per record */
    size_t record_bytes; /* and, for a format that knows its rows' sizes before reading them (.npy), no more
                          * bytes than this per record (at least one row); 0: batch_rows rows */
    uint64_t partition_rows;
    _Atomic int *stop;   /* set by the launcher (another thread) to abandon the feed */
    tfos__feed_progress *progress; /* NULL: no live progress */
    /* Where a restarted feed resumes (feed/position.h): partitions recorded
     * whole are read and not fed, of those recorded in part the first rows
     * are not fed; NULL: feed everything. Borrowed. */
    const struct tfos__position *resume;
} tfos__feeder_opts;

typedef struct tfos__feeder_stats {
    uint64_t rows, bytes, partitions;
    uint64_t resumed_rows; /* rows not fed because a checkpoint had them (resume) */
    uint64_t terminated; /* nodes whose program stopped its feed early (DataFeed.terminate) */
} tfos__feeder_stats;

/* Run the whole feed. 0 on success; otherwise an error with a one-line
 * reason naming the file and row, or the node that stopped reading. */
int tfos__feed_files(const tfos__feeder_opts *o, tfos__feeder_stats *st, char *err, size_t errlen);

/* For a feed written by another process (the Arrow feeder): connect to each
 * node's feed socket only to attach an observer handle into o->progress, so
 * the launcher sees the rings' counters. Waits at most ~5 s per node and
 * gives up on a node it cannot reach (its counters stay unknown), or when
 * *o->stop is set. */
void tfos__feed_observe(const tfos__feeder_opts *o);

#endif
