/* log.c: process-wide logger with a level threshold. */
#include "core/log.h"

#include "platform/clock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static tfos_log_fn log_fn;
static void *log_user;
static int log_level = -1; /* -1: not yet read from the environment */

void tfos__log_stderr(int level, const char *msg)
{
    static const char *names[] = {"debug: ", "", "warning: ", "error: "};
    char line[4200];
    int n = snprintf(line, sizeof line, "tfos: %s%s\n", names[level & 3], msg);
    if (n > (int)sizeof line - 1) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    ssize_t w = write(2, line, (size_t)n); /* one write: lines from many processes don't mix */
    (void)w;
}

static void default_sink(int level, const char *msg, void *user)
{
    (void)user;
    tfos__log_stderr(level, msg);
}

/* A fork while another thread held log_lock would leave it locked forever in
 * the child (a Python program that forks, such as pyspark's daemon). */
static void lock_for_fork(void)
{
    pthread_mutex_lock(&log_lock);
}

static void unlock_after_fork(void)
{
    pthread_mutex_unlock(&log_lock);
}

static void register_fork_handlers(void)
{
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

static int level_from_env(void)
{
    const char *e = getenv("TFOS_LOG_LEVEL");
    if (!e)
        return TFOS_LOG_INFO;
    if (!strcasecmp(e, "debug"))
        return TFOS_LOG_DEBUG;
    if (!strcasecmp(e, "warn") || !strcasecmp(e, "warning"))
        return TFOS_LOG_WARN;
    if (!strcasecmp(e, "error"))
        return TFOS_LOG_ERROR;
    return TFOS_LOG_INFO;
}

void tfos_set_logger(tfos_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    pthread_mutex_unlock(&log_lock);
}

void tfos_set_log_level(int level)
{
    pthread_mutex_lock(&log_lock);
    log_level = level;
    pthread_mutex_unlock(&log_lock);
}

/* The sink runs without log_lock: a sink may block (Python's, on the GIL) or
 * log again, and another thread must be able to log meanwhile. */
void tfos__log(int level, const char *fmt, ...)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_fork_handlers);
    pthread_mutex_lock(&log_lock);
    if (log_level < 0)
        log_level = level_from_env();
    int threshold = log_level;
    tfos_log_fn fn = log_fn ? log_fn : default_sink;
    void *user = log_fn ? log_user : NULL;
    pthread_mutex_unlock(&log_lock);
    if (level < threshold)
        return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(level, msg, user);
}

/* The calling thread's last error message (tfos_last_error). */
static _Thread_local char last_msg[1024];
static _Thread_local int last_code;

int tfos__errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    last_code = rc;
    if (err && errlen)
        snprintf(err, errlen, "%s", last_msg);
    return rc;
}

const char *tfos_last_error(void)
{
    return last_msg[0] ? last_msg : tfos_strerror(last_code);
}

void tfos__warn_limit_flush(tfos__warn_limit *w, int force)
{
    if (w->suppressed && (force || tfos__now_ms() - w->window >= w->window_ms)) {
        tfos__log(TFOS_LOG_WARN, "%s: %d more warnings in the last %d s were not shown", w->who, w->suppressed,
                  w->window_ms / 1000);
        w->suppressed = 0;
    }
}

void tfos__warn_limited(tfos__warn_limit *w, const char *fmt, ...)
{
    int64_t now = tfos__now_ms();
    if (now - w->window >= w->window_ms) {
        tfos__warn_limit_flush(w, 1);
        w->window = now;
        w->shown = 0;
    }
    if (w->shown++ >= w->per_window) {
        w->suppressed++;
        return;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tfos__log(TFOS_LOG_WARN, "%s: %s", w->who, msg);
}

int64_t tfos__warn_limit_due(const tfos__warn_limit *w)
{
    return w->suppressed ? w->window + w->window_ms : INT64_MAX;
}

void tfos__rate_set(tfos__rate *r, double per_s, double burst)
{
    r->per_s = per_s;
    r->burst = burst;
    r->tokens = burst; /* a full bucket to begin with */
    r->at_ms = 0;
}

int tfos__rate_take(tfos__rate *r, int64_t now_ms)
{
    if (r->at_ms && now_ms > r->at_ms) {
        r->tokens += (double)(now_ms - r->at_ms) * r->per_s / 1000;
        if (r->tokens > r->burst)
            r->tokens = r->burst;
    }
    if (!r->at_ms || now_ms > r->at_ms)
        r->at_ms = now_ms;
    if (r->tokens < 1)
        return 0;
    r->tokens -= 1;
    return 1;
}
