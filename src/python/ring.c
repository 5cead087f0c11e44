/* ring.c: tfos._tfos.Ring, one side (producer, consumer or observer) of a
 * shared-memory feed ring (core/ring.h). Writes encode batches straight
 * into ring memory (encode.h); reads copy records out, large ones into
 * pooled FeedBuffers (buffer.c), or, asked for views, hand out large ones
 * as memoryviews of a second mapping of the ring (RingMapping, buffer.c),
 * held in the ring until the next read. Blocking calls run without the GIL;
 * errors are FeedError and its subclasses from module state. */
#include "tfosmod.h"

#include "core/report.h"
#include "core/ring.h"
#include "encode.h"
#include "tfos/tfos.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define POOLED_MIN ((size_t)64 << 10) /* records smaller than this become bytes */

typedef struct {
    PyObject_HEAD
    tfos__ring *ring;
    int role;
    PyObject *module;  /* for the exception types in module state */
    PyObject *mapping; /* consumer: a memoryview of a RingMapping of the ring (read(views=True)) */
    int held;          /* records of the last read are not released yet (they were read as views) */
} RingObject;

/* Raise an exception of `type` with message `msg`, carrying the libtfos
 * code: `.code` (rc, a TFOS_E* value, also in tfos._tfos) and `.reason`
 * (tfos_strerror(rc)). Callers decide on `.code` or on the type, never on
 * the message. Always returns NULL. */
static PyObject *raise_coded(PyObject *type, int rc, const char *msg)
{
    PyObject *exc = PyObject_CallFunction(type, "s", msg);
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
    return raise_coded(type, rc, what);
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
    if (!self->module)
        return -1;
    if (role == TFOS_RING_CONSUMER) {
        PyObject *m = tfos__py_mapping_new(self->module, fd);
        self->mapping = m ? PyMemoryView_FromObject(m) : NULL;
        Py_XDECREF(m);
        if (!self->mapping)
            return -1;
    }
    return 0;
}

/* Release the records of the last read if it left them held (views). */
static void release_held(RingObject *self)
{
    if (self->held && self->ring)
        tfos__ring_release(self->ring);
    self->held = 0;
}

static int ring_ready(RingObject *self)
{
    if (!self->ring) {
        PyErr_SetString(PyExc_ValueError, "the feed ring is closed");
        return 0;
    }
    return 1;
}

/* write(tag, data, timeout_ms=-1, rows=-1): rows < 0 says nothing of the
 * record's rows (its partition is then re-fed whole after an abort). */
static PyObject *Ring_write(RingObject *self, PyObject *args)
{
    unsigned int tag;
    Py_buffer buf;
    int timeout = -1, rc;
    long long rows = -1;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "Iy*|iL", &tag, &buf, &timeout, &rows))
        return NULL;
    uint64_t n = rows < 0 ? TFOS_RING_ROWS_UNKNOWN : (uint64_t)rows;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_write_rows(self->ring, tag, buf.buf, (size_t)buf.len, n, timeout);
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
        /* ValueError as before, with .code = TFOS_ETOOBIG: tfos.feed's
         * write_rows splits the batch on that code */
        char msg[200];
        snprintf(msg, sizeof msg, "a batch of %llu bytes is larger than the ring's largest record (%zu bytes): "
                 "send fewer rows per batch", (unsigned long long)p->total, tfos__ring_max_record(self->ring));
        tfos_plan_release(p);
        return raise_coded(PyExc_ValueError, TFOS_ETOOBIG, msg);
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
    rc = tfos__ring_commit_rows(self->ring, (size_t)p->total, p->nrows);
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

/* partition_begin(partition_id, timeout_ms=-1, key=None) -> the row to start
 * at: 0, or with a key, the rows of an aborted feed of the partition under
 * that key that the ring already holds (tfos__ring_partition_resume). */
