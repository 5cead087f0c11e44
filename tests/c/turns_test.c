/* turns_test.c: fair turns for a Spark feed's partitions (core/turns.h). */
#include "check.h"
#include "core/turns.h"
#include "tfos/tfos.h"

static const int two[] = {0, 1};

/* What the coordinator hears: node i has read `read` rows, holds rows
 * unread or not, and has read none for idle_ms. */
static tfos__turn_node heard(unsigned long long read, int unread, long long idle_ms)
{
    tfos__turn_node n = {.rows_out = read, .unread = unread, .idle_ms = idle_ms};
    return n;
}

static int ask(tfos__turns *t, const char *stage, int nparts, const tfos__turn_node *info, int partition, int node,
               tfos__turn *out)
{
    CHECK_EQ(tfos__turns_ask(t, stage, nparts, nparts, two, 2, info, partition, node, out), 0);
    return out->go;
}

/* A new table where nodes 0 and 1, having read nothing, begin partitions
 * 0 and 1 of job `stage` (a first partition always goes). */
static tfos__turns *both_begin(const char *stage, int nparts, tfos__turn_node info[2])
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    info[0] = info[1] = heard(0, 0, -1);
    CHECK(ask(t, stage, nparts, info, 0, 0, &r));
    CHECK(ask(t, stage, nparts, info, 1, 1, &r));
    return t;
}

/* The case the issue met: chief:0 (node 0) slow to start. Without turns
 * worker:1 took three of four partitions. */
static void a_node_that_starts_late_gets_its_share(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    tfos__turn_node info[2] = {heard(0, 0, -1), heard(0, 0, -1)};
    CHECK(ask(t, "s1", 4, info, 0, 0, &r)); /* a first partition always goes */
    CHECK(ask(t, "s1", 4, info, 1, 1, &r));
    info[1] = heard(30, 0, 0);               /* node 1 read its first; node 0 has read nothing */
    CHECK(!ask(t, "s1", 4, info, 2, 1, &r)); /* so node 1's second waits ... */
    CHECK_EQ(r.begun, 2);
    CHECK_EQ(r.behind_node, 0);
    CHECK_EQ(r.behind_begun, 1);
    CHECK_EQ(r.behind_reads, 0);
    CHECK_EQ(r.unbegun, 1);
    CHECK(!ask(t, "s1", 4, info, 2, 1, &r)); /* ... as often as it asks */
    CHECK(ask(t, "s1", 4, info, 3, 0, &r));  /* and Spark gives the last to node 0 */
    CHECK_EQ(r.unbegun, 0);
    CHECK(ask(t, "s1", 4, info, 2, 1, &r));  /* 2 : 2 */
    CHECK_EQ(r.begun, 2);
    /* the same, node 0 starting to read before the last partition is asked for */
    info[0] = heard(0, 0, -1);
    info[1] = heard(30, 0, 0);
    CHECK(ask(t, "s2", 8, info, 0, 0, &r));
    CHECK(ask(t, "s2", 8, info, 1, 1, &r));
    CHECK(!ask(t, "s2", 8, info, 2, 1, &r));
    info[0] = heard(5, 1, 0); /* node 0 reads now: node 1 may be one ahead of it */
    CHECK(ask(t, "s2", 8, info, 2, 1, &r));
    CHECK(!ask(t, "s2", 8, info, 3, 1, &r)); /* not two */
    CHECK_EQ(r.behind_reads, 1);
    CHECK(ask(t, "s2", 8, info, 4, 0, &r));
    CHECK(ask(t, "s2", 8, info, 3, 1, &r));
    tfos__turns_free(t);
}

/* A synchronous program's node that runs out first gets its next
 * partition while the other still reads its own (else each would wait for
 * the other: one for its turn, one in a collective); one that reads on
 * partitions twice as large may leave it two behind: once it has stopped
 * reading with rows unread, it may be waiting for this node, which goes. */
