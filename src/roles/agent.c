/* agent.c: the node agent: one per node, supervising one user program.
 *
 * Lifecycle: reserve a port (held, close-on-exec, until the program execs) ->
 * connect and authenticate to the coordinator -> register -> wait for the
 * cluster spec -> start the program in its own process group with the cluster
 * environment -> relay its output (prefixed, to the console and the node's
 * log file) -> report its exit status with its last lines -> exit.
 *
 * No orphans: the program gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the
 * agent; the agent stops the program's whole process group when the
 * coordinator asks, when the coordinator goes away, when the agent gets
 * SIGTERM/SIGINT/SIGHUP (its launcher's death signal), and after the program
 * itself exits (stray grandchildren). Signals arrive on a signalfd so the
 * single poll loop sees them in order with everything else.
 *
 * An agent started detached by a Spark task watches its owner (the executor
 * JVM, --watch-pid) through a pidfd in the same poll loop (or with kill(pid,
 * 0) at each heartbeat where pidfds are missing): when the owner is gone the
 * program is stopped as above and its exit reported as the owner's loss.
 *
 * END_FEED from the coordinator ends the node's input ring through a producer
 * handle of the agent's own, without ever blocking the loop: a full ring or a
 * busy producer lock is retried on later ticks.
 *
 * PROGRESS from the coordinator is answered with a heartbeat at once (the
 * program's latest report, a drain step's basis; the feed's rows taken, a
 * feed turn's); DRAIN step=D is written to the program's
 * TFOS_DRAIN_FILE, "step=D\ngrace_ms=G\nreason=...\n", whole (a temporary
 * file, then a rename): the program checkpoints at step D and exits 0
 * (ctx.should_checkpoint in Python). The agent signals nothing: the
 * coordinator stops what has not ended when the grace is over.
 *
 * Its connection to the coordinator is a link (core/link.h) dialed with
 * roles/client.h's tfos__coord_dial and run on the agent's loop.
 */
#include "core/feedsock.h"
#include "core/link.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/ring.h"
#include "core/spec.h"
#include "core/wire.h"
#include "platform/cgroup.h"
#include "platform/clock.h"
#include "platform/fs.h"
#include "platform/net.h"
#include "platform/proc.h"
#include "roles/client.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TAIL_LINES TFOS_FAILURE_TAIL_LINES
#define TAIL_WIDTH 300
#define LINE_MAX_ 8192
#define END_FEED_RETRY_MS 50 /* a full or busy input ring: try again this soon */
#define OWNER_GRACE_MS 2000  /* SIGTERM -> SIGKILL when the owner is gone */
#define AGENT_REDIALS 4        /* registrations tried again after a silent hang-up: 200..1600 ms apart */
/* A program that exits 126 or 127 did not start: the exit codes of shells
 * (and env, nohup, timeout, the TensorBoard wrapper's exec) for a command
 * found but not executable, and not found. The agent reports it as kind
 * "start", which the restart policy never retries. */
#define START_EXIT_CANNOT_RUN 126
#define START_EXIT_NOT_FOUND 127
enum { START_PROGRAM = 1, START_SETUP = 2 };

/* Program run on ps nodes when the user program does not serve them itself:
 * a TensorFlow gRPC server for this task that runs until stopped. Without
 * TensorFlow in the chosen interpreter it exits 127 (START_EXIT_NOT_FOUND:
 * reported as a program that cannot start, never retried) with one line
 * naming that interpreter and the two ways out (--python, --ps-runs-program).
 * `tfos run` looks for tensorflow in that interpreter before any node starts
 * (tfos__launch_check); this is for launchers that cannot (tfos yarn). */
static const char builtin_ps_server[] =
    "import json, os, sys\n"
    "try:\n"
    "    import tensorflow as tf\n"
    "except ImportError as e:\n"
    "    sys.stderr.write('tfos: the built-in parameter server needs TensorFlow, but %s cannot import it (%s): '"
    " 'pass --python PY with an interpreter that has tensorflow, or --ps-runs-program to run your program on the'"
    " ' ps nodes\\n' % (sys.executable or sys.argv[0], e))\n"
    "    sys.exit(127)\n"
    "c = json.loads(os.environ['TF_CONFIG'])\n"
    "print('tfos: serving ps task %d at %s' % (c['task']['index'], c['cluster']['ps'][c['task']['index']]),"
    " flush=True)\n"
    "s = tf.distribute.Server(tf.train.ClusterSpec(c['cluster']), job_name='ps',"
    " task_index=c['task']['index'], protocol='grpc', start=True)\n"
    "s.join()\n";

typedef struct agent agent;

typedef struct linebuf {
    agent *a;
    int fd; /* read end of the program's pipe, -1 at EOF */
    int out; /* our fd the lines go to (1 or 2) */
    char buf[LINE_MAX_];
    size_t len;
} linebuf;

struct agent {
    const tfos_agent_opts *o;
    tfos__loop *loop;
    int done;              /* leave the loop */
    tfos__timer hb_timer, kill_timer, end_feed_timer;
    tfos__timer ready_timer; /* looks for the program's first read of its feed (on_ready_poll) */
    /* the program could not be started: 0, or the kind the coordinator
     * decides on: START_PROGRAM (it cannot start: exec failed, no script, no
     * tf_keras for --keras legacy; retrying cannot help) or START_SETUP (the
     * node could not be set up: its log, feed rings, TensorBoard or a fork) */
    int start_failed;
    char start_why[400];   /* why, one line: the node's exit description */
    int stop_asked;        /* the program was running when a stop was asked (begin_stop) */
    int builtin_ps;        /* the program is the built-in ps server (builtin_ps_server) */
    char log_error[300];   /* the node's log file could not be written: why ("" fine) */
    unsigned long long forward_dropped; /* --forward-logs: lines not sent since the last one sent */
    tfos__rate forward_rate;            /* ... and this node's share of the lines a second (forward_line) */
    /* every process of the node: its cgroup ("" where there is none) and the
     * guardian that ends them if the agent is killed or stopped */
    char cgroup[TFOS_CGROUP_PATH_MAX];
    int cgroup_fd;
    pid_t guard_pid;
    /* the hang watchdog (--hang-timeout): the last progress seen, and when */
    uint64_t seen_consumed, seen_progress, seen_results;
    int64_t progress_at;
    int hung;
    tfos__link *link;      /* to the coordinator; NULL once lost */
    int connected;
    int heard;             /* a frame came from the coordinator since this node registered */
    int redials;           /* registrations tried again after a silent hang-up */
    tfos__timer redial_timer;
    char host[TFOS_HOST_MAX]; /* the address this node registered */
    int tb_port;              /* TensorBoard's (--tensorboard, --tensorboard-port); 0: none */
    int sfd;
    int resv_fd;
    int port;
    tfos__node_addr *nodes;
    int n, self, attempt;
    int compact;            /* the spec came in its ranks form (torch, JAX): nodes lists self and rank 0 */
    tfos__spec_ranks ranks; /* with compact */
    char coord[TFOS_HOST_MAX + 16];
    char label[48];
    char prefix[64];
    pid_t child;
    int child_done;
    int child_status;
    int64_t child_started_ms; /* when the program (last) started */
    int64_t born_ms;          /* when this agent started: its REGISTER says how long each step took since */
    int respawns;             /* times it was started again here (tfos_agent_opts.respawn) */
    linebuf lb[2];
    int logfd;
    char tail[TAIL_LINES][TAIL_WIDTH];
    int tail_next, tail_count;
    int64_t next_heartbeat;
    int64_t kill_deadline; /* 0: no stop under way */
    int killed_hard;
    int error_exit;        /* exit code to use when no program ran */
    /* feed: the rings this node owns and the socket producers get them from */
    tfos__ring *in_ring, *out_ring; /* observer handles (counters) */
    int in_fd, out_fd;
    tfos__feed_server *feed_server; /* the producers' handshakes, on the loop */
    /* END_FEED: 0 not asked, 1 asked and pending, 2 done or given up */
    int end_feed;
    tfos__ring *feed_producer;    /* our producer handle on the input ring */
    /* the owner (--watch-pid) */
    int owner_fd;                 /* its pidfd; -1: none, or polled with kill() */
    int owner_gone;
    int owner_stop;               /* the program was stopped because of it */
    /* --keras, resolved once (tfos__keras_resolve) */
    int keras_resolved;
    tfos__keras_probe keras_probe; /* started before registering (tfos__keras_probe_start) */
    const char *legacy_keras;     /* TF_USE_LEGACY_KERAS for the program; NULL: inherited */
    char drain_path[4200];        /* the program's TFOS_DRAIN_FILE ("" before it starts) */
    int64_t drain_until;          /* ms: the end of the drain's grace told to the program; 0: none */
    tfos__timer owner_timer;      /* the executor left during a drain: the stop at drain_until */
    char resize_path[4200];       /* its TFOS_RESIZE_FILE: the membership an in-place resize gave it */
    char joined[600];             /* it joined a running cluster in place: its first membership, for
                                   * TFOS_RESIZE_FILE before the program starts ("" none) */
    char join_ready_path[4300];   /* ... and where its program says it is ready to form its group */
    tfos__timer join_timer;       /* looks for that (on_join_poll) */
    char error_path[4200];        /* its TFOS_ERROR_FILE: when it caught its own failure */
    double ended_at;              /* when the program's end was seen (wall clock; 0: not yet) */
};

