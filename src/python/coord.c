/* coord.c: tfos._tfos.Coordinator, the coordinator alone (libtfos's
 * tfos_coord) for drivers that run their own nodes, such as Spark's; it can
 * also serve the status page from its step(). Every blocking wait runs with
 * the GIL released. */
#include "tfosmod.h"

#include "platform/clock.h"
#include "run/http.h"
#include "run/status.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
        tfos__py_raise(rc, "cannot start the coordinator");
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

PyType_Spec tfos__py_coord_spec = {
    .name = "tfos._tfos.Coordinator",
    .basicsize = sizeof(CoordObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Coord_slots,
};
