/* backend_slurm.c: nodes as Slurm job steps, from inside an allocation
 * (backend.h; docs/SLURM.md).
 *
 * `tfos run --backend slurm` runs where sbatch's batch script (or salloc's
 * shell) runs: the launcher and its coordinator stay on the batch host, and
 * each node's agent is one job step of the allocation,
 *   srun --nodes=1 --ntasks=1 --exact --kill-on-bad-exit=1 --job-name=tfos:JOB:I -- AGENT-ARGV...
 * started as a local child, so every op but start is the local backend's.
 * The step's srun is the node's stand-in as tfos yarn-container is YARN's:
 *   - its exit is the node's (srun exits with its task's status; a task
 *     killed, or a node lost, ends the step and so the node, and the
 *     restart policy applies as for any lost node);
 *   - SIGTERM to srun is forwarded to the agent (a stop with grace);
 *   - SIGKILL to srun ends the step: slurmstepd kills the step's tasks when
 *     their srun is gone (seen with Slurm 22.05: the task is gone and the
 *     step off squeue within a second or two), so a force stop or close
 *     leaves nothing behind; Slurm's proctrack plugin, not tfos, does that
 *     part, and the agent's own PR_SET_PDEATHSIG covers its program.
 * A restart is a new attempt and so new steps in the same allocation: with
 * --exact a step takes only its own CPUs, so the steps of one attempt fit
 * --ntasks-per-node per node, and srun waits while the old ones are still
 * being cleaned up.
 *
 * The step inherits the launcher's environment as srun passes it
 * (--export=ALL, Slurm's default), the cluster's secret with it: Slurm's
 * step launch carries it to slurmd, as YARN's container launch does
 * (docs/SLURM.md says so). GPUs are Slurm's: a step gets its GRES by
 * Slurm's rules (sbatch --gpus-per-task sets SLURM_GPUS_PER_TASK, which
 * srun reads), and CUDA_VISIBLE_DEVICES is what slurmstepd sets in the
 * step; the agent passes it on to the program untouched.
 *
 * The agents run on other hosts: they register with --host auto, and the
 * coordinator listens on the batch host's address (tfos__launch_on_slurm).
 * Their output comes back through srun's own I/O forwarding onto the
 * launcher's stdout and stderr, so they do not forward it again. */
#include "launch/backend.h"
#include "launch/launch.h"

#include "tfos/tfos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slurm {
    void *local;                 /* tfos__backend_local's state: the sruns */
    const tfos__slurm_cfg *cfg;
} slurm;

static int slurm_open(void **out, tfos__loop *loop, const void *cfg, int n, tfos__node_ended_fn ended, void *user)
{
    const tfos__slurm_cfg *c = cfg;
    if (!c || !c->srun)
        return TFOS_EINVAL;
    slurm *s = calloc(1, sizeof *s);
    if (!s)
        return TFOS_ENOMEM;
    int rc = tfos__backend_local.open(&s->local, loop, NULL, n, ended, user);
    if (rc) {
        free(s);
        return rc;
    }
    s->cfg = c;
    *out = s;
    return 0;
}

static int slurm_start(void *state, const tfos__node_launch *spec)
{
    slurm *s = state;
    size_t argc = 0;
    while (spec->argv[argc])
        argc++;
    char **argv = calloc(argc + 12, sizeof *argv);
    if (!argv)
        return TFOS_ENOMEM;
    /* the step's name says which node it is in squeue --steps and sacct */
    char name[96];
    snprintf(name, sizeof name, "--job-name=tfos:%s:%d", spec->job, spec->index);
    size_t k = 0;
    argv[k++] = (char *)s->cfg->srun;
    argv[k++] = "--nodes=1";
    argv[k++] = "--ntasks=1";
    argv[k++] = "--exact";          /* only this step's CPUs: the others' steps run beside it */
    argv[k++] = "--kill-on-bad-exit=1";
    argv[k++] = "--quiet";          /* srun's own notes ("step creation temporarily disabled") */
    argv[k++] = name;
    argv[k++] = "--";
    memcpy(argv + k, spec->argv, argc * sizeof *argv);
    tfos__node_launch step = *spec;
    step.argv = argv;
    int rc = tfos__backend_local.start(s->local, &step);
    free(argv);
    return rc;
}

static void slurm_stop(void *state, int id, int force)
{
    tfos__backend_local.stop(((slurm *)state)->local, id, force);
}

static int slurm_observe(void *state, int id, int *status)
{
    return tfos__backend_local.observe(((slurm *)state)->local, id, status);
}

static void slurm_close(void *state)
{
    slurm *s = state;
    if (!s)
        return;
    tfos__backend_local.close(s->local);
    free(s);
}

const tfos__backend_ops tfos__backend_slurm = {
    .name = "slurm",
    .agent_host = "auto",
    .forward_logs = 0,
    .open = slurm_open,
    .start = slurm_start,
    .stop = slurm_stop,
    .observe = slurm_observe,
    .close = slurm_close,
};

void tfos__launch_on_slurm(tfos_run_opts *o, tfos__launch_opts *lo, tfos__slurm_cfg *cfg, const char *bind)
{
    const char *srun = getenv("TFOS_SRUN");
    cfg->srun = srun && *srun ? srun : "srun";
    lo->backend = &tfos__backend_slurm;
    lo->backend_cfg = cfg;
    lo->bind_host = bind;
    if (!o->status_host)
        o->status_host = bind;
}