static void readers_in_step_never_wait_for_each_other(void)
{
    tfos__turn_node info[2];
    tfos__turn r;
    tfos__turns *t = both_begin("sync", 10, info);
    info[0] = heard(100, 0, 0); /* node 0 read its first whole, node 1 half of its own */
    info[1] = heard(50, 1, 0);
    CHECK(ask(t, "sync", 10, info, 2, 0, &r)); /* one ahead: goes */
    info[0] = heard(200, 0, 0);
    CHECK(!ask(t, "sync", 10, info, 3, 0, &r)); /* two ahead of a node that reads: waits */
    info[1] = heard(150, 1, 1000);
    CHECK(!ask(t, "sync", 10, info, 3, 0, &r)); /* a second without a row read: not yet stalled */
    info[1] = heard(150, 1, TFOS_TURNS_STALL_MS);
    CHECK(ask(t, "sync", 10, info, 3, 0, &r)); /* stalled with rows unread: goes */
    info[1] = heard(150, 0, TFOS_TURNS_STALL_MS * 4);
    CHECK(!ask(t, "sync", 10, info, 4, 0, &r)); /* nothing unread: it finished and will ask */
    tfos__turns_free(t);
}

/* Nothing left to ask for: waiting cannot even out anything. */
static void the_last_partitions_go_at_once(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    CHECK(ask(t, "odd", 3, NULL, 0, 0, &r));
    CHECK(ask(t, "odd", 3, NULL, 1, 1, &r));
    CHECK(ask(t, "odd", 3, NULL, 2, 1, &r)); /* node 0 has read nothing, but none is left */
    CHECK_EQ(r.begun, 2);
    CHECK_EQ(r.unbegun, 0);
    /* nfed < nparts (a round after a restart feeds only what was not
     * delivered): the partitions it skips are never waited for */
    CHECK_EQ(tfos__turns_ask(t, "again", 10, 3, two, 2, NULL, 7, 0, &r), 0);
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "again", 10, 3, two, 2, NULL, 8, 0, &r), 0);
    CHECK(!r.go);
    CHECK_EQ(tfos__turns_ask(t, "again", 10, 3, two, 2, NULL, 9, 0, &r), 0);
    CHECK(r.go);
    CHECK_EQ(r.unbegun, 0);
    tfos__turns_free(t);
}

/* Node 1's program called terminate() and returned, so its executor's
 * tasks find it ended and never ask again; node 0's task waited for it
 * until feed_timeout (600 s). A node whose program reads no more is not
 * waited for, and a task of a node that reads no more goes. */
static void a_node_that_reads_no_more_is_not_waited_for(void)
{
    tfos__turn_node info[2];
    tfos__turn r;
    tfos__turns *t = both_begin("end", 20, info);
    info[0] = heard(100, 0, 0);
    info[1] = heard(100, 0, 0);
    CHECK(ask(t, "end", 20, info, 2, 0, &r));
    CHECK(!ask(t, "end", 20, info, 3, 0, &r)); /* two ahead of a node that reads: waits */
    CHECK_EQ(r.behind_node, 1);
    info[1].gone = 1;                          /* its program ended */
    CHECK(ask(t, "end", 20, info, 3, 0, &r));
    CHECK(ask(t, "end", 20, info, 4, 0, &r));
    CHECK_EQ(r.begun, 4);
    /* node 1 reads again, and gets ahead: two ahead of node 0 it waits ... */
    info[1].gone = 0;
    for (int part = 5; part <= 9; part++)
        CHECK(ask(t, "end", 20, info, part, 1, &r) || part == 9);
    CHECK(!r.go);
    CHECK_EQ(r.begun, 6);
    info[1].gone = 1; /* ... unless its own program reads no more: then it goes (its feed says not wanted) */
    CHECK(ask(t, "end", 20, info, 9, 1, &r));
    CHECK_EQ(r.begun, 6);
    tfos__turns_free(t);
}

/* Spark runs a task again on another executor: the partition moves. */
static void a_partition_run_again_elsewhere_moves(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    ask(t, "m", 6, NULL, 0, 0, &r);
    ask(t, "m", 6, NULL, 0, 1, &r); /* partition 0 is node 1's now */
    CHECK_EQ(r.begun, 1);
    CHECK(!ask(t, "m", 6, NULL, 1, 1, &r)); /* node 1: 2, node 0: none */
    CHECK_EQ(r.behind_node, 0);
    CHECK_EQ(r.behind_begun, 0);
    CHECK_EQ(r.unbegun, 4);
    tfos__turns_free(t);
}

/* A simulated feed job: `n` nodes, one task slot each; node i reads
 * nothing for its first start[i] ticks, then a partition in speed[i]
 * ticks; Spark hands the next partition to a free slot; a task told to
 * wait holds its slot and asks again next tick. The most minus the fewest
 * partitions a node got. */
