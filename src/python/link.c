/* link.c: tfos._tfos.Link, one link (core/link.h) dialed from Python: what
 * tfos serve's model servers and local clients speak, so Python never
 * builds a frame itself.
 *
 * Link(address, key, role, timeout=30.0, fields=None, max_data=1 GiB)
 * dials "@name" or "host:port", reads the greeting, sends the role's first
 * frame with mac = HMAC(key, nonce) (key None: no mac) and `fields`, and
 * waits for the answer: SERVE_OK, or an ERROR raised as PermissionError
 * (the key was refused), ConnectionRefusedError (no place) or
 * ConnectionError. Then send(type, body, id, meta) writes a frame and
 * recv(timeout) returns the next one as (type, id, meta, body), or None
 * once the peer hung up between frames.
 *
 * Threads: every wait runs without the GIL, in slices of at most 100 ms so
 * that signals (a model server's SIGTERM) are handled; one call at a time
 * per link (another thread gets RuntimeError). */
#include "tfosmod.h"

#include "core/link.h"
#include "platform/clock.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define SLICE_MS 100

/* The roles Python dials as: the first frame's type and the key it needs. */
static const struct {
    const char *name;
    int type;
} roles[] = {
    {"model_server", TFOS_MSG_SERVE_JOIN},   /* key: the cluster secret */
    {"serve_client", TFOS_MSG_SERVE_CLIENT}, /* key: the HTTP token, or None */
};

typedef struct {
    PyObject_HEAD
    tfos__link *k;
    int busy;       /* a call runs without the GIL */
    char addr[300];
} LinkObject;

/* The exception for rc (err: the message). */
static PyObject *raise_link(int rc, int err_no, const char *msg)
{
    switch (rc) {
    case TFOS_ETIMEDOUT:
        return PyErr_Format(PyExc_TimeoutError, "%s", msg);
    case TFOS_EAUTH:
        return PyErr_Format(PyExc_PermissionError, "%s", msg);
    case TFOS_EINVAL:
        return PyErr_Format(PyExc_ValueError, "%s", msg);
    case TFOS_EFULL:
        return PyErr_Format(PyExc_ConnectionRefusedError, "%s", msg);
    case TFOS_ENOMEM:
        return PyErr_NoMemory();
    case TFOS_ESYS: {
        /* OSError(errno, text) becomes its subclass: ConnectionRefusedError, ... */
        PyObject *e = Py_BuildValue("(is)", err_no, msg);
        if (e) {
            PyErr_SetObject(PyExc_OSError, e);
            Py_DECREF(e);
        }
        return NULL;
    }
    default:
        return PyErr_Format(PyExc_ConnectionError, "%s", msg);
    }
}

/* An ERROR frame from the peer as an exception: its code says which. */
static PyObject *raise_error_frame(LinkObject *self, const tfos__frame *f)
{
    long long code = TFOS_EPROTO;
    char text[600] = "(no message)", msg[1000];
    tfos__kv_int(f->meta, f->meta_len, "code", -100, 0, &code);
    tfos__kv_str(f->meta, f->meta_len, "message", text, sizeof text);
    snprintf(msg, sizeof msg, "%s refused: %s", self->addr, text);
    return raise_link(code == TFOS_EAUTH || code == TFOS_EFULL ? (int)code : TFOS_ECLOSED, 0, msg);
}

static int enter(LinkObject *self)
{
    if (!self->k) {
        PyErr_SetString(PyExc_ValueError, "the link is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the link is in use by another thread");
        return -1;
    }
    self->busy = 1;
    return 0;
}

#define RAISED 1 /* a signal handler raised: the exception is set */

/* The next frame within timeout_ms (< 0: no bound), waiting without the
 * GIL in slices, handling signals between them. 0 with *f; RAISED; else a
 * TFOS_E* code. */
static int wait_frame(LinkObject *self, int timeout_ms, tfos__frame *f, const char **why)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : tfos__now_ms() + timeout_ms;
    for (;;) {
        int slice = timeout_ms < 0 ? SLICE_MS : tfos__ms_left(deadline, SLICE_MS);
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = tfos__link_wait_frame(self->k, slice, f, why);
        Py_END_ALLOW_THREADS
        if (rc != TFOS_ETIMEDOUT || (timeout_ms >= 0 && tfos__now_ms() >= deadline))
            return rc;
        if (PyErr_CheckSignals() < 0)
            return RAISED;
    }
}

