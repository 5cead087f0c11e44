/* launch.c: `tfos run`: a whole cluster on this machine, no Spark.
 *
 * The launcher owns one event loop and registers everything with it: the
 * coordinator of the current attempt, the status page's HTTP server, a pidfd
 * per agent process, the feed (feed/feedrun.c) and a one-second timer for the
 * meter. It sleeps until one of them has something to say.
 *
 * It starts one agent process (`tfos node …`) per node. Agents get
 * PR_SET_PDEATHSIG(SIGTERM): if the launcher dies, even by SIGKILL, every
 * agent stops its program and exits. The secret travels to agents in their
 * environment, never on a command line.
 *
 * Restarts. The launcher owns the run's tfos_policy and hands it to each
 * attempt's coordinator, which asks it when the attempt fails; the launcher
 * only acts on the answer (tfos_coord_decision): re-form the cluster with
 * fresh agents, a fresh coordinator and cluster id, or finish. */
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
#include "serve/serve.h"
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct agent_proc {
    pid_t pid;
    int pidfd;   /* -1: none (old kernel): reaped by the poll timer */
    int done;
    int status;
} agent_proc;

struct tfos_local {
    tfos_run_opts opts;
    tfos__loop *loop;
    tfos_policy *policy;
    tfos_coord *coord;
    char secret[TFOS_HEX_SECRET_LEN + 1];
    char cluster_id[17];
    char log_dir[4096];
    char checkpoint_dir[4200];
    int n;
    agent_proc *agents;
    int stop_signo;
    int64_t agents_deadline; /* after the coordinator ended: reap agents by then */
    int finished;
    int exit_code;
    tfos__feedrun *feed;
    tfos__position resume;   /* where this attempt's feed resumes (saved feed positions) */
    double started_s;        /* the run's start: older feed positions are not this run's */
    tfos__feed_meter meter;
    tfos__timer meter_timer, reap_timer;
    int64_t consumed_line_at; /* the last "trainers have consumed" line */
    char *history;           /* the policy's history, rendered for the summary */
    char summary[12288];
    char env_secret[TFOS_HEX_SECRET_LEN + 16]; /* "TFOS_SECRET=..." for child_env */
    char env_cluster[40];                      /* "TFOS_CLUSTER_ID=..." */
    char status_url[400];                      /* http://HOST:PORT/[?token=...] (a token beyond loopback);
                                                * "" without a status page */
    tfos__http *http;
    tfos__status_src status;
    tfos__logbuf lines;      /* the nodes' forwarded output (agent_prefix: tfos yarn) */
    tfos__serve *serve;      /* tfos serve: the front end (NULL: tfos run) */
    char env_serve[330];     /* "TFOS_SERVE_ADDR=@..." or "=HOST:PORT" */
};

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

/* The environment for processes the launcher starts (agents, the Arrow
 * feeder): ours, with this cluster's secret and id in place of any inherited
 * ones. Without inputs (no --input), TFOS_FEED_EMPTY=1 tells each agent that
 * no feeder will ever write, so it ends its node's input ring at once (and
 * DataFeed says so); TFOS_FEED_PRODUCERS=1 in our environment keeps the feeds
 * open for programs or other processes that feed nodes with FeedClient.
 * The array is malloc'd (free it); its strings are ours or l's. */
static char **child_env(tfos_local *l)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 5, sizeof *env);
    if (!env)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TFOS_SECRET=", 12) && strncmp(environ[i], "TFOS_CLUSTER_ID=", 16) &&
            strncmp(environ[i], "TFOS_FEED_EMPTY=", 16) && strncmp(environ[i], "TFOS_SERVE_ADDR=", 16))
            env[j++] = environ[i];
    snprintf(l->env_secret, sizeof l->env_secret, "TFOS_SECRET=%s", l->secret);
    snprintf(l->env_cluster, sizeof l->env_cluster, "TFOS_CLUSTER_ID=%s", l->cluster_id);
    env[j++] = l->env_secret;
    env[j++] = l->env_cluster;
    if (l->serve) {
        snprintf(l->env_serve, sizeof l->env_serve, "TFOS_SERVE_ADDR=%s", tfos__serve_address(l->serve));
        env[j++] = l->env_serve;
    }
    const char *producers = getenv("TFOS_FEED_PRODUCERS");
    if (l->opts.ninputs == 0 && !(producers && !strcmp(producers, "1")))
        env[j] = (char *)"TFOS_FEED_EMPTY=1";
    return env;
}