static void tail_push(agent *a, const char *line, size_t len)
{
    if (len >= TAIL_WIDTH)
        len = TAIL_WIDTH - 1;
    memcpy(a->tail[a->tail_next], line, len);
    a->tail[a->tail_next][len] = '\0';
    a->tail_next = (a->tail_next + 1) % TAIL_LINES;
    if (a->tail_count < TAIL_LINES)
        a->tail_count++;
}

/* 0, or -1 with errno (ENOSPC: a short write counts as one). */
static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void send_log_error(agent *a);
static void forward_line(agent *a, const char *line, size_t len);

/* Lines TensorFlow prints while it loads that look like errors and are not,
 * on a machine without an NVIDIA driver (a CPU machine whose environment has
 * CUDA libraries, e.g. torch's wheels): absl's notice that logging is not
 * initialised, "Could not find cuda drivers" (twice a process) and the ERROR
 * "failed call to cuInit". No TF_CPP_MIN_LOG_LEVEL short of 3 (every error)
 * removes them, and they were 12 of a 31-line run (issue 36). They go to the
 * node's log file, not the console nor the coordinator; with a driver, or
 * with TF_CPP_MIN_LOG_LEVEL=0 (the user wants everything), they are shown. */
static int tf_noise(const char *line, size_t len)
{
    static int show = -1; /* once per agent: the machine and the env do not change */
    if (show < 0) {
        const char *lvl = getenv("TF_CPP_MIN_LOG_LEVEL");
        show = access("/proc/driver/nvidia/version", F_OK) == 0 || (lvl && !strcmp(lvl, "0"));
    }
    if (show)
        return 0;
    return memmem(line, len, "before absl::InitializeLog() is called", 38) ||
           (memmem(line, len, "cudart_stub", 11) && memmem(line, len, "Could not find cuda drivers", 27)) ||
           memmem(line, len, "failed call to cuInit", 21);
}

static void emit_line(agent *a, int out, const char *line, size_t len)
{
    int noise = tf_noise(line, len);
    if (!noise) /* the last lines a failure shows are the program's */
        tail_push(a, line, len);
    if (a->o->forward_logs && !noise)
        forward_line(a, line, len);
    if (a->logfd >= 0) {
        char buf[LINE_MAX_ + 2];
        memcpy(buf, line, len);
        buf[len] = '\n';
        if (write_all(a->logfd, buf, len + 1) < 0 && !a->log_error[0]) {
            /* a full disk (or any write error): said once, on the console and
             * to the coordinator (its /status); the console keeps the output */
            snprintf(a->log_error, sizeof a->log_error, "cannot write its log file %s/%s-%d.log: %s",
                     a->o->log_dir, a->nodes[a->self].job, a->nodes[a->self].index, strerror(errno));
            TFOS_ERROR("agent %s: %s; its output still goes to the console", a->label, a->log_error);
            send_log_error(a);
        }
    }
    if (!a->o->quiet && !noise) {
        /* one write per line so lines of different nodes do not interleave */
        char buf[LINE_MAX_ + 80];
        size_t pl = strlen(a->prefix);
        memcpy(buf, a->prefix, pl);
        memcpy(buf + pl, line, len);
        buf[pl + len] = '\n';
        write_all(out, buf, pl + len + 1);
    }
}

/* Read what the pipe has; emit complete lines. Returns 0, or 1 at EOF. */
static int pump(agent *a, linebuf *lb)
{
    for (;;) {
        if (lb->len == sizeof lb->buf) { /* a line longer than the buffer: cut it */
            emit_line(a, lb->out, lb->buf, lb->len);
            lb->len = 0;
        }
        ssize_t r = read(lb->fd, lb->buf + lb->len, sizeof lb->buf - lb->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (r <= 0) {
            if (lb->len)
                emit_line(a, lb->out, lb->buf, lb->len);
            lb->len = 0;
            tfos__loop_unwatch(a->loop, lb->fd);
            close(lb->fd);
            lb->fd = -1;
            return 1;
        }
        lb->len += (size_t)r;
        char *start = lb->buf, *nl;
        while ((nl = memchr(start, '\n', lb->len - (size_t)(start - lb->buf)))) {
            emit_line(a, lb->out, start, (size_t)(nl - start));
            start = nl + 1;
        }
        size_t rest = lb->len - (size_t)(start - lb->buf);
        memmove(lb->buf, start, rest);
        lb->len = rest;
    }
}

static int send_msg(agent *a, tfos__msg *m)
{
    int rc = tfos__msg_end(m);
    if (rc == 0 && a->connected)
        rc = tfos__link_send(a->link, m, NULL, 0);
    tfos__msg_fini(m);
    return rc;
}

static void on_kill_deadline(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    agent *a = user;
    if (a->killed_hard || a->child <= 0 || a->child_done)
        return;
    TFOS_WARN("agent %s: program did not stop after SIGTERM; sending SIGKILL", a->label);
    kill(-a->child, SIGKILL);
    a->killed_hard = 1;
}

/* The program was reaped with status st: the agent's loop ends, and the
 * report says when its end was seen. */
static void program_ended(agent *a, int st)
{
    a->child_done = 1;
    a->child_status = st;
    a->ended_at = tfos__wall_s();
    a->done = 1;
}

/* Stop the program's whole group: SIGTERM, then SIGKILL after grace_ms; a
 * grace of 0 (the survivors of a failed node) kills at once. */
static void begin_stop(agent *a, int grace_ms, const char *why)
{
    if (a->kill_deadline)
        return;
    a->kill_deadline = tfos__now_ms() + grace_ms;
    /* a program that has ended already (its SIGCHLD not yet read) ended by
     * itself, not because of this stop: reap it here, so its report says so */
    int st;
    if (a->child > 0 && !a->child_done && waitpid(a->child, &st, WNOHANG) == a->child) {
        program_ended(a, st);
        return;
    }
    /* No producer will feed the node again: a program waiting on its feed is
     * told so (FeedClosed) rather than left waiting for a re-feed. */
    if (a->in_ring)
        tfos__ring_shut(a->in_ring);
    if (a->child > 0 && !a->child_done) {
        a->stop_asked = 1;
        TFOS_DEBUG("agent %s: stopping program (pid %d, grace %d ms): %s", a->label, (int)a->child, grace_ms, why);
        if (grace_ms <= 0) {
            kill(-a->child, SIGKILL);
            a->killed_hard = 1;
            return;
        }
        kill(-a->child, SIGTERM);
        tfos__timer_arm(a->loop, &a->kill_timer, a->kill_deadline, on_kill_deadline, a);
    }
}

static int parse_node(const char *v, size_t vl, tfos__node_addr *nd)
{
    char buf[TFOS_HOST_MAX + 64];
    if (vl >= sizeof buf)
        return TFOS_EPROTO;
    memcpy(buf, v, vl);
    buf[vl] = '\0';
    char job[TFOS_JOB_MAX];
    int idx, eid, port, used = 0;
    char host[TFOS_HOST_MAX];
    if (sscanf(buf, "%15s %d %d %255s %d%n", job, &idx, &eid, host, &port, &used) != 5 || buf[used] ||
        !tfos__job_valid(job) || idx < 0 || eid < 0 || port <= 0 || port > 65535)
        return TFOS_EPROTO;
    snprintf(nd->job, sizeof nd->job, "%s", job);
    snprintf(nd->host, sizeof nd->host, "%s", host);
    nd->index = idx;
    nd->executor_id = eid;
    nd->port = port;
    return 0;
}

static int open_log(agent *a)
{
    if (!a->o->log_dir)
        return 0;
    if (mkdir(a->o->log_dir, 0700) < 0 && errno != EEXIST) {
        TFOS_ERROR("agent %s: cannot create log dir %s: %s", a->label, a->o->log_dir, strerror(errno));
        return TFOS_ESYS;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%d.log", a->o->log_dir, a->nodes[a->self].job, a->nodes[a->self].index);
    /* the node's output may hold data and secrets of the user's: for the
     * user only */
    a->logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (a->logfd < 0) {
        TFOS_ERROR("agent %s: cannot open log file %s: %s", a->label, path, strerror(errno));
        return TFOS_ESYS;
    }
    return 0;
}

static void on_pipe(tfos__loop *l, int fd, int events, void *user);

/* Create the input and output rings and listen for producers. */
static int open_feed(agent *a)
{
    const tfos_agent_opts *o = a->o;
    size_t in_cap = o->feed_capacity ? o->feed_capacity : (size_t)TFOS_DEFAULT_FEED_MB << 20;
    size_t out_cap = o->result_capacity ? o->result_capacity : (size_t)TFOS_DEFAULT_RESULT_MB << 20;
    int rc = tfos__ring_create(&a->in_ring, &a->in_fd, in_cap, TFOS_RING_OBSERVER);
    if (rc == 0)
        rc = tfos__ring_create(&a->out_ring, &a->out_fd, out_cap, TFOS_RING_OBSERVER);
    if (rc == 0)
        rc = tfos__feed_server_open(&a->feed_server, a->loop, o->cluster_id, o->executor_id, o->secret, a->label,
                                    a->in_fd, a->out_fd);
    if (rc)
        TFOS_ERROR("agent %s: cannot set up the feed: %s (%s)", a->label, tfos_strerror(rc),
                   rc == TFOS_ESYS ? strerror(errno) : "");
    return rc;
}

/* LOG: one line of the program's output for the coordinator, when the
 * agent's console is not the user's (--forward-logs). The loop sends it
 * without blocking; past FORWARD_BACKLOG bytes unsent, or past this node's
 * share of FORWARD_CLUSTER_RATE lines a second (FORWARD_MIN_RATE at least,
 * bursts of FORWARD_BURST_S seconds' worth, FORWARD_MIN_BURST at least: a
 * traceback passes), lines are dropped and counted, and the count goes
 * with the next line that fits. So 1,000 chatty nodes cost the coordinator
 * what 2 do; every line is still in the node's log file. */
#define FORWARD_BACKLOG (1 << 20)
#define FORWARD_CLUSTER_RATE 20000.0
#define FORWARD_MIN_RATE 10.0
#define FORWARD_BURST_S 10.0
#define FORWARD_MIN_BURST 200.0
static void forward_line(agent *a, const char *line, size_t len)
{
    if (a->forward_rate.per_s == 0) {
        int nodes = a->compact ? a->ranks.nodes : a->n;
        double rate = FORWARD_CLUSTER_RATE / (nodes > 0 ? nodes : 1);
        if (rate < FORWARD_MIN_RATE)
            rate = FORWARD_MIN_RATE;
        tfos__rate_set(&a->forward_rate, rate,
                       rate * FORWARD_BURST_S > FORWARD_MIN_BURST ? rate * FORWARD_BURST_S : FORWARD_MIN_BURST);
    }
    if (!a->connected || tfos__link_unsent(a->link) > FORWARD_BACKLOG ||
        !tfos__rate_take(&a->forward_rate, tfos__now_ms())) {
        a->forward_dropped++;
        return;
    }
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_LOG);
    if (a->forward_dropped)
        tfos__msg_add(&m, "dropped", "%llu", (unsigned long long)a->forward_dropped);
    tfos__msg_add(&m, "line", "%.*s", (int)len, line);
    if (send_msg(a, &m) == 0)
        a->forward_dropped = 0;
}

/* LOG_ERROR: the node's log file cannot be written (once per node). */
static void send_log_error(agent *a)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_LOG_ERROR);
    tfos__msg_add(&m, "message", "%s", a->log_error);
    send_msg(a, &m);
}

