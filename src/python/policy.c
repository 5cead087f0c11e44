/* policy.c: tfos._tfos.RestartPolicy, libtfos's restart policy (tfos_policy)
 * for launchers written in Python (TFCluster on Spark). The launcher hands
 * it to every attempt's Coordinator, which applies it when the cluster
 * fails; Python reads the decision and the history, never re-decides. */
#include "tfosmod.h"

#include "platform/clock.h"
#include "tfos/tfos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    tfos_policy *policy;
} PolicyObject;

tfos_policy *tfos__py_policy(PyObject *obj)
{
    return ((PolicyObject *)obj)->policy;
}

static int Policy_init(PolicyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max_restarts", NULL};
    int max_restarts = TFOS_DEFAULT_MAX_RESTARTS;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", kwlist, &max_restarts))
        return -1;
    if (max_restarts < 0) {
        PyErr_SetString(PyExc_ValueError, "max_restarts must be >= 0");
        return -1;
    }
    tfos_policy_close(self->policy);
    self->policy = NULL;
    if (tfos_policy_open(&self->policy, max_restarts)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *failure_dict(const tfos_failure *f)
{
    return Py_BuildValue("{s:s,s:i,s:d,s:s,s:s,s:i,s:s,s:i,s:i,s:s,s:s,s:s}", "cause", tfos_cause_name(f->cause),
                         "attempt", f->attempt, "time", f->time, "node", f->node, "job", f->job, "executor_id",
                         f->executor_id, "host", f->host, "exit_code", f->exit_code, "signal", f->signo,
                         "exception", f->exc_type, "where", f->exc_where, "summary", f->summary);
}

PyObject *tfos__py_failure_dict(const tfos_failure *f)
{
    return failure_dict(f);
}

static PyObject *Policy_get_history(PolicyObject *self, void *Py_UNUSED(c))
{
    int n = tfos_policy_count(self->policy);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        const tfos_attempt_record *r = tfos_policy_record(self->policy, i);
        PyObject *d = failure_dict(&r->failure);
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyObject *dec = PyUnicode_FromString(tfos_decision_name(r->decision));
        PyObject *prog = PyUnicode_FromString(r->progress);
        if (!dec || !prog || PyDict_SetItemString(d, "decision", dec) || PyDict_SetItemString(d, "progress", prog)) {
            Py_XDECREF(dec);
            Py_XDECREF(prog);
            Py_DECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(dec);
        Py_DECREF(prog);
        PyList_SET_ITEM(list, i, d);
    }
    return list;
}

static PyObject *Policy_render(PolicyObject *self, PyObject *Py_UNUSED(ignored))
{
    char *text = tfos_policy_render(self->policy);
    if (!text)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    free(text);
    return r;
}

/* decide(failure: dict, progress='') -> RESTART/RAISE, for launchers that
 * detect a failure themselves (and for tests of the policy). */
static PyObject *Policy_decide(PolicyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cause", "node", "job", "exception", "where", "summary", "progress", "exit_code", NULL};
    int cause, exit_code = -1;
    const char *node = "", *job = "", *exc = "", *where = "", *summary = "", *progress = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$ssssssi", kwlist, &cause, &node, &job, &exc, &where, &summary,
                                     &progress, &exit_code))
        return NULL;
    tfos_failure f;
    memset(&f, 0, sizeof f);
    f.cause = cause;
    f.executor_id = -1;
    f.exit_code = exit_code;
    f.time = tfos__wall_s();
    snprintf(f.node, sizeof f.node, "%s", node);
    snprintf(f.job, sizeof f.job, "%s", job);
    snprintf(f.exc_type, sizeof f.exc_type, "%s", exc);
    snprintf(f.exc_where, sizeof f.exc_where, "%s", where);
    snprintf(f.summary, sizeof f.summary, "%s", summary);
    int d = tfos_policy_decide(self->policy, &f, progress, NULL);
    if (d < 0)
        return tfos__py_raise(d, "cannot decide");
    return PyLong_FromLong(d);
}

static PyObject *Policy_get_attempt(PolicyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(tfos_policy_attempt(self->policy));
}

static PyObject *Policy_get_max_restarts(PolicyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(tfos_policy_max_restarts(self->policy));
}

static PyObject *Policy_get_resizes(PolicyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(tfos_policy_resizes(self->policy));
}

static PyObject *Policy_get_verdict(PolicyObject *self, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(tfos_policy_verdict(self->policy));
}

static void Policy_dealloc(PolicyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tfos_policy_close(self->policy);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* resize(cause, summary) -> None: an elastic run changes size (not a
 * failure: the restart budget is not spent). */
static PyObject *Policy_resize(PolicyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cause", "summary", NULL};
    int cause;
    const char *summary;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "is", kwlist, &cause, &summary))
        return NULL;
    tfos_failure f;
    memset(&f, 0, sizeof f);
    f.cause = cause;
    f.executor_id = -1;
    f.exit_code = -1;
    f.time = tfos__wall_s();
    snprintf(f.summary, sizeof f.summary, "%s", summary);
    int rc = tfos_policy_resize(self->policy, &f);
    if (rc < 0)
        return tfos__py_raise(rc, "cannot record the resize (an empty summary?)");
    Py_RETURN_NONE;
}

static PyMethodDef Policy_methods[] = {
    {"resize", (PyCFunction)(void (*)(void))Policy_resize, METH_VARARGS | METH_KEYWORDS,
     "resize(cause, summary) -> None: record that an elastic run changes size; the next attempt begins "
     "without spending the restart budget."},
    {"render", (PyCFunction)Policy_render, METH_NOARGS,
     "render() -> str: the history, one line per failed attempt (what the status page and errors show)."},
    {"decide", (PyCFunction)(void (*)(void))Policy_decide, METH_VARARGS | METH_KEYWORDS,
     "decide(cause, *, node='', job='', exception='', where='', summary='', progress='', exit_code=-1) -> "
     "RESTART or RAISE: apply the policy to a failure detected outside a Coordinator."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Policy_getset[] = {
    {"attempt", (getter)Policy_get_attempt, NULL, "the current attempt (1 for the first)", NULL},
    {"max_restarts", (getter)Policy_get_max_restarts, NULL, "the budget", NULL},
    {"resizes", (getter)Policy_get_resizes, NULL, "attempts begun by a resize (they spend no restart)", NULL},
    {"history", (getter)Policy_get_history, NULL,
     "one dict per failed attempt: cause, attempt, time, node, job, executor_id, host, exit_code, signal, "
     "exception, where, summary, decision ('restart'/'raise'/'resize'), progress",
     NULL},
    {"verdict", (getter)Policy_get_verdict, NULL,
     "why the run was not restarted, in one sentence ('' after a restart)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Policy_slots[] = {
    {Py_tp_doc, "RestartPolicy(max_restarts=3): tfos's one restart policy (see tfos_policy in tfos.h)."},
    {Py_tp_init, Policy_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Policy_dealloc},
    {Py_tp_methods, Policy_methods},
    {Py_tp_getset, Policy_getset},
    {0, NULL},
};

PyType_Spec tfos__py_policy_spec = {
    .name = "tfos._tfos.RestartPolicy",
    .basicsize = sizeof(PolicyObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Policy_slots,
};