/* Write what is queued within timeout_ms (< 0: no bound), in slices as
 * wait_frame. 0, RAISED, or a TFOS_E* code. */
static int flush_wait(LinkObject *self, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : tfos__now_ms() + timeout_ms;
    for (;;) {
        int slice = timeout_ms < 0 ? SLICE_MS : tfos__ms_left(deadline, SLICE_MS);
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = tfos__link_flush_wait(self->k, slice);
        Py_END_ALLOW_THREADS
        if (rc != TFOS_ETIMEDOUT || (timeout_ms >= 0 && tfos__now_ms() >= deadline))
            return rc;
        if (PyErr_CheckSignals() < 0)
            return RAISED;
    }
}

static int ms_of(PyObject *timeout, int *ms)
{
    if (timeout == Py_None) {
        *ms = -1;
        return 0;
    }
    double t = PyFloat_AsDouble(timeout);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (!(t >= 0) || t > 1e7) {
        PyErr_SetString(PyExc_ValueError, "timeout must be None or seconds >= 0");
        return -1;
    }
    *ms = (int)ceil(t * 1000);
    return 0;
}

/* meta lines from a mapping of str to str */
static int add_meta(tfos__msg *m, PyObject *meta)
{
    if (!meta || meta == Py_None)
        return 0;
    if (!PyDict_Check(meta)) {
        PyErr_SetString(PyExc_TypeError, "meta must be a dict of str to str");
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(meta, &pos, &k, &v)) {
        const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        const char *vs = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (!ks || !vs) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "meta must be a dict of str to str");
            return -1;
        }
        for (const char *c = ks; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '.')) {
                PyErr_Format(PyExc_ValueError, "meta key %R: only a-z, 0-9, '_' and '.'", k);
                return -1;
            }
        tfos__msg_add(m, ks, "%s", vs);
    }
    return 0;
}

static int Link_init(LinkObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"address", "key", "role", "timeout", "fields", "max_data", NULL};
    const char *addr, *key = NULL, *role;
    double timeout = 30.0;
    PyObject *fields = NULL;
    unsigned long long max_data = 1u << 30;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "szs|dOK", kwlist, &addr, &key, &role, &timeout, &fields, &max_data))
        return -1;
    if (self->k) {
        PyErr_SetString(PyExc_RuntimeError, "Link is initialised once");
        return -1;
    }
    int type = 0;
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(role, roles[i].name))
            type = roles[i].type;
    if (!type) {
        PyErr_Format(PyExc_ValueError, "unknown role %R (model_server, serve_client)", PyTuple_GET_ITEM(args, 2));
        return -1;
    }
    if (!(timeout >= 0) || timeout > 1e7 || max_data > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "timeout must be seconds >= 0 and max_data at most 4 GiB");
        return -1;
    }
    snprintf(self->addr, sizeof self->addr, "%s", addr);
    tfos__msg m;
    char err[512] = "";
    int rc, err_no = 0;
    int64_t deadline = tfos__now_ms() + (int64_t)(timeout * 1000);
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__link_dial(&self->k, addr, NULL, deadline, 0, 0, err, sizeof err);
    err_no = errno;
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_link(rc, err_no, err);
        return -1;
    }
    tfos__link_set_limits(self->k, (uint32_t)max_data, 0);
    tfos__link_hello(self->k, &m, type, key);
    if (add_meta(&m, fields) < 0) {
        tfos__msg_fini(&m);
        goto fail;
    }
    rc = tfos__msg_end(&m);
    if (rc == 0)
        rc = tfos__link_send(self->k, &m, NULL, 0);
    tfos__msg_fini(&m);
    if (rc == 0)
        rc = flush_wait(self, tfos__ms_left(deadline, -1));
    if (rc == RAISED)
        goto fail;
    tfos__frame f;
    const char *why = NULL;
    if (rc == 0)
        rc = wait_frame(self, tfos__ms_left(deadline, -1), &f, &why);
    if (rc == RAISED)
        goto fail;
    if (rc == 0 && f.type == TFOS_MSG_ERROR) {
        raise_error_frame(self, &f);
        goto fail;
    }
    if (rc == 0 && f.type != TFOS_MSG_SERVE_OK)
        rc = TFOS_EPROTO, why = "unexpected answer to its first frame";
    if (rc) {
        snprintf(err, sizeof err, "%s: %s", addr, why ? why : tfos_strerror(rc));
        raise_link(rc, errno, err);
        goto fail;
    }
    tfos__link_consume(self->k);
    return 0;