static PyObject *Ring_partition_begin(RingObject *self, PyObject *args)
{
    unsigned long long pid;
    int timeout = -1, rc;
    PyObject *key_obj = Py_None;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "K|iO", &pid, &timeout, &key_obj))
        return NULL;
    unsigned long long key = 0;
    if (key_obj != Py_None) {
        key = PyLong_AsUnsignedLongLongMask(key_obj);
        if (key == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    uint64_t first = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = key_obj == Py_None ? tfos__ring_partition_begin(self->ring, pid, timeout)
                            : tfos__ring_partition_resume(self->ring, pid, key, &first, timeout);
    Py_END_ALLOW_THREADS
    if (rc)
        return ring_raise(self, rc, "beginning a partition");
    return PyLong_FromUnsignedLongLong(first);
}

/* shut(): no producer will write again (the node is stopping). */
static PyObject *Ring_shut(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!ring_ready(self))
        return NULL;
    tfos__ring_shut(self->ring);
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

/* A memoryview of record rec's payload in self's RingMapping. */
static PyObject *record_view(RingObject *self, const tfos__ring_rec *rec)
{
    Py_ssize_t at = (const char *)rec->data - (const char *)tfos__ring_mapping(self->ring);
    return PySequence_GetSlice(self->mapping, at, at + (Py_ssize_t)rec->len);
}

/* read(timeout_ms=-1, max_records=64, views=False) -> list of (tag,
 * partition, data). Releases the records of the previous read if they were
 * held, then waits for at least one record. Copies every record out of
 * shared memory and releases them; with views, records of 64 KiB and more
 * come as read-only memoryviews into the ring instead, held (not written
 * over) until the next read, close or detach. */
static PyObject *Ring_read(RingObject *self, PyObject *args)
{
    int timeout = -1, rc, views = 0;
    Py_ssize_t max = 64;
    if (!ring_ready(self) || !PyArg_ParseTuple(args, "|inp", &timeout, &max, &views))
        return NULL;
    if (max < 1 || max > 4096)
        return PyErr_Format(PyExc_ValueError, "max_records must be in 1..4096");
    if (views && !self->mapping)
        return PyErr_Format(PyExc_ValueError, "views: only a consumer reads records");
    release_held(self);
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
        if (recs[i].tag == TFOS_RING_PARTITION_BEGIN) {
            data = PyLong_FromUnsignedLongLong(recs[i].first);
        } else if (recs[i].len >= POOLED_MIN && views) {
            data = record_view(self, &recs[i]);
        } else if (recs[i].len >= POOLED_MIN) {
            data = tfos__py_buffer_copy(self->module, recs[i].data, recs[i].len);
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
    if (views)
        self->held = 1;
    else
        tfos__ring_release(self->ring);
    return list;
}

static PyObject *Ring_stats(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!ring_ready(self))
        return NULL;
    tfos__ring_stats st;
    tfos__ring_stats_get(self->ring, &st);
    PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:i,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:O,s:O,s:O,s:O}",
                         "capacity",
                         (unsigned long long)st.capacity, "used", (unsigned long long)st.used, "records",
                         (unsigned long long)st.records, "bytes", (unsigned long long)st.bytes, "partitions_begun",
                         (unsigned long long)st.partitions_begun, "partitions_completed",
                         (unsigned long long)st.partitions_completed, "partitions_aborted",
                         (unsigned long long)st.partitions_aborted, "producers", st.producers, "unclean_exits",
                         st.unclean_exits, "consumer_pid", st.consumer_pid, "acked", st.acked, "consumed",
                         (unsigned long long)st.consumed, "progress", (unsigned long long)st.progress,
                         "rows_in", (unsigned long long)st.rows_in, "rows_out", (unsigned long long)st.rows_out,
                         "consumer_wait_ns", (unsigned long long)st.consumer_wait_ns, "producer_wait_ns",
                         (unsigned long long)st.producer_wait_ns,
                         "consumer_waiting", st.consumer_waiting ? Py_True : Py_False, "feed_ended",
                         st.feed_ended ? Py_True : Py_False, "consumer_closed",
                         st.consumer_closed ? Py_True : Py_False, "consumer_terminated",
                         st.consumer_terminated ? Py_True : Py_False);
    /* what a consumer waiting for a re-feed says it waits for */
    PyObject *rows = st.last_aborted_rows == TFOS_RING_ROWS_UNKNOWN
                         ? Py_NewRef(Py_None)
                         : PyLong_FromUnsignedLongLong(st.last_aborted_rows);
    PyObject *more = rows ? Py_BuildValue("{s:i,s:K,s:N,s:I,s:O}", "dead_pid", st.dead_pid, "last_aborted",
                                          (unsigned long long)st.last_aborted, "last_aborted_rows", rows,
                                          "resumed", st.resumed, "shut", st.shut ? Py_True : Py_False)
                          : NULL;
    if (!d || !more || PyDict_Update(d, more) < 0) {
        Py_XDECREF(d);
        Py_XDECREF(more);
        return NULL;
    }
    Py_DECREF(more);
    return d;
}

