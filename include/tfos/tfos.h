/*
 * tfos.h: the public C API of libtfos.
 *
 * libtfos is the native runtime of tfos: a coordinator that forms training
 * clusters, a node agent that reserves ports and supervises user programs, the
 * wire protocol between them, and the launcher behind `tfos run`. Everything
 * here is C11 on POSIX/Linux; nothing here includes Python.
 *
 * Conventions: functions return 0 on success or a negative TFOS_E* code;
 * objects are opaque and come in _open/_close pairs; the library never prints,
 * it hands messages to the logger set with tfos_set_logger().
 */
#ifndef TFOS_TFOS_H
#define TFOS_TFOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tfos/defaults.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFOS_VERSION TFOS_PROJECT_VERSION /* CMakeLists.txt project(VERSION): the one source */
/* Version of the wire protocol every tfos link speaks (src/core/wire.h): 4
 * since PROGRESS (type 22) took over DRAIN's probe=1 and feed turns send it
 * too (an agent of 3 would take it for a broken peer; 3: DRAIN took type 20
 * and data frames moved to 32). */
#define TFOS_PROTOCOL_VERSION 4

/* ---- errors ------------------------------------------------------------ */
enum {
    TFOS_OK = 0,
    TFOS_EINVAL = -1,    /* bad argument or option */
    TFOS_ENOMEM = -2,    /* out of memory */
    TFOS_ESYS = -3,      /* a system call failed; errno holds why */
    TFOS_EPROTO = -4,    /* malformed or unexpected frame from a peer */
    TFOS_ETOOBIG = -5,   /* frame or record over the size limit */
    TFOS_EAUTH = -6,     /* peer does not know the cluster secret */
    TFOS_ETIMEDOUT = -7, /* a bounded wait ran out */
    TFOS_ECLOSED = -8,   /* the peer went away */
    TFOS_EAGAIN = -9,    /* nothing ready yet, try again */
    TFOS_EFAILED = -10,  /* a node of the cluster failed */
    TFOS_ESTOPPED = -11, /* stopped by a signal or a shutdown request */
    TFOS_EFULL = -12,    /* no room (ring full, too many nodes) */
    TFOS_EEND = -13,     /* end of feed reached */
};

/* Short English text for a TFOS_E* code (static storage, never NULL). */
const char *tfos_strerror(int err);

/* The error convention of libtfos. Every function that can fail returns an
 * int: 0 on success or a negative TFOS_E* code (the kind of failure, what
 * callers decide on). Where a function failed because of a system call, errno
 * still holds the OS's reason. Functions that know more than the code says
 * (which node, file, line or peer) also leave a one-line message for the
 * calling thread, readable until that thread's next failing call:
 * tfos_last_error() returns it, or tfos_strerror() of the last code when
 * there is no message. Messages are for people; code never parses them. */
const char *tfos_last_error(void);

/* ---- logging ----------------------------------------------------------- */
enum { TFOS_LOG_DEBUG = 0, TFOS_LOG_INFO = 1, TFOS_LOG_WARN = 2, TFOS_LOG_ERROR = 3 };

/* The library's log sink. `msg` is one line without a trailing newline and is
 * only valid during the call. Called from whichever thread logs, possibly
 * from several at once, with no lock of the logger held (a sink may block or
 * log again); the thread may hold other locks of the library, so a sink must
 * not wait for anything that waits on the library (the Python extension's
 * sink queues lines from threads without the GIL, src/python/logsink.c). */
typedef void (*tfos_log_fn)(int level, const char *msg, void *user);

/* Set the process-wide logger (NULL: the default, which writes
 * "tfos: <msg>\n" to stderr for level >= the threshold). Inside Python the
 * extension sets one that hands lines to the `logging` logger "tfos". */
void tfos_set_logger(tfos_log_fn fn, void *user);
/* Messages below `level` are dropped before formatting. Default INFO;
 * the environment variable TFOS_LOG_LEVEL=debug|info|warn|error overrides. */
void tfos_set_log_level(int level);

/* ---- cluster layout ---------------------------------------------------- */

/* How many nodes of each job a cluster has. Nodes are identified by their
 * executor id 0..total-1 and get roles in this order: ps 0..num_ps-1, then
 * the chief, then the evaluator, then workers (TensorFlowOnSpark's order). */
typedef struct tfos_layout {
    int num_ps;
    int num_workers; /* workers besides the chief */
    bool chief;      /* one "chief" node in addition to the workers */
    bool evaluator;  /* one "evaluator" node */
} tfos_layout;

/* Total nodes of a layout. */
int tfos_layout_total(const tfos_layout *l);
/* Role of executor `id`: writes the job name ("ps", "chief", "evaluator",
 * "worker") and its task index. Returns TFOS_EINVAL when id is out of range. */
int tfos_layout_role(const tfos_layout *l, int id, const char **job, int *index);

