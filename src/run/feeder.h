/* feeder.h: feed files into the nodes of a running cluster (`tfos run
 * --input`): InputMode.SPARK without Spark.
 *
 * Each file is cut into partitions of `partition_rows` rows; partitions go to
 * the nodes in turn (round robin over chief and workers), each written whole
 * between PARTITION_BEGIN/END as columnar batches of `batch_rows` rows. Every
 * epoch feeds every file again, with new partition ids. At the end every node
 * gets end-of-feed. Backpressure: a full ring makes the feeder wait for that
 * node (waits in 200 ms slices, watching `stop`). A node whose program calls
 * DataFeed.terminate() gets no more partitions (the one it was getting is
 * dropped for it, as TensorFlowOnSpark skips the rest of a terminated feed);
 * the others go on. */
#ifndef TFOS_RUN_FEEDER_H
#define TFOS_RUN_FEEDER_H
#include <stddef.h>
#include <stdint.h>

typedef struct tfos__feeder_opts {
    const char *cluster_id;
    const char *secret;
    int nnodes;
    const int *executor_ids;
    char *const *inputs;
    int ninputs;
    int format;          /* TFOS_FMT_* */
    int csv_header;      /* 1, 0, -1 detect */
    int epochs;          /* >= 1 */
    uint32_t batch_rows; /* rows per record */
    uint64_t partition_rows;
    volatile int *stop;  /* set by the launcher to abandon the feed */
} tfos__feeder_opts;

typedef struct tfos__feeder_stats {
    uint64_t rows, bytes, partitions;
    uint64_t terminated; /* nodes whose program stopped its feed early (DataFeed.terminate) */
} tfos__feeder_stats;

/* Run the whole feed. 0 on success; otherwise an error with a one-line
 * reason naming the file and row, or the node that stopped reading. */
int tfos__feed_files(const tfos__feeder_opts *o, tfos__feeder_stats *st, char *err, size_t errlen);

#endif
