/* launch.c: `tfos run`: a whole cluster on this machine, no Spark.
 *
 * The launcher hosts the coordinator in-process and starts one agent process
 * (`tfos node …`) per node. Agents get PR_SET_PDEATHSIG(SIGTERM): if the
 * launcher dies, even by SIGKILL, every agent stops its program and exits.
 * The secret travels to agents in their environment, never on a command line.
 *
 * With --input, a feeder (a thread, or a Python process for Arrow) writes the
 * files into the nodes' input rings; its live counters (tfos__feed_progress)
 * feed the status page's meter and, every 5 s, a progress line. */
#include "core/auth.h"
#include "core/log.h"
#include "platform/clock.h"
#include "platform/proc.h"
#include "run/feeder.h"
#include "run/http.h"
#include "run/status.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct agent_proc {
    pid_t pid;
    int done;
    int status;
} agent_proc;

struct tfos_local {
    tfos_run_opts opts;
    tfos_coord *coord;
    char secret[TFOS_HEX_SECRET_LEN + 1];
    char cluster_id[17];
    char log_dir[4096];
    int n;
    agent_proc *agents;
    int stop_signo;
    int64_t agents_deadline; /* after the coordinator ended: reap agents by then */
    int finished;
    int exit_code;
    /* the file feeder (--input), a thread started once the cluster runs */
    pthread_t feeder;
    int feeder_started, feeder_joined;
    atomic_int feeder_done;
    volatile int feeder_stop;
    int feeder_rc;
    char feeder_err[1024];
    tfos__feeder_stats feeder_stats;
    tfos__feeder_opts feeder_opts;
    int *feed_ids;
    int64_t feeder_t0;
    pid_t arrow_feeder; /* Arrow/Parquet inputs: python -m tfos.arrowfeed */
    /* the feed's live counters (this attempt) and what the status page and
     * the console show of them (the whole run) */
    tfos__feed_progress progress;
    int progress_live;       /* progress holds this attempt's nodes */
    pthread_t observer;      /* Arrow feeds: attaches the ring observers */
    int observer_started;
    tfos__feed_meter meter;
    int64_t next_progress_ms;
    /* restarts: every failed attempt leaves one line here */
    int attempt;
    char checkpoint_dir[4200];
    char history[4096];
    size_t history_len;
    char summary[12288];
    char env_secret[TFOS_HEX_SECRET_LEN + 16]; /* "TFOS_SECRET=..." for child_env */
    char env_cluster[40];                      /* "TFOS_CLUSTER_ID=..." */
    /* the status page (/status, /metrics, /) */
    tfos__http *http;
    tfos__status_src status;
};

static int is_arrow_input(const char *p)
{
    static const char *const ext[] = {".parquet", ".arrow", ".feather", ".ipc"};
    size_t l = strlen(p);
    for (size_t i = 0; i < 4; i++) {
        size_t e = strlen(ext[i]);
        if (l >= e && !strcmp(p + l - e, ext[i]))
            return 1;
    }
    return 0;
}

static const char *guess_python(const tfos_run_opts *o);
static char **child_env(tfos_local *l);

/* Arrow/Parquet need pyarrow: the feed runs in a Python process instead of
 * the C feeder thread. */
