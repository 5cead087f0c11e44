/* tracker.c: one MLflow run per job (tracker.h): a bounded queue filled by
 * the launcher's thread and the coordinator's, emptied by one sender thread
 * in runs/log-batch calls (mlrest.h). */
#include "track/tracker.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/report.h"
#include "platform/clock.h"
#include "platform/httpc.h"
#include "track/mlrest.h"
#include "tfos/tfos.h"

#define QUEUE_CAP 8192          /* items waiting to be sent; more are dropped and counted */
#define CALL_TIMEOUT_MS 5000    /* each REST call */
#define END_FLUSH_MS 10000      /* tfos__tracker_end sends for this long at most */
#define KEY_MAX 250             /* MLflow's limits */
#define VALUE_MAX 5000
#define BATCH_MAX 1000          /* runs/log-batch: 1000 items, 100 params, 100 tags */
#define BATCH_PARAMS 100
#define BATCH_TAGS 100
#define AGG_NAMES 64            /* report names aggregated over ranks */
#define AGG_RANKS 1024

enum { K_METRIC, K_PARAM, K_TAG, K_KINDS };
static const char *const kind_names[K_KINDS] = {"metrics", "params", "tags"};

typedef struct item {
    int kind;
    char *key;
    char *text;     /* params and tags */
    double value;   /* metrics */
    int64_t step, wall_ms;
} item;

typedef struct agg {
    char name[TFOS__REPORT_MAX_NAME + 1];
    double latest[AGG_RANKS];
    unsigned char has[AGG_RANKS];
    int low;        /* the lowest rank that reports it; -1 none yet */
} agg;

struct tfos__tracker {
    tfos__mlflow *ml;
    char run_id[64];
    char experiment[256];
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item *q;                /* ring of QUEUE_CAP */
    size_t head, count;
    int ending;             /* the sender sends what is queued, then returns */
    int64_t end_deadline;   /* tfos__now_ms: after it, what is left is counted, not sent */
    int ended;
    int warned;
    uint64_t queued[K_KINDS], logged[K_KINDS], lost[K_KINDS];
    uint64_t nonfinite;
    char error[512];        /* the first reason something was not logged */
    char summary[1024];
    /* reports: touched under mu */
    agg *aggs[AGG_NAMES];
    int naggs;
    int64_t nreports[AGG_RANKS];
};

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *cut_dup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    return strndup(s, n);
}

/* The first reason something is not logged: warned about once (the job
 * goes on), kept for the end's summary. Under mu or before the thread. */
static void note_failure(tfos__tracker *t, const char *why)
{
    if (t->warned)
        return;
    t->warned = 1;
    snprintf(t->error, sizeof t->error, "%s", why);
    TFOS_WARN("MLflow: cannot log to %s: %s; the job goes on, and what is not logged is counted and said at "
              "its end", tfos__mlflow_shown(t->ml), why);
}

/* ---- making the run (before the thread) --------------------------------------- */

