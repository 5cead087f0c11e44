/* tfosmodule.c: the CPython extension `tfos._tfos`, a thin layer over libtfos.
 *
 * Two heap types: LocalCluster (the `tfos run` launcher, driven step by step
 * so Python can deliver KeyboardInterrupt between steps) and Coordinator
 * (the coordinator alone, for drivers such as Spark's). Every blocking wait
 * runs with the GIL released. Multi-phase init; types live in module state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "core/auth.h"
#include "core/batch.h"
#include "core/feedsock.h"
#include "encode.h"
#include "core/ring.h"
#include "platform/clock.h"
#include "run/http.h"
#include "run/status.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define POOL_SLOTS 16
#define POOL_MAX_BYTES ((size_t)512 << 20)
#define POOLED_MIN ((size_t)64 << 10) /* records smaller than this become bytes */

typedef struct {
    PyTypeObject *local_type;
    PyTypeObject *coord_type;
    PyTypeObject *ring_type;
    PyTypeObject *buffer_type;
    /* recycled FeedBuffer memory: large records land in memory that is
     * already faulted in instead of fresh pages the kernel must zero */
    void *pool_mem[POOL_SLOTS];
    size_t pool_cap[POOL_SLOTS];
    int pool_n;
    size_t pool_bytes;
    PyObject *feed_error;   /* tfos._tfos.FeedError */
    PyObject *feed_closed;  /* FeedClosed(FeedError): the peer went away */
    PyObject *feed_ended;   /* FeedEnded(FeedError): end of feed */
} module_state;

static module_state *get_state(PyObject *module)
{
    return (module_state *)PyModule_GetState(module);
}

/* ---- helpers --------------------------------------------------------- */

/* A NULL-terminated char* array copied from a Python sequence of str. */
static char **argv_from_seq(PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "argv must be a sequence of str");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        Py_DECREF(fast);
        return NULL;
    }
    char **argv = calloc((size_t)n + 1, sizeof *argv);
    if (!argv) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        const char *s = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (!s) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "argv[%zd] must be str", i);
            goto fail;
        }
        if (!(argv[i] = strdup(s))) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    Py_DECREF(fast);
    return argv;
fail:
    for (Py_ssize_t i = 0; i < n; i++)
        free(argv[i]);
    free(argv);
    Py_DECREF(fast);
    return NULL;
}

static void argv_free(char **argv)
{
    if (!argv)
        return;
    for (char **a = argv; *a; a++)
        free(*a);
    free(argv);
}

static PyObject *raise_tfos(int rc, const char *what)
{
    if (rc == TFOS_ESYS)
        return PyErr_Format(PyExc_OSError, "%s: %s", what, strerror(errno));
    if (rc == TFOS_EINVAL)
        return PyErr_Format(PyExc_ValueError, "%s: %s", what, tfos_strerror(rc));
    return PyErr_Format(PyExc_RuntimeError, "%s: %s", what, tfos_strerror(rc));
}

static char *dup_opt(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ---- LocalCluster ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    tfos_local *local;
    char **argv;
    char *agent_path, *log_dir, *python, *checkpoint_dir;
    int finished;
} LocalObject;

static int Local_init(LocalObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"argv", "agent_path", "workers", "ps", "chief", "evaluator", "log_dir",
                             "reservation_timeout", "grace", "heartbeat_timeout", "ps_runs_program", "python",
                             "max_restarts", "checkpoint_dir", NULL};
    PyObject *argv_obj;
    const char *agent_path, *log_dir = NULL, *python = NULL;
    int workers = 1, ps = 0, chief = 0, evaluator = 0, ps_runs = 0, max_restarts = 3;
    double rt = 60, grace = 5, hb = 30;
    const char *ckpt = NULL;
    if (self->local) {
        PyErr_SetString(PyExc_RuntimeError, "LocalCluster is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|iipp$zdddpziz", kwlist, &argv_obj, &agent_path, &workers, &ps,
                                     &chief, &evaluator, &log_dir, &rt, &grace, &hb, &ps_runs, &python,
                                     &max_restarts, &ckpt))
        return -1;
    self->argv = argv_from_seq(argv_obj);
    if (!self->argv)
        return -1;
    self->agent_path = strdup(agent_path);
    self->log_dir = dup_opt(log_dir);
    self->python = dup_opt(python);
    self->checkpoint_dir = dup_opt(ckpt);
    tfos_run_opts o = {.layout = {.num_ps = ps, .num_workers = workers, .chief = chief, .evaluator = evaluator},
                       .argv = self->argv, .agent_path = self->agent_path, .log_dir = self->log_dir,
                       .reservation_timeout = rt, .stop_grace = grace, .heartbeat_timeout = hb,
                       .ps_runs_program = ps_runs, .python = self->python, .max_restarts = max_restarts,
                       .checkpoint_dir = self->checkpoint_dir};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_local_open(&self->local, &o);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_tfos(rc, "cannot start the local cluster");
        return -1;
    }
    return 0;
}

static int local_ready(LocalObject *self)
{
    if (!self->local) {
        PyErr_SetString(PyExc_RuntimeError, "LocalCluster is closed");
        return 0;
    }
    return 1;
}

static PyObject *Local_step(LocalObject *self, PyObject *args)
{
    int timeout = 100, done;
    if (!PyArg_ParseTuple(args, "|i", &timeout) || !local_ready(self))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    done = tfos_local_step(self->local, timeout);
    Py_END_ALLOW_THREADS
    self->finished = done;
    return PyBool_FromLong(done);
}

static PyObject *Local_stop(LocalObject *self, PyObject *args)
{
    const char *reason = NULL;
    int signo = 0;
    if (!PyArg_ParseTuple(args, "|zi", &reason, &signo) || !local_ready(self))
        return NULL;
    tfos_local_stop(self->local, reason, signo);
    Py_RETURN_NONE;
}

static PyObject *Local_status(LocalObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!local_ready(self))
        return NULL;
    char *json = tfos_coord_status_json(tfos_local_coord(self->local));
    if (!json)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(json);
    free(json);
    return r;
}