static void start_arrow_feeder(tfos_local *l, const int *ids, int n)
{
    const tfos_run_opts *o = &l->opts;
    char nodes[4096] = "", epochs[16], brows[16], prows[32];
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof nodes - 16; i++)
        used += (size_t)snprintf(nodes + used, sizeof nodes - used, "%s%d", i ? "," : "", ids[i]);
    snprintf(epochs, sizeof epochs, "%d", o->epochs > 0 ? o->epochs : 1);
    snprintf(brows, sizeof brows, "%d", o->batch_rows > 0 ? o->batch_rows : 1024);
    snprintf(prows, sizeof prows, "%lld", o->partition_rows > 0 ? o->partition_rows : 10000);
    char **argv = calloc((size_t)o->ninputs + 16, sizeof *argv);
    char **env = child_env(l);
    if (!argv || !env) {
        free(argv);
        free(env);
        tfos_local_stop(l, "the feed could not start: out of memory", 0);
        return;
    }
    size_t k = 0;
    argv[k++] = (char *)guess_python(o);
    argv[k++] = "-m";
    argv[k++] = "tfos.arrowfeed";
    argv[k++] = "--nodes";
    argv[k++] = nodes;
    argv[k++] = "--epochs";
    argv[k++] = epochs;
    argv[k++] = "--batch-rows";
    argv[k++] = brows;
    argv[k++] = "--partition-rows";
    argv[k++] = prows;
    for (int i = 0; i < o->ninputs; i++)
        argv[k++] = o->inputs[i];
    tfos__spawn_opts so = {.argv = argv, .envp = env, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .pdeathsig = SIGKILL};
    int rc = tfos__spawn(&so, &l->arrow_feeder);
    free(argv);
    free(env);
    if (rc) {
        char reason[512];
        snprintf(reason, sizeof reason, "the feed could not start: %s -m tfos.arrowfeed: %s", guess_python(o),
                 strerror(errno));
        tfos_local_stop(l, reason, 0);
        return;
    }
    l->feeder_started = 1;
    l->feeder_t0 = tfos__now_ms();
    TFOS_INFO("feeding %d Arrow/Parquet file(s) x %d epoch(s) to %d node(s) with %s -m tfos.arrowfeed",
              o->ninputs, o->epochs > 0 ? o->epochs : 1, n, guess_python(o));
}

static void *observer_main(void *arg)
{
    tfos_local *l = arg;
    tfos__feed_observe(&l->feeder_opts);
    return NULL;
}

/* The live counters for the n fed nodes (executors ids[]), and the meter's
 * view of them. */
static int start_progress(tfos_local *l, const int *ids, int n, int arrow)
{
    int rc = tfos__feed_progress_init(&l->progress, n);
    if (rc)
        return rc;
    l->progress_live = 1;
    for (int i = 0; i < n; i++) {
        const char *job;
        int idx;
        tfos_layout_role(&l->opts.layout, ids[i], &job, &idx);
        snprintf(l->progress.nodes[i].name, sizeof l->progress.nodes[i].name, "%s:%d", job, idx);
        l->progress.nodes[i].executor_id = ids[i];
    }
    l->progress.rows_counted = !arrow;
    int64_t now = tfos__now_ms();
    l->next_progress_ms = now + 5000;
    return tfos__feed_meter_start(&l->meter, &l->progress, arrow ? "arrow" : "files", now);
}

static void *feeder_main(void *arg)
{
    tfos_local *l = arg;
    l->feeder_rc = tfos__feed_files(&l->feeder_opts, &l->feeder_stats, l->feeder_err, sizeof l->feeder_err);
    atomic_store(&l->feeder_done, 1);
    return NULL;
}

static void start_feeder(tfos_local *l)
{
    const tfos_run_opts *o = &l->opts;
    int n = 0;
    free(l->feed_ids); /* from a start that failed before the feed ran */
    l->feed_ids = calloc((size_t)l->n, sizeof *l->feed_ids);
    if (!l->feed_ids) {
        tfos_local_stop(l, "the feed could not start: out of memory", 0);
        return;
    }
    for (int i = 0; i < l->n; i++) {
        const char *job;
        int idx;
        tfos_layout_role(&o->layout, i, &job, &idx);
        if (!strcmp(job, "chief") || !strcmp(job, "worker"))
            l->feed_ids[n++] = i;
    }
    int arrow = 0;
    for (int i = 0; i < o->ninputs; i++)
        arrow += is_arrow_input(o->inputs[i]);
    if (arrow && arrow != o->ninputs) {
        tfos_local_stop(l, "the feed could not start: Arrow/Parquet inputs cannot be mixed with CSV, JSON "
                           "lines or .npy in one run", 0);
        return;
    }
    l->feeder_opts = (tfos__feeder_opts){
        .cluster_id = l->cluster_id, .secret = l->secret, .nnodes = n, .executor_ids = l->feed_ids,
        .inputs = o->inputs, .ninputs = o->ninputs, .format = o->input_format, .csv_header = o->csv_header,
        .epochs = o->epochs > 0 ? o->epochs : 1, .batch_rows = (uint32_t)(o->batch_rows > 0 ? o->batch_rows : 1024),
        .partition_rows = (uint64_t)(o->partition_rows > 0 ? o->partition_rows : 10000), .stop = &l->feeder_stop,
        .progress = &l->progress};
    if (start_progress(l, l->feed_ids, n, arrow)) {
        tfos_local_stop(l, "the feed could not start: out of memory", 0);
        return;
    }
    if (arrow) {
        start_arrow_feeder(l, l->feed_ids, n);
        /* the Arrow feeder is another process: watch its rings from here */
        if (l->feeder_started && pthread_create(&l->observer, NULL, observer_main, l) == 0)
            l->observer_started = 1;
        return;
    }
    l->feeder_t0 = tfos__now_ms();
    if (pthread_create(&l->feeder, NULL, feeder_main, l)) {
        tfos_local_stop(l, "the feed could not start: no thread", 0);
        return;
    }
    l->feeder_started = 1;
    TFOS_INFO("feeding %d file(s) x %d epoch(s) to %d node(s)", o->ninputs, l->feeder_opts.epochs, n);
}

