/* module.c: the CPython extension `tfos._tfos`, a thin layer over libtfos.
 *
 * This file owns the module: its state, multi-phase init, the module-level
 * functions (batch encode/decode, feed rings and sockets, clients of a
 * coordinator) and the constants. The heap types live one per file and are
 * created here from their specs (see tfosmod.h). Every blocking wait runs
 * with the GIL released.
 */
#include "tfosmod.h"

#include "core/auth.h"
#include "core/batch.h"
#include "core/feedsock.h"
#include "core/ring.h"
#include "core/spec.h"
#include "core/turns.h"
#include "encode.h"
#include "pickled.h"
#include "rows.h"
#include "feed/position.h"
#include "platform/proc.h"
#include "platform/webhdfs.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PyObject *tfos__py_raise(int rc, const char *what)
{
    if (rc == TFOS_ESYS)
        return PyErr_Format(PyExc_OSError, "%s: %s", what, strerror(errno));
    if (rc == TFOS_EINVAL)
        return PyErr_Format(PyExc_ValueError, "%s: %s", what, tfos_strerror(rc));
    return PyErr_Format(PyExc_RuntimeError, "%s: %s", what, tfos_strerror(rc));
}

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
    rc = tfos__feed_connect(cluster_id, executor_id, secret, timeout, NULL, &in_fd, &out_fd, node, sizeof node,
                            err, sizeof err);
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
    int executor_id, timeout = TFOS_DEFAULT_CLIENT_TIMEOUT_MS, rc, err;
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

/* query_status(coord_addr, secret, timeout_ms=10000, command=None, reason=None) -> str */
static PyObject *mod_query_status(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"coord_addr", "secret", "timeout_ms", "command", "reason", NULL};
    const char *addr, *secret, *command = NULL, *reason = NULL;
    int timeout = TFOS_DEFAULT_CLIENT_TIMEOUT_MS, rc, err;
    char *json = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|izz", kwlist, &addr, &secret, &timeout, &command, &reason))
        return NULL;
    if (timeout < 0)
        return PyErr_Format(PyExc_ValueError, "query_status: timeout_ms must be >= 0");
    if (command && *command && strcmp(command, "end_feed") && strcmp(command, "stop") && strcmp(command, "release") &&
        strcmp(command, "drain"))
        return PyErr_Format(PyExc_ValueError, "query_status: unknown command '%s' (end_feed, stop, release, drain)",
                            command);
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_coord_command(addr, secret, command, reason, timeout, &json);
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

/* feed_turn(coord_addr, secret, stage, nparts, nfed, partition, node, nodes, timeout_ms=10000) -> str:
 * a Spark feed task's turn (tfos_feed_turn); the JSON answer */
static PyObject *mod_feed_turn(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"coord_addr", "secret", "stage", "nparts", "nfed", "partition", "node", "nodes",
                             "timeout_ms", NULL};
    const char *addr, *secret, *stage;
    int nparts, nfed, partition, node, timeout = TFOS_DEFAULT_CLIENT_TIMEOUT_MS, rc, err, go;
    PyObject *seq;
    char *json = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sssiiiiO|i", kwlist, &addr, &secret, &stage, &nparts, &nfed,
                                     &partition, &node, &seq, &timeout))
        return NULL;
    if (timeout < 0)
        return PyErr_Format(PyExc_ValueError, "feed_turn: timeout_ms must be >= 0");
    PyObject *fast = PySequence_Fast(seq, "feed_turn: nodes must be a sequence of node ids");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > TFOS_TURNS_MAX_NODES) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "feed_turn: nodes must hold 1 to %d ids", TFOS_TURNS_MAX_NODES);
    }
    int *ids = PyMem_Malloc(sizeof(int) * (size_t)n);
    if (!ids) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(ids);
            Py_DECREF(fast);
            return NULL;
        }
        ids[i] = (int)v;
    }
    Py_DECREF(fast);
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_feed_turn(addr, secret, stage, nparts, nfed, ids, (int)n, partition, node, timeout, &go, &json);
    err = errno;
    Py_END_ALLOW_THREADS
    PyMem_Free(ids);
    if (rc == TFOS_ENOMEM)
        return PyErr_NoMemory();
    if (rc)
        return raise_client(rc, err, "cannot ask for a feed turn", addr, timeout);
    PyObject *r = PyUnicode_DecodeUTF8(json, (Py_ssize_t)strlen(json), "replace");
    free(json);
    return r;
}

