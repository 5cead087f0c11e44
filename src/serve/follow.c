/* follow.c: a model served from MLflow's model registry, its alias
 * followed from a thread (serve.h, "follow.c"). The thread only asks the
 * registry and writes files; what the front end learns from it comes back
 * through the loop, one fixed-size record per new folder on a pipe (under
 * PIPE_BUF: written whole). */
#include "serve/serve_int.h"
#include "track/registry.h"

#include "core/loop.h"
#include "platform/fs.h"
#include "platform/webhdfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REGISTRY_TIMEOUT_MS 30000 /* one registry call or one file's transfer */

typedef struct news {
    char folder[16];
    char version[32];
} news;

struct tfos__follow {
    char model[128];
    char uri[300];
    char dir[PATH_MAX];
    tfos__webhdfs *hdfs;      /* borrowed; NULL: the model servers read dir */
    char remote[PATH_MAX];    /* with hdfs: the HDFS dir the folders are copied to */
    char remote_url[PATH_MAX + 64]; /* ... as the model servers name it (messages) */
    tfos__registry_ref ref;
    tfos__mlflow *m;
    int folder;               /* the newest folder made */
    tfos__serve *s;
    tfos__loop *loop;
    double poll_s;
    int pipe[2];
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    unsigned warned;          /* registry errors while following: logged once per outage */
};

/* With an HDFS dir: folder N fetched into dir/N goes to remote/N there
 * (copied under a name the model servers skip, then renamed into place, so
 * they never see half a version) and leaves dir. 0, or an error in err. */
static int publish(tfos__follow *f, int folder, const char *version, char *err, size_t errlen)
{
    if (!f->hdfs)
        return 0;
    char local[PATH_MAX + 16], part[PATH_MAX + 64], dest[PATH_MAX + 16], why[1024];
    snprintf(local, sizeof local, "%s/%d", f->dir, folder);
    snprintf(part, sizeof part, "%s/.%d.part-%d", f->remote, folder, (int)getpid());
    snprintf(dest, sizeof dest, "%s/%d", f->remote, folder);
    int rc = tfos__webhdfs_delete(f->hdfs, part, why, sizeof why); /* a previous try's leftovers */
    if (!rc && !(rc = tfos__webhdfs_put_dir(f->hdfs, local, part, why, sizeof why)))
        rc = tfos__webhdfs_rename(f->hdfs, part, dest, why, sizeof why);
    if (rc) {
        char ignored[256];
        tfos__webhdfs_delete(f->hdfs, part, ignored, sizeof ignored);
        snprintf(err, errlen, "%s (registry version %s): cannot copy it to HDFS for the model servers: %s", f->uri,
                 version, why);
    }
    tfos__rm_tree(local); /* here, a copy on its way to HDFS only */
    return rc;
}

int tfos__follow_open(tfos__follow **out, const char *model, const char *uri, const char *dir,
                      tfos__webhdfs *hdfs, const char *remote_url, char *err, size_t errlen)
{
    const char *tracking = getenv("MLFLOW_TRACKING_URI");
    tfos__follow *f = calloc(1, sizeof *f);
    int rc = TFOS_ENOMEM;
    *out = NULL;
    if (!f)
        goto fail;
    f->pipe[0] = f->pipe[1] = -1;
    snprintf(f->model, sizeof f->model, "%s", model);
    snprintf(f->uri, sizeof f->uri, "%s", uri);
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    if (hdfs) {
        const char *path = tfos__webhdfs_path(remote_url);
        if (!path) {
            snprintf(err, errlen, "%s: the model servers would read its versions from %s, which is not an "
                     "hdfs:// URL", uri, remote_url);
            rc = TFOS_EINVAL;
            goto fail;
        }
        f->hdfs = hdfs;
        snprintf(f->remote, sizeof f->remote, "%s", path);
        snprintf(f->remote_url, sizeof f->remote_url, "%s", remote_url);
    }
    if ((rc = tfos__registry_parse(uri, &f->ref, err, errlen)))
        goto fail;
    if (!tracking || !*tracking) {
        snprintf(err, errlen, "%s comes from MLflow's model registry: set MLFLOW_TRACKING_URI to its tracking "
                 "server (http://HOST:PORT)", uri);
        rc = TFOS_EINVAL;
        goto fail;
    }
    if ((rc = tfos__mlflow_open(&f->m, tracking, REGISTRY_TIMEOUT_MS, err, errlen)) ||
        (rc = tfos__registry_resolve(f->m, &f->ref, err, errlen)))
        goto fail;
    if (mkdir(dir, 0755) && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        rc = TFOS_ESYS;
        goto fail;
    }
    char first[PATH_MAX + 8];
    snprintf(first, sizeof first, "%s/1", dir);
    if ((rc = tfos__registry_fetch(f->m, f->ref.name, f->ref.version, first, err, errlen)))
        goto fail;
    if (hdfs && ((rc = tfos__webhdfs_mkdirs(hdfs, f->remote, err, errlen)) ||
                 (rc = publish(f, 1, f->ref.version, err, errlen))))
        goto fail;
    f->folder = 1;
    *out = f;
    return 0;
fail:
    tfos__follow_close(f);
    return rc;
}

