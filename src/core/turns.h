/* turns.h: fair turns for the partitions of a Spark feed.
 *
 * Spark gives a feed job's tasks to whichever executor is free, and a feed
 * task lasts until its node has read the partition: a node that reads
 * faster (or started first) takes more partitions, and a program that
 * counts on an even share (the TensorFlowOnSpark examples compute their
 * steps from rows / workers) runs out of data while the others wait in a
 * collective. A task asks the coordinator for its turn before it feeds;
 * the node that has begun the fewest partitions of the job always goes,
 * one ahead waits until the others catch up (its executor stays busy, so
 * Spark hands the next partition to another), and once no partition of
 * the job is left unbegun every node goes. The node with the fewest never
 * waits, so turns never deadlock; the task bounds its own wait.
 *
 * Pure bookkeeping, owned by the coordinator (one table per cluster). */
#ifndef TFOS_CORE_TURNS_H
#define TFOS_CORE_TURNS_H

#include <stddef.h>

#define TFOS_TURNS_MAX_PARTS (1 << 20) /* partition ids of one job: more, and every task goes at once */
#define TFOS_TURNS_MAX_NODES 4096      /* nodes fed by one job: the same */
#define TFOS_TURNS_STAGES 16           /* jobs remembered; the one used longest ago is forgotten */
#define TFOS_TURNS_STAGE_MAX 64        /* a job's name, bytes */

typedef struct tfos__turns tfos__turns;

/* The answer to one task. */
typedef struct tfos__turn {
    int go;             /* 1: begin now; 0: ask again */
    int begun;          /* partitions of the job given to this node, this one included */
    int behind_node;    /* a node that has begun fewer (-1: none) */
    int behind_begun;   /* ... how many */
    int unbegun;        /* partitions of the job that no node has begun */
} tfos__turn;

/* NULL: out of memory. */
tfos__turns *tfos__turns_new(void);
void tfos__turns_free(tfos__turns *t);

/* Partition `partition` (0 <= partition < nparts) of job `stage` is to be
 * fed to `node`, one of `nodes` (the job's fed nodes; the first ask of a
 * job fixes them, with nparts and todo: the partitions the job feeds). The
 * partition is this node's from now on (a task run again elsewhere moves
 * it). 0 with *out filled, or TFOS_EINVAL (bad arguments: out says go),
 * TFOS_ENOMEM. A job too large to track (TFOS_TURNS_MAX_*) or a node not
 * among `nodes` always goes. */
int tfos__turns_ask(tfos__turns *t, const char *stage, int nparts, int todo, const int *nodes, int nnodes,
                    int partition, int node, tfos__turn *out);

#endif
