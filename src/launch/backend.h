/* backend.h: how the launcher (launch.c) starts, stops and observes one
 * node, whatever runs it. A node is its agent process (`tfos node ...`);
 * the launcher builds that command and asks the attempt's coordinator what
 * the node does, the backend only puts the command somewhere and says when
 * it has ended.
 *
 * One backend per file, behind this table (nng's src/sp/transport.h):
 *   backend_local.c  a child process on this machine (tfos run, tfos serve)
 *   backend_yarn.c   a stand-in child that has YARN run the agent in a
 *                    container of its own (tfos yarn's ApplicationMaster)
 *   backend_slurm.c  an srun per node: a job step of the Slurm allocation
 *                    the launcher runs in (tfos run --backend slurm)
 * An elastic run (launch.c, "elastic size") needs nothing more of them: a
 * node that gets no capacity simply does not start (its agent never
 * registers), and a standby is one more node with a program of its own.
 *
 * Every op runs on the launcher's thread and loop. The backend's state is
 * opened once per attempt and closed when the attempt is over: node ids are
 * 0..n-1 within it, and each is started at most once. */
#ifndef TFOS_LAUNCH_BACKEND_H
#define TFOS_LAUNCH_BACKEND_H
#include "core/loop.h"

/* What observe says of a node. */
enum { TFOS_NODE_IDLE = 0, TFOS_NODE_RUNNING = 1, TFOS_NODE_ENDED = 2 };

/* One node to start. Everything is borrowed for the call only. */
typedef struct tfos__node_launch {
    int id;              /* 0..n-1: its executor id */
    const char *job;     /* its role ("worker", "ps", ...) and index */
    int index;
    char *const *argv;   /* the agent's command */
    char *const *envp;   /* its whole environment (the secret among it: never on argv) */
} tfos__node_launch;

/* Called on the loop, once per started node, when it has ended; status is
 * a waitpid status (the node's exit code, or the signal that ended it). */
typedef void (*tfos__node_ended_fn)(void *user, int id, int status);

typedef struct tfos__backend_ops {
    const char *name;       /* "local", "yarn" */
    /* What the agents register as their --host: "127.0.0.1" (they run on
     * this machine), or "auto" (elsewhere: the address their host reaches
     * the coordinator from, which must then listen beyond loopback). */
    const char *agent_host;
    /* The agents' console is not the user's: they forward their program's
     * output to the coordinator (--forward-logs), and the launcher keeps it
     * for the status page's /logs/stream. */
    int forward_logs;
    /* Make the state for n nodes on loop (borrowed; it outlives the state).
     * cfg: the backend's own options (tfos__local_cfg or NULL; tfos__yarn_cfg),
     * borrowed for the state's life. ended: see above. Does not block. 0,
     * TFOS_ENOMEM, TFOS_EINVAL (cfg missing what the backend needs). */
    int (*open)(void **out, tfos__loop *loop, const void *cfg, int n, tfos__node_ended_fn ended, void *user);
    /* Start node spec->id. Does not block beyond starting a process; a
     * command that cannot start (no such program) fails here, at once:
     * TFOS_ESYS with errno saying why, and the node stays IDLE. */
    int (*start)(void *b, const tfos__node_launch *spec);
    /* Ask node id to stop: force 0 asks (SIGTERM: it stops its program
     * within its grace), 1 ends it now (SIGKILL). Never blocks; the end is
     * reported through `ended`. A node not running: nothing. */
    void (*stop)(void *b, int id, int force);
    /* Node id now: TFOS_NODE_IDLE (not started), RUNNING, or ENDED with
     * *status (a waitpid status; status may be NULL). Does not block; it
     * may notice ends not reported yet, whose `ended` calls then come
     * before it returns. */
    int (*observe)(void *b, int id, int *status);
    /* End every node still running, reap them (blocks until they are
     * gone: they are killed, so briefly), free. NULL: nothing. No `ended`
     * call comes from it. */
    void (*close)(void *b);
} tfos__backend_ops;

/* Child processes on this machine: spawned with PR_SET_PDEATHSIG(SIGTERM)
 * (if the launcher dies, even by SIGKILL, every agent stops its program and
 * exits), watched with a pidfd (kernels without: a 100 ms reap timer). */
extern const tfos__backend_ops tfos__backend_local;

/* tfos__backend_local's cfg (NULL: all 0). new_pgroup: each node's process
 * leads a process group of its own, so a signal to the launcher's group
 * (YARN's GRACEFUL_SHUTDOWN to the ApplicationMaster's container) reaches
 * the launcher alone, which then drains its nodes; the parent-death signal
 * still ends them with the launcher. */
typedef struct tfos__local_cfg {
    int new_pgroup;
} tfos__local_cfg;

/* The YARN ApplicationMaster's container: each node's agent is started by a
 * local stand-in, `EXE yarn-container --am-socket S --resources R --role
 * JOB -- AGENT-ARGV...`, which asks the ApplicationMaster for a container
 * with the role's resources, has the agent run in it and exits with its
 * exit status (docs/YARN.md). The stand-ins are local children as above,
 * so stopping one stops its container. */
typedef struct tfos__yarn_cfg {
    const char *exe;        /* this tfos binary (the stand-in's) */
    const char *am_socket;  /* the ApplicationMaster's Unix socket */
    const char *resources;  /* "worker=MB:VCORES:GPUS,ps=...": each role's container */
} tfos__yarn_cfg;
extern const tfos__backend_ops tfos__backend_yarn;

/* Inside a Slurm allocation: each node's agent is a job step, `SRUN
 * --nodes=1 --ntasks=1 --exact ... -- AGENT-ARGV...` (docs/SLURM.md). The
 * sruns are local children as above: SIGTERM to one is forwarded to its
 * agent, SIGKILL ends its step (slurmstepd kills the step's tasks). */
typedef struct tfos__slurm_cfg {
    const char *srun;       /* srun's path ($TFOS_SRUN, else "srun" on PATH) */
} tfos__slurm_cfg;
extern const tfos__backend_ops tfos__backend_slurm;

#endif