/* EXITED: how the program ended (kind: exit, signal, start, owner), its
 * exit code, a description and its last lines. */
/* What the status page shows of this node, in its heartbeats and in its
 * exit report: the input ring's counters (rows written and taken, the fill,
 * the time each side slept on the other) and the program's latest report. */
static void add_progress(agent *a, tfos__msg *m)
{
    if (!a->in_ring)
        return;
    tfos__ring_stats in;
    tfos__ring_stats_get(a->in_ring, &in);
    tfos__msg_add(m, "ring_cap", "%llu", (unsigned long long)in.capacity);
    tfos__msg_add(m, "ring_used", "%llu", (unsigned long long)in.used);
    tfos__msg_add(m, "rows_in", "%llu", (unsigned long long)in.rows_in);
    tfos__msg_add(m, "rows_out", "%llu", (unsigned long long)in.rows_out);
    tfos__msg_add(m, "wait_data_ns", "%llu", (unsigned long long)in.consumer_wait_ns);
    tfos__msg_add(m, "wait_room_ns", "%llu", (unsigned long long)in.producer_wait_ns);
    tfos__msg_add(m, "feed_ended", "%d", in.feed_ended ? 1 : 0);
    tfos__msg_add(m, "reader_gone", "%d", in.consumer_closed ? 1 : 0); /* terminate(), close, or dead */
    char text[TFOS_RING_REPORT_MAX + 1];
    int64_t age = 0;
    if (tfos__ring_report_get(a->in_ring, text, sizeof text, &age) == 0) {
        tfos__msg_add(m, "report", "%s", text); /* the coordinator checks it */
        tfos__msg_add(m, "report_age_ms", "%lld", (long long)age);
    }
}

/* A HEARTBEAT with the progress, when the coordinator is there; `flag`
 * (a key sent as 1, e.g. join_ready) when not NULL. */
static void send_heartbeat_flag(agent *a, const char *flag)
{
    if (a->connected) {
        tfos__msg m;
        tfos__msg_begin(&m, TFOS_MSG_HEARTBEAT);
        if (flag)
            tfos__msg_add(&m, flag, "1");
        add_progress(a, &m);
        send_msg(a, &m);
    }
}

static void send_heartbeat(agent *a)
{
    send_heartbeat_flag(a, NULL);
}

/* The membership an in-place resize gives the program, as its
 * TFOS_RESIZE_FILE holds it (tfos.torch.ElasticGroup reads it). */
static void membership_text(char *buf, size_t len, long long gen, long long rank, long long world,
                            const char *master, const char *reason)
{
    snprintf(buf, len, "generation=%lld\nrank=%lld\nworld=%lld\nmaster=%s\nreason=%s\n", gen, rank, world, master,
             reason);
}

/* The program's first wait on its empty input ring, told to the coordinator
 * at once rather than at the next heartbeat (up to 1 s later): a Spark
 * driver's run() waits for every fed node to read before it returns, so
 * that its first train() does not share the cores with the programs' start
 * (docs/SPARK.md, "When run() returns"). A first read that took rows already
 * there is left to the heartbeats: tfos run's console takes the first count
 * after the feed's end for the whole feed. Looked at every
 * READY_POLL_FAST_MS for the first READY_FAST_FOR_MS of the program's life,
 * then every READY_POLL_SLOW_MS until READY_POLL_FOR_MS; after that the
 * heartbeats carry it. */
enum { READY_POLL_FAST_MS = 10, READY_FAST_FOR_MS = 2000, READY_POLL_SLOW_MS = 200, READY_POLL_FOR_MS = 120000 };

static void on_ready_poll(tfos__loop *l, tfos__timer *t, void *user)
{
    agent *a = user;
    if (!a->in_ring || !a->child || a->child_done)
        return;
    tfos__ring_stats in;
    tfos__ring_stats_get(a->in_ring, &in);
    if (in.rows_out > 0) /* it took rows already there: the heartbeats carry that */
        return;
    if (in.consumer_wait_ns > 0) {
        send_heartbeat(a);
        return;
    }
    int64_t now = tfos__now_ms(), age = now - a->child_started_ms;
    if (age < READY_POLL_FOR_MS)
        tfos__timer_arm(l, t, now + (age < READY_FAST_FOR_MS ? READY_POLL_FAST_MS : READY_POLL_SLOW_MS),
                        on_ready_poll, a);
}

/* A program that joined a running cluster in place (tfos run
 * --grow-in-place) writes TFOS_RESIZE_FILE + ".ready" when it is about to
 * form its group (tfos.torch.ElasticGroup): told to the coordinator at
 * once (a heartbeat with join_ready), which then has the others re-form
 * with it, so they do not wait out its start. Looked at every
 * JOIN_POLL_FAST_MS for the first JOIN_FAST_FOR_MS of the program's life
 * (a Python that imports torch is ready within seconds), then every
 * JOIN_POLL_SLOW_MS while it runs (a program that never says so). */
enum { JOIN_POLL_FAST_MS = 10, JOIN_FAST_FOR_MS = 30000, JOIN_POLL_SLOW_MS = 200 };

static void on_join_poll(tfos__loop *l, tfos__timer *t, void *user)
{
    agent *a = user;
    if (!a->child || a->child_done)
        return;
    if (access(a->join_ready_path, F_OK) == 0) {
        send_heartbeat_flag(a, "join_ready");
        return;
    }
    int64_t now = tfos__now_ms();
    tfos__timer_arm(l, t, now + (now - a->child_started_ms < JOIN_FAST_FOR_MS ? JOIN_POLL_FAST_MS : JOIN_POLL_SLOW_MS),
                    on_join_poll, a);
}

/* The time in the program's TFOS_ERROR_FILE (seconds since the epoch, as
 * its catcher wrote it: tfos's Python wrapper does), or 0: none, or one not
 * within this program's life (a clock's jump, a stray file). */
static double raised_at(agent *a)
{
    char text[64];
    int fd = a->error_path[0] && a->child_started_ms ? open(a->error_path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    double t = strtod(text, &end);
    while (*end == ' ' || *end == '\n')
        end++;
    double now = tfos__wall_s();
    double started = now - (double)(tfos__now_ms() - a->child_started_ms) / 1000;
    return *end == '\0' && t >= started - 1 && t <= now + 1 ? t : 0;
}

static void report_exit(agent *a, int code, const char *kind, const char *desc)
{
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_EXITED);
    add_progress(a, &m);
    tfos__msg_add(&m, "code", "%d", code);
    tfos__msg_add(&m, "kind", "%s", kind);
    tfos__msg_add(&m, "desc", "%s", desc);
    /* whether it ended because it was asked to stop: a node that fails by
     * itself fails the run even while the others are being stopped */
    tfos__msg_add(&m, "stopped", "%d", a->stop_asked ? 1 : 0);
    /* when it failed: the time the program wrote when it caught its failure,
     * else when its end was seen; the coordinator names the node that failed
     * first, not the one whose report came first */
    double raised = raised_at(a);
    if (raised > 0)
        tfos__msg_add(&m, "raised_at", "%.6f", raised);
    if (a->ended_at > 0)
        tfos__msg_add(&m, "ended_at", "%.6f", a->ended_at);
    int first = a->tail_count < TAIL_LINES ? 0 : a->tail_next;
    for (int i = 0; i < a->tail_count; i++)
        tfos__msg_add(&m, "tail", "%s", a->tail[(first + i) % TAIL_LINES]);
    if (send_msg(a, &m) == 0 && a->connected)
        tfos__link_flush_wait(a->link, 2000);
}

