/* local.c: tfos._tfos.LocalCluster, the `tfos run` launcher (libtfos's
 * tfos_local) driven step by step, so that Python can deliver
 * KeyboardInterrupt between steps. Every blocking wait runs with the GIL
 * released. */
#include "tfosmod.h"

#include "core/spec.h"
#include "tfos/tfos.h"

#include <stdlib.h>
#include <string.h>

static char *dup_opt(const char *s)
{
    return s ? strdup(s) : NULL;
}

typedef struct {
    PyObject_HEAD
    tfos_local *local;
    char **argv;
    char **inputs;
    char *agent_path, *log_dir, *python, *checkpoint_dir, *keras;
    int finished;
} LocalObject;

static int Local_init(LocalObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"argv", "agent_path", "workers", "ps", "chief", "evaluator", "log_dir",
                             "reservation_timeout", "grace", "heartbeat_timeout", "ps_runs_program", "python",
                             "max_restarts", "checkpoint_dir", "inputs", "epochs", "status_port", "quiet",
                             "keras", "caller_reports", "mlflow", "mlflow_experiment", "mlflow_run_name", "framework",
                             "min_nodes", "elastic_wait", "resize_in_place", "grow_in_place", NULL};
    PyObject *argv_obj;
    const char *agent_path, *log_dir = NULL, *python = NULL;
    int workers = 1, ps = 0, chief = 0, evaluator = 0, ps_runs = 0, max_restarts = TFOS_DEFAULT_MAX_RESTARTS;
    double rt = TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL, grace = TFOS_DEFAULT_STOP_GRACE,
           hb = TFOS_DEFAULT_HEARTBEAT_TIMEOUT;
    const char *ckpt = NULL, *keras = NULL, *framework = NULL;
    PyObject *inputs_obj = NULL;
    int epochs = 0, status_port = 0, quiet = 0, caller_reports = 0, min_nodes = 0, in_place = 0, grow = 0;
    double elastic_wait = 0;
    const char *mlflow = NULL, *mlflow_exp = NULL, *mlflow_name = NULL; /* read during tfos_local_open only */
    if (self->local) {
        PyErr_SetString(PyExc_RuntimeError, "LocalCluster is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|iipp$zdddpzizOiipzpzzzzidpp", kwlist, &argv_obj, &agent_path,
                                     &workers, &ps, &chief, &evaluator, &log_dir, &rt, &grace, &hb, &ps_runs, &python,
                                     &max_restarts, &ckpt, &inputs_obj, &epochs, &status_port, &quiet, &keras,
                                     &caller_reports, &mlflow, &mlflow_exp, &mlflow_name, &framework, &min_nodes,
                                     &elastic_wait, &in_place, &grow))
        return -1;
    if (keras && tfos__keras_mode_valid(keras)) {
        PyErr_Format(PyExc_ValueError, "keras='%s': use 'env', 'auto', 'legacy' or '3'", keras);
        return -1;
    }
    int spec_form = tfos_framework_spec_form(framework);
    if (spec_form < 0) {
        PyErr_Format(PyExc_ValueError, "framework='%s': use 'tf', 'torch' or 'jax'", framework);
        return -1;
    }
    int ninputs = 0;
    if (inputs_obj && inputs_obj != Py_None) {
        self->inputs = tfos__py_strv(inputs_obj, "inputs");
        if (!self->inputs)
            return -1;
        while (self->inputs[ninputs])
            ninputs++;
    }
    self->argv = tfos__py_strv(argv_obj, "argv");
    if (!self->argv)
        return -1;
    self->agent_path = strdup(agent_path);
    self->log_dir = dup_opt(log_dir);
    self->python = dup_opt(python);
    self->checkpoint_dir = dup_opt(ckpt);
    self->keras = dup_opt(keras);
    tfos_run_opts o = {.layout = {.num_ps = ps, .num_workers = workers, .chief = chief, .evaluator = evaluator},
                       .argv = self->argv, .agent_path = self->agent_path, .log_dir = self->log_dir,
                       .reservation_timeout = rt, .stop_grace = grace, .heartbeat_timeout = hb,
                       .ps_runs_program = ps_runs, .python = self->python, .max_restarts = max_restarts,
                       .checkpoint_dir = self->checkpoint_dir, .inputs = self->inputs, .ninputs = ninputs,
                       .csv_header = -1, .epochs = epochs, .status_port = status_port, .quiet = quiet, .keras = self->keras,
                       .caller_reports = caller_reports, .mlflow = mlflow, .mlflow_experiment = mlflow_exp,
                       .mlflow_run_name = mlflow_name, .spec_form = spec_form, .min_nodes = min_nodes,
                       .elastic_wait = elastic_wait, .resize_in_place = in_place,
                       .grow_in_place = grow};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_local_open(&self->local, &o);
    Py_END_ALLOW_THREADS
    tfos__py_log_drain();
    if (rc) {
        tfos__py_raise(rc, "cannot start the local cluster");
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
    tfos__py_log_drain();
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
        tfos__py_log_drain();
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
    tfos__py_strv_free(self->argv);
    free(self->agent_path);
    free(self->log_dir);
    free(self->python);
    free(self->checkpoint_dir);
    free(self->keras);
    tfos__py_strv_free(self->inputs);
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

PyType_Spec tfos__py_local_spec = {
    .name = "tfos._tfos.LocalCluster",
    .basicsize = sizeof(LocalObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Local_slots,
};
