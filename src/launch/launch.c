/* launch.c: the launcher (launch.h): a whole cluster on this machine or, with
 * another backend, from it; `tfos run`, `tfos serve` and tfos yarn's
 * ApplicationMaster are built on it.
 *
 * The launcher owns one event loop and registers everything with it: the
 * coordinator of the current attempt, the HTTP server (the status page's
 * routes, and those of whatever attached), the backend's watch on each node,
 * the feed (feed/feedrun.c) and a one-second timer for the meter. It sleeps
 * until one of them has something to say.
 *
 * It starts one agent (`tfos node …`) per node through its backend
 * (backend.h): a local child, or a YARN container's stand-in. The secret
 * travels to agents in their environment, never on a command line.
 *
 * Restarts. The launcher owns the run's tfos_policy and hands it to each
 * attempt's coordinator, which asks it when the attempt fails; the launcher
 * only acts on the answer (tfos_coord_decision): re-form the cluster with
 * fresh agents, a fresh coordinator and cluster id, or finish. */
#include "launch/launch.h"

#include "core/auth.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/spec.h"
#include "feed/feedrun.h"
#include "feed/input.h"
#include "feed/position.h"
#include "platform/clock.h"
#include "platform/fs.h"
#include "platform/proc.h"
#include "roles/coord.h"
#include "track/tracker.h"
#include "tfos/tfos.h"
#include "web/http.h"
#include "web/status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_ENV_EXTRA 8
/* An elastic run grows when its standbys have stopped coming for this long
 * (or all are back): one resize for capacity that returns in a burst. */
#define STANDBY_SETTLE_MS 3000
/* --grow-in-place: the workers started in one lost worker's place in an
 * attempt, at most (one whose program cannot join fails again: bounded) */
#define JOIN_TRIES 3

struct tfos_local {
    tfos_run_opts opts;
    tfos__launch_opts lopts;
    const tfos__backend_ops *ops;
    void *backend;           /* the attempt's (ops->open); NULL between attempts */
    tfos__loop *loop;
    tfos_policy *policy;
    tfos_coord *coord;
    char secret[TFOS_HEX_SECRET_LEN + 1];
    char cluster_id[17];
    char log_dir[4096];
    char checkpoint_dir[4200];
    int n;                   /* this attempt's nodes (fewer than full_n after an elastic resize) */
    int full_n;              /* the nodes asked for */
    int slots;               /* the backend's ids 0..slots-1 (2 full_n): nodes 0..n-1, standbys past n */
    int live;                /* this attempt's nodes still in it (n, less those an in-place resize lost) */
    tfos_layout full;        /* their layout; opts.layout is this attempt's (fewer workers) */
    int elastic;             /* 0 < min_nodes < full_n (tfos_run_opts.min_nodes) */
    int64_t attempt_at;      /* when this attempt began: its elastic wait counts from then */
    int standbys;            /* standby nodes started this attempt */
    int extra_ids;           /* backend ids past n used this attempt (standbys, joiners): n..n+extra_ids-1 */
    /* --grow-in-place (tfos_run_opts.grow_in_place), per executor id: */
    int *backend_of;         /* the backend id of the agent that holds its slot now (its own, or a joiner's) */
    int *vacant;             /* it left the cluster in place, and no worker has joined into its slot since */
    int *joiner;             /* the backend id of the worker started to join into it; -1: none */
    int *join_tries;         /* workers started to join into it this attempt */
    int growing;             /* the drain under way grows the cluster by this many (standbys with capacity) */
    int lost;                /* the drain's notice takes this many workers away (tfos__launch_lost) */
    int standbys_back;       /* standbys connected when last looked at, and since when (a grow waits */
    int64_t standbys_at;     /* STANDBY_SETTLE_MS for more to come, to grow once, not node by node) */
    int grow_refused;        /* a drain to grow could not start: said once an attempt */
    int *ended;              /* per node: its end has been seen (this attempt) */
    int started;             /* tfos__launch_start was called */
    int stop_signo;
    int64_t agents_deadline; /* after the coordinator ended: reap agents by then */
    int64_t killed_deadline; /* agents past that were killed: wait for them until then */
    int64_t settle_until;    /* a node ended by SIGTERM: the restart waits until then (conclude) */
    int finished;
    int exit_code;
    tfos__feedrun *feed;
    tfos__position resume;   /* where this attempt's feed resumes (saved feed positions) */
    double started_s;        /* the run's start: older feed positions are not this run's */
    double positions_since;  /* feed positions count from then: started_s, or the first drained run's start */
    int resumed;             /* a drained run left its marker: attempt 1 resumes the feed too */
    int draining;            /* a drain was asked (tfos_local_drain) */
    tfos__feed_meter meter;
    tfos__timer meter_timer;
    int64_t consumed_line_at; /* the last "trainers have consumed" line */
    char *history;           /* the policy's history, rendered for the summary */
    char summary[12288];
    char env_secret[TFOS_HEX_SECRET_LEN + 16]; /* "TFOS_SECRET=..." for child_env */
    char env_cluster[40];                      /* "TFOS_CLUSTER_ID=..." */
    char *env_extra[MAX_ENV_EXTRA];            /* "NAME=VALUE" (tfos__launch_setenv), malloc'd */
    int nenv_extra;
    char token[80];                            /* the HTTP token; "": none */
    char status_url[400];                      /* http://HOST:PORT/[?token=...] (a token beyond loopback);
                                                * "" without a status page */
    tfos__http *http;
    tfos__status_src status;
    tfos__logbuf lines;      /* the nodes' forwarded output (backends that forward: tfos yarn) */
    tfos__tracker *tracker;  /* --mlflow: the job's MLflow run; NULL: none */
};

static void render_history(tfos_local *l);
static void save_final_status(tfos_local *l);

/* The fewest nodes an elastic cluster of layout lay runs on: its ps and
 * evaluator nodes (only workers come and go) and one that trains: the
 * chief, else a worker. */
static int elastic_least(const tfos_layout *lay)
{
    return lay->num_ps + (lay->evaluator ? 1 : 0) + 1;
}

/* Is host a loopback address (the status page needs no token there)? */
static int is_loopback(const char *host)
{
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

/* The interpreter for the built-in ps server and the Arrow feeder. */
static const char *guess_python(const tfos_run_opts *o)
{
    return tfos__program_python(o->python, o->argv);
}

/* Does environment entry e set one of the names tfos__launch_setenv set? */
static int env_overridden(const tfos_local *l, const char *e)
{
    for (int i = 0; i < l->nenv_extra; i++) {
        size_t n = strcspn(l->env_extra[i], "=") + 1;
        if (!strncmp(e, l->env_extra[i], n))
            return 1;
    }
    return 0;
}

/* The environment for processes the launcher starts (agents, the Arrow
 * feeder): ours, with this cluster's secret and id in place of any inherited
 * ones, and what tfos__launch_setenv set. Without inputs (no --input),
 * TFOS_FEED_EMPTY=1 tells each agent that no feeder will ever write, so it
 * ends its node's input ring at once (and DataFeed says so);
 * TFOS_FEED_PRODUCERS=1 in our environment keeps the feeds open for programs
 * or other processes that feed nodes with FeedClient. The array is malloc'd
 * (free it); its strings are ours or l's. */
static char **child_env(tfos_local *l)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4 + (size_t)l->nenv_extra, sizeof *env);
    if (!env)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TFOS_SECRET=", 12) && strncmp(environ[i], "TFOS_CLUSTER_ID=", 16) &&
            strncmp(environ[i], "TFOS_FEED_EMPTY=", 16) && !env_overridden(l, environ[i]))
            env[j++] = environ[i];
    snprintf(l->env_secret, sizeof l->env_secret, "TFOS_SECRET=%s", l->secret);
    snprintf(l->env_cluster, sizeof l->env_cluster, "TFOS_CLUSTER_ID=%s", l->cluster_id);
    env[j++] = l->env_secret;
    env[j++] = l->env_cluster;
    for (int i = 0; i < l->nenv_extra; i++)
        env[j++] = l->env_extra[i];
    const char *producers = getenv("TFOS_FEED_PRODUCERS");
    if (l->opts.ninputs == 0 && !(producers && !strcmp(producers, "1")))
        env[j] = (char *)"TFOS_FEED_EMPTY=1";
    return env;
}

/* ---- before the cluster forms ------------------------------------------------ */

