/* coord.c: tfos._tfos.Coordinator, the coordinator alone (libtfos's
 * tfos_coord) for drivers that run their own nodes, such as Spark's, with
 * its own event loop and, optionally, the status page on that loop.
 *
 * Threads: run() is the loop's thread: it runs the loop with the GIL
 * released, sleeping until the coordinator or the status page has something
 * to do. Every other method takes the object's mutex, which the loop holds
 * except while it sleeps (the loop's sleep hooks release it), acts, and wakes
 * the loop so it re-arms its timers. Without a run() thread, step() runs the
 * loop once. */
#include "tfosmod.h"

#include "core/loop.h"
#include "platform/clock.h"
#include "roles/coord.h"
#include "track/tracker.h"
#include "tfos/tfos.h"
#include "web/http.h"
#include "web/status.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    tfos__loop *loop;
    tfos_coord *coord;
    PyObject *policy;         /* the RestartPolicy handed in, or NULL */
    PyObject *tracker;        /* the Tracker handed in (every report goes to it), or NULL */
    tfos__http *http;         /* NULL: no status page */
    tfos__status_src src;
    tfos__feed_meter meter;
    tfos__timer meter_timer;
    char *node_log_dir;       /* what src points at (malloc'd) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int mu_ready;
    int running, closing;
} CoordObject;

static void before_sleep(void *user)
{
    pthread_mutex_unlock(&((CoordObject *)user)->mu);
}

static void after_sleep(void *user)
{
    pthread_mutex_lock(&((CoordObject *)user)->mu);
}

/* Take the mutex with the GIL released (the loop thread never needs the GIL,
 * but other Python threads should run while we wait). */
static void lock(CoordObject *self)
{
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    Py_END_ALLOW_THREADS
}

static void unlock(CoordObject *self)
{
    if (self->loop)
        tfos__loop_wake(self->loop);
    pthread_mutex_unlock(&self->mu);
}

static void on_report(void *user, int node, const char *report, long long age_ms)
{
    tfos__tracker_report(user, node, report, age_ms);
}

static int Coord_init(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"workers", "secret", "ps", "chief", "evaluator", "bind_host", "port",
                             "reservation_timeout", "grace", "heartbeat_timeout", "attempt", "policy",
                             "checkpoint_dir", "failure_grace", "tracker", "framework", "resize_in_place", NULL};
    int workers, ps = 0, chief = 0, evaluator = 0, port = 0, attempt = 1, inplace_min = 0;
    const char *secret, *bind_host = "127.0.0.1", *ckpt = NULL, *framework = "tf";
    double rt = TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK, grace = TFOS_DEFAULT_STOP_GRACE,
           hb = TFOS_DEFAULT_HEARTBEAT_TIMEOUT, fgrace = TFOS_DEFAULT_FAILURE_GRACE;
    PyObject *policy = Py_None, *tracker = Py_None;
    if (self->coord) {
        PyErr_SetString(PyExc_RuntimeError, "Coordinator is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "is|ipp$sidddiOzdOsi", kwlist, &workers, &secret, &ps, &chief,
                                     &evaluator, &bind_host, &port, &rt, &grace, &hb, &attempt, &policy, &ckpt,
                                     &fgrace, &tracker, &framework, &inplace_min))
        return -1;
    if (inplace_min < 0 || inplace_min > workers || (inplace_min && (ps || chief || evaluator))) {
        PyErr_Format(PyExc_ValueError, "resize_in_place=%d: the least workers to go on with, 1..workers=%d, in a "
                     "cluster of workers only (0: off)", inplace_min, workers);
        return -1;
    }
    int spec_form = tfos_framework_spec_form(framework);
    if (spec_form < 0) {
        PyErr_Format(PyExc_ValueError, "framework='%s': use 'tf', 'torch' or 'jax'", framework);
        return -1;
    }
    module_state *st = PyType_GetModuleState(Py_TYPE(self));
    if (tracker != Py_None && (!PyObject_TypeCheck(tracker, st->tracker_type) || !tfos__py_tracker(tracker))) {
        PyErr_SetString(PyExc_TypeError, "tracker must be an open Tracker");
        return -1;
    }
    if (policy != Py_None && !PyObject_TypeCheck(policy, st->policy_type)) {
        PyErr_SetString(PyExc_TypeError, "policy must be a RestartPolicy");
        return -1;
    }
    if (pthread_mutex_init(&self->mu, NULL) || pthread_cond_init(&self->cv, NULL)) {
        PyErr_SetString(PyExc_RuntimeError, "cannot create the coordinator's lock");
        return -1;
    }
    self->mu_ready = 1;
    int rc = tfos__loop_open(&self->loop);
    if (rc) {
        tfos__py_raise(rc, "cannot start the coordinator's event loop");
        return -1;
    }
    tfos__loop_set_sleep_hooks(self->loop, before_sleep, after_sleep, self);
    if (policy != Py_None) {
        Py_INCREF(policy);
        self->policy = policy;
    }
    tfos_coord_opts o = {.layout = {.num_ps = ps, .num_workers = workers, .chief = chief, .evaluator = evaluator},
                         .bind_host = bind_host, .port = port, .secret = secret, .reservation_timeout = rt,
                         .stop_grace = grace, .failure_grace = fgrace, .heartbeat_timeout = hb, .attempt = attempt,
                         .policy = self->policy ? tfos__py_policy(self->policy) : NULL, .checkpoint_dir = ckpt,
                         .spec_form = spec_form, .inplace_min = inplace_min};
    rc = tfos__coord_open_on(&self->coord, &o, self->loop);
    if (rc) {
        tfos__py_raise(rc, "cannot start the coordinator");
        return -1;
    }
    self->src.policy = self->policy ? tfos__py_policy(self->policy) : NULL;
    if (tracker != Py_None) {
        /* reports reach the tracker on the loop's thread, without the GIL:
         * the reference kept here keeps it open while the coordinator lives */
        Py_INCREF(tracker);
        self->tracker = tracker;
        tfos__coord_on_report(self->coord, on_report, tfos__py_tracker(tracker));
    }
    return 0;
}