static int experiment_id(tfos__tracker *t, char *id, size_t len, char *err, size_t errlen)
{
    char q[800], path[1000];
    if (tfos__http_escape(t->experiment, q, sizeof q))
        return TFOS_EINVAL;
    snprintf(path, sizeof path, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=%s", q);
    for (int tries = 0; tries < 2; tries++) {
        json_t *reply = NULL;
        long status = 0;
        int rc = tfos__mlflow_call(t->ml, "GET", path, NULL, &reply, &status, err, errlen);
        if (rc == 0) {
            const char *s = json_string_value(json_object_get(json_object_get(reply, "experiment"), "experiment_id"));
            if (s)
                snprintf(id, len, "%s", s);
            json_decref(reply);
            return s ? 0 : TFOS_EPROTO;
        }
        if (rc != TFOS_EPROTO || status != 404)
            return rc;
        json_t *body = json_pack("{ss}", "name", t->experiment);
        rc = body ? tfos__mlflow_call(t->ml, "POST", "/api/2.0/mlflow/experiments/create", body, &reply, NULL,
                                      err, errlen)
                  : TFOS_ENOMEM;
        json_decref(body);
        if (rc == 0) {
            const char *s = json_string_value(json_object_get(reply, "experiment_id"));
            if (s)
                snprintf(id, len, "%s", s);
            json_decref(reply);
            return s ? 0 : TFOS_EPROTO;
        }
        /* made meanwhile by another job: read it again */
    }
    return TFOS_EPROTO;
}

static int make_run(tfos__tracker *t, const char *run_name, char *err, size_t errlen)
{
    char exp[64];
    int rc = experiment_id(t, exp, sizeof exp, err, errlen);
    if (rc)
        return rc;
    json_t *body = json_pack("{sssI}", "experiment_id", exp, "start_time", (json_int_t)wall_ms());
    if (!body)
        return TFOS_ENOMEM;
    if (run_name && *run_name)
        json_object_set_new(body, "run_name", json_string(run_name));
    json_t *reply = NULL;
    rc = tfos__mlflow_call(t->ml, "POST", "/api/2.0/mlflow/runs/create", body, &reply, NULL, err, errlen);
    json_decref(body);
    if (rc)
        return rc;
    const char *id = json_string_value(json_object_get(json_object_get(json_object_get(reply, "run"), "info"),
                                                       "run_id"));
    if (id)
        snprintf(t->run_id, sizeof t->run_id, "%s", id);
    else
        snprintf(err, errlen, "MLflow at %s: runs/create: no run_id in the reply", tfos__mlflow_shown(t->ml));
    json_decref(reply);
    return id ? 0 : TFOS_EPROTO;
}

/* ---- the sender ------------------------------------------------------------------ */

static void item_free(item *it)
{
    free(it->key);
    free(it->text);
}

/* Send batch[n] (taken off the queue) in one runs/log-batch. 0 or an error
 * in err. */
static int send_batch(tfos__tracker *t, item *batch, size_t n, char *err, size_t errlen)
{
    json_t *metrics = json_array(), *params = json_array(), *tags = json_array();
    json_t *body = json_pack("{sssososo}", "run_id", t->run_id, "metrics", metrics, "params", params, "tags", tags);
    if (!body)
        return TFOS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        item *it = &batch[i];
        int later = 0; /* a tag set again in this batch: its last value only (MLflow refuses a key twice) */
        for (size_t j = i + 1; j < n && it->kind == K_TAG && !later; j++)
            later = batch[j].kind == K_TAG && !strcmp(batch[j].key, it->key);
        if (later)
            continue;
        json_t *o = it->kind == K_METRIC
                        ? json_pack("{sssfsIsI}", "key", it->key, "value", it->value, "timestamp",
                                    (json_int_t)it->wall_ms, "step", (json_int_t)it->step)
                        : json_pack("{ssss}", "key", it->key, "value", it->text);
        if (!o) {
            json_decref(body);
            return TFOS_ENOMEM;
        }
        json_array_append_new(it->kind == K_METRIC ? metrics : it->kind == K_PARAM ? params : tags, o);
    }
    int rc = tfos__mlflow_call(t->ml, "POST", "/api/2.0/mlflow/runs/log-batch", body, NULL, NULL, err, errlen);
    json_decref(body);
    return rc;
}

static void *sender(void *arg)
{
    tfos__tracker *t = arg;
    item *batch = malloc(BATCH_MAX * sizeof *batch);
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->count && !t->ending)
            pthread_cond_wait(&t->cv, &t->mu);
        if (!t->count)
            break;
        /* one batch within log-batch's limits, in queue order */
        size_t n = 0;
        int params = 0, tags = 0;
        while (t->count && batch && n < BATCH_MAX) {
            item *it = &t->q[t->head];
            if ((it->kind == K_PARAM && params == BATCH_PARAMS) || (it->kind == K_TAG && tags == BATCH_TAGS))
                break;
            params += it->kind == K_PARAM;
            tags += it->kind == K_TAG;
            batch[n++] = *it;
            t->head = (t->head + 1) % QUEUE_CAP;
            t->count--;
        }
        if (!batch) { /* no memory for a batch: count the queue as lost */
            for (; t->count; t->head = (t->head + 1) % QUEUE_CAP, t->count--) {
                t->lost[t->q[t->head].kind]++;
                item_free(&t->q[t->head]);
            }
            note_failure(t, "out of memory");
            continue;
        }
        int late = t->ending && tfos__now_ms() > t->end_deadline;
        pthread_mutex_unlock(&t->mu);
        char err[512] = "";
        int rc;
        if (!t->run_id[0])
            rc = TFOS_EINVAL; /* the reason was noted at open */
        else if (late)
            rc = TFOS_ETIMEDOUT, snprintf(err, sizeof err, "the job's end waited %d s for it", END_FLUSH_MS / 1000);
        else
            rc = send_batch(t, batch, n, err, sizeof err);
        pthread_mutex_lock(&t->mu);
        for (size_t i = 0; i < n; i++) {
            (rc ? t->lost : t->logged)[batch[i].kind]++;
            item_free(&batch[i]);
        }
        if (rc && err[0])
            note_failure(t, err);
    }
    pthread_mutex_unlock(&t->mu);
    free(batch);
    return NULL;
}