static PyObject *Local_close(LocalObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->local) {
        tfos_local *l = self->local;
        self->local = NULL;
        Py_BEGIN_ALLOW_THREADS
        tfos_local_close(l);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Local_get_exit_code(LocalObject *self, void *Py_UNUSED(c))
{
    if (!local_ready(self))
        return NULL;
    if (!self->finished)
        Py_RETURN_NONE;
    return PyLong_FromLong(tfos_local_exit_code(self->local));
}

static PyObject *Local_get_failure(LocalObject *self, void *Py_UNUSED(c))
{
    if (!local_ready(self))
        return NULL;
    return PyUnicode_FromString(tfos_local_failure(self->local));
}

static PyObject *Local_get_attempt(LocalObject *self, void *Py_UNUSED(c))
{
    if (!local_ready(self))
        return NULL;
    return PyLong_FromLong(tfos_local_attempt(self->local));
}

static PyObject *Local_get_log_dir(LocalObject *self, void *Py_UNUSED(c))
{
    if (!local_ready(self))
        return NULL;
    return PyUnicode_FromString(tfos_local_log_dir(self->local));
}

static PyObject *Local_get_address(LocalObject *self, void *Py_UNUSED(c))
{
    if (!local_ready(self))
        return NULL;
    return PyUnicode_FromString(tfos_coord_address(tfos_local_coord(self->local)));
}

static void Local_dealloc(LocalObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->local)
        tfos_local_close(self->local);
    argv_free(self->argv);
    free(self->agent_path);
    free(self->log_dir);
    free(self->python);
    free(self->checkpoint_dir);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Local_methods[] = {
    {"step", (PyCFunction)Local_step, METH_VARARGS,
     "step(timeout_ms=100) -> bool: drive the cluster; True once it has ended."},
    {"stop", (PyCFunction)Local_stop, METH_VARARGS, "stop(reason=None, signo=0): stop every node."},
    {"status", (PyCFunction)Local_status, METH_NOARGS, "status() -> str: the coordinator's JSON status."},
    {"close", (PyCFunction)Local_close, METH_NOARGS, "close(): stop what still runs and reap every agent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Local_getset[] = {
    {"exit_code", (getter)Local_get_exit_code, NULL, "exit code once ended, else None", NULL},
    {"failure", (getter)Local_get_failure, NULL, "failure summary, or ''", NULL},
    {"log_dir", (getter)Local_get_log_dir, NULL, "directory of the per-node logs", NULL},
    {"attempt", (getter)Local_get_attempt, NULL, "the current attempt (1 for the first)", NULL},
    {"address", (getter)Local_get_address, NULL, "coordinator address host:port", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Local_slots[] = {
    {Py_tp_doc, "LocalCluster(argv, agent_path, workers=1, ps=0, chief=False, evaluator=False, *, log_dir=None, "
                "reservation_timeout=60, grace=5, heartbeat_timeout=30, ps_runs_program=False, python=None)\n"
                "A cluster of local node agents, as `tfos run` forms it."},
    {Py_tp_init, Local_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Local_dealloc},
    {Py_tp_methods, Local_methods},
    {Py_tp_getset, Local_getset},
    {0, NULL},
};

static PyType_Spec Local_spec = {
    .name = "tfos._tfos.LocalCluster",
    .basicsize = sizeof(LocalObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Local_slots,
};

/* ---- Coordinator ------------------------------------------------------- */

/* The status page (serve_status) is served from step(): one thread drives
 * the coordinator, its page and its feed meter (the driver's lock in
 * TFCluster), so the handler reads them without locks of its own. */
typedef struct {
    PyObject_HEAD
    tfos_coord *coord;
    tfos__http *http;         /* NULL: no status page */
    tfos__status_src src;
    tfos__feed_meter meter;
    char *history, *node_log_dir; /* what src points at (malloc'd) */
} CoordObject;

static void coord_status_close(CoordObject *self)
{
    if (self->http) {
        tfos__http_close(self->http);
        self->http = NULL;
        tfos__feed_meter_fini(&self->meter);
    }
    free(self->history);
    free(self->node_log_dir);
    self->history = self->node_log_dir = NULL;
    self->src.history = self->src.node_log_dir = NULL;
}

static int Coord_init(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"workers", "secret", "ps", "chief", "evaluator", "bind_host", "port",
                             "reservation_timeout", "grace", "heartbeat_timeout", "attempt", NULL};
    int workers, ps = 0, chief = 0, evaluator = 0, port = 0, attempt = 1;
    const char *secret, *bind_host = "127.0.0.1";
    double rt = 600, grace = 5, hb = 30;
    if (self->coord) {
        PyErr_SetString(PyExc_RuntimeError, "Coordinator is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "is|ipp$sidddi", kwlist, &workers, &secret, &ps, &chief, &evaluator,
                                     &bind_host, &port, &rt, &grace, &hb, &attempt))
        return -1;
    tfos_coord_opts o = {.layout = {.num_ps = ps, .num_workers = workers, .chief = chief, .evaluator = evaluator},
                         .bind_host = bind_host, .port = port, .secret = secret, .reservation_timeout = rt,
                         .stop_grace = grace, .heartbeat_timeout = hb, .attempt = attempt};
    int rc = tfos_coord_open(&self->coord, &o);
    if (rc) {
        raise_tfos(rc, "cannot start the coordinator");
        return -1;
    }
    return 0;
}

static int coord_ready(CoordObject *self)
{
    if (!self->coord) {
        PyErr_SetString(PyExc_RuntimeError, "Coordinator is closed");
        return 0;
    }
    return 1;
}

static PyObject *Coord_step(CoordObject *self, PyObject *args)
{
    int timeout = 100, st;
    if (!PyArg_ParseTuple(args, "|i", &timeout) || !coord_ready(self))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = tfos_coord_step(self->coord, timeout);
    if (self->http) {
        tfos__feed_meter_update(&self->meter, NULL, tfos__now_ms()); /* the chart's samples */
        tfos__http_step(self->http);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(st);
}

static PyObject *Coord_serve_status(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"host", "port", NULL};
    const char *host = "127.0.0.1";
    int port = 0, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|si", kwlist, &host, &port) || !coord_ready(self))
        return NULL;
    if (self->http) {
        PyErr_SetString(PyExc_RuntimeError, "the status page is already served");
        return NULL;
    }
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "port must be 0..65535");
        return NULL;
    }
    tfos__http *http = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__http_open(&http, host, port, tfos__status_handle, &self->src);
    Py_END_ALLOW_THREADS
    if (rc) {
        if (rc == TFOS_ENOMEM)
            return PyErr_NoMemory();
        return PyErr_Format(PyExc_OSError, "cannot serve the status page on %s:%d: %s", host, port,
                            strerror(errno ? errno : EADDRINUSE));
    }
    tfos__feed_meter_init(&self->meter, tfos__now_ms());
    self->src.coord = self->coord;
    self->src.feed = &self->meter;
    self->src.log_dir = NULL;
    if (self->src.attempt < 1)
        self->src.attempt = 1;
    self->http = http;
    return PyLong_FromLong(tfos__http_port(http));
}

/* Replace *slot (and the source's view of it) with a copy of a str, or NULL for None. */
static int set_text(PyObject *v, char **slot, const char **view)
{
    char *copy = NULL;
    if (v != Py_None) {
        const char *u = PyUnicode_AsUTF8(v);
        if (!u)
            return -1;
        if (!(copy = strdup(u))) {
            PyErr_NoMemory();
            return -1;
        }
    }
    free(*slot);
    *slot = copy;
    *view = copy;
    return 0;
}

static PyObject *Coord_set_status(CoordObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"attempt", "max_restarts", "history", "partitions_refed", "node_log_dir", NULL};
    int attempt = -1, max_restarts = -1, refed = -1;
    PyObject *history = NULL, *node_log_dir = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$iiOiO", kwlist, &attempt, &max_restarts, &history, &refed,
                                     &node_log_dir) ||
        !coord_ready(self))
        return NULL;
    if (attempt >= 0)
        self->src.attempt = attempt;
    if (max_restarts >= 0)
        self->src.max_restarts = max_restarts;
    if (refed >= 0)
        self->src.partitions_refed = refed;
    if (history) {
        PyObject *text;
        if (history == Py_None) {
            Py_INCREF(Py_None);
            text = Py_None;
        } else {
            PyObject *sep = PyUnicode_FromString("\n");
            if (!sep)
                return NULL;
            text = PyUnicode_Join(sep, history); /* any iterable of str */
            Py_DECREF(sep);
            if (!text)
                return NULL;
        }
        int rc = set_text(text, &self->history, &self->src.history);
        Py_DECREF(text);
        if (rc)
            return NULL;
    }
    if (node_log_dir && set_text(node_log_dir, &self->node_log_dir, &self->src.node_log_dir))
        return NULL;
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
    if (self->http)
        tfos__feed_meter_set(&self->meter, state, rows, done, aborted, expected, tfos__now_ms());
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
    tfos_coord_stop(self->coord, reason);
    Py_RETURN_NONE;
}