fail:
    tfos__link_close(self->k);
    self->k = NULL;
    return -1;
}

/* send(type, body=b"", id=0, meta=None, timeout=None) */
static PyObject *Link_send(LinkObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"type", "body", "id", "meta", "timeout", NULL};
    int type;
    Py_buffer body = {0};
    unsigned long long id = 0;
    PyObject *meta = NULL, *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|y*KOO", kwlist, &type, &body, &id, &meta, &timeout))
        return NULL;
    int ms, rc;
    PyObject *ret = NULL;
    tfos__msg m;
    memset(&m, 0, sizeof m);
    if (ms_of(timeout, &ms) < 0)
        goto out;
    if (!tfos__wire_type_known(type) || type == TFOS_MSG_HELLO) {
        PyErr_Format(PyExc_ValueError, "no frame type %d to send", type);
        goto out;
    }
    int data = tfos__wire_is_data(type);
    if (!data && body.len) {
        PyErr_SetString(PyExc_ValueError, "a control frame has no body: give its lines as meta");
        goto out;
    }
    if (data)
        tfos__msg_begin_data(&m, type, id);
    else
        tfos__msg_begin(&m, type);
    if (add_meta(&m, meta) < 0)
        goto out;
    rc = data ? tfos__msg_end_data(&m, (uint64_t)body.len) : tfos__msg_end(&m);
    if (rc) {
        raise_link(rc == TFOS_ETOOBIG ? TFOS_EINVAL : rc, 0, "the frame is too big");
        goto out;
    }
    if (enter(self) < 0)
        goto out;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__link_send(self->k, &m, body.buf, (size_t)body.len);
    Py_END_ALLOW_THREADS
    if (rc == 0)
        rc = flush_wait(self, ms);
    self->busy = 0;
    if (rc == RAISED)
        goto out;
    if (rc) {
        char msg[400];
        snprintf(msg, sizeof msg, "sending to %s: %s", self->addr, tfos_strerror(rc));
        raise_link(rc == TFOS_ESYS ? TFOS_ECLOSED : rc, 0, msg);
        goto out;
    }
    ret = Py_NewRef(Py_None);
out:
    tfos__msg_fini(&m);
    PyBuffer_Release(&body);
    return ret;
}

/* recv(timeout=None) -> (type, id, meta, body) or None */
static PyObject *Link_recv(LinkObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    int ms;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &timeout) || ms_of(timeout, &ms) < 0)
        return NULL;
    if (enter(self) < 0)
        return NULL;
    tfos__frame f;
    const char *why = NULL;
    int rc = wait_frame(self, ms, &f, &why);
    PyObject *ret = NULL;
    if (rc == RAISED)
        goto out;
    if (rc == TFOS_ECLOSED) {
        ret = Py_NewRef(Py_None);
        goto out;
    }
    if (rc) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: %s", self->addr, why ? why : tfos_strerror(rc));
        raise_link(rc == TFOS_ETIMEDOUT ? rc : rc == TFOS_ENOMEM ? rc : TFOS_ECLOSED, errno, msg);
        goto out;
    }
    if (f.type == TFOS_MSG_ERROR) {
        raise_error_frame(self, &f);
        goto out;
    }
    PyObject *meta = PyDict_New(), *body = NULL;
    size_t pos = 0, kl, vl;
    const char *k, *v;
    while (meta && tfos__kv_next(f.meta, f.meta_len, &pos, &k, &kl, &v, &vl) == 0) {
        PyObject *ko = PyUnicode_DecodeUTF8(k, (Py_ssize_t)kl, "replace");
        PyObject *vo = PyUnicode_DecodeUTF8(v, (Py_ssize_t)vl, "replace");
        if (!ko || !vo || PyDict_SetItem(meta, ko, vo) < 0)
            Py_CLEAR(meta);
        Py_XDECREF(ko);
        Py_XDECREF(vo);
    }
    /* a bytearray: the arrays decoded from it are writable, as a model's
     * code or a client's may expect */
    if (meta)
        body = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)f.body_len);
    if (body && f.body_len) {
        char *dst = PyByteArray_AS_STRING(body);
        Py_BEGIN_ALLOW_THREADS
        memcpy(dst, f.body, f.body_len);
        Py_END_ALLOW_THREADS
    }
    if (meta && body)
        ret = Py_BuildValue("(iKOO)", f.type, (unsigned long long)f.id, meta, body);
    Py_XDECREF(meta);
    Py_XDECREF(body);