int tfos__launch_check(const tfos_run_opts *o, char *why, size_t len)
{
    int rc = tfos_program_check(o->argv, why, len);
    if (rc || o->layout.num_ps <= 0 || o->ps_runs_program)
        return rc;
    const char *python = guess_python(o);
    char *ps_argv[] = {(char *)python, NULL};
    if ((rc = tfos_program_check(ps_argv, why, len))) {
        int e = errno;
        size_t n = strlen(why);
        snprintf(why + n, len - n, ": the interpreter of the built-in parameter server (pass --python PY, or "
                 "--ps-runs-program to run your program on the ps nodes)");
        errno = e;
        return rc;
    }
    if (tfos__python_finds(python, "tensorflow", NULL, 10000) == 0) {
        /* the words of the built-in server's own message (agent.c) */
        snprintf(why, len, "the built-in parameter server needs TensorFlow, but %s cannot import it (No module "
                 "named 'tensorflow'): pass --python PY with an interpreter that has tensorflow, or "
                 "--ps-runs-program to run your program on the ps nodes", python);
        errno = ENOENT;
        return TFOS_ESYS;
    }
    return 0;
}

/* ---- agents ---------------------------------------------------------------- */

/* The backend saw node id's agent end (tfos__node_ended_fn). */
static void agent_ended(void *user, int id, int status)
{
    tfos_local *l = user;
    l->ended[id] = 1;
    for (int e = 0; l->joiner && id >= l->n && e < l->full_n; e++)
        if (l->joiner[e] == id) /* it ended before it joined: the slot may be tried again */
            l->joiner[e] = -1;
    if (id >= l->n) { /* a standby, or a worker that joined in place: the coordinator has its end */
        char desc[96];
        tfos__describe_status(status, desc, sizeof desc);
        TFOS_DEBUG("standby node %d ended (%s)", id, desc);
        return;
    }
    if (l->coord && tfos_coord_state(l->coord) == TFOS_COORD_RESERVING) {
        /* an agent that dies before registering would otherwise only show
         * up as a reservation timeout */
        char desc[96], reason[256];
        tfos__describe_status(status, desc, sizeof desc);
        const char *job;
        int idx;
        tfos_layout_role(&l->opts.layout, id, &job, &idx);
        snprintf(reason, sizeof reason, "the agent of executor %d (%s:%d) ended before the cluster formed (%s)", id,
                 job, idx, desc);
        tfos_coord_fail(l->coord, TFOS_CAUSE_SETUP, reason); /* not the program's doing: retried */
    }
}

/* The agent's command for node id: `AGENT node --coord ... -- PROGRAM...`,
 * started as the backend's node `bid` (id itself, or past n for a worker
 * that joins in place: `--join`). */