/* wait_acked(target, timeout_ms=-1): block (GIL released, futex) until the
 * consumer acknowledged `target` partitions; FeedEnded when it terminated
 * its feed, FeedClosed when it closed or died, TimeoutError. */
static PyObject *Ring_wait_acked(RingObject *self, PyObject *args)
{
    unsigned long long target;
    int timeout = -1, rc;
    if (!PyArg_ParseTuple(args, "K|i", &target, &timeout) || !ring_ready(self))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tfos__ring_wait_acked(self->ring, (uint32_t)target, timeout);
    Py_END_ALLOW_THREADS
    if (rc)
        return ring_raise(self, rc, rc == TFOS_ECLOSED ? "the consumer closed or died before acknowledging"
                                    : rc == TFOS_EEND  ? "the consumer terminated its feed"
                                                       : "not acknowledged in time");
    Py_RETURN_NONE;
}

static PyObject *Ring_beat(RingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!ring_ready(self))
        return NULL;
    tfos__ring_beat(self->ring);
    Py_RETURN_NONE;
}

/* count_taken(n): the application took n more rows (the status page's
 * "consumed"). */
static PyObject *Ring_count_taken(RingObject *self, PyObject *args)
{
    unsigned long long n;
    if (!PyArg_ParseTuple(args, "K", &n) || !ring_ready(self))
        return NULL;
    tfos__ring_count_taken(self->ring, n);
    Py_RETURN_NONE;
}

/* reads_columns([on]) -> bool: the consumer's hint to producers (set by
 * the consumer when `on` is given), then what it says. */
static PyObject *Ring_reads_columns(RingObject *self, PyObject *args)
{
    int on = -1;
    if (!PyArg_ParseTuple(args, "|p", &on) || !ring_ready(self))
        return NULL;
    if (on >= 0)
        tfos__ring_set_reads_columns(self->ring, on != 0);
    return PyBool_FromLong(tfos__ring_reads_columns(self->ring));
}

int tfos__py_report_text(PyObject *pairs, char *text, size_t cap)
{
    PyObject *seq = PySequence_Fast(pairs, "report() takes a sequence of (name, number) pairs");
    if (!seq)
        return -1;
    size_t len = 0;
    text[0] = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *value;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "UO", &name, &value))
            goto fail;
        Py_ssize_t nlen;
        const char *nm = PyUnicode_AsUTF8AndSize(name, &nlen);
        if (!nm)
            goto fail;
        double v = PyFloat_AsDouble(value);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "report: %s=%R is not a number", nm, value);
            goto fail;
        }
        int rc = tfos__report_add(text, cap, &len, nm, (size_t)nlen, v);
        if (rc == TFOS_ETOOBIG)
            PyErr_Format(PyExc_ValueError, "report: more than %zu bytes of text", cap - 1);
        else if (rc && i >= TFOS__REPORT_MAX_PAIRS)
            PyErr_Format(PyExc_ValueError, "report: at most %d values", TFOS__REPORT_MAX_PAIRS);
        else if (rc)
            PyErr_Format(PyExc_ValueError, "report: %R is not a metric name (letters, digits, '_' and '.', not "
                         "starting with a digit, at most %d characters)", name, TFOS__REPORT_MAX_NAME);
        if (rc)
            goto fail;
    }
    Py_DECREF(seq);
    return (int)len;
fail:
    Py_DECREF(seq);
    return -1;
}

/* report(pairs): publish the program's progress, a sequence of (name,
 * number) pairs, for the status page. ValueError/TypeError name a bad pair. */