static PyObject *Coord_end_feed(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!coord_ready(self))
        return NULL;
    tfos_coord_end_feed(self->coord);
    Py_RETURN_NONE;
}

static PyObject *Coord_status(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!coord_ready(self))
        return NULL;
    char *json = tfos_coord_status_json(self->coord);
    if (!json)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(json);
    free(json);
    return r;
}

static PyObject *Coord_close(CoordObject *self, PyObject *Py_UNUSED(ignored))
{
    coord_status_close(self);
    if (self->coord) {
        tfos_coord_close(self->coord);
        self->coord = NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Coord_get_address(CoordObject *self, void *Py_UNUSED(c))
{
    if (!coord_ready(self))
        return NULL;
    return PyUnicode_FromString(tfos_coord_address(self->coord));
}

static PyObject *Coord_get_state(CoordObject *self, void *Py_UNUSED(c))
{
    if (!coord_ready(self))
        return NULL;
    return PyLong_FromLong(tfos_coord_state(self->coord));
}

static PyObject *Coord_get_failure(CoordObject *self, void *Py_UNUSED(c))
{
    if (!coord_ready(self))
        return NULL;
    return PyUnicode_FromString(tfos_coord_failure(self->coord));
}

static PyObject *Coord_get_failure_code(CoordObject *self, void *Py_UNUSED(c))
{
    if (!coord_ready(self))
        return NULL;
    return PyLong_FromLong(tfos_coord_failure_code(self->coord));
}

static void Coord_dealloc(CoordObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    coord_status_close(self);
    if (self->coord)
        tfos_coord_close(self->coord);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Coord_methods[] = {
    {"step", (PyCFunction)Coord_step, METH_VARARGS, "step(timeout_ms=100) -> int: run the event loop; the state."},
    {"stop", (PyCFunction)Coord_stop, METH_VARARGS, "stop(reason=None): ask every node to stop."},
    {"end_feed", (PyCFunction)Coord_end_feed, METH_NOARGS,
     "end_feed(): end the input feed of every running chief/worker/evaluator node (no more records, ever); "
     "their programs see the end of the feed once they have read what is there."},
    {"status", (PyCFunction)Coord_status, METH_NOARGS, "status() -> str: JSON status of every node."},
    {"serve_status", (PyCFunction)(void (*)(void))Coord_serve_status, METH_VARARGS | METH_KEYWORDS,
     "serve_status(host='127.0.0.1', port=0) -> int: serve /status, /metrics, /feed/history and the live page "
     "for this coordinator on host:port (0: any free port); returns the port. Requests are answered from step(), "
     "which must keep being called; close() stops serving."},
    {"set_status", (PyCFunction)(void (*)(void))Coord_set_status, METH_VARARGS | METH_KEYWORDS,
     "set_status(*, attempt=None, max_restarts=None, history=None, partitions_refed=None, node_log_dir=None): "
     "what the status page shows beside the nodes (history: lines, one per failed attempt; node_log_dir: where "
     "each node's log is on its own host)."},
    {"set_feed", (PyCFunction)(void (*)(void))Coord_set_feed, METH_VARARGS | METH_KEYWORDS,
     "set_feed(*, rows=0, partitions_done=0, partitions_expected=0, partitions_aborted=0, state='feeding'): "
     "the feed's totals as the driver counts them, for the status page (rates and the chart are derived; "
     "a no-op without serve_status)."},
    {"close", (PyCFunction)Coord_close, METH_NOARGS, "close(): stop listening (the status page too) and free."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Coord_getset[] = {
    {"address", (getter)Coord_get_address, NULL, "host:port the coordinator listens on", NULL},
    {"state", (getter)Coord_get_state, NULL, "one of the STATE_* constants", NULL},
    {"failure", (getter)Coord_get_failure, NULL, "failure summary, or ''", NULL},
    {"failure_code", (getter)Coord_get_failure_code, NULL, "0, ETIMEDOUT, ESTOPPED or EFAILED", NULL},
    {"status_port", (getter)Coord_get_status_port, NULL, "the status page's port, or -1", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Coord_slots[] = {
    {Py_tp_doc, "Coordinator(workers, secret, ps=0, chief=False, evaluator=False, *, bind_host='127.0.0.1', "
                "port=0, reservation_timeout=600, grace=5, heartbeat_timeout=30, attempt=1)"},
    {Py_tp_init, Coord_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Coord_dealloc},
    {Py_tp_methods, Coord_methods},
    {Py_tp_getset, Coord_getset},
    {0, NULL},
};

static PyType_Spec Coord_spec = {
    .name = "tfos._tfos.Coordinator",
    .basicsize = sizeof(CoordObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Coord_slots,
};



/* ---- FeedBuffer: a read-only byte buffer from a pool --------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *module;
    char *mem;
    Py_ssize_t len;
    size_t cap;
    Py_ssize_t exports;
} BufferObject;

static void *pool_take(module_state *st, size_t len, size_t *cap)
{
    for (int i = 0; i < st->pool_n; i++) {
        if (st->pool_cap[i] >= len && st->pool_cap[i] <= 2 * len) {
            void *m = st->pool_mem[i];
            *cap = st->pool_cap[i];
            st->pool_bytes -= *cap;
            st->pool_mem[i] = st->pool_mem[st->pool_n - 1];
            st->pool_cap[i] = st->pool_cap[st->pool_n - 1];
            st->pool_n--;
            return m;
        }
    }
    void *m = NULL;
    *cap = (len + 4095) & ~(size_t)4095;
    if (posix_memalign(&m, 64, *cap))
        return NULL;
    return m;
}

static void pool_give(module_state *st, void *m, size_t cap)
{
    if (st && st->pool_n < POOL_SLOTS && st->pool_bytes + cap <= POOL_MAX_BYTES) {
        st->pool_mem[st->pool_n] = m;
        st->pool_cap[st->pool_n] = cap;
        st->pool_n++;
        st->pool_bytes += cap;
        return;
    }
    free(m);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags)
{
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->mem, self->len, 1, flags) < 0)
        return -1;
    self->exports++;
    return 0;
}

static void Buffer_releasebuffer(BufferObject *self, Py_buffer *Py_UNUSED(view))
{
    self->exports--;
}

static Py_ssize_t Buffer_length(BufferObject *self)
{
    return self->len;
}

static void Buffer_dealloc(BufferObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->mem)
        pool_give(self->module ? get_state(self->module) : NULL, self->mem, self->cap);
    Py_XDECREF(self->module);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot Buffer_slots[] = {
    {Py_tp_doc, "A read-only copy of one feed record (buffer protocol). Its memory is recycled for later records "
                "once nothing refers to it."},
    {Py_bf_getbuffer, Buffer_getbuffer},
    {Py_bf_releasebuffer, Buffer_releasebuffer},
    {Py_sq_length, Buffer_length},
    {Py_tp_dealloc, Buffer_dealloc},
    {0, NULL},
};

static PyType_Spec Buffer_spec = {
    .name = "tfos._tfos.FeedBuffer",
    .basicsize = sizeof(BufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Buffer_slots,
};

/* A new FeedBuffer holding a copy of data[0..len) (the copy runs without the GIL). */
static PyObject *buffer_copy(PyObject *module, const void *data, size_t len)
{
    module_state *st = get_state(module);
    size_t cap;
    void *mem = pool_take(st, len, &cap);
    if (!mem)
        return PyErr_NoMemory();
    BufferObject *b = PyObject_New(BufferObject, st->buffer_type);
    if (!b) {
        pool_give(st, mem, cap);
        return NULL;
    }
    b->module = Py_NewRef(module);
    b->mem = mem;
    b->len = (Py_ssize_t)len;
    b->cap = cap;
    b->exports = 0;
    Py_BEGIN_ALLOW_THREADS
    memcpy(mem, data, len);
    Py_END_ALLOW_THREADS
    return (PyObject *)b;
}

/* ---- Ring ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    tfos__ring *ring;
    int role;
    PyObject *module; /* for the exception types in module state */
} RingObject;

static PyObject *ring_raise(RingObject *self, int rc, const char *what)
{
    module_state *st = get_state(self->module);
    PyObject *type = st->feed_error;
    if (rc == TFOS_ECLOSED)
        type = st->feed_closed;
    else if (rc == TFOS_EEND)
        type = st->feed_ended;
    else if (rc == TFOS_ETIMEDOUT || rc == TFOS_EAGAIN || rc == TFOS_EFULL)
        type = PyExc_TimeoutError;
    else if (rc == TFOS_ESYS)
        return PyErr_Format(PyExc_OSError, "%s: %s", what, strerror(errno));
    PyObject *exc = PyObject_CallFunction(type, "s", what);
    if (exc) {
        PyObject *code = PyLong_FromLong(rc);
        PyObject *text = PyUnicode_FromString(tfos_strerror(rc));
        if (code && text) {
            PyObject_SetAttrString(exc, "code", code);
            PyObject_SetAttrString(exc, "reason", text);
        }
        Py_XDECREF(code);
        Py_XDECREF(text);
        PyErr_SetObject(type, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static int Ring_init(RingObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fd", "role", NULL};
    int fd, role;
    if (self->ring) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is already attached");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii", kwlist, &fd, &role))
        return -1;
    int rc = tfos__ring_attach(&self->ring, fd, role);
    if (rc) {
        if (rc == TFOS_ESYS)
            PyErr_Format(PyExc_OSError, "cannot attach the feed ring (fd %d): %s", fd, strerror(errno));
        else
            PyErr_Format(PyExc_ValueError, "cannot attach the feed ring (fd %d) as %s: %s", fd,
                         role == TFOS_RING_CONSUMER ? "consumer" : role == TFOS_RING_PRODUCER ? "producer" : "observer",
                         tfos_strerror(rc));
        return -1;
    }
    self->role = role;
    PyTypeObject *tp = Py_TYPE(self);
    self->module = PyType_GetModule(tp);
    Py_XINCREF(self->module);
    return self->module ? 0 : -1;
}

static int ring_ready(RingObject *self)
{
    if (!self->ring) {
        PyErr_SetString(PyExc_ValueError, "the feed ring is closed");
        return 0;
    }
    return 1;
}

static PyObject *Ring_write(RingObject *self, PyObject *args)
{
    unsigned int tag;
    Py_buffer buf;
    int timeout = -1, rc;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "Iy*|i", &tag, &buf, &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_write(self->ring, tag, buf.buf, (size_t)buf.len, timeout);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc)
        return ring_raise(self, rc, "writing to the feed ring");
    Py_RETURN_NONE;
}


/* Encode a plan straight into ring memory: reserve, fill, commit. */
static PyObject *ring_write_plan(RingObject *self, tfos_plan *p, unsigned int tag, int timeout)
{
    void *dst = NULL;
    int rc;
    if (p->total > tfos__ring_max_record(self->ring)) {
        tfos_plan_release(p);
        return PyErr_Format(PyExc_ValueError, "a batch of %llu bytes is larger than the ring's largest record "
                            "(%zu bytes): send fewer rows per batch", (unsigned long long)p->total,
                            tfos__ring_max_record(self->ring));
    }
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_reserve(self->ring, tag, (size_t)p->total, &dst, timeout);
    Py_END_ALLOW_THREADS
    if (rc) {
        tfos_plan_release(p);
        return ring_raise(self, rc, "writing to the feed ring");
    }
    int frc;
    if (tfos_plan_needs_gil(p)) {
        frc = tfos_plan_fill(p, dst);
    } else {
        Py_BEGIN_ALLOW_THREADS
        frc = tfos_plan_fill(p, dst);
        Py_END_ALLOW_THREADS
    }
    tfos_plan_release(p);
    if (frc) {
        tfos__ring_cancel(self->ring);
        return NULL;
    }
    rc = tfos__ring_commit(self->ring, (size_t)p->total);
    if (rc)
        return ring_raise(self, rc, "committing to the feed ring");
    return PyLong_FromUnsignedLongLong(p->total);
}

static PyObject *Ring_write_rows(RingObject *self, PyObject *args)
{
    PyObject *rows;
    unsigned int tag;
    int timeout = -1;
    tfos_plan p;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "IO|i", &tag, &rows, &timeout))
        return NULL;
    if (tfos_plan_rows(&p, rows))
        return NULL;
    return ring_write_plan(self, &p, tag, timeout);
}

static PyObject *Ring_write_columns(RingObject *self, PyObject *args)
{
    PyObject *cols;
    unsigned int tag;
    int timeout = -1;
    tfos_plan p;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "IO|i", &tag, &cols, &timeout))
        return NULL;
    if (tfos_plan_columns(&p, cols))
        return NULL;
    return ring_write_plan(self, &p, tag, timeout);
}

static PyObject *Ring_partition_begin(RingObject *self, PyObject *args)
{
    unsigned long long pid;
    int timeout = -1, rc;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "K|i", &pid, &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_partition_begin(self->ring, pid, timeout);
    Py_END_ALLOW_THREADS
    if (rc)
        return ring_raise(self, rc, "beginning a partition");
    Py_RETURN_NONE;
}

static PyObject *Ring_partition_end(RingObject *self, PyObject *args)
{
    int timeout = -1, rc;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "|i", &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_partition_end(self->ring, timeout);
    Py_END_ALLOW_THREADS
    if (rc)
        return ring_raise(self, rc, "ending a partition");
    Py_RETURN_NONE;
}

static PyObject *Ring_end_feed(RingObject *self, PyObject *args)
{
    int timeout = -1, rc;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "|i", &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_end_feed(self->ring, timeout);
    Py_END_ALLOW_THREADS
    if (rc && rc != TFOS_EEND)
        return ring_raise(self, rc, "ending the feed");
    Py_RETURN_NONE;
}

/* read(timeout_ms=-1, max_records=64) -> list of (tag, partition, bytes).
 * Waits for at least one record, copies every record out of shared memory
 * (the copy is the one the consumer needs anyway) and releases them. */
static PyObject *Ring_read(RingObject *self, PyObject *args)
{
    int timeout = -1, rc;
    Py_ssize_t max = 64;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "|in", &timeout, &max))
        return NULL;
    if (max < 1 || max > 4096)
        return PyErr_Format(PyExc_ValueError, "max_records must be in 1..4096");
    tfos__ring_rec recs[4096];
    size_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_read_batch(self->ring, recs, (size_t)max, &n, timeout);
    Py_END_ALLOW_THREADS
    if (rc)
        return ring_raise(self, rc, "reading from the feed ring");
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) {
        tfos__ring_release(self->ring);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *data;
        if (recs[i].len >= POOLED_MIN) {
            data = buffer_copy(self->module, recs[i].data, recs[i].len);
        } else {
            data = PyBytes_FromStringAndSize(NULL, recs[i].len);
            if (data)
                memcpy(PyBytes_AS_STRING(data), recs[i].data, recs[i].len);
        }
        PyObject *item = data ? Py_BuildValue("(IKN)", recs[i].tag, (unsigned long long)recs[i].partition, data) : NULL;
        if (!item) {
            Py_DECREF(list);
            tfos__ring_release(self->ring);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    tfos__ring_release(self->ring);
    return list;
}

static PyObject *Ring_stats(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!ring_ready(self))
        return NULL;
    tfos__ring_stats st;
    tfos__ring_stats_get(self->ring, &st);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:i,s:I,s:O,s:O,s:O}", "capacity",
                         (unsigned long long)st.capacity, "used", (unsigned long long)st.used, "records",
                         (unsigned long long)st.records, "bytes", (unsigned long long)st.bytes, "partitions_begun",
                         (unsigned long long)st.partitions_begun, "partitions_completed",
                         (unsigned long long)st.partitions_completed, "partitions_aborted",
                         (unsigned long long)st.partitions_aborted, "producers", st.producers, "unclean_exits",
                         st.unclean_exits, "consumer_pid", st.consumer_pid, "acked", st.acked, "feed_ended",
                         st.feed_ended ? Py_True : Py_False, "consumer_closed",
                         st.consumer_closed ? Py_True : Py_False, "consumer_terminated",
                         st.consumer_terminated ? Py_True : Py_False);
}

