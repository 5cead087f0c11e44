/* feedrun.c: one attempt's file feed (see feedrun.h). */
#include "feed/feedrun.h"

#include "core/log.h"
#include "feed/feeder.h"
#include "platform/clock.h"
#include "platform/proc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROGRESS_MS 5000

struct tfos__feedrun {
    tfos__feedrun_opts o;
    tfos__feeder_opts feeder_opts;
    int *feed_ids;
    int nfeed;
    tfos__feed_progress progress;
    int progress_live;
    /* the C feeder thread, and the eventfd it writes when done */
    pthread_t thread;
    int thread_started;
    int done_fd;
    _Atomic int stop;
    int rc;
    char err[1024];
    tfos__feeder_stats stats;
    /* the Arrow feeder process, its pidfd, and the thread watching its rings */
    pid_t arrow_pid;
    int arrow_fd;
    int arrow_status;
    pthread_t observer;
    int observer_started;
    int ended;       /* on_end was called (or is not wanted) */
    int64_t t0;
    tfos__timer progress_timer, sample_timer;
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

static void *feeder_main(void *arg)
{
    tfos__feedrun *f = arg;
    f->rc = tfos__feed_files(&f->feeder_opts, &f->stats, f->err, sizeof f->err);
    uint64_t one = 1;
    ssize_t w = write(f->done_fd, &one, sizeof one);
    (void)w;
    return NULL;
}

static void *observer_main(void *arg)
{
    tfos__feedrun *f = arg;
    tfos__feed_observe(&f->feeder_opts);
    return NULL;
}

/* The feed is over: fold its counts into the meter and tell the launcher. */
static void ended(tfos__feedrun *f, const char *state, int failed, const char *reason)
{
    tfos__feed_meter_update(f->o.meter, &f->progress, tfos__now_ms());
    tfos__feed_meter_end(f->o.meter, state, tfos__now_ms());
    tfos__timer_disarm(f->o.loop, &f->progress_timer);
    if (!f->ended && f->o.on_end) {
        f->ended = 1;
        f->o.on_end(f->o.user, failed, reason);
    }
    f->ended = 1;
}

static void on_thread_done(tfos__loop *l, int fd, int events, void *user)
{
    (void)events;
    tfos__feedrun *f = user;
    tfos__loop_unwatch(l, fd);
    pthread_join(f->thread, NULL);
    f->thread_started = 0;
    double secs = (double)(tfos__now_ms() - f->t0) / 1000.0;
    const tfos__feeder_stats *st = &f->stats;
    if (f->rc == 0) {
        char resumed[96] = "";
        if (st->resumed_rows)
            snprintf(resumed, sizeof resumed, "; %llu rows a checkpoint had were not fed again",
                     (unsigned long long)st->resumed_rows);
        TFOS_INFO("fed %llu rows (%llu partitions, %.1f MB) in %.2f s (%.0f rows/s)%s%s", (unsigned long long)st->rows,
                  (unsigned long long)st->partitions, (double)st->bytes / 1e6, secs,
                  secs > 0 ? (double)st->rows / secs : 0.0,
                  st->terminated ? "; some nodes terminated their feed early" : "", resumed);
        ended(f, "done", 0, NULL);
        return;
    }
    char reason[1200];
    snprintf(reason, sizeof reason, "the feed failed: %s", f->err[0] ? f->err : tfos_strerror(f->rc));
    ended(f, f->rc == TFOS_ESTOPPED ? "stopped" : "failed", f->rc != TFOS_ESTOPPED, reason);
}

static void on_arrow_exit(tfos__loop *l, int fd, int events, void *user)
{
    (void)events;
    tfos__feedrun *f = user;
    tfos__loop_unwatch(l, fd);
    if (waitpid(f->arrow_pid, &f->arrow_status, WNOHANG) != f->arrow_pid)
        return;
    f->arrow_pid = 0;
    int code = tfos__exit_code(f->arrow_status);
    if (code == 0) {
        ended(f, "done", 0, NULL);
        return;
    }
    char desc[96], reason[300];
    tfos__describe_status(f->arrow_status, desc, sizeof desc);
    snprintf(reason, sizeof reason, "the feed failed: the Arrow/Parquet feeder ended with %s (its message is above)",
             desc);
    ended(f, "failed", 1, reason);
}

static void on_progress(tfos__loop *l, tfos__timer *t, void *user)
{
    tfos__feedrun *f = user;
    char line[512];
    tfos__feed_meter_line(f->o.meter, f->feeder_opts.partition_rows, line, sizeof line);
    TFOS_INFO("%s", line);
    tfos__timer_arm(l, t, tfos__now_ms() + PROGRESS_MS, on_progress, f);
}

/* Once a second: the meter's sample of the live counters (rates, chart). */
static void on_sample(tfos__loop *l, tfos__timer *t, void *user)
{
    tfos__feedrun *f = user;
    tfos__feed_meter_update(f->o.meter, &f->progress, tfos__now_ms());
    if (!f->ended)
        tfos__timer_arm(l, t, tfos__now_ms() + 1000, on_sample, f);
}

static int start_arrow(tfos__feedrun *f, char *err, size_t errlen)
{
    const tfos_run_opts *o = f->o.run;
    char nodes[4096] = "", epochs[16], brows[16], prows[32];
    size_t used = 0;
    for (int i = 0; i < f->nfeed && used < sizeof nodes - 16; i++)
        used += (size_t)snprintf(nodes + used, sizeof nodes - used, "%s%d", i ? "," : "", f->feed_ids[i]);
    snprintf(epochs, sizeof epochs, "%d", f->feeder_opts.epochs);
    snprintf(brows, sizeof brows, "%u", f->feeder_opts.batch_rows);
    snprintf(prows, sizeof prows, "%llu", (unsigned long long)f->feeder_opts.partition_rows);
    char **argv = calloc((size_t)o->ninputs + 16, sizeof *argv);
    if (!argv)
        return tfos__errf(err, errlen, TFOS_ENOMEM, "the feed could not start: out of memory");
    size_t k = 0;
    argv[k++] = (char *)f->o.python;
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
    tfos__spawn_opts so = {.argv = argv, .envp = f->o.env, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .pdeathsig = SIGKILL};
    int rc = tfos__spawn(&so, &f->arrow_pid);
    free(argv);
    if (rc)
        return tfos__errf(err, errlen, rc, "the feed could not start: %s -m tfos.arrowfeed: %s", f->o.python,
                          strerror(errno));
    f->arrow_fd = tfos__pidfd_open(f->arrow_pid);
    if (f->arrow_fd < 0 || tfos__loop_watch(f->o.loop, f->arrow_fd, TFOS_EV_READ, on_arrow_exit, f)) {
        kill(f->arrow_pid, SIGKILL);
        waitpid(f->arrow_pid, NULL, 0);
        f->arrow_pid = 0;
        return tfos__errf(err, errlen, TFOS_ESYS, "the feed could not start: cannot watch its process: %s",
                          strerror(errno));
    }
    TFOS_INFO("feeding %d Arrow/Parquet file(s) x %d epoch(s) to %d node(s) with %s -m tfos.arrowfeed",
              o->ninputs, f->feeder_opts.epochs, f->nfeed, f->o.python);
    /* the Arrow feeder is another process: watch its rings from here */
    if (pthread_create(&f->observer, NULL, observer_main, f) == 0)
        f->observer_started = 1;
    return 0;
}

int tfos__feedrun_start(tfos__feedrun **out, const tfos__feedrun_opts *o, char *err, size_t errlen)
{
    const tfos_run_opts *r = o->run;
    int arrow = 0;
    for (int i = 0; i < r->ninputs; i++)
        arrow += is_arrow_input(r->inputs[i]);
    if (arrow && arrow != r->ninputs)
        return tfos__errf(err, errlen, TFOS_EINVAL, "the feed could not start: Arrow/Parquet inputs cannot be "
                          "mixed with CSV, JSON lines or .npy in one run");
    tfos__feedrun *f = calloc(1, sizeof *f);
    int total = tfos_layout_total(&r->layout);
    if (!f || !(f->feed_ids = calloc((size_t)total, sizeof *f->feed_ids))) {
        free(f);
        return tfos__errf(err, errlen, TFOS_ENOMEM, "the feed could not start: out of memory");
    }
    f->o = *o;
    f->done_fd = f->arrow_fd = -1;
    f->nfeed = tfos_layout_feed_ids(&r->layout, f->feed_ids, total);
    f->feeder_opts = (tfos__feeder_opts){
        .cluster_id = o->cluster_id, .secret = o->secret, .nnodes = f->nfeed, .executor_ids = f->feed_ids,
        .inputs = r->inputs, .ninputs = r->ninputs, .format = r->input_format, .csv_header = r->csv_header,
        .csv_delimiter = r->csv_delimiter,
        .epochs = r->epochs > 0 ? r->epochs : 1,
        .batch_rows = (uint32_t)(r->batch_rows > 0 ? r->batch_rows : TFOS_DEFAULT_BATCH_ROWS),
        .record_bytes = r->batch_rows > 0 ? 0 : TFOS_AUTO_RECORD_BYTES,
        .partition_rows = (uint64_t)(r->partition_rows > 0 ? r->partition_rows : TFOS_DEFAULT_PARTITION_ROWS),
        .stop = &f->stop, .progress = &f->progress, .resume = o->resume};
    int rc = tfos__feed_progress_init(&f->progress, f->nfeed);
    if (rc)
        goto fail_mem;
    f->progress_live = 1;
    for (int i = 0; i < f->nfeed; i++) {
        const char *job;
        int idx;
        tfos_layout_role(&r->layout, f->feed_ids[i], &job, &idx);
        snprintf(f->progress.nodes[i].name, sizeof f->progress.nodes[i].name, "%s:%d", job, idx);
        f->progress.nodes[i].executor_id = f->feed_ids[i];
    }
    f->progress.rows_counted = !arrow;
    int64_t now = tfos__now_ms();
    if (tfos__feed_meter_start(o->meter, &f->progress, arrow ? "arrow" : "files", now))
        goto fail_mem;
    f->t0 = now;
    if (arrow) {
        rc = start_arrow(f, err, errlen);
        if (rc)
            goto fail;
    } else {
        f->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (f->done_fd < 0 || tfos__loop_watch(o->loop, f->done_fd, TFOS_EV_READ, on_thread_done, f)) {
            rc = tfos__errf(err, errlen, TFOS_ESYS, "the feed could not start: %s", strerror(errno));
            goto fail;
        }
        if (pthread_create(&f->thread, NULL, feeder_main, f)) {
            rc = tfos__errf(err, errlen, TFOS_ESYS, "the feed could not start: no thread");
            goto fail;
        }
        f->thread_started = 1;
        TFOS_INFO("feeding %d file(s) x %d epoch(s) to %d node(s)", r->ninputs, f->feeder_opts.epochs, f->nfeed);
    }
    if (!r->quiet)
        tfos__timer_arm(o->loop, &f->progress_timer, now + PROGRESS_MS, on_progress, f);
    tfos__timer_arm(o->loop, &f->sample_timer, now + 1000, on_sample, f);
    *out = f;
    return 0;
fail_mem:
    rc = tfos__errf(err, errlen, TFOS_ENOMEM, "the feed could not start: out of memory");
fail:
    f->ended = 1;
    tfos__feedrun_close(f);
    return rc;
}

int tfos__feedrun_done(const tfos__feedrun *f)
{
    return f->ended;
}

void tfos__feedrun_close(tfos__feedrun *f)
{
    if (!f)
        return;
    int was_running = !f->ended;
    f->ended = 1; /* no on_end from here on */
    f->stop = 1;
    if (f->thread_started) {
        pthread_join(f->thread, NULL);
        f->thread_started = 0;
    }
    if (f->arrow_pid > 0) {
        int status;
        kill(f->arrow_pid, SIGTERM);
        if (tfos__wait_pid(f->arrow_pid, 5000, &status) != 0) {
            kill(f->arrow_pid, SIGKILL);
            waitpid(f->arrow_pid, &status, 0);
        }
        f->arrow_pid = 0;
    }
    if (f->observer_started)
        pthread_join(f->observer, NULL);
    if (f->done_fd >= 0) {
        tfos__loop_unwatch(f->o.loop, f->done_fd);
        close(f->done_fd);
    }
    if (f->arrow_fd >= 0) {
        tfos__loop_unwatch(f->o.loop, f->arrow_fd);
        close(f->arrow_fd);
    }
    tfos__timer_disarm(f->o.loop, &f->progress_timer);
    tfos__timer_disarm(f->o.loop, &f->sample_timer);
    if (f->progress_live) {
        tfos__feed_meter_update(f->o.meter, &f->progress, tfos__now_ms());
        if (was_running)
            tfos__feed_meter_end(f->o.meter, "stopped", tfos__now_ms());
        tfos__feed_progress_fini(&f->progress);
    }
    free(f->feed_ids);
    free(f);
}