/* Executor ids of the nodes that read a feed (chief and workers), in id
 * order, into ids[0..max); returns how many there are. */
int tfos_layout_feed_ids(const tfos_layout *l, int *ids, int max);

/* ---- failures and the restart policy ------------------------------------ */

/* Why a cluster attempt failed: the kind, not the text. */
enum {
    TFOS_CAUSE_NONE = 0,
    TFOS_CAUSE_EXIT = 1,          /* a program exited with a non-zero code */
    TFOS_CAUSE_SIGNAL = 2,        /* a program was killed by a signal */
    TFOS_CAUSE_HEARTBEAT = 3,     /* an agent went silent (hung, or its host is unreachable) */
    TFOS_CAUSE_AGENT_LOST = 4,    /* an agent's connection dropped (it died) */
    TFOS_CAUSE_EXECUTOR_LOST = 5, /* the process owning an agent (a Spark executor) is gone */
    TFOS_CAUSE_START = 6,         /* the program cannot start: exec failed, it exited 126 or 127 (the
                                   * shells' "cannot execute" and "not found"), its script is not there,
                                   * or its interpreter lacks what tfos's own program needs */
    TFOS_CAUSE_PS_EXITED = 7,     /* a ps node ended while the trainers ran */
    TFOS_CAUSE_RESERVATION = 8,   /* not every node registered in time */
    TFOS_CAUSE_FEED = 9,          /* the input feed failed (bad data, a feeder error) */
    TFOS_CAUSE_STOPPED = 10,      /* stopped on purpose (a signal, shutdown) */
    TFOS_CAUSE_HANG = 11,         /* a program made no progress for --hang-timeout */
    TFOS_CAUSE_SETUP = 12,        /* a node could not be set up: its agent ended before it registered,
                                   * a node task could not start it (Spark), its log, feed or fork failed */
    TFOS_CAUSE_MAX_ = 12,
};
/* "exit", "signal", "heartbeat", ... (static storage; "unknown" out of range). */
const char *tfos_cause_name(int cause);

/* One failure, as the coordinator records it. */
typedef struct tfos_failure {
    int cause;              /* TFOS_CAUSE_* */
    int attempt;            /* the attempt it ended */
    double time;            /* seconds since the epoch */
    char node[48];          /* "worker:1"; "" when no single node is to blame */
    char job[16];           /* "worker", ...; "" as node */
    int executor_id;        /* -1 as node */
    char host[256];
    int exit_code;          /* CAUSE_EXIT: the program's code; else -1 */
    int signo;              /* CAUSE_SIGNAL: the signal; else 0 */
    /* When the program's last output lines end in a Python traceback: the
     * exception's type ("ValueError") and its innermost frame
     * ("/path/train.py:42"); else "". */
    char exc_type[128];
    char exc_where[320];
    char summary[512];      /* one line: what failed, where, why */
} tfos_failure;

/* Parse the innermost Python exception out of a program's last output
 * lines (oldest first): fills f->exc_type and f->exc_where, or leaves them
 * "" when the lines hold no traceback. */
void tfos_failure_parse_traceback(tfos_failure *f, const char *const *lines, int n);

/* The restart policy: the one place that decides, for every launcher,
 * whether a failed attempt is restarted (the whole cluster re-formed, as
 * torchrun restarts all workers) or the run fails. Rules, in order:
 *   1. causes that retrying cannot fix fail the run: START (a program that
 *      cannot start: the same command fails the same way every time),
 *      RESERVATION, FEED, STOPPED;
 *   2. a deterministic failure fails the run: a node (any node: chief:0 and
 *      worker:0 run the same code) failed with the same exception type at
 *      the same place as the attempt before, and the checkpoint dir's
 *      content did not grow or change in between (a bug in the program
 *      costs one restart, not the whole budget);
 *   3. with restarts left, restart; else fail (the budget is spent).
 * Every decision leaves one history record. Decisions are made on causes,
 * exit codes and the exception's type and place, never on message text. */
enum { TFOS_RESTART = 1, TFOS_RAISE = 2, TFOS_RESIZE = 3 };
enum {
    TFOS_WHY_RESTART = 0,       /* restarts left and worth one */
    TFOS_WHY_NOT_RETRYABLE = 1, /* rule 1 */
    TFOS_WHY_DETERMINISTIC = 2, /* rule 2 */
    TFOS_WHY_EXHAUSTED = 3,     /* rule 3: max_restarts used up */
    TFOS_WHY_RESIZE = 4,        /* tfos_policy_resize: not a failure, not counted */
};

typedef struct tfos_attempt_record {
    tfos_failure failure;
    int decision;           /* TFOS_RESTART / TFOS_RAISE / TFOS_RESIZE */
    int why;                /* TFOS_WHY_* */
    char progress[80];      /* checkpoint fingerprint when it failed ("" unknown) */
} tfos_attempt_record;