static int spawn_node(tfos_local *l, int id, int bid, int join, char **env)
{
    const tfos_run_opts *o = &l->opts;
    size_t argc = 0;
    while (o->argv[argc])
        argc++;
    char **argv = calloc(argc + 40, sizeof *argv);
    if (!argv)
        return TFOS_ENOMEM;
    char idbuf[16], mbbuf[16], hangbuf[32], restartsbuf[16];
    snprintf(idbuf, sizeof idbuf, "%d", id);
    snprintf(restartsbuf, sizeof restartsbuf, "%d", o->max_restarts);
    snprintf(hangbuf, sizeof hangbuf, "%g", o->hang_timeout);
    snprintf(mbbuf, sizeof mbbuf, "%d", o->feed_mb);
    size_t k = 0;
    const char *job;
    int idx;
    tfos_layout_role(&o->layout, id, &job, &idx);
    argv[k++] = (char *)o->agent_path;
    argv[k++] = "node";
    argv[k++] = "--coord";
    argv[k++] = (char *)tfos_coord_address(l->coord);
    argv[k++] = "--executor-id";
    argv[k++] = idbuf;
    argv[k++] = "--host";
    argv[k++] = (char *)l->ops->agent_host;
    argv[k++] = "--log-dir";
    argv[k++] = l->log_dir;
    argv[k++] = "--cluster-id";
    argv[k++] = l->cluster_id;
    argv[k++] = "--checkpoint-dir";
    argv[k++] = l->checkpoint_dir;
    argv[k++] = "--max-restarts";
    argv[k++] = restartsbuf;
    if (o->feed_mb > 0) {
        argv[k++] = "--feed-mb";
        argv[k++] = mbbuf;
    }
    if (l->ops->forward_logs) /* the agent's console is a container's log, not the user's */
        argv[k++] = "--forward-logs";
    char respawnbuf[16];
    if (l->lopts.respawn > 0) {
        snprintf(respawnbuf, sizeof respawnbuf, "%d", l->lopts.respawn);
        argv[k++] = "--respawn";
        argv[k++] = respawnbuf;
    }
    if (o->hang_timeout > 0) {
        argv[k++] = "--hang-timeout";
        argv[k++] = hangbuf;
    }
    if (join)
        argv[k++] = "--join";
    if (o->keras && strcmp(o->keras, "env")) {
        argv[k++] = "--keras";
        argv[k++] = (char *)o->keras;
    }
    /* TensorBoard on the chief, else on worker 0 (TensorFlowOnSpark's choice) */
    if (o->tensorboard && ((o->layout.chief && !strcmp(job, "chief")) ||
                           (!o->layout.chief && !strcmp(job, "worker") && idx == 0))) {
        argv[k++] = "--tensorboard";
        if (o->tensorboard_logdir) {
            argv[k++] = "--tensorboard-logdir";
            argv[k++] = (char *)o->tensorboard_logdir;
        }
    }
    if (!o->ps_runs_program && o->layout.num_ps > 0) {
        argv[k++] = "--ps-python";
        argv[k++] = (char *)guess_python(o);
    }
    argv[k++] = "--";
    for (size_t i = 0; i < argc; i++)
        argv[k++] = o->argv[i];
    argv[k] = NULL;
    tfos__node_launch node = {.id = bid, .job = job, .index = idx, .argv = argv, .envp = env};
    int rc = l->ops->start(l->backend, &node);
    free(argv);
    if (rc)
        TFOS_ERROR("cannot start the agent %s: %s", o->agent_path,
                   rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
    return rc;
}

/* ---- the feed ---------------------------------------------------------------- */

static void feed_ended(void *user, int failed, const char *reason)
{
    tfos_local *l = user;
    if (!failed)
        return;
    if (l->coord && tfos_coord_state(l->coord) == TFOS_COORD_RUNNING)
        tfos_coord_fail(l->coord, TFOS_CAUSE_FEED, reason);
    else
        TFOS_WARN("%s", reason);
}

static void start_feed(tfos_local *l)
{
    char **env = child_env(l);
    char err[1200];
    /* a restart resumes the feed where the programs' checkpoints stand, when
     * they saved their feed positions with them (DataFeed.save_position) */
    tfos__position_fini(&l->resume);
    int found = tfos_policy_attempt(l->policy) > 1 || l->resumed
                    ? tfos__feed_positions(l->checkpoint_dir, l->positions_since, &l->resume)
                    : 0;
    if (found == 1)
        TFOS_WARN("attempt %d resumes the feed where the checkpoint stands: %zu partitions recorded whole with "
                  "it, %zu in part; everything after it is fed again", tfos_policy_attempt(l->policy),
                  l->resume.nwhole, l->resume.npart);
    tfos__feedrun_opts fo = {.run = &l->opts, .cluster_id = l->cluster_id, .secret = l->secret, .env = env,
                             .python = guess_python(&l->opts), .meter = &l->meter, .loop = l->loop,
                             .resume = found == 1 ? &l->resume : NULL, .on_end = feed_ended, .user = l};
    int rc = env ? tfos__feedrun_start(&l->feed, &fo, err, sizeof err) : TFOS_ENOMEM;
    free(env); /* the Arrow feeder has been spawned with it already */
    if (rc)
        tfos_coord_fail(l->coord, TFOS_CAUSE_FEED, env ? err : "the feed could not start: out of memory");
}

/* Once a second: the meter's sample when no feed is live (a live feed
 * samples its own counters; two samplers out of phase would take two
 * samples a millisecond apart at a slot's edge). */
static void on_meter(tfos__loop *loop, tfos__timer *t, void *user)
{
    tfos_local *l = user;
    int64_t now = tfos__now_ms();
    tfos__feed_meter_taken_from(&l->meter, l->coord);
    if (!l->feed || tfos__feedrun_done(l->feed)) {
        tfos__feed_meter_update(&l->meter, NULL, now);
        /* the feed is written, the trainers still read: say how far they are,
         * from counts their agents sent after the last rows were written (a
         * count from before could say 0 of a feed already read) */
        const tfos__feed_meter *m = &l->meter;
        if (m->active && !strcmp(m->state, "done") && m->rows_counted && m->taken_known && !l->opts.quiet &&
            m->reported_in >= m->total.rows && tfos__feed_meter_consumed(m) < m->total.rows &&
            now - l->consumed_line_at >= 5000) {
            char line[512];
            tfos__feed_meter_line(m, 0, line, sizeof line);
            TFOS_INFO("%s", line);
            l->consumed_line_at = now;
        }
    }
    tfos__timer_arm(loop, t, now + 1000, on_meter, l);
}

/* ---- attempts ------------------------------------------------------------------ */

/* Kill what is left of an attempt (agents take their programs with them),
 * stop its feed and close its coordinator. */
static void end_attempt(tfos_local *l)
{
    tfos__feedrun_close(l->feed);
    l->feed = NULL;
    if (l->backend)
        l->ops->close(l->backend);
    l->backend = NULL;
    memset(l->ended, 0, (size_t)l->slots * sizeof *l->ended);
    l->standbys = l->extra_ids = l->growing = l->grow_refused = l->standbys_back = 0;
    for (int e = 0; l->backend_of && e < l->full_n; e++) {
        l->backend_of[e] = e;
        l->vacant[e] = l->join_tries[e] = 0;
        l->joiner[e] = -1;
    }
    if (l->coord)
        tfos_coord_close(l->coord);
    l->coord = NULL;
    l->status.coord = NULL;
    l->agents_deadline = l->killed_deadline = l->settle_until = 0;
}

/* A line of a node's output, forwarded by its agent (tfos yarn): kept for
 * the status page's /logs/stream, which tfos yarn's client follows. */
static void on_node_log(void *user, const char *node, const char *line, unsigned long long dropped)
{
    tfos_local *l = user;
    tfos__logbuf_add(&l->lines, node, line, dropped);
}

/* A node's new ctx.report: to the job's MLflow run (tracker.h says how
 * ranks are told apart). On the loop; queueing does not block. */
static void on_report(void *user, int node, const char *report, long long age_ms)
{
    tfos_local *l = user;
    tfos__tracker_report(l->tracker, node, report, age_ms);
}

/* The coordinator went on in place without a lost worker (tfos run
 * --resize-in-place) and recorded the resize in the policy's history (no
 * restart); the standbys then ask for the lost node's capacity
 * (elastic_step). What is left of the lost node is ended now: an agent
 * that hangs (no heartbeat) and its program would otherwise hold the
 * survivors' collective until it times out, and the capacity it holds. */
static void on_resize_in_place(void *user, int node, int from, int to, const char *summary)
{
    tfos_local *l = user;
    int known = node >= 0 && node < l->n, bid = !known ? -1 : l->backend_of ? l->backend_of[node] : node;
    if (to < from && bid >= 0 && l->backend && l->ops->observe(l->backend, bid, NULL) == TFOS_NODE_RUNNING)
        l->ops->stop(l->backend, bid, 1);
    if (!l->opts.grow_in_place || !known) {
        /* the slots are not filled again in place */
    } else if (to < from) {
        l->vacant[node] = 1;
    } else { /* a worker joined into its slot */
        l->vacant[node] = 0;
        if (l->joiner[node] >= 0)
            l->backend_of[node] = l->joiner[node];
        l->joiner[node] = -1;
    }
    l->live -= from - to;
    render_history(l);
    TFOS_WARN("elastic: %s (no process restarted, no restart spent)", summary);
}

/* Form the cluster anew: a fresh coordinator, cluster id and agents; the
 * attempt number comes from the policy. */
static int start_attempt(tfos_local *l)
{
    int attempt = tfos_policy_attempt(l->policy);
    int rc = tfos__random_hex(l->cluster_id, 8);
    if (rc)
        return rc;
    tfos_coord_opts co = {.layout = l->opts.layout, .bind_host = l->lopts.bind_host ? l->lopts.bind_host : "127.0.0.1",
                          .port = 0, .secret = l->secret,
                          .reservation_timeout = l->opts.reservation_timeout, .stop_grace = l->opts.stop_grace,
                          .failure_grace = l->opts.failure_grace, .heartbeat_timeout = l->opts.heartbeat_timeout,
                          .policy = l->policy, .checkpoint_dir = l->checkpoint_dir,
                          .spec_form = l->opts.spec_form,
                          .on_log = l->ops->forward_logs ? on_node_log : NULL, .log_user = l,
                          .standby = l->elastic ? l->full_n : 0,
                          .inplace_min = l->opts.resize_in_place ? l->opts.min_nodes : 0};
    rc = tfos__coord_open_on(&l->coord, &co, l->loop);
    if (rc) {
        TFOS_ERROR("cannot start the coordinator: %s", rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
        return rc;
    }
    if (l->tracker) {
        tfos__tracker_history(l->tracker, l->policy);
        tfos__coord_on_report(l->coord, on_report, l);
    }
    if (l->opts.resize_in_place)
        tfos__coord_on_resize(l->coord, on_resize_in_place, l);
    char **env = child_env(l);
    l->attempt_at = tfos__now_ms();
    l->live = l->n;
    if (!env || (rc = l->ops->open(&l->backend, l->loop, l->lopts.backend_cfg, l->slots, agent_ended, l))) {
        free(env);
        end_attempt(l);
        return env ? rc : TFOS_ENOMEM;
    }
    for (int i = 0; i < l->n; i++) {
        rc = spawn_node(l, i, i, 0, env);
        if (rc) {
            free(env);
            end_attempt(l);
            return rc;
        }
    }
    free(env);
    l->status.coord = l->coord;
    l->status.attempt = attempt;
    if (attempt == 1 && l->http)
        TFOS_INFO("cluster of %d nodes starting (coordinator %s, logs in %s, status %s)", l->n,
                  tfos_coord_address(l->coord), l->log_dir, l->status_url);
    else if (attempt == 1)
        TFOS_INFO("cluster of %d nodes starting (coordinator %s, logs in %s)", l->n, tfos_coord_address(l->coord),
                  l->log_dir);
    else if (l->elastic)
        TFOS_INFO("cluster of %d of %d nodes starting again: attempt %d (%d of %d restarts spent, %d resizes; "
                  "coordinator %s)", l->n, l->full_n, attempt, attempt - 1 - tfos_policy_resizes(l->policy),
                  l->opts.max_restarts, tfos_policy_resizes(l->policy), tfos_coord_address(l->coord));
    else
        TFOS_INFO("cluster of %d nodes starting again: attempt %d of %d (coordinator %s)", l->n, attempt,
                  l->opts.max_restarts + 1, tfos_coord_address(l->coord));
    return 0;
}

/* ---- elastic size (docs/RELIABILITY.md, "Elastic size") ---------------------- */

/* The last attempt is over and gone (end_attempt): form the next one. 0,
 * or 1 when it could not start: the run is then over, failed ("could not
 * <what> the cluster for attempt N" and the history). */
static int next_attempt(tfos_local *l, const char *what)
{
    if (start_attempt(l) == 0)
        return 0;
    save_final_status(l);
    l->finished = 1;
    l->exit_code = 1;
    snprintf(l->summary, sizeof l->summary, "could not %s the cluster for attempt %d:\n%s", what,
             tfos_policy_attempt(l->policy), l->history);
    return 1;
}

/* This attempt's layout: the full one with `workers` workers. */
static void set_workers(tfos_local *l, int workers)
{
    l->opts.layout = l->full;
    l->opts.layout.num_workers = workers;
    l->n = tfos_layout_total(&l->opts.layout);
}

/* End this attempt and form the next with `workers` workers: a resize,
 * recorded in the history ("resized from 2 to 1 nodes: WHY") without
 * spending a restart. 0, or 1 when the next attempt could not start (the
 * run is then over, failed). */
static int resize(tfos_local *l, int workers, const char *why)
{
    int before = l->live, after = l->n - l->opts.layout.num_workers + workers;
    tfos_failure f = {.cause = TFOS_CAUSE_STOPPED, .executor_id = -1, .exit_code = -1, .time = (double)time(NULL)};
    if (after != before)
        snprintf(f.summary, sizeof f.summary, "resized from %d to %d nodes: %s", before, after, why);
    else
        snprintf(f.summary, sizeof f.summary, "re-formed at %d nodes: %s", after, why);
    if (tfos_policy_resize(l->policy, &f)) {
        l->finished = 1;
        l->exit_code = 1;
        snprintf(l->summary, sizeof l->summary, "out of memory recording a resize");
        return 1;
    }
    render_history(l);
    TFOS_WARN("elastic: %s; attempt %d forms %d of %d nodes (a resize: no restart spent)", f.summary,
              tfos_policy_attempt(l->policy), after, l->full_n);
    end_attempt(l);
    l->draining = 0;
    set_workers(l, workers);
    return next_attempt(l, "form");
}

/* A standby node, id (past this attempt's nodes): `AGENT node --standby`,
 * where a worker of the larger cluster would run. */
static int spawn_standby(tfos_local *l, int id, char **env)
{
    char idbuf[16];
    snprintf(idbuf, sizeof idbuf, "%d", id);
    char *argv[] = {(char *)l->opts.agent_path, "node", "--coord", (char *)tfos_coord_address(l->coord),
                    "--executor-id", idbuf, "--host", (char *)l->ops->agent_host, "--standby", NULL};
    tfos__node_launch node = {.id = id, .job = "worker", .index = id - l->n + l->opts.layout.num_workers,
                              .argv = argv, .envp = env};
    int rc = l->ops->start(l->backend, &node);
    if (rc)
        TFOS_WARN("cannot start standby node %d: %s", id, rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
    return rc;
}

/* Does backend node bid hold a slot of the cluster (a worker that joined
 * in place)? */
static int joined_in_place(const tfos_local *l, int bid)
{
    for (int e = 0; l->backend_of && e < l->full_n; e++)
        if (l->backend_of[e] == bid && e != bid)
            return 1;
    return 0;
}

/* --grow-in-place: a worker for each slot a lost worker left, once the
 * lost one's agent has ended, started where the cluster manager has
 * capacity for it (at once on one machine; a container or a step when
 * granted): it joins the running cluster (`tfos node --join`). JOIN_TRIES
 * per slot and attempt. */
static void start_joiners(tfos_local *l)
{
    char **env = NULL;
    for (int e = 0; e < l->n; e++) {
        if (!l->vacant[e] || l->joiner[e] >= 0 || l->join_tries[e] >= JOIN_TRIES)
            continue;
        /* once the lost one's agent has ended: its capacity is free, and
         * its node's names (feed socket, files) with it */
        if (l->ops->observe(l->backend, l->backend_of[e], NULL) == TFOS_NODE_RUNNING)
            continue;
        if (l->n + l->extra_ids >= l->slots)
            break;
        if (!env && !(env = child_env(l)))
            return;
        int bid = l->n + l->extra_ids++;
        l->join_tries[e]++;
        const char *job;
        int idx;
        tfos_layout_role(&l->opts.layout, e, &job, &idx);
        if (spawn_node(l, e, bid, 1, env) == 0) {
            l->joiner[e] = bid;
            TFOS_INFO("elastic: running %d of %d nodes; a worker starts in the place of %s:%d (executor %d) to "
                      "join in place (try %d of %d)", l->live, l->full_n, job, idx, e, l->join_tries[e], JOIN_TRIES);
        } else {
            l->join_tries[e] = JOIN_TRIES; /* said by spawn_node */
        }
    }
    free(env);
}

/* How many of this attempt's nodes have registered: all of them, and
 * those of its fixed part (ps, chief, evaluator) and its workers. */
static void count_registered(const tfos_local *l, int *fixed, int *workers)
{
    *fixed = *workers = 0;
    tfos_node_info nd;
    for (int i = 0; i < tfos_coord_node_count(l->coord); i++) {
        if (tfos_coord_node(l->coord, i, &nd) || !strcmp(nd.state, "waiting"))
            continue;
        const char *job;
        int idx;
        if (!tfos_layout_role(&l->opts.layout, nd.executor_id, &job, &idx))
            ++*(strcmp(job, "worker") ? fixed : workers);
    }
}

/* An elastic run's watch, each step: 0, or 1 when the run is over.
 *  - forming: elastic_wait after the attempt began, with nodes still
 *    missing (their cluster manager has no capacity for them) and at least
 *    min_nodes registered, the cluster forms again with those;
 *  - running at fewer than full_n: standby nodes ask for the missing
 *    capacity; once one has it, the cluster drains to grow (a drain step
 *    is the checkpoint boundary every rank resumes from). */
static int elastic_step(tfos_local *l, int st)
{
    int64_t now = tfos__now_ms();
    if (st == TFOS_COORD_RESERVING && now >= l->attempt_at + (int64_t)(l->opts.elastic_wait * 1000)) {
        int fixed, workers;
        count_registered(l, &fixed, &workers);
        int need_fixed = l->opts.layout.num_ps + (l->opts.layout.chief ? 1 : 0) + (l->opts.layout.evaluator ? 1 : 0);
        int have = fixed + workers;
        if (have < l->n && fixed == need_fixed && have >= l->opts.min_nodes && have >= elastic_least(&l->full)) {
            char why[256];
            snprintf(why, sizeof why, "%d of %d nodes registered within --elastic-wait %g s (no capacity for the "
                     "others)", have, l->n, l->opts.elastic_wait);
            return resize(l, workers, why);
        }
        return 0;
    }
    if (st != TFOS_COORD_RUNNING || l->live >= l->full_n || l->draining)
        return 0;
    /* the missing nodes' capacity asked for (after an in-place resize too) */
    if (l->opts.grow_in_place)
        start_joiners(l);
    /* standbys for the capacity of the nodes this attempt lacks (with
     * --grow-in-place, those it formed without: joiners take lost ones') */
    int missing = l->opts.grow_in_place ? l->full_n - l->n : l->full_n - l->live;
    if (l->standbys < missing && !l->grow_refused) {
        char **env = child_env(l);
        if (!env)
            return 0;
        int more = missing - l->standbys;
        for (int k = 0; k < more && l->n + l->extra_ids < l->slots; k++)
            if (spawn_standby(l, l->n + l->extra_ids, env) == 0) {
                l->standbys++;
                l->extra_ids++;
            } else {
                l->grow_refused = 1; /* said by spawn_standby; no more tries this attempt */
                break;
            }
        free(env);
        TFOS_INFO("elastic: running %d of %d nodes; %d standby nodes ask for the capacity of the others", l->live,
                  l->full_n, l->standbys);
        return 0;
    }
    int back = tfos__coord_standbys(l->coord);
    if (back != l->standbys_back) {
        l->standbys_back = back;
        l->standbys_at = now;
    }
    /* grow once the capacity has stopped coming (or all of it is back), and
     * at a step every program reached: a drain before they report steps
     * would stop them, not drain them (unless --drain-grace drains all) */
    if (back <= 0 || l->grow_refused || (back < l->standbys && now < l->standbys_at + STANDBY_SETTLE_MS) ||
        (!l->opts.drain_force && !tfos__coord_stepping(l->coord)))
        return 0;
    char reason[256];
    if (back > l->full_n - l->live)
        back = l->full_n - l->live;
    snprintf(reason, sizeof reason, "capacity for %d more node%s is back: growing from %d to %d nodes", back,
             back == 1 ? "" : "s", l->live, l->live + back);
    double grace = l->opts.drain_grace > 0 ? l->opts.drain_grace : TFOS_DEFAULT_DRAIN_GRACE;
    int rc = tfos_coord_drain(l->coord, reason, grace, l->opts.drain_force);
    if (rc == 0) {
        l->draining = 1;
        l->growing = back;
        TFOS_INFO("elastic: %s, at a drain step", reason);
    } else if (rc != TFOS_EAGAIN) {
        l->grow_refused = 1;
        TFOS_WARN("elastic: %s, but the cluster cannot drain (%s): it stays at %d nodes until this attempt ends; "
                  "programs that report steps (ctx.report(step=)) are drained, or all with --drain-grace",
                  reason, tfos_strerror(rc), l->live);
    }
    return 0;
}

/* The attempt ended drained and the run goes on at the size the capacity
 * allows: the nodes that are there when the next attempt has waited
 * elastic_wait (a grow: the standbys that had capacity too). */
static int elastic_next(tfos_local *l)
{
    char why[300];
    snprintf(why, sizeof why, "drained: %s", tfos__coord_drain_reason(l->coord));
    int workers = l->growing ? l->opts.layout.num_workers - (l->n - l->live) + l->growing
                  : l->lost     ? l->opts.layout.num_workers - l->lost
                                : l->full.num_workers;
    int least = l->opts.min_nodes - (l->full_n - l->full.num_workers); /* min_nodes' workers */
    if (workers < least)
        workers = least;
    if (workers < (l->full.chief ? 0 : 1))
        workers = l->full.chief ? 0 : 1;
    if (workers > l->full.num_workers)
        workers = l->full.num_workers;
    l->lost = 0;
    return resize(l, workers, why);
}

void tfos__launch_lost(tfos_local *l, int workers)
{
    if (l && l->elastic && !l->draining)
        l->lost = workers > 0 ? workers : 0;
}

/* "COORD_ADDR\nSTATUS_URL\n" (STATUS_URL "" without a page), written whole:
 * the YARN ApplicationMaster waits for it. */
static int write_address_file(tfos_local *l)
{
    char *whole = NULL;
    if (asprintf(&whole, "%s\n%s\n", tfos_coord_address(l->coord), l->status_url) < 0)
        return TFOS_ENOMEM;
    int bad = tfos__write_file_whole(l->lopts.address_file, whole);
    free(whole);
    if (bad) {
        TFOS_ERROR("cannot write %s: %s", l->lopts.address_file, strerror(errno));
        return TFOS_ESYS;
    }
    return 0;
}

static void render_history(tfos_local *l)
{
    free(l->history);
    l->history = tfos_policy_render(l->policy);
}

/* The status page (the HTTP server with its routes) and where to find it:
 * <log_dir>/status-url, which `tfos status` and `tfos logs -f` read. */
static int open_status_page(tfos_local *l)
{
    const tfos_run_opts *o = &l->opts;
    const char *host = o->status_host ? o->status_host : "127.0.0.1";
    int rc = tfos__http_open(&l->http, l->loop, host, o->status_port, l->lopts.http_max_conns);
    if (rc) {
        int e = errno;
        /* the option that names the port: tfos serve's --port, tfos run's --status-port */
        const char *opt = l->lopts.http_purpose ? "--port" : "--status-port";
        if (e == EADDRINUSE)
            TFOS_ERROR("cannot serve %s on port %d: another process listens there (`ss -ltnp 'sport = :%d'` names "
                       "it): stop it, choose another port, or %s 0 for any free one (printed at start)",
                       l->lopts.http_purpose ? l->lopts.http_purpose : "the status page", o->status_port,
                       o->status_port, opt);
        else
            TFOS_ERROR("cannot serve %s on port %d: %s",
                       l->lopts.http_purpose ? l->lopts.http_purpose : "the status page", o->status_port, strerror(e));
        return rc;
    }
    if ((rc = tfos__status_routes(l->http, &l->status)))
        return rc;
    /* beyond loopback the page and the logs need a token */
    char query[100] = "";
    if (l->lopts.http_token && *l->lopts.http_token) {
        snprintf(l->token, sizeof l->token, "%s", l->lopts.http_token);
    } else if (!is_loopback(host)) {
        if ((rc = tfos__random_hex(l->token, 16)))
            return rc;
        snprintf(query, sizeof query, "?token=%s", l->token);
    }
    tfos__http_set_token(l->http, l->token);
    snprintf(l->status_url, sizeof l->status_url, "http://%s:%d/%s", host, tfos__http_port(l->http), query);
    /* 0600: it may hold the token */
    char path[4400];
    snprintf(path, sizeof path, "%s/status-url", l->log_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fprintf(f, "%s\n", l->status_url);
        fclose(f);
    } else if (fd >= 0) {
        close(fd);
    }
    return 0;
}

static void read_marker(tfos_local *l);
/* --mlflow: the job's run, made before any node starts so that its id is
 * in their environment (a program's own mlflow.log_* lands in it), with
 * the launch's parameters. A URI that is not a tracking server's fails the
 * launch; a server that cannot be reached only warns (tracker.h). */
static int open_tracking(tfos_local *l)
{
    const tfos_run_opts *o = &l->opts;
    char err[600], name[256], v[64];
    const char *prog = o->argv[0];
    const char *base = strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
    if (!strncmp(base, "python", 6) && o->argv[1])
        base = strrchr(o->argv[1], '/') ? strrchr(o->argv[1], '/') + 1 : o->argv[1];
    if (o->mlflow_run_name) {
        snprintf(name, sizeof name, "%s", o->mlflow_run_name);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        char stamp[32];
        localtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(name, sizeof name, "tfos-%.100s-%s", base, stamp);
    }
    int rc = tfos__tracker_open(&l->tracker, o->mlflow, o->mlflow_experiment, name, err, sizeof err);
    if (rc) {
        TFOS_ERROR("%s", err);
        return rc;
    }
    if ((rc = tfos__launch_setenv(l, "MLFLOW_TRACKING_URI", tfos__tracker_uri(l->tracker))))
        return rc;
    if (*tfos__tracker_run_id(l->tracker) &&
        (rc = tfos__launch_setenv(l, "MLFLOW_RUN_ID", tfos__tracker_run_id(l->tracker))))
        return rc;
    tfos__tracker *t = l->tracker;
    char cmd[2048] = "";
    size_t len = 0;
    for (int i = 0; o->argv[i] && len < sizeof cmd; i++)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s%s", i ? " " : "", o->argv[i]);
    tfos__tracker_param(t, "program", cmd);
#define PARAM_INT(key, val) (snprintf(v, sizeof v, "%d", (int)(val)), tfos__tracker_param(t, key, v))
#define PARAM_NUM(key, val) (snprintf(v, sizeof v, "%g", (double)(val)), tfos__tracker_param(t, key, v))
    PARAM_INT("workers", o->layout.num_workers);
    PARAM_INT("ps", o->layout.num_ps);
    PARAM_INT("chief", o->layout.chief);
    PARAM_INT("evaluator", o->layout.evaluator);
    PARAM_INT("max_restarts", o->max_restarts);
    PARAM_NUM("heartbeat_timeout", l->opts.heartbeat_timeout);
    PARAM_NUM("reservation_timeout", l->opts.reservation_timeout);
    if (o->hang_timeout > 0)
        PARAM_NUM("hang_timeout", o->hang_timeout);
    if (o->ninputs > 0) {
        len = 0;
        cmd[0] = 0;
        for (int i = 0; i < o->ninputs && len < sizeof cmd; i++)
            len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s%s", i ? " " : "", o->inputs[i]);
        tfos__tracker_param(t, "input", cmd);
        PARAM_INT("epochs", o->epochs > 0 ? o->epochs : 1);
        PARAM_INT("feed_mb", l->opts.feed_mb > 0 ? l->opts.feed_mb : 64);
        if (o->batch_rows > 0)
            PARAM_INT("batch_rows", o->batch_rows);
    }
#undef PARAM_INT
#undef PARAM_NUM
    tfos__tracker_param(t, "checkpoint_dir", l->checkpoint_dir);
    tfos__tracker_tag(t, "tfos.log_dir", l->log_dir);
    tfos__tracker_tag(t, "tfos.backend", l->ops->name);
    TFOS_INFO("MLflow: this job is run %s at %s", *tfos__tracker_run_id(t) ? tfos__tracker_run_id(t) : "(none)",
              tfos__tracker_uri(t));
    return 0;
}

int tfos__launch_open(tfos_local **out, const tfos_run_opts *opts, const tfos__launch_opts *lopts)
{
    if (!out || !opts || !opts->argv || !opts->argv[0] || !opts->agent_path)
        return TFOS_EINVAL;
    int n = tfos_layout_total(&opts->layout);
    if (opts->layout.num_workers + (opts->layout.chief ? 1 : 0) < 1 || opts->layout.num_ps < 0 || n > 1024) {
        TFOS_ERROR("a cluster needs at least one worker or a chief");
        return TFOS_EINVAL;
    }
    if (opts->max_restarts < 0)
        return TFOS_EINVAL;
    tfos_local *l = calloc(1, sizeof *l);
    if (!l)
        return TFOS_ENOMEM;
    l->opts = *opts;
    if (lopts)
        l->lopts = *lopts;
    l->ops = l->lopts.backend ? l->lopts.backend : &tfos__backend_local;
    if (l->opts.reservation_timeout <= 0)
        l->opts.reservation_timeout = TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL;
    if (l->opts.stop_grace <= 0)
        l->opts.stop_grace = TFOS_DEFAULT_STOP_GRACE;
    if (l->opts.feed_mb <= 0 && l->opts.ninputs > 0) {
        l->opts.feed_mb = tfos__input_ring_mb(l->opts.inputs, l->opts.ninputs, l->opts.input_format,
                                              (uint32_t)l->opts.batch_rows);
        if (l->opts.feed_mb)
            TFOS_INFO("input ring: %d MiB per node, sized for the records of the .npy input (--feed-mb sets it)",
                      l->opts.feed_mb);
    }
    l->n = l->full_n = l->live = n;
    l->slots = opts->grow_in_place ? (2 + JOIN_TRIES) * n : 2 * n;
    l->full = opts->layout;
    if (opts->min_nodes < 0 || opts->min_nodes > n ||
        (opts->min_nodes > 0 && opts->min_nodes < elastic_least(&l->full))) {
        TFOS_ERROR("min_nodes=%d: an elastic cluster of these %d nodes takes min_nodes from %d (its ps, chief and "
                   "evaluator nodes, %s) to %d; only workers come and go", opts->min_nodes, n,
                   elastic_least(&l->full), opts->layout.chief ? "with no worker" : "and one worker", n);
        free(l);
        return TFOS_EINVAL;
    }
    l->elastic = opts->min_nodes > 0 && opts->min_nodes < n;
    if (opts->grow_in_place && !opts->resize_in_place) {
        TFOS_ERROR("grow_in_place replaces a worker lost in place: give resize_in_place too");
        free(l);
        return TFOS_EINVAL;
    }
    if (opts->resize_in_place && (!l->elastic || opts->spec_form != TFOS_SPEC_RANKS || opts->layout.num_ps ||
                                  opts->layout.chief || opts->layout.evaluator || opts->ninputs)) {
        TFOS_ERROR("resize_in_place: an elastic torch cluster of workers only (min_nodes below the node count, the "
                   "torch framework, no ps, chief or evaluator, no input feed)");
        free(l);
        return TFOS_EINVAL;
    }
    if (l->opts.elastic_wait <= 0)
        l->opts.elastic_wait = TFOS_DEFAULT_ELASTIC_WAIT;
    l->started_s = (double)time(NULL) - 1; /* mtimes have a second's resolution at worst */
    l->positions_since = l->started_s;
    tfos__feed_meter_init(&l->meter, tfos__now_ms());
    int rc = tfos__loop_open(&l->loop);
    if (rc)
        goto fail;
    rc = tfos_policy_open(&l->policy, opts->max_restarts);
    if (rc)
        goto fail;
    rc = TFOS_ENOMEM;
    l->ended = calloc((size_t)l->slots, sizeof *l->ended);
    if (!l->ended)
        goto fail;
    if (opts->grow_in_place) {
        l->backend_of = calloc((size_t)n, sizeof *l->backend_of);
        l->vacant = calloc((size_t)n, sizeof *l->vacant);
        l->joiner = calloc((size_t)n, sizeof *l->joiner);
        l->join_tries = calloc((size_t)n, sizeof *l->join_tries);
        if (!l->backend_of || !l->vacant || !l->joiner || !l->join_tries)
            goto fail;
        for (int e = 0; e < n; e++) {
            l->backend_of[e] = e;
            l->joiner[e] = -1;
        }
    }
    if (opts->log_dir) {
        snprintf(l->log_dir, sizeof l->log_dir, "%s", opts->log_dir);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(l->log_dir, sizeof l->log_dir, "tfos-logs/run-%s-%d", stamp, (int)getpid());
    }
    rc = tfos__mkdir_p(l->log_dir, 0700);
    if (rc) {
        TFOS_ERROR("cannot create the log dir %s: %s", l->log_dir, strerror(errno));
        goto fail;
    }
    const char *secret = l->lopts.secret;
    if (secret && strlen(secret) == TFOS_HEX_SECRET_LEN)
        snprintf(l->secret, sizeof l->secret, "%s", secret);
    else if (secret) {
        TFOS_ERROR("the cluster secret must be %d hex characters", TFOS_HEX_SECRET_LEN);
        rc = TFOS_EINVAL;
        goto fail;
    } else if ((rc = tfos__random_hex(l->secret, 32)))
        goto fail;
    if (opts->checkpoint_dir)
        snprintf(l->checkpoint_dir, sizeof l->checkpoint_dir, "%s", opts->checkpoint_dir);
    else
        snprintf(l->checkpoint_dir, sizeof l->checkpoint_dir, "%s/checkpoints", l->log_dir);
    /* a URL (hdfs://...) is for the programs to reach: nothing to make here */
    const char *local_ckpt = tfos__local_path(l->checkpoint_dir);
    rc = local_ckpt ? tfos__mkdir_p(local_ckpt, 0777) : 0;
    if (rc) {
        TFOS_ERROR("cannot create the checkpoint dir %s: %s", l->checkpoint_dir, strerror(errno));
        goto fail;
    }
    read_marker(l);
    if (opts->status_port >= 0 && (rc = open_status_page(l)))
        goto fail;
    l->status.feed = &l->meter;
    if (l->ops->forward_logs) {
        /* the newest 20000 lines, 8 MiB at most */
        if (tfos__logbuf_init(&l->lines, 20000, 8u << 20)) {
            rc = TFOS_ENOMEM;
            goto fail;
        }
        l->status.lines = &l->lines;
    }
    l->status.log_dir = l->log_dir;
    l->status.max_restarts = opts->max_restarts;
    l->status.policy = l->policy;
    l->status.attempt = 1;
    if (l->elastic) {
        l->status.min_nodes = opts->min_nodes;
        l->status.max_nodes = n;
    }
    render_history(l);
    if (opts->mlflow && (rc = open_tracking(l)))
        goto fail;
    *out = l;
    return 0;
fail:
    tfos__tracker_close(l->tracker);
    for (int i = 0; i < l->nenv_extra; i++)
        free(l->env_extra[i]);
    tfos__logbuf_fini(&l->lines);
    tfos__http_close(l->http);
    tfos__feed_meter_fini(&l->meter);
    tfos_policy_close(l->policy);
    tfos__loop_close(l->loop);
    free(l->history);
    free(l->ended);
    free(l->backend_of);
    free(l->vacant);
    free(l->joiner);
    free(l->join_tries);
    free(l);
    return rc;
}

tfos__loop *tfos__launch_loop(tfos_local *l)
{
    return l->loop;
}

tfos__http *tfos__launch_http(tfos_local *l)
{
    return l->http;
}

tfos__status_src *tfos__launch_status(tfos_local *l)
{
    return &l->status;
}

const char *tfos__launch_secret(const tfos_local *l)
{
    return l->secret;
}

const char *tfos__launch_token(const tfos_local *l)
{
    return l->token;
}

const char *tfos__launch_status_url(const tfos_local *l)
{
    return l->status_url;
}

int tfos__launch_setenv(tfos_local *l, const char *name, const char *value)
{
    if (!name || !*name || strchr(name, '=') || !value || l->started)
        return TFOS_EINVAL;
    char *e = NULL;
    if (asprintf(&e, "%s=%s", name, value) < 0)
        return TFOS_ENOMEM;
    size_t nl = strlen(name) + 1;
    for (int i = 0; i < l->nenv_extra; i++)
        if (!strncmp(l->env_extra[i], e, nl)) {
            free(l->env_extra[i]);
            l->env_extra[i] = e;
            return 0;
        }
    if (l->nenv_extra == MAX_ENV_EXTRA) {
        free(e);
        return TFOS_ENOMEM;
    }
    l->env_extra[l->nenv_extra++] = e;
    return 0;
}

int tfos__launch_start(tfos_local *l)
{
    if (l->started)
        return TFOS_EINVAL;
    l->started = 1;
    tfos__timer_arm(l->loop, &l->meter_timer, tfos__now_ms() + 1000, on_meter, l);
    int rc = start_attempt(l);
    if (rc)
        return rc;
    if (l->lopts.address_file && (rc = write_address_file(l))) {
        end_attempt(l);
        return rc;
    }
    return 0;
}

int tfos_local_open(tfos_local **out, const tfos_run_opts *opts)
{
    tfos_local *l;
    int rc = tfos__launch_open(&l, opts, NULL);
    if (rc)
        return rc;
    if ((rc = tfos__launch_start(l))) {
        tfos_local_close(l);
        return rc;
    }
    *out = l;
    return 0;
}

static int all_agents_done(const tfos_local *l)
{
    for (int i = 0; i < l->slots; i++)
        if (l->backend && l->ops->observe(l->backend, i, NULL) == TFOS_NODE_RUNNING)
            return 0;
    return 1;
}

/* The run's last /status, as <log_dir>/status.json: `tfos status` shows it
 * once the run has ended. Written whole (tfos__write_file_whole). */
static void save_final_status(tfos_local *l)
{
    tfos__feed_meter_taken_from(&l->meter, l->coord); /* the nodes' last counts came with their exits */
    tfos__feed_meter_update(&l->meter, NULL, tfos__now_ms());
    char *json = tfos__status_json(&l->status), *text = NULL;
    char path[4400];
    snprintf(path, sizeof path, "%s/status.json", l->log_dir);
    if (json && asprintf(&text, "%s\n", json) < 0)
        text = NULL; /* asprintf leaves it undefined */
    if (text && tfos__write_file_whole(path, text))
        TFOS_WARN("cannot write the run's final status to %s: %s", path, strerror(errno));
    tfos__tracker_figures(l->tracker, "tfos.", json); /* the page's figures: feed rows and rates, nodes */
    free(text);
    free(json);
}

/* The drain marker, <checkpoint_dir>/tfos-feed-position/drained: a run
 * that drained leaves it ("since=SECONDS\n", when the first run of the
 * chain began), so the same command run again counts the feed positions
 * saved since then (they add up across the runs as across attempts) and
 * resumes the feed where the drained checkpoint stands. A run that finishes
 * removes it. Only where the checkpoint dir is on this machine. */
static int marker_path(const tfos_local *l, char *path, size_t len)
{
    const char *dir = tfos__local_path(l->checkpoint_dir);
    if (!dir)
        return -1;
    int w = snprintf(path, len, "%s/%s/drained", dir, TFOS__POSITION_DIR);
    return w > 0 && (size_t)w < len ? 0 : -1;
}

static void read_marker(tfos_local *l)
{
    char path[4400], line[128] = "";
    if (marker_path(l, path, sizeof path))
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    double since;
    if (fgets(line, sizeof line, f) && sscanf(line, "since=%lf", &since) == 1 && since > 0 && since <= l->started_s) {
        l->positions_since = since;
        l->resumed = 1;
        TFOS_INFO("resuming a drained run: feed positions saved since %.0f s ago count (%s)", l->started_s - since,
                  path);
    } else {
        TFOS_WARN("ignoring %s: not a drain marker (\"since=SECONDS\")", path);
    }
    fclose(f);
}

static void write_marker(tfos_local *l, int drained)
{
    char path[4400], text[64];
    if (marker_path(l, path, sizeof path))
        return;
    if (!drained) {
        if (unlink(path) < 0 && errno != ENOENT)
            TFOS_WARN("cannot remove the drain marker %s: %s", path, strerror(errno));
        return;
    }
    snprintf(text, sizeof text, "since=%.3f\n", l->positions_since);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    if (tfos__mkdir_p(dir, 0777) || tfos__write_file_whole(path, text))
        TFOS_WARN("cannot write the drain marker %s: %s; the next run feeds its input from the start", path,
                  strerror(errno));
}

static void finish(tfos_local *l)
{
    tfos_coord *c = l->coord;
    save_final_status(l);
    /* how the (last attempt's) nodes started: a slow start names its phase
     * and its slowest nodes */
    char start[1024];
    if (!tfos__coord_start_summary(c, start, sizeof start))
        TFOS_INFO("%s", start);
    if (tfos_coord_state(c) == TFOS_COORD_DONE && tfos_coord_drained(c)) {
        l->exit_code = TFOS_EXIT_DRAINED;
        l->summary[0] = 0;
        write_marker(l, 1);
        TFOS_WARN("drained: every node wrote its checkpoint at the drain step and ended (exit %d); run the same "
                  "command again to resume from it (checkpoints in %s%s)", TFOS_EXIT_DRAINED, l->checkpoint_dir,
                  l->opts.checkpoint_dir ? "" : ": give --checkpoint-dir to find them from another log dir");
    } else if (tfos_coord_state(c) == TFOS_COORD_DONE) {
        l->exit_code = 0;
        l->summary[0] = 0;
        write_marker(l, 0);
        if (tfos_policy_count(l->policy)) {
            TFOS_INFO("all nodes finished successfully on attempt %d, after:\n%s", tfos_policy_attempt(l->policy),
                      l->history);
        }
        TFOS_INFO("all nodes finished successfully; logs in %s", l->log_dir);
    } else {
        int code = tfos_coord_failure_code(c);
        l->exit_code = l->stop_signo ? 128 + l->stop_signo : code == TFOS_ETIMEDOUT ? 124 : 1;
        if (l->draining && tfos_coord_drain_step(c) > -2)
            write_marker(l, 1); /* the checkpoints that were written still count */
        const char *verdict = tfos_policy_verdict(l->policy);
        if (tfos_policy_count(l->policy) > 1)
            snprintf(l->summary, sizeof l->summary, "failed %d times (--max-restarts %d):\n%s%s%s%slast failure:\n%s",
                     tfos_policy_count(l->policy), l->opts.max_restarts, l->history, *verdict ? "not restarted: " : "",
                     verdict, *verdict ? "\n" : "", tfos_coord_failure(c));
        else
            snprintf(l->summary, sizeof l->summary, "%s%s%s", tfos_coord_failure(c),
                     *verdict ? "\nnot restarted: " : "", verdict);
        /* resident nodes (tfos serve) are stopped by a signal: that ends the
         * run as asked, and the caller says so */
        if (!(l->lopts.resident && l->stop_signo && tfos_policy_count(l->policy) <= 1))
            tfos__log(l->opts.caller_reports ? TFOS_LOG_DEBUG : TFOS_LOG_ERROR,
                      "the cluster failed:\n%s\nlogs of every node are in %s", l->summary, l->log_dir);
    }
    l->finished = 1;
}

/* The attempt is over and its agents are gone: restart or finish, as the
 * policy decided when it failed. */
static int conclude(tfos_local *l)
{
    render_history(l);
    if (tfos_coord_state(l->coord) == TFOS_COORD_FAILED && tfos_coord_decision(l->coord) == TFOS_RESTART &&
        !l->stop_signo && !l->draining) {
        tfos_failure f;
        tfos_coord_failure_info(l->coord, &f);
        /* A node ended by SIGTERM is most often a stop of the whole job on
         * its way here too: Slurm's scancel signals the steps and the batch
         * shell at once, a cluster manager stops containers before their
         * launcher. Wait TFOS_DEFAULT_RESTART_SETTLE_MS for it: a stop signal then
         * ends the run (no restart of a cancelled job); else restart. */
        int64_t now = tfos__now_ms();
        if (f.cause == TFOS_CAUSE_SIGNAL && f.signo == SIGTERM) {
            if (!l->settle_until) {
                l->settle_until = now + TFOS_DEFAULT_RESTART_SETTLE_MS;
                TFOS_INFO("%s ended by SIGTERM: restarting in %d s unless this run is stopped too (a job "
                          "cancelled by its scheduler)", f.node[0] ? f.node : "a node",
                          TFOS_DEFAULT_RESTART_SETTLE_MS / 1000);
            }
            if (now < l->settle_until)
                return 0;
        }
        TFOS_WARN("restarting every node (attempt %d of %d) after: %s", tfos_policy_attempt(l->policy),
                  l->opts.max_restarts + 1, f.summary);
        end_attempt(l);
        return next_attempt(l, "restart");
    }
    /* an elastic run drained on a notice or to grow goes on: a notice from
     * the run's own user (SIGTERM, a graceful kill) ends it as ever */
    if (l->elastic && tfos_coord_state(l->coord) == TFOS_COORD_DONE && tfos_coord_drained(l->coord) &&
        !l->stop_signo) {
        save_final_status(l);
        return elastic_next(l);
    }
    finish(l);
    return 1;
}

/* The run is over: its MLflow run ends with the run's outcome (sending what
 * is queued: 10 s at most, once the nodes are gone). */
static void end_tracking(tfos_local *l)
{
    if (!l->tracker)
        return;
    char exit_code[16];
    snprintf(exit_code, sizeof exit_code, "%d", l->exit_code);
    tfos__tracker_tag(l->tracker, "tfos.exit_code", exit_code);
    tfos__tracker_history(l->tracker, l->policy);
    tfos__tracker_end(l->tracker, l->stop_signo ? "KILLED" : l->exit_code == 0 ? "FINISHED" : "FAILED", NULL, 0);
}

/* The attempt is over: a node that never registered has no coordinator to
 * tell it so, and would wait out the agents' deadline. Ask it to stop now:
 * on YARN its request is withdrawn at this moment, before the containers
 * the others give back let YARN allocate it after all (the AM's account of
 * what YARN never allocated is then that of the reservation's end). */
static void stop_unregistered(tfos_local *l)
{
    tfos_node_info nd;
    if (!l->backend)
        return;
    tfos__coord_release_standbys(l->coord); /* they end when it hangs up */
    for (int id = l->n; id < l->n + l->extra_ids; id++) /* those still asking for capacity: withdrawn */
        if (l->ops->observe(l->backend, id, NULL) == TFOS_NODE_RUNNING && !tfos__coord_standby_seen(l->coord, id) &&
            !joined_in_place(l, id))
            l->ops->stop(l->backend, id, 0);
    for (int i = 0; i < tfos_coord_node_count(l->coord); i++)
        if (!tfos_coord_node(l->coord, i, &nd) && !strcmp(nd.state, "waiting") && nd.executor_id >= 0 &&
            nd.executor_id < l->n && l->ops->observe(l->backend, nd.executor_id, NULL) == TFOS_NODE_RUNNING)
            l->ops->stop(l->backend, nd.executor_id, 0);
}

int tfos_local_step(tfos_local *l, int timeout_ms)
{
    if (l->finished)
        return 1;
    int st = tfos_coord_state(l->coord);
    if (st >= TFOS_COORD_DONE)
        timeout_ms = timeout_ms > 50 ? 50 : timeout_ms; /* waiting for agents to go */
    if (tfos__loop_run(l->loop, timeout_ms) < 0 && errno != EINTR)
        TFOS_WARN("the launcher's event loop failed: %s", strerror(errno));
    st = tfos_coord_state(l->coord);
    if (l->elastic && st < TFOS_COORD_DONE && elastic_step(l, st))
        return 1; /* could not form again: over */
    st = tfos_coord_state(l->coord);
    if (l->opts.ninputs > 0 && !l->feed && st == TFOS_COORD_RUNNING)
        start_feed(l);
    if (st < TFOS_COORD_DONE)
        return 0;
    tfos__feedrun_close(l->feed);
    l->feed = NULL;
    int64_t now = tfos__now_ms();
    if (!l->agents_deadline) {
        l->agents_deadline = now + 5000;
        stop_unregistered(l);
    }
    if (!all_agents_done(l)) {
        if (now < l->agents_deadline)
            return 0;
        if (!l->killed_deadline) {
            for (int i = 0; i < l->slots; i++)
                if (l->ops->observe(l->backend, i, NULL) == TFOS_NODE_RUNNING) {
                    TFOS_WARN("%s %d did not exit; killing it", i < l->n ? "agent of executor" : "standby node", i);
                    l->ops->stop(l->backend, i, 1);
                }
            l->killed_deadline = now + 5000;
        }
        if (now < l->killed_deadline)
            return 0; /* their ends come through the backend */
    }
    int over = conclude(l);
    if (over)
        end_tracking(l);
    return over;
}

int tfos_local_drain(tfos_local *l, const char *reason, int signo)
{
    if (l->opts.drain_grace < 0 || !l->coord || l->draining)
        return TFOS_EINVAL;
    int rc = tfos_coord_drain(l->coord, reason, l->opts.drain_grace, l->opts.drain_force);
    if (rc)
        return rc;
    l->draining = 1;
    if (signo && !l->stop_signo)
        l->stop_signo = signo; /* no restart after this: the notice ends the run */
    return 0;
}

void tfos_local_stop(tfos_local *l, const char *reason, int signo)
{
    if (signo && !l->stop_signo)
        l->stop_signo = signo;
    if (l->coord)
        tfos_coord_stop(l->coord, reason);
}

tfos_coord *tfos_local_coord(tfos_local *l)
{
    return l->coord;
}

const char *tfos_local_log_dir(const tfos_local *l)
{
    return l->log_dir;
}

int tfos_local_exit_code(const tfos_local *l)
{
    return l->exit_code;
}

const char *tfos_local_failure(const tfos_local *l)
{
    return l->finished ? l->summary : (l->coord ? tfos_coord_failure(l->coord) : "");
}

int tfos_local_attempt(const tfos_local *l)
{
    return tfos_policy_attempt(l->policy);
}

const tfos_policy *tfos_local_policy(const tfos_local *l)
{
    return l->policy;
}

void tfos_local_close(tfos_local *l)
{
    if (!l)
        return;
    if (!l->finished && l->coord) {
        tfos_local_stop(l, "the launcher is closing", 0);
        int64_t deadline = tfos__now_ms() + (int64_t)(l->opts.stop_grace * 1000) + 10000;
        while (!tfos_local_step(l, 100) && tfos__now_ms() < deadline)
            ;
    }
    end_attempt(l);
    /* responses still being written (answers to what waited, from whatever
     * attached and closed before us) go out first, 2 s at most */
    for (int64_t until = tfos__now_ms() + 2000; tfos__http_busy(l->http) && tfos__now_ms() < until;)
        tfos__loop_run(l->loop, 50);
    tfos__http_close(l->http);
    tfos__tracker_close(l->tracker);
    tfos__logbuf_fini(&l->lines);
    tfos__timer_disarm(l->loop, &l->meter_timer);
    tfos__feed_meter_fini(&l->meter);
    tfos__position_fini(&l->resume);
    tfos_policy_close(l->policy);
    tfos__loop_close(l->loop);
    for (int i = 0; i < l->nenv_extra; i++)
        free(l->env_extra[i]);
    free(l->history);
    free(l->ended);
    free(l->backend_of);
    free(l->vacant);
    free(l->joiner);
    free(l->join_tries);
    free(l);
}

int tfos_local_status_port(const tfos_local *l)
{
    return l->http ? tfos__http_port(l->http) : -1;
}

void tfos__launch_run(tfos_local *l, volatile int *stop_signal, int *exit_code)
{
    int stopped = 0;
    /* the bound only matters for noticing *stop_signal, set by a signal
     * handler (whose signal also interrupts the loop's wait). SIGTERM is a
     * notice (a scheduler's, a cloud's, Slurm's scancel): the cluster drains
     * (tfos_local_drain) when it runs; any other signal, a second one, or a
     * SIGTERM before the programs run stops it. */
    while (!tfos_local_step(l, 1000)) {
        int signo = stop_signal ? *stop_signal : 0;
        if (signo && !stopped) {
            *stop_signal = 0; /* taken: a second signal is a new one */
            char reason[96];
            snprintf(reason, sizeof reason, "interrupted by signal %d (%s)", signo, strsignal(signo));
            if (signo == SIGTERM && !l->draining && tfos_local_drain(l, reason, signo) == 0)
                continue;
            tfos_local_stop(l, reason, signo);
            stopped = 1;
        }
    }
    *exit_code = tfos_local_exit_code(l);
    /* forwarded lines (tfos yarn): the page stays up until its follower has
     * read them all, and the last response has gone out whole (closing the
     * server drops what it has not written yet), for 10 s at most */
    int64_t linger_until = tfos__now_ms() + 10000;
    while (l->status.lines && (l->lines.served < l->lines.next || tfos__http_busy(l->http)) &&
           tfos__now_ms() < linger_until && !(stop_signal && *stop_signal && !stopped))
        tfos__loop_run(l->loop, 100);
}

int tfos_run_local(const tfos_run_opts *opts, volatile int *stop_signal, int *exit_code)
{
    tfos_local *l;
    int rc = tfos_local_open(&l, opts);
    if (rc)
        return rc;
    tfos__launch_run(l, stop_signal, exit_code);
    tfos_local_close(l);
    return 0;
}