/* Join a finished feeder and act on its outcome; with `force`, stop it first. */
static void check_feeder(tfos_local *l, int force)
{
    if (!l->feeder_started || l->feeder_joined)
        return;
    if (l->arrow_feeder > 0) {
        int status;
        if (force)
            kill(l->arrow_feeder, SIGTERM);
        if (force ? tfos__wait_pid(l->arrow_feeder, 5000, &status) != 0
                  : waitpid(l->arrow_feeder, &status, WNOHANG) != l->arrow_feeder) {
            if (force) {
                kill(l->arrow_feeder, SIGKILL);
                waitpid(l->arrow_feeder, &status, 0);
            } else {
                return;
            }
        }
        l->feeder_joined = 1;
        tfos__feed_meter_update(&l->meter, &l->progress, tfos__now_ms());
        tfos__feed_meter_end(&l->meter, !tfos__exit_code(status) ? "done" : force ? "stopped" : "failed",
                             tfos__now_ms());
        if (!force && tfos__exit_code(status) != 0 && tfos_coord_state(l->coord) == TFOS_COORD_RUNNING) {
            char desc[96], reason[300];
            tfos__describe_status(status, desc, sizeof desc);
            snprintf(reason, sizeof reason, "the feed failed: the Arrow/Parquet feeder ended with %s (its message "
                     "is above)", desc);
            tfos_local_stop(l, reason, 0);
        }
        return;
    }
    if (force)
        l->feeder_stop = 1;
    else if (!atomic_load(&l->feeder_done))
        return;
    pthread_join(l->feeder, NULL);
    l->feeder_joined = 1;
    tfos__feed_meter_update(&l->meter, &l->progress, tfos__now_ms());
    tfos__feed_meter_end(&l->meter, l->feeder_rc == 0 ? "done" : l->feeder_rc == TFOS_ESTOPPED || force ? "stopped"
                                                                                                      : "failed",
                         tfos__now_ms());
    double secs = (double)(tfos__now_ms() - l->feeder_t0) / 1000.0;
    const tfos__feeder_stats *st = &l->feeder_stats;
    if (l->feeder_rc == 0) {
        TFOS_INFO("fed %llu rows (%llu partitions, %.1f MB) in %.2f s (%.0f rows/s)%s", (unsigned long long)st->rows,
                  (unsigned long long)st->partitions, (double)st->bytes / 1e6, secs,
                  secs > 0 ? (double)st->rows / secs : 0.0,
                  st->terminated ? "; some nodes terminated their feed early" : "");
    } else if (!force && tfos_coord_state(l->coord) == TFOS_COORD_RUNNING) {
        char reason[1200];
        snprintf(reason, sizeof reason, "the feed failed: %s", l->feeder_err[0] ? l->feeder_err
                                                                               : tfos_strerror(l->feeder_rc));
        tfos_local_stop(l, reason, 0);
    } else if (l->feeder_rc != TFOS_ESTOPPED) {
        TFOS_WARN("the feed did not finish: %s (after %llu rows)", l->feeder_err, (unsigned long long)st->rows);
    }
}