typedef struct tfos_policy tfos_policy;

/* A policy allowing max_restarts restarts (>= 0). The caller owns *out. */
int tfos_policy_open(tfos_policy **out, int max_restarts);
void tfos_policy_close(tfos_policy *p);
/* Decide about failure f of the current attempt. `progress` is the
 * checkpoint fingerprint when it failed (tfos_checkpoint_progress; NULL or
 * "" when unknown). Records the decision; a RESTART moves the policy to the
 * next attempt. Returns TFOS_RESTART or TFOS_RAISE (*why, when not NULL,
 * gets TFOS_WHY_*); TFOS_EINVAL for a failure with no cause. */
int tfos_policy_decide(tfos_policy *p, const tfos_failure *f, const char *progress, int *why);
/* Take back the last decision, as if it had not been asked: the
 * coordinator does when it learns that another node failed before the one
 * it decided on, and decides again on that one. */
void tfos_policy_retract(tfos_policy *p);
/* An elastic run (min_nodes < max_nodes) changes size: the attempt ended
 * with every node checkpointed at one step (a drain: capacity announced
 * going, or capacity come back to grow into), and the next one forms at the
 * size the capacity then allows. Records it (decision TFOS_RESIZE, why
 * TFOS_WHY_RESIZE; f->summary says why, e.g. "resized from 2 to 1 nodes:
 * ...") and moves to the next attempt without spending the restart budget:
 * a resize is not a failure. 0, TFOS_EINVAL (no summary), TFOS_ENOMEM. */
int tfos_policy_resize(tfos_policy *p, const tfos_failure *f);
/* "restart", "raise", "resize" (static storage; "" for anything else). */
const char *tfos_decision_name(int decision);
/* How many of the attempts so far began with a resize (not counted as restarts). */
int tfos_policy_resizes(const tfos_policy *p);
/* The current attempt (1 for the first), and the budget. */
int tfos_policy_attempt(const tfos_policy *p);
int tfos_policy_max_restarts(const tfos_policy *p);
/* The history: one record per failed attempt, oldest first (owned by p,
 * valid until the next decide or close). */
int tfos_policy_count(const tfos_policy *p);
const tfos_attempt_record *tfos_policy_record(const tfos_policy *p, int i);
/* The history as text, one line per failed attempt
 * ("attempt 1 at 12:00:03: worker:1 ...: exit code 1 [ValueError at x.py:3] -> restarted"),
 * and as a JSON array of objects. Callers free the returned strings; NULL
 * on out of memory. */
char *tfos_policy_render(const tfos_policy *p);
/* One record's line of that text, into buf (no newline). */
void tfos_policy_line(const tfos_attempt_record *r, char *buf, size_t len);
char *tfos_policy_json(const tfos_policy *p);
/* Why the run failed, in one sentence ("the same ValueError at x.py:3 ended
 * attempts 1 and 2 with no checkpoint progress in between: the failure is
 * deterministic, so tfos stops retrying"); "" when the last decision was a
 * restart or there is none. Owned by p. */
const char *tfos_policy_verdict(const tfos_policy *p);

/* A fingerprint of the content of a checkpoint dir on this machine, for
 * rule 2: the files under it that hold data (size > 0), their bytes and the
 * newest modification time among them. Two equal fingerprints mean no
 * checkpoint data was written in between: an empty file created (a save
 * that died on a full disk) or a directory made is no progress. "" (and 0)
 * for a dir that is not local (a URL such as hdfs://...) or not there yet.
 * TFOS_EINVAL for a NULL dir or a buffer under 64 bytes. */
int tfos_checkpoint_progress(const char *dir, char *buf, size_t len);

/* Whether argv can start on this machine, checked without running anything
 * (a few stat calls), for failures no restart can fix: argv[0] names an
 * executable file (a name without '/' is looked up on $PATH as execvp does,
 * /bin:/usr/bin without one), and a Python interpreter (argv[0] named
 * python*) given a script file finds it (from the current directory, as the
 * program will). 0 when nothing is wrong; else TFOS_ESYS with errno ENOENT
 * (not there) or EACCES (not executable or not readable), and one line for
 * people in why[len] ("could not start 'python9': No such file or directory
 * (not on PATH: /usr/bin:/bin)"). */
int tfos_program_check(char *const *argv, char *why, size_t len);

/* ---- coordinator --------------------------------------------------------- */

typedef struct tfos_coord tfos_coord;

