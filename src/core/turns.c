/* turns.c: fair turns for the partitions of a Spark feed (see turns.h). */
#include "core/turns.h"

#include "tfos/tfos.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stage {
    char name[TFOS_TURNS_STAGE_MAX + 1]; /* "": a free slot */
    int nparts, nfed, nnodes;
    int *nodes;     /* the job's fed nodes */
    int *begun;     /* per node (index in nodes): partitions asked for on it */
    unsigned long long *base; /* per node: its rows_out when the job began */
    int *owner;     /* per partition id: the index of its node, -1 none yet */
    int given;      /* partitions with an owner */
    uint64_t used;  /* when last asked (the table's counter) */
} stage;

struct tfos__turns {
    stage stages[TFOS_TURNS_STAGES];
    uint64_t clock;
};

tfos__turns *tfos__turns_new(void)
{
    return calloc(1, sizeof(tfos__turns));
}

static void stage_clear(stage *s)
{
    free(s->nodes);
    free(s->begun);
    free(s->base);
    free(s->owner);
    memset(s, 0, sizeof *s);
}

void tfos__turns_free(tfos__turns *t)
{
    if (!t)
        return;
    for (int i = 0; i < TFOS_TURNS_STAGES; i++)
        stage_clear(&t->stages[i]);
    free(t);
}

/* The job's slot: found, or a free one (else the one used longest ago)
 * set up for it. NULL: out of memory. */
static stage *stage_for(tfos__turns *t, const char *name, int nparts, int nfed, const int *nodes, int nnodes,
                        const tfos__turn_node *info)
{
    stage *pick = NULL;
    for (int i = 0; i < TFOS_TURNS_STAGES; i++) {
        stage *s = &t->stages[i];
        if (s->name[0] && !strcmp(s->name, name))
            return s;
        if (!pick || (pick->name[0] && (!s->name[0] || s->used < pick->used)))
            pick = s;
    }
    stage_clear(pick);
    pick->nodes = malloc(sizeof(int) * (size_t)nnodes);
    pick->begun = calloc((size_t)nnodes, sizeof(int));
    pick->base = calloc((size_t)nnodes, sizeof *pick->base);
    pick->owner = malloc(sizeof(int) * (size_t)nparts);
    if (!pick->nodes || !pick->begun || !pick->base || !pick->owner) {
        stage_clear(pick);
        return NULL;
    }
    memcpy(pick->nodes, nodes, sizeof(int) * (size_t)nnodes);
    for (int i = 0; info && i < nnodes; i++)
        pick->base[i] = info[i].rows_out;
    for (int i = 0; i < nparts; i++)
        pick->owner[i] = -1;
    snprintf(pick->name, sizeof pick->name, "%s", name);
    pick->nparts = nparts;
    pick->nfed = nfed;
    pick->nnodes = nnodes;
    return pick;
}

/* Node i of the job (info: what is heard of it now) has read a row of it. */
static int reads(const stage *s, const tfos__turn_node *info, int i)
{
    return info && info[i].rows_out > s->base[i];
}

/* ... and has stopped reading with rows unread: it may be waiting for the
 * node that asks (a collective), so that one must not wait for it. */
static int stalled(const stage *s, const tfos__turn_node *info, int i)
{
    return reads(s, info, i) && info[i].unread && info[i].idle_ms >= TFOS_TURNS_STALL_MS;
}

int tfos__turns_ask(tfos__turns *t, const char *stage_name, int nparts, int nfed, const int *nodes, int nnodes,
                    const tfos__turn_node *info, int partition, int node, tfos__turn *out)
{
    memset(out, 0, sizeof *out);
    out->go = 1;
    out->behind_node = -1;
    if (!t || !stage_name || !stage_name[0] || strlen(stage_name) > TFOS_TURNS_STAGE_MAX || !nodes || nnodes < 1 ||
        nparts < 1 || nfed < 0 || nfed > nparts || partition < 0 || partition >= nparts)
        return TFOS_EINVAL;
    if (nparts > TFOS_TURNS_MAX_PARTS || nnodes > TFOS_TURNS_MAX_NODES)
        return 0;
    stage *s = stage_for(t, stage_name, nparts, nfed, nodes, nnodes, info);
    if (!s)
        return TFOS_ENOMEM;
    s->used = ++t->clock;
    if (partition >= s->nparts || nnodes != s->nnodes) /* a later ask that disagrees with the first: not tracked */
        return 0;
    int me = -1;
    for (int i = 0; i < s->nnodes && me < 0; i++)
        if (s->nodes[i] == node)
            me = i;
    if (me < 0)
        return 0;
    int was = s->owner[partition];
    if (was != me) {
        if (was >= 0)
            s->begun[was]--;
        else
            s->given++;
        s->owner[partition] = me;
        s->begun[me]++;
    }
    int k = s->begun[me];
    out->begun = k;
    out->unbegun = s->nfed > s->given ? s->nfed - s->given : 0;
    if (k <= 1 || out->unbegun == 0 || (info && info[me].gone))
        return 0;
    for (int i = 0; i < s->nnodes; i++) {
        if (i == me || (info && info[i].gone))
            continue;
        int r = reads(s, info, i);
        int holds = r ? s->begun[i] < k - 1 && !stalled(s, info, i) : s->begun[i] < k;
        if (holds) {
            out->go = 0;
            out->behind_node = s->nodes[i];
            out->behind_begun = s->begun[i];
            out->behind_reads = r;
            return 0;
        }
    }
    return 0;
}