/* Every 5 s while the feeder runs, one line on the console (--quiet: none). */
static void report_progress(tfos_local *l, int64_t now)
{
    if (l->opts.quiet || !l->feeder_started || l->feeder_joined || now < l->next_progress_ms)
        return;
    l->next_progress_ms = now + 5000;
    char line[512];
    tfos__feed_meter_line(&l->meter, l->feeder_opts.partition_rows, line, sizeof line);
    TFOS_INFO("%s", line);
}

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) < 0 && errno != EEXIST)
            return TFOS_ESYS;
        *p = '/';
    }
    if (mkdir(buf, 0777) < 0 && errno != EEXIST)
        return TFOS_ESYS;
    return 0;
}

/* The interpreter for the built-in ps server: the user's own when the
 * program is a Python one, else $TFOS_PYTHON, else python3. */
static const char *guess_python(const tfos_run_opts *o)
{
    if (o->python)
        return o->python;
    const char *base = strrchr(o->argv[0], '/');
    base = base ? base + 1 : o->argv[0];
    if (!strncmp(base, "python", 6))
        return o->argv[0];
    const char *env = getenv("TFOS_PYTHON");
    return env && *env ? env : "python3";
}

/* The environment for processes the launcher starts (agents, the Arrow
 * feeder): ours, with this cluster's secret and id in place of any inherited
 * ones. The array is malloc'd (free it); its strings are ours or l's. */
static char **child_env(tfos_local *l)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TFOS_SECRET=", 12) && strncmp(environ[i], "TFOS_CLUSTER_ID=", 16))
            env[j++] = environ[i];
    snprintf(l->env_secret, sizeof l->env_secret, "TFOS_SECRET=%s", l->secret);
    snprintf(l->env_cluster, sizeof l->env_cluster, "TFOS_CLUSTER_ID=%s", l->cluster_id);
    env[j++] = l->env_secret;
    env[j] = l->env_cluster;
    return env;
}

static int spawn_agent(tfos_local *l, int id, char **env)
{
    const tfos_run_opts *o = &l->opts;
    size_t argc = 0;
    while (o->argv[argc])
        argc++;
    char **argv = calloc(argc + 20, sizeof *argv);
    if (!argv)
        return TFOS_ENOMEM;
    char idbuf[16], mbbuf[16];
    snprintf(idbuf, sizeof idbuf, "%d", id);
    snprintf(mbbuf, sizeof mbbuf, "%d", o->feed_mb);
    size_t k = 0;
    argv[k++] = (char *)o->agent_path;
    argv[k++] = "node";
    argv[k++] = "--coord";
    argv[k++] = (char *)tfos_coord_address(l->coord);
    argv[k++] = "--executor-id";
    argv[k++] = idbuf;
    argv[k++] = "--host";
    argv[k++] = "127.0.0.1";
    argv[k++] = "--log-dir";
    argv[k++] = l->log_dir;
    argv[k++] = "--cluster-id";
    argv[k++] = l->cluster_id;
    argv[k++] = "--checkpoint-dir";
    argv[k++] = l->checkpoint_dir;
    if (o->feed_mb > 0) {
        argv[k++] = "--feed-mb";
        argv[k++] = mbbuf;
    }
    if (!o->ps_runs_program && o->layout.num_ps > 0) {
        argv[k++] = "--ps-python";
        argv[k++] = (char *)guess_python(o);
    }
    argv[k++] = "--";
    for (size_t i = 0; i < argc; i++)
        argv[k++] = o->argv[i];
    argv[k] = NULL;
    tfos__spawn_opts so = {.argv = argv, .envp = env, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .new_pgroup = 0, .pdeathsig = SIGTERM};
    int rc = tfos__spawn(&so, &l->agents[id].pid);
    if (rc)
        TFOS_ERROR("cannot start the agent %s: %s", o->agent_path, strerror(errno));
    free(argv);
    return rc;
}

/* Kill what is left of an attempt (agents take their programs with them),
 * join its feeder and close its coordinator. */
static void check_feeder(tfos_local *l, int force);