/* ---- agents ---------------------------------------------------------------- */

static void agent_ended(tfos_local *l, int id)
{
    agent_proc *a = &l->agents[id];
    a->done = 1;
    if (a->pidfd >= 0) {
        tfos__loop_unwatch(l->loop, a->pidfd);
        close(a->pidfd);
        a->pidfd = -1;
    }
    if (l->coord && tfos_coord_state(l->coord) == TFOS_COORD_RESERVING) {
        /* an agent that dies before registering would otherwise only show
         * up as a reservation timeout */
        char desc[96], reason[256];
        tfos__describe_status(a->status, desc, sizeof desc);
        const char *job;
        int idx;
        tfos_layout_role(&l->opts.layout, id, &job, &idx);
        snprintf(reason, sizeof reason, "the agent of executor %d (%s:%d) ended before the cluster formed (%s)", id,
                 job, idx, desc);
        tfos_coord_fail(l->coord, TFOS_CAUSE_START, reason);
    }
}

static void reap(tfos_local *l)
{
    for (int i = 0; i < l->n; i++) {
        agent_proc *a = &l->agents[i];
        if (!a->done && a->pid > 0 && waitpid(a->pid, &a->status, WNOHANG) == a->pid)
            agent_ended(l, i);
    }
}

static void on_agent_exit(tfos__loop *loop, int fd, int events, void *user)
{
    (void)loop;
    (void)fd;
    (void)events;
    reap(user);
}

/* Kernels without pidfds: look for ended agents every 100 ms instead. */
static void on_reap_timer(tfos__loop *loop, tfos__timer *t, void *user)
{
    reap(user);
    tfos__timer_arm(loop, t, tfos__now_ms() + 100, on_reap_timer, user);
}

static int spawn_agent(tfos_local *l, int id, char **env)
{
    const tfos_run_opts *o = &l->opts;
    size_t argc = 0;
    while (o->argv[argc])
        argc++;
    size_t nprefix = 0;
    while (o->agent_prefix && o->agent_prefix[nprefix])
        nprefix++;
    char **argv = calloc(argc + nprefix + 40, sizeof *argv);
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
    for (size_t i = 0; i < nprefix; i++)
        argv[k++] = o->agent_prefix[i];
    if (nprefix) {
        argv[k++] = "--role";
        argv[k++] = (char *)job;
        argv[k++] = "--";
    }
    argv[k++] = (char *)o->agent_path;
    argv[k++] = "node";
    argv[k++] = "--coord";
    argv[k++] = (char *)tfos_coord_address(l->coord);
    argv[k++] = "--executor-id";
    argv[k++] = idbuf;
    argv[k++] = "--host";
    argv[k++] = o->bind_host ? "auto" : "127.0.0.1";
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
    if (nprefix) /* the agent's console is a container's log, not the user's */
        argv[k++] = "--forward-logs";
    char respawnbuf[16];
    if (o->respawn > 0) {
        snprintf(respawnbuf, sizeof respawnbuf, "%d", o->respawn);
        argv[k++] = "--respawn";
        argv[k++] = respawnbuf;
    }
    if (o->hang_timeout > 0) {
        argv[k++] = "--hang-timeout";
        argv[k++] = hangbuf;
    }
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
    tfos__spawn_opts so = {.argv = argv, .envp = env, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .new_pgroup = 0, .pdeathsig = SIGTERM};
    agent_proc *a = &l->agents[id];
    int rc = tfos__spawn(&so, &a->pid);
    free(argv);
    if (rc) {
        TFOS_ERROR("cannot start the agent %s: %s", o->agent_path, strerror(errno));
        return rc;
    }
    a->pidfd = tfos__pidfd_open(a->pid);
    if (a->pidfd < 0 || tfos__loop_watch(l->loop, a->pidfd, TFOS_EV_READ, on_agent_exit, l)) {
        if (a->pidfd >= 0)
            close(a->pidfd);
        a->pidfd = -1;
        if (!l->reap_timer.armed)
            tfos__timer_arm(l->loop, &l->reap_timer, tfos__now_ms() + 100, on_reap_timer, l);
    }
    return 0;
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
    int found = tfos_policy_attempt(l->policy) > 1
                    ? tfos__feed_positions(l->checkpoint_dir, l->started_s, &l->resume)
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
    for (int i = 0; i < l->n; i++) {
        agent_proc *a = &l->agents[i];
        if (a->pid > 0 && !a->done) {
            kill(a->pid, SIGKILL);
            waitpid(a->pid, NULL, 0);
        }
        if (a->pidfd >= 0) {
            tfos__loop_unwatch(l->loop, a->pidfd);
            close(a->pidfd);
        }
        memset(a, 0, sizeof *a);
        a->pidfd = -1;
    }
    tfos__timer_disarm(l->loop, &l->reap_timer);
    if (l->coord)
        tfos_coord_close(l->coord);
    l->coord = NULL;
    l->status.coord = NULL;
    l->agents_deadline = 0;
}