static void on_news(tfos__loop *l, int fd, int events, void *user)
{
    (void)l, (void)events;
    tfos__follow *f = user;
    news n;
    while (read(fd, &n, sizeof n) == (ssize_t)sizeof n)
        tfos__serve_registry_folder(f->s, f->model, f->uri, n.folder, n.version);
}

/* Wait poll_s or until stopped: 1 when stopped. */
static int nap(tfos__follow *f)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(f->poll_s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&f->mu);
    while (!f->stop && pthread_cond_timedwait(&f->cv, &f->mu, &ts) != ETIMEDOUT)
        ;
    int stop = f->stop;
    pthread_mutex_unlock(&f->mu);
    return stop;
}

static void *follow_thread(void *arg)
{
    tfos__follow *f = arg;
    char err[1024];
    while (!nap(f)) {
        tfos__registry_ref r = f->ref;
        int rc = tfos__registry_resolve(f->m, &r, err, sizeof err);
        if (!rc && !strcmp(r.version, f->ref.version)) {
            if (f->warned)
                TFOS_INFO("model %s: the registry answers again: %s is version %s", f->model, f->uri, r.version);
            f->warned = 0;
            continue;
        }
        char dest[PATH_MAX + 96];
        snprintf(dest, sizeof dest, "%s/%d", f->dir, f->folder + 1);
        if (!rc && !(rc = tfos__registry_fetch(f->m, r.name, r.version, dest, err, sizeof err)) &&
            !(rc = publish(f, f->folder + 1, r.version, err, sizeof err))) {
            if (f->hdfs)
                snprintf(dest, sizeof dest, "%s/%d", f->remote_url, f->folder + 1);
            news n;
            memset(&n, 0, sizeof n);
            snprintf(n.folder, sizeof n.folder, "%d", ++f->folder);
            snprintf(n.version, sizeof n.version, "%s", r.version);
            TFOS_INFO("model %s: %s moved from version %s to %s: fetched into %s; the model servers load it "
                      "as their version %s", f->model, f->uri, f->ref.version, r.version, dest, n.folder);
            f->ref = r;
            f->warned = 0;
            if (write(f->pipe[1], &n, sizeof n) != (ssize_t)sizeof n)
                TFOS_WARN("model %s: could not tell the front end of version %s", f->model, r.version);
            continue;
        }
        if (!f->warned++) /* the version served goes on answering meanwhile */
            TFOS_WARN("model %s: cannot follow %s (trying again every %g s; version %s goes on serving): %s",
                      f->model, f->uri, f->poll_s, f->ref.version, err);
    }
    return NULL;
}

int tfos__follow_start(tfos__follow *f, tfos__serve *s, tfos__loop *loop, double poll_s)
{
    f->s = s;
    f->loop = loop;
    f->poll_s = poll_s;
    tfos__serve_registry_folder(s, f->model, f->uri, "1", f->ref.version);
    if (!f->ref.alias[0] || poll_s <= 0)
        return 0; /* a version named never moves */
    if (pipe2(f->pipe, O_CLOEXEC | O_NONBLOCK))
        return TFOS_ESYS;
    int rc = tfos__loop_watch(loop, f->pipe[0], TFOS_EV_READ, on_news, f);
    if (rc)
        return rc;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, follow_thread, f)) {
        tfos__loop_unwatch(loop, f->pipe[0]);
        return TFOS_ESYS;
    }
    f->running = 1;
    return 0;
}

void tfos__follow_close(tfos__follow *f)
{
    if (!f)
        return;
    if (f->running) {
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_cond_signal(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
    }
    if (f->pipe[0] >= 0) {
        if (f->loop)
            tfos__loop_unwatch(f->loop, f->pipe[0]);
        close(f->pipe[0]);
        close(f->pipe[1]);
    }
    tfos__mlflow_close(f->m);
    free(f);
}