typedef struct tfos_coord_opts {
    tfos_layout layout;
    const char *bind_host;       /* default "127.0.0.1" */
    int port;                    /* 0: any free port */
    const char *secret;          /* per-cluster secret (hex); required */
    double reservation_timeout;  /* seconds for all nodes to register; default 600 */
    double stop_grace;           /* seconds an agent waits after SIGTERM before SIGKILL; default 5 */
    double failure_grace;        /* the same for survivors of a failed node; default 0 (<0: 0) */
    double heartbeat_timeout;    /* a running node silent this long has failed; default 30, <0: never */
    int attempt;                 /* attempt number handed to nodes; default 1 (the policy's, with one) */
    /* The restart policy the coordinator applies when the cluster fails
     * (borrowed: it outlives coordinators, one per attempt); NULL: none, the
     * decision is then always TFOS_RAISE. */
    tfos_policy *policy;
    const char *checkpoint_dir;  /* fingerprinted for the policy when a node fails; may be NULL */
    /* > 0: the cluster's client holds a lease. Every status query
     * (tfos_coord_command) renews it; when none has come for this many
     * seconds the client is presumed gone and the cluster is stopped
     * (TFOS_CAUSE_STOPPED). 0: no lease. */
    double lease_timeout;
    /* A line of a node's output, from agents started with forward_logs
     * (`node` is "job:index"; `dropped`: lines the agent could not send
     * before this one). Called on the coordinator's loop; NULL: ignored. */
    void (*on_log)(void *user, const char *node, const char *line, unsigned long long dropped);
    void *log_user;
    /* What each agent is sent of the cluster (tfos_framework_spec_form):
     * TFOS_SPEC_FULL (0) every node's address, as TF_CONFIG needs: O(N)
     * bytes per node; TFOS_SPEC_RANKS the node's rank, the counts and rank
     * 0's address, all torch and JAX need: O(1) per node. */
    int spec_form;
    /* Standby nodes it accepts (an elastic run, docs/RELIABILITY.md
     * "Elastic size"): a process the launcher started where a node of a
     * larger cluster would run registers with "standby" to say that
     * capacity is there; it is never part of this cluster
     * (tfos__coord_standbys counts those connected). 0: none. */
    int standby;
    /* > 0: an elastic torch cluster of workers only, in the ranks spec form
     * (docs/RELIABILITY.md, "Torch survivors in place"): a worker lost while
     * it runs is not a failure while at least this many workers are left;
     * they are sent their new rank, world size and rank 0's address, and
     * re-form their process group without a restart. 0: off. */
    int inplace_min;
} tfos_coord_opts;

enum { TFOS_SPEC_FULL = 0, TFOS_SPEC_RANKS = 1 };
/* The most nodes a coordinator takes (tfos run's own limit is lower: one
 * machine's processes; tfos coordinator and the simulated agents of
 * bench/simagents.c go this far). */
#define TFOS_MAX_NODES 65536
/* The spec form of a framework: "tf" (and NULL, "": TensorFlow stays the
 * default where the framework is not known) TFOS_SPEC_FULL; "torch" and
 * "jax" TFOS_SPEC_RANKS; anything else -1. */
int tfos_framework_spec_form(const char *framework);

/* Cluster state as the coordinator sees it. */
enum {
    TFOS_COORD_RESERVING = 0, /* waiting for registrations */
    TFOS_COORD_RUNNING = 1,   /* spec published, programs running */
    TFOS_COORD_STOPPING = 2,  /* asked every agent to stop, waiting for them */
    TFOS_COORD_DONE = 3,      /* all tracked nodes exited 0 */
    TFOS_COORD_FAILED = 4,    /* a node failed, reservation timed out, or stopped */
};

/* Start a coordinator listening on bind_host:port. */
int tfos_coord_open(tfos_coord **out, const tfos_coord_opts *opts);
/* Run the event loop for at most timeout_ms (0: no wait). Returns the state.
 * Once the cluster is over (DONE or FAILED) it returns at once, still
 * answering status queries (tfos_query_status) from clients that connect. */
int tfos_coord_step(tfos_coord *c, int timeout_ms);
/* Current state (TFOS_COORD_*). */
int tfos_coord_state(const tfos_coord *c);
/* "host:port" the coordinator listens on (owned by c). */
const char *tfos_coord_address(const tfos_coord *c);
/* Ask every node to stop (clean shutdown or abort). `reason` is logged and,
 * when not NULL, recorded as the failure reason if none is recorded yet. */
void tfos_coord_stop(tfos_coord *c, const char *reason);
/* End the feed of every node whose program runs, but the ps nodes: each agent
 * ends its input ring (no more records, ever), so programs reading it see the
 * end of the feed once they have read what is there. Nodes not running yet
 * are not told. Idempotent on the agents' side. */