/* A line of a node's output, forwarded by its agent (tfos yarn): kept for
 * the status page's /logs/stream, which tfos yarn's client follows. */
static void on_node_log(void *user, const char *node, const char *line, unsigned long long dropped)
{
    tfos_local *l = user;
    tfos__logbuf_add(&l->lines, node, line, dropped);
}

/* Form the cluster anew: a fresh coordinator, cluster id and agents; the
 * attempt number comes from the policy. */
static int start_attempt(tfos_local *l)
{
    int attempt = tfos_policy_attempt(l->policy);
    int rc = tfos__random_hex(l->cluster_id, 8);
    if (rc)
        return rc;
    tfos_coord_opts co = {.layout = l->opts.layout, .bind_host = l->opts.bind_host ? l->opts.bind_host : "127.0.0.1",
                          .port = 0, .secret = l->secret,
                          .reservation_timeout = l->opts.reservation_timeout, .stop_grace = l->opts.stop_grace,
                          .failure_grace = l->opts.failure_grace, .heartbeat_timeout = l->opts.heartbeat_timeout,
                          .policy = l->policy, .checkpoint_dir = l->checkpoint_dir,
                          .on_log = l->opts.agent_prefix ? on_node_log : NULL, .log_user = l};
    rc = tfos__coord_open_on(&l->coord, &co, l->loop);
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
        TFOS_INFO("cluster of %d nodes starting (coordinator %s, logs in %s, status %s)", l->n,
                  tfos_coord_address(l->coord), l->log_dir, l->status_url);
    else if (attempt == 1)
        TFOS_INFO("cluster of %d nodes starting (coordinator %s, logs in %s)", l->n, tfos_coord_address(l->coord),
                  l->log_dir);
    else
        TFOS_INFO("cluster of %d nodes starting again: attempt %d of %d (coordinator %s)", l->n, attempt,
                  l->opts.max_restarts + 1, tfos_coord_address(l->coord));
    return 0;
}

/* "COORD_ADDR\nSTATUS_URL\n" (STATUS_URL "" without a page), written whole:
 * the YARN ApplicationMaster waits for it. */
static int write_address_file(tfos_local *l)
{
    char *whole = NULL;
    if (asprintf(&whole, "%s\n%s\n", tfos_coord_address(l->coord), l->status_url) < 0)
        return TFOS_ENOMEM;
    int bad = tfos__write_file_whole(l->opts.address_file, whole);
    free(whole);
    if (bad) {
        TFOS_ERROR("cannot write %s: %s", l->opts.address_file, strerror(errno));
        return TFOS_ESYS;
    }
    return 0;
}