/* webhdfs_kerberos_token(base, timeout_ms=30000) -> (url_string, expires_ms): a
 * WebHDFS delegation token for this process's Kerberos ticket (SPNEGO; tfos.fs
 * outside YARN containers). OSError with the NameNode's reason. */
static PyObject *mod_webhdfs_kerberos_token(PyObject *Py_UNUSED(m), PyObject *args)
{
    const char *base;
    int timeout = 30000, rc;
    char token[4096], err[1024];
    long long expires = 0;
    if (!PyArg_ParseTuple(args, "s|i", &base, &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__webhdfs_kerberos_token(base, timeout, token, sizeof token, &expires, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_Format(PyExc_OSError, "%s", err);
    return Py_BuildValue("(sL)", token, expires);
}

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

/* A NULL-terminated char* array copied from a Python sequence of str. */
char **tfos__py_strv(PyObject *seq, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, "a sequence of str is needed");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n == 0) {
        PyErr_Format(PyExc_ValueError, "%s must not be empty", what);
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
                PyErr_Format(PyExc_TypeError, "%s[%zd] must be str", what, i);
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

void tfos__py_strv_free(char **argv)
{
    if (!argv)
        return;
    for (char **a = argv; *a; a++)
        free(*a);
    free(argv);
}


/* ---- decisions and processes owned by libtfos ------------------------------- */

/* layout_roles(num_ps, num_workers, chief, evaluator) -> [(job, index), ...]
 * by executor id: tfos_layout_role, the one role table. */
static PyObject *mod_layout_roles(PyObject *Py_UNUSED(m), PyObject *args)
{
    int ps, workers, chief, evaluator;
    if (!PyArg_ParseTuple(args, "iipp", &ps, &workers, &chief, &evaluator))
        return NULL;
    if (ps < 0 || workers < 0) {
        PyErr_SetString(PyExc_ValueError, "num_ps and num_workers must be >= 0");
        return NULL;
    }
    tfos_layout l = {.num_ps = ps, .num_workers = workers, .chief = chief, .evaluator = evaluator};
    int n = tfos_layout_total(&l);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        const char *job;
        int index;
        tfos_layout_role(&l, i, &job, &index);
        PyObject *t = Py_BuildValue("(si)", job, index);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, t);
    }
    return list;
}

/* keras_mode_valid(mode) -> bool: one of the agent's --keras modes. */
static PyObject *mod_keras_mode_valid(PyObject *Py_UNUSED(m), PyObject *arg)
{
    const char *mode = PyUnicode_AsUTF8(arg);
    if (!mode)
        return NULL;
    return PyBool_FromLong(tfos__keras_mode_valid(mode) == 0);
}

/* spawn_detached(argv, env, keep_fds=()) -> pid (tfos__spawn_detached). */
static PyObject *mod_spawn_detached(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *argv_obj, *env_obj, *keep_obj = NULL;
    if (!PyArg_ParseTuple(args, "OO|O", &argv_obj, &env_obj, &keep_obj))
        return NULL;
    char **argv = tfos__py_strv(argv_obj, "argv");
    if (!argv)
        return NULL;
    char **env = NULL;
    PyObject *items = NULL;
    int *keep = NULL;
    Py_ssize_t nkeep = 0;
    PyObject *result = NULL;
    if (!PyMapping_Check(env_obj)) {
        PyErr_SetString(PyExc_TypeError, "env must be a mapping of str to str");
        goto out;
    }
    items = PyMapping_Items(env_obj);
    if (!items)
        goto out;
    Py_ssize_t ne = PyList_GET_SIZE(items);
    env = calloc((size_t)ne + 1, sizeof *env);
    if (!env) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < ne; i++) {
        const char *k, *v;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(items, i), "ss", &k, &v))
            goto out;
        size_t len = strlen(k) + strlen(v) + 2;
        if (!(env[i] = malloc(len))) {
            PyErr_NoMemory();
            goto out;
        }
        snprintf(env[i], len, "%s=%s", k, v);
    }
    if (keep_obj && keep_obj != Py_None) {
        PyObject *seq = PySequence_Fast(keep_obj, "keep_fds must be a sequence of ints");
        if (!seq)
            goto out;
        nkeep = PySequence_Fast_GET_SIZE(seq);
        keep = calloc((size_t)nkeep + 1, sizeof *keep);
        for (Py_ssize_t i = 0; keep && i < nkeep; i++)
            keep[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        Py_DECREF(seq);
        if (!keep) {
            PyErr_NoMemory();
            goto out;
        }
        if (PyErr_Occurred())
            goto out;
    }
    tfos__spawn_opts so = {.argv = argv, .envp = env, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                           .keep_fds = keep, .nkeep = (int)nkeep};
    pid_t pid = 0;
    int rc, e;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__spawn_detached(&so, &pid);
    e = errno;
    Py_END_ALLOW_THREADS
    if (rc) {
        /* OSError(errno, text) picks the subclass (FileNotFoundError...) */
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", e, "cannot start the program");
        if (exc) {
            PyObject *fn = PyUnicode_FromString(argv[0]);
            if (fn) {
                PyObject_SetAttrString(exc, "filename", fn);
                Py_DECREF(fn);
            }
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        goto out;
    }
    result = PyLong_FromLong((long)pid);
out:
    if (env)
        for (size_t i = 0; env[i]; i++)
            free(env[i]);
    free(env);
    free(keep);
    Py_XDECREF(items);
    tfos__py_strv_free(argv);
    return result;
}

static PyObject *mod_pid_alive(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long pid = PyLong_AsLong(arg);
    if (pid == -1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(tfos__pid_alive((pid_t)pid));
}

static PyObject *mod_checkpoint_progress(PyObject *Py_UNUSED(m), PyObject *arg)
{
    const char *dir = PyUnicode_AsUTF8(arg);
    if (!dir)
        return NULL;
    char buf[128];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos_checkpoint_progress(dir, buf, sizeof buf);
    Py_END_ALLOW_THREADS
    if (rc)
        return tfos__py_raise(rc, "checkpoint_progress");
    return PyUnicode_FromString(buf);
}

/* read_positions(checkpoint_dir, since=0.0) -> None or (whole, partial):
 * feed/position.c's reader, the one the launcher uses, for TFCluster. */
static PyObject *mod_read_positions(PyObject *Py_UNUSED(m), PyObject *args)
{
    const char *dir;
    double since = 0;
    if (!PyArg_ParseTuple(args, "s|d", &dir, &since))
        return NULL;
    tfos__position pos;
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = tfos__feed_positions(dir, since, &pos);
    Py_END_ALLOW_THREADS
    if (found < 0)
        return tfos__py_raise(found, "reading the feed positions");
    if (!found)
        Py_RETURN_NONE;
    PyObject *whole = PySet_New(NULL), *partial = PyDict_New(), *r = NULL;
    for (size_t i = 0; whole && i < pos.nwhole; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(pos.whole[i]);
        if (!v || PySet_Add(whole, v)) {
            Py_XDECREF(v);
            goto out;
        }
        Py_DECREF(v);
    }
    for (size_t i = 0; partial && i < pos.npart; i++) {
        PyObject *k = PyLong_FromUnsignedLongLong(pos.part_id[i]), *v = PyLong_FromUnsignedLongLong(pos.part_rows[i]);
        int bad = !k || !v || PyDict_SetItem(partial, k, v);
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad)
            goto out;
    }
    if (whole && partial)
        r = PyTuple_Pack(2, whole, partial);
out:
    Py_XDECREF(whole);
    Py_XDECREF(partial);
    tfos__position_fini(&pos);
    return r;
}

/* The defaults of include/tfos/defaults.h, for the Python API's signatures. */
static int add_defaults(PyObject *m)
{
    PyObject *d = Py_BuildValue(
        "{s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:d,s:d,s:i,s:i,s:d,s:i,s:i,s:i,s:d,s:L,s:d,s:d}",
        "reservation_timeout_local", TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL, "reservation_timeout_spark",
        TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK, "stop_grace", TFOS_DEFAULT_STOP_GRACE, "results_timeout",
        TFOS_DEFAULT_RESULTS_TIMEOUT, "failure_grace", TFOS_DEFAULT_FAILURE_GRACE, "heartbeat_timeout",
        TFOS_DEFAULT_HEARTBEAT_TIMEOUT, "connect_timeout", TFOS_DEFAULT_CONNECT_TIMEOUT, "max_restarts",
        TFOS_DEFAULT_MAX_RESTARTS, "feed_mb", TFOS_DEFAULT_FEED_MB, "result_mb", TFOS_DEFAULT_RESULT_MB, "batch_rows",
        TFOS_DEFAULT_BATCH_ROWS, "record_bytes", (int)TFOS_AUTO_RECORD_BYTES, "partition_rows",
        TFOS_DEFAULT_PARTITION_ROWS, "client_timeout_ms", TFOS_DEFAULT_CLIENT_TIMEOUT_MS, "heartbeat_interval_ms",
        TFOS_HEARTBEAT_INTERVAL_MS, "feed_timeout", TFOS_DEFAULT_FEED_TIMEOUT, "lease_timeout",
        TFOS_DEFAULT_LEASE_TIMEOUT, "serve_port", TFOS_SERVE_DEFAULT_PORT, "serve_max_restarts",
        TFOS_SERVE_DEFAULT_MAX_RESTARTS, "serve_poll", TFOS_SERVE_DEFAULT_POLL, "serve_max_batch",
        TFOS_SERVE_DEFAULT_MAX_BATCH, "serve_max_delay_ms", TFOS_SERVE_DEFAULT_MAX_DELAY_MS,
        "serve_queue_batches", TFOS_SERVE_DEFAULT_QUEUE_BATCHES, "serve_timeout", TFOS_SERVE_DEFAULT_TIMEOUT,
        "serve_max_body", (long long)TFOS_SERVE_DEFAULT_MAX_BODY, "serve_client_timeout",
        TFOS_SERVE_DEFAULT_CLIENT_TIMEOUT, "drain_grace", TFOS_DEFAULT_DRAIN_GRACE);
    if (!d)
        return -1;
    int rc = PyModule_AddObjectRef(m, "DEFAULTS", d);
    Py_DECREF(d);
    return rc;
}

/* The one dtype table (core/batch.c), for Python: DTYPES is a tuple of
 * (code, numpy dtype string, OIP name, item size), one per element type,
 * in code order. tfos.feed and tfos.serve read it; none keeps its own. */
static int add_dtypes(PyObject *m)
{
    PyObject *t = PyTuple_New(TFOS_DT_MAX_);
    for (int dt = 1; t && dt <= TFOS_DT_MAX_; dt++) {
        PyObject *e = Py_BuildValue("(issn)", dt, tfos__dtype_numpy(dt), tfos__dtype_oip(dt),
                                    (Py_ssize_t)tfos__dtype_size(dt));
        if (!e) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, dt - 1, e);
    }
    if (!t)
        return -1;
    int rc = PyModule_AddObjectRef(m, "DTYPES", t);
    Py_DECREF(t);
    return rc;
}