/* ---- the API ----------------------------------------------------------------------- */

int tfos__tracker_open(tfos__tracker **out, const char *uri, const char *experiment, const char *run_name, char *err,
                       size_t errlen)
{
    *out = NULL;
    tfos__tracker *t = calloc(1, sizeof *t);
    if (!t)
        return TFOS_ENOMEM;
    int rc = tfos__mlflow_open(&t->ml, uri, CALL_TIMEOUT_MS, err, errlen);
    if (rc) {
        free(t);
        return rc;
    }
    if (!experiment || !*experiment)
        experiment = getenv("MLFLOW_EXPERIMENT_NAME");
    snprintf(t->experiment, sizeof t->experiment, "%s", experiment && *experiment ? experiment : "Default");
    rc = TFOS_ENOMEM;
    if (!(t->q = calloc(QUEUE_CAP, sizeof *t->q)))
        goto fail;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    char why[512];
    if (make_run(t, run_name, why, sizeof why))
        note_failure(t, why);
    if ((rc = pthread_create(&t->thread, NULL, sender, t))) {
        errno = rc;
        rc = TFOS_ESYS;
        snprintf(err, errlen, "cannot start the MLflow sender thread: %s", strerror(errno));
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        goto fail;
    }
    t->thread_started = 1;
    *out = t;
    return 0;
fail:
    free(t->q);
    tfos__mlflow_close(t->ml);
    free(t);
    return rc;
}

const char *tfos__tracker_run_id(const tfos__tracker *t)
{
    return t->run_id;
}

const char *tfos__tracker_uri(const tfos__tracker *t)
{
    return tfos__mlflow_shown(t->ml);
}

/* Queue it (it's key and text owned by the queue from here), or count it
 * lost when the queue is full or the run has ended. Under mu. */
static void push(tfos__tracker *t, item *it)
{
    t->queued[it->kind]++;
    if (t->ended || t->count == QUEUE_CAP || !it->key || (it->kind != K_METRIC && !it->text)) {
        t->lost[it->kind]++;
        if (!t->ended && t->count == QUEUE_CAP)
            note_failure(t, "the tracking server is slower than the reports: the queue of 8192 is full");
        item_free(it);
        return;
    }
    t->q[(t->head + t->count) % QUEUE_CAP] = *it;
    t->count++;
    pthread_cond_signal(&t->cv);
}

static void push_text(tfos__tracker *t, int kind, const char *key, const char *value)
{
    if (!t)
        return;
    item it = {.kind = kind, .key = cut_dup(key, KEY_MAX), .text = cut_dup(value ? value : "", VALUE_MAX)};
    pthread_mutex_lock(&t->mu);
    push(t, &it);
    pthread_mutex_unlock(&t->mu);
}

void tfos__tracker_param(tfos__tracker *t, const char *key, const char *value)
{
    push_text(t, K_PARAM, key, value);
}

void tfos__tracker_tag(tfos__tracker *t, const char *key, const char *value)
{
    push_text(t, K_TAG, key, value);
}

static void push_metric(tfos__tracker *t, const char *key, double value, int64_t step, int64_t ms)
{
    if (!isfinite(value)) {
        t->nonfinite++;
        return;
    }
    item it = {.kind = K_METRIC, .key = cut_dup(key, KEY_MAX), .value = value, .step = step,
               .wall_ms = ms ? ms : wall_ms()};
    push(t, &it);
}