static PyObject *Ring_ack(RingObject *self, PyObject *args)
{
    unsigned int n = 1;
    if (!PyArg_ParseTuple(args, "|I", &n) || !ring_ready(self))
        return NULL;
    tfos__ring_ack(self->ring, n);
    Py_RETURN_NONE;
}

static PyObject *Ring_close(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->ring) {
        tfos__ring *r = self->ring;
        self->ring = NULL;
        Py_BEGIN_ALLOW_THREADS
        tfos__ring_close(r);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Ring_detach(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->ring) {
        tfos__ring *r = self->ring;
        self->ring = NULL;
        Py_BEGIN_ALLOW_THREADS
        tfos__ring_detach(r);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Ring_get_max_record(RingObject *self, void *Py_UNUSED(c))
{
    if (!ring_ready(self))
        return NULL;
    return PyLong_FromSize_t(tfos__ring_max_record(self->ring));
}

static void Ring_dealloc(RingObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->ring)
        tfos__ring_close(self->ring);
    Py_XDECREF(self->module);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Ring_methods[] = {
    {"write", (PyCFunction)Ring_write, METH_VARARGS, "write(tag, data, timeout_ms=-1): one record."},
    {"write_rows", (PyCFunction)Ring_write_rows, METH_VARARGS,
     "write_rows(tag, rows, timeout_ms=-1) -> bytes written: rows encoded as a columnar batch straight into the "
     "ring. TypeError/ValueError when the rows have no columnar layout (nothing is written)."},
    {"write_columns", (PyCFunction)Ring_write_columns, METH_VARARGS,
     "write_columns(tag, [(name, array), ...], timeout_ms=-1) -> bytes written: whole columns, one memcpy each, "
     "without the GIL."},
    {"partition_begin", (PyCFunction)Ring_partition_begin, METH_VARARGS,
     "partition_begin(partition_id, timeout_ms=-1): hold the ring for one whole partition."},
    {"partition_end", (PyCFunction)Ring_partition_end, METH_VARARGS, "partition_end(timeout_ms=-1)"},
    {"end_feed", (PyCFunction)Ring_end_feed, METH_VARARGS, "end_feed(timeout_ms=-1): no more records, ever."},
    {"read", (PyCFunction)Ring_read, METH_VARARGS,
     "read(timeout_ms=-1, max_records=64) -> [(tag, partition, data)]: each record copied out of the ring (data "
     "is bytes, or a pooled FeedBuffer for records of 64 KiB and more); raises FeedEnded at the end."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "stats() -> dict of the ring's counters."},
    {"ack", (PyCFunction)Ring_ack, METH_VARARGS,
     "ack(n=1): consumer: the application has taken every row of n more partitions (stats()['acked'])."},
    {"close", (PyCFunction)Ring_close, METH_NOARGS,
     "close(): let go of the ring; a consumer closes it for good (producers get FeedClosed)."},
    {"detach", (PyCFunction)Ring_detach, METH_NOARGS,
     "detach(): let go of the ring; a consumer hands its role over (a later Ring(fd, ROLE_CONSUMER) reads on "
     "from the first record not read). Other roles: the same as close()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
    {"max_record", (getter)Ring_get_max_record, NULL, "largest record payload in bytes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Ring_slots[] = {
    {Py_tp_doc, "Ring(fd, role): a handle on a shared-memory feed ring (role: ROLE_PRODUCER, ROLE_CONSUMER, "
                "ROLE_OBSERVER). The fd stays the caller's."},
    {Py_tp_init, Ring_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Ring_dealloc},
    {Py_tp_methods, Ring_methods},
    {Py_tp_getset, Ring_getset},
    {0, NULL},
};

static PyType_Spec Ring_spec = {
    .name = "tfos._tfos.Ring",
    .basicsize = sizeof(RingObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Ring_slots,
};


static PyObject *encode_plan_to_bytes(tfos_plan *p)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)p->total);
    if (!out) {
        tfos_plan_release(p);
        return NULL;
    }
    int frc = tfos_plan_fill(p, PyBytes_AS_STRING(out));
    tfos_plan_release(p);
    if (frc) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *mod_encode_rows(PyObject *Py_UNUSED(m), PyObject *rows)
{
    tfos_plan p;
    if (tfos_plan_rows(&p, rows))
        return NULL;
    return encode_plan_to_bytes(&p);
}

static PyObject *mod_encode_columns(PyObject *Py_UNUSED(m), PyObject *cols)
{
    tfos_plan p;
    if (tfos_plan_columns(&p, cols))
        return NULL;
    return encode_plan_to_bytes(&p);
}

/* decode_columns(buffer) -> (flags, [(name, kind, dtype, shape, nrows, data_off, data_len, offsets_off)]) */
static PyObject *mod_decode_columns(PyObject *m, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t n = tfos__batch_ncols(b.buf, (size_t)b.len);
    tfos__col stack[64], *cols = n <= 64 ? stack : PyMem_Calloc(n ? n : 1, sizeof *cols);
    tfos__batch_view v;
    char err[256];
    PyObject *res = NULL;
    if (!cols) {
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    if (tfos__batch_open(b.buf, (size_t)b.len, &v, cols, n ? n : 1, err, sizeof err)) {
        PyErr_Format(get_state(m)->feed_error, "corrupt columnar batch in the feed: %s", err);
        goto out;
    }
    PyObject *list = PyList_New(v.ncols);
    if (!list)
        goto out;
    for (uint32_t i = 0; i < v.ncols; i++) {
        tfos__col *c = &v.cols[i];
        PyObject *shape = PyTuple_New(c->kind == TFOS_COL_FIXED ? c->ndim : 0);
        for (int d = 0; shape && c->kind == TFOS_COL_FIXED && d < c->ndim; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromUnsignedLong(c->shape[d]));
        const char *kind = c->kind == TFOS_COL_FIXED ? "fixed" : c->kind == TFOS_COL_STR ? "str" : "bytes";
        PyObject *name = shape ? PyUnicode_DecodeUTF8(c->name, (Py_ssize_t)c->name_len, "replace") : NULL;
        PyObject *item = name ? Py_BuildValue("(NssNIKKK)", name, kind,
                                               c->kind == TFOS_COL_FIXED ? tfos__dtype_numpy(c->dtype) : "",
                                               shape, v.nrows, (unsigned long long)c->data_off,
                                               (unsigned long long)c->data_len,
                                               (unsigned long long)c->offsets_off)
                             : NULL;
        if (!name)
            Py_XDECREF(shape);
        if (!item) {
            Py_DECREF(list);
            goto out;
        }
        PyList_SET_ITEM(list, i, item);
    }
    res = Py_BuildValue("(IN)", v.flags, list);
out:
    if (cols != stack)
        PyMem_Free(cols);
    PyBuffer_Release(&b);
    return res;
}

/* ring_create(capacity) -> fd: a new ring in a memfd (the caller owns the fd). */
static PyObject *mod_ring_create(PyObject *Py_UNUSED(m), PyObject *args)
{
    unsigned long long cap;
    if (!PyArg_ParseTuple(args, "K", &cap))
        return NULL;
    tfos__ring *r;
    int fd, rc = tfos__ring_create(&r, &fd, (size_t)cap, TFOS_RING_OBSERVER);
    if (rc) {
        if (rc == TFOS_ESYS)
            return PyErr_Format(PyExc_OSError, "cannot create a feed ring: %s", strerror(errno));
        return PyErr_Format(PyExc_ValueError, "cannot create a feed ring of %llu bytes: %s (a power of two "
                            "between 4 KiB and 1 GiB)", cap, tfos_strerror(rc));
    }
    tfos__ring_close(r);
    return PyLong_FromLong(fd);
}

/* feed_connect(cluster_id, executor_id, secret, timeout_ms=30000) -> (in_fd, out_fd, node) */
static PyObject *mod_feed_connect(PyObject *m, PyObject *args)
{
    const char *cluster_id, *secret;
    int executor_id, timeout = 30000, in_fd, out_fd, rc;
    char node[64], err[512];
    if (!PyArg_ParseTuple(args, "sis|i", &cluster_id, &executor_id, &secret, &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__feed_connect(cluster_id, executor_id, secret, timeout, &in_fd, &out_fd, node, sizeof node, err,
                            sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        module_state *st = get_state(m);
        PyErr_SetString(rc == TFOS_ECLOSED ? st->feed_closed : st->feed_error, err);
        return NULL;
    }
    return Py_BuildValue("(iis)", in_fd, out_fd, node);
}

/* ---- clients of a coordinator ------------------------------------------ */

/* The exception for a failed client call, naming the coordinator. */
static PyObject *raise_client(int rc, int err, const char *what, const char *addr, int timeout)
{
    switch (rc) {
    case TFOS_EINVAL:
        return PyErr_Format(PyExc_ValueError, "%s: bad coordinator address '%s' (want host:port)",
                            what, addr);
    case TFOS_ESYS:
        return PyErr_Format(PyExc_ConnectionError, "%s: cannot reach the coordinator at %s: %s", what, addr,
                            strerror(err));
    case TFOS_ETIMEDOUT:
        return PyErr_Format(PyExc_TimeoutError, "%s: the coordinator at %s did not answer within %d ms", what, addr,
                            timeout);
    case TFOS_EAUTH:
        return PyErr_Format(PyExc_PermissionError, "%s: the coordinator at %s refused the cluster secret", what,
                            addr);
    case TFOS_ECLOSED:
        return PyErr_Format(PyExc_ConnectionError, "%s: the coordinator at %s closed the connection", what, addr);
    default:
        return PyErr_Format(PyExc_RuntimeError, "%s: the coordinator at %s: %s", what, addr, tfos_strerror(rc));
    }
}

/* report_abort(coord_addr, secret, executor_id, message, timeout_ms=10000) */
static PyObject *mod_report_abort(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"coord_addr", "secret", "executor_id", "message", "timeout_ms", NULL};
    const char *addr, *secret, *message;
    int executor_id, timeout = 10000, rc, err;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ssis|i", kwlist, &addr, &secret, &executor_id, &message, &timeout))
        return NULL;
    if (executor_id < 0 || timeout < 0)
        return PyErr_Format(PyExc_ValueError, "report_abort: executor_id and timeout_ms must be >= 0");
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_report_abort(addr, secret, executor_id, message, timeout);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc)
        return raise_client(rc, err, "cannot report that the node could not start", addr, timeout);
    Py_RETURN_NONE;
}

/* query_status(coord_addr, secret, timeout_ms=10000) -> str */
static PyObject *mod_query_status(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"coord_addr", "secret", "timeout_ms", NULL};
    const char *addr, *secret;
    int timeout = 10000, rc, err;
    char *json = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|i", kwlist, &addr, &secret, &timeout))
        return NULL;
    if (timeout < 0)
        return PyErr_Format(PyExc_ValueError, "query_status: timeout_ms must be >= 0");
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_query_status(addr, secret, timeout, &json);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc == TFOS_ENOMEM)
        return PyErr_NoMemory();
    if (rc)
        return raise_client(rc, err, "cannot query the cluster's status", addr, timeout);
    PyObject *r = PyUnicode_DecodeUTF8(json, (Py_ssize_t)strlen(json), "replace");
    free(json);
    return r;
}

/* ---- module -------------------------------------------------------------- */

static PyObject *mod_random_secret(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    char buf[TFOS_HEX_SECRET_LEN + 1];
    if (tfos__random_hex(buf, 32))
        return PyErr_Format(PyExc_OSError, "no randomness available");
    return PyUnicode_FromString(buf);
}

static PyObject *mod_strerror(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(tfos_strerror((int)code));
}

static PyMethodDef module_methods[] = {
    {"random_secret", mod_random_secret, METH_NOARGS, "random_secret() -> str: a fresh 256-bit cluster secret."},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> str"},
    {"encode_rows", mod_encode_rows, METH_O,
     "encode_rows(rows) -> bytes: a columnar batch; TypeError/ValueError naming the row and field when the rows "
     "have no columnar layout."},
    {"encode_columns", mod_encode_columns, METH_O, "encode_columns([(name, array), ...]) -> bytes: a columnar batch."},
    {"decode_columns", mod_decode_columns, METH_O,
     "decode_columns(buffer) -> (flags, [(name, kind, dtype, shape, nrows, data_off, data_len, offsets_off)]), "
     "after validating every field and range (FeedError if corrupt)."},
    {"ring_create", mod_ring_create, METH_VARARGS,
     "ring_create(capacity) -> fd: a new feed ring in a sealed memfd; attach with Ring(fd, role)."},
    {"report_abort", (PyCFunction)(void (*)(void))mod_report_abort, METH_VARARGS | METH_KEYWORDS,
     "report_abort(coord_addr, secret, executor_id, message, timeout_ms=10000): tell the coordinator that node "
     "executor_id could not start; the cluster fails with the message and stops. Raises ConnectionError, "
     "TimeoutError, PermissionError (wrong secret) or ValueError."},
    {"query_status", (PyCFunction)(void (*)(void))mod_query_status, METH_VARARGS | METH_KEYWORDS,
     "query_status(coord_addr, secret, timeout_ms=10000) -> str: the coordinator's JSON status (with \"state\" "
     "and \"failure\"). Raises as report_abort."},
    {"feed_connect", mod_feed_connect, METH_VARARGS,
     "feed_connect(cluster_id, executor_id, secret, timeout_ms=30000) -> (in_fd, out_fd, node): the ring fds of "
     "a node on this machine (the caller owns them)."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    module_state *st = get_state(m);
    st->local_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Local_spec, NULL);
    if (!st->local_type || PyModule_AddType(m, st->local_type) < 0)
        return -1;
    st->coord_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Coord_spec, NULL);
    if (!st->coord_type || PyModule_AddType(m, st->coord_type) < 0)
        return -1;
    st->ring_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Ring_spec, NULL);
    if (!st->ring_type || PyModule_AddType(m, st->ring_type) < 0)
        return -1;
    st->buffer_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Buffer_spec, NULL);
    if (!st->buffer_type || PyModule_AddType(m, st->buffer_type) < 0)
        return -1;
    st->feed_error = PyErr_NewExceptionWithDoc("tfos._tfos.FeedError", "A feed ring failed.", PyExc_RuntimeError,
                                               NULL);
    if (!st->feed_error || PyModule_AddObjectRef(m, "FeedError", st->feed_error) < 0)
        return -1;
    st->feed_closed = PyErr_NewExceptionWithDoc("tfos._tfos.FeedClosed",
                                                "The other side of the feed went away (died or closed).",
                                                st->feed_error, NULL);
    if (!st->feed_closed || PyModule_AddObjectRef(m, "FeedClosed", st->feed_closed) < 0)
        return -1;
    st->feed_ended = PyErr_NewExceptionWithDoc("tfos._tfos.FeedEnded", "The feed has ended (end of feed).",
                                               st->feed_error, NULL);
    if (!st->feed_ended || PyModule_AddObjectRef(m, "FeedEnded", st->feed_ended) < 0)
        return -1;
    if (PyModule_AddStringConstant(m, "VERSION", TFOS_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "PROTOCOL_VERSION", TFOS_PROTOCOL_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "STATE_RESERVING", TFOS_COORD_RESERVING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_RUNNING", TFOS_COORD_RUNNING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_STOPPING", TFOS_COORD_STOPPING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_DONE", TFOS_COORD_DONE) < 0 ||
        PyModule_AddIntConstant(m, "STATE_FAILED", TFOS_COORD_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "ETIMEDOUT", TFOS_ETIMEDOUT) < 0 ||
        PyModule_AddIntConstant(m, "ESTOPPED", TFOS_ESTOPPED) < 0 ||
        PyModule_AddIntConstant(m, "EFAILED", TFOS_EFAILED) < 0 ||
        PyModule_AddIntConstant(m, "ROLE_OBSERVER", TFOS_RING_OBSERVER) < 0 ||
        PyModule_AddIntConstant(m, "ROLE_PRODUCER", TFOS_RING_PRODUCER) < 0 ||
        PyModule_AddIntConstant(m, "ROLE_CONSUMER", TFOS_RING_CONSUMER) < 0 ||
        PyModule_AddIntConstant(m, "TAG_DATA", TFOS_RING_DATA) < 0 ||
        PyModule_AddIntConstant(m, "TAG_PARTITION_BEGIN", TFOS_RING_PARTITION_BEGIN) < 0 ||
        PyModule_AddIntConstant(m, "TAG_PARTITION_END", TFOS_RING_PARTITION_END) < 0 ||
        PyModule_AddIntConstant(m, "TAG_PARTITION_ABORT", TFOS_RING_PARTITION_ABORT) < 0 ||
        PyModule_AddIntConstant(m, "TAG_USER", TFOS_RING_TAG_USER) < 0 ||
        PyModule_AddIntConstant(m, "BATCH_FLAT_ROWS", TFOS_BATCH_FLAT_ROWS) < 0 ||
        PyModule_AddIntConstant(m, "BATCH_LIST_ROWS", TFOS_BATCH_LIST_ROWS) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = get_state(m);
    Py_VISIT(st->local_type);
    Py_VISIT(st->coord_type);
    Py_VISIT(st->ring_type);
    Py_VISIT(st->buffer_type);
    Py_VISIT(st->feed_error);
    Py_VISIT(st->feed_closed);
    Py_VISIT(st->feed_ended);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = get_state(m);
    Py_CLEAR(st->local_type);
    Py_CLEAR(st->coord_type);
    Py_CLEAR(st->ring_type);
    Py_CLEAR(st->buffer_type);
    for (int i = 0; i < st->pool_n; i++)
        free(st->pool_mem[i]);
    st->pool_n = 0;
    st->pool_bytes = 0;
    Py_CLEAR(st->feed_error);
    Py_CLEAR(st->feed_closed);
    Py_CLEAR(st->feed_ended);
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef tfos_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tfos._tfos",
    .m_doc = "Native core of tfos: the coordinator and the local launcher (libtfos).",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__tfos(void)
{
    return PyModuleDef_Init(&tfos_module);
}
