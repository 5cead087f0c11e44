/* spec.h: the cluster description handed to every user program.
 *
 * From the list of registered nodes (job, index, host, port) this builds the
 * environment a node's program runs with:
 *   TF_CONFIG     exactly as TensorFlow documents it;
 *   MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
 *                 as torchrun sets them (trainers = chief + workers, rank 0
 *                 is the chief, or worker 0 without a chief), with torchrun's
 *                 GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
 *                 ROLE_NAME and TORCHELASTIC_RESTART_COUNT/_MAX_RESTARTS/_RUN_ID;
 *   JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID
 *                 the arguments of jax.distributed.initialize;
 *   TFOS_*        tfos's context (job, index, executor id, coordinator, ...).
 * ps and evaluator nodes are not trainers: they get no RANK. */
#ifndef TFOS_CORE_SPEC_H
#define TFOS_CORE_SPEC_H
#include <stddef.h>
#include <sys/types.h>

#define TFOS_JOB_MAX 16
#define TFOS_HOST_MAX 256

typedef struct tfos__node_addr {
    char job[TFOS_JOB_MAX];
    int index;
    int executor_id;
    char host[TFOS_HOST_MAX];
    int port;
} tfos__node_addr;

/* Is `job` one of chief, worker, ps, evaluator? */
int tfos__job_valid(const char *job);
/* Trainers (chief, worker) take part in all-reduce and get a torch rank. */
int tfos__job_is_trainer(const char *job);

/* TF_CONFIG JSON for node `self` of nodes[0..n-1]. Cluster lists in the order
 * chief, worker, ps, evaluator, each sorted by task index. The caller frees
 * the returned string. NULL on out of memory. */
char *tfos__tf_config(const tfos__node_addr *nodes, int n, int self);
/* The "cluster" object alone (TFoS's ctx.cluster_spec). Caller frees. */
char *tfos__cluster_json(const tfos__node_addr *nodes, int n);

/* What a node needs of the cluster: the whole list (TF_CONFIG names every
 * address, so TensorFlow nodes need it: O(N) bytes per node, O(N^2) for the
 * cluster) or, for torch and JAX, which rendezvous at rank 0's address, only
 * its rank and the counts (O(1) per node). The coordinator decides which by
 * the cluster's framework (tfos_coord_opts.spec_form) and computes the
 * ranks for the compact form; the agent builds the same variables either way. */
typedef struct tfos__spec_ranks {
    int nodes;        /* nodes in the cluster */
    int world;        /* trainers (chief + workers) */
    int rank;         /* this node's torch rank; -1: not a trainer */
    int local_rank;   /* among the trainers on this node's host */
    int local_world;
    int master;       /* index in the node list given with it of rank 0's node; -1: no trainer */
} tfos__spec_ranks;

/* The ranks of every node of nodes[0..n-1] (ranks[n]) in O(n log n):
 * master is an index in `nodes`. 0 or TFOS_ENOMEM. */
int tfos__spec_ranks_all(const tfos__node_addr *nodes, int n, tfos__spec_ranks *ranks);

/* Context the agent adds to the program's environment. */
typedef struct tfos__ctx_env {
    const char *coord_addr;
    int attempt;
    const char *log_dir;   /* may be NULL */
    const char *secret;    /* passed on so the program's own tfos calls authenticate */
    const char *cluster_id; /* may be NULL */
    const char *checkpoint_dir; /* may be NULL */
    int feed_in_fd;        /* the node's feed rings inherited by the program; -1: none */
    int port_fd;           /* the node's reserved port, handed to the program (TFOS_PORT_FD); -1: none.
                            * A zero-initialised ctx has 0 here: only > 0 counts */
    int feed_out_fd;
    const char *legacy_keras; /* TF_USE_LEGACY_KERAS for the program ("1", "0"); NULL: the inherited one */
    int max_restarts;      /* the run's restart budget (TORCHELASTIC_MAX_RESTARTS) */
} tfos__ctx_env;

/* Build the program's environment: a copy of `base` (NULL-terminated, e.g.
 * environ) minus any variables tfos sets, plus the cluster variables for node
 * `self`. Returns a NULL-terminated array of malloc'd strings (free with
 * tfos__env_free) or NULL on out of memory. */
