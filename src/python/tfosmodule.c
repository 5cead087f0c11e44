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
#include "tfos/tfos.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyTypeObject *local_type;
    PyTypeObject *coord_type;
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
    char *agent_path, *log_dir, *python;
    int finished;
} LocalObject;

static int Local_init(LocalObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"argv", "agent_path", "workers", "ps", "chief", "evaluator", "log_dir",
                             "reservation_timeout", "grace", "heartbeat_timeout", "ps_runs_program", "python",
                             NULL};
    PyObject *argv_obj;
    const char *agent_path, *log_dir = NULL, *python = NULL;
    int workers = 1, ps = 0, chief = 0, evaluator = 0, ps_runs = 0;
    double rt = 60, grace = 5, hb = 30;
    if (self->local) {
        PyErr_SetString(PyExc_RuntimeError, "LocalCluster is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|iipp$zdddpz", kwlist, &argv_obj, &agent_path, &workers, &ps,
                                     &chief, &evaluator, &log_dir, &rt, &grace, &hb, &ps_runs, &python))
        return -1;
    self->argv = argv_from_seq(argv_obj);
    if (!self->argv)
        return -1;
    self->agent_path = strdup(agent_path);
    self->log_dir = dup_opt(log_dir);
    self->python = dup_opt(python);
    tfos_run_opts o = {.layout = {.num_ps = ps, .num_workers = workers, .chief = chief, .evaluator = evaluator},
                       .argv = self->argv, .agent_path = self->agent_path, .log_dir = self->log_dir,
                       .reservation_timeout = rt, .stop_grace = grace, .heartbeat_timeout = hb,
                       .ps_runs_program = ps_runs, .python = self->python};
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
    return PyUnicode_FromString(tfos_coord_failure(tfos_local_coord(self->local)));
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

typedef struct {
    PyObject_HEAD
    tfos_coord *coord;
} CoordObject;

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
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(st);
}

static PyObject *Coord_stop(CoordObject *self, PyObject *args)
{
    const char *reason = NULL;
    if (!PyArg_ParseTuple(args, "|z", &reason) || !coord_ready(self))
        return NULL;
    tfos_coord_stop(self->coord, reason);
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
    if (self->coord)
        tfos_coord_close(self->coord);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Coord_methods[] = {
    {"step", (PyCFunction)Coord_step, METH_VARARGS, "step(timeout_ms=100) -> int: run the event loop; the state."},
    {"stop", (PyCFunction)Coord_stop, METH_VARARGS, "stop(reason=None): ask every node to stop."},
    {"status", (PyCFunction)Coord_status, METH_NOARGS, "status() -> str: JSON status of every node."},
    {"close", (PyCFunction)Coord_close, METH_NOARGS, "close(): stop listening and free."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Coord_getset[] = {
    {"address", (getter)Coord_get_address, NULL, "host:port the coordinator listens on", NULL},
    {"state", (getter)Coord_get_state, NULL, "one of the STATE_* constants", NULL},
    {"failure", (getter)Coord_get_failure, NULL, "failure summary, or ''", NULL},
    {"failure_code", (getter)Coord_get_failure_code, NULL, "0, ETIMEDOUT, ESTOPPED or EFAILED", NULL},
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
    if (PyModule_AddStringConstant(m, "VERSION", TFOS_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "PROTOCOL_VERSION", TFOS_PROTOCOL_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "STATE_RESERVING", TFOS_COORD_RESERVING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_RUNNING", TFOS_COORD_RUNNING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_STOPPING", TFOS_COORD_STOPPING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_DONE", TFOS_COORD_DONE) < 0 ||
        PyModule_AddIntConstant(m, "STATE_FAILED", TFOS_COORD_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "ETIMEDOUT", TFOS_ETIMEDOUT) < 0 ||
        PyModule_AddIntConstant(m, "ESTOPPED", TFOS_ESTOPPED) < 0 ||
        PyModule_AddIntConstant(m, "EFAILED", TFOS_EFAILED) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = get_state(m);
    Py_VISIT(st->local_type);
    Py_VISIT(st->coord_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = get_state(m);
    Py_CLEAR(st->local_type);
    Py_CLEAR(st->coord_type);
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