void tfos_coord_end_feed(tfos_coord *c);
/* True once a client sent the "release" command (see tfos_coord_command). */
int tfos_coord_released(const tfos_coord *c);
/* Drain on notice: ask every running chief, worker and evaluator to write
 * a checkpoint at one step and end (the DRAIN frame; each program learns
 * the step from TFOS_DRAIN_FILE, ctx.should_checkpoint(step) in Python).
 * The coordinator first asks the agents for fresh reports (at most
 * TFOS_DRAIN_PROBE_MS), then chooses the step past every node's estimated
 * current step (its ctx.report(step=) and rate). When no program reported a
 * step the cluster is stopped instead (tfos_coord_stop(reason)), unless
 * `force`: then the step is -1 and each program checkpoints at its next
 * check. Nodes still running `grace` seconds after the notice (<= 0:
 * TFOS_DEFAULT_DRAIN_GRACE) are stopped and the cluster FAILS
 * (TFOS_CAUSE_STOPPED: the run falls back to its last checkpoint); when all
 * of them exit 0 it is DONE and tfos_coord_drained is true. 0, or
 * TFOS_EAGAIN while the cluster forms (no program runs: stop it instead);
 * TFOS_EINVAL when it is stopping, over or draining. */
int tfos_coord_drain(tfos_coord *c, const char *reason, double grace, int force);
/* True once a drain succeeded: every tracked node exited 0 after DRAIN. */
int tfos_coord_drained(const tfos_coord *c);
/* The drain step sent (-1: at each program's next check), or -2 when none
 * was sent (no drain, still choosing it, or turned into a stop). */
long long tfos_coord_drain_step(const tfos_coord *c);
/* A human summary of why the cluster failed (node, exit code or signal, last
 * log lines), or "" when it has not failed. Owned by c. */
const char *tfos_coord_failure(const tfos_coord *c);
/* The failure as a record: 0 with *out filled, or TFOS_EAGAIN when the
 * cluster has not failed. */
int tfos_coord_failure_info(const tfos_coord *c, tfos_failure *out);
/* What the policy decided about the failure: TFOS_RESTART, TFOS_RAISE, or
 * 0 while the cluster has not failed. */
int tfos_coord_decision(const tfos_coord *c);
/* Fail the cluster with a cause of the caller's (e.g. TFOS_CAUSE_FEED):
 * records `reason`, applies the policy and stops every node. */
void tfos_coord_fail(tfos_coord *c, int cause, const char *reason);
/* Why the cluster failed, as a code: 0 (not failed), TFOS_ETIMEDOUT
 * (reservation timed out), TFOS_ESTOPPED (tfos_coord_stop with a reason),
 * TFOS_EFAILED (a node failed or was lost). */
int tfos_coord_failure_code(const tfos_coord *c);
/* One node as the coordinator sees it. */
typedef struct tfos_node_info {
    const char *job;   /* "ps", "chief", "evaluator", "worker" */
    int index;
    int executor_id;
    const char *host;  /* "" before it registered */
    int port;
    const char *state; /* "waiting", "registered", "running", "exited" */
    int pid;           /* the program's, 0 before it started */
    int exit_code;     /* -1 unless exited */
    int tb_port;       /* TensorBoard port the node announced; 0: none */
    bool has_feed;     /* the node has an input ring (its agent reported its counters) */
    uint64_t rows_in;  /* rows written into its input ring, as its agent last said */
    uint64_t rows_out; /* rows its program took from the ring */
} tfos_node_info;

/* Number of nodes, and node i (0 <= i < count). Strings are owned by c. */
int tfos_coord_node_count(const tfos_coord *c);
int tfos_coord_node(const tfos_coord *c, int i, tfos_node_info *out);
/* JSON object describing the cluster (state, address, attempt, failure) and
 * every node (job, index, host, port, state, pid, exit, tensorboard_port,
 * feed: its input ring's rows written/consumed/buffered, fill and waits, or
 * null; report: the program's latest ctx.report() as an object, or null).
 * The caller frees the returned string with free(). */
char *tfos_coord_status_json(const tfos_coord *c);
void tfos_coord_close(tfos_coord *c);

/* ---- node agent ------------------------------------------------------ */