/* The node's cgroup, where the machine has a writable cgroup v2 (else the
 * process group and the subreaper stand in; see platform/cgroup.h). */
static void open_cgroup(agent *a)
{
    char name[128];
    snprintf(name, sizeof name, "tfos-%s-%d-%d", a->o->cluster_id ? a->o->cluster_id : "node", a->o->executor_id,
             (int)getpid());
    int rc = tfos__cgroup_create(name, a->cgroup, sizeof a->cgroup);
    if (rc == 0)
        a->cgroup_fd = tfos__cgroup_procs_fd(a->cgroup);
    if (rc || a->cgroup_fd < 0) {
        if (rc && rc != TFOS_EAGAIN)
            TFOS_DEBUG("agent %s: no cgroup for the node: %s", a->label, strerror(errno));
        if (rc == 0)
            rmdir(a->cgroup);
        a->cgroup[0] = '\0';
        a->cgroup_fd = -1;
    }
}

/* The guardian (roles/guard.h): this same binary, detached, waiting for us. */
static void start_guard(agent *a)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    char agent_pid[16], pgid[16];
    snprintf(agent_pid, sizeof agent_pid, "%d", (int)getpid());
    snprintf(pgid, sizeof pgid, "%d", (int)a->child);
    char *argv[] = {exe, "guard", "--agent-pid", agent_pid, "--pgid", pgid, "--cgroup", a->cgroup, NULL};
    tfos__spawn_opts so = {.argv = argv, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    if (tfos__spawn_detached(&so, &a->guard_pid))
        TFOS_WARN("agent %s: cannot start the guardian of the node's processes (%s): if this agent is killed, "
                  "what the program started may outlive it", a->label, strerror(errno));
}

static void try_end_feed(agent *a);

/* A file the agent and its program share, named after the node ("drain":
 * TFOS_DRAIN_FILE, "error": TFOS_ERROR_FILE): in the log dir, else in the
 * temp dir under the cluster, executor and agent; one left by an earlier
 * run is removed. */
static void node_file(agent *a, const tfos__node_addr *me, const char *what, char *path, size_t size)
{
    if (a->o->log_dir)
        snprintf(path, size, "%s/%s-%d.%s", a->o->log_dir, me->job, me->index, what);
    else
        snprintf(path, size, "%s/tfos-%s-%s-%d-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", what,
                 a->o->cluster_id ? a->o->cluster_id : "local", a->o->executor_id, (int)getpid());
    unlink(path);
}

/* The program cannot be started: `desc` says why (the node's exit
 * description, which the coordinator reports once), `kind` is START_PROGRAM
 * (exit code 127) or START_SETUP (exit code 1). The coordinator reports it,
 * so the agent only logs it at debug level: N nodes would say it N times. */
static void start_fails(agent *a, int kind, int code, const char *desc)
{
    TFOS_DEBUG("agent %s: %s", a->label, desc);
    snprintf(a->start_why, sizeof a->start_why, "%s", desc);
    a->start_failed = kind;
    a->child_done = 1;
    a->child_status = code << 8;
}

/* Did the program exit as a command that could not start (126, 127)? */
static int did_not_start(int st)
{
    return WIFEXITED(st) && (WEXITSTATUS(st) == START_EXIT_CANNOT_RUN || WEXITSTATUS(st) == START_EXIT_NOT_FOUND);
}

/* Did spawning fail because of the program (it is not there, or not an
 * executable: the same every time), rather than the machine (a fork out of
 * memory or processes)? */
static int exec_errno(int e)
{
    return e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG ||
           e == EISDIR || e == EPERM;
}

/* --tensorboard: the program's argv behind a shell that first starts
 * TensorBoard in the background, then execs the program. So TensorBoard is in
 * the program's process group (and cgroup), and ends with it as everything
 * the program starts does. Its output goes to <log_dir>/tensorboard.log.
 * argv[3..7] are: python, logdir, host, port, log file. NULL on failure. */
#define TENSORBOARD_SH(module)                                                                             \
    "\"$0\" -m " module " --logdir \"$1\" --host \"$2\" --port \"$3\" >\"$4\" 2>&1 </dev/null &\n"          \
    "shift 4\n"                                                                                          \
    "exec \"$@\""
static const char tensorboard_sh[] = TENSORBOARD_SH("tensorboard.main");
/* a log dir on HDFS (or another remote URL): TensorBoard reads local paths
 * only, so tfos.tensorboard follows the URL into a local copy */
static const char tensorboard_remote_sh[] = TENSORBOARD_SH("tfos.tensorboard");

static void free_tensorboard(char **tb)
{
    if (!tb)
        return;
    for (int i = 3; i < 8; i++)
        free(tb[i]);
    free(tb);
}

static char **with_tensorboard(agent *a, char *const *argv)
{
    size_t n = 0;
    while (argv[n])
        n++;
    char **tb = calloc(n + 9, sizeof *tb);
    if (!tb)
        return NULL;
    const char *dir = a->o->log_dir ? a->o->log_dir : ".";
    tb[0] = "/bin/sh";
    tb[1] = "-c";
    tb[2] = (char *)tensorboard_sh;
    tb[3] = strdup(tfos__program_python(NULL, argv));
    if (a->o->tensorboard_logdir)
        tb[4] = strdup(a->o->tensorboard_logdir);
    else if (asprintf(&tb[4], "%s/tensorboard", dir) < 0)
        tb[4] = NULL;
    tb[5] = strdup(a->host);
    if (asprintf(&tb[6], "%d", a->tb_port) < 0)
        tb[6] = NULL;
    if (asprintf(&tb[7], "%s/tensorboard.log", dir) < 0)
        tb[7] = NULL;
    for (int i = 3; i < 8; i++)
        if (!tb[i]) {
            free_tensorboard(tb);
            return NULL;
        }
    for (size_t i = 0; i < n; i++)
        tb[8 + i] = argv[i];
    if (!tfos__local_path(tb[4]))
        tb[2] = (char *)tensorboard_remote_sh;
    /* what the program writes its summaries to, on this node */
    if (tfos__local_path(tb[4]) && tfos__mkdir_p(tfos__local_path(tb[4]), 0777))
        TFOS_WARN("agent %s: cannot create TensorBoard's log dir %s: %s", a->label, tb[4], strerror(errno));
    setenv("TFOS_TENSORBOARD_LOGDIR", tb[4], 1);
    setenv("TFOS_TENSORBOARD_PORT", tb[6], 1);
    return tb;
}

