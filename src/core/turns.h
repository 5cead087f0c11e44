/* turns.h: fair turns for the partitions of a Spark feed.
 *
 * Spark gives a feed job's tasks to whichever executor is free, and a feed
 * task lasts until its node has read the partition: when one node's
 * program starts late (TensorFlow's start, a model built first), the other
 * executor takes the rest of the job, and a program that counts on an even
 * share (the TensorFlowOnSpark examples compute their steps from rows /
 * workers) runs out of data while the others wait in a collective. A task
 * asks the coordinator for its turn before it feeds. A node's first
 * partition of the job always goes. After that a node waits, holding its
 * executor (so Spark hands the next partition to another executor):
 *   - while a node that has not read a row of the job yet has begun fewer
 *     partitions than it (that node is starting: it gets its share), or
 *   - while a node that reads has begun two fewer (at most one ahead: a
 *     synchronous program's node that runs out first must get its next
 *     partition while the others still read theirs, or they would wait for
 *     it in a collective and it for them), unless that node has stopped
 *     reading with rows unread for TFOS_TURNS_STALL_MS (it may be waiting
 *     for this one: partitions of unequal rows).
 * A node whose program reads no more (it ended, or called terminate()) is
 * never waited for: its executor's tasks may never ask again (a task that
 * finds the node ended does not feed), and a task of its own goes at once
 * (its feed says the partition is not wanted).
 * Once no partition of the job is left unasked for, every node goes. The
 * node with the fewest never waits, so turns never deadlock among
 * themselves; the task bounds its own wait.
 *
 * Pure bookkeeping, owned by the coordinator (one table per cluster). */
#ifndef TFOS_CORE_TURNS_H
#define TFOS_CORE_TURNS_H

#include <stddef.h>

#define TFOS_TURNS_MAX_PARTS (1 << 20) /* partition ids of one job: more, and every task goes at once */
#define TFOS_TURNS_MAX_NODES 4096      /* nodes fed by one job: the same */
#define TFOS_TURNS_STAGES 16           /* jobs remembered; the one used longest ago is forgotten */
#define TFOS_TURNS_STAGE_MAX 64        /* a job's name, bytes */
#define TFOS_TURNS_STALL_MS 2500       /* a node that read, has rows unread and read none this long: stalled
                                        * (its rows taken are heard once a second) */

/* What the coordinator last heard of a fed node's feed. */
typedef struct tfos__turn_node {
    unsigned long long rows_out; /* rows its program has taken, every job together */
    int unread;                  /* its feed holds rows not taken */
    long long idle_ms;           /* since rows_out last grew; -1: it never has */
    int gone;                    /* its program reads no more (it ended, terminated or closed its feed, or
                                  * its node left): never waited for, and a task of its own goes at once */
} tfos__turn_node;

typedef struct tfos__turns tfos__turns;

/* The answer to one task. */
typedef struct tfos__turn {
    int go;             /* 1: begin now; 0: ask again */
    int begun;          /* partitions of the job given to this node, this one included */
    int behind_node;    /* the node this one waits for (-1: none) */
    int behind_begun;   /* ... the partitions it has begun */
    int behind_reads;   /* ... whether it has read a row of the job */
    int unbegun;        /* partitions of the job that no task has asked for */
} tfos__turn;

/* NULL: out of memory. */
tfos__turns *tfos__turns_new(void);
void tfos__turns_free(tfos__turns *t);

/* Partition `partition` (0 <= partition < nparts) of job `stage` is to be
 * fed to `node`, one of `nodes` (the job's fed nodes; the first ask of a
 * job fixes them, with nparts and nfed: the partitions the job feeds).
 * `info`: what is heard of each of `nodes` now (NULL: nothing; no node
 * reads then); the first ask takes each node's rows_out as the job's
 * start. The partition is this node's from now on (a task run again
 * elsewhere moves it). 0 with *out filled, or TFOS_EINVAL (bad arguments:
 * out says go), TFOS_ENOMEM. A job too large to track (TFOS_TURNS_MAX_*)
 * or a node not among `nodes` always goes. */
int tfos__turns_ask(tfos__turns *t, const char *stage, int nparts, int nfed, const int *nodes, int nnodes,
                    const tfos__turn_node *info, int partition, int node, tfos__turn *out);

#endif
