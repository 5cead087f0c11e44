/* tracker.c: tfos._tfos.Tracker, the job's MLflow run (track/tracker.h) for
 * the launchers written in Python (the Spark attempt loop): made before the
 * nodes start, fed by the Coordinator it is handed to (every node's
 * ctx.report) and by the attempt loop (history(policy), figures()), ended
 * with end(status). Every call that may wait on the server runs with the
 * GIL released. */
#include "tfosmod.h"

#include "tfos/tfos.h"
#include "track/tracker.h"

typedef struct {
    PyObject_HEAD
    tfos__tracker *t;
} TrackerObject;

tfos__tracker *tfos__py_tracker(PyObject *obj)
{
    return ((TrackerObject *)obj)->t;
}

static int Tracker_init(TrackerObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"uri", "experiment", "run_name", NULL};
    const char *uri, *exp = NULL, *name = NULL;
    if (self->t) {
        PyErr_SetString(PyExc_RuntimeError, "Tracker is already open");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zz", kwlist, &uri, &exp, &name))
        return -1;
    char err[600] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__tracker_open(&self->t, uri, exp, name, err, sizeof err);
    Py_END_ALLOW_THREADS
    tfos__py_log_drain();
    if (rc == TFOS_EINVAL) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    if (rc) {
        tfos__py_raise(rc, err[0] ? err : "cannot open the MLflow tracker");
        return -1;
    }
    return 0;
}

static int ready(TrackerObject *self)
{
    if (!self->t)
        PyErr_SetString(PyExc_RuntimeError, "Tracker is closed");
    return self->t != NULL;
}

static PyObject *Tracker_param(TrackerObject *self, PyObject *args)
{
    const char *k, *v;
    if (!ready(self) || !PyArg_ParseTuple(args, "ss", &k, &v))
        return NULL;
    tfos__tracker_param(self->t, k, v);
    Py_RETURN_NONE;
}

static PyObject *Tracker_tag(TrackerObject *self, PyObject *args)
{
    const char *k, *v;
    if (!ready(self) || !PyArg_ParseTuple(args, "ss", &k, &v))
        return NULL;
    tfos__tracker_tag(self->t, k, v);
    Py_RETURN_NONE;
}

static PyObject *Tracker_metric(TrackerObject *self, PyObject *args)
{
    const char *k;
    double v;
    long long step = 0;
    if (!ready(self) || !PyArg_ParseTuple(args, "sd|L", &k, &v, &step))
        return NULL;
    tfos__tracker_metric(self->t, k, v, step, 0);
    Py_RETURN_NONE;
}

static PyObject *Tracker_report(TrackerObject *self, PyObject *args)
{
    int rank;
    const char *text;
    long long age = 0;
    if (!ready(self) || !PyArg_ParseTuple(args, "is|L", &rank, &text, &age))
        return NULL;
    tfos__tracker_report(self->t, rank, text, age);
    Py_RETURN_NONE;
}

static PyObject *Tracker_history(TrackerObject *self, PyObject *args)
{
    PyObject *policy;
    if (!ready(self) || !PyArg_ParseTuple(args, "O", &policy))
        return NULL;
    module_state *st = PyType_GetModuleState(Py_TYPE(self));
    if (!PyObject_TypeCheck(policy, st->policy_type)) {
        PyErr_SetString(PyExc_TypeError, "history(policy): policy must be a RestartPolicy");
        return NULL;
    }
    tfos__tracker_history(self->t, tfos__py_policy(policy));
    Py_RETURN_NONE;
}

static PyObject *Tracker_figures(TrackerObject *self, PyObject *args)
{
    const char *prefix, *json;
    if (!ready(self) || !PyArg_ParseTuple(args, "ss", &prefix, &json))
        return NULL;
    tfos__tracker_figures(self->t, prefix, json);
    Py_RETURN_NONE;
}