out:
    self->busy = 0;
    if (self->k)
        tfos__link_consume(self->k);
    return ret;
}

static PyObject *Link_fileno(LinkObject *self, PyObject *Py_UNUSED(a))
{
    if (!self->k)
        return PyErr_Format(PyExc_ValueError, "the link is closed");
    return PyLong_FromLong(tfos__link_fd(self->k));
}

static PyObject *Link_close(LinkObject *self, PyObject *Py_UNUSED(a))
{
    if (self->busy)
        return PyErr_Format(PyExc_RuntimeError, "the link is in use by another thread");
    tfos__link_close(self->k);
    self->k = NULL;
    Py_RETURN_NONE;
}

static PyObject *Link_enter(LinkObject *self, PyObject *Py_UNUSED(a))
{
    return Py_NewRef(self);
}

static PyObject *Link_exit(LinkObject *self, PyObject *Py_UNUSED(a))
{
    return Link_close(self, NULL);
}

static PyObject *Link_get_closed(LinkObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->k == NULL);
}

static void Link_dealloc(LinkObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tfos__link_close(self->k);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Link_methods[] = {
    {"send", (PyCFunction)(void (*)(void))Link_send, METH_VARARGS | METH_KEYWORDS,
     "send(type, body=b'', id=0, meta=None, timeout=None): write one frame (a data frame: id, meta lines, body; a "
     "control frame: its lines as meta, no body), waiting until it is written (TimeoutError past timeout)."},
    {"recv", (PyCFunction)(void (*)(void))Link_recv, METH_VARARGS | METH_KEYWORDS,
     "recv(timeout=None) -> (type, id, meta, body) or None: the next frame (meta a dict of its lines, body a "
     "bytearray); "
     "None once the peer hung up; TimeoutError past timeout; an ERROR frame raises (PermissionError: refused)."},
    {"fileno", (PyCFunction)Link_fileno, METH_NOARGS, "fileno() -> int: the socket (to wait on; never read it)."},
    {"close", (PyCFunction)Link_close, METH_NOARGS, "close(): hang up."},
    {"__enter__", (PyCFunction)Link_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Link_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Link_getset[] = {
    {"closed", (getter)Link_get_closed, NULL, "whether close() was called (or the dial failed)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Link_slots[] = {
    {Py_tp_doc, "Link(address, key, role, timeout=30.0, fields=None, max_data=1 << 30): one authenticated link "
                "(core/link.h) to '@name' or 'host:port', dialed as `role` ('model_server': key the cluster "
                "secret; 'serve_client': key the HTTP token or None) with mac = HMAC(key, nonce); returns once "
                "the peer took it. PermissionError: the key was refused; ConnectionError, TimeoutError."},
    {Py_tp_init, Link_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Link_dealloc},
    {Py_tp_methods, Link_methods},
    {Py_tp_getset, Link_getset},
    {0, NULL},
};

PyType_Spec tfos__py_link_spec = {
    .name = "tfos._tfos.Link",
    .basicsize = sizeof(LinkObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Link_slots,
};

int tfos__py_link_setup(PyTypeObject *t)
{
    static const struct {
        const char *name;
        int type;
    } types[] = {
        {"ERROR", TFOS_MSG_ERROR},
        {"SERVE_JOIN", TFOS_MSG_SERVE_JOIN},
        {"SERVE_CLIENT", TFOS_MSG_SERVE_CLIENT},
        {"SERVE_OK", TFOS_MSG_SERVE_OK},
        {"SERVE_MODELS", TFOS_MSG_SERVE_MODELS},
        {"SERVE_BATCH", TFOS_MSG_SERVE_BATCH},
        {"SERVE_RESULT", TFOS_MSG_SERVE_RESULT},
        {"SERVE_FAIL", TFOS_MSG_SERVE_FAIL},
        {"SERVE_INFER", TFOS_MSG_SERVE_INFER},
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        PyObject *v = PyLong_FromLong(types[i].type);
        int rc = v ? PyObject_SetAttrString((PyObject *)t, types[i].name, v) : -1;
        Py_XDECREF(v);
        if (rc < 0)
            return -1;
    }
    return 0;
}