typedef struct tfos_agent_opts {
    const char *coord_addr;  /* "host:port" of the coordinator */
    const char *secret;      /* cluster secret (hex) */
    int executor_id;         /* this node's id within the cluster */
    const char *host;        /* address other nodes reach this one at; default 127.0.0.1;
                              * "auto": the local address of its connection to the coordinator */
    const char *log_dir;     /* per-node log files go here; NULL: no files */
    char *const *argv;       /* user program and its arguments */
    char *const *ps_argv;    /* program run instead of argv on ps nodes; NULL: argv */
    double connect_timeout;  /* seconds to reach the coordinator; default 30 */
    bool quiet;              /* do not echo the program's output to our stdout/stderr */
    bool forward_logs;       /* also send each line of it to the coordinator (tfos_coord_opts.on_log):
                              * where the console is not the user's (tfos yarn); lines beyond a
                              * bounded backlog are dropped and counted */
    const char *cluster_id;  /* enables the feed: rings + feed socket; NULL: no feed */
    size_t feed_capacity;    /* input ring bytes (power of two); 0: 64 MiB */
    size_t result_capacity;  /* output ring bytes (power of two); 0: 16 MiB */
    const char *checkpoint_dir; /* handed to the program as TFOS_CHECKPOINT_DIR; may be NULL */
    int watch_pid;           /* the agent's owner (e.g. the Spark executor JVM): when this
                              * process is gone, stop the program and exit; 0: none */
    int tensorboard_port;    /* announced to the coordinator (status "tensorboard_port"); 0: none */
    bool tensorboard;        /* start TensorBoard beside the program (tfos run/yarn --tensorboard): in
                              * the program's process group, on a free port (or tensorboard_port),
                              * announced as above; its URL is printed as the node's first line */
    const char *tensorboard_logdir; /* its --logdir, also TFOS_TENSORBOARD_LOGDIR; NULL: <log_dir>/tensorboard */
    bool hand_port;          /* hand the reserved port's socket to the program (TFOS_PORT_FD) instead of
                              * releasing it at exec: TensorFlowOnSpark's release_port=False, where
                              * ctx.tmp_socket holds the port until ctx.release_port() */
    double hang_timeout;     /* > 0: a program that neither reads its feed nor beats (ctx.heartbeat())
                              * this many seconds, while not waiting on an empty feed, is hung: its
                              * stacks are dumped (PYTHONFAULTHANDLER) and it is ended; 0: off */
    const char *keras;       /* which Keras tf.keras is in the program: "env" (NULL: as inherited),
                              * "auto" (tf-keras where installed), "legacy" (tf-keras, TF_USE_LEGACY_KERAS=1),
                              * "3" (Keras 3); see docs/DESIGN.md, "Keras" */
    int max_restarts;        /* the run's restart budget, told to the program as TORCHELASTIC_MAX_RESTARTS
                              * (the launcher's --max-restarts / TFCluster.run(max_restarts=)); 0: none */
    int respawn;             /* > 0: a program that fails (exit code not 0, or a signal) after running at
                              * least TFOS_RESPAWN_MIN_UPTIME_MS is started again here, alone, up to this
                              * many times, instead of failing the node (tfos serve's model servers); one
                              * that fails sooner, or past that, fails the node as always. 0: off */
    bool join;               /* register into the slot of a worker that left a running cluster (an in-place
                              * grow: tfos run --grow-in-place starts it; tfos node --join) */
} tfos_agent_opts;

/* Reserve a port, register, run the program with its cluster environment,
 * supervise it and report its exit. Blocks until the program ends or the
 * coordinator stops it. Writes the exit code the agent process should end
 * with (the program's, or 128+signal) to *exit_code. */
int tfos_agent_run(const tfos_agent_opts *opts, int *exit_code);

/* ---- clients of a coordinator ------------------------------------------ */

/* Tell the coordinator at coord_addr ("host:port") that node `executor_id`
 * could not start, e.g. from a Spark task that failed before its agent ran.
 * The coordinator records "<job>:<index> (executor N) could not start:
 * <message>" as the cluster's failure and stops the cluster. A message longer
 * than a frame holds is cut, not refused; newlines are kept. Every wait is
 * bounded by timeout_ms. Returns 0 once the coordinator confirmed it,
 * TFOS_EINVAL (bad address or executor id), TFOS_ESYS (cannot connect; errno
 * says why), TFOS_EAUTH (wrong secret), TFOS_ETIMEDOUT, TFOS_ECLOSED or
 * TFOS_EPROTO (the peer hung up or is not a tfos coordinator). */
int tfos_report_abort(const char *coord_addr, const char *secret, int executor_id, const char *message,
                      int timeout_ms);

/* Ask the coordinator at coord_addr for its status: *json_out gets the JSON
 * of tfos_coord_status_json (with "state" and "failure"); the caller frees it
 * with free(). Errors as tfos_report_abort, plus TFOS_ENOMEM. */
int tfos_query_status(const char *coord_addr, const char *secret, int timeout_ms, char **json_out);
/* tfos_query_status with a command the coordinator carries out before it
 * answers: NULL or "" (none: a query, which renews the lease), "end_feed"
 * (tfos_coord_end_feed), "stop" (tfos_coord_stop with `reason`; newlines
 * become spaces), "release" (tfos_coord_released turns true: the client has
 * read the outcome), "drain" (tfos_coord_drain with `reason` and the default
 * grace; one that cannot start now is no error: "drain" in the status says
 * whether one is under way). An unknown command is refused (TFOS_EINVAL). */
int tfos_coord_command(const char *coord_addr, const char *secret, const char *command, const char *reason,
                       int timeout_ms, char **json_out);