static void end_attempt(tfos_local *l)
{
    check_feeder(l, 1);
    if (l->observer_started) {
        l->feeder_stop = 1;
        pthread_join(l->observer, NULL);
        l->observer_started = 0;
    }
    if (l->progress_live) {
        tfos__feed_meter_update(&l->meter, &l->progress, tfos__now_ms());
        tfos__feed_progress_fini(&l->progress);
        l->progress_live = 0;
    }
    for (int i = 0; i < l->n; i++)
        if (l->agents[i].pid > 0 && !l->agents[i].done) {
            kill(l->agents[i].pid, SIGKILL);
            waitpid(l->agents[i].pid, NULL, 0);
        }
    memset(l->agents, 0, (size_t)l->n * sizeof *l->agents);
    if (l->coord)
        tfos_coord_close(l->coord);
    l->coord = NULL;
    l->status.coord = NULL;
    free(l->feed_ids);
    l->feed_ids = NULL;
    l->feeder_started = l->feeder_joined = 0;
    atomic_store(&l->feeder_done, 0);
    l->feeder_stop = 0;
    l->feeder_rc = 0;
    l->feeder_err[0] = 0;
    l->arrow_feeder = 0;
    l->agents_deadline = 0;
}

/* Form the cluster anew: a fresh coordinator, cluster id and agents, with
 * attempt number `attempt` handed to every program. */
static int start_attempt(tfos_local *l, int attempt)
{
    l->attempt = attempt;
    int rc = tfos__random_hex(l->cluster_id, 8);
    if (rc)
        return rc;
    tfos_coord_opts co = {.layout = l->opts.layout, .bind_host = "127.0.0.1", .port = 0, .secret = l->secret,
                          .reservation_timeout = l->opts.reservation_timeout, .stop_grace = l->opts.stop_grace,
                          .heartbeat_timeout = l->opts.heartbeat_timeout, .attempt = attempt};
    rc = tfos_coord_open(&l->coord, &co);
    if (rc) {
        TFOS_ERROR("cannot start the coordinator: %s", rc == TFOS_ESYS ? strerror(errno) : tfos_strerror(rc));
        return rc;
    }
    char **env = child_env(l);
    if (!env) {
        end_attempt(l);
        return TFOS_ENOMEM;
    }
    for (int i = 0; i < l->n; i++) {
        rc = spawn_agent(l, i, env);
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
        TFOS_INFO("cluster of %d nodes starting (coordinator %s, logs in %s, status http://%s:%d/)", l->n,
                  tfos_coord_address(l->coord), l->log_dir,
                  l->opts.status_host ? l->opts.status_host : "127.0.0.1", tfos__http_port(l->http));
    else if (attempt == 1)
        TFOS_INFO("cluster of %d nodes starting (coordinator %s, logs in %s)", l->n, tfos_coord_address(l->coord),
                  l->log_dir);
    else
        TFOS_INFO("cluster of %d nodes starting again: attempt %d of %d (coordinator %s)", l->n, attempt,
                  l->opts.max_restarts + 1, tfos_coord_address(l->coord));
    return 0;
}

int tfos_local_open(tfos_local **out, const tfos_run_opts *opts)
{
    if (!out || !opts || !opts->argv || !opts->argv[0] || !opts->agent_path)
        return TFOS_EINVAL;
    int n = tfos_layout_total(&opts->layout);
    if (opts->layout.num_workers + (opts->layout.chief ? 1 : 0) < 1 || opts->layout.num_ps < 0 || n > 1024) {
        TFOS_ERROR("a cluster needs at least one worker or a chief");
        return TFOS_EINVAL;
    }
    tfos_local *l = calloc(1, sizeof *l);
    if (!l)
        return TFOS_ENOMEM;
    l->opts = *opts;
    if (l->opts.reservation_timeout <= 0)
        l->opts.reservation_timeout = 60;
    if (l->opts.stop_grace <= 0)
        l->opts.stop_grace = 5;
    l->n = n;
    int rc = TFOS_ENOMEM;
    l->agents = calloc((size_t)n, sizeof *l->agents);
    if (!l->agents)
        goto fail;
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
    rc = mkdir_p(l->log_dir);
    if (rc) {
        TFOS_ERROR("cannot create the log dir %s: %s", l->log_dir, strerror(errno));
        goto fail;
    }
    rc = tfos__random_hex(l->secret, 32);
    if (rc)
        goto fail;
    if (opts->checkpoint_dir)
        snprintf(l->checkpoint_dir, sizeof l->checkpoint_dir, "%s", opts->checkpoint_dir);
    else
        snprintf(l->checkpoint_dir, sizeof l->checkpoint_dir, "%s/checkpoints", l->log_dir);
    rc = mkdir_p(l->checkpoint_dir);
    if (rc) {
        TFOS_ERROR("cannot create the checkpoint dir %s: %s", l->checkpoint_dir, strerror(errno));
        goto fail;
    }
    if (opts->status_port >= 0) {
        rc = tfos__http_open(&l->http, opts->status_host ? opts->status_host : "127.0.0.1", opts->status_port,
                             tfos__status_handle, &l->status);
        if (rc) {
            TFOS_ERROR("cannot serve the status page on port %d: %s", opts->status_port, strerror(errno));
            goto fail;
        }
    }
    if (l->http) {
        /* where `tfos status` and `tfos logs -f` find this run */
        char path[4400];
        snprintf(path, sizeof path, "%s/status-url", l->log_dir);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "http://%s:%d/\n", opts->status_host ? opts->status_host : "127.0.0.1",
                    tfos__http_port(l->http));
            fclose(f);
        }
    }
    tfos__feed_meter_init(&l->meter, tfos__now_ms());
    l->status.feed = &l->meter;
    l->status.log_dir = l->log_dir;
    l->status.history = l->history;
    l->status.max_restarts = opts->max_restarts;
    rc = start_attempt(l, 1);
    if (rc)
        goto fail;
    *out = l;
    return 0;