static int coord_ready(CoordObject *self)
{
    if (!self->coord || self->closing) {
        PyErr_SetString(PyExc_RuntimeError, "Coordinator is closed");
        return 0;
    }
    return 1;
}

/* run(): the loop's thread. Returns once close() is called. */
static PyObject *Coord_run(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!coord_ready(self))
        return NULL;
    int busy = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    if (self->running) {
        busy = 1;
    } else {
        self->running = 1;
        while (!self->closing)
            if (tfos__loop_run(self->loop, -1) < 0 && errno != EINTR)
                break;
        self->running = 0;
        pthread_cond_broadcast(&self->cv);
    }
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    if (busy) {
        PyErr_SetString(PyExc_RuntimeError, "the coordinator's loop already runs in another thread");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* step(timeout_ms=100): one iteration of the loop where no thread runs it;
 * with a run() thread, only the state. */
static PyObject *Coord_step(CoordObject *self, PyObject *args)
{
    int timeout = 100, state;
    if (!PyArg_ParseTuple(args, "|i", &timeout) || !coord_ready(self))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    state = self->running ? tfos_coord_state(self->coord) : tfos_coord_step(self->coord, timeout);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    tfos__py_log_drain();
    return PyLong_FromLong(state);
}

static void on_meter(tfos__loop *l, tfos__timer *t, void *user)
{
    CoordObject *self = user;
    tfos__feed_meter_taken_from(&self->meter, self->coord);
    tfos__feed_meter_update(&self->meter, NULL, tfos__now_ms()); /* the chart's samples */
    tfos__timer_arm(l, t, tfos__now_ms() + 1000, on_meter, self);
}

static PyObject *Coord_serve_status(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"host", "port", NULL};
    const char *host = "127.0.0.1";
    int port = 0, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|si", kwlist, &host, &port) || !coord_ready(self))
        return NULL;
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "port must be 0..65535");
        return NULL;
    }
    lock(self);
    if (self->http) {
        unlock(self);
        PyErr_SetString(PyExc_RuntimeError, "the status page is already served");
        return NULL;
    }
    tfos__feed_meter_init(&self->meter, tfos__now_ms());
    self->src.coord = self->coord;
    self->src.feed = &self->meter;
    self->src.log_dir = NULL;
    if (self->src.attempt < 1)
        self->src.attempt = self->policy ? tfos_policy_attempt(tfos__py_policy(self->policy)) : 1;
    if (self->policy)
        self->src.max_restarts = tfos_policy_max_restarts(tfos__py_policy(self->policy));
    rc = tfos__http_open(&self->http, self->loop, host, port, 0);
    int e = errno;
    if (!rc && (rc = tfos__status_routes(self->http, &self->src))) {
        tfos__http_close(self->http);
        self->http = NULL;
    }
    if (rc)
        tfos__feed_meter_fini(&self->meter);
    else
        tfos__timer_arm(self->loop, &self->meter_timer, tfos__now_ms() + 1000, on_meter, self);
    port = rc ? port : tfos__http_port(self->http);
    unlock(self);
    if (rc) {
        if (rc == TFOS_ENOMEM)
            return PyErr_NoMemory();
        return PyErr_Format(PyExc_OSError, "cannot serve the status page on %s:%d: %s", host, port,
                            strerror(e ? e : EADDRINUSE));
    }
    return PyLong_FromLong(port);
}