static void start_program(agent *a)
{
    const tfos__node_addr *me = &a->nodes[a->self];
    snprintf(a->label, sizeof a->label, "%s:%d", me->job, me->index);
    snprintf(a->prefix, sizeof a->prefix, "[%s] ", a->label);
    if (a->logfd < 0 && open_log(a)) { /* once: a respawned program appends to the same log */
        start_fails(a, START_SETUP, 1, "could not open the node's log file");
        return;
    }
    char *const *argv = a->o->argv;
    char *ps_argv[4];
    if (!strcmp(me->job, "ps") && a->o->ps_argv) {
        /* a ps_argv of just {python} means: the built-in TF server */
        if (a->o->ps_argv[0] && !a->o->ps_argv[1]) {
            ps_argv[0] = a->o->ps_argv[0];
            ps_argv[1] = "-c";
            ps_argv[2] = (char *)builtin_ps_server;
            ps_argv[3] = NULL;
            argv = ps_argv;
            a->builtin_ps = 1;
        } else {
            argv = a->o->ps_argv;
        }
    }
    /* what no restart can fix, found before anything runs: the program is
     * not there, or a python's script is not (Python would say "can't open
     * file" and exit 2, the code of its usage errors too, so that exit says
     * nothing the policy may decide on) */
    char cannot[400];
    if (tfos_program_check(argv, cannot, sizeof cannot)) {
        start_fails(a, START_PROGRAM, errno == ENOENT ? START_EXIT_NOT_FOUND : START_EXIT_CANNOT_RUN, cannot);
        return;
    }
    /* the checkpoint dir, where it is a path on this machine, exists when
     * the program starts (on Spark nobody else made it) */
    const char *local_ckpt = tfos__local_path(a->o->checkpoint_dir);
    if (local_ckpt && tfos__mkdir_p(local_ckpt, 0777))
        TFOS_WARN("agent %s: cannot create the checkpoint dir %s: %s", a->label, a->o->checkpoint_dir,
                  strerror(errno));
    if (a->o->cluster_id && strcmp(me->job, "ps") && a->in_fd < 0 && open_feed(a)) {
        start_fails(a, START_SETUP, 1, "could not create the node's feed rings");
        return;
    }
    /* TFOS_FEED_EMPTY=1 (`tfos run` without --input): no feeder will ever
     * write, so the input ring is ended before the program starts, and its
     * readers see the end at once instead of waiting forever */
    if (a->in_fd >= 0 && a->end_feed == 0 && getenv("TFOS_FEED_EMPTY") && !strcmp(getenv("TFOS_FEED_EMPTY"), "1"))
        try_end_feed(a);
    if (!a->keras_resolved && strcmp(me->job, "ps")) {
        char why[400];
        if (tfos__keras_resolve(a->o->keras, tfos__program_python(NULL, argv), environ, &a->keras_probe,
                                &a->legacy_keras, why, sizeof why)) {
            start_fails(a, START_PROGRAM, START_EXIT_NOT_FOUND, why);
            return;
        }
        a->keras_resolved = 1;
    }
    char **tb_argv = NULL;
    if (a->o->tensorboard && strcmp(me->job, "ps")) {
        if (!(tb_argv = with_tensorboard(a, argv))) {
            start_fails(a, START_SETUP, 1, "could not set up TensorBoard");
            return;
        }
        argv = tb_argv;
    }
    /* where a drain request will be written, and where the program may say
     * when it caught its own failure: none may be there from an earlier run
     * with the same log dir (it would drain the program at once, or date
     * this run's failure from the last one) */
    node_file(a, me, "drain", a->drain_path, sizeof a->drain_path);
    node_file(a, me, "error", a->error_path, sizeof a->error_path);
    node_file(a, me, "resize", a->resize_path, sizeof a->resize_path);
    snprintf(a->join_ready_path, sizeof a->join_ready_path, "%s.ready", a->resize_path);
    unlink(a->join_ready_path);
    if (a->joined[0] && tfos__write_file_whole(a->resize_path, a->joined)) {
        char why[400];
        snprintf(why, sizeof why, "cannot write the membership it joined to %.250s: %.100s", a->resize_path,
                 strerror(errno));
        start_fails(a, START_SETUP, 1, why);
        return;
    }
    setenv("TFOS_DRAIN_FILE", a->drain_path, 1);
    setenv("TFOS_RESIZE_FILE", a->resize_path, 1);
    setenv("TFOS_ERROR_FILE", a->error_path, 1);
    tfos__ctx_env ctx = {.coord_addr = a->coord, .attempt = a->attempt, .log_dir = a->o->log_dir,
                         .secret = a->o->secret, .cluster_id = a->o->cluster_id,
                         .checkpoint_dir = a->o->checkpoint_dir, .feed_in_fd = a->in_fd,
                         .feed_out_fd = a->out_fd, .port_fd = a->o->hand_port ? a->resv_fd : -1,
                         .legacy_keras = a->legacy_keras, .max_restarts = a->o->max_restarts};
    char **env = a->compact ? tfos__spec_env_ranks(environ, a->nodes, a->n, a->self, &a->ranks, &ctx)
                            : tfos__spec_env(environ, a->nodes, a->n, a->self, &ctx);
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int rc = TFOS_ENOMEM;
    if (!env)
        goto fail;
    rc = TFOS_ESYS;
    if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0)
        goto fail;
    int keep[3], nkeep = 0;
    if (a->in_fd >= 0) {
        keep[nkeep++] = a->in_fd;
        keep[nkeep++] = a->out_fd;
    }
    if (a->o->hand_port && a->resv_fd >= 0) /* the program holds the port until it releases it */
        keep[nkeep++] = a->resv_fd;
    open_cgroup(a);
    tfos__spawn_opts so = {.argv = argv, .envp = env, .stdin_fd = -1, .stdout_fd = outp[1], .stderr_fd = errp[1],
                           .new_pgroup = 1, .pdeathsig = SIGKILL, .keep_fds = keep, .nkeep = nkeep,
                           .cgroup_procs_fd = a->cgroup_fd > 0 ? a->cgroup_fd : 0};
    rc = tfos__spawn(&so, &a->child);
    if (rc)
        goto fail;
    a->child_started_ms = tfos__now_ms();
    start_guard(a);
    /* the program has exec'd: the port is now its to bind (or, handed over,
     * its to release) */
    if (a->resv_fd >= 0)
        close(a->resv_fd);
    a->resv_fd = -1;
    close(outp[1]);
    close(errp[1]);
    tfos__env_free(env);
    a->lb[0].fd = outp[0];
    a->lb[0].out = 1;
    a->lb[1].fd = errp[0];
    a->lb[1].out = 2;
    for (int i = 0; i < 2; i++) {
        tfos__set_nonblock(a->lb[i].fd);
        if (tfos__loop_watch(a->loop, a->lb[i].fd, TFOS_EV_READ, on_pipe, &a->lb[i]))
            TFOS_WARN("agent %s: cannot watch the program's output: %s", a->label, strerror(errno));
    }
    tfos__msg m;
    tfos__msg_begin(&m, TFOS_MSG_STARTED);
    tfos__msg_add(&m, "pid", "%d", (int)a->child);
    send_msg(a, &m);
    if (a->in_ring)
        tfos__timer_arm(a->loop, &a->ready_timer, a->child_started_ms + READY_POLL_FAST_MS, on_ready_poll, a);
    if (a->joined[0])
        tfos__timer_arm(a->loop, &a->join_timer, a->child_started_ms + JOIN_POLL_FAST_MS, on_join_poll, a);
    TFOS_DEBUG("agent %s: started %s (pid %d)", a->label, argv[0], (int)a->child);
    if (tb_argv) {
        char line[TFOS_HOST_MAX + PATH_MAX + 64];
        int n = snprintf(line, sizeof line, "tfos: TensorBoard at http://%s:%d/ (logdir %s)", a->host, a->tb_port,
                         tb_argv[4]);
        emit_line(a, 2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        free_tensorboard(tb_argv);
    }
    return;
fail:;
    int e = errno;
    char desc[300];
    if (rc == TFOS_ESYS)
        snprintf(desc, sizeof desc, "could not start '%s': %s", argv[0], strerror(e));
    else
        snprintf(desc, sizeof desc, "could not start '%s': %s", argv[0], tfos_strerror(rc));
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    tfos__env_free(env);
    free_tensorboard(tb_argv);
    if (rc == TFOS_ESYS && exec_errno(e))
        start_fails(a, START_PROGRAM, e == ENOENT ? START_EXIT_NOT_FOUND : START_EXIT_CANNOT_RUN, desc);
    else /* a fork or pipe the machine could not give now */
        start_fails(a, START_SETUP, 1, desc);
}

/* Try once to end the input feed (never waits): the ring may be full, or a
 * producer may hold its lock inside a partition; then try again later. */

static void on_end_feed_retry(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    agent *a = user;
    if (a->end_feed == 1 && !a->kill_deadline && !a->child_done) /* not once stopping */
        try_end_feed(a);
}

static void try_end_feed(agent *a)
{
    int rc = 0;
    if (!a->feed_producer)
        rc = tfos__ring_attach(&a->feed_producer, a->in_fd, TFOS_RING_PRODUCER);
    if (rc == 0)
        rc = tfos__ring_end_feed(a->feed_producer, 0);
    if (rc == TFOS_EFULL || rc == TFOS_EAGAIN || rc == TFOS_ETIMEDOUT) {
        a->end_feed = 1;
        tfos__timer_arm(a->loop, &a->end_feed_timer, tfos__now_ms() + END_FEED_RETRY_MS, on_end_feed_retry, a);
        return;
    }
    a->end_feed = 2;
    if (rc == 0)
        TFOS_DEBUG("agent %s: ended the input feed as the coordinator asked", a->label);
    else /* e.g. the program closed its end of the feed: nothing left to end */
        TFOS_DEBUG("agent %s: cannot end the input feed: %s", a->label, tfos_strerror(rc));
}

/* Open a pidfd on the owner, or check that it exists when pidfds are not
 * available (kernel < 5.3, or filtered): then it is polled with kill(). */
static int watch_owner(agent *a)
{
    pid_t pid = (pid_t)a->o->watch_pid;
    int gone = 0;
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, pid, 0); /* close-on-exec by definition */
    if (fd >= 0) {
        a->owner_fd = fd;
        return 0;
    }
    gone = errno == ESRCH;
#endif
    if (!gone)
        gone = kill(pid, 0) < 0 && errno == ESRCH;
    if (gone) {
        TFOS_ERROR("agent %d: the process to watch (--watch-pid %d) does not exist: the Spark executor that "
                   "started this node is already gone", a->o->executor_id, (int)pid);
        return TFOS_EINVAL;
    }
    return 0;
}

static void stop_for_owner(agent *a)
{
    TFOS_ERROR("agent %s: its Spark executor (pid %d) is gone; stopping the program", a->label, a->o->watch_pid);
    a->owner_stop = 1;
    begin_stop(a, OWNER_GRACE_MS, "its Spark executor is gone");
}

static void on_owner_deadline(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)l;
    (void)t;
    agent *a = user;
    if (a->child && !a->child_done)
        stop_for_owner(a);
}

/* The owner is gone. Returns 1 when the agent should end now (no program).
 * During a drain the program keeps the rest of the drain's grace to write
 * its checkpoint at the drain step: Spark ends a decommissioned executor
 * that runs no task within seconds (its node's feed task may be over),
 * while the drain's grace was given for the node (docs/RELIABILITY.md). */