/* A Spark feed task's turn (fair shares of a feed job, src/core/turns.h):
 * may `node` begin partition `partition` (of nparts ids; the job feeds
 * `nfed` of them) of the job named `stage`, whose fed nodes are `nodes`?
 * *go_out: 1 now, 0 ask again later (a node with fewer partitions begun
 * is behind). *json_out (may be NULL; the caller frees it) gets the
 * answer: {"go", "begun", "behind", "behind_begun", "unbegun"}. Errors as
 * tfos_report_abort, plus TFOS_EINVAL (bad arguments, or refused by the
 * coordinator). */
int tfos_feed_turn(const char *coord_addr, const char *secret, const char *stage, int nparts, int nfed,
                   const int *nodes, int nnodes, int partition, int node, int timeout_ms, int *go_out,
                   char **json_out);

/* ---- local launcher (`tfos run`) ----------------------------------- */

/* `tfos serve`'s front end (docs/SERVING.md): the Open Inference Protocol
 * on the launcher's HTTP port, in front of model servers that are the
 * cluster's nodes. The CLI composes it with a launcher; tfos_run_opts does
 * not carry it. */
typedef struct tfos_serve_opts {
    char *const *models;       /* the model names served (their dirs go to the servers' argv) */
    int nmodels;
    int max_batch;             /* rows per batch sent to a model server; 0: 64 */
    int max_delay_ms;          /* the longest a request waits for others to batch with; 0: 5, -1: none */
    long long max_queue_rows;  /* rows waiting per model before requests get 429; 0: 64 * max_batch */
    double timeout_s;          /* a request not answered by then gets 504; 0: 30 */
    long long max_body;        /* largest request body in bytes; 0: 64 MiB */
} tfos_serve_opts;

/* What a `tfos run` user sets (its command-line options, tfos.run's
 * arguments). Programs built on the launcher (tfos serve, tfos yarn's
 * ApplicationMaster) say more through the internal src/launch/launch.h. */
typedef struct tfos_run_opts {
    tfos_layout layout;
    char *const *argv;          /* the user program */
    const char *agent_path;     /* path of the tfos binary used as the agent */
    const char *log_dir;        /* NULL: ./tfos-logs/run-<time>-<pid> */
    double reservation_timeout; /* default 60 */
    double stop_grace;          /* default 5 */
    double heartbeat_timeout;   /* default 30 */
    bool ps_runs_program;       /* run argv on ps nodes too (default: built-in TF server) */
    const char *python;         /* interpreter for the built-in ps server; NULL: guess */
    int feed_mb;                /* input ring MiB per node (power of two); 0: 64 */
    /* --input: feed these files into the chief and workers (InputMode.SPARK
     * without Spark). See docs/FEED.md. */
    char *const *inputs;
    int ninputs;
    int input_format;           /* 0 auto (by extension), 1 csv, 2 jsonl, 3 npy */
    int csv_header;             /* 1 yes, 0 no, -1 detect */
    int csv_delimiter;          /* CSV field separator byte; 0: ',' (a first line holding ';' or a tab is refused) */
    int epochs;                 /* times every file is fed; 0: 1 */
    int batch_rows;             /* rows per feed record; 0: 1024, and for .npy no more than fit in 2 MiB */
    long long partition_rows;   /* rows per partition; 0: 10000 */
    /* restarts: when a node fails, every node is stopped and the cluster is
     * formed again (fresh TF_CONFIG, TFOS_ATTEMPT + 1) up to max_restarts
     * times; programs resume from checkpoint_dir. */
    int max_restarts;           /* 0: fail at the first node failure (see tfos_policy) */
    double failure_grace;       /* SIGTERM -> SIGKILL for survivors of a failed node; default 0.5 */
    /* SIGTERM drains the cluster (tfos_local_drain) when its programs report
     * steps: seconds they get to checkpoint at the drain step and end; 0:
     * TFOS_DEFAULT_DRAIN_GRACE; < 0: no drain, SIGTERM stops the run as any
     * signal. drain_force: drain also when no program reports a step (they
     * read TFOS_DRAIN_FILE and checkpoint at their next check). */
    double drain_grace;
    bool drain_force;
    /* Elastic size (docs/RELIABILITY.md, "Elastic size"): 0 < min_nodes <
     * the layout's total lets workers come and go. An attempt whose nodes
     * have not all registered elastic_wait seconds after it began forms
     * again with those that did (never fewer than min_nodes); a drain on a
     * cluster manager's notice re-forms instead of ending the run; while it
     * is smaller, standby nodes ask for the missing capacity, and one that
     * gets it grows the cluster back at a drain step. Resizes spend no
     * restart. 0: not elastic. elastic_wait 0: TFOS_DEFAULT_ELASTIC_WAIT. */
    int min_nodes;
    double elastic_wait;
    /* With min_nodes, spec_form TFOS_SPEC_RANKS and workers only: a worker
     * lost while the cluster runs leaves the others running in place
     * (tfos_coord_opts.inplace_min), their programs re-forming their
     * process group (tfos.torch.ElasticGroup), instead of a restart. */
    bool resize_in_place;
    /* With resize_in_place: a worker lost in place is replaced in place.
     * While the cluster is smaller, the launcher starts a worker (`tfos
     * node --join`) where its capacity is; it joins the running cluster
     * into the lost one's slot and the members re-form their group with it
     * at their next step boundary (ElasticGroup.resized()), nothing
     * restarted. Without it the cluster grows back at a drain step. */
    bool grow_in_place;
    double hang_timeout;        /* > 0: the agents' hang watchdog (see tfos_agent_opts); 0: off */
    const char *checkpoint_dir; /* NULL: <log_dir>/checkpoints; TFOS_CHECKPOINT_DIR */
    /* the status page: GET /status (JSON, with feed statistics), /metrics
     * (Prometheus), /feed/history (the feed rate, JSON), / (live page) */
    int status_port;            /* 0: any free port; -1: none */
    const char *status_host;    /* NULL: 127.0.0.1 */
    bool quiet;                 /* no feed progress lines (every 5 s while --input feeds) */
    const char *keras;          /* the agents' keras mode (see tfos_agent_opts); NULL: "env" */
    bool tensorboard;           /* TensorBoard on the chief (else worker 0): tfos_agent_opts.tensorboard */
    const char *tensorboard_logdir; /* NULL: <that node's log dir>/tensorboard */
    bool caller_reports;        /* the caller reports the failure itself (tfos.run raises it with the
                                 * summary): the launcher logs it at debug level, not error */
    /* MLflow tracking (docs/MODELS.md "Tracking"): one run for the whole job
     * on the tracking server at this http(s):// URI; NULL: none */
    const char *mlflow;
    const char *mlflow_experiment; /* NULL: $MLFLOW_EXPERIMENT_NAME, else "Default" */
    const char *mlflow_run_name;   /* NULL: "tfos-<program>-<time>" */
    int spec_form;           /* what each node is sent of the cluster: TFOS_SPEC_FULL (TensorFlow, the
                              * default) or TFOS_SPEC_RANKS (torch, JAX): tfos_framework_spec_form */
} tfos_run_opts;