static PyObject *Coord_set_status(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"attempt", "max_restarts", "partitions_refed", "node_log_dir", "min_nodes", "max_nodes",
                             NULL};
    int attempt = -1, max_restarts = -1, refed = -1, min_nodes = -1, max_nodes = -1;
    PyObject *node_log_dir = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$iiiOii", kwlist, &attempt, &max_restarts, &refed, &node_log_dir,
                                     &min_nodes, &max_nodes) ||
        !coord_ready(self))
        return NULL;
    char *copy = NULL;
    if (node_log_dir && node_log_dir != Py_None) {
        const char *u = PyUnicode_AsUTF8(node_log_dir);
        if (!u)
            return NULL;
        if (!(copy = strdup(u)))
            return PyErr_NoMemory();
    }
    lock(self);
    if (attempt >= 0)
        self->src.attempt = attempt;
    if (max_restarts >= 0)
        self->src.max_restarts = max_restarts;
    if (refed >= 0)
        self->src.partitions_refed = refed;
    if (min_nodes >= 0)
        self->src.min_nodes = min_nodes;
    if (max_nodes >= 0)
        self->src.max_nodes = max_nodes;
    if (node_log_dir) {
        free(self->node_log_dir);
        self->node_log_dir = copy;
        self->src.node_log_dir = copy;
    }
    unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Coord_set_feed(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"rows", "partitions_done", "partitions_expected", "partitions_aborted", "state", NULL};
    unsigned long long rows = 0, done = 0, expected = 0, aborted = 0;
    const char *state = "feeding";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$KKKKs", kwlist, &rows, &done, &expected, &aborted, &state) ||
        !coord_ready(self))
        return NULL;
    if (strcmp(state, "feeding") && strcmp(state, "done") && strcmp(state, "failed") && strcmp(state, "stopped")) {
        PyErr_SetString(PyExc_ValueError, "state must be 'feeding', 'done', 'failed' or 'stopped'");
        return NULL;
    }
    lock(self);
    if (self->http) {
        /* the nodes' counts as of now, not of the last 1 s sample: a feed
         * that starts here counts what they consume from this point */
        tfos__feed_meter_taken_from(&self->meter, self->coord);
        tfos__feed_meter_set(&self->meter, state, rows, done, aborted, expected, tfos__now_ms());
    }
    unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Coord_get_status_port(CoordObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(self->http ? tfos__http_port(self->http) : -1);
}

static PyObject *Coord_stop(CoordObject *self, PyObject *args)
{
    const char *reason = NULL;
    if (!PyArg_ParseTuple(args, "|z", &reason) || !coord_ready(self))
        return NULL;
    lock(self);
    tfos_coord_stop(self->coord, reason);
    unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Coord_drain(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"reason", "grace", "force", NULL};
    const char *reason = NULL;
    double grace = 0;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "z|dp", kwlist, &reason, &grace, &force) || !coord_ready(self))
        return NULL;
    lock(self);
    int rc = tfos_coord_drain(self->coord, reason, grace, force);
    unlock(self);
    return PyBool_FromLong(rc == 0);
}