static int owner_lost(agent *a)
{
    a->owner_gone = 1;
    if (a->owner_fd >= 0) {
        close(a->owner_fd);
        a->owner_fd = -1;
    }
    if (a->child_done) /* the program is over already: report it as it ended */
        return 0;
    if (!a->child) {
        TFOS_ERROR("agent %d: its Spark executor (pid %d) is gone before the cluster formed; exiting",
                   a->o->executor_id, a->o->watch_pid);
        a->error_exit = 1;
        return 1;
    }
    int64_t now = tfos__now_ms();
    if (a->drain_until > now) {
        TFOS_WARN("agent %s: its Spark executor (pid %d) is gone during a drain; the program has the drain's "
                  "%lld ms left to checkpoint, then is stopped", a->label, a->o->watch_pid,
                  (long long)(a->drain_until - now));
        tfos__timer_arm(a->loop, &a->owner_timer, a->drain_until, on_owner_deadline, a);
        return 0;
    }
    stop_for_owner(a);
    return 0;
}

/* Returns 1 when the agent should end. */
static int handle_frame(agent *a, const tfos__frame *f)
{
    switch (f->type) {
    case TFOS_MSG_SPEC: {
        if (a->nodes)
            return 0; /* one spec per attempt */
        long long self, attempt = 1;
        if (tfos__kv_int(f->payload, f->len, "self", 0, 4095, &self)) {
            TFOS_ERROR("agent %d: cluster spec without a valid 'self'", a->o->executor_id);
            return 1;
        }
        tfos__kv_int(f->payload, f->len, "attempt", 1, 1 << 20, &attempt);
        tfos__kv_str(f->payload, f->len, "coord", a->coord, sizeof a->coord);
        size_t pos = 0, kl, vl;
        const char *k, *v;
        int count = 0;
        while (tfos__kv_next(f->payload, f->len, &pos, &k, &kl, &v, &vl) == 0)
            if (kl == 4 && !memcmp(k, "node", 4))
                count++;
        if (count == 0 || self >= count) {
            TFOS_ERROR("agent %d: cluster spec lists %d nodes but says this is node %lld", a->o->executor_id,
                       count, self);
            return 1;
        }
        a->nodes = calloc((size_t)count, sizeof *a->nodes);
        if (!a->nodes)
            return 1;
        pos = 0;
        int i = 0;
        while (tfos__kv_next(f->payload, f->len, &pos, &k, &kl, &v, &vl) == 0) {
            if (kl != 4 || memcmp(k, "node", 4))
                continue;
            if (parse_node(v, vl, &a->nodes[i++])) {
                TFOS_ERROR("agent %d: malformed node line in the cluster spec", a->o->executor_id);
                return 1;
            }
        }
        a->n = count;
        a->self = (int)self;
        a->attempt = (int)attempt;
        char form[16] = "";
        tfos__kv_str(f->payload, f->len, "form", form, sizeof form);
        if (!strcmp(form, "ranks")) {
            long long nn, world, rank, lr, lw, master;
            if (tfos__kv_int(f->payload, f->len, "nodes", 1, 1 << 24, &nn) ||
                tfos__kv_int(f->payload, f->len, "world", 0, nn, &world) ||
                tfos__kv_int(f->payload, f->len, "rank", -1, world - 1, &rank) ||
                tfos__kv_int(f->payload, f->len, "local_rank", 0, nn, &lr) ||
                tfos__kv_int(f->payload, f->len, "local_world", 0, nn, &lw) ||
                tfos__kv_int(f->payload, f->len, "master", -1, count - 1, &master)) {
                TFOS_ERROR("agent %d: malformed ranks in the cluster spec", a->o->executor_id);
                return 1;
            }
            a->compact = 1;
            a->ranks = (tfos__spec_ranks){.nodes = (int)nn, .world = (int)world, .rank = (int)rank,
                                          .local_rank = (int)lr, .local_world = (int)lw, .master = (int)master};
            long long gen = 0;
            if (!tfos__kv_int(f->payload, f->len, "generation", 1, INT32_MAX, &gen) && master >= 0 && rank >= 0) {
                /* it joins a running cluster in place: the program forms its
                 * group in that generation (tfos.torch.ElasticGroup reads it) */
                const tfos__node_addr *m = &a->nodes[master];
                char at[TFOS_HOST_MAX + 16];
                membership_text(a->joined, sizeof a->joined, gen, rank, world,
                                tfos__format_hostport(at, sizeof at, m->host, m->port), "joined in place");
            }
        } else if (form[0]) {
            TFOS_ERROR("agent %d: the cluster spec's form '%s' is not known to this agent (an older tfos?)",
                       a->o->executor_id, form);
            return 1;
        }
        if (a->nodes[self].executor_id != a->o->executor_id) {
            TFOS_ERROR("agent %d: the cluster spec is for executor %d", a->o->executor_id,
                       a->nodes[self].executor_id);
            return 1;
        }
        start_program(a);
        return 0;
    }
    case TFOS_MSG_STOP: {
        long long grace = 5000;
        tfos__kv_int(f->payload, f->len, "grace_ms", 0, 3600 * 1000, &grace);
        char reason[256] = "asked by the coordinator";
        tfos__kv_str(f->payload, f->len, "reason", reason, sizeof reason);
        if (!a->child || a->child_done)
            return a->child_done ? 0 : 1;
        begin_stop(a, (int)grace, reason);
        return 0;
    }
    case TFOS_MSG_ERROR: {
        char text[4096] = "(no message)";
        tfos__kv_str(f->payload, f->len, "message", text, sizeof text);
        TFOS_ERROR("agent %d: coordinator: %s", a->o->executor_id, text);
        a->error_exit = 1;
        if (!a->child || a->child_done)
            return 1;
        begin_stop(a, 2000, text);
        return 0;
    }
    case TFOS_MSG_DRAIN: {
        long long step = -1, grace = 0;
        char reason[256] = "", text[400];
        tfos__kv_int(f->payload, f->len, "step", -1, INT64_MAX, &step);
        tfos__kv_int(f->payload, f->len, "grace_ms", 0, INT64_MAX, &grace);
        tfos__kv_str(f->payload, f->len, "reason", reason, sizeof reason);
        if (!a->drain_path[0] || a->child_done)
            return 0; /* no program to tell */
        snprintf(text, sizeof text, "step=%lld\ngrace_ms=%lld\nreason=%s\n", step, grace, reason);
        if (tfos__write_file_whole(a->drain_path, text))
            TFOS_ERROR("agent %s: cannot write the drain request to %s: %s; the program will be stopped at the "
                       "grace's end", a->label, a->drain_path, strerror(errno));
        else
            TFOS_DEBUG("agent %s: drain: checkpoint at step %lld (%s)", a->label, step, a->drain_path);
        a->drain_until = grace > 0 ? tfos__now_ms() + grace : 0;
        return 0;
    }
    case TFOS_MSG_RESIZE: {
        /* the cluster went on in place without a lost worker: the program's
         * new place in it (tfos.torch.ElasticGroup reads it), written whole */
        long long gen = 0, rank = -1, world = 0;
        char master[TFOS_HOST_MAX + 16] = "", reason[300] = "", text[800];
        tfos__kv_int(f->payload, f->len, "generation", 1, INT32_MAX, &gen);
        tfos__kv_int(f->payload, f->len, "rank", 0, INT32_MAX, &rank);
        tfos__kv_int(f->payload, f->len, "world", 1, INT32_MAX, &world);
        tfos__kv_str(f->payload, f->len, "master", master, sizeof master);
        tfos__kv_str(f->payload, f->len, "reason", reason, sizeof reason);
        if (!a->resize_path[0] || a->child_done || gen < 1 || rank < 0 || rank >= world || !master[0])
            return 0;
        membership_text(text, sizeof text, gen, rank, world, master, reason);
        if (tfos__write_file_whole(a->resize_path, text))
            TFOS_ERROR("agent %s: cannot write the new membership to %s: %s", a->label, a->resize_path,
                       strerror(errno));
        else
            TFOS_INFO("agent %s: the cluster goes on in place: rank %lld of %lld (%s)", a->label, rank, world, reason);
        return 0;
    }
    case TFOS_MSG_PROGRESS:
        /* the coordinator chooses a drain step from the program's latest
         * report, or a feed task waits for its turn on whether this node
         * reads: now, not at the next beat */
        TFOS_DEBUG("agent %s: the coordinator asks for the node's progress now", a->label);
        send_heartbeat(a);
        return 0;
    case TFOS_MSG_END_FEED:
        if (a->in_fd < 0)
            TFOS_DEBUG("agent %s: asked to end the feed, but this node has no feed", a->label);
        else if (a->end_feed == 0)
            try_end_feed(a);
        return 0;
    default:
        return 0;
    }
}