static PyObject *Ring_report(RingObject *self, PyObject *args)
{
    PyObject *pairs;
    if (!PyArg_ParseTuple(args, "O", &pairs) || !ring_ready(self))
        return NULL;
    char text[TFOS_RING_REPORT_MAX + 1];
    int len = tfos__py_report_text(pairs, text, sizeof text);
    if (len < 0)
        return NULL;
    int rc = tfos__ring_report(self->ring, text, (size_t)len);
    if (rc && rc != TFOS_EAGAIN) /* EAGAIN: another thread reports at this moment; its report stands */
        return ring_raise(self, rc, "publishing the report");
    Py_RETURN_NONE;
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
        release_held(self);
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
        release_held(self); /* handed out: not for the next consumer */
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

/* views_region -> (address, length) of the read-only mapping whose
 * memoryviews read(views=True) hands out (a consumer's; None for other
 * roles): what a device runtime registers so that copies from the views go
 * by DMA (tfos.torch.FeedDataset(device=)). The mapping outlives close() as
 * long as views of it do. */
static PyObject *Ring_get_views_region(RingObject *self, void *Py_UNUSED(c))
{
    if (!self->mapping)
        Py_RETURN_NONE;
    Py_buffer v;
    if (PyObject_GetBuffer(self->mapping, &v, PyBUF_SIMPLE))
        return NULL;
    PyObject *out = Py_BuildValue("(Kn)", (unsigned long long)(uintptr_t)v.buf, v.len);
    PyBuffer_Release(&v);
    return out;
}

static void Ring_dealloc(RingObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->ring)
        tfos__ring_close(self->ring);
    Py_XDECREF(self->mapping);
    Py_XDECREF(self->module);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Ring_methods[] = {
    {"write", (PyCFunction)Ring_write, METH_VARARGS,
     "write(tag, data, timeout_ms=-1, rows=-1): one record holding `rows` rows (for the counts, and to resume its "
     "partition after an abort; < 0: not said, the partition is then re-fed whole)."},
    {"write_rows", (PyCFunction)Ring_write_rows, METH_VARARGS,
     "write_rows(tag, rows, timeout_ms=-1) -> bytes written: rows encoded as a columnar batch straight into the "
     "ring. TypeError/ValueError when the rows have no columnar layout (nothing is written)."},
    {"write_columns", (PyCFunction)Ring_write_columns, METH_VARARGS,
     "write_columns(tag, [(name, array), ...], timeout_ms=-1) -> bytes written: whole columns, one memcpy each, "
     "without the GIL."},
    {"partition_begin", (PyCFunction)Ring_partition_begin, METH_VARARGS,
     "partition_begin(partition_id, timeout_ms=-1, key=None) -> first row: hold the ring for one whole partition. "
     "With a key, a re-feed of a partition aborted in this ring under the same key starts where the ring's copy "
     "stops: the rows to skip come back (else 0)."},
    {"shut", (PyCFunction)Ring_shut, METH_NOARGS,
     "shut(): no producer will write again (the node is stopping): the consumer reads what is left, then gets "
     "FeedClosed; producers get FeedClosed."},
    {"partition_end", (PyCFunction)Ring_partition_end, METH_VARARGS, "partition_end(timeout_ms=-1)"},
    {"end_feed", (PyCFunction)Ring_end_feed, METH_VARARGS, "end_feed(timeout_ms=-1): no more records, ever."},
    {"read", (PyCFunction)Ring_read, METH_VARARGS,
     "read(timeout_ms=-1, max_records=64, views=False) -> [(tag, partition, data)]: each record copied out of "
     "the ring (data is bytes, or a pooled FeedBuffer for records of 64 KiB and more; for PARTITION_BEGIN, the int "
     "row it starts at); with views, records of "
     "64 KiB and more are read-only memoryviews into the ring, valid until the next read, close or detach (the "
     "producers may then write over them). Raises FeedEnded at the end."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "stats() -> dict of the ring's counters."},
    {"wait_acked", (PyCFunction)Ring_wait_acked, METH_VARARGS,
     "wait_acked(target, timeout_ms=-1): wait until the consumer has acknowledged target partitions "
     "(stats()['acked'] reaches it); FeedEnded when it terminated its feed, FeedClosed when it closed or died, "
     "TimeoutError."},
    {"count_taken", (PyCFunction)Ring_count_taken, METH_VARARGS,
     "count_taken(n): the application took n more rows (the status page's rows consumed)."},
    {"report", (PyCFunction)Ring_report, METH_VARARGS,
     "report(pairs): publish (name, number) pairs as the program's progress (ctx.report)."},
    {"reads_columns", (PyCFunction)Ring_reads_columns, METH_VARARGS,
     "reads_columns([on]) -> bool: whether the consumer's application reads columns (next_batch_arrays) rather "
     "than rows; a consumer sets it with `on`. A hint for producers holding rows in two forms (feed_pickled)."},
    {"beat", (PyCFunction)Ring_beat, METH_NOARGS,
     "beat(): the application made progress (what the agent's hang watchdog counts; TFNode's ctx.heartbeat())."},
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
    {"views_region", (getter)Ring_get_views_region, NULL,
     "(address, length) of the read-only mapping read(views=True) slices (a consumer's), or None", NULL},
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

PyType_Spec tfos__py_ring_spec = {
    .name = "tfos._tfos.Ring",
    .basicsize = sizeof(RingObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Ring_slots,
};
