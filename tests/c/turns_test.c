/* turns_test.c: fair turns for a Spark feed's partitions (core/turns.h). */
#include "check.h"
#include "core/turns.h"
#include "tfos/tfos.h"

static const int two[] = {0, 1};

static int ask(tfos__turns *t, const char *stage, int nparts, int partition, int node, tfos__turn *out)
{
    CHECK_EQ(tfos__turns_ask(t, stage, nparts, nparts, two, 2, partition, node, out), 0);
    return out->go;
}

/* The case the issue met: two nodes, four partitions, chief:0 slow to read
 * its first. Without turns worker:1 took three. */
static void the_faster_node_waits_for_the_slower(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    CHECK(!ask(t, "s1", 4, 0, 0, &r)); /* node 0 first: 1 begun, node 1 none yet */
    CHECK_EQ(r.behind_node, 1);
    CHECK_EQ(r.behind_begun, 0);
    CHECK_EQ(r.unbegun, 3);
    CHECK(ask(t, "s1", 4, 1, 1, &r)); /* the one behind always goes */
    CHECK(ask(t, "s1", 4, 0, 0, &r)); /* asked again: level now */
    CHECK_EQ(r.begun, 1);
    CHECK(!ask(t, "s1", 4, 2, 1, &r)); /* node 1 read fast: its second waits ... */
    CHECK_EQ(r.begun, 2);
    CHECK_EQ(r.behind_node, 0);
    CHECK(!ask(t, "s1", 4, 2, 1, &r)); /* ... as often as it asks */
    CHECK(ask(t, "s1", 4, 3, 0, &r));  /* so Spark gives the last to node 0 */
    CHECK_EQ(r.unbegun, 0);
    CHECK(ask(t, "s1", 4, 2, 1, &r));  /* 2 : 2 */
    CHECK_EQ(r.begun, 2);
    tfos__turns_free(t);
}

/* Nothing left to begin: waiting cannot even out anything. */
static void the_last_partitions_go_at_once(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    CHECK(!ask(t, "odd", 3, 0, 0, &r));
    CHECK(ask(t, "odd", 3, 1, 1, &r));
    CHECK(ask(t, "odd", 3, 2, 1, &r)); /* one ahead, but none is left */
    CHECK_EQ(r.begun, 2);
    CHECK_EQ(r.unbegun, 0);
    /* todo < nparts (a round after a restart feeds only what was not
     * delivered): the partitions it skips are never waited for */
    CHECK_EQ(tfos__turns_ask(t, "again", 10, 2, two, 2, 7, 0, &r), 0);
    CHECK(!r.go);
    CHECK_EQ(tfos__turns_ask(t, "again", 10, 2, two, 2, 9, 0, &r), 0);
    CHECK(r.go);
    CHECK_EQ(r.unbegun, 0);
    tfos__turns_free(t);
}

/* Spark runs a task again on another executor: the partition moves. */
static void a_partition_run_again_elsewhere_moves(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    ask(t, "m", 6, 0, 0, &r);
    ask(t, "m", 6, 0, 1, &r); /* partition 0 is node 1's now */
    CHECK_EQ(r.begun, 1);
    CHECK(!ask(t, "m", 6, 1, 1, &r)); /* node 1: 2, node 0: none */
    CHECK_EQ(r.behind_node, 0);
    CHECK_EQ(r.behind_begun, 0);
    CHECK_EQ(r.unbegun, 4);
    tfos__turns_free(t);
}

/* A simulated feed job: `n` nodes, one task slot each, node i reads a
 * partition in speed[i] ticks; Spark hands the next partition to a free
 * slot; a task told to wait holds its slot and asks again next tick. The
 * most minus the fewest partitions a node got. */
static int spread(int use_turns, int n, const int *speed, int nparts, const char *stage, tfos__turns *t)
{
    int nodes[8], got[8] = {0}, task[8], busy[8] = {0}, waiting[8] = {0};
    for (int i = 0; i < n; i++)
        nodes[i] = i;
    int next = 0, done = 0;
    for (int tick = 0; done < nparts && tick < 100000; tick++) {
        for (int i = 0; i < n; i++) {
            if (busy[i] && --busy[i] == 0)
                done++;
            if (!busy[i] && !waiting[i] && next < nparts) {
                task[i] = next++;
                waiting[i] = 1;
            }
            if (waiting[i]) {
                tfos__turn r = {.go = 1};
                if (use_turns)
                    CHECK_EQ(tfos__turns_ask(t, stage, nparts, nparts, nodes, n, task[i], i, &r), 0);
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

static void shares_stay_even_whatever_the_speeds(void)
{
    tfos__turns *t = tfos__turns_new();
    static const int uneven[][4] = {{5, 1, 0, 0}, {1, 7, 2, 0}, {3, 1, 1, 9}};
    static const int sizes[] = {2, 3, 4};
    char stage[16];
    for (int c = 0; c < 3; c++)
        for (int nparts = 1; nparts <= 40; nparts++) {
            snprintf(stage, sizeof stage, "sim%d-%d", c, nparts);
            CHECK(spread(1, sizes[c], uneven[c], nparts, stage, t) <= 1);
        }
    /* the simulation itself is uneven without turns */
    CHECK(spread(0, 2, uneven[0], 20, "none", t) >= 5);
    tfos__turns_free(t);
}

static void bad_asks_and_what_is_not_tracked_go(void)
{
    tfos__turns *t = tfos__turns_new();
    tfos__turn r;
    CHECK_EQ(tfos__turns_ask(t, "", 4, 4, two, 2, 0, 0, &r), TFOS_EINVAL);
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 4, two, 2, 4, 0, &r), TFOS_EINVAL);
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 5, two, 2, 0, 0, &r), TFOS_EINVAL);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 4, two, 0, 0, 0, &r), TFOS_EINVAL);
    CHECK_EQ(tfos__turns_ask(t, "x", 4, 4, two, 2, 0, 7, &r), 0); /* not a fed node */
    CHECK(r.go);
    CHECK_EQ(tfos__turns_ask(t, "big", TFOS_TURNS_MAX_PARTS + 1, 1, two, 2, 0, 0, &r), 0);
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
        ask(t, stage, 4, 0, 0, &r);
        CHECK_EQ(r.begun, 1);
    }
    ask(t, "j1", 4, 1, 0, &r); /* still known: node 0's second */
    CHECK_EQ(r.begun, 2);
    ask(t, "j0", 4, 1, 0, &r); /* forgotten: begun anew */
    CHECK_EQ(r.begun, 1);
    tfos__turns_free(t);
}

int main(void)
{
    RUN(the_faster_node_waits_for_the_slower);
    RUN(the_last_partitions_go_at_once);
    RUN(a_partition_run_again_elsewhere_moves);
    RUN(shares_stay_even_whatever_the_speeds);
    RUN(bad_asks_and_what_is_not_tracked_go);
    RUN(old_jobs_are_forgotten);
    return 0;
}