char **tfos__spec_env(char *const *base, const tfos__node_addr *nodes, int n, int self, const tfos__ctx_env *ctx);
/* The same from the compact form: `nodes` lists this node and rank 0's
 * only (n is 1 or 2), `ranks` the rest. No TF_CONFIG, TFOS_CLUSTER_SPEC,
 * TFOS_PS_HOSTS or TFOS_WORKER_HOSTS: they would list every node. */
char **tfos__spec_env_ranks(char *const *base, const tfos__node_addr *nodes, int n, int self,
                            const tfos__spec_ranks *ranks, const tfos__ctx_env *ctx);
void tfos__env_free(char **env);

/* The Python interpreter of a program: `python` when given, else argv[0]
 * when it is a python* executable, else $TFOS_PYTHON, else python3. The
 * built-in ps server, the Arrow feeder and the Keras probe use it. */
const char *tfos__program_python(const char *python, char *const *argv);

/* Which Keras `tf.keras` is in the program (--keras, TFCluster.run(keras=)):
 * the one decision, made by the agent before the program starts.
 *   "env"    leave TF_USE_LEGACY_KERAS as inherited (TensorFlow's default:
 *            Keras 3); what `tfos run` does by default
 *   "auto"   tf-keras (Keras 2) where the program's Python has the tf_keras
 *            package and TF_USE_LEGACY_KERAS is not set; what TFCluster does
 *   "legacy" tf-keras; an error when tf_keras is not installed
 *   "3"      Keras 3 (TF_USE_LEGACY_KERAS=0)
 * Returns 0 when `mode` is one of these (NULL counts as "env"), else -1. */
int tfos__keras_mode_valid(const char *mode);
/* The Python that "auto" and "legacy" start to look for the tf_keras
 * package, started ahead (by the agent, before it registers) so that it runs
 * while the cluster forms rather than between the cluster spec and the
 * program's start. None is started where `env` has TFOS_HAS_TF_KERAS=1 or 0:
 * the answer from a launcher that runs the program's own interpreter
 * (TFCluster's node tasks, where a probe took 0.08-0.21 s of a loaded
 * machine after the cluster formed). */
typedef struct tfos__keras_probe {
    pid_t pid;  /* the probe; 0: none started */
    int done;   /* it was reaped: status holds its wait status (-1: timed out) */
    int status;
} tfos__keras_probe;
/* Start the probe `mode` needs for `python` with `env` (none for "env", "3",
 * or "auto" with TF_USE_LEGACY_KERAS set). A probe that cannot start is
 * left to tfos__keras_resolve. */
void tfos__keras_probe_start(tfos__keras_probe *p, const char *mode, const char *python, char *const *env);
/* For a caller that reaps every child (waitpid(-1, ...)): records `status`
 * when `pid` is the probe's. Returns 1 then, else 0. */
int tfos__keras_probe_reaped(tfos__keras_probe *p, pid_t pid, int status);
/* Resolve `mode` for a program run by `python` with the environment `env`:
 * *value gets "1", "0" or NULL (leave the inherited value). `probe`: one
 * started with tfos__keras_probe_start (its answer is waited for, 30 s at
 * most), or NULL to probe now. Returns 0, or TFOS_EINVAL with a one-line
 * reason in err ("--keras legacy: ..."). */
int tfos__keras_resolve(const char *mode, const char *python, char *const *env, tfos__keras_probe *probe,
                        const char **value, char *err, size_t errlen);

/* Whether `python` (with the environment `env`, NULL: ours) finds the
 * top-level package `module`, asked without importing it (importlib's
 * find_spec: one interpreter start, tens of ms, where importing TensorFlow
 * takes seconds): 1 yes, 0 no, -1 could not tell (the interpreter did not
 * start or answer within timeout_ms). Launchers check their own programs'
 * interpreters with it before a cluster forms (the built-in ps server's
 * tensorflow, the model servers' tfos). */
int tfos__python_finds(const char *python, const char *module, char *const *env, int timeout_ms);

#endif
