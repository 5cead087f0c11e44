/* logsink.c: libtfos's log lines into Python's `logging`, logger "tfos".
 *
 * The extension sets libtfos's process-wide sink (tfos_set_logger) to
 * py_sink once tfos._log calls _log_install(emit). A line reaches
 * emit(level, msg), a Python function of tfos._log, in one of two ways:
 *
 * - the logging thread holds the GIL (PyGILState_Check): emit is called at
 *   once, in that thread, after the lines queued before it;
 * - it does not (the coordinator's loop in Coordinator.run(), the launcher's
 *   step and open with the GIL released, feeder threads): the line is copied
 *   into a bounded queue and that thread goes on. It must not wait for the
 *   GIL: it may hold a lock of the library that a thread holding the GIL
 *   waits for. The queue is emptied by the pump, _log_pump(), which
 *   tfos._log runs in a daemon thread that holds no other lock, and by any
 *   thread that reacquires the GIL after a blocking call (tfos__py_log_drain,
 *   so that tfos.run's lines are in order with its exception).
 *
 * A line goes to stderr as the CLI writes it (tfos__log_stderr) instead
 * when it cannot be delivered: the queue is full, the pump was stopped at
 * interpreter exit (_log_stop, from tfos._log's atexit), the interpreter is
 * finalizing, or emit logs a line itself. Nothing is dropped.
 *
 * Locks: q_mu is a leaf, held for a few instructions, never while waiting
 * for the GIL or calling Python. A fork keeps it consistent
 * (pthread_atfork) and empties the child's queue: those lines are the
 * parent's to deliver; tfos._log starts a new pump in the child.
 */
#include "tfosmod.h"

#include "core/log.h"
#include "tfos/tfos.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_CAP 1024

typedef struct {
    int level;
    char *msg;
} queued_line;

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static queued_line q_lines[QUEUE_CAP];
static int q_head, q_count;
static int q_stopped; /* _log_stop: lines without the GIL go to stderr */

static PyObject *emit_fn; /* tfos._log._emit; set once, with the GIL */
static _Thread_local int in_emit;

static int finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Python's level for libtfos's. */
static int py_level(int level)
{
    static const int levels[] = {10, 20, 30, 40}; /* DEBUG, INFO, WARNING, ERROR */
    return levels[level & 3];
}

/* With the GIL: hand one line to emit. Keeps the caller's exception. */
static void deliver(int level, const char *msg)
{
    if (!emit_fn || in_emit || finalizing()) {
        tfos__log_stderr(level, msg);
        return;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
#endif
    in_emit = 1;
    /* the C side may log bytes that are not UTF-8 (a peer's name, a path) */
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    PyObject *r = text ? PyObject_CallFunction(emit_fn, "iN", py_level(level), text) : NULL;
    in_emit = 0;
    if (r) {
        Py_DECREF(r);
    } else {
        PyErr_Clear();
        tfos__log_stderr(level, msg);
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, value, tb);
#endif
}

/* With the GIL: deliver the queued lines, oldest first. Lines are taken one
 * at a time with the GIL held, so that two threads delivering at once (the
 * pump and a drain) keep them in order. */
void tfos__py_log_drain(void)
{
    for (;;) {
        queued_line line = {0, NULL};
        pthread_mutex_lock(&q_mu);
        if (q_count) {
            line = q_lines[q_head];
            q_head = (q_head + 1) % QUEUE_CAP;
            q_count--;
        }
        pthread_mutex_unlock(&q_mu);
        if (!line.msg)
            return;
        deliver(line.level, line.msg);
        free(line.msg);
    }
}

static void py_sink(int level, const char *msg, void *user)
{
    (void)user;
    if (!finalizing() && PyGILState_Check()) {
        if (!in_emit)
            tfos__py_log_drain();
        deliver(level, msg);
        return;
    }
    pthread_mutex_lock(&q_mu);
    char *copy = !q_stopped && q_count < QUEUE_CAP ? strdup(msg) : NULL;
    if (copy) {
        q_lines[(q_head + q_count) % QUEUE_CAP] = (queued_line){level, copy};
        q_count++;
        pthread_cond_signal(&q_cv);
    }
    pthread_mutex_unlock(&q_mu);
    if (!copy)
        tfos__log_stderr(level, msg);
}

static void lock_for_fork(void)
{
    pthread_mutex_lock(&q_mu);
}

static void unlock_in_parent(void)
{
    pthread_mutex_unlock(&q_mu);
}

/* The child has one thread: the pump is gone, the queued lines are the
 * parent's. */
static void reset_in_child(void)
{
    while (q_count) {
        free(q_lines[q_head].msg);
        q_head = (q_head + 1) % QUEUE_CAP;
        q_count--;
    }
    pthread_cond_init(&q_cv, NULL);
    pthread_mutex_unlock(&q_mu);
}

/* _log_install(emit): libtfos's lines go to emit(level, msg) from now on. */
static PyObject *mod_log_install(PyObject *Py_UNUSED(m), PyObject *fn)
{
    static int registered;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "_log_install needs a callable");
    Py_INCREF(fn);
    Py_XSETREF(emit_fn, fn);
    if (!registered && pthread_atfork(lock_for_fork, unlock_in_parent, reset_in_child) == 0)
        registered = 1;
    pthread_mutex_lock(&q_mu);
    q_stopped = 0;
    pthread_mutex_unlock(&q_mu);
    tfos_set_logger(py_sink, NULL);
    Py_RETURN_NONE;
}

/* _log_pump(): deliver queued lines until _log_stop(); the GIL is released
 * while it waits. */
static PyObject *mod_log_pump(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    for (;;) {
        int stop;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&q_mu);
        while (!q_count && !q_stopped)
            pthread_cond_wait(&q_cv, &q_mu);
        stop = q_stopped;
        pthread_mutex_unlock(&q_mu);
        Py_END_ALLOW_THREADS
        tfos__py_log_drain();
        if (stop)
            break;
    }
    Py_RETURN_NONE;
}

/* _log_stop(): end the pump; from now on a line logged without the GIL goes
 * straight to stderr. Lines still queued stay for _log_flush(). */
static PyObject *mod_log_stop(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    pthread_mutex_lock(&q_mu);
    q_stopped = 1;
    pthread_cond_broadcast(&q_cv);
    pthread_mutex_unlock(&q_mu);
    Py_RETURN_NONE;
}

/* _log_flush(): deliver every queued line in this thread. */
static PyObject *mod_log_flush(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tfos__py_log_drain();
    Py_RETURN_NONE;
}

PyMethodDef tfos__py_log_methods[] = {
    {"_log_install", mod_log_install, METH_O,
     "_log_install(emit): libtfos's log lines go to emit(level, msg) (level as in logging) from now on; lines "
     "logged by threads without the GIL are queued for _log_pump."},
    {"_log_pump", mod_log_pump, METH_NOARGS,
     "_log_pump(): deliver queued log lines until _log_stop(); run it in a thread of its own."},
    {"_log_stop", mod_log_stop, METH_NOARGS,
     "_log_stop(): end _log_pump; later lines from threads without the GIL go to stderr."},
    {"_log_flush", mod_log_flush, METH_NOARGS, "_log_flush(): deliver the queued log lines in this thread."},
    {NULL, NULL, 0, NULL},
};