static PyObject *Coord_end_feed(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!coord_ready(self))
        return NULL;
    lock(self);
    tfos_coord_end_feed(self->coord);
    unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Coord_status(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!coord_ready(self))
        return NULL;
    lock(self);
    char *json = tfos_coord_status_json(self->coord);
    unlock(self);
    if (!json)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(json);
    free(json);
    return r;
}

/* Stop the loop thread (bounded by its current dispatch), then free. */
static void coord_shut(CoordObject *self)
{
    if (!self->mu_ready)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    self->closing = 1;
    if (self->loop)
        tfos__loop_wake(self->loop);
    while (self->running)
        pthread_cond_wait(&self->cv, &self->mu);
    if (self->http) {
        tfos__http_close(self->http);
        self->http = NULL;
        tfos__timer_disarm(self->loop, &self->meter_timer);
        tfos__feed_meter_fini(&self->meter);
    }
    if (self->coord) {
        tfos_coord_close(self->coord);
        self->coord = NULL;
    }
    tfos__loop_close(self->loop);
    self->loop = NULL;
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    free(self->node_log_dir);
    self->node_log_dir = NULL;
    self->src.node_log_dir = NULL;
}

static PyObject *Coord_close(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    coord_shut(self);
    Py_RETURN_NONE;
}

/* A getter of a value read under the mutex. */
#define LOCKED_GETTER(name, expr)                                                                                    \
    static PyObject *name(CoordObject *self, void *Py_UNUSED(c))                                                   \
    {                                                                                                              \
        if (!coord_ready(self))                                                                                    \
            return NULL;                                                                                           \
        lock(self);                                                                                                \
        PyObject *r = (expr);                                                                                      \
        unlock(self);                                                                                              \
        return r;                                                                                                  \
    }

LOCKED_GETTER(Coord_get_address, PyUnicode_FromString(tfos_coord_address(self->coord)))
LOCKED_GETTER(Coord_get_state, PyLong_FromLong(tfos_coord_state(self->coord)))
LOCKED_GETTER(Coord_get_failure, PyUnicode_FromString(tfos_coord_failure(self->coord)))
LOCKED_GETTER(Coord_get_failure_code, PyLong_FromLong(tfos_coord_failure_code(self->coord)))
LOCKED_GETTER(Coord_get_decision, PyLong_FromLong(tfos_coord_decision(self->coord)))
LOCKED_GETTER(Coord_get_drained, PyBool_FromLong(tfos_coord_drained(self->coord)))
LOCKED_GETTER(Coord_get_drain_step, PyLong_FromLongLong(tfos_coord_drain_step(self->coord)))

static PyObject *Coord_get_failure_info(CoordObject *self, void *Py_UNUSED(c))
{
    if (!coord_ready(self))
        return NULL;
    tfos_failure f;
    lock(self);
    int rc = tfos_coord_failure_info(self->coord, &f);
    unlock(self);
    if (rc)
        Py_RETURN_NONE;
    return tfos__py_failure_dict(&f);
}