static void render_history(tfos_local *l)
{
    free(l->history);
    l->history = tfos_policy_render(l->policy);
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
    if (opts->max_restarts < 0)
        return TFOS_EINVAL;
    tfos_local *l = calloc(1, sizeof *l);
    if (!l)
        return TFOS_ENOMEM;
    l->opts = *opts;
    if (l->opts.reservation_timeout <= 0)
        l->opts.reservation_timeout = TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL;
    if (l->opts.stop_grace <= 0)
        l->opts.stop_grace = TFOS_DEFAULT_STOP_GRACE;
    if (l->opts.feed_mb <= 0 && l->opts.ninputs > 0 && !l->opts.serve) {
        l->opts.feed_mb = tfos__input_ring_mb(l->opts.inputs, l->opts.ninputs, l->opts.input_format,
                                              (uint32_t)l->opts.batch_rows);
        if (l->opts.feed_mb)
            TFOS_INFO("input ring: %d MiB per node, sized for the records of the .npy input (--feed-mb sets it)",
                      l->opts.feed_mb);
    }
    l->n = n;
    l->started_s = (double)time(NULL) - 1; /* mtimes have a second's resolution at worst */
    tfos__feed_meter_init(&l->meter, tfos__now_ms());
    int rc = tfos__loop_open(&l->loop);
    if (rc)
        goto fail;
    rc = tfos_policy_open(&l->policy, opts->max_restarts);
    if (rc)
        goto fail;
    rc = TFOS_ENOMEM;
    l->agents = calloc((size_t)n, sizeof *l->agents);
    if (!l->agents)
        goto fail;
    for (int i = 0; i < n; i++)
        l->agents[i].pidfd = -1;
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
    if (opts->secret && strlen(opts->secret) == TFOS_HEX_SECRET_LEN)
        snprintf(l->secret, sizeof l->secret, "%s", opts->secret);
    else if (opts->secret) {
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
    if (opts->serve) {
        char err[512];
        /* model servers in containers elsewhere (tfos yarn serve) reach it over TCP */
        const char *tcp = opts->agent_prefix ? (opts->bind_host ? opts->bind_host : "127.0.0.1") : NULL;
        if ((rc = tfos__serve_open(&l->serve, l->loop, opts->serve, l->secret, tcp, err, sizeof err))) {
            TFOS_ERROR("%s", err);
            goto fail;
        }
    }
    if (opts->status_port >= 0) {
        const char *host = opts->status_host ? opts->status_host : "127.0.0.1";
        rc = tfos__http_open(&l->http, l->loop, host, opts->status_port, l->serve ? 256 : 64);
        if (rc) {
            TFOS_ERROR("cannot serve %s on port %d: %s", l->serve ? "the models" : "the status page",
                       opts->status_port, strerror(errno));
            goto fail;
        }
        if ((rc = tfos__status_routes(l->http, &l->status)))
            goto fail;
        /* beyond loopback the page and the logs need a token */
        char query[100] = "", token[80] = "";
        if (opts->http_token && *opts->http_token) {
            snprintf(token, sizeof token, "%s", opts->http_token);
        } else if (!is_loopback(host)) {
            if ((rc = tfos__random_hex(token, 16)))
                goto fail;
            snprintf(query, sizeof query, "?token=%s", token);
        }
        tfos__http_set_token(l->http, token);
        if (l->serve && (rc = tfos__serve_attach(l->serve, l->http, &l->status, token)))
            goto fail;
        snprintf(l->status_url, sizeof l->status_url, "http://%s:%d/%s", host, tfos__http_port(l->http), query);
        for (int i = 0; l->serve && i < opts->serve->nmodels; i++)
            TFOS_INFO("model %s: POST http://%s:%d/v2/models/%s/infer (Open Inference Protocol)%s",
                      opts->serve->models[i], host, tfos__http_port(l->http), opts->serve->models[i],
                      opts->http_token && *opts->http_token ? ", with the token" : query[0] ? ", with the token in the status URL" : "");
        /* where `tfos status` and `tfos logs -f` find this run (0600: it may
         * hold the token) */
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
    }
    l->status.feed = &l->meter;
    if (opts->agent_prefix) {
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
    render_history(l);
    tfos__timer_arm(l->loop, &l->meter_timer, tfos__now_ms() + 1000, on_meter, l);
    rc = start_attempt(l);
    if (rc)
        goto fail;
    if (opts->address_file && (rc = write_address_file(l))) {
        end_attempt(l);
        goto fail;
    }
    *out = l;
    return 0;
fail:
    tfos__logbuf_fini(&l->lines);
    tfos__serve_close(l->serve);
    tfos__http_close(l->http);
    tfos__feed_meter_fini(&l->meter);
    tfos_policy_close(l->policy);
    tfos__loop_close(l->loop);
    free(l->history);
    free(l->agents);
    free(l);
    return rc;
}

static int all_agents_done(const tfos_local *l)
{
    for (int i = 0; i < l->n; i++)
        if (l->agents[i].pid > 0 && !l->agents[i].done)
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
    free(text);
    free(json);
}

static void finish(tfos_local *l)
{
    tfos_coord *c = l->coord;
    save_final_status(l);
    if (tfos_coord_state(c) == TFOS_COORD_DONE) {
        l->exit_code = 0;
        l->summary[0] = 0;
        if (tfos_policy_count(l->policy))
            TFOS_INFO("all nodes finished successfully on attempt %d, after:\n%s", tfos_policy_attempt(l->policy),
                      l->history);
        TFOS_INFO("all nodes finished successfully; logs in %s", l->log_dir);
    } else {
        int code = tfos_coord_failure_code(c);
        l->exit_code = l->stop_signo ? 128 + l->stop_signo : code == TFOS_ETIMEDOUT ? 124 : 1;
        const char *verdict = tfos_policy_verdict(l->policy);
        if (tfos_policy_count(l->policy) > 1)
            snprintf(l->summary, sizeof l->summary, "failed %d times (--max-restarts %d):\n%s%s%s%slast failure:\n%s",
                     tfos_policy_count(l->policy), l->opts.max_restarts, l->history, *verdict ? "not restarted: " : "",
                     verdict, *verdict ? "\n" : "", tfos_coord_failure(c));
        else
            snprintf(l->summary, sizeof l->summary, "%s%s%s", tfos_coord_failure(c),
                     *verdict ? "\nnot restarted: " : "", verdict);
        if (l->serve && l->stop_signo && tfos_policy_count(l->policy) <= 1) /* how a server is stopped */
            TFOS_INFO("stopped serving (signal %d, %s); logs of the model servers are in %s", l->stop_signo,
                      strsignal(l->stop_signo), l->log_dir);
        else
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
        !l->stop_signo) {
        tfos_failure f;
        tfos_coord_failure_info(l->coord, &f);
        TFOS_WARN("restarting every node (attempt %d of %d) after: %s", tfos_policy_attempt(l->policy),
                  l->opts.max_restarts + 1, f.summary);
        end_attempt(l);
        if (start_attempt(l) == 0)
            return 0;
        save_final_status(l);
        l->finished = 1;
        l->exit_code = 1;
        snprintf(l->summary, sizeof l->summary, "could not restart the cluster for attempt %d:\n%s",
                 tfos_policy_attempt(l->policy), l->history);
        return 1;
    }
    finish(l);
    return 1;
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
    if (l->opts.ninputs > 0 && !l->feed && st == TFOS_COORD_RUNNING)
        start_feed(l);
    if (st < TFOS_COORD_DONE)
        return 0;
    tfos__feedrun_close(l->feed);
    l->feed = NULL;
    if (!l->agents_deadline)
        l->agents_deadline = tfos__now_ms() + 5000;
    reap(l);
    if (!all_agents_done(l)) {
        if (tfos__now_ms() < l->agents_deadline)
            return 0;
        for (int i = 0; i < l->n; i++)
            if (l->agents[i].pid > 0 && !l->agents[i].done) {
                TFOS_WARN("agent of executor %d (pid %d) did not exit; killing it", i, (int)l->agents[i].pid);
                kill(l->agents[i].pid, SIGKILL);
                if (tfos__wait_pid(l->agents[i].pid, 5000, &l->agents[i].status) == 0)
                    agent_ended(l, i);
            }
    }
    return conclude(l);
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
    if (l->coord)
        end_attempt(l);
    tfos__serve_close(l->serve); /* answers what still waits (503), before the HTTP server goes */
    for (int64_t until = tfos__now_ms() + 2000; l->serve && tfos__http_busy(l->http) && tfos__now_ms() < until;)
        tfos__loop_run(l->loop, 50);
    tfos__http_close(l->http);
    tfos__logbuf_fini(&l->lines);
    tfos__timer_disarm(l->loop, &l->meter_timer);
    tfos__feed_meter_fini(&l->meter);
    tfos__position_fini(&l->resume);
    tfos_policy_close(l->policy);
    tfos__loop_close(l->loop);
    free(l->history);
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
    /* the bound only matters for noticing *stop_signal, set by a signal
     * handler (whose signal also interrupts the loop's wait) */
    while (!tfos_local_step(l, 1000)) {
        if (stop_signal && *stop_signal && !stopped) {
            char reason[96];
            snprintf(reason, sizeof reason, "interrupted by signal %d (%s)", *stop_signal, strsignal(*stop_signal));
            tfos_local_stop(l, reason, *stop_signal);
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
    tfos_local_close(l);
    return 0;
}