static int connect_and_register(agent *a)
{
    const tfos_agent_opts *o = a->o;
    int64_t deadline = tfos__now_ms() + (int64_t)((o->connect_timeout > 0 ? o->connect_timeout : TFOS_DEFAULT_CONNECT_TIMEOUT) * 1000);
    char err[512];
    /* A coordinator under a flood of junk connections may drop us before it
     * greets us: try again, backing off, until the deadline. */
    int rc, tries = 0, backoff_ms = 100;
    for (;;) {
        int64_t attempt_deadline = tfos__now_ms() + 5000;
        if (attempt_deadline > deadline)
            attempt_deadline = deadline;
        rc = tfos__coord_dial(&a->link, o->coord_addr, attempt_deadline, 1, 1000, err, sizeof err);
        tries++;
        if (rc == 0 || rc == TFOS_EINVAL || tfos__now_ms() + backoff_ms >= deadline)
            break;
        TFOS_DEBUG("agent %d: %s; trying again in %d ms", o->executor_id, err, backoff_ms);
        struct timespec ts = {backoff_ms / 1000, (long)(backoff_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (backoff_ms < 2000)
            backoff_ms *= 2;
    }
    a->connected = a->link != NULL;
    int64_t hello_ms = tfos__now_ms() - a->born_ms; /* connected and greeted */
    if (rc) {
        TFOS_ERROR("agent %d: %s (after %d tries)", o->executor_id, err, tries);
        return rc;
    }
    tfos__msg m;
    tfos__link_hello(a->link, &m, TFOS_MSG_REGISTER, o->secret);
    tfos__msg_add(&m, "executor_id", "%d", o->executor_id);
    tfos__msg_add(&m, "t_hello", "%lld", (long long)hello_ms);
    char local[TFOS_HOST_MAX] = "127.0.0.1";
    if (o->host && strcmp(o->host, "auto"))
        snprintf(local, sizeof local, "%s", o->host);
    else if (o->host) {
        /* auto: the address this host reaches the coordinator from, which
         * the other nodes can reach it at too (YARN containers, tfos yarn) */
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(tfos__link_fd(a->link), (struct sockaddr *)&ss, &sl) ||
            getnameinfo((struct sockaddr *)&ss, sl, local, sizeof local, NULL, 0, NI_NUMERICHOST))
            TFOS_WARN("agent %d: cannot tell this host's address (%s); registering 127.0.0.1", o->executor_id,
                      strerror(errno));
    }
    snprintf(a->host, sizeof a->host, "%s", local);
    tfos__msg_add(&m, "host", "%s", local);
    tfos__msg_add(&m, "port", "%d", a->port);
    tfos__msg_add(&m, "pid", "%d", (int)getpid());
    if (a->tb_port > 0)
        tfos__msg_add(&m, "tb_port", "%d", a->tb_port);
    /* the Spark executor this node runs for (tfos.TFCluster sets it): a
     * feed task there that finds no node asks the coordinator whether its
     * own node ended, not any node of its host */
    const char *key = getenv("TFOS_EXECUTOR_KEY");
    if (key && strlen(key) < 64 && tfos__plain_name(key))
        tfos__msg_add(&m, "executor_key", "%s", key); /* else none: the coordinator refuses other names */
    if (o->join)
        tfos__msg_add(&m, "join", "1");
    tfos__msg_add(&m, "t_register", "%lld", (long long)(tfos__now_ms() - a->born_ms));
    return send_msg(a, &m);
}

/* ---- the agent's loop callbacks ------------------------------------------ */

static void on_pipe(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    (void)fd;
    (void)events;
    linebuf *lb = user;
    pump(lb->a, lb);
}

/* Nothing the ended program started may outlive it: its process group, its
 * cgroup (children that called setsid), and every orphan we adopted as
 * subreaper, reaped; then its pipes, which they may have held open, are read
 * to their end (2 s at most). At the agent's end, and before a respawn. */
static void end_leftovers(agent *a)
{
    kill(-a->child, SIGKILL);
    if (a->cgroup[0] && tfos__cgroup_destroy(a->cgroup, 2000))
        TFOS_WARN("agent %s: the node's cgroup %s did not empty in time", a->label, a->cgroup);
    if (a->guard_pid > 0) {
        /* its watch is over; ended first, an agent whose program left
         * nothing behind has no child left, and tfos__kill_orphans skips
         * its scan of every process (quadratic with a thousand agents) */
        kill(a->guard_pid, SIGKILL);
        while (waitpid(a->guard_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        a->guard_pid = 0;
    }
    tfos__kill_orphans(0);
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    int64_t drain_until = tfos__now_ms() + 2000;
    for (int i = 0; i < 2; i++)
        while (a->lb[i].fd >= 0 && tfos__now_ms() < drain_until) {
            struct pollfd p = {.fd = a->lb[i].fd, .events = POLLIN};
            if (poll(&p, 1, tfos__ms_left(drain_until, -1)) > 0)
                pump(a, &a->lb[i]);
        }
}

/* tfos_agent_opts.respawn: the program ended with status st; if it failed
 * after running long enough, and restarts are left, and nobody is stopping
 * it, end what it left behind and start it again; 1 if it was. */
static int respawn(agent *a, int st)
{
    int64_t ran = tfos__now_ms() - a->child_started_ms;
    if (a->respawns >= a->o->respawn || a->kill_deadline || a->owner_stop || a->hung || !a->connected ||
        (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || did_not_start(st))) || ran < TFOS_RESPAWN_MIN_UPTIME_MS)
        return 0;
    a->respawns++;
    end_leftovers(a);
    if (a->cgroup_fd >= 0) /* start_program makes the next program a new cgroup */
        close(a->cgroup_fd);
    a->cgroup_fd = -1;
    a->cgroup[0] = '\0';
    for (int i = 0; i < 2; i++)
        if (a->lb[i].fd >= 0) {
            tfos__loop_unwatch(a->loop, a->lb[i].fd);
            close(a->lb[i].fd);
            a->lb[i].fd = -1;
            a->lb[i].len = 0;
        }
    char desc[96], line[256];
    tfos__describe_status(st, desc, sizeof desc);
    int n = snprintf(line, sizeof line, "tfos: the program failed (%s) after %.1f s; starting it again here, alone "
                     "(%d of %d)", desc, (double)ran / 1000, a->respawns, a->o->respawn);
    emit_line(a, 2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    start_program(a);
    return !a->child_done;
}

static void on_signal(tfos__loop *l, int fd, int events, void *user)
{
    (void)l;
    (void)events;
    agent *a = user;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            /* the program, or an orphan of its that we adopted as subreaper */
            int st;
            pid_t r;
            while ((r = waitpid(-1, &st, WNOHANG)) > 0)
                if (!tfos__keras_probe_reaped(&a->keras_probe, r, st) && r == a->child && !a->child_done &&
                    !respawn(a, st))
                    program_ended(a, st);
            continue;
        }
        TFOS_DEBUG("agent %d: got signal %d", a->o->executor_id, (int)si.ssi_signo);
        if (!a->child || a->child_done) {
            a->error_exit = 128 + (int)si.ssi_signo;
            a->done = 1;
            return;
        }
        begin_stop(a, 2000, "the agent was signalled");
    }
}

static void on_owner(tfos__loop *l, int fd, int events, void *user)
{
    (void)events;
    agent *a = user;
    tfos__loop_unwatch(l, fd);
    if (owner_lost(a))
        a->done = 1;
}

static void on_coord_frame(tfos__link *k, const tfos__frame *f, void *user);
static void on_coord_close(tfos__link *k, int rc, const char *why, void *user);
static const tfos__link_cb coord_cb = {on_coord_frame, on_coord_close};

/* Register again after the coordinator hung up without a word (see
 * lost_coordinator); connect_and_register has its own deadline. */
static void on_redial(tfos__loop *l, tfos__timer *t, void *user)
{
    (void)t;
    agent *a = user;
    if (a->done)
        return;
    if (connect_and_register(a) == 0 && tfos__link_start(a->link, l, &coord_cb, a) == 0)
        return;
    if (a->link)
        tfos__link_close(a->link);
    a->link = NULL;
    a->connected = 0;
    TFOS_ERROR("agent %d: lost the coordinator before the cluster formed, and could not register again",
               a->o->executor_id);
    a->error_exit = 1;
    a->done = 1;
}

/* The link to the coordinator is gone (and freed when this returns). */
static void lost_coordinator(agent *a)
{
    a->link = NULL;
    a->connected = 0;
    if (!a->child && !a->heard && a->redials < AGENT_REDIALS) {
        /* Hung up on before a single answer: a coordinator whose every
         * place for unauthenticated peers is taken drops the oldest
         * (core/link.h), which may be us if we answered its greeting
         * late (a machine starting hundreds of nodes). A refusal comes
         * with an ERROR first, so this is never a wrong secret. Register
         * again, backing off. */
        int backoff = 200 << a->redials++;
        TFOS_DEBUG("agent %d: the coordinator hung up before answering; registering again in %d ms",
                   a->o->executor_id, backoff);
        tfos__timer_arm(a->loop, &a->redial_timer, tfos__now_ms() + backoff, on_redial, a);
        return;
    }
    if (!a->child) {
        TFOS_ERROR("agent %d: lost the coordinator before the cluster formed", a->o->executor_id);
        a->error_exit = 1;
        a->done = 1;
    } else if (!a->child_done) {
        TFOS_ERROR("agent %s: lost the coordinator; stopping the program", a->label);
        begin_stop(a, 2000, "coordinator lost");
    }
}

/* A frame from the coordinator. */
static void on_coord_frame(tfos__link *k, const tfos__frame *f, void *user)
{
    (void)k;
    agent *a = user;
    if (a->done) /* ending: what else comes is not read */
        return;
    a->heard = 1;
    if (handle_frame(a, f)) {
        if (!a->error_exit)
            a->error_exit = 1;
        a->done = 1;
    }
}

/* The coordinator hung up, or sent something that is not a frame. */
static void on_coord_close(tfos__link *k, int rc, const char *why, void *user)
{
    (void)k;
    agent *a = user;
    if (rc == TFOS_EPROTO || rc == TFOS_ETOOBIG)
        TFOS_ERROR("agent %d: bad frame from the coordinator: %s", a->o->executor_id, why ? why : tfos_strerror(rc));
    lost_coordinator(a);
}

/* The hang watchdog, every heartbeat: progress is the program reading its
 * feed, writing results, or beating (ctx.heartbeat()); a program asleep on
 * an empty feed is waiting for its producers, not hung. No progress for
 * --hang-timeout: dump its stacks (faulthandler prints every thread on
 * SIGABRT; SIGCONT first, in case it is stopped) and end it; its exit is
 * reported as a hang. */
static void watch_progress(agent *a)
{
    if (a->o->hang_timeout <= 0 || !a->child || a->child_done || a->hung || a->kill_deadline || !a->in_ring)
        return;
    tfos__ring_stats in, out;
    tfos__ring_stats_get(a->in_ring, &in);
    tfos__ring_stats_get(a->out_ring, &out);
    int64_t now = tfos__now_ms();
    if (!a->progress_at || in.consumed != a->seen_consumed || in.progress != a->seen_progress ||
        out.bytes != a->seen_results || (in.consumer_waiting && in.used == 0)) {
        a->seen_consumed = in.consumed;
        a->seen_progress = in.progress;
        a->seen_results = out.bytes;
        a->progress_at = now;
        return;
    }
    if (now - a->progress_at < (int64_t)(a->o->hang_timeout * 1000))
        return;
    a->hung = 1;
    TFOS_ERROR("agent %s: the program (pid %d) made no progress for %g s (it read no feed and did not call "
               "ctx.heartbeat()): it is hung; dumping its stacks and ending it", a->label, (int)a->child,
               a->o->hang_timeout);
    kill(-a->child, SIGCONT);
    kill(a->child, SIGABRT);
    /* no SIGTERM: it could cut the dump short; SIGKILL if the dump does not end it */
    a->kill_deadline = now + 3000;
    tfos__timer_arm(a->loop, &a->kill_timer, a->kill_deadline, on_kill_deadline, a);
}

/* Every TFOS_HEARTBEAT_INTERVAL_MS: beat, check an owner that has no pidfd,
 * and watch for a hung program. */
static void on_heartbeat(tfos__loop *l, tfos__timer *t, void *user)
{
    agent *a = user;
    tfos__timer_arm(l, t, tfos__now_ms() + TFOS_HEARTBEAT_INTERVAL_MS, on_heartbeat, a);
    watch_progress(a);
    if (a->o->watch_pid > 0 && a->owner_fd < 0 && !a->owner_gone && kill((pid_t)a->o->watch_pid, 0) < 0 &&
        errno == ESRCH && owner_lost(a)) {
        a->done = 1;
        return;
    }
    send_heartbeat(a);
}

static void agent_loop(agent *a)
{
    tfos__loop_watch(a->loop, a->sfd, TFOS_EV_READ, on_signal, a);
    if (a->connected && tfos__link_start(a->link, a->loop, &coord_cb, a)) {
        tfos__link_close(a->link);
        lost_coordinator(a);
    }
    if (a->owner_fd >= 0) /* a pidfd is readable once its process has exited */
        tfos__loop_watch(a->loop, a->owner_fd, TFOS_EV_READ, on_owner, a);
    tfos__timer_arm(a->loop, &a->hb_timer, tfos__now_ms() + TFOS_HEARTBEAT_INTERVAL_MS, on_heartbeat, a);
    while (!a->done && !a->child_done) {
        if (tfos__loop_run(a->loop, -1) < 0 && errno != EINTR) {
            TFOS_ERROR("agent %d: event loop failed: %s", a->o->executor_id, strerror(errno));
            break;
        }
    }
}

int tfos_agent_run(const tfos_agent_opts *o, int *exit_code)
{
    if (!o || !o->coord_addr || !o->secret || !o->argv || !o->argv[0] || o->executor_id < 0 || o->watch_pid < 0 ||
        o->tensorboard_port < 0 || o->tensorboard_port > 65535)
        return TFOS_EINVAL;
    agent a;
    memset(&a, 0, sizeof a);
    a.o = o;
    a.sfd = a.resv_fd = a.logfd = -1;
    a.in_fd = a.out_fd = a.owner_fd = -1;
    a.lb[0].fd = a.lb[1].fd = -1;
    a.lb[0].a = a.lb[1].a = &a;
    a.cgroup_fd = -1;
    /* orphans of the program are re-parented to us, not to init, so we can
     * end them (and reap them) */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* a hung Python program dumps every thread's stack on SIGABRT */
    if (o->hang_timeout > 0)
        setenv("PYTHONFAULTHANDLER", "1", 0);
    snprintf(a.label, sizeof a.label, "executor %d", o->executor_id);
    a.born_ms = tfos__now_ms();
    *exit_code = 1;

    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &old);
    int rc = tfos__loop_open(&a.loop);
    if (rc)
        goto out;
    rc = TFOS_ESYS;
    a.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (a.sfd < 0)
        goto out;
    if (o->watch_pid > 0 && (rc = watch_owner(&a)))
        goto out;
    rc = tfos__reserve_port(&a.resv_fd, &a.port);
    if (rc) {
        TFOS_ERROR("agent %d: cannot reserve a port: %s", o->executor_id, strerror(errno));
        goto out;
    }
    a.tb_port = o->tensorboard_port;
    if (o->tensorboard && a.tb_port <= 0) {
        /* a free port now, TensorBoard's when the program starts (announced
         * at registration, as TFCluster's nodes do) */
        int tb_fd;
        if ((rc = tfos__reserve_port(&tb_fd, &a.tb_port))) {
            TFOS_ERROR("agent %d: cannot find a port for TensorBoard: %s", o->executor_id, strerror(errno));
            goto out;
        }
        close(tb_fd);
    }
    /* the Keras probe runs while the cluster forms: once the spec comes,
     * the program starts without waiting for a Python to start and answer */
    tfos__keras_probe_start(&a.keras_probe, o->keras, tfos__program_python(NULL, o->argv), environ);
    rc = connect_and_register(&a);
    if (rc)
        goto out;
    agent_loop(&a);
    if (a.child > 0) {
        if (!a.child_done) {
            /* leaving early (signal, coordinator lost): make sure it is gone */
            kill(-a.child, SIGKILL);
            if (tfos__wait_pid(a.child, 5000, &a.child_status) == 0) {
                a.child_done = 1;
                a.ended_at = tfos__wall_s();
            }
        }
        end_leftovers(&a);
    }
    if (a.child_done) {
        char desc[sizeof a.start_why];
        *exit_code = tfos__exit_code(a.child_status);
        const char *kind = a.start_failed == START_SETUP ? "setup"
                           : a.start_failed || did_not_start(a.child_status) ? "start"
                           : a.owner_stop                 ? "owner"
                           : a.hung                       ? "hang"
                           : WIFSIGNALED(a.child_status) ? "signal"
                                                          : "exit";
        if (a.start_failed)
            snprintf(desc, sizeof desc, "%s", a.start_why);
        else if (did_not_start(a.child_status) && a.builtin_ps)
            snprintf(desc, sizeof desc, "exit code %d: the built-in parameter server could not start", *exit_code);
        else if (did_not_start(a.child_status))
            snprintf(desc, sizeof desc, "exit code %d: %s", *exit_code,
                     WEXITSTATUS(a.child_status) == START_EXIT_NOT_FOUND
                         ? "a command it runs was not found (the shells' code), so it could not start"
                         : "a command it runs could not be executed (the shells' code), so it could not start");
        else if (a.hung)
            snprintf(desc, sizeof desc, "hung: no progress for %g s (its stacks are in its last lines)",
                     o->hang_timeout);
        else if (a.owner_stop)
            snprintf(desc, sizeof desc, "its Spark executor (pid %d) is gone", o->watch_pid);
        else
            tfos__describe_status(a.child_status, desc, sizeof desc);
        /* stopped from outside, the node did not finish, whatever the
         * program's own exit code */
        if (a.owner_stop && *exit_code == 0)
            *exit_code = 1;
        report_exit(&a, *exit_code, kind, desc);
        TFOS_DEBUG("agent %s: program ended: %s", a.label, desc);
    } else {
        *exit_code = a.error_exit ? a.error_exit : 1;
    }
    rc = 0;
out:
    if (a.drain_path[0])
        unlink(a.drain_path);
    if (a.resize_path[0])
        unlink(a.resize_path);
    if (a.join_ready_path[0])
        unlink(a.join_ready_path);
    if (a.error_path[0])
        unlink(a.error_path);
    for (int i = 0; i < 2; i++)
        if (a.lb[i].fd >= 0)
            close(a.lb[i].fd);
    tfos__link_close(a.link);
    if (a.resv_fd >= 0)
        close(a.resv_fd);
    if (a.logfd >= 0)
        close(a.logfd);
    if (a.sfd >= 0)
        close(a.sfd);
    tfos__feed_server_close(a.feed_server);
    if (a.cgroup_fd >= 0)
        close(a.cgroup_fd);
    if (a.in_fd >= 0)
        close(a.in_fd);
    if (a.out_fd >= 0)
        close(a.out_fd);
    if (a.owner_fd >= 0)
        close(a.owner_fd);
    tfos__ring_close(a.feed_producer);
    tfos__ring_close(a.in_ring);
    tfos__ring_close(a.out_ring);
    free(a.nodes);
    tfos__loop_close(a.loop);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}