fail:
    tfos__http_close(l->http);
    tfos__feed_meter_fini(&l->meter);
    free(l->agents);
    free(l);
    return rc;
}

static void reap_agents(tfos_local *l)
{
    for (int i = 0; i < l->n; i++) {
        agent_proc *a = &l->agents[i];
        if (a->done || a->pid <= 0)
            continue;
        if (waitpid(a->pid, &a->status, WNOHANG) != a->pid)
            continue;
        a->done = 1;
        if (tfos_coord_state(l->coord) == TFOS_COORD_RESERVING) {
            /* an agent that dies before registering would otherwise only
             * show up as a reservation timeout */
            char desc[96], reason[256];
            tfos__describe_status(a->status, desc, sizeof desc);
            const char *job;
            int idx;
            tfos_layout_role(&l->opts.layout, i, &job, &idx);
            snprintf(reason, sizeof reason, "the agent of executor %d (%s:%d) ended before the cluster formed (%s)",
                     i, job, idx, desc);
            tfos_coord_stop(l->coord, reason);
        }
    }
}

static int all_agents_done(const tfos_local *l)
{
    for (int i = 0; i < l->n; i++)
        if (l->agents[i].pid > 0 && !l->agents[i].done)
            return 0;
    return 1;
}

/* One line of history per failed attempt: when, and the first line of why. */
static void add_history(tfos_local *l)
{
    const char *f = tfos_coord_failure(l->coord);
    const char *nl = strchr(f, '\n');
    int len = nl ? (int)(nl - f) : (int)strlen(f);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[16];
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    int w = snprintf(l->history + l->history_len, sizeof l->history - l->history_len, "  attempt %d at %s: %.*s\n",
                     l->attempt, stamp, len, f);
    if (w > 0 && (size_t)w < sizeof l->history - l->history_len)
        l->history_len += (size_t)w;
}

static void finish(tfos_local *l)
{
    tfos_coord *c = l->coord;
    if (tfos_coord_state(c) == TFOS_COORD_DONE) {
        l->exit_code = 0;
        l->summary[0] = 0;
        if (l->attempt > 1)
            TFOS_INFO("all nodes finished successfully on attempt %d, after:\n%s", l->attempt, l->history);
        TFOS_INFO("all nodes finished successfully; logs in %s", l->log_dir);
    } else {
        int code = tfos_coord_failure_code(c);
        l->exit_code = l->stop_signo ? 128 + l->stop_signo : code == TFOS_ETIMEDOUT ? 124 : 1;
        if (l->attempt > 1) {
            add_history(l);
            snprintf(l->summary, sizeof l->summary, "failed %d times (--max-restarts %d):\n%slast failure:\n%s",
                     l->attempt, l->opts.max_restarts, l->history, tfos_coord_failure(c));
        } else {
            snprintf(l->summary, sizeof l->summary, "%s", tfos_coord_failure(c));
        }
        TFOS_ERROR("the cluster failed:\n%s\nlogs of every node are in %s", l->summary, l->log_dir);
    }
    l->finished = 1;
}