static int spread(int use_turns, int n, const int *start, const int *speed, int nparts, const char *stage,
                  tfos__turns *t)
{
    int nodes[8], got[8] = {0}, task[8], busy[8] = {0}, waiting[8] = {0};
    tfos__turn_node info[8];
    for (int i = 0; i < n; i++) {
        nodes[i] = i;
        info[i] = heard(0, 0, -1);
    }
    int next = 0, done = 0;
    for (int tick = 0; done < nparts && tick < 100000; tick++) {
        for (int i = 0; i < n; i++) {
            if (busy[i] && tick >= start[i]) {
                info[i].rows_out++; /* it reads */
                info[i].idle_ms = 0;
                if (--busy[i] == 0)
                    done++;
            }
            info[i].unread = busy[i] > 0;
            if (!busy[i] && !waiting[i] && next < nparts) {
                task[i] = next++;
                waiting[i] = 1;
            }
            if (waiting[i]) {
                tfos__turn r = {.go = 1};
                if (use_turns)
                    CHECK_EQ(tfos__turns_ask(t, stage, nparts, nparts, nodes, n, info, task[i], i, &r), 0);
                if (r.go) {
                    waiting[i] = 0;
                    busy[i] = speed[i];
                    got[i]++;
                }
            }
        }
    }
    CHECK_EQ(done, nparts);
    int lo = got[0], hi = got[0];
    for (int i = 1; i < n; i++) {
        lo = got[i] < lo ? got[i] : lo;
        hi = got[i] > hi ? got[i] : hi;
    }
    return hi - lo;
}

static void shares_stay_even_when_a_node_starts_late(void)
{
    tfos__turns *t = tfos__turns_new();
    static const int late[][4] = {{40, 0, 0, 0}, {0, 25, 0, 0}, {0, 0, 10, 60}};
    static const int speed[][4] = {{2, 2, 0, 0}, {3, 3, 3, 0}, {2, 2, 2, 2}};
    static const int sizes[] = {2, 3, 4};
    char stage[16];
    int worst = 0;
    for (int c = 0; c < 3; c++)
        for (int nparts = 1; nparts <= 40; nparts++) {
            snprintf(stage, sizeof stage, "sim%d-%d", c, nparts);
            int sp = spread(1, sizes[c], late[c], speed[c], nparts, stage, t);
            worst = sp > worst ? sp : worst;
        }
    CHECK(worst <= 2);
    /* without turns the simulation gives the late node almost nothing */
    CHECK(spread(0, 2, late[0], speed[0], 20, "none", t) >= 10);
    tfos__turns_free(t);
}

static void bad_asks_and_what_is_not_tracked_go(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    CHECK_EQ(tfos__turns_ask(t, "", 4, 4, two, 2, NULL, 0, 0, &r), TFOS_EINVAL);
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 4, two, 2, NULL, 4, 0, &r), TFOS_EINVAL);
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 5, two, 2, NULL, 0, 0, &r), TFOS_EINVAL);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 4, two, 0, NULL, 0, 0, &r), TFOS_EINVAL);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 4, two, 2, NULL, 0, 7, &r), 0); /* not a fed node */
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "big", TFOS_TURNS_MAX_PARTS + 1, 1, two, 2, NULL, 0, 0, &r), 0);
    CHECK(r.go);
    tfos__turns_free(t);
}

/* A table of TFOS_TURNS_STAGES jobs: a new one takes the place of the job
 * asked about longest ago. */
static void old_jobs_are_forgotten(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    char stage[16];
    for (int i = 0; i <= TFOS_TURNS_STAGES; i++) {
        snprintf(stage, sizeof stage, "j%d", i);
        ask(t, stage, 4, NULL, 0, 0, &r);
        CHECK_EQ(r.begun, 1);
    }
    ask(t, "j1", 4, NULL, 1, 0, &r); /* still known: node 0's second */
    CHECK_EQ(r.begun, 2);
    ask(t, "j0", 4, NULL, 1, 0, &r); /* forgotten: begun anew */
    CHECK_EQ(r.begun, 1);
    tfos__turns_free(t);
}

int main(void)
{
    RUN(a_node_that_starts_late_gets_its_share);
    RUN(readers_in_step_never_wait_for_each_other);
    RUN(a_node_that_reads_no_more_is_not_waited_for);
    RUN(the_last_partitions_go_at_once);
    RUN(a_partition_run_again_elsewhere_moves);
    RUN(shares_stay_even_when_a_node_starts_late);
    RUN(bad_asks_and_what_is_not_tracked_go);
    RUN(old_jobs_are_forgotten);
    return 0;
}