static PyObject *Tracker_end(TrackerObject *self, PyObject *args)
{
    const char *status;
    if (!ready(self) || !PyArg_ParseTuple(args, "s", &status))
        return NULL;
    if (strcmp(status, "FINISHED") && strcmp(status, "FAILED") && strcmp(status, "KILLED")) {
        PyErr_Format(PyExc_ValueError, "end(status=%R): use 'FINISHED', 'FAILED' or 'KILLED'",
                     PyTuple_GET_ITEM(args, 0));
        return NULL;
    }
    char summary[1024];
    Py_BEGIN_ALLOW_THREADS
    tfos__tracker_end(self->t, status, summary, sizeof summary);
    Py_END_ALLOW_THREADS
    tfos__py_log_drain();
    return PyUnicode_FromString(summary);
}

static void shut(TrackerObject *self)
{
    tfos__tracker *t = self->t;
    self->t = NULL;
    if (!t)
        return;
    Py_BEGIN_ALLOW_THREADS
    tfos__tracker_close(t);
    Py_END_ALLOW_THREADS
}

static PyObject *Tracker_close(TrackerObject *self, PyObject *Py_UNUSED(a))
{
    shut(self);
    tfos__py_log_drain();
    Py_RETURN_NONE;
}

static PyObject *Tracker_get_run_id(TrackerObject *self, void *Py_UNUSED(c))
{
    if (!ready(self))
        return NULL;
    return PyUnicode_FromString(tfos__tracker_run_id(self->t));
}

static PyObject *Tracker_get_uri(TrackerObject *self, void *Py_UNUSED(c))
{
    if (!ready(self))
        return NULL;
    return PyUnicode_FromString(tfos__tracker_uri(self->t));
}

static void Tracker_dealloc(TrackerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    shut(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Tracker_methods[] = {
    {"param", (PyCFunction)Tracker_param, METH_VARARGS, "param(key, value): queue a parameter."},
    {"tag", (PyCFunction)Tracker_tag, METH_VARARGS, "tag(key, value): queue a tag."},
    {"metric", (PyCFunction)Tracker_metric, METH_VARARGS, "metric(key, value, step=0): queue a metric."},
    {"report", (PyCFunction)Tracker_report, METH_VARARGS,
     "report(rank, text, age_ms=0): one ctx.report ('step=3 loss=0.5') of the node with that executor id: "
     "rank<R>/<name> and the mean over ranks <name> (a Coordinator given tracker= does this itself)."},
    {"history", (PyCFunction)Tracker_history, METH_VARARGS,
     "history(policy): the RestartPolicy's attempts and failures as tags (tfos.attempts, tfos.attempt.<n>.*, "
     "tfos.restart_history)."},
    {"figures", (PyCFunction)Tracker_figures, METH_VARARGS,
     "figures(prefix, json): the numbers of a JSON object (a status page's /status) as metrics."},
    {"end", (PyCFunction)Tracker_end, METH_VARARGS,
     "end(status) -> str: send what is queued (10 s at most), set the run's status ('FINISHED', 'FAILED', "
     "'KILLED'); returns the line that says what was logged, or what was not."},
    {"close", (PyCFunction)Tracker_close, METH_NOARGS,
     "close(): end (KILLED when not ended) and free; not while a Coordinator given it still runs."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tracker_getset[] = {
    {"run_id", (getter)Tracker_get_run_id, NULL, "the MLflow run's id ('' when it could not be made)", NULL},
    {"uri", (getter)Tracker_get_uri, NULL, "the tracking server's URL, without credentials", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Tracker_slots[] = {
    {Py_tp_doc, "Tracker(uri, experiment=None, run_name=None): one MLflow run for a whole tfos job "
                "(docs/MODELS.md, \"Tracking\"). ValueError for a URI that is not http(s)://; a server that "
                "cannot be reached only warns (run_id is then '')."},
    {Py_tp_init, Tracker_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Tracker_dealloc},
    {Py_tp_methods, Tracker_methods},
    {Py_tp_getset, Tracker_getset},
    {0, NULL},
};

PyType_Spec tfos__py_tracker_spec = {
    .name = "tfos._tfos.Tracker",
    .basicsize = sizeof(TrackerObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Tracker_slots,
};