/* A node failed (not a timeout, a stop or a bad feed) and restarts are left. */
static int should_restart(const tfos_local *l)
{
    return tfos_coord_state(l->coord) == TFOS_COORD_FAILED && tfos_coord_failure_code(l->coord) == TFOS_EFAILED &&
           !l->stop_signo && l->attempt <= l->opts.max_restarts;
}

int tfos_local_step(tfos_local *l, int timeout_ms)
{
    if (l->finished)
        return 1;
    int st = tfos_coord_step(l->coord, timeout_ms);
    int64_t now = tfos__now_ms();
    tfos__feed_meter_update(&l->meter, l->progress_live ? &l->progress : NULL, now);
    if (l->http)
        tfos__http_step(l->http);
    reap_agents(l);
    if (l->opts.ninputs > 0 && !l->feeder_started && !l->progress_live && st == TFOS_COORD_RUNNING)
        start_feeder(l);
    check_feeder(l, 0);
    report_progress(l, now);
    if (st < TFOS_COORD_DONE)
        return 0;
    check_feeder(l, 1);
    if (!l->agents_deadline)
        l->agents_deadline = tfos__now_ms() + 5000;
    if (!all_agents_done(l)) {
        if (tfos__now_ms() < l->agents_deadline)
            return 0;
        for (int i = 0; i < l->n; i++)
            if (l->agents[i].pid > 0 && !l->agents[i].done) {
                TFOS_WARN("agent of executor %d (pid %d) did not exit; killing it", i, (int)l->agents[i].pid);
                kill(l->agents[i].pid, SIGKILL);
                if (tfos__wait_pid(l->agents[i].pid, 5000, &l->agents[i].status) == 0)
                    l->agents[i].done = 1;
            }
    }
    if (should_restart(l)) {
        const char *f = tfos_coord_failure(l->coord);
        const char *nl = strchr(f, '\n');
        TFOS_WARN("restarting every node (attempt %d of %d) after: %.*s", l->attempt + 1, l->opts.max_restarts + 1,
                  nl ? (int)(nl - f) : (int)strlen(f), f);
        add_history(l);
        int next = l->attempt + 1;
        end_attempt(l);
        if (start_attempt(l, next) == 0)
            return 0;
        l->finished = 1;
        l->exit_code = 1;
        snprintf(l->summary, sizeof l->summary, "could not restart the cluster for attempt %d:\n%s", next,
                 l->history);
        return 1;
    }
    finish(l);
    return 1;
}

void tfos_local_stop(tfos_local *l, const char *reason, int signo)
{
    if (signo && !l->stop_signo)
        l->stop_signo = signo;
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
    return l->attempt;
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
    if (l->coord)
        end_attempt(l);
    tfos__http_close(l->http);
    tfos__feed_meter_fini(&l->meter);
    free(l->agents);
    free(l);
}

int tfos_local_status_port(const tfos_local *l)
{
    return l->http ? tfos__http_port(l->http) : -1;
}

int tfos_run_local(const tfos_run_opts *opts, volatile int *stop_signal, int *exit_code)
{
    tfos_local *l;
    int rc = tfos_local_open(&l, opts);
    if (rc)
        return rc;
    int stopped = 0;
    while (!tfos_local_step(l, 100)) {
        if (stop_signal && *stop_signal && !stopped) {
            char reason[96];
            snprintf(reason, sizeof reason, "interrupted by signal %d (%s)", *stop_signal, strsignal(*stop_signal));
            tfos_local_stop(l, reason, *stop_signal);
            stopped = 1;
        }
    }
    *exit_code = tfos_local_exit_code(l);
    tfos_local_close(l);
    return 0;
}