void tfos__tracker_metric(tfos__tracker *t, const char *key, double value, int64_t step, int64_t ms)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    push_metric(t, key, value, step, ms);
    pthread_mutex_unlock(&t->mu);
}

static agg *find_agg(tfos__tracker *t, const char *name)
{
    for (int i = 0; i < t->naggs; i++)
        if (!strcmp(t->aggs[i]->name, name))
            return t->aggs[i];
    if (t->naggs == AGG_NAMES || !(t->aggs[t->naggs] = calloc(1, sizeof(agg))))
        return NULL;
    agg *a = t->aggs[t->naggs++];
    snprintf(a->name, sizeof a->name, "%.32s", name);
    a->low = -1;
    return a;
}

void tfos__tracker_report(tfos__tracker *t, int rank, const char *report, int64_t age_ms)
{
    if (!t || !report || rank < 0 || rank >= AGG_RANKS || tfos__report_check(report, NULL))
        return;
    int64_t ms = wall_ms() - (age_ms > 0 ? age_ms : 0);
    struct { char name[TFOS__REPORT_MAX_NAME + 1]; double v; } pairs[TFOS__REPORT_MAX_PAIRS];
    int n = 0;
    int64_t step = -1;
    for (const char *p = report; *p && n < TFOS__REPORT_MAX_PAIRS;) {
        const char *eq = strchr(p, '=');
        if (!eq || eq - p > TFOS__REPORT_MAX_NAME)
            break;
        char *end;
        double v = strtod(eq + 1, &end);
        if (eq - p == 4 && !memcmp(p, "step", 4))
            step = isfinite(v) ? (int64_t)v : -1;
        else {
            snprintf(pairs[n].name, sizeof pairs[n].name, "%.*s", (int)(eq - p), p);
            pairs[n++].v = v;
        }
        p = *end == ' ' ? end + 1 : end;
    }
    pthread_mutex_lock(&t->mu);
    t->nreports[rank]++;
    if (step < 0)
        step = t->nreports[rank];
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "rank%d/%.32s", rank, pairs[i].name);
        push_metric(t, key, pairs[i].v, step, ms);
        agg *a = find_agg(t, pairs[i].name);
        if (!a || !isfinite(pairs[i].v))
            continue;
        a->latest[rank] = pairs[i].v;
        a->has[rank] = 1;
        if (a->low < 0 || rank < a->low)
            a->low = rank;
        if (rank != a->low)
            continue;
        double sum = 0;
        int m = 0;
        for (int r = 0; r < AGG_RANKS; r++)
            if (a->has[r])
                sum += a->latest[r], m++;
        push_metric(t, pairs[i].name, sum / m, step, ms);
    }
    pthread_mutex_unlock(&t->mu);
}