/* check_report(pairs) -> str: the report's text, or ValueError/TypeError. */
static PyObject *mod_check_report(PyObject *self, PyObject *pairs)
{
    (void)self;
    char text[TFOS_RING_REPORT_MAX + 1];
    int len = tfos__py_report_text(pairs, text, sizeof text);
    return len < 0 ? NULL : PyUnicode_FromStringAndSize(text, len);
}

static PyMethodDef module_methods[] = {
    {"random_secret", mod_random_secret, METH_NOARGS, "random_secret() -> str: a fresh 256-bit cluster secret."},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> str"},
    {"check_report", mod_check_report, METH_O,
     "check_report(pairs) -> str: ctx.report()'s (name, number) pairs as the report text, or ValueError/TypeError."},
    {"encode_rows", mod_encode_rows, METH_O,
     "encode_rows(rows) -> bytes: a columnar batch; TypeError/ValueError naming the row and field when the rows "
     "have no columnar layout."},
    {"encode_columns", mod_encode_columns, METH_O, "encode_columns([(name, array), ...]) -> bytes: a columnar batch."},
    {"rows_from_columns", tfos_rows_from_columns, METH_VARARGS,
     "rows_from_columns(columns, lo, hi, lists=False) -> [row, ...]: rows lo..hi of 1-D numeric or bool columns as "
     "tuples (lists), the values numpy's tolist gives; NotImplemented where a column is not one of those."},
    {"pickled_list_len", tfos_pickled_list_len, METH_O,
     "pickled_list_len(buffer) -> int: the number of items of the list a pickle makes, read from its opcodes "
     "without unpickling it; -1 where that cannot be told for certain (not a list, malformed, ...)."},
    {"pickled_columns", tfos_pickled_columns, METH_O,
     "pickled_columns(buffer) -> (nrows, batch) or None: a pickled list of tuples of floats, ints and bools as the "
     "columnar batch encode_rows makes of those rows, read from the opcodes (no Python object); None otherwise."},
    {"decode_columns", mod_decode_columns, METH_O,
     "decode_columns(buffer) -> (flags, [(name, kind, dtype, shape, nrows, data_off, data_len, offsets_off)]), "
     "after validating every field and range (FeedError if corrupt)."},
    {"ring_create", mod_ring_create, METH_VARARGS,
     "ring_create(capacity) -> fd: a new feed ring in a sealed memfd; attach with Ring(fd, role)."},
    {"report_abort", (PyCFunction)(void (*)(void))mod_report_abort, METH_VARARGS | METH_KEYWORDS,
     "report_abort(coord_addr, secret, executor_id, message, timeout_ms=10000): tell the coordinator that node "
     "executor_id could not start; the cluster fails with the message and stops. Raises ConnectionError, "
     "TimeoutError, PermissionError (wrong secret) or ValueError."},
    {"feed_turn", (PyCFunction)(void (*)(void))mod_feed_turn, METH_VARARGS | METH_KEYWORDS,
     "feed_turn(coord_addr, secret, stage, nparts, nfed, partition, node, nodes, timeout_ms=10000) -> str: may "
     "this Spark feed task begin its partition (JSON: go, begun, behind, behind_begun, unbegun)"},
    {"query_status", (PyCFunction)(void (*)(void))mod_query_status, METH_VARARGS | METH_KEYWORDS,
     "query_status(coord_addr, secret, timeout_ms=10000, command=None, reason=None) -> str: the coordinator's "
     "JSON status (with \"state\" and \"failure\"), after it carried out command: 'end_feed', 'stop' (with "
     "reason) or 'release'. Every query renews the client's lease. Raises as report_abort."},
    {"feed_connect", mod_feed_connect, METH_VARARGS,
     "feed_connect(cluster_id, executor_id, secret, timeout_ms=30000) -> (in_fd, out_fd, node): the ring fds of "
     "a node on this machine (the caller owns them)."},
    {"layout_roles", mod_layout_roles, METH_VARARGS,
     "layout_roles(num_ps, num_workers, chief, evaluator) -> [(job, index), ...]: every node's role by executor "
     "id, in TensorFlowOnSpark's order (libtfos's role table)."},
    {"keras_mode_valid", mod_keras_mode_valid, METH_O,
     "keras_mode_valid(mode) -> bool: mode is one of the node agent's --keras modes (env, auto, legacy, 3)."},
    {"spawn_detached", mod_spawn_detached, METH_VARARGS,
     "spawn_detached(argv, env, keep_fds=()) -> pid: start argv detached (its own session, not our child); a "
     "failed exec raises OSError with its errno at once."},
    {"webhdfs_kerberos_token", mod_webhdfs_kerberos_token, METH_VARARGS,
     "webhdfs_kerberos_token(base, timeout_ms=30000) -> (url_string, expires_ms): a WebHDFS delegation token "
     "for this process's Kerberos ticket (SPNEGO)."},
    {"pid_alive", mod_pid_alive, METH_O, "pid_alive(pid) -> bool: the process runs (a zombie counts as gone)."},
    {"read_positions", mod_read_positions, METH_VARARGS,
     "read_positions(checkpoint_dir, since=0.0) -> None or (whole, partial): where a restarted feed resumes "
     "(the feed positions saved at or after since; see tfos.feed.read_positions)."},
    {"checkpoint_progress", mod_checkpoint_progress, METH_O,
     "checkpoint_progress(dir) -> str: the fingerprint the restart policy compares ('' when not local)."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    module_state *st = get_state(m);
    st->local_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_local_spec, NULL);
    if (!st->local_type || PyModule_AddType(m, st->local_type) < 0)
        return -1;
    st->coord_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_coord_spec, NULL);
    if (!st->coord_type || PyModule_AddType(m, st->coord_type) < 0)
        return -1;
    st->ring_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_ring_spec, NULL);
    if (!st->ring_type || PyModule_AddType(m, st->ring_type) < 0)
        return -1;
    st->buffer_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_buffer_spec, NULL);
    if (!st->buffer_type || PyModule_AddType(m, st->buffer_type) < 0)
        return -1;
    st->mapping_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_mapping_spec, NULL);
    if (!st->mapping_type || PyModule_AddType(m, st->mapping_type) < 0)
        return -1;
    st->policy_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_policy_spec, NULL);
    if (!st->policy_type || PyModule_AddType(m, st->policy_type) < 0)
        return -1;
    st->tracker_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_tracker_spec, NULL);
    if (!st->tracker_type || PyModule_AddType(m, st->tracker_type) < 0)
        return -1;
    st->link_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tfos__py_link_spec, NULL);
    if (!st->link_type || tfos__py_link_setup(st->link_type) < 0 || PyModule_AddType(m, st->link_type) < 0)
        return -1;
    if (add_defaults(m) < 0 || add_dtypes(m) < 0 || PyModule_AddFunctions(m, tfos__py_log_methods) < 0)
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
        PyModule_AddStringConstant(m, "FEED_POSITION_DIR", TFOS__POSITION_DIR) < 0 ||
        PyModule_AddStringConstant(m, "WEBHDFS_TOKEN_FIX", TFOS_WEBHDFS_TOKEN_FIX) < 0 ||
        PyModule_AddIntConstant(m, "PROTOCOL_VERSION", TFOS_PROTOCOL_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "STATE_RESERVING", TFOS_COORD_RESERVING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_RUNNING", TFOS_COORD_RUNNING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_STOPPING", TFOS_COORD_STOPPING) < 0 ||
        PyModule_AddIntConstant(m, "STATE_DONE", TFOS_COORD_DONE) < 0 ||
        PyModule_AddIntConstant(m, "STATE_FAILED", TFOS_COORD_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "ETIMEDOUT", TFOS_ETIMEDOUT) < 0 ||
        PyModule_AddIntConstant(m, "ESTOPPED", TFOS_ESTOPPED) < 0 ||
        PyModule_AddIntConstant(m, "EFAILED", TFOS_EFAILED) < 0 ||
        PyModule_AddIntConstant(m, "EEND", TFOS_EEND) < 0 ||
        PyModule_AddIntConstant(m, "ECLOSED", TFOS_ECLOSED) < 0 ||
        PyModule_AddIntConstant(m, "ETOOBIG", TFOS_ETOOBIG) < 0 ||
        PyModule_AddIntConstant(m, "RESTART", TFOS_RESTART) < 0 ||
        PyModule_AddIntConstant(m, "RAISE", TFOS_RAISE) < 0 ||
        PyModule_AddIntConstant(m, "RESIZE", TFOS_RESIZE) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_EXIT", TFOS_CAUSE_EXIT) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_SIGNAL", TFOS_CAUSE_SIGNAL) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_HEARTBEAT", TFOS_CAUSE_HEARTBEAT) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_AGENT_LOST", TFOS_CAUSE_AGENT_LOST) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_EXECUTOR_LOST", TFOS_CAUSE_EXECUTOR_LOST) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_START", TFOS_CAUSE_START) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_PS_EXITED", TFOS_CAUSE_PS_EXITED) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_RESERVATION", TFOS_CAUSE_RESERVATION) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_FEED", TFOS_CAUSE_FEED) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_STOPPED", TFOS_CAUSE_STOPPED) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_HANG", TFOS_CAUSE_HANG) < 0 ||
        PyModule_AddIntConstant(m, "CAUSE_SETUP", TFOS_CAUSE_SETUP) < 0 ||
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
    Py_VISIT(st->policy_type);
    Py_VISIT(st->tracker_type);
    Py_VISIT(st->link_type);
    Py_VISIT(st->ring_type);
    Py_VISIT(st->buffer_type);
    Py_VISIT(st->mapping_type);
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
    Py_CLEAR(st->policy_type);
    Py_CLEAR(st->tracker_type);
    Py_CLEAR(st->link_type);
    Py_CLEAR(st->ring_type);
    Py_CLEAR(st->buffer_type);
    Py_CLEAR(st->mapping_type);
    for (int i = 0; i < st->pool_n; i++)
        free(st->pool_mem[i]);
    st->pool_n = 0;
    st->pool_bytes = 0;
    tfos__pickled_free(st->pickle_build);
    st->pickle_build = NULL;
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