typedef struct tfos_local tfos_local;

/* Start a coordinator and one agent process per node on this machine. */
int tfos_local_open(tfos_local **out, const tfos_run_opts *opts);
/* Drive the cluster for at most timeout_ms. Returns 1 once it has ended
 * (succeeded, failed or stopped, and every agent is gone), else 0. */
int tfos_local_step(tfos_local *l, int timeout_ms);
/* Stop the cluster (e.g. on SIGINT). signo, when non-zero, sets the exit
 * code to 128+signo. */
void tfos_local_stop(tfos_local *l, const char *reason, int signo);
/* Drain the cluster on a notice (tfos_coord_drain with the run's
 * drain_grace): every program checkpoints at one step and ends; the run then
 * exits TFOS_EXIT_DRAINED and is not restarted (signo, when non-zero, is
 * kept as for tfos_local_stop: a drain whose grace ran out exits 128+signo).
 * 0, or TFOS_EAGAIN while the cluster forms, TFOS_EINVAL when drain_grace
 * < 0, the run is stopping or a drain was asked already: stop it instead. */
int tfos_local_drain(tfos_local *l, const char *reason, int signo);
/* The coordinator, for status and failure queries (owned by l). */
tfos_coord *tfos_local_coord(tfos_local *l);
/* Directory holding the per-node logs (owned by l). */
const char *tfos_local_log_dir(const tfos_local *l);
/* Why the run failed: the last failure, with one line per earlier attempt
 * when it was restarted; "" when it succeeded (owned by l). */
const char *tfos_local_failure(const tfos_local *l);
/* Port of the status page, -1 when there is none. */
int tfos_local_status_port(const tfos_local *l);
/* The current attempt number (1 for the first). */
int tfos_local_attempt(const tfos_local *l);
/* The run's restart policy and its history (owned by l). */
const tfos_policy *tfos_local_policy(const tfos_local *l);
/* Exit code of the run: 0 when every chief/worker/evaluator exited 0; 1 for a
 * failed node; 124 for a reservation timeout; 128+sig when stopped by a
 * signal; TFOS_EXIT_DRAINED (75) after a drain (tfos_local_drain). Valid once tfos_local_step returned 1. */
int tfos_local_exit_code(const tfos_local *l);
/* Stop whatever still runs (bounded), reap every agent, free. */
void tfos_local_close(tfos_local *l);

/* The whole `tfos run`: open, step until done or until *stop_signal becomes
 * non-zero (then stop with that signal), close. */
int tfos_run_local(const tfos_run_opts *opts, volatile int *stop_signal, int *exit_code);

#ifdef __cplusplus
}
#endif
#endif