void tfos__tracker_figures(tfos__tracker *t, const char *prefix, const char *json)
{
    if (!t || !json)
        return;
    json_t *root = json_loads(json, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return;
    }
    int64_t ms = wall_ms();
    const char *k, *k2;
    json_t *v, *v2;
    char key[KEY_MAX + 1];
    pthread_mutex_lock(&t->mu);
    json_object_foreach(root, k, v) {
        if (json_is_number(v)) {
            snprintf(key, sizeof key, "%s%s", prefix, k);
            push_metric(t, key, json_number_value(v), 0, ms);
        } else if (json_is_object(v)) {
            json_object_foreach(v, k2, v2) if (json_is_number(v2))
            {
                snprintf(key, sizeof key, "%s%s.%s", prefix, k, k2);
                push_metric(t, key, json_number_value(v2), 0, ms);
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
    json_decref(root);
}

void tfos__tracker_history(tfos__tracker *t, const tfos_policy *p)
{
    if (!t || !p)
        return;
    char key[64], v[480];
    snprintf(v, sizeof v, "%d", tfos_policy_attempt(p));
    tfos__tracker_tag(t, "tfos.attempts", v);
    int n = tfos_policy_count(p);
    for (int i = 0; i < n; i++) {
        const tfos_attempt_record *r = tfos_policy_record(p, i);
        const tfos_failure *f = &r->failure;
        snprintf(key, sizeof key, "tfos.attempt.%d.cause", f->attempt);
        tfos__tracker_tag(t, key, tfos_cause_name(f->cause));
        snprintf(key, sizeof key, "tfos.attempt.%d.summary", f->attempt);
        tfos__tracker_tag(t, key, f->summary);
        snprintf(key, sizeof key, "tfos.attempt.%d.decision", f->attempt);
        tfos__tracker_tag(t, key, tfos_decision_name(r->decision));
        if (f->node[0]) {
            snprintf(key, sizeof key, "tfos.attempt.%d.node", f->attempt);
            tfos__tracker_tag(t, key, f->node);
        }
        if (f->exc_type[0]) {
            snprintf(key, sizeof key, "tfos.attempt.%d.exception", f->attempt);
            snprintf(v, sizeof v, "%s at %s", f->exc_type, f->exc_where);
            tfos__tracker_tag(t, key, v);
        }
    }
    if (n) {
        char *text = tfos_policy_render(p);
        if (text)
            tfos__tracker_tag(t, "tfos.restart_history", text);
        free(text);
    }
}

void tfos__tracker_end(tfos__tracker *t, const char *status, char *summary, size_t len)
{
    if (!t)
        return;
    if (t->ended) {
        if (summary)
            snprintf(summary, len, "%s", t->summary);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->ending = 1;
    t->end_deadline = tfos__now_ms() + END_FLUSH_MS;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->thread_started)
        pthread_join(t->thread, NULL);
    t->thread_started = 0;
    t->ended = 1; /* the thread is gone: no lock needed from here */
    int status_set = 0;
    if (t->run_id[0]) {
        char err[512];
        json_t *body = json_pack("{sssssI}", "run_id", t->run_id, "status", status, "end_time", (json_int_t)wall_ms());
        status_set = body && tfos__mlflow_call(t->ml, "POST", "/api/2.0/mlflow/runs/update", body, NULL, NULL, err,
                                               sizeof err) == 0;
        if (!status_set && body)
            note_failure(t, err);
        json_decref(body);
    }
    uint64_t lost = t->lost[K_METRIC] + t->lost[K_PARAM] + t->lost[K_TAG];
    if (!lost && status_set) {
        snprintf(t->summary, sizeof t->summary,
                 "MLflow run %s (experiment \"%s\") at %s: %s; logged %llu metrics, %llu params, %llu tags%s", t->run_id,
                 t->experiment, tfos__mlflow_shown(t->ml), status, (unsigned long long)t->logged[K_METRIC],
                 (unsigned long long)t->logged[K_PARAM], (unsigned long long)t->logged[K_TAG],
                 t->nonfinite ? " (values that were not finite skipped)" : "");
        TFOS_INFO("%s", t->summary);
    } else {
        char what[256] = "";
        size_t o = 0;
        for (int k = 0; k < K_KINDS; k++)
            if (t->lost[k] && o < sizeof what)
                o += (size_t)snprintf(what + o, sizeof what - o, "%s%llu of %llu %s", o ? ", " : "",
                                      (unsigned long long)t->lost[k], (unsigned long long)t->queued[k], kind_names[k]);
        if (!t->run_id[0])
            snprintf(t->summary, sizeof t->summary, "MLflow: no run was made at %s, so nothing was logged (%s): %s",
                     tfos__mlflow_shown(t->ml), what, t->error[0] ? t->error : "no reason given");
        else
            snprintf(t->summary, sizeof t->summary, "MLflow: not logged to %s run %s: %s%s%s%s (%s)",
                     tfos__mlflow_shown(t->ml), t->run_id, what, status_set ? "" : *what ? "; " : "",
                     status_set ? "" : "the run's status, ", status_set ? "" : status,
                     t->error[0] ? t->error : "no reason given");
        TFOS_WARN("%s", t->summary);
    }
    if (summary)
        snprintf(summary, len, "%s", t->summary);
}

void tfos__tracker_close(tfos__tracker *t)
{
    if (!t)
        return;
    tfos__tracker_end(t, "KILLED", NULL, 0);
    for (size_t i = 0; i < t->count; i++)
        item_free(&t->q[(t->head + i) % QUEUE_CAP]);
    for (int i = 0; i < t->naggs; i++)
        free(t->aggs[i]);
    free(t->q);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    tfos__mlflow_close(t->ml);
    free(t);
}
