/* tfosmod.h: what the files of the extension `tfos._tfos` share (internal).
 *
 * module.c owns the module (state, multi-phase init, module-level
 * functions, constants); each heap type lives in a file of its own and
 * hands module.c its spec: local.c (LocalCluster), coord.c (Coordinator),
 * ring.c (Ring), buffer.c (FeedBuffer, the pooled records Ring.read
 * returns) and link.c (Link, tfos serve's link); logsink.c hands libtfos's log lines to Python's logging.
 * encode.{c,h} plan and write columnar batches; rows.{c,h} make rows of
 * columns; pickled.{c,h} read PySpark's pickled batches (their row counts,
 * rows of numbers straight to a columnar batch). Types and exceptions live
 * in module state, never in statics (but for logsink.c's: libtfos's logger
 * is process-wide).
 */
#ifndef TFOS_PY_TFOSMOD_H
#define TFOS_PY_TFOSMOD_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

#define POOL_SLOTS 16
#define POOL_MAX_BYTES ((size_t)512 << 20)

typedef struct {
    PyTypeObject *local_type;
    PyTypeObject *coord_type;
    PyTypeObject *ring_type;
    PyTypeObject *buffer_type;
    PyTypeObject *mapping_type;
    PyTypeObject *policy_type;
    PyTypeObject *link_type;
    PyTypeObject *tracker_type;
    /* recycled FeedBuffer memory: large records land in memory that is
     * already faulted in instead of fresh pages the kernel must zero */
    void *pool_mem[POOL_SLOTS];
    size_t pool_cap[POOL_SLOTS];
    int pool_n;
    size_t pool_bytes;
    void *pickle_build;     /* pickled.c's batch builder (tfos__batch_build), made on first use */
    PyObject *feed_error;   /* tfos._tfos.FeedError */
    PyObject *feed_closed;  /* FeedClosed(FeedError): the peer went away */
    PyObject *feed_ended;   /* FeedEnded(FeedError): end of feed */
} module_state;

static inline module_state *get_state(PyObject *module)
{
    return (module_state *)PyModule_GetState(module);
}

/* Set the Python exception for a libtfos error code rc: OSError (with
 * errno's text) for TFOS_ESYS, ValueError for TFOS_EINVAL, RuntimeError
 * otherwise; the message is "what: reason". Always returns NULL. */
PyObject *tfos__py_raise(int rc, const char *what);

/* A new FeedBuffer of the module's pool holding a copy of data[0..len) (the
 * copy runs without the GIL); NULL with MemoryError set. The caller owns
 * the returned reference. (buffer.c) */
PyObject *tfos__py_buffer_copy(PyObject *module, const void *data, size_t len);

/* A new RingMapping: a read-only mapping of the whole memfd fd (buffer.c);
 * NULL with OSError set. */
PyObject *tfos__py_mapping_new(PyObject *module, int fd);

/* A NULL-terminated copy of a non-empty sequence of str (module.c);
 * `what` names it in errors. NULL with an exception set. Free with
 * tfos__py_strv_free. */
char **tfos__py_strv(PyObject *seq, const char *what);
/* A ctx.report()'s (name, number) pairs as the report's text (core/report.h)
 * in text[cap]: its length, or -1 with ValueError/TypeError set. */
int tfos__py_report_text(PyObject *pairs, char *text, size_t cap);
void tfos__py_strv_free(char **v);

/* The libtfos policy of a RestartPolicy object (policy.c); obj must be one. */
struct tfos_policy;
struct tfos_policy *tfos__py_policy(PyObject *obj);
/* A failure record as a dict (policy.c); NULL with an exception set. */
struct tfos_failure;
PyObject *tfos__py_failure_dict(const struct tfos_failure *f);

/* libtfos's log lines into Python's logging (logsink.c): the module's
 * _log_* functions, and the drain that a thread calls once it holds the GIL
 * again after a blocking call, to deliver the lines queued meanwhile in
 * order. */
extern PyMethodDef tfos__py_log_methods[];
void tfos__py_log_drain(void);

/* The heap types, created from these by module_exec (module.c). */
extern PyType_Spec tfos__py_local_spec;  /* tfos._tfos.LocalCluster (local.c) */
extern PyType_Spec tfos__py_coord_spec;  /* tfos._tfos.Coordinator (coord.c) */
extern PyType_Spec tfos__py_ring_spec;   /* tfos._tfos.Ring (ring.c) */
extern PyType_Spec tfos__py_mapping_spec; /* tfos._tfos.RingMapping (buffer.c) */
extern PyType_Spec tfos__py_buffer_spec; /* tfos._tfos.FeedBuffer (buffer.c) */
extern PyType_Spec tfos__py_policy_spec; /* tfos._tfos.RestartPolicy (policy.c) */
extern PyType_Spec tfos__py_link_spec;   /* tfos._tfos.Link (link.c) */
extern PyType_Spec tfos__py_tracker_spec; /* tfos._tfos.Tracker (tracker.c) */
/* The tracker of a Tracker object (tracker.c; NULL once closed). */
struct tfos__tracker;
struct tfos__tracker *tfos__py_tracker(PyObject *obj);
/* Link's class attributes: the frame types Python sends and receives. */
int tfos__py_link_setup(PyTypeObject *t);

#endif