static int Coord_traverse(CoordObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->policy);
    Py_VISIT(self->tracker);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void Coord_dealloc(CoordObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    coord_shut(self);
    if (self->mu_ready) {
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->cv);
    }
    Py_CLEAR(self->policy);
    Py_CLEAR(self->tracker);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Coord_methods[] = {
    {"run", (PyCFunction)Coord_run, METH_NOARGS,
     "run(): run the coordinator's event loop (and the status page's) in this thread until close(); the GIL is "
     "released and the loop sleeps until something happens."},
    {"step", (PyCFunction)Coord_step, METH_VARARGS,
     "step(timeout_ms=100) -> int: one iteration of the event loop when no thread runs it; the state."},
    {"stop", (PyCFunction)Coord_stop, METH_VARARGS, "stop(reason=None): ask every node to stop."},
    {"drain", (PyCFunction)(void (*)(void))Coord_drain, METH_VARARGS | METH_KEYWORDS,
     "drain(reason, grace=0, force=False) -> bool: drain on notice: every running chief/worker/evaluator "
     "checkpoints at one step (ctx.should_checkpoint) and ends within grace s (0: the default); False when "
     "nothing runs yet or the cluster is stopping, over or draining (stop it instead). See tfos_coord_drain."},
    {"end_feed", (PyCFunction)Coord_end_feed, METH_NOARGS,
     "end_feed(): end the input feed of every running chief/worker/evaluator node (no more records, ever); "
     "their programs see the end of the feed once they have read what is there."},
    {"status", (PyCFunction)Coord_status, METH_NOARGS, "status() -> str: JSON status of every node."},
    {"serve_status", (PyCFunction)(void (*)(void))Coord_serve_status, METH_VARARGS | METH_KEYWORDS,
     "serve_status(host='127.0.0.1', port=0) -> int: serve /status, /metrics, /feed/history and the live page "
     "for this coordinator on host:port (0: any free port) from its event loop; returns the port; close() stops "
     "serving."},
    {"set_status", (PyCFunction)(void (*)(void))Coord_set_status, METH_VARARGS | METH_KEYWORDS,
     "set_status(*, attempt=None, max_restarts=None, partitions_refed=None, node_log_dir=None, min_nodes=None, "
     "max_nodes=None): what the status "
     "page shows beside the nodes and the policy's history (node_log_dir: where each node's log is on its own "
     "host)."},
    {"set_feed", (PyCFunction)(void (*)(void))Coord_set_feed, METH_VARARGS | METH_KEYWORDS,
     "set_feed(*, rows=0, partitions_done=0, partitions_expected=0, partitions_aborted=0, state='feeding'): "
     "the feed's totals as the driver counts them, for the status page (rates and the chart are derived; "
     "a no-op without serve_status)."},
    {"close", (PyCFunction)Coord_close, METH_NOARGS,
     "close(): end run(), stop listening (the status page too) and free."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Coord_getset[] = {
    {"address", (getter)Coord_get_address, NULL, "host:port the coordinator listens on", NULL},
    {"state", (getter)Coord_get_state, NULL, "one of the STATE_* constants", NULL},
    {"failure", (getter)Coord_get_failure, NULL, "failure summary, or ''", NULL},
    {"failure_code", (getter)Coord_get_failure_code, NULL, "0, ETIMEDOUT, ESTOPPED or EFAILED", NULL},
    {"failure_info", (getter)Coord_get_failure_info, NULL,
     "the failure as a dict (cause, node, job, exit_code, signal, exception, where, summary...), or None", NULL},
    {"decision", (getter)Coord_get_decision, NULL,
     "what the policy decided about the failure: RESTART, RAISE, or 0 while nothing failed", NULL},
    {"status_port", (getter)Coord_get_status_port, NULL, "the status page's port, or -1", NULL},
    {"drained", (getter)Coord_get_drained, NULL, "True once a drain succeeded: every tracked node exited 0", NULL},
    {"drain_step", (getter)Coord_get_drain_step, NULL,
     "the drain step sent (-1: at each program's next check), or -2 when none was sent", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Coord_slots[] = {
    {Py_tp_doc, "Coordinator(workers, secret, ps=0, chief=False, evaluator=False, *, bind_host='127.0.0.1', "
                "port=0, reservation_timeout=600, grace=5, heartbeat_timeout=30, attempt=1, policy=None, "
                "checkpoint_dir=None, failure_grace=0, tracker=None, framework='tf', resize_in_place=0): framework "
                "'torch' or 'jax' sends each node the ranks form of the cluster, not every address (docs/DESIGN.md); "
                "resize_in_place=M (torch, workers only) goes on without a lost worker while M are left "
                "(docs/RELIABILITY.md, \"Torch survivors in place\")"},
    {Py_tp_init, Coord_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Coord_dealloc},
    {Py_tp_traverse, Coord_traverse},
    {Py_tp_methods, Coord_methods},
    {Py_tp_getset, Coord_getset},
    {0, NULL},
};

PyType_Spec tfos__py_coord_spec = {
    .name = "tfos._tfos.Coordinator",
    .basicsize = sizeof(CoordObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Coord_slots,
};
